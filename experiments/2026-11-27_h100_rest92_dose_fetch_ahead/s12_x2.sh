#!/bin/bash
# Session 12, 2 x H100 on one host, in a copy outside the synced tree (start with setsid; poll with scratch/collect.sh).
# ahead = the working tree's train_gpt.py (fetch-ahead: RowAdam's update and the next step's n-gram rows on the
# table's own stream, beside NorMuon's step); main = f68c382.
#   1. GPU tests of the working tree: -k "ngram or graphed or prefetch or stream or compiled_model" (the NCCL
#      sharded table on 2 GPUs included);
#   2. the A/B main / ahead at 185 + 3, seeds 0 and 1, one GPU a run, two runs side by side: GPU 0 runs main s0
#      then ahead s1, GPU 1 ahead s0 then main s1 (each arm once on each GPU);
#   3. torchrun on both GPUs at 185 + 3, seed 0: ahead, then main (issue 34's 2-GPU check; issue 35's scaling);
#   4. step_profile of ahead on both GPUs at --batch_tokens 98304 (the 8-GPU per-rank shapes).
# Rule for ahead against main (fixed before the runs): taken if its mean time is not above main's by more than
# twice the larger seed spread and its mean loss is not above main's by more than the larger loss spread (it
# moves work, not maths: the same rows, fetched earlier).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
cp train_gpt.py scratch/train_gpt_ahead.py
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "ngram or graphed or prefetch or stream or compiled_model" ) > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
one() {  # arm seed gpu
  echo "=== $1 seed $2 gpu $3 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$3 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$1 TRITON_CACHE_DIR=/tmp/tri_$1 \
    python3 benchmarks/proxy_record.py --runs 1 --seed $2 --out $R/${1}_s$2 --script scratch/train_gpt_$1.py \
      --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc_$1 $T < /dev/null > $R/${1}_s$2.out 2>&1
  echo "$1 s$2 gpu $3: $(grep -h '^final val_loss' $R/${1}_s$2/*.txt)" >> $R/progress
}
( one main 0 0; one ahead 1 0 ) &
( one ahead 0 1; one main 1 1 ) &
wait
echo "=== A/B done $(date +%T)" >> $R/progress
for arm in ahead main; do
  echo "=== $arm on 2 GPUs $(date +%T)" >> $R/progress
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 300 \
    python3 benchmarks/proxy_record.py --runs 1 --seed 0 --gpus 2 --out $R/${arm}_x2_s0 --script scratch/train_gpt_$arm.py \
      --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc_$arm $T < /dev/null > $R/${arm}_x2_s0.out 2>&1
  echo "$arm x2 s0: $(grep -h '^final val_loss\|^startup' $R/${arm}_x2_s0/*.txt | tr '\n' ' ')" >> $R/progress
done
echo "=== profile $(date +%T)" >> $R/progress
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_ahead TRITON_CACHE_DIR=/tmp/tri_ahead timeout 240 \
  torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py --train_files "data/proxy/proxy_train_*.bin" \
    --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files --batch_tokens 98304 $T > $R/profile_ahead.out 2>&1
echo "=== all done $(date +%T)" >> $R/progress
