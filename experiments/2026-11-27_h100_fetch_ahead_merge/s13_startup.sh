#!/bin/bash
# Session 13, one H100: where a warm start's seconds go. A 20 + 2-step proxy run three times with one compile cache:
# cold, warm, and warm under cProfile (the profile of the host's start-up; its times are inflated by cProfile).
R=/tmp/res; rm -rf $R /tmp/gt; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
rm -rf scratch/.bytecode
export PYTHONUNBUFFERED=1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
F="--train_files data/proxy/proxy_train_*.bin --val_files data/proxy/proxy_val_*.bin --repeat_train_files
   --val_tokens 1835008 --val_loss_every 0 --prefix_table data/gpt2_prefix_tokens.npy
   --merge_table data/gpt2_merges.npy --scheduled_steps 20 --extension_steps 2 --compile_cache /tmp/cc"
set -f  # the data patterns go to train_gpt.py as they are
for run in cold warm; do
  python3 train_gpt.py $F < /dev/null > $R/$run.out 2>&1
  echo "$run: $(grep -h '^startup' $R/$run.out | cut -f1)" >> $R/progress
done
python3 -m cProfile -o $R/warm.prof train_gpt.py $F < /dev/null > $R/warm_cprofile.out 2>&1
echo "cprofile: $(grep -h '^startup' $R/warm_cprofile.out | cut -f1)" >> $R/progress
cat $R/progress
