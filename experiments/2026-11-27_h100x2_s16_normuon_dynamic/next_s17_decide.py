"""Rules 3 and 5 of next_s17.sh, from the call's result folder. `next_s17_decide.py RES 1`: the one-GPU A/B of the
stack against main (exit status 0 if it passes, so that the stack runs on 2 GPUs). `next_s17_decide.py RES 2`: the
2-GPU A/B of the arm that ran (stack or base) against main, what is merged, and the stack's records' ratio."""
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "records"))  # scratch/ beside records/
from summarize import check_log  # noqa: E402

res, gpus = pathlib.Path(sys.argv[1]), int(sys.argv[2])


def runs(folder):
    """{seed: (final val loss, training time in s)} from the complete run logs of a proxy_record folder."""
    out = {}
    for log in sorted((res / folder).glob("*.txt")):
        run, problems = check_log(log)
        seed = re.search(r"--seed (\d+)", log.read_text())
        if seed and not problems:
            out[int(seed[1])] = (run.val_loss, run.train_ms / 1000)
    return out


def ab(arm, gpus):
    """The A/B rule on seeds 0 and 1: the arm's mean time below main's by more than twice the larger seed spread,
    its mean loss not above main's by more than 3 mn."""
    main, other = runs(f"main_x{gpus}"), runs(f"{arm}_x{gpus}")
    if not all(s in main and s in other for s in (0, 1)):
        print(f"{gpus} GPU(s): a run is missing (main {sorted(main)}, {arm} {sorted(other)}) -> fail")
        return False
    time = {name: statistics.mean(r[s][1] for s in (0, 1)) for name, r in (("main", main), (arm, other))}
    loss = {name: statistics.mean(r[s][0] for s in (0, 1)) for name, r in (("main", main), (arm, other))}
    spread = max(abs(r[0][1] - r[1][1]) for r in (main, other))
    ok = time["main"] - time[arm] > 2 * spread and loss[arm] - loss["main"] <= 0.003
    print(f"{gpus} GPU(s), seeds 0 and 1: main {loss['main']:.4f} in {time['main']:.3f} s, {arm} {loss[arm]:.4f} "
          f"in {time[arm]:.3f} s ({time[arm] / time['main'] - 1:+.2%}); larger seed spread {spread:.3f} s -> "
          f"{'pass' if ok else 'fail'}")
    return ok


if gpus == 1:
    print("rule 3, ", end="")
    sys.exit(0 if ab("stack", 1) else 1)
arm = "stack" if (res / "stack_x2").is_dir() else "base"
print("rule 3 (one GPU) passed: the stack ran on 2 GPUs" if arm == "stack" else
      "rule 3 (one GPU) failed: base ran on 2 GPUs")
print("rule 5, ", end="")
ok = ab(arm, 2)
print(f"rule 5: {arm} is {'MERGED' if ok else 'NOT merged'}")
one, two = runs("stack_x1"), runs("stack_x2")
if arm == "stack" and len(one) == 3 and len(two) == 3:
    t1, t2 = (statistics.mean(r[1] for r in x.values()) for x in (one, two))
    print(f"the stack's records, one H100 {t1:.3f} s, 2 x H100 {t2:.3f} s: {t2 / t1:.4f} x "
          f"({'meets' if t2 <= 0.52 * t1 else 'misses'} 0.52 x; {'they stand' if ok else 'they do not stand'})")
