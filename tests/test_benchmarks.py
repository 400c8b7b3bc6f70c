"""The arithmetic of the benchmarks: exposed communication, proxy run seeds and corpus, a run's steps, step times
from loss reads, copies overlapping compute."""
import json
import math
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import torch

import train_gpt as tg
from benchmarks import ce_kernel, loader_overlap, proxy_record, startup_profile, step_ab, step_profile  # conftest: root
from conftest import write_shard


@pytest.mark.parametrize("communication, compute, exposed", [
    ([(0, 10)], [], 10),                         # nothing to hide behind
    ([(0, 10)], [(0, 10)], 0),                   # fully hidden
    ([(0, 10)], [(2, 4), (6, 7)], 7),            # partly hidden, in two places
    ([(0, 10)], [(2, 6), (4, 8)], 4),            # overlapping compute counts once
    ([(0, 4), (2, 6)], [(5, 9)], 5),             # overlapping communication counts once
    ([(0, 2), (8, 10)], [(1, 9)], 2),            # compute spans the gap between two transfers
    ([], [(0, 5)], 0),
])
def test_exposed_time(communication, compute, exposed):
    assert step_profile.exposed_time(communication, compute) == pytest.approx(exposed)


@pytest.mark.parametrize("communication, compute, min_wait, exposed", [
    ([(0, 10)], [(2, 4), (6, 7)], 3, 5),         # the 2-wide gap between the kernels is no wait: 0-2 and 7-10 are
    ([(0, 10)], [(2, 4), (6, 7)], 2, 7),         # a gap as long as min_wait is a wait
    ([(3, 5)], [(0, 4), (4.5, 9)], 1, 0),        # communication inside a launch gap alone
    ([(8, 20)], [(0, 10)], 100, 10),             # after the last kernel: a wait however long min_wait is
])
def test_exposed_time_in_waits_leaves_out_the_short_gaps_between_kernels(communication, compute, min_wait, exposed):
    assert step_profile.exposed_time(communication, compute, min_wait) == pytest.approx(exposed)


@pytest.mark.parametrize("kernels, share", [
    ([(0, 10)], 1.0),
    ([(0, 4), (6, 10)], 0.8),                    # the GPU waits from 4 to 6
    ([(0, 6), (2, 8), (9, 10)], 0.9),            # overlapping kernels (two streams) count once
    ([(5, 6), (0, 1)], 1 / 3),                   # in any order: the span runs from the first start
    ([], 0.0),
])
def test_busy_share_is_the_union_of_kernels_over_their_span(kernels, share):
    assert step_profile.busy_share(kernels) == pytest.approx(share)


def test_idle_gaps_group_the_waits_by_the_kernels_around_them():
    """Two steps (microseconds), each: norm, a 100 wait, nccl, with copy on another stream overlapping nccl and
    adam (no gap), a 300 wait, gemm. A gap is named after the kernel that ended last before it (copy, not adam,
    which started later), and after a short kernel inside a long one, after the long one."""
    step = [("norm", 0, 100), ("nccl", 200, 400), ("copy", 350, 500), ("adam", 400, 450), ("gemm", 800, 1000)]
    kernels = [(name, start + offset, end + offset) for offset in (0, 1000) for name, start, end in step]
    kernels += [("short", 2000, 2010), ("long", 1990, 2100), ("late", 2300, 2400)]
    gaps = step_profile.idle_gaps(kernels, profiled=2)
    assert gaps[:2] == [(0.3, 1.0, "copy", "gemm"), (0.1, 1.0, "norm", "nccl")]
    assert (0.1, 0.5, "long", "late") in gaps
    assert step_profile.idle_gaps([], profiled=2) == []


def test_short_kernel_names_keep_what_tells_kernels_apart():
    """The elementwise kernels that a 2-GPU profile (session 9) showed as one name cut at 60 characters, a fill
    and an add, come apart once namespaces and arguments are gone; a Triton kernel's name stays whole; a long
    one is cut at the width, marked."""
    def elementwise(functor, arrays):
        types = f"at::native::{functor}, std::array<char*, {arrays}>"
        return f"void at::native::vectorized_elementwise_kernel<4, {types} >(int, {types})"

    kept = "vectorized_elementwise_kernel<4, {}, array<char*, {}> >"
    assert step_profile.short_name(elementwise("FillFunctor<float>", "1ul")) == kept.format("FillFunctor<float>", "1ul")
    assert (step_profile.short_name(elementwise("CUDAFunctor_add<float>", "3ul"))
            == kept.format("CUDAFunctor_add<float>", "3ul"))
    assert step_profile.short_name("triton_poi_fused_add_mul_0") == "triton_poi_fused_add_mul_0"
    clamp = "(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&)::{lambda()#1}"
    assert step_profile.short_name(elementwise(clamp, "2ul"), width=40) == "vectorized_elementwise_kernel<4, launch…"


