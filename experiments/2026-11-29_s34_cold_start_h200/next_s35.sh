#!/bin/bash
# Next session (35), written in session 34 and NOT RUN; name the device in the note. Needs two GPUs
# (nvidia-h100-x2 first, else nvidia-h200-x2).
# 1. Session 33's ../2026-11-29_s33_h200x2_bars/next_s34.sh as it stands, its rules unchanged (session 34 could not
#    run it: only one GPU was lent): the asked-rows patch's GPU tests, its step_profile A/B against main at the 8-GPU
#    per-rank shape and its merge rule, the patch's six stages. It ends with "s34 done"; on one GPU it stops there.
#    The patch's one-GPU GPU tests pass on the patch as it is (session 34).
# 2. Then main's cold start on both GPUs, 30 + 1 steps, an empty compile cache, the host's busy cores sampled each
#    second: is a 2-GPU cold start as far from CPU-bound as session 34 found one GPU's (mostly 4-8 of 16 cores
#    busy)? Its imports include writing torch's bytecode (the tree's first start of train_gpt.py as a program).
#    About 2.5 minutes; skip it if the device time is short.
#   before: as next_s34.sh's header says, and also copy next_s34.sh, this script, cpu_sampler.py and cputime.py (here)
#     into scratch/.
#   call 1, carry [".proxyA"]:  mkdir -p /tmp/proxy && cp .proxyA/* /tmp/proxy/ && ls /tmp/proxy
#   call 2 AT ONCE, carry [".proxyB", "scratch"]:
#     cp .proxyB/* /tmp/proxy/; cp scratch/next_s34.sh /tmp/s34.sh; cp scratch/next_s35.sh /tmp/s35.sh;
#     setsid nohup bash /tmp/s35.sh > /tmp/s35.log 2>&1 < /dev/null & sleep 2; bash scratch/collect.sh 560 "s34 done" /tmp/s35.log
#   then `bash scratch/collect.sh 580 "s34 done" /tmp/s35.log` AT ONCE, as often as it takes (about 18 minutes
#   warm), then "s35 done" for part 2.
bash /tmp/s34.sh || { echo "=== s34 stopped early; s35 done" >> /tmp/res/progress; exit 1; }
R=/tmp/res; cd /tmp/gt  # next_s34.sh's copy of the tree, its proxy shards decompressed
export PYTHONUNBUFFERED=1
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== cold start on 2 GPUs, main, CPU sampled $(date +%T)" >> $R/progress
rm -rf logs /tmp/cc_cold
python3 scratch/cpu_sampler.py > $R/cpu_cold.txt & S=$!
CUDA_VISIBLE_DEVICES=0,1 python3 scratch/cputime.py timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py \
  "${FLAGS[@]}" --compile_cache /tmp/cc_cold --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 \
  < /dev/null > $R/cold.out 2> $R/cold.time
kill $S
grep -h "^startup\|^compile:\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
grep "^cpu user" $R/cold.time >> $R/progress
awk '{s+=$2; n++} END {print "mean busy cores", s/n, "over", n, "s"}' $R/cpu_cold.txt >> $R/progress
echo "=== s35 done $(date +%T)" >> $R/progress
