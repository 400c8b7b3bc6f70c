#!/bin/bash
# Session 13, 2 x H100: step_profile of main (acf0806) at --batch_tokens 98304, again: in s13_x2.sh main's copy of
# the tree had the patched benchmarks/loader_overlap.py, which asks the loader for upcoming(), and failed.
R=/tmp/res; mkdir -p $R; rm -rf /tmp/gt_main; cp -r . /tmp/gt_main; cd /tmp/gt_main
rm -rf scratch/.bytecode scratch/logs
cp scratch/train_gpt_main.py train_gpt.py; cp scratch/loader_overlap_main.py benchmarks/loader_overlap.py
export PYTHONUNBUFFERED=1
[ -d /tmp/gt/data/proxy ] && cp -r /tmp/gt/data/proxy data/ || python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
echo "=== profile main again $(date +%T)" >> $R/progress
timeout 240 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
  --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
  --batch_tokens 98304 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy \
  < /dev/null > $R/profile_main.out 2>&1
echo "=== main profiled $(date +%T)" >> $R/progress