def test_kernel_kinds_by_name():
    kinds = [step_profile.kernel_kind(name) for name in (
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "nvjet_tst_192x192_64x3_1x2_h_bz_coopA_NTN",
        "relu_square_matmul_kernel", "triton_poi_fused_add_mul_0")]
    assert kinds == ["nccl", "attention", "matmul", "matmul", "matmul", "other"]
    exchanges = [step_profile.is_row_exchange(name) for name in (
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_AllToAll_f32",
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "ncclDevKernel_AllGather_RING_LL", "triton_poi_fused_send_0")]
    assert exchanges == [True, True, False, False, False]


def test_optimizer_times_add_the_halves_and_split_host_and_gpu_per_optimizer():
    """Two profiled steps: NorMuon's halves on both, Adam's on one (odd steps only), each once on the host and
    once on the GPU; zero_grad's, a whole step()'s and other ranges are not train_step's halves."""
    annotations = [("NorMuon.start_step", False, 3000.0), ("NorMuon.start_step", True, 8000.0),
                   ("NorMuon.finish_step", False, 1000.0), ("NorMuon.finish_step", True, 1000.0),
                   ("NorMuon.start_step", False, 5000.0), ("NorMuon.start_step", True, 8400.0),
                   ("NorMuon.finish_step", False, 1000.0), ("NorMuon.finish_step", True, 1000.0),
                   ("Adam.start_step", False, 3000.0), ("Adam.finish_step", True, 11600.0),
                   ("Optimizer.step#Adam.step", False, 9000.0),
                   ("Optimizer.zero_grad#Adam.zero_grad", False, 500.0), ("ProfilerStep#1", False, 90000.0)]
    times = step_profile.optimizer_times(annotations, profiled=2)
    assert times == {"NorMuon": pytest.approx([5.0, 9.2]), "Adam": pytest.approx([1.5, 5.8])}


