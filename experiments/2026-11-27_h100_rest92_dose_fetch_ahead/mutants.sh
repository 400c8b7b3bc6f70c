#!/bin/bash
# The stream test, then each of three mutants of train_gpt.py (one wait removed) against it: each must fail.
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "stream" 2>&1 | tail -1
for m in 1 2 3; do rm -rf /tmp/m$m; mkdir /tmp/m$m; cp -r train_gpt.py tests data /tmp/m$m/; done
sed -i 's/            torch.cuda.current_stream().wait_event(self.done)/            pass/' /tmp/m1/train_gpt.py
python3 - <<'P'
s = open("/tmp/m2/train_gpt.py").read()
old = "        self.stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.stream):"
assert s.count(old) == 1
open("/tmp/m2/train_gpt.py", "w").write(s.replace(old, "        with torch.cuda.stream(self.stream):"))
P
sed -i 's/            torch.cuda.current_stream().wait_event(copied)/            pass/' /tmp/m3/train_gpt.py
ROOT=$(pwd)
for m in 1 2 3; do (cd /tmp/m$m; echo "mutant $m: $(diff $ROOT/train_gpt.py train_gpt.py 2>/dev/null | grep -c '^<') $(timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k stream 2>&1 | tail -1)"); done
