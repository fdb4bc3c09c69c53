#!/bin/sh
# Installs the Debian packages baton needs to build and test, if any is
# missing: apt-get as root (updating the package lists only when a package
# cannot be found), otherwise prints the exact command and fails.
set -u
pkgs="libluajit-5.1-dev libuv1-dev libcurl4-openssl-dev libcjson-dev pkg-config
      etcd-server etcd-client tzdata openssl build-essential faketime"
missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
  case "$st" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
node_deps() {
  # The pinned reference implementation of the differential cron test
  # (tests/cron/package-lock.json). Without node or the registry the live
  # half of that test skips; the committed fixtures are still checked.
  root=$(cd "$(dirname "$0")/.." && pwd)
  if [ ! -f "$root/tests/cron/node_modules/cron-parser/package.json" ] &&
     command -v npm >/dev/null 2>&1; then
    (cd "$root/tests/cron" && npm ci --no-audit --no-fund --loglevel=error \
       >/dev/null 2>&1) || echo "baton: npm ci in tests/cron failed; the live cron differential test will skip" >&2
  fi
  return 0
}
[ -z "$missing" ] && { node_deps; exit 0; }
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
  echo "baton: missing packages:$missing" >&2
  echo "baton: run as root: $cmd" >&2
  exit 1
fi
echo "baton: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends $missing >/dev/null 2>&1; then
  apt-get update >/dev/null 2>&1 || { echo "baton: apt-get update failed" >&2; exit 1; }
  apt-get install -y --no-install-recommends $missing || {
    echo "baton: could not install:$missing" >&2; exit 1; }
fi
node_deps
