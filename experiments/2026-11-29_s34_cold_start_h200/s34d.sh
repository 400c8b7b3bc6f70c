#!/bin/bash
# Session 34, one H200: the asked-rows patch's one-GPU tests again, after session 33's last change to upcoming.
R=/tmp/res; rm -rf $R /tmp/gt_asked; mkdir -p $R; cp -r . /tmp/gt_asked; cd /tmp/gt_asked
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
cp scratch/train_gpt_asked.py train_gpt.py; rm -rf tests; cp -r scratch/tests_asked tests
sha256sum train_gpt.py >> $R/progress
echo "=== tests $(date +%T)" >> $R/progress
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tasked TRITON_CACHE_DIR=/tmp/tri_tasked timeout 420 python3 -m pytest -q \
  -p no:cacheprovider tests/test_gpu.py -k "prefetch_loader or graphed or compiled_row_adam or deferred_loss or row_lookup" \
  > $R/tests_asked.txt 2>&1
tail -3 $R/tests_asked.txt >> $R/progress
echo "=== s34d done $(date +%T)" >> $R/progress
