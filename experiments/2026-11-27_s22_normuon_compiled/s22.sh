#!/bin/bash
# Session 22, 2 GPUs of one host (any card), written before the call. Arms: main (8360ceb) and s22 (branch
# s22-normuon: NorMuon's update compiled at static shapes, and zero_grad through _foreach_zero_).
# Before: the device tree is s22-normuon; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   cp train_gpt.py scratch/train_gpt_s22.py; .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/s22.sh /tmp/s22.sh; setsid nohup bash /tmp/s22.sh > /tmp/s22.log 2>&1 < /dev/null &
#   then scratch/collect.sh until "all done".
# Parts, in order, and the rule, fixed before the runs:
#  1. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, main and s22 alternating,
#     three profiles each (main first), one Inductor/Triton cache.
#  2. A proxy A/B on both GPUs (torchrun), 185 + 3 steps, seeds 0 and 1, the arms alternating (main s0, s22 s0,
#     main s1, s22 s1), one compile cache (main's first start is cold); records/ab.py.
#  3. The GPU tests of NorMuon (tests/test_gpu.py -k normuon) on s22's tree, GPU 0.
# Rule: s22 is merged if its tests pass and either ab.py passes it, or its A/B mean time is not above main's and
# in every stage the median of its three profiles' step times is below the median of main's by more than main's
# own spread (slowest minus fastest of main's three) in at least four stages of six, and above it in none.
# Later calls run it for another arm: ARM (scratch/train_gpt_$ARM.py) and TESTS (pytest's -k expression in
# tests/test_gpu.py) default to what call 1 ran. PRE (session 25): an arm before main, in the A/B only, run
# before main at each seed and weighed against it (records/ab.py PRE main). The GPU tests see both GPUs (the
# NCCL tests need two; call 1's ran on one GPU, and no two-GPU test matched its TESTS). PROFILES (session 26): the
# profiles of each arm, 3 by default (0: the A/B alone); TESTS=none runs no GPU test.
ARM=${ARM:-s22} TESTS=${TESTS:-normuon} PRE=${PRE:-} PROFILES=${PROFILES:-3}
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
echo "=== profiles at 98304 $(date +%T)" >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
profile () {  # name, arm
  echo "=== $1 $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$2.py train_gpt.py
  CUDA_VISIBLE_DEVICES=0,1 timeout 300 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T < /dev/null > $R/$1.out 2>&1
  grep -A8 "^| stage | windows" $R/$1.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  grep -m1 "^note:" $R/$1.out >> $R/progress
  cp traces/step_profile_rank0.json.gz $R/trace_$1.json.gz; rm -rf traces
}
for k in $(seq $PROFILES); do profile main$k main; profile ${ARM}_$k $ARM; done
cp scratch/train_gpt_$ARM.py train_gpt.py
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
echo "=== proxy A/B $(date +%T)" >> $R/progress
run () {  # arm, seed
  echo "=== $1 seed $2 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 benchmarks/proxy_record.py --runs 1 --gpus 2 --out $R/$1_x2 \
    --script scratch/train_gpt_$1.py --compile_cache /tmp/cc_ab $T --scheduled_steps 185 --extension_steps 3 \
    --seed $2 < /dev/null > $R/$1_s$2.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1_x2/*.txt | cut -f1 | cut -c1-240 | tail -2 >> $R/progress
}
rm -rf /tmp/cc_*
for seed in 0 1; do for arm in $PRE main $ARM; do run $arm $seed; done; done
python3 records/ab.py $R/main_x2 $R/${ARM}_x2 >> $R/progress 2>&1
[ -n "$PRE" ] && python3 records/ab.py $R/${PRE}_x2 $R/main_x2 >> $R/progress 2>&1
echo "=== GPU tests $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 400 python3 -m pytest -q tests/test_gpu.py -k "$TESTS" < /dev/null > $R/test_gpu.txt 2>&1
tail -3 $R/test_gpu.txt >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
