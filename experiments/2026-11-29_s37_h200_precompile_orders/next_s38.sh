#!/bin/bash
# Next session (38), written in session 37 and NOT RUN. Needs two GPUs (nvidia-h200-x2, or 2 x H100); on one it
# stops at once. About 7 minutes of device time. Name the device in the note. Two questions about today's main:
# 1. The README's table: step_profile at 98304 on both GPUs (the 8-GPU per-rank shape), stages 0-5, one profile,
#    stage 0 traced. Then exposed_intervals.py (here) on both ranks' stage-0 traces: which NCCL kernels are still
#    exposed in stage 0 (1.3-1.4 % of its step in session 37; the bar is < 1 %), queued by which optimizer half,
#    where in the step, and which kernel waited for them. Measurement only: no rule, nothing merged from it.
# 2. The start-up bar (< 60 s cold, < 20 s warm on 2 GPUs): main's cold start on both GPUs (30 + 1 steps, an empty
#    compile cache; session 33's code took 89.0 s), then a warm one on its cache. "s38 done" at the end.
#   call, kind nvidia-h200-x2, carry [".proxyA"]:
#     setsid nohup bash experiments/2026-11-29_s37_h200_precompile_orders/next_s38.sh > /tmp/s38.log 2>&1
#     < /dev/null & sleep 2; bash experiments/2026-11-27_h100x2_stack_ab_records/collect.sh 560 "s38 done" /tmp/s38.log
#   then the same collect.sh line with 580 AT ONCE if it has not ended.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/ind_s38 /tmp/tri_s38 /tmp/cc_s38; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0,1
E=experiments/2026-11-29_s37_h200_precompile_orders
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(nvidia-smi -L | wc -l)" != 2 ]; then echo "=== needs two GPUs; s38 done" >> $R/progress; exit 1; fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
sha256sum train_gpt.py >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== step_profile at 98304 on 2 GPUs, stages 0-5 $(date +%T)" >> $R/progress
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s38 TRITON_CACHE_DIR=/tmp/tri_s38 timeout 420 torchrun --standalone --nproc_per_node 2 \
  benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 --stages 0 1 2 3 4 5 --trace_stage 0 \
  < /dev/null > $R/profile.out 2>&1
grep -A9 "^| stage | windows" $R/profile.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
grep -h "Traceback\|Error" $R/profile.out | head -3 >> $R/progress
for r in 0 1; do
  python3 $E/exposed_intervals.py traces/step_profile_rank$r.json.gz > $R/exposed_rank$r.txt 2>&1
  head -14 $R/exposed_rank$r.txt | cut -c1-170 >> $R/progress
done
echo "=== cold start on 2 GPUs $(date +%T)" >> $R/progress
for run in cold warm; do
  rm -rf logs
  timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py "${FLAGS[@]}" --compile_cache /tmp/cc_s38 \
    --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/$run.out 2>&1
  echo "--- $run" >> $R/progress
  grep -h "^startup\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 | cut -c1-300 >> $R/progress
  grep -h "Traceback" $R/$run.out | head -2 >> $R/progress
done
echo "=== s38 done $(date +%T)" >> $R/progress
