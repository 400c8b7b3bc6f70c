#!/bin/bash
# Session 18's second call: parts 3 and 4 again, the data patterns quoted (the first call's shell expanded them).
# Next session (18), one call on 2 x H100 of one host (nvidia-h100-x2), written in session 17 and not run. Start it
# with setsid from the repository root (it copies the tree to /tmp/gt first); poll with collect.sh. Before:
#   the tree on the device is main; git show main:train_gpt.py > scratch/train_gpt_main.py
#   sed 's/^REDUCTION_PARTS = 2 /REDUCTION_PARTS = 1 /' scratch/train_gpt_main.py > scratch/train_gpt_parts1.py
#     (diff: that one line)
#   copy ../shared/proxy-data/*.xz into .proxy/; carry [".proxy", "scratch"]; cp next_s18.sh (this folder) and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s18.sh /tmp/s18.sh; setsid nohup bash /tmp/s18.sh > /tmp/s18.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== startup profile, warm\|all done" /tmp/s18.log; then poll with collect.sh 590 and
#   "=== stage-0 profile, 2\|all done", then "all done" (the machine idles back 30 s after a call).
# Parts, in order, fixed before the runs:
#  1. both GPUs (torchrun), 185 + 3 steps, one run after another: main at seeds 0 and 1, then parts1 (NorMuon
#     reduces each group's gradients in one part instead of two) at seeds 0 and 1. parts1's compile caches are
#     copies of main's after main's runs: the compiled regions are the same, NorMuon's parts are not compiled.
#     Rule (records/ab.py): parts1 is merged if its mean time is below main's by more than twice the larger
#     seed spread of the two arms and its mean loss is not above main's by more than 3 mn. No more runs.
#  2. does NCCL keep NVLink when each rank sees only its own GPU (nccl_isolation_probe.py, NCCL_DEBUG=INFO): the
#     bandwidths, shared and isolated, and the transports NCCL names. If it does, every rank could run on cuda:0
#     and one compile cache would serve any number of GPUs.
#  3. where a warm start's time goes: startup_profile.py of main on GPU 0, 30 + 1 steps, an empty compile cache
#     (cold), then the same cache again under cProfile (warm). Issue 35's bar: under 20 s warm.
#  4. where two GPUs lose in stage 0 (6.6 ms a step over half of one GPU's, session 15 and 17): step_profile of
#     main at the proxy's batch, stage 0's traces, on GPU 0 alone and then on both; the exposed gaps of each
#     rank-0 trace. Compare the stage-0 rows kind by kind: matmul, attention and the rest should halve.
pkill -f "bash /tmp/s18b.sh"; pkill -f step_profile.py; pkill -f startup_profile.py; sleep 1; R=/tmp/res; cd /tmp/gt || exit 1; mkdir -p $R; rm -rf traces /tmp/ind_su /tmp/tri_su /tmp/cc_su
echo "=== third call: parts 3 and 4, patterns quoted, val_tokens 1835008 $(date +%T)" >> $R/progress
export PYTHONUNBUFFERED=1
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
export CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_su TRITON_CACHE_DIR=/tmp/tri_su
D=(--train_files 'data/proxy/proxy_train_*.bin' --val_files 'data/proxy/proxy_val_*.bin' --repeat_train_files --val_tokens 1835008)
for start in cold warm; do
  echo "=== startup profile, $start $(date +%T)" >> $R/progress
  timeout 300 python3 benchmarks/startup_profile.py $([ $start = warm ] && echo --cprofile) "${D[@]}" $T \
    --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 --compile_cache /tmp/cc_su < /dev/null \
    > $R/startup_$start.out 2>&1
  grep -h '^startup' $R/startup_$start.out | cut -c1-300 >> $R/progress
done
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_main TRITON_CACHE_DIR=/tmp/tri_main
for gpus in 1 2; do
  echo "=== stage-0 profile, $gpus GPU(s) $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1) timeout 400 torchrun --standalone \
    --nproc_per_node $gpus benchmarks/step_profile.py "${D[@]}" $T --trace_stage 0 < /dev/null > $R/profile_x$gpus.out 2>&1
  mkdir -p $R/traces_x$gpus; cp traces/*.json.gz $R/traces_x$gpus/; rm -rf traces
  python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces_x$gpus/step_profile_rank0.json.gz \
    > $R/gaps_x$gpus.md 2>&1
  grep -A3 "^| stage | windows" $R/profile_x$gpus.out >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
