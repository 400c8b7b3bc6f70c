#!/bin/bash
# Session 22, call 2: 4 GPUs of one host (nvidia-h100-x4 or nvidia-h200-x4), written before the call. The 8-GPU
# per-rank shape (49,152 tokens a rank: --batch_tokens 196608) on 4 ranks, for the first time: main (s22-normuon,
# merged after call 1) and rowgroup (branch s22-rowgroup: the n-gram rows' exchanges on a communicator of their
# own), alternating, two profiles each (main first), one Inductor/Triton cache; then main once on 2 of the GPUs
# at --batch_tokens 98304, the shape of call 1, to tie the two hosts together.
# Before: git show s22-rowgroup:train_gpt.py > scratch/train_gpt_rowgroup.py; cp train_gpt.py
#   scratch/train_gpt_s22.py; carry [".proxy", "scratch"]; cp this script into scratch/.
# Launch: cp scratch/s22_x4.sh /tmp/s22.sh; setsid nohup bash /tmp/s22.sh > /tmp/s22.log 2>&1 < /dev/null &
#   then scratch/collect.sh until "all done".
# Rule, fixed before the runs: rowgroup is merged if in every stage the mean of its two profiles' step times is
# below main's mean by more than main's own spread (the difference of main's two) in at least four stages of six,
# and above it in none.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
profile () {  # name, arm, GPUs, batch tokens
  echo "=== $1 on $3 GPUs at $4 $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$2.py train_gpt.py
  timeout 300 torchrun --standalone --nproc_per_node $3 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens $4 --trace_stage 0 $T < /dev/null > $R/$1.out 2>&1
  grep -A8 "^| stage | windows" $R/$1.out | cut -d'|' -f2,4,6,11,12,13 >> $R/progress
  grep -m1 "^note:" $R/$1.out >> $R/progress
  cp traces/step_profile_rank0.json.gz $R/trace_$1.json.gz; rm -rf traces
}
profile main_x4_1 s22 4 196608
profile rowgroup_x4_1 rowgroup 4 196608
profile main_x4_2 s22 4 196608
profile rowgroup_x4_2 rowgroup 4 196608
CUDA_VISIBLE_DEVICES=0,1 profile main_x2 s22 2 98304
echo "=== all done $(date +%T)" >> $R/progress
