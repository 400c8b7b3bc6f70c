"""Make a diagnostic copy of a train_gpt.py: print every micro-step that is not a replay of an existing graph, and
every optimizer-graph key that is not replayed, with the training step."""
import sys
src, dst = sys.argv[1], sys.argv[2]
lines = open(src).read().split("\n")
out = []
for line in lines:
    out.append(line)
    if line.startswith("        key = (tokens, micro.seqs.max_len"):
        out.append("        if not (key in self.graphs and n <= tokens // GRAPH_TOKENS_PER_SEQ):")
        out.append("            print(f'DIAG micro step {DIAG[0]} key {key} n {n} seen {key in self.seen}', flush=True)")
    if line.startswith("    def __call__(self, key, work, *args):"):
        out.append("        if self.cuda and key not in self.graphs:")
        out.append("            print(f'DIAG opt step {DIAG[0]} key {key} seen {key in self.seen}', flush=True)")
    if line.startswith("    state = step_state(step, args)") and "train_step" in "\n".join(out[-15:]):
        out.append("    DIAG[0] = step")
text = "\n".join(out).replace("\nclass MicroStepGraphs:", "\nDIAG = [None]\n\n\nclass MicroStepGraphs:")
assert text.count("DIAG") == 6, text.count("DIAG")
open(dst, "w").write(text)