def test_each_half_of_an_optimizer_step_shows_in_the_profile_once(monkeypatch):
    """annotate_steps names both halves of each optimizer's step, and each call shows as one range."""
    monkeypatch.setattr(tg, "train_step", tg.train_step)  # put back after the test, as the halves
    for optimizer in (tg.NorMuon, tg.Adam, tg.RowAdam):
        for name in step_profile.OPTIMIZER_HALVES:
            monkeypatch.setattr(optimizer, name, getattr(optimizer, name))
    step_profile.annotate_steps()
    matrices = [torch.nn.Parameter(torch.randn(8, 4)) for _ in range(2)]
    for p in matrices:
        p.grad = torch.randn_like(p)
    normuon = tg.NorMuon([(f"blocks.{i}.mlp.fc.weight", p) for i, p in enumerate(matrices)], lr=0.01, wd=0.0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        normuon.step()
    names = [e.name for e in prof.events() if e.is_user_annotation]
    assert sorted(n for n in names if n.startswith("NorMuon.")) == ["NorMuon.finish_step", "NorMuon.start_step"]
    assert set(step_profile.optimizer_times([(n, False, 1000.0) for n in names], profiled=1)) == {"NorMuon"}


def test_each_training_step_shows_in_the_profile_as_one_range(monkeypatch):
    """annotate_steps wraps train_gpt.train_step, which loader_overlap.run_steps calls, in one "train_step" range a
    call, and passes its result through."""
    for optimizer in (tg.NorMuon, tg.Adam, tg.RowAdam):  # put back after the test: annotate_steps wraps them too
        for name in step_profile.OPTIMIZER_HALVES:
            monkeypatch.setattr(optimizer, name, getattr(optimizer, name))
    monkeypatch.setattr(tg, "train_step", lambda *args: sum(args))
    step_profile.annotate_steps()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        results = [tg.train_step(1, 2), tg.train_step(3, 4)]
    assert results == [3, 7]
    assert [e.name for e in prof.events() if e.is_user_annotation].count("train_step") == 2


def test_optimizer_region_names_the_optimizer_range_a_gpu_time_falls_in():
    """An exported trace's GPU ranges: the optimizers' halves and zero_grad by their names, an earlier trace's whole
    step too; train_step, CPU ranges and kernels are no optimizer's."""
    def event(name, ts, dur, cat="gpu_user_annotation"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    events = [event("train_step", 0, 100), event("NorMuon.start_step", 50, 10),
              event("Optimizer.zero_grad#Adam.zero_grad", 70, 5), event("Optimizer.step#Adam.step", 80, 5),
              event("RowAdam.finish_step", 0, 100, cat="user_annotation"), event("nvjet_gemm", 90, 5, cat="kernel")]
    region = step_profile.optimizer_region(events)
    assert [region(ts) for ts in (10, 55, 60, 65, 72, 82, 92)] == [
        None, "NorMuon.start_step", "NorMuon.start_step", None, "Adam.zero_grad", "Adam.step", None]


@pytest.mark.parametrize("ranges, steps, skip, start", [
    ([(7, 30, 40), (7, 0, 10), (7, 20, 30), (7, 10, 20)], 4, 2, 20),  # the third step's start, in any order
    ([(7, 0, 10), (7, 10, 20)], 2, 1, 10),                             # a one-step stage: from its second step
    ([(7, 0, 10), (7, 10, 20)], 2, 2, -math.inf),                      # no steps after the skipped ones: all
    ([(7, 0, 10), (25, 4, 9), (7, 11, 20), (25, 10, 19), (7, 20, 30), (25, 21, 29)], 3, 1, 10),  # two streams,
    # one range each a step (session 21's trace): a step starts where the first of its streams does
    ([(7, 0, 10), (25, 4, 9), (7, 10, 20), (7, 20, 30), (25, 21, 29)], 3, 1, -math.inf),  # a stream's step unranged
    ([], 6, 2, -math.inf),                                             # no GPU ranges (the CPU): all of them
])
def test_the_waits_are_measured_from_the_step_after_the_skipped_ones(ranges, steps, skip, start):
    assert step_profile.measured_from(ranges, steps, skip) == start


def test_step_ab_weighs_each_stage_by_its_steps():
    """The run's time per token: a stage of many short steps weighs as its steps do, not as one column."""
    result = {"median_ms": {"0": 50.0, "1": 100.0}, "steps": {"0": 400, "1": 20}}
    assert step_ab.run_seconds(result) == pytest.approx((400 * 50 + 20 * 100) / 1000)


def test_step_ab_table_names_a_revision_whose_loss_was_not_finite():
    """A revision that trained into NaN (the first FP8 output projection: 4.6 % "faster") is flagged, with
    where its loss first went; a finite one is not."""
    result = {"median_ms": {"0": 50.0}, "windows": {"0": [128, 384]}, "steps": {"0": 10}, "peak_gib": 1.0,
              "not_finite": None}
    broken = dict(result, median_ms={"0": 48.0}, not_finite="stage 0, step 1")
    lines = step_ab.table([("main", result), ("branch", broken)], 10, "CPU")
    assert lines[3].startswith("| main | 50.0 ms | +0.00% |") and lines[4].startswith("| branch | 48.0 ms | -4.00% |")
    assert lines[5:] == ["branch: THE LOSS WAS NOT FINITE from stage 0, step 1 on: these are not a training run's "
                         "step times; do not compare them"]
    assert len(step_ab.table([("main", result)], 10, "CPU")) == 4


def test_a_baseline_revision_loads_beside_train_gpt_with_its_own_operators():
    """The kernel benchmarks' --baseline (ce_kernel.load_module, which row_sums.py shares): another train_gpt.py
    loads in the same process (its dataclasses too), its custom operators under their own names."""
    baseline = ce_kernel.load_module(tg.__file__)
    assert baseline is not tg and baseline.Hyperparameters is not tg.Hyperparameters
    assert baseline.parse_args(["--seed", "3"]).seed == 3
    assert hasattr(torch.ops.baseline_train_gpt, "relu_square_linear")


def test_proxy_runs_each_draw_their_own_seed_unless_one_is_given():
    assert proxy_record.run_flags(["--scheduled_steps", "250"], 2) == ["--scheduled_steps", "250", "--seed", "2"]
    assert proxy_record.run_flags(["--seed", "7"], 2) == ["--seed", "7"]
    assert proxy_record.run_flags(["--seed=7"], 1) == ["--seed=7"]
    assert proxy_record.run_flags(["--seed_data"], 1)[-2:] == ["--seed", "1"]  # another flag, not --seed


def test_proxy_record_runs_one_process_or_torchrun_s():
    assert proxy_record.run_command("train_gpt.py", 1) == [sys.executable, "train_gpt.py"]
    assert proxy_record.run_command("train_gpt.py", 2) == [sys.executable, "-m", "torch.distributed.run",
                                                           "--standalone", "--nproc_per_node=2", "train_gpt.py"]


def test_proxy_record_finds_each_runs_log_by_the_run_id_it_prints(capsys):
    """Runs side by side from one folder each find their own log: run_logged reads the run_id line that the run
    prints, passes the run's console through, and stops on a failed run or one that printed no run_id."""
    script = "print('environment: cpu'); print('run_id: 20261127_010203_abcdef'); print('final val_loss:1.9')"
    assert proxy_record.run_logged([sys.executable, "-c", script]) == (proxy_record.ROOT / "logs" /
                                                                       "20261127_010203_abcdef.txt")
    assert capsys.readouterr().out == "environment: cpu\nrun_id: 20261127_010203_abcdef\nfinal val_loss:1.9\n"
    with pytest.raises(subprocess.CalledProcessError):
        proxy_record.run_logged([sys.executable, "-c", "print('run_id: 20261127_010203_abcdef'); exit(3)"])
    with pytest.raises(SystemExit, match="no run_id"):
        proxy_record.run_logged([sys.executable, "-c", "print('final val_loss:1.9')"])


def test_proxy_record_refuses_a_corpus_that_is_not_the_whole_proxy_corpus(tmp_path, monkeypatch):
    """check_corpus passes the corpus whole, and stops with each problem named: a shard missing (session 31's
    runs read shard 3 alone and memorised it), a shard of another size, a truncated shard, a stray shard that the
    runs' patterns would read too."""
    monkeypatch.setattr(proxy_record, "PROXY_SHARDS", {"proxy_train_000001.bin": 300, "proxy_train_000002.bin": 200,
                                                       "proxy_val_000000.bin": 100})
    for name, tokens in proxy_record.PROXY_SHARDS.items():
        write_shard(tmp_path / name, np.full(tokens, 50256, dtype=np.uint16))
    proxy_record.check_corpus(tmp_path)
    (tmp_path / "proxy_train_000002.bin").unlink()
    write_shard(tmp_path / "proxy_train_000003.bin", np.full(10, 50256, dtype=np.uint16))
    write_shard(tmp_path / "proxy_val_000000.bin", np.full(99, 50256, dtype=np.uint16))
    with open(tmp_path / "proxy_train_000001.bin", "r+b") as shard:
        shard.truncate(1024 + 2 * 299)
    with pytest.raises(SystemExit) as stop:
        proxy_record.check_corpus(tmp_path)
    message = str(stop.value)
    for part in ("proxy_train_000002.bin missing", "proxy_train_000003.bin is no shard of the proxy corpus",
                 "proxy_val_000000.bin holds 99 tokens, not 100", "proxy_train_000001.bin: truncated by 2 bytes"):
        assert part in message, part


def test_loader_overlap_step_time_is_the_median_pair_of_steps_between_loss_reads():
    """Reads at the end of each step: warm-up steps (long) left out, then steps alternating 1 and 3 s (no Adam
    step, Adam step), one pair disturbed: the median pair, halved, is 2 s."""
    durations = [9, 9, 9, 1, 3, 1, 3, 1, 30, 1, 3]
    reads = [sum(durations[:k]) for k in range(len(durations) + 1)]
    assert loader_overlap.pair_step_time(reads, warmup=3) == 2


def test_loader_overlap_table_gives_rank_0s_times_and_the_largest_exposed_time_over_the_ranks():
    """Two ranks: rank 0's step times and exposed data time (step - resident), the largest exposed time over
    both (rank 1's here), and each rank's overlapping copies."""
    args = tg.parse_args(["--smoke"])
    shape = tg.train_shape(args, 2, tg.TRAINING_STAGES[0])
    ranks = [({"resident": 0.100, "prefetch": 0.101}, (7, 8)), ({"resident": 0.100, "prefetch": 0.104}, (8, 8))]
    lines = loader_overlap.table(ranks, "H100", shape, [0, 1], args, 12, 0).splitlines()
    assert lines[1].startswith("2 x H100, stage 0")
    prefetch = lines[4].split()
    assert prefetch[0] == "prefetch" and [float(x) for x in prefetch[1:3]] == [101.0, 1.0]
    assert prefetch[3] == "0.99%" and float(prefetch[4]) == pytest.approx(4.0)
    assert lines[5].endswith("rank 0: 7 of 8, rank 1: 8 of 8 (traces: traces/prefetch_rank<r>.json)")


def test_loader_overlap_counts_host_to_device_copies_that_overlap_a_kernel_on_another_stream(tmp_path):
    event = lambda cat, name, ts, dur, tid: {"cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}  # noqa: E731
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        event("kernel", "matmul", 0, 100, 7),
        event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 50, 10, 13),   # under the kernel: counted
        event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 200, 10, 13),  # nothing running
        event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 10, 7),    # same stream as the kernel
        event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 60, 10, 13),   # not the loader's copy
        event("cpu_op", "aten::copy_", 0, 300, 1),
    ]}))
    assert loader_overlap.copies_overlapping_kernels(trace) == (1, 3)


