#!/bin/sh
# tools/etcd-roles.sh: least-privilege etcd roles and users for baton
# (docs/security.md, "etcd roles"). Run it with etcd's root user (or on an
# etcd without auth yet, with --enable-auth); it prints every etcdctl
# command it runs (passwords never: they reach etcdctl on stdin or in its
# environment, not on its command line).
set -eu

help() {
  cat <<'EOF'
tools/etcd-roles.sh [--endpoints URLS] [--prefix P] [--user root[:@FILE]]
    [--cacert F] [--cert F] [--key F] [--roles-prefix baton-] [--timeout S]
    [--node NAME[:@FILE]] [--deployer NAME[:@FILE]] [--viewer NAME[:@FILE]]
    [--enable-auth [--root-password @FILE]] [--dry-run]

Creates three etcd roles (named <roles-prefix>node, ...deployer, ...viewer),
each limited to the prefix P (default /baton/, or $BATON_PREFIX):
  node      read P; readwrite P nodes/ election/ clock/ claims/ status/
            policy-status/ runs/ running/ inflight/ pending/ active/
            cancel/ last/ output/ queue/ trigger/ paused/ notify/ (what
            a node writes: its session, claims, run records, statuses,
            output, election, clock, the notifiers' outbox; and its HTTP
            API's run, kill, pause, resume and queue push). Not jobs/,
            policies/, versions/, policy-versions/, calendars/ or config/:
            a node's credentials cannot deploy code or say where
            notifications go, and neither can its HTTP API (deploys go
            through `baton job put` under a deployer's user)
  deployer  read P; readwrite P jobs/ policies/ versions/ policy-versions/
            paused/ trigger/ cancel/ queue/ config/ (`baton notify set`)
            notify/, and the keys `job rm` and `policy rm` clean up:
            status/ policy-status/ pending/, and with --purge runs/
            output/ last/
  viewer    read P
A user given as --node/--deployer/--viewer NAME gets the role (created if
absent, else its password is kept). --enable-auth creates user root (when
absent) with role root, then runs `etcdctl auth enable`.

Passwords (of the users, of root with --user and --root-password):
  NAME:@FILE   FILE's first line (umask 077; one file per user)
  NAME         asked for on the terminal (stdin must be one); for --user,
               $ETCDCTL_PASSWORD when set
  NAME:PW      accepted, with a warning: ps shows the script's command line
  --root-password takes @FILE or PW the same way (asked for when absent and
  root must be created).

  --endpoints URLS   etcd (default $ETCDCTL_ENDPOINTS, $BATON_ENDPOINTS or
                     http://127.0.0.1:2379)
  --cacert, --cert, --key   TLS files for etcdctl ($ETCDCTL_CACERT, ...)
  --timeout S        seconds each etcdctl call may take (default 10): an
                     etcd that does not answer ends the script with one line
  --dry-run          print the commands without running them
EOF
}
usage() {
  help | sed -n '1,4p' >&2
  exit 2
}
die() { # STATUS MESSAGE
  echo "etcd-roles.sh: $2" >&2
  exit "$1"
}

endpoints=${ETCDCTL_ENDPOINTS:-${BATON_ENDPOINTS:-http://127.0.0.1:2379}}
prefix=${BATON_PREFIX:-/baton/}
user=${ETCDCTL_USER:-} cacert=${ETCDCTL_CACERT:-} cert=${ETCDCTL_CERT:-} key=${ETCDCTL_KEY:-}
envpw=${ETCDCTL_PASSWORD:-}
rp="baton-" node="" deployer="" viewer="" timeout=10
# (etcdctl refuses a flag that an ETCDCTL_ variable also sets: the script
# passes flags only, and the password in ETCDCTL_PASSWORD, which it sets
# for etcdctl alone)
unset ETCDCTL_ENDPOINTS ETCDCTL_USER ETCDCTL_PASSWORD ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY \
  ETCDCTL_DIAL_TIMEOUT ETCDCTL_COMMAND_TIMEOUT
enable=0 rootpw="" dry=0

while [ $# -gt 0 ]; do
  case "$1" in
    --endpoints|--prefix|--user|--cacert|--cert|--key|--roles-prefix|--node|--deployer|--viewer|--root-password|--timeout)
      [ $# -gt 1 ] || { echo "etcd-roles.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case "$1" in
    --endpoints) endpoints=$2; shift ;;
    --prefix) prefix=$2; shift ;;
    --user) user=$2; shift ;;
    --cacert) cacert=$2; shift ;;
    --cert) cert=$2; shift ;;
    --key) key=$2; shift ;;
    --roles-prefix) rp=$2; shift ;;
    --node) node=$2; shift ;;
    --deployer) deployer=$2; shift ;;
    --viewer) viewer=$2; shift ;;
    --enable-auth) enable=1 ;;
    --root-password) rootpw=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --dry-run) dry=1 ;;
    -h|--help) help; exit 0 ;;
    *) echo "etcd-roles.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
