#!/bin/bash
# Session 13, 2 x H100 on one host, in a copy outside the synced tree (start with setsid; poll with scratch/collect.sh).
# ahead = the working tree (fetch_ahead_nccl.patch applied to main acf0806); main = acf0806's train_gpt.py.
#   1. the NCCL test of the sharded table on both GPUs, with and without the fetch ahead (-k sharded_ngram);
#   2. torchrun on both GPUs at 185 + 3, seed 0: ahead, then main (issue 34's 2-GPU check with the patch; one seed,
#      decides nothing: the one-H100 A/B decided the merge);
#   3. step_profile on both GPUs at --batch_tokens 98304 (the 8-GPU per-rank shapes): ahead, then main, in
#      copies of the tree whose train_gpt.py is each arm's.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/gt_main; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
cp -r /tmp/gt /tmp/gt_main; cp scratch/train_gpt_main.py /tmp/gt_main/train_gpt.py
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k sharded_ngram ) > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
for arm in ahead main; do
  echo "=== $arm on 2 GPUs $(date +%T)" >> $R/progress
  timeout 300 python3 benchmarks/proxy_record.py --runs 1 --seed 0 --gpus 2 --out $R/${arm}_x2_s0 \
    --script scratch/train_gpt_$arm.py --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc $T \
    < /dev/null > $R/${arm}_x2_s0.out 2>&1
  echo "$arm x2 s0: $(grep -h '^final val_loss\|^peak_memory' $R/${arm}_x2_s0/*.txt | tr '\n' ' ')" >> $R/progress
done
for arm in ahead main; do
  echo "=== profile $arm $(date +%T)" >> $R/progress
  dir=/tmp/gt; [ $arm = main ] && dir=/tmp/gt_main
  (cd $dir && timeout 240 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py \
    --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files \
    --batch_tokens 98304 $T) < /dev/null > $R/profile_$arm.out 2>&1
done
echo "=== all done $(date +%T)" >> $R/progress
