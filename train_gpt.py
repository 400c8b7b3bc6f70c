"""train_gpt.py: train a GPT to 3.28 cross-entropy on the FineWeb validation set, as fast as possible.

One file, read top to bottom: hyperparameters, model, optimizers, schedules, data, logging, training; the
kernels last.
    torchrun --standalone --nproc_per_node=8 train_gpt.py        the record run (defaults are its settings)
    python train_gpt.py --smoke                                    a tiny run on data/sample, on the CPU
Every hyperparameter is a flag (--help lists them): --scheduled_steps 187 --train_files "data/x_*.bin".
"""
import os
import sys
import time
from pathlib import Path

PROCESS_START = time.perf_counter()  # for the start-up time split in the log
# Importing Inductor sets TORCHINDUCTOR_CACHE_DIR to its default (/tmp/torchinductor_<user>): what the environment
# held before is the user's own choice, which load_compile_cache keeps (Inductor's with a folder per GPU inside);
# else it points the caches into the --compile_cache directory
GIVEN_CACHE_DIRS = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}

if __name__ == "__main__" and sys.dont_write_bytecode and sys.pycache_prefix is None:
    # Before torch is imported. Some machines install PyTorch without bytecode and set PYTHONDONTWRITEBYTECODE,
    # so every start compiled torch's sources again: on an H100 host, 4 s of `import torch` and 7 s of
    # building the model (the modules torch.compile imports). Bytecode is kept in .bytecode beside this file
    # instead, for this process and the ones it starts (helpers, compile workers).
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = str(Path(__file__).resolve().with_name(".bytecode"))
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import atexit
import bisect
import contextlib
import dataclasses
import fnmatch
import functools
import gc
import glob
import hashlib
import json
import logging
import math
import multiprocessing
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import types
import typing
import unicodedata
import uuid
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import numpy as np
import torch
import torch._functorch.config
import torch._inductor.config
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn
from tqdm import tqdm

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU builds of PyTorch come without Triton; only the FP8 head (Hopper) needs it
    triton = None

# ----------------------------------------------------------------------------------------------------
# Hyperparameters (defaults: the 8-GPU FineWeb record; the same global batch on any number of GPUs)


def flag(default, meaning):
    """A Hyperparameters field: its default, and its meaning, which --help prints."""
    return dataclasses.field(default=default, metadata={"help": meaning})


@dataclass
class Hyperparameters:
    # data
    train_files: str = flag("data/fineweb10B/fineweb_train_*.bin", "glob of the training shards")
    val_files: str = flag("data/fineweb10B/fineweb_val_*.bin", "glob of the validation shards")
    repeat_train_files: bool = flag(False, "cycle the train shards (small proxy corpora) instead of stopping")
    val_tokens: int = flag(10_485_760, "validation always reads exactly these, from the start of val_files")
    val_seq_tokens: int = flag(64 * 1024, "tokens per validation forward pass")
    batch_tokens: int = flag(8 * 48 * 1024, "tokens per optimizer step in the last stage, over all GPUs")
    micro_batch_tokens: int = flag(48 * 1024, "tokens per forward pass on one GPU in the last stage")
    prefix_table: str = flag("data/gpt2_prefix_tokens.npy", "each token's longest prefix token (the prefix loss)")
    merge_table: str = flag("data/gpt2_merges.npy", "GPT-2's merges: the final validation leaves out the next tokens "
                            "the tokenizer never emits after the previous one; '': it does not")
    # model
    vocab_size: int = flag(50304, "GPT-2's 50257 padded to a multiple of 128")
    ngram_rows: int = flag(377_280, "rows of the hashed n-gram embedding table: half for bigrams, half trigrams")
    layers: str = flag("LssLMSM-sMl", "the blocks, a letter each: L or S, attention with the long or the short window "
                       "and an MLP (l, s: its values take a value embedding); M, an MLP alone; -, neither")
    model_dim: int = flag(768, "width of the residual stream")
    head_dim: int = flag(128, "width of one attention head")
    # schedules (TRAINING_STAGES below; every schedule is a function of progress through scheduled_steps)
    scheduled_steps: int = flag(1270, "optimizer steps over which the stages and learning rates are scheduled")
    extension_steps: int = flag(15, "steps after those, at the final learning rate, with longer windows")
    cooldown_frac: float = flag(0.8, "learning rates fall linearly over this last fraction of the scheduled steps")
    final_lr_frac: float = flag(0.3, "learning rates at the end of the cool-down, as a fraction of the initial ones")
    momentum_warmup_frac: float = flag(0.236, "NorMuon's momentum climbs 0.85 -> 0.95 over this fraction of steps")
    momentum_cooldown_frac: float = flag(0.039, "and falls back to 0.85 over this fraction at the very end")
    untie_frac: float = flag(2 / 3, "the head's weight is also the embedding until this fraction of the steps")
    tail_frac: float = flag(0.25, "the weights' average (TailAverage) follows this last fraction of all the steps")
    tail_blend: float = flag(0.65, "the final weights move this share of the way to their average; 0: none")
    # optimizers (PARAMETER_TABLE below holds each parameter's multipliers)
    matrix_lr: float = flag(0.023, "NorMuon's learning rate, for the hidden matrices")
    matrix_wd: float = flag(1.2, "NorMuon's weight decay: each step decays by lr * matrix_wd * scheduled matrix_lr")
    adam_lr: float = flag(0.008, "Adam's learning rate, for embeddings, head and scalars")
    adam_wd: float = flag(0.005, "Adam's weight decay: each step decays by lr^2 * adam_wd")
    # run
    val_loss_every: int = flag(125, "validate every this many steps; 0: only at the start and the end")
    warmup_steps: int = flag(2, "untimed steps per CUDA graph key (compile, capture), their effect undone")
    compile_cache: str = flag(".compile_cache", "compiled kernels kept here for later runs; '' keeps none")
    seed: int = flag(0, "seed of the initial weights")
    smoke: bool = flag(False, "start from SMOKE_SETTINGS: a CPU-sized run on data/sample")


SMOKE_SETTINGS = dict(
    train_files="data/sample/sample_train_*.bin", val_files="data/sample/sample_val_*.bin",
    repeat_train_files=True, val_tokens=4096, val_seq_tokens=1024, batch_tokens=1536, micro_batch_tokens=768,
    layers="LlsM", ngram_rows=8192, model_dim=64, head_dim=32, scheduled_steps=24, extension_steps=2, val_loss_every=8,
    warmup_steps=0, merge_table="",
)
PATH_FIELDS = ("train_files", "val_files", "prefix_table", "merge_table")  # relative to this file's folder if not given


@dataclass(frozen=True)
class Stage:
    end: float  # the stage lasts until this fraction of scheduled_steps
    batch: Fraction  # its batch and micro-batch, as a fraction of batch_tokens and micro_batch_tokens
    max_seq_len: int  # longer documents are split into attention sequences this long
    windows: tuple  # sliding windows of the short- and the long-window layers, in WINDOW_BLOCKs
    lr_mul: float  # learning-rate multiplier (the cool-down leads from it to final_lr_frac)
    mtp: tuple  # multi-token prediction: per target (the next token, the one after, ...) its loss weight
    # at the stage's start and at its end, linear in between
    prefix: tuple = ()  # the prefix-token loss: its weight at the stage's start and end, as in mtp; (): none
    candidates: int = 0  # the training loss's softmax over this many vocabulary rows a micro-batch: every target
    # of the micro-batch and sampled others (choose_candidates); 0 or at least vocab_size: the whole vocabulary


# The public speedrun's staged schedule (record #89): small batches, short sequences and short windows first.
# The last row is the extension after scheduled_steps; the final validation sees longer windows still. The
# sampled softmax (record #92: 10,240 rows, then 14,336, then 24,576) gives way to the whole vocabulary for the
# last 6 % of the scheduled steps and the extension, #92's fractions of its run; the last stage is cut in three
# rows for it.
TRAINING_STAGES = (
    Stage(end=1 / 3, batch=Fraction(1, 3), max_seq_len=896, windows=(1, 3), lr_mul=1.0,
          mtp=((1, 1), (0.5, 0.5), (0.25, 0)), prefix=((0.25, 0.25),), candidates=10240),
    Stage(end=2 / 3, batch=Fraction(2, 3), max_seq_len=2048, windows=(3, 7), lr_mul=1.52, mtp=((1, 1), (0.5, 0)),
          prefix=((0.25, 0),), candidates=10240),
    Stage(end=0.822, batch=Fraction(1), max_seq_len=2048, windows=(5, 11), lr_mul=1.73, mtp=((1, 1),),
          candidates=14336),
    Stage(end=0.943, batch=Fraction(1), max_seq_len=2048, windows=(5, 11), lr_mul=1.73, mtp=((1, 1),),
          candidates=24576),
    Stage(end=1.0, batch=Fraction(1), max_seq_len=2048, windows=(5, 11), lr_mul=1.73, mtp=((1, 1),)),
    Stage(end=math.inf, batch=Fraction(1), max_seq_len=2048, windows=(6, 13), lr_mul=1.73, mtp=((1, 1),)),
)
FINAL_VALIDATION_WINDOWS = (6, 20)
WINDOW_BLOCK = 128  # tokens
NGRAM_SIGN_ROWS = 8192  # the n-gram table's sign patterns
SAVED_RESIDUAL_READERS = 3  # the last layers' attention reads the residual stream from before them (#73, #77)


class UserError(Exception):
    """A run that cannot go on for a reason its user can act on (a flag, a shard file, a size that does not fit,
    a log folder it cannot write, a loss that diverged): reported as one line "error: <flag or file>: <what is
    wrong and what to do>" on stderr and in the log, and exit status 1, no traceback."""


class Interrupted(Exception):
    """Ctrl-C during the run: reported as one line "interrupted at step N" (or "before training"), exit status
    130 as a shell gives a program it interrupts, no traceback."""

    def __init__(self, where):
        super().__init__(where)
        self.where = where


class ArgumentParser(argparse.ArgumentParser):
    """argparse, its errors raised as UserError ("argument --seed: invalid int value" becomes "--seed: ...")."""

    def error(self, message):
        raise UserError(f"{message.removeprefix('argument ')}; see --help")


def parse_args(argv):
    """A flag for every field of Hyperparameters; --smoke starts from SMOKE_SETTINGS, explicit flags win."""
    parser = ArgumentParser(prog="train_gpt.py", description=__doc__, argument_default=argparse.SUPPRESS,
                            allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Hyperparameters):
        text = f"{field.metadata['help']} (default: {field.default!r})".replace("%", "%%")
        if field.type is bool:
            parser.add_argument(f"--{field.name}", action=argparse.BooleanOptionalAction, help=text)
        else:
            parser.add_argument(f"--{field.name}", type=field.type, metavar=field.type.__name__.upper(), help=text)
    given, unknown = parser.parse_known_args(argv)
    if unknown:
        raise UserError(f"{unknown[0]}: unknown flag; see --help for the flags")
    given = vars(given)
    settings = {**(SMOKE_SETTINGS if given.get("smoke") else {})}
    for name in PATH_FIELDS:  # a path not given on the command line is the script's own, wherever it runs from
        default = settings.get(name, Hyperparameters.__dataclass_fields__[name].default)
        if default:
            settings[name] = str(Path(__file__).resolve().parent / default)
    args = Hyperparameters(**{**settings, **given})
    check_hyperparameters(args)
    return args


def check_hyperparameters(args):
    """Sizes and step counts that no run could use, refused before anything starts, naming the flag."""
    at_least = dict(scheduled_steps=1, extension_steps=0, val_tokens=1, val_seq_tokens=1, batch_tokens=1,
                    micro_batch_tokens=1, ngram_rows=4, model_dim=12, head_dim=4, val_loss_every=0, warmup_steps=0,
                    vocab_size=BOS + 1)
    for name, least in at_least.items():
        if getattr(args, name) < least:
            raise UserError(f"--{name}: {getattr(args, name)} is below its least value, {least}")
    for name in ("cooldown_frac", "final_lr_frac", "momentum_warmup_frac", "momentum_cooldown_frac", "untie_frac",
                 "tail_frac", "tail_blend"):
        if not 0 <= getattr(args, name) <= 1:
            raise UserError(f"--{name}: {getattr(args, name)} is not a fraction between 0 and 1")
    if len(args.layers) < 4 or set(args.layers) - set("LlSsM-") or not set(args.layers) & set("ls"):
        raise UserError(f"--layers: {args.layers!r} is not at least 4 of the letters L, l, S, s, M and -, with at "
                        f"least one l or s (the head reads the first value embedding)")
    if args.merge_table and args.vocab_size % 8:
        raise UserError(f"--vocab_size: {args.vocab_size} is no multiple of 8, which the validation mask's rows of "
                        f"bits need; pass --merge_table '' to validate without it")
    if args.model_dim % args.head_dim or args.head_dim % 4:
        raise UserError(f"--model_dim: {args.model_dim} must be a multiple of --head_dim {args.head_dim}, which "
                        f"must be a multiple of 4 (rotary turns a quarter of each head's dimension pairs)")


# ----------------------------------------------------------------------------------------------------
# Model: GPT-2-small with the speedrun's changes (rotary, QK-norm, ReLU², value embeddings, a skip connection,
# sliding windows over packed documents, soft-capped logits)


@functools.cache
def compiled(function, dynamic, fullgraph, /):
    """torch.compile(function), made once in a process for every caller (every block, every optimizer made):
    with Dynamo's cache on (compile_regions), each torch.compile of a function loads the frames saved for it,
    and a second load into the same globals failed ("Name '__builtins_dict___6' already exists in scope").
    PyTorch recovers from some saved frames that cannot be loaded (a changed source: its own warning, then a
    fresh trace), but not from others (frames traced while parameters had gradients raised a TypeError here),
    and a second torch.compile after such a failure fails on what the first left in the module: Dynamo's cache
    is deleted, so that the next start traces afresh (Inductor's cache is kept), and this one ends."""
    try:
        return torch.compile(function, dynamic=dynamic, fullgraph=fullgraph)
    except Exception as error:
        if not torch._dynamo.config.caching_precompile:
            raise
        shutil.rmtree(dynamo_frames(), ignore_errors=True)
        raise UserError(f"Dynamo's cache in {dynamo_frames()} held frames of {function.__qualname__} that "
                        f"could not be loaded ({error!r}); it is deleted: start again") from error


def rms_norm(x):
    return F.rms_norm(x, (x.size(-1),))


class CastedLinear(nn.Linear):
    """A linear layer with float32 master weights, multiplied in the activations' dtype (bf16 on GPU)."""

    def __init__(self, in_features, out_features, zero_init=False):
        super().__init__(in_features, out_features, bias=False)
        with torch.no_grad():
            if zero_init:  # the MLP's output projection and the gates start at zero
                self.weight.zero_()
            else:
                bound = 0.5 * 3**0.5 * in_features**-0.5
                self.weight.uniform_(-bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight.type_as(x))


class Gate(CastedLinear):
    """A gate's logits from a dozen channels, x @ weight.T, as a batched matmul over up to 64 chunks of the tokens:
    its weight's gradient, a sum over every token of a micro-batch into a few dozen numbers, is then a matmul per
    chunk, a block each, and a sum. As one matmul, cuBLAS split that sum across its workspace (32 to 171 ways),
    and without a workspace (init_process) it ran on a single block: 2.8 ms more a step (stage 0 at the 8-GPU
    per-rank shape, one H200, session 30). Summed in Inductor's code as products, those gradients took 2.5 ms.
    Compiled at static shapes only (math.gcd takes no symbolic size); a token count that is not a multiple of 64,
    which no training or validation shape has, is split into fewer chunks."""

    def forward(self, x):
        chunks = math.gcd(x.size(0), 64)
        weight = self.weight.type_as(x).t().expand(chunks, -1, -1)
        return torch.bmm(x.unflatten(0, (chunks, -1)), weight).flatten(0, 1)


