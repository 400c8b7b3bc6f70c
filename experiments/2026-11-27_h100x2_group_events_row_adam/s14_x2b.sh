#!/bin/bash
# Session 14, call 2, 2 x H100 on one host, from a copy outside the synced tree (setsid; poll with scratch/collect.sh).
# Arms: main = 8dcbf3d; events = 74606ba (an event per reduction); both = b46b40b (events + RowAdam compiled).
# Rules, fixed before the runs:
#  - 2 GPUs, torchrun, 185 + 3, seed 0, one run per arm in turn (main, events, both). Events is kept if its time is
#    below main's by more than 1 % (seed spread on 2 GPUs unknown; session 13's two arms at one seed were 0.03 % apart)
#    with a loss within 5 mn of main's; it changes nothing on one GPU.
#  - 1 GPU, main against both, seeds 0 and 1, two lanes side by side (GPU 0: main s0 then both s1; GPU 1: both s0
#    then main s1), each lane its own caches. Both's RowAdam change is kept if its mean time is below main's by more
#    than twice the larger seed spread of the two arms, and its mean loss within main's loss spread + 2 mn.
#  - step_profile on 2 GPUs of both: the proxy's batch, then --batch_tokens 98304 (the 8-GPU per-rank shapes).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "gradient_events or row_adam or sharded_ngram" ) \
  > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
for arm in main events both; do
  echo "=== $arm on 2 GPUs $(date +%T)" >> $R/progress
  timeout 300 python3 benchmarks/proxy_record.py --runs 1 --seed 0 --gpus 2 --out $R/${arm}_x2_s0 \
    --script scratch/train_gpt_$arm.py --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc $T \
    < /dev/null > $R/${arm}_x2_s0.out 2>&1
  echo "$arm x2 s0: $(grep -h '^final val_loss\|^peak_memory\|^startup' $R/${arm}_x2_s0/*.txt | cut -c1-200 | tr '\n' ' ')" >> $R/progress
done
lane() {  # GPU, then (arm seed) pairs
  local gpu=$1; shift
  export CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind$gpu TRITON_CACHE_DIR=/tmp/tri$gpu
  while [ $# -gt 0 ]; do
    local arm=$1 seed=$2; shift 2
    timeout 300 python3 benchmarks/proxy_record.py --runs 1 --seed $seed --out $R/${arm}_x1_s$seed \
      --script scratch/train_gpt_$arm.py --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc$gpu $T \
      < /dev/null > $R/${arm}_x1_s$seed.out 2>&1
    echo "$arm x1 s$seed (GPU $gpu): $(grep -h '^final val_loss\|^peak_memory' $R/${arm}_x1_s$seed/*.txt | tr '\n' ' ')" >> $R/progress
  done
}
for gpu in 0 1; do cp -r /tmp/ind /tmp/ind$gpu; cp -r /tmp/tri /tmp/tri$gpu; done
echo "=== one-GPU lanes $(date +%T)" >> $R/progress
lane 0 main 0 both 1 &
lane 1 both 0 main 1 &
wait
unset CUDA_VISIBLE_DEVICES
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
cp scratch/train_gpt_both.py train_gpt.py
D="--train_files data/proxy/proxy_train_*.bin --val_files data/proxy/proxy_val_*.bin --repeat_train_files $T"
set -f
for batch in 393216 98304; do
  echo "=== step_profile both 2 GPUs batch $batch $(date +%T)" >> $R/progress
  timeout 300 torchrun --standalone --nproc_per_node 2 benchmarks/step_profile.py $D --batch_tokens $batch \
    --trace_stage 5 < /dev/null > $R/profile_both_$batch.out 2>&1
  mkdir -p $R/traces_$batch; cp traces/*.json.gz $R/traces_$batch/; rm -rf traces
done
echo "=== all done $(date +%T)" >> $R/progress
