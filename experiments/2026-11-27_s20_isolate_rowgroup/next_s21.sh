#!/bin/bash
# Next session (21), 2 GPUs of one host (ask nvidia-h100-x2), written in session 20 and not run. Its forms are those
# that ran in session 20 (../2026-11-27_s19_overlap/next_s20.sh, call2_rowgroup.sh). Before:
#   the device tree is main; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   git show s20-rowgroup:train_gpt.py > scratch/train_gpt_rowgroup.py;
#   .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s21.sh /tmp/s21.sh; setsid nohup bash /tmp/s21.sh > /tmp/s21.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== rowgroup_x2\|all done" /tmp/s21.log; then collect.sh 590 with
#   "=== part 3\|=== not H100s\|all done", "=== record_x2\|=== profile\|all done", "=== profile\|all done",
#   "=== compile times\|all done", "=== caching precompile\|all done", then "all done" (the machine idles back
#   30 s after a call: poll again at once). Give the machine back after. About 1,400 s on H100s, 850 s on H200s.
# Parts, in order, fixed before the runs:
#  1. main, then rowgroup (the n-gram exchanges on an NCCL group of their own) on both GPUs, seeds 0 and 1, 185 + 3
#     steps, one compile cache for both arms (their compiled graphs are the same; main's first start is cold).
#     rowgroup is kept if records/ab.py passes it against main. The rule's other way (a tie on time and loss)
#     does not keep it: session 17's "base", which had the same group among other changes, was +0.39 %.
#  2. on H100s (issue 35's 2-GPU record names them; sessions 19 and 20 got H200s): the kept arm's records, 3 runs
#     each at seeds 0, 1 and 2, 185 + 3 steps, first on GPU 0 alone from an empty compile cache, then on both GPUs
#     from that cache. They stand or fail as run (records/summarize.py); no runs are added. The bar: accepted at
#     1.9004, the 2-GPU mean at most 0.52 x the 1-GPU mean. On H200s: no records.
#  3. step_profile of the kept arm at the 8-GPU per-rank shape (--batch_tokens 98304) on both GPUs, every stage,
#     with the new "in waits" column; rank 0's trace of stage 0, its exposed gaps and kernel counts. Busy, exposed
#     and gaps are now measured from the third profiled step on (measured_from, first GPU run here): stage 0's busy
#     should read about 0.9 points higher than session 20's for that alone; "train_step" ranges in the trace.
#  4. where a warm 2-GPU start spends its time (issue 35's bar: under 20 s; 29.7-29.8 s in session 20): one more
#     run of the kept arm (seed 0) from part 1's cache under benchmarks/startup_profile.py, which prints
#     torch._dynamo's compile times per phase on each rank, the kernels autotuned and the caches' counters.
#  5. if time is left: two runs (seeds 0, 1) of the kept arm on both GPUs from a copy of part 1's cache with
#     TORCH_CACHING_PRECOMPILE=1 (torch._dynamo.config.caching_precompile, experimental: Dynamo's own cache, so
#     that a warm start need not trace again). The first fills it, the second shows what a warm start then costs;
#     compare the startup lines with part 1's warm starts. A crash here says it does not work with this script.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
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
runs main_x2 2 0,1 2 main ab
runs rowgroup_x2 2 0,1 2 rowgroup ab
kept=main
if python3 records/ab.py $R/main_x2 $R/rowgroup_x2 >> $R/progress 2>&1; then kept=rowgroup; fi
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
else
  echo "=== not H100s: no records $(date +%T)" >> $R/progress
fi
echo "=== profile at 98304, $kept $(date +%T)" >> $R/progress
cp scratch/train_gpt_$kept.py train_gpt.py
CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p timeout 400 \
  torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
  --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
  --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T \
  < /dev/null > $R/profile_98304.out 2>&1
grep -A9 "^| stage | windows" $R/profile_98304.out >> $R/progress
grep -m2 "^note:" $R/profile_98304.out >> $R/progress  # measured_from fell back to every profiled step
mkdir -p $R/traces; cp traces/step_profile_rank0.json.gz $R/traces/ 2>/dev/null
python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces/step_profile_rank0.json.gz \
  > $R/gaps_98304_stage0.md 2>&1
python3 experiments/2026-11-27_s20_isolate_rowgroup/kernel_counts.py $R/traces/step_profile_rank0.json.gz \
  > $R/kernel_counts_98304_stage0.md 2>&1
head -7 $R/kernel_counts_98304_stage0.md >> $R/progress
rm -rf traces
echo "=== compile times of a warm 2-GPU start, $kept $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 benchmarks/proxy_record.py --runs 1 --gpus 2 --out $R/times_x2 \
  --script benchmarks/startup_profile.py --compile_cache /tmp/cc_ab $T --scheduled_steps 185 --extension_steps 3 \
  < /dev/null > $R/times_x2.out 2>&1  # startup_profile runs train_gpt.py, the kept arm's since part 3
grep -h '^startup' $R/times_x2/*.txt | cut -c1-240 >> $R/progress
grep -m1 -A40 "TorchDynamo compilation metrics" $R/times_x2.out >> $R/progress
echo "=== caching precompile, $kept $(date +%T)" >> $R/progress
cp -r /tmp/cc_ab /tmp/cc_pc
export TORCH_CACHING_PRECOMPILE=1
runs precompile_x2 2 0,1 2 $kept pc
unset TORCH_CACHING_PRECOMPILE
tail -3 $R/precompile_x2.out | cut -c1-300 >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
