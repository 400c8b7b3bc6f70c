#!/bin/bash
# Next session (32), written in session 31 and NOT RUN. One GPU (GPU 0); name the device in the note.
# Session 31 ran session 30's next_s31.sh: its speed rule (1) and GPU tests (2) passed, but its time to loss (3) ran
# on the corpus that the start-up measurements carry (.proxyB: shard 3 alone, 2.6M tokens, repeated 28 times: the
# model memorised it, train loss 0.007, val loss 4.45) and lost its fourth run when the machine idled back. Rule (3),
# as fixed in session 30, is taken here on the proxy corpus itself, the measure it names; (1) and (2) stand.
#
# The tree (48 MB) and the whole corpus (29.5 MB) pass the 64 MiB a call may carry, so the corpus goes over in
# two calls, the second made AT ONCE after the first (the machine idles back after 30 s; think after, not between):
#   before: mkdir -p .proxyA .proxyB scratch; cp ../shared/proxy-data/proxy_train_00000{1,3}.bin.xz
#     ../shared/proxy-data/proxy_val_000000.bin.xz .proxyA/; rm -f .proxyB/*; cp ../shared/proxy-data/proxy_train_000002.bin.xz
#     .proxyB/; cp this script, ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/;
#     git show s31-gates:train_gpt.py > scratch/train_gpt_gates.py (the branch: gates_no_workspace.patch of session
#     30 applied to main); git show main:train_gpt.py > scratch/train_gpt_main.py; the smear: that branch with
#     ../2026-11-29_s30_cublas_workspace_h200/smear_roll.patch applied, as scratch/train_gpt_smear.py;
#     keep nothing else in scratch/ (the second call's tree is about 63 MB).
#   call 1, carry [".proxyA"]:  mkdir -p /tmp/proxy && cp .proxyA/* /tmp/proxy/ && ls /tmp/proxy
#   call 2, carry [".proxyB", "scratch"], main checked out:
#     cp .proxyB/* /tmp/proxy/; cp scratch/next_s32.sh /tmp/s32.sh; setsid nohup bash /tmp/s32.sh > /tmp/s32.log 2>&1
#     < /dev/null & sleep 2; bash scratch/collect.sh 560 "s32 done" /tmp/s32.log
#   then `bash scratch/collect.sh 580 "s32 done" /tmp/s32.log` AT ONCE, as often as it takes.
#
# 1. Time to loss (decides): benchmarks/proxy_record.py on GPU 0, 185 + 3 steps, in the order main s0, gates s0,
#    main s1, gates s1; each arm its own compile cache and Inductor and Triton caches, empty at first.
#    Rule (session 30's, fixed then): merge the branch if its mean final val loss is not above main's by more than
#    0.003 and its mean training time not above main's. No more runs whatever the outcome.
#    Session 31's seed-0 pair on the memorised corpus (not a verdict): 58.39 s against 58.18 s (+0.36 %); by
#    stage (stage_times.py) stage 0 -0.6 %, stage 1 +1.1 %, stage 2 +0.2 %: at the one-GPU batch (8 micro-batches
#    a step) the branch may lose what it gains at the 8-GPU per-rank shape.
# 2. Measures only: step_profile of stage 1 at the one-GPU proxy batch (393216 tokens, 8 micro-batches of 32K),
#    main then gates, traces kept: where the one-GPU run's stage 1 loses.
# 3. Measures only, if time is left: smear_roll.patch, stage 0 at 49152, gates then smear, twice (the gates' caches).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_* /tmp/tri_* /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(ls /tmp/proxy/*.bin.xz | wc -l)" != 4 ]; then
  echo "=== /tmp/proxy lacks shards (a fresh machine?): make call 1 again; s32 done" >> $R/progress; exit 1
fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('/tmp/proxy'), pathlib.Path('data/proxy'))"
for arm in gates smear; do cp -r /tmp/gt /tmp/gt_$arm; cp scratch/train_gpt_$arm.py /tmp/gt_$arm/train_gpt.py; done
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
for seed in 0 1; do for arm in main gates; do
  echo "=== time to loss on GPU 0: $arm, seed $seed $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 400 \
    python3 benchmarks/proxy_record.py --runs 1 --seed $seed --out $R/ttl_${arm}_s$seed --proxy /tmp/proxy \
    --script scratch/train_gpt_$arm.py --compile_cache /tmp/cc_$arm --scheduled_steps 185 --extension_steps 3 \
    --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy < /dev/null \
    > $R/ttl_${arm}_s$seed.out 2>&1
  grep -h '^final val_loss' $R/ttl_${arm}_s$seed/*.txt | cut -f1 >> $R/progress
done; done
python3 experiments/2026-11-27_h100x2_stack_ab_records/stage_times.py $R/ttl_*/2*.txt >> $R/progress 2>&1
for arm in main gates; do
  echo "=== step_profile stage 1 at 393216 on GPU 0: $arm $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm = gates ] && dir=/tmp/gt_gates
  (cd $dir && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
    timeout 400 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 1 --trace_stage 1 < /dev/null \
    > $R/p1_$arm.out 2>&1)
  grep -A2 "^| stage | windows" $R/p1_$arm.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
  grep -h "Traceback\|Error" $R/p1_$arm.out | head -3 >> $R/progress
  mkdir -p $R/p1_trace_$arm; cp $dir/traces/*.json.gz $R/p1_trace_$arm/ 2>/dev/null; rm -rf $dir/traces
done
for k in 1 2; do for arm in gates smear; do
  echo "=== step_profile stage 0 at 49152 on GPU 0: $arm ($k) $(date +%T)" >> $R/progress
  (cd /tmp/gt_$arm && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_gates TRITON_CACHE_DIR=/tmp/tri_gates \
    timeout 300 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 --batch_tokens 49152 < /dev/null \
    > $R/smear_${arm}_$k.out 2>&1)
  grep -A2 "^| stage | windows" $R/smear_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
done; done
echo "=== s32 done $(date +%T)" >> $R/progress
