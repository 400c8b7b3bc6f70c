#!/bin/bash
# Session 37, nvidia-h200-x2 lent after the one-GPU calls, about 640 s of device time left: next_s37.sh's A/B of
# adam_inplace_gathers.patch cut to what fits. host_sort_orders.patch merged by next_s37c.sh's rule before this ran,
# so main (both arms' base) has it. Fixed before running:
# 1. the Adam patch's GPU tests: -k adam (test_sharded_adam_over_nccl_gathers_in_place_as_one_process_steps among
#    them, on both GPUs);
# 2. step_profile at 98304 on both GPUs, stages 0-2, main and adam in turn, two rounds, one Inductor and Triton
#    cache for both (the same compiled graphs), stage 0 traced. next_s37.sh's rule, means of the two rounds: merge
#    if the tests pass, stage 0's exposed communication (rank 0) is below main's and no stage's step is more than
#    0.5 % above main's. No more runs of the rule, whatever the outcome; if the device time ends before the second
#    round, not merged this session.
#   call, kind nvidia-h200-x2, carry [".proxyA"]: setsid nohup bash experiments/2026-11-29_s37_h200_precompile_orders/s37d.sh
#     > /tmp/s37.log 2>&1 < /dev/null & sleep 2; bash experiments/2026-11-29_s37_h200_precompile_orders/collect.sh 560 "s37d done"
R=/tmp/res; rm -rf $R /tmp/res_b /tmp/gt /tmp/gt_* /tmp/ind_s37 /tmp/tri_s37; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
E=experiments/2026-11-29_s36_h200x2_asked_rows_optimizers
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(nvidia-smi -L | wc -l)" != 2 ]; then echo "=== needs two GPUs; s37d done" >> $R/progress; exit 1; fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_adam
(cd /tmp/gt_adam && git apply $E/adam_inplace_gathers.patch) || { echo "=== the patch does not apply; s37d done" >> $R/progress; exit 1; }
sha256sum /tmp/gt/train_gpt.py /tmp/gt_adam/train_gpt.py >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== GPU tests, adam $(date +%T)" >> $R/progress
(cd /tmp/gt_adam && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests timeout 300 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k adam > $R/tests_adam.txt 2>&1)
tail -1 $R/tests_adam.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_adam.txt >> $R/progress
profile () {  # name, tree
  echo "=== step_profile at 98304 on 2 GPUs, stages 0-2: $1 $(date +%T)" >> $R/progress
  (cd $2 && CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s37 TRITON_CACHE_DIR=/tmp/tri_s37 timeout 300 \
    torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 \
    --stages 0 1 2 --trace_stage 0 < /dev/null > $R/p_$1.out 2>&1)
  grep -A5 "^| stage | windows" $R/p_$1.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  grep -h "Traceback\|Error" $R/p_$1.out | head -3 >> $R/progress
  rm -rf $2/traces
}
for k in 1 2; do profile main_$k /tmp/gt; profile adam_$k /tmp/gt_adam; done
echo "=== s37d done $(date +%T)" >> $R/progress
