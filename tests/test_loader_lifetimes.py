"""The PrefetchLoader's GPU lifetimes, on the CPU (issue 36): train_gpt's torch is swapped for one whose torch.cuda is
a fake GPU. Its streams and events record what the loader asks of them, and its host-to-device copies run as late as
a real GPU may run them: not when .to(device, non_blocking=True) enqueues them but when an event recorded after them
is synchronized, or at the very end (a device synchronize). A host slot refilled before its copy's event completed is
then read by that copy after the refill, as it could be on a GPU, and the batch it carries comes out wrong."""
import contextlib
import dataclasses
import threading

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import random_documents


def storage(tensor):
    """The memory block a tensor (or a view of it) lives in: the unit the caching allocator reuses."""
    return tensor.untyped_storage().data_ptr()


class PinnedTensor(torch.Tensor):
    """Host memory that torch.empty(..., pin_memory=True) gave: .to(the fake GPU) enqueues a copy; views stay pinned."""

    def to(self, *args, **kwargs):
        device = args[0] if args else kwargs.get("device")
        if isinstance(device, FakeGPU):
            assert len(args) <= 1 and set(kwargs) <= {"device", "non_blocking"}, "the fake copies only to a device"
            return device.copy_to_device(self, kwargs.get("non_blocking", False))
        return super().to(*args, **kwargs)


class DeviceTensor(torch.Tensor):
    """Memory on the fake GPU (a CPU tensor underneath, so that its values can be read): record_stream is noted."""

    def record_stream(self, stream):
        stream.recorded.append(self)


class FakeCopy:
    """One host-to-device copy, from `source` (host memory, read when the copy runs) into `target`."""

    def __init__(self, gpu, source, stream, non_blocking):
        self.gpu, self.stream, self.non_blocking = gpu, stream, non_blocking
        self.pinned = isinstance(source, PinnedTensor)
        self.source = source.as_subclass(torch.Tensor)  # the same memory, without PinnedTensor's .to
        self.target = torch.empty_like(self.source)
        self.done = False

    def run(self):
        with self.gpu.lock:
            if not self.done:
                self.target.copy_(self.source)
                self.done = True


class FakeStream:
    def __init__(self, gpu, name):
        self.gpu, self.name = gpu, name
        self.copies = []  # enqueued on this stream, in order
        self.waited_for = set()  # ids of the copies that this stream's later work waits for (wait_event)
        self.recorded = []  # tensors record_stream'ed on this stream

    def wait_event(self, event):
        self.waited_for.update(id(copy) for copy in event.copies)

    def __repr__(self):
        return f"<{self.name} stream>"


class FakeEvent:
    def __init__(self, gpu):
        self.gpu, self.copies = gpu, []

    def record(self, stream=None):
        """Completes once all the work enqueued on `stream` so far has: streams run in order."""
        self.copies = list((stream or self.gpu.current).copies)

    def query(self):
        return all(copy.done for copy in self.copies)

    def synchronize(self):
        for copy in self.copies:
            copy.run()


