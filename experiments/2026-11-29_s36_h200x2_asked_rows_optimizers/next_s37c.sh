#!/bin/bash
# Next session (37), written in session 36 and NOT RUN: for a session lent ONE GPU only (with two, next_s37.sh
# measures the same patch on both). About 10 minutes. host_sort_orders.patch (here: RowLookup's backward takes the
# ids' stable sort order from the loader's worker, not three CUB radix sorts a micro-batch on the GPU) against
# main on one GPU at the 8-GPU per-rank shape (--batch_tokens 49152: one 49,152-token micro-batch a step).
# Fixed now:
# 1. the patch's GPU tests: -k "row_lookup or graphed or compiled_model or warm_start";
# 2. step_profile at 49152, stages 0-2, main and orders in turn, two rounds, one Inductor and Triton cache for both
#    (their compiled graphs are the same; the first profile compiles), stage 0 traced. Merge if the tests pass,
#    stage 0's step (the mean of the two rounds) is below main's and no stage's step is more than 0.5 % above
#    main's. No more runs of the rule, whatever the outcome.
#   call, carry [".proxyA"]: setsid nohup bash experiments/2026-11-29_s36_h200x2_asked_rows_optimizers/next_s37c.sh
#     > /tmp/s37c.log 2>&1 < /dev/null & sleep 2; bash experiments/2026-11-27_h100x2_stack_ab_records/collect.sh 560
#     "s37c done" /tmp/s37c.log
#   then the same collect.sh line with 580 AT ONCE if it has not ended.
E=experiments/2026-11-29_s36_h200x2_asked_rows_optimizers
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_orders /tmp/ind_s37c /tmp/tri_s37c; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_orders
(cd /tmp/gt_orders && git apply $E/host_sort_orders.patch) || { echo "=== the patch does not apply" >> $R/progress; exit 1; }
sha256sum /tmp/gt/train_gpt.py /tmp/gt_orders/train_gpt.py >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== GPU tests, orders $(date +%T)" >> $R/progress
(cd /tmp/gt_orders && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests timeout 420 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k "row_lookup or graphed or compiled_model or warm_start" > $R/tests.txt 2>&1)
tail -1 $R/tests.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests.txt >> $R/progress
for k in 1 2; do for arm in main orders; do
  dir=/tmp/gt; [ $arm = orders ] && dir=/tmp/gt_orders
  echo "=== step_profile at 49152, stages 0-2: $arm ($k) $(date +%T)" >> $R/progress
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s37c TRITON_CACHE_DIR=/tmp/tri_s37c timeout 300 python3 \
    benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 49152 --stages 0 1 2 --trace_stage 0 \
    < /dev/null > $R/p_${arm}_$k.out 2>&1)
  grep -A5 "^| stage | windows" $R/p_${arm}_$k.out | cut -d'|' -f2,4,5,6 >> $R/progress
  grep -h "Traceback\|Error" $R/p_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/trace_${arm}_$k; cp $dir/traces/*.json.gz $R/trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
done; done
echo "=== s37c done $(date +%T)" >> $R/progress
