"""scratch/train_gpt_l92.py: train_gpt.py with #92's mixed-width attention and its parallel MLP, for an A/B.
Layers 0, 2 and 5: queries and keys 64 wide (values 128), zero-padded to 128 for varlen_attn (the same scores);
layers 1 and 8: queries, keys and values 64 wide (6 heads of 64); both with a fully rotating 64-dim rotary at
attention scale 0.13 and no YaRN (short windows only). Layer 8: a second MLP in parallel with attention, on
attention's normalised input. Layers 3 and 10 as before."""
from pathlib import Path

s = Path("train_gpt.py").read_text()


def edit(old, new, count=1):
    global s
    assert s.count(old) == count, (old[:70], s.count(old))
    s = s.replace(old, new)


edit('''class Attention(nn.Module):
    def __init__(self, dim, head_dim, rotary, key_offset=False, value_embed=False):
        super().__init__()
        self.num_heads, self.head_dim = dim // head_dim, head_dim
        self.key_offset = key_offset
        bound = 0.5 * 3**0.5 * dim**-0.5
        self.qkv = nn.Parameter(torch.empty(3, dim, dim).uniform_(-bound, bound))  # NorMuon sees q, k, v apart''',
'''class NarrowRotary(nn.Module):
    """Rotary on every dimension pair of a 64-wide head, fixed (no YaRN: short windows only), scale 0.13."""

    def __init__(self, head_dim, max_len):
        super().__init__()
        freqs = (1 / 1024) ** torch.linspace(0, 1, head_dim // 2)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.scale = 0.13

    def forward(self, x):
        cos, sin = self.cos[: x.size(0), None, :], self.sin[: x.size(0), None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, head_dim, rotary, key_offset=False, value_embed=False, widths=None):
        super().__init__()
        self.num_heads, self.head_dim = dim // head_dim, head_dim
        self.key_offset = key_offset
        bound = 0.5 * 3**0.5 * dim**-0.5
        self.widths = widths  # None, or (q/k width, v width) per head
        if widths is None:
            self.qkv = nn.Parameter(torch.empty(3, dim, dim).uniform_(-bound, bound))  # NorMuon sees q, k, v apart
        else:
            qk, vw = widths
            self.qk = nn.Parameter(torch.empty(2, self.num_heads * qk, dim).uniform_(-bound, bound))
            self.v = nn.Parameter(torch.empty(self.num_heads * vw, dim).uniform_(-bound, bound))''')
edit('''        self.out = CastedLinear(dim, dim)  # not zero, as the public record's #64: attention learns from step 0''',
'''        self.out = CastedLinear(self.num_heads * (widths or (0, head_dim))[1], dim)''')
edit('''        T = x.size(0)
        qkv = F.linear(x, self.qkv.flatten(0, 1).type_as(x)).view(T, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.chunk(3, dim=1)
        q, k = self.rotary(rms_norm(q)), self.rotary(rms_norm(k))''', '''        T = x.size(0)
        if self.widths is None:
            qkv = F.linear(x, self.qkv.flatten(0, 1).type_as(x)).view(T, 3 * self.num_heads, self.head_dim)
            q, k, v = qkv.chunk(3, dim=1)
        else:
            qk = F.linear(x, self.qk.flatten(0, 1).type_as(x)).view(T, 2 * self.num_heads, self.widths[0])
            q, k = qk.chunk(2, dim=1)
            v = F.linear(x, self.v.type_as(x)).view(T, self.num_heads, self.widths[1])
        q, k = self.rotary(rms_norm(q)), self.rotary(rms_norm(k))''')
edit('''            v = v + gate.unsqueeze(-1) * value_embed.view_as(v)
        return q, k, v''', '''            v = v + gate.unsqueeze(-1) * value_embed[:, : v.size(1) * v.size(2)].view_as(v)
        if q.size(-1) < v.size(-1):  # varlen_attn takes one width: zeros add nothing to the scores
            q, k = (F.pad(t, (0, v.size(-1) - t.size(-1))) for t in (q, k))
        return q, k, v''')
edit('''    def __init__(self, dim, head_dim, rotary, fp8, attention=True, long_window=False, value_embed=False, mlp=True):
        super().__init__()
        self.residual_mix = nn.Parameter(torch.tensor([1.0, 0.0]))  # residual stream vs. the embedding x0
        self.attn = Attention(dim, head_dim, rotary, long_window, value_embed) if attention else None
        self.mlp = MLP(dim, fp8) if mlp else None''', '''    def __init__(self, dim, head_dim, rotary, fp8, attention=True, long_window=False, value_embed=False, mlp=True,
                 widths=None, parallel_mlp=False):
        super().__init__()
        self.residual_mix = nn.Parameter(torch.tensor([1.0, 0.0]))  # residual stream vs. the embedding x0
        self.attn = Attention(dim, head_dim, rotary, long_window, value_embed, widths) if attention else None
        self.mlp = MLP(dim, fp8) if mlp else None
        self.mlp2 = MLP(dim, fp8) if parallel_mlp else None''')
edit('''    def after_attention(self, x, normed, y, v, ngram=None, weight=None):
        x = x + self.attn.finish(normed, y, v)''', '''    def after_attention(self, x, normed, y, v, ngram=None, weight=None):
        x = x + self.attn.finish(normed, y, v)
        if self.mlp2 is not None:
            x = x + self.mlp2(normed)''')
edit('''        self.rotary = Rotary(args.head_dim, max_len=max(args.micro_batch_tokens, args.val_seq_tokens))''',
'''        self.rotary = Rotary(args.head_dim, max_len=max(args.micro_batch_tokens, args.val_seq_tokens))
        self.narrow_rotary = NarrowRotary(64, max_len=max(args.micro_batch_tokens, args.val_seq_tokens))
        narrow = {0: (64, 128), 2: (64, 128), 5: (64, 128), 1: (64, 64), 8: (64, 64)}''')
edit('''        self.blocks = nn.ModuleList(Block(dim, args.head_dim, self.rotary, fp8, attention=letter in "LlSs",
                                          long_window=i in self.long_layers, value_embed=i in self.value_layers,
                                          mlp=letter != "-") for i, letter in enumerate(args.layers))''',
'''        self.blocks = nn.ModuleList(Block(dim, args.head_dim, self.narrow_rotary if i in narrow else self.rotary, fp8,
                                          attention=letter in "LlSs",
                                          long_window=i in self.long_layers, value_embed=i in self.value_layers,
                                          mlp=letter != "-", widths=narrow.get(i), parallel_mlp=i == 8)
                                    for i, letter in enumerate(args.layers))''')
edit('''    ("blocks.*.mlp.proj.weight", ParamConfig("normuon", lr_mul=4.0, averaged=True)),''',
'''    ("blocks.*.mlp.proj.weight", ParamConfig("normuon", lr_mul=4.0, averaged=True)),
    ("blocks.*.mlp2.proj.weight", ParamConfig("normuon", lr_mul=4.0, averaged=True)),
    ("blocks.*.attn.qk", ParamConfig("normuon", averaged=True)),
    ("blocks.*.attn.v", ParamConfig("normuon", averaged=True)),''')
Path("scratch/train_gpt_l92.py").write_text(s)
