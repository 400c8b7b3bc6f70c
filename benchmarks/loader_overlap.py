"""How much of the training step waits for data? One GPU, or every rank under torchrun; record shapes, real
training steps.

    python benchmarks/loader_overlap.py --train_files 'data/proxy/proxy_train_*.bin' [--stage I] [any train_gpt flag]
    torchrun --nproc_per_node 2 benchmarks/loader_overlap.py --batch_tokens 98304 [...]   # 8 GPUs' per-rank shapes

Measures at one stage of TRAINING_STAGES, by default the last (the record's micro-batch shape and its whole
batch, accumulated), with its batch shape and windows, at the stage's first two steps in turn: Adam steps on
odd steps only, so a step time is half the median of pairs of consecutive steps. Runs the same training
steps three ways and prints a table of step times:
  resident     one batch kept on the GPU and reused: the step with no data cost at all
  prefetch     train_gpt.PrefetchLoader: built by a worker thread, copied on its own stream
  synchronous  built on the training thread into one pinned buffer (refilled once its last copy is done), then
               copied on the compute stream
Steps are queued as train_gpt's loop queues them: each step's loss goes to pinned memory behind its kernels
and is read once the next step is queued, so the host never waits for the GPU between steps; a step's time
runs from one loss read to the next. Exposed data time = step - resident step. The 8-GPU per-rank shape,
one micro-batch per step: --batch_tokens 49152 on one GPU, 98304 on two (and --stage 0, 1 for the 16K and
32K micro-batches). Each rank also writes a torch.profiler trace of prefetched steps
(traces/prefetch_rank<r>.json, loadable in Perfetto) and counts the host-to-device copies that ran while a
compute kernel was running on another stream. With several ranks, rank 0 prints its own figures and the
largest exposed data time over the ranks.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt as tg  # noqa: E402


class SynchronousLoader:
    """The baseline: the step's batch is built on the training thread and copied on the compute stream."""

    def __init__(self, source, device):
        self.source, self.device, self.cursor = source, device, source.start
        self.buffers = tg.HostBuffers(pin_memory=True)

    def send(self, shape):
        # building waits for the buffer's last copy (HostBuffers.reserve)
        host, self.cursor = self.source.build(self.cursor, shape, self.buffers)
        tensors = [t.to(self.device, non_blocking=True) for t in host.tensors()]
        self.buffers.copied.record()
        return tg._micro_batches(host, tensors)

    def upcoming(self, shape):
        return None  # the next batch is not built yet: its forward pass fetches its n-gram rows


class ResidentLoader:
    def __init__(self, batch):
        self.batch = batch

    def send(self, shape):
        return self.batch

    def upcoming(self, shape):
        first = self.batch[0]
        return first.ngram_rows, first.ngram_owners, first.ngram_asked, None  # on the device already


def stage_steps(args, stage):
    """The stage's first two steps (its only one if it has one): an even one and an odd one, on which Adam
    steps, so that the steps timed cost what training's do on average."""
    starts = tg.stage_starts(args)
    end = (starts[1:] + [tg.total_steps(args)])[stage]
    if starts[stage] >= end:
        raise tg.UserError(f"--stage: stage {stage} has no training steps with these settings")
    return list(range(starts[stage], min(starts[stage] + 2, end)))


def run_steps(model, loader, shape, step_numbers, args, count, optimizers, world_size=1):
    """Queue `count` training steps, the step numbers in turn, each step's loss read once the next one is
    queued (as the training loop reads it); the times (perf_counter) at which each loss had been read, and
    the host's time to queue each step (ms, until train_step returns). step_profile.py runs its steps so too."""
    reads, queued, in_flight = [], [], None
    for k in range(count):
        clock = time.perf_counter()
        batch = loader.send(shape)
        loss = tg.DeferredLoss(tg.train_step(model, batch, optimizers, step_numbers[k % len(step_numbers)], args,
                                          world_size, loader.upcoming(shape)))
        queued.append(1000 * (time.perf_counter() - clock))
        if in_flight is not None:
            in_flight.read()
            reads.append(time.perf_counter())
        in_flight = loss
    in_flight.read()
    reads.append(time.perf_counter())
    return reads, queued


def pair_step_time(reads, warmup):
    """The step time from the times at which consecutive steps' losses were read, the first `warmup` steps
    left out: the median over pairs of consecutive steps (one with Adam's step, one without), halved."""
    steps = [b - a for a, b in zip(reads, reads[1:])][warmup:]
    return statistics.median(steps[i] + steps[i + 1] for i in range(0, len(steps) - 1, 2)) / 2


