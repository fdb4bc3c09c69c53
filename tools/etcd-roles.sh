#!/bin/sh
# tools/etcd-roles.sh: least-privilege etcd roles and users for baton
# (docs/security.md, "etcd roles"). Run it with etcd's root user (or on an
# etcd without auth yet, with --enable-auth); it prints every etcdctl
# command it runs (passwords shown as ***).
#
#   tools/etcd-roles.sh [--endpoints URLS] [--prefix P] [--user root:PW]
#       [--cacert F] [--cert F] [--key F] [--roles-prefix baton-]
#       [--node NAME:PW] [--deployer NAME:PW] [--viewer NAME:PW]
#       [--enable-auth [--root-password PW]] [--dry-run]
#
# Roles (named <roles-prefix>node, ...deployer, ...viewer), each limited to
# the prefix P (default /baton/):
#   node      readwrite P (everything a node does: its session, claims, run
#             records, statuses, output, election, clock)
#   deployer  read P; readwrite P jobs/ policies/ versions/
#             policy-versions/ paused/ trigger/ cancel/ queue/ -- and the keys `job rm` and
#             `policy rm` clean up: status/ policy-status/ pending/, and
#             with --purge runs/ output/ last/
#   viewer    read P
# A user given as NAME:PW gets the role (created if absent); PW may be
# @FILE to read the password from FILE's first line. --enable-auth creates
# user root (--root-password, required when root does not exist) with role
# root, then runs `etcdctl auth enable`.
set -eu

endpoints=${ETCDCTL_ENDPOINTS:-${BATON_ENDPOINTS:-http://127.0.0.1:2379}}
prefix=${BATON_PREFIX:-/baton/}
user=${ETCDCTL_USER:-} cacert=${ETCDCTL_CACERT:-} cert=${ETCDCTL_CERT:-} key=${ETCDCTL_KEY:-}
rp="baton-" node="" deployer="" viewer=""
# (etcdctl refuses a flag that an ETCDCTL_ variable also sets: the script
# passes flags only)
unset ETCDCTL_ENDPOINTS ETCDCTL_USER ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY
enable=0 rootpw="" dry=0

usage() {
  sed -n '7,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
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
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "etcd-roles.sh: unknown argument $1" >&2; usage ;;
  esac
  [ $# -gt 0 ] && shift
done
case "$prefix" in */) ;; *) prefix="$prefix/" ;; esac
case "$prefix" in /*) ;; *) echo "etcd-roles.sh: --prefix must start with /" >&2; exit 2 ;; esac

# etcdctl with the connection flags, silently.
ctl() {
  set -- --endpoints="$endpoints" "$@"
  [ -n "$user" ] && set -- --user="$user" "$@"
  [ -n "$cacert" ] && set -- --cacert="$cacert" "$@"
  [ -n "$cert" ] && set -- --cert="$cert" "$@"
  [ -n "$key" ] && set -- --key="$key" "$@"
  etcdctl "$@"
}
# Prints the command, runs it; on failure prints etcdctl's words and exits.
run() {
  echo "+ etcdctl $*"
  [ "$dry" = 1 ] && return 0
  out=$(ctl "$@" 2>&1) || { printf '%s\n' "$out" >&2; echo "etcd-roles.sh: etcdctl $* failed" >&2; exit 1; }
}
exists() { # role|user NAME
  [ "$dry" = 1 ] && return 1
  ctl "$1" get "$2" >/dev/null 2>&1
}
role() { # NAME, then PERM KEY-SUFFIX pairs
  r=$1; shift
  if exists role "$r"; then echo "role $r exists; adding its permissions"; else run role add "$r"; fi
  while [ $# -gt 1 ]; do
    run role grant-permission "$r" --prefix=true "$1" "$prefix$2"
    shift 2
  done
}
# The password of NAME:PW (PW = @FILE: FILE's first line).
pw_of() {
  p=${1#*:}
  case "$p" in @*) head -n 1 -- "${p#@}" ;; *) printf '%s' "$p" ;; esac
}
adduser() { # NAME:PW ROLE
  n=${1%%:*}
  case "$1" in *:*) ;; *) echo "etcd-roles.sh: $1: give NAME:PASSWORD (or NAME:@FILE)" >&2; exit 2 ;; esac
  pw=$(pw_of "$1")
  if exists user "$n"; then
    echo "user $n exists; keeping its password"
  else
    echo "+ etcdctl user add $n --interactive=false  (password *** on stdin)"
    if [ "$dry" = 0 ]; then
      out=$(printf '%s\n' "$pw" | ctl user add "$n" --interactive=false 2>&1) ||
        { printf '%s\n' "$out" >&2; echo "etcd-roles.sh: etcdctl user add $n failed" >&2; exit 1; }
    fi
  fi
  run user grant-role "$n" "$2"
}

echo "baton roles under $prefix at $endpoints"
role "${rp}node" readwrite ""
role "${rp}viewer" read ""
role "${rp}deployer" read "" \
  readwrite jobs/ readwrite policies/ readwrite versions/ readwrite policy-versions/ readwrite paused/ readwrite trigger/ \
  readwrite cancel/ readwrite queue/ readwrite status/ readwrite policy-status/ readwrite pending/ \
  readwrite runs/ readwrite output/ readwrite last/
[ -n "$node" ] && adduser "$node" "${rp}node"
[ -n "$deployer" ] && adduser "$deployer" "${rp}deployer"
[ -n "$viewer" ] && adduser "$viewer" "${rp}viewer"
if [ "$enable" = 1 ]; then
  exists role root || run role add root
  if ! exists user root; then
    [ -n "$rootpw" ] || { echo "etcd-roles.sh: --enable-auth: no user root yet; give --root-password" >&2; exit 2; }
    adduser "root:$rootpw" root
  else
    run user grant-role root root
  fi
  run auth enable
fi
echo "done"
