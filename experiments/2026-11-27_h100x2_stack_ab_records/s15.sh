#!/bin/bash
# Session 15, one call on 2 x H100 of one host (setsid from a copy outside the synced tree; poll with collect.sh,
# log /tmp/s15.log). Tree on the device: s15-stack. Arms: main = 47b95f4's train_gpt.py, stack = s15-stack's (the
# five patches of experiments/2026-11-27_h100x2_group_events_row_adam). Rules, fixed before the runs:
#  1. the stack's GPU tests (gradient_events, row_adam, sharded_ngram, graphed) must pass;
#  2. 2 GPUs, 185 + 3, seed 0 then seed 1, main then stack at each seed, each arm its own caches, empty at first:
#     seed 0's runs are the arms' cold starts, seed 1's their warm starts (compared without the imports phase).
#     The stack is kept if its tests passed, its mean time is below main's by more than twice the larger seed
#     spread of the two arms, and its mean loss within 5 mn of main's. (step_ab of zero_foreach is dropped for
#     device time: the stack is judged as a whole.)
#  3. the records of the kept arm, on the same host: one H100 (GPU 0 alone; a first untimed 30 + 1-step run fills
#     its one-GPU graphs), then 2 GPUs (the A/B filled the cache). 185 + 3 steps, 3 runs each, seeds 0, 1, 2, no
#     more runs whatever the outcome. The 2-GPU record passes if records/summarize.py accepts it (target 1.9004)
#     and its mean training time is at most 0.52 x the one-H100 record's.
#  4. step_profile of the kept arm on 2 GPUs at --batch_tokens 98304 (busy and exposed communication per stage).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "gradient_events or row_adam or sharded_ngram or graphed" ) \
  > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
for seed in 0 1; do
  for arm in main stack; do
    echo "=== $arm on 2 GPUs, seed $seed $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 400 python3 benchmarks/proxy_record.py \
      --runs 1 --seed $seed --gpus 2 --out $R/${arm}_x2_s$seed --script scratch/train_gpt_$arm.py --scheduled_steps 185 \
      --extension_steps 3 --compile_cache /tmp/cc_$arm $T < /dev/null > $R/${arm}_x2_s$seed.out 2>&1
    grep -h '^startup\|^final val_loss' $R/${arm}_x2_s$seed/*.txt | cut -f1 >> $R/progress
  done
done
ARM=$(python3 scratch/decide.py $R $R/test_gpu.out 2>> $R/progress | tail -1)
echo "=== kept: $ARM $(date +%T)" >> $R/progress
for gpus in 1 2; do
  export CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1)
  C="--script scratch/train_gpt_$ARM.py --compile_cache /tmp/cc_$ARM $T"
  if [ $gpus = 1 ]; then
    echo "=== $ARM on one GPU: fill run $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$ARM TRITON_CACHE_DIR=/tmp/tri_$ARM timeout 300 python3 benchmarks/proxy_record.py \
      --runs 1 --out $R/fill_1 $C --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/fill_1.out 2>&1
  fi
  echo "=== $ARM record on $gpus GPU(s), 3 runs $(date +%T)" >> $R/progress
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$ARM TRITON_CACHE_DIR=/tmp/tri_$ARM timeout 560 python3 benchmarks/proxy_record.py \
    --runs 3 --gpus $gpus --out $R/record_$gpus $C --scheduled_steps 185 --extension_steps 3 < /dev/null > $R/record_$gpus.out 2>&1
  grep -h "^final val_loss" $R/record_$gpus/*.txt >> $R/progress
  python3 records/summarize.py $R/record_$gpus --target 1.9004 2>&1 | tail -4 >> $R/progress
done
unset CUDA_VISIBLE_DEVICES
echo "=== step_profile $ARM 98304 $(date +%T)" >> $R/progress
cp scratch/train_gpt_$ARM.py train_gpt.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$ARM TRITON_CACHE_DIR=/tmp/tri_$ARM timeout 300 torchrun --standalone \
  --nproc_per_node 2 benchmarks/step_profile.py --train_files "data/proxy/proxy_train_*.bin" \
  --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files --batch_tokens 98304 $T < /dev/null \
  > $R/profile_${ARM}_98304.out 2>&1
mkdir -p $R/traces; cp traces/*.json.gz $R/traces/ 2>> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
