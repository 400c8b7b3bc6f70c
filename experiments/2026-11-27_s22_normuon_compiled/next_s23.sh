#!/bin/bash
# Next session (23), 2 GPUs of one host (any card), written in session 22 and not run. Arms: main (at least
# e9af1b4: NorMuon's update compiled) and wg (branch s22-written-grads: a step's first micro-batch writes
# NorMuon's gradients instead of adding them into zeroed ones; NOT YET RUN ON A GPU).
# Before: the device tree is s22-written-grads; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   cp train_gpt.py scratch/train_gpt_wg.py; .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/. The tree with .proxy and
#   scratch must stay under 64 MiB (session 22's second call was refused at 66 MB until the logs were xz'd).
# Launch: cp scratch/next_s23.sh /tmp/s23.sh; setsid nohup bash /tmp/s23.sh > /tmp/s23.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== proxy A/B\|all done" /tmp/s23.log; then collect.sh 590 "all done"
#   at once (the machine idles back 30 s after a call). Give the machine back after. About 900 s on H200s.
# Parts, in order, and the rule, fixed before the runs:
#  1. The GPU tests, all of tests/test_gpu.py, on wg's tree, GPU 0: its MicroStepGraphs changed (the first
#     pass's graphs write the matrices' gradients and hand them back; the later passes' graphs add into them).
#     The parts below run whatever the tests give; the rule needs them passed.
#  2. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, main and wg alternating,
#     three profiles each (main first), one Inductor/Triton cache.
#  3. A proxy A/B on both GPUs (torchrun), 185 + 3 steps, seeds 0 and 1, the arms alternating; records/ab.py.
# Rule: wg is merged if its GPU tests pass and either ab.py passes it, or its A/B mean time is not above main's
# and, in at least four stages of six, the median of its three profiles' step times is below main's by more than
# main's own spread (slowest minus fastest of main's three), and above it in none. Expected from session 22's
# trace: about 0.5 ms a step less in stage 0 (41 float32 adds and 41 zeroed gradients fewer).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
echo "=== GPU tests $(date +%T)" >> $R/progress
cp scratch/train_gpt_wg.py train_gpt.py
CUDA_VISIBLE_DEVICES=0 timeout 420 python3 -m pytest -q tests/test_gpu.py < /dev/null > $R/test_gpu.txt 2>&1
tail -3 $R/test_gpu.txt >> $R/progress
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
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
  cp traces/step_profile_rank0.json.gz $R/trace_$1.json.gz; rm -rf traces
}
for k in 1 2 3; do profile main$k main; profile wg$k wg; done
cp scratch/train_gpt_wg.py train_gpt.py
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
run main 0; run wg 0; run main 1; run wg 1
python3 records/ab.py $R/main_x2 $R/wg_x2 >> $R/progress 2>&1
echo "=== all done $(date +%T)" >> $R/progress
