#!/bin/bash
# Next session (20), 2 GPUs of one host (ask nvidia-h100-x2), written in session 19 and not run. Its forms are
# those that ran in session 19's call 2 (call2_overlap.sh) and session 13's step_profile call. Before:
#   the device tree is s19-isolate (its tests hold the isolation's GPU test);
#   git show main:train_gpt.py > scratch/train_gpt_main.py; git show s19-isolate:train_gpt.py > scratch/train_gpt_isolate.py
#   .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s20.sh /tmp/s20.sh; setsid nohup bash /tmp/s20.sh > /tmp/s20.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== isolate_x2\|all done" /tmp/s20.log; then collect.sh 590 with
#   "=== part 3\|=== not H100s\|all done", "=== record_x2\|=== profile\|all done", "=== profile\|all done", then
#   "all done" (the machine idles back 30 s after a call: poll again at once). Give the machine back after.
#   About 1,250 s on H100s, 1,000 s on H200s.
# Parts, in order, fixed before the runs:
#  1. the GPU test of the isolation (each rank one GPU, cuda:0, NCCL over both). A failure stops the call.
#  2. main, then isolate (each rank sees its own GPU alone as cuda:0, one compile cache for any number of GPUs,
#     the ranks sharing a cold start's helpers) on both GPUs, seeds 0 and 1, 185 + 3 steps, each arm from empty
#     compile caches: its first start is cold, its second warm (issue 35's bars: under 60 s and under 20 s).
#     isolate is kept if records/ab.py passes it against main, or if its loss and time are within the rule's
#     bounds the other way (mean time at most twice the larger seed spread slower, loss at most +3 mn) and its
#     cold start is at least 5 s shorter: a start-up change must not cost step time.
#  3. on H100s (issue 35's 2-GPU record names them; session 19 got H200s twice): the kept arm's records, 3
#     runs each at seeds 0, 1 and 2, 185 + 3 steps, first on GPU 0 alone from empty compile caches, then on both
#     GPUs with copies of those caches (with isolate: a start from a one-GPU run's cache). They stand or fail as
#     run (records/summarize.py); no runs are added. The bar: accepted at 1.9004, the 2-GPU mean at most 0.52 x
#     the 1-GPU mean. On H200s instead: step_profile of the kept arm at the proxy's batch, on GPU 0 alone and on
#     both, stage 0's rank-0 traces compared region by region (kernel_regions.py), as session 18 did on H100s
#     before NorMuon's compiled application and the two halves: where stage 0 still scales worst (0.532x).
#  4. step_profile of the kept arm at the 8-GPU per-rank shape (--batch_tokens 98304) on both GPUs, every stage;
#     rank 0's trace of stage 0 and its exposed gaps. Issue 35's bar: GPU busy at least 97 % and exposed
#     communication under 1 % in every stage (the README's table, session 15: 3.0 / 2.1 / 1.5 / 1.5 / 1.4 / 1.6 %,
#     predates the optimizers' two halves).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
echo "=== GPU test $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k own_gpu \
  > $R/test_gpu.txt 2>&1
