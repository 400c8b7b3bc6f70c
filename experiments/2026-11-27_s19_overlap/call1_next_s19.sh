#!/bin/bash
# Next session (19), 2 x H100 of one host (nvidia-h100-x2), written in session 18 and not run. Its commands take
# the forms that ran in session 18's call 4 (call4_apply_ab.sh): proxy_record.py passes the data flags itself. Before:
#   the tree on the device is s18-rows (its tests are main's and summed_by_row's);
#   git show main:train_gpt.py > scratch/train_gpt_main.py; git show s18-rows:train_gpt.py > scratch/train_gpt_rows.py
#   copy ../shared/proxy-data/*.xz into .proxy/; carry [".proxy", "scratch"]; cp next_s19.sh (this folder) and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/.
# Launch: cp scratch/next_s19.sh /tmp/s19.sh; setsid nohup bash /tmp/s19.sh > /tmp/s19.log 2>&1 < /dev/null &
#   sleep 2; bash scratch/collect.sh 560 "=== main_x1\|all done" /tmp/s19.log; then collect.sh 590 with
#   "=== rows_x2\|all done", "=== part 4\|kept\|all done", then "all done" (the machine idles back 30 s after a
#   call: poll again at once). Give the machine back after. About 700 s without part 4, 1,200 s with it.
# Parts, in order, fixed before the runs:
#  1. the GPU tests of the optimizers, of the sharded n-gram table over NCCL and of summed_by_row (NorMuon's
#     compiled application, validation's helper and s18-rows are new since session 17's gate; session 18 ran two
#     of them on H200s). A failure stops the call.
#  2. main on both GPUs (torchrun), seeds 0 and 1, 185 + 3 steps, from empty compile caches: the first start is
#     cold. Its log shows whether validation's helper compiled NorMuon's application for the training process
#     (stage 0's warm-up against session 17's 52.8-55.1 s).
#  3. main on GPU 0 alone, seeds 0 and 1, its caches copies of part 2's (rank 0's graphs are one GPU's).
#  3b. s18-rows (RowAdam's row sums compiled: summed_by_row) on both GPUs, seeds 0 and 1, its caches copies of
#     part 2's. Kept if records/ab.py passes it against part 2's runs; on one GPU it runs main's code.
#     The ratio of the kept arm's mean time on two GPUs to part 3's: issue 35's 2-GPU bar is 0.52x.
#  4. only if that ratio is at most 0.52: the records of the kept arm's script, 3 runs each at seeds 0, 1 and 2,
#     185 + 3 steps, first on GPU 0 alone, then on both. They stand or fail as run (records/summarize.py); no runs
#     are added.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
echo "=== GPU tests $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 -m pytest -q tests/test_gpu.py \
  -k "normuon or adam or sharded_ngram or summed_by_row" > $R/test_gpu.txt 2>&1
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
cp -r /tmp/cc_x2 /tmp/cc_x1
runs main_x1 1 0 2 main x1
cp -r /tmp/cc_x2 /tmp/cc_rows
runs rows_x2 2 0,1 2 rows rows
kept=main
python3 records/ab.py $R/main_x2 $R/rows_x2 >> $R/progress 2>&1 && kept=rows
ratio=$(python3 - $R/${kept}_x2 $R/main_x1 <<'PY'
import statistics, sys
sys.path.insert(0, "records")
from ab import runs_by_seed
two, one = (statistics.mean(t for _, t in runs_by_seed(folder).values()) for folder in sys.argv[1:])
print(f"{two / one:.4f}")
PY
)
echo "kept: $kept; ratio of the means, 2 GPUs to 1: $ratio" >> $R/progress
if python3 -c "import sys; sys.exit(0 if float('$ratio') <= 0.52 else 1)"; then
  echo "=== part 4, the records of $kept $(date +%T)" >> $R/progress
  runs record_x1 1 0 3 $kept x1
  runs record_x2 2 0,1 3 $kept $([ $kept = rows ] && echo rows || echo x2)
  for arm in record_x1 record_x2; do python3 records/summarize.py $R/$arm >> $R/progress 2>&1; done
fi
echo "=== all done $(date +%T)" >> $R/progress
