#!/bin/bash
# Next session (16), one call on 2 x H100 of one host, written in session 15 and not run. Start it with setsid from
# the repository root (it copies the tree to /tmp/gt first) and poll with collect.sh (log /tmp/s16.log). Before:
#   git show main:train_gpt.py > scratch/train_gpt_main.py; git show s16-stack:train_gpt.py > scratch/train_gpt_stack.py
#   (s16-stack = main + adam-overlap + the n-gram exchanges' own group + normuon-compiled: s16_stack.patch here);
#   the tree on the device is s16-stack (its tests); copy ../shared/proxy-data/*.xz into .proxy/;
#   carry [".proxy", "scratch"]; cp scratch/next_s16.sh scratch/next_s16_decide.py from this folder.
# Rules, fixed before the runs:
#  1. the stack's GPU tests (normuon, adam, sharded_ngram, row_adam, gradient_events) must pass for it to be merged;
#  2. one H100 (GPU 0 alone), one run after another, 185 + 3 steps: main at seeds 0 and 1, then the stack's record,
#     3 runs at seeds 0, 1 and 2; then both GPUs (torchrun) likewise: main at seeds 0 and 1, the stack's record at
#     seeds 0, 1 and 2. Each arm has its own compile caches, empty at first (each arm's first run is its cold start
#     on one GPU; its first 2-GPU run starts from its one-GPU cache). No more runs whatever the outcome.
#  3. the A/B (next_s16_decide.py): on each GPU count the stack's seeds 0 and 1 against main's. The stack is merged
#     if on both counts its mean time is below main's by more than twice the larger seed spread of the two arms and
#     its mean loss not above main's by more than 3 mn, and rule 1 holds;
#  4. the records (records/summarize.py, target 1.9004) stand if the stack is merged; issue 35's bar: the 2-GPU
#     record's mean training time at most 0.52 x the one-H100 record's;
#  5. then step_profile of the stack at --batch_tokens 98304 on both GPUs, traces kept (exposed communication,
#     NorMuon's kernels), if the device time allows (about 200 s).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy --scheduled_steps 185 --extension_steps 3'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    -k "normuon or adam or sharded_ngram or row_adam or gradient_events" ) > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
grep -qE 'failed|error' $R/test_gpu.out && { echo "=== all done: stack tests failed, stopped $(date +%T)" >> $R/progress; exit 1; }
for gpus in 1 2; do
  export CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1)
  for arm in main stack; do
    runs=$([ $arm = main ] && echo 2 || echo 3)
    echo "=== $arm on $gpus GPU(s), $runs runs $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 560 python3 benchmarks/proxy_record.py \
      --runs $runs --gpus $gpus --out $R/${arm}_x$gpus --script scratch/train_gpt_$arm.py --compile_cache /tmp/cc_$arm \
      $T < /dev/null > $R/${arm}_x$gpus.out 2>&1
    grep -h '^startup\|^final val_loss' $R/${arm}_x$gpus/*.txt | cut -f1 | cut -c1-240 >> $R/progress
    python3 records/summarize.py $R/${arm}_x$gpus --target 1.9004 2>&1 | grep -E 'p < |p >=|training time' >> $R/progress
  done
done
unset CUDA_VISIBLE_DEVICES
python3 scratch/next_s16_decide.py $R >> $R/progress 2>&1
echo "=== step_profile stack 98304 $(date +%T)" >> $R/progress
cp scratch/train_gpt_stack.py train_gpt.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_stack TRITON_CACHE_DIR=/tmp/tri_stack timeout 300 torchrun --standalone \
  --nproc_per_node 2 benchmarks/step_profile.py --train_files "data/proxy/proxy_train_*.bin" \
  --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files --batch_tokens 98304 \
  --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy < /dev/null > $R/profile_stack_98304.out 2>&1
mkdir -p $R/traces; cp traces/*.json.gz $R/traces/ 2>> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
