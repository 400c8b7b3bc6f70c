"""Which tensors does autograd sum between regions? python3 autograd_adds_probe.py (CPU, from anywhere).
The default layer string at the smoke size, each Block part and the head compiled with aot_eager (one autograd
node per region, as on the GPU), one micro-batch; prints each tensor that two or more autograd nodes read: how
many such tensors, their producer, its output index, a parameter's shape, and the readers. Each extra reader costs
an add of the tensor's size in the backward pass."""
import collections
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import train_gpt as tg  # noqa: E402
from test_model import packed_batch  # noqa: E402

args = tg.parse_args(["--smoke", "--layers", "LssLMSM-sMl"])
torch.manual_seed(0)
model = tg.GPT(args, fp8=False)
for block in model.blocks:
    for part in ("before_attention", "after_attention", "mix_and_mlp"):
        setattr(block, part, types.MethodType(torch.compile(getattr(tg.Block, part), backend="aot_eager", dynamic=False), block))
model.head.forward = types.MethodType(torch.compile(tg.Head.forward, backend="aot_eager", dynamic=False), model.head)
state = tg.step_state(0, args)
model.prepare(state)
loss = model(packed_batch([0, 100, 256]), state)
consumers = collections.defaultdict(list)
seen, stack = set(), [loss.grad_fn]
while stack:
    node = stack.pop()
    if node is None or node in seen:
        continue
    seen.add(node)
    for child, k in node.next_functions:
        if child is not None:
            consumers[(child, k)].append(type(node).__name__)
            stack.append(child)
rows = collections.Counter()
for (node, k), readers in consumers.items():
    if len(readers) > 1:
        name = type(node).__name__
        what = getattr(node, "variable", None)
        shape = tuple(what.shape) if what is not None else None
        rows[(name, k, shape, tuple(sorted(readers)))] += 1
for (name, k, shape, readers), n in sorted(rows.items(), key=lambda r: -r[1]):
    print(n, name, k, shape, readers)
