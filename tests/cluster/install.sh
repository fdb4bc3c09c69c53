#!/usr/bin/env bash
# make install, make uninstall and make deb, tried as an operator would:
# install into a temporary root (DESTDIR) and use it from a directory
# outside the source tree, without BATON_LUADIR (the program finds its
# library relative to itself): version, cron, check, and a node against the
# suite's etcd that runs a job in a worker. Then the man page, the docs,
# the bash completion, the unit and its sysusers user; uninstall leaving
# nothing; SYSCONFDIR=/etc; make install PREFIX=... as a user who may write
# nothing but the prefix; the Debian package (dpkg-deb -x, its
# dependencies, conffile, copyright file, docs, maintainer scripts against
# a temporary root); the one-line message of a program without its
# library; the licence files; which packages make, make demo and make test
# install; and make dist with its tag scheme.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
: "${BATON_ENDPOINTS:?run me with tests/harness/run-tests}"
version=$(cat "$root/VERSION")

n=0 failed=0
ok() { # STATUS NAME
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
  return "$1"
}
skip() { n=$((n + 1)); echo "ok $n # skip $1"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /' >&2; }
is() { # GOT EXPECTED NAME
  if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; diag "     got: '$1'" "expected: '$2'"; return 1; fi
}
like() { # GOT PATTERN(grep -E) NAME
  if grep -qE -- "$2" <<<"$1"; then ok 0 "$3"; else ok 1 "$3"; diag "     got: '$1'" "expected to match: '$2'"; return 1; fi
}
eventually() { # SECS CMD...
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

tmp=$(mktemp -d "${BATON_TEST_TMP:-${TMPDIR:-/tmp}}/baton-install.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  etcdctl --endpoints="$BATON_ENDPOINTS" del --prefix "/test/install/$$/" >/dev/null 2>&1
  rm -rf -- "$tmp" ${userdir:+"$userdir"}
}
userdir=""
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Everything runs from here, far from the source tree, and without the
# suite's LUA_PATH or any BATON_LUADIR.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere" || exit 1
unset BATON_LUADIR LUA_PATH

# (not the make that runs the suite: its flags and jobserver are not ours)
mk() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make -s --no-print-directory -C "$root" INSTALL_BUILD="$tmp/build" "$@"
}

# try BIN LIBDIR WHAT: the installed program at work: version, cron, check,
# its library, and a node that runs a job (in a worker, so the worker finds
# the same library) and shows in baton nodes.
try() {
  local bin=$1 libdir=$2 what=$3 share out P name
  share=$(dirname "$libdir")
  is "$("$bin" version)" "baton $version" "$what: baton version"
  out=$("$bin" cron '0 3 * * *' -n 2 --from 2026-01-01T00:00:00Z)
  is "$out" $'2026-01-01T03:00:00Z\n2026-01-02T03:00:00Z' "$what: baton cron '0 3 * * *' -n 2"
  out=$("$bin" check "$share/jobs/pg-backup.lua" 2>&1)
  ok $? "$what: baton check of the shipped jobs/pg-backup.lua" || diag "$out"
  out=$("$bin" check "$share/policies/examples/near_db.lua" 2>&1)
  ok $? "$what: baton check of a shipped policy, through share/baton/policies" || diag "$out"
  echo 'print(baton._libdir)' >"$tmp/libdir.lua"
  is "$("$bin" eval "$tmp/libdir.lua")" "$libdir" "$what: the library is found next to the program"

  P=/test/install/$$/$RANDOM/
  name=inst-$RANDOM
  "$bin" --prefix "$P" node --name "$name" --ttl 3 >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  eventually 10 "$bin" --prefix "$P" leader
  ok $? "$what: a node starts and leads" || diag "$(tail -5 "$tmp/$name.log")"
  cat >"$tmp/where.lua" <<'EOF'
return { schedule = "@manual", run = function(ctx)
  print("worker " .. baton.version .. " " .. baton._libdir)
end }
EOF
  "$bin" --prefix "$P" job put "$tmp/where.lua" >/dev/null 2>&1 &&
    eventually 10 "$bin" --prefix "$P" job run where
  ok $? "$what: job put and job run"
  out=""
  eventually 15 sh -c "'$bin' --prefix '$P' job logs where 2>/dev/null | grep -q 'worker '"
  out=$("$bin" --prefix "$P" job logs where 2>&1)
  like "$out" "worker $version $libdir\$" "$what: the run's worker has the same version and library"
  out=$("$bin" --prefix "$P" nodes)
  like "$out" "^$name +$version " "$what: baton nodes shows the node's version"
  # Its worker shows as baton worker (started as /proc/self/exe).
  local w comm c
  w=""
  for c in $(pgrep -P "${pids[-1]}"); do
    if tr '\0' ' ' <"/proc/$c/cmdline" | grep -q " worker $"; then w=$c; break; fi
  done
  if [ -n "$w" ]; then
    is "$(tr '\0' ' ' <"/proc/$w/cmdline")" "$bin worker " "$what: ps shows the worker as $bin worker"
    is "$(cat "/proc/$w/comm")" "baton" "$what: and its name is baton"
  else
    skip "no worker left to look at"; skip "no worker left to look at"
  fi
  kill -TERM "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null
  unset 'pids[-1]'
  etcdctl --endpoints="$BATON_ENDPOINTS" del --prefix "$P" >/dev/null 2>&1
}

# ---- make install ---------------------------------------------------------

dest=$tmp/root
out=$(mk install DESTDIR="$dest" PREFIX=/usr/local 2>&1)
ok $? "make install DESTDIR=... PREFIX=/usr/local" || diag "$out"
bin=$dest/usr/local/bin/baton
lib=$dest/usr/local/share/baton/lua
missing=""
for f in usr/local/bin/baton usr/local/share/baton/lua/baton/core.lua \
         usr/local/share/baton/lua/baton/node/pool.lua usr/local/share/baton/lua/baton/web/index.html \
         usr/local/share/baton/lua/baton/policies/examples/near_db.lua \
         usr/local/share/baton/jobs/pg-backup.lua usr/local/share/baton/jobs/notify-webhook.lua \
         usr/local/share/baton/policies/default.lua usr/local/share/man/man1/baton.1 \
         usr/local/share/bash-completion/completions/baton \
         usr/local/lib/systemd/system/baton.service usr/local/lib/sysusers.d/baton.conf \
         usr/local/etc/default/baton usr/local/share/doc/baton/README.md \
         usr/local/share/doc/baton/CHANGELOG.md usr/local/share/doc/baton/LICENSE \
         usr/local/share/doc/baton/NOTICE usr/local/share/doc/baton/docs/guide.md; do
  [ -e "$dest/$f" ] || missing="$missing $f"
done
is "$missing" "" "it installs the program, library, jobs, policies, man page, docs, completion, unit, user, env file"
outside=$(cd "$dest" && find . -mindepth 1 ! -path ./usr ! -path './usr/local*' | head -5)
is "$outside" "" "and writes nothing outside DESTDIR/PREFIX (the env file is PREFIX/etc/default/baton)"
docs=$(cd "$root/docs" && ls -- *.md)
is "$(cd "$dest/usr/local/share/doc/baton/docs" && ls -- *.md)" "$docs" \
   "every docs/*.md is in share/doc/baton/docs, where README.md's links find them"
cmp -s "$root/LICENSE" "$dest/usr/local/share/doc/baton/LICENSE" &&
  cmp -s "$root/CHANGELOG.md" "$dest/usr/local/share/doc/baton/CHANGELOG.md"
ok $? "LICENSE and CHANGELOG.md are installed as they are"
n_lua=$(cd "$root/lua" && find . -type f ! -name '.*' | wc -l)
is "$(cd "$lib" && find . -type f | wc -l)" "$n_lua" "every file of lua/ is in share/baton/lua"
[ -x "$bin" ] && [ "$(stat -c %a "$bin")" = 755 ]
ok $? "the program is executable (755)"

try "$bin" "$lib" "installed"

# ---- man page, completion, unit, user ---------------------------------------

if command -v groff >/dev/null; then
  out=$(groff -man -ww -z "$dest/usr/local/share/man/man1/baton.1" 2>&1)
  is "$out" "" "the man page is clean roff (groff -man -ww)"
  out=$(MANWIDTH=80 man -l "$dest/usr/local/share/man/man1/baton.1" 2>/dev/null | col -bx)
  like "$out" "baton +- +distributed +job +scheduler" "man -l shows baton(1)"
  like "$out" "BATON_LUADIR" "which tells where the library is looked for"
else
  skip "no groff"; skip "no groff"; skip "no groff"
fi

completes() { # WORDS...: what bash completes for the last word
  PATH="$dest/usr/local/bin:$PATH" bash -c '
    source "$0"
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _baton; echo "${COMPREPLY[*]}"' "$dest/usr/local/share/bash-completion/completions/baton" "$@"
}
is "$(completes baton jo)" "job" "completion: a command"
is "$(completes baton job pa)" "pause" "completion: a subcommand"
is "$(completes baton node --wo)" "--workers" "completion: a command's flag (from its help)"
is "$(completes baton --end)" "--endpoints" "completion: a global flag"
is "$(completes baton check "$dest/usr/local/share/baton/jobs/pg")" \
   "$dest/usr/local/share/baton/jobs/pg-backup.lua" "completion: a Lua file"

unit=$dest/usr/local/lib/systemd/system/baton.service
missing=""
for d in "User=baton" "ExecStart=/usr/local/bin/baton node \$BATON_NODE_ARGS" \
         "EnvironmentFile=-/usr/local/etc/default/baton" "StateDirectory=baton" "ProtectSystem=strict" \
         "ProtectHome=read-only" "PrivateTmp=yes" "NoNewPrivileges=yes" "KillMode=mixed" \
         "KillSignal=SIGTERM"; do
  grep -qxF -- "$d" "$unit" || missing="$missing [$d]"
done
is "$missing" "" "the unit runs baton node as baton, with its env file, state dir, hardening, KillMode=mixed"
stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit")
[ "${stop:-0}" -gt 10 ]
ok $? "TimeoutStopSec ($stop s) is longer than a node's stop (grace 5 s for runs, 5 s for their records)"
! grep -q '^MemoryDenyWriteExecute' "$unit"
ok $? "no MemoryDenyWriteExecute (LuaJIT's JIT writes code)"
# Limits: the node and its runs together, and per run (Delegate=).
missing=""
for d in "Delegate=memory pids" "OOMPolicy=continue"; do
  grep -qxF -- "$d" "$unit" || missing="$missing [$d]"
done
is "$missing" "" "the unit delegates the memory controller (runs' limits) and keeps the node when a run is OOM-killed"
mem=$(sed -n 's/^MemoryMax=//p' "$unit")
like "$mem" '^([1-9][0-9]?%|[1-9][0-9]*[KMGT])$' "MemoryMax= caps the node and its runs together ($mem)"
tasks=$(sed -n 's/^TasksMax=//p' "$unit")
[ "${tasks:-0}" -ge 1024 ] 2>/dev/null
ok $? "TasksMax= caps their processes, with room for --workers 16 ($tasks)"
adj=$(sed -n 's/^OOMScoreAdjust=//p' "$unit")
[ -n "$adj" ] && [ "$adj" -lt 500 ] 2>/dev/null
ok $? "the node's OOM score adjustment ($adj) is below its workers' (500): they are killed first"
! grep -q '^ProtectControlGroups=yes' "$unit"
ok $? "ProtectControlGroups is not yes (it would make the delegated cgroup read-only)"
if command -v systemd-analyze >/dev/null; then
  mkdir "$tmp/unit"
  sed "s|^ExecStart=/usr/local/bin/baton|ExecStart=$bin|" "$unit" >"$tmp/unit/baton.service"
  out=$(systemd-analyze verify --man=no "$tmp/unit/baton.service" 2>&1)
  is "$out" "" "systemd-analyze verify finds nothing to say about the unit"
else
  skip "no systemd-analyze"
fi
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$tmp/sysroot/etc"
  systemd-sysusers --root="$tmp/sysroot" "$dest/usr/local/lib/sysusers.d/baton.conf" >/dev/null 2>&1
  like "$(grep '^baton:' "$tmp/sysroot/etc/passwd")" '^baton:x:[0-9]+:[0-9]+:[^:]*:/var/lib/baton:' \
    "sysusers.d/baton.conf makes the baton user, its home the state directory"
else
  skip "no systemd-sysusers"
fi

# ---- make install again, make uninstall --------------------------------------

envf=$dest/usr/local/etc/default/baton
echo "BATON_ENDPOINTS=http://etcd:2379" >"$envf"
out=$(mk install DESTDIR="$dest" PREFIX=/usr/local 2>&1)
ok $? "make install over an installed tree"
is "$(cat "$envf")" "BATON_ENDPOINTS=http://etcd:2379" "keeps the operator's env file"
out=$(mk uninstall DESTDIR="$dest" PREFIX=/usr/local 2>&1)
ok $? "make uninstall" || diag "$out"
like "$out" "kept $envf" "an edited env file is kept, and said so"
left=$(find "$dest" -mindepth 1 ! -path "$dest/usr" ! -path "$dest/usr/local" ! -path "$dest/usr/local/etc" \
       ! -path "$dest/usr/local/etc/default*" | head -5)
is "$left" "" "and removes everything else"
mk install DESTDIR="$tmp/root2" PREFIX=/usr/local >/dev/null 2>&1 &&
  mk uninstall DESTDIR="$tmp/root2" PREFIX=/usr/local >/dev/null 2>&1
left=$(find "$tmp/root2" -mindepth 1 | head -5)
is "$left" "" "install then uninstall leaves nothing (not a file, not a directory)"
is "$(mk uninstall DESTDIR="$dest" PREFIX=/usr/local 2>&1 | head -1)" \
   "baton: nothing to uninstall: no $dest/usr/local/share/baton/installed-files" "uninstall twice says so"

# /etc/default/baton when asked for, as the package has it.
out=$(mk install DESTDIR="$tmp/root3" PREFIX=/usr/local SYSCONFDIR=/etc 2>&1)
ok $? "make install SYSCONFDIR=/etc" || diag "$out"
[ -f "$tmp/root3/etc/default/baton" ] && [ ! -e "$tmp/root3/usr/local/etc" ] &&
  grep -qxF "EnvironmentFile=-/etc/default/baton" "$tmp/root3/usr/local/lib/systemd/system/baton.service"
ok $? "puts the env file in /etc/default/baton, and the unit reads it there"
# An upgrade with a plain make install keeps reading it (an install from
# before PREFIX/etc was the default has its env file there too).
out=$(mk install DESTDIR="$tmp/root3" PREFIX=/usr/local 2>&1)
[ $? -eq 0 ] && [ ! -e "$tmp/root3/usr/local/etc" ] &&
  grep -qxF "EnvironmentFile=-/etc/default/baton" "$tmp/root3/usr/local/lib/systemd/system/baton.service"
ok $? "make install over it keeps the unit on /etc/default/baton, writing no second env file"
like "$out" "keeping the settings file of the installed unit, /etc/default/baton" "and says so"
mk install DESTDIR="$tmp/root3" PREFIX=/usr/local SYSCONFDIR=/usr/local/etc >/dev/null 2>&1
[ -f "$tmp/root3/usr/local/etc/default/baton" ] &&
  grep -qxF "EnvironmentFile=-/usr/local/etc/default/baton" "$tmp/root3/usr/local/lib/systemd/system/baton.service"
ok $? "an explicit SYSCONFDIR moves it"
rm -rf -- "$tmp/root3"

# ---- make install PREFIX=... as a user --------------------------------------
# A user (a uid of no one: no file or process has it) installs from a
# checkout of their own, as built, into a prefix of their own, with
# everything but $tmp read-only (a mount namespace: every mount remounted
# read-only but /proc, /sys and /dev themselves), so that a write anywhere
# else, even to a world-writable /tmp or /dev/shm, would fail the install.

if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null || ! command -v setpriv >/dev/null; then
  for _ in 1 2 3 4 5 6; do skip "not root, or no unshare/setpriv: cannot act as another user"; done
else
  uid=$((61000 + RANDOM % 3000))
  while getent passwd "$uid" >/dev/null || pgrep -U "$uid" >/dev/null; do uid=$((uid + 1)); done
  # (the user's own directory: the suite's is not theirs to enter)
  u=$(mktemp -d /tmp/baton-install-user.XXXXXX)
  userdir=$u
  mkdir -p "$u/src/build" "$u/home" "$u/tmp"
  cp -a "$root"/{Makefile,VERSION,README.md,CHANGELOG.md,LICENSE,NOTICE,runtime,proto,lua,jobs,docs,tools} "$u/src/"
  [ -d "$root/build/obj" ] && cp -a "$root/build/obj" "$u/src/build/"
  chown -R "$uid:$uid" "$u"
  # as_user CMD...: CMD as the user, in the namespace, in a clean environment.
  as_user() {
    unshare --mount --propagation private sh -c '
      t=$1 bad=""; shift
      mount --bind "$t" "$t" || exit 97
      for m in $(awk "{ print \$5 }" /proc/self/mountinfo); do
        case $m in "$t" | /proc | /proc/* | /sys | /sys/* | /dev) continue ;; esac
        mount -o remount,bind,ro "$m" 2>/dev/null || bad="$bad $m"
      done
      [ -z "$bad" ] || echo "# could not make read-only:$bad" >&2
      exec setpriv --reuid="$0" --regid="$0" --clear-groups env -i PATH="$PATH" \
        HOME="$t/home" TMPDIR="$t/tmp" "$@"' "$uid" "$u" "$@"
  }
  out=$(as_user make -s --no-print-directory -C "$u/src" install PREFIX="$u/prefix" 2>&1)
  ok $? "make install PREFIX=\$dir/prefix as a user (uid $uid, in \$dir/src) succeeds, with all but \$dir read-only" ||
    diag "$out"
  # (an earlier make install wrote /etc/default/baton, outside the prefix)
  manifest=$u/prefix/share/baton/installed-files
  listed=$(sed -n 's/^[fc] //p' "$manifest" 2>/dev/null | sort)
  found=$(find "$u/prefix" ! -type d 2>/dev/null | sort)
  [ -n "$found" ] && [ "$listed" = "$found" ] &&
    awk -v p="$u/prefix" '{ x = substr($0, 3); if (x != p && index(x, p "/") != 1) bad = 1 } END { exit bad }' "$manifest"
  ok $? "what it wrote is the prefix's files, and its list names nothing outside the prefix" ||
    diag "$(diff <(echo "$listed") <(echo "$found") | head -5)"
  is "$(ls -A "$u/tmp")" "" "its temporary files (TMPDIR) are gone"
  [ -f "$u/prefix/etc/default/baton" ] &&
    grep -qxF "EnvironmentFile=-$u/prefix/etc/default/baton" "$u/prefix/lib/systemd/system/baton.service"
  ok $? "the env file is PREFIX/etc/default/baton, and the unit reads it there"
  out=$(setpriv --reuid="$uid" --regid="$uid" --clear-groups "$u/prefix/bin/baton" check \
        "$u/prefix/share/baton/jobs/pg-backup.lua" 2>&1)
  ok $? "the user's installed baton runs: baton check of its shipped pg-backup.lua" || diag "$out"
  printf '%s\n' 'print(io.open("/proc/self/maps"):read("*a"):find(arg[1], 1, true) ~= nil)' >"$u/maps.lua"
  chmod 644 "$u/maps.lua"
  out=$(setpriv --reuid="$uid" --regid="$uid" --clear-groups "$u/prefix/bin/baton" eval \
        "$u/maps.lua" "$u/prefix/share/baton/lua.pack" 2>&1)
  is "$out" "true" "it maps its library's pack, PREFIX/share/baton/lua.pack (runtime/core/lib.h)"
  out=$(as_user make -s --no-print-directory -C "$u/src" uninstall PREFIX="$u/prefix" 2>&1)
  [ $? -eq 0 ] && [ -z "$(find "$u/prefix" -mindepth 1 2>/dev/null)" ]
  ok $? "make uninstall PREFIX=... as the user removes all of it" || diag "$out"
  rm -rf -- "$u"
fi

# ---- the program alone: no library -------------------------------------------

mkdir "$tmp/alone"
mk install DESTDIR="$tmp/a1" PREFIX=/usr/local >/dev/null 2>&1
cp "$tmp/a1/usr/local/bin/baton" "$tmp/alone/baton"
if [ -e /usr/local/share/baton/lua/baton/core.lua ]; then
  for _ in 1 2 3 4 5; do skip "baton is installed in /usr/local on this machine"; done
else
  bad=""
  for cmd in "eval x.lua" "node" "worker" "job ls" "job put x.lua" "policy ls" "nodes" "leader" \
             "check x.lua" "queue push q v" "lock l -- true" "elect -l e" "help job"; do
    # shellcheck disable=SC2086
    "$tmp/alone/baton" $cmd >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" != 1 ] || [ -s "$tmp/out" ] || [ "$(wc -l <"$tmp/err")" != 1 ]; then
      bad="$bad [$cmd: exit $rc, $(wc -l <"$tmp/err") lines]"
    fi
  done
  is "$bad" "" "without its library, every command that needs it prints one line and exits 1"
  msg=$(cat "$tmp/err")
  is "$msg" "baton: baton's Lua library is not installed: no baton/core.lua in $tmp/share/baton/lua, $tmp/lua or /usr/local/share/baton/lua; set BATON_LUADIR to its directory" \
     "the line names every place searched and BATON_LUADIR"
  msg=$(BATON_LUADIR=/nonexistent/lua "$tmp/alone/baton" job ls 2>&1)
  is "$msg" "baton: baton's Lua library is not in BATON_LUADIR=/nonexistent/lua (no baton/core.lua there)" \
     "a BATON_LUADIR without the library is named"
  is "$("$tmp/alone/baton" version)" "baton $version" "baton version needs no library"
  out=$(BATON_LUADIR=$tmp/a1/usr/local/share/baton/lua "$tmp/alone/baton" eval "$tmp/libdir.lua")
  is "$out" "$tmp/a1/usr/local/share/baton/lua" "BATON_LUADIR points it at a library"
fi

# ---- make deb -----------------------------------------------------------------

if ! command -v dpkg-deb >/dev/null || ! command -v dpkg-shlibdeps >/dev/null; then
  skip "no dpkg-deb or dpkg-shlibdeps (dpkg-dev)"
else
  out=$(mk deb DEBDIR="$tmp/deb" 2>&1)
  ok $? "make deb" || diag "$out"
  deb=$(ls "$tmp"/deb/baton_"$version"_*.deb 2>/dev/null)
  [ -f "$deb" ]
  ok $? "it builds $(basename "${deb:-baton_$version.deb}")"
  is "$(dpkg-deb -f "$deb" Package Version | tr '\n' ' ')" "Package: baton Version: $version " \
     "package baton, version $version"
  depends=$(dpkg-deb -f "$deb" Depends)
  missing=""
  for p in libluajit-5.1-2 libuv1 libcjson1 libmicrohttpd12 libssl3; do
    grep -qE "(^|, )$p( |,|$)" <<<"$depends" || missing="$missing $p"
  done
  is "$missing" "" "Depends: libluajit-5.1-2, libuv1, libcjson1, libmicrohttpd12, libssl3 ($depends)"
  # Whatever else the program links is there too: every NEEDED library's
  # package is in Depends.
  missing=""
  dpkg-deb -x "$deb" "$tmp/debroot"
  for so in $(objdump -p "$tmp/debroot/usr/bin/baton" | awk '/NEEDED/ { print $2 }'); do
    so=$(ldd "$tmp/debroot/usr/bin/baton" | awk -v so="$so" '$1 == so && $2 == "=>" { print $3 }')
    p=$( (dpkg -S "$so" || dpkg -S "/usr$so" || dpkg -S "${so#/usr}") 2>/dev/null | head -1 | cut -d: -f1)
    if [ -z "$p" ]; then missing="$missing ?($so)"; continue; fi
    grep -qE "(^|, |\| )$p( |,|$)" <<<"$depends" || missing="$missing $p($so)"
  done
  is "$missing" "" "every library the program links is a dependency"
  is "$(dpkg-deb -f "$deb" Recommends)" "libcurl4 (>= 7.85)" "Recommends: libcurl4 (>= 7.85), what baton.http needs"
  is "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)" "/etc/default/baton" \
     "/etc/default/baton is a conffile"
  for s in postinst prerm postrm; do
    dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - "./$s" >"$tmp/$s"
  done
  sh -n "$tmp/postinst" && sh -n "$tmp/prerm" && sh -n "$tmp/postrm"
  ok $? "the maintainer scripts are valid sh"
  owners=$(dpkg-deb -c "$deb" | awk '{ print $2 }' | sort -u | tr '\n' ' ')
  is "$owners" "root/root " "every file belongs to root"
  [ -f "$tmp/debroot/usr/share/man/man1/baton.1.gz" ] &&
    [ -f "$tmp/debroot/usr/lib/systemd/system/baton.service" ] &&
    [ -f "$tmp/debroot/usr/lib/sysusers.d/baton.conf" ] &&
    [ ! -e "$tmp/debroot/usr/share/baton/installed-files" ]
  ok $? "the package has the unit, the sysusers file, the man page (gzip), and no install list"
  # The library's pack is that of the files as extracted (whole-second
  # mtimes, all a .deb keeps), so the installed package's processes use it.
  "$tmp/debroot/usr/bin/baton" _pack-lib "$tmp/debroot/usr/share/baton/lua" /usr/share/baton/lua \
    "$tmp/repack" && cmp -s "$tmp/repack" "$tmp/debroot/usr/share/baton/lua.pack"
  ok $? "the package's library pack matches its files as extracted, so it is not stale once installed"
  grep -qxF 'ExecStart=/usr/bin/baton node $BATON_NODE_ARGS' "$tmp/debroot/usr/lib/systemd/system/baton.service" &&
    grep -qxF 'EnvironmentFile=-/etc/default/baton' "$tmp/debroot/usr/lib/systemd/system/baton.service" &&
    [ -f "$tmp/debroot/etc/default/baton" ]
  ok $? "its unit runs /usr/bin/baton with /etc/default/baton, which it ships"

  # /usr/share/doc/baton: the copyright file and the docs.
  doc=$tmp/debroot/usr/share/doc/baton
  missing=""
  for f in copyright README.md CHANGELOG.md NOTICE $(cd "$root" && ls docs/*.md); do
    [ -f "$doc/$f" ] || missing="$missing $f"
  done
  is "$missing" "" "/usr/share/doc/baton has the copyright file, README.md, CHANGELOG.md, NOTICE and docs/*.md"
  [ ! -e "$doc/LICENSE" ]
  ok $? "and no LICENSE (the copyright file points to Debian's copy of the licence)"
  # Debian's machine-readable format (copyright-format 1.0): paragraphs of
  # Field: value lines with indented continuations; a header paragraph,
  # then Files paragraphs, each licence named there given its text in a
  # License paragraph.
  out=$(awk -v common=/usr/share/common-licenses '
    function para_end() {
      if (!nf) return
      np++
      if (np == 1) {
        if (f["Format"] != "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/") err("header: no Format of copyright-format 1.0")
        if (f["Upstream-Name"] != "baton") err("header: Upstream-Name is not baton")
      } else if ("Files" in f) {
        if (f["Copyright"] == "") err("Files " f["Files"] ": no Copyright")
        if (f["License"] == "") err("Files " f["Files"] ": no License")
        named[f["License"]] = 1
        if (f["Files"] == "*") star = 1
      } else if ("License" in f) {
        if (!body) err("License " f["License"] ": no text")
        given[f["License"]] = 1
      } else err("paragraph " np ": neither Files nor License")
      delete f; nf = 0; body = 0
    }
    function err(m) { print m; bad = 1 }
    /^$/ { para_end(); next }
    /^[ \t]/ { if (!nf) err("line " NR ": continuation outside a paragraph"); body = 1; next }
    /^[A-Za-z-]+:/ { k = $0; sub(/:.*/, "", k); v = $0; sub(/^[^:]*:[ \t]*/, "", v)
                     if (k in f) err("line " NR ": " k " twice"); f[k] = v; nf++; next }
    { err("line " NR ": not a field: " $0) }
    END {
      para_end()
      if (!star) err("no Files: * paragraph")
      for (l in named) if (!(l in given)) err("licence " l " has no License paragraph")
    }' "$doc/copyright")
  is "$out" "" "the copyright file is in Debian's machine-readable format"
  grep -q '^License: Apache-2.0$' "$doc/copyright" &&
    grep -qF '"/usr/share/common-licenses/Apache-2.0"' "$doc/copyright" &&
    [ -f /usr/share/common-licenses/Apache-2.0 ]
  ok $? "it licenses every file under Apache-2.0 and points to /usr/share/common-licenses/Apache-2.0"

  try "$tmp/debroot/usr/bin/baton" "$tmp/debroot/usr/share/baton/lua" "package"

  # postinst in a root of its own (DPKG_ROOT): the user and the state
  # directory, without systemd running there.
  mkdir -p "$tmp/debroot/etc"
  out=$(DPKG_ROOT=$tmp/debroot sh "$tmp/postinst" configure "" 2>&1)
  ok $? "postinst configure succeeds in a root without systemd" || diag "$out"
  like "$(grep '^baton:' "$tmp/debroot/etc/passwd" 2>/dev/null)" ':/var/lib/baton:' \
       "postinst makes the baton user"
  is "$(stat -c %a "$tmp/debroot/var/lib/baton" 2>/dev/null)" "750" "and /var/lib/baton (750)"
  out=$(DPKG_ROOT=$tmp/debroot sh "$tmp/postinst" configure "$version" 2>&1)
  ok $? "postinst configure again (an upgrade) succeeds"
  is "$(grep -c '^baton:' "$tmp/debroot/etc/passwd")" "1" "and makes no second user"
  # Without systemd-sysusers (a chroot without systemd): useradd.
  if [ "$(id -u)" = 0 ] && command -v useradd >/dev/null; then
    mkdir -p "$tmp/nosystemd" "$tmp/chroot/etc"
    for t in sh mkdir chmod grep useradd cat; do ln -s "$(command -v "$t")" "$tmp/nosystemd/"; done
    out=$(PATH=$tmp/nosystemd DPKG_ROOT=$tmp/chroot sh "$tmp/postinst" configure "" 2>&1)
    ok $? "postinst without systemd-sysusers or systemctl succeeds" || diag "$out"
    like "$(grep '^baton:' "$tmp/chroot/etc/passwd" 2>/dev/null)" ':/var/lib/baton:' \
         "and makes the baton user with useradd"
  else
    skip "not root: useradd --prefix"; skip "not root: useradd --prefix"
  fi
