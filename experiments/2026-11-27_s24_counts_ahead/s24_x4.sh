#!/bin/bash
# Session 24, call 3: 4 GPUs of one host (nvidia-h100-x4), written before the call. The 8-GPU per-rank shape on 4
# ranks (--batch_tokens 196608: one 49,152-token micro-batch a rank a step), stages 0-2 (the short steps, where the
# host matters): main (20744ba) and counts (branch s24-counts-ahead: each training batch's n-gram row counts are
# exchanged by the loader's worker as it builds the batch, not by the training step), alternating main, counts,
# main, counts, one Inductor/Triton cache.
# Rule, fixed before the runs: counts is merged if the CPU suite passes, the mean of its two profiles' host time
# (step_profile's "host": the median time to queue a step) is below main's mean in stages 0, 1 and 2, by at least
# 1 ms in stage 0, and its mean step time is not above main's mean by more than main's own spread (the difference
# of main's two) in any of the three stages. (At 8 ranks the host's time to queue a stage-0 step is expected to
# reach the step's; on 4 it was 15.8-17.5 ms of 21-22 ms in session 22.)
R=${OUT:-/tmp/res}; mkdir -p $R
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
rm -rf /tmp/gt_main /tmp/gt_counts; cp -r . /tmp/gt_counts; cp -r . /tmp/gt_main
cp scratch/main_train_gpt.py /tmp/gt_main/train_gpt.py; cp scratch/main_loader_overlap.py /tmp/gt_main/benchmarks/loader_overlap.py
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
profile () {  # arm, index
  echo "=== $1 $2 $(date +%T)" >> $R/progress
  (cd /tmp/gt_$1 && timeout 280 torchrun --standalone --nproc_per_node 4 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens 196608 --stages 0 1 2 --trace_stage 0 $T < /dev/null > $R/$1_$2.out 2>&1)
  grep -A5 "^| stage | windows" $R/$1_$2.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  cp /tmp/gt_$1/traces/step_profile_rank0.json.gz $R/trace_$1_$2.json.gz 2>/dev/null; rm -rf /tmp/gt_$1/traces
}
profile main 1; profile counts 1; profile main 2; profile counts 2
echo "=== all done $(date +%T)" >> $R/progress
cat $R/progress
