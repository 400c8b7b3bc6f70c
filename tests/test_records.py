"""records/summarize.py on synthetic run logs written in the docs/log_format.md format."""
import hashlib
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from records import ab, summarize  # conftest puts the repo root on sys.path

ROOT = Path(__file__).resolve().parent.parent

# Lines that look like step and final lines inside the source and nvidia-smi output must be ignored.
SOURCE = 'import torch\n"""\nstep:1/1 is only text in a docstring\nfinal thoughts\n"""\nprint("train")\n'
OTHER_SOURCE = SOURCE.replace("train", "faster")


def log_lines(final_loss, source=SOURCE, steps=4, step_ms=100.0, seed=None):
    """A complete run log, as lines: step k takes step_ms + k**3 ms (so its median and mean differ),
    validation every 2 steps and at N; the seed among the hyperparameters if given."""
    def timing(step, ms):
        return f"train_time:{ms:.1f}ms step_avg:{ms / step if step else 0:.2f}ms"

    def val(step, ms):
        loss = final_loss + (10 - final_loss) * (1 - step / steps)
        return f"step:{step}/{steps} val_loss:{loss:.4f} {timing(step, ms)}"

    lines = ["train_gpt.py run log", "run_id: test_run",
             f"code_sha256: {hashlib.sha256(source.encode()).hexdigest()}",
             "command: train_gpt.py", "==== source train_gpt.py ====", *source.splitlines(),
             "==== end source ====", "hyperparameters: " + json.dumps({"num_iterations": steps, **(
                 {} if seed is None else {"seed": seed})}),
             "environment: python=3.11 torch=2.13.0 world_size=1 device=cpu",
             "==== nvidia-smi ====", "step:9/9 final lookalike", "==== end nvidia-smi ====",
             "compile: 1.2s", val(0, 0.0)]
    ms = 0.0
    for step in range(1, steps + 1):
        ms += step_ms + step**3
        lines.append(f"step:{step}/{steps} train_loss:{4 - step / steps:.4f} {timing(step, ms)}")
        if step % 2 == 0 or step == steps:
            lines.append(val(step, ms))
    lines += ["peak_memory: allocated=1MiB reserved=2MiB",
              f"final val_loss:{final_loss:.4f} {timing(steps, ms)} steps:{steps}"]
    return lines


def write_record(folder, logs):
    """Write {name: lines} as folder/name.txt and return the folder."""
    folder.mkdir(exist_ok=True)
    for name, lines in logs.items():
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return folder


