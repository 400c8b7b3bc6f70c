#!/bin/bash
# Session 34, one H200: where a cold start's time goes. a: cold; b: cold Inductor cache, Triton's cache from a;
# then the asked-rows patch's one-GPU GPU tests.
R=/tmp/res; rm -rf $R /tmp/gt /tmp/cc_* /tmp/tri_*; mkdir -p $R; cp -r . /tmp/gt; cd /tmp/gt
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/gt/.bytecode; unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/progress; nproc >> $R/progress
python3 -c "import pathlib, benchmarks.proxy_record as p; p.decompress(pathlib.Path('.proxyA'), pathlib.Path('data/proxy'))"
python3 -c "import torch, triton, torch._inductor.compile_fx, torch._dynamo"
FLAGS=(--train_files "data/proxy/proxy_train_*.bin" --val_files "data/proxy/proxy_val_*.bin" --repeat_train_files
  --val_tokens 1835008 --prefix_table data/gpt2_prefix_tokens.npy --merge_table data/gpt2_merges.npy
  --scheduled_steps 30 --extension_steps 1 --val_loss_every 0)
prof () {  # name, extra env
  echo "=== $1 $(date +%T)" >> $R/progress
  rm -rf logs
  env $2 timeout 300 python3 benchmarks/startup_profile.py "${FLAGS[@]}" --compile_cache /tmp/cc_$1 < /dev/null > $R/$1.out 2>&1
  grep -h "^startup\|^compile:\|^precompile .*: ended\|^warning\|^final\|^autotuned\|^frames \|Traceback" $R/$1.out | cut -c1-300 >> $R/progress
  grep -A70 "TorchDynamo compilation metrics" $R/$1.out | grep "compile_inner\|bytecode_tracing\|call_user_compiler\|create_aot\|fw_compiler\|bw_compiler\|GraphLowering.run\|GraphLowering.codegen\|async_compile\|build_guards\|benchmark_all\|PyCodeCache" >> $R/progress
}
prof a
mkdir -p /tmp/tri_b; cp -r /tmp/cc_a/triton/. /tmp/tri_b/
prof b TRITON_CACHE_DIR=/tmp/tri_b
prof a2 ""
echo "=== patch tests $(date +%T)" >> $R/progress
if [ -f scratch/train_gpt_asked.py ]; then
  cp -r /tmp/gt /tmp/gt_asked; cp scratch/train_gpt_asked.py /tmp/gt_asked/train_gpt.py
  rm -rf /tmp/gt_asked/tests; cp -r scratch/tests_asked /tmp/gt_asked/tests
  (cd /tmp/gt_asked && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_tasked TRITON_CACHE_DIR=/tmp/tri_tasked \
    timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "not nccl" > $R/tests_asked.txt 2>&1)
  tail -2 $R/tests_asked.txt >> $R/progress
fi
echo "=== s34a done $(date +%T)" >> $R/progress
