#!/usr/bin/env bash
# luacheck over all of baton's Lua (lua/, jobs/, examples/, tests/) with the
# settings in .luacheckrc: no unused or shadowed local, no stray global, no
# over-long code line. To see the warnings: `luacheck .` at the top.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1

if ! command -v luacheck >/dev/null; then
  echo "1..0 # SKIP luacheck is not installed (make deps: Debian's lua-check)"
  exit 0
fi
echo "1..2"

out=$(luacheck --no-cache --no-color --codes . 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then echo "ok 1 - luacheck: no warning"; else
  echo "not ok 1 - luacheck: $(printf '%s\n' "$out" | tail -1) (exit $rc)"
  printf '%s\n' "$out" | grep -E '^ +[^ ].*:[0-9]+:[0-9]+:' | head -60 | sed 's/^ */# /' >&2
fi

# It looked at the code, not at nothing: every Lua file of the tree (as git
# lists them; in a tree without git, as find does).
if files=$(git ls-files -- '*.lua' 2>/dev/null) && [ -n "$files" ]; then :; else
  files=$(find . -name node_modules -prune -o -name build -prune -o -name '*.lua' -print)
fi
files=$(printf '%s\n' "$files" | grep -c .)
checked=$(printf '%s\n' "$out" | tail -1 | grep -oE 'in [0-9]+ files' | grep -oE '[0-9]+')
if [ "${checked:-0}" -ge "$files" ] && [ "$files" -gt 100 ]; then
  echo "ok 2 - luacheck checked all $files Lua files of the tree"
else
  echo "not ok 2 - luacheck checked ${checked:-no} files of the $files Lua files of the tree"
fi
