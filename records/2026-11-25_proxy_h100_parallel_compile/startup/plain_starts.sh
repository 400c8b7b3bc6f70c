mkdir -p /tmp/p && for f in .proxy/*.xz; do xz -dc $f > /tmp/p/$(basename $f .xz); done
set -f; F="--train_files /tmp/p/proxy_train_*.bin --val_files /tmp/p/proxy_val_*.bin --repeat_train_files --val_tokens 1835008 --val_loss_every 0 --scheduled_steps 30 --extension_steps 1 --compile_cache /tmp/cc2"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $OUT/smi_gpu.csv &
for run in cold warm1 warm2; do python train_gpt.py $F > $OUT/$run.out 2>&1; grep -E "startup:|precompile|warning|error|peak_memory|final" $OUT/$run.out; done
set +f; kill %1; echo "peak GPU MiB (all processes): $(sort -n $OUT/smi_gpu.csv | tail -1)"
du -sh .bytecode /tmp/cc2
