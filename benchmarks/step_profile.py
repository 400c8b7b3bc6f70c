"""Where a training step's time goes on 1 to 8 GPUs, and how much of it waits for communication.

    torchrun --standalone --nproc_per_node=8 benchmarks/step_profile.py [--steps 3] [any train_gpt flag]

Builds the model, optimizers and loader as train_gpt.py does, then, for each stage of TRAINING_STAGES (its batch
shape and windows), warms up and profiles real training steps on every rank: the stage's first two steps (Adam
steps on odd steps only) in turn, `--steps` times each. The steps are queued as the training loop queues them: a
step's loss is read once the next step is queued, so the GPU waits for the host between steps only where the host
is slower (the warm-up repeats capture the CUDA graphs, and are not measured). Rank 0 prints one table row per
stage: the step time (wall time per step from the first loss read to the last, unprofiled), the host's time to
queue a step (its median, unprofiled), the GPU's busy share (the union of its kernels over the span from the first
kernel to the last, profiled: the rest is the GPU waiting; like the exposed communication and the gaps below, from
the third profiled step on, as the first two start on a drained queue), the GPU kernel time by kind (matmuls,
attention, NCCL, the rest) and the exposed communication: the time during which an NCCL kernel ran and no other
kernel did, the part of communication that the step waits for. NCCL kernels also count the time they spend waiting
for the slowest rank, so their own total overstates the transfers; the exposed time is the figure to report, as a
share of the step (rank 0's, min and max over ranks), with the part of it in the GPU's waits (idle periods of
WAIT_US or more: the gaps of about a microsecond between any two kernels, in which NCCL often runs, are no wait for
it) and the part that is the n-gram table's exchange of rows and gradients (all_to_all). `--stages` profiles some
stages only. Then the optimizers' steps per stage: the host's time in the two halves of each step (start_step,
finish_step) and the span of their kernels on the GPU, which show what the optimizers cost a host-bound step. Then,
per stage, where the GPU waits: the gaps between kernels, grouped by the kernel before and after each (idle_gaps).
Then the `--top` kernels of the last stage outside matmuls, attention and NCCL, by their time per step, as a list
of what "other" holds. Each rank's trace of the last stage (or of --trace_stage) goes to
traces/step_profile_rank<r>.json.gz, gzipped (a stage's trace is about 12 MB of JSON on an H100, 0.8 MB gzipped,
and the device machines send files back within limits): open them in Perfetto side by side to see where one rank
waits for another.
"""
import argparse
import bisect
import functools
import math
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import train_gpt as tg  # noqa: E402
from benchmarks import loader_overlap  # noqa: E402
from benchmarks.step_ab import stage_steps  # noqa: E402


def kernel_kind(name):
    name = name.lower()
    if "nccl" in name:
        return "nccl"
    if "flash" in name or "fmha" in name:
        return "attention"
    if any(s in name for s in ("gemm", "cutlass", "sm90_xmma", "nvjet", "scaled_mm", "matmul")):
        return "matmul"
    return "other"


def is_row_exchange(name):
    """The n-gram table's exchanges of rows and their gradients (all_to_all: NCCL's send/receive kernels)."""
    name = name.lower()
    return "nccl" in name and ("sendrecv" in name or "alltoall" in name)


def short_name(name, width=90):
    """A kernel's name without "void", namespaces and its argument list, cut at `width` characters: PyTorch's
    elementwise kernels share their first 60 characters of namespaces, and only the functor in the template
    arguments tells a fill from an add."""
    name = re.sub(r"\(anonymous namespace\)::|\b\w+::", "", name.removeprefix("void "))
    depth = 0
    for i, char in enumerate(name):  # the argument list opens at the first "(" outside the template's <>
        depth += (char == "<") - (char == ">")
        if char == "(" and depth == 0:
            name = name[:i]
            break
    return name if len(name) <= width else name[: width - 1] + "…"


