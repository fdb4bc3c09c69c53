#!/usr/bin/env bash
# examples/nightly-backup/run.sh: ten nodes carry the same nightly backup job
# (nightly-backup.lua); exactly one runs each instant. Then the node running
# it is killed with SIGKILL in the middle of a backup, and once its lease has
# expired another node makes that backup again (on_node_loss = "rerun").
# Prints what happens as it happens, then the run history and the backups
# that completed (report.lua), and exits 0 if every instant was backed up
# exactly once and the killed run was taken over.
#
#   examples/nightly-backup/run.sh        (after make; about 40 s)
#
# Starts its own etcd in a temporary directory (or uses BATON_ENDPOINTS, under
# a prefix of its own) and removes everything it started when it ends.
EXAMPLE=nightly-backup
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cluster.sh"

NODES=()
for i in $(seq -w 1 10); do NODES+=("node-$i"); done
ok=1

say "Ten nodes, one nightly backup: each instant is run by exactly one node"
cluster_start "${NODES[@]}"
b job put "$here/nightly-backup.lua" | indent
for name in "${NODES[@]}"; do node_start "$name"; done
loaded() { [ "$(grep -l 'msg="job loaded" job=nightly-backup' "$tmp"/*.log | wc -l)" = 10 ]; }
wait_for 15 loaded || { echo "$EXAMPLE: the nodes did not load the job; logs in $tmp" >&2; exit 1; }
note "all 10 nodes loaded the job; every one of them schedules it"

ended() { [ "$(cat "$tmp"/*.log | grep -c 'msg="run ended".* job=nightly-backup')" -ge 3 ]; }
wait_for 25 ended || note "fewer than 3 runs ended within 25 s"
say "baton job history nightly-backup"
b job history nightly-backup | indent

say "Kill -9 the node that runs the next backup, in the middle of it"
start_re='msg="run (claimed|started)".* job=nightly-backup'
n0=$(cat "$tmp"/*.log | grep -Ec "$start_re")
started() { [ "$(cat "$tmp"/*.log | grep -Ec "$start_re")" -gt "$n0" ]; }
victim="" instant=""
if wait_for 10 started; then
  for name in "${NODES[@]}"; do
    l=$(grep -E "$start_re" "$(log_of "$name")" | tail -n 1)
    [ -n "$l" ] || continue
    i=$(sed -n 's/.* instant=\([^ ]*\).*/\1/p' <<<"$l")
    if [ -z "$instant" ] || [[ $i > $instant ]]; then instant=$i victim=$name; fi
  done
fi
if [ -z "$victim" ]; then
  note "no backup started within 10 s"
  ok=0
else
  sleep 0.5
  vpid=${pid_of[$victim]}
  kids=$(cat /proc/"$vpid"/task/*/children 2>/dev/null)
  kill -KILL "$vpid"
  wait "$vpid" 2>/dev/null
  unset "pid_of[$victim]"
  t_kill=$(date +%s%3N)
  for k in $kids; do extra_pids+=("$k"); done   # its worker, if it outlives the node
  note "killed $victim (pid $vpid) while it ran the backup of ${instant:11:8}"
  note "its lease (TTL $TTL s) expires; the cluster leader then re-runs that instant as attempt 2 elsewhere"
  taken() {
    grep -Eq "msg=\"run (claimed|started)\".* instant=$instant job=nightly-backup" \
      $(for n in "${NODES[@]}"; do [ "$n" = "$victim" ] || log_of "$n"; echo; done)
  }
  if wait_for $((TTL + 6)) taken; then
    for name in "${NODES[@]}"; do
      [ "$name" = "$victim" ] && continue
      l=$(grep -Em1 "msg=\"run (claimed|started)\".* instant=$instant job=nightly-backup" "$(log_of "$name")") || continue
      note "$name took the backup of ${instant:11:8} over, $(secs $(($(ts_ms "$l") - t_kill))) s after the kill (TTL $TTL s + 1 s allowed)"
    done
    wait_for 10 grep -q "msg=\"run ended\".* instant=$instant job=nightly-backup" "$tmp"/*.log ||
      note "the re-run did not end within 10 s"
  else
    note "nobody took the backup of ${instant:11:8} over within $((TTL + 6)) s of the kill;"
    note "node-loss handling (on_node_loss = \"rerun\") is missing or broken in this build"
    ok=0
  fi
fi
sleep 1

say "What happened (report.lua: run records and the backups that really completed)"
b eval "$here/report.lua" | indent
[ "${PIPESTATUS[0]}" = 0 ] || ok=0

if [ "$ok" = 1 ]; then
  say "OK: one backup per instant across ten nodes, and the killed node's backup was made again elsewhere"
else
  say "NOT OK: see above"
fi
[ "$ok" = 1 ]