def run_tool(folder, capsys, target=3.28, *flags):
    code = summarize.main([str(folder), "--target", str(target), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def line_of(lines, prefix):
    """1-based number of the first line starting with prefix."""
    return next(i for i, line in enumerate(lines, 1) if line.startswith(prefix))


def student_t_cdf(t, df):
    """Closed forms of the Student-t CDF, independent of scipy."""
    if df == 1:
        return 0.5 + math.atan(t) / math.pi
    if df == 2:
        return 0.5 + t / (2 * math.sqrt(2 + t * t))
    raise ValueError(df)


@pytest.mark.parametrize("losses", [[3.2700, 3.2750], [3.2700, 3.2710, 3.2705], [3.2790, 3.2810, 3.2800]])
def test_t_test_matches_closed_form(losses):
    n, mean, std = len(losses), statistics.mean(losses), statistics.stdev(losses)
    t = (mean - 3.28) / (std / math.sqrt(n))
    assert summarize.t_test(losses, 3.28) == pytest.approx((t, student_t_cdf(t, n - 1)), rel=1e-9)


def test_good_record(tmp_path, capsys):
    losses, step_ms = [3.2700, 3.2710, 3.2705], [100.0, 120.0, 110.0]
    folder = write_record(tmp_path / "2026-11-23_good", {
        f"run{i}": log_lines(loss, step_ms=ms) for i, (loss, ms) in enumerate(zip(losses, step_ms))})
    code, out, err = run_tool(folder, capsys)
    assert (code, err) == (0, "")
    text = (folder / "statistics.md").read_text()
    assert out == text
    assert "p < 0.01: the record's mean is below target" in text
    assert float(re.search(r"mean (\S+), std", text)[1]) == pytest.approx(3.2705, abs=1e-5)
    n, mean, std = 3, 3.2705, statistics.stdev(losses)
    expected_p = student_t_cdf((mean - 3.28) / (std / math.sqrt(n)), n - 1)
    assert float(re.search(r"p = (\S+)$", text, re.M)[1]) == pytest.approx(expected_p, rel=5e-3)
    assert expected_p < 0.01
    # steps take ms + 1, 8, 27, 64: a run takes 4 * ms + 100; its pairs of steps ms + 4.5 and ms + 45.5 a step
    assert "| run1.txt | 3.2710 | 0.580 | 145.00 | 4 |" in text
    assert "training time: mean 0.540 s, std 0.040 s" in text
    # ms = 100, 110, 120: the pairs' median (124.5 + 145.5) / 2
    assert "median step time over all runs, by pairs of steps: 135.00 ms" in text
    assert hashlib.sha256(SOURCE.encode()).hexdigest() in text
    assert (folder / "val_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same runs do not beat a lower target
    code, out, err = run_tool(folder, capsys, 3.26, "--retarget")
    assert code == 1 and "one-sided t-test of mean < 3.26" in out


@pytest.mark.parametrize("losses", [[3.2900, 3.3000], [3.2790, 3.2810, 3.2800, 3.2770]],
                         ids=["above", "below_not_significant"])
def test_mean_not_below_target(tmp_path, capsys, losses):
    folder = write_record(tmp_path / "rec", {f"run{i}": log_lines(x) for i, x in enumerate(losses)})
    code, out, err = run_tool(folder, capsys)
    assert code == 1
    assert "p >= 0.01: the record's mean is not significantly below target" in out
    assert "not significantly below target" in (folder / "statistics.md").read_text()


def test_one_run_is_not_enough(tmp_path, capsys):
    folder = write_record(tmp_path / "rec", {"run0": log_lines(3.20)})
    code, out, err = run_tool(folder, capsys)
    assert code == 1
    assert "at least 2 runs" in err and "only 1 run" in out


def test_empty_folder(tmp_path, capsys):
    code, out, err = run_tool(tmp_path, capsys)
    assert code == 2 and "no *.txt run logs" in err


def check_rejected(tmp_path, capsys, bad_lines, message, lineno):
    """A record of one good log and one bad one: exit 2, message at bad.txt:lineno, nothing written."""
    folder = write_record(tmp_path / "rec", {"good": log_lines(3.27), "bad": bad_lines})
    code, out, err = run_tool(folder, capsys)
    assert code == 2
    where = f"{folder / 'bad.txt'}:{lineno}: "
    assert any(line.startswith(where) and message in line for line in err.splitlines()), err
    assert "good.txt" not in err
    assert out == ""
    assert not (folder / "statistics.md").exists() and not (folder / "val_loss.png").exists()
    return err


@pytest.mark.parametrize("ending", ["truncated", "error", "cut_mid_run"])
def test_incomplete_log(tmp_path, capsys, ending):
    lines = log_lines(3.27)
    if ending == "truncated":
        lines = lines[:-1]
    elif ending == "error":
        lines = lines[:line_of(lines, "step:3/4 train")] + ["error: non-finite loss at step 3"]
    else:
        lines = lines[:line_of(lines, "step:2/4 val")]
    err = check_rejected(tmp_path, capsys, lines, "incomplete run: the log has no final line", len(lines))
    if ending == "error":
        assert f"bad.txt:{len(lines)}: run stopped: error: non-finite loss at step 3" in err


def test_different_code(tmp_path, capsys):
    folder = write_record(tmp_path / "rec", {"a": log_lines(3.27), "b": log_lines(3.27),
                                             "c": log_lines(3.27, source=OTHER_SOURCE)})
    code, out, err = run_tool(folder, capsys)
    assert code == 2
    common = hashlib.sha256(SOURCE.encode()).hexdigest()
    other = hashlib.sha256(OTHER_SOURCE.encode()).hexdigest()
    assert err.splitlines()[0] == (f"{folder / 'c.txt'}:3: embeds code {other}, "
                                   f"not {common} like a.txt, b.txt")
    assert not (folder / "statistics.md").exists()


def test_source_does_not_match_hash(tmp_path, capsys):
    lines = log_lines(3.27)
    lines[line_of(lines, "print(") - 1] = 'print("tampered")'
    check_rejected(tmp_path, capsys, lines, "but the embedded source hashes to", 3)


def test_garbled_step_line(tmp_path, capsys):
    lines = log_lines(3.27)
    lineno = line_of(lines, "step:3/4 train")
    lines[lineno - 1] = "step:3/4 train_loss:3.2500 train_tim"
    check_rejected(tmp_path, capsys, lines, "cannot parse 'step:3/4 train_loss:3.2500 train_tim'", lineno)


def test_garbled_final_line(tmp_path, capsys):
    lines = log_lines(3.27)
    lines[-1] = lines[-1].replace("steps:4", "steps:four")
    check_rejected(tmp_path, capsys, lines, "cannot parse 'final val_loss", len(lines))


def test_step_gap(tmp_path, capsys):
    lines = log_lines(3.27)
    del lines[line_of(lines, "step:2/4 train") - 1]
    check_rejected(tmp_path, capsys, lines, "step 2 missing before step 3", line_of(lines, "step:3/4 train"))


def test_duplicate_step(tmp_path, capsys):
    lines = log_lines(3.27)
    lineno = line_of(lines, "step:3/4 train")
    lines.insert(lineno, lines[lineno - 1])
    check_rejected(tmp_path, capsys, lines, "step 3 repeated or out of order after step 3", lineno + 1)


@pytest.mark.parametrize("hyperparameters", ['{"seed": 0', '[0]'], ids=["not_json", "not_an_object"])
def test_hyperparameters_that_are_not_one_json_object(tmp_path, capsys, hyperparameters):
    lines = log_lines(3.27)
    lineno = line_of(lines, "hyperparameters: ")
    lines[lineno - 1] = "hyperparameters: " + hyperparameters
    check_rejected(tmp_path, capsys, lines, "the hyperparameters are not one JSON object", lineno)


def test_decreasing_train_time(tmp_path, capsys):
    lines = log_lines(3.27)
    lineno = line_of(lines, "step:3/4 train")  # step 2 is at 209.0 ms
    lines[lineno - 1] = "step:3/4 train_loss:3.2500 train_time:150.0ms step_avg:50.00ms"
    check_rejected(tmp_path, capsys, lines, "train_time 150.0ms decreases from 209.0ms", lineno)


@pytest.mark.parametrize("old, new, at, message", [
    ("step:2/4 train_loss:3.5000 train_time:209.0ms step_avg:104.50ms",
     "step:2/4 train_loss:3.5000 train_time:209.0ms step_avg:104.56ms", "step:2/4 train",
     "step_avg 104.56ms but train_time/step is 104.500ms"),
    ("step:4/4 val_loss:3.2700", "step:4/4 val_loss:3.2600", "final val_loss",
     "final val_loss 3.27 differs from 3.26 at step 4"),
    ("ms steps:4", "ms steps:5", "final val_loss", "final steps:5, but the step lines count to 4"),
    ("step:3/4 train_loss:3.2500", "step:3/5 train_loss:3.2500", "step:3/5 train",
     "step count /5 differs from /4 on earlier lines"),
    ("step:0/4 val_loss:10.0000 train_time:0.0ms step_avg:0.00ms", "compile done", "final val_loss",
     "no validation line at step 0"),
    ("step:4/4 val_loss:3.2700 train_time:500.0ms step_avg:125.00ms", "compile done", "final val_loss",
     "no validation line at the last step 4"),
], ids=["step_avg", "final_val_loss", "final_steps", "inconsistent_N", "no_val_at_0", "no_val_at_N"])
def test_inconsistent_numbers(tmp_path, capsys, old, new, at, message):
    text = "\n".join(log_lines(3.27))
    assert text.count(old) == 1
    lines = text.replace(old, new).split("\n")
    check_rejected(tmp_path, capsys, lines, message, line_of(lines, at))


def test_rounding_is_tolerated(tmp_path):
    # 209.04 ms prints as 209.0 and its step_avg as 104.52: within rounding, so not a problem
    lines = log_lines(3.27)
    lineno = line_of(lines, "step:2/4 train")
    assert lines[lineno - 1].endswith("step_avg:104.50ms")
    lines[lineno - 1] = lines[lineno - 1].replace("step_avg:104.50ms", "step_avg:104.52ms")
    path = write_record(tmp_path / "rec", {"a": lines}) / "a.txt"
    assert summarize.check_log(path)[1] == []


def test_command_line(tmp_path):
    losses = {"a": 3.270, "b": 3.271, "c": 3.272}
    folder = write_record(tmp_path / "rec", {name: log_lines(x) for name, x in losses.items()})
    result = subprocess.run([sys.executable, str(ROOT / "records" / "summarize.py"), str(folder)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "| a.txt | 3.2700 |" in result.stdout


def test_step_times_are_taken_by_pairs_of_steps():
    """Adam's every-other-step update makes step times alternate: a median of single steps would report the
    short side (100 ms); pairs give the time a step takes (200 ms), and a step left without its pair is
    dropped."""
    run = summarize.Run(Path("run.txt"))
    run.step_ms = [100.0, 300.0, 100.0, 300.0, 100.0]
    assert summarize.pair_ms(run) == [200.0, 200.0]


def test_a_folder_keeps_its_target_and_another_is_refused_unless_asked(tmp_path, capsys):
    """The default 3.28 would pass these runs; the target the folder was summarized against (3.2705) does not,
    and stays theirs: a different --target rewrites nothing without --retarget."""
    losses = {"a": 3.270, "b": 3.271, "c": 3.272}
    folder = write_record(tmp_path / "rec", {name: log_lines(x) for name, x in losses.items()})
    assert summarize.main([str(folder), "--target", "3.2705"]) == 1
    before = (folder / "statistics.md").read_text()
    assert "target val loss 3.2705." in before
    assert summarize.main([str(folder)]) == 1
    assert summarize.main([str(folder), "--target", "3.28"]) == 2
    assert "holds target 3.2705, not 3.28; pass --retarget" in capsys.readouterr().err
    assert (folder / "statistics.md").read_text() == before
    assert summarize.main([str(folder), "--target", "3.28", "--retarget"]) == 0
    assert "target val loss 3.28." in (folder / "statistics.md").read_text()


def test_check_writes_nothing(tmp_path):
    losses = {"a": 3.270, "b": 3.271, "c": 3.272}
    folder = write_record(tmp_path / "rec", {name: log_lines(x) for name, x in losses.items()})
    assert summarize.main([str(folder), "--check"]) == 0
    assert not (folder / "statistics.md").exists() and not (folder / "val_loss.png").exists()


@pytest.mark.parametrize("record", sorted(path.name for path in (ROOT / "records").iterdir() if path.is_dir()))
def test_every_record_holds_against_its_own_target(record):
    assert summarize.main([str(ROOT / "records" / record), "--check"]) == 0


# records/ab.py: the A/B rule. A run of step_ms per step takes 4 * step_ms + 100 ms (see log_lines).
def ab_folders(tmp_path, baseline, change):
    """Two folders of logs from {seed: (final loss, step_ms)}; returns ab.main's exit status on them."""
    folders = [write_record(tmp_path / name, {f"seed{seed}": log_lines(loss, step_ms=ms, seed=seed)
                                              for seed, (loss, ms) in arm.items()})
               for name, arm in (("baseline", baseline), ("change", change))]
    return ab.main([str(folder) for folder in folders])


@pytest.mark.parametrize("change, code", [
    ({0: (3.2700, 90.0), 1: (3.2700, 91.0)}, 0),  # 40 ms faster a run, spreads 4 ms
    ({0: (3.2700, 97.0), 1: (3.2700, 99.0)}, 1),  # 10 ms faster, under twice its own spread of 8 ms
    ({0: (3.2740, 90.0), 1: (3.2740, 91.0)}, 1),  # faster, but 4 mn worse
    ({0: (3.2700, 90.0), 2: (3.2700, 91.0)}, 2),  # seeds that do not pair
    ({0: (3.2700, 90.0)}, 2),  # one seed
], ids=["passes", "within_spread", "loss_rose", "other_seeds", "one_seed"])
def test_ab_rule(tmp_path, capsys, change, code):
    baseline = {0: (3.2700, 100.0), 1: (3.2700, 100.5)}
    assert ab_folders(tmp_path, baseline, change) == code
    out, err = capsys.readouterr()
    assert ("seeds [0, 1]: baseline 3.2700 in 0.501 s" in out) == (code < 2)
    assert ("same seeds" in err) == (code == 2)


def test_ab_rule_refuses_a_broken_log_and_a_log_without_its_seed(tmp_path, capsys):
    baseline = write_record(tmp_path / "baseline", {f"seed{s}": log_lines(3.27, seed=s) for s in (0, 1)})
    change = write_record(tmp_path / "change", {"seed0": log_lines(3.27, seed=0)[:-1], "seed1": log_lines(3.27)})
    assert ab.main([str(baseline), str(change)]) == 2
    err = capsys.readouterr().err
    assert "seed0.txt" in err and "seed1.txt: no seed in the folder" in err
