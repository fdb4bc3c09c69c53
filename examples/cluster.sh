# examples/cluster.sh: sourced by the examples' run.sh. A throwaway cluster
# on this machine: an etcd of its own (tests/harness/etcd, in a temporary
# directory) unless BATON_ENDPOINTS names one, baton nodes with their logs in
# that directory, a narrator printing one line per event
# (tools/demo-narrate.awk), and a cleanup that stops and removes all of it on
# exit, Ctrl-C or SIGTERM.
#
# The caller sets EXAMPLE (a name) before sourcing; then:
#   cluster_start NAMES...  etcd (or BATON_ENDPOINTS) and the narrator of
#                         the logs of the nodes NAMES (started later)
#   node_start NAME [ARGS...]   a `baton node --name NAME --ttl $TTL ARGS...`
#   b ARGS...             bin/baton with the example's endpoints and prefix
#   say TEXT / note TEXT  narration
#   wait_for SECS CMD...  polls CMD every 0.1 s; false if it never succeeded
#   log_of NAME           the node's log file
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON_BIN:-$root/bin/baton}
E=$root/tests/harness/etcd
TTL=${TTL:-3}
[ -x "$BATON" ] || { echo "$EXAMPLE: $BATON not found; run make first" >&2; exit 1; }

if [ -t 1 ]; then B=$'\e[1m' N=$'\e[0m'; else B="" N=""; fi
say() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
note() { printf '   %s\n' "$@"; }
indent() { sed 's/^/     /'; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-$EXAMPLE.XXXXXX")
declare -A pid_of=()
extra_pids=()
tail_pid="" awk_pid="" eps="" own_etcd=0
# a prefix of its own, so that a shared etcd (BATON_ENDPOINTS) is fine
P=/examples/$EXAMPLE-$$/

b() { "$BATON" --endpoints "$eps" --prefix "$P" "$@"; }
log_of() { printf '%s/%s.log' "$tmp" "$1"; }
secs() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }
ts_ms() { date -d "$(sed -n 's/^ts=\([^ ]*\).*/\1/p' <<<"$1")" +%s%3N; }

wait_for() {
  local end=$(($(date +%s%3N) + $1 * 1000))
  shift
  until "$@"; do
    [ "$(date +%s%3N)" -lt "$end" ] || return 1
    sleep 0.1
  done
}

cluster_cleanup() {
  local rc=$? name pid i alive
  trap - EXIT INT TERM HUP
  for name in "${!pid_of[@]}"; do kill -TERM "${pid_of[$name]}" 2>/dev/null; done
  for ((i = 0; i < 150; i++)); do
    alive=0
    for pid in "${pid_of[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pid_of[@]}" "${extra_pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${pid_of[@]}"; do wait "$pid" 2>/dev/null; done
  sleep 0.2
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
  [ -n "$awk_pid" ] && wait "$awk_pid" 2>/dev/null
  [ -n "$tail_pid" ] && wait "$tail_pid" 2>/dev/null
  if [ "$own_etcd" = 1 ]; then
    "$E" destroy "$tmp/etcd" >/dev/null 2>&1 || rc=1
  elif [ -n "$eps" ]; then
    printf 'baton.etcd:delete("%s", { prefix = true })\n' "$P" >"$tmp/clean.lua"
    b eval "$tmp/clean.lua" >/dev/null 2>&1
  fi
  rm -rf -- "$tmp"
  exit "$rc"
}
trap cluster_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

cluster_start() { # NODE-NAMES...
  if [ -n "${BATON_ENDPOINTS:-}" ]; then
    eps=$BATON_ENDPOINTS
    note "etcd: $eps (BATON_ENDPOINTS), keys under $P"
  else
    command -v etcd >/dev/null || { echo "$EXAMPLE: etcd not found; run make deps" >&2; exit 1; }
    eps=$(setsid "$E" start "$tmp/etcd") || { echo "$EXAMPLE: etcd did not start" >&2; exit 1; }
    own_etcd=1
    note "etcd: a throwaway one at $eps (in $tmp), keys under $P"
  fi
  local name awk_opts=""
  for name in "$@"; do : >"$(log_of "$name")"; done
  mkfifo "$tmp/events"
  if awk -W version 2>&1 | grep -qi mawk; then awk_opts="-W interactive"; fi
  # tail follows the node logs as they are created (-F)
  setsid tail -s 0.1 -n +1 -F "$tmp"/*.log >"$tmp/events" 2>/dev/null &
  tail_pid=$!
  setsid awk $awk_opts -v quiet="${QUIET:-}" -f "$root/tools/demo-narrate.awk" <"$tmp/events" &
  awk_pid=$!
}

node_start() { # NAME [ARGS...]
  local name=$1
  shift
  setsid "$BATON" --endpoints "$eps" --prefix "$P" node --name "$name" --ttl "$TTL" "$@" \
    </dev/null >>"$(log_of "$name")" 2>&1 &
  pid_of[$name]=$!
}
