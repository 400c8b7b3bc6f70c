"""How much of the training step waits for data? One GPU, record shapes, real training steps.

    python benchmarks/loader_overlap.py --train_files 'data/proxy/proxy_train_*.bin' [any train_gpt flag]

Runs the same training step three ways and prints a table of median step times:
  resident     one batch kept on the GPU and reused: the step with no data cost at all
  prefetch     train_gpt.PrefetchLoader: built by a worker thread, copied on its own stream
  synchronous  built on the training thread, then copied on the compute stream (pinned, non_blocking)
Exposed data time = median step - median resident step. It also writes a torch.profiler trace of
prefetched steps (traces/prefetch.json, loadable in Perfetto) and counts the host-to-device copies
that ran while a compute kernel was running on another stream.
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt as tg  # noqa: E402


class SynchronousLoader:
    """The baseline: the step's batch is built on the training thread and copied on the compute stream."""

    def __init__(self, source, device):
        self.source, self.device, self.cursor = source, device, source.start
        self.buffers = tg.HostBuffers(pin_memory=True)

    def send(self, shape):
        torch.cuda.current_stream().synchronize()  # the single host buffer is free again
        start = self.cursor
        num_seqs, max_lens, self.cursor = self.source.build(start, shape, self.buffers)
        host = tg.HostBatch(shape, start, self.buffers, num_seqs, max_lens)
        tensors = [t.to(self.device, non_blocking=True) for t in host.tensors()]
        return tg._micro_batches(shape, *tensors, num_seqs, max_lens)


class ResidentLoader:
    def __init__(self, batch):
        self.batch = batch

    def send(self, shape):
        return self.batch


def time_steps(model, loader, shape, args, steps, warmup=3):
    adam, muon = tg.make_optimizers(model, args, 1, torch.device("cuda"))
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        tg.train_step(model, loader.send(shape), adam, muon, step, args, 1).item()
        times.append(time.perf_counter() - start)
    return times[warmup:]


def copies_overlapping_kernels(trace_path):
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    spans = lambda cat: [(e["ts"], e["ts"] + e["dur"], e.get("tid")) for e in events  # noqa: E731
                         if e.get("cat") == cat and "dur" in e]
    kernels = spans("kernel")
    copies = spans("gpu_memcpy")
    overlapping = sum(any(k0 < c1 and c0 < k1 and kt != ct for k0, k1, kt in kernels) for c0, c1, ct in copies)
    return overlapping, len(copies)


def main():
    args = tg.parse_args(sys.argv[1:])
    device = torch.device("cuda")
    shape = tg.BatchShape(args.micro_batch_tokens, args.max_seq_len, args.batch_tokens // args.micro_batch_tokens)
    model = tg.build_model(args, device, 1)
    source = lambda: tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=True)  # noqa: E731
    prefetch = tg.PrefetchLoader(source(), device)
    loaders = {"resident": ResidentLoader(prefetch.send(shape)), "prefetch": prefetch,
               "synchronous": SynchronousLoader(source(), device)}
    steps = 12
    results = {name: time_steps(model, loader, shape, args, steps) for name, loader in loaders.items()}
    results["prefetch (again)"] = time_steps(model, prefetch, shape, args, steps)  # run-to-run spread

    Path("traces").mkdir(exist_ok=True)
    adam, muon = tg.make_optimizers(model, args, 1, device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for step in range(2):
            tg.train_step(model, prefetch.send(shape), adam, muon, step, args, 1).item()
    prof.export_chrome_trace("traces/prefetch.json")
    overlapping, copies = copies_overlapping_kernels("traces/prefetch.json")

    base = statistics.median(results["resident"])
    print(f"\n{torch.cuda.get_device_name()}, {shape.accum_steps} x {shape.tokens} tokens per step, "
          f"median of {steps} steps after 3 warm-up steps")
    print(f"{'loader':<18}{'median step ms':>16}{'exposed data ms':>17}{'share of step':>15}")
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:<18}{1000 * median:>16.1f}{1000 * (median - base):>17.2f}{(median - base) / median:>15.2%}")
    print(f"host-to-device copies overlapping a compute kernel on another stream: {overlapping} of {copies} "
          f"(trace: traces/prefetch.json)")


if __name__ == "__main__":
    main()
