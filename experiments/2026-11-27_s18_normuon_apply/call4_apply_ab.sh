#!/bin/bash
# Session 18's fourth call, 2 x H100 (nvidia-h100-x2), in the foreground, results straight into $OUT. Fixed before
# the runs: main at seeds 0 and 1, then apply (NorMuon's application compiled, s18-apply) at seeds 0 and 1, both
# GPUs, 185 + 3 steps; apply's caches are copies of main's after main's runs. records/ab.py decides. Then the new
# GPU test, in the time left.
R=$OUT; cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0,1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
arm_runs () {  # arm
  echo "=== $1 on 2 GPUs, 2 runs $(date +%T)" >> $R/progress
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$1 TRITON_CACHE_DIR=/tmp/tri_$1 timeout 250 python3 benchmarks/proxy_record.py \
    --runs 2 --gpus 2 --out $R/$1_x2 --script scratch/train_gpt_$1.py --compile_cache /tmp/cc_$1 \
    $T --scheduled_steps 185 --extension_steps 3 < /dev/null > $R/$1_x2.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1_x2/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
arm_runs main
for d in ind tri cc; do cp -r /tmp/${d}_main /tmp/${d}_apply; done
arm_runs apply
echo "apply against main on 2 GPUs: $(python3 records/ab.py $R/main_x2 $R/apply_x2 2>&1)" >> $R/progress
echo "=== GPU test $(date +%T)" >> $R/progress
timeout 60 python3 -m pytest -q tests/test_gpu.py -k "normuon_apply or normuon_replays" > $R/test_gpu.txt 2>&1
tail -2 $R/test_gpu.txt >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