def merge(intervals):
    """The union of (start, end) intervals, as sorted disjoint intervals."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


WAIT_US = 5.0  # the shortest of the GPU's idle periods counted as a wait for communication


def exposed_time(communication, compute, min_wait=0.0):
    """Time covered by some communication interval and by no compute interval (same units as the input);
    min_wait: only in the compute's idle periods at least that long. The GPU idles about a microsecond between
    any two kernels (0.9 us on average over 1,700 kernels a step at the 8-GPU per-rank batch, 2 H200s, session
    20); communication that runs in such a gap is not what the compute waits for."""
    edges = [-math.inf] + [edge for interval in merge(compute) for edge in interval] + [math.inf]
    idle = [(start, end) for start, end in zip(edges[::2], edges[1::2]) if end - start >= min_wait]
    return sum(max(0.0, min(end, i_end) - max(start, i_start))
               for start, end in merge(communication) for i_start, i_end in idle)


def run_steps(model, loader, shape, optimizers, step_numbers, args, world_size, repeats):
    """The steps step_numbers in turn, `repeats` times, as the training loop queues them (loader_overlap's
    run_steps). Returns the wall time per step (ms, from the first loss read to the last: the GPU's start,
    idle until the host queues its first kernels, is left out; on the CPU, which runs each step as it is
    queued, the mean time to queue one) and the host's time to queue each step (ms)."""
    reads, queued = loader_overlap.run_steps(model, loader, shape, step_numbers, args,
                                             repeats * len(step_numbers), optimizers, world_size)
    if not next(model.parameters()).is_cuda:
        return statistics.mean(queued), queued
    return 1000 * (reads[-1] - reads[0]) / (len(reads) - 1), queued


def idle_gaps(kernels, profiled, top=4):
    """Where the GPU waits: kernels as (name, start, end) in microseconds, on any stream. The gaps in their union,
    grouped by the kernel that ran last before the gap and the first after it, the pairs with the most waiting
    first: [(ms per step, gaps per step, kernel before, kernel after)] for the `top` pairs; profiled: the number of
    steps the kernels span. A gap that recurs every step (a wait for the host, for a transfer, for another rank)
    shows as one pair with about one gap a step."""
    by_start = sorted(kernels, key=lambda k: k[1])
    pairs, last_name, last_end = {}, None, None
    for name, start, end in by_start:
        if last_end is not None and start > last_end:
            ms, count = pairs.get((last_name, name), (0.0, 0))
            pairs[last_name, name] = (ms + (start - last_end) / 1000, count + 1)
        if last_end is None or end >= last_end:
            last_name, last_end = name, end
    ranked = sorted(pairs.items(), key=lambda item: -item[1][0])[:top]
    return [(ms / profiled, count / profiled, before, after) for (before, after), (ms, count) in ranked]


def busy_share(intervals):
    """The share of the span from the first interval's start to the last one's end that some interval covers."""
    if not intervals:
        return 0.0
    merged = merge(intervals)
    return sum(end - start for start, end in merged) / (merged[-1][1] - merged[0][0])


OPTIMIZER_HALVES = ("start_step", "finish_step")  # train_step calls these, not step()


def annotate_steps():
    """Give each training step a record_function range, "train_step", which measured_from reads, and each half of
    each optimizer's step one of its own, e.g. "NorMuon.start_step", which optimizer_times reads. Here and not in
    train_gpt.py: a range costs the host some microseconds even when no profiler runs."""
    def annotated(function, name):
        @functools.wraps(function)
        def ranged(*args, **kwargs):
            with record_function(name):
                return function(*args, **kwargs)
        return ranged

    tg.train_step = annotated(tg.train_step, "train_step")  # loader_overlap.run_steps calls it as tg.train_step
    for optimizer in (tg.NorMuon, tg.Adam, tg.RowAdam):
        for name in OPTIMIZER_HALVES:
            setattr(optimizer, name, annotated(getattr(optimizer, name), f"{optimizer.__name__}.{name}"))


