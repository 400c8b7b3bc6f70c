"""The run log's hash chain (issue 36): train_gpt.py's RunLog writes it, records/summarize.py checks it."""
import io
import re

import pytest

import train_gpt as tg
from records import summarize
from test_records import log_lines, run_tool


def write_chained(path, lines):
    """The lines through RunLog, as train_gpt.py writes a log."""
    log = tg.RunLog(path, console=io.StringIO())
    for line in lines:
        log(line, echo=False)
    log.file.close()


def test_every_line_carries_the_hash_of_itself_and_the_lines_before(tmp_path):
    """Each line of the file ends with a tab and 12 hex digits, sha256 of the previous hash, a newline and the
    text; a multi-line string logged at once (nvidia-smi's output) gets a hash for each of its lines."""
    write_chained(tmp_path / "run.txt", ["train_gpt.py run log", "a\tline with a tab", "two\nlines", ""])
    written = (tmp_path / "run.txt").read_text().split("\n")[:-1]
    assert len(written) == 5 and all(re.fullmatch(r".*\t[0-9a-f]{12}", line, re.DOTALL) for line in written)
    previous = ""
    for line, text in zip(written, ["train_gpt.py run log", "a\tline with a tab", "two", "lines", ""]):
        assert line == f"{text}\t{summarize.chain_hash(previous, text)}"
        previous = line[-12:]
    problems = []
    assert summarize.unchain(written, lambda *p: problems.append(p)) == [
        "train_gpt.py run log", "a\tline with a tab", "two", "lines", ""] and not problems


@pytest.mark.parametrize("edit, lineno", [
    (lambda lines: lines.__setitem__(40, lines[40].replace("train_loss:3.", "train_loss:2.", 1)), 41),
    (lambda lines: lines.pop(30), 31),  # a line removed: the one after it no longer follows
    (lambda lines: lines.insert(35, lines[35]), 37),  # a line repeated: the copy's successor breaks
    (lambda lines: lines.__setitem__(20, lines[20].rsplit("\t", 1)[0]), 21),  # a hash removed
])
def test_summarize_names_the_first_line_that_breaks_the_chain(tmp_path, capsys, edit, lineno):
    """A record of two chained logs passes as written; one edit in the second (a loss digit, a line removed, a
    line repeated, a hash stripped) makes summarize refuse the record, naming the line where the chain
    breaks."""
    folder = tmp_path / "record"
    folder.mkdir()
    for name, loss in (("a", 3.20), ("b", 3.21)):
        write_chained(folder / f"{name}.txt", log_lines(loss, steps=20))
    code, out, err = run_tool(folder, capsys, 4.0, "--check")
    assert code == 0 and not err, err
    lines = (folder / "b.txt").read_text().split("\n")[:-1]
    assert lines[40].startswith("step:") and "train_loss:3." in lines[40]
    edit(lines)
    (folder / "b.txt").write_text("\n".join(lines) + "\n")
    code, out, err = run_tool(folder, capsys, 4.0, "--check")
    assert code == 2 and f"b.txt:{lineno}: " in err and ("chain hash" in err), err


def test_a_log_without_the_chain_is_still_read(tmp_path):
    """Logs of format 1 (every record before the chain) carry no hash: they are read as they are."""
    (tmp_path / "old.txt").write_text("\n".join(log_lines(3.2)) + "\n")
    run, problems = summarize.check_log(tmp_path / "old.txt")
    assert not problems and run.val_loss == 3.2 and run.steps == 4