case "$prefix" in */) ;; *) prefix="$prefix/" ;; esac
case "$prefix" in /*) ;; *) die 2 "--prefix must start with /" ;; esac
case "$timeout" in ''|*[!0-9]*|0) die 2 "--timeout: a whole number of seconds > 0, not \"$timeout\"" ;; esac

# Sets pw to the password that SPEC gives (PW, @FILE, or empty: ask on the
# terminal), for WHAT (a user name, for messages).
read_pw() { # SPEC WHAT
  case "$1" in
    @*)
      f=${1#@}
      [ -f "$f" ] && [ -r "$f" ] || die 2 "$2: cannot read the password file $f"
      pw=$(head -n 1 -- "$f" | tr -d '\r')
      ;;
    "")
      [ -t 0 ] || die 2 "$2: no password given, and stdin is not a terminal to ask on: give $2:@FILE"
      printf 'password of etcd user %s: ' "$2" >&2
      stty -echo 2>/dev/null || true
      IFS= read -r pw || pw=""
      stty echo 2>/dev/null || true
      echo >&2
      ;;
    *)
      echo "etcd-roles.sh: warning: the password of $2 is on the command line, where ps shows it: give $2:@FILE" >&2
      pw=$1
      ;;
  esac
  [ -n "$pw" ] || die 2 "$2: the password is empty"
}

# The connecting user: its name and password (given to etcdctl in its
# environment, never in its argv).
user_name="" user_pw=""
if [ -n "$user" ]; then
  user_name=${user%%:*}
  [ -n "$user_name" ] || die 2 "--user: give NAME, NAME:@FILE (or NAME:PW)"
  case "$user" in
    *:*) read_pw "${user#*:}" "$user_name" ;;
    *) if [ -n "$envpw" ]; then pw=$envpw; else read_pw "" "$user_name"; fi ;;
  esac
  user_pw=$pw
fi
# A password file that cannot be read stops the script before it starts.
for spec in "$node" "$deployer" "$viewer" "root:$rootpw"; do
  case "$spec" in *:@*) f=${spec#*:@}; [ -f "$f" ] && [ -r "$f" ] || die 2 "${spec%%:*}: cannot read the password file $f" ;; esac
done
[ "$dry" = 1 ] || command -v etcdctl >/dev/null 2>&1 || die 1 "etcdctl not found (Debian: apt-get install etcd-client)"

# etcdctl with the connection flags and the time limit, silently. The
# auth commands (role, user) take no --command-timeout (etcdctl 3.4 waits
# on them forever when etcd does not answer): timeout(1) ends them.
ctl() {
  set -- --endpoints="$endpoints" --dial-timeout="${timeout}s" --command-timeout="${timeout}s" "$@"
  [ -n "$user_name" ] && set -- --user="$user_name" "$@"
  [ -n "$cacert" ] && set -- --cacert="$cacert" "$@"
  [ -n "$cert" ] && set -- --cert="$cert" "$@"
  [ -n "$key" ] && set -- --key="$key" "$@"
  if [ -n "$user_pw" ]; then
    ETCDCTL_PASSWORD=$user_pw timeout -k 2 "$((timeout + 1))" etcdctl "$@"
  else
    timeout -k 2 "$((timeout + 1))" etcdctl "$@"
  fi
}
# One line for etcdctl's failure (status rc, output out) at WHAT: its
# "Error:" line, or that etcd did not answer in time.
fail() { # RC WHAT
  if [ "$1" = 124 ] || [ "$1" = 137 ] || printf '%s' "$out" | grep -q 'deadline exceeded'; then
    die 1 "${2:+$2: }no answer from etcd at $endpoints within ${timeout} s (is it running? --endpoints, --timeout)"
  fi
  why=$(printf '%s\n' "$out" | sed -n 's/^Error: *//p' | tail -n 1)
  [ -n "$why" ] || why=$(printf '%s\n' "$out" | grep -v '^{' | tail -n 1)
  die 1 "${2:-etcd at $endpoints}: ${why:-etcdctl exited with status $1}"
}
# Prints the command, runs it; on failure says why in one line and exits.
run() {
  echo "+ etcdctl $*"
  [ "$dry" = 1 ] && return 0
  rc=0
  out=$(ctl "$@" 2>&1) || rc=$?
  [ "$rc" = 0 ] || fail "$rc" "etcdctl $*"
}
exists() { # role|user NAME: 0 if it exists, 1 if not; exits on any other failure
  [ "$dry" = 1 ] && return 1
  rc=0
  out=$(ctl "$1" get "$2" 2>&1) || rc=$?
  [ "$rc" = 0 ] && return 0
  case "$out" in *"name not found"*) return 1 ;; esac
  fail "$rc" "etcdctl $1 get $2"
}
role() { # NAME, then PERM KEY-SUFFIX pairs
  r=$1; shift
  if exists role "$r"; then echo "role $r exists; adding its permissions"; else run role add "$r"; fi
  while [ $# -gt 1 ]; do
    run role grant-permission "$r" --prefix=true "$1" "$prefix$2"
    shift 2
  done
}
# A node role made by an older version of this script, or widened by hand,
# may still write code: the grants above turned its readwrite P into read
# P; this revokes a write grant left on jobs/, policies/, versions/,
# policy-versions/ or calendars/, and stops on any other write grant that
# covers them (a parent of P).
narrow_node() { # ROLE
  [ "$dry" = 1 ] && return 0
  rc=0
  out=$(ctl role get "$1" 2>&1) || rc=$?
  [ "$rc" = 0 ] || fail "$rc" "etcdctl role get $1"
  writes=$(printf '%s\n' "$out" | sed -n '/^KV Write:/,$s/^[[:space:]].*(prefix \(.*\))$/\1/p')
  [ -n "$writes" ] || return 0
  printf '%s\n' "$writes" | while IFS= read -r w; do
    for k in jobs/ policies/ versions/ policy-versions/ calendars/; do
      if [ "$w" = "$prefix$k" ]; then
        run role revoke-permission "$1" --prefix=true "$w"
      else
        case "$prefix$k" in
          "$w"*) die 1 "role $1 may write $prefix$k through its grant on the prefix $w: revoke it (etcdctl role revoke-permission $1 --prefix=true $w) and run this again" ;;
        esac
      fi
    done
  done || exit 1
}
adduser() { # NAME[:PW|:@FILE] ROLE [PW-SPEC]
  n=${1%%:*}
  [ -n "$n" ] || die 2 "a user needs a name: NAME:@FILE"
  if exists user "$n"; then
    echo "user $n exists; keeping its password"
  else
    case "$1" in *:*) read_pw "${1#*:}" "$n" ;; *) read_pw "${3-}" "$n" ;; esac
    echo "+ etcdctl user add $n --interactive=false  (password on stdin)"
    if [ "$dry" = 0 ]; then
      rc=0
      out=$(printf '%s\n' "$pw" | ctl user add "$n" --interactive=false 2>&1) || rc=$?
      [ "$rc" = 0 ] || fail "$rc" "etcdctl user add $n"
    fi
  fi
  run user grant-role "$n" "$2"
}

