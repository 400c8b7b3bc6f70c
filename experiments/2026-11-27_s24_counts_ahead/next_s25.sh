#!/bin/bash
# Next session (25), 2 GPUs of one host (nvidia-h100-x2), written in session 24 and NOT RUN. About 20 minutes of
# device time: start it detached and collect it in two or three calls.
# Arms:
#   pre     20744ba: before the n-gram row counts were exchanged ahead (5227289) and the validation mask was built
#           row by row (206da74)
#   main    main with both (6dc5970 or later); the logs' "validation_mask: ... built in" lines time the mask builds
#   midway  branch s24-adam-midway: Adam's step starts halfway through NorMuon's part updates, so that its
#           all-gathers go between NorMuon's instead of ending the step exposed (NOT YET RUN ON A GPU)
# Before: the device tree is s24-adam-midway; git show 20744ba:train_gpt.py > scratch/train_gpt_pre.py;
#   git show main:train_gpt.py > scratch/train_gpt_main.py; cp train_gpt.py scratch/train_gpt_midway.py;
#   cp this script, ../2026-11-27_s22_normuon_compiled/s22.sh and ../2026-11-27_h100x2_stack_ab_records/collect.sh
#   into scratch/; .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"].
# Launch: cp scratch/next_s25.sh /tmp/s25.sh; setsid nohup bash /tmp/s25.sh > /tmp/s25.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== proxy A/B\|all done" /tmp/s25.log; then collect.sh 590 "all done"
#   right away, while the machine is still warm (it idles back 30 s after a call).
# Parts, in order (s22.sh with ARM=midway, PRE=pre):
#  1. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, main and midway alternating,
#     three profiles each (main first), one Inductor/Triton cache.
#  2. A proxy A/B on both GPUs (torchrun), 185 + 3 steps, seeds 0 and 1, arms alternating (pre, main, midway for
#     seed 0, then for seed 1), one compile cache; records/ab.py main against pre, and midway against main.
#  3. The GPU tests of the optimizers, the graphed micro-steps and the NCCL sharded table (its fetch ahead now
#     with counts exchanged before, as a training batch's builder does) on midway's tree, both GPUs.
# Rules, fixed before the runs:
#  - The counts ahead and the row-by-row mask (main against pre) stay if main's A/B mean time is not above pre's by
#    more than twice the seed spread. Otherwise find which of the two it is and revert that one. The counts would
#    show in the first step after each validation (session 24, call 4: 389 against 324 ms, cold against warm); the
#    mask would show in the steps of its build's first seconds.
#  - midway is merged if its GPU tests pass, its A/B mean time is not above main's (or ab.py passes it), in at
#    least four stages of six the median of its three profiles' exposed communication is below the lowest of
#    main's three, and in no stage is its median step time above main's median by more than main's own spread.
#    Expected from the traces: about 0.45 ms less on each Adam step in stage 0, half that a step on average,
#    unless the compute stream idles halfway, waiting for the value embeddings' reduce-scatters (the review's risk).
ARM=midway PRE=pre TESTS="normuon or adam or graphed or sharded" bash scratch/s22.sh
