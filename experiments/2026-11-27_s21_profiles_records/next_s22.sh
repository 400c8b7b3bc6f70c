#!/bin/bash
# Next session (22), 2 GPUs of one host (any card; in session 21 nvidia-h100-x2 gave H100s in one call of three,
# H200s in the others), written in session 21 and not run. Its forms are those that ran in session 21 (profile_s21.sh,
# ../2026-11-27_s20_isolate_rowgroup/next_s21.sh). Before:
#   the device tree is main; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   git show s21-stack:train_gpt.py > scratch/train_gpt_stack.py;
#   .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s22.sh /tmp/s22.sh; setsid nohup bash /tmp/s22.sh > /tmp/s22.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== profiles\|all done" /tmp/s22.log; then collect.sh 590 with
#   "all done" (poll again at once: the machine idles back 30 s after a call). Give the machine back after.
#   About 800 s on H200s.
# Parts, in order, fixed before the runs:
#  1. main, then stack (s21-stack: the n-gram rows' own communicator and zero_grad through _foreach_zero_) on both
#     GPUs, seeds 0 and 1, 185 + 3 steps, one compile cache for both arms (main's first start is cold). Stack is
#     kept if records/ab.py passes it. Session 21's single profiles at the 8-GPU per-rank shape had it 0.1-0.5 ms a
#     step faster in five stages of six; at the proxy's batch that would be 0.2-0.4 %.
#  2. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, main and stack alternating,
#     three profiles each (main first), one Inductor/Triton cache: the step times' spread between profiles of one
#     arm is the noise that session 21 could not measure with one profile an arm.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
runs () {  # name, arm (scratch/train_gpt_$2.py)
  echo "=== $1 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 560 python3 benchmarks/proxy_record.py --runs 2 --gpus 2 --out $R/$1 \
    --script scratch/train_gpt_$2.py --compile_cache /tmp/cc_ab $T --scheduled_steps 185 --extension_steps 3 \
    < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
rm -rf /tmp/cc_*
runs main_x2 main
runs stack_x2 stack
python3 records/ab.py $R/main_x2 $R/stack_x2 >> $R/progress 2>&1
echo "=== profiles at 98304 $(date +%T)" >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
profile () {  # name, arm
  echo "=== $1 $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$2.py train_gpt.py
  CUDA_VISIBLE_DEVICES=0,1 timeout 300 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T < /dev/null > $R/$1.out 2>&1
  grep -A8 "^| stage | windows" $R/$1.out | cut -d'|' -f2,4,6,11,12,13 >> $R/progress
  grep -m1 "^note:" $R/$1.out >> $R/progress
  rm -rf traces
}
for k in 1 2 3; do profile main$k main; profile stack$k stack; done
echo "=== all done $(date +%T)" >> $R/progress
