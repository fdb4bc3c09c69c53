#!/bin/sh
# tools/dist.sh: what `make dist` runs. Writes a source tarball of the
# committed tree at HEAD (git archive: what is tracked, as committed; no
# build outputs, no node_modules) to DISTDIR and prints its path:
#   baton-VERSION.tar.gz          when HEAD is tagged vVERSION (a release)
#   baton-VERSION-gCOMMIT.tar.gz  otherwise (a snapshot)
# Every file in it is under baton-VERSION/ (or the snapshot's name).
#
# The tag scheme (README.md, "Licence and releases"): a release is an
# annotated tag vMAJOR.MINOR.PATCH on the commit whose VERSION file says
# MAJOR.MINOR.PATCH. A release tag on HEAD that does not match VERSION is
# refused, and so is a VERSION that is not MAJOR.MINOR.PATCH.
set -eu
: "${DISTDIR:?}"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

git rev-parse --git-dir >/dev/null 2>&1 ||
  { echo "baton: make dist needs a git checkout ($root is none)" >&2; exit 1; }
version=$(git show HEAD:VERSION 2>/dev/null) ||
  { echo "baton: no VERSION file committed at HEAD" >&2; exit 1; }
case $version in
  *[!0-9.]* | .* | *. | *..* | *.*.*.*) ok=0 ;;
  *.*.*) ok=1 ;;
  *) ok=0 ;;
esac
[ "$ok" = 1 ] || { echo "baton: VERSION \"$version\" is not MAJOR.MINOR.PATCH" >&2; exit 1; }

name=""
for t in $(git tag --points-at HEAD 'v[0-9]*'); do
  if [ "$t" = "v$version" ]; then
    name=baton-$version
  else
    echo "baton: HEAD is tagged $t but its VERSION says $version: a release tag must be v\$(cat VERSION)" >&2
    exit 1
  fi
done
if [ -z "$name" ]; then
  name=baton-$version-g$(git rev-parse --short=12 HEAD)
  echo "baton: HEAD is not tagged v$version: $name is a snapshot, not a release" >&2
fi
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "baton: uncommitted changes are not in $name.tar.gz (it is HEAD as committed)" >&2

mkdir -p "$DISTDIR"
out=$(cd "$DISTDIR" && pwd)/$name.tar.gz
git archive --format=tar --prefix="$name/" HEAD | gzip -9n >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
