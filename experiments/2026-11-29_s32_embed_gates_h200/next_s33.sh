#!/bin/bash
# Next session (33), written in session 32 and NOT RUN; name the device in the note. It runs PART 1 on a machine
# of one GPU, PART 2 on one of two (nvidia-h100-x2 first, else nvidia-h200-x2), chosen by the GPUs it finds.
# PART 1, one GPU (GPU 0):
# 1. main (d961f87 or later: the gates and RowLookup merged one after the other in session 32, never run together on
#    a GPU): its GPU tests -k "row_sum or row_lookup or compiled_model or graphed". A failure here comes first:
#    fix main before anything else.
# 2. The branch s32-rowsums (row_sums_one_pass.patch here): a program for each window and block of columns (main's
#    loop over the columns in 256 programs at 16K tokens), and a window adds its runs that lie inside it straight
#    into .grad, only the runs crossing its edges going through a buffer. Bit-identical to main's kernels
#    (row_sums_interpreter_check.py, 300 cases in Triton's interpreter), so no time to loss is needed: the rule is
#    speed and tests. Fixed now:
#    a. benchmarks/row_sums.py on the proxy val shard's ids times main's kernels and the branch's at 6 tile
#       settings; the setting with the least total time over its 4 rows (16K and 48K tokens, bf16 and float32
#       tables) becomes the branch's ROW_SUM_TILES (the script writes it into the branch's copy; if the bench
#       fails, the branch keeps its own, 64, 64, 8);
#    b. the branch's GPU tests -k "row_sum or row_lookup or graphed" pass with it;
#    c. step_profile at 49152 (the 8-GPU per-rank shape), stages 0-2, main then branch, twice: merge if the mean
#       of the branch's two rounds is below main's in stage 0 and not above main's by more than 0.5 % in stages 1
#       and 2. Merge with the chosen tiles. No more runs whatever the outcome.
# Session 33, lent nvidia-h200-x2, ran PART 2 first and then PART 1 on GPU 0 of the same machine (main's tests once).
# PART 2, two GPUs: measures, no merge rule, the step issue's open bars on main (the gates, no cuBLAS workspace and
# RowLookup have not run on 2 GPUs yet):
# 1. main's GPU tests -k "row_sum or row_lookup or compiled_model or graphed or nccl" (the sharded n-gram table over
#    NCCL needs both GPUs);
# 2. step_profile at the 8-GPU per-rank shape on both GPUs (--batch_tokens 98304), stages 0-5, twice: the README's
#    table of session 25 (busy >= 97 %, exposed communication < 1 %, per stage);
# 3. start-up on 2 GPUs through the compile cache: proxy_record.py --gpus 2, seed 0 with an empty cache (cold),
#    then seed 1 with the cache it filled (warm); each log's startup: line (bars: under 60 s cold, 20 s warm).
#   before: mkdir -p .proxyA .proxyB scratch; rm -f .proxyA/* .proxyB/* scratch/*;
#     cp ../shared/proxy-data/proxy_train_00000{1,3}.bin.xz ../shared/proxy-data/proxy_val_000000.bin.xz .proxyA/;
#     cp ../shared/proxy-data/proxy_train_000002.bin.xz .proxyB/;
#     cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/;
#     main + row_sums_one_pass.patch (here): its train_gpt.py as scratch/train_gpt_rowsums.py;
#     main checked out, clean.
#   call 1, carry [".proxyA"]:  mkdir -p /tmp/proxy && cp .proxyA/* /tmp/proxy/ && ls /tmp/proxy
#   call 2 AT ONCE, carry [".proxyB", "scratch"]:
#     cp .proxyB/* /tmp/proxy/; cp scratch/next_s33.sh /tmp/s33.sh; setsid nohup bash /tmp/s33.sh > /tmp/s33.log 2>&1
#     < /dev/null & sleep 2; bash scratch/collect.sh 560 "s33 done" /tmp/s33.log
#   then `bash scratch/collect.sh 580 "s33 done" /tmp/s33.log` AT ONCE, as often as it takes. Read nothing between
#   the calls: session 32 lost its first machine (and a run) to a pause there. About 16 minutes warm (PART 1), 14 (PART 2).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_* /tmp/tri_* /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(ls /tmp/proxy/*.bin.xz | wc -l)" != 4 ]; then
  echo "=== /tmp/proxy lacks shards (a fresh machine?): make call 1 again; s33 done" >> $R/progress; exit 1
fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('/tmp/proxy'), pathlib.Path('data/proxy'))"
T=(--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 "${T[@]}")
GPUS=$(nvidia-smi -L | wc -l | sed 's/^2$/0,1/; s/^1$/0/')  # CUDA_VISIBLE_DEVICES: the machine's one or two
gpu_tests () {  # $1: the arm; $2: the -k expression
  echo "=== $1's GPU tests: $2 $(date +%T)" >> $R/progress
  (cd /tmp/gt_$1 2>/dev/null || cd /tmp/gt; CUDA_VISIBLE_DEVICES=$GPUS TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t$1 \
    TRITON_CACHE_DIR=/tmp/tri_t$1 timeout 420 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "$2" \
    > $R/tests_$1.txt 2>&1)
  tail -1 $R/tests_$1.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_$1.txt >> $R/progress
}
part1 () {
cp -r /tmp/gt /tmp/gt_rowsums; cp scratch/train_gpt_rowsums.py /tmp/gt_rowsums/train_gpt.py
echo "=== row_sums bench $(date +%T)" >> $R/progress
(cd /tmp/gt_rowsums && CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tri_bench timeout 300 python3 \
  benchmarks/row_sums.py --baseline /tmp/gt/train_gpt.py --shard data/proxy/proxy_val_000000.bin \
  --tiles 64,64,8 64,64,4 64,32,4 32,64,4 64,128,8 32,32,4 > $R/bench.txt 2>&1)
grep "^|\|rror" $R/bench.txt >> $R/progress
TILES=$(python3 - $R/bench.txt <<'EOF'
import collections, sys
total = collections.Counter()
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.split("|")[1:-1]]
    if len(cells) == 7 and cells[0] == "train_gpt.py":  # the branch, not the baseline
        total[cells[1]] += float(cells[5])
w, c, n = min(total, key=total.get).split(",")
print(f"WINDOW={w}, COLS={c}, num_warps={n}")
EOF
)
[ -z "$TILES" ] && TILES="WINDOW=64, COLS=64, num_warps=8" && echo "=== the bench failed: the branch's own tiles" >> $R/progress
echo "=== chosen tiles: $TILES" >> $R/progress
sed -i "s/^ROW_SUM_TILES = dict(.*)$/ROW_SUM_TILES = dict($TILES)/" /tmp/gt_rowsums/train_gpt.py
grep "^ROW_SUM_TILES" /tmp/gt_rowsums/train_gpt.py >> $R/progress; cp /tmp/gt_rowsums/train_gpt.py $R/train_gpt_rowsums.py
gpu_tests rowsums "row_sum or row_lookup or graphed"
for k in 1 2; do for arm in main rowsums; do
  echo "=== step_profile at 49152 on GPU 0, stages 0-2: $arm ($k) $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm = rowsums ] && dir=/tmp/gt_rowsums
  (cd $dir && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
    timeout 400 python3 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 49152 --stages 0 1 2 --trace_stage 0 \
    < /dev/null > $R/p_${arm}_$k.out 2>&1)
  grep -A4 "^| stage | windows" $R/p_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
  grep -h "Traceback\|Error" $R/p_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/p_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/p_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
done; done
}
part2 () {
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
for k in 1 2; do
  echo "=== step_profile at 98304 on 2 GPUs, stages 0-5 ($k) $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 420 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    "${FLAGS[@]}" --stages 0 1 2 3 4 5 --batch_tokens 98304 --trace_stage 0 < /dev/null > $R/p_x2_$k.out 2>&1
  grep -A7 "^| stage | windows" $R/p_x2_$k.out | cut -d'|' -f2,4,5,6,11,12 >> $R/progress
  grep -h "Traceback\|Error" $R/p_x2_$k.out | head -3 >> $R/progress
  mkdir -p $R/p_trace_x2_$k; cp traces/*.json.gz $R/p_trace_x2_$k/ 2>/dev/null; rm -rf traces
done
for seed in 0 1; do
  echo "=== start-up on 2 GPUs: seed $seed ($([ $seed = 0 ] && echo cold || echo warm)) $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s TRITON_CACHE_DIR=/tmp/tri_s timeout 400 \
    python3 benchmarks/proxy_record.py --gpus 2 --runs 1 --seed $seed --out $R/x2_s$seed --proxy /tmp/proxy \
    --compile_cache /tmp/cc_x2 --scheduled_steps 185 --extension_steps 3 "${T[@]}" < /dev/null > $R/x2_s$seed.out 2>&1
  grep -h "^startup:\|^final val_loss" $R/x2_s$seed/*.txt | cut -f1 >> $R/progress
  grep -m2 "Error" $R/x2_s$seed.out >> $R/progress
done
}
if [ "$GPUS" = 0 ]; then
  gpu_tests main "row_sum or row_lookup or compiled_model or graphed"; part1
else  # PART 1 follows on GPU 0, session 33 being lent two GPUs and no one-GPU machine needed
  gpu_tests main "row_sum or row_lookup or compiled_model or graphed or nccl"; part2
  echo "=== part2 done $(date +%T)" >> $R/progress; part1
fi
echo "=== s33 done $(date +%T)" >> $R/progress
