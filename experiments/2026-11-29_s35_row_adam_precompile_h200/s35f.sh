#!/bin/bash
# Session 35, one H200, call 6: call 5's Adam span, 0.8 ms (main) against 1.2 ms (the patch): the kernels inside
# Adam's steps, from step_profile's trace of stage 0 at 49152, main (2d7c754's train_gpt.py) then the patch.
R=$OUT; rm -rf /tmp/gp /tmp/gm; mkdir -p $R; cp -r . /tmp/gp; cp -r . /tmp/gm
git show 2d7c754:train_gpt.py > /tmp/gm/train_gpt.py
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/bytecode; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
sha256sum /tmp/gm/train_gpt.py /tmp/gp/train_gpt.py >> $R/progress
for t in /tmp/gm /tmp/gp; do
  (cd $t && python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))")
done
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 185 --extension_steps 3 --batch_tokens 49152 --compile_cache "")
for arm in m p; do
  echo "=== $arm $(date +%T)" >> $R/progress
  (cd /tmp/g$arm && timeout 200 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 --steps 3 --top 0 \
    --trace_stage 0 < /dev/null > $R/$arm.out 2>&1; cp traces/step_profile_rank0.json.gz $R/trace_$arm.json.gz)
  grep -A3 "| stage | windows" $R/$arm.out | tail -1 >> $R/progress; grep -A3 "| stage | Adam" $R/$arm.out | tail -1 >> $R/progress
  python3 experiments/2026-11-29_s35_row_adam_precompile_h200/adam_kernels.py $R/trace_$arm.json.gz > $R/adam_$arm.txt 2>&1
  head -12 $R/adam_$arm.txt >> $R/progress
done
echo "=== s35f done $(date +%T)" >> $R/progress
