#!/bin/sh
# tools/install.sh install|uninstall: what `make install` and `make
# uninstall` run (the Makefile passes the directories below).
#
# install writes, under DESTDIR:
#   BINDIR/baton                      the program (BIN: built with LUADIR compiled in)
#   LUADIR/...                        the Lua library: everything in lua/
#   LUADIR.pack                       its pack (runtime/core/lib.h), made by BIN
#   PKGDATADIR/jobs/*.lua             the shipped jobs
#   PKGDATADIR/policies               -> lua/baton/policies (built-in and example policies)
#   PKGDATADIR/baton.default          the shipped environment file, as shipped
#   MANDIR/man1/baton.1               the man page
#   DOCDIR/{README.md,CHANGELOG.md,LICENSE,NOTICE}, DOCDIR/docs/*.md
#                                     the docs, laid out as in the source
#                                     tree so that their links hold
#   BASHCOMPDIR/baton                 bash completion
#   UNITDIR/baton.service             the systemd unit (BINDIR and SYSCONFDIR filled in)
#   SYSUSERSDIR/baton.conf            its user, for systemd-sysusers
#   SYSCONFDIR/default/baton          the environment file, only if there is none
# (all of them under PREFIX unless the Makefile was given another
# SYSCONFDIR, say /etc), and lists what it wrote, and the directories it
# had to create, in PKGDATADIR/installed-files. Its temporary files go in
# TMPDIR (mktemp). Each file is replaced with install(1), which
# unlinks the old one first: a node running from these files keeps running
# the version it started with (lua/baton/node/pool.lua says why).
#
# uninstall removes exactly what that list names: the files, then the
# directories install created if they are empty, and the environment file
# only if it is still as shipped (an edited one is kept, and said so).
set -eu

: "${DESTDIR=}" "${BIN:?}" "${BINDIR:?}" "${PKGDATADIR:?}" "${LUADIR:?}" "${MANDIR:?}" "${DOCDIR:?}"
: "${BASHCOMPDIR:?}" "${UNITDIR:?}" "${SYSUSERSDIR:?}" "${SYSCONFDIR:?}"
root=$(cd "$(dirname "$0")/.." && pwd)
manifest=$DESTDIR$PKGDATADIR/installed-files
# An upgrade keeps the settings file its unit reads: when the Makefile's
# SYSCONFDIR is its default (SYSCONFDIR_ORIGIN "file") and the unit an
# earlier install wrote reads another one (an install with SYSCONFDIR=/etc,
# or one from before PREFIX/etc was the default), that one stays, lest a
# restarted node come up with the shipped settings instead of the operator's.
unit=$DESTDIR$UNITDIR/baton.service
if [ "${1:-}" = install ] && [ "${SYSCONFDIR_ORIGIN:-}" = file ] && [ -f "$unit" ]; then
  was=$(sed -n 's|^EnvironmentFile=-\(/.*\)/default/baton$|\1|p' "$unit" | head -n 1)
  if [ -n "$was" ] && [ "$was" != "$SYSCONFDIR" ]; then
    echo "baton: keeping the settings file of the installed unit, $was/default/baton (SYSCONFDIR=$was; give SYSCONFDIR to change it)" >&2
    SYSCONFDIR=$was
  fi
fi
envfile=$SYSCONFDIR/default/baton

# mkdirs DIR: creates DIR and its missing parents under DESTDIR, listing
# each one it creates ("d PATH") in $new.
mkdirs() {
  [ -d "$DESTDIR$1" ] && return 0
  case $1 in /) mkdir -p "$DESTDIR/"; return 0 ;; esac
  mkdirs "$(dirname "$1")"
  mkdir -m 755 "$DESTDIR$1"
  echo "d $1" >>"$new"
}

# put MODE SRC DEST: installs SRC as DEST (a path without DESTDIR).
put() {
  mkdirs "$(dirname "$3")"
  install -m "$1" "$2" "$DESTDIR$3"
  echo "f $3" >>"$new"
}

