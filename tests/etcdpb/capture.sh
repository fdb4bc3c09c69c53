#!/usr/bin/env bash
# tests/etcdpb/capture.sh: checks runtime/core/etcdpb.c against etcd's own
# JSON gateway and (re)writes the fixtures of tests/c/test-etcdpb.c
# (tests/c/etcdpb/) and the seeds of fuzz/etcdpb_fuzz.c (fuzz/corpus/etcdpb/).
#
# The same scripted requests (tests/etcdpb/capture.js) run twice, each time
# against a fresh etcd with the same name, ports and cluster token, so that
# cluster and member ids, revisions and raft terms come out the same: once
# through the gateway (its JSON answers), once through gRPC (the request
# bodies encoded by etcdpb.c, the raw protobuf answers kept). Then every
# raw answer decoded by etcdpb.c must equal the gateway's JSON, except the
# few values that differ between two runs whatever the client (compare.js
# says which). Needs etcd, node and tests/bench/grpc/node_modules (npm ci
# there, or tools/deps.sh test); run from the top of the tree after `make`:
#
#   tests/etcdpb/capture.sh            compare, then write the fixtures
#   tests/etcdpb/capture.sh --check    compare only
set -euo pipefail
cd "$(dirname "$0")/../.."
for v in $(compgen -e); do case "$v" in ETCD_* | ETCDCTL_*) unset "$v" ;; esac; done
build=${BUILD:-build}
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cc -std=gnu11 -g -O1 -Iruntime/core -I"$build/gen" -o "$work/pbtool" tests/etcdpb/pbtool.c \
  runtime/core/etcdpb.c runtime/core/b64.c runtime/core/err.c "$build/gen/etcd.pb-c.c" \
  $(pkg-config --cflags --libs libprotobuf-c libcjson libuv) -lm
read -r cport pport < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
url=http://127.0.0.1:$cport

run() { # MODE
  etcd --name pbcapture --data-dir "$work/data-$1" --initial-cluster-token pbcapture \
    --listen-client-urls "$url" --advertise-client-urls "$url" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "pbcapture=http://127.0.0.1:$pport" --unsafe-no-fsync --bcrypt-cost=4 \
    >"$work/etcd-$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
  NODE_PATH=tests/bench/grpc/node_modules node tests/etcdpb/capture.js "$1" "$url" "$work/pbtool" "$work/$1"
  kill "$pid"; wait "$pid" || true; pid=""
}
run gw
run grpc
NODE_PATH=tests/bench/grpc/node_modules node tests/etcdpb/compare.js "$work/pbtool" "$work/gw" "$work/grpc" \
  ${1:+"$1"} tests/c/etcdpb fuzz/corpus/etcdpb