def optimizer_region(trace_events):
    """For a trace that step_profile exported (its events with "ph" X): a function from a GPU time (us) to the
    optimizer range it falls in, e.g. "Adam.start_step" (annotate_steps) or "Adam.zero_grad" (PyTorch's
    "Optimizer.zero_grad#Adam.zero_grad"), or None. Earlier traces' whole steps ("Optimizer.step#Adam.step") count
    too. "train_step" does not: it holds the forward and backward pass."""
    halves = tuple(f".{half}" for half in OPTIMIZER_HALVES)
    ranges = sorted((e["ts"], e["ts"] + e["dur"], e["name"].split("#")[-1]) for e in trace_events
                    if e.get("cat") == "gpu_user_annotation"
                    and (e["name"].startswith("Optimizer.") or e["name"].endswith(halves)))
    starts = [start for start, _, _ in ranges]

    def region(ts):
        i = bisect.bisect_right(starts, ts) - 1
        return ranges[i][2] if i >= 0 and ts <= ranges[i][1] else None
    return region


def measured_from(step_ranges, steps, skip):
    """Where the GPU's waits are measured from: the start of the profiled step after the first `skip` of `steps`,
    or -inf (all of them) unless each CUDA stream has one range a step and there are steps after the skipped ones.
    `step_ranges` are the "train_step" ranges on the GPU, (stream, start, end), in any order: the profiler gives
    one per stream that ran the step's kernels (the compute stream and NCCL's, 2 H200s, session 21), so a step
    starts where the first of its streams does.
    The profiled steps begin with the GPU's queue drained, since the timed steps before them end on a loss read,
    and the first step waits for the host to queue it: 1.4 ms of idle in stage 0 at the 8-GPU per-rank batch on
    2 H200s (session 20), 0.9 % of its six profiled steps, which no training step pays."""
    starts = {}
    for stream, start, _ in step_ranges:
        starts.setdefault(stream, []).append(start)
    if not starts or steps <= skip or any(len(s) != steps for s in starts.values()):
        return -math.inf
    return min(sorted(s)[skip] for s in starts.values())


def optimizer_times(annotations, profiled):
    """The optimizers' steps, in ms per step over `profiled` steps, from the ranges of their halves
    (annotate_steps; name, on the GPU, microseconds), e.g. ("NorMuon.start_step", False, 9200.0):
    {optimizer: [host, GPU]}, the host's time in the calls and the span of their kernels on the GPU, both halves
    added. Other ranges are left out."""
    times = {}
    for name, on_gpu, us in annotations:
        optimizer, _, half = name.partition(".")
        if half in OPTIMIZER_HALVES:
            times.setdefault(optimizer, [0.0, 0.0])[on_gpu] += us / 1000 / profiled
    return times


