#!/bin/bash
# Next session (26), 2 GPUs of one host (nvidia-h100-x2), written in session 25 and NOT RUN. About 16 minutes of
# device time: start it detached and collect it in two calls.
# Arms:
#   main      main (a5fe25a or later): the validation mask built on a thread
#   maskproc  branch s25-mask-process: the mask built by a process of its own, through a file both map
# Before: the device tree is s25-mask-process; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   cp train_gpt.py scratch/train_gpt_maskproc.py; cp this script, ../2026-11-27_s22_normuon_compiled/s22.sh and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
#   The tree (36.8 MB) and the whole proxy corpus (29.6 MB) pass the 64 MiB a call carries, so the corpus goes in
#   two calls, back to back (the machine idles back 30 s after a call): .proxyA/ (proxy_train_000001 and 2) with
#   carry [".proxyA"] and a call that only lists it; then .proxyB/ (proxy_train_000003 and proxy_val_000000) with
#   carry [".proxyB", "scratch"] and the launch. Both are git-ignored (.proxy*/), so .proxyA stays on the machine.
# Launch: mkdir -p .proxy; cp .proxyA/* .proxyB/* .proxy/; cp scratch/next_s26.sh /tmp/s26.sh;
#   setsid nohup bash /tmp/s26.sh > /tmp/s26.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "s26 done" /tmp/s26.log; then again right away if not done.
# Parts, in order:
#  1. A proxy A/B on both GPUs (torchrun), 185 + 3 steps, seeds 0 and 1, main then maskproc at each seed, one
#     compile cache (s22.sh with PROFILES=0: no profiles, TESTS=none: no GPU tests); records/ab.py.
#  2. Each run's steps 1-10 (their train_time), its last step (which waits for the mask and copies it to the GPU: 71.8
#     ms from the mapped file on one H100, session 25's fifth call), and its validation_mask line.
#  3. nccl_visibility.py with every GPU visible, then with each rank seeing its own GPU only: the bandwidth of
#     all-gathers and reduce-scatters, and the transports NCCL names.
#  4. step_profile at 98304, stages 0-2, main's code, alternating: cuBLAS's default workspaces, then none
#     (CUBLASLT_WORKSPACE_SIZE=0 CUBLAS_WORKSPACE_CONFIG=:0:0), twice each. Session 25's stage-0 trace
#     (gaps_s25.txt): the largest cause of the GPU's idle time is a 4-byte memset before each cooperative
#     ("coopA") cuBLAS GEMM, 52 a step, 3.6-5.5 us of idle after each, 0.24 ms of 1.19 ms idle a step. Without a
#     workspace cuBLAS may pick kernels that need no zeroed counter, or slower ones.
# Rules, fixed before the runs:
#  - maskproc is merged if at both seeds its steps 1-10 take at least 30 ms less than main's (session 25: main
#    994 / 1002 ms, 20744ba 934 / 936), its A/B mean time is not above main's by more than twice the seed spread,
#    its final val losses are within 0.002 of main's, and its logs say the last step waited 0.0 s for the mask.
#    If its steps 1-10 are not faster, the n-gram counts exchanged ahead (5227289) are the suspect: next, an arm
#    with it reverted.
#  - No workspace is worth an A/B if, in both of its profiles, stage 0's GPU busy share is above main's highest and
#    no stage's step is longer than main's longest; it is dropped if any stage's step is longer in both.
#  - One visible GPU per rank is worth building (a shared compile cache on several GPUs) if NCCL names a P2P
#    transport in both modes and "own" moves the 9.66 M-element collectives at no less than 90 % of "all"'s bus
#    bandwidth. Otherwise it is dropped, and the note says why.
ARM=maskproc PROFILES=0 TESTS=none bash scratch/s22.sh
cd /tmp/gt
R=/tmp/res
echo "=== steps 1-10 and the mask $(date +%T)" >> $R/progress
python3 - >> $R/progress 2>&1 <<'P'
import glob, re
for arm in ("main", "maskproc"):
    for log in sorted(glob.glob(f"/tmp/res/{arm}_x2/*.txt")):  # by start time: seed 0, then seed 1
        text = open(log).read()
        times = {int(s): float(t) for s, t in re.findall(r"^step:(\d+)/\d+ train_loss:\S+ train_time:([\d.]+)ms", text, re.M)}
        mask = re.search(r"^validation_mask: [^\t]*", text, re.M)
        n = max(times)  # the last step's time holds the mask's wait and its copy to the GPU
        print(arm, log.split("/")[-1], f"steps 1-10 {times[10]:.1f} ms, the last step {times[n] - times[n - 1]:.0f} ms,",
              mask.group(0) if mask else "no mask line")
P
for mode in all own; do
  echo "=== NCCL, GPUs visible: $mode $(date +%T)" >> $R/progress
  NCCL_DEBUG=INFO timeout 120 torchrun --standalone --nproc_per_node 2 \
    experiments/2026-11-27_s25_midway_mask/nccl_visibility.py $mode < /dev/null > $R/nccl_$mode.out 2>&1
  grep "^|" $R/nccl_$mode.out >> $R/progress
  grep -o "via [A-Za-z0-9/_]*" $R/nccl_$mode.out | sort | uniq -c >> $R/progress
done
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
cp scratch/train_gpt_main.py train_gpt.py
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
for k in 1 2; do for ws in default none; do
  echo "=== cuBLAS workspace: $ws ($k) $(date +%T)" >> $R/progress
  if [ $ws = none ]; then E="CUBLASLT_WORKSPACE_SIZE=0 CUBLAS_WORKSPACE_CONFIG=:0:0"; else E=""; fi
  env $E CUDA_VISIBLE_DEVICES=0,1 timeout 300 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --stages 0 1 2 --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" \
    --repeat_train_files --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T < /dev/null > $R/ws_${ws}_$k.out 2>&1
  grep -A5 "^| stage | windows" $R/ws_${ws}_$k.out | cut -d'|' -f2,4,5,6,11,12 >> $R/progress
  cp traces/step_profile_rank0.json.gz $R/trace_ws_${ws}_$k.json.gz; rm -rf traces
done; done
echo "=== s26 done $(date +%T)" >> $R/progress
