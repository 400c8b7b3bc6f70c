"""Does recording an external CUDA event after each gradient accumulation inside a captured graph (GradientEvents,
several ranks) leave the GPU idle between the accumulations? Replays a graph of 56 float32 in-place adds (the
size of a 768 x 3072 matrix's gradient), with and without an external event recorded after each, and prints
the replay time (median of 200) and the profiler's gaps between the adds."""
import statistics
import torch
from torch.profiler import ProfilerActivity, profile

N, SIZE = 56, 768 * 3072
grads = [torch.zeros(SIZE, device="cuda") for _ in range(N)]
news = [torch.randn(SIZE, device="cuda") for _ in range(N)]


def build(events):
    evs = [torch.cuda.Event(external=True) for _ in range(N)] if events else None
    for e in evs or []:
        e.record()  # created before the capture, as GradientEvents' are by the uncaptured first micro-batch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            for i in range(N):
                grads[i].add_(news[i])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(N):
            grads[i].add_(news[i])
            if evs:
                evs[i].record()
    g.keep = evs  # the graph's event nodes name these events: they must outlive it
    return g


def timed(g, reps=200):
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def gaps(g):
    g.replay(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    ks = sorted([(e.time_range.start, e.time_range.end) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA and "add" in e.name.lower()])
    gs = [b[0] - a[1] for a, b in zip(ks, ks[1:]) if 0 <= b[0] - a[1] < 1000]
    return statistics.median(gs), sum(gs) / 5, statistics.median([e - s for s, e in ks])


print(torch.cuda.get_device_name(), torch.__version__)
for events in (False, True, False, True):
    g = build(events)
    med_gap, total_gap, kernel = gaps(g)
    print(f"events={events!s:5} replay {timed(g):8.1f} us | add kernel {kernel:5.1f} us, "
          f"median gap {med_gap:5.1f} us, gaps {total_gap:7.1f} us per replay")
