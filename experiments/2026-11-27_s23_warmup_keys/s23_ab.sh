#!/bin/bash
# Session 23, call 3, 2 GPUs of one host, written before the call. Arms: fix (branch s23-warmup-keys, 9cc9929: the
# warm-up runs every CUDA graph key of the run on two steps; TailAverage's averages made before the clock) and
# wgfix (branch s23-wg: the same, and a step's first micro-batch writes NorMuon's gradients, session 22's branch
# rebased). A proxy A/B on both GPUs, 185 + 3 steps,
# seeds 0 and 1, alternating (fix s0, wgfix s0, fix s1, wgfix s1), one compile cache; records/ab.py; then
# scratch/spikes.py on every log.
# Rules, fixed before the runs:
#  - fix is merged if the CPU suite passes and spikes.py finds no step from log step 110 on (the last excluded)
#    above 1.25x the medians of the 10 steps before it and of the 10 after it in fix's logs (call 1's main: log steps 123-124 at the untie
#    and 185 at the extension, in wg's logs 123-124 as well; in every log 142, the tail average's first step).
#  - wgfix is merged if ab.py passes it, or its A/B mean time is not above fix's (call 1's profiles met the
#    six-stage criterion and its GPU tests passed; the micro-step graph code is unchanged since).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
run () {  # arm, seed
  echo "=== $1 seed $2 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=0,1 timeout 220 python3 benchmarks/proxy_record.py --runs 1 --gpus 2 --out $R/$1_x2 \
    --script scratch/train_gpt_$1.py --compile_cache /tmp/cc_ab $T --scheduled_steps 185 --extension_steps 3 \
    --seed $2 < /dev/null > $R/$1_s$2.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1_x2/*.txt | cut -f1 | cut -c1-260 | tail -2 >> $R/progress
}
run fix 0; run wgfix 0; run fix 1; run wgfix 1
python3 records/ab.py $R/fix_x2 $R/wgfix_x2 >> $R/progress 2>&1
python3 scratch/spikes.py $R/fix_x2/2*.txt $R/wgfix_x2/2*.txt >> $R/progress 2>&1
echo "=== all done $(date +%T)" >> $R/progress
