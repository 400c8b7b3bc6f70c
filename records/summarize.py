"""Check a record's run logs and summarize them.

    python records/summarize.py records/<folder> [--target 3.28] [--retarget] [--check]

Every `*.txt` in the folder must be one complete run log in the format of docs/log_format.md. Each
log is checked: the embedded source matches its code_sha256, train steps are exactly 1..N in order,
train_time never decreases, step_avg agrees with train_time/step, there are validation lines at
steps 0 and N, and the final line agrees with them. All logs must embed the same code. A log that carries
the hash chain (log format 2: every line ends with a tab and a hash of that line and the ones before it) must
carry it on every line, unbroken: an edited line breaks it there. What the chain proves, and what not, is in
docs/log_format.md. Problems are printed to stderr as `file:line: message`.

If every log is good, the tool writes <folder>/statistics.md (also printed to stdout) and
<folder>/val_loss.png, and runs a one-sided t-test of "mean final val loss < target". With --check it writes
nothing.

The target is the record's own: the one its statistics.md was written with, or --target for a folder without
one (default 3.28, the FineWeb target). A --target other than the one a folder's statistics.md holds is refused
(exit status 2) unless --retarget is given, so that a record's committed statistics are never rewritten
against another target by accident.

Exit status:
    0  all logs good, at least 2 runs, and the mean is below target with p < 0.01
    1  all logs good, but the mean is not significantly below target (p >= 0.01, or only one run,
       which the t-test cannot judge); statistics.md and val_loss.png are written
    2  a log has an integrity problem, the logs embed different code, or the folder holds no logs;
       nothing is written

Needs scipy and matplotlib, imported only where used so the checks stay importable without them.
"""
import argparse
import hashlib
import json
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ALPHA = 0.01  # significance level for "the mean is below target"

MAGIC = "train_gpt.py run log"
CHAINED_RE = re.compile(r"(.*)\t([0-9a-f]{12})", re.DOTALL)  # a line of log format 2: its text, its chain hash
SOURCE_START, SOURCE_END = "==== source train_gpt.py ====", "==== end source ===="
SMI_START, SMI_END = "==== nvidia-smi ====", "==== end nvidia-smi ===="

# Number formats exactly as docs/log_format.md prints them, so format drift is caught, not guessed at
LOSS, TIME, AVG = r"(\d+\.\d+)", r"(\d+\.\d)", r"(\d+\.\d\d)"
TRAIN_FORMAT = "step:K/N train_loss:X train_time:T.Tms step_avg:A.AAms"
VAL_FORMAT = "step:K/N val_loss:X train_time:T.Tms step_avg:A.AAms"
FINAL_FORMAT = "final val_loss:X train_time:T.Tms step_avg:A.AAms steps:N"
TRAIN_RE = re.compile(rf"step:(\d+)/(\d+) train_loss:{LOSS} train_time:{TIME}ms step_avg:{AVG}ms")
VAL_RE = re.compile(rf"step:(\d+)/(\d+) val_loss:{LOSS} train_time:{TIME}ms step_avg:{AVG}ms")
FINAL_RE = re.compile(rf"final val_loss:{LOSS} train_time:{TIME}ms step_avg:{AVG}ms steps:(\d+)")


@dataclass
class Run:
    path: Path
    code: str = None  # code_sha256 as declared; checked against the embedded source
    code_line: int = 1  # line to point at when the code differs between logs
    steps: int = None
    step_ms: list = field(default_factory=list)  # time of step k at index k-1
    val_points: list = field(default_factory=list)  # (train_time ms, val_loss)
    val_loss: float = None  # from the final line
    train_ms: float = None  # from the final line
    seed: int = None  # from the hyperparameters line


def chain_hash(previous, text):
    """A line's chain hash (log format 2): 12 hex digits of sha256 of the previous line's hash ('' for the
    first line), a newline, and the line's text. train_gpt.py's RunLog writes it."""
    return hashlib.sha256(f"{previous}\n{text}".encode()).hexdigest()[:12]


