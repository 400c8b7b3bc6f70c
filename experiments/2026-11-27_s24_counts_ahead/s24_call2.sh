#!/bin/bash
# Session 24, call 2 (2 GPUs of one host): the whole GPU test suite (both GPUs visible, for the NCCL test) beside a
# cold start-up profile on GPU 0; once both end, the warm start-up profile alone (per-frame compile times).
# startup_profile.py runs with the bytecode cache train_gpt.py gives itself as a program.
set -u
R=${OUT:-/tmp/res}; mkdir -p $R
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
nvidia-smi --query-gpu=name --format=csv,noheader > $R/progress
(timeout 470 python3 -m pytest -q --durations=0 tests/test_gpu.py > $R/gpu_tests.txt 2>&1; echo "=== tests rc $? $(date +%T)" >> $R/progress) &
tests=$!
F=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --val_tokens 1835008
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --compile_cache /tmp/cc_s24
   --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
rm -rf /tmp/cc_s24
export PYTHONPYCACHEPREFIX=$PWD/.bytecode; unset PYTHONDONTWRITEBYTECODE
for run in cold warm; do
  [ $run = warm ] && wait $tests
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/startup_profile.py "${F[@]}" < /dev/null > $R/$run.txt 2>&1
  echo "=== $run rc $? $(date +%T)" >> $R/progress
  grep -h "^startup" logs/*.txt | tail -1 | cut -f1 >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
cat $R/progress
