nproc; nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch, sys; print(torch.__version__, sys.version.split()[0])"; df -h /tmp /dev/shm | tail -2
mkdir -p /tmp/probe_main /tmp/probe_proc; cp scratch/train_gpt_main.py /tmp/probe_main/train_gpt.py; cp train_gpt.py /tmp/probe_proc/train_gpt.py
ln -sfn $PWD/data /tmp/probe_main/data; ln -sfn $PWD/data /tmp/probe_proc/data
timeout 60 python3 scratch/s25_gpu_check.py 2>&1 | tail -6
for a in main proc; do timeout 40 python3 experiments/2026-11-27_s25_midway_mask/host_stall_probe.py /tmp/probe_$a "$a" 2>&1 | tail -1; done