def unchain(lines, problem):
    """The lines' texts without their chain hashes, or None after reporting the first line whose hash is
    missing or wrong (that line, or one before it, was edited, inserted or removed)."""
    texts, previous = [], ""
    for lineno, line in enumerate(lines, 1):
        match = CHAINED_RE.fullmatch(line)
        if match is None:
            problem(lineno, "no chain hash at the end of the line (the log's first line has one)")
            return None
        if match[2] != chain_hash(previous, match[1]):
            problem(lineno, f"chain hash {match[2]} is not {chain_hash(previous, match[1])}: this line or one "
                            f"before it is not as it was written")
            return None
        texts.append(match[1])
        previous = match[2]
    return texts


def check_log(path):
    """Parse and check one run log; returns (Run, list of problem strings)."""
    run, problems = Run(path), []

    def problem(lineno, message):
        problems.append(f"{path}:{lineno}: {message}")

    data = path.read_bytes()
    try:
        lines = data.decode("utf-8").split("\n")  # not splitlines(): source may hold \f, \u2028, ...
    except UnicodeDecodeError as e:
        problem(data[:e.start].count(b"\n") + 1, f"not UTF-8: {e.reason}")
        return run, problems
    if lines[-1] == "":
        lines.pop()
    if lines and lines[0].startswith(MAGIC + "\t"):
        lines = unchain(lines, problem)
        if lines is None:
            return run, problems
    if not lines or lines[0] != MAGIC:
        problem(1, f"not a run log: the first line must be {MAGIC!r}")
        return run, problems

    if SOURCE_START not in lines:
        problem(1, f"no {SOURCE_START!r} line")
        return run, problems
    start = lines.index(SOURCE_START)
    if SOURCE_END not in lines[start:]:
        problem(start + 1, f"source is never closed by {SOURCE_END!r}")
        return run, problems
    end = lines.index(SOURCE_END, start)
    actual = hashlib.sha256("".join(line + "\n" for line in lines[start + 1:end]).encode()).hexdigest()
    declared = [(i + 1, line.removeprefix("code_sha256: ")) for i, line in enumerate(lines[:start])
                if line.startswith("code_sha256: ")]
    if len(declared) != 1:
        problem(start + 1, f"expected one code_sha256 line before the source, found {len(declared)}")
    else:
        # logs are compared by their declared hash, so a tampered source is reported once, here
        run.code_line, run.code = declared[0]
        if run.code != actual:
            problem(run.code_line, f"code_sha256 {run.code} but the embedded source hashes to {actual}")

    def check_avg(lineno, step, time_ms, avg_ms):
        # time is rounded to 0.1 ms and step_avg to 0.01 ms, so they may disagree by this much
        tolerance = 0.005 + 0.05 / step + 1e-9 if step else 0.0
        expected = time_ms / step if step else 0.0
        if abs(avg_ms - expected) > tolerance:
            problem(lineno, f"step_avg {avg_ms:.2f}ms but train_time/step is {expected:.3f}ms")

    def check_total(lineno, total):
        if run.steps is None:
            run.steps = total
        elif total != run.steps:
            problem(lineno, f"step count /{total} differs from /{run.steps} on earlier lines")

    last_step, last_ms = 0, 0.0  # step 0 is at train_time 0
    step_ms = {}  # step -> train_time
    val_lines = {}  # step -> (lineno, val_loss)
    final = stop = None
    in_smi = False
    for lineno, line in enumerate(lines[end + 1:], end + 2):
        if in_smi:  # nvidia-smi output is free text, even if it looked like a step line
            in_smi = line != SMI_END
            continue
        if final is not None:
            problem(lineno, "text after the final line (a log holds one run and ends with final)")
            break
        if line == SMI_START:
            in_smi = True
        elif line.startswith("hyperparameters: "):
            try:
                run.seed = json.loads(line.removeprefix("hyperparameters: ")).get("seed")
            except (json.JSONDecodeError, AttributeError):
                problem(lineno, "the hyperparameters are not one JSON object")
        elif line.startswith("error:"):
            stop = lineno, line
        elif m := TRAIN_RE.fullmatch(line):
            step, total, ms, avg = int(m[1]), int(m[2]), float(m[4]), float(m[5])
            check_total(lineno, total)
            if step <= last_step:
                problem(lineno, f"step {step} repeated or out of order after step {last_step}")
            elif step > last_step + 1:
                gap = f"{last_step + 1}" if step == last_step + 2 else f"{last_step + 1}..{step - 1}"
                problem(lineno, f"step {gap} missing before step {step}")
            if step > run.steps:
                problem(lineno, f"step {step} beyond the run's {run.steps} steps")
            if ms < last_ms:
                problem(lineno, f"train_time {ms}ms decreases from {last_ms}ms")
            check_avg(lineno, step, ms, avg)
            run.step_ms.append(ms - last_ms)
            step_ms[step] = ms
            last_step, last_ms = max(step, last_step), ms
        elif m := VAL_RE.fullmatch(line):
            step, total, loss, ms, avg = int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])
            check_total(lineno, total)
            if step in val_lines:
                problem(lineno, f"second validation line for step {step}")
            if step != last_step:
                problem(lineno, f"validation at step {step}, but the last train step is {last_step}")
            elif ms != last_ms:
                problem(lineno, f"validation train_time {ms}ms differs from step {step}'s {last_ms}ms")
            check_avg(lineno, step, ms, avg)
            val_lines[step] = lineno, loss
            run.val_points.append((ms, loss))
        elif m := FINAL_RE.fullmatch(line):
            final = lineno, float(m[1]), float(m[2]), float(m[3]), int(m[4])
        elif line.startswith("step:"):
            problem(lineno, f"cannot parse {line[:100]!r}; expected {TRAIN_FORMAT!r} or {VAL_FORMAT!r}")
        elif line.startswith("final"):
            problem(lineno, f"cannot parse {line[:100]!r}; expected {FINAL_FORMAT!r}")
    if in_smi:
        problem(len(lines), f"nvidia-smi output is never closed by {SMI_END!r}")

    if stop:
        problem(stop[0], f"run stopped: {stop[1]}")
    if final is None:
        problem(len(lines), "incomplete run: the log has no final line")
        return run, problems
    lineno, run.val_loss, run.train_ms, avg, steps = final
    if run.steps is None:
        problem(lineno, "no step lines")
        return run, problems
    if last_step != run.steps:
        problem(lineno, f"train steps end at {last_step}, but the run has {run.steps} steps")
    if 0 not in val_lines:
        problem(lineno, "no validation line at step 0")
    if run.steps not in val_lines:
        problem(lineno, f"no validation line at the last step {run.steps}")
    elif run.val_loss != val_lines[run.steps][1]:
        problem(lineno, f"final val_loss {run.val_loss} differs from {val_lines[run.steps][1]} "
                        f"at step {run.steps} (line {val_lines[run.steps][0]})")
    if run.steps in step_ms and run.train_ms != step_ms[run.steps]:
        problem(lineno, f"final train_time {run.train_ms}ms differs from step {run.steps}'s "
                        f"{step_ms[run.steps]}ms")
    if steps != run.steps:
        problem(lineno, f"final steps:{steps}, but the step lines count to {run.steps}")
    check_avg(lineno, steps, run.train_ms, avg)
    return run, problems


