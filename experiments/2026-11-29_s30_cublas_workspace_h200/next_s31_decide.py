"""next_s31.sh's speed rule: python3 next_s31_decide.py RESULTS. Reads step_profile's tables in
RESULTS/gates_{main,gates}_{1,2}.out; prints each stage's step times and PASS or FAIL: the branch's stage 0 shorter
than main's in both rounds and by at least 0.1 ms in the mean, and no stage longer by more than 0.1 ms in the mean.
Exit status 0 on PASS, 1 on FAIL or a missing table."""
import re
import statistics
import sys
from pathlib import Path


def step_times(path):
    """{stage: step ms} from step_profile's first table."""
    rows = re.findall(r"^\| (\d) \| \([\d, ]+\) \| ([\d.]+) ms \|", Path(path).read_text(), re.M)
    return {int(stage): float(ms) for stage, ms in rows}


def main(results):
    times = {(arm, k): step_times(f"{results}/gates_{arm}_{k}.out") for arm in ("main", "gates") for k in (1, 2)}
    stages = sorted(times["main", 1])
    if not stages or any(sorted(t) != stages for t in times.values()):
        print("FAIL: a profile's table is missing or incomplete")
        return 1
    ok = all(times["gates", k][0] < times["main", k][0] for k in (1, 2))
    print("| stage | main | branch | mean difference |\n|---:|---:|---:|---:|")
    for stage in stages:
        main_ms = [times["main", k][stage] for k in (1, 2)]
        branch_ms = [times["gates", k][stage] for k in (1, 2)]
        diff = statistics.mean(branch_ms) - statistics.mean(main_ms)
        ok = ok and diff <= 0.1 and (stage != 0 or diff <= -0.1)
        print(f"| {stage} | {main_ms[0]} / {main_ms[1]} ms | {branch_ms[0]} / {branch_ms[1]} ms | {diff:+.2f} ms |")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
