"""Part 1's rule of next_s18.sh, from the call's result folder: `next_s18_decide.py RES`. parts1 against main on
2 GPUs, seeds 0 and 1: merged if its mean time is below main's by more than twice the larger seed spread and its
mean loss not above main's by more than 3 mn."""
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


main, parts1 = runs("main_x2"), runs("parts1_x2")
if not all(s in main and s in parts1 for s in (0, 1)):
    sys.exit(f"a run is missing (main {sorted(main)}, parts1 {sorted(parts1)}): parts1 is NOT merged")
time = [statistics.mean(r[s][1] for s in (0, 1)) for r in (main, parts1)]
loss = [statistics.mean(r[s][0] for s in (0, 1)) for r in (main, parts1)]
spread = max(abs(r[0][1] - r[1][1]) for r in (main, parts1))
ok = time[0] - time[1] > 2 * spread and loss[1] - loss[0] <= 0.003
print(f"part 1, 2 GPUs, seeds 0 and 1: main {loss[0]:.4f} in {time[0]:.3f} s, parts1 {loss[1]:.4f} in {time[1]:.3f} s "
      f"({time[1] / time[0] - 1:+.2%}); larger seed spread {spread:.3f} s -> parts1 is {'MERGED' if ok else 'NOT merged'}")
