"""train_gpt.py as a user meets it: one-line errors for bad input, tracebacks for internal errors, and the
console (a progress bar on a terminal, plain lines elsewhere)."""
import collections
import fcntl
import gc
import io
import multiprocessing
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import types
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import check_nan_stops_the_run, random_documents, read_log
from fineweb import write_shard

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--smoke", "--val_tokens", "1024", "--val_loss_every", "0"]


def run_main(argv, capsys):
    """main(argv)'s exit status, its stderr lines, and the lines of the log it wrote (None if none)."""
    status = tg.main(argv)
    err = capsys.readouterr().err.splitlines()
    logs = list(Path("logs").glob("*.txt"))
    assert len(logs) <= 1
    return status, err, read_log(logs[0]) if logs else None


def write_train_shard(path, num_docs, seed=0):
    write_shard(path, np.concatenate(random_documents(np.random.default_rng(seed), num_docs, min_len=100)))


def test_error_classes_are_user_errors():
    assert issubclass(tg.ShardError, tg.UserError) and issubclass(tg.EndOfData, tg.UserError)


@pytest.mark.parametrize("case", ["unknown flag", "no shards", "truncated shard", "batch does not divide",
                                  "validation too large", "data runs out", "negative steps", "width and heads"])
def test_user_error_is_one_line_and_status_1(case, workdir, capsys):
    flags, expected, logged = {
        "unknown flag": (["--nope", "1"], "error: --nope: unknown flag", False),
        "negative steps": (["--scheduled_steps", "-5"], "error: --scheduled_steps: -5 is below its least value", False),
        "width and heads": (["--model_dim", "100"], "error: --model_dim: 100 must be a multiple of --head_dim 32",
                            False),
        "no shards": (["--train_files", "none_*.bin"], "error: none_*.bin: no shard files match", True),
        "truncated shard": (["--train_files", "bad_*.bin"], "error: bad_000000.bin: truncated by 5 bytes", True),
        "batch does not divide": (["--batch_tokens", "1000"], "error: --batch_tokens: 1000 and", True),
        "validation too large": (["--val_tokens", "10240000", "--val_seq_tokens", "1024"],
                                 f"error: {ROOT}/data/sample/sample_val_*.bin: validation needs 10240001 tokens",
                                 True),
        "data runs out": (["--train_files", "few_*.bin", "--no-repeat_train_files", "--scheduled_steps", "50"],
                          "error: few_*.bin: training data exhausted after 1 shards", True),
    }[case]
    write_train_shard(workdir / "few_000000.bin", 12)
    write_train_shard(workdir / "bad_000000.bin", 30)
    (workdir / "bad_000000.bin").write_bytes((workdir / "bad_000000.bin").read_bytes()[:-5])
    status, err, log = run_main(QUICK + flags, capsys)
    assert status == 1
    assert len(err) == 1 and err[0].startswith(expected), err
    assert (log is not None) == logged
    if logged:
        assert log[-1] == err[0] and not any(line.startswith("final") for line in log)


def test_a_log_folder_that_cannot_be_written_is_a_one_line_error(workdir, capsys):
    (workdir / "logs").write_text("not a folder")
    assert tg.main(QUICK) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: logs: cannot write the run's log there (File exists); run from a folder where logs/ can be made and "
        "written"]


