"""rest92: #92's length caps (3072 from stage 2 on) and its prefix-weight steps (0.20/0.15/0.10/0.05 over the
quarters of stage 1, the MTP weights' line cut with them) on main's train_gpt.py."""
import re, sys
src = open("train_gpt.py").read()
old_stage1 = """    Stage(end=2 / 3, batch=Fraction(2, 3), max_seq_len=2048, windows=(3, 7), lr_mul=1.52, mtp=((1, 1), (0.5, 0)),
          prefix=((0.25, 0),), candidates=10240),
"""
assert old_stage1 in src
quarters = "".join(
    f"    Stage(end=1 / 3 + {k + 1} / 12, batch=Fraction(2, 3), max_seq_len=2048, windows=(3, 7), lr_mul=1.52, "
    f"mtp=((1, 1), ({0.5 * (1 - k / 4)}, {0.5 * (1 - (k + 1) / 4)})), prefix=(({p}, {p}),), candidates=10240),\n"
    for k, p in enumerate((0.20, 0.15, 0.10, 0.05)))
src = src.replace(old_stage1, quarters)
head, sep, tail = src.partition("TRAINING_STAGES = (")
body, sep2, rest = tail.partition("\n)\n")
lines = body.split("\n")
out = []
for line in lines:
    if "end=0.822" in line or "end=0.943" in line or "end=1.0," in line or "end=math.inf" in line:
        assert "max_seq_len=2048" in line, line
        line = line.replace("max_seq_len=2048", "max_seq_len=3072")
    out.append(line)
src = head + sep + "\n".join(out) + sep2 + rest
assert src.count("max_seq_len=3072") == 4, src.count("max_seq_len=3072")
open(sys.argv[1], "w").write(src)
