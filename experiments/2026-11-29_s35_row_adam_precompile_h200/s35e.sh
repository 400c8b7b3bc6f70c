#!/bin/bash
# Session 35, one H200, call 5: does reading Adam's and RowAdam's scalars from the device cost step time?
# step_profile at the 8-GPU per-rank shape (--batch_tokens 49152: one micro-batch a step), stage 0: main (2d7c754's
# train_gpt.py) then the patch (the working tree), each on an empty compile cache; the optimizers' table gives
# Adam's and RowAdam's kernel spans.
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
  (cd /tmp/g$arm && timeout 240 python3 benchmarks/step_profile.py "${FLAGS[@]}" --stages 0 --steps 3 --top 0 \
    < /dev/null > $R/$arm.out 2>&1)
  grep -A3 "^ stage |" $R/$arm.out >> $R/progress; grep -A10 "the optimizers' steps" $R/$arm.out >> $R/progress
  grep "Traceback\|Error" $R/$arm.out | head -3 >> $R/progress
done
echo "=== s35e done $(date +%T)" >> $R/progress
