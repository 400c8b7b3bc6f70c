#!/bin/bash
# Session 24, call 4 (2 GPUs of one host): the merged change trains as main does on the GPUs. A 30 + 1-step proxy run
# on both GPUs (torchrun), seed 0, first with the tree (s24-counts-ahead, cold compile cache), then with main's
# train_gpt.py (scratch/main_train_gpt.py, 20744ba) from the same cache; their losses should agree to GPU rounding.
set -u
R=${OUT:-/tmp/res}; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader > $R/progress
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
run () {  # arm, script
  echo "=== $1 $(date +%T)" >> $R/progress
  timeout 200 python3 benchmarks/proxy_record.py --runs 1 --gpus 2 --out $R/$1 --script $2 --compile_cache /tmp/cc_chk \
    $T --scheduled_steps 30 --extension_steps 1 --val_loss_every 10 --seed 0 < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|val_loss' $R/$1/*.txt | cut -f1 | cut -c1-200 >> $R/progress
}
run counts train_gpt.py; run main scratch/main_train_gpt.py
echo "=== all done $(date +%T)" >> $R/progress
cat $R/progress
