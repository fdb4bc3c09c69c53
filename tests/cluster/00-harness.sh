#!/usr/bin/env bash
# Tests tests/harness/etcd itself, with private etcds in a temporary directory
# (not the suite's shared one): a single server across restart, stop and
# --auth, then a 3-member cluster across a leader failure and a rejoin.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
E=$root/tests/harness/etcd

n=0 failed=0
ok() { # STATUS NAME: STATUS 0 is a pass
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
  return "$1"
}
skip() { n=$((n + 1)); echo "ok $n # skip $1"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /' >&2; }
is() { # GOT EXPECTED NAME
  if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; diag "     got: '$1'" "expected: '$2'"; return 1; fi
}
# Retries CMD every 0.2 s for up to SECS seconds; true once it succeeds.
eventually() { # SECS CMD...
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}
# A dead process may linger as a zombie until init reaps it: that is gone too.
alive() { # PID
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ] && [ "$st" != X ]
}
our_etcds() { pgrep -f -- "--data-dir=$tmp/" || true; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-harness-test.XXXXXX")
cleanup() {
  "$E" destroy "$tmp/one" 2>/dev/null
  "$E" destroy "$tmp/gw0" 2>/dev/null
  "$E" destroy "$tmp/gw1" 2>/dev/null
  "$E" destroy "$tmp/auth" 2>/dev/null
  "$E" destroy "$tmp/cluster" 2>/dev/null
  for d in "$tmp"/p?; do "$E" destroy "$d" 2>/dev/null; done
  rm -rf -- "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- single server -------------------------------------------------------

# $(...) returns only when the harness's stdout reaches EOF: if etcd kept it
# open, timeout would fire here.
t0=$SECONDS
url=$(BATON_ETCD_GATEWAY='' timeout 60 "$E" start "$tmp/one")
ok $? "start returns (and releases stdout) in $((SECONDS - t0)) s"
[[ $url =~ ^http://127\.0\.0\.1:[0-9]+$ ]]
ok $? "start prints one client URL ($url)"
is "$("$E" url "$tmp/one")" "$url" "url prints the same URL"
port=${url##*:}
[ "$port" -ge 20000 ] && [ "$port" -le 60999 ]
ok $? "port $port is in 20000-60999"

etcdctl --endpoints="$url" put /harness/k v1 >/dev/null
ok $? "put with etcdctl"
is "$(etcdctl --endpoints="$url" get /harness/k --print-value-only)" v1 "get with etcdctl"
is "$("$E" ctl "$tmp/one" get /harness/k --print-value-only)" v1 "etcd ctl DIR"

[[ $(etcdctl --endpoints="$url" endpoint status -w json 2>/dev/null) == *'"version":"3.4.'* ]]
ok $? "etcd 3.4 answers endpoint status (gRPC)"

# BATON_ETCD_GATEWAY: 1 keeps etcd's JSON gateway (/v3/...), 0 starts etcd
# without it, and a restart keeps the choice. Unset, as "one" was started:
# no gateway (nothing in baton speaks it).
gateway() { # URL -> the HTTP status of a gateway request
  curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST "$1/v3/maintenance/status" -d '{}' 2>/dev/null
}
if command -v curl >/dev/null; then
  is "$(gateway "$url")" 404 "BATON_ETCD_GATEWAY unset: no JSON gateway"
  u0=$(BATON_ETCD_GATEWAY=0 timeout 60 "$E" start "$tmp/gw0")
  u1=$(BATON_ETCD_GATEWAY=1 timeout 60 "$E" start "$tmp/gw1")
  is "$(gateway "$u0")" 404 "BATON_ETCD_GATEWAY=0: no JSON gateway (/v3/maintenance/status is 404)"
  is "$(etcdctl --endpoints="$u0" put /harness/gw v >/dev/null 2>&1; echo $?)" 0 \
    "BATON_ETCD_GATEWAY=0: gRPC works"
  is "$(gateway "$u1")" 200 "BATON_ETCD_GATEWAY=1: the JSON gateway answers"
  timeout 60 "$E" restart "$tmp/gw0" >/dev/null
  is "$(gateway "$u0")" 404 "BATON_ETCD_GATEWAY=0: still none after a restart"
  "$E" destroy "$tmp/gw0"
  "$E" destroy "$tmp/gw1"
else
  skip "curl not installed"
  skip "curl not installed"
  skip "curl not installed"
  skip "curl not installed"
  skip "curl not installed"
fi

pid1=$("$E" pid "$tmp/one")
is "$(timeout 60 "$E" restart "$tmp/one")" "$url" "restart keeps the URL"
pid2=$("$E" pid "$tmp/one")
[ "$pid1" != "$pid2" ] && ! alive "$pid1"
ok $? "restart replaced the process ($pid1 -> $pid2)"
is "$(etcdctl --endpoints="$url" get /harness/k --print-value-only)" v1 "the value survives the restart"

timeout 30 "$E" stop "$tmp/one"
ok $? "stop"
! alive "$pid2"
ok $? "the process is gone"
! etcdctl --endpoints="$url" --dial-timeout=500ms --command-timeout=1s get /harness/k >/dev/null 2>&1
ok $? "etcdctl fails against the stopped server"
timeout 30 "$E" stop "$tmp/one"
ok $? "stop again is a no-op"

is "$(timeout 60 "$E" start "$tmp/one")" "$url" "start of a stopped DIR resumes on the same port"
is "$(etcdctl --endpoints="$url" get /harness/k --print-value-only)" v1 "with its data"
rev=$(etcdctl --endpoints="$url" put /harness/k v2 -w json | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
etcdctl --endpoints="$url" put /harness/k v3 >/dev/null
"$E" compact "$tmp/one" "$rev"
ok $? "compact DIR $rev"
out=$(etcdctl --endpoints="$url" get /harness/k --rev=$((rev - 1)) 2>&1)
[[ $out == *compacted* ]]
ok $? "an old revision is compacted"

"$E" kill "$tmp/one"
ok $? "kill"
! etcdctl --endpoints="$url" --dial-timeout=500ms --command-timeout=1s get /harness/k >/dev/null 2>&1
ok $? "etcdctl fails after kill"
"$E" destroy "$tmp/one"
[ ! -e "$tmp/one" ]
ok $? "destroy removes the directory"

mkdir "$tmp/notours" && touch "$tmp/notours/precious"
! "$E" destroy "$tmp/notours" 2>/dev/null && [ -e "$tmp/notours/precious" ]
ok $? "destroy refuses a directory the harness did not make"

# ---- auth ---------------------------------------------------------------

aurl=$(timeout 60 "$E" start "$tmp/auth" --auth)
ok $? "start --auth"
! etcdctl --endpoints="$aurl" get /x >/dev/null 2>&1
ok $? "anonymous access is refused"
etcdctl --endpoints="$aurl" --user baton:batonpw put /harness/a 1 >/dev/null
ok $? "user baton can write"
is "$(etcdctl --endpoints="$aurl" --user root:rootpw get /harness/a --print-value-only)" 1 "user root can read"
is "$("$E" ctl "$tmp/auth" get /harness/a --print-value-only)" 1 "etcd ctl adds the root user"
is "$(timeout 60 "$E" restart "$tmp/auth")" "$aurl" "an --auth server restarts (health check authenticates)"
"$E" destroy "$tmp/auth"

# ---- several at once ------------------------------------------------------

# Parallel starts must get distinct ports (the suite may run beside another).
for i in 1 2 3; do (timeout 60 "$E" start "$tmp/p$i" >"$tmp/p$i.url") & done
wait
u=$(sort -u "$tmp"/p?.url | grep -c '^http://127.0.0.1:')
is "$u" 3 "three parallel starts, three distinct URLs"
for i in 1 2 3; do "$E" destroy "$tmp/p$i"; done

# ---- cluster --------------------------------------------------------------

t0=$SECONDS
urls=$(timeout 90 "$E" cluster-start "$tmp/cluster")
ok $? "cluster-start in $((SECONDS - t0)) s"
[[ $urls =~ ^http://127\.0\.0\.1:[0-9]+(,http://127\.0\.0\.1:[0-9]+){2}$ ]]
ok $? "cluster-start prints 3 client URLs ($urls)"
etcdctl --endpoints="$urls" endpoint health >/dev/null 2>&1
ok $? "all 3 members are healthy"

leader=""
eventually 10 "$E" leader "$tmp/cluster"
leader=$("$E" leader "$tmp/cluster" 2>/dev/null)
[[ $leader =~ ^[123]$ ]]
ok $? "leader prints a member index ($leader)"

etcdctl --endpoints="$urls" put /harness/c 1 >/dev/null
"$E" member-kill "$tmp/cluster" "$leader"
ok $? "member-kill the leader"
t0=$SECONDS
new=""
for _ in $(seq 100); do
  new=$("$E" leader "$tmp/cluster" 2>/dev/null) && break
  sleep 0.1
done
[[ $new =~ ^[123]$ ]] && [ "$new" != "$leader" ]
ok $? "a different leader ($new) within 10 s (took $((SECONDS - t0)) s)"
"$E" ctl "$tmp/cluster" put /harness/c 2 >/dev/null 2>&1
ok $? "put works with one member down"

t0=$SECONDS
timeout 60 "$E" member-start "$tmp/cluster" "$leader"
ok $? "member-start rejoins the old leader in $((SECONDS - t0)) s"
etcdctl --endpoints="$("$E" url "$tmp/cluster" "$leader")" get /harness/c --print-value-only 2>/dev/null | grep -qx 2
ok $? "the rejoined member has the write it missed"
eventually 20 etcdctl --endpoints="$urls" endpoint health
ok $? "endpoint health of all 3"

# A graceful stop of the leader hands leadership over at once.
leader=$("$E" leader "$tmp/cluster" 2>/dev/null)
"$E" member-stop "$tmp/cluster" "$leader"
ok $? "member-stop the leader ($leader)"
eventually 10 "$E" leader "$tmp/cluster"
ok $? "a leader again"
"$E" member-start "$tmp/cluster" "$leader" >/dev/null
ok $? "member-start after member-stop"

# Signals arrive asynchronously: poll the process state.
state_is() { [ "$(awk '{print $3}' "/proc/$1/stat")" = "$2" ]; }
pause_pid=$("$E" pid "$tmp/cluster" 1)
"$E" pause "$tmp/cluster" 1 && eventually 5 state_is "$pause_pid" T
ok $? "pause stops member 1"
"$E" resume "$tmp/cluster" 1 && eventually 5 eval '! state_is "$pause_pid" T'
ok $? "resume continues it"

"$E" destroy "$tmp/cluster"
ok $? "destroy the cluster"
[ ! -e "$tmp/cluster" ] && [ -z "$(our_etcds)" ]
ok $? "no directory and no etcd process left"

echo "1..$n"
[ "$failed" -eq 0 ]
