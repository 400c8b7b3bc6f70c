#!/bin/bash
# Next session (30), written in session 29 and NOT RUN. Two parts; PART=all runs both (a 2-GPU machine: x2 on both
# GPUs, adds on GPU 0 alone); PART=adds alone on a one-GPU machine. Name the device in the note.
# Before: mkdir -p scratch; cp this script and ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/;
#   git checkout -b s30-fewer-adds main && git apply experiments/2026-11-29_s29_dynamo_cache_h200/fewer_adds.patch,
#   the CPU suite, commit, cp train_gpt.py scratch/train_gpt_adds.py, git checkout main. Corpus: .proxyB/
#   (proxy_train_000003.bin.xz and proxy_val_000000.bin.xz from ../shared/proxy-data/); carry [".proxyB", "scratch"].
# Launch (main checked out): mkdir -p .proxy; cp .proxyB/* .proxy/; cp scratch/next_s30.sh /tmp/s30.sh;
#   PART=all setsid nohup bash /tmp/s30.sh > /tmp/s30.log 2>&1 < /dev/null & sleep 2;
#   bash scratch/collect.sh 560 "s30 done" /tmp/s30.log     then collect again at once, as often as it takes.
# PART=x2 measures issue 35's 2-GPU bars on main (Dynamo's cache merged in session 29, measured on one H200 only);
#   it decides nothing:
#   1. start-up on both GPUs (torchrun, 30 + 1 proxy steps): cold, warm, warm on one compile cache. Bars: under
#      60 s cold, under 20 s warm. The warm starts' "compile:" line (rank 0's; a rank that traced would hold up
#      rank 0's warm-up at its first collective) must say 0 graphs traced.
#   2. step_profile at the 8-GPU per-rank shape (--batch_tokens 98304), every stage, twice: busy >= 97 % and
#      exposed communication < 1 % in every stage (session 29 on one H200, no communication: stage 0 95.4 %).
#   3. the whole GPU suite with both GPUs visible (the NCCL tests; Dynamo's stamp never ran on a GPU).
# PART=adds: fewer_adds.patch (session 29, CPU only: attention's values handed to finish as a copy of their own,
#   so that their two gradients are summed in the compiled backward, not by an add after FlashAttention's backward,
#   7 a micro-batch; ngram_weights read through one unbind, not a select per layer, about 15 small kernels a
#   micro-batch fewer). Expected about 0.1-0.2 ms of stage 0's 23.3 ms at 49152 on an H200 (session 29's
#   inventory), at the cost of one more write of the values per attention layer and their copy kept for backward.
#   step_profile at 49152 on GPU 0 (one 48K micro-batch a step), stages 0-2, main then the patch, twice, each arm
#   its own Inductor and Triton caches; then the branch's GPU tests of the compiled model against eager and of the
#   graphed micro-steps.
#   Rule, fixed now: merge if the patch's step is shorter in stage 0 in both rounds (each round's pair), by at
#   least 0.1 ms in their mean, longer in no stage by more than 0.1 ms in the mean, and the GPU tests pass.
#   Then a proxy A/B of time to loss (two seeds against main's, the guide's rule) before any record; its logs'
#   peak_memory lines show the copy's cost (about 0.5 GB expected at 48K tokens).
PART=${PART:-all}
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_adds /tmp/c_* /tmp/ind_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_adds; cp scratch/train_gpt_adds.py /tmp/gt_adds/train_gpt.py
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
wants () { [ $PART = all ] || [ $PART = $1 ]; }
if wants x2; then
  for run in cold warm1 warm2; do
    echo "=== start-up on 2 GPUs: $run $(date +%T)" >> $R/progress
    rm -rf logs
    timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py --compile_cache /tmp/c_x2 "${FLAGS[@]}" \
      --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/x2_$run.out 2>&1
    grep -h "^startup\|^compile\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
    grep -h "Traceback\|Error\|^W[0-9]\|\]:W[0-9]" $R/x2_$run.out | sort | uniq -c | head -5 >> $R/progress
    cp logs/*.txt $R/x2_$run.log 2>/dev/null
  done
  for k in 1 2; do
    echo "=== step_profile at 98304 on 2 GPUs ($k) $(date +%T)" >> $R/progress
    timeout 400 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 \
      --trace_stage 0 < /dev/null > $R/x2_profile_$k.out 2>&1
    grep -A8 "^| stage | windows" $R/x2_profile_$k.out | cut -d'|' -f2,4,5,6,11,12 >> $R/progress
    mkdir -p $R/x2_trace_$k; cp traces/*.json.gz $R/x2_trace_$k/ 2>/dev/null; rm -rf traces
  done
fi
if wants adds; then
  for k in 1 2; do for arm in main adds; do
    echo "=== step_profile at 49152 on GPU 0: $arm ($k) $(date +%T)" >> $R/progress
    dir=/tmp/gt; [ $arm = adds ] && dir=/tmp/gt_adds
    (cd $dir && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
      timeout 400 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 1 2 --batch_tokens 49152 \
      --trace_stage 0 < /dev/null > $R/adds_${arm}_$k.out 2>&1)
    grep -A4 "^| stage | windows" $R/adds_${arm}_$k.out | cut -d'|' -f2,4,5,6 >> $R/progress
    grep -h "Traceback\|Error" $R/adds_${arm}_$k.out | head -3 >> $R/progress
    mkdir -p $R/adds_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/adds_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
  done; done
  echo "=== the patch's GPU tests $(date +%T)" >> $R/progress
  (cd /tmp/gt_adds && CUDA_VISIBLE_DEVICES=0 timeout 480 python3 -m pytest -q tests/test_gpu.py \
    -k "compiled_model or graphed" > $R/adds_test_gpu.txt 2>&1)
  tail -3 $R/adds_test_gpu.txt >> $R/progress
fi
if wants x2; then
  echo "=== the whole GPU suite $(date +%T)" >> $R/progress
  timeout 560 python3 -m pytest -q tests/test_gpu.py > $R/test_gpu_all.txt 2>&1
  tail -3 $R/test_gpu_all.txt >> $R/progress
fi
echo "=== s30 done $(date +%T)" >> $R/progress