def profile_steps(model, loader, shape, optimizers, step_numbers, args, world_size, steps, device):
    """Kernel time by kind (ms per step), exposed communication, the part of it in the GPU's waits of WAIT_US or
    more and the part that is the n-gram table's row exchange (ms per step), the GPU's busy share, the "other"
    kernels' time by name (ms per step, and launches per step), the optimizers' (optimizer_times) and the GPU's
    idle gaps (idle_gaps), profiled. The exposed times, the busy share and the gaps leave the first steps out
    (measured_from)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run_steps(model, loader, shape, optimizers, step_numbers, args, world_size, steps)
    # the optimizers' record_function ranges come back as GPU events too ("Adam.start_step"): they span kernels
    # counted on their own, so they are left out
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    kernels = [(kernel_kind(e.name), e.time_range.start, e.time_range.end) for e in events]
    profiled = steps * len(step_numbers)
    by_kind = {kind: 0.0 for kind in ("matmul", "attention", "nccl", "other")}
    other_time, other_launches = Counter(), Counter()
    for e, (kind, start, end) in zip(events, kernels):
        by_kind[kind] += (end - start) / 1000 / profiled
        if kind == "other":
            other_time[e.name] += (end - start) / 1000 / profiled
            other_launches[e.name] += 1 / profiled
    # the waits (busy share, exposed communication, gaps) from the second round of the stage's steps on: the first
    # round starts on a drained queue (measured_from)
    start = measured_from([(e.device_resource_id, e.time_range.start, e.time_range.end) for e in prof.events()
                           if e.is_user_annotation and e.device_type == DeviceType.CUDA and e.name == "train_step"],
                          profiled, len(step_numbers))
    measured = profiled - len(step_numbers) if start > -math.inf else profiled
    if device.type == "cuda" and measured == profiled:
        print(f"note: the steps' ranges were not found on the GPU as expected; busy, exposed and gaps span all "
              f"{profiled} profiled steps", flush=True)
    windowed = [(e.name, kind, max(s, start), end) for e, (kind, s, end) in zip(events, kernels) if end > start]
    compute = [(s, e) for _, k, s, e in windowed if k != "nccl"]
    communication = [(s, e) for _, k, s, e in windowed if k == "nccl"]
    exposed = exposed_time(communication, compute) / 1000 / measured
    waited = exposed_time(communication, compute, min_wait=WAIT_US) / 1000 / measured
    exchange = exposed_time([(s, e) for name, _, s, e in windowed if is_row_exchange(name)], compute) / 1000 / measured
    busy = busy_share([(s, e) for _, _, s, e in windowed])
    others = [(name, ms, other_launches[name]) for name, ms in other_time.most_common()]
    optimizer = optimizer_times([(e.name, e.device_type == DeviceType.CUDA, e.time_range.elapsed_us())
                                 for e in prof.events() if e.is_user_annotation], profiled)
    gaps = idle_gaps([(name, s, e) for name, _, s, e in windowed], measured)
    return by_kind, (exposed, waited, exchange), busy, others, optimizer, gaps, prof


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="profiled repetitions of each measured step")
    parser.add_argument("--warmup", type=int, default=3, help="repetitions of each measured step before profiling")
    parser.add_argument("--top", type=int, default=20, help="the last stage's largest other kernels to list")
    parser.add_argument("--trace_stage", type=int, help="the stage whose traces are written (default: the last)")
    parser.add_argument("--stages", type=int, nargs="+", help="the stages profiled (default: all with steps)")
    own, flags = parser.parse_known_args()
    if own.steps < 2:
        parser.error("--steps must be at least 2: the step time runs from the first loss read to the last")
    args = tg.parse_args(flags)
    every = [i for i, _ in stage_steps(tg, args)]
    if not set(own.stages or every) <= set(every):
        parser.error(f"--stages {own.stages}: the stages with training steps are {every}")
    stages = [i for i in every if own.stages is None or i in own.stages]
    if own.trace_stage not in (None, *stages):
        parser.error(f"--trace_stage {own.trace_stage}: the stages profiled are {stages}")
    annotate_steps()
    rank, world_size, device = tg.init_process()
    cuda = device.type == "cuda"
    model = tg.build_model(args, device, world_size)
    loader = tg.PrefetchLoader(tg.train_source(args, rank, world_size, pin_memory=cuda), device)
    optimizers = tg.make_optimizers(model, args, world_size)

    rows = []
    for i, step_numbers in stage_steps(tg, args):
        if i not in stages:
            continue
        shape = tg.train_shape(args, world_size, tg.TRAINING_STAGES[i])
        run_steps(model, loader, shape, optimizers, step_numbers, args, world_size, own.warmup)
        step_ms, queued = run_steps(model, loader, shape, optimizers, step_numbers, args, world_size, own.steps)
        by_kind, (exposed, waited, exchange), busy, others, optimizer, gaps, prof = profile_steps(
            model, loader, shape, optimizers, step_numbers, args, world_size, own.steps, device)
        # exported at once: a profile's GPU events read back as time 0 once a later profile has run
        if own.trace_stage == i or (own.trace_stage is None and i == stages[-1]):
            Path(ROOT, "traces").mkdir(exist_ok=True)
            prof.export_chrome_trace(str(ROOT / "traces" / f"step_profile_rank{rank}.json.gz"))
        shares = [exposed / step_ms]
        if world_size > 1:
            shares = [None] * world_size
            dist.all_gather_object(shares, exposed / step_ms)
        rows.append((i, tg.attention_windows(step_numbers[0], args), step_ms, statistics.median(queued), busy,
                     by_kind, exposed, waited, exchange, shares, gaps, optimizer))
    if rank == 0:
        print(f"{world_size} × {torch.cuda.get_device_name(device) if cuda else 'CPU'}, per stage its first two "
              f"steps in turn, {own.steps} times each after {own.warmup}, each loss read once the next step is "
              f"queued; kernel times in ms per step (rank 0)")
        print("step: wall time per step, unprofiled; host: the median time to queue a step, unprofiled (a "
              "host-bound step queues in about its whole time); GPU busy: the union of its kernels over their "
              "span, profiled, from the third profiled step on")
        print(f"exposed communication: NCCL's kernels while no other runs; in waits: in the GPU's idle periods of "
              f"{WAIT_US:g} us or more alone, not in the gaps of about a microsecond between any two kernels")
        print("| stage | windows | step | host | GPU busy | matmul | attention | NCCL | other | exposed "
              "communication | share of step: rank 0, min–max over ranks | in waits | of which the n-gram rows' "
              "exchange |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for i, windows, step_ms, host, busy, by_kind, exposed, waited, exchange, shares, *_ in rows:
            kinds = " | ".join(f"{by_kind[k]:.1f}" for k in ("matmul", "attention", "nccl", "other"))
            print(f"| {i} | {windows} | {step_ms:.1f} ms | {host:.1f} ms | {busy:.1%} | {kinds} | {exposed:.1f} "
                  f"ms | {shares[0]:.1%}, {min(shares):.1%}–{max(shares):.1%} | {waited:.2f} ms, "
                  f"{waited / step_ms:.1%} | {exchange:.2f} ms, {exchange / step_ms:.1%} |")
        names = sorted({name for row in rows for name in row[-1]})
        print("\nthe optimizers' steps, ms per step (rank 0, profiled: the profiler slows the host): the host's time "
              "in the two halves of each step / the span of their kernels on the GPU (Adam steps on odd steps only)")
        print("| stage | " + " | ".join(names) + " |")
        print("|---:|" + "---:|" * len(names))
        for i, *_, optimizer in rows:
            cells = (f"{optimizer[n][0]:.1f} / " + (f"{optimizer[n][1]:.1f}" if cuda else "–") if n in optimizer
                     else "–" for n in names)
            print(f"| {i} | " + " | ".join(cells) + " |")
        print("\nwhere the GPU waits, per stage (rank 0, profiled): the gaps between kernels, grouped by the kernel "
              "before and the kernel after, the most waiting first; ms and gaps per step")
        print("| stage | ms | gaps | kernel before | kernel after |")
        print("|---:|---:|---:|---|---|")
        for i, *_, gaps, _ in rows:
            for ms, count, before, after in gaps:
                print(f"| {i} | {ms:.2f} | {count:.1f} | `{short_name(before)}` | `{short_name(after)}` |")
        print(f"\nstage {rows[-1][0]}: the {own.top} largest of {len(others)} other kernels, "
              f"{sum(ms for _, ms, _ in others):.1f} ms per step in all")
        print("| kernel | ms per step | launches per step |")
        print("|---|---:|---:|")
        for name, ms, launches in others[: own.top]:
            print(f"| `{short_name(name)}` | {ms:.2f} | {launches:.0f} |")
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except tg.UserError as error:  # a bad flag or data file: one line, as train_gpt.py reports it
        sys.exit(f"error: {error}")
