"""Per run log: val loss at steps 50/100/150/final, training time, and per stage the median over its step pairs
(steps 0 and 1, 2 and 3, ...) of the pair's mean step time, from the logs' train_time. Usage: stage_times.py LOG..."""
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train_gpt as tg  # noqa: E402

for path in sys.argv[1:]:
    text = Path(path).read_text()
    times = {int(s): float(t) for s, t in re.findall(r"^step:(\d+)/\d+ \S+ train_time:([\d.]+)ms", text, re.M)}
    vals = dict(re.findall(r"^step:(\d+)/\d+ val_loss:([\d.]+)", text, re.M))
    scheduled = int(re.search(r"--scheduled_steps (\d+)", text)[1])
    starts = tg.stage_starts(tg.Hyperparameters(scheduled_steps=scheduled)) + [max(times) + 1]
    stages = []
    for first, end in zip(starts, starts[1:]):
        pairs = [(times[s + 2] - times[s]) / 2 for s in range(first, end - 2, 2) if s + 2 in times]
        stages.append(f"{statistics.median(pairs):.1f}")
    final = re.search(r"^final val_loss:([\d.]+) train_time:([\d.]+)ms", text, re.M)
    print(f"| {Path(path).name} | {' | '.join(vals.get(str(s), '-') for s in (50, 100, 150))} | {final[1]} | "
          f"{float(final[2]) / 1000:.2f} s | {' / '.join(stages)} |")
