#!/bin/bash
# Session 35, one H200, call 1: a cold start of the RowAdam-precompile patch under startup_profile.py with
# AOTAutograd's cache keys logged in every process (aot_keys.py reads them): does the training process hit the
# helper's RowAdam update now, and why does it miss the helper's Adam updates?
R=$OUT; rm -rf /tmp/gt /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; git log --oneline -1 >> $R/progress
git diff --stat >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
python3 -c "import torch, triton, torch._inductor.compile_fx, torch._dynamo"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
echo "=== keys $(date +%T)" >> $R/progress
rm -rf logs
TORCH_LOGS="+torch._functorch._aot_autograd.autograd_cache" timeout 300 python3 benchmarks/startup_profile.py \
  "${FLAGS[@]}" --compile_cache /tmp/cc_k < /dev/null > $R/k.out 2> /tmp/k.err &
echo "training pid $!" >> $R/progress; wait
grep -h "^startup\|^compile:\|^precompile .*: ended\|^warning\|^final\|^frames \|^counters\|Traceback" $R/k.out | cut -c1-300 >> $R/progress
grep "adam_update\|row_adam" $R/k.out >> $R/progress
python3 experiments/2026-11-29_s35_row_adam_precompile_h200/aot_keys.py /tmp/k.err > $R/keys.txt
grep "^lookups" $R/keys.txt >> $R/progress; grep -c "" /tmp/k.err >> $R/progress
grep -v "autograd_cache.py" /tmp/k.err | tail -30 > $R/k_err_tail.txt
echo "=== s35a done $(date +%T)" >> $R/progress