fi

# ---- the licence ------------------------------------------------------------

if [ -f /usr/share/common-licenses/Apache-2.0 ]; then
  cmp -s "$root/LICENSE" /usr/share/common-licenses/Apache-2.0
  ok $? "LICENSE is the Apache License 2.0, word for word (Debian's /usr/share/common-licenses/Apache-2.0)"
else
  like "$(head -3 "$root/LICENSE")" "Apache License" "LICENSE is the Apache License"
fi
like "$(cat "$root/NOTICE")" "Copyright [0-9]{4} The baton authors" "NOTICE names the copyright holder"
bad=""
for f in "$root"/tests/cron/package.json "$root"/tests/browser/package.json "$root"/tests/bench/grpc/package.json; do
  grep -q '"license": "Apache-2.0"' "$f" || bad="$bad ${f#"$root"/}"
done
is "$bad" "" "the tests' npm packages say Apache-2.0 too"

# ---- packages: make, make demo and make test ---------------------------------
# Which set each target asks tools/deps.sh for, and what each set holds:
# the set's packages, with none installed, as a user is told to install them.

sets=""
for t in all install deps test demo chaos bench; do
  sets="$sets $t:$(mk -n "$t" 2>/dev/null | sed -n 's|^sh tools/deps.sh *||p' | head -1)"
