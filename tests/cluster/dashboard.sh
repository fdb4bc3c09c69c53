#!/usr/bin/env bash
# The dashboard (lua/baton/web/) in a real browser against a live cluster:
# baton nodes with --http on free loopback ports, on the suite's etcd
# and a private prefix: node A with --http-token-file (writable), node B
# without (read-only), B started first so that it leads. A job that
# succeeds every second (and prints) and one that fails every second; a
# manual job with params, stored twice (two versions to diff); an event job
# that runs after it (its run ids are 70 characters long); one that runs
# 2.5 s every second (so that instants are skipped, and runs start and end
# all the time); a manual one that runs a minute (to kill).
# A third node, dash-c, runs 2 s fast under libfaketime (when installed),
# so that the page has a clock offset past --max-skew to flag. Then
# tests/browser/dashboard.test.js drives Debian's chromium through
# puppeteer-core (installed by make deps: npm ci in tests/browser) and
# asserts on the DOM; it ends by kill -9 of node B, which must leave the
# page within TTL + 2 s without a reload.
#
# Screenshots go to $BATON_TEST_ARTIFACTS (default build/test-artifacts,
# kept after the run; the paths are printed as TAP comments). Skips when
# node, chromium or puppeteer-core is missing (make deps installs them).
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BATON_BIN=${BATON_BIN:-$root/bin/baton}
# The nodes honour the harness's prefix (valgrind under make valgrind).
NODE_CMD=${BATON_EVAL:-$BATON_BIN}
chromium=${BATON_CHROMIUM:-/usr/bin/chromium}
artifacts=${BATON_TEST_ARTIFACTS:-$root/build/test-artifacts}
TTL=3
ENV=()
A=dash-a B=dash-b C=dash-c
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
OK_JOB=dash-ok FAIL_JOB=dash-fail
PARAMS_JOB=dash-params EVENT_JOB=dash-after-params SLOW_JOB=dash-slow LONG_JOB=dash-long
OK_TEXT="dash-ok says hello"
FAIL_TEXT="the disk is full"

n=0 failed=0
ok() { # STATUS NAME
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
  return "$1"
}
diag() { if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cat; fi | sed 's/^/# /'; } # ARGS, or stdin
skip_all() { echo "1..0 # SKIP $1"; exit 0; }

command -v node >/dev/null || skip_all "node is not installed (make deps)"
[ -x "$chromium" ] || skip_all "no chromium at $chromium (make deps installs Debian's chromium)"
[ -f "$root/tests/browser/node_modules/puppeteer-core/package.json" ] ||
  skip_all "puppeteer-core is not installed (make deps runs npm ci in tests/browser)"
[ -n "${BATON_ENDPOINTS:-}" ] || { echo "dashboard.sh: BATON_ENDPOINTS is not set; run it with tests/harness/run-tests" >&2; exit 1; }
[ -x "$BATON_BIN" ] || { echo "dashboard.sh: $BATON_BIN is not executable; run make" >&2; exit 1; }

