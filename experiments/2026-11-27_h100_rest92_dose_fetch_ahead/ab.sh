#!/bin/bash
# A/B on the proxy: variants from a spec file (one line each: name, compile-cache name, script, then train_gpt flags), seeds given,
# one run after another. Started with setsid from the repository root on the device; works in a copy outside
# the synced tree. usage: bash scratch/ab.sh SPEC STEPS EXT SEEDS...
SPEC=$1; STEPS=$2; EXT=$3; shift 3
W=/tmp/w; R=/tmp/res
rm -rf $W /tmp/ind_* /tmp/tri_*; mkdir -p $W $R; cp -r . $W/; cd $W
export PYTHONUNBUFFERED=1
for seed in "$@"; do
  while read -r name cache script flags; do
    [ -z "$name" ] && continue
    echo "=== $name seed $seed $(date +%T)" >> $R/progress
    # each arm its own TorchInductor and Triton caches: an arm's cold start must not find another's kernels
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$cache TRITON_CACHE_DIR=/tmp/tri_$cache \
    python3 benchmarks/proxy_record.py --runs 1 --seed $seed --out $R/${name}_s$seed --script $script \
      --scheduled_steps $STEPS --extension_steps $EXT --compile_cache /tmp/cc_$cache $flags < /dev/null > $R/${name}_s$seed.out 2>&1
    grep -h "final val_loss" $R/${name}_s$seed/*.txt >> $R/progress
  done < $SPEC
done
echo "=== done $(date +%T)" >> $R/progress
