#!/bin/bash
# Session 9, one H100: FanOut's A/B against main (36d1c40: the FP8 MLP backward merged), 185 + 3, seeds 0 and 1,
# alternating; then the record, 185 + 3, 3 runs (seeds 0-2), of main, or of fan-out if FanOut passed the rule
# fixed here before the runs: its mean time below main's by more than twice the larger seed spread of the
# two arms' times, and its mean loss not above main's by more than the larger seed spread of their losses.
R=/tmp/res; rm -rf $R /tmp/w9; mkdir -p $R; cp -r . /tmp/w9; cd /tmp/w9
rm -rf scratch/.bytecode scratch/logs
export PYTHONUNBUFFERED=1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
T='--prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy'
for seed in 0 1; do
  for arm in main fan; do
    echo "=== $arm seed $seed $(date +%T)" >> $R/progress
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$arm TRITON_CACHE_DIR=/tmp/tri_$arm \
    python3 benchmarks/proxy_record.py --runs 1 --seed $seed --out $R/${arm}_s$seed --script scratch/train_gpt_$arm.py \
      --scheduled_steps 185 --extension_steps 3 --compile_cache /tmp/cc_$arm $T < /dev/null > $R/${arm}_s$seed.out 2>&1
    grep -h "final val_loss" $R/${arm}_s$seed/*.txt >> $R/progress
  done
done
chosen=$(python3 - <<'PY'
import glob, re
def final(arm, seed):
    line = [l for l in open(glob.glob(f"/tmp/res/{arm}_s{seed}/*.txt")[0]) if l.startswith("final val_loss")][-1]
    return float(re.search(r"val_loss:([\d.]+)", line)[1]), float(re.search(r"train_time:([\d.]+)ms", line)[1]) / 1000
runs = {arm: [final(arm, s) for s in (0, 1)] for arm in ("main", "fan")}
mean = lambda xs: sum(xs) / len(xs)
t = {a: [r[1] for r in runs[a]] for a in runs}; l = {a: [r[0] for r in runs[a]] for a in runs}
time_spread = max(abs(t[a][0] - t[a][1]) for a in t); loss_spread = max(abs(l[a][0] - l[a][1]) for a in l)
gain = mean(t["main"]) - mean(t["fan"]); loss_cost = mean(l["fan"]) - mean(l["main"])
take = gain > 2 * time_spread and loss_cost <= loss_spread
import sys; print(f"gain {gain:.3f} s, time spread {time_spread:.3f} s, loss cost {loss_cost*1000:.1f} mn, loss spread {loss_spread*1000:.1f} mn, take {take}", file=open("/tmp/res/decision", "w"))
print("fan" if take else "main")
PY
)
cat $R/decision >> $R/progress
echo "=== record of $chosen $(date +%T)" >> $R/progress
cp scratch/train_gpt_$chosen.py train_gpt.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$chosen TRITON_CACHE_DIR=/tmp/tri_$chosen \
python3 benchmarks/proxy_record.py --runs 3 --out $R/record --scheduled_steps 185 --extension_steps 3 \
  --compile_cache /tmp/cc_rec < /dev/null > $R/record.out 2>&1
grep -h "final val_loss" $R/record/*.txt >> $R/progress
tail -25 $R/record.out >> $R/progress
echo "=== all done $(date +%T)" >> $R/progress
