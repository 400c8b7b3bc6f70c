#!/bin/bash
# Session 30, call 3: the gates as Triton reductions (Gate), with and without cuBLAS's workspace (init_process now
# sets none). Arms: main; gates_ws (Gate, cuBLAS's default workspace); gates (the branch: Gate, no workspace).
# step_profile at 49152, stages 0 and 1, each arm its own Inductor cache (gates and gates_ws share the graphs),
# in turn twice. Rule (fixed before the run): merge the branch if its stage 0 step is shorter than main's in both
# rounds by at least 0.2 ms in the mean and stage 1 is not longer by more than 0.1 ms in the mean; then a
# time-to-loss A/B before any record.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
for arm in gates gates_ws; do cp -r /tmp/gt /tmp/gt_$arm; cp scratch/train_gpt_$arm.py /tmp/gt_$arm/train_gpt.py; done
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
for k in 1 2; do for arm in main gates gates_ws; do
  echo "=== step_profile at 49152: $arm ($k) $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm != main ] && dir=/tmp/gt_$arm; cache=$arm; [ $arm = gates_ws ] && cache=gates
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$cache TRITON_CACHE_DIR=/tmp/tri_$cache timeout 400 python3 \
    benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 1 --batch_tokens 49152 --trace_stage 0 < /dev/null \
    > $R/g_${arm}_$k.out 2>&1)
  grep -A3 "^| stage | windows" $R/g_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
  grep -h "Traceback\|Error" $R/g_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/g_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/g_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
done; done
echo "=== s30c done $(date +%T)" >> $R/progress
