#!/bin/bash
# Session 34, one H200: stage 0's kernels at the 8-GPU per-rank shape (one micro-batch of 49152 a step), traced.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== step_profile 49152 stages 0 1 $(date +%T)" >> $R/progress
timeout 400 python3 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 49152 --stages 0 1 --trace_stage 0 \
  --compile_cache /tmp/cc_p < /dev/null > $R/p.out 2>&1
grep -A4 "^| stage | windows" $R/p.out | cut -d'|' -f2,4,5,6,7,8,9,10 >> $R/progress
grep -h "Traceback\|Error" $R/p.out | head -3 >> $R/progress
cp traces/*.json.gz $R/ 2>/dev/null
python3 scratch/census.py traces/step_profile_rank0.json.gz > $R/census.txt 2>&1; head -30 $R/census.txt >> $R/progress
echo "=== s34c done $(date +%T)" >> $R/progress
