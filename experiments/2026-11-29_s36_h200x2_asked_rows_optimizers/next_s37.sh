#!/bin/bash
# Next session (37), written in session 36 and NOT RUN; name the device in the note. Needs two GPUs
# (nvidia-h100-x2 first, else nvidia-h200-x2); on one it stops at once. About 15 minutes of device time.
# Two patches (here), each against main at the 8-GPU per-rank shape on both GPUs:
# - adam_inplace_gathers.patch: each of Adam's large parameters is all-gathered as soon as its own update is
#   queued (not its group's: session 36's trace, stage 0, the first gather waited 0.4 ms for all four value
#   embeddings' updates and the head's, last, ended the step 0.13 ms exposed), into the parameter itself (no
#   gathered copy: five device copies, 0.28 ms of every Adam step of stage 0). Same values.
# - host_sort_orders.patch: RowLookup's backward takes the ids' stable sort order from the loader's worker instead
#   of three CUB radix sorts a micro-batch on the GPU (about 0.1 ms of stage 0's step and 60 us of gaps). Same
#   order (stable), same sums.
# Fixed now:
# 1. GPU tests of both patches applied together: -k "nccl or row_lookup or graphed or compiled_model or adam" (the
#    new test_sharded_adam_over_nccl_gathers_in_place_as_one_process_steps among them; about 6 minutes). The warm
#    start's test is left to next_s37b.sh: neither patch changes what is compiled.
# 2. step_profile at 98304 on both GPUs, stages 0-2, arms main, adam, orders in turn, two rounds, one Inductor and
#    Triton cache for all arms (their compiled graphs are the same; the first arm's first round compiles), stage 0
#    traced. Rules, each patch against main, means of the two rounds:
#    - adam: merge if the tests pass, stage 0's exposed communication (rank 0) is below main's and no stage's step
#      is more than 0.5 % above main's;
#    - orders: merge if the tests pass, stage 0's step is below main's and no stage's step is more than 0.5 % above
#      main's.
#    No more runs of either rule, whatever the outcome.
# 3. Both patches together, stages 0-5, one profile (the README's table if both merge). Then "s37 done".
# 4. If the device time allows (about 2.5 minutes more; else stop collecting at "s37 done"): main's cold start on
#    both GPUs, 30 + 1 steps, empty compile cache (session 33: 89.0 s, before the asked rows and NorMuon's five
#    static application graphs). It ends with "cold done".
#   call, carry [".proxyA"]: setsid nohup bash experiments/2026-11-29_s36_h200x2_asked_rows_optimizers/next_s37.sh
#     > /tmp/s37.log 2>&1 < /dev/null & sleep 2; bash experiments/2026-11-27_h100x2_stack_ab_records/collect.sh 560
#     "s37 done" /tmp/s37.log
#   then the same collect.sh line with 580 AT ONCE, as often as it takes.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_s37 /tmp/tri_s37; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
E=experiments/2026-11-29_s36_h200x2_asked_rows_optimizers
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(nvidia-smi -L | wc -l)" != 2 ]; then echo "=== needs two GPUs; s37 done" >> $R/progress; exit 1; fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
for arm in adam orders both; do cp -r /tmp/gt /tmp/gt_$arm; done
(cd /tmp/gt_adam && git apply $E/adam_inplace_gathers.patch) && (cd /tmp/gt_orders && git apply $E/host_sort_orders.patch) \
  && (cd /tmp/gt_both && git apply $E/adam_inplace_gathers.patch && git apply $E/host_sort_orders.patch) \
  || { echo "=== a patch does not apply; s37 done" >> $R/progress; exit 1; }
sha256sum /tmp/gt/train_gpt.py /tmp/gt_*/train_gpt.py >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== GPU tests, both patches $(date +%T)" >> $R/progress
(cd /tmp/gt_both && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests timeout 540 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k "nccl or row_lookup or graphed or compiled_model or adam" \
  > $R/tests_both.txt 2>&1)
tail -1 $R/tests_both.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_both.txt >> $R/progress
profile () {  # name, tree, stages...
  local name=$1 dir=$2; shift 2
  echo "=== step_profile at 98304 on 2 GPUs, stages $*: $name $(date +%T)" >> $R/progress
  (cd $dir && CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s37 TRITON_CACHE_DIR=/tmp/tri_s37 timeout 420 \
    torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 \
    --stages "$@" --trace_stage 0 < /dev/null > $R/p_$name.out 2>&1)
  grep -A8 "^| stage | windows" $R/p_$name.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  grep -h "Traceback\|Error" $R/p_$name.out | head -3 >> $R/progress
  mkdir -p $R/trace_$name; cp $dir/traces/*.json.gz $R/trace_$name/ 2>/dev/null; rm -rf $dir/traces
}
for k in 1 2; do
  profile main_$k /tmp/gt 0 1 2; profile adam_$k /tmp/gt_adam 0 1 2; profile orders_$k /tmp/gt_orders 0 1 2
done
profile both_all /tmp/gt_both 0 1 2 3 4 5
echo "=== s37 done $(date +%T)" >> $R/progress
echo "=== cold start on 2 GPUs, main $(date +%T)" >> $R/progress
rm -rf logs /tmp/cc_cold
CUDA_VISIBLE_DEVICES=0,1 timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py "${FLAGS[@]}" \
  --compile_cache /tmp/cc_cold --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/cold.out 2>&1
grep -h "^startup\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
echo "=== cold done $(date +%T)" >> $R/progress
