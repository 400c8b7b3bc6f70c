#!/bin/bash
# Session 21: issue 35's 2-GPU record on H100s, of main (f08ed6c's train_gpt.py; part 2 of next_s21.sh, fixed
# before the runs): 3 runs each at seeds 0, 1, 2, 185 + 3 steps, first on GPU 0 alone from an empty compile
# cache, then on both GPUs from that cache. They stand or fail as run. Not H100s: nothing runs.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  echo "=== not H100s: no records; all done $(date +%T)" >> $R/progress; exit 0
fi
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
runs () {  # name, processes, visible GPUs, runs
  echo "=== $1 $(date +%T)" >> $R/progress
  CUDA_VISIBLE_DEVICES=$3 timeout 580 python3 benchmarks/proxy_record.py --runs $4 --gpus $2 --out $R/$1 \
    --script scratch/train_gpt_main.py --compile_cache /tmp/cc_record $T --scheduled_steps 185 --extension_steps 3 \
    < /dev/null > $R/$1.out 2>&1
  grep -h '^startup\|^final val_loss' $R/$1/*.txt | cut -f1 | cut -c1-240 >> $R/progress
}
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
rm -rf /tmp/cc_*
runs record_x1 1 0 3
runs record_x2 2 0,1 3
for arm in record_x1 record_x2; do python3 records/summarize.py $R/$arm --target 1.9004 >> $R/progress 2>&1; done
python3 - $R/record_x2 $R/record_x1 >> $R/progress <<'PY'
import statistics, sys
sys.path.insert(0, "records")
from ab import runs_by_seed
two, one = (statistics.mean(t for _, t in runs_by_seed(folder).values()) for folder in sys.argv[1:])
print(f"ratio of the records' means, 2 GPUs to 1: {two / one:.4f}")
PY
echo "=== all done $(date +%T)" >> $R/progress