done
is "$sets" " all:build install: deps:test test:test demo:demo chaos:test bench:test" \
   "make asks tools/deps.sh for the build set, make demo for demo, make deps and make test for test; make install installs none"
mkdir "$tmp/nopkgs"
printf '#!/bin/sh\nexit 1\n' >"$tmp/nopkgs/dpkg-query"        # nothing is installed
printf '#!/bin/sh\necho 1000\n' >"$tmp/nopkgs/id"             # and we are not root
chmod +x "$tmp/nopkgs/dpkg-query" "$tmp/nopkgs/id"
ln -s "$(command -v dirname)" "$tmp/nopkgs/dirname"
wants() { PATH=$tmp/nopkgs /bin/sh "$root/tools/deps.sh" "$1" 2>&1 | sed -n 's/^baton: missing packages: *//p'; }
has() { # SET WORDS: which of WORDS the set holds
  local w got out=""
  got=" $(wants "$1") "
  shift
  for w in "$@"; do case $got in *" $w "*) out="$out $w" ;; esac; done
  echo "${out# }"
}
testonly="etcd-server chromium prometheus wrk faketime nodejs npm"
is "$(has build build-essential pkg-config libluajit-5.1-dev libseccomp-dev libsodium-dev $testonly)" \
   "build-essential pkg-config libluajit-5.1-dev libseccomp-dev libsodium-dev" \
   "the build set: the compiler and the -dev packages, none of the tests' packages"
