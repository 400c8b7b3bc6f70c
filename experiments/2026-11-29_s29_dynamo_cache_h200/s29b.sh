#!/bin/bash
# Session 29, call 3: Inductor's programmatic dependent launch (TORCHINDUCTOR_ENABLE_PDL=1) against main, at the
# 8-GPU per-rank shape on one GPU (--batch_tokens 49152: one 48K micro-batch a step), step_profile stages 0-2.
# Both arms compile at once (their figures are not read), then warm, alternating: off, on, off, on.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/ind_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1
python3 -c "import torch, torch._inductor.config as c; print(torch.__version__, torch.cuda.get_device_name(), 'enable_pdl' in dir(c.triton))" >> $R/progress 2>&1
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxy'), pathlib.Path('data/proxy'))"
F=(--stages 0 1 2 --train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin"
  --repeat_train_files --val_tokens 1835008 --batch_tokens 49152 --trace_stage 0
  --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy)
profile () {  # name, PDL (0 or 1)
  TORCHINDUCTOR_ENABLE_PDL=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$2 TRITON_CACHE_DIR=/tmp/tri_$2 timeout 400 \
    python3 benchmarks/step_profile.py "${F[@]}" < /dev/null > $R/$1.out 2>&1
}
echo "=== cold, both at once $(date +%T)" >> $R/progress
profile cold_off 0 & profile cold_on 1 & wait
for a in cold_off cold_on; do grep -A4 "^| stage | windows" $R/$a.out | cut -d'|' -f2,4,5,6 | sed "s/^/$a /" >> $R/progress; grep -h "Traceback\|Error" $R/$a.out | head -3 >> $R/progress; done
for k in 1 2; do for pdl in 0 1; do
  echo "=== warm pdl=$pdl ($k) $(date +%T)" >> $R/progress
  profile warm_${pdl}_$k $pdl
  grep -A4 "^| stage | windows" $R/warm_${pdl}_$k.out | cut -d'|' -f2,4,5,6,11 >> $R/progress
  mkdir -p $R/trace_${pdl}_$k; cp traces/*.json.gz $R/trace_${pdl}_$k/ 2>/dev/null; rm -rf traces
done; done
echo "=== s29b done $(date +%T)" >> $R/progress
