#!/bin/bash
# Session 23, call 2: where the written-gradients arm lost ~220 ms at the stage 1->2 transition (steps 123-125) of
# call 1's 2-GPU proxy A/B. Diagnostic copies (scratch/diag_patch.py) print every micro-step that is not a replay
# of an existing graph, and every optimizer-graph key not replayed, with the step. wg first, then main.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
run () {  # arm, seed
  echo "=== $1 seed $2 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 250 python3 benchmarks/proxy_record.py --runs 1 --gpus 2 --out $R/$1_x2 \
    --script scratch/train_gpt_$1.py --compile_cache /tmp/cc_ab $T --scheduled_steps 185 --extension_steps 3 \
    --seed $2 < /dev/null > $R/$1_s$2.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1_x2/*.txt | cut -f1 | cut -c1-240 | tail -2 >> $R/progress
  grep "DIAG" $R/$1_s$2.out | sort | uniq -c | sort -k5n | cut -c1-200 > $R/$1_diag.txt
  grep -c DIAG $R/$1_s$2.out >> $R/progress
}
run wgd 0; run maind 0
echo "=== all done $(date +%T)" >> $R/progress
