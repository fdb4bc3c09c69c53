#!/bin/sh
# tools/deb.sh: what `make deb` runs once `make install PREFIX=/usr
# DESTDIR=$DEBDIR/pkg/debian/baton` has filled the package's tree. Adds the
# package's metadata and builds $DEBDIR/baton_VERSION_ARCH.deb with
# dpkg-deb (files owned by root, no fakeroot needed):
#   Depends     from dpkg-shlibdeps on the program (the libraries it links:
#               libluajit-5.1-2, libuv1, libcjson1, ... with their versions),
#               libmicrohttpd12 (the node's HTTP face; loaded with
#               dlopen on the server's first listen, so shlibdeps cannot
#               see it) and libssl3 (etcd over https; loaded with dlopen
#               on the first https connection, same reason)
#   Recommends  libcurl4 (>= 7.85) (loaded with dlopen on the first HTTP
#               request; baton.http refuses an older one, whose unknown
#               options would be ignored)
#   conffiles   /etc/default/baton
#   /usr/share/doc/baton/copyright   tools/dist/debian/copyright (Debian's
#               machine-readable format), in place of LICENSE, whose text
#               is /usr/share/common-licenses/Apache-2.0; the docs beside it
#               (README.md, CHANGELOG.md, NOTICE, docs/*.md) as make
#               install lays them out, uncompressed so that the man page's
#               and the docs' references to each other hold
#   postinst, prerm, postrm   tools/dist/debian/ (the baton user, the state
#               directory; no restart of a running node)
# Prints the package's path.
set -eu
: "${VERSION:?}" "${DEBDIR:?}"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$DEBDIR/pkg
tree=$work/debian/baton
arch=$(dpkg --print-architecture)

for tool in dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "baton: make deb needs $tool (Debian package dpkg-dev; make deps installs it)" >&2
    exit 1
  }
done
case $VERSION in
  [0-9]*) ;;
  *) echo "baton: VERSION \"$VERSION\" is not a Debian version (it must start with a digit)" >&2; exit 1 ;;
esac

# dpkg tracks the package's files itself.
rm -f "$tree/usr/share/baton/installed-files"
# Debian's conventions: a stripped program, a compressed man page.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$tree/usr/bin/baton"
gzip -9nf "$tree/usr/share/man/man1/baton.1"
# The licence: the copyright file names it, and Debian ships its text.
doc=$tree/usr/share/doc/baton
rm -f "$doc/LICENSE"
install -m 644 "$root/tools/dist/debian/copyright" "$doc/copyright"
# The library's pack (runtime/core/lib.h) indexes each file's modification
# time to the nanosecond, and a .deb keeps whole seconds: the files get
# their whole-second times here and the pack is made again from them, lest
# every process of the installed package find it stale.
lua=$tree/usr/share/baton/lua
find "$lua" -type f | while read -r f; do touch -m -d "@$(stat -c %Y "$f")" "$f"; done
"$tree/usr/bin/baton" _pack-lib "$lua" /usr/share/baton/lua "$lua.pack"

# dpkg-shlibdeps wants a source package's debian/control around the tree.
printf 'Source: baton\n\nPackage: baton\nArchitecture: any\n' >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -e debian/baton/usr/bin/baton 2>/dev/null |
          sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "baton: dpkg-shlibdeps found no dependency" >&2; exit 1; }

mkdir -p "$tree/DEBIAN"
cat >"$tree/DEBIAN/control" <<CONTROL
Package: baton
Version: $VERSION
Architecture: $arch
Maintainer: baton maintainers <baton@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$tree" | cut -f1)
Depends: $depends, libmicrohttpd12, libssl3
Recommends: libcurl4 (>= 7.85)
Suggests: etcd-server, etcd-client
Section: admin
Priority: optional
Description: distributed job scheduler on etcd, with jobs and policies in Lua
 baton runs scheduled jobs across the machines that share an etcd cluster:
 each machine runs one node (baton.service), each scheduled instant runs
 once across the cluster, and jobs and the policies that place, retry and
 fail them over are Lua files stored in etcd and reloaded on every put.
CONTROL
echo /etc/default/baton >"$tree/DEBIAN/conffiles"
for s in postinst prerm postrm; do
  install -m 755 "$root/tools/dist/debian/$s" "$tree/DEBIAN/$s"
done

deb=$DEBDIR/baton_${VERSION}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$tree" "$deb" >/dev/null
echo "$deb"
