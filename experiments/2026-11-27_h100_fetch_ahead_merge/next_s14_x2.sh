#!/bin/bash
# Next session (14), 2 x H100 on one host, in a copy outside the synced tree (start with setsid; poll with
# scratch/collect.sh). Issue 35's three open measures, main's code:
#   1. where a warm start goes: benchmarks/startup_profile.py on GPU 0, 30 + 1 steps, cold then warm (one cache);
#   2. where 2 GPUs lose ~18 ms a step: step_profile.py at the proxy's own batch on GPU 0 alone, then on both
#      (torchrun), same host; the traces of stage 2 kept from each;
#   3. issue 35's micro-step measure: step_ab.py, f6b76f0 (before the issue's work, today's model) against the tree,
#      at the 8-GPU per-rank shape (--batch_tokens 49152: one 48K micro-batch a step), on GPU 0 alone. The device
#      has no git history: first `git show f6b76f0:train_gpt.py > scratch/train_gpt_f6b76f0.py` here.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
set -f  # the data patterns go to the scripts as they are
D="--train_files data/proxy/proxy_train_*.bin --val_files data/proxy/proxy_val_*.bin --repeat_train_files
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy"
for run in cold warm; do
  echo "=== startup_profile $run $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/startup_profile.py $D --val_tokens 1835008 --val_loss_every 0 \
    --scheduled_steps 30 --extension_steps 1 --compile_cache /tmp/cc < /dev/null > $R/startup_$run.out 2>&1
  grep -h "^startup" $R/startup_$run.out | cut -f1 >> $R/progress
done
export TORCHINDUCTOR_CACHE_DIR=/tmp/cc/inductor TRITON_CACHE_DIR=/tmp/cc/triton
echo "=== step_profile 1 GPU $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0 timeout 280 python3 benchmarks/step_profile.py $D --trace_stage 2 < /dev/null > $R/profile_1gpu.out 2>&1
mkdir -p $R/traces_1gpu; cp traces/*.json.gz $R/traces_1gpu/ 2>/dev/null; rm -rf traces
echo "=== step_profile 2 GPUs $(date +%T)" >> $R/progress
timeout 280 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py $D --trace_stage 2 < /dev/null \
  > $R/profile_2gpus.out 2>&1
mkdir -p $R/traces_2gpus; cp traces/*.json.gz $R/traces_2gpus/ 2>/dev/null
echo "=== step_ab $(date +%T)" >> $R/progress
P=$PWD
CUDA_VISIBLE_DEVICES=0 timeout 500 python3 benchmarks/step_ab.py --revs scratch/train_gpt_f6b76f0.py . --batch_tokens 49152 \
  --train_files "$P/data/proxy/proxy_train_*.bin" --val_files "$P/data/proxy/proxy_val_*.bin" --repeat_train_files \
  --prefix_table $P/data/gpt2_prefix_tokens.npy < /dev/null > $R/step_ab.out 2>&1
echo "=== all done $(date +%T)" >> $R/progress
