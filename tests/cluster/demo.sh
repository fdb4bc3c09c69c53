#!/usr/bin/env bash
# make demo, cut short: tools/demo.sh with DEMO_DURATION=30 exits 0 by
# itself, the dashboard URL it prints answers (with a token the node takes),
# its narration shows runs on the nodes, the failover scene shows another
# node taking over and no false alarm about the killed node's workers, and
# it leaves nothing behind: no etcd or baton process of its own, no
# temporary directory.
#
# The killed node's workers die with it and stay zombies until the init
# process reaps them, which some inits (a container's) never do: as root,
# the demo runs in a PID namespace of its own whose init (timeout) reaps
# nothing but its child, so that they are zombies on every machine, and a
# zombie must not be reported as a worker "still running after the node's
# death". There the processes left when the demo has ended are listed from
# inside the namespace, before its end kills them.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BATON_BIN=${BATON_BIN:-$root/bin/baton}
export BATON_BIN

n=0 failed=0
ok() { # STATUS NAME
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}
diag() { if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cat; fi | sed 's/^/# /' >&2; } # ARGS, or stdin

scratch=$(mktemp -d "${BATON_TEST_TMP:-${TMPDIR:-/tmp}}/demo-test.XXXXXX")
trap 'rm -rf -- "$scratch"' EXIT
mkdir "$scratch/tmp"

# lives DIR: run in the namespace once the demo has ended; lists in FILE
# its live processes but itself and init (pid 1), zombies left out (only
# shell builtins, so that it sees no process of its own).
lives='for d in /proc/[0-9]*; do
  p=${d#/proc/}
  { [ "$p" = 1 ] || [ "$p" = $$ ]; } && continue
  read -r st <"$d/stat" 2>/dev/null || continue
  case ${st##*) } in Z* | X*) continue ;; esac
  echo "$st"
done'
ns=0
if [ "$(id -u)" = 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then ns=1; fi
t0=$SECONDS
if [ "$ns" = 1 ]; then
  TMPDIR=$scratch/tmp DEMO_DURATION=30 unshare --pid --fork --mount-proc timeout -k 5 70 \
    sh -c '"$0"; rc=$?; eval "$2" >"$1"; exit $rc' "$root/tools/demo.sh" "$scratch/left" "$lives" \
    >"$scratch/out" 2>&1 &
else
  TMPDIR=$scratch/tmp DEMO_DURATION=30 timeout -k 5 70 "$root/tools/demo.sh" >"$scratch/out" 2>&1 &
fi
demo=$!
# While it runs: the dashboard URL it prints serves the page, and the
# token it carries lets the API write.
dash=""
# (a loaded machine takes a while to start etcd and three nodes)
for _ in $(seq 450); do
  dash=$(sed -n 's/^ *dashboard  \(http:[^ ]*\).*/\1/p' "$scratch/out" | head -n 1)
  [ -n "$dash" ] && break
  sleep 0.1
done
base=${dash%%#*} token=${dash##*#token=}
if command -v curl >/dev/null; then
  for _ in $(seq 50); do
    page=$(curl -sf -m 5 "$base" 2>/dev/null) && break
    sleep 0.2
  done
  [[ $page == *'<script src="app.js"'* ]] && curl -sf -m 5 "${base}metrics" | grep -q '^baton_build_info'
  ok $? "the dashboard URL it prints serves the page, and /metrics answers (${base:-no URL})"
  # (tick may not be put yet: 404 is past the token check too)
  post() { curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $1" \
    "${base}api/v1/jobs/tick/resume" 2>/dev/null; }
  code=$(post "$token") bad=$(post "not-$token")
  [[ $code == 200 || $code == 404 ]] && [ "$bad" = 401 ]
  ok $? "the token in that URL is the node's (POST .../resume: $code with it, $bad with another)"
else
  for _ in 1 2; do n=$((n + 1)); echo "ok $n # skip curl is not installed"; done
fi
rc=0
wait "$demo" || rc=$?
ok $((rc != 0)) "DEMO_DURATION=30 tools/demo.sh exits 0 (exit $rc, $((SECONDS - t0)) s)"
[ "$rc" -eq 0 ] || tail -n 30 "$scratch/out" | diag

# "14:51:02.003  node-2   << tick @ 14:51:02 succeeded in 16ms ..."
runs=$(grep -cE '^[0-9:.]+ +node-[123] +<< tick @ [0-9:]+ succeeded' "$scratch/out")
[ "$runs" -ge 5 ]
ok $? "the narration shows tick's runs ($runs)"
nodes=$(grep -oE '^[0-9:.]+ +node-[123] +<< ' "$scratch/out" | awk '{ print $2 }' | sort -u | wc -l)
[ "$nodes" -ge 2 ]
ok $? "on more than one node ($nodes of 3)"
grep -q 'every node runs revision' "$scratch/out"
ok $? "the hot reload reached every node"
# The failover scene starts about 15 s in; a loaded machine may not get
# there in 30 s.
if grep -q '^== kill -9 node-' "$scratch/out"; then
  if grep -qE '^ +(node-[123] took over|no node took over) nightly-backup @ ' "$scratch/out"; then
    grep -qE '^ +node-[123] took over nightly-backup @ ' "$scratch/out"
    ok $? "failover: after kill -9 of the node running nightly-backup, another node took it over"
  else
    n=$((n + 1)); echo "ok $n # skip the demo ended before the takeover (a loaded machine)"
  fi
  alarm=$(grep 'still running after the node' "$scratch/out")
  [ -z "$alarm" ]
  ok $? "and the killed node's workers, dead and not reaped (zombies), are not reported as still running"
  [ -z "$alarm" ] || diag "$alarm" "$([ "$ns" = 1 ] && echo "(in a PID namespace whose init does not reap)")"
else
  for _ in 1 2; do n=$((n + 1)); echo "ok $n # skip the demo did not reach its failover scene in 30 s"; done
fi
grep -q 'DEMO_DURATION=30 s reached' "$scratch/out" && grep -q 'demo: stopped' "$scratch/out"
ok $? "it ended by itself and said it stopped everything"

dir=$(sed -n 's/.*all under \([^ ]*\) .*/\1/p' "$scratch/out" | head -n 1)
url=$(sed -n 's/.*etcd is up at \([^ ]*\) .*/\1/p' "$scratch/out" | head -n 1)
[ -n "$dir" ] && [ ! -e "$dir" ] && [ -z "$(ls -A "$scratch/tmp")" ]
ok $? "its temporary directory is gone (${dir:-?})"
left=""
if [ "$ns" = 1 ]; then
  [ -f "$scratch/left" ] && left=$(cat "$scratch/left") || left="(no list of the processes left)"
fi
for c in /proc/[0-9]*/cmdline; do
  line=$(tr '\0' ' ' 2>/dev/null <"$c") || continue
  case "$line" in
    *"$scratch/tmp/"*) left+="${c%/cmdline}: $line"$'\n' ;;
    *"--endpoints $url "*) [ -n "$url" ] && left+="${c%/cmdline}: $line"$'\n' ;;
  esac
done
[ -z "$left" ]
ok $? "no etcd or baton process of the demo is left"
[ -z "$left" ] || diag "$left"

echo "1..$n"
[ "$failed" -eq 0 ]
