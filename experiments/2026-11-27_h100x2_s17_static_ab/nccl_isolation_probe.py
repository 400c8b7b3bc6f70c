"""Does NCCL keep NVLink when each rank sees only its own GPU? If it does, every rank can run on cuda:0, and one
compile cache (whose graphs name their GPU: train_gpt.load_compile_cache) serves any number of GPUs.

    torchrun --standalone --nproc_per_node 2 nccl_isolation_probe.py [--isolate]

With --isolate each process sets CUDA_VISIBLE_DEVICES to its own GPU (of those visible, by LOCAL_RANK) before CUDA
starts. Prints, on rank 0, the median time and bus bandwidth of all_reduce, reduce_scatter and all_gather of
256 MiB of bf16 over 20 repeats after 5. Run it with NCCL_DEBUG=INFO to see the transport ("via P2P/...",
"via SHM/...")."""
import os
import statistics
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
if "--isolate" in sys.argv:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(int(os.environ["LOCAL_WORLD_SIZE"])))))
    os.environ["CUDA_VISIBLE_DEVICES"] = visible.split(",")[local_rank]
    device = torch.device("cuda", 0)
else:
    device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
rank, world = dist.get_rank(), dist.get_world_size()
numel = 128 * 2**20  # 256 MiB of bf16
full = torch.ones(numel, dtype=torch.bfloat16, device=device)
shard = torch.empty(numel // world, dtype=torch.bfloat16, device=device)
ops = {"all_reduce": (lambda: dist.all_reduce(full), 2 * (world - 1) / world),
       "reduce_scatter": (lambda: dist.reduce_scatter_tensor(shard, full), (world - 1) / world),
       "all_gather": (lambda: dist.all_gather_into_tensor(full, shard), (world - 1) / world)}
for name, (op, factor) in ops.items():
    times = []
    for i in range(25):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        end.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    if rank == 0:
        print(f"{name} {'isolated' if '--isolate' in sys.argv else 'shared'} world {world}: {ms:.3f} ms, "
              f"bus {factor * 2 * numel / ms / 1e6:.1f} GB/s, device {torch.cuda.get_device_name(device)}", flush=True)
dist.destroy_process_group()