class Rotary(nn.Module):
    """Rotary position embedding on half of each head's dimension pairs (the rest carry no position),
    shared by every layer, and the attention scale that goes with it.

    YaRN: whenever the long window grows from `old` to `new` tokens, each frequency that turns less than
    once over `old` tokens is slowed by old/new (it would otherwise meet positions it has never seen), one
    that turns 32 times or more is kept, and those between are blended; the attention logits grow by
    1 + 0.2 ln(new/old) to keep attention as sharp over more keys."""

    def __init__(self, head_dim, max_len):
        super().__init__()
        freqs = (1 / 1024) ** torch.linspace(0, 1, head_dim // 4)
        self.register_buffer("base_freqs", torch.cat([freqs, freqs.new_zeros(head_dim // 4)]), persistent=False)
        # the dimensions that carry no position: both halves of each pair whose frequency is zero
        self.register_buffer("stationary", torch.cat([self.base_freqs == 0] * 2), persistent=False)
        self.register_buffer("cos", torch.empty(max_len, head_dim // 2), persistent=False)
        self.register_buffer("sin", torch.empty(max_len, head_dim // 2), persistent=False)
        self.long_windows = None
        self.stretch((WINDOW_BLOCK,))

    @torch.no_grad()
    def stretch(self, long_windows):
        """Set the tables for a run whose long window has taken the values `long_windows` (tokens, in order)."""
        if long_windows == self.long_windows:
            return
        freqs, self.scale = self.base_freqs.clone(), 0.1
        for old, new in zip(long_windows, long_windows[1:]):
            turns = old * freqs / (2 * math.pi)
            kept = ((turns - 1) / 31).clamp(0, 1)
            freqs *= old / new + kept * (1 - old / new)
            self.scale *= 1 + 0.2 * math.log(new / old)
        angles = torch.outer(torch.arange(self.cos.size(0), dtype=torch.float32, device=freqs.device), freqs)
        self.cos.copy_(angles.cos())  # in place: compiled graphs keep reading the same buffers
        self.sin.copy_(angles.sin())
        self.freqs, self.long_windows = freqs, long_windows

    def forward(self, x):  # (tokens, heads, head_dim)
        cos, sin = self.cos[: x.size(0), None, :], self.sin[: x.size(0), None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, head_dim, rotary, fp8, key_offset=False, value_embed=False):
        super().__init__()
        self.num_heads, self.head_dim = dim // head_dim, head_dim
        self.key_offset, self.fp8 = key_offset, fp8
        bound = 0.5 * 3**0.5 * dim**-0.5
        self.qkv = nn.Parameter(torch.empty(3, dim, dim).uniform_(-bound, bound))  # NorMuon sees q, k, v apart
        self.rotary = rotary
        self.value_scale = nn.Parameter(torch.tensor(0.5))  # the own values' share
        # with a value embedding, how much of it each head takes: 2 sigmoid(.) of x[:6] and the embedding's [:6],
        # 1 at first (the public record's #55)
        self.value_gate = Gate(12, self.num_heads, zero_init=True) if value_embed else None
        self.gate = Gate(12, self.num_heads, zero_init=True)  # per-head output gate from x[:12]
        self.xsa = nn.Parameter(torch.zeros(self.num_heads))  # exclusive self-attention per head, tanh'd: 0 is off
        self.out = CastedLinear(dim, dim)  # not zero, as the public record's #64: attention learns from step 0

    def project(self, x, value_embed):
        """Queries, keys and values of the normalised input x: (tokens, heads, head_dim) each."""
        T, w = x.size(0), self.qkv.flatten(0, 1).type_as(x)
        fp8 = self.fp8 and torch.is_grad_enabled()  # validation in bf16, as the MLP's and the head's
        qkv = (NormedLinearFP8.apply(x, w) if fp8 else F.linear(x, w)).view(T, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.chunk(3, dim=1)
        q, k = self.rotary(rms_norm(q)), self.rotary(rms_norm(k))
        if self.key_offset:  # each key's position-free dimensions from the token before (public record #49)
            previous = torch.cat([k[:1], k[:-1]])
            k = torch.where(self.rotary.stationary, previous, k)
        v = self.value_scale * v
        if value_embed is not None:
            gate = 2 * torch.sigmoid(self.value_gate(torch.cat([x[:, :6], value_embed[:, :6]], dim=-1)))
            v = v + gate.unsqueeze(-1) * value_embed.view_as(v)
        return q, k, v

    def finish(self, x, y, v):
        """The gated, projected output, from the normalised input x, the attention output y and the values v.
        Exclusive self-attention (public record #82): each head's output loses tanh(xsa) of its component along
        the token's own value, which the residual stream carries already."""
        yf, vf = y.float(), v.float()
        along = (yf * vf).sum(-1, keepdim=True) / (vf * vf).sum(-1, keepdim=True).clamp_min(1e-8)
        y = (yf - torch.tanh(self.xsa).unsqueeze(-1) * along * vf).type_as(y)
        y = y * torch.sigmoid(self.gate(x[:, :12])).unsqueeze(-1)
        return self.out(y.flatten(1))


class MLP(nn.Module):
    def __init__(self, dim, fp8):
        super().__init__()
        self.fc = CastedLinear(dim, 4 * dim)
        self.proj = CastedLinear(4 * dim, dim, zero_init=True)
        self.fp8 = fp8

    def forward(self, x):
        fp8 = self.fp8 and torch.is_grad_enabled()  # validation in bf16, as the head's
        return ReluSquareMLP.apply(x, self.fc.weight.type_as(x), self.proj.weight.type_as(x), fp8)


class Block(nn.Module):
    """A transformer block. Its forward is split at the attention call: the parts on either side are what
    gets compiled, so that windows and sequence boundaries, which change from batch to batch, never enter
    a compiled graph and cause recompiles."""

    def __init__(self, dim, head_dim, rotary, fp8, attention=True, long_window=False, value_embed=False, mlp=True):
        super().__init__()
        self.residual_mix = nn.Parameter(torch.tensor([1.0, 0.0]))  # residual stream vs. the embedding x0
        self.attn = Attention(dim, head_dim, rotary, fp8, long_window, value_embed) if attention else None
        self.mlp = MLP(dim, fp8) if mlp else None

    def forward(self, x, x0, value_embed, skip, ngram, seqs, window, attend_from=None):
        """skip: None, or the skip connection into this layer as (activations, skip_lambda); ngram: None, or
        the n-gram embedding and its weight in this layer, added after attention; attend_from: None, or an
        earlier residual stream that attention reads instead of this layer's."""
        if self.attn is None:
            return self.mix_and_mlp(x, x0, skip)
        x, normed, q, k, v = self.before_attention(x, x0, value_embed, skip, attend_from)
        y = attention(q, k, v, seqs, window, self.attn.rotary.scale)
        return self.after_attention(x, normed, y, v, *(ngram or ()))

    def before_attention(self, x, x0, value_embed, skip, attend_from):
        x = self.mix(x, x0, skip)
        normed = rms_norm(x if attend_from is None else attend_from)
        return x, normed, *self.attn.project(normed, value_embed)

    def after_attention(self, x, normed, y, v, ngram=None, weight=None):
        x = x + self.attn.finish(normed, y, v)
        if ngram is not None:
            x = x + weight * ngram
        return self.add_mlp(x)

    def mix_and_mlp(self, x, x0, skip):
        return self.add_mlp(self.mix(x, x0, skip))

    def mix(self, x, x0, skip):
        if skip is not None:
            activations, skip_lambda = skip
            x = x + 0.5 * torch.sigmoid(skip_lambda) * activations
        return self.residual_mix[0] * x + self.residual_mix[1] * x0

    def add_mlp(self, x):
        return x if self.mlp is None else x + self.mlp(rms_norm(x))

    def compile(self):
        """Regional compilation: each part is one graph per batch shape, shared by every layer of the same
        structure. Static shapes: given a second shape, dynamo would otherwise switch to one graph with a
        symbolic token count, whose kernels cannot be specialised to any stage's shape."""
        for part in ("before_attention", "after_attention", "mix_and_mlp"):
            setattr(self, part, types.MethodType(compiled(getattr(Block, part), False, False), self))


def load_prefix_table(path, vocab_size):
    """The prefix-token loss's table (see Head; data/gpt2_prefix_table.py builds it from GPT-2's vocabulary),
    padded with -1 (no prefix) to vocab_size."""
    try:
        table = np.load(path)
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: cannot read the prefix table ({error}); pass --prefix_table, or build it with "
                        f"data/gpt2_prefix_table.py") from None
    if table.ndim != 1 or table.dtype != np.int32 or len(table) > vocab_size or not (
            -1 <= table.min() and table.max() < len(table)):
        raise UserError(f"{path}: not a prefix table (int32 token ids or -1, at most --vocab_size {vocab_size})")
    return torch.from_numpy(np.pad(table, (0, vocab_size - len(table)), constant_values=-1))


class DenseConnections(nn.Module):
    """The head's input plus per-token shares of earlier residual streams (MUDD, the public record's #81 after
    its layers): x + sum_i mu_i(x) source_i, mu = 0.1 (W2 gelu(W1 x) + b) from the residual x itself. W2 starts
    at zero, so the shares start at b's: -0.5 for the stream after layer 7, the public record's backout
    (#40), 0 for the others."""

    def __init__(self, dim, initial_shares, hidden=64):
        super().__init__()
        self.hidden = CastedLinear(dim, hidden)
        self.shares = CastedLinear(hidden, len(initial_shares), zero_init=True)
        self.bias = nn.Parameter(torch.tensor(initial_shares) / 0.1)

    def forward(self, x, sources):
        shares = 0.1 * (self.shares(F.gelu(self.hidden(x))) + self.bias.type_as(x))
        for i, source in enumerate(sources):
            x = x + shares[:, i : i + 1] * source
        return x


class Head(nn.Module):
    """Logits of the normalised input (after its DenseConnections to the sources given), soft-capped to
    (0, SOFTCAP), and the summed cross-entropy; FP8 matmuls on Hopper. Its weight starts small, not zero: it
    is also the embedding until the two are untied.

    In training, the gradient is that of a weighted sum of losses of the same logits: multi-token prediction
    (the public record's #53) scores them against the next token and the tokens 2, 3, ... places on,
    mtp_terms targets in all (they run on across documents; past the micro-batch's end there are none); with
    prefix_term, also against the next token's prefix token (#88: the token of the longest proper prefix of
    its bytes, from prefix_tokens; none for one-byte tokens). The step's weights are in loss_weights, in that
    order (GPT.prepare puts them there, on the device, so that CUDA graphs read them). The head is compiled:
    it takes the number of terms, never the weights, which would recompile it whenever one moved. The loss
    returned is the next-token term alone.

    Given candidates (the micro-batch's sampled softmax, #92), the softmax runs over those rows of the
    vocabulary alone: the logits, their loss kernels and the matmuls shrink to them, and only their rows of the
    weight get a gradient. They hold every target of the micro-batch, so every next and later token; a prefix
    token not among them is left out of the objective. No correction for the sampling: the loss is that of the
    rows kept. Validation always takes the whole vocabulary, less (if masked) the next tokens that never follow
    the previous one, in never_follows (#91; ValidationMask fills it before the final validation: zeros, which
    mask nothing, until then)."""

    def __init__(self, dim, vocab_size, fp8, prefix_tokens, initial_shares, masked):
        super().__init__()
        self.weight = nn.Parameter(0.005 * torch.randn(vocab_size, dim))
        self.dense = DenseConnections(dim, initial_shares)
        self.fp8 = fp8
        self.register_buffer("prefix_tokens", prefix_tokens.to(self.weight.device), persistent=False)
        most = max(len(stage.mtp) + len(stage.prefix) for stage in TRAINING_STAGES)
        self.register_buffer("loss_weights", torch.ones(most), persistent=False)
        never_follows = torch.zeros(vocab_size, vocab_size // 8, dtype=torch.uint8) if masked else None
        self.register_buffer("never_follows", never_follows, persistent=False)

    def forward(self, x, sources, targets, candidates, mtp_terms, prefix_term, previous):
        x = rms_norm(self.dense(x, sources))
        if torch.is_grad_enabled():
            weight = self.weight
            prefix = self.prefix_tokens[targets.long()] if prefix_term else None
            if candidates is not None:  # each token id becomes its row among the candidates, or -1
                weight = weight[candidates]
                targets = torch.searchsorted(candidates, targets, out_int32=True)
                if prefix is not None:
                    row = torch.searchsorted(candidates, prefix, out_int32=True).clamp(max=len(candidates) - 1)
                    prefix = torch.where(candidates[row] == prefix, row, -1)
            columns = [F.pad(targets[k:], (0, k), value=-1) for k in range(mtp_terms)]
            if prefix is not None:
                columns.append(prefix)
            weights = self.loss_weights[: len(columns)]
            return HeadLoss.apply(x, weight, torch.stack(columns, dim=1), weights, self.fp8)
        # validation: no gradient to compute, and no FP8: the loss of the logits as they are in bf16
        logits = softcap(F.linear(x, self.weight.type_as(x)).float())
        if self.never_follows is not None:
            bits = self.never_follows[previous.long()]
            shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
            never = ((bits.unsqueeze(-1) >> shifts) & 1).view(len(bits), -1).bool()
            logits = logits.masked_fill(never, -math.inf)
        return F.cross_entropy(logits, targets.long(), reduction="sum")


class NgramTable(nn.Module):
    """The hashed n-gram embedding (the public record's bigram table, #62 and #83, and #92's trigram half): a
    token's embedding is its bigram row of the table times a fixed random sign pattern, plus its trigram row
    times another, so that n-grams sharing a row share less of it. The loader hashes the tokens (hash_ngrams)
    and lists the step's distinct rows (gather_ngram_rows).

    The table is no parameter: a step reads a small part of its rows (at #92's size, a few hundred thousand of
    its 84.6 million), and only those may cost time. The step's rows are gathered into `cache` (once: the same
    rows for all of a step's micro-batches), a parameter of the step's size whose gradient is then that of those
    rows alone; RowAdam writes their update back into the table.

    With several ranks the table is sharded: row r lives on rank r % world_size, as its row r // world_size
    (a hash spreads a step's rows evenly over the ranks). A fetch asks each owner for the rows it holds and
    receives them (RowExchange), and keeps the exchange, by which RowAdam sends their gradients back. Every rank
    fetches as often as the others (once a step, once a validation batch: serve() where it has no batch).

    A training step fetches the next step's rows once RowAdam has updated the table (fetch_ahead, the rows from
    PrefetchLoader.upcoming). With several ranks the rows' values then travel while the matrices are stepped: NCCL
    runs the exchange on its own stream, and the next step's first fetch() makes the compute stream wait for it."""

    def __init__(self, rows, dim, capacity, world_size=1):
        super().__init__()
        self.rows, self.world_size = rows, world_size
        self.rank = dist.get_rank() if world_size > 1 else 0
        # the exchanges' sizes go between the hosts: over NCCL they would make each host wait for its GPU
        self.host_group = dist.new_group(backend="gloo") if world_size > 1 else None
        # made in bf16 on a GPU: as float32 first, a table of #92's size would not fit there
        dtype = torch.bfloat16 if torch.get_default_device().type == "cuda" else torch.float32
        shard = len(range(self.rank, rows, world_size))
        self.register_buffer("table", torch.zeros(shard, dim, dtype=dtype), persistent=False)  # no copy in states
        self.cache = nn.Parameter(torch.zeros(capacity, dim, dtype=dtype))
        signs = torch.randn(NGRAM_SIGN_ROWS, dim, generator=torch.Generator().manual_seed(NGRAM_SIGN_ROWS),
                            device="cpu")  # the same on every rank and device
        # bf16 holds +-1 exactly, and the product takes the table's dtype
        self.register_buffer("signs", signs.sign().to(self.table.device), persistent=False)
        self.fetched = None  # the rows in the cache
        self.exchange = None  # the last fetch's, with several ranks: RowExchange
        self.arriving = None  # a fetch ahead's exchange of values, still running (torch.distributed's Work)

    @torch.no_grad()
    def fetch(self, rows, owners, asked=None, ahead=False):
        """Gather `rows` of the table into the cache, unless they are there already (a step's next micro-batch,
        or fetched ahead); owners: how many of them each rank holds (they come grouped by rank:
        gather_ngram_rows); asked: with several ranks, the rows the ranks ask of this one (RowRequests), if
        exchanged already (a training batch's: TrainSource), else None (RowExchange exchanges them, and RowAdam
        cannot step on them). ahead: with several ranks, return while their values are on their way."""
        if self.arriving is not None:
            self.arriving.wait()  # on a GPU: the current stream waits for the exchange, not the host
            self.arriving = None
        if rows is self.fetched:
            return
        if self.world_size == 1:
            torch.index_select(self.table, 0, rows, out=self.cache.data[: len(rows)])
        else:
            self.exchange = RowExchange(rows, owners, asked, self.host_group)
            self.arriving = self.exchange.receive(self.table, out=self.cache.data[: len(rows)], async_op=ahead)
        self.fetched = rows

    def fetch_ahead(self, rows, owners, asked, copied):
        """Fetch the next step's rows (PrefetchLoader.upcoming), once the event `copied` says they are on the
        device (None: they are), so that its forward pass finds them in the cache."""
        if copied is not None:
            torch.cuda.current_stream().wait_event(copied)
        self.fetch(rows, owners, asked, ahead=True)

    def serve(self):
        """Take part in the other ranks' fetch while asking for no rows (validation: this rank's batches ran out)."""
        if self.world_size > 1:
            self.fetch(torch.empty(0, dtype=torch.int32, device=self.table.device), (0,) * self.world_size)

    def forward(self, batch):
        if batch.ngram_rows is not None:
            self.fetch(batch.ngram_rows, batch.ngram_owners, batch.ngram_asked)
        (bigrams,) = RowLookup.apply(batch.bigram_slots, batch.bigram_order, self.cache.dtype, self.cache)
        (trigrams,) = RowLookup.apply(batch.trigram_slots, batch.trigram_order, self.cache.dtype, self.cache)
        return bigrams * self.signs[batch.bigram_signs] + trigrams * self.signs[batch.trigram_signs]


class RowLookup(torch.autograd.Function):
    """Each table's rows for the ids (F.embedding) in `dtype`, whose backward adds each table's gradient straight
    into its .grad (add_row_sums), the ids in the sorted order the loader gave them (order: stable_order's), the
    same for all the tables: the embeddings' rows for the tokens, and the n-gram cache's for a micro-batch's
    slots. Sorted on the GPU, the three sorts of a micro-batch took about 0.1 ms of stage 0's step at the 8-GPU
    per-rank shape, and left about 60 us of gaps around their memsets (CUB's radix sort; 2 H200s, session 36's
    trace). For an embedding autograd's own would, for every table and
    micro-batch, sort the tokens, zero a gradient of the table's size (the vocabulary's), scatter the rows' sums
    into it and add it into .grad (and, for the head's weight while tied, add it to the head's own gradient first):
    about 0.2 ms a table at 16K tokens on an H200, the five embeddings' 4.5 % of stage 0's step at the 8-GPU
    per-rank shape; the n-gram cache's gradient went through index_add_, bf16 atomics, 0.11 ms a lookup (session
    31's trace). Autograd gets no gradient for the tables from here, but still runs each table's AccumulateGrad,
    and with it the post-accumulate hooks (GradientEvents'), after this backward and after every other reader's
    (the head's matmul, while tied), so that a hook sees the whole gradient."""

    @staticmethod
    def forward(ctx, ids, order, dtype, *tables):
        ctx.tables = tables
        ctx.save_for_backward(ids, order)
        ctx.set_materialize_grads(False)
        return tuple(F.embedding(ids, table).to(dtype) for table in tables)

    @staticmethod
    def backward(ctx, *grads):
        ids, order = ctx.saved_tensors
        sorted_ids = ids[order]
        for table, grad in zip(ctx.tables, grads):
            if grad is not None:
                if table.grad is None:
                    table.grad = torch.zeros_like(table)
                add_row_sums(table.grad, grad, sorted_ids, order)
        return (None,) * (3 + len(ctx.tables))


@dataclass
class RowRequests:
    """The rows of this rank's shard of the n-gram table that the ranks ask for in one fetch (RowExchange), by
    asking rank, as places in the shard. With a training batch they are exchanged between the hosts as it is
    built (exchange_row_requests), with what RowAdam needs to sum their gradients over the ranks: the distinct
    rows and each request's place among them."""
    counts: tuple  # how many rows each rank asks (on the host: the exchanges' splits)
    rows: torch.Tensor  # int32: the rows asked, rank by rank, each rank's in the order it asks
    distinct: Optional[torch.Tensor] = None  # int32: the rows asked, each once, ascending (None: not known)
    segments: Optional[torch.Tensor] = None  # int32: each asked row's place in distinct


class RowExchange:
    """One fetch of the sharded n-gram table's rows (NgramTable): each rank asks the owner of each row it needs
    (rank row % world_size) for it, and the owners send their rows' values; RowAdam later sends the rows'
    gradients back the same way. The rows come grouped by owner, so the exchanges (all_to_all, uneven splits)
    read and write them in place. `asked` holds the rows that the ranks ask of this one (RowRequests): with a
    training batch, where its builder exchanged them (TrainSource), else exchanged now (a validation batch's,
    whose gradients never come back): their number through host_group, as the exchanges' splits must be on the
    host (each rank's own come from the loader: gather_ngram_rows), and which they are over NCCL."""

    def __init__(self, rows, owners, asked, host_group):
        self.sent = list(owners)
        if asked is None:
            counts = exchange_row_counts(owners, host_group)
            asked = RowRequests(counts, rows.new_empty(sum(counts)))
            dist.all_to_all_single(asked.rows, rows // len(owners), list(counts), self.sent)
        self.asked, self.received = asked, list(asked.counts)

    def receive(self, table, out, async_op=False):
        """The rows asked for, from their owners' tables, into `out` in the order they were asked for; async_op:
        return the exchange's Work, still running."""
        return dist.all_to_all_single(out, table[self.asked.rows.long()], self.sent, self.received,
                                      async_op=async_op)

    def send_back(self, grad):
        """Start sending each row's gradient (grad, in the order the rows were asked for) to its owner; returns a
        function that, called once the exchange has run (on a GPU: any time, the stream waits), gives the local
        rows this rank was sent gradients for, distinct and sorted, and each one's gradient summed over the ranks
        (float32), in the order of the ranks."""
        asked = self.asked
        assert asked.distinct is not None, "the rows' gradients go back only where the requests came with the batch"
        incoming = grad.new_empty(len(asked.rows), grad.size(1))
        work = dist.all_to_all_single(incoming, grad.contiguous(), self.received, self.sent, async_op=True)

        def summed():
            work.wait()
            sums = torch.zeros(len(asked.distinct), grad.size(1), device=grad.device)
            return asked.distinct, sums.index_add_(0, asked.segments, incoming.float())

        return summed


def exchange_row_counts(owners, group):
    """How many n-gram rows each rank asks of this one, from how many this one asks of each (owners), exchanged
    between the hosts through `group`, a gloo group: over NCCL the exchange would make each host wait for its
    GPU. Every rank of the group must exchange as often, in the same order."""
    sent, received = torch.tensor(owners, dtype=torch.int64), torch.empty(len(owners), dtype=torch.int64)
    dist.all_to_all_single(received, sent, group=group)
    return tuple(received.tolist())


def exchange_row_requests(rows, owners, group, out=None):
    """The rows of this rank's shard that the ranks ask for (RowRequests, on the host), exchanged between the
    hosts through `group`, a gloo group, from this rank's rows (numpy, grouped by owner: gather_ngram_rows). On the
    host, and a step ahead in the loader's worker, the requests' sort (np.unique) costs the step nothing: on the
    GPU the sort (CUB's, with its memsets), the segments and two gathers took about 20 kernels and 0.15 ms at the
    end of every step (2 H200s, stage 0, session 33's trace). out: three int32 numpy arrays to hold the rows, the
    distinct rows and the segments, each as long as the rows may be (HostBuffers'); None: new ones. Every rank of
    the group must exchange as often, in the same order."""
    counts = exchange_row_counts(owners, group)
    asked, distinct, segments = out if out is not None else [np.empty(sum(counts), dtype=np.int32) for _ in range(3)]
    asked = torch.from_numpy(asked[: sum(counts)])
    dist.all_to_all_single(asked, torch.from_numpy(rows // len(owners)), list(counts), list(owners), group=group)
    unique, inverse = np.unique(asked.numpy(), return_inverse=True)
    distinct, segments = distinct[: len(unique)], segments[: len(inverse)]
    distinct[:], segments[:] = unique, inverse
    return RowRequests(counts, asked, torch.from_numpy(distinct), torch.from_numpy(segments))


def sum_of(tensors):
    """The sum of same-shaped tensors; compiled on a GPU (FanOut), one kernel that reads each tensor once and
    writes the sum once."""
    return functools.reduce(torch.add, tensors)


class FanOut(torch.autograd.Function):
    """t handed to n consumers as n aliases, whose gradients are summed in one pass when the last arrives. Given
    t itself, autograd adds each consumer's gradient as it arrives, pairwise: two reads and a write of t's size
    per consumer, where this reads each once. x0 has 12 consumers and the n-gram embedding 7: their 17 pairwise
    adds (of the 42 residual-sized ones, 3.1 ms, in a step at 49K tokens on an H100) become two sums."""

    @staticmethod
    def forward(ctx, t, n):
        return tuple(t.view_as(t) for _ in range(n))

    @staticmethod
    def backward(ctx, *grads):
        return (compiled(sum_of, False, True) if grads[0].is_cuda else sum_of)(grads), None


class GPT(nn.Module):
    def __init__(self, args: Hyperparameters, fp8, world_size=1):
        super().__init__()
        dim, L = args.model_dim, len(args.layers)
        self.rotary = Rotary(args.head_dim, max_len=max(args.micro_batch_tokens, args.val_seq_tokens))
        self.embed = nn.Embedding(args.vocab_size, dim)  # unused while tied: the head's weight stands in
        self.graphs = None  # on CUDA, build_model's MicroStepGraphs
        self.grad_events = None  # with several ranks, make_optimizers' GradientEvents
        self.smear_gate = Gate(12, 1, zero_init=True)  # how much of the previous token, from e[:12]
        self.smear_lambda = nn.Parameter(torch.zeros(()))  # zero: the smear starts as a no-op
        # a step's tokens read at most two rows each: the cache's room, at the largest batch of one rank
        capacity = 2 * max(args.batch_tokens // world_size, args.val_seq_tokens)
        self.ngram = NgramTable(args.ngram_rows, dim, capacity, world_size)
        # before layer 0; after attention in 1, 2, ... (the entries of layers without attention are unused)
        self.ngram_weights = nn.Parameter(torch.full((L,), 0.05))
        # value embeddings, one for each layer whose letter is l or s; small at first (0.01, not nn.Embedding's 1):
        # a token's value is not random noise before it is learnt
        self.value_layers = [i for i, letter in enumerate(args.layers) if letter in "ls"]
        self.value_embeds = nn.ModuleList(nn.Embedding(args.vocab_size, dim) for _ in self.value_layers)
        for table in self.value_embeds:
            nn.init.normal_(table.weight, std=0.01)
        self.long_layers = {i for i, letter in enumerate(args.layers) if letter in "Ll"}
        self.blocks = nn.ModuleList(Block(dim, args.head_dim, self.rotary, fp8, attention=letter in "LlSs",
                                          long_window=i in self.long_layers, value_embed=i in self.value_layers,
                                          mlp=letter != "-") for i, letter in enumerate(args.layers))
        # the layers that read the n-gram embedding after their attention: every attention layer but the first
        self.ngram_layers = [i for i, block in enumerate(self.blocks) if i > 0 and block.attn is not None]
        # one skip connection (the public record's #45): the output of layer L//3 joins the residual stream
        # entering layer L//2 + 1, weighted 0.5 sigmoid(skip_lambda), 0.09 at first
        self.skip_from, self.skip_to = L // 3, L // 2 + 1
        self.skip_lambda = nn.Parameter(torch.tensor(-1.5))
        # the head's dense connections read the stream entering layer 0, those after layers L//3, L-4 and L-2 (3, 7
        # and 9 of 11), and the first value embedding; the one after L-4, the saved residual, starts at -0.5 (backout)
        self.dense_layers = (L // 3, L - SAVED_RESIDUAL_READERS - 1, L - 2)
        self.head = Head(dim, args.vocab_size, fp8, load_prefix_table(args.prefix_table, args.vocab_size),
                         initial_shares=[0.0, 0.0, -0.5, 0.0, 0.0], masked=bool(args.merge_table))

    def layer_windows(self, windows):
        """Each layer's window; windows: (short, long) in tokens."""
        short, long = windows
        return [long if i in self.long_layers else short for i in range(len(self.blocks))]

    def smear(self, e):
        """Each token's embedding plus a gated share of the previous token's (the public record's #34): a
        one-token look-back before any attention. It crosses document starts, as the record's does."""
        share = self.smear_lambda * torch.sigmoid(self.smear_gate(e[:, :12])[1:])  # all tokens: Gate's chunks divide
        return torch.cat([e[:1], e[1:] + share * e[:-1]])

    @torch.no_grad()
    def prepare(self, state):
        """Put a step's state where the CUDA graphs read it, on the device, before its micro-batches: rotary's
        stretch and the loss weights. A fill, not a copy from the host: a copy would wait for the GPU."""
        self.rotary.stretch(state.yarn)
        for k, weight in enumerate(state.mtp + state.prefix):
            self.head.loss_weights[k].fill_(weight)

    def forward(self, batch, state):
        """Summed cross-entropy of one packed micro-batch (a MicroBatch) in a step's StepState, which prepare()
        has given the device."""
        L, inputs = len(self.blocks), batch.inputs
        embed = self.head.weight if state.tied else self.embed.weight
        *values, e = RowLookup.apply(inputs, batch.input_order, self.embed.weight.dtype,  # bf16 activations on GPU
                                       *(table.weight for table in self.value_embeds), embed)
        value_embeds = [None] * L
        for layer, layer_values in zip(self.value_layers, values):
            value_embeds[layer] = layer_values
        # x0 enters every layer, the n-gram embedding layer 0 and the ngram_layers (FanOut)
        x0, *layer_x0 = FanOut.apply(rms_norm(self.smear(e)), 1 + L)
        ngram, *layer_ngrams = FanOut.apply(self.ngram(batch), 1 + len(self.ngram_layers))
        layer_ngrams = dict(zip(self.ngram_layers, layer_ngrams))
        x = x0 + self.ngram_weights[0] * ngram
        entering, saved = x, L - SAVED_RESIDUAL_READERS - 1
        outputs = {}  # of the layers read later: the skip's source, the saved residual, the head's sources
        for i, (block, window) in enumerate(zip(self.blocks, self.layer_windows(state.windows))):
            skip = (outputs[self.skip_from], self.skip_lambda) if i == self.skip_to else None
            layer_ngram = (layer_ngrams[i], self.ngram_weights[i]) if i in layer_ngrams else None
            x = block(x, layer_x0[i], value_embeds[i], skip, layer_ngram, batch.seqs, window, outputs.get(saved))
            if i in (self.skip_from, saved, *self.dense_layers):
                outputs[i] = x
        sources = [entering, *(outputs[i] for i in self.dense_layers), value_embeds[self.value_layers[0]]]
        return self.head(x, sources, batch.targets, batch.candidates, len(state.mtp), bool(state.prefix), inputs)


# ----------------------------------------------------------------------------------------------------
# Optimizers: NorMuon for the hidden matrices, Adam for embeddings, head and scalars; one table says which
# parameter gets which, with its multipliers


@dataclass(frozen=True)
class ParamConfig:
    optimizer: str  # "normuon", "adam", or "rows" (RowAdam, the n-gram table's)
    lr_mul: float = 1.0  # times matrix_lr or adam_lr
    wd_mul: float = 1.0  # times matrix_wd or adam_wd
    betas: tuple = (0.9, 0.99)  # Adam's
    late: bool = False  # Adam's: joins at the untie (Adam.untie), until then no state and no step
    averaged: bool = False  # the final weights move towards their average over the run's tail (TailAverage)


# Each parameter takes the first row whose pattern (fnmatch) matches its name. NorMuon scales a matrix's
# learning rate by sqrt(max(1, rows / cols)) besides: 2 for the MLP's fc, whose proj gets 4 through lr_mul.
PARAMETER_TABLE = (
    ("blocks.*.mlp.proj.weight", ParamConfig("normuon", lr_mul=4.0, averaged=True)),
    ("blocks.*.attn.value_gate.weight", ParamConfig("adam")),
    ("blocks.*.weight", ParamConfig("normuon", averaged=True)),
    ("blocks.*.attn.qkv", ParamConfig("normuon", averaged=True)),
    ("head.weight", ParamConfig("adam", wd_mul=150.0, betas=(0.5, 0.95), averaged=True)),
    ("embed.weight", ParamConfig("adam", wd_mul=150.0, betas=(0.5, 0.95), late=True, averaged=True)),
    ("value_embeds.*", ParamConfig("adam", lr_mul=75.0, wd_mul=5.0, betas=(0.75, 0.95))),
    ("ngram.cache", ParamConfig("rows", lr_mul=70.0, wd_mul=5.0, betas=(0.0, 0.95))),
    ("smear_gate.weight", ParamConfig("adam", lr_mul=0.01, wd_mul=0.0)),
    ("head.dense.bias", ParamConfig("adam", lr_mul=0.25, wd_mul=0.0)),
    ("head.dense.*", ParamConfig("adam", lr_mul=0.25)),
    ("*", ParamConfig("adam", lr_mul=5.0, wd_mul=0.0)),  # scalars: mixing weights, the skip's lambda
)


def param_config(name):
    return next(config for pattern, config in PARAMETER_TABLE if fnmatch.fnmatchcase(name, pattern))


REDUCTION_PARTS = 2  # with several ranks NorMuon reduces each group's gradients in this many parts
ADAM_SHARD_MIN = 2**16  # with several ranks Adam shards the parameters of at least this many elements


def schedule_on_device(scheduled, values):
    """scheduled (the device tensor that an optimizer's CUDA graphs read) <- values (rows of floats) without the
    host waiting for the GPU: copied from pinned memory, which the host allocator keeps until the copy is done."""
    values = torch.tensor(values, dtype=torch.float32)
    scheduled.copy_(values.pin_memory() if scheduled.is_cuda else values, non_blocking=True)


def zero_state(optimizer):
    """An optimizer's state as it starts, zeroed in place: its CUDA graphs read it where it is."""
    for state in optimizer.state.values():
        for moment in state.values():
            moment.zero_()


def on_gpu_compiled(function, cuda, dynamic=True):
    """An optimizer's arithmetic as its step calls it: compiled on a GPU, whole (fullgraph), so that its
    elementwise work runs as few passes over memory, at dynamic shapes (a graph serves every size a run gives
    it) unless dynamic=False (a graph for each shape); run as written on the CPU. A dynamic graph's kernels are
    generated and tuned for the size of the call that compiled it, in whichever process did (the compile cache's
    keys leave sizes out), and serve every other size so: dynamic only where sizes change from step to step
    (RowAdam's rows) or where a graph's sizes are alike (Adam's: a graph for each group, as its betas are
    compiled in; docs/performance.md, candidate 7)."""
    return compiled(function, dynamic, True) if cuda else function


class NorMuon(torch.optim.Optimizer):
    """Nesterov momentum, orthogonalised (Polar Express), normalised per neuron (NorMuon), with cautious
    weight decay: p <- p - lr * X - lr * wd * p, the decay only where X and p have the same sign (where
    the update shrinks p too). The decay per step is lr * wd_mul * matrix_wd * scheduled matrix lr, so it
    falls with the square of the learning-rate schedule.

    Matrices of one shape and one config form a group. With several ranks a group is cut into
    REDUCTION_PARTS parts, the last layers' matrices first, as the backward pass finishes them first. A
    part's gradients are reduce-scattered (summed) so that each rank holds a contiguous share of its
    matrices; the rank keeps the momentum and second moments of its share and computes its updates, which
    are all-gathered. One part's communication overlaps the next part's arithmetic, and the first parts'
    reductions overlap the end of the backward pass (start_reductions). On a GPU a part's arithmetic, and
    its application to the matrices, are each replayed as a CUDA graph (OptimizerGraphs).

    Group keys: lr (the scheduled base rate, set every step), momentum (likewise), lr_mul, wd (matrix_wd
    times wd_mul)."""

    def __init__(self, named_params, lr, wd, world_size=1):
        groups = {}
        for name, p in named_params:
            config = param_config(name)
            key = (tuple(p.shape), config.lr_mul, config.wd_mul)
            groups.setdefault(key, dict(params=[], lr_mul=config.lr_mul, wd=wd * config.wd_mul))["params"].append(p)
        # foreach: zero_grad zeroes the gradients in a few launches, not one per matrix (back-to-back fills with
        # gaps between them, 0.15 ms of a 30 ms step at the 8-GPU per-rank shapes on 2 H100s, session 14)
        super().__init__(list(groups.values()), dict(lr=lr, momentum=0.95, foreach=True))
        self.world_size = world_size
        self.parts = []  # (its group's index, its matrices) in the order step() works on them
        for g, group in enumerate(self.param_groups):
            matrices = group["params"][::-1]
            per_rank = -(-len(matrices) // (REDUCTION_PARTS * world_size))  # a rank's matrices in a part
            size = len(matrices) if world_size == 1 else per_rank * world_size  # one rank: one part
            self.parts += [(g, matrices[i : i + size]) for i in range(0, len(matrices), size)]
        self.reduced = {}  # while gradients are being summed: {part's index: its work}
        self.updates = []  # between start_step and finish_step: (part's index, its updates, their all-gather or None)
        # Where the captured arithmetic reads: each part's (share of the) summed gradients, its all-gathered
        # updates, and the scheduled values of each group, [momentum, lr, decay], filled before each step.
        first = self.param_groups[0]["params"][0]
        self.shares = [ms[0].new_empty(-(-len(ms) // world_size), *ms[0].shape) for _, ms in self.parts]
        # with several ranks, each part's gradients stacked for the reduce-scatter, padded with zero matrices to
        # a multiple of the ranks (the padding is never written); its updates all-gathered
        self.stacked = [share.new_zeros(world_size * len(share), *share.shape[1:])
                        for share in self.shares] if world_size > 1 else None
        self.gathered = [share.new_empty(world_size * len(share), *share.shape[1:], dtype=torch.bfloat16)
                         for share in self.shares] if world_size > 1 else None
        self.scheduled = first.new_zeros(len(self.param_groups), 3, dtype=torch.float32)
        self.update = on_gpu_compiled(normuon_update, first.is_cuda, dynamic=False)
        self.apply = on_gpu_compiled(normuon_apply, first.is_cuda, dynamic=False)
        self.graphs = OptimizerGraphs(first.is_cuda)

    def reset(self):
        """As new: the momenta and second moments zeroed in place, so the graphs stay valid."""
        zero_state(self)

    def reduction_groups(self):
        """The parameters whose gradients each reduction sums (GradientEvents' groups)."""
        return [matrices for _, matrices in self.parts]

    def reductions(self):
        """This step's gradient reductions: (the parameters each waits for, a function that starts it)."""
        return [(matrices, functools.partial(self.reduce, i)) for i, (_, matrices) in enumerate(self.parts)]

    def reduce(self, i):
        matrices, share = self.parts[i][1], self.shares[i]
        stacked = share if self.world_size == 1 else self.stacked[i]
        torch.stack([p.grad for p in matrices], out=stacked[: len(matrices)])
        self.reduced[i] = None if self.world_size == 1 else dist.reduce_scatter_tensor(share, stacked, async_op=True)

    def step(self):
        self.start_step()
        self.finish_step()

    @torch.no_grad()
    def start_step(self):
        """Queue the parts' updates, in the order their reductions were started (the order the backward pass
        finished their gradients), each as soon as its gradients are summed; with several ranks each part's
        all-gather starts behind its update."""
        if not self.reduced:
            start_reductions([self])
        values = []
        for group in self.param_groups:
            rows, cols = group["params"][0].shape[-2:]
            lr = group["lr"] * group["lr_mul"] * max(1, rows / cols) ** 0.5
            values.append([group["momentum"], lr, lr * group["wd"] * group["lr"]])
        schedule_on_device(self.scheduled, values)
        self.updates, reduced, self.reduced = [], self.reduced, {}
        for i, work in reduced.items():
            if work is not None:
                work.wait()
            update = self.graphs(("update", i), self.part_update, i)
            if self.world_size > 1:
                work = dist.all_gather_into_tensor(self.gathered[i], update, async_op=True)
                self.updates.append((i, self.gathered[i], work))
            else:
                self.updates.append((i, update, None))

    @torch.no_grad()
    def finish_step(self):
        """Step the matrices by their updates (start_step's)."""
        for i, update, work in self.updates:
            if work is not None:
                work.wait()
            self.graphs(("apply", i), self.apply_update, i, update)
        self.updates = []

    def part_update(self, i):
        """Part i's updates, in bf16, from its summed gradients (self.shares[i], overwritten)."""
        g, matrices = self.parts[i]
        grad, state = self.shares[i], self.state[matrices[0]]
        if not state:
            rows, cols = grad.shape[-2:]
            neurons = (*grad.shape[:-1], 1) if rows >= cols else (*grad.shape[:-2], 1, cols)
            state["momentum_buffer"] = torch.zeros_like(grad)
            state["second_moment"] = grad.new_zeros(neurons, dtype=torch.float32)
        return self.update(grad, state["momentum_buffer"], state["second_moment"], self.scheduled[g, 0])

    def apply_update(self, i, updates):
        """Part i's matrices, each stepped in place by its update (the first rows of `updates`)."""
        g, matrices = self.parts[i]
        lr, decay = self.scheduled[g, 1], self.scheduled[g, 2]
        for matrix, update in zip(matrices, updates):  # detached: a Parameter's shape is static, a graph each
            self.apply(matrix.detach(), update, lr, decay)


def normuon_update(grad, momentum_buffer, second_moment, momentum):
    """A part's updates, in bf16, from its summed gradients (grad, overwritten), its momentum buffer and its
    neurons' second moments (both updated in place): Nesterov momentum, Polar Express, NorMuon's normalisation;
    momentum is a 0-d device tensor. Compiled on the GPU at static shapes, a graph for each shape of share, so
    that the elementwise work around the matmuls fuses: run as written, a step's ten parts ran 336 kernels
    besides their matmuls, 1.7 ms of a 24.9 ms step on 2 H200s (stage 0 at the 8-GPU per-rank shape, session
    21). At dynamic shapes one graph served every wide matrix, and Inductor split its norms for the first shape
    it compiled, the 6 x 12 gates': about 100 ms a step on 2 H100s (session 16)."""
    momentum_buffer.lerp_(grad, 1 - momentum)
    update = orthogonalize(grad.lerp_(momentum_buffer, momentum))  # Nesterov momentum
    update = normalize_neurons(update, second_moment)
    # contiguous for the all-gather (NCCL refuses anything else): a tall matrix's comes transposed
    return update.to(torch.bfloat16, memory_format=torch.contiguous_format)


def normuon_apply(weights, update, lr, decay):
    """A matrix stepped by its update, in place: weights - lr * update - decay * weights, the decay only where the
    update and the weights have the same sign, in float32. Compiled on the GPU into one pass over memory, a graph
    for each shape (five): at dynamic shapes the MLP's matrices ran in a kernel generated for the sizes of the
    graph's first call (a small matrix's), 128 elements a block at about 1.9 TB/s (session 35). Run as written, on
    the part's matrices stacked and copied back, it took about 1.5 ms of a 162 ms step on an H100 (stage 0 at the
    proxy's batch), and as much on each of two: every rank applies every matrix's update."""
    update = update.float()
    weights.copy_(weights * (1 - decay * (update * weights >= 0)) - lr * update)


class OptimizerGraphs:
    """An optimizer's arithmetic replayed as CUDA graphs, one per key: at the 8-GPU per-rank shapes the host
    took longer to queue the optimizers' kernels than the GPU to run them (profiled on 2 H100s, stage 0:
    NorMuon 15.5 ms of host time a step for 6.2 ms of GPU work, Adam 22-26 ms on its steps). A key's first
    call runs as written (it creates the optimizer's state), its second is captured, and later calls replay
    that capture and return the same output tensor. So the work must read and write tensors that stay where
    they are (the parameters, their gradients, the optimizer's state and buffers), take the scheduled values
    from device tensors, not floats (a float would be baked into the graph), and be called with the same
    tensors every time, or under another key. On the CPU it always runs as written. Collectives stay
    outside, between the graphs."""

    def __init__(self, cuda):
        self.cuda, self.graphs, self.seen = cuda, {}, set()
        self.pool = torch.cuda.graph_pool_handle() if cuda else None

    def __call__(self, key, work, *args):
        if not self.cuda or key not in self.seen:
            self.seen.add(key)
            return work(*args)
        if key not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            # thread_local: the loader's worker thread goes on with its own CUDA calls during the capture
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = work(*args)
            self.graphs[key] = graph, out
        graph, out = self.graphs[key]
        graph.replay()
        return out


def adam_update(weights, grad, exp_avg, exp_avg_sq, beta1, beta2, step_size, decay, eps):
    """Adam's step on a flat slice of a parameter, in place: the moments, then weights - u - decay * weights
    where u and the weights have the same sign, u = step_size * m / (sqrt(v) + eps), in float32 and rounded
    once. Compiled on the GPU into one pass over memory: as a chain of foreach operations, each a pass of its
    own, it took 11.6 ms of a 92 ms step on an H100 (stage 5 at 49K tokens, one GPU)."""
    grad = grad.float()
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    update = exp_avg / (exp_avg_sq.sqrt() + eps) * step_size
    w = weights.float()
    weights.copy_(w - decay * w * (update * w > 0) - update)


class Adam(torch.optim.Optimizer):
    """Adam with cautious weight decay: p <- p - u - lr^2 * wd * p, the decay only where u and p have the
    same sign, lr being the group's effective rate (scheduled base rate times lr_mul).

    With several ranks each large parameter (ADAM_SHARD_MIN elements or more, in as many equal slices as
    there are ranks: the embeddings and the head) is sharded: its gradient is reduce-scattered (summed) so
    that each rank holds a contiguous slice of its elements, the rank keeps the moments of that slice and
    updates it in place, and the parameter is all-gathered in place, each one as soon as its slice is
    updated. The small ones (36 of the model's 42, 50K elements in all) are summed in one all-reduce and each
    rank updates them whole: two collectives each cost the host more than their arithmetic. On a GPU the
    updates are replayed as CUDA graphs (OptimizerGraphs), the collectives between the graphs: each large
    parameter's alone, a group's small ones together.

    Group keys: lr (the scheduled base rate, set every step), lr_mul, wd (adam_wd times wd_mul), betas.
    A group's step count is the group's: a parameter that joins late (the embedding when it is untied
    from the head, in the head's group) takes over the moments of the one it was tied to, and the count."""

    def __init__(self, named_params, lr, wd, world_size=1, eps=1e-10):
        groups, self.late = {}, None
        for name, p in named_params:
            config = param_config(name)
            if config.late:
                self.late = p
                continue
            key = (config.lr_mul, config.wd_mul, config.betas)
            group = groups.setdefault(key, dict(params=[], lr_mul=config.lr_mul, wd=wd * config.wd_mul,
                                                betas=config.betas, steps=0))
            group["params"].append(p)
        super().__init__(list(groups.values()), dict(lr=lr, eps=eps, foreach=True))  # foreach: as NorMuon's
        self.world_size, self.rank = world_size, dist.get_rank() if world_size > 1 else 0
        self.reduced = {}  # while gradients are being summed: {parameter: (its summed gradient or share, work)}
        self.gathers = []  # between start_step and finish_step: the large parameters' all-gathers
        # the small parameters' gradients, summed in place in one buffer: {parameter: its view of the buffer}
        small = [p for g in self.param_groups for p in g["params"] if not self.sharded(p)] if world_size > 1 else []
        assert self.late is None or self.sharded(self.late) or world_size == 1  # it cannot join the buffer late
        self.small_grads = torch.zeros(sum(p.numel() for p in small), device=small[0].device) if small else None
        self.small = dict(zip(small, self.small_grads.split([p.numel() for p in small]))) if small else {}
        # Where the captured arithmetic reads and writes: the large parameters' gradient shares and their slices
        # (views of the parameters), and each group's [step size, decay], filled before each step.
        large = [p for g in self.param_groups for p in g["params"] + [self.late] if p is not None and self.sharded(p)]
        self.shares = {p: torch.empty_like(self.slice(p)) for p in large}
        first = self.param_groups[0]["params"][0]
        self.scheduled = first.new_zeros(len(self.param_groups), 2, dtype=torch.float32)
        self.joined = None  # after the untie: (its group, the late parameter), for reset
        # one graph per parameter dtype, of any size; the step size and decay are tensors, read when it runs
        self.update = on_gpu_compiled(adam_update, first.is_cuda)
        self.graphs = OptimizerGraphs(first.is_cuda)

    def reset(self):
        """As new, in place, so that the CUDA graphs stay valid: the moments zeroed where they are, the step
        counts 0, and the late parameter out of its group again (untie will overwrite its moments)."""
        zero_state(self)
        for group in self.param_groups:
            group["steps"] = 0
        if self.joined is not None:
            group, late = self.joined
            removed = group["params"].pop()  # untie appended it last
            assert removed is late
            self.late, self.joined = late, None

    def sharded(self, p):
        """Whether p is sharded: large, and in equal slices, so that the all-gather writes into p itself (a
        parameter that does not divide is summed and updated whole, as the small ones are)."""
        return self.world_size > 1 and p.numel() >= ADAM_SHARD_MIN and p.numel() % self.world_size == 0

    def slice(self, p):
        """The elements of p, flattened, that this rank updates: a view of p."""
        if not self.sharded(p):
            return p.view(-1)
        size = p.numel() // self.world_size
        return p.view(-1)[self.rank * size: (self.rank + 1) * size]

    def reduction_groups(self):
        """The parameters whose gradients each reduction may sum, with gradients or not yet (GradientEvents'
        groups): each large one alone, the small ones together."""
        params = [p for g in self.param_groups for p in g["params"]] + ([self.late] if self.late is not None else [])
        return [[p] for p in params if p not in self.small] + ([list(self.small)] if self.small else [])

    def reductions(self):
        """This step's gradient reductions: (the parameters each waits for, a function that starts it)."""
        with_grads = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        small = [p for p in with_grads if p in self.small]
        return ([([p], functools.partial(self.reduce, p)) for p in with_grads if p not in self.small]
                + ([(small, functools.partial(self.reduce_small, small))] if small else []))

    def reduce_small(self, params):
        """The small parameters' gradients summed in one all-reduce. A parameter with no gradient yet (on any
        rank: they run the same model) keeps the zeros the buffer started with, and Adam's step on zeros from
        zero moments leaves it unchanged."""
        torch._foreach_copy_([self.small[p] for p in params], [p.grad.view(-1) for p in params])
        work = dist.all_reduce(self.small_grads, async_op=True)
        for i, (p, view) in enumerate(self.small.items()):  # step() meets them in this order: waits at the first
            self.reduced[p] = (view, work if i == 0 else None)

    def reduce(self, p):
        if self.world_size == 1:
            self.reduced[p] = (p.grad.view(-1), None)
            return
        self.reduced[p] = (self.shares[p], dist.reduce_scatter_tensor(self.shares[p], p.grad.view(-1), async_op=True))

    def step(self):
        self.start_step()
        self.finish_step()

    @torch.no_grad()
    def start_step(self):
        """Queue the groups' updates, each as soon as its gradients are summed; with several ranks each large
        parameter's all-gather starts behind its own update: behind its group's, the first of stage 0's on 2
        H200s waited for all four value embeddings' updates, 0.4 ms, and the last ended the step with 0.13 ms
        exposed (session 36's trace)."""
        if not self.reduced:
            start_reductions([self])
        steps, values = [], []
        for g, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p in self.reduced]
            step_size = decay = 0.0
            if params:
                group["steps"] += 1
                (beta1, beta2), t = group["betas"], group["steps"]
                lr = group["lr"] * group["lr_mul"]
                step_size, decay = lr * (1 - beta2**t) ** 0.5 / (1 - beta1**t), lr * lr * group["wd"]
                steps.append((g, params))
            values.append([step_size, decay])
        schedule_on_device(self.scheduled, values)
        self.gathers = []
        for g, params in steps:
            large = [p for p in params if self.sharded(p)]
            for updated in [[p] for p in large] + [[p for p in params if not self.sharded(p)]]:
                if not updated:
                    continue
                grads = []
                for p in updated:  # their reductions; the later ones go on meanwhile
                    grad, work = self.reduced.pop(p)
                    if work is not None:
                        work.wait()
                    grads.append(grad)
                # the graph reads the gradients where they were at its capture: a gradient elsewhere, another graph
                key = (g, tuple(grad.data_ptr() for grad in grads))
                self.graphs(key, self.group_update, g, updated, grads)
                self.gathers += [dist.all_gather_into_tensor(p.view(-1), self.slice(p), async_op=True)
                                 for p in updated if self.sharded(p)]

    @torch.no_grad()
    def finish_step(self):
        """With several ranks: wait for the large parameters' all-gathers (start_step's)."""
        for work in self.gathers:
            work.wait()
        self.gathers = []

    def group_update(self, g, params, grads):
        """Group g's step on `params` (their summed gradients or shares: `grads`), each on its slice, in place."""
        group = self.param_groups[g]
        step_size, decay = self.scheduled[g, 0], self.scheduled[g, 1]
        for p, grad in zip(params, grads):
            state = self.state[p]
            if not state:
                state.update(exp_avg=torch.zeros_like(grad, dtype=torch.float32),
                             exp_avg_sq=torch.zeros_like(grad, dtype=torch.float32))
            self.update(self.slice(p), grad, state["exp_avg"], state["exp_avg_sq"], *group["betas"], step_size,
                        decay, group["eps"])

    def untie(self, tied):
        """The late parameter joins `tied`'s group where `tied` is: same values, a copy of its moments, and the
        group's step count."""
        untied = self.late
        (group,) = (g for g in self.param_groups if any(p is tied for p in g["params"]))
        group["params"].append(untied)
        self.late, self.joined = None, (group, untied)
        with torch.no_grad():
            untied.copy_(tied)
            state = self.state[untied]
            if state:  # a reset Adam's, where its graphs read them
                for name, moment in self.state[tied].items():
                    state[name].copy_(moment)
            else:
                state.update({name: moment.clone() for name, moment in self.state[tied].items()})


def row_adam_update(table, rows, grad, second_moment, last_step, log_decay, scheduled, beta2, eps):
    """RowAdam's arithmetic on a step's rows (int64) and their gradients: the rows' new values, in the table's
    dtype, and their second moments. A row's weights first decay as they would have over the steps it was not
    read (log_decay: that sum before each step). scheduled: [the step, lr times Adam's bias correction, the
    decay], floats on the device, so that one compiled graph serves every step. Compiled on the
    GPU into one pass over the rows: as a chain of operations, each a pass of its own over (rows, dim) in
    float32, it took 7.6 ms of a 560 ms step on one H100 (stage 5, the proxy's batch; session 14)."""
    step, step_size, decay = scheduled.unbind()
    last = last_step[rows]
    now = log_decay.index_select(0, step.long().view(1))  # the step's own
    weights = table[rows].float() * torch.exp(now - log_decay[last + 1]).float().unsqueeze(1)
    grad = grad.float()
    moment = second_moment[rows] * beta2 ** (step - last.float()) + (1 - beta2) * grad.square().mean(1)
    update = grad * step_size / (moment.sqrt() + eps).unsqueeze(1)
    weights = weights * (1 - decay * (update * weights > 0)) - update
    return weights.to(table.dtype), moment


class RowAdam(torch.optim.Optimizer):
    """The n-gram table's optimizer (record #92's): Adam without momentum (beta1 = 0) and one second moment per
    row, the mean square of the row's gradient, with Adam's cautious decay. It steps every step, on the rows the
    step read (NgramTable's cache and the step's ngram_rows), and writes them back into the table.

    A row the step did not read would only have decayed, and its second moment with it: that is replayed when
    it is next read, from the sum of log(1 - decay) over the steps (log_decay) and the step it was last read
    (last_step). Cautious decay needs an update to compare with, so these steps' decay is plain.

    With several ranks each rank updates the rows of its shard of the table that any rank read: the fetch's
    RowExchange sends each row's gradient to its owner, which sums them over the ranks, each row once (the rows
    and their order among the requests come with the batch: RowRequests).

    Group keys: lr (the scheduled base rate, set every step), lr_mul, wd (adam_wd times wd_mul), beta2."""

    def __init__(self, ngram, config, lr, wd, steps, eps=1e-10):
        super().__init__([ngram.cache], dict(lr=lr, lr_mul=config.lr_mul, wd=wd * config.wd_mul,
                                             beta2=config.betas[1], eps=eps))
        assert config.betas[0] == 0, "RowAdam has no momentum"
        self.ngram, self.table = ngram, ngram.table
        self.second_moment = torch.zeros(len(self.table), device=self.table.device)
        self.last_step = torch.full((len(self.table),), -1, dtype=torch.int32, device=self.table.device)
        self.log_decay = torch.zeros(steps + 1, dtype=torch.float64, device=self.table.device)  # before each step
        self.total_log_decay = 0.0
        self.scheduled = torch.zeros(3, device=self.table.device)  # row_adam_update's
        self.update = on_gpu_compiled(row_adam_update, self.table.is_cuda)
        self.started = None  # between start_step and finish_step: (the rows' gradients, summed: rows and sums)

    def step(self, rows, step):
        """The update of step `step`, whose ngram_rows are `rows` (this rank's)."""
        self.start_step(rows)
        self.finish_step(step)

    def start_step(self, rows):
        """Start summing the gradients of the step's rows, `rows` (this rank's), over the ranks: with several ranks
        the exchange runs on NCCL's stream behind the other optimizers' reductions, while they step."""
        written = self.param_groups[0]["params"][0].grad[: len(rows)]  # the step's rows' places: the rest stays 0
        summed = self.ngram.exchange.send_back(written) if self.ngram.world_size > 1 else lambda: (rows, written)
        self.started = written, summed

    @torch.no_grad()
    def finish_step(self, step):
        """The update of step `step` (start_step started it)."""
        group = self.param_groups[0]
        written, summed = self.started
        rows, grad = summed()
        rows = rows.long()
        lr, beta2 = group["lr"] * group["lr_mul"], group["beta2"]
        decay = lr * lr * group["wd"]
        self.log_decay[step].fill_(self.total_log_decay)  # in place already, unless steps were skipped
        schedule_on_device(self.scheduled, [step, lr * (1 - beta2 ** (step + 1)) ** 0.5, decay])
        weights, moment = self.update(self.table, rows, grad, self.second_moment, self.last_step, self.log_decay,
                                      self.scheduled, beta2, group["eps"])
        self.table.index_copy_(0, rows, weights)
        self.second_moment.index_copy_(0, rows, moment)
        self.last_step.index_fill_(0, rows, step)
        self.total_log_decay += math.log1p(-decay)
        if step + 1 < len(self.log_decay):
            self.log_decay[step + 1].fill_(self.total_log_decay)
        self.ngram.fetched = None  # the cache holds the rows as they were
        written.zero_()  # in place (the CUDA graphs add into it), and not the whole cache: 1.2 GB at 393K tokens


class GradientEvents:
    """Where in the backward pass each reduction's gradients become final, so that the reduction over ranks can
    start there instead of after the whole pass (start_reductions).

    The parameters come in groups, a group's gradients being summed in one reduction (the optimizers'
    reduction_groups). A hook on each parameter, run once its gradient of a backward pass is accumulated, counts
    it in its group; when the group's last parameter is in, the group's event is recorded on the stream that
    computed it, and at the end of the pass (end_pass) the event of every group not complete by then (some of its
    parameters got no gradient in the pass). So each group's event is recorded once a pass, after all of the
    group's gradients of that pass, whatever order the pass finishes them in, and work that waits for the events
    of all the groups of `params` reads their final gradients, for any grouping. Under a CUDA graph's capture the
    record becomes a node of the graph (an external event), so every replay records it anew, and work that waits
    for it waits for the latest replay's. An event a group, not a parameter: with one a parameter (57 a
    micro-batch) each event node left the GPU idle about 40 µs, 10 ms of a 308 ms step on 2 H100s (session 14).
    The hooks also note the order in which gradients become final (the same in every backward pass). On the CPU
    there are no events: the hooks count and note the order."""

    def __init__(self, groups):
        cuda = groups[0][0].is_cuda
        self.stream = torch.cuda.Stream(groups[0][0].device) if cuda else None
        self.group_of = {p: g for g, group in enumerate(groups) for p in group}
        self.sizes, self.counts, self.order = [len(group) for group in groups], [0] * len(groups), {}
        self.events = [torch.cuda.Event(external=True) if cuda else None for _ in groups]
        for p in self.group_of:
            p.register_post_accumulate_grad_hook(self.final)

    def final(self, p):
        self.order.setdefault(p, len(self.order))
        g = self.group_of[p]
        self.counts[g] += 1
        if self.counts[g] == self.sizes[g]:
            self.record(g)

    def record(self, g):
        if self.events[g] is not None:
            self.events[g].record()

    def end_pass(self):
        """Called after each backward pass: the events of the groups it did not complete."""
        for g, (count, size) in enumerate(zip(self.counts, self.sizes)):
            if count != size:
                self.record(g)
        self.counts = [0] * len(self.counts)

    def begin_step(self):
        """Called before a step's first micro-batch: the reductions' buffers come from this side stream's memory,
        which the step before may have freed while its own kernels still read it."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream())

    def ready(self, params):
        """When the last of `params` became final in the backward pass, as a rank in its order."""
        return max(self.order.get(p, -1) for p in params)

    @contextlib.contextmanager
    def after(self, params):
        """Work queued inside runs once `params`' gradients are final (their groups' events), on a side stream,
        beside the rest of the backward pass."""
        if self.stream is None:
            yield
            return
        for g in sorted({self.group_of[p] for p in params}):
            self.stream.wait_event(self.events[g])
        with torch.cuda.stream(self.stream):
            yield


def start_reductions(optimizers, events=None):
    """Start the optimizers' gradient reductions over ranks in the order the backward pass finished their
    gradients, each waiting only for its own: with the step's last micro-batch queued, most of them run during
    its backward pass. Communications run in the order they are started, so a reduction started early but
    ready late would hold up the ones behind it. Without events: all at once, in the optimizers' order (an
    optimizer's step() whose reductions nobody started)."""
    reductions = [reduction for optimizer in optimizers for reduction in optimizer.reductions()]
    if events is None:
        for _, start in reductions:
            start()
        return
    for params, start in sorted(reductions, key=lambda reduction: events.ready(reduction[0])):
        with events.after(params):
            start()


class Optimizers(typing.NamedTuple):
    adam: Adam
    normuon: NorMuon
    row_adam: RowAdam


class TailAverage:
    """Record #92's end-of-run weight averaging: over the last tail_frac of the steps each averaged parameter
    (PARAMETER_TABLE) keeps an exponential moving average of its values after each step, of time constant half
    the tail (rate 2 / (tail steps + 1)). Before the final validation, on the clock, the parameter moves
    tail_blend of the way to its average, then is rescaled to its own norm (the Frobenius norm of the whole
    tensor): an average of matrices turning in different directions is shorter than they are. Training never
    reads the averages.

    While the embedding is tied to the head, the head's values stand in for its own, as in the forward pass.
    Every rank averages its full copy of the parameters, the same on all."""

    def __init__(self, model, args):
        self.model, self.args, self.blend = model, args, args.tail_blend
        self.params = [p for name, p in model.named_parameters() if param_config(name).averaged]
        tail = round(args.tail_frac * total_steps(args))
        self.first_step, self.rate = total_steps(args) - tail, 2 / (tail + 1)
        self.averages = None  # float32, from the tail's first step

    @torch.no_grad()
    def update(self, step):
        """Take in the values after step `step`."""
        if step < self.first_step or not self.blend:
            return
        embed, head = self.model.embed.weight, self.model.head.weight
        tied = is_tied(step, self.args)
        values = [(head if p is embed and tied else p).float() for p in self.params]
        if self.averages is None:
            self.averages = [v.clone() for v in values]  # float() of a float32 parameter is the parameter itself
        else:
            torch._foreach_lerp_(self.averages, values, self.rate)

    @torch.no_grad()
    def apply(self):
        """Move the parameters towards their averages, keeping their norms (the end of the run)."""
        if self.averages is None:
            return
        for p, average in zip(self.params, self.averages):
            blended = p.float().lerp(average, self.blend)
            p.copy_(blended.mul_(p.float().norm() / blended.norm().clamp_min(1e-30)))


def make_optimizers(model, args, world_size):
    """The run's Optimizers; with several ranks also the model's GradientEvents, on the first call (any later
    call's optimizers group the parameters as the first's did)."""
    named = list(model.named_parameters())
    assert all(p.ndim >= 2 for n, p in named if param_config(n).optimizer == "normuon")
    assert [param_config(n).optimizer for n, _ in named].count("rows") == 1  # the n-gram cache, RowAdam's
    optimizers = Optimizers(
        make_adam(model, args, world_size),
        make_normuon(model, args, world_size),
        RowAdam(model.ngram, param_config("ngram.cache"), lr=args.adam_lr, wd=args.adam_wd, steps=total_steps(args)))
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
    if world_size > 1 and model.grad_events is None:  # once: the CUDA graphs captured record its events
        model.grad_events = GradientEvents(optimizers.normuon.reduction_groups() + optimizers.adam.reduction_groups())
    return optimizers


def make_adam(model, args, world_size):
    """Adam over the embeddings, the head and the scalars (PARAMETER_TABLE's adam rows), as a rank of `world_size`
    steps them."""
    others = [(n, p) for n, p in model.named_parameters() if param_config(n).optimizer == "adam"]
    return Adam(others, lr=args.adam_lr, wd=args.adam_wd, world_size=world_size)


def make_normuon(model, args, world_size):
    """NorMuon over the model's matrices (PARAMETER_TABLE's normuon rows), as a rank of `world_size` steps them."""
    matrices = [(n, p) for n, p in model.named_parameters() if param_config(n).optimizer == "normuon"]
    return NorMuon(matrices, lr=args.matrix_lr, wd=args.matrix_wd, world_size=world_size)


# ----------------------------------------------------------------------------------------------------
# Schedules: functions of the step, read from TRAINING_STAGES


def total_steps(args):
    return args.scheduled_steps + args.extension_steps


def stage_starts(args):
    """The first step of each row of TRAINING_STAGES (steps are counted from 0)."""
    return [0] + [round(stage.end * args.scheduled_steps) for stage in TRAINING_STAGES[:-1]]


def stage_index(step, args):
    """The row of TRAINING_STAGES that training step `step` belongs to."""
    return bisect.bisect_right(stage_starts(args), step) - 1


def lr_factor(step, args):
    """The stage's lr_mul until the cool-down, then a straight line to final_lr_frac at the last scheduled
    step, held through the extension. Both optimizers' learning rates are scaled by it."""
    start = int(args.scheduled_steps * (1 - args.cooldown_frac))
    t = min(max((step - start) / max(args.scheduled_steps - start, 1), 0), 1)
    return TRAINING_STAGES[stage_index(step, args)].lr_mul * (1 - t) + args.final_lr_frac * t


def matrix_momentum(step, args):
    """NorMuon's momentum: 0.85 -> 0.95 over the warm-up, 0.95, then back towards 0.85 over the last steps."""
    warmup = max(round(args.momentum_warmup_frac * args.scheduled_steps), 1)
    cooldown = max(round(args.momentum_cooldown_frac * args.scheduled_steps), 1)
    cooldown_start = total_steps(args) - cooldown
    if step > cooldown_start:
        return 0.95 - 0.10 * (step - cooldown_start) / cooldown
    return 0.85 + 0.10 * min(step / warmup, 1)


def attention_windows(step, args):
    """(short, long) sliding windows in tokens for training step `step`; step total_steps is the final
    validation, whose windows are longer still."""
    last = step >= total_steps(args)
    blocks = FINAL_VALIDATION_WINDOWS if last else TRAINING_STAGES[stage_index(step, args)].windows
    return tuple(WINDOW_BLOCK * b for b in blocks)


def yarn_windows(step, args):
    """Each long window the run has had so far, in order: rotary's YaRN stretch follows each change of it. The
    final validation's longer window is no new stage and gets no stretch."""
    index = stage_index(min(step, total_steps(args) - 1), args)
    longs = [WINDOW_BLOCK * stage.windows[1] for stage in TRAINING_STAGES[: index + 1]]
    return tuple(w for i, w in enumerate(longs) if i == 0 or w != longs[i - 1])


def loss_weights(step, args):
    """The head's loss weights (see Head) as (those of the next token and the ones after it, that of the
    prefix token: one or none), from the stage's mtp and prefix columns: linear from its start to its end over
    the stage's steps; the extension holds its row's start."""
    i = stage_index(step, args)
    starts = stage_starts(args) + [total_steps(args)]
    t = (step - starts[i]) / (starts[i + 1] - starts[i]) if i + 1 < len(TRAINING_STAGES) else 0.0
    stage = TRAINING_STAGES[i]
    return tuple(tuple(a + (b - a) * t for a, b in column) for column in (stage.mtp, stage.prefix))


@dataclass(frozen=True)
class StepState:
    """What the schedules say for one step, all the model reads of them: passed to its forward pass, not set on
    it. GPT.prepare puts the values the CUDA graphs read on the device; graph_key is what a graph fixes."""
    windows: tuple  # (short, long) sliding windows in tokens
    yarn: tuple  # each long window the run has had so far (rotary's stretch)
    tied: bool  # the head's weight is also the embedding
    mtp: tuple = (1.0,)  # loss weights: the next token, the one after, ...
    prefix: tuple = ()  # the prefix token's loss weight, or none

    def graph_key(self):
        return self.windows, self.tied, len(self.mtp), bool(self.prefix)


def step_state(step, args):
    """Training step `step`'s state."""
    mtp, prefix = loss_weights(step, args)
    return StepState(attention_windows(step, args), yarn_windows(step, args), is_tied(step, args), mtp, prefix)


def validation_state(step, args):
    """The state of a validation after `step` steps: the windows of step `step` (the final validation's longer
    ones after the last), and the tie of the last step before it, which left the weights as they are (the
    embedding gets its own values only as the first untied step starts: Adam.untie)."""
    return StepState(attention_windows(step, args), yarn_windows(step, args), is_tied(step - 1, args))


def is_tied(step, args):
    """Whether training step `step` reads the head's weight as the embedding (the steps before the first are)."""
    return step <= untie_step(args)


def untie_step(args):
    """The embedding is the head's matrix up to and including this step, whose Adam update (odd steps only)
    closes the two steps of gradients it has; from the next step on they are separate parameters."""
    return round(args.untie_frac * args.scheduled_steps) | 1


# ----------------------------------------------------------------------------------------------------
# Data: token shards

SHARD_MAGIC, SHARD_VERSION, HEADER_BYTES, BOS = 20240520, 1, 1024, 50256


class ShardError(UserError):
    """A token shard that is missing, empty, truncated or not in the FineWeb format."""


class EndOfData(UserError):
    """The training shards ran out."""


def shard_token_count(path):
    """Validate a shard's header against its file size and return its token count."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ShardError(f"{path}: no such shard file") from None
    if size == 0:
        raise ShardError(f"{path}: empty file")
    if size < HEADER_BYTES:
        raise ShardError(f"{path}: truncated header ({size} of {HEADER_BYTES} bytes)")
    magic, version, num_tokens = (int(x) for x in np.fromfile(path, dtype="<i4", count=3))
    if magic != SHARD_MAGIC:
        raise ShardError(f"{path}: wrong magic {magic} (expected {SHARD_MAGIC}); not a token shard")
    if version != SHARD_VERSION:
        raise ShardError(f"{path}: unsupported shard version {version} (expected {SHARD_VERSION})")
    expected = HEADER_BYTES + 2 * num_tokens
    if size < expected:
        raise ShardError(f"{path}: truncated by {expected - size} bytes ({num_tokens} tokens in header); "
                         f"download or build it again")
    if size > expected:
        raise ShardError(f"{path}: {size - expected} bytes beyond the {num_tokens} tokens in header")
    return num_tokens


def read_shard(path, pin_memory=False):
    """A shard's tokens as a uint16 tensor, read straight into (pinned) memory with no copy in between."""
    num_tokens = shard_token_count(path)
    tokens = torch.empty(num_tokens, dtype=torch.uint16, pin_memory=pin_memory)
    view = memoryview(tokens.numpy()).cast("B")
    with open(path, "rb", buffering=0) as f:
        f.seek(HEADER_BYTES)
        filled = 0
        while filled < len(view):
            n = f.readinto(view[filled:])
            if not n:
                raise ShardError(f"{path}: truncated by {len(view) - filled} bytes while reading; download or "
                                 f"build it again")
            filled += n
    return tokens


def shard_paths(pattern):
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise UserError(f"{pattern}: no shard files match; check the path (--train_files, --val_files)")
    return paths


class ShardCache:
    """Loads shard i+1 on a background thread while shard i is consumed; keeps the last two in memory."""

    def __init__(self, paths, pin_memory, wrap):
        self.paths, self.pin_memory, self.wrap = paths, pin_memory, wrap
        self.loader = ThreadPoolExecutor(1, thread_name_prefix="shard-reader")
        self.loads = {}

    def _load(self, path):
        tokens = read_shard(path, self.pin_memory)
        array = tokens.numpy()
        starts = np.flatnonzero(array == BOS)
        # the last input token of a document needs the next token as its target
        ends = np.append(starts[1:], len(array) - 1)
        keep = ends > starts
        return array, starts[keep], ends[keep] - starts[keep]

    def get(self, index):
        """(tokens, document starts, document lengths) of shard number `index` (wrapping around)."""
        for i in (index, index + 1):
            if i not in self.loads and (i < len(self.paths) or self.wrap):
                self.loads[i] = self.loader.submit(self._load, self.paths[i % len(self.paths)])
        for i in [i for i in self.loads if i < index - 1]:
            del self.loads[i]
        return self.loads[index].result()


# ----------------------------------------------------------------------------------------------------
# Data: batches. A source builds one step's batch for one rank into host buffers, from a cursor, and
# returns the cursor after it: a pure function of (cursor, shape), so a prefetched batch can be rebuilt.


@dataclass(frozen=True)
class BatchShape:
    tokens: int  # tokens per micro-batch on one rank
    max_seq_len: int
    accum_steps: int  # micro-batches per optimizer step
    candidates: int = 0  # the sampled softmax's vocabulary rows per micro-batch (choose_candidates); 0: none


@dataclass
class SequenceBoundaries:
    cu_seqlens: torch.Tensor  # int32 (sequences + 1,): where each sequence starts, then the total
    max_len: int


# what a batch carries to the device: per-token fields (a MicroBatch's), then the sequences' boundaries, the
# sampled softmax's vocabulary rows, the step's rows of the n-gram table and the rows the ranks ask of this one's
# shard (RowRequests' tensors)
TOKEN_FIELDS = ("inputs", "targets", "bigram_slots", "trigram_slots", "bigram_signs", "trigram_signs", "input_order",
                "bigram_order", "trigram_order")
ASKED_FIELDS = ("asked_rows", "asked_distinct", "asked_segments")
HOST_FIELDS = TOKEN_FIELDS + ("cu_seqlens", "candidates", "ngram_rows") + ASKED_FIELDS


class HostBuffers:
    """One slot of host memory for a step's batch, and the event of the copy that last read it."""

    def __init__(self, pin_memory):
        self.pin_memory, self.tensors = pin_memory, {}
        self.copied = torch.cuda.Event() if pin_memory else None

    def reserve(self, tokens, candidates, asked_rows=0):
        """Wait until the last copy out of this slot is done, then make room for `tokens` of each per-token field
        and of cu_seqlens, for `candidates` rows, for two n-gram rows a token and for `asked_rows` rows asked of
        this rank's shard in each of ASKED_FIELDS; numpy views in HOST_FIELDS order."""
        if self.copied is not None:
            self.copied.synchronize()
        sizes = dict(candidates=candidates, ngram_rows=2 * tokens, **dict.fromkeys(ASKED_FIELDS, asked_rows))
        for name in HOST_FIELDS:
            size = sizes.get(name, tokens)
            if name not in self.tensors or self.tensors[name].numel() < size:
                self.tensors[name] = torch.empty(size, dtype=torch.int32, pin_memory=self.pin_memory)
        return [self.tensors[name].numpy() for name in HOST_FIELDS]


@dataclass
class HostBatch:
    shape: BatchShape
    start: object  # the cursor it was built from
    buffers: HostBuffers
    num_seqs: list  # per micro-batch
    max_lens: list  # per micro-batch
    sampled: list  # per micro-batch: whether its candidates held all its targets (else: the whole vocabulary)
    ngram_owners: tuple = ()  # how many of the step's distinct n-gram rows each rank holds (gather_ngram_rows)
    ngram_asked: Optional[RowRequests] = None  # the rows the ranks ask of this one's shard, if exchanged as it was
    # built (its tensors in the slot)

    def tensors(self):
        """The filled part of the slot, one tensor per name in HOST_FIELDS."""
        n_tokens = self.shape.tokens * self.shape.accum_steps
        asked = self.ngram_asked
        filled = {"cu_seqlens": sum(n + 1 for n in self.num_seqs),
                  "candidates": self.shape.candidates * self.shape.accum_steps, "ngram_rows": sum(self.ngram_owners),
                  **dict(zip(ASKED_FIELDS, (0, 0, 0) if asked is None else
                             (len(asked.rows), len(asked.distinct), len(asked.segments))))}
        return [self.buffers.tensors[name][: filled.get(name, n_tokens)] for name in HOST_FIELDS]


def hash_ngrams(inputs, table_rows, bigram_rows, trigram_rows, bigram_signs, trigram_signs):
    """The n-gram table's rows for one micro-batch of tokens (record #92's hashes): each token's bigram row, a
    hash of it and the token before, in the table's first half, and its trigram row, a hash of it and the two
    tokens before, in the second half; and a sign pattern for each, other hashes of the same tokens. A token
    without the tokens before it here (the micro-batch's first, and second for the trigram) gets the half's
    last row and pattern 0. The n-grams cross document starts, as the public record's do. int64 arithmetic:
    60961 * 50303 > 2**31."""
    x = inputs.astype(np.int64)
    half = table_rows // 2
    bigram_rows[0], trigram_rows[:2], bigram_signs[0], trigram_signs[:2] = half - 1, table_rows - 1, 0, 0
    bigram_rows[1:] = (36313 * x[1:] ^ 27191 * x[:-1]) % (half - 1)
    trigram_rows[2:] = (17351 * x[2:] ^ 60961 * x[1:-1] ^ 45259 * x[:-2]) % (table_rows - half - 1) + half
    bigram_signs[1:] = (x[1:] ^ x[:-1]) % NGRAM_SIGN_ROWS
    trigram_signs[2:] = (x[2:] ^ 3 * x[1:-1] ^ 7 * x[:-2]) % NGRAM_SIGN_ROWS


def gather_ngram_rows(bigram_rows, trigram_rows, out, world_size=1):
    """The step's n-gram rows: the distinct rows its tokens read, into the start of `out`, grouped by the rank
    that holds them in a sharded table (row % world_size; NgramTable), ascending within each group; each
    token's rows become their places there (its slots), in place. Returns the groups' sizes: on the host
    before the step, they are what the table's exchange needs to know without waiting for the device."""
    distinct, slots = np.unique(np.concatenate([bigram_rows, trigram_rows]), return_inverse=True)
    owner = distinct % world_size
    order = np.argsort(owner, kind="stable")
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    out[: len(distinct)] = distinct[order]
    bigram_rows[:], trigram_rows[:] = place[slots[: len(bigram_rows)]], place[slots[len(bigram_rows):]]
    return tuple(np.bincount(owner, minlength=world_size).tolist())


def stable_order(ids, out):
    """The order that sorts ids (non-negative int32) stably, into out (int32): a least-significant-digit radix
    sort in 16-bit digits, as numpy's stable sort of 16-bit keys is a radix sort (its sort of int32 keys took
    3.9 ms for 49,152 tokens on the 2-core development machine, two digits 0.74 ms)."""
    order = np.argsort(ids.astype(np.uint16), kind="stable")  # the low digit (astype keeps the low 16 bits)
    if len(ids) and ids.max() >> 16:
        order = order[np.argsort((ids[order] >> 16).astype(np.uint16), kind="stable")]
    out[:] = order


def sort_ids(per_token, n_tokens, tokens):
    """Each micro-batch's stable_order of its inputs, bigram slots and trigram slots into its input, bigram and
    trigram orders, for RowLookup's backward pass; per_token: numpy views in TOKEN_FIELDS order, micro-batches of
    `tokens` back to back, n_tokens in all, their slots final (gather_ngram_rows)."""
    fields = dict(zip(TOKEN_FIELDS, per_token))
    for t in range(0, n_tokens, tokens):
        for ids, order in (("inputs", "input_order"), ("bigram_slots", "bigram_order"),
                           ("trigram_slots", "trigram_order")):
            stable_order(fields[ids][t: t + tokens], fields[order][t: t + tokens])


def choose_candidates(targets, vocab_size, start, out):
    """The vocabulary rows of one micro-batch's sampled softmax (the public record's #92), in ascending order
    into `out`: every distinct target, topped up to len(out) rows with others, the first not among them along a
    fixed walk through the vocabulary (a stride coprime to its size) from `start`. The micro-batch's own start
    (see TrainSource) gives it the same rows on any world size, and over many micro-batches every row its turn.
    Returns False, `out` untouched, when the distinct targets alone are more than len(out)."""
    chosen = np.zeros(vocab_size, dtype=bool)
    chosen[targets] = True
    missing = len(out) - np.count_nonzero(chosen)
    if missing < 0:
        return False
    stride = next(s for s in range(int(0.618 * vocab_size), vocab_size) if math.gcd(s, vocab_size) == 1)
    walk = (start + stride * np.arange(len(out), dtype=np.int64)) % vocab_size  # distinct: at most d of them chosen
    chosen[walk[~chosen[walk]][:missing]] = True
    out[:] = np.flatnonzero(chosen)
    return True


def _pack_documents(tokens, starts, lengths, max_len, table_rows, per_token, cu_seqlens):
    """Copy one micro-batch of documents (starts, lengths) back to back into inputs/targets, each split into
    attention sequences of at most max_len tokens; hash its n-grams into the table's rows (hash_ngrams; the
    step's gather_ngram_rows turns them into slots); write the sequences' boundaries to cu_seqlens; return
    their number and the longest. per_token: numpy views in TOKEN_FIELDS order."""
    # the orders come once the step's slots are final (sort_ids)
    inputs, targets, *ngrams = per_token[: TOKEN_FIELDS.index("input_order")]
    pieces = -(-lengths // max_len)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)  # index of each piece's first sibling
    offset = (np.arange(pieces.sum()) - first) * max_len  # where each piece starts inside its document
    piece_lengths = np.minimum(np.repeat(lengths, pieces) - offset, max_len)
    bounds = np.concatenate([[0], np.cumsum(piece_lengths)])
    cu_seqlens[: len(bounds)] = bounds
    index = np.arange(bounds[-1]) + np.repeat(np.repeat(starts, pieces) + offset - bounds[:-1], piece_lengths)
    inputs[: bounds[-1]] = tokens[index]
    targets[: bounds[-1]] = tokens[index + 1]
    hash_ngrams(inputs[: bounds[-1]], table_rows, *(field[: bounds[-1]] for field in ngrams))
    return len(piece_lengths), int(piece_lengths.max())


class TrainSource:
    """Training batches aligned to documents: each micro-batch starts at a document's first token (BOS) and
    is filled with whole documents in shard order, the last one cut to fit; documents longer than
    max_seq_len are split into several attention sequences. What is left of a cut document, and of a shard
    too short to fill a micro-batch, is skipped: no token is read twice in an epoch.

    A step is world_size * accum_steps micro-batches; micro-batch a of rank r is number a * world_size + r,
    so every world size trains on the same tokens. A cursor is (shard number, document number).

    requests_group: a gloo group of the ranks, through which each batch's n-gram row requests are exchanged as
    it is built (exchange_row_requests: the rows each rank asks of this one, HostBatch.ngram_asked), in the
    PrefetchLoader's worker. In the training step (fetch_ahead) their counts' exchange held each host until every
    rank's host reached it: its gloo operation took 0.3 to 10.6 ms a step (2 H100s, stage 0, session 23's traces);
    the rows' exchange, over NCCL on the compute stream, waited there behind Adam's all-gathers, 0.3 ms of every
    other step (2 H200s, session 33's traces). In the worker a batch's build waits for the other ranks' builds of
    the same batch, a step or more ahead of training. None: they are exchanged when the rows are fetched
    (RowExchange), and RowAdam cannot step on them. A rank that fails while its worker waits there ends once the
    other ranks' builds of that batch come, or those ranks end: Python waits for the worker at exit.
    """

    def __init__(self, pattern, rank, world_size, repeat, pin_memory=False, vocab_size=Hyperparameters.vocab_size,
                 ngram_rows=Hyperparameters.ngram_rows, requests_group=None):
        self.pattern, self.paths = pattern, shard_paths(pattern)
        self.rank, self.world_size, self.repeat, self.requests_group = rank, world_size, repeat, requests_group
        self.vocab_size, self.ngram_rows = vocab_size, ngram_rows
        self.shards = ShardCache(self.paths, pin_memory, wrap=repeat)
        self.start = (0, 0)

    def _micro_batch(self, cursor, shape):
        """The documents (tokens, starts, lengths) of the micro-batch at `cursor`, and the cursor after it."""
        shard, doc = cursor
        too_short = 0  # whole shards in a row that could not fill a micro-batch
        while True:
            if shard >= len(self.paths) and not self.repeat:
                raise EndOfData(f"{self.pattern}: training data exhausted after {len(self.paths)} shards; add "
                                f"shards or pass --repeat_train_files")
            tokens, starts, lengths = self.shards.get(shard)
            filled = np.cumsum(lengths[doc:])
            n = int(np.searchsorted(filled, shape.tokens))  # the document that fills the micro-batch
            if n < len(filled):
                cut = lengths[doc: doc + n + 1].copy()
                cut[n] -= filled[n] - shape.tokens
                return (tokens, starts[doc: doc + n + 1], cut), (shard, doc + n + 1)
            too_short += doc == 0
            if too_short == len(self.paths):
                raise UserError(f"{self.pattern}: no train shard holds a micro-batch of {shape.tokens} tokens of "
                                f"documents; lower --micro_batch_tokens or use larger shards")
            shard, doc = shard + 1, 0

    def build(self, cursor, shape, buffers):
        """The batch at `cursor`, built into `buffers`: a HostBatch, and the cursor after it."""
        host = HostBatch(shape, cursor, buffers, [], [], [])
        n_tokens = shape.accum_steps * shape.tokens
        # each rank asks this one for at most its distinct rows, two a token
        asked_rows = 2 * n_tokens * self.world_size if self.requests_group is not None else 0
        views = buffers.reserve(shape.accum_steps * (shape.tokens + 1), shape.accum_steps * shape.candidates,
                                asked_rows)
        *per_token, cu_seqlens, candidates, ngram_rows = views[: -len(ASKED_FIELDS)]
        for a in range(shape.accum_steps):
            for r in range(self.world_size):
                shard, doc = cursor
                (tokens, starts, lengths), cursor = self._micro_batch(cursor, shape)
                if r == self.rank:
                    t, c = a * shape.tokens, sum(n + 1 for n in host.num_seqs)
                    n, max_len = _pack_documents(tokens, starts, lengths, shape.max_seq_len, self.ngram_rows,
                                                 [b[t:] for b in per_token], cu_seqlens[c:])
                    host.num_seqs.append(n)
                    host.max_lens.append(max_len)
                    rows = candidates[a * shape.candidates: (a + 1) * shape.candidates]
                    start = (shard * 1_000_003 + doc) * 2_654_435_761 % self.vocab_size  # any spread of starts
                    host.sampled.append(len(rows) > 0 and choose_candidates(per_token[1][t: t + shape.tokens],
                                                                            self.vocab_size, start, rows))
        host.ngram_owners = gather_ngram_rows(per_token[2][:n_tokens], per_token[3][:n_tokens], ngram_rows,
                                              self.world_size)
        sort_ids(per_token, n_tokens, shape.tokens)
        if self.requests_group is not None:
            host.ngram_asked = exchange_row_requests(ngram_rows[: sum(host.ngram_owners)], host.ngram_owners,
                                                     self.requests_group, views[-len(ASKED_FIELDS):])
        return host, cursor


def train_source(args, rank, world_size, pin_memory):
    """The training shards as rank `rank` reads them, from the flags: the run, its compile helpers and the
    benchmarks all build theirs here. With several processes, each call makes a gloo group for its row requests
    (TrainSource), so every rank must call it as often, in the same order. A group of its own, not the table's
    (NgramTable.host_group): the loader's worker exchanges on it while the training thread exchanges on that,
    and two threads' collectives on one group could meet in a different order on each rank."""
    group = dist.new_group(backend="gloo") if world_size > 1 else None
    return TrainSource(args.train_files, rank, world_size, args.repeat_train_files, pin_memory=pin_memory,
                       vocab_size=args.vocab_size, ngram_rows=args.ngram_rows, requests_group=group)


class ValSource:
    """The first val_tokens tokens of the validation shards, in fixed chunks of `chunk` tokens, whatever
    the world size: rank r takes chunks r, r + world_size, ... and wraps around, so that the batch
    prefetched after one validation is the first of the next. Sequences split at document starts."""

    def __init__(self, pattern, val_tokens, chunk, rank, world_size, ngram_rows=Hyperparameters.ngram_rows):
        if val_tokens % chunk:
            raise UserError(f"--val_tokens: {val_tokens} is not a multiple of --val_seq_tokens {chunk}")
        self.tokens = np.empty(val_tokens + 1, dtype=np.uint16)
        filled = 0
        for path in shard_paths(pattern):
            shard = read_shard(path).numpy()[: len(self.tokens) - filled]
            self.tokens[filled: filled + len(shard)] = shard
            filled += len(shard)
            if filled == len(self.tokens):
                break
        else:
            raise UserError(f"{pattern}: validation needs {val_tokens + 1} tokens (--val_tokens + 1) and these "
                            f"shards hold {filled}; lower --val_tokens or add shards")
        self.chunk, self.num_chunks = chunk, val_tokens // chunk
        self.world_size, self.start, self.ngram_rows = world_size, rank, ngram_rows

    def batches_for_rank(self, rank):
        return len(range(rank, self.num_chunks, self.world_size))

    def build(self, cursor, shape, buffers):
        assert shape.tokens == self.chunk and shape.accum_steps == 1 and not shape.candidates
        *per_token, cu_seqlens, _, ngram_rows = buffers.reserve(self.chunk + 1, 0)[: -len(ASKED_FIELDS)]
        begin = cursor * self.chunk
        window = self.tokens[begin: begin + self.chunk + 1]
        starts = np.union1d([0], np.flatnonzero(window[:-1] == BOS))
        lengths = np.diff(np.append(starts, self.chunk))
        num_seqs, max_len = _pack_documents(window, starts, lengths, self.chunk, self.ngram_rows, per_token,
                                            cu_seqlens)
        owners = gather_ngram_rows(per_token[2][: self.chunk], per_token[3][: self.chunk], ngram_rows,
                                   self.world_size)
        sort_ids(per_token, self.chunk, self.chunk)
        next_cursor = cursor + self.world_size
        host = HostBatch(shape, cursor, buffers, [num_seqs], [max_len], [False], owners)
        return host, next_cursor if next_cursor < self.num_chunks else next_cursor % self.world_size


def synchronous_batches(source, shapes):
    """The reference stream: what a PrefetchLoader must return, built on the calling thread."""
    cursor = source.start
    for shape in shapes:
        host, cursor = source.build(cursor, shape, HostBuffers(pin_memory=False))
        yield _micro_batches(host, host.tensors())


@dataclass
class MicroBatch:
    inputs: torch.Tensor  # int32 (tokens,)
    targets: torch.Tensor  # int32 (tokens,)
    bigram_slots: torch.Tensor  # int32 (tokens,): each token's bigram row, as its place in ngram_rows
    trigram_slots: torch.Tensor  # int32 (tokens,): likewise its trigram row
    bigram_signs: torch.Tensor  # int32 (tokens,): each token's bigram sign pattern
    trigram_signs: torch.Tensor  # int32 (tokens,): and its trigram's
    input_order: torch.Tensor  # int32 (tokens,): the inputs' stable sort order (stable_order), for RowLookup
    bigram_order: torch.Tensor  # int32 (tokens,): likewise the bigram slots'
    trigram_order: torch.Tensor  # int32 (tokens,): and the trigram slots'
    seqs: SequenceBoundaries
    candidates: Optional[torch.Tensor] = None  # int32 (rows,): the sampled softmax's rows; None: the whole vocabulary
    ngram_rows: Optional[torch.Tensor] = None  # int32: the step's distinct rows of the n-gram table, shared by its
    # micro-batches (gather_ngram_rows); None: already in the table's cache (a CUDA graph's replay)
    ngram_owners: tuple = ()  # how many of ngram_rows each rank holds, in order (gather_ngram_rows)
    ngram_asked: Optional[RowRequests] = None  # the rows the ranks ask of this one's shard, if known (HostBatch)


def _ngram_rows(host, tensors):
    """A HostBatch's n-gram rows and the rows the ranks ask of this one (RowRequests; None where not exchanged),
    from its tensors (host.tensors(), or their copies on the device)."""
    rows, *asked = tensors[-1 - len(ASKED_FIELDS):]
    return rows, None if host.ngram_asked is None else RowRequests(host.ngram_asked.counts, *asked)


def _micro_batches(host, tensors):
    """The micro-batches of a HostBatch, from its tensors (host.tensors(), or their copies on the device)."""
    *per_token, cu_seqlens, candidates = tensors[: -1 - len(ASKED_FIELDS)]
    ngram_rows, asked = _ngram_rows(host, tensors)
    shape, batches, c = host.shape, [], 0
    for a, (n, max_len, sampled) in enumerate(zip(host.num_seqs, host.max_lens, host.sampled)):
        t = slice(a * shape.tokens, (a + 1) * shape.tokens)
        seqs = SequenceBoundaries(cu_seqlens[c: c + n + 1], max_len)
        rows = candidates[a * shape.candidates: (a + 1) * shape.candidates] if sampled else None
        batches.append(MicroBatch(*(field[t] for field in per_token), seqs, rows, ngram_rows, host.ngram_owners,
                                  asked))
        c += n + 1
    return batches


# ----------------------------------------------------------------------------------------------------
# Data: the PrefetchLoader


class PrefetchLoader:
    """send(shape) returns this step's micro-batches, already on the device, and before returning starts
    the host-to-device copy of the next step's batch on its own copy stream.

    Pipeline: a worker thread builds batch k+2 in pinned host memory while batch k+1 is being copied and
    batch k is being trained on. Lifetimes: a host slot is refilled only after the event of the copy that
    read it (HostBuffers.reserve); the compute stream waits on the copy's event, never on the device; and
    tensors handed out are record_stream'ed on the compute stream so the allocator cannot reuse them early.
    If the shape changes, prefetched batches are dropped and rebuilt from where they started. An exception
    in the worker surfaces, with its traceback, from the send() that needs that batch.
    """

    SLOTS = 3  # batch k being computed on, k+1 being copied, k+2 being built

    def __init__(self, source, device):
        self.source, self.device = source, device
        self.cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        self.slots = [HostBuffers(self.cuda) for _ in range(self.SLOTS)]
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="batch-builder")
        self.next_slot = 0
        self.cursor = source.start  # touched only by the worker, or while it is idle
        self.uploaded = None  # the next batch: on its way to the device, or a failed Future
        self.building = None  # Future of the batch after it

    def _build(self, shape, slot):
        host, self.cursor = self.source.build(self.cursor, shape, self.slots[slot])
        return host

    def _submit(self, shape):
        slot, self.next_slot = self.next_slot, (self.next_slot + 1) % self.SLOTS
        return self.worker.submit(self._build, shape, slot)

    def _upload(self, future):
        """Start copying a built batch to the device; a failed build is kept to be raised when needed."""
        if future.exception() is not None:
            return future
        host = future.result()
        if self.cuda:
            with torch.cuda.stream(self.copy_stream):
                tensors = [t.to(self.device, non_blocking=True) for t in host.tensors()]
                host.buffers.copied.record(self.copy_stream)
        else:
            tensors = [t.clone() for t in host.tensors()]
        return host, tensors

    def restart(self, cursor=None):
        """Drop prefetched batches; the next send() starts from `cursor` (default: where they started)."""
        if self.building is not None:
            wait([self.building])  # the worker is idle from here on; a failure of a dropped batch is moot
        if cursor is None and isinstance(self.uploaded, tuple):
            cursor = self.uploaded[0].start
        if cursor is not None:
            self.cursor = cursor
        self.uploaded = self.building = None

    def upcoming(self, shape):
        """What the table needs of the batch that the next send(shape) will return, to fetch its rows ahead
        (NgramTable.fetch_ahead): its n-gram rows, on their way to the device, how many of them each rank holds,
        the rows the ranks ask of this one (RowRequests, also on their way; None where not exchanged), and the
        event after their copy (None on a CPU). None if that batch is not on its way: it will be rebuilt at another
        shape, or its build failed."""
        if not isinstance(self.uploaded, tuple) or self.uploaded[0].shape != shape:
            return None
        host, tensors = self.uploaded
        rows, asked = _ngram_rows(host, tensors)
        return rows, host.ngram_owners, asked, host.buffers.copied

    def send(self, shape):
        if isinstance(self.uploaded, tuple) and self.uploaded[0].shape != shape:
            self.restart()
        if self.uploaded is None:
            self.uploaded = self._upload(self._submit(shape))
            self.building = self._submit(shape)
        if isinstance(self.uploaded, Future):
            self.uploaded.result()  # raises the worker's exception
        (host, tensors), self.uploaded = self.uploaded, self._upload(self.building)
        self.building = self._submit(shape)
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(host.buffers.copied)  # recorded right after this batch's copy
            for t in tensors:
                t.record_stream(compute)
        return _micro_batches(host, tensors)


# ----------------------------------------------------------------------------------------------------
# The validation mask (public record #91): pairs of tokens that GPT-2's tokenizer never emits one after the
# other. The final validation leaves those next tokens out of the softmax; the training never sees the mask.

# GPT-2's pre-tokenizer splits text into runs (a letter run, a number run, a run of other symbols, each with an
# optional leading space; whitespace; the contractions) and BPE merges inside a run only. Its characters'
# classes: S whitespace (its regex's \s: Python's isspace less 0x1c-0x1f), L letter, N number, O other.
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def character_class(c):
    if c.isspace() and c not in "\x1c\x1d\x1e\x1f":
        return "S"
    return {"L": "L", "N": "N"}.get(unicodedata.category(c)[0], "O")


def edge_classes(text):
    """The classes of a token's first and last whole characters ('?' where its bytes begin or end inside one)."""
    def decodable(pieces):
        for piece in pieces:
            try:
                return piece.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return None
    first = decodable(text[:k] for k in range(1, 5) if k <= len(text))
    last = decodable(text[-k:] for k in range(1, 5) if k <= len(text))
    return (character_class(first[0]) if first else "?"), (character_class(last[-1]) if last else "?")


def token_texts(merges):
    """Each token's bytes, from GPT-2's merge table (data/gpt2_merges.npy); <|endoftext|>'s are empty."""
    texts = []
    for left, right in merges.tolist():
        texts.append(b"" if left < 0 else bytes([left]) if right < 0 else texts[left] + texts[right])
    return texts


def impossible_pairs(merges, vocab_size):
    """Record #91's validation mask: the (previous, next) token pairs that GPT-2's tokenizer never emits, as
    rows of bits, bit x of row p (little-endian within each byte) set when token x never follows token p:
    uint8 (vocab_size, vocab_size // 8), and the number of pairs. merges: data/gpt2_merges.npy
    (data/gpt2_merge_table.py).

    The rule: BPE merges the pair of adjacent pieces of lowest rank first, and a token's id is the rank of the
    merge that made it. Take a merge R = A + B. If p's last piece is still A when merges reach rank R (p's own
    next merge of that piece, which wins a tie, comes later) and x's first piece is still B by then (x's next
    merge of it does not come before R: at a tie the pair across the seam is the leftmost), then p followed by
    x inside one pre-tokenizer run would have merged A and B across the seam: the tokenizer never emits x
    after p. It holds only where the seam lies inside a run whatever the text around: not where x begins inside
    a character, nor where p ends inside one (which character it completes, and so its class, is unknown:
    #91 masks these, 11 pairs, 7 of them emitted), nor between whitespace (a run's last space may go to the
    next run), nor from a symbol to a letter (an apostrophe may start a contraction), nor after a
    contraction, a run of its own. <|endoftext|> and the padding ids are never masked, nor masked after. The
    mask is conservative: a pair it leaves unmasked may still be impossible."""
    assert vocab_size % 8 == 0 and len(merges) <= vocab_size
    n, left, right = len(merges), merges[:, 0], merges[:, 1]
    texts = token_texts(merges)
    classes = "SLNO?"
    edges = [edge_classes(text) if text else "??" for text in texts]
    start, end = (np.array([classes.index(edge[i]) for edge in edges]) for i in (0, 1))
    seam_ok = np.ones((5, 5), dtype=bool)
    seam_ok[4, :] = seam_ok[:, 4] = seam_ok[0, 0] = seam_ok[3, 1] = False
    closed = np.array([text.decode("utf-8", "replace") in CONTRACTIONS for text in texts])
    # each token's spine of last pieces (p, right[p], right[right[p]], ... down to a byte) and of first pieces,
    # each piece with the rank of the merge that ends it as that edge (the piece above it; p itself: never)
    never = 1 << 20
    rules = np.flatnonzero(right >= 0)

    def spines(child, usable):
        """Every (piece, token, rank that ends it) of the tokens' spines, keyed by piece, then latest end first."""
        pieces, tokens, ends = [], [], []
        piece = np.flatnonzero(usable & (left >= 0))
        token, ends_at = piece.copy(), np.full(len(piece), never)
        while len(piece):
            pieces.append(piece), tokens.append(token), ends.append(ends_at)
            merged = right[piece] >= 0
            token, ends_at, piece = token[merged], piece[merged], child[piece[merged]]
        keys = np.concatenate(pieces).astype(np.int64) * 2 * never + never - np.concatenate(ends)
        order = np.argsort(keys, kind="stable")
        return keys[order], np.concatenate(tokens)[order]

    def holders(spine, pieces, rank, strict):
        """Where in the spine the tokens start whose edge is still `pieces` at `rank` (its end later than the
        rank, or not earlier unless strict), and how many they are."""
        keys = spine[0]
        lo = np.searchsorted(keys, pieces.astype(np.int64) * 2 * never)
        hi = np.searchsorted(keys, pieces.astype(np.int64) * 2 * never + never - rank, "left" if strict else "right")
        return lo, hi - lo

    lasts = spines(right, ~closed & (end != 4))
    firsts = spines(left, start != 4)
    p_lo, p_count = holders(lasts, left[rules], rules, strict=True)
    x_lo, x_count = holders(firsts, right[rules], rules, strict=False)
    # Row by row rather than pair by pair (70.9 million pairs; 4-5 s instead of 17-19 s on a 2-core CPU): a token p in
    # piece A's block of lasts takes the pairs of every rule A + B ranked before the merge that ends A in it, and
    # the block is sorted latest end first, so A's rules in rank order build one running row of next tokens (each
    # adds its x's), and each stretch of the block that takes exactly the rules so far ORs that row into its rows,
    # less the start classes its end class forbids.
    words = vocab_size // 8
    x_classes = np.pad(start, (0, vocab_size - n), constant_values=4)
    allowed = np.stack([np.packbits(seam_ok[e, x_classes], bitorder="little") for e in range(5)])
    bit_of = (1 << np.arange(8)).astype(np.uint8)
    bits = np.zeros((vocab_size, words), dtype=np.uint8)
    running = np.zeros(words, dtype=np.uint8)
    order = np.argsort(left[rules], kind="stable")  # grouped by A, in rank order within a group (rules ascend)
    pieces = left[rules[order]]
    group_ends = np.append(pieces[1:] != pieces[:-1], True)
    for i, rule in enumerate(order):
        x = firsts[1][x_lo[rule]: x_lo[rule] + x_count[rule]]
        np.bitwise_or.at(running, x >> 3, bit_of[x & 7])
        later = 0 if group_ends[i] else p_count[order[i + 1]]  # the block's tokens that take the next rule too
        p = lasts[1][p_lo[rule] + later: p_lo[rule] + p_count[rule]]
        bits[p] |= running & allowed[end[p]]
        if group_ends[i]:
            running[:] = 0
    return bits, count_ones(bits)


def count_ones(bits):
    """The set bits of a uint8 array, by a table of each byte's (np.unpackbits would first make eight bytes of
    each: 2.5 GB for the validation mask)."""
    ones_in = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.uint8)
    return int(ones_in[bits].sum(dtype=np.int64))


def load_merge_table(path, vocab_size):
    """GPT-2's merges as token ids (data/gpt2_merge_table.py), checked."""
    try:
        merges = np.load(path)
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: cannot read the merge table ({error}); pass --merge_table '' to validate "
                        f"without the mask, or build it with data/gpt2_merge_table.py") from None
    if merges.ndim != 2 or merges.shape[1] != 2 or merges.dtype != np.int32 or not (
            -1 <= merges.min() and (merges[:, 1] < np.arange(len(merges))).all()):
        raise UserError(f"{path}: not a merge table (int32 rows of two token ids made before the row's)")
    if len(merges) > vocab_size:
        raise UserError(f"--vocab_size {vocab_size} is smaller than the merge table's {len(merges)} tokens")
    return merges


class ValidationMask:
    """Builds impossible_pairs while the run trains, on the clock as #91 counts it, and puts it in the head
    before the final validation. Every rank builds its own: no communication.

    The build runs in a process of its own, not a thread: a thread shares Python's lock with the thread that
    queues the steps, and the build holds it through each numpy call (up to 124 ms, to OR a row into 2,402
    rows, on a 2-core CPU). On that CPU, while the build ran on a thread, 63-65 of about 2,800 4-ms loops of
    another thread took over 15 ms, the longest 124-182 ms; while it ran in a process, 1 of about 3,200 did, the
    longest 16-20 ms (experiments/2026-11-27_s25_midway_mask/host_stall_probe.py). On 2 H100s (session 25) the
    first step after step 0's validation took 54-73 ms longer with the build on a thread, row by row (and the
    n-gram counts exchanged ahead), than before both; in session 26, 124-128 ms with the build in a process
    against 170 ms on a thread. The process imports this file first (about 3 s on an H100 host); the bits come
    back through a file that both processes map."""

    def __init__(self, merges, head):
        self.head, started, shape = head, time.time(), tuple(head.never_follows.shape)
        # Both processes map one file in the temporary directory: the merge table, then the mask's bits. Not
        # torch's shared memory: /dev/shm is often smaller than this rank's 316 MB (64 MB in Docker by default).
        # Nor arguments: pickled, 400 kB of merges would overflow the pipe that starts the process, and start()
        # would wait for the process to import this file and read them.
        self.file = tempfile.NamedTemporaryFile(prefix="validation_mask_", suffix=".bin")
        np.memmap(self.file.name, np.int32, "r+", shape=merges.shape)[:] = merges
        context = multiprocessing.get_context("spawn")  # a fork would copy this process's CUDA state
        self.results, sending = context.Pipe(duplex=False)
        # a daemon: a run that stops early ends it rather than waiting for it
        self.builder = context.Process(target=build_validation_mask, name="validation mask", daemon=True,
                                       args=(self.file.name, merges.shape, shape, sending, started))
        self.builder.start()
        sending.close()
        # The bits reach the head's device as soon as they are built, not in the last step: copied there from the
        # mapped file, they made the last step 518-540 ms long, against 385-403 ms from a build thread's own
        # memory (2 H100s, session 26). Into a tensor of their own, as validations before the last must see
        # zeros; on a stream of their own, which the steps queued meanwhile do not wait for. The thread waits on
        # the pipe and in the copy, where Python's lock is free.
        self.staged = torch.empty_like(head.never_follows)
        self.stream = torch.cuda.Stream(self.staged.device) if self.staged.is_cuda else None
        self.arrived = Future()  # (pairs, ready) once the bits are staged, or what stopped the thread
        threading.Thread(target=self.receive, args=(merges.nbytes, shape), name="validation mask", daemon=True).start()

    def receive(self, offset, shape):
        try:
            try:
                received = self.results.recv()  # EOFError if the process died first
                bits = np.memmap(self.file.name, np.uint8, "r+", offset=offset, shape=shape)
                with torch.cuda.stream(self.stream):  # None on the CPU: no stream
                    self.staged.copy_(torch.from_numpy(bits))  # not non_blocking: done once it returns
            finally:
                self.file.close()  # and so deleted
            self.arrived.set_result(received)
        except BaseException as error:  # apply raises it on the training thread
            self.arrived.set_exception(error)

    def apply(self):
        """Wait for the mask and put it in the head; returns the number of pairs masked, the seconds from this
        object's start (the timed loop's) to the mask's arrival, and those this process waited for it."""
        clock = time.perf_counter()
        self.builder.join()
        if self.builder.exitcode:
            raise RuntimeError(f"the validation mask's build failed (exit code {self.builder.exitcode}; its "
                               f"traceback, if it left one, is above)")
        pairs, ready = self.arrived.result()  # or the receiving thread's exception
        waited = time.perf_counter() - clock
        self.head.never_follows.copy_(self.staged)
        del self.staged
        return pairs, ready, waited


def build_validation_mask(path, merges_shape, bits_shape, results, started):
    """ValidationMask's process: impossible_pairs from the merge table at the start of the file at `path`, into
    the bits after it, then the number of pairs and the seconds since `started` (time.time(), the training
    process's) into `results`. Ctrl-C, which the terminal sends to this process too, is the run's to handle
    (its exit ends this daemon), not this process's to print a traceback for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    merges = np.array(np.memmap(path, np.int32, "r", shape=merges_shape))
    bits, pairs = impossible_pairs(merges, bits_shape[0])
    np.memmap(path, np.uint8, "r+", offset=merges.nbytes, shape=bits_shape)[:] = bits
    results.send((pairs, time.time() - started))


# ----------------------------------------------------------------------------------------------------
# Logging: one file per run, rank 0 only, the script's own source first so that a log reproduces its run


class RunLog:
    """Rank 0's log file, written line by line and flushed, and its console. On an interactive console a
    progress bar stands in for the step lines (the file still gets every one); elsewhere (CI, output
    redirected to a file) the console gets the lines. Other ranks log nothing.

    In the file every line ends with a tab and its chain hash: 12 hex digits of sha256 of the line before's
    hash, a newline and the line, so that an edited line breaks the chain there (docs/log_format.md says what
    that proves; records/summarize.py checks it)."""

    def __init__(self, path, console=None):
        self.file, self.console, self.chain = None, console or sys.stdout, ""
        self.interactive = path is not None and self.console.isatty()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self.file = open(path, "x", buffering=1)  # "x": never overwrite a log; line-buffered: flushed
            except OSError as error:
                raise UserError(f"{path.parent}: cannot write the run's log there ({error.strerror or error}); run "
                                f"from a folder where {path.parent.name}/ can be made and written") from None

    def __call__(self, line, echo=True):
        if self.file is not None:
            for text in line.split("\n"):  # a line of the file at a time, each with its hash
                self.chain = hashlib.sha256(f"{self.chain}\n{text}".encode()).hexdigest()[:12]
                self.file.write(f"{text}\t{self.chain}\n")
            if echo:
                tqdm.write(line, file=self.console)  # above any progress bar; a plain print without one
                self.console.flush()

    def bar(self, total, desc, unit, leave=True):
        """A progress bar over `total` units on an interactive console, else None."""
        if not self.interactive:
            return None
        return tqdm(total=total, desc=desc, leave=leave, file=self.console, unit=unit, dynamic_ncols=True)


def environment(world_size, device):
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return (f"python={platform.python_version()} torch={torch.__version__} cuda={torch.version.cuda} "
            f"triton={triton_version} world_size={world_size} device={name}")


# Settings that change a run's speed or numbers without showing in its command line (NCCL_MAX_CTAS=8 slowed a
# two-GPU run by 0.7 %, session 17): their variables are logged, nothing else of the environment (init_process's
# own cuBLAS settings among them)
LOGGED_VARIABLE_PREFIXES = ("NCCL_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "CUDA_",
                            "CUBLAS_", "CUBLASLT_", "CUDNN_", "OMP_NUM_THREADS")


def environment_variables():
    return {name: value for name, value in sorted(os.environ.items()) if name.startswith(LOGGED_VARIABLE_PREFIXES)}


def nvidia_smi():
    try:
        return subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout.rstrip()
    except (OSError, subprocess.SubprocessError):
        return "not available"


def write_log_header(log, run_id, args, world_size, device):
    source = Path(__file__).read_text()
    log("train_gpt.py run log", echo=False)
    log(f"run_id: {run_id}")
    log(f"code_sha256: {hashlib.sha256(source.encode()).hexdigest()}")
    log(f"command: {' '.join(sys.argv)}")
    log("==== source train_gpt.py ====", echo=False)
    for line in source.splitlines():
        log(line, echo=False)
    log("==== end source ====", echo=False)
    log(f"hyperparameters: {json.dumps(dataclasses.asdict(args))}")
    for name in ("prefix_table", "merge_table"):  # data files, so the source alone does not fix them
        path = getattr(args, name)
        log(f"{name}_sha256: {hashlib.sha256(Path(path).read_bytes()).hexdigest()}" if Path(path).is_file() and path
            else f"{name}_sha256: none" + (f", {path} is missing" if path else ""))
    log(f"environment: {environment(world_size, device)}")
    log(f"environment_variables: {json.dumps(environment_variables())}")
    log("==== nvidia-smi ====", echo=False)
    log(nvidia_smi(), echo=False)
    log("==== end nvidia-smi ====", echo=False)


# ----------------------------------------------------------------------------------------------------
# Training


def load_compile_cache(directory, gpu, log):
    """Point Inductor's and Triton's on-disk caches into `directory` (unless the environment named others before
    Inductor's import set its default: GIVEN_CACHE_DIRS), Inductor's in a folder of its own (cache_name), so
    that a new directory is a cold start, and load PyTorch's portable cache artifacts of GPU `gpu` (its index on
    this node) from it, so that a later run, here or on a fresh machine given the same directory, skips most of
    the compilation. The caches are keyed by content hashes: a stale entry is not used. The compiled graphs name
    their GPU, so each GPU has its artifacts: rank 1 found none for cuda:1 among rank 0's and compiled
    everything (an 87 s start on 2 GPUs).
    Artifacts that Inductor's cache already holds (it records their hash) are not loaded again: that took about
    5 s of every warm start, and cache hits are recorded for the next save as misses are. Dynamo's saved frames
    are deleted unless this source and this torch saved them (dynamo_stamp). Returns whether the
    directory held this GPU's artifacts: False is a cold start."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    inductor = Path(GIVEN_CACHE_DIRS["TORCHINDUCTOR_CACHE_DIR"] or path.resolve() / "inductor") / cache_name(gpu)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    os.environ["TRITON_CACHE_DIR"] = GIVEN_CACHE_DIRS["TRITON_CACHE_DIR"] or str(path.resolve() / "triton")
    artifacts = artifacts_file(directory, gpu)
    warm = artifacts.exists()
    if warm:
        load_artifacts(artifacts, gpu, log)
    drop_foreign_frames(artifacts, log)
    return warm


def load_artifacts(artifacts, gpu, log):
    """Load the portable cache artifacts file `artifacts` of GPU `gpu`, unless Inductor's cache holds them."""
    content = artifacts.read_bytes()
    digest, record = hashlib.sha256(content).hexdigest(), artifacts_in_cache(gpu)
    if record.exists() and record.read_text() == digest:
        return
    try:  # a corrupt file makes PyTorch log a warning of its own and return None; or it raises
        problem = "unreadable" if torch.compiler.load_cache_artifacts(content) is None else None
    except Exception as error:
        problem = repr(error)
    if problem:
        log(f"warning: compile cache {artifacts} could not be loaded ({problem}); compiling from scratch")
    else:
        record.write_text(digest)


def save_compile_cache(directory, gpu):
    saved = torch.compiler.save_cache_artifacts()
    if saved is not None:
        artifacts = artifacts_file(directory, gpu)
        partial = artifacts.with_name(f"{artifacts.name}.{os.getpid()}")
        partial.write_bytes(saved[0])
        partial.replace(artifacts)
        artifacts.with_suffix(".stamp").write_text(dynamo_stamp())  # after: an older stamp only drops frames
        artifacts_in_cache(gpu).write_text(hashlib.sha256(saved[0]).hexdigest())  # they came from these caches


def dynamo_frames():
    """The folder of Dynamo's saved frames (compile_regions), inside Inductor's cache."""
    from torch._dynamo.package import DynamoCache
    return Path(DynamoCache.path_prefix())


def drop_foreign_frames(artifacts, log):
    """Delete Dynamo's saved frames unless the stamp beside `artifacts` names this source and this torch. The
    frames come from the run that saved the artifacts, which hold them too: their load writes them into the folder
    again (a fresh machine, a wiped cache)."""
    frames, stamp = dynamo_frames(), artifacts.with_suffix(".stamp")
    if not frames.exists() or stamp.is_file() and stamp.read_text() == dynamo_stamp():
        return
    shutil.rmtree(frames, ignore_errors=True)
    why = "were saved by another train_gpt.py or torch" if stamp.is_file() else "carry no stamp"
    log(f"compile cache: Dynamo's saved frames {why}; they are traced again")


@functools.cache
def dynamo_stamp():
    """What Dynamo's saved frames may be loaded by: this source, as the run started, and this torch. Dynamo checks
    a loaded frame against the source lines it traced, not against the settings compile_regions makes or the
    flags given to compiled, so a frame saved before a change to those would load as if nothing had changed;
    load_compile_cache deletes the frames of another source (Inductor's cache, keyed by content, stays)."""
    return f"{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()} torch {torch.__version__}"


def artifacts_file(directory, gpu):
    """GPU `gpu`'s portable cache artifacts in the compile cache `directory`."""
    return Path(directory) / f"artifacts.{cache_name(gpu)}.bin"


def artifacts_in_cache(gpu):
    """The file that holds the hash of GPU `gpu`'s artifacts that Inductor's cache holds. It is kept inside
    that cache, so that a cache wiped forgets it."""
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    return cache / f"train_gpt_artifacts.{cache_name(gpu)}.sha256"


def cache_name(gpu):
    """The name of GPU `gpu`'s part of a compile cache: its artifacts and its folder of Inductor's cache, which
    holds Dynamo's (compile_regions). Dynamo's keeps one entry per compiled function, whatever the GPU, so the
    ranks would write over each other's; and it names each function's module, so a process that imports this
    file (tests, benchmarks) keeps its part apart from the program's: a program that loaded an importer's
    entries failed at their first call, an importer the program's at torch.compile. (The other caches never
    shared an entry between the two either, session 27.)"""
    return f"gpu{gpu}" if __name__ == "__main__" else f"gpu{gpu}.{__name__}"


def compile_regions(model):
    # A region gets one graph per layer structure, grad mode and batch shape: before_attention has 6 layer
    # structures (value embeddings, key offset, saved residual, in the combinations the layers have), 24
    # graphs over a run's three training shapes and the validation one.
    # Past the limit (dynamo's default is 8), the rest would silently run uncompiled.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    # Inductor gives some reduction kernels (those fused with RMSNorm here) a second variant, half the reduction
    # block, at their first run and benchmarks the two: at every start, as it caches no choice for them (42
    # kernels, 2.75 s of a warm start on an H100). Each keeps its first variant instead.
    torch._inductor.config.dynamic_scale_rblock = False
    # AOTAutograd keeps no cache entry for a graph that calls a torch.autograd.Function (the head's loss, the
    # fused MLP, attention's FP8 projection) unless allowed to: a warm start traced the joint graphs of those
    # graphs again (12 of them, 3 per shape, when the head and the MLP were the only such Functions: 1.7-3.3 s of
    # aot_trace_joint_graph on an H100's host, and their partitioning). The Function's forward and
    # backward are traced into the graph, so into the cache key: a changed backward misses.
    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True
    # Dynamo's own cache: save_compile_cache saves each compiled function's traced frames and guards too, and a
    # warm start loads them at torch.compile instead of tracing its 66 graphs again: 25.0 and 24.1 s against
    # 37.8 and 41.5 s on an H100 (proxy flags, session 28). A frame traced while parameters had gradients saved,
    # but failed to load: warm_up traces with the gradients set aside (gradients_set_aside). Frames saved by
    # another version of this file are not loaded (dynamo_stamp).
    torch._dynamo.config.caching_precompile = True
    # and the lines it prints at every trace: a warning for each guard on an object's identity that it leaves out
    # of a saved frame (a new process has new objects; a changed source is caught by its checksums), hundreds a
    # start, and PyTorch's warning that its guards read a view's .grad
    logging.getLogger("torch._dynamo.guards").addFilter(not_a_dropped_guard)
    warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf", UserWarning,
                            r"torch\._dynamo")
    for block in model.blocks:
        block.compile()
    model.head.forward = types.MethodType(compiled(Head.forward, False, False), model.head)


def not_a_dropped_guard(record):
    """A logging filter (compile_regions): False for Dynamo's warning that caching_precompile drops a guard."""
    return "dropped with caching_precompile" not in str(record.msg)


def build_model(args, device, world_size):
    """The model on `device`, identical on every rank; on CUDA with bf16 embeddings and compiled blocks."""
    cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    with device:  # initialised where it lives: on the CPU, its 0.57G parameters took 12 s of start-up
        model = GPT(args, fp8=cuda and torch.cuda.get_device_capability(device) >= (9, 0), world_size=world_size)
    if cuda:
        for embedding in (model.embed, *model.value_embeds, model.ngram):
            embedding.bfloat16()  # activations follow the embeddings' dtype: bf16 throughout
        compile_regions(model)
        model.graphs = MicroStepGraphs(model)
    if world_size > 1:
        for p in model.parameters():
            dist.broadcast(p.detach(), 0)
    return model


def forward_backward(model, micro, state):
    """One micro-batch's summed loss (detached), its gradients added to the parameters'; with several ranks the
    pass ends with GradientEvents.end_pass."""
    loss = model(micro, state)
    loss.backward()
    if model.grad_events is not None:
        model.grad_events.end_pass()
    return loss.detach()


@contextlib.contextmanager
def gradients_set_aside(model):
    """The model's parameters without gradients inside, with theirs again after. Dynamo's cache (compile_regions)
    saved a frame traced while parameters had gradients, but failed to load it ("assigned grad expected to be a
    Tensor or None but got grad of type _Missing"): warm_up traces every region inside this."""
    grads = [(p, p.grad) for p in model.parameters()]
    for p, _ in grads:
        p.grad = None
    try:
        yield
    finally:
        for p, grad in grads:
            p.grad = grad


GRAPH_TOKENS_PER_SEQ = 256  # the CUDA graphs' room for sequences: one per this many tokens


class MicroStepGraphs:
    """forward_backward replayed as CUDA graphs: at the 16K-token micro-batches of the first stage the host
    took longer to queue a micro-batch's ~1,000 kernels than the GPU took to run them (docs/performance.md).

    One graph per micro-batch size, longest sequence (it sets FlashAttention's grid), sampled rows' number and
    StepState.graph_key (windows, tie state, the head's loss terms).
    A key's first micro-batch runs uncaptured (it compiles the regions), its second is captured. A replay
    reads the micro-batch from static buffers, its cu_seqlens padded with empty sequences to one sequence
    per GRAPH_TOKENS_PER_SEQ tokens; a micro-batch with more sequences runs uncaptured.

    Gradients: a step's first micro-batch writes the gradients of the parameters that have none (train_step
    leaves NorMuon's matrices without), and every other pass adds into the gradients where they are, which are
    therefore zeroed in place, never freed (Adam's). So whether a pass is its step's first is in the key. A first
    pass's capture keeps the gradients it wrote, in the graphs' memory, and each replay hands them to their
    parameters again. The later passes' graphs add into those: such a graph is captured only once its key's
    first pass has a graph, and a first pass that runs uncaptured while its graph exists adds into that graph's
    gradients, zeroed."""

    def __init__(self, model):
        self.model, self.pool = model, torch.cuda.graph_pool_handle()
        self.graphs, self.seen = {}, set()

    def __call__(self, micro, state, first):
        tokens, n = micro.inputs.numel(), micro.seqs.cu_seqlens.numel() - 1
        rows = None if micro.candidates is None else micro.candidates.numel()
        key = (tokens, micro.seqs.max_len, rows, state.graph_key(), first)
        # captured, or captured now: seen before, and a later pass only once its first pass has a graph
        graphed = key in self.graphs or (key in self.seen and (first or (*key[:-1], True) in self.graphs))
        if n > tokens // GRAPH_TOKENS_PER_SEQ or not graphed:
            self.seen.add(key)
            if key in self.graphs:  # a first pass beside its graph: into the gradients its later passes add to
                for p, grad in self.graphs[key][3]:
                    p.grad = grad.zero_()
            return forward_backward(self.model, micro, state)
        # outside the graph: the rows vary in number
        self.model.ngram.fetch(micro.ngram_rows, micro.ngram_owners, micro.ngram_asked)
        if key not in self.graphs:
            self.graphs[key] = self.capture(micro, state)
        graph, static, loss, written = self.graphs[key]
        for name in TOKEN_FIELDS + ("candidates",) * (rows is not None):
            getattr(static, name).copy_(getattr(micro, name))
        cu = static.seqs.cu_seqlens
        cu.copy_(micro.seqs.cu_seqlens[-1:].expand_as(cu))  # the padding: empty sequences at the end
        cu[: n + 1].copy_(micro.seqs.cu_seqlens)
        graph.replay()
        for p, grad in written:
            p.grad = grad
        return loss.clone()  # the next replay overwrites it

    def capture(self, micro, state):
        """The graph, its static micro-batch, its loss, and (parameter, gradient) for each gradient it writes."""
        tokens = micro.inputs.numel()
        cu = torch.empty(tokens // GRAPH_TOKENS_PER_SEQ + 1, dtype=torch.int32, device=micro.inputs.device)
        static = MicroBatch(*(torch.empty_like(getattr(micro, name)) for name in TOKEN_FIELDS),
                            SequenceBoundaries(cu, micro.seqs.max_len),
                            None if micro.candidates is None else torch.empty_like(micro.candidates))
        without = [p for p in self.model.parameters() if p.grad is None]
        graph = torch.cuda.CUDAGraph()
        # thread_local: the loader's worker thread goes on with its own CUDA calls during the capture
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            loss = forward_backward(self.model, static, state)
        return graph, static, loss, [(p, p.grad) for p in without if p.grad is not None]


def train_step(model, micro_batches, optimizers, step, args, world_size, upcoming=None):
    """One optimizer step over a step's micro-batches; returns the mean loss per token (a device scalar).
    Adam steps on odd steps only, on the gradients of two steps. upcoming: the next step's n-gram rows
    (PrefetchLoader.upcoming), fetched once RowAdam has updated the table; None: the next step's forward pass
    fetches its rows."""
    adam, normuon, row_adam = optimizers
    if not is_tied(step, args) and adam.late is not None:  # the first untied step (benchmarks skip steps)
        adam.untie(model.head.weight)  # the embedding, Adam's late parameter, starts as the head's copy
    state = step_state(step, args)
    model.prepare(state)
    if model.grad_events is not None:
        model.grad_events.begin_step()
    # the first pass writes the matrices' gradients: added to zeros, it took 41 float32 adds a step, and as many
    # zeroed gradients, about 0.5 ms of a 24 ms step at the 8-GPU per-rank shape on 2 H200s (session 22)
    normuon.zero_grad(set_to_none=True)
    loss = torch.zeros((), device=micro_batches[0].inputs.device)
    for i, micro in enumerate(micro_batches):
        if model.graphs is None:
            loss += forward_backward(model, micro, state)
        else:
            loss += model.graphs(micro, state, first=i == 0)
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lr_factor(step, args)
    for group in normuon.param_groups:
        group["momentum"] = matrix_momentum(step, args)
    adam_step = step % 2 == 1
    reductions = []
    if world_size > 1:  # most gradients are summed during the last micro-batch's backward pass
        start_reductions([normuon, adam] if adam_step else [normuon], model.grad_events)
        reductions.append(dist.all_reduce(loss, async_op=True))
    # Each optimizer's step in two halves, so that communication overlaps arithmetic: the n-gram rows' gradients
    # travel while NorMuon's and Adam's updates are computed, and those updates' all-gathers while the rows are
    # updated and the matrices stepped. Each step whole, RowAdam's exchange waited behind every reduction and
    # Adam's all-gathers ended the step with nothing beside them: 0.4 % of a two-GPU run (2 H200s, session 19).
    row_adam.start_step(micro_batches[0].ngram_rows)
    normuon.start_step()
    if adam_step:
        adam.start_step()
    row_adam.finish_step(step)
    if upcoming is not None:
        model.ngram.fetch_ahead(*upcoming)  # with several ranks, the rows' values travel while the matrices step
    normuon.finish_step()
    for work in reductions:
        work.wait()
    if adam_step:
        adam.finish_step()
        adam.zero_grad(set_to_none=False)
    return loss / (world_size * sum(micro.inputs.numel() for micro in micro_batches))


class DeferredLoss:
    """A step's loss, to be read once the next step is queued, so that the device never idles while the host
    reads it. On a GPU it is copied to pinned memory behind the step's kernels, and reading it waits for that
    copy alone, not for what was queued after it."""

    def __init__(self, loss):
        self.loss, self.copied = loss, None
        if loss.is_cuda:
            self.loss = torch.empty((), dtype=loss.dtype, pin_memory=True)
            self.loss.copy_(loss, non_blocking=True)
            self.copied = torch.cuda.Event()
            self.copied.record()

    def read(self):
        if self.copied is not None:
            self.copied.synchronize()
        return self.loss.item()


def init_process():
    """This process's rank, the world size (torchrun's variables; 1 without torchrun) and its device; joins
    the process group (NCCL on GPUs, gloo on CPUs) when there are several processes."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        # before cuBLAS starts: without a workspace, it takes for most matmuls an algorithm of the same speed that
        # needs none, instead of one that has a counter in the workspace zeroed first, a memset and about 4 us of
        # an idle GPU around it, 77 a step (its split sums need a workspace too: Gate). Stage 0 at the 8-GPU
        # per-rank shape on one H200 (session 30): 23.0 against 23.3 ms a step, the GPU busy 97.0 against 95.4 %.
        # Given either variable, the user's choice stands: set neither (cuBLASLt may share cuBLAS's workspace).
        if not any(name in os.environ for name in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")):
            os.environ.update(CUBLAS_WORKSPACE_CONFIG=":0:0", CUBLASLT_WORKSPACE_SIZE="0")
        torch.cuda.set_device(device)
    if world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    return rank, world_size, device


def train_shape(args, world_size, stage):
    """Each rank's share of a stage's batch: micro-batches of the stage's share of micro_batch_tokens (the
    8-GPU record's per-rank shapes), accumulated; and the stage's sampled softmax, unless it is the whole
    vocabulary."""
    batch, micro = args.batch_tokens * stage.batch, args.micro_batch_tokens * stage.batch
    if batch.denominator != 1 or micro.denominator != 1 or batch % (world_size * micro):
        raise UserError(f"--batch_tokens: {args.batch_tokens} and --micro_batch_tokens {args.micro_batch_tokens} "
                        f"must give whole batches at each stage's share ({stage.batch}) with micro-batches that "
                        f"divide them over world_size {world_size}; choose sizes that divide")
    candidates = stage.candidates if stage.candidates < args.vocab_size else 0
    return BatchShape(int(micro), stage.max_seq_len, int(batch // (world_size * micro)), candidates)


def warm_up_steps(args, shapes):
    """The steps the warm-up runs, by stage: for each CUDA graph key of the run's micro-batches (the stage's batch
    shape, the step's StepState.graph_key), in the order the run meets them, the first warmup_steps steps that
    have it, the last of them again where fewer have it: MicroStepGraphs captures a key on its second pass. Chosen
    by stage instead (the first warmup_steps of each new batch shape), stage 2's first step, the last tied one,
    and the extension's longer windows were each warmed on one step or none, so their graphs were captured in
    the timed loop, 0.06-0.11 s a key on 2 H100s (session 23)."""
    by_key = {}
    for step in range(total_steps(args) if args.warmup_steps else 0):
        stage = stage_index(step, args)
        key = shapes[stage], step_state(step, args).graph_key()
        _, steps = by_key.setdefault(key, (stage, []))  # the stage of its first step
        if len(steps) < args.warmup_steps:
            steps.append(step)
    by_stage = {}
    for stage, steps in by_key.values():
        by_stage.setdefault(stage, []).extend(steps + steps[-1:] * (args.warmup_steps - len(steps)))
    return by_stage


def precompile(args, device, world_size, shapes, val_shape, stages):
    """The work of a helper process at a cold start (see Precompiler): compile the regions at the batch shapes
    of `stages` (indices of TRAINING_STAGES; None: the validation shape) into the compile cache that the
    training process reads, by running the forward and backward pass of one micro-batch at each of the stage's
    warm-up steps, at that step's batch shape and in the training process's state there; validation's helper
    first runs the optimizers' compiled updates once, as a rank of `world_size` does (compile_optimizer_updates).
    No CUDA graphs: they compile nothing. The cache directories come with the environment, set before the
    process was started."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    args = dataclasses.replace(args, ngram_rows=NGRAM_SIGN_ROWS)  # the table enters no compiled region: a small
    # one spares the GPU's memory, which the training process needs
    model = build_model(args, device, world_size=1)
    model.graphs = None
    warm_steps = warm_up_steps(args, shapes)
    for stage in stages:
        if stage is None:
            # first: the training process steps them in its first warm-up steps
            compile_optimizer_updates(model, args, world_size)
            source = ValSource(args.val_files, args.val_seq_tokens, args.val_seq_tokens, 0, 1, args.ngram_rows)
            (micro,) = PrefetchLoader(source, device).send(val_shape)
            state = validation_state(0, args)
            model.prepare(state)
            with torch.no_grad():
                model(micro, state)
            continue
        loader = PrefetchLoader(train_source(args, 0, 1, pin_memory=False), device)
        for step in sorted(set(warm_steps[stage])):  # one pass of each compiles it all
            micro = loader.send(shapes[stage_index(step, args)])[0]
            state = step_state(step, args)
            model.prepare(state)
            forward_backward(model, micro, state)


def compile_optimizer_updates(model, args, world_size):
    """The optimizers' compiled arithmetic, each run once as a rank of `world_size` runs it, which compiles it
    into the compile cache: for each of NorMuon's parts at that world size, in its order, its update of the
    rank's share (a graph for each shape: a rank's shares are smaller on more ranks) on zero gradients, and the
    application of updates to the part's matrices at zero learning rate and decay (the weights stay as they
    are); then Adam's update on zero gradients from zero moments (likewise; one graph per dtype, whatever the
    sizes). Their state (Adam's moments, about 1.5 GB at the default size, and NorMuon's buffers) is freed on
    return."""
    adam = make_adam(model, args, world_size=1)  # one rank's: with several, Adam needs the process group
    normuon = make_normuon(model, args, world_size)
    with torch.no_grad():  # as their steps run
        for i, (share, (_, part)) in enumerate(zip(normuon.shares, normuon.parts)):
            share.zero_()
            normuon.part_update(i)
            normuon.apply_update(i, part[0].new_zeros(len(part), *part[0].shape, dtype=torch.bfloat16))
    for group in adam.param_groups:
        for p in group["params"]:  # Adam's only: the matrices' zeros would be 256 MB for nothing
            p.grad = torch.zeros_like(p)
    adam.step()


def precompile_helper(report, args, device, *rest):
    """A helper process's entry: precompile, then its seconds of work, the time.time() it ended at and its peak
    GPU memory allocated and reserved, in bytes, into `report`. Ctrl-C, which the terminal sends to the helpers
    too, is the run's to handle (it ends them, Precompiler.stop), not theirs to print a traceback for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    clock = time.perf_counter()
    precompile(args, device, *rest)
    cuda = device.type == "cuda"
    peak = (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)) if cuda else (0, 0)
    report.send((time.perf_counter() - clock, time.time(), peak))


class Precompiler:
    """A cold start compiles every region at each batch shape (six on the default schedule: stages 0 to 4 and
    validation), each 40 to 50 s on an H100 in one process, almost all of it compilation. Dynamo cannot compile
    in several threads, so on a cold start (no compile cache artifacts for this GPU yet) helper processes on
    this process's GPU compile the later stages' shapes and the validation shape into the on-disk compile
    cache, while this process warms up the first stage (50.6 s of an 86.6 s cold start on an H100 at 3aec8ad,
    the longest part): one helper per micro-batch size, and one for validation
    (compiled with the last stages, it held stage 2's warm-up 19.3 s of a 68.9 s cold start on 2 H100s, against
    6.5 s of 56.9 s on its own). Every rank has its own helpers: the compiled graphs name their GPU, and rank 1
    missed rank 0's helpers' graphs. The warm-up of a later stage first waits for its helper, then loads what it
    compiled. A helper that fails costs nothing but its time: the warm-up compiles here, as without helpers.
    Memory: a helper holds a model and one micro-batch's activations; validation's helper first runs the
    optimizers' compiled updates once (compile_optimizer_updates), so that they are in the cache before the
    training process's first step ends: its first forward and backward pass compile for about 40 s."""

    def __init__(self, args, device, world_size, shapes, val_shape, log):
        self.helpers, self.reports, self.log = {}, {}, log
        jobs = []  # the later stages, those of one micro-batch size in one job: only the head differs between them
        for stage in list(warm_up_steps(args, shapes))[1:]:
            if jobs and shapes[jobs[-1][-1]].tokens == shapes[stage].tokens:
                jobs[-1].append(stage)
            else:
                jobs.append([stage])
        if jobs:
            jobs.append([None])
        context = multiprocessing.get_context("spawn")  # a fork would copy this process's CUDA state
        for job in jobs:
            name = "precompile " + " and ".join("validation" if s is None else f"stage {s}" for s in job)
            report, sending = context.Pipe(duplex=False)
            helper = context.Process(target=precompile_helper, name=name,
                                     args=(sending, args, device, world_size, shapes, val_shape, job))
            helper.start()
            sending.close()
            self.reports[helper] = (report, time.time())
            log(f"{name}: a helper process started (cold compile cache)")
            self.helpers.update({stage: helper for stage in job})
        atexit.register(self.stop)  # before multiprocessing's own exit handler, which would wait for them

    def stop(self):
        """End the helpers still running: a run that stops early (an error, an interrupt) has no use for them."""
        for helper in set(self.helpers.values()):
            helper.terminate()
            helper.join()
        self.helpers.clear()
        self.reports.clear()

    def wait(self, stage):
        """Before the warm-up of `stage` (None: validation): wait until its helper has finished, and log how long
        it took and how long the warm-up waited for it (a helper of several stages, at the first of them)."""
        helper = self.helpers.pop(stage, None)
        if helper is None or helper not in self.reports:
            return
        report, started = self.reports.pop(helper)
        clock = time.perf_counter()
        helper.join()
        waited = time.perf_counter() - clock
        if helper.exitcode or not report.poll():
            self.log(f"warning: {helper.name} failed (exit code {helper.exitcode}); its shapes compile here")
            return
        seconds, ended, (allocated, reserved) = report.recv()
        self.log(f"{helper.name}: ended {ended - started:.1f}s after it started, {seconds:.1f}s of it compiling, "
                 f"peak GPU memory {allocated / 2**30:.1f} GiB allocated, {reserved / 2**30:.1f} GiB reserved; the "
                 f"warm-up waited {waited:.1f}s for it")


@dataclass
class Run:
    """A run's parts, which set_up makes and warm_up and train_loop use: its data, its model, its optimizers."""
    args: Hyperparameters
    rank: int
    world_size: int
    device: torch.device
    shapes: list  # each row of TRAINING_STAGES's BatchShape on this rank
    val_shape: "BatchShape"
    train_source: "TrainSource"
    val_source: "ValSource"
    train_loader: "PrefetchLoader"
    val_loader: "PrefetchLoader"
    model: "GPT"
    merges: Optional[np.ndarray]  # the validation mask's source (ValidationMask), or None
    optimizers: Optional[Optimizers] = None  # warm_up's
    traced: set = dataclasses.field(default_factory=set)  # the variants that train_step(trace=True) has traced

    @property
    def cuda(self):
        return self.device.type == "cuda"

    def train_step(self, step, trace=False):
        """Queue training step `step` on its batch; returns its loss (a device scalar). trace (warm_up): first a
        forward pass, with the gradients set aside, of each micro-batch at a variant of the compiled graphs that
        no earlier one had (its size, its sampled rows, or none where its targets outnumber them, and the step's
        StepState.graph_key), so that Dynamo traces the regions there before a backward pass gives any
        parameter a gradient (gradients_set_aside)."""
        batch = self.train_loader.send(self.shapes[stage_index(step, self.args)])
        if trace:
            state = step_state(step, self.args)
            self.model.prepare(state)
            # a variant may be new on one rank alone (whether its targets outnumber its sampled rows), and its
            # trace may fetch the step's n-gram rows: every rank fetches them once a step, at its first forward
            # pass or ahead (NgramTable), traced or not, so the exchanges still pair up
            for micro in batch:
                variant = (micro.inputs.numel(), None if micro.candidates is None else micro.candidates.numel(),
                           state.graph_key())
                if variant not in self.traced:
                    self.traced.add(variant)
                    with gradients_set_aside(self.model):
                        self.model(micro, state)
        upcoming = None
        if step + 1 < total_steps(self.args):
            upcoming = self.train_loader.upcoming(self.shapes[stage_index(step + 1, self.args)])
        return train_step(self.model, batch, self.optimizers, step, self.args, self.world_size, upcoming)

    @torch.no_grad()
    def evaluate(self, step, num_batches=None, bar=None):
        """The validation loss per token with step `step`'s windows; num_batches: fewer batches than rank 0's
        share, the largest. A rank whose share has run out serves the others' fetches from its shard of the
        n-gram table as long as rank 0 validates."""
        args, model, state = self.args, self.model, validation_state(step, self.args)
        model.prepare(state)
        loss = torch.zeros((), device=self.device)
        most = self.val_source.batches_for_rank(0) if num_batches is None else num_batches
        mine = min(most, self.val_source.batches_for_rank(self.rank))
        for i in range(most):
            if i >= mine:
                model.ngram.serve()
                continue
            (micro,) = self.val_loader.send(self.val_shape)
            loss += model(micro, state)
            if bar is not None:
                bar.update()
        if self.world_size > 1:
            dist.all_reduce(loss)
        return loss.item() / args.val_tokens


def set_up(args, rank, world_size, device, log, startup):
    """The run's data, then the compile cache (on a cold one, helper processes that compile the later batch
    shapes: Precompiler), then its model; each phase's seconds go into `startup`. Returns the Run and the
    Precompiler (None without helpers)."""
    cuda = device.type == "cuda"
    shapes = [train_shape(args, world_size, stage) for stage in TRAINING_STAGES]  # every stage's sizes checked now
    val_shape = BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    clock = time.perf_counter()  # the data first: a bad shard stops the run before any helper process starts
    source = train_source(args, rank, world_size, pin_memory=cuda)
    val_source = ValSource(args.val_files, args.val_tokens, args.val_seq_tokens, rank, world_size, args.ngram_rows)
    train_loader, val_loader = PrefetchLoader(source, device), PrefetchLoader(val_source, device)
    merges = load_merge_table(args.merge_table, args.vocab_size) if args.merge_table else None
    startup["data"] = time.perf_counter() - clock
    clock = time.perf_counter()
    precompiler = None
    if cuda and args.compile_cache:
        cold = not load_compile_cache(args.compile_cache, device.index, log)
        if cold and args.warmup_steps:
            precompiler = Precompiler(args, device, world_size, shapes, val_shape, log)
        startup["compile cache"] = time.perf_counter() - clock
    clock = time.perf_counter()
    model = build_model(args, device, world_size)
    startup["model"] = time.perf_counter() - clock
    run = Run(args, rank, world_size, device, shapes, val_shape, source, val_source, train_loader, val_loader, model,
              merges)
    return run, precompiler


def warm_up(run, precompiler, startup):
    """Compile and warm up on real batches of every batch shape of the run (the first steps of each stage with a
    new shape), untimed; then undo its effects: the initial weights, zero gradients, Adam and NorMuon reset in
    place (their CUDA graphs stay valid), a fresh RowAdam, both loaders rewound (the tie is each step's
    StepState: nothing to undo). Each phase's seconds go into `startup`."""
    args, model = run.args, run.model
    initial_state = {k: v.clone() for k, v in model.state_dict().items()}
    run.optimizers = make_optimizers(model, args, run.world_size)
    for i, steps in warm_up_steps(args, run.shapes).items():
        clock = time.perf_counter()
        if precompiler is not None:
            precompiler.wait(i)
        for step in steps:
            run.train_step(step, trace=True).item()
        startup[f"warm-up stage {i}"] = time.perf_counter() - clock
    if not args.warmup_steps:
        return
    clock = time.perf_counter()
    if precompiler is not None:
        precompiler.wait(None)
    with gradients_set_aside(model):  # compiles the validation shape
        run.evaluate(0, num_batches=min(1, run.val_source.batches_for_rank(0)))
    startup["validation warm-up"] = time.perf_counter() - clock
    if run.cuda and args.compile_cache:
        save_compile_cache(args.compile_cache, run.device.index)
    model.load_state_dict(initial_state)
    model.zero_grad(set_to_none=False)  # Adam keeps its gradients over even steps: the warm-up may end on one
    model.ngram.table.zero_()  # no state_dict's: see NgramTable
    adam, normuon, _ = run.optimizers
    adam.reset()  # their CUDA graphs hold their state where it is: zeroed there, and the graphs kept
    normuon.reset()
    run.optimizers = make_optimizers(model, args, run.world_size)._replace(adam=adam, normuon=normuon)
    run.train_loader.restart(run.train_source.start)
    run.val_loader.restart(run.val_source.start)


class StepClock:
    """The training time, which runs while steps run and stops for validation, and the step in flight: its loss
    is read, and the step timed, checked and logged, once the next step is queued, so that the device never
    idles while the host reads a loss."""

    def __init__(self, total_steps, log):
        self.total_steps, self.log = total_steps, log
        self.training_time, self.in_flight = 0.0, None  # in flight: (the step's number from 1, its DeferredLoss)
        self.progress = log.bar(total_steps, "train", "step")
        self.restart()

    def restart(self):
        """Start the clock (again, after a validation)."""
        self.started = time.perf_counter()

    def timed(self, step):
        return (f"train_time:{1000 * self.training_time:.1f}ms "
                f"step_avg:{1000 * self.training_time / max(step, 1):.2f}ms")

    def queued(self, step, loss):
        """Step `step` is queued, its loss a DeferredLoss: the step before it can be finished."""
        self.finish()
        self.in_flight = (step + 1, loss)

    def finish(self):
        """Wait for the step in flight (if any) to end on the device, then time, check and log it."""
        if self.in_flight is None:
            return
        (number, loss), self.in_flight = self.in_flight, None
        train_loss = loss.read()
        now = time.perf_counter()
        step_time, self.started = now - self.started, now
        self.training_time += step_time
        if not math.isfinite(train_loss):
            raise UserError(f"training loss is {train_loss} at step {number}; stopping")
        progress = self.progress
        self.log(f"step:{number}/{self.total_steps} train_loss:{train_loss:.4f} {self.timed(number)}",
                 echo=progress is None)
        if progress is not None:
            progress.set_postfix_str(f"loss {train_loss:.4f}, {1000 * step_time:.0f} ms/step", refresh=False)
            progress.update()

    def close(self):
        if self.progress is not None:
            self.progress.close()


def train_loop(run, log):
    """The timed steps, with validation at step 0, every val_loss_every steps and at the end (the clock
    stopped), the weight average's blend (TailAverage) and the validation mask (ValidationMask, built meanwhile)
    before the last one, then the final lines."""
    args, N = run.args, total_steps(run.args)
    tail, clock = TailAverage(run.model, args), StepClock(N, log)
    mask = ValidationMask(run.merges, run.model.head) if run.merges is not None else None
    val_loss, step = float("nan"), 0
    # Python's cyclic garbage collector stays out of the timed loop (#92): a pass over every object the set-up
    # left, at an allocation count it picks, would stall the host that queues the steps. What the loop makes
    # is freed by reference counting; its cycles wait for the end of the run.
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for step in range(N + 1):
            if step == N:
                tail.apply()
                if mask is not None:
                    pairs, ready, waited = mask.apply()
                    log(f"validation_mask: {pairs} pairs, ready {ready:.1f}s after the timed loop began, "
                        f"waited for {waited:.1f}s")
                if run.cuda:
                    torch.cuda.synchronize()  # on the clock, as the last step's: finish() waits for its loss only
            if step in (0, N) or (args.val_loss_every and step % args.val_loss_every == 0):
                clock.finish()
                val_bar = log.bar(run.val_source.batches_for_rank(run.rank), "validation", "batch", leave=False)
                val_loss = run.evaluate(step, bar=val_bar)
                if val_bar is not None:
                    val_bar.close()
                log(f"step:{step}/{N} val_loss:{val_loss:.4f} {clock.timed(step)}")
                clock.restart()
            if step == N:
                break
            loss = DeferredLoss(run.train_step(step))
            tail.update(step)
            clock.queued(step, loss)
            if not run.cuda:  # the step ran on this thread: nothing would overlap, and its time would go to the next
                clock.finish()
    except KeyboardInterrupt:
        raise Interrupted(f"at step {step}") from None
    finally:
        gc.enable()
        gc.unfreeze()
    clock.close()
    if run.cuda:
        log(f"peak_memory: allocated={torch.cuda.max_memory_allocated() // 2**20}MiB "
            f"reserved={torch.cuda.max_memory_reserved() // 2**20}MiB "
            f"alloc_retries={torch.cuda.memory_stats()['num_alloc_retries']}")
    log(f"final val_loss:{val_loss:.4f} {clock.timed(N)} steps:{N}")


def train(args, rank, world_size, device, log, startup):
    """The run: set-up and warm-up (their phases' seconds added to `startup`), training and validation."""
    run, precompiler = set_up(args, rank, world_size, device, log, startup)
    warm_up(run, precompiler, startup)
    startup["total"] = time.perf_counter() - PROCESS_START
    log("startup: " + ", ".join(f"{k} {v:.1f}s" for k, v in startup.items()))
    if run.cuda:  # a warm start traces none (compile_regions)
        counters = torch._dynamo.utils.counters
        log(f"compile: {counters['stats']['unique_graphs']} graphs traced, "
            f"{counters['dynamo_cache']['dynamo_cache_hit']} compiled functions found in Dynamo's cache")
    train_loop(run, log)


def main(argv):
    """The command line. A UserError ends the run with one line "error: ..." (also in the log) and exit
    status 1, Ctrl-C with one line "interrupted ..." and exit status 130; any other exception keeps its
    traceback."""
    log = None
    try:
        startup = {"imports": time.perf_counter() - PROCESS_START}
        clock = time.perf_counter()
        args = parse_args(argv)
        rank, world_size, device = init_process()
        run_id = f"{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
        log = RunLog(Path("logs") / f"{run_id}.txt" if rank == 0 else None)
        write_log_header(log, run_id, args, world_size, device)
        startup["device and log header"] = time.perf_counter() - clock
        train(args, rank, world_size, device, log, startup)
    except UserError as error:
        if log is not None:
            log(f"error: {error}", echo=False)
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except (Interrupted, KeyboardInterrupt) as stop:
        line = f"interrupted {stop.where if isinstance(stop, Interrupted) else 'before training'}"
        if log is not None:
            log(line, echo=False)
        print(line, file=sys.stderr, flush=True)
        return 130
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------------------------------
# Kernels: attention over packed documents, the embeddings' gradients, the head's loss and its FP8 matmuls,
# orthogonalisation for NorMuon.
# The custom ops are called as torch.ops.train_gpt.NAME: Dynamo's cache (compile_regions) pickles the globals of
# a traced frame, and the Python object that torch.library.custom_op makes cannot be pickled.

def attention(q, k, v, seqs, window, scale):
    """Causal attention inside each sequence of a packed batch, each query seeing its last `window` keys.

    q, k, v: (tokens, heads, head_dim); seqs: the batch's SequenceBoundaries. On CUDA this is
    FlashAttention through PyTorch's varlen_attn; elsewhere a dense masked product (tests, smoke run, and the
    float32 reference of the GPU tests, as FlashAttention takes 16-bit inputs only).
    """
    if q.is_cuda and q.dtype == torch.bfloat16:
        cu, n = seqs.cu_seqlens, seqs.max_len
        return varlen_attn(q, k, v, cu, cu, n, n, scale=scale, window_size=(window - 1, 0))
    return dense_attention(q, k, v, seqs.cu_seqlens, window, scale)


def dense_attention(q, k, v, cu_seqlens, window, scale):
    pos = torch.arange(q.size(0), device=q.device)
    seq_id = torch.searchsorted(cu_seqlens[1:], pos, right=True)
    distance = pos[:, None] - pos[None, :]
    mask = (seq_id[:, None] == seq_id[None, :]) & (distance >= 0) & (distance < window)
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(0, 1)


# The embeddings' and the n-gram cache's gradients (RowLookup): the sorted positions in windows of WINDOW, a
# program each; the columns COLS at a time; its warps
ROW_SUM_TILES = dict(WINDOW=64, COLS=64, num_warps=4)  # 128 columns spilled registers (ptxas, sm_90a)


def add_row_sums(out, grad, sorted_ids, order):
    """out[r] += the sum of the rows t of grad (tokens, dim) whose token ids[t] is r, for (sorted_ids, order) =
    ids.sort(stable=True): each row's sum in float32 (float64 into a float64 out), rounded into out once. Only the
    rows of the tokens present are read and written. For a bf16 grad on CUDA two Triton kernels, deterministic,
    over windows of the sorted positions: each window's sums of its runs of equal ids (a matmul with a 0/1
    matrix), then each run's sums over the windows it spans added into its token's row of out (bf16, or the
    head's float32). Elsewhere (the CPU, float32 models) the same sums through index_add_, the kernels'
    reference."""
    if not out.is_cuda or grad.dtype != torch.bfloat16:
        sums = torch.zeros(out.shape, dtype=torch.promote_types(out.dtype, torch.float32), device=out.device)
        out.copy_(out + sums.index_add_(0, sorted_ids.long(), grad[order].to(sums.dtype)))
        return
    assert out.is_contiguous() and grad.shape[1] == out.shape[1]
    grad, (T, D), tiles = grad.contiguous(), grad.shape, ROW_SUM_TILES
    sums = torch.empty(T, D, dtype=torch.float32, device=grad.device)  # a window's sum of a run, in its first row
    grid = (triton.cdiv(T, tiles["WINDOW"]),)
    window_run_sums_kernel[grid](grad, sorted_ids, order, sums, T, D=D, **tiles)
    run_totals_kernel[grid](sums, sorted_ids, out, T, D=D, **tiles)


if triton is not None:

    @triton.jit
    def window_run_sums_kernel(grad_ptr, sorted_ptr, order_ptr, sums_ptr, T, D: tl.constexpr, WINDOW: tl.constexpr,
                               COLS: tl.constexpr):
        """Each run's sum within this window, in the run's first row there (the window's first row included)."""
        pos = tl.program_id(0) * WINDOW + tl.arange(0, WINDOW)
        inside = pos < T
        ids = tl.load(sorted_ptr + pos, mask=inside, other=-1)
        previous = tl.load(sorted_ptr + pos - 1, mask=inside & (pos > 0), other=-1)
        first = (ids != previous) | (tl.arange(0, WINDOW) == 0)
        run = tl.cumsum(first.to(tl.int32), axis=0)
        # members[j, i]: 1 if row i belongs to the run whose first row in the window is j
        members = ((run[:, None] == run[None, :]) & first[:, None] & inside[None, :]).to(tl.float32)
        tokens = tl.load(order_ptr + pos, mask=inside, other=0).to(tl.int64)
        for c in range(0, D, COLS):
            cols = c + tl.arange(0, COLS)
            rows = tl.load(grad_ptr + tokens[:, None] * D + cols[None, :], mask=inside[:, None] & (cols < D)[None, :],
                           other=0.0)
            # bf16 values and 0/1 are exact in tf32: exact products, float32 sums
            sums = tl.dot(members, rows.to(tl.float32), input_precision="tf32")
            tl.store(sums_ptr + pos.to(tl.int64)[:, None] * D + cols[None, :], sums,
                     mask=(first & inside)[:, None] & (cols < D)[None, :])

    @triton.jit
    def run_totals_kernel(sums_ptr, sorted_ptr, out_ptr, T, D: tl.constexpr, WINDOW: tl.constexpr,
                          COLS: tl.constexpr):
        """Each run that starts in this window: its sums over the windows it spans (only the window's last run
        goes on past it), added into its token's row of out."""
        w = tl.program_id(0)
        pos = w * WINDOW + tl.arange(0, WINDOW)
        inside = pos < T
        ids = tl.load(sorted_ptr + pos, mask=inside, other=-1)
        previous = tl.load(sorted_ptr + pos - 1, mask=inside & (pos > 0), other=-1)
        starts = (ids != previous) & inside
        last = tl.load(sorted_ptr + tl.minimum(w * WINDOW + WINDOW, T) - 1)
        owner = starts & (ids == last)  # the last run's first row, if the run starts in this window
        later = (w + 1) * WINDOW
        goes_on = (tl.max(owner.to(tl.int32), axis=0) > 0) & (tl.load(sorted_ptr + later, mask=later < T,
                                                                       other=-1) == last)
        for c in range(0, D, COLS):
            cols = c + tl.arange(0, COLS)
            totals = tl.load(sums_ptr + pos.to(tl.int64)[:, None] * D + cols[None, :],
                             mask=starts[:, None] & (cols < D)[None, :], other=0.0)
            rest = tl.zeros([COLS], dtype=tl.float32)
            window, going = later, goes_on
            while going:  # WINDOW windows at a time, their first rows
                firsts = window + WINDOW * tl.arange(0, WINDOW)
                same = tl.load(sorted_ptr + firsts, mask=firsts < T, other=-1) == last
                rest += tl.sum(tl.load(sums_ptr + firsts.to(tl.int64)[:, None] * D + cols[None, :],
                                       mask=same[:, None] & (cols < D)[None, :], other=0.0), axis=0)
                window += WINDOW * WINDOW
                going = tl.load(sorted_ptr + window, mask=window < T, other=-1) == last
            totals += tl.where(owner[:, None], rest[None, :], 0.0)
            rows = out_ptr + ids.to(tl.int64)[:, None] * D + cols[None, :]
            mask = starts[:, None] & (cols < D)[None, :]
            totals += tl.load(rows, mask=mask, other=0.0).to(tl.float32)
            tl.store(rows, totals.to(out_ptr.dtype.element_ty), mask=mask)  # to bf16: rounded to nearest even


# Logits are soft-capped to (0, SOFTCAP): SOFTCAP * sigmoid((logit + SOFTCAP_SHIFT) / SOFTCAP_WIDTH). The shift
# makes the cap asymmetric: a zero logit lands at 15.4 of 23, not at the middle (the public record's #54).
SOFTCAP, SOFTCAP_SHIFT, SOFTCAP_WIDTH = 23.0, 5.0, 7.5


def softcap(logits):
    return SOFTCAP * torch.sigmoid((logits.float() + SOFTCAP_SHIFT) / SOFTCAP_WIDTH)


def softcapped_cross_entropy(logits, targets, weights):
    """Several targets per row from soft-capped logits: row i is scored against targets[i, k] (see Head:
    tokens further on, the next token's prefix token; -1 for none) with the loss weights weights[k].
    Returns the summed next-token cross-entropy (targets[:, 0], the loss to report) and the gradient of the
    whole weighted objective, sum_k weights[k] * CE(targets[:, k]), with respect to the raw logits, in
    float32. The FP8 head (Hopper) uses the Triton kernels below instead; this is the path without FP8
    (CPU, older GPUs) and those kernels' reference.

    Soft-capping bounds every logit to (0, SOFTCAP), so exp() cannot overflow in float32 and the
    log-sum-exp needs no running maximum.
    """
    capped = softcap(logits)
    grad = torch.exp(capped)  # turned into the gradient in place: one logits-sized buffer fewer
    row_sums = grad.sum(dim=1, keepdim=True)
    present = targets >= 0
    loss = (torch.log(row_sums) - capped.gather(1, targets[:, :1].long())).sum()
    target_weights = torch.where(present, weights.float(), 0.0)
    grad.mul_(target_weights.sum(dim=1, keepdim=True) / row_sums)
    grad.scatter_add_(1, targets.clamp(min=0).long(), -target_weights)
    # d(capped)/d(logits) = SOFTCAP * sigmoid * (1 - sigmoid) / SOFTCAP_WIDTH
    return loss, grad.mul_((SOFTCAP - capped).mul_(capped).div_(SOFTCAP * SOFTCAP_WIDTH))


HEAD_W_SCALE, HEAD_GRAD_SCALE = 2**-9, 1 / 448  # the FP8 head's fixed scales (see HeadLoss)
# The loss kernels' tiles (rows and columns a program holds at once) and warps, the fastest of those tried on
# an H200 (docs/performance.md): the row sums sweep the vocabulary; the gradient's grid has one program a tile
CE_TILES = dict(sums=dict(ROWS=4, COLS=1024, num_warps=4), gradient=dict(ROWS=64, COLS=128, num_warps=8))

if triton is not None:

    @triton.jit
    def capped_logits(z, CAP: tl.constexpr, SHIFT: tl.constexpr, WIDTH: tl.constexpr):
        """softcap(z) in float32, its sigmoid as (1 + tanh(u / 2)) / 2 with the GPU's one-instruction tanh.
        The loss kernels are bound by the special-function units as much as by memory, and this is one such
        operation per logit where sigmoid's exp and division are two (on an H200 the pair of kernels took 4.5
        ms at 49,152 x 50,304 against 5.6 ms). tanh.approx is within 2^-11 of tanh: about 6 bytes in 100,000 of
        the e5m2 gradient differ from the reference formula's, by one rounding step (2 in 1,000,000 with
        sigmoid), and the loss by 1e-7."""
        u = (z.to(tl.float32) + SHIFT) * (0.5 / WIDTH)
        tanh = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [u], dtype=tl.float32, is_pure=True,
                                         pack=1)
        return (0.5 * CAP) * (1 + tanh)

    @triton.jit
    def cross_entropy_sums_kernel(logits_ptr, targets_ptr, sums_ptr, losses_ptr, T, V: tl.constexpr,
                                  K: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,
                                  CAP: tl.constexpr, SHIFT: tl.constexpr, WIDTH: tl.constexpr):
        """For ROWS rows of logits: the sum of exp(capped) over the vocabulary and the next-token loss
        log(sum) - capped[target] (the first of each row's K targets, always present)."""
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        row_in = rows < T
        row_starts = logits_ptr + rows.to(tl.int64) * V
        acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
        for start in range(0, V, COLS):
            cols = start + tl.arange(0, COLS)
            inside = row_in[:, None] & (cols < V)[None, :]
            z = tl.load(row_starts[:, None] + cols[None, :], mask=inside, other=0.0)
            acc += tl.where(inside, tl.exp(capped_logits(z, CAP, SHIFT, WIDTH)), 0.0)
        row_sums = tl.sum(acc, axis=1)
        targets = tl.load(targets_ptr + rows * K, mask=row_in, other=0)
        target_capped = capped_logits(tl.load(row_starts + targets, mask=row_in, other=0.0), CAP, SHIFT, WIDTH)
        tl.store(sums_ptr + rows, row_sums, mask=row_in)
        tl.store(losses_ptr + rows, tl.log(row_sums) - target_capped, mask=row_in)

    @triton.jit
    def cross_entropy_gradient_kernel(logits_ptr, targets_ptr, weights_ptr, sums_ptr, grad_ptr, grad_t_ptr, T,
                                      inverse_grad_scale, V: tl.constexpr, K: tl.constexpr,
                                      ROWS: tl.constexpr, COLS: tl.constexpr,
                                      CAP: tl.constexpr, SHIFT: tl.constexpr, WIDTH: tl.constexpr):
        """One (ROWS, COLS) tile of the gradient of sum_k weights[k] * CE(targets[:, k]) with respect to the
        raw logits, from the row sums, divided by the gradient's scale, in e5m2, written row-major and
        transposed."""
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.program_id(1) * COLS + tl.arange(0, COLS)
        row_in = rows < T
        inside = row_in[:, None] & (cols < V)[None, :]
        weight_sums = tl.zeros([ROWS], dtype=tl.float32)
        target_mass = tl.zeros([ROWS, COLS], dtype=tl.float32)
        for k in tl.static_range(K):
            target_k = tl.load(targets_ptr + rows * K + k, mask=row_in, other=-1)
            weight_k = tl.load(weights_ptr + k)
            weight_sums += tl.where(target_k >= 0, weight_k, 0.0)
            target_mass += tl.where(cols[None, :] == target_k[:, None], weight_k, 0.0)
        scales = weight_sums / tl.load(sums_ptr + rows, mask=row_in, other=1.0)
        z = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * V + cols[None, :], mask=inside, other=0.0)
        capped = capped_logits(z, CAP, SHIFT, WIDTH)
        slope = capped * (CAP - capped) * (inverse_grad_scale / (CAP * WIDTH))  # d capped / d z, scaled
        grad = (tl.exp(capped) * scales[:, None] - target_mass) * slope
        grad = grad.to(tl.float8e5, fp_downcast_rounding="rtne")  # round to nearest, as torch's casts do
        tile = grad_ptr + rows.to(tl.int64)[:, None] * V + cols[None, :]
        tl.store(tile, grad, mask=inside)
        # The transposed copy is read back from the tile just written (the barrier makes the whole tile's
        # stores visible to every thread): stored straight from registers, with Triton 3.6 on an H100, every
        # fourth vocabulary row of it came out wrong.
        tl.debug_barrier()
        grad = tl.load(tile, mask=inside)
        tl.store(grad_t_ptr + cols.to(tl.int64)[:, None] * T + rows[None, :], tl.trans(grad), mask=tl.trans(inside))


@torch.library.custom_op("train_gpt::softcapped_cross_entropy_fp8", mutates_args=())
def softcapped_cross_entropy_fp8(logits: torch.Tensor, targets: torch.Tensor,
                                 weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """softcapped_cross_entropy's loss, and its gradient divided by HEAD_GRAD_SCALE in e5m2, twice: row-major
    for x's gradient and transposed for w's (_scaled_mm takes FP8 operands only as row-major times
    column-major). Two Triton kernels: the row sums, then the gradient tile by tile, each tile written in both
    layouts while it is in cache. Elsewhere (CPU tests) the reference formula, cast and transposed.

    An opaque operator to torch.compile, so the kernels are built by Triton as in eager mode (Inductor's
    own build of such a kernel failed in Triton's LLVM lowering on torch 2.11)."""
    if not logits.is_cuda:
        loss, grad = softcapped_cross_entropy(logits, targets, weights)
        grad = (grad / HEAD_GRAD_SCALE).to(torch.float8_e5m2)
        return loss, grad, grad.T.contiguous()
    (T, V), K = logits.shape, targets.size(1)
    targets = targets.contiguous()  # the kernels index row * K + k
    sums, losses = (torch.empty(T, dtype=torch.float32, device=logits.device) for _ in range(2))
    grad = torch.empty(T, V, dtype=torch.float8_e5m2, device=logits.device)
    grad_t = torch.empty(V, T, dtype=torch.float8_e5m2, device=logits.device)
    cap = dict(CAP=SOFTCAP, SHIFT=SOFTCAP_SHIFT, WIDTH=SOFTCAP_WIDTH)
    tile = CE_TILES["sums"]
    cross_entropy_sums_kernel[(triton.cdiv(T, tile["ROWS"]),)](logits, targets, sums, losses, T, V=V, K=K,
                                                               **tile, **cap)
    tile = CE_TILES["gradient"]
    cross_entropy_gradient_kernel[(triton.cdiv(T, tile["ROWS"]), triton.cdiv(V, tile["COLS"]))](
        logits, targets, weights, sums, grad, grad_t, T, 1 / HEAD_GRAD_SCALE, V=V, K=K, **tile, **cap)
    return losses.sum(), grad, grad_t


@softcapped_cross_entropy_fp8.register_fake
def _(logits, targets, weights):
    T, V = logits.shape
    return (logits.new_empty((), dtype=torch.float32), logits.new_empty(T, V, dtype=torch.float8_e5m2),
            logits.new_empty(V, T, dtype=torch.float8_e5m2))


def to_fp8(t, scale, dtype=torch.float8_e4m3fn):
    """t / scale in FP8 `dtype` (e4m3, or e5m2 for a gradient), clamped to its range (448, 57344) rather than
    cast out of it."""
    top = torch.finfo(dtype).max
    return (t.float() / scale).clamp(-top, top).to(dtype)


def fp8_scale(bound, dtype=torch.float8_e4m3fn):
    """The scale that maps bound, the largest magnitude a tensor can have, to the FP8 dtype's largest value.
    Never zero: at step 0 the MLP's output projection is all zeros, and its amax scale made 0 / 0."""
    return bound.float().clamp_min(2**-100) / torch.finfo(dtype).max


def to_fp8_at_amax(t):
    """t in e4m3 at the scale of its largest magnitude (a pass over t: for weights), and that scale."""
    scale = fp8_scale(t.detach().abs().amax())
    return to_fp8(t, scale), scale


def normed_e4m3(x):
    """An RMS-normalised x in float8 e4m3 at the fixed scale sqrt(dim) / 448 (|x| <= sqrt(dim)), which needs
    no pass over the data to find its range; and that scale. The input of the head, the MLP and attention."""
    scale = x.size(-1) ** 0.5 / 448
    return to_fp8(x, scale), scale


class NormedLinearFP8(torch.autograd.Function):
    """x @ w.T for an RMS-normalised x (attention's input), the forward product in FP8: x at normed_e4m3's fixed
    scale and w at its amax / 448, neither a pass over an activation. The backward stays in bf16: in FP8 its
    operands need an amax pass and transposed copies, which cost more than the matmuls saved (+11 % a step
    with the q, k, v projection's backward in FP8, session 6)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        (x8, x_scale), (w8, w_scale) = normed_e4m3(x), to_fp8_at_amax(w)
        return torch._scaled_mm(x8, w8.T, scale_a=scalar(x_scale, x), scale_b=w_scale, out_dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.T @ x


class HeadLoss(torch.autograd.Function):
    """The summed soft-capped cross-entropy of the logits x @ w.T.

    The logits' gradient is computed in the forward pass, while the logits are at hand (the loss is
    always the quantity differentiated, so only a scalar factor is left for the backward pass); what
    is kept for the backward pass is that gradient, not the logits.

    With fp8 (Hopper), both matmuls run in float8: x and w in e4m3, the gradient in e5m2, at fixed
    scales, which cost no extra pass over the data. They fit here: x is RMS-normalised, so
    |x| <= sqrt(model_dim); the gradient of a logit lies within the sum of the loss weights (2 at most, see
    Head) of 0, far inside e5m2's range at that scale; and the head's weights start at 0.005 std, far
    below 448 * HEAD_W_SCALE = 0.875 (not checked during training: a larger weight would saturate at that
    value, not overflow).
    """

    @staticmethod
    def forward(ctx, x, w, targets, weights, fp8):
        ctx.fp8 = fp8
        if not fp8:
            w = w.type_as(x)
            loss, grad = softcapped_cross_entropy(x @ w.T, targets, weights)
            ctx.save_for_backward(x, w, grad.type_as(x))
            return loss
        x8, ctx.x_scale = normed_e4m3(x)
        w8 = to_fp8(w, HEAD_W_SCALE)
        logits = torch._scaled_mm(x8, w8.T, scale_a=scalar(ctx.x_scale, x), scale_b=scalar(HEAD_W_SCALE, x),
                                  out_dtype=torch.bfloat16)
        loss, grad, grad_t = torch.ops.train_gpt.softcapped_cross_entropy_fp8(logits, targets, weights)
        ctx.save_for_backward(x8, w8, grad, grad_t)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        if not ctx.fp8:
            x, w, grad = ctx.saved_tensors
            grad = grad * grad_loss.type_as(grad)
            return grad @ w, grad.T @ x, None, None, None  # autograd casts w's gradient to w's dtype
        x, w, grad, grad_t = ctx.saved_tensors
        x_scale = scalar(ctx.x_scale, grad)
        grad_scale = grad_loss.float() * HEAD_GRAD_SCALE
        # _scaled_mm wants its first operand row-major and its second column-major
        grad_x = torch._scaled_mm(grad, w.T.contiguous().T, scale_a=grad_scale, scale_b=scalar(HEAD_W_SCALE, grad),
                                  out_dtype=torch.bfloat16)
        grad_w = torch._scaled_mm(grad_t, x.T.contiguous().T, scale_a=grad_scale, scale_b=x_scale,
                                  out_dtype=torch.float32)
        return grad_x, grad_w, None, None, None


def scalar(value, like):
    """A float32 scalar tensor on `like`'s device: _scaled_mm takes its scales so."""
    return torch.tensor(value, dtype=torch.float32, device=like.device)


# The fused MLP kernel's tile (rows, columns, reduction), warps, pipeline stages and row-tiles per group, by
# operand type: the fastest at 48K tokens of those benchmarks/mlp_kernel.py tried on an H100 (the kernel before
# TMA), and of the persistent TMA kernel's on an H200
MLP_TILES = {
    torch.bfloat16: dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3, GROUP=8),
    torch.float8_e4m3fn: dict(BM=128, BN=256, BK=128, num_warps=8, num_stages=3, GROUP=8),
    torch.float8_e5m2: dict(BM=128, BN=256, BK=128, num_warps=8, num_stages=3, GROUP=8),  # not tuned: e4m3's
}

if triton is not None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def relu_square_epilogue(acc, out_desc, post_desc, copy_desc, copy_t_desc, copy_factor, row, col,
                             BACKWARD: tl.constexpr, OUT: tl.constexpr, COPY: tl.constexpr, COPY_MAX: tl.constexpr):
        """The activation (forward) or its derivative (backward) applied to a finished accumulator and stored:
        with OUT as it is; with COPY in FP8 times copy_factor (1 / its scale), clamped at +-COPY_MAX, row-major
        and transposed."""
        if BACKWARD:
            acc = acc * 2 * tl.sqrt(post_desc.load([row, col]).to(tl.float32))
        else:
            acc = tl.maximum(acc, 0.0)
            acc = acc * acc
        if OUT:
            out_desc.store([row, col], acc.to(out_desc.dtype))
        if COPY:
            copy = tl.minimum(tl.maximum(acc * copy_factor, -COPY_MAX), COPY_MAX).to(copy_desc.dtype)
            copy_desc.store([row, col], copy)
            copy_t_desc.store([col, row], tl.trans(copy))

    @triton.jit
    def relu_square_matmul_kernel(a_desc, b_desc, out_desc, post_desc, copy_desc, copy_t_desc, scale_ptr,
                                  copy_scale_ptr, M, programs, N: tl.constexpr, K: tl.constexpr,
                                  B_ROWS_N: tl.constexpr, BACKWARD: tl.constexpr, SCALED: tl.constexpr,
                                  OUT: tl.constexpr, COPY: tl.constexpr, COPY_MAX: tl.constexpr,
                                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        """(BM, BN) tiles of a @ b with the MLP's activation applied as each tile is written, so that the
        4x-wide activation makes no extra round trip through memory. a: (M, K); b: (N, K) if B_ROWS_N, else
        (K, N); out, post and copy: (M, N); copy_t: (N, M); all row-major, read and written by TMA (rows past M:
        zeros read, nothing written); N and K multiples of BN and BK.
        Forward: relu(a @ b)^2. Backward (a the output's gradient, b the output projection, post the
        forward's activation): (a @ b) * 2 sqrt(post), the pre-activation's gradient, as relu = sqrt(post).
        SCALED: a and b are FP8, a @ b is multiplied by the product of their scales, at scale_ptr. OUT: the result
        is written to out. COPY: it is written in FP8 too, at the scale at copy_scale_ptr, clamped at +-COPY_MAX,
        to copy and transposed to copy_t (the FP8 matmuls that follow take their first operand row-major and
        their second column-major, so each needs its own layout).
        Persistent: each of `programs` programs takes every programs-th tile, its loop over tiles and K
        flattened into one software pipeline, so the next tile's loads run during this one's epilogue; the
        epilogue works on two (BM, BN / 2) halves, which keeps its registers and staging memory small."""
        tiles_m, tiles_n = tl.cdiv(M, BM), N // BN
        copy_factor = 1.0
        if COPY:
            copy_factor = 1 / tl.load(copy_scale_ptr)
        for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, programs, flatten=True):
            # GROUP row-tiles in a row take every column tile in turn: b's columns are reused from L2
            group_start = tile // (GROUP * tiles_n) * GROUP
            group_rows = min(tiles_m - group_start, GROUP)
            row = (group_start + tile % group_rows) * BM
            col = tile % (GROUP * tiles_n) // group_rows * BN
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k in range(0, K, BK):
                b = b_desc.load([col, k]).T if B_ROWS_N else b_desc.load([k, col])
                acc = tl.dot(a_desc.load([row, k]), b, acc)
            if SCALED:
                acc = acc * tl.load(scale_ptr)
            left, right = tl.split(acc.reshape(BM, 2, BN // 2).permute(0, 2, 1))
            relu_square_epilogue(left, out_desc, post_desc, copy_desc, copy_t_desc, copy_factor, row, col, BACKWARD,
                                 OUT, COPY, COPY_MAX)
            relu_square_epilogue(right, out_desc, post_desc, copy_desc, copy_t_desc, copy_factor, row, col + BN // 2,
                                 BACKWARD, OUT, COPY, COPY_MAX)


@functools.cache
def multiprocessors(device):
    """The GPU's streaming multiprocessors: as many programs as the persistent kernels run (4 on the CPU, in
    Triton's interpreter)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def relu_square_matmul(a, b, out=None, post=None, scale=None, copy=None, copy_t=None, copy_scale=None):
    """relu_square_matmul_kernel over the whole product, written to out, or to copy and copy_t (an FP8 tensor of
    out's shape and one of its transpose's, at copy_scale), or to all three: relu(a @ b)^2, or with post,
    (a @ b) * 2 sqrt(post); with scale (FP8 a and b), a @ b times scale first. b: (K, N), row-major or the
    transpose of a row-major (N, K) (an nn.Linear's weight, .T)."""
    (M, K), N = a.shape, b.size(1)
    tile = MLP_TILES[a.dtype]
    BM, BN, BK = tile["BM"], tile["BN"], tile["BK"]
    rows_n = b.stride(0) == 1
    a_desc = TensorDescriptor.from_tensor(a.contiguous(), [BM, BK])
    b_desc = TensorDescriptor.from_tensor(b.T, [BN, BK]) if rows_n else TensorDescriptor.from_tensor(b, [BK, BN])
    # what a path does not read or write (the forward's post, the bf16 kernel's scale, absent outputs) takes
    # any descriptor or pointer
    out_desc, copy_desc = (None if t is None else TensorDescriptor.from_tensor(t, [BM, BN // 2]) for t in (out, copy))
    out_desc = out_desc or copy_desc
    copy_t_desc = out_desc if copy_t is None else TensorDescriptor.from_tensor(copy_t, [BN // 2, BM])
    post_desc = out_desc if post is None else TensorDescriptor.from_tensor(post, [BM, BN // 2])
    some_tensor = a if scale is None else scale
    programs = min(multiprocessors(a.device), triton.cdiv(M, BM) * (N // BN))
    copy_max = torch.finfo(copy.dtype).max if copy is not None else 0.0
    relu_square_matmul_kernel[(programs,)](a_desc, b_desc, out_desc, post_desc, copy_desc or out_desc, copy_t_desc,
                                           some_tensor, some_tensor if copy is None else copy_scale, M, programs,
                                           N=N, K=K, B_ROWS_N=rows_n, BACKWARD=post is not None,
                                           SCALED=scale is not None, OUT=out is not None, COPY=copy is not None,
                                           COPY_MAX=copy_max, **tile)


def fused_mlp_kernels(a, b):
    """Whether a @ b (the MLP's) runs on the Triton kernel: bf16 or FP8 on a GPU with TMA (Hopper on), in
    whole tiles of N and K. Elsewhere (CPU tests, the float32 model of a GPU test, odd widths, older GPUs) the
    same formulas in PyTorch."""
    tile = MLP_TILES.get(a.dtype)
    # FP8 products are also written transposed, whose rows (a's row count, in bytes) TMA needs 16-byte aligned
    return (triton is not None and a.is_cuda and tile is not None and a.size(1) % tile["BK"] == 0
            and b.size(1) % tile["BN"] == 0 and (a.element_size() > 1 or a.size(0) % 16 == 0)
            and torch.cuda.get_device_capability(a.device) >= (9, 0))


@torch.library.custom_op("train_gpt::relu_square_linear", mutates_args=())
def relu_square_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """relu(x @ w.T)^2, the MLP's hidden activation. An operator opaque to torch.compile, as the head's."""
    if not fused_mlp_kernels(x, w.T):
        return F.relu(F.linear(x, w)).square()
    post = x.new_empty(x.size(0), w.size(0))
    relu_square_matmul(x, w.T, post)
    return post


@relu_square_linear.register_fake
def _(x, w):
    return x.new_empty(x.size(0), w.size(0))


def fp8_and_transposed(t, rows, cols, dtype):
    """Two empty FP8 tensors on t's device: (rows, cols) and its transpose's shape."""
    return t.new_empty(rows, cols, dtype=dtype), t.new_empty(cols, rows, dtype=dtype)


def to_fp8_both_layouts(t, scale, dtype):
    """to_fp8 of t, and the same transposed (contiguous): what the fused kernel writes, in PyTorch."""
    t8 = to_fp8(t, scale, dtype)
    return t8, t8.T.contiguous()


@torch.library.custom_op("train_gpt::relu_square_linear_fp8", mutates_args=())
def relu_square_linear_fp8(x8: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor,
                           post_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The activation of FP8 operands, relu(x8 @ w8.T * scale)^2 (scale: the product of their scales), in e4m3
    at post_scale, clamped at 448: row-major (the output projection's operand, and what the backward pass
    reads) and transposed (the projection's weight gradient's). There is no bf16 copy: writing one doubled
    the bytes the kernel writes, and its time was the writes'."""
    if not fused_mlp_kernels(x8, w8.T):
        post = F.relu(F.linear(x8.float(), w8.float()) * scale).square()
        return to_fp8_both_layouts(post, post_scale, torch.float8_e4m3fn)
    post8, post8_t = fp8_and_transposed(x8, x8.size(0), w8.size(0), torch.float8_e4m3fn)
    relu_square_matmul(x8, w8.T, scale=scale, copy=post8, copy_t=post8_t, copy_scale=post_scale)
    return post8, post8_t


@relu_square_linear_fp8.register_fake
def _(x8, w8, scale, post_scale):
    return fp8_and_transposed(x8, x8.size(0), w8.size(0), torch.float8_e4m3fn)


@torch.library.custom_op("train_gpt::relu_square_linear_backward", mutates_args=())
def relu_square_linear_backward(grad_out: torch.Tensor, w: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """The gradient of relu_square_linear's input product, from the gradient of the output projection
    grad_out @ w (w: the projection's weight) and the activation post it produced."""
    if not fused_mlp_kernels(grad_out, w):
        return (grad_out @ w) * 2 * post.sqrt()
    grad_pre = torch.empty_like(post)
    relu_square_matmul(grad_out, w, grad_pre, post)
    return grad_pre


@relu_square_linear_backward.register_fake
def _(grad_out, w, post):
    return torch.empty_like(post)


@torch.library.custom_op("train_gpt::relu_square_linear_backward_fp8", mutates_args=())
def relu_square_linear_backward_fp8(grad_out8: torch.Tensor, w8_t: torch.Tensor, post8: torch.Tensor,
                                    scale: torch.Tensor, grad_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """relu_square_linear_backward of FP8 operands (grad_out8 in e5m2; w8_t, the projection's e4m3 weight
    transposed, so that the kernel reads it along its reduction dimension, as FP8 tensor cores need; post8, the
    forward's e4m3 activation): the pre-activation's gradient (grad_out8 @ w8_t.T * scale) * 2 sqrt(post8) in
    e5m2 at grad_scale, row-major (x's gradient's operand) and transposed (fc's gradient's); no bf16 copy.
    scale: the product of the operands' scales and of the square root of post8's."""
    if not fused_mlp_kernels(grad_out8, w8_t.T):
        grad_pre = (grad_out8.float() @ w8_t.float().T) * scale * 2 * post8.float().sqrt()
        return to_fp8_both_layouts(grad_pre, grad_scale, torch.float8_e5m2)
    grad_pre8, grad_pre8_t = fp8_and_transposed(post8, *post8.shape, torch.float8_e5m2)
    relu_square_matmul(grad_out8, w8_t.T, post=post8, scale=scale, copy=grad_pre8, copy_t=grad_pre8_t,
                       copy_scale=grad_scale)
    return grad_pre8, grad_pre8_t


@relu_square_linear_backward_fp8.register_fake
def _(grad_out8, w8_t, post8, scale, grad_scale):
    return fp8_and_transposed(post8, *post8.shape, torch.float8_e5m2)


class ReluSquareMLP(torch.autograd.Function):
    """relu(x @ fc.T)^2 @ proj.T, the activation applied inside the matmuls' kernels both ways. What is kept
    for the backward pass is the activation relu(.)^2 alone: relu(.) is its square root.

    With fp8 (Hopper), all six matmuls run in float8 (#84 the first, #90 the forward, #92 all), each operand at
    a scale found without a pass over a 4x-wide tensor (such passes, and transposing copies, cost more than FP8
    saved: 5 % slower per step in an A/B of the backward with them):
    - x @ fc.T: x in e4m3 at the fixed scale sqrt(dim) / 448, as x is RMS-normalised (|x| <= sqrt(dim)); fc
      at amax(|fc|) / 448, taken afresh at every call.
    - post @ proj.T: the kernel writes post in e4m3 alone, at a scale that no value can exceed:
      (x . fc_i)^2 <= |x|^2 |fc_i|^2 <= dim max_i |fc_i|^2 (Cauchy-Schwarz; fc's row norms are a pass over the
      weight only), and transposed, for proj's gradient. proj at amax(|proj|) / 448. The e4m3 post is what
      is kept for the backward pass too: relu(.) = sqrt(post) within half of e4m3's rounding, about 3 %, where
      post is in e4m3's normal range. The loose scale puts small activations among its subnormals, coarser, or
      at zero, where their derivative is small too and the forward's product has already lost them.
    - The backward pass: the output's gradient in e5m2 at its amax (a pass over a 1x-wide tensor), row-major
      and transposed; the fused kernel writes the pre-activation's gradient in e5m2 in both layouts, at a
      bound that no value can exceed either: |grad_out_t . proj_j| 2 sqrt(post_tj) <= |grad_out_t| |proj_j|
      2 sqrt(dim max_i |fc_i|^2) (proj_j: proj's columns). A loose bound costs e5m2 nothing but range, of
      which it has 2^31. Then x's, fc's and proj's gradients, each one _scaled_mm.
    MLP validates without FP8."""

    @staticmethod
    def forward(ctx, x, fc, proj, fp8):
        ctx.fp8 = fp8
        if not fp8:
            post = torch.ops.train_gpt.relu_square_linear(x, fc)
            ctx.save_for_backward(x, fc, proj, post)
            return F.linear(post, proj)
        (x8, ctx.x_scale), (fc8, fc_scale) = normed_e4m3(x), to_fp8_at_amax(fc)
        post_scale = fp8_scale(fc.detach().float().square().sum(1).amax() * x.size(-1))
        post8, post8_t = torch.ops.train_gpt.relu_square_linear_fp8(x8, fc8, ctx.x_scale * fc_scale, post_scale)
        proj8, proj_scale = to_fp8_at_amax(proj)
        # _scaled_mm wants its first operand row-major and its second column-major: the transpose of proj8
        out = torch._scaled_mm(post8, proj8.T, scale_a=post_scale, scale_b=proj_scale, out_dtype=torch.bfloat16)
        proj_norm = proj.detach().float().norm(dim=0).amax()  # its columns' largest norm
        ctx.save_for_backward(x8, fc8, proj8, post8, post8_t, fc_scale, post_scale, proj_scale, proj_norm)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        if not ctx.fp8:
            x, fc, proj, post = ctx.saved_tensors
            grad_pre = torch.ops.train_gpt.relu_square_linear_backward(grad_out, proj, post)
            return grad_pre @ fc, grad_pre.T @ x, grad_out.T @ post, None
        x8, fc8, proj8, post8, post8_t, fc_scale, post_scale, proj_scale, proj_norm = ctx.saved_tensors
        out_scale = fp8_scale(grad_out.abs().amax(), torch.float8_e5m2)
        grad_out8, grad_out8_t = to_fp8_both_layouts(grad_out, out_scale, torch.float8_e5m2)
        pre_bound = grad_out.float().norm(dim=1).amax() * proj_norm * 2 * (post_scale * 448).sqrt()
        pre_scale = fp8_scale(pre_bound, torch.float8_e5m2)
        grad_pre8, grad_pre8_t = torch.ops.train_gpt.relu_square_linear_backward_fp8(
            grad_out8, proj8.T.contiguous(), post8, out_scale * proj_scale * post_scale.sqrt(), pre_scale)
        x_scale, bf16 = scalar(ctx.x_scale, grad_out), torch.bfloat16
        grad_x = torch._scaled_mm(grad_pre8, fc8.T.contiguous().T, scale_a=pre_scale, scale_b=fc_scale, out_dtype=bf16)
        grad_fc = torch._scaled_mm(grad_pre8_t, x8.T.contiguous().T, scale_a=pre_scale, scale_b=x_scale,
                                   out_dtype=bf16)
        grad_proj = torch._scaled_mm(grad_out8_t, post8_t.T, scale_a=out_scale, scale_b=post_scale, out_dtype=bf16)
        return grad_x, grad_fc, grad_proj, None


# Polar Express (Amsel et al., 2025): five odd quintics a x + b x^3 + c x^5, each fitted to the singular
# values the steps before it leave, drive every singular value of a normalised matrix towards 1.
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def orthogonalize(G):
    """The nearest semi-orthogonal matrix to each G[..., :, :], roughly, in bf16 (Polar Express). Each
    quintic's sums run in its matmuls' epilogues (baddbmm's beta and alpha), in float32: as bf16 multiplies
    and adds of their own they were most of the 3.3 ms of elementwise kernels in NorMuon's 9.2 ms step on an
    H100 (one GPU, 49K tokens a step)."""
    X = G.bfloat16().reshape(-1, *G.shape[-2:])
    wide = X.size(-2) <= X.size(-1)
    if not wide:
        X = X.mT
    X = X / (1.02 * X.norm(dim=(-2, -1), keepdim=True) + 1e-6)  # singular values below 1, bf16 rounding too
    for a, b, c in POLAR_EXPRESS:
        A = X @ X.mT
        X = torch.baddbmm(X, torch.baddbmm(A, A, A, beta=b, alpha=c), X, beta=a)  # a X + (b A + c A A) X
    return (X if wide else X.mT).reshape(G.shape)


def normalize_neurons(X, second_moment, beta=0.9):
    """NorMuon: divide each neuron's row of X (a column, for a wide matrix) by the root of its running mean
    square, then give X back its Frobenius norm. Orthogonalisation leaves some neurons with much larger
    updates than others; this evens them out. second_moment is updated in place."""
    rows, cols = X.shape[-2:]
    X = X.float()
    second_moment.lerp_(X.square().mean(dim=-1 if rows >= cols else -2, keepdim=True), 1 - beta)
    Y = X * second_moment.clamp_min(1e-30).rsqrt()
    return Y * (X.norm(dim=(-2, -1), keepdim=True) / Y.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-30))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
