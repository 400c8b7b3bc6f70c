"""Start-up profile on the device: python scratch/coldprof.py cold|warm CACHE_DIR [extra flags]."""
import cProfile, io, pstats, sys, time
import train_gpt as t

def run():
    mode, cache = sys.argv[1], sys.argv[2]
    argv = ["--train_files", "/tmp/p/proxy_train_*.bin", "--val_files", "/tmp/p/proxy_val_*.bin",
            "--repeat_train_files", "--val_tokens", "1835008", "--val_loss_every", "0",
            "--scheduled_steps", "30", "--extension_steps", "1", "--compile_cache", cache, *sys.argv[3:]]
    import torch._inductor.config as ic
    print("compile_threads", ic.compile_threads, "worker_start", ic.worker_start_method, flush=True)
    import time as _time
    import torch._inductor.runtime.triton_heuristics as th
    tuned = []
    _orig = th.CachingAutotuner.benchmark_all_configs
    def _bench(self, *a, **k):
        t0 = _time.perf_counter()
        out = _orig(self, *a, **k)
        tuned.append((self.inductor_meta.get("kernel_name"), len(self.launchers), round(_time.perf_counter() - t0, 3),
                      getattr(self, "filename", None), bool(getattr(self, "save_cache_hook", None)),
                      self.inductor_meta.get("autotune_local_cache"), self.inductor_meta.get("force_disable_caches")))
        return out
    th.CachingAutotuner.benchmark_all_configs = _bench
    profiler = cProfile.Profile() if mode == "prof" else None
    if profiler:
        profiler.enable()
    rc = t.main(argv)
    if profiler:
        profiler.disable()
        for key in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(profiler, stream=s).sort_stats(key).print_stats(45)
            print(s.getvalue()[-9000:])
    from torch._dynamo.utils import compile_times
    print(compile_times(repr="str", aggregate=True))
    print("autotuned", len(tuned), "seconds", round(sum(k[2] for k in tuned), 2))
    for k in tuned[:60]:
        print("tuned", *k)
    import os
    for k in tuned[:5]:
        d = os.path.dirname(k[3] or "")
        print("dir", d, sorted(os.listdir(d)) if d and os.path.isdir(d) else None)
    from torch._dynamo.utils import counters
    for key in ("aot_autograd", "inductor"):
        print("counters", key, {k: v for k, v in counters[key].items() if "cache" in k or "bypass" in k})
    print("rc", rc)


if __name__ == '__main__':
    run()