class FakeGPU:
    """The device handed to the PrefetchLoader, and what its torch.cuda and pinned torch.empty do."""

    type = "cuda"

    def __init__(self):
        self.lock = threading.Lock()  # the worker thread runs copies (through synchronize) while the loader adds some
        self.compute = FakeStream(self, "compute")  # the default stream, which training runs on
        self.current = self.compute
        self.copies = []
        self.copy_by_target = {}  # storage(target) -> its FakeCopy

    # torch.cuda
    def Stream(self, device=None, priority=0):
        return FakeStream(self, "side")

    def Event(self, *args, **kwargs):
        return FakeEvent(self)

    @contextlib.contextmanager
    def stream(self, stream):
        previous, self.current = self.current, stream if stream is not None else self.current
        try:
            yield
        finally:
            self.current = previous

    def current_stream(self, device=None):
        return self.current

    # torch
    def empty(self, *size, pin_memory=False, **kwargs):
        tensor = torch.empty(*size, **kwargs)
        return tensor.as_subclass(PinnedTensor) if pin_memory else tensor

    # what the fakes above need
    def copy_to_device(self, source, non_blocking):
        copy = FakeCopy(self, source, self.current, non_blocking)
        with self.lock:
            self.copies.append(copy)
            self.current.copies.append(copy)
            if copy.target.numel():  # an empty tensor has no memory (its data_ptr is 0) and is never handed out
                self.copy_by_target[storage(copy.target)] = copy
        if not non_blocking:
            copy.run()  # a blocking copy is over when .to returns
        return copy.target.as_subclass(DeviceTensor)

    def unfinished_copies_from(self, tensors):
        """The copies still to run that read the memory of any of `tensors` (host memory)."""
        blocks = {storage(t) for t in tensors if t.numel()}
        with self.lock:
            return [copy for copy in self.copies if not copy.done and storage(copy.source) in blocks]

    def synchronize(self):
        for copy in list(self.copies):
            copy.run()


class FakeCuda:
    """torch.cuda as the loader uses it; anything else it asks for is an error that names it."""

    def __init__(self, gpu):
        self.Stream, self.Event = gpu.Stream, gpu.Event
        self.stream, self.current_stream = gpu.stream, gpu.current_stream

    def __getattr__(self, name):
        raise AttributeError(f"torch.cuda.{name} is not faked in {__name__}: add it to FakeCuda")


class TorchOnFakeGPU:
    """train_gpt's `torch`: the real module but for torch.cuda and a pinned torch.empty."""

    def __init__(self, gpu):
        self.cuda, self.empty = FakeCuda(gpu), gpu.empty

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture
def gpu(monkeypatch):
    gpu = FakeGPU()
    monkeypatch.setattr(tg, "torch", TorchOnFakeGPU(gpu))
    return gpu


# Micro-batches with candidates and without, and two shape changes: prefetched batches are dropped and rebuilt, and
# the slots go round several times.
WITH_CANDIDATES = tg.BatchShape(256, 64, 2, candidates=512)  # 256 tokens: never more than 512 distinct targets
SHAPES = [WITH_CANDIDATES] * 8 + [tg.BatchShape(128, 100, 3)] * 7 + [WITH_CANDIDATES] * 6
WORLD_SIZE, RANK = 2, 1


@pytest.fixture
def pattern(make_shards):
    rng = np.random.default_rng(36)
    return make_shards("train", [np.concatenate(random_documents(rng, 20)) for _ in range(4)])


def run_loader(pattern, gpu, check_step=None):
    """Every step's micro-batches from a PrefetchLoader on the fake GPU, all held to the end (as training holds none,
    but then no returned memory is freed and reused by another tensor); check_step(step, micro_batches) after each
    send. Returns once the worker is idle."""
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, RANK, WORLD_SIZE, repeat=True), gpu)
    steps = []
    for step, shape in enumerate(SHAPES):
        steps.append(loader.send(shape))
        if check_step is not None:
            check_step(step, steps[-1])
    loader.restart()  # waits for the batch being built: no host slot is written after this
    return steps


def tensors_of(micro):
    """Every tensor a MicroBatch carries, by name (its sequences' boundaries as seqs.cu_seqlens)."""
    found = {}
    for field in dataclasses.fields(micro):
        value = getattr(micro, field.name)
        if isinstance(value, torch.Tensor):
            found[field.name] = value
        elif dataclasses.is_dataclass(value):
            found.update((f"{field.name}.{name}", t) for name, t in tensors_of(value).items())
    return found


