#!/usr/bin/env bash
# examples/order-queue/run.sh: an order queue. Four nodes, standing for four
# machines (--labels machine=a..d), carry the job order-worker.lua
# (queue = "orders"). Orders are pushed with `baton queue push orders
# '{"id":N}'`; each is claimed by exactly one node, processed and marked
# done at <prefix>orders/done/<id> with ctx:put_fenced. Prints the events as
# they happen, then which node did which order (report.lua), and exits 0 if
# every order was done exactly once.
#
#   examples/order-queue/run.sh [N]      N orders (default 20); about 15 s
#
# Starts its own etcd in a temporary directory (or uses BATON_ENDPOINTS, under
# a prefix of its own) and removes everything it started when it ends.
EXAMPLE=order-queue
QUIET="^order-worker$"   # one line per order: its end, with what the job logged
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cluster.sh"

COUNT=${1:-20}
NODES=(worker-a worker-b worker-c worker-d)

say "An order queue worked by four machines"
cluster_start "${NODES[@]}"
b job put "$here/order-worker.lua" | indent
for name in "${NODES[@]}"; do node_start "$name" --labels "machine=${name#worker-}"; done
loaded() { [ "$(grep -l 'msg="job loaded" job=order-worker' "$tmp"/*.log | wc -l)" = "${#NODES[@]}" ]; }
wait_for 15 loaded || { echo "$EXAMPLE: the nodes did not load the job; logs in $tmp" >&2; exit 1; }

say "Pushing $COUNT orders: baton queue push orders '{\"id\":N}'"
for i in $(seq 1 "$COUNT"); do
  b queue push orders "{\"id\":$i,\"amount\":$((i * 100 + 99))}" >/dev/null ||
    { echo "$EXAMPLE: queue push failed" >&2; exit 1; }
done
note "pushed $COUNT tasks under ${P}queue/orders/"
all_done() { b eval "$here/report.lua" "$COUNT" >/dev/null 2>&1; }
if ! wait_for 30 all_done; then note "not all orders were done within 30 s"; fi
sleep 1

say "What happened (report.lua: the done marks, and how many times each was written)"
b eval "$here/report.lua" "$COUNT" | indent
rc=${PIPESTATUS[0]}
left=$(b eval <(printf 'local P = baton.config.prefix\nprint(baton.etcd:get(P .. "queue/orders/", {prefix = true, keys_only = true}).count)\n') 2>/dev/null || echo "?")
note "tasks left in the queue: $left"
if [ "$rc" = 0 ]; then
  say "OK: $COUNT orders, each processed by exactly one of ${#NODES[@]} nodes and marked done once"
else
  say "NOT OK: see above"
fi
exit "$rc"
