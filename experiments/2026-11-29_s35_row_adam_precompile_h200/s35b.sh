#!/bin/bash
# Session 35, one H200, call 2: cold starts of main (HEAD) and of the working tree (RowAdam precompiled by the
# helpers, Adam's betas and eps as tensors), alternated, two each, under startup_profile.py; then the patch's
# GPU tests of the optimizers' compiled updates.
R=$OUT; rm -rf /tmp/gp /tmp/gm /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gp; cp -r . /tmp/gm
git show HEAD:train_gpt.py > /tmp/gm/train_gpt.py; (cd /tmp/gm && git checkout -q HEAD -- tests)
export PYTHONUNBUFFERED=1; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; git log --oneline -1 >> $R/progress
sha256sum /tmp/gm/train_gpt.py /tmp/gp/train_gpt.py >> $R/progress
for t in /tmp/gm /tmp/gp; do
  (cd $t && python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))")
done
PYTHONPYCACHEPREFIX=/tmp/bytecode python3 -c "import torch, triton, torch._inductor.compile_fx, torch._dynamo"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
start () {  # name, tree
  echo "=== $1 $(date +%T)" >> $R/progress
  (cd $2 && rm -rf logs && PYTHONPYCACHEPREFIX=/tmp/bytecode timeout 200 python3 benchmarks/startup_profile.py \
    "${FLAGS[@]}" --compile_cache /tmp/cc_$1 < /dev/null > $R/$1.out 2>&1)
  grep -h "^startup\|^precompile .*: ended\|^warning\|^final\|^frames at step [01] \|^counters aot\|Traceback" $R/$1.out | cut -c1-300 >> $R/progress
  grep "adam_update\|row_adam" $R/$1.out | sed 's/^/  /' >> $R/progress
}
start m1 /tmp/gm; start p1 /tmp/gp; start m2 /tmp/gm; start p2 /tmp/gp
echo "=== tests $(date +%T)" >> $R/progress
(cd /tmp/gp && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t TRITON_CACHE_DIR=/tmp/tri_t timeout 150 python3 -m pytest -q \
  -p no:cacheprovider tests/test_gpu.py -k "adam_update" > $R/tests.txt 2>&1; tail -2 $R/tests.txt >> $R/progress)
echo "=== s35b done $(date +%T)" >> $R/progress