def test_a_host_slot_is_refilled_only_after_the_copy_that_read_it_has_completed(pattern, gpu, monkeypatch):
    """HostBuffers.reserve is where a build starts writing into its slot: when it returns, no copy that read the
    slot's memory (the tensors it had, and those it has now) may still be running. In this fake a copy runs only when
    an event recorded after it is synchronized, so this holds only if reserve synchronized the slot's event."""
    reserve, refills = tg.HostBuffers.reserve, []

    def checked_reserve(buffers, tokens, candidates, asked_rows=0):
        old = list(buffers.tensors.values())
        running_before = gpu.unfinished_copies_from(old)
        views = reserve(buffers, tokens, candidates, asked_rows)
        refills.append((len(running_before), gpu.unfinished_copies_from(old + list(buffers.tensors.values()))))
        return views

    monkeypatch.setattr(tg.HostBuffers, "reserve", checked_reserve)
    run_loader(pattern, gpu)
    assert gpu.copies and all(copy.pinned and copy.non_blocking for copy in gpu.copies)  # asynchronous copies
    assert len(refills) > 2 * tg.PrefetchLoader.SLOTS  # every slot refilled
    # not vacuous: slots were refilled while the copies out of them had yet to run, and reserve had to wait for them
    assert sum(1 for running, _ in refills if running) >= len(SHAPES) - tg.PrefetchLoader.SLOTS
    still_running = [(i, len(copies)) for i, (_, copies) in enumerate(refills) if copies]
    assert not still_running, f"(refill, copies still reading its slot) when it was refilled: {still_running}"


def test_every_tensor_send_returns_was_waited_for_and_recorded_on_the_compute_stream(pattern, gpu):
    """Each tensor of each MicroBatch is memory on the device that a copy on the loader's own stream filled; the
    compute stream waits on an event recorded after that copy, and the tensor is record_stream'ed on the compute
    stream, so that the allocator does not hand its block to another tensor while training may still read it."""
    names_seen = set()

    def check_step(step, micro_batches):
        recorded = {storage(t) for t in gpu.compute.recorded}
        for a, micro in enumerate(micro_batches):
            for name, tensor in tensors_of(micro).items():
                names_seen.add(name)
                where = f"step {step}, micro-batch {a}, {name}"
                copy = gpu.copy_by_target.get(storage(tensor)) if tensor.numel() else None
                assert copy is not None, f"{where}: not memory that a copy to the device filled"
                assert copy.stream is not gpu.compute, f"{where}: copied on the compute stream"
                assert id(copy) in gpu.compute.waited_for, f"{where}: the compute stream does not wait for its copy"
                assert storage(tensor) in recorded, f"{where}: not record_stream'ed on the compute stream"

    steps = run_loader(pattern, gpu, check_step)
    assert names_seen == {"inputs", "targets", "bigram_slots", "trigram_slots", "bigram_signs", "trigram_signs",
                          "input_order", "bigram_order", "trigram_order", "seqs.cu_seqlens", "candidates", "ngram_rows"}
    with_candidates = [micro.candidates is not None for step in steps for micro in step]
    assert any(with_candidates) and not all(with_candidates)


def test_batches_through_the_fake_gpu_equal_synchronous_batches(pattern, gpu):
    """The fakes move data as a GPU would: once every copy has run, the batches are the reference stream's."""
    got = run_loader(pattern, gpu)
    gpu.synchronize()  # the copies still queued run now, reading the host slots as they are at the end
    expected = list(tg.synchronous_batches(tg.TrainSource(pattern, RANK, WORLD_SIZE, repeat=True), SHAPES))
    assert len(got) == len(expected) == len(SHAPES)
    for step, (got_step, expected_step) in enumerate(zip(got, expected)):
        assert len(got_step) == len(expected_step) == SHAPES[step].accum_steps
        for a, (g, e) in enumerate(zip(got_step, expected_step)):
            g_tensors, e_tensors = tensors_of(g), tensors_of(e)
            assert g_tensors.keys() == e_tensors.keys() and g.seqs.max_len == e.seqs.max_len, (step, a)
            for name in g_tensors:
                assert np.array_equal(g_tensors[name].numpy(), e_tensors[name].numpy()), (step, a, name)
