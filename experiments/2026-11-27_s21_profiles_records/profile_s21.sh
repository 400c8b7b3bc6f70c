#!/bin/bash
# Session 21, call 3: step_profile at the 8-GPU per-rank shape (--batch_tokens 98304) on both GPUs, every stage,
# for main, stack (rowgroup + zero-foreach), rowgroup, then main again (its repeat shows the noise between runs).
# One Inductor/Triton cache for all (their compiled regions are the same). Traces of stage 0 kept.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
profile () {  # name, arm
  echo "=== $1 $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$2.py train_gpt.py
  CUDA_VISIBLE_DEVICES=0,1 timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T < /dev/null > $R/$1.out 2>&1
  grep -A8 "^| stage | windows" $R/$1.out | cut -d'|' -f2,4,6,11,13,14 >> $R/progress
  grep -m1 "^note:" $R/$1.out >> $R/progress
  mkdir -p $R/traces; cp traces/step_profile_rank0.json.gz $R/traces/$1.json.gz 2>/dev/null; rm -rf traces
}
profile main main
profile stack stack
profile rowgroup rowgroup
profile main2 main
echo "=== all done $(date +%T)" >> $R/progress
