#!/bin/bash
# Session 10, 2 GPUs (ask nvidia-h100-x2; say which cards came), in the foreground, one call (~8 min):
#   1. a 2-GPU proxy run of main, 185 + 3, seed 0 (the scaling against the one-H100 record, 66.5 s: issue 35 asks
#      <= 0.52x, 34.6 s; compare only on H100s);
#   2. step_profile at the 8-GPU per-rank shapes, the traces of stage 0 (readable gap names since 2db1526);
#   3. loader_overlap at 98304, stage 0 (8.6 % exposed at bfbeb2a, before the optimizer graphs).
R=$OUT; rm -rf scratch/.bytecode scratch/logs traces; export PYTHONUNBUFFERED=1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
nvidia-smi --query-gpu=name --format=csv,noheader
flags=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
       --val_tokens 1835008 --compile_cache /tmp/cca)
timeout 200 torchrun --standalone --nproc_per_node 2 train_gpt.py "${flags[@]}" --val_loss_every 0 \
  --scheduled_steps 185 --extension_steps 3 --seed 0 > $R/x2_s0.out 2>&1
grep -h '^startup:\|final val_loss\|Error\|peak' $R/x2_s0.out | head -5; cp logs/*.txt $R/ 2>/dev/null
timeout 200 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${flags[@]}" --batch_tokens 98304 \
  --trace_stage 0 > $R/profile.out 2>&1
grep -v "^W11\|UserWarning\|_warn_once" $R/profile.out | head -45; cp traces/*.json.gz $R/ 2>/dev/null
timeout 120 torchrun --standalone --nproc_per_node 2 benchmarks/loader_overlap.py "${flags[@]}" --batch_tokens 98304 \
  --stage 0 > $R/loader_overlap_stage0.out 2>&1
tail -12 $R/loader_overlap_stage0.out
true
