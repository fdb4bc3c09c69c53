-- luacheck's settings for baton's Lua (tests/cluster/luacheck.sh runs it in
-- `make test`; by hand: `luacheck .` from the top of the tree).
--
-- baton embeds LuaJIT, so the standard library is LuaJIT's. Modules in
-- lua/baton/ reach baton's API by require; the code that baton runs for a
-- user (jobs, policies, eval scripts, which is what tests and examples are)
-- sees it as the global `baton`, set by runtime/lua/lua_rt.c.
std = "luajit"
exclude_files = { "**/node_modules/**", "build/**" }

-- Code lines stay within 130 columns (most within 120); a long message or
-- comment may run on.
max_line_length = 130
max_string_line_length = false
max_comment_line_length = false

-- Callbacks and policy hooks keep the arguments of their documented
-- signature even where one implementation ignores some.
unused_args = false

-- Jobs, policies and scripts run by baton.
local user_code = { read_globals = { "baton" } }
files["jobs/"] = user_code
files["examples/"] = user_code
files["lua/baton/policies/"] = user_code
-- (the benches' scripts, like the tests, assign results they may not read)
files["tests/bench/"] = { read_globals = { "baton" }, ignore = { "311" } }
files["tests/chaos/"] = user_code

-- Tests are eval scripts too. Their checks repeat `out, err, code = cli(...)`
-- and look at only some of the results each time; a block or helper names
-- its own result `r` (or `rec`, `v`) whatever an outer one is called; and
-- their expected strings make long lines.
files["tests/lua/"] = {
  read_globals = { "baton" },
  unused_secondaries = false,
  ignore = {
    "311",  -- value assigned to a variable is unused
    "421",  -- shadowing a local variable
    "431",  -- shadowing an upvalue
  },
  max_line_length = false,
}

-- core.lua replaces coroutine.resume and coroutine.wrap with versions that
-- know about baton's waiting calls.
files["lua/baton/core.lua"] = { globals = { "coroutine" } }