echo "baton roles under $prefix at $endpoints"
# One quick call first: an etcd that is not there, or a wrong password,
# ends the script before it changes anything.
if [ "$dry" = 0 ]; then
  rc=0
  out=$(ctl get --keys-only --limit=1 "$prefix" 2>&1) || rc=$?
  [ "$rc" = 0 ] || fail "$rc" ""
fi
role "${rp}node" read "" \
  readwrite nodes/ readwrite election/ readwrite clock/ readwrite claims/ readwrite status/ \
  readwrite policy-status/ readwrite runs/ readwrite running/ readwrite inflight/ readwrite pending/ \
  readwrite active/ readwrite cancel/ readwrite last/ readwrite output/ readwrite queue/ \
  readwrite trigger/ readwrite paused/ readwrite notify/
narrow_node "${rp}node"
role "${rp}viewer" read ""
role "${rp}deployer" read "" \
  readwrite jobs/ readwrite policies/ readwrite versions/ readwrite policy-versions/ readwrite paused/ readwrite trigger/ \
  readwrite cancel/ readwrite queue/ readwrite status/ readwrite policy-status/ readwrite pending/ \
  readwrite runs/ readwrite output/ readwrite last/ readwrite config/ readwrite notify/
[ -n "$node" ] && adduser "$node" "${rp}node"
[ -n "$deployer" ] && adduser "$deployer" "${rp}deployer"
[ -n "$viewer" ] && adduser "$viewer" "${rp}viewer"
if [ "$enable" = 1 ]; then
  exists role root || run role add root
  if ! exists user root; then
    adduser root root "$rootpw"
  else
    run user grant-role root root
  fi
  run auth enable
fi
echo "done"
