#!/bin/bash
# Next session (38), written in session 37 and NOT RUN. Needs two GPUs (nvidia-h200-x2, or 2 x H100); on one it
# stops at once. About 14 minutes of device time, in two collect calls. Name the device in the note.
# 1. adam_midway.patch's GPU tests on both GPUs: -k "nccl or graphed or adam".
# 2. A/B of adam_midway.patch (here: Adam's step queued between NorMuon's halves, so that its all-gathers run
#    under the second half's arithmetic, not after all of it) against main: step_profile at 98304 on both GPUs
#    (the 8-GPU per-rank shape), stages 0-2, main and patch in turn, two rounds, one Inductor and Triton cache for
#    both (the same compiled graphs), stage 0 traced. exposed_intervals.py (here) reads the first round's traces of
#    both arms, both ranks: which NCCL kernels are exposed in stage 0, launched in which host range, where in the
#    step, and what waited for them. Rule, fixed now, means of the two rounds: merge if the tests pass, stage 0's
#    exposed share (rank 0) is below main's, no stage's step is more than 0.5 % above main's, and part 4's final
#    val losses differ by no more than 0.01 (the patch changes no arithmetic: 8 gloo ranks on the CPU print the
#    same losses at every step). No more runs of the rule, whatever the outcome.
# 3. Main, stages 0-5, one profile: the README's table (still bcc4f51's).
# 4. The start-up bar (< 60 s cold, < 20 s warm on 2 GPUs): main's cold start on both GPUs (30 + 1 steps, an empty
#    compile cache; session 33's code took 89.0 s), a warm one on its cache, then the patch on that cache (its
#    Dynamo frames are traced again: another source) for part 2's loss check. "s38 done" at the end.
#   call, kind nvidia-h200-x2, carry [".proxyA"]:
#     setsid nohup bash experiments/2026-11-29_s37_h200_precompile_orders/next_s38.sh > /tmp/s38.log 2>&1
#     < /dev/null & sleep 2; bash experiments/2026-11-27_h100x2_stack_ab_records/collect.sh 560 "s38 done" /tmp/s38.log
#   then the same collect.sh line with 580 AT ONCE if it has not ended.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_midway /tmp/ind_s38 /tmp/tri_s38 /tmp/cc_s38; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0,1
E=experiments/2026-11-29_s37_h200_precompile_orders
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(nvidia-smi -L | wc -l)" != 2 ]; then echo "=== needs two GPUs; s38 done" >> $R/progress; exit 1; fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_midway
(cd /tmp/gt_midway && git apply $E/adam_midway.patch) || { echo "=== the patch does not apply; s38 done" >> $R/progress; exit 1; }
sha256sum /tmp/gt/train_gpt.py /tmp/gt_midway/train_gpt.py >> $R/progress
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== GPU tests, midway $(date +%T)" >> $R/progress
(cd /tmp/gt_midway && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests timeout 420 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k "nccl or graphed or adam" > $R/tests_midway.txt 2>&1)
tail -1 $R/tests_midway.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_midway.txt >> $R/progress
profile () {  # name, tree, stages...
  local name=$1 dir=$2; shift 2
  echo "=== step_profile at 98304 on 2 GPUs, stages $*: $name $(date +%T)" >> $R/progress
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s38 TRITON_CACHE_DIR=/tmp/tri_s38 timeout 420 torchrun --standalone \
    --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 --stages "$@" --trace_stage 0 \
    < /dev/null > $R/p_$name.out 2>&1)
  grep -A8 "^| stage | windows" $R/p_$name.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  grep -h "Traceback\|Error" $R/p_$name.out | head -3 >> $R/progress
  if [ "${name: -2}" = _1 ]; then
    for r in 0 1; do
      python3 $E/exposed_intervals.py $dir/traces/step_profile_rank$r.json.gz > $R/exposed_${name}_rank$r.txt 2>&1
      head -12 $R/exposed_${name}_rank$r.txt | cut -c1-170 >> $R/progress
    done
  fi
  rm -rf $dir/traces
}
for k in 1 2; do profile main_$k /tmp/gt 0 1 2; profile midway_$k /tmp/gt_midway 0 1 2; done
profile main_all /tmp/gt 0 1 2 3 4 5
for run in cold warm midway; do
  dir=/tmp/gt; [ $run = midway ] && dir=/tmp/gt_midway
  echo "=== $run start on 2 GPUs $(date +%T)" >> $R/progress
  (cd $dir && rm -rf logs && timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py "${FLAGS[@]}" \
    --compile_cache /tmp/cc_s38 --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/$run.out 2>&1
   grep -h "^startup\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 | cut -c1-300 >> $R/progress
   grep -h "Traceback" $R/$run.out | head -2 >> $R/progress)
done
echo "=== s38 done $(date +%T)" >> $R/progress