def check_same_code(runs):
    """Problems for logs whose embedded source differs from the one most logs share."""
    counts = Counter(run.code for run in runs if run.code)
    if len(counts) < 2:
        return []
    common = counts.most_common(1)[0][0]
    sharing = ", ".join(run.path.name for run in runs if run.code == common)
    return [f"{run.path}:{run.code_line}: embeds code {run.code}, not {common} like {sharing}"
            for run in runs if run.code and run.code != common]


def t_test(values, target):
    """One-sided t-test of mean(values) < target; returns (t, p)."""
    from scipy.stats import t as student_t

    n, mean, std = len(values), statistics.mean(values), statistics.stdev(values)
    if std == 0:  # identical runs: the t statistic is infinite, its sign decides
        return (float("-inf"), 0.0) if mean < target else (float("inf"), 1.0)
    t = (mean - target) / (std / n ** 0.5)
    return t, float(student_t.cdf(t, df=n - 1))


def pair_ms(run):
    """Per-step times of pairs of steps (1 and 2, 3 and 4, ...), each pair's mean. Adam steps every other step,
    so single steps alternate, and how a pair splits its time moves with unrelated changes
    (docs/log_format.md): a median over single steps would pick one side of the alternation."""
    return [(a + b) / 2 for a, b in zip(run.step_ms[0::2], run.step_ms[1::2])] or run.step_ms


