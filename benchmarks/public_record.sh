#!/bin/bash
# The public record's script on the proxy corpus, one GPU, for the device machine: a yardstick, not our code.
#
#   mkdir -p scratch/anchor && cp ../shared/anchors/modded-nanogpt-f411b3d/*.{py,pt} scratch/anchor/   # here, once
#   bash benchmarks/public_record.sh start [SCHEDULED EXTENSION]    # on the device (carry .proxy and scratch)
#   bash benchmarks/public_record.sh collect [SECONDS]              # again before the machine idles (30 s)
#
# `start` returns at once: the script compiles for about 11 minutes before its first step, longer than one
# device call, so it runs in its own session from /tmp/public_record, outside the synced tree. It reads the
# proxy train shards linked 12 times (4 passes; it has no wrap-around) and the val shard written twice (its
# loader may read past the first copy). SCHEDULED and EXTENSION (default 187 and 2, the proxy's scaling of
# its 1270 + 15) set its steps, and its NorMuon momentum schedule, which it counts in steps (warm-up over 300,
# cool-down over the last 50), is scaled with them: 2026-11-25's run at 187 + 2 left it unscaled.
# `collect` waits up to SECONDS (default 500) for the end, prints the validation lines, and copies what the
# script printed after its own source (the full log embeds the public source) to $OUT/public_record_output.log.
set -u
DIR=/tmp/public_record
case "${1:-}" in
  start)
    scheduled=${2:-187}
    extension=${3:-2}
    rm -rf "$DIR" && mkdir -p "$DIR/data/fineweb10B" "$DIR/proxy" "$DIR/logs"
    cp scratch/anchor/* "$DIR/" || { echo "error: scratch/anchor is empty: copy the anchor there first" >&2; exit 1; }
    # the project's own pieces: the proxy's decompression, the shard reader (it validates) and writer
    python3 - "$DIR" <<'PY'
import sys
from pathlib import Path
import numpy as np
sys.path[:0] = ["benchmarks", "data", "."]
from proxy_record import decompress
from fineweb import write_shard
from train_gpt import read_shard
root = Path(sys.argv[1])
decompress(Path(".proxy"), root / "proxy")
for i in range(12):  # 4 passes over the 3 train shards: the script has no wrap-around
    (root / f"data/fineweb10B/fineweb_train_{i + 1:06d}.bin").symlink_to(root / f"proxy/proxy_train_{i % 3 + 1:06d}.bin")
val = read_shard(root / "proxy/proxy_val_000000.bin").numpy()
write_shard(root / "data/fineweb10B/fineweb_val_000000.bin", np.concatenate([val, val]))
PY
    warmup=$(( (300 * scheduled + 635) / 1270 ))
    cooldown=$(( (50 * (scheduled + extension) + 642) / 1285 ))
    sed -i -e "s/num_scheduled_iterations: int = [0-9]*/num_scheduled_iterations: int = $scheduled/" \
      -e "s/num_extension_iterations: int = [0-9]*/num_extension_iterations: int = $extension/" \
      -e "s/muon_warmup_steps=300, muon_cooldown_steps=50/muon_warmup_steps=$warmup, muon_cooldown_steps=$cooldown/" \
      "$DIR/train_gpt.py"
    grep -c "num_scheduled_iterations: int = $scheduled\|muon_warmup_steps=$warmup" "$DIR/train_gpt.py" | grep -q 2 \
      || { echo "error: the anchor's schedule lines were not found: patch it by hand" >&2; exit 1; }
    echo "start $scheduled + $extension steps, momentum warm-up $warmup, cool-down $cooldown, $(date +%T)" > "$DIR/progress"
    (cd "$DIR" && DATA_PATH="$DIR" setsid bash -c \
      'torchrun --standalone --nproc_per_node=1 train_gpt.py > out.txt 2>&1; echo "done rc=$? $(date +%T)" >> progress' \
      > /dev/null 2>&1 < /dev/null &)
    ;;
  collect)
    if [ ! -f "$DIR/progress" ]; then
      echo "error: no $DIR/progress here; this machine never ran 'start'" >&2
      exit 1
    fi
    for _ in $(seq 1 "${2:-500}"); do
      grep -q "^done" "$DIR/progress" && break
      sleep 1
    done
    cat "$DIR/progress"
    grep -h "val_loss\|peak memory\|Error" "$DIR/out.txt" | tail -12
    log=$(ls "$DIR"/logs/*.txt 2>/dev/null | head -1)
    if [ -n "$log" ]; then
      mkdir -p "$OUT" && sed -n '/^Running Python/,$p' "$log" > "$OUT/public_record_output.log"
    fi
    ;;
  *)
    echo "usage: $0 start [SCHEDULED EXTENSION] | collect [SECONDS]" >&2
    exit 2
    ;;
esac
