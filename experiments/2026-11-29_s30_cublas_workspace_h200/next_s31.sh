#!/bin/bash
# Next session (31), written in session 30 and NOT RUN. PART=gates (one GPU, GPU 0); PART=all on a 2-GPU machine
# (gates, then x2). Name the device in the note.
# Before: mkdir -p scratch; cp this script, next_s31_decide.py and ../2026-11-27_h100x2_stack_ab_records/collect.sh
#   into scratch/;
#   git checkout -b s31-gates main && git apply experiments/2026-11-29_s30_cublas_workspace_h200/gates_no_workspace.patch;
#   the CPU suite (in a clone); commit; cp train_gpt.py scratch/train_gpt_gates.py; cp tests/test_gpu.py
#   scratch/test_gpu_gates.py (its GPU tests set up their process with init_process); git checkout main;
#   git show main:train_gpt.py > scratch/train_gpt_main.py. Corpus .proxyB/ (proxy_train_000003.bin.xz and
#   proxy_val_000000.bin.xz from ../shared/proxy-data/); carry [".proxyB", "scratch"].
# Launch (main checked out): mkdir -p .proxy; cp .proxyB/* .proxy/; cp scratch/next_s31.sh /tmp/s31.sh;
#   PART=gates setsid nohup bash /tmp/s31.sh > /tmp/s31.log 2>&1 < /dev/null & sleep 2;
#   bash scratch/collect.sh 560 "s31 done" /tmp/s31.log     then collect again at once, as often as it takes.
# PART=gates: session 30's branch (cuBLAS without a workspace; the gates as batched matmuls over 64 chunks of the
#   tokens). Session 30 on one H200, stage 0 only at 49152: 23.0 against 23.3 ms, busy 97.0 against 95.4 %.
#   Unmeasured: stages 1-5, where other weight gradients with few outputs and K = every token (the head's dense
#   connections, attention's 768 x 768 output) lose split-K too (stage 0: +43 and +13 us a step).
#   1. step_profile at 49152 on GPU 0, every stage, main then the branch, twice, each arm its own caches; then
#      next_s31_decide.py (the speed rule below). On FAIL, 2 and 3 are left out.
#   2. the branch's GPU tests: the compiled model against eager and the graphed micro-steps;
#   3. time to loss on GPU 0: benchmarks/proxy_record.py, 185 + 3 steps, --seed 0 then --seed 1, main's two runs
#      then the branch's, each arm its own compile cache (and its step_profile's Inductor and Triton caches).
#   Rule, fixed now: merge if in (1) the branch's stage 0 is shorter in both rounds, by at least 0.1 ms in the mean,
#   and no stage longer by more than 0.1 ms in the mean; (2) passes; in (3) the branch's mean final val loss is not
#   above main's by more than 0.003 and its mean training time not above main's. (1) decides the speed: a 1 % gain
#   in stage 0 is under twice the proxy's seed spread. No more runs whatever the outcome.
# Then, within PART=gates, if the device time allows (about 150 s, warm): smear_roll.patch (session 30, on top of the
#   branch: the smear through one roll of e, not three slices; the eager backward loses 2 zeroed copies of e, 2 copies
#   and an add a micro-batch, about 0.09 ms expected in stage 0). step_profile stage 0 at 49152, the branch then the
#   branch with the smear patch, twice, on the branch's caches (the smear runs eager: the same compiled graphs).
#   Measures only; it decides nothing.
#   Before (besides the above): on s31-gates, git apply .../smear_roll.patch, cp train_gpt.py
#   scratch/train_gpt_smear.py, git checkout train_gpt.py tests/test_model.py.
# PART=x2 (a 2-GPU machine; measures, decides nothing): session 29's next_s30.sh x2 part on main (start-up cold,
#   warm, warm on 2 GPUs; step_profile at 98304 twice), then step_profile at 98304 of the branch once; the whole
#   GPU suite on main.
PART=${PART:-gates}
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_* /tmp/c_* /tmp/ind_* /tmp/tri_* /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_gates; cp scratch/train_gpt_gates.py /tmp/gt_gates/train_gpt.py
cp scratch/test_gpu_gates.py /tmp/gt_gates/tests/test_gpu.py
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
wants () { [ $PART = all ] || [ $PART = $1 ]; }
if wants gates; then
  for k in 1 2; do for arm in main gates; do
    echo "=== step_profile at 49152 on GPU 0: $arm ($k) $(date +%T)" >> $R/progress
    dir=/tmp/gt; [ $arm = gates ] && dir=/tmp/gt_gates
    (cd $dir && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
      timeout 500 python3 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 49152 --trace_stage 0 \
      < /dev/null > $R/gates_${arm}_$k.out 2>&1)
    grep -A7 "^| stage | windows" $R/gates_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
    grep -h "Traceback\|Error" $R/gates_${arm}_$k.out | head -3 >> $R/progress
    mkdir -p $R/gates_trace_${arm}_$k; cp $dir/traces/*.json.gz $R/gates_trace_${arm}_$k/ 2>/dev/null; rm -rf $dir/traces
  done; done
  python3 scratch/next_s31_decide.py $R >> $R/progress 2>&1 && PASSED=1
fi
if wants gates && [ -n "$PASSED" ]; then
  echo "=== the branch's GPU tests $(date +%T)" >> $R/progress
  (cd /tmp/gt_gates && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests \
    timeout 480 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "compiled_model or graphed" \
    > $R/gates_test_gpu.txt 2>&1)
  tail -3 $R/gates_test_gpu.txt >> $R/progress
  for arm in main gates; do for seed in 0 1; do
    echo "=== time to loss on GPU 0: $arm, seed $seed $(date +%T)" >> $R/progress
    CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm timeout 400 \
      python3 benchmarks/proxy_record.py --runs 1 --seed $seed --out $R/ttl_${arm}_s$seed \
      --script scratch/train_gpt_$arm.py --compile_cache /tmp/cc_$arm --scheduled_steps 185 --extension_steps 3 \
      --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy < /dev/null \
      > $R/ttl_${arm}_s$seed.out 2>&1
    grep -h '^startup\|^final val_loss\|^peak_memory' $R/ttl_${arm}_s$seed/*.txt | cut -f1 | cut -c1-240 >> $R/progress
  done; done
  cp -r /tmp/gt_gates /tmp/gt_smear; cp scratch/train_gpt_smear.py /tmp/gt_smear/train_gpt.py
  for k in 1 2; do for arm in gates smear; do
    echo "=== step_profile at 49152 on GPU 0, stage 0: $arm ($k) $(date +%T)" >> $R/progress
    (cd /tmp/gt_$arm && CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_gates TRITON_CACHE_DIR=/tmp/tri_gates \
      timeout 300 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 --batch_tokens 49152 < /dev/null \
      > $R/smear_${arm}_$k.out 2>&1)
    grep -A2 "^| stage | windows" $R/smear_${arm}_$k.out | cut -d'|' -f2,4,5,6,7,8,10 >> $R/progress
    grep -h "Traceback\|Error" $R/smear_${arm}_$k.out | head -3 >> $R/progress
  done; done
fi
if wants x2; then
  for run in cold warm1 warm2; do
    echo "=== start-up on 2 GPUs (main): $run $(date +%T)" >> $R/progress
    rm -rf logs
    timeout 300 torchrun --standalone --nproc_per_node 2 train_gpt.py --compile_cache /tmp/c_x2 "${FLAGS[@]}" \
      --scheduled_steps 30 --extension_steps 1 --val_loss_every 0 < /dev/null > $R/x2_$run.out 2>&1
    grep -h "^startup\|^compile\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
    cp logs/*.txt $R/x2_$run.log 2>/dev/null
  done
  for arm in main main gates; do
    echo "=== step_profile at 98304 on 2 GPUs: $arm $(date +%T)" >> $R/progress
    dir=/tmp/gt; [ $arm = gates ] && dir=/tmp/gt_gates
    (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_x2_$arm TRITON_CACHE_DIR=/tmp/tri_x2_$arm timeout 400 torchrun \
      --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" --batch_tokens 98304 --trace_stage 0 \
      < /dev/null >> $R/x2_profile_$arm.out 2>&1)
    grep -A8 "^| stage | windows" $R/x2_profile_$arm.out | tail -7 | cut -d'|' -f2,4,5,6,11,12 >> $R/progress
    rm -rf $dir/traces
  done
  echo "=== the whole GPU suite (main) $(date +%T)" >> $R/progress
  timeout 560 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py > $R/test_gpu_all.txt 2>&1
  tail -3 $R/test_gpu_all.txt >> $R/progress
fi
echo "=== s31 done $(date +%T)" >> $R/progress
