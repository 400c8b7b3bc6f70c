#!/bin/bash
# Wait up to $1 seconds for pattern $2 in /tmp/res/progress (next_s37c.sh's), print both scripts' progress and the
# job's log, and send both results folders back in $OUT.
for i in $(seq "$1"); do grep -q "$2" /tmp/res/progress 2>/dev/null && break; sleep 1; done
echo "--- next_s37b.sh"; cat /tmp/res_b/progress 2>/dev/null
echo "--- next_s37c.sh"; cat /tmp/res/progress 2>/dev/null; tail -3 /tmp/s37.log 2>/dev/null
[ -n "$OUT" ] && for d in res_b res; do [ -d /tmp/$d ] && (cd /tmp/$d && tar czf $OUT/$d.tgz .); done
true
