#!/bin/bash
# Session 30, call 2: cuBLAS without a workspace. Every 4-byte memset in stage 0's trace sits before an nvjet matmul
# (cuBLAS zeroing a counter in its workspace): about 0.55 ms of gaps and memsets a step at 49152 on an H200. A
# workspace of 0 bytes leaves cuBLAS only algorithms that need none. Arms: main as is, and main with
# CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0; same code, one Inductor cache; alternating twice.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
for k in 1 2; do for arm in main ws0; do
  echo "=== step_profile at 49152: $arm ($k) $(date +%T)" >> $R/progress
  ENV=(); [ $arm = ws0 ] && ENV=(CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0)
  env "${ENV[@]}" timeout 400 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 1 2 --batch_tokens 49152 \
    --trace_stage 0 < /dev/null > $R/ws_${arm}_$k.out 2>&1
  grep -A4 "^| stage | windows" $R/ws_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
  grep -h "Traceback\|Error" $R/ws_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/ws_trace_${arm}_$k; cp traces/*.json.gz $R/ws_trace_${arm}_$k/ 2>/dev/null; rm -rf traces
done; done
echo "=== s30b done $(date +%T)" >> $R/progress
