#!/bin/bash
# Session 30, call 4: Gate as a batched matmul over 64 chunks of the tokens (its weight gradient: 64 small matmuls
# and a sum, no split-K), cuBLAS without a workspace. Arms: main; gates (the branch). step_profile at 49152,
# stage 0 only, each arm its own Inductor cache, in turn twice. Measures only (a time-to-loss A/B and the GPU
# tests come before any merge, next session).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_gates; cp scratch/train_gpt_gates.py /tmp/gt_gates/train_gpt.py
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
for k in 1 2; do for arm in main gates; do
  echo "=== step_profile at 49152: $arm ($k) $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm != main ] && dir=/tmp/gt_$arm
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 300 python3 \
    benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 --batch_tokens 49152 --trace_stage 0 < /dev/null \
    > $R/d_${arm}_$k.out 2>&1)
  grep -A2 "^| stage | windows" $R/d_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
  grep -h "Traceback\|Error" $R/d_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/d_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/d_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
done; done
echo "=== s30d done $(date +%T)" >> $R/progress
