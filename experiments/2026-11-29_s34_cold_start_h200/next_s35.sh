#!/bin/bash
# Next session (35), written in session 34 and NOT RUN; name the device in the note. Session 33's next_s34.sh
# (../2026-11-29_s33_h200x2_bars/), which session 34 could not run (only one GPU was lent), with its rules unchanged,
# and a cold start on both GPUs with the host's CPU use sampled at the end. Needs two GPUs (nvidia-h100-x2 first,
# else nvidia-h200-x2): on one GPU it stops at once (the branch changes nothing there).
# The branch s33-asked-rows (../2026-11-29_s33_h200x2_bars/asked_rows.patch): the rows each rank asks of the others'
# n-gram shards come with the batch, exchanged over gloo and sorted by the loader's worker, so that fetch_ahead no
# longer exchanges them over NCCL on the compute stream, where they waited behind Adam's all-gathers (session 33's
# traces: every Adam step of stage 0 ended on 0.3-0.5 ms of exposed all-gathers), and RowAdam no longer sorts them
# on the GPU (about 23 kernels, 0.16 ms of every step's end). The same rows and values: no time to loss is needed.
# Its one-GPU GPU tests pass on the patch as it is (session 34). Fixed now:
# 1. the branch's GPU tests -k "nccl or row_lookup or graphed or compiled_model" pass (the sharded table over
#    NCCL, fetched ahead with the asked rows from exchange_row_requests);
# 2. step_profile at the 8-GPU per-rank shape on both GPUs (--batch_tokens 98304), stages 0-2, main then branch,
#    twice (traces of stage 0 kept). Merge if the branch's stage-0 exposed communication (rank 0's share, the
#    mean of its two rounds) is below main's, and no stage's step (the mean of two rounds) is more than 0.5 %
#    above main's. No more runs of the rule whatever the outcome.
# 3. the branch's profile of stages 0-5 once more (stages 3-5 for the README's table, if it is merged).
# 4. (after "s35 core done"; skip it if the device time is short) main's cold start on both GPUs, 30 + 1 steps, an
#    empty compile cache, the host's busy cores sampled each second: is a 2-GPU cold start as far from CPU-bound as
#    session 34 found one GPU's (4-8 of 16 cores busy)? Its imports include writing torch's bytecode (the tree's first
#    start of train_gpt.py as a program).
#   before: mkdir -p .proxyA .proxyB scratch; rm -rf .proxyA/* .proxyB/* scratch/*;
#     cp ../shared/proxy-data/proxy_train_000001.bin.xz ../shared/proxy-data/proxy_val_000000.bin.xz .proxyA/;
#     cp ../shared/proxy-data/proxy_train_00000{2,3}.bin.xz .proxyB/  (one carry of all four is over 64 MiB);
#     cp this script, cpu_sampler.py, cputime.py (here) and ../2026-11-27_h100x2_stack_ab_records/collect.sh into
#     scratch/; main + ../2026-11-29_s33_h200x2_bars/asked_rows.patch (in a worktree): its train_gpt.py as
#     scratch/train_gpt_asked.py and its tests/ as scratch/tests_asked/ (the patch changes four test files besides);
#     main checked out, clean.
#   call 1, carry [".proxyA"]:  mkdir -p /tmp/proxy && cp .proxyA/* /tmp/proxy/ && ls /tmp/proxy
#   call 2 AT ONCE, carry [".proxyB", "scratch"]:
#     cp .proxyB/* /tmp/proxy/; cp scratch/next_s35.sh /tmp/s35.sh; setsid nohup bash /tmp/s35.sh > /tmp/s35.log 2>&1
#     < /dev/null & sleep 2; bash scratch/collect.sh 560 "s35 core done" /tmp/s35.log
#   then `bash scratch/collect.sh 580 "s35 core done" /tmp/s35.log` AT ONCE, as often as it takes (about 18 minutes
#   warm), then "s35 done" for part 4 (about 2.5 minutes more).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/ind_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(nvidia-smi -L | wc -l)" != 2 ]; then echo "=== needs two GPUs; s35 core done, s35 done" >> $R/progress; exit 1; fi
if [ "$(ls /tmp/proxy/*.bin.xz | wc -l)" != 4 ]; then
  echo "=== /tmp/proxy lacks shards (a fresh machine?): make call 1 again; s35 core done, s35 done" >> $R/progress; exit 1
fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('/tmp/proxy'), pathlib.Path('data/proxy'))"
T=(--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 "${T[@]}")
cp -r /tmp/gt /tmp/gt_asked; cp scratch/train_gpt_asked.py /tmp/gt_asked/train_gpt.py
rm -rf /tmp/gt_asked/tests; cp -r scratch/tests_asked /tmp/gt_asked/tests
echo "=== asked's GPU tests $(date +%T)" >> $R/progress
(cd /tmp/gt_asked && CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tasked TRITON_CACHE_DIR=/tmp/tri_tasked \
  timeout 420 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "nccl or row_lookup or graphed or compiled_model" > $R/tests_asked.txt 2>&1)
tail -1 $R/tests_asked.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_asked.txt >> $R/progress
for k in 1 2; do for arm in main asked; do
  echo "=== step_profile at 98304 on 2 GPUs, stages 0-2: $arm ($k) $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm = asked ] && dir=/tmp/gt_asked
  (cd $dir && CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
    timeout 420 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" \
    --batch_tokens 98304 --stages 0 1 2 --trace_stage 0 < /dev/null > $R/p_${arm}_$k.out 2>&1)
  grep -A5 "^| stage | windows" $R/p_${arm}_$k.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
  grep -h "Traceback\|Error" $R/p_${arm}_$k.out | head -3 >> $R/progress
  mkdir -p $R/p_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/p_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
done; done
echo "=== step_profile at 98304 on 2 GPUs, stages 0-5: asked $(date +%T)" >> $R/progress
(cd /tmp/gt_asked && CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_asked TRITON_CACHE_DIR=/tmp/tri_asked \
  timeout 420 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" \
  --batch_tokens 98304 --stages 0 1 2 3 4 5 --trace_stage 0 < /dev/null > $R/p_asked_all.out 2>&1)
grep -A8 "^| stage | windows" $R/p_asked_all.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
echo "=== s35 core done $(date +%T)" >> $R/progress
echo "=== cold start on 2 GPUs, main, CPU sampled $(date +%T)" >> $R/progress
rm -rf logs /tmp/cc_cold
python3 scratch/cpu_sampler.py > $R/cpu_cold.txt & S=$!
CUDA_VISIBLE_DEVICES=0,1 python3 scratch/cputime.py timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py \
  "${FLAGS[@]}" --compile_cache /tmp/cc_cold --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 \
  < /dev/null > $R/cold.out 2> $R/cold.time
kill $S
grep -h "^startup\|^compile:\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
grep "^cpu user" $R/cold.time >> $R/progress
awk '{s+=$2; n++} END {print "mean busy cores", s/n, "over", n, "s"}' $R/cpu_cold.txt >> $R/progress
echo "=== s35 done $(date +%T)" >> $R/progress
