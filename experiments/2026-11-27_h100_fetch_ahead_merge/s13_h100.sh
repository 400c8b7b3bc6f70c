#!/bin/bash
# Session 13, one H100, in a copy outside the synced tree (start with setsid; poll with scratch/collect.sh).
# ahead = fetch_ahead_nccl.patch applied to main (acf0806); main = acf0806 (train_gpt.py unchanged since f68c382).
#   1. GPU tests of the patched tree that one GPU runs: -k "ngram or graphed or prefetch or compiled_model";
#   2. the A/B at 185 + 3, seeds 0 and 1, all arms on this GPU, one after another: main, ahead, rows_half (main's
#      code with the table at 188,640 rows, half its 377,280). All arms share one compile cache (content-keyed).
# Rules (fixed before the runs):
#   ahead is merged if its mean time is not above main's by more than twice the larger seed spread, its mean loss
#   is not above main's by more than the larger loss spread, and each run's peak reserved memory is within 1 GiB
#   of main's same seed with no allocator retry (it moves work, not maths).
#   rows_half becomes the default if its mean time beats main's by more than twice the larger seed spread and its
#   mean loss is not above main's by more than the larger loss spread.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
echo "=== data ready $(date +%T)" >> $R/progress
( time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "ngram or graphed or prefetch or compiled_model" ) > $R/test_gpu.out 2>&1
echo "=== tests done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu.out | tail -1)" >> $R/progress
bash scratch/ab.sh scratch/s13.spec 185 3 0 1
grep -H "reserved=" $R/*_s*/*.txt >> $R/memory
echo "=== all done $(date +%T)" >> $R/progress
