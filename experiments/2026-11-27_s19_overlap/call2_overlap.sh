#!/bin/bash
# Session 19's second call, 2 GPUs of one host (asked: nvidia-h100-x2). Before: the device tree is s19-overlap;
#   git show main:train_gpt.py > scratch/train_gpt_main.py; git show s19-overlap:train_gpt.py > scratch/train_gpt_overlap.py
#   .proxy/ holds ../shared/proxy-data/*.xz; carry [".proxy", "scratch"]; this script and collect.sh in scratch/.
# Launch: cp scratch/call2_overlap.sh /tmp/c2.sh; setsid nohup bash /tmp/c2.sh > /tmp/c2.log 2>&1 < /dev/null &
#   then collect.sh with "=== overlap_x2\|all done", "=== part 4\|all done", "=== record_x2\|all done", "all done".
# Parts, in order, fixed before the runs:
#  1. the GPU tests of the optimizers and of the sharded n-gram table over NCCL (RowAdam's exchange is now
#     asynchronous). A failure stops the call.
#  2. main on both GPUs (torchrun), seeds 0 and 1, 185 + 3 steps, from empty compile caches.
#  3. overlap (each optimizer's step in two halves: the n-gram rows' gradients travel while NorMuon and Adam
#     compute, their all-gathers while the rows are updated and the matrices stepped; NorMuon's parts in the
#     order their reductions started) on both GPUs, seeds 0 and 1, its caches copies of part 2's. Kept if
#     records/ab.py passes it against part 2's runs.
#  4. only if overlap is kept: its records, 3 runs each at seeds 0, 1 and 2, 185 + 3 steps, first on GPU 0 alone
#     (caches: copies of part 2's), then on both. They stand or fail as run (records/summarize.py); no runs are
#     added. Issue 35's bar: the 2-GPU mean at most 0.52 x the 1-GPU mean, on H100s.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
echo "=== GPU tests $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 -m pytest -q tests/test_gpu.py -k "normuon or adam or sharded_ngram" \
  > $R/test_gpu.txt 2>&1
status=$?
tail -1 $R/test_gpu.txt >> $R/progress
if [ $status != 0 ]; then echo "=== all done: the GPU tests failed $(date +%T)" >> $R/progress; exit 1; fi
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
runs () {  # name, processes, visible GPUs, runs (seeds 0, 1, ...), script (scratch/train_gpt_$5.py), cache (/tmp/cc_$6)
  echo "=== $1 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$3 timeout 560 python3 benchmarks/proxy_record.py --runs $4 --gpus $2 --out $R/$1 \
    --script scratch/train_gpt_$5.py --compile_cache /tmp/cc_$6 $T --scheduled_steps 185 --extension_steps 3 \
    < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
rm -rf /tmp/ind /tmp/tri /tmp/cc_*
runs main_x2 2 0,1 2 main x2
cp -r /tmp/cc_x2 /tmp/cc_overlap
runs overlap_x2 2 0,1 2 overlap overlap
if python3 records/ab.py $R/main_x2 $R/overlap_x2 >> $R/progress 2>&1; then
  echo "=== part 4, the records of overlap $(date +%T)" >> $R/progress
  cp -r /tmp/cc_x2 /tmp/cc_x1
  runs record_x1 1 0 3 overlap x1
  runs record_x2 2 0,1 3 overlap overlap
  for arm in record_x1 record_x2; do python3 records/summarize.py $R/$arm >> $R/progress 2>&1; done
  python3 - $R/record_x2 $R/record_x1 >> $R/progress <<'PY'
import statistics, sys
sys.path.insert(0, "records")
from ab import runs_by_seed
two, one = (statistics.mean(t for _, t in runs_by_seed(folder).values()) for folder in sys.argv[1:])
print(f"ratio of the records' means, 2 GPUs to 1: {two / one:.4f}")
PY
fi
echo "=== all done $(date +%T)" >> $R/progress
