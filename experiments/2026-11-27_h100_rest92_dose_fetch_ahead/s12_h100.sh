#!/bin/bash
# Session 12, one H100, in a copy outside the synced tree (start with setsid; poll with scratch/collect.sh).
#   1. the A/B at 185 + 3, seeds 0 and 1, alternating: main (f68c382) and rest92 (#92's length caps, 3072 tokens from
#      stage 2 on, and its prefix-weight steps, 0.20/0.15/0.10/0.05 over the quarters of stage 1). Spec: scratch/s12.spec.
#   2. issue 34's dose arms, seed 0 (scratch/s12_dose.spec): the table at 1/2 of its 377,280 rows (main's compile
#      caches), and none (the table's output times zero: its loss is the no-table model's, its time is not).
# Rule for rest92 against main (fixed before the runs): taken if its mean time is not above main's by more than twice
# the larger seed spread and its mean loss beats main's by more than the larger loss spread, or if its time beats
# main's by more than twice the larger seed spread and its loss is not above main's by more than the larger loss
# spread. The dose arms decide nothing: they fill issue 34's dose table.
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
echo "=== data ready $(date +%T)" >> $R/progress
bash scratch/ab.sh scratch/s12.spec 185 3 0 1
bash scratch/ab.sh scratch/s12_dose.spec 185 3 0
echo "=== all done $(date +%T)" >> $R/progress
