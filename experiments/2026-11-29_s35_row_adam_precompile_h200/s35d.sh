#!/bin/bash
# Session 35, one H200, call 4: RowAdam's beta2 and eps as tensors too. Its GPU tests of the optimizers' compiled
# updates, then one cold start under startup_profile.py: do the training process's RowAdam and Adam frames still
# load the helper's graphs?
R=$OUT; rm -rf /tmp/gp /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gp; cd /tmp/gp
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/bytecode; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; git log --oneline -1 >> $R/progress
sha256sum train_gpt.py >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
echo "=== tests $(date +%T)" >> $R/progress
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t TRITON_CACHE_DIR=/tmp/tri_t timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_gpu.py -k "adam" > $R/tests.txt 2>&1; tail -1 $R/tests.txt >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
echo "=== cold start $(date +%T)" >> $R/progress
rm -rf logs; timeout 200 python3 benchmarks/startup_profile.py "${FLAGS[@]}" --compile_cache /tmp/cc_p < /dev/null > $R/p.out 2>&1
grep -h "^startup\|^precompile .*: ended\|^warning\|^final\|^frames at step [0-9]* \|^counters aot\|Traceback" $R/p.out | cut -c1-300 >> $R/progress
grep "adam_update\|row_adam" $R/p.out | sed 's/^/  /' >> $R/progress
echo "=== s35d done $(date +%T)" >> $R/progress
