#!/bin/sh
# Differential test, live: regenerate the cron-parser fixtures with node and
# the pinned package (tests/cron/package-lock.json), check that they are the
# committed tests/cron/fixtures.tsv, and compare baton against them with
# test-cron-diff.t. See tests/cron/README.md.
cd "$(dirname "$0")/../.." || exit 1
ctests=${BATON_CTESTS:-build/tests}
if ! command -v node >/dev/null 2>&1; then
  echo "1..0 # SKIP node is not installed (make deps installs it)"
  exit 0
fi
if [ ! -f tests/cron/node_modules/cron-parser/package.json ]; then
  echo "1..0 # SKIP tests/cron/node_modules is missing (make deps installs it)"
  exit 0
fi
echo "1..4"
want=$(node -p 'require("./tests/cron/package.json").dependencies["cron-parser"]')
have=$(node -p 'require("./tests/cron/node_modules/cron-parser/package.json").version')
if [ "$want" = "$have" ]; then echo "ok 1 - cron-parser $have is the pinned version"
else echo "not ok 1 - cron-parser $have installed, $want pinned"; fi
tmp=$(mktemp "${TMPDIR:-/tmp}/cron-diff.XXXXXX") || exit 1
trap 'rm -f "$tmp"' EXIT
if node tests/cron/gen.js >"$tmp"; then echo "ok 2 - gen.js ran"
else echo "not ok 2 - gen.js failed"; fi
if cmp -s "$tmp" tests/cron/fixtures.tsv; then
  echo "ok 3 - regenerated fixtures are the committed ones"
else
  echo "not ok 3 - regenerated fixtures differ from tests/cron/fixtures.tsv"
  diff "$tmp" tests/cron/fixtures.tsv | head -5 | sed 's/^/# /'
fi
if [ -x "$ctests/test-cron-diff.t" ]; then
  if "$ctests/test-cron-diff.t" "$tmp" >"$tmp.out" 2>&1; then
    echo "ok 4 - baton agrees with cron-parser on the regenerated fixtures"
  else
    echo "not ok 4 - baton disagrees with cron-parser"
    grep -v '^ok' "$tmp.out" | head -20 | sed 's/^#*/#/'
  fi
  rm -f "$tmp.out"
else
  echo "not ok 4 - $ctests/test-cron-diff.t is not built (make ctests)"
fi
