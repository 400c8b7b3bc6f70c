#!/bin/bash
# Next session (24), written in session 23 and NOT RUN: where a warm start goes (issue 35's bar: 20 s warm; 29-32 s
# on 2 x H100 in session 23, of which warm-up stage 0 about 10 s and stages 1-2 about 4-5.6 s each).
# One GPU (GPU 0 of whatever machine is held; about 4 minutes): benchmarks/startup_profile.py twice with one
# --compile_cache, empty first (cold), then warm under cProfile; its output names Dynamo's compile phases, the
# autotuned kernels and the caches' hits, and cProfile where the host's seconds go.
# Before: .proxy/ holds ../shared/proxy-data/*.xz; cp this script into scratch/; carry [".proxy", "scratch"].
# Launch: bash scratch/next_s24.sh (output under $OUT).
set -u
R=${OUT:-/tmp/res}; mkdir -p $R
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
nvidia-smi --query-gpu=name --format=csv,noheader > $R/progress
F=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --val_tokens 1835008
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --compile_cache /tmp/cc_s24
   --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
rm -rf /tmp/cc_s24
for run in cold warm; do
  extra=(); [ $run = warm ] && extra=(--cprofile)
  CUDA_VISIBLE_DEVICES=0 timeout 280 python3 benchmarks/startup_profile.py "${extra[@]}" "${F[@]}" < /dev/null \
    > $R/$run.txt 2>&1
  echo "=== $run rc $?" >> $R/progress
  grep -h "^startup" logs/*.txt | tail -1 | cut -f1 >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
cat $R/progress