is "$(has demo libseccomp-dev $testonly etcd-client)" "libseccomp-dev etcd-server etcd-client" \
   "the demo set adds etcd"
is "$(has test libseccomp-dev $testonly etcd-client curl)" "libseccomp-dev $testonly etcd-client curl" \
   "the test set adds chromium, prometheus, wrk, faketime, node and npm"
like "$(PATH=$tmp/nopkgs /bin/sh "$root/tools/deps.sh" build 2>&1)" \
     "run as root: apt-get install -y --no-install-recommends build-essential" "and says what to run as root"

# ---- make dist and the tag scheme ----------------------------------------------

if ! git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  for _ in 1 2 3 4; do skip "$root is not a git checkout"; done
else
  out=$(mk dist DISTDIR="$tmp/dist" 2>"$tmp/dist.err")
  if git -C "$root" tag --points-at HEAD | grep -qxF "v$version"; then name=baton-$version
  else name=baton-$version-g$(git -C "$root" rev-parse --short=12 HEAD); fi
  is "$out" "$tmp/dist/$name.tar.gz" "make dist writes $name.tar.gz" || diag "$(cat "$tmp/dist.err")"
  list=$(tar -tzf "$out" 2>/dev/null)
  missing=""
  for f in LICENSE NOTICE CHANGELOG.md VERSION Makefile tools/dist/debian/copyright runtime/main.c; do
    grep -qxF "$name/$f" <<<"$list" || missing="$missing $f"
  done
  [ -z "$missing" ] && ! grep -qE "^$name/(build|bin)/|/node_modules/" <<<"$list" &&
    [ -z "$(grep -v "^$name/" <<<"$list")" ]
  ok $? "it holds the committed tree under $name/, without build outputs or node_modules" ||
    diag "missing:$missing"
  # In a clone of our own: a release tag gives the release's name, and a
  # tag that does not match VERSION is refused.
  git clone -q "$root" "$tmp/clone" 2>/dev/null
  g() { git -C "$tmp/clone" -c user.name=t -c user.email=t@example.invalid "$@"; }
  g tag -a "v$version" -m "baton $version" >/dev/null 2>&1
  out=$(make -s --no-print-directory -C "$tmp/clone" dist DISTDIR="$tmp/dist2" 2>&1)
  is "$out" "$tmp/dist2/baton-$version.tar.gz" "on a commit tagged v$version: baton-$version.tar.gz"
  g tag -a v9.9.9 -m wrong >/dev/null 2>&1
  out=$(make -s --no-print-directory -C "$tmp/clone" dist DISTDIR="$tmp/dist3" 2>&1)
  [ $? -ne 0 ] && [ ! -e "$tmp/dist3/baton-9.9.9.tar.gz" ]
  ok $? "a tag that does not match VERSION (v9.9.9, VERSION $version) is refused"
  like "$out" "HEAD is tagged v9.9.9 but its VERSION says $version" "and said so"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
