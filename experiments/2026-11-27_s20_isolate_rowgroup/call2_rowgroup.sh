#!/bin/bash
# Session 20, call 2 (2 GPUs): the n-gram rows' own communicator (rowgroup) against main at the 8-GPU per-rank batch
# (--batch_tokens 98304), stages 0-2 (those whose exposed communication was over 1 % in call 1), one after the
# other with one Inductor cache (main cold first). Before it, the GPU tests of the sharded table over NCCL.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
echo "=== GPU test $(date +%T)" >> $R/progress
CUDA_VISIBLE_DEVICES=0,1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "ngram or nccl" \
  > $R/test_gpu.txt 2>&1
status=$?
tail -1 $R/test_gpu.txt >> $R/progress
if [ $status != 0 ]; then echo "=== all done: the GPU test failed $(date +%T)" >> $R/progress; exit 1; fi
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p TRITON_CACHE_DIR=/tmp/tri_p
for arm in main rowgroup; do
  echo "=== profile at 98304, $arm $(date +%T)" >> $R/progress
  cp scratch/train_gpt_$arm.py train_gpt.py; rm -rf traces
  CUDA_VISIBLE_DEVICES=0,1 timeout 300 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --val_tokens 1835008 --batch_tokens 98304 --stages 0 1 2 --trace_stage 0 $T \
    < /dev/null > $R/profile_98304_$arm.out 2>&1
  grep -A5 "^| stage | windows" $R/profile_98304_$arm.out >> $R/progress
  mkdir -p $R/traces_$arm; cp traces/step_profile_rank0.json.gz $R/traces_$arm/ 2>/dev/null
  python3 experiments/2026-11-27_h100x2_stack_ab_records/exposed_gaps.py $R/traces_$arm/step_profile_rank0.json.gz \
    > $R/gaps_98304_stage0_$arm.md 2>&1
  tail -13 $R/gaps_98304_stage0_$arm.md >> $R/progress
done
echo "=== all done $(date +%T)" >> $R/progress
