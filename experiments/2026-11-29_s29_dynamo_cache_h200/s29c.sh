#!/bin/bash
# Session 29, call 4: cuBLASLt (TORCH_BLAS_PREFER_CUBLASLT=1) against cuBLAS, the default, for the memsets before
# the matmuls (call 3: 485 of stage 0's 618 memsets sit before cuBLAS's nvjet kernels). step_profile, stage 0 at
# 49152 on one GPU; one Inductor cache for both (the BLAS library is not in the compiled code). Order: cuBLAS
# (compiles), cuBLASLt, cuBLAS, cuBLASLt.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_c TRITON_CACHE_DIR=/tmp/tri_c
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
F=(--stages 0 --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin"
  --repeat_train_files --val_tokens 1835008 --batch_tokens 49152 --trace_stage 0
  --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
for run in cublas_1 cublaslt_1 cublas_2 cublaslt_2; do
  echo "=== $run $(date +%T)" >> $R/progress
  lt=0; [[ $run == cublaslt* ]] && lt=1
  TORCH_BLAS_PREFER_CUBLASLT=$lt timeout 200 python3 benchmarks/step_profile.py "${F[@]}" < /dev/null > $R/$run.out 2>&1
  grep -A2 "^| stage | windows" $R/$run.out | cut -d'|' -f2,4,5,6,7 >> $R/progress
  grep -h "Traceback\|Error" $R/$run.out | head -3 >> $R/progress
  mkdir -p $R/trace_$run; cp traces/*.json.gz $R/trace_$run/ 2>/dev/null; rm -rf traces
done
echo "=== s29c done $(date +%T)" >> $R/progress
