#!/bin/bash
# Next session (29), written in session 28 and NOT RUN: Dynamo's cache (dynamo_cache.patch: branch s28-dynamo-cache
# at 1572ba3) proven on one H100, then measured on 2. Session 28's A/B ran it at 62d68a5; what came after (a cache
# part per GPU and apart for importers, cache_name; a load failure's error; one trace per variant) never ran on
# a GPU: PART=ab is its first run, and PART=x2 the first with two ranks on one compile cache.
# Before: git checkout -b s29-dynamo-cache main; git apply experiments/2026-11-28_s28_dynamo_cache/dynamo_cache.patch;
#   the CPU suite; commit. mkdir -p scratch/counters; cp this script, ../2026-11-27_s27_split_compile/counters_table.py
#   and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/, ../2026-11-27_s27_split_compile/
#   sitecustomize.py into scratch/counters/; git show main:train_gpt.py > scratch/train_gpt_main.py. Corpus: .proxyB/
#   alone (start-up only; --repeat_train_files); carry [".proxyB", "scratch"].
# Launch, on nvidia-h100-x2 (one machine for both parts: a fresh machine held about 240 s before its first command
#   began in session 28): mkdir -p .proxy; cp .proxyB/* .proxy/; cp scratch/next_s29.sh /tmp/s29.sh;
#   setsid nohup bash /tmp/s29.sh > /tmp/s29.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "s29 done" /tmp/s29.log      (then collect again at once, as often as it
#   takes: the machine idles back 30 s after a call). About 19 minutes of runs before the whole GPU suite, which
#   comes last and may not fit in the device time left; say so if it does not.
# PART=ab (GPU 0 alone, CUDA_VISIBLE_DEVICES=0):
#   1. the branch's GPU tests of compilation (timeout 480 s): the warm-start test (two smoke runs on one cache,
#      now with --warmup_steps 1), the compiled model against eager, the graphed micro-steps; last in the job
#      (after PART=x2 and PART=extra) the whole tests/test_gpu.py (timeout 500 s; its result goes in the note
#      whatever it is).
#   2. main cold, branch cold, then main warm, branch warm, twice (as session 28's s28b.sh).
# PART=x2 (both GPUs, after PART=ab in the same job): torchrun on both GPUs, the branch: cold, warm, warm; then main warm
#   once on its own cache after main cold (for the ratio). Issue 35's bars: under 60 s cold and under 20 s warm.
# PART=extra (GPU 0 alone, last, with what time is left; measures only): where the branch's warm start goes. Its
#   model phase took 8.0-8.9 s in session 28 (torch.compile loads the packages: 2,503 Triton kernels loaded, 1,656
#   more found in memory; Inductor hands each one to its worker processes when it has them). (1) a warm start of
#   the branch on PART=ab's cache with TORCHINDUCTOR_COMPILE_THREADS=1 (the kernels loaded in the process itself);
#   (2) benchmarks/startup_profile.py on the same cache: cold (an importer has its own part of a compile cache),
#   then warm with --sample (by function, inside the warm-up and over the run; the model phase is outside the
#   warm-up, so read the run's table).
# Rules, fixed before the runs:
#  - merge (PART=ab): the three GPU tests pass; both branch warm starts at least 5 s shorter than main's; its cold
#    start at most 5 s longer (main's first start on a fresh machine carries about 8-11 s of torch's bytecode
#    compile: compare "total" less "imports"); no traceback, warning or W-line in any branch output; and the mean
#    of the branch's three final val losses within 0.004 of main's mean (session 28: each arm's three starts spread
#    0.0022 and 0.0063 at 31 steps, so a 0.002 bar on single pairs was below run-to-run noise and failed on it).
#  - PART=x2 decides nothing; it measures the bars. If its warm start traces graphs (the log's "compile:" line)
#    or warns, the note says so and the branch's 2-GPU path is mended before any record.
# Session 29: only nvidia-h200 is lent, one GPU. PART=x2 cannot run (set PART=ab_extra). Order changed to have the
# merge rule's figures first: the A/B starts, then the three GPU tests, then PART=extra, then the rest of the suite.
PART=${PART:-all}
R=/tmp/res; rm -rf $R /tmp/gt /tmp/c_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
cp train_gpt.py scratch/train_gpt_dcache.py
start () {  # name, script, compile cache, GPUs; the helpers' counters go to COUNTERS_OUT
  echo "=== $1 $(date +%T)" >> $R/progress
  rm -rf logs
  export COUNTERS_OUT=$R/counters_$1.jsonl
  local launch=(python3)
  [ $4 = 2 ] && launch=(torchrun --standalone --nproc_per_node 2 --tee 3)
  PYTHONPATH=/tmp/gt/scratch/counters timeout 300 "${launch[@]}" $2 --compile_cache $3 "${FLAGS[@]}" < /dev/null \
    > $R/$1.out 2>&1
  grep -h "^startup\|^compile\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
  grep -h "Traceback\|Error\|Warning\|^W[0-9]\|\]:W[0-9]" $R/$1.out | sort | uniq -c | head -5 >> $R/progress
  cp logs/*.txt $R/$1.log 2>/dev/null
}
wants () { [ $PART = all ] || [[ $PART == *$1* ]]; }  # PART=all: ab, x2, extra, then the whole GPU suite
if wants ab; then
  export CUDA_VISIBLE_DEVICES=0
  start main_cold scratch/train_gpt_main.py /tmp/c_main 1
  start dcache_cold scratch/train_gpt_dcache.py /tmp/c_dcache 1
  for round in 1 2; do
    start main_warm$round scratch/train_gpt_main.py /tmp/c_main 1
    start dcache_warm$round scratch/train_gpt_dcache.py /tmp/c_dcache 1
  done
  echo "=== the branch's GPU tests $(date +%T)" >> $R/progress
  timeout 480 python3 -m pytest -q tests/test_gpu.py -k "dynamos_cache or compiled_model or graphed" \
    > $R/test_gpu.txt 2>&1
  tail -3 $R/test_gpu.txt >> $R/progress
  unset CUDA_VISIBLE_DEVICES
fi
if wants x2; then
  start dcache_cold2 scratch/train_gpt_dcache.py /tmp/c_dcache2 2  # caches of their own: GPU 0's part of
  start dcache_warm2a scratch/train_gpt_dcache.py /tmp/c_dcache2 2  # PART=ab's would make rank 0 warm
  start dcache_warm2b scratch/train_gpt_dcache.py /tmp/c_dcache2 2
  start main_cold2 scratch/train_gpt_main.py /tmp/c_main2 2
  start main_warm2 scratch/train_gpt_main.py /tmp/c_main2 2
fi
if wants extra; then
  export CUDA_VISIBLE_DEVICES=0
  TORCHINDUCTOR_COMPILE_THREADS=1 start dcache_warm_threads1 scratch/train_gpt_dcache.py /tmp/c_dcache 1
  PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode start profile_cold benchmarks/startup_profile.py /tmp/c_dcache 1
  echo "=== profile_warm_sampled $(date +%T)" >> $R/progress
  rm -rf logs
  PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode timeout 300 python3 benchmarks/startup_profile.py --sample \
    --compile_cache /tmp/c_dcache "${FLAGS[@]}" < /dev/null > $R/profile_warm_sampled.out 2>&1
  grep -h "^startup\|^compile" logs/*.txt | cut -f1 >> $R/progress
  grep "^sampled\|^compile_threads" $R/profile_warm_sampled.out | head -60 >> $R/progress
  unset CUDA_VISIBLE_DEVICES
fi
if wants ab; then
  echo "=== the whole GPU suite $(date +%T)" >> $R/progress
  timeout 420 python3 -m pytest -q tests/test_gpu.py -k "not (dynamos_cache or compiled_model or graphed)" \
    > $R/test_gpu_all.txt 2>&1  # one GPU here: the NCCL tests skip
  tail -3 $R/test_gpu_all.txt >> $R/progress
fi
echo "=== s29 done $(date +%T)" >> $R/progress
