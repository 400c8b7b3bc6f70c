#!/bin/bash
# Next session (28), written in session 27 and NOT RUN: where a warm start's time goes, and whether Dynamo's own
# cache (torch._dynamo.config.caching_precompile, TORCH_CACHING_PRECOMPILE=1) skips its tracing on torch 2.11.
# Issue 35's bars: on 2 GPUs under 60 s cold and under 20 s warm. Session 27's 2 x H100 host read 86-95 s cold and
# 34.5-37.8 s warm; the warm start is the floor of both.
#   PART=warm (one H100, nvidia-h100-x1, about 6 minutes): each start through benchmarks/startup_profile.py (Dynamo's
#     compile phases, each frame it compiled and when, the caches' counters; --sample: where the main thread's time
#     went, by function, inside the warm-up), and the helpers' counters from sitecustomize.py on PYTHONPATH:
#       cold     an empty cache
#       sampled  warm, with --sample (every 5 ms)
#       plain    warm, no sampler
#       pcold    TORCH_CACHING_PRECOMPILE=1, an empty cache of its own
#       pwarm    TORCH_CACHING_PRECOMPILE=1, warm on pcold's cache
#   PART=dcache (one H100, nvidia-h100-x1, about 6 minutes): dynamo_cache_probe.py (its docstring says what it patches
#     and why) at the default model and the proxy flags: "save" with and without caching_precompile at once, each
#     into its own empty cache (they compile every stage's regions, one process each), then "load" from each, one
#     after the other. On this project's CPU (torch 2.13, the smoke model, 30 graphs) the load took 7.4 s with
#     Dynamo's cache against 13.4 s without (Dynamo 2.6 against 9.2 s), the same losses.
#   PART=dwarm (one H100, about 6 minutes; only if PART=dcache's rule passed): branch s27-dynamo-cache (Dynamo's
#     cache built into train_gpt.py, NOT run on a GPU: the probe's three patches, and the warm-up traces each step's
#     regions first with the gradients set aside) against main: main cold, branch cold, then main warm, branch
#     warm, twice; each arm its own cache. First the branch's GPU tests of compilation (its new one: a second
#     process loads every frame from Dynamo's cache). Needs scratch/train_gpt_dcache.py (git show
#     s27-dynamo-cache:train_gpt.py) and scratch/branch/ (mkdir scratch/branch; git archive s27-dynamo-cache
#     train_gpt.py tests data | tar x -C scratch/branch).
#   PART=warm2 (2 x H100, nvidia-h100-x2, about 4 minutes): cold, sampled and plain as above on both GPUs (torchrun;
#     rank 0's summary is kept).
#   Every part first runs the validation mask's GPU test, edited in session 26 (a4eab68: the receiving thread hands
#     apply a Future) and not run on a GPU since: pytest tests/test_gpu.py -k validation_mask. Its result goes in
#     the note whatever it is; a failure is mended before anything else is merged.
# Order (about 26 minutes in all, of 30): PART=dcache (its first step runs the mask's test); PART=dwarm if its rule
#   passed, else PART=warm; then PART=warm2 with what time is left.
# Before: the device tree is main; cp this script, sitecustomize.py and counters_table.py into scratch/ (mkdir
#   scratch/counters; sitecustomize.py goes there) and ../2026-11-27_h100x2_stack_ab_records/collect.sh into
#   scratch/. The corpus: .proxyB/ alone is enough (start-up only; --repeat_train_files).
# Launch: mkdir -p .proxy; cp .proxyB/* .proxy/; cp scratch/next_s28.sh /tmp/s28.sh;
#   PART=dcache setsid nohup bash /tmp/s28.sh > /tmp/s28.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "s28 done" /tmp/s28.log
# Rules, fixed before the runs:
#  - sampler: its shares stand if the sampled warm start's total is within 2 s of the plain one's; otherwise the
#    note gives them as biased. The note names the functions with the most inclusive seconds inside warm_up
#    (Dynamo's tracing, guards, the AOTAutograd and FX cache loads, Triton's kernel loads, CUDA graph captures, the
#    warm-up steps themselves).
#  - dcache: Dynamo's cache is worth building into train_gpt.py (the three patches of the probe, and every region
#    traced before the first backward pass with the gradients set aside) if the cached load shows Dynamo cache hits
#    and no graph traced (no stats.unique_graphs), takes at least 5 s less "in all" than the plain load, and gives
#    the same losses (to 1e-3 relative). PART=warm's pcold/pwarm (the environment variable alone, train_gpt.py as
#    it is) are expected to fail on the custom ops at the first compile, as on the CPU: that failure is no verdict.
#  - dwarm: s27-dynamo-cache is merged if its GPU tests pass, both its warm starts are at least 5 s shorter than
#    main's, its cold start at most 5 s longer (the trace passes and the guards' pickling are new work there), its final val losses within
#    0.002 of main's, and no traceback or warning line in its output. Then PART=warm2 on the branch, for the bars.
#  - caching_precompile: worth building into train_gpt.py (set in compile_regions) if pwarm's counters show Dynamo
#    cache hits (dynamo_cache.*hit*), its start-up total is at least 5 s shorter than plain's, and its final val
#    loss is within 0.002 of plain's. A load error or no hits: dropped, with the error in the note.
PART=${PART:-warm}
R=/tmp/res; rm -rf $R /tmp/gt /tmp/c_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/gt/scratch/counters
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
start () {  # name, script, compile cache, GPUs, then flags for the script; the helpers' counters go to COUNTERS_OUT
  local name=$1 script=$2 cache=$3 gpus=$4
  shift 4
  echo "=== $name $(date +%T)" >> $R/progress
  rm -rf logs
  export COUNTERS_OUT=$R/counters_$name.jsonl
  local launch=(python3)
  [ $gpus = 2 ] && launch=(torchrun --standalone --nproc_per_node 2 --tee 3)  # --tee: each line names its rank
  timeout 300 "${launch[@]}" $script "$@" --compile_cache $cache "${FLAGS[@]}" < /dev/null > $R/$name.out 2>&1
  grep -h "^startup\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
  grep -h "Traceback\|Error\|Warning" $R/$name.out | sort | uniq -c | head -5 >> $R/progress
  # startup_profile.py's summary (rank 0's under torchrun) and the helpers' counters
  grep -h "frames [0-9]\|^.*counters \|sampled warm_up inclusive" $R/$name.out | grep -v "1\]:" | head -30 >> $R/progress
  cp logs/*.txt $R/$name.log 2>/dev/null
  [ -f $COUNTERS_OUT ] && python3 scratch/counters_table.py $COUNTERS_OUT >> $R/progress 2>&1
}
echo "=== the mask's GPU test $(date +%T)" >> $R/progress
PYTHONPATH= timeout 120 python3 -m pytest -q tests/test_gpu.py -k validation_mask > $R/test_gpu.txt 2>&1
tail -2 $R/test_gpu.txt >> $R/progress
if [ $PART = dcache ]; then
  PROBE=experiments/2026-11-27_s27_split_compile/dynamo_cache_probe.py
  for arm in cached plain; do
    extra=; [ $arm = plain ] && extra=--plain
    timeout 450 python3 $PROBE save /tmp/c_$arm $extra "${FLAGS[@]}" < /dev/null > $R/save_$arm.out 2>&1 &
  done
  wait
  for arm in cached plain; do
    extra=; [ $arm = plain ] && extra=--plain
    timeout 120 python3 $PROBE load /tmp/c_$arm $extra "${FLAGS[@]}" < /dev/null > $R/load_$arm.out 2>&1
  done
  for out in $R/save_*.out $R/load_*.out; do grep -h "^save\|^load\|Error" $out | tail -2 >> $R/progress; done
  echo "=== s28 done $(date +%T)" >> $R/progress
  exit
fi
if [ $PART = dwarm ]; then
  cp train_gpt.py scratch/train_gpt_main.py
  (cd scratch/branch && PYTHONPATH= timeout 500 python3 -m pytest -q tests/test_gpu.py -k "dynamo or compiled_model or graphed" \
    > $R/branch_test_gpu.txt 2>&1; tail -2 $R/branch_test_gpu.txt >> $R/progress)
  start main_cold scratch/train_gpt_main.py /tmp/c_main 1
  start dcache_cold scratch/train_gpt_dcache.py /tmp/c_dcache 1
  for round in 1 2; do
    start main_warm$round scratch/train_gpt_main.py /tmp/c_main 1
    start dcache_warm$round scratch/train_gpt_dcache.py /tmp/c_dcache 1
  done
  echo "=== s28 done $(date +%T)" >> $R/progress
  exit
fi
GPUS=1; [ $PART = warm2 ] && GPUS=2
PROFILE=benchmarks/startup_profile.py  # every start through it: see its docstring on caches and bytecode
export PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode
start cold $PROFILE /tmp/c_main $GPUS
start sampled $PROFILE /tmp/c_main $GPUS --sample
start plain $PROFILE /tmp/c_main $GPUS
if [ $PART = warm ]; then
  export TORCH_CACHING_PRECOMPILE=1
  start pcold $PROFILE /tmp/c_precompile 1
  start pwarm $PROFILE /tmp/c_precompile 1
  unset TORCH_CACHING_PRECOMPILE
fi
echo "=== s28 done $(date +%T)" >> $R/progress
