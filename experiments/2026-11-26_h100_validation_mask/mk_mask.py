"""scratch/train_gpt_mask.py: train_gpt.py that, after the final (masked) validation, validates the same weights
again without the mask and logs it: the mask's gain in the same run."""
from pathlib import Path
s = Path("train_gpt.py").read_text()
old = '''                log(f"step:{step}/{N} val_loss:{val_loss:.4f} {clock.timed(step)}")
'''
new = old + '''                if step == N and mask is not None:
                    run.model.head.never_follows.zero_()
                    log(f"unmasked val_loss:{run.evaluate(step):.4f}")
'''
assert s.count(old) == 1
Path("scratch/train_gpt_mask.py").write_text(s.replace(old, new))
