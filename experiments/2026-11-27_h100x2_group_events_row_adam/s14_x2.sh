#!/bin/bash
# Session 14, 2 x H100 on one host, from a copy outside the synced tree (setsid; poll with scratch/collect.sh).
# Where 2 GPUs lose ~18 ms a step: step_profile.py at the proxy's own batch on GPU 0 alone, then on both
# (torchrun), same host, main's code (8dcbf3d); stage 2's traces kept from each.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
set -f  # the data patterns go to the scripts as they are
D="--train_files data/proxy/proxy_train_*.bin --val_files data/proxy/proxy_val_*.bin --repeat_train_files
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy"
export TORCHINDUCTOR_CACHE_DIR=/tmp/cc/inductor TRITON_CACHE_DIR=/tmp/cc/triton
echo "=== step_profile 1 GPU $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0 timeout 400 python3 benchmarks/step_profile.py $D --trace_stage 2 < /dev/null > $R/profile_1gpu.out 2>&1
echo "rc $?" >> $R/progress
mkdir -p $R/traces_1gpu; cp traces/*.json.gz $R/traces_1gpu/ 2>/dev/null; rm -rf traces
echo "=== step_profile 2 GPUs $(date +%T)" >> $R/progress
timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py $D --trace_stage 2 < /dev/null \
  > $R/profile_2gpus.out 2>&1
echo "rc $?" >> $R/progress
mkdir -p $R/traces_2gpus; cp traces/*.json.gz $R/traces_2gpus/ 2>/dev/null
echo "=== all done $(date +%T)" >> $R/progress