eps=$BATON_ENDPOINTS
shm_before=" $(for f in /dev/shm/faketime_shm_*; do [ -e "$f" ] && printf '%s ' "${f##*_}"; done)"
P=/test/dashboard/$(date +%s%N)/
tmp=$(mktemp -d "${BATON_TEST_TMP:-${TMPDIR:-/tmp}}/dashboard.XXXXXX")
declare -A pid_of=()
t_start=$SECONDS

cleanup() {
  local rc=$? pid i alive
  trap - EXIT INT TERM HUP
  for pid in "${pid_of[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    alive=0
    for pid in "${pid_of[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pid_of[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  # libfaketime leaves /dev/shm/faketime_shm_<pid> (and its semaphore) for
  # each faked process that is killed, and a later process with that pid
  # then fails to start: remove those of dead processes that appeared
  # during this test.
  local f p
  sleep 0.5 # (the killed nodes' workers end with them)
  for f in /dev/shm/faketime_shm_*; do
    [ -e "$f" ] || continue
    p=${f##*_}
    [[ " $shm_before " == *" $p "* ]] && continue
    kill -0 "$p" 2>/dev/null || rm -f -- "$f" "/dev/shm/sem.faketime_sem_$p"
  done
  etcdctl --endpoints="$eps" del --prefix "$P" >/dev/null 2>&1
  rm -rf -- "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

b() { "$BATON_BIN" --endpoints "$eps" --prefix "$P" "$@"; }

# A free loopback port (the kernel's pick; released before the node binds it).
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# GET URL: the body on stdout; exit 0 on a 2xx, 1 on another status, 2 if
# nothing answered.
http_get() {
  node -e 'fetch(process.argv[1], { signal: AbortSignal.timeout(3000) })
    .then(async (r) => { process.stdout.write(await r.text()); process.exit(r.ok ? 0 : 1); })
    .catch(() => process.exit(2));' "$1"
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

start_node() { # NAME PORT [EXTRA...]; ENV (an array of VAR=value) for the node
  local name=$1 port=$2
  shift 2
  # (no setsid: the harness's time limit kills the test's process group)
  # shellcheck disable=SC2086 # NODE_CMD is a command prefix, as BATON_EVAL is
  env ${ENV[@]+"${ENV[@]}"} $NODE_CMD --endpoints "$eps" --prefix "$P" node --name "$name" --ttl "$TTL" \
    --http "127.0.0.1:$port" "$@" </dev/null >>"$tmp/$name.log" 2>&1 &
  pid_of[$name]=$!
  disown # (no "Killed" report when the browser test kills it)
}

echo "# dashboard: etcd $eps, prefix $P, chromium $("$chromium" --version 2>/dev/null | head -n 1)"

# ---- the cluster
printf '%s\n' "dashboard-test-token-$RANDOM$RANDOM" >"$tmp/token"
chmod 600 "$tmp/token"
token=$(head -n 1 "$tmp/token")
pb=$(free_port) pa=$(free_port)
while [ "$pa" = "$pb" ]; do pa=$(free_port); done
url_a=http://127.0.0.1:$pa/ url_b=http://127.0.0.1:$pb/

start_node "$B" "$pb" --labels zone=b,disk=hdd
eventually 15 http_get "${url_b}healthz"
ok $? "$B answers GET /healthz on $url_b" || { tail -n 20 "$tmp/$B.log" | diag; exit 1; }
leads_b() { [ "$(b leader 2>/dev/null)" = "$B" ]; }
eventually 10 leads_b
ok $? "$B leads (it started first)"

start_node "$A" "$pa" --labels zone=a,disk=ssd --http-token-file "$tmp/token"
eventually 15 http_get "${url_a}healthz"
ok $? "$A answers GET /healthz on $url_a" || { tail -n 20 "$tmp/$A.log" | diag; exit 1; }

skewed_node=""
if [ -f "$FAKETIME_LIB" ]; then
  # Its wall clock 2 s fast, its monotonic clock true, as a wrong clock is.
  # (AddressSanitizer, under make asan, must be told to accept the preload.)
  ENV=("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "LD_PRELOAD=$FAKETIME_LIB"
       FAKETIME=+2 FAKETIME_DONT_FAKE_MONOTONIC=1)
  start_node "$C" "$(free_port)"
  ENV=()
  c_flagged() {
    b nodes --json | node -e 'let s = ""; process.stdin.on("data", (d) => { s += d; }).on("end", () => {
      const n = JSON.parse(s).find((x) => x.name === process.argv[1]);
      process.exit(n && n.clock && n.clock.skewed === true ? 0 : 1); });' "$C"
  }
  eventually 20 c_flagged
  ok $? "$C (2 s fast under libfaketime) is flagged past --max-skew in baton nodes" && skewed_node=$C
else
  n=$((n + 1)); echo "ok $n # skip libfaketime is not installed: no skewed node"
fi

info_a=$(http_get "${url_a}api/v1/info")
[[ $info_a == *'"writable":true'* && $info_a == *"\"node\":\"$A\""* ]]
ok $? "$A's /api/v1/info says writable (it has --http-token-file)" || diag "$info_a"
info_b=$(http_get "${url_b}api/v1/info")
[[ $info_b == *'"writable":false'* ]]
ok $? "$B's /api/v1/info says read-only" || diag "$info_b"
index=$(http_get "$url_a")
[[ $index == *'<script src="app.js"'* ]]
ok $? "$A serves the dashboard at GET /"

# ---- the jobs
cat >"$tmp/$OK_JOB.lua" <<EOF
return {
  schedule = "* * * * * *",
  timeout = 10,
  run = function(ctx)
    print("$OK_TEXT")
    print("<img src=x onerror=window.__xss=1> is text, not markup")
    ctx.log.info("done", { answer = 42 })
  end,
}
EOF
cat >"$tmp/$FAIL_JOB.lua" <<EOF
return {
  schedule = "* * * * * *",
  timeout = 10,
  run = function(ctx)
    print("about to fail")
    error("$FAIL_TEXT")
  end,
}
EOF
b job put "$tmp/$OK_JOB.lua" >/dev/null 2>&1 && b job put "$tmp/$FAIL_JOB.lua" >/dev/null 2>&1
ok $? "put $OK_JOB (succeeds every second) and $FAIL_JOB (fails every second)"

cat >"$tmp/$PARAMS_JOB.lua" <<'EOF'
-- dash-params: greets whom it is told (version 1)
return {
  schedule = "@manual",
  params = { who = "world", greeting = "hello" },
  run = function(ctx) print(ctx.params.greeting .. ", " .. ctx.params.who) end,
}
EOF
b job put "$tmp/$PARAMS_JOB.lua" >/dev/null 2>&1 &&
  sed -i -e 's/(version 1)/(version 2) <img src=x onerror=window.__xss=2> is text/' \
    -e 's/greeting = "hello"/greeting = "hi"/' "$tmp/$PARAMS_JOB.lua" &&
  b job put "$tmp/$PARAMS_JOB.lua" >/dev/null 2>&1
ok $? "put $PARAMS_JOB (manual, with params) twice: two versions"
cat >"$tmp/$EVENT_JOB.lua" <<EOF
return { on = { succeeded = { "$PARAMS_JOB" } }, run = function(ctx) print("after $PARAMS_JOB") end }
EOF
cat >"$tmp/$SLOW_JOB.lua" <<'EOF'
return {
  schedule = "* * * * * *",
  run = function(ctx)
    for _ = 1, 25 do
      if ctx:cancelled() then return end
      baton.sleep(0.1)
    end
  end,
}
EOF
sed -e 's/"\* \* \* \* \* \*"/"@manual"/' -e 's/1, 25 do/1, 600 do/' "$tmp/$SLOW_JOB.lua" >"$tmp/$LONG_JOB.lua"
b job put "$tmp/$EVENT_JOB.lua" >/dev/null 2>&1 && b job put "$tmp/$SLOW_JOB.lua" >/dev/null 2>&1 &&
  b job put "$tmp/$LONG_JOB.lua" >/dev/null 2>&1 && b job run "$PARAMS_JOB" >/dev/null 2>&1
ok $? "put $EVENT_JOB (after $PARAMS_JOB), $SLOW_JOB (2.5 s every second), $LONG_JOB (a minute); ran $PARAMS_JOB"

runs_in() { # JOB STATE N: at least N records of JOB in STATE
  [ "$(b job history "$1" -n 20 2>/dev/null | awk -v s="$2" '$4 == s' | wc -l)" -ge "$3" ]
}
eventually 15 runs_in "$OK_JOB" succeeded 3 && eventually 10 runs_in "$FAIL_JOB" failed 1 &&
  eventually 10 runs_in "$EVENT_JOB" succeeded 1 && eventually 10 runs_in "$SLOW_JOB" skipped 1
ok $? "the jobs have run ($OK_JOB succeeded 3 times, $FAIL_JOB failed, $EVENT_JOB ran, $SLOW_JOB skipped)" ||
  { tail -n 20 "$tmp/$A.log" | diag; exit 1; }

# ---- the browser
mkdir -p "$artifacts" "$tmp/browser"
t0=$SECONDS
TAP_START=$n TAP_COUNT_FILE=$tmp/count \
  BATON_DASH_URL_A=$url_a BATON_DASH_URL_B=$url_b \
  BATON_DASH_NODE_A=$A BATON_DASH_NODE_B=$B BATON_DASH_PID_B=${pid_of[$B]} BATON_DASH_NODE_SKEWED=$skewed_node \
  BATON_DASH_TTL=$TTL BATON_DASH_TOKEN=$token \
  BATON_DASH_OK_JOB=$OK_JOB BATON_DASH_OK_TEXT=$OK_TEXT \
  BATON_DASH_FAIL_JOB=$FAIL_JOB BATON_DASH_FAIL_TEXT=$FAIL_TEXT \
  BATON_DASH_PARAMS_JOB=$PARAMS_JOB BATON_DASH_EVENT_JOB=$EVENT_JOB BATON_DASH_SLOW_JOB=$SLOW_JOB \
  BATON_DASH_LONG_JOB=$LONG_JOB \
  BATON_DASH_ARTIFACTS=$artifacts BATON_DASH_SCRATCH=$tmp/browser BATON_CHROMIUM=$chromium \
  timeout -k 5 180 node "$root/tests/browser/dashboard.test.js"
rc=$?
count=$(cat "$tmp/count" 2>/dev/null || echo 0)
n=$((n + count))
if [ "$rc" -ne 0 ]; then failed=$((failed + 1)); fi
if [ "$count" -eq 0 ]; then ok 1 "the browser test ran (exit $rc)"; fi
diag "browser part: $((SECONDS - t0)) s; whole test: $((SECONDS - t_start)) s"
if [ "$failed" -ne 0 ]; then
  diag "--- $A log (tail)"; tail -n 15 "$tmp/$A.log" | diag
fi

echo "1..$n"
[ "$failed" -eq 0 ]
