#!/bin/bash
# After next_s16.sh (written in session 15, not run): where two GPUs pay 6.6 ms a step over half of one GPU's in
# stage 0 at the proxy's batch (section 3 of this folder's README). step_profile of the tree's train_gpt.py (main,
# with the stack if it was merged) at the proxy's batch, traces of stage 0: on GPU 0 alone, then on both GPUs, in
# one call on 2 x H100 (setsid; poll with collect.sh; log /tmp/s16b.log). Compare the two tables' stage-0 rows
# kind by kind (matmul, attention and the rest should halve) and read each trace with exposed_gaps.py; the
# optimizers' table gives each step()'s GPU span. About 500 s with the start.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
D="--train_files data/proxy/proxy_train_*.bin --val_files data/proxy/proxy_val_*.bin --repeat_train_files
   --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --trace_stage 0"
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
for gpus in 1 2; do
  echo "=== step_profile, proxy batch, $gpus GPU(s) $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1) timeout 400 torchrun --standalone \
    --nproc_per_node $gpus benchmarks/step_profile.py $D < /dev/null > $R/profile_x$gpus.out 2>&1
  mkdir -p $R/traces_x$gpus; cp traces/*.json.gz $R/traces_x$gpus/; rm -rf traces
  python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces_x$gpus/step_profile_rank0.json.gz \
    > $R/gaps_x$gpus.md 2>&1
  grep -A8 "^| stage | windows" $R/profile_x$gpus.out | head -3 >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
