#!/bin/bash
# Proxy A/B runs that outlast one device call (10 minutes), for the device machine.
#
#   bash benchmarks/background_ab.sh start main:2 backout:1 main:3:--scheduled_steps=250    # returns at once
#   bash benchmarks/background_ab.sh collect 540               # waits up to 540 s, copies results to $OUT
#
# `start` copies what the runs need to /tmp/ab_work, outside the synced working tree (each call re-syncs
# the tree and deletes what a job wrote inside it). In the background, one run after another, it runs
# benchmarks/proxy_record.py for each name:runs[:flags] on scratch/ab/<name>.py, a copy of the train_gpt.py to
# measure, with --scheduled_steps 260 --extension_steps 3, the compile cache /tmp/cc, then the flags given
# (comma-separated, --flag=value; later flags win). Results go to /tmp/ab_results/<i>_<name>/ (logs,
# statistics.md) and <i>_<name>.out, i counting the variants from 1; a variant of one run ends
# "rc=1", as summarize.py needs two runs for its test. Carry .proxy and scratch.
# `collect` prints the progress and each variant's result lines, and copies the logs into $OUT. Call
# it again before the machine goes idle (30 s) until the progress says "finished".
set -u
shopt -s nullglob
WORK=/tmp/ab_work
RESULTS=/tmp/ab_results
case "${1:-}" in
  start)
    shift
    rm -rf "$RESULTS" && mkdir -p "$RESULTS"
    rm -rf "$WORK" && mkdir -p "$WORK/logs"
    cp -r benchmarks data records scratch train_gpt.py .proxy "$WORK/"
    # there before `start` returns, so that a `collect` in the same command finds it
    echo "queued $* $(date +%T)" > "$RESULTS/progress"
    # its own session, so that the end of the device call does not end it
    setsid bash "$WORK/benchmarks/background_ab.sh" run "$@" > /dev/null 2>&1 < /dev/null &
    ;;
  run)
    shift
    cd "$WORK" || exit 1
    i=0
    for spec in "$@"; do
      IFS=: read -r name runs flags <<< "$spec"
      i=$((i + 1))
      tag="${i}_$name"
      echo "start $tag ($spec) $(date +%T)" >> "$RESULTS/progress"
      # shellcheck disable=SC2046  # the flags are split at commas on purpose
      python benchmarks/proxy_record.py --script "scratch/ab/$name.py" --runs "$runs" --out "$RESULTS/$tag" \
        --scheduled_steps 260 --extension_steps 3 --compile_cache /tmp/cc $(tr , ' ' <<< "$flags") \
        > "$RESULTS/$tag.out" 2>&1
      echo "done $tag rc=$? $(date +%T)" >> "$RESULTS/progress"
    done
    echo finished >> "$RESULTS/progress"
    ;;
  collect)
    if [ ! -f "$RESULTS/progress" ]; then
      # a fresh machine: the one that ran `start` went back (idle or 30 minutes held) with its results
      echo "error: no $RESULTS/progress here; this machine never ran 'start'" >&2
      exit 1
    fi
    for _ in $(seq 1 "${2:-500}"); do
      grep -q finished "$RESULTS/progress" 2>/dev/null && break
      sleep 1
    done
    cat "$RESULTS/progress"
    for out in "$RESULTS"/*.out; do
      echo "== $out"
      grep "^startup\|^peak_memory\|^final val_loss\|^run " "$out"
    done
    # the logs alone (summarize.py remakes the rest here): a call brings back only so many files
    mkdir -p "$OUT"
    cp "$RESULTS"/progress "$RESULTS"/*.out "$OUT"/
    for log in "$RESULTS"/*/*.txt; do
      mkdir -p "$OUT/$(basename "$(dirname "$log")")" && cp "$log" "$OUT/$(basename "$(dirname "$log")")/"
    done
    ;;
  *)
    echo "usage: $0 start name:runs [name:runs ...] | collect [seconds]" >&2
    exit 2
    ;;
esac