def time_steps(model, loader, shape, step_numbers, args, steps, world_size, warmup=3):
    """The step time (s): `warmup` untimed steps, then `steps` timed ones (even: as many Adam steps as not)."""
    optimizers = tg.make_optimizers(model, args, world_size)
    reads, _ = run_steps(model, loader, shape, step_numbers, args, warmup + steps + 1, optimizers, world_size)
    return pair_step_time(reads, warmup)


def copies_overlapping_kernels(trace_path):
    """Host-to-device copies that ran while a kernel ran on another stream, and all host-to-device copies.
    The trace's other copies (into the CUDA graphs' static inputs, the losses to the host) are not the loader's."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    spans = lambda cat, name="": [(e["ts"], e["ts"] + e["dur"], e.get("tid")) for e in events  # noqa: E731
                                  if e.get("cat") == cat and "dur" in e and name in e.get("name", "")]
    kernels = spans("kernel")
    copies = spans("gpu_memcpy", "HtoD")
    overlapping = sum(any(k0 < c1 and c0 < k1 and kt != ct for k0, k1, kt in kernels) for c0, c1, ct in copies)
    return overlapping, len(copies)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=int, default=len(tg.TRAINING_STAGES) - 1,
                        choices=range(len(tg.TRAINING_STAGES)), help="the stage to measure (default: the last)")
    own, flags = parser.parse_known_args()
    args = tg.parse_args(flags)
    rank, world_size, device = tg.init_process()
    shape = tg.train_shape(args, world_size, tg.TRAINING_STAGES[own.stage])
    step_numbers = stage_steps(args, own.stage)
    model = tg.build_model(args, device, world_size)
    prefetch = tg.PrefetchLoader(tg.train_source(args, rank, world_size, pin_memory=True), device)
    loaders = {"resident": ResidentLoader(prefetch.send(shape)), "prefetch": prefetch,
               "synchronous": SynchronousLoader(tg.train_source(args, rank, world_size, pin_memory=True), device)}
    steps = 12  # even: as many of each of the two step numbers
    results = {name: time_steps(model, loader, shape, step_numbers, args, steps, world_size)
               for name, loader in loaders.items()}
    results["prefetch (again)"] = time_steps(model, prefetch, shape, step_numbers, args, steps,
                                             world_size)  # run-to-run spread

    trace = Path("traces", f"prefetch_rank{rank}.json")
    trace.parent.mkdir(exist_ok=True)
    optimizers = tg.make_optimizers(model, args, world_size)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_steps(model, prefetch, shape, step_numbers, args, 4, optimizers, world_size)
    prof.export_chrome_trace(str(trace))
    ranks = [(results, copies_overlapping_kernels(trace))]
    if world_size > 1:
        ranks = [None] * world_size
        dist.all_gather_object(ranks, (results, copies_overlapping_kernels(trace)))
        dist.destroy_process_group()
    if rank == 0:
        print(table(ranks, torch.cuda.get_device_name(), shape, step_numbers, args, steps, own.stage))


def table(ranks, device, shape, step_numbers, args, steps, stage):
    """Rank 0's step times per loader, its exposed data time and, with several ranks, the largest over them;
    then each rank's copies that overlapped a kernel. ranks: (step times by loader, (overlapping, copies)) for
    each rank."""
    results = ranks[0][0]
    lines = [f"\n{len(ranks)} x {device}, stage {stage} (steps {step_numbers}, windows "
             f"{tg.attention_windows(step_numbers[0], args)}), {shape.accum_steps} x {shape.tokens} tokens per step "
             f"and rank, {steps} steps after 3 warm-up steps, losses read one step late: the median over pairs of "
             f"steps (rank 0; the exposed time's largest over the ranks)",
             f"{'loader':<18}{'step ms':>16}{'exposed data ms':>17}{'share of step':>15}{'largest exposed ms':>20}"]
    for name, step in results.items():
        exposed = [1000 * (r[name] - r["resident"]) for r, _ in ranks]
        lines.append(f"{name:<18}{1000 * step:>16.1f}{exposed[0]:>17.2f}{exposed[0] / 1000 / step:>15.2%}"
                     f"{max(exposed):>20.2f}")
    counts = ", ".join(f"rank {r}: {n} of {total}" for r, (_, (n, total)) in enumerate(ranks))
    lines.append(f"host-to-device copies overlapping a compute kernel on another stream: {counts} "
                 f"(traces: traces/prefetch_rank<r>.json)")
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        main()
    except tg.UserError as error:  # a bad flag or data file: one line, as train_gpt.py reports it
        sys.exit(f"error: {error}")
