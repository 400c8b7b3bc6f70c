"""Session 34, on the CPU: orthogonalize (Polar Express in bf16) against float64, as it is and with each quintic's
a X term folded into its outer matmul ((a I + b A + c A A) X, the sum rounded to bf16), which would spare the copy
of X into baddbmm's output (the GPU's DtoD copies in NorMuon's update graphs, README here). Prints each variant's
largest relative error over a stack of random matrices with some low-rank structure.

    python3 polar_express_folded.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())))
from train_gpt import POLAR_EXPRESS, orthogonalize  # noqa: E402

torch.manual_seed(0)

def reference(G):
    X = G.double().reshape(-1, *G.shape[-2:])
    wide = X.size(-2) <= X.size(-1)
    if not wide: X = X.mT
    X = X / (1.02 * X.norm(dim=(-2, -1), keepdim=True) + 1e-6)
    for a, b, c in POLAR_EXPRESS:
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return (X if wide else X.mT).reshape(G.shape)

def folded(G):
    X = G.bfloat16().reshape(-1, *G.shape[-2:])
    wide = X.size(-2) <= X.size(-1)
    if not wide: X = X.mT
    X = X / (1.02 * X.norm(dim=(-2, -1), keepdim=True) + 1e-6)
    eye = torch.eye(X.size(-2), dtype=torch.float32)
    for a, b, c in POLAR_EXPRESS:
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)
        X = (B.float() + a * eye).bfloat16() @ X
    return (X if wide else X.mT).reshape(G.shape)

for shape in [(4, 768, 768), (2, 768, 3072), (2, 3072, 768), (4, 256, 1024)]:
    G = torch.randn(shape)
    G = G + 0.3 * torch.randn(shape[0], shape[1], 1) * torch.randn(shape[0], 1, shape[2])  # some low-rank structure
    ref = reference(G)
    for name, f in (("main", orthogonalize), ("folded", folded)):
        out = f(G).double()
        err = ((out - ref).norm(dim=(-2, -1)) / ref.norm(dim=(-2, -1))).max().item()
        print(shape, name, f"rel err {err:.4f}")
