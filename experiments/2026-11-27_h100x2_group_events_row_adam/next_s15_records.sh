#!/bin/bash
# Next session (15), second call, written in session 14 and not run: issue 35's 2-GPU proxy record, with the one-H100
# record of the same code on the same host, in one call on 2 x H100 (setsid; poll with collect.sh). Usage:
#   bash scratch/next_s15_records.sh ARM      (scratch/train_gpt_ARM.py: the code next_s15_x2.sh kept, main or stack)
# Rules, fixed before the runs:
#   - both records: 185 + 3 steps, 3 runs each, seeds 0, 1 and 2, no more runs whatever the outcome;
#   - one H100 (GPU 0 alone) first, then both GPUs through torchrun (--gpus 2), each on a warm compile cache
#     (a first, untimed 30 + 1-step run of each fills it);
#   - the 2-GPU record passes if records/summarize.py accepts it (mean final val loss below 1.9004, p < 0.01) and
#     its mean training time is at most 0.52 x the one-H100 record's; either way both are reported.
ARM=$1
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
T="--script scratch/train_gpt_$ARM.py --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
   --compile_cache /tmp/cc"
for gpus in 1 2; do
  export CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1)
  echo "=== $ARM on $gpus GPU(s): warm-up run $(date +%T)" >> $R/progress
  timeout 300 python3 benchmarks/proxy_record.py --runs 1 --gpus $gpus --out $R/fill_$gpus $T --scheduled_steps 30 \
    --extension_steps 1 --val_loss_every 0 < /dev/null > $R/fill_$gpus.out 2>&1
  echo "=== $ARM on $gpus GPU(s): record, 3 runs $(date +%T)" >> $R/progress
  timeout 560 python3 benchmarks/proxy_record.py --runs 3 --gpus $gpus --out $R/record_$gpus $T --scheduled_steps 185 \
    --extension_steps 3 < /dev/null > $R/record_$gpus.out 2>&1
  grep -h "final val_loss" $R/record_$gpus/*.txt >> $R/progress
  python3 records/summarize.py $R/record_$gpus --target 1.9004 | tail -4 >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
