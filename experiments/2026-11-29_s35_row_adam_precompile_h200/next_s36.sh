#!/bin/bash
# Next session (36), written in session 35 and NOT RUN: one H200 or H100 is enough (about 8 minutes of device
# time; name the device in the note). Carry [".proxyA"] (training shard 1 and the validation shard). Measures
# optimizer_precompile.patch and normuon_apply_static.patch (here), applied together as one arm, against main
# before either may land (each changes its own optimizers' kernels, which the traces tell apart):
# 1. step_profile, stage 0 at 49152, each arm compiling in-process, with the trace: Adam's span and the head's
#    update kernel (adam_kernels.py). Session 35 measured main at 1.19 ms and 259 us on one H200 (call 6); one
#    graph for all groups, first called on an 11-element parameter, gave 2.38 ms and 1,455 us. The patch steps
#    each dtype's largest parameter first: it must give main's figures. Also RowAdam's span (main 0.2 ms).
# 2. A cold start of each arm under startup_profile.py: the training process's Adam and RowAdam frames must load
#    the helper's (AOTAutograd 0.02-0.07 s a frame) and its AOTAutograd misses be the stage-0 regions' only (13).
# 3. step_profile again on the patch, its Inductor and Triton caches those of the patch's cold start: the graphs
#    the helpers compiled (RowAdam's tuned for a cache's worth of rows), as a run's training process loads them;
#    Adam's and RowAdam's spans must be main's of step 1.
# Land optimizer_precompile.patch only if 1 and 3 show no slower Adam or RowAdam kernels and 2 shows the hits.
# Land normuon_apply_static.patch only if 1 shows NorMuon's application (NorMuon.finish_step) faster: main's MLP
# matrices ran at about 1.9 TB/s (docs/performance.md, candidate 7), and its cold start (2) no worse.
R=$OUT; rm -rf /tmp/gm /tmp/gp /tmp/cc_*; mkdir -p $R; cp -r . /tmp/gm; cp -r . /tmp/gp
(cd /tmp/gp && git apply experiments/2026-11-29_s35_row_adam_precompile_h200/optimizer_precompile.patch \
  && git apply experiments/2026-11-29_s35_row_adam_precompile_h200/normuon_apply_static.patch) || exit 1
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
profile m /tmp/gm; profile p /tmp/gp
cold m /tmp/gm; cold p /tmp/gp
profile p_helpers /tmp/gp "TORCHINDUCTOR_CACHE_DIR=/tmp/cc_p/inductor/gpu0.train_gpt TRITON_CACHE_DIR=/tmp/cc_p/triton"
echo "=== s36 done $(date +%T)" >> $R/progress