def test_startup_profile_records_each_step_and_passes_the_warm_ups_trace_on(monkeypatch):
    """record_steps wraps Run.train_step: each call's step and time, and the call as made, warm_up's trace
    included (a wrapper without it stopped every profiled start at its first warm-up step)."""
    calls, started = [], []
    monkeypatch.setattr(startup_profile.train_gpt.Run, "train_step", lambda self, step, trace=False: calls.append(
        (self, step, trace)) or step)
    startup_profile.record_steps(started)
    run = object()
    assert startup_profile.train_gpt.Run.train_step(run, 3, True) == 3
    assert startup_profile.train_gpt.Run.train_step(run, 4) == 4
    assert calls == [(run, 3, True), (run, 4, False)] and [step for _, step in started] == [3, 4]


def test_startup_profile_counts_each_frame_under_the_step_queued_last_before_it(monkeypatch, capsys):
    """A frame that began before the first step goes under '-', one that began during a step's warm-up under that
    step; the sums per step and in all add the frames' durations."""
    def frame(start, seconds, name):
        return types.SimpleNamespace(start_time_us=start * 1e6, duration_us=seconds * 1e6, co_name=name,
                                     co_firstlineno=1, is_forward=True, dynamo_cumulative_compile_time_us=0,
                                     aot_autograd_cumulative_compile_time_us=0, inductor_cumulative_compile_time_us=0,
                                     guard_count=1, graph_op_count=1)
    frames = [frame(5, 0.5, "build"), frame(11, 1.0, "region"), frame(12, 2.0, "region"), frame(31, 0.25, "head")]
    monkeypatch.setattr(startup_profile.torch._dynamo.utils, "get_compilation_metrics", lambda: frames)
    startup_profile.print_frames([(10.0, 0), (20.0, 1), (30.0, 10)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("frame  step") and [line.split()[1] for line in lines[1:5]] == ["-", "0", "0", "10"]
    assert "frames at step - 1 seconds 0.5" in lines and "frames at step 0 2 seconds 3.0" in lines
    assert "frames at step 10 1 seconds 0.25" in lines and lines[-1] == "frames 4 seconds 3.75"


def test_startup_profile_samples_the_main_thread_inside_and_outside_the_warm_up():
    """Time spent in a function inside warm_up counts under warm_up and the run, inclusive and as its own; time in
    the same function outside it under the run only; each within the time it ran."""
    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def warm_up():
        spin(0.4)
    sampler = startup_profile.StackSampler(interval=0.002)
    sampler.start()
    warm_up()
    spin(0.2)
    sampler.stop()
    spun = {key: sum(v for name, v in counter.items() if name.startswith("spin (test_benchmarks.py"))
            for key, counter in sampler.seconds.items()}
    assert 0.25 < spun["warm_up", "own"] <= 0.5 and spun["warm_up", "inclusive"] == spun["warm_up", "own"]
    assert 0.45 < spun["run", "own"] <= 0.7
    warm = [v for name, v in sampler.seconds["warm_up", "inclusive"].items() if name.startswith("warm_up (")]
    assert warm and 0.25 < warm[0] <= 0.5
