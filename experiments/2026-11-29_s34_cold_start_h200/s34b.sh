#!/bin/bash
# Session 34, one H200: is a cold start CPU-bound? CPU use over a cold start (default compile threads, then 4).
R=/tmp/res; rm -rf $R /tmp/gt /tmp/cc_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; nproc >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode python3 -c "import torch, triton, torch._inductor.compile_fx, torch._dynamo"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
ls data/proxy >> $R/progress
cold () {  # name, extra env
  echo "=== $1 $(date +%T)" >> $R/progress
  rm -rf logs
  python3 /tmp/gt/scratch/cpu_sampler.py > $R/cpu_$1.txt & S=$!
  env $2 python3 scratch/cputime.py timeout 300 python3 train_gpt.py "${FLAGS[@]}" --compile_cache /tmp/cc_$1 < /dev/null > $R/$1.out 2> $R/$1.time
  kill $S
  grep -h "^startup\|^compile:\|^precompile .*: ended\|^warning\|^final" logs/*.txt | cut -f1 >> $R/progress
  grep "^cpu user" $R/$1.time >> $R/progress
  echo "cubins $(find /tmp/cc_$1/triton -name '*.cubin' | wc -l) triton dirs $(ls /tmp/cc_$1/triton | wc -l)" >> $R/progress
  awk '{s+=$2; n++} END {print "mean busy cores", s/n, "over", n, "s"}' $R/cpu_$1.txt >> $R/progress
}
cold c
cold t4 TORCHINDUCTOR_COMPILE_THREADS=4
echo "=== s34b done $(date +%T)" >> $R/progress
