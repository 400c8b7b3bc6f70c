"""Session 26: does ValidationMask's copy wait for the busy default stream? Times, from the start, with
about 10 s of sleep kernels queued on the default stream first."""
import sys, tempfile, threading, time, types
import numpy as np, torch
sys.path.insert(0, ".")
import train_gpt as tg

def sleeps(seconds):
    for _ in range(int(seconds * 2)):
        torch.cuda._sleep(1_000_000_000)

def case_mask():
    merges = tg.load_merge_table("data/gpt2_merges.npy", 50304)[:1000]
    head = types.SimpleNamespace(never_follows=torch.zeros(1024, 128, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize(); t0 = time.perf_counter(); sleeps(10); t1 = time.perf_counter()
    mask = tg.ValidationMask(merges, head); t2 = time.perf_counter()
    mask.builder.join(); t3 = time.perf_counter()
    mask.receiver.join(); t4 = time.perf_counter(); busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize(); t5 = time.perf_counter()
    print(f"mask: queued {t1-t0:.2f} init done {t2-t0:.2f} process done {t3-t0:.2f} receiver done {t4-t0:.2f} "
          f"(stream busy then: {busy}) sleeps done {t5-t0:.2f}", flush=True)

def case_copy(kind):
    n = 1024 * 128
    if kind == "memmap":
        f = tempfile.NamedTemporaryFile(); host = np.memmap(f.name, np.uint8, "w+", shape=(n,)); host[:] = 1
    else:
        host = np.ones(n, np.uint8)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda"); stream = torch.cuda.Stream()
    torch.cuda.synchronize(); t0 = time.perf_counter(); sleeps(5)
    done = {}
    def work():
        with torch.cuda.stream(stream):
            dst.copy_(torch.from_numpy(host))
        done["t"] = time.perf_counter() - t0
    th = threading.Thread(target=work); th.start(); th.join()
    busy = not torch.cuda.current_stream().query(); torch.cuda.synchronize()
    print(f"copy from {kind} on a side stream in a thread: done {done['t']:.2f} s (stream busy then: {busy}), "
          f"sleeps done {time.perf_counter()-t0:.2f}", flush=True)

def case_stream_new():
    torch.cuda.synchronize(); t0 = time.perf_counter(); sleeps(3)
    s = torch.cuda.Stream(torch.device("cuda")); e = torch.empty(4096 * 1024 * 80, dtype=torch.uint8, device="cuda")
    t = time.perf_counter() - t0; torch.cuda.synchronize()
    print(f"a new stream and a 320 MB allocation with 3 s queued: returned at {t:.2f} s, sleeps done {time.perf_counter()-t0:.2f}")

case_mask(); case_copy("numpy"); case_copy("memmap"); case_stream_new()
