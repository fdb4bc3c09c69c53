#!/bin/sh
# tools/deps.sh [build|demo|test]: installs the Debian packages of a set
# that are missing: apt-get as root (updating the package lists only when a
# package cannot be found), otherwise prints the exact command and fails.
#   build  what `make` and `make install` need to build bin/baton (and
#          `make deb` to package it): the compiler, pkg-config, the -dev
#          packages of the libraries it links, and tzdata, whose zones it reads
#   demo   build, and etcd (`make demo` and examples/ start a throwaway one)
#   test   demo, and what the suite, `make chaos` and `make bench` use:
#          faketime, openssl, curl, prometheus (promtool), chromium, wrk,
#          lua-check (luacheck), node and npm; then `npm ci` in the tests'
#          directories (the default)
# The Makefile picks the set: `make` build, `make demo` demo, `make deps`
# and `make test` test.
set -u
kind=${1:-test}
build="build-essential dpkg-dev pkg-config libluajit-5.1-dev libuv1-dev
       libcurl4-openssl-dev libcjson-dev libmicrohttpd-dev libsodium-dev
       libssl-dev libnghttp2-dev libseccomp-dev libprotobuf-c-dev protobuf-c-compiler
       tzdata"
demo="etcd-server etcd-client"
test="faketime openssl curl prometheus chromium wrk lua-check"
case $kind in
  build) pkgs=$build ;;
  demo) pkgs="$build $demo" ;;
  test) pkgs="$build $demo $test" ;;
  *) echo "usage: $0 [build|demo|test]" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
  case "$st" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
# node and npm for tests/cron, tests/browser and tests/bench/grpc: Debian's
# nodejs and npm, unless a node with its own npm (NodeSource's nodejs, which
# provides and conflicts with Debian's npm) is installed already.
if [ "$kind" = test ]; then
  command -v node >/dev/null 2>&1 || missing="$missing nodejs"
  command -v npm >/dev/null 2>&1 || missing="$missing npm"
fi
# npm_ci DIR MODULE WHAT: npm ci in DIR (its package-lock.json pins every
# version) unless DIR/node_modules/MODULE is there already; on failure,
# says that WHAT will skip.
npm_ci() {
  [ -f "$root/$1/node_modules/$2/package.json" ] && return 0
  (cd "$root/$1" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error \
     >/dev/null 2>&1) || echo "baton: npm ci in $1 failed; $3 will skip" >&2
}
node_deps() {
  [ "$kind" = test ] || return 0
  root=$(cd "$(dirname "$0")/.." && pwd)
  command -v npm >/dev/null 2>&1 || return 0
  # The pinned reference implementation of the differential cron test.
  # Without node or the registry the live half of that test skips; the
  # committed fixtures are still checked.
  npm_ci tests/cron cron-parser "the live cron differential test"
  # puppeteer-core for the dashboard's browser test (tests/cluster/dashboard.sh):
  # it drives Debian's chromium and never downloads a browser.
  npm_ci tests/browser puppeteer-core "the dashboard browser test"
  # etcd3 (grpc-js) for the reference side of tests/bench/etcd-transport, which
  # compares etcd's CPU per request for baton's client and for etcd3.
  npm_ci tests/bench/grpc etcd3 "the reference side of the etcd-transport bench"
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
