#!/bin/bash
# Next session (30), written in session 29 and NOT RUN: issue 35's 2-GPU bars measured on main with Dynamo's cache
# (merged in session 29, measured on one H200 only), on nvidia-h100-x2 (nvidia-h200-x2 if no H100 pair is lent;
# name the device). Nothing here decides a merge: it measures.
# Before: mkdir -p scratch; cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
#   Corpus: .proxyB/ (proxy_train_000003.bin.xz and proxy_val_000000.bin.xz from ../shared/proxy-data/), carry
#   [".proxyB", "scratch"].
# Launch: mkdir -p .proxy; cp .proxyB/* .proxy/; cp scratch/next_s30.sh /tmp/s30.sh;
#   setsid nohup bash /tmp/s30.sh > /tmp/s30.log 2>&1 < /dev/null & sleep 2; bash scratch/collect.sh 560 "s30 done" /tmp/s30.log
#   then collect again at once, as often as it takes (the machine idles back 30 s after a call).
# 1. start-up on both GPUs (torchrun, 30 + 1 proxy steps): cold, warm, warm on one compile cache. Bars: under 60 s
#    cold, under 20 s warm. The warm starts' "compile:" line (rank 0's; a rank that traced would hold up rank 0's
#    warm-up at the first collective) must say 0 graphs traced.
# 2. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, twice: busy >= 97 % and exposed
#    communication < 1 % in every stage are the bars (session 29 on one H200, no communication: stage 0 busy 95.4 %).
# 3. the whole GPU suite with both GPUs visible (the NCCL tests; Dynamo's stamp, merged in session 29, never ran on a GPU).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/c_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
for run in cold warm1 warm2; do
  echo "=== start-up on 2 GPUs: $run $(date +%T)" >> $R/progress
  rm -rf logs
  timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py --compile_cache /tmp/c_x2 "${FLAGS[@]}" \
    --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/x2_$run.out 2>&1
  grep -h "^startup\|^compile\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
  grep -h "Traceback\|Error\|^W[0-9]\|\]:W[0-9]" $R/x2_$run.out | sort | uniq -c | head -5 >> $R/progress
  cp logs/*.txt $R/x2_$run.log 2>/dev/null
done
for k in 1 2; do
  echo "=== step_profile at 98304 ($k) $(date +%T)" >> $R/progress
  timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 \
    --trace_stage 0 < /dev/null > $R/profile_$k.out 2>&1
  grep -A8 "^| stage | windows" $R/profile_$k.out | cut -d'|' -f2,4,5,6,11,12 >> $R/progress
  mkdir -p $R/trace_$k; cp traces/*.json.gz $R/trace_$k/ 2>/dev/null; rm -rf traces
done
echo "=== the whole GPU suite $(date +%T)" >> $R/progress
timeout 560 python3 -m pytest -q tests/test_gpu.py > $R/test_gpu_all.txt 2>&1
tail -3 $R/test_gpu_all.txt >> $R/progress
echo "=== s30 done $(date +%T)" >> $R/progress
