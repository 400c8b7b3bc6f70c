"""Peak GPU memory of a precompile helper's job: python scratch/helperpeak.py CACHE 1|2"""
import sys, time
import torch
import train_gpt as t

if __name__ == "__main__":
    cache, job = sys.argv[1], sys.argv[2]
    args = t.parse_args(["--train_files", "/tmp/p/proxy_train_*.bin", "--val_files", "/tmp/p/proxy_val_*.bin",
                         "--repeat_train_files", "--val_tokens", "1835008", "--scheduled_steps", "30",
                         "--extension_steps", "1", "--compile_cache", cache, "--warmup_steps", "2"])
    t.load_compile_cache(cache, print)
    device = torch.device("cuda", 0)
    shapes = [t.train_shape(args, 1, s) for s in t.TRAINING_STAGES]
    val_shape = t.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    stages = [1] if job == "1" else [2, None]
    clock = time.perf_counter()
    t.precompile(args, device, shapes, val_shape, stages)
    print(f"job {stages}: {time.perf_counter() - clock:.1f}s peak allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
          f" reserved {torch.cuda.max_memory_reserved() / 2**30:.1f} GiB", flush=True)
