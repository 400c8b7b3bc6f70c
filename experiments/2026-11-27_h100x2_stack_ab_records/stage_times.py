"""Per run log: val loss at steps 50/100/150/final, training time, and per stage the median over its step pairs
(steps 1 and 2 of the stage, 3 and 4, ...) of the pair's mean step time. Usage: stage_times.py LOG..."""
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "records")]
import train_gpt as tg  # noqa: E402
from summarize import check_log  # noqa: E402

for path in map(Path, sys.argv[1:]):
    run, problems = check_log(path)
    assert not problems, problems
    scheduled = int(re.search(r"--scheduled_steps (\d+)", path.read_text())[1])
    starts = tg.stage_starts(tg.Hyperparameters(scheduled_steps=scheduled)) + [run.steps]
    stages = [statistics.median((run.step_ms[s] + run.step_ms[s + 1]) / 2 for s in range(first, end - 1, 2)
                                if s + 1 < run.steps) for first, end in zip(starts, starts[1:])]
    vals = [f"{loss:.4f}" for _, loss in run.val_points[1:4]]
    print(f"| {path.name} | {' | '.join(vals)} | {run.val_loss:.4f} | {run.train_ms / 1000:.2f} s | "
          f"{' / '.join(f'{ms:.1f}' for ms in stages)} |")
