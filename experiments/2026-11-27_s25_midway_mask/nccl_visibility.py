"""Does NCCL keep its direct GPU-to-GPU path when each process sees only its own GPU? Written in session 25 for
session 26, NOT YET RUN.

Why: on several GPUs every rank compiles every graph for its own device (cuda:0, cuda:1, ...), so no rank's
compile cache serves another's. With CUDA_VISIBLE_DEVICES set to one GPU per process, every rank would compile
for cuda:0 and could share one cache. The catch: NCCL has needed each peer's GPU visible for its P2P transport
(NVIDIA/nccl#129, #1066; pytorch#52471), and fell back to host memory (SHM) without it.

    NCCL_DEBUG=INFO torchrun --standalone --nproc_per_node 2 nccl_visibility.py all   # every GPU visible
    NCCL_DEBUG=INFO torchrun --standalone --nproc_per_node 2 nccl_visibility.py own   # each rank its own GPU

Prints, on rank 0, a table of bfloat16 all-gathers and reduce-scatters: milliseconds per call (the median of 5
timings of 20 calls each, after 5 warm-up calls) and the bus bandwidth (nccl-tests' convention: the bytes of the
whole tensor over the time, times (n - 1) / n). NCCL's INFO lines name the transport of each channel ("via P2P/..."
or "via SHM/...")."""
import os
import statistics
import sys

MODE = sys.argv[1]
assert MODE in ("all", "own"), "all: every GPU visible; own: each rank sees its own GPU only"
LOCAL_RANK = int(os.environ["LOCAL_RANK"])
if MODE == "own":
    os.environ["CUDA_VISIBLE_DEVICES"] = str(LOCAL_RANK)  # before torch first touches CUDA

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

device = torch.device("cuda", 0 if MODE == "own" else LOCAL_RANK)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
world = dist.get_world_size()
rows = []
# 9.66 M elements: a rank's share of the head or of the value embeddings at 4 ranks (session 24's traces)
for elements in (1 << 20, 9_660_000, 1 << 26):
    shard = torch.randn(elements, dtype=torch.bfloat16, device=device)
    whole = torch.empty(elements * world, dtype=torch.bfloat16, device=device)
    for name, call in (("all-gather", lambda: dist.all_gather_into_tensor(whole, shard)),
                       ("reduce-scatter", lambda: dist.reduce_scatter_tensor(shard, whole))):
        for _ in range(5):
            call()
        timings = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                call()
            end.record()
            end.synchronize()
            timings.append(start.elapsed_time(end) / 20)
        ms = statistics.median(timings)
        bus = whole.numel() * 2 / (ms / 1e3) * (world - 1) / world / 1e9
        rows.append(f"| {MODE} | {name} | {elements * 2 / 2**20:.0f} MiB a rank | {ms:.3f} | {bus:.0f} |")
if dist.get_rank() == 0:
    print(f"| GPUs visible | collective | size | ms per call | bus GB/s |\n|---|---|---:|---:|---:|")
    print("\n".join(rows), flush=True)
dist.destroy_process_group()
