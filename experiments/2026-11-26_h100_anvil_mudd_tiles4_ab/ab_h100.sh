#!/bin/bash
# Session 11, one H100, in copies outside the synced tree (start with setsid; poll with scratch/collect.sh).
#   1. GPU tests: group-events (its event test), anvil (NorMuon's graphs and the rest of the optimizer tests),
#      mudd-groups (the compiled model), fp8-tiles-4 (the MLP kernels);
#   2. the A/B at 185 + 3, seeds 0 and 1, alternating: main, anvil (#92's ANVIL rule), mudd (#92's channel groups
#      in the head's dense connections), tiles4 (the FP8 MLP kernels at 4 pipeline stages). Spec: scratch/s11.spec.
#   3. issue 34's dose arms, seed 0 (scratch/s11_dose.spec): the table at 1/4 and 1/2 of its 377,280 rows, and none
#      (the table's output times zero: its loss is the no-table model's, its time is not).
# Rule for anvil, mudd and tiles4, each against main (fixed before the runs): taken if its mean time is not above main's by
# more than twice the larger seed spread and its mean loss beats main's by more than the larger loss spread, or if
# its time beats main's by more than twice the larger seed spread and its loss is not above main's by more than the
# larger loss spread. The dose arms decide nothing: they fill issue 34's dose table.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/g_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
for b in group-events anvil mudd-groups fp8-tiles-4; do
  case $b in group-events) k="gradient_events";; anvil) k="normuon or adam or graphed";; mudd-groups) k="compiled_model";;
    *) k="relu or mlp";; esac
  cp -r /tmp/gt /tmp/g_$b; cp -r scratch/tree_$b/* /tmp/g_$b/
  ( cd /tmp/g_$b; time python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "$k" ) > $R/test_gpu_$b.out 2>&1
  echo "=== tests $b done $(date +%T): $(grep -E 'passed|failed' $R/test_gpu_$b.out | tail -1)" >> $R/progress
done
bash scratch/ab.sh scratch/s11.spec 185 3 0 1
cd /tmp/gt; bash scratch/ab.sh scratch/s11_dose.spec 185 3 0
echo "=== all done $(date +%T)" >> $R/progress