def test_internal_error_keeps_its_traceback(workdir, monkeypatch):
    def broken(*args):
        raise RuntimeError("a bug, not a user error")
    monkeypatch.setattr(tg, "build_model", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        tg.main(QUICK)


def test_command_line_error_has_no_traceback(workdir):
    run = subprocess.run([sys.executable, str(ROOT / "train_gpt.py"), "--smoke", "--batch_tokens", "1000"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.splitlines() == ["error: --batch_tokens: 1000 and --micro_batch_tokens 768 must give whole "
                                       "batches at each stage's share (1/3) with micro-batches that divide them "
                                       "over world_size 1; choose sizes that divide"]


@pytest.mark.parametrize("given", [{}, {"CUBLASLT_WORKSPACE_SIZE": "1024"}, {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}])
def test_a_gpu_process_leaves_cublas_without_a_workspace_unless_the_user_gave_it_one(given, monkeypatch):
    """init_process on a (faked) GPU sets both of cuBLAS's workspace variables to none before the device is set,
    so before cuBLAS starts (its matmuls then zero no counter in a workspace first). Given either, it sets neither:
    cuBLASLt may share cuBLAS's workspace, which would cap a size given for the one at none set for the other."""
    variables = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") + variables:
        monkeypatch.setenv(name, "")  # so that the test's end removes what init_process sets
        monkeypatch.delenv(name)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: seen.append(
        (device, {name: os.environ[name] for name in variables if name in os.environ})))
    assert tg.init_process() == (0, 1, torch.device("cuda", 0))
    expected = given or {"CUBLAS_WORKSPACE_CONFIG": ":0:0", "CUBLASLT_WORKSPACE_SIZE": "0"}
    assert seen == [(torch.device("cuda", 0), expected)]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: run.sh would train on its GPUs")
def test_run_sh_without_a_gpu_runs_the_smoke_run_and_says_so(tmp_path):
    """The README's first command on a machine without a GPU: the smoke run, announced on stderr."""
    for name in ("run.sh", "train_gpt.py", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    run = subprocess.run(["bash", "run.sh", "--val_tokens", "1024", "--val_loss_every", "0", "--scheduled_steps", "2",
                          "--extension_steps", "0"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.splitlines()[0] == ("run.sh: no NVIDIA GPU found: running the CPU smoke run on data/sample "
                                          "instead (train_gpt.py --smoke)")
    (log,) = (tmp_path / "logs").glob("*.txt")
    lines = read_log(log)
    assert lines[3].startswith("command: train_gpt.py --smoke") and lines[-1].startswith("final val_loss:")


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("console", [Terminal(), io.StringIO()], ids=["terminal", "redirected"])
def test_run_log_shows_a_bar_on_a_terminal_and_lines_elsewhere(console, tmp_path):
    log = tg.RunLog(tmp_path / "run.txt", console)
    log("startup: 1.0s")
    bar = log.bar(3, "train", "step")
    assert (bar is not None) == console.isatty()
    for step in range(1, 4):
        log(f"step:{step}/3 train_loss:1.0000", echo=bar is None)
        if bar is not None:
            bar.update()
    log("final val_loss:1.0000")
    if bar is not None:
        bar.close()
    shown = console.getvalue()
    assert read_log(tmp_path / "run.txt") == [
        "startup: 1.0s", "step:1/3 train_loss:1.0000", "step:2/3 train_loss:1.0000", "step:3/3 train_loss:1.0000",
        "final val_loss:1.0000"]
    assert "startup: 1.0s" in shown and "final val_loss:1.0000" in shown
    assert ("step:2/3" in shown) != console.isatty()
    assert ("3/3" in shown and "train" in shown) if console.isatty() else "%" not in shown


def test_terminal_run_shows_training_and_validation_bars(workdir):
    """A real run on a pseudo-terminal: the bar with loss and ms/step replaces the step lines on screen."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 rows, 120 columns
    command = [sys.executable, str(ROOT / "train_gpt.py"), *QUICK, "--scheduled_steps", "2", "--extension_steps", "0"]
    run = subprocess.Popen(command, stdout=follower, stderr=follower, cwd=workdir)
    os.close(follower)
    screen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        try:
            chunk = os.read(leader, 4096) if ready else b""
        except OSError:  # the run ended and closed its side
            chunk = b""
        if not chunk:
            break
        screen += chunk
    assert run.wait(timeout=60) == 0
    os.close(leader)
    text = screen.decode(errors="replace")
    assert "train: 100%" in text and "2/2" in text and "ms/step" in text and "loss " in text
    assert "validation" in text
    assert "step:1/2 train_loss" not in text  # the bar stands in for it on screen
    assert "final val_loss" in text
    (log,) = (workdir / "logs").glob("*.txt")
    assert "step:1/2 train_loss" in log.read_text()


def test_non_finite_loss_stops_the_run_naming_its_step(workdir, monkeypatch, capsys):
    check_nan_stops_the_run(monkeypatch, QUICK)
    assert capsys.readouterr().err.splitlines() == ["error: training loss is nan at step 3; stopping"]


@pytest.mark.parametrize("where", ["at step 3", "before training"])
def test_ctrl_c_ends_the_run_with_one_line_in_the_log_and_status_130(where, workdir, monkeypatch, capsys):
    """No traceback: the log's last line and stderr say where the run was interrupted."""
    train_step = tg.train_step

    def interrupted_at_step_3(model, micro_batches, optimizers, step, args, world_size, upcoming=None):
        if step == 3:
            raise KeyboardInterrupt
        return train_step(model, micro_batches, optimizers, step, args, world_size, upcoming)

    def interrupted(*args):
        raise KeyboardInterrupt
    if where == "at step 3":
        monkeypatch.setattr(tg, "train_step", interrupted_at_step_3)
    else:
        monkeypatch.setattr(tg, "build_model", interrupted)
    status, err, log = run_main(QUICK + ["--warmup_steps", "0"], capsys)
    assert status == 130 and err == [f"interrupted {where}"] and log[-1] == f"interrupted {where}"


# A 10 + 1-step smoke run with the default two warm-up steps: the stages start at steps 0, 3, 7, 8, 9 and 10, the
# untie step is 7, and the warm-up runs steps 0-1, 3-4, 7-7, 8-8, 9-9 and 10-10 (each key of the CUDA graphs on
# two steps: a stage one step long has its step twice). So the warm-up passes the untie step and ends on an even
# step: what the warm-up and precompile tests below need, from one run.
WARM_UP_RUN = QUICK + ["--warmup_steps", "2", "--scheduled_steps", "10", "--extension_steps", "1",
                       "--merge_table", "data/gpt2_merges.npy"]
FIRST_MERGES = "first_1000_merges.npy"  # the warm-up run's merge table: its mask's build takes a second, not five


def recording_forward(calls):
    """GPT.forward, appending to `calls` what each call compiles for: the batch's tokens and sampled rows, the
    windows, the tie state, the head's loss terms, grad mode."""
    forward = tg.GPT.forward

    def recorded(model, batch, state):
        rows = None if batch.candidates is None else batch.candidates.numel()
        calls.append((batch.inputs.numel(), rows, state.windows, state.tied, len(state.mtp), bool(state.prefix),
                      torch.is_grad_enabled()))
        return forward(model, batch, state)
    return recorded


class WatchedRun(typing.NamedTuple):
    status: int  # main's exit status
    steps: list  # (step, parameters with a nonzero gradient before the step, those after it), warm-up included
    forwards: list  # what each forward pass compiled for (recording_forward), warm-up and validation included
    bare: list  # for each forward pass, whether no parameter had a gradient
    passes: list  # the forward passes so far after each train_step, warm-up included
    log: list  # the lines of the run's log
    tail: list  # TailAverage's calls: ("update", step) or ("apply", train steps and forward passes before it)
    masks: list  # ValidationMask.apply's calls: (train steps, forward passes before it, the head's mask before, after)
    collecting: list  # whether Python's garbage collector was on at each train_step, warm-up included


@pytest.fixture(scope="module")
def warm_up_run(tmp_path_factory):
    """The run of WARM_UP_RUN, by main in this process, its train_step and GPT.forward watched. Three tests read
    it: each had a run of its own, 15 to 50 s on 2 cores."""
    workdir = tmp_path_factory.mktemp("warm_up_run")
    (workdir / "data").symlink_to(ROOT / "data")
    train_step, steps, forwards, bare, passes, tail, masks, collecting = tg.train_step, [], [], [], [], [], [], []
    update, apply, apply_mask = tg.TailAverage.update, tg.TailAverage.apply, tg.ValidationMask.apply

    def watched_mask(self):
        before = self.head.never_follows.clone()
        result = apply_mask(self)
        masks.append((len(steps), len(forwards), before, self.head.never_follows.clone()))
        return result

    def with_grads(model):
        return [n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()]

    def watched(model, micro_batches, optimizers, step, args, world_size, upcoming=None):
        before = with_grads(model)
        collecting.append(gc.isenabled())
        loss = train_step(model, micro_batches, optimizers, step, args, world_size, upcoming)
        steps.append((step, before, with_grads(model)))
        passes.append(len(forwards))
        return loss
    np.save(workdir / FIRST_MERGES, np.load(ROOT / "data" / "gpt2_merges.npy")[:1000])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setattr(tg, "train_step", watched)
        recorded = recording_forward(forwards)
        patch.setattr(tg.GPT, "forward", lambda model, batch, state: bare.append(
            all(p.grad is None for p in model.parameters())) or recorded(model, batch, state))
        patch.setattr(tg.TailAverage, "update", lambda self, step: tail.append(("update", step)) or update(self, step))
        patch.setattr(tg.TailAverage, "apply", lambda self: tail.append(("apply", len(steps), len(forwards)))
                      or apply(self))
        patch.setattr(tg.ValidationMask, "apply", watched_mask)
        status = tg.main(WARM_UP_RUN + ["--merge_table", str(FIRST_MERGES)])
    (log,) = (workdir / "logs").glob("*.txt")
    assert gc.isenabled() and not gc.get_freeze_count()  # the run gave the garbage collector back
    return WatchedRun(status, steps, forwards, bare, passes, read_log(log), tail, masks, collecting)


def test_warm_up_leaves_no_trace_in_the_run(warm_up_run):
    """A 10 + 1-step smoke run's warm-up (steps 0-1, 3-4, 7-7, 8-8, 9-9, 10-10) passes the untie step (7) and ends
    on an even step, whose Adam gradients are kept: the first timed step must still start with every gradient zero
    (gradients are zeroed in place, never freed, as the CUDA graphs hold their addresses), and tied: the tie is the
    step's (StepState), not the model's, so the warm-up cannot leave it behind."""
    assert warm_up_run.status == 0
    seen = warm_up_run.steps
    steps = [step for step, _, _ in seen]
    assert steps[:12] == [0, 1, 3, 4, 7, 7, 8, 8, 9, 9, 10, 10] and steps[12:] == list(range(11))
    assert seen[11][2]  # the warm-up's last step left Adam's gradients behind
    assert seen[12][1] == []  # the run's first step: no gradient
    forwards = warm_up_run.forwards
    validations = [i for i, (*_, grad_mode) in enumerate(forwards) if not grad_mode]  # warm-up's, step 0's, the last
    assert len(validations) == 3 and validations[1] == validations[0] + 1
    assert forwards[validations[0] - 1][3] is False  # the warm-up's last step was untied (step 10)
    assert forwards[validations[1] + 1][3] is True  # and the run's first step is tied again


def test_warm_up_traces_each_variant_of_the_compiled_graphs_with_no_gradient_first(warm_up_run):
    """Dynamo's cache (compile_regions) saved a frame traced while parameters had gradients, but could not load
    it: in the warm-up, the first forward pass at each variant of the compiled graphs (batch size, sampled rows,
    windows, tie, loss terms, grad mode) must run with no gradient (Run.train_step's trace, or validation's
    warm-up), once per variant; the gradients come back after (Adam keeps its own over even steps)."""
    assert warm_up_run.status == 0
    forwards, bare = warm_up_run.forwards, warm_up_run.bare
    end = next(i for i, call in enumerate(forwards) if not call[-1]) + 1  # through validation's warm-up pass
    first = {}
    for i, call in enumerate(forwards[:end]):
        first.setdefault(call, i)
    assert all(bare[i] for i in first.values()) and len(first) > 6
    assert sum(bare[:end]) <= len(first) + 1  # step 0's first pass after its trace has no gradient either
    assert warm_up_run.steps[1][1]  # step 1 found the gradients that step 0 left Adam: its trace gave them back


def test_tail_average_takes_every_timed_step_and_ships_once_before_the_final_validation(warm_up_run):
    """The weight average takes in the values after each of the run's 12 steps and none of the warm-up's (whose
    effects are undone), and moves the weights once, after the last step and before the final validation's
    forward passes: updates missed, doubled or taken from the warm-up would shift the average; an apply
    after the validation would leave the reported loss that of the raw weights."""
    assert warm_up_run.status == 0
    updates = [event[1] for event in warm_up_run.tail if event[0] == "update"]
    applies = [event for event in warm_up_run.tail if event[0] == "apply"]
    assert updates == list(range(11)) and len(applies) == 1 and warm_up_run.tail[-1] == applies[0]
    _, steps_before, forwards_before = applies[0]
    assert steps_before == len(warm_up_run.steps)  # after the last training step
    final_validation = warm_up_run.forwards[forwards_before:]
    assert final_validation and not any(grad_mode for *_, grad_mode in final_validation)


def test_validation_mask_ships_once_after_the_weight_average_and_before_the_final_validation(warm_up_run):
    """#91's mask, built by a process of its own while the run trains, reaches the head once and whole: after the
    last step and the weight average, before the final validation's forward passes (the earlier validations ran
    with a mask of zeros, which masks nothing), as the log says. (GPT-2's first 1,000 merges here; the whole
    table's mask: test_validation_mask.py.)"""
    assert warm_up_run.status == 0
    (apply_tail,) = [event for event in warm_up_run.tail if event[0] == "apply"]
    ((steps_before, forwards_before, before, after),) = warm_up_run.masks
    assert steps_before == len(warm_up_run.steps) and forwards_before == apply_tail[2]
    bits, pairs = tg.impossible_pairs(np.load(ROOT / "data" / "gpt2_merges.npy")[:1000], 50304)
    assert not before.any() and pairs > 1000 and torch.equal(after, torch.from_numpy(bits))
    final_validation = warm_up_run.forwards[forwards_before:]
    assert final_validation and not any(grad_mode for *_, grad_mode in final_validation)
    (line,) = [line for line in warm_up_run.log if line.startswith("validation_mask: ")]
    assert re.fullmatch(rf"validation_mask: {pairs} pairs, ready [0-9.]+s after the timed loop began, "
                        r"waited for [0-9.]+s", line)


def test_garbage_collector_is_off_in_the_timed_steps_only(warm_up_run):
    """Python's cyclic collector runs in the warm-up (12 steps here) and is off for the 11 timed steps: a pass in
    the loop would stall the host that queues the steps. The fixture checks that the run turns it back on."""
    assert warm_up_run.status == 0
    assert warm_up_run.collecting == [True] * 12 + [False] * 11


def test_startup_line_splits_the_start_up_into_phases_that_add_up(warm_up_run):
    """The start-up line names each phase once, in order, and the phases cover the total: time that no phase
    counts would be time nobody can attribute."""
    assert warm_up_run.status == 0
    (line,) = [line for line in warm_up_run.log if line.startswith("startup: ")]
    phases = [phase.rsplit(" ", 1) for phase in line.removeprefix("startup: ").split(", ")]
    names = [name for name, _ in phases]
    # no compile cache on the CPU
    assert names == ["imports", "device and log header", "data", "model", *(f"warm-up stage {i}" for i in range(6)),
                     "validation warm-up", "total"]
    seconds = [float(value.removesuffix("s")) for _, value in phases]
    *parts, total = seconds
    assert sum(parts) - 0.05 * len(parts) <= total <= sum(parts) + 0.1 * total + 0.5


def test_precompile_helper_runs_the_passes_that_the_warm_up_compiles(warm_up_run, monkeypatch):
    """A cold start's helper processes compile stages 1 to 5 and validation for the warm-up to load: they must
    run the forward passes the warm-up runs there, at the same batch shapes and in the same compiled-graph states
    (windows, tie state, the head's loss terms and sampled rows, grad mode), each once. Run here in this process,
    on the CPU. The warm-up test's run: the warm-up passes the untie step (7, stage 2's)."""
    assert warm_up_run.status == 0
    args = tg.parse_args(WARM_UP_RUN)
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    warm = tg.warm_up_steps(args, shapes)
    assert list(warm) == [0, 1, 2, 3, 4, 5]  # the extension: stage 4's shape, longer windows
    # stages 1 to 5, traces included (Run.train_step), and the validation warm-up's pass
    stage_0 = warm_up_run.passes[len(warm[0]) - 1]
    warm_up = warm_up_run.forwards[stage_0: next(i for i, call in enumerate(warm_up_run.forwards) if not call[-1]) + 1]
    assert warm_up[-1][-1] is False and {call[3] for call in warm_up} == {True, False}
    assert {call[1] for call in warm_up} == {10240, 14336, 24576, None}

    calls, updates, parts, applied = [], [], [], []
    monkeypatch.setattr(tg.GPT, "forward", recording_forward(calls))
    monkeypatch.setattr(tg, "adam_update", lambda weights, *rest: updates.append(weights.dtype))
    monkeypatch.setattr(tg, "normuon_update", lambda grad, *rest: parts.append(
        (tuple(grad.shape), torch.is_grad_enabled())) or torch.zeros_like(grad))
    monkeypatch.setattr(tg, "normuon_apply", lambda weights, update, lr, decay: applied.append(
        (tuple(weights.shape), tuple(update.shape), float(lr), float(decay), torch.is_grad_enabled())))
    val_shape = tg.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    tg.precompile(args, torch.device("cpu"), 2, shapes, val_shape, [1, 2, 3, 4, 5, None])
    assert len(calls) == 2 + 4 + 1  # one micro-batch per distinct warm-up step (3-4, 7, 8, 9, 10), one validation
    assert set(calls) == set(warm_up)
    # validation's helper also stepped Adam once, on every one of its parameters (the embedding joins only when
    # untied), so that its compiled update is in the cache for the training process
    model = tg.build_model(args, torch.device("cpu"), 1)
    adams = [p for n, p in model.named_parameters() if tg.param_config(n).optimizer == "adam" and n != "embed.weight"]
    assert sorted(map(str, updates)) == sorted(str(p.dtype) for p in adams)
    # and applied NorMuon's updates to every one of its matrices, at zero rate and decay, without grad mode, as
    # NorMuon's step does
    matrices = [p for n, p in model.named_parameters() if tg.param_config(n).optimizer == "normuon"]
    assert sorted(applied) == sorted((tuple(p.shape), tuple(p.shape), 0.0, 0.0, False) for p in matrices)
    # and ran NorMuon's update on each share of a rank of the run's 2, without grad mode (a graph for each shape:
    # one GPU's shares are larger)
    named = [(n, p) for n, p in model.named_parameters() if tg.param_config(n).optimizer == "normuon"]
    shares = {size: sorted((tuple(share.shape), False) for share in tg.NorMuon(named, 0.1, 0.1, size).shares)
              for size in (1, 2)}
    assert sorted(parts) == shares[2] != shares[1]


@pytest.mark.parametrize("argv", [[], ["--scheduled_steps", "185", "--extension_steps", "3"], WARM_UP_RUN],
                         ids=["record", "proxy", "smoke"])
def test_warm_up_runs_each_graph_key_of_the_run_on_two_steps(argv):
    """MicroStepGraphs captures a key (batch shape, StepState.graph_key) on its second pass, and a step's later
    passes only after its first: a key that the warm-up ran on one step, or none, was captured in the timed loop,
    0.06-0.11 s a key on 2 H100s (session 23): stage 2's first step, the last tied one, and the extension's
    windows. The warm-up runs every key of the run on warmup_steps steps, in the run's order (tied before untied)."""
    args = tg.parse_args(argv)
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]

    def key(step):
        return shapes[tg.stage_index(step, args)], tg.step_state(step, args).graph_key()
    warm = [step for steps in tg.warm_up_steps(args, shapes).values() for step in steps]
    runs = collections.Counter(map(key, warm))
    assert set(runs) == set(map(key, range(tg.total_steps(args)))) and set(runs.values()) == {args.warmup_steps}
    assert warm == sorted(warm) and len(set(warm)) < len(warm)  # the last tied step, stage 2's first, twice


def test_precompiler_logs_each_helpers_time_and_memory_once_and_a_failed_one_as_a_warning(monkeypatch):
    """The log of a cold start says, at each helper's first stage, when the helper ended after it started, how
    long it compiled, its peak GPU memory and how long the warm-up waited: where a cold start's time goes. A
    helper of several stages is reported once; a failed one is a warning. The processes here are stand-ins that
    report as precompile_helper does."""
    made = []

    class Helper:
        def __init__(self, target, name, daemon=False, args=()):
            self.name, self.report, self.stages, self.exitcode = name, args[0], args[6], None
            made.append(self)

        def start(self):
            if self.stages != [None]:  # validation's stand-in fails before it reports
                self.report.send((12.5, time.time() + 30, (3 * 2**30, 4 * 2**30)))

        def join(self):
            self.exitcode = 1 if self.stages == [None] else 0

    context = types.SimpleNamespace(Process=Helper, Pipe=multiprocessing.Pipe)
    monkeypatch.setattr(tg.multiprocessing, "get_context", lambda method: context)
    monkeypatch.setattr(tg.atexit, "register", lambda stop: None)
    args = tg.parse_args(QUICK + ["--warmup_steps", "2"])
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    val_shape = tg.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    messages = []
    precompiler = tg.Precompiler(args, torch.device("cpu"), 1, shapes, val_shape, messages.append)
    assert [helper.stages for helper in made] == [[1], [2, 3, 4, 5], [None]]
    for stage in (0, 1, 2, 3, 4, 5, None):
        precompiler.wait(stage)
    reports = [m for m in messages if "helper process started" not in m]
    assert len(reports) == 3
    names = "precompile stage 1", "precompile stage 2 and stage 3 and stage 4 and stage 5"
    for line, name in zip(reports[:2], names):  # ended 30 s after its start, less the moment the start took
        assert re.fullmatch(rf"{name}: ended (29\.[5-9]|30\.0)s after it started, 12\.5s of it compiling, peak GPU "
                            r"memory 3\.0 GiB allocated, 4\.0 GiB reserved; the warm-up waited 0\.0s for it",
                            line), line
    assert reports[2] == "warning: precompile validation failed (exit code 1); its shapes compile here"


def test_precompile_helper_reports_its_time_and_memory(monkeypatch):
    """A helper sends the seconds it compiled, when it ended and its peak GPU memory (none on the CPU)."""
    monkeypatch.setattr(tg, "precompile", lambda *args: time.sleep(0.2))
    monkeypatch.setattr(tg.signal, "signal", lambda *args: None)  # the helper's own SIGINT setting, not pytest's
    report, sending = multiprocessing.Pipe(duplex=False)
    tg.precompile_helper(sending, None, torch.device("cpu"), 1, [], None, [1])
    seconds, ended, peak = report.recv()
    assert 0.2 <= seconds < 5 and abs(ended - time.time()) < 5 and peak == (0, 0)


def test_precompiler_stop_ends_the_helpers_still_running(workdir, monkeypatch):
    """A run that stops early (an error, an interrupt) ends its helper processes at exit instead of waiting for
    their compilation. Here on the CPU: the helpers are stopped while they still import torch. Every rank has
    helpers, for its own GPU (the compiled graphs name it): here the second of a node's ranks. Three: stage 1, the
    later stages (one micro-batch size), validation."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    args = tg.parse_args(QUICK + ["--warmup_steps", "2"])
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    val_shape = tg.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    messages = []
    precompiler = tg.Precompiler(args, torch.device("cpu"), 1, shapes, val_shape, messages.append)
    helpers = set(precompiler.helpers.values())
    assert len(helpers) == 3 and len(messages) == 3 and all(helper.is_alive() for helper in helpers)
    precompiler.stop()
    assert not precompiler.helpers and all(helper.exitcode == -signal.SIGTERM for helper in helpers)
