#!/bin/bash
# Next session (17), one call on 2 x H100 of one host, written in session 16 and not run. Start it with setsid from
# the repository root (it copies the tree to /tmp/gt first) and poll with collect.sh. Before:
#   git show main:train_gpt.py > scratch/train_gpt_main.py
#   git show s17-base:train_gpt.py > scratch/train_gpt_base.py       (main + adam-overlap + ngram-group)
#   git show s17-stack:train_gpt.py > scratch/train_gpt_stack.py    (base + NorMuon's update compiled, static shapes)
#   the tree on the device is s17-stack (its tests); copy ../shared/proxy-data/*.xz into .proxy/;
#   carry [".proxy", "scratch"]; cp next_s17.sh next_s17_decide.py (from this folder) and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch (kind nvidia-h100-x2): cp scratch/next_s17.sh /tmp/s17.sh; setsid nohup bash /tmp/s17.sh > /tmp/s17.log 2>&1
#   < /dev/null & sleep 2; bash scratch/collect.sh 560 "tests done\|all done" /tmp/s17.log; then poll (the machine
#   idles back 30 s after a call) with collect.sh 590 and the patterns "=== main on 2", "=== step_profile", "all done".
# Rules, fixed before the runs:
#  1. the stack's GPU tests of NorMuon must pass; if they fail the call stops (nothing else is worth its time).
#  2. one H100 (GPU 0 alone), one run after another, 185 + 3 steps: main at seeds 0 and 1, then the stack at seeds
#     0, 1 and 2 (its one-H100 record). Each arm its own compile caches, empty at first.
#  3. the one-GPU A/B (next_s17_decide.py 1): the stack's seeds 0 and 1 against main's. It passes if the stack's
#     mean time is below main's by more than twice the larger seed spread of the two arms and its mean loss not
#     above main's by more than 3 mn. On one GPU the stack differs from main in NorMuon's compiled update alone
#     (adam-overlap and ngram-group do nothing there but reorder a step's work).
#  4. both GPUs (torchrun): main at seeds 0 and 1; then, if rule 3 passed, the stack at seeds 0, 1 and 2 (its
#     2-GPU record), else base (main + adam-overlap + ngram-group) at seeds 0 and 1. No more runs whatever the
#     outcome.
#  5. the 2-GPU A/B (next_s17_decide.py 2), the same rule as 3 for the arm that ran. The stack is merged if rules 1,
#     3 and 5 pass; base is merged if rule 5 passes for it. The stack's records (records/summarize.py, target
#     1.9004) stand if it is merged; issue 35's bar: the 2-GPU record at most 0.52 x the one-H100 record.
#  6. then step_profile of the arm that ran on 2 GPUs, at --batch_tokens 98304, traces kept.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --scheduled_steps 185 --extension_steps 3'
( time python3 -m pytest -q -p no:cacheprovider --durations 5 tests/test_gpu.py -k normuon ) > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
summary=$(grep -E 'passed|failed|error' $R/test_gpu.out | tail -1)  # pytest's last line; the durations name tests
{ [[ $summary == *passed* ]] && [[ $summary != *failed* ]] && [[ $summary != *error* ]]; } ||
  { echo "=== all done: stack tests failed, stopped $(date +%T)" >> $R/progress; exit 1; }
arm_runs () {  # arm, GPUs, runs
  echo "=== $1 on $2 GPU(s), $3 runs $(date +%T)" >> $R/progress
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$1 TRITON_CACHE_DIR=/tmp/tri_$1 timeout 560 python3 benchmarks/proxy_record.py \
    --runs $3 --gpus $2 --out $R/$1_x$2 --script scratch/train_gpt_$1.py --compile_cache /tmp/cc_$1 \
    $T < /dev/null > $R/$1_x$2.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1_x$2/*.txt | cut -f1 | cut -c1-240 >> $R/progress
  python3 records/summarize.py $R/$1_x$2 --target 1.9004 2>&1 | grep -E 'p < |p >=|training time' >> $R/progress
}
export CUDA_VISIBLE_DEVICES=0
arm_runs main 1 2
arm_runs stack 1 3
export CUDA_VISIBLE_DEVICES=0,1
python3 scratch/next_s17_decide.py $R 1 >> $R/progress 2>&1 && second=stack || second=base
arm_runs main 2 2
arm_runs $second 2 $([ $second = stack ] && echo 3 || echo 2)
python3 scratch/next_s17_decide.py $R 2 >> $R/progress 2>&1
echo "=== step_profile $second 98304 $(date +%T)" >> $R/progress
cp scratch/train_gpt_$second.py train_gpt.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$second TRITON_CACHE_DIR=/tmp/tri_$second timeout 300 torchrun --standalone \
  --nproc_per_node 2 benchmarks/step_profile.py --train_files "data/proxy/proxy_train_*.bin" \
  --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files --batch_tokens 98304 \
  --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy < /dev/null > $R/profile_$second.out 2>&1
mkdir -p $R/traces; cp traces/*.json.gz $R/traces/ 2>> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
