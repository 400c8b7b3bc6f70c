"""Rule 2 of s15.sh: print 'stack' or 'main' (last line); the figures go to stderr."""
import pathlib, re, statistics, sys

res = pathlib.Path(sys.argv[1])
summary = [l for l in pathlib.Path(sys.argv[2]).read_text().splitlines() if re.search(r"passed|failed|error", l)]
tests = summary[-1] if summary else ""
runs = {}
for arm in ("main", "stack"):
    for seed in (0, 1):
        text = "".join(p.read_text() for p in (res / f"{arm}_x2_s{seed}").glob("*.txt"))
        m = re.search(r"final val_loss:([\d.]+) train_time:([\d.]+)ms", text)
        runs[arm, seed] = (float(m[1]), float(m[2]) / 1e3) if m else None
print(runs, file=sys.stderr)
tests_ok = re.search(r"\d+ passed", tests) is not None and " failed" not in tests and " error" not in tests
if None in runs.values() or not tests_ok:
    print(f"tests_ok={tests_ok}; a run failed or tests did not pass -> main", file=sys.stderr)
    print("main"); sys.exit()
loss = {a: statistics.mean(runs[a, s][0] for s in (0, 1)) for a in ("main", "stack")}
time = {a: statistics.mean(runs[a, s][1] for s in (0, 1)) for a in ("main", "stack")}
spread = max(abs(runs[a, 0][1] - runs[a, 1][1]) for a in ("main", "stack"))
keep = time["main"] - time["stack"] > 2 * spread and loss["stack"] - loss["main"] < 0.005
print(f"mean time main {time['main']:.2f} s, stack {time['stack']:.2f} s ({time['stack'] / time['main'] - 1:+.2%}); "
      f"larger seed spread {spread:.2f} s; mean loss main {loss['main']:.4f}, stack {loss['stack']:.4f}", file=sys.stderr)
print("stack" if keep else "main")
