"""Steps from log step 110 on whose time is above 1.25x the median of the 10 steps before it and of the 10 after it
(a stage's first step is above the steps before only): a CUDA graph captured, a pass run uncaptured, or other work
in the timed loop. Prints each log's such steps, or none. Step times from records/summarize.py's check_log."""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "records"))
from summarize import check_log  # noqa: E402

for path in sys.argv[1:]:
    run, _ = check_log(Path(path))
    delta = dict(enumerate(run.step_ms, start=1))  # log step k: the time of step k
    spikes = []
    for k, d in delta.items():
        around = [[delta[k + s * j] for j in range(1, 11) if k + s * j in delta] for s in (-1, 1)]
        if k >= 110 and all(around) and all(d > 1.25 * statistics.median(side) for side in around):
            spikes.append((k, round(d)))
    print(Path(path).parent.name, "spikes:", spikes or "none")
