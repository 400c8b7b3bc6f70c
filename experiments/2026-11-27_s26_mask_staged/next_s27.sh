#!/bin/bash
# Written in session 26, run in session 27 (../2026-11-27_s27_split_compile/README.md), which added PART=diag and
# PART=profile below (with ../2026-11-27_s27_split_compile/sitecustomize.py and counters_table.py). Three jobs for
# issue 35's start-up bars (2 GPUs: under 60 s cold, under 20 s warm; sessions 25-26's hosts read 101-106 s cold,
# 38-49 s warm, where session 23's read 72-80 and 25-32).
#   PART=split (one H100, nvidia-h100-x1, about 6 minutes): can stage 0's cold compile be split across processes by
#     region (split_compile_probe.py)? Four starts of train_gpt.py on short proxy runs, each with its own compile cache:
#       cold   an empty cache (the baseline), then warm: the same cache again
#       split  four probe processes at once fill an empty cache (before_attention | after_attention |
#              mix_and_mlp and the head, at stage 0's warm-up steps | the validation helper's work: the optimizers'
#              updates, which the first step would otherwise compile), then train_gpt.py starts on it
#       all    two probe processes at once fill an empty cache: every region at stage 0 (the serial reference) |
#              the validation helper's work; then train_gpt.py
#   PART=coldab (2 × H100, nvidia-h100-x2, about 12 minutes; only if PART=split's rule passed): branch s26-split-compile
#     (Precompiler splits stage 0 by region among three helpers, 3c9e509) against main, both GPUs (torchrun), short
#     proxy runs: main cold, split cold, main warm, split warm, then the four again, each arm its own caches
#     (emptied before each cold start).
#   PART=hosts (2 × H100, nvidia-h100-x2, about 6 minutes): host or code? Main's train_gpt.py against session 23's
#     (8416606, whose starts read 80 s cold and 29-32 s warm on another host), one after the other on this host:
#     each cold (its own empty cache), then warm, on both GPUs (torchrun), short proxy runs with the same flags.
# Before: the device tree is main; cp this script, split_compile_probe.py and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/; for PART=hosts also
#   git show 8416606:train_gpt.py > scratch/train_gpt_s23.py; for PART=coldab also cp train_gpt.py
#   scratch/train_gpt_main.py and git show s26-split-compile:train_gpt.py > scratch/train_gpt_split.py. The corpus
#   in two calls (next_s26.sh's header).
# Launch: mkdir -p .proxy; cp .proxyA/* .proxyB/* .proxy/; cp scratch/next_s27.sh /tmp/s27.sh;
#   PART=split setsid nohup bash /tmp/s27.sh > /tmp/s27.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "s27 done" /tmp/s27.log
# Rules, fixed before the runs:
#  - split: worth building into Precompiler (helpers that compile stage 0's regions while the training process
#    waits for them) if the split start's stage-0 warm-up is within 5 s of the warm start's (every region found in
#    the cache) and the four probes' time plus that warm-up is at least 15 s below the cold start's stage-0
#    warm-up. Otherwise the note says which failed: cache misses (the split start's stage 0 near the cold one's),
#    time (the parts no faster than "all"), or memory (a probe's peak).
#  - coldab: split is merged if its cold start (the log's start-up total) is at least 10 s shorter than main's in
#    both rounds, no helper failed (no "warning: precompile" line: six helpers a GPU at once may not fit in its
#    memory, which the split probe's peaks foretell), and its warm starts are within 2 s of main's (a warm start
#    starts no helper). Session 26's cold start suggests the later stages' helpers end before stage 0 does, but
#    their own times were never logged: if they take longer than the split stage 0, they bound the gain.
#  - hosts: the code explains the slower starts if main's cold and warm starts are each more than 10 % above
#    8416606's on this host; the host does if they are within 10 %.
PART=${PART:-split}
R=/tmp/res; rm -rf $R /tmp/gt /tmp/c_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
start () {  # name, compile cache, script, GPUs
  echo "=== $1 $(date +%T)" >> $R/progress
  rm -rf logs
  if [ "$4" = 2 ]; then
    timeout 300 torchrun --standalone --nproc_per_node 2 $3 --compile_cache $2 "${FLAGS[@]}" < /dev/null > $R/$1.out 2>&1
  else
    timeout 300 python3 $3 --compile_cache $2 "${FLAGS[@]}" < /dev/null > $R/$1.out 2>&1
  fi
  grep -h "^startup\|^precompile .*: ended\|^warning: precompile" logs/*.txt | cut -f1 >> $R/progress
  cp logs/*.txt $R/$1.log
}
probe () {  # compile cache, parts...
  for parts in "${@:2}"; do
    PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode timeout 300 python3 scratch/split_compile_probe.py $1 $parts "${FLAGS[@]}" \
      < /dev/null > $R/probe_${parts//,/+}.out 2>&1 &
  done
  wait
  for parts in "${@:2}"; do tail -1 $R/probe_${parts//,/+}.out >> $R/progress; done
}
if [ $PART = split ]; then
  start cold /tmp/c_cold train_gpt.py 1
  start warm /tmp/c_cold train_gpt.py 1
  echo "=== split: four probes at once $(date +%T)" >> $R/progress
  clock=$(date +%s%N); probe /tmp/c_split before_attention after_attention mix_and_mlp,head validation
  echo "the four probes: $(( ($(date +%s%N) - clock) / 1000000 )) ms" >> $R/progress
  start split /tmp/c_split train_gpt.py 1
  echo "=== all: two probes at once $(date +%T)" >> $R/progress
  clock=$(date +%s%N); probe /tmp/c_all all validation
  echo "the two probes: $(( ($(date +%s%N) - clock) / 1000000 )) ms" >> $R/progress
  start all /tmp/c_all train_gpt.py 1
elif [ $PART = coldab ]; then
  for round in 1 2; do
    for arm in main split; do rm -rf /tmp/c_$arm; start ${arm}_cold$round /tmp/c_$arm scratch/train_gpt_$arm.py 2; done
    for arm in main split; do start ${arm}_warm$round /tmp/c_$arm scratch/train_gpt_$arm.py 2; done
    grep -h "^warning: precompile" $R/*.log >> $R/progress
  done
elif [ $PART = diag ]; then
  # misses or contention? Each process's compile counters (scratch/counters/sitecustomize.py) per start
  export PYTHONPATH=/tmp/gt/scratch/counters
  export COUNTERS_OUT=$R/counters_probes.jsonl; clock=$(date +%s%N); probe /tmp/c_d all validation
  echo "the two probes: $(( ($(date +%s%N) - clock) / 1000000 )) ms" >> $R/progress
  export COUNTERS_OUT=$R/counters_all.jsonl; start all /tmp/c_d train_gpt.py 1
  export COUNTERS_OUT=$R/counters_warm.jsonl; start warm /tmp/c_d train_gpt.py 1
  python3 scratch/counters_table.py $R/counters_*.jsonl >> $R/progress
elif [ $PART = profile ]; then
  # where a warm start's 33 s go (one H100): a cold start fills the cache, then a warm start under cProfile
  export PYTHONPATH=/tmp/gt/scratch/counters
  export COUNTERS_OUT=$R/counters_cold.jsonl; start cold /tmp/c_p train_gpt.py 1
  export COUNTERS_OUT=$R/counters_warm.jsonl; echo "=== warm under cProfile $(date +%T)" >> $R/progress
  rm -rf logs; timeout 200 python3 -m cProfile -o $R/warm.prof train_gpt.py --compile_cache /tmp/c_p "${FLAGS[@]}" \
    < /dev/null > $R/warm.out 2>&1
  grep -h "^startup" logs/*.txt | cut -f1 >> $R/progress; cp logs/*.txt $R/warm.log
  python3 -c "import json; [print(json.loads(l)['compile_times']) for l in open('$R/counters_warm.jsonl')]" >> $R/progress
  python3 -c "import pstats; s = pstats.Stats('$R/warm.prof'); s.sort_stats('cumulative').print_stats(70); s.sort_stats('tottime').print_stats(40)" > $R/profile.txt 2>&1
  head -c 6000 $R/profile.txt >> $R/progress
else
  for arm in main s23; do
    script=train_gpt.py; [ $arm = s23 ] && script=scratch/train_gpt_s23.py
    start ${arm}_cold /tmp/c_$arm $script 2
    start ${arm}_warm /tmp/c_$arm $script 2
  done
fi
echo "=== s27 done $(date +%T)" >> $R/progress
