#!/bin/bash
# Wait up to $1 seconds for pattern $2 in /tmp/res/progress, then print it, the last lines of the call's log ($3,
# /tmp/s15.log by default) and send the results back in $OUT.
for i in $(seq "$1"); do grep -q "$2" /tmp/res/progress 2>/dev/null && break; sleep 1; done
cat /tmp/res/progress; tail -3 "${3:-/tmp/s15.log}" 2>/dev/null
[ -n "$OUT" ] && (cd /tmp/res && tar czf $OUT/res.tgz .)
true