do_install() {
  new=$(mktemp)
  trap 'rm -f "$new" "$new.unit" "$new.sorted"' EXIT
  put 755 "$BIN" "$BINDIR/baton"
  (cd "$root/lua" && find . -type f ! -name '.*' | sort) | while read -r f; do
    put 644 "$root/lua/$f" "$LUADIR/${f#./}"
  done
  # The library's pack, made of the files just installed (runtime/core/lib.h).
  "$BIN" _pack-lib "$DESTDIR$LUADIR" "$LUADIR" "$DESTDIR$LUADIR.pack"
  echo "f $LUADIR.pack" >>"$new"
  for f in "$root"/jobs/*.lua; do put 644 "$f" "$PKGDATADIR/jobs/$(basename "$f")"; done
  mkdirs "$PKGDATADIR"
  rel=${LUADIR#"$PKGDATADIR"/}
  [ "$rel" != "$LUADIR" ] || rel=$LUADIR
  ln -sfn "$rel/baton/policies" "$DESTDIR$PKGDATADIR/policies"
  echo "f $PKGDATADIR/policies" >>"$new"
  put 644 "$root/tools/dist/baton.default" "$PKGDATADIR/baton.default"
  put 644 "$root/docs/baton.1" "$MANDIR/man1/baton.1"
  for f in README.md CHANGELOG.md LICENSE NOTICE; do put 644 "$root/$f" "$DOCDIR/$f"; done
  for f in "$root"/docs/*.md; do put 644 "$f" "$DOCDIR/docs/$(basename "$f")"; done
  put 644 "$root/tools/dist/baton.bash-completion" "$BASHCOMPDIR/baton"
  sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" \
      -e "s|@SYSUSERSDIR@|$SYSUSERSDIR|g" "$root/tools/dist/baton.service.in" >"$new.unit"
  put 644 "$new.unit" "$UNITDIR/baton.service"
  put 644 "$root/tools/dist/baton.sysusers" "$SYSUSERSDIR/baton.conf"
  # The environment file is the operator's: written when there is none,
  # and listed ("c") when this install or an earlier one wrote it.
  if [ ! -e "$DESTDIR$envfile" ]; then
    mkdirs "$(dirname "$envfile")"
    install -m 644 "$root/tools/dist/baton.default" "$DESTDIR$envfile"
    echo "c $envfile" >>"$new"
  elif [ -f "$manifest" ] && grep -qxF "c $envfile" "$manifest"; then
    echo "c $envfile" >>"$new"
  fi
  echo "f $PKGDATADIR/installed-files" >>"$new"
  # Files an earlier install wrote that this one no longer ships go, and
  # directories created then are still ours.
  if [ -f "$manifest" ]; then
    grep '^f ' "$manifest" | while read -r _ f; do
      grep -qxF "f $f" "$new" || rm -f "$DESTDIR$f"
    done
    grep '^d ' "$manifest" >>"$new" || true
  fi
  sort -u "$new" >"$new.sorted"
  mv "$new.sorted" "$new"
  install -m 644 "$new" "$manifest"
  echo "baton: installed $(grep -c '^f ' "$new") files under ${DESTDIR:-/} (list: $manifest)"
  echo "baton: settings (BATON_ENDPOINTS, BATON_NODE_ARGS): $envfile, which baton.service reads"
}

do_uninstall() {
  if [ ! -f "$manifest" ]; then
    echo "baton: nothing to uninstall: no $manifest" >&2
    return 0
  fi
  list=$(mktemp)
  trap 'rm -f "$list"' EXIT
  cp "$manifest" "$list"
  grep '^f ' "$list" | while read -r _ f; do rm -f "$DESTDIR$f"; done
  grep '^c ' "$list" | while read -r _ f; do
    if cmp -s "$DESTDIR$f" "$root/tools/dist/baton.default"; then
      rm -f "$DESTDIR$f"
    elif [ -e "$DESTDIR$f" ]; then
      echo "baton: kept $DESTDIR$f: it was changed since it was installed" >&2
    fi
  done
  # Deepest first: a directory goes once it is empty.
  grep '^d ' "$list" | cut -c3- | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2- |
    while read -r d; do rmdir "$DESTDIR$d" 2>/dev/null || true; done
  echo "baton: uninstalled from ${DESTDIR:-/}"
}

case "${1:-}" in
  install) do_install ;;
  uninstall) do_uninstall ;;
  *) echo "usage: $0 install|uninstall" >&2; exit 2 ;;
esac
