"""Steps from log step 110 on whose time is above 1.25x the median of the 10 steps before it and of the 10 after it
(a stage's first step is above the steps before only): a CUDA graph captured, a pass run uncaptured, or other work
in the timed loop. Prints each log's such steps, or none."""
import re, statistics, sys
for path in sys.argv[1:]:
    times = {int(m[1]): float(m[2]) for m in re.finditer(r"^step:(\d+)/\d+ train_loss:\S+ train_time:([\d.]+)ms",
                                                         open(path).read(), re.M)}
    delta = {k: times[k] - times[k - 1] for k in times if k - 1 in times}
    spikes = []
    for k, d in delta.items():
        around = [[delta.get(k + s * j) for j in range(1, 11)] for s in (-1, 1)]
        around = [[x for x in side if x is not None] for side in around]
        if k >= 110 and all(around) and all(d > 1.25 * statistics.median(side) for side in around):
            spikes.append((k, round(d)))
    print(path.split("/")[-2], "spikes:", spikes or "none")
