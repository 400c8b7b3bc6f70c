#!/bin/bash
# Next session (20), 2 GPUs of one host (ask nvidia-h100-x2), written in session 19 and not run. Its forms are
# those that ran in session 19's call 2 (call2_overlap.sh) and session 13's step_profile call. Before:
#   the device tree is main; .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"];
#   cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s20.sh /tmp/s20.sh; setsid nohup bash /tmp/s20.sh > /tmp/s20.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== record_x2\|all done" /tmp/s20.log; then collect.sh 590 with
#   "=== profile\|all done", then "all done" (the machine idles back 30 s after a call: poll again at once).
#   Give the machine back after. About 800 s on H100s, 250 s on H200s.
# Parts, in order, fixed before the runs:
#  1. only on H100s (issue 35's 2-GPU record names them; session 19 got H200s twice): main's records, 3 runs each
#     at seeds 0, 1 and 2, 185 + 3 steps, first on GPU 0 alone from empty compile caches (its first start is
#     cold), then on both GPUs with copies of those caches. They stand or fail as run (records/summarize.py);
#     no runs are added. The bar: accepted at 1.9004, the 2-GPU mean at most 0.52 x the 1-GPU mean. The 2-GPU
#     runs' start-ups are issue 35's warm start (bar: under 20 s).
#  2. step_profile of main at the 8-GPU per-rank shape (--batch_tokens 98304, one micro-batch per rank per step)
#     on both GPUs, every stage; rank 0's trace of stage 0 and its exposed gaps (exposed_gaps.py). Issue 35's bar:
#     GPU busy at least 97 % and exposed communication under 1 % in every stage. The README's table (session 15:
#     exposed 3.0 / 2.1 / 1.5 / 1.5 / 1.4 / 1.6 %) predates the optimizers' two halves.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
runs () {  # name, processes, visible GPUs, runs (seeds 0, 1, ...), cache (/tmp/cc_$5)
  echo "=== $1 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$3 timeout 560 python3 benchmarks/proxy_record.py --runs $4 --gpus $2 --out $R/$1 \
    --compile_cache /tmp/cc_$5 $T --scheduled_steps 185 --extension_steps 3 < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
rm -rf /tmp/ind /tmp/tri /tmp/cc_*
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  runs record_x1 1 0 3 x1
  cp -r /tmp/cc_x1 /tmp/cc_x2
  runs record_x2 2 0,1 3 x2
  for arm in record_x1 record_x2; do python3 records/summarize.py $R/$arm --target 1.9004 >> $R/progress 2>&1; done
  python3 - $R/record_x2 $R/record_x1 >> $R/progress <<'PY'
import statistics, sys
sys.path.insert(0, "records")
from ab import runs_by_seed
two, one = (statistics.mean(t for _, t in runs_by_seed(folder).values()) for folder in sys.argv[1:])
print(f"ratio of the records' means, 2 GPUs to 1: {two / one:.4f}")
PY
else
  echo "=== not H100s: no records" >> $R/progress
fi
echo "=== profile at 98304 $(date +%T)" >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
CUDA_VISIBLE_DEVICES=0,1 timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
  --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
  --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 $T < /dev/null > $R/profile_98304.out 2>&1
grep -A8 "^| stage | windows" $R/profile_98304.out >> $R/progress
mkdir -p $R/traces; cp traces/step_profile_rank0.json.gz $R/traces/ 2>/dev/null
python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces/step_profile_rank0.json.gz \
  > $R/gaps_98304_stage0.md 2>&1
tail -12 $R/gaps_98304_stage0.md >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
