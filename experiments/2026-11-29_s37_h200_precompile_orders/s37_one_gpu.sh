#!/bin/bash
# Session 37, one H200 lent: session 36's two one-GPU scripts back to back, as written, from a copy of the tree
# outside the synced one (a later call re-syncs it): next_s37b.sh (optimizer_precompile2.patch on top of
# adam_inplace_gathers.patch against the latter; results in /tmp/res_b), then next_s37c.sh (host_sort_orders.patch
# against main; results in /tmp/res). Their rules are fixed in their headers.
#   call, carry [".proxyA"]: setsid nohup bash experiments/2026-11-29_s37_h200_precompile_orders/s37_one_gpu.sh
#     > /tmp/s37.log 2>&1 < /dev/null & sleep 2; bash experiments/2026-11-29_s37_h200_precompile_orders/collect.sh 560
#     "s37c done"
S=experiments/2026-11-29_s36_h200x2_asked_rows_optimizers
rm -rf /tmp/s37src; cp -r . /tmp/s37src; cd /tmp/s37src
OUT=/tmp/res_b bash $S/next_s37b.sh
bash $S/next_s37c.sh
