#!/bin/bash
# Session 24, call 1 (2 GPUs of one host): GPU 0 runs next_s24.sh's start-up profile (cold, then warm under
# cProfile); GPU 1 runs the whole GPU test suite beside it (the warm profile's host times may be a little slower
# for it: noted).
set -u
R=${OUT:-/tmp/res}; mkdir -p $R
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
nvidia-smi --query-gpu=name --format=csv,noheader > $R/progress
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/progress
(CUDA_VISIBLE_DEVICES=1 timeout 420 python3 -m pytest -x -q tests/test_gpu.py > $R/gpu_tests.txt 2>&1; echo "=== tests rc $? $(date +%T)" >> $R/progress) &
F=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --val_tokens 1835008
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --compile_cache /tmp/cc_s24
   --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
rm -rf /tmp/cc_s24
for run in cold warm; do
  extra=(); [ $run = warm ] && extra=(--cprofile)
  CUDA_VISIBLE_DEVICES=0 timeout 250 python3 benchmarks/startup_profile.py "${extra[@]}" "${F[@]}" < /dev/null \
    > $R/$run.txt 2>&1
  echo "=== $run rc $? $(date +%T)" >> $R/progress
  grep -h "^startup" logs/*.txt | tail -1 | cut -f1 >> $R/progress
done
wait
echo "=== all done $(date +%T)" >> $R/progress
cat $R/progress