status=$?
tail -1 $R/test_gpu.txt >> $R/progress
if [ $status != 0 ]; then echo "=== all done: the GPU test failed $(date +%T)" >> $R/progress; exit 1; fi
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
runs () {  # name, processes, visible GPUs, runs (seeds 0, 1, ...), script (scratch/train_gpt_$5.py), cache
  echo "=== $1 $(date +%T)" >> $R/progress  # ($6: /tmp/cc_$6, its Inductor and Triton caches inside)
  CUDA_VISIBLE_DEVICES=$3 timeout 560 python3 benchmarks/proxy_record.py --runs $4 --gpus $2 --out $R/$1 \
    --script scratch/train_gpt_$5.py --compile_cache /tmp/cc_$6 $T --scheduled_steps 185 --extension_steps 3 \
    < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR  # each --compile_cache holds its own: an empty one is a cold start
rm -rf /tmp/cc_*
runs main_x2 2 0,1 2 main main_x2
runs isolate_x2 2 0,1 2 isolate isolate_x2
kept=main
if python3 records/ab.py $R/main_x2 $R/isolate_x2 >> $R/progress 2>&1; then
  kept=isolate
elif python3 - $R/main_x2 $R/isolate_x2 >> $R/progress 2>&1 <<'PY'
import re, statistics, sys
from pathlib import Path
sys.path.insert(0, "records")
from ab import runs_by_seed
main, isolate = (runs_by_seed(folder) for folder in sys.argv[1:])
spread = max(max(t for _, t in arm.values()) - min(t for _, t in arm.values()) for arm in (main, isolate))
slower = statistics.mean(t for _, t in isolate.values()) - statistics.mean(t for _, t in main.values())
loss = statistics.mean(l for l, _ in isolate.values()) - statistics.mean(l for l, _ in main.values())
def cold(folder):  # the first run's start-up, the cold one
    first = sorted(Path(folder).glob("*.txt"))[0].read_text()
    return float(re.search(r"^startup: .* total ([\d.]+)", first, re.M)[1])
gain = cold(sys.argv[1]) - cold(sys.argv[2])
print(f"isolate: {slower:+.3f} s a run (allowed {2 * spread:.3f}), loss {loss:+.4f}, cold start {gain:.1f} s shorter")
sys.exit(0 if slower <= 2 * spread and loss <= 0.003 and gain >= 5 else 1)
PY
then
  kept=isolate
fi
echo "kept: $kept" >> $R/progress
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  echo "=== part 3, the records of $kept $(date +%T)" >> $R/progress
  runs record_x1 1 0 3 $kept record
  runs record_x2 2 0,1 3 $kept record
  for arm in record_x1 record_x2; do python3 records/summarize.py $R/$arm --target 1.9004 >> $R/progress 2>&1; done
  python3 - $R/record_x2 $R/record_x1 >> $R/progress <<'PY'
import statistics, sys
sys.path.insert(0, "records")
from ab import runs_by_seed
two, one = (statistics.mean(t for _, t in runs_by_seed(folder).values()) for folder in sys.argv[1:])
print(f"ratio of the records' means, 2 GPUs to 1: {two / one:.4f}")
PY
else  # instead: where two GPUs still lose in stage 0 at the proxy's batch, as session 18 measured on H100s
  echo "=== not H100s: no records; stage 0's profiles at the proxy's batch, $kept $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$kept.py train_gpt.py
  for gpus in 1 2; do
    rm -rf traces
    CUDA_VISIBLE_DEVICES=$([ $gpus = 1 ] && echo 0 || echo 0,1) TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s0 \
      TRITON_CACHE_DIR=/tmp/tri_s0 timeout 400 torchrun --standalone --nproc_per_node $gpus benchmarks/step_profile.py \
      --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
      --val_tokens 1835008 --trace_stage 0 $T < /dev/null > $R/profile_proxy_x$gpus.out 2>&1
    mkdir -p $R/traces_proxy_x$gpus; cp traces/step_profile_rank0.json.gz $R/traces_proxy_x$gpus/ 2>/dev/null
    grep -A3 "^| stage | windows" $R/profile_proxy_x$gpus.out >> $R/progress
  done
  python3 experiments/2026-11-27_s18_normuon_apply/kernel_regions.py $R/traces_proxy_x1/step_profile_rank0.json.gz \
    $R/traces_proxy_x2/step_profile_rank0.json.gz > $R/kernel_regions_stage0.md 2>&1
  head -12 $R/kernel_regions_stage0.md >> $R/progress
  rm -rf traces
fi
echo "=== profile at 98304, $kept $(date +%T)" >> $R/progress
cp scratch/train_gpt_$kept.py train_gpt.py
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p  # step_profile reads no --compile_cache
CUDA_VISIBLE_DEVICES=0,1 timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
  --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
  --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T \
  < /dev/null > $R/profile_98304.out 2>&1
grep -A8 "^| stage | windows" $R/profile_98304.out >> $R/progress
mkdir -p $R/traces; cp traces/step_profile_rank0.json.gz $R/traces/ 2>/dev/null
python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces/step_profile_rank0.json.gz \
  > $R/gaps_98304_stage0.md 2>&1
tail -12 $R/gaps_98304_stage0.md >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
