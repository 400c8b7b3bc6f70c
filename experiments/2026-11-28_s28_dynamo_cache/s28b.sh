#!/bin/bash
# Session 28, call 2 (one H100): branch s28-dynamo-cache (Dynamo's cache in train_gpt.py, rebuilt this session:
# session 27's branch s27-dynamo-cache was not in this checkout) against main. Session 27's PART=dcache (the probe)
# ran first in call 1 and gave no verdict: its two "save" processes, run at once on one GPU, both failed with
# CUBLAS_STATUS_ALLOCATION_FAILED (out of memory) in their first backward pass. The branch's own GPU test and
# this A/B answer its question directly (a warm start that traces nothing), so the A/B runs without it.
#   1. the branch's GPU tests of compilation: the new one (two smoke runs on one compile cache: the second traces
#      no graph and loads from Dynamo's cache), the compiled model against eager, the graphed micro-steps;
#   2. main cold, branch cold (each its own empty compile cache), then main warm, branch warm, twice.
# Rule, fixed before the runs (next_s28.sh's dwarm): the branch is merged if its GPU tests pass, both its warm
# starts are at least 5 s shorter than main's, its cold start at most 5 s longer, its final val losses within
# 0.002 of main's, and no traceback or warning line in its output.
# Needs scratch/train_gpt_main.py (git show main:train_gpt.py), scratch/counters/sitecustomize.py,
# scratch/counters_table.py, scratch/collect.sh; the corpus .proxyB/ alone (start-up only; --repeat_train_files).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/c_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
echo "=== the branch's GPU tests $(date +%T)" >> $R/progress
timeout 420 python3 -m pytest -q tests/test_gpu.py -k "dynamos_cache or compiled_model or graphed" > $R/test_gpu.txt 2>&1
tail -2 $R/test_gpu.txt >> $R/progress
cp train_gpt.py scratch/train_gpt_dcache.py
export PYTHONPATH=/tmp/gt/scratch/counters
start () {  # name, script, compile cache; the helpers' counters go to COUNTERS_OUT
  echo "=== $1 $(date +%T)" >> $R/progress
  rm -rf logs
  export COUNTERS_OUT=$R/counters_$1.jsonl
  timeout 300 python3 $2 --compile_cache $3 "${FLAGS[@]}" < /dev/null > $R/$1.out 2>&1
  grep -h "^startup\|^compile\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
  grep -h "Traceback\|Error\|Warning\|^W[0-9]" $R/$1.out | sort | uniq -c | head -5 >> $R/progress
  cp logs/*.txt $R/$1.log 2>/dev/null
}
start main_cold scratch/train_gpt_main.py /tmp/c_main
start dcache_cold scratch/train_gpt_dcache.py /tmp/c_dcache
for round in 1 2; do
  start main_warm$round scratch/train_gpt_main.py /tmp/c_main
  start dcache_warm$round scratch/train_gpt_dcache.py /tmp/c_dcache
done
echo "=== s28 done $(date +%T)" >> $R/progress
