"""Print a line per process of the counters files: its name, FX graph and AOTAutograd cache hits and misses,
graphs compiled."""
import json
import sys

for path in sys.argv[1:]:
    for line in open(path):
        entry = json.loads(line)
        c = entry["counters"]
        pick = {f"{group}.{key}": value for group, values in c.items() for key, value in values.items()
                if any(word in key for word in ("cache", "unique_graphs", "calls_captured"))}
        print(path.rsplit("/", 1)[-1], entry["process"], entry["argv"][1:3], json.dumps(pick, sort_keys=True))