def statistics_markdown(runs, target, title):
    """The statistics.md text and the t-test p-value (None with fewer than 2 runs)."""
    losses = [run.val_loss for run in runs]
    times = [run.train_ms / 1000 for run in runs]
    rows = [f"| {run.path.name} | {run.val_loss:.4f} | {run.train_ms / 1000:.3f} | "
            f"{statistics.median(pair_ms(run)):.2f} | {run.steps} |" for run in runs]
    lines = [
        f"# {title}", "",
        f"Generated by `records/summarize.py` from the run logs here; target val loss {target}.",
        "",
        "| log | final val loss | training time (s) | median step time, by pairs (ms) | steps |",
        "|---|---:|---:|---:|---:|",
        *rows, "",
        f"- runs: {len(runs)}",
    ]
    p = None
    if len(runs) < 2:
        lines += [f"- final val loss: {losses[0]:.5f}",
                  "- **only 1 run: the t-test needs 2 or more, so the mean is not shown to be below target**",
                  f"- training time: {times[0]:.3f} s"]
    else:
        t, p = t_test(losses, target)
        verdict = (f"p < {ALPHA}: the record's mean is below target" if p < ALPHA
                   else f"p >= {ALPHA}: the record's mean is not significantly below target")
        lines += [
            f"- final val loss: mean {statistics.mean(losses):.5f}, std {statistics.stdev(losses):.5f}",
            f"- one-sided t-test of mean < {target}: t = {t:.3f}, df = {len(runs) - 1}, p = {p:.3g}",
            f"- **{verdict}**",
            f"- training time: mean {statistics.mean(times):.3f} s, std {statistics.stdev(times):.3f} s",
        ]
    all_pairs = [ms for run in runs for ms in pair_ms(run)]
    lines += [f"- median step time over all runs, by pairs of steps: {statistics.median(all_pairs):.2f} ms",
              f"- code sha256: `{runs[0].code}`", ""]
    return "\n".join(lines), p


def plot_val_loss(runs, target, path):
    """Val loss against training time, one line per run, with the target dashed."""
    from matplotlib.figure import Figure  # a bare Figure saves PNGs with Agg; no pyplot state

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for run in runs:
        ms, loss = zip(*run.val_points)
        ax.plot([x / 1000 for x in ms], loss, marker="o", markersize=3, label=run.path.stem)
    ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target}")
    ax.set(xlabel="training time (s)", ylabel="val loss", title=path.parent.name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)


DEFAULT_TARGET = 3.28  # FineWeb's


def recorded_target(folder):
    """The target the folder's statistics.md was written with (its 'target val loss X.' line), or None."""
    path = folder / "statistics.md"
    match = re.search(r"target val loss ([0-9.]+)\.\n", path.read_text()) if path.is_file() else None
    return float(match[1]) if match else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="record folder holding the run logs (*.txt)")
    parser.add_argument("--target", type=float, help="target val loss (default: the folder's statistics.md's, "
                                                       "else 3.28)")
    parser.add_argument("--retarget", action="store_true", help="rewrite statistics.md against another --target")
    parser.add_argument("--check", action="store_true", help="check and test only; write nothing")
    args = parser.parse_args(argv)

    if not args.folder.is_dir():
        print(f"{args.folder}: not a folder", file=sys.stderr)
        return 2
    recorded = recorded_target(args.folder)
    if args.target is not None and recorded is not None and args.target != recorded and not args.retarget:
        print(f"{args.folder}: its statistics.md holds target {recorded}, not {args.target}; pass --retarget to "
              f"rewrite it against {args.target}", file=sys.stderr)
        return 2
    target = args.target if args.target is not None else recorded if recorded is not None else DEFAULT_TARGET
    paths = sorted(args.folder.glob("*.txt"))
    if not paths:
        print(f"{args.folder}: no *.txt run logs", file=sys.stderr)
        return 2
    runs, problems = [], []
    for path in paths:
        run, found = check_log(path)
        runs.append(run)
        problems += found
    problems += check_same_code(runs)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"{len(problems)} problem(s) in the logs of {args.folder}; statistics.md not written",
              file=sys.stderr)
        return 2

    text, p = statistics_markdown(runs, target, args.folder.name)
    if not args.check:
        (args.folder / "statistics.md").write_text(text)
        plot_val_loss(runs, target, args.folder / "val_loss.png")
    print(text, end="")
    if p is None:
        print("only 1 run: a record needs at least 2 runs for the t-test", file=sys.stderr)
        return 1
    return 0 if p < ALPHA else 1


if __name__ == "__main__":
    sys.exit(main())
