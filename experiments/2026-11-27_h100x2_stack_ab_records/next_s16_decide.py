"""Rules 1, 3 and 4 of next_s16.sh, from the call's result folder: the A/B of the stack's seeds 0 and 1 against
main's on one GPU and on two, whether the stack is merged, and the records' ratio."""
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "records"))  # scratch/ beside records/
from summarize import check_log  # noqa: E402

res = pathlib.Path(sys.argv[1])


def runs(folder):
    """{seed: (final val loss, training time in s)} from the complete run logs of a proxy_record folder."""
    out = {}
    for log in sorted((res / folder).glob("*.txt")):
        run, problems = check_log(log)
        seed = re.search(r"--seed (\d+)", log.read_text())
        if seed and not problems:
            out[int(seed[1])] = (run.val_loss, run.train_ms / 1000)
    return out


summary = [line for line in (res / "test_gpu.out").read_text().splitlines() if re.search(r"passed|failed|error", line)]
tests_ok = bool(summary) and "passed" in summary[-1] and not re.search(r"failed|error", summary[-1])
print(f"rule 1, the stack's GPU tests: {summary[-1] if summary else 'no summary'} -> {'pass' if tests_ok else 'FAIL'}")
merged = tests_ok
for gpus in (1, 2):
    main, stack = runs(f"main_x{gpus}"), runs(f"stack_x{gpus}")
    if not all(s in main and s in stack for s in (0, 1)):
        print(f"{gpus} GPU(s): a run is missing (main {sorted(main)}, stack {sorted(stack)}) -> not merged")
        merged = False
        continue
    time = {arm: statistics.mean(r[s][1] for s in (0, 1)) for arm, r in (("main", main), ("stack", stack))}
    loss = {arm: statistics.mean(r[s][0] for s in (0, 1)) for arm, r in (("main", main), ("stack", stack))}
    spread = max(abs(r[0][1] - r[1][1]) for r in (main, stack))
    ok = time["main"] - time["stack"] > 2 * spread and loss["stack"] - loss["main"] <= 0.003
    merged = merged and ok
    print(f"rule 3, {gpus} GPU(s), seeds 0 and 1: main {loss['main']:.4f} in {time['main']:.3f} s, stack "
          f"{loss['stack']:.4f} in {time['stack']:.3f} s ({time['stack'] / time['main'] - 1:+.2%}); larger seed "
          f"spread {spread:.3f} s -> {'pass' if ok else 'fail'}")
print(f"rule 3: the stack is {'MERGED' if merged else 'NOT merged'}")
one, two = runs("stack_x1"), runs("stack_x2")
if len(one) == 3 and len(two) == 3:
    t1, t2 = (statistics.mean(r[1] for r in x.values()) for x in (one, two))
    print(f"rule 4: the stack's records, one H100 {t1:.3f} s, 2 x H100 {t2:.3f} s: {t2 / t1:.4f} x "
          f"({'meets' if t2 <= 0.52 * t1 else 'misses'} 0.52 x; {'they stand' if merged else 'they do not stand'})")
