"""The project's A/B rule, on two folders of proxy run logs: does the change beat the baseline?

    python records/ab.py BASELINE CHANGE

Each folder holds complete run logs (checked as summarize.py checks a record's), one per seed, and both hold the
same seeds, at least two, run in one session on one machine. The change passes if its mean training time is
below the baseline's by more than twice the larger seed spread (an arm's fastest run to its slowest) and its
mean final val loss is not above the baseline's by more than MAX_LOSS_RISE. Prints one line with the figures.

Exit status: 0 the change passes, 1 it does not, 2 a log has a problem or the seeds do not pair.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from summarize import check_log  # noqa: E402

MAX_LOSS_RISE = 0.003  # 3 mn: a faster run that trains worse is not a gain


def runs_by_seed(folder):
    """{seed: (final val loss, training time in s)} of the folder's run logs; raises ValueError naming the
    problems of a log that is not complete, or a seed found twice or not at all."""
    runs, problems = {}, []
    for path in sorted(Path(folder).glob("*.txt")):
        run, found = check_log(path)
        problems += found
        if found:
            continue
        if run.seed is None or run.seed in runs:
            problems.append(f"{path}: {'no seed' if run.seed is None else f'seed {run.seed} twice'} in the folder")
        else:
            runs[run.seed] = run.val_loss, run.train_ms / 1000
    if problems:
        raise ValueError("\n".join(problems))
    return runs


def compare(baseline, change):
    """The rule on {seed: (loss, time)} of the two arms: (passes, one line of figures)."""
    if baseline.keys() != change.keys() or len(baseline) < 2:
        raise ValueError(f"the arms must hold the same seeds, at least two: {sorted(baseline)} against "
                         f"{sorted(change)}")
    time = [statistics.mean(t for _, t in arm.values()) for arm in (baseline, change)]
    loss = [statistics.mean(x for x, _ in arm.values()) for arm in (baseline, change)]
    spread = max(max(t for _, t in arm.values()) - min(t for _, t in arm.values()) for arm in (baseline, change))
    passes = time[0] - time[1] > 2 * spread and loss[1] - loss[0] <= MAX_LOSS_RISE
    return passes, (f"seeds {sorted(baseline)}: baseline {loss[0]:.4f} in {time[0]:.3f} s, change {loss[1]:.4f} in "
                    f"{time[1]:.3f} s ({time[1] / time[0] - 1:+.2%}); larger seed spread {spread:.3f} s -> "
                    f"{'passes' if passes else 'fails'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("baseline", type=Path, help="folder of the baseline's run logs (*.txt), one per seed")
    parser.add_argument("change", type=Path, help="folder of the change's run logs, at the same seeds")
    args = parser.parse_args(argv)
    try:
        passes, figures = compare(runs_by_seed(args.baseline), runs_by_seed(args.change))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(figures)
    return 0 if passes else 1


if __name__ == "__main__":
    sys.exit(main())
