#!/bin/bash
# Session 36, call 4 (2 x H200), main at bcc4f51 (the asked rows and NorMuon's static application, both landed):
# 1. step_profile at the 8-GPU per-rank shape on both GPUs (--batch_tokens 98304), stages 0-5, stage 0 traced:
#    the README's table for the landed code;
# 2. the GPU tests of what the NorMuon change touches (its three tests; a warm start that traces nothing, which
#    needs the helpers to compile the application's five graphs). The asked rows' six tests passed in call 2 on
#    the same code as landed.
#   call, carry [".proxyA", "scratch"]: setsid nohup bash scratch/s36b.sh > /tmp/s36b.log 2>&1 < /dev/null &
#     sleep 2; bash scratch/collect.sh 560 "s36b done" /tmp/s36b.log
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; sha256sum train_gpt.py >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
echo "=== step_profile at 98304 on 2 GPUs, stages 0-5: main $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 330 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py "${FLAGS[@]}" \
  --batch_tokens 98304 --stages 0 1 2 3 4 5 --trace_stage 0 < /dev/null > $R/p_main_all.out 2>&1
grep -A8 "^| stage | windows" $R/p_main_all.out | cut -d'|' -f2,4,5,6,11,12,13 >> $R/progress
grep -h "Traceback\|Error" $R/p_main_all.out | head -3 >> $R/progress
mkdir -p $R/p_trace_main_all; cp traces/*.json.gz $R/p_trace_main_all/ 2>/dev/null; rm -rf traces
echo "=== GPU tests: normuon or warm_start $(date +%T)" >> $R/progress
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tests TRITON_CACHE_DIR=/tmp/tri_tests timeout 300 python3 -m pytest -q \
  -p no:cacheprovider tests/test_gpu.py -k "normuon or warm_start" > $R/tests.txt 2>&1
tail -1 $R/tests.txt >> $R/progress; grep -m3 "Error\|assert" $R/tests.txt >> $R/progress
echo "=== s36b done $(date +%T)" >> $R/progress
