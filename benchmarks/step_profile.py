"""Where a training step's time goes on 1 to 8 GPUs, and how much of it waits for communication.

    torchrun --standalone --nproc_per_node=8 benchmarks/step_profile.py [--steps 3] [any train_gpt flag]

Builds the model, optimizers and loader as train_gpt.py does, then, for the shortest and the longest
window of the schedule (the first and the last step), warms up and profiles `--steps` real training steps
on every rank. Rank 0 prints one table row per window: the median step time, the GPU kernel time by kind
(matmuls, attention, NCCL, the rest) and the exposed communication: the time during which an NCCL kernel
ran and no other kernel did, the part of communication that the step waits for. NCCL kernels also count
the time they spend waiting for the slowest rank, so their own total overstates the transfers; the
exposed time is the figure to report, as a share of the step (median, min and max over ranks). Rank 0's
trace of the last window goes to traces/step_profile.json (open it in Perfetto).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import train_gpt as tg  # noqa: E402


def kernel_kind(name):
    name = name.lower()
    if "nccl" in name:
        return "nccl"
    if "flash" in name or "fmha" in name:
        return "attention"
    if any(s in name for s in ("gemm", "cutlass", "sm90_xmma", "nvjet", "scaled_mm")):
        return "matmul"
    return "other"


def merge(intervals):
    """The union of (start, end) intervals, as sorted disjoint intervals."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def exposed_time(communication, compute):
    """Time covered by some communication interval and by no compute interval (same units as the input)."""
    busy = merge(compute)
    total = 0.0
    for start, end in merge(communication):
        total += end - start
        for b_start, b_end in busy:  # subtract the overlap with every compute interval
            total -= max(0.0, min(end, b_end) - max(start, b_start))
    return total


def profile_steps(model, loader, shape, adam, muon, step, args, world_size, steps, device):
    """Median step time (ms), kernel time by kind (ms per step) and exposed communication (ms per step)."""
    times = []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            clock = time.perf_counter()
            tg.train_step(model, loader.send(shape), adam, muon, step, args, world_size).item()
            times.append(1000 * (time.perf_counter() - clock))
    kernels = [(kernel_kind(e.name), e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == DeviceType.CUDA]
    by_kind = {kind: 0.0 for kind in ("matmul", "attention", "nccl", "other")}
    for kind, start, end in kernels:
        by_kind[kind] += (end - start) / 1000 / steps
    exposed = exposed_time([(s, e) for k, s, e in kernels if k == "nccl"],
                           [(s, e) for k, s, e in kernels if k != "nccl"]) / 1000 / steps
    return statistics.median(times), by_kind, exposed, prof


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per window")
    parser.add_argument("--warmup", type=int, default=3, help="steps before profiling, per window")
    own, flags = parser.parse_known_args()
    args = tg.parse_args(flags)
    rank, world_size, device = tg.init_process()
    cuda = device.type == "cuda"
    shape = tg.train_shape(args, world_size)
    model = tg.build_model(args, device, world_size)
    source = tg.TrainSource(args.train_files, rank, world_size, repeat=True, pin_memory=cuda)
    loader = tg.PrefetchLoader(source, device)
    adam, muon = tg.make_optimizers(model, args, world_size, device)

    rows = []
    for step in (0, args.num_iterations - 1):
        for _ in range(own.warmup):
            tg.train_step(model, loader.send(shape), adam, muon, step, args, world_size).item()
        median, by_kind, exposed, prof = profile_steps(model, loader, shape, adam, muon, step, args, world_size,
                                                       own.steps, device)
        shares = [exposed / median]
        if world_size > 1:
            shares = [None] * world_size
            dist.all_gather_object(shares, exposed / median)
        rows.append((tg.long_window(step, args), median, by_kind, exposed, shares))
    if rank == 0:
        Path(ROOT, "traces").mkdir(exist_ok=True)
        prof.export_chrome_trace(str(ROOT / "traces" / "step_profile.json"))
        print(f"{world_size} × {torch.cuda.get_device_name(device) if cuda else 'CPU'}, {own.steps} profiled steps "
              f"after {own.warmup} per window; kernel times in ms per step (rank 0)")
        print("| window | median step | matmul | attention | NCCL | other | exposed communication | share "
              "of step: rank 0, min–max over ranks |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for window, median, by_kind, exposed, shares in rows:
            kinds = " | ".join(f"{by_kind[k]:.1f}" for k in ("matmul", "attention", "nccl", "other"))
            print(f"| {window} | {median:.1f} ms | {kinds} | {exposed:.1f} ms | {shares[0]:.1%}, "
                  f"{min(shares):.1%}–{max(shares):.1%} |")
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
