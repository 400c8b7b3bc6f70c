#!/usr/bin/env bash
# The record run: fetch the FineWeb shards if they are missing, then train on every GPU of this machine.
# Without a GPU: the CPU smoke run on the bundled sample shards instead (train_gpt.py --smoke).
#   ./run.sh                                     the record settings
#   ./run.sh --train_files 'other/train_*.bin'   your own shards: nothing is downloaded
set -euo pipefail
cd "$(dirname "$0")"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -eq 0 ]; then
  echo "run.sh: no NVIDIA GPU found: running the CPU smoke run on data/sample instead (train_gpt.py --smoke)" >&2
  exec python3 train_gpt.py --smoke "$@"
fi
if [[ " $* " != *" --train_files "* ]]; then
  python3 data/cached_fineweb10B.py 8  # 800M train tokens: the record reads about 670M
fi
exec torchrun --standalone --nproc_per_node="$gpus" train_gpt.py "$@"
