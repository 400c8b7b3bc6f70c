#!/bin/bash
# Next session (37), written in session 36 and NOT RUN: one H200 or H100 is enough (about 8 minutes; on a 2-GPU
# machine it uses GPU 0: run it after next_s37.sh in the same job or call). Carry [".proxyA"]. Measures
# optimizer_precompile2.patch (here; it applies on top of adam_inplace_gathers.patch): Adam's and RowAdam's scalars
# as device tensors (one compiled graph serves every group, in every process), Adam's large parameters through a
# static graph each (the kernels tuned for their own size: session 35's one dynamic graph for all groups ran the
# head's update 5.6x slower, session 36's sort did not help), the small ones through one dynamic graph, and
# validation's helper compiling both, and RowAdam's, as a rank of the run runs them. The base arm is main with
# adam_inplace_gathers.patch (applied here unless main has it already). Session 35's next_s36.sh, arms renamed:
# 1. step_profile, stage 0 at 49152, each arm compiling in-process, traced: Adam's span and the head's update
#    kernel (adam_kernels.py), RowAdam's and NorMuon's application's spans;
# 2. a cold start of each arm under startup_profile.py (the training process's Adam and RowAdam frames, its
#    AOTAutograd misses);
# 3. step_profile on the patch with the caches of its cold start (the graphs the helpers compiled).
# 4. Then the patch's GPU tests (-k "adam or warm_start or precompile", about 5 minutes; needed before it lands,
#    so run them in a later call if the device time ends first).
# Land optimizer_precompile2.patch only if: in 1 and 3 Adam's span and the head's update kernel, and RowAdam's
# span, are each within 2 % of the base's in 1 or faster; and in 2 the training process's Adam and RowAdam frames
# after step 0 spend no Inductor time (loaded from the helpers) and its AOTAutograd misses are fewer than the base's.
# Also compare the two cold starts' final val losses (the same 31 steps): the patch rounds as the base does on the
# CPU, but Inductor compiles it differently. If they differ by more than 0.005, a two-seed time-to-loss A/B against
# the base comes before landing.
#   call, carry [".proxyA"] (parts 1-3 about 6-8 minutes, with the tests about 13: start it with setsid):
#     setsid nohup env OUT=/tmp/res bash experiments/2026-11-29_s36_h200x2_asked_rows_optimizers/next_s37b.sh
#     > /tmp/s37b.log 2>&1 < /dev/null & sleep 2; bash experiments/2026-11-27_h100x2_stack_ab_records/collect.sh 560
#     "tests done" /tmp/s37b.log
#   then the same collect.sh line with 580 AT ONCE if it has not ended.
E=experiments/2026-11-29_s36_h200x2_asked_rows_optimizers
# R emptied first: after next_s37.sh on the same machine, /tmp/res holds its results, collected already
R=${OUT:?set OUT}; rm -rf /tmp/gm /tmp/gp /tmp/cc_* /tmp/ind_[mp] /tmp/tri_[mp] "$R"; mkdir -p $R
cp -r . /tmp/gm; cp -r . /tmp/gp
for t in /tmp/gm /tmp/gp; do
  (cd $t && if git apply --check $E/adam_inplace_gathers.patch 2>/dev/null; then git apply $E/adam_inplace_gathers.patch; fi)
done
(cd /tmp/gp && git apply $E/optimizer_precompile2.patch) || { echo "=== the patch does not apply" >> $R/progress; exit 1; }
export CUDA_VISIBLE_DEVICES=0
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/bytecode; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; lscpu | grep "Model name" >> $R/progress
sha256sum /tmp/gm/train_gpt.py /tmp/gp/train_gpt.py >> $R/progress
for t in /tmp/gm /tmp/gp; do
  (cd $t && python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))")
done
DATA=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
KERNELS=experiments/2026-11-29_s35_row_adam_precompile_h200/adam_kernels.py
profile () {  # name, tree, extra env
  echo "=== step_profile $1 $(date +%T)" >> $R/progress
  (cd $2 && env $3 timeout 200 python3 benchmarks/step_profile.py "${DATA[@]}" --scheduled_steps 185 --extension_steps 3 \
    --batch_tokens 49152 --stages 0 --steps 3 --top 0 --trace_stage 0 < /dev/null > $R/$1.out 2>&1
   grep -A3 "| stage | windows" $R/$1.out | tail -1 >> $R/progress; grep -A3 "| stage | Adam" $R/$1.out | tail -1 >> $R/progress
   python3 $KERNELS traces/step_profile_rank0.json.gz > $R/adam_$1.txt; head -7 $R/adam_$1.txt | cut -c1-150 >> $R/progress
   python3 $KERNELS traces/step_profile_rank0.json.gz RowAdam.finish_step > $R/rowadam_$1.txt; head -5 $R/rowadam_$1.txt | cut -c1-150 >> $R/progress
   python3 $KERNELS traces/step_profile_rank0.json.gz NorMuon.finish_step > $R/normuon_$1.txt; sed -n 7,12p $R/normuon_$1.txt | cut -c1-150 >> $R/progress)
}
cold () {  # name, tree
  echo "=== cold start $1 $(date +%T)" >> $R/progress
  (cd $2 && rm -rf logs && timeout 200 python3 benchmarks/startup_profile.py "${DATA[@]}" --scheduled_steps 30 \
    --extension_steps 1 --val_loss_every 0 --compile_cache /tmp/cc_$1 < /dev/null > $R/cold_$1.out 2>&1)
  grep -h "^startup\|^precompile .*: ended\|^warning\|^final\|^frames at step [01] \|^counters aot\|Traceback" $R/cold_$1.out | cut -c1-300 >> $R/progress
  grep "adam_update\|row_adam" $R/cold_$1.out | sed 's/^/  /' >> $R/progress
}
# each arm's in-process compile in caches of its own: the compile cache's keys leave the sizes out
profile m /tmp/gm "TORCHINDUCTOR_CACHE_DIR=/tmp/ind_m TRITON_CACHE_DIR=/tmp/tri_m"
profile p /tmp/gp "TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p"
cold m /tmp/gm; cold p /tmp/gp
profile p_helpers /tmp/gp "TORCHINDUCTOR_CACHE_DIR=/tmp/cc_p/inductor/gpu0.train_gpt TRITON_CACHE_DIR=/tmp/cc_p/triton"
echo "=== s37b done $(date +%T)" >> $R/progress
echo "=== GPU tests, the patch $(date +%T)" >> $R/progress
(cd /tmp/gp && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests_b TRITON_CACHE_DIR=/tmp/tri_tests_b timeout 420 python3 -m pytest \
  -q -p no:cacheprovider tests/test_gpu.py -k "adam or warm_start or precompile" > $R/tests_p.txt 2>&1)
tail -1 $R/tests_p.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests_p.txt >> $R/progress
echo "=== tests done $(date +%T)" >> $R/progress
