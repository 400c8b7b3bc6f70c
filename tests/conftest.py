import ctypes
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "data"))

from fineweb import BOS, write_shard  # noqa: E402


def environment_without_cache_dirs():
    """This process's environment less the compile caches' folders (TORCHINDUCTOR_CACHE_DIR, which importing
    Inductor sets, and TRITON_CACHE_DIR): a process started with it gets the folders load_compile_cache names."""
    return {k: v for k, v in os.environ.items() if not k.endswith("_CACHE_DIR")}


def keep_freed_memory_in_the_heap():
    """A smoke step's largest tensors (the head's logits and their gradient over the whole vocabulary, up to 300
    MB; the embedding tables' gradients and Adam moments) are past glibc malloc's threshold for allocations of
    their own: each is mapped afresh and unmapped when freed, so every training step faulted in hundreds of MB of
    new pages, and a third of a smoke step's CPU time went to the kernel. Allocations up to 1 GiB taken from the
    heap, and freed memory kept there for reuse, made the suite's training runs about 40% faster on 2 cores (the
    suite's peak resident memory went from 3.7 to 4.3-4.5 GB). Where memory comes from, never what is computed; in
    this process (mallopt) and in those the tests start (glibc reads the variables at their start; values
    already set win). Without glibc: nothing."""
    limit = str(2**30)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", limit)
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", limit)
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
        mallopt(M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
        mallopt(M_TRIM_THRESHOLD, int(os.environ["MALLOC_TRIM_THRESHOLD_"]))


keep_freed_memory_in_the_heap()


def random_documents(rng, num_docs, min_len=1, max_len=300, vocab=50000):
    """Documents of random ids below BOS, each starting with BOS."""
    docs = []
    for _ in range(num_docs):
        n = int(rng.integers(min_len, max_len + 1))
        docs.append(np.concatenate([[BOS], rng.integers(0, vocab, n - 1)]).astype(np.uint16))
    return docs


def rel_error(a, b):
    """||a - b|| / ||b|| over the whole tensor. Gradients are compared so, not element by element: a scalar's
    gradient sums over every token, and the rounding of that sum differs between CPUs and kernels, which an
    elementwise tolerance on a near-zero entry does not survive; a wrong term still moves the norm."""
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def gradients_as_hooks_see_them(tables):
    """A dict that each table's post-accumulate hook (GradientEvents' kind) fills, under the table's index, with a
    copy of its gradient as the hook sees it (None if it has none)."""
    seen = {}

    def hook(i):
        return lambda p: seen.__setitem__(i, None if p.grad is None else p.grad.clone())

    for i, table in enumerate(tables):
        table.register_post_accumulate_grad_hook(hook(i))
    return seen


def randomise_zero_initialised(model, seed=0):
    """Output projections (and zero-initialised scalars) start at zero, which makes many gradients zero: give them
    values so that a comparison of gradients means something."""
    generator = torch.Generator().manual_seed(seed)
    ngram = model.ngram
    with torch.no_grad():
        for p in model.parameters():
            if not p.any() and p is not ngram.cache:  # the cache's size is one rank's; a fetch fills it
                p.copy_(0.02 * torch.randn(p.shape, generator=generator))
        # the n-gram table starts at zero, and is no parameter; with several ranks, each holds its shard of it
        table = 0.02 * torch.randn(ngram.rows, ngram.table.size(1), generator=generator)
        ngram.table.copy_(table[ngram.rank::ngram.world_size])
    ngram.fetched = None


@pytest.fixture
def make_shards(tmp_path):
    """make_shards(name, [tokens, ...]) writes shards name_000000.bin ... and returns their glob."""
    def make(name, shards):
        for i, tokens in enumerate(shards):
            write_shard(tmp_path / f"{name}_{i:06d}.bin", tokens)
        return str(tmp_path / f"{name}_*.bin")
    return make


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory where data/ leads to the repository's, so that logs/ is a fresh one."""
    (tmp_path / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sorting_order(ids):
    """train_gpt.stable_order of numpy ids, as a new int32 array."""
    import train_gpt as tg
    order = np.empty(len(ids), np.int32)
    tg.stable_order(ids, order)
    return order


def micro_batch(inputs, targets, seqs):
    """A MicroBatch of the given tokens, their n-grams hashed as the loader hashes them into the smoke model's
    table (SMOKE_SETTINGS' ngram_rows)."""
    import train_gpt as tg
    fields = [np.empty(len(inputs), np.int32) for _ in range(7)]
    tg.hash_ngrams(inputs.numpy(), tg.SMOKE_SETTINGS["ngram_rows"], *fields[:4])
    rows = np.empty(2 * len(inputs), np.int32)
    (count,) = tg.gather_ngram_rows(fields[0], fields[1], rows)
    tg.sort_ids([inputs.numpy(), targets.numpy(), *fields], len(inputs), len(inputs))
    return tg.MicroBatch(inputs, targets, *(torch.from_numpy(f) for f in fields), seqs,
                         ngram_rows=torch.from_numpy(rows[:count]), ngram_owners=(count,))


def read_log(path):
    """A run log's lines as train_gpt.py logged them: each file line's hash chain checked (records/summarize.py)
    and taken off."""
    from records import summarize
    problems = []
    lines = summarize.unchain(path.read_text().split("\n")[:-1], lambda *problem: problems.append(problem))
    assert not problems, problems
    return lines


def check_nan_stops_the_run(monkeypatch, flags):
    """Run train_gpt.main with the loss of step 3 made NaN: the log must end with the error line for step 3,
    after the lines of steps 1 and 2, and no step after step 4 may have been queued (one step late at most)."""
    import train_gpt as tg
    train_step, queued = tg.train_step, []

    def poisoned(model, micro_batches, optimizers, step, args, world_size, upcoming=None):
        queued.append(step)
        loss = train_step(model, micro_batches, optimizers, step, args, world_size, upcoming)
        return loss * float("nan") if step == 2 else loss
    monkeypatch.setattr(tg, "train_step", poisoned)
    assert tg.main(flags + ["--scheduled_steps", "6", "--extension_steps", "0"]) == 1
    (log,) = Path("logs").glob("*.txt")
    lines = read_log(log)
    assert lines[-1] == "error: training loss is nan at step 3; stopping"
    steps = [line.split()[0] for line in lines if line.startswith("step:") and " train_loss:" in line]
    assert steps == ["step:1/6", "step:2/6"] and max(queued) <= 3
