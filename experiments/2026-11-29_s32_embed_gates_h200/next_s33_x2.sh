#!/bin/bash
# Next session (33) IF TWO GPUS ARE LENT (nvidia-h100-x2 first, else nvidia-h200-x2), written in session 32 and NOT
# RUN; on one GPU run next_s33.sh instead. Measures, no merge rule: the step issue's bars on main (d961f87 or later:
# the gates, no cuBLAS workspace and RowLookup, none of them run on 2 GPUs yet).
# 1. main's GPU tests -k "row_sum or row_lookup or compiled_model or graphed or nccl" (the two changes together; the
#    sharded n-gram table over NCCL needs both GPUs).
# 2. step_profile at the 8-GPU per-rank shape on both GPUs (--batch_tokens 98304), stages 0-5, twice: the README's
#    table of session 25 (busy, exposed communication per stage), now with the gates and no workspace.
# 3. Start-up on 2 GPUs through the compile cache: proxy_record.py --gpus 2, seed 0 with an empty cache (cold), then
#    seed 1 with the cache it filled (warm); each log's startup: line. The bar: under 60 s cold, under 20 s warm.
# Same calls as next_s33.sh (corpus in two calls, then collect AT ONCE), with this script as /tmp/s33.sh. ~14 min.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/ind_* /tmp/tri_* /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if [ "$(ls /tmp/proxy/*.bin.xz | wc -l)" != 4 ]; then
  echo "=== /tmp/proxy lacks shards (a fresh machine?): make call 1 again; s33 done" >> $R/progress; exit 1
fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('/tmp/proxy'), pathlib.Path('data/proxy'))"
T=(--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== main's GPU tests $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t TRITON_CACHE_DIR=/tmp/tri_t timeout 420 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k "row_sum or row_lookup or compiled_model or graphed or nccl" \
  > $R/tests_main.txt 2>&1
tail -1 $R/tests_main.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_main.txt >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
for k in 1 2; do
  echo "=== step_profile at 98304 on 2 GPUs, stages 0-5 ($k) $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 420 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --stages 0 1 2 3 4 5 --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" \
    --repeat_train_files --val_tokens 1835008 --batch_tokens 98304 --trace_stage 0 "${T[@]}" < /dev/null \
    > $R/p_x2_$k.out 2>&1
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
echo "=== s33 done $(date +%T)" >> $R/progress
