#!/bin/bash
# Session 10, one H100, in copies outside the synced tree. Arms: main, and the branches in scratch/tree_<branch>
# with their train_gpt.py in scratch/train_gpt_<arm>.py (fp8-post-only = post8: the FP8 MLP keeps post in e4m3
# alone; zero-grads = zero: the gradients zeroed in one multi-tensor launch per dtype; fp8-qkv-forward = qkv8:
# attention's q, k, v projection forward in FP8).
#   1. GPU tests of each branch tree, the ones its change touches (-k per branch below);
#   2. mlp_kernel of fp8-post-only (its FP8 forward should fall from 0.384 ms towards cuBLAS's 0.223);
#   3. step_ab main / post8 / zero / qkv8 at the proxy's batch;
#   4. waits for /tmp/s10.spec (lines "name cache script flags": main and the arms step_ab found faster), and runs
#      the A/B at 185 + 3, seeds 0 and 1, alternating. Each arm is then decided by the rule below; the record
#      runs in a later call (185 + 3, 3 runs).
# Rule (fixed before the runs): an arm is taken if its mean time beats main's by more than twice the larger seed
# spread of the two, and its mean loss is not above main's by more than the larger loss spread.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/g_* /tmp/s10.spec; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
for b in fp8-post-only zero-grads fp8-qkv-forward; do
  case $b in fp8-post-only) k="relu or mlp";; zero-grads) k="graphed or normuon or adam";; *) k="compiled_model or graphed";; esac
  cp -r /tmp/gt /tmp/g_$b; cp -r scratch/tree_$b/* /tmp/g_$b/
  ( cd /tmp/g_$b; time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "$k" ) > $R/test_gpu_$b.out 2>&1
  echo "=== tests $b done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu_$b.out | tail -1)" >> $R/progress
done
( cd /tmp/g_fp8-post-only; python3 benchmarks/mlp_kernel.py --tiles 128,256,64,8,3,8 \
    --fp8_tiles 128,256,128,8,3,8 128,256,128,8,4,8 128,128,128,8,4,8 --reps 10 ) > $R/mlp_kernel_post8.out 2>&1
echo "=== mlp_kernel done $(date +%T)" >> $R/progress
python3 benchmarks/step_ab.py --revs scratch/train_gpt_main.py scratch/train_gpt_post8.py scratch/train_gpt_zero.py \
  scratch/train_gpt_qkv8.py \
  --repeat_train_files --train_files "data/proxy/proxy_train_*.bin" $T > $R/step_ab_proxy.out 2>&1
echo "=== step_ab done $(date +%T)" >> $R/progress
for i in $(seq 120); do [ -f /tmp/s10.spec ] && break; sleep 5; done
[ -f /tmp/s10.spec ] || exit 0
cp /tmp/s10.spec scratch/s10.spec
bash scratch/ab.sh scratch/s10.spec 185 3 0 1
echo "=== all done $(date +%T)" >> $R/progress
