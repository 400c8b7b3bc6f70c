#!/bin/bash
# Next session (23), 2 GPUs of one host (any card), written in session 22 and not run: call 1's s22.sh for another
# arm. Arms: main (at least e9af1b4: NorMuon's update compiled) and wg (branch s22-written-grads: a step's first
# micro-batch writes NorMuon's gradients instead of adding them into zeroed ones; NOT YET RUN ON A GPU).
# Before: the device tree is s22-written-grads; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   cp train_gpt.py scratch/train_gpt_wg.py; .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script, s22.sh and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/. The tree with .proxy
#   and scratch must stay under 64 MiB (session 22's second call was refused at 66 MB until the logs were xz'd).
# Launch: cp scratch/next_s23.sh /tmp/s23.sh; setsid nohup bash /tmp/s23.sh > /tmp/s23.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== proxy A/B\|all done" /tmp/s23.log; then collect.sh 590 "all done"
#   at once (the machine idles back 30 s after a call). Give the machine back after. About 900 s on H200s.
# Parts, in s22.sh's order, and the rule, fixed before the runs:
#  1. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, main and wg alternating,
#     three profiles each (main first), one Inductor/Triton cache.
#  2. A proxy A/B on both GPUs (torchrun), 185 + 3 steps, seeds 0 and 1, the arms alternating; records/ab.py.
#  3. The GPU tests of what the branch changed, on wg's tree, GPU 0: the graphed micro-steps (the first pass's
#     graphs write the matrices' gradients and hand them back; the later passes' graphs add into them), the
#     gradient events under them, and NorMuon's.
# Rule: wg is merged if its GPU tests pass and either ab.py passes it, or its A/B mean time is not above main's
# and, in at least four stages of six, the median of its three profiles' step times is below main's by more than
# main's own spread (slowest minus fastest of main's three), and above it in none. Expected from session 22's
# trace: about 0.5 ms a step less in stage 0 (41 float32 adds and 41 zeroed gradients fewer).
ARM=wg TESTS="graphed or gradient_events or normuon" bash scratch/s22.sh
