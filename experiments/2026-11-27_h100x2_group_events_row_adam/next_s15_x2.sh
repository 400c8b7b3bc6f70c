#!/bin/bash
# Next session (15), 2 x H100 on one host, written in session 14 and not run. It runs from a copy outside the synced
# tree: start it with setsid and poll with scratch/collect.sh (this folder's; log /tmp/s14.log). Before the call:
#   git show main:train_gpt.py > scratch/train_gpt_main.py; git show s15-stack:train_gpt.py > scratch/train_gpt_stack.py
#   (s15-stack = main + s15_stack.patch, the five patches of this folder as one series: git am it onto main if the
#   branch is gone);
#   copy ../shared/proxy-data/*.xz into .proxy/;
#   carry [".proxy", "scratch"]. The tree on the device should be s15-stack (its tests and benchmarks).
# Rules, fixed before the runs:
#   - the stack's GPU tests must pass (the sharded table over NCCL now sends bf16 gradients back);
#   - start-up: each arm cold (its own empty caches) and then warm, on 2 GPUs, 30 + 1 steps; row_adam_helper and
#     stage0_helper are kept if the stack's cold start is not longer than main's, and its warm start not longer by
#     more than 1 s (stage0_helper is kept only if stage 0's warm-up in the cold start is shorter than main's); the
#     totals are compared without their imports phase, which the host's first process pays from a cold disk;
#   - step_ab at the 8-GPU per-rank shape (one 48K micro-batch a step, GPU 0), main, stack, main, stack: zero_foreach
#     is kept if both of the stack's run totals are below both of main's;
#   - 2 GPUs, 185 + 3, seeds 0 and 1, main then stack at each seed: the stack is kept if its mean time is below
#     main's by more than twice the larger seed spread and its loss within 5 mn of main's mean (normuon_order,
#     ngram_group and the bf16 exchange change nothing on one GPU; zero_foreach is judged by step_ab above);
#   - step_profile of the stack at --batch_tokens 98304 (the README's table; exposed communication, busy);
#   - then startup_profile.py twice on GPU 0 alone (the second warm): Dynamo's phases of a warm start.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "gradient_events or row_adam or sharded_ngram or graphed" ) \
  > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
for arm in main stack; do
  for start in cold warm; do
    echo "=== $arm $start start on 2 GPUs $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 300 python3 benchmarks/proxy_record.py \
      --runs 1 --seed 0 --gpus 2 --out $R/${arm}_${start} --script scratch/train_gpt_$arm.py --scheduled_steps 30 \
      --extension_steps 1 --val_loss_every 0 --compile_cache /tmp/cc_$arm $T < /dev/null > $R/${arm}_${start}.out 2>&1
    echo "$(grep -h '^startup' $R/${arm}_${start}/*.txt)" >> $R/progress
  done
done
echo "=== step_ab $(date +%T)" >> $R/progress
P=$PWD
CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_stack TRITON_CACHE_DIR=/tmp/tri_stack timeout 500 \
  python3 benchmarks/step_ab.py --revs scratch/train_gpt_main.py scratch/train_gpt_stack.py scratch/train_gpt_main.py \
  scratch/train_gpt_stack.py --batch_tokens 49152 --train_files "$P/data/proxy/proxy_train_*.bin" \
  --val_files "$P/data/proxy/proxy_val_*.bin" --repeat_train_files --prefix_table $P/data/gpt2_prefix_tokens.npy \
  < /dev/null > $R/step_ab.out 2>&1
tail -6 $R/step_ab.out >> $R/progress
for seed in 0 1; do
  for arm in main stack; do
    echo "=== $arm on 2 GPUs, seed $seed $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 300 python3 benchmarks/proxy_record.py \
      --runs 1 --seed $seed --gpus 2 --out $R/${arm}_x2_s$seed --script scratch/train_gpt_$arm.py --scheduled_steps 185 \
      --extension_steps 3 --compile_cache /tmp/cc_$arm $T < /dev/null > $R/${arm}_x2_s$seed.out 2>&1
    echo "$arm x2 s$seed: $(grep -h '^final val_loss\|^peak_memory' $R/${arm}_x2_s$seed/*.txt | tr '\n' ' ')" >> $R/progress
  done
done
echo "=== step_profile stack 98304 $(date +%T)" >> $R/progress
cp scratch/train_gpt_stack.py train_gpt.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_stack TRITON_CACHE_DIR=/tmp/tri_stack timeout 300 torchrun --standalone \
  --nproc_per_node 2 benchmarks/step_profile.py --train_files "data/proxy/proxy_train_*.bin" \
  --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files --batch_tokens 98304 $T < /dev/null \
  > $R/profile_stack_98304.out 2>&1
mkdir -p $R/traces; cp traces/*.json.gz $R/traces/  # no set -f in this script: the pattern expands
for run in first warm; do  # where a warm start's 26-31 s go; the first run adds the one-GPU graphs to the cache
  echo "=== startup_profile $run, stack, GPU 0 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_stack TRITON_CACHE_DIR=/tmp/tri_stack timeout 200 \
    python3 benchmarks/startup_profile.py --train_files "data/proxy/proxy_train_*.bin" \
    --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files $T --val_tokens 1835008 --val_loss_every 0 \
    --scheduled_steps 30 --extension_steps 1 --compile_cache /tmp/cc_stack < /dev/null > $R/startup_$run.out 2>&1
  grep -h "^startup" $R/startup_$run.out | cut -f1 >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
