#!/bin/bash
# Session 36, 2 x H200 (nvidia-h200-x2), one job started with setsid in call 2 (see README):
# 1. session 33's next_s34.sh as written (the asked-rows patch: its GPU tests, the step_profile A/B against main at
#    the 8-GPU per-rank shape on both GPUs, its merge rule, its six stages); it ends with "s34 done".
# 2. session 35's next_s36.sh on GPU 0 alone (the two optimizer patches against main, one GPU), from a copy of the
#    tree made before this job started (/tmp/tree36, with .proxyA's shards), its results in /tmp/res/s36.
# Session 34's part 2 (a 2-GPU cold start with the host's cores sampled) is left out for device time.
bash /tmp/s34.sh
cd /tmp/tree36 && OUT=/tmp/res/s36 CUDA_VISIBLE_DEVICES=0 \
  bash experiments/2026-11-29_s35_row_adam_precompile_h200/next_s36.sh
echo "=== s36 part done $(date +%T)" >> /tmp/res/progress
