-- baton.ops (lua/baton/ops/) as the CLI and the node's API use it: one
-- table with every operation, gathered from the files of its resources,
-- which sit below the CLI: loading them loads no module of the CLI, and
-- none of them names baton.cli at all. Needs no etcd.
local T = require "tap"

local ops = require "baton.ops"

-- 1. The API: every operation the CLI and node/http.lua call, and nothing
-- else (the helpers the files share stay among them).
local API = {
  "check_name", "max_source",
  "no_job", "jobs_view", "last_entry", "last_fallback", "list_jobs", "show_job", "check_job", "put_job", "rm_job",
  "pause_job", "resume_job",
  "history", "recent_runs", "get_run", "run_job", "kill_job",
  "queue_push", "queue_tasks", "PUSH_TXN_OPS", "PUSH_TXN_BYTES", "queue_push_many",
  "list_policies", "show_policy", "check_policy", "put_policy", "rm_policy",
  "nodes", "leader",
  "sign_source", "versions", "diff_versions", "rollback", "current_revision",
  "wait_runs",
  "notify_show", "notify_set", "notify_unset",
}
local want = {}
for _, name in ipairs(API) do
  want[name] = true
  T.ok(ops[name] ~= nil, "baton.ops." .. name)
end
local extra = {}
for name in pairs(ops) do if not want[name] then extra[#extra + 1] = name end end
table.sort(extra)
T.is(table.concat(extra, " "), "", "nothing else in baton.ops")
T.is(type(ops.PUSH_TXN_OPS), "number", "PUSH_TXN_OPS is the number of puts a batch's txn holds")

-- 2. Loading ops loaded nothing of the CLI (cli -> ops, never back).
local cli = {}
for name in pairs(package.loaded) do
  if name:find("^baton%.cli") then cli[#cli + 1] = name end
end
table.sort(cli)
T.is(table.concat(cli, " "), "", "require \"baton.ops\" loads no baton.cli module")

-- 3. Nor does any file of ops, nor the modules below it that took the
-- CLI's helpers (baton.util, baton.versions), name one, even lazily.
local root = os.getenv("BATON_ROOT") or "."
local list = assert(baton.exec { "sh", "-c", "cd \"$0\" && ls lua/baton/ops/*.lua", root }).stdout
local files = { "lua/baton/util.lua", "lua/baton/versions.lua" }
for f in list:gmatch("[^\n]+") do files[#files + 1] = f end
T.ok(#files >= 10, "the files of ops are found: " .. #files)
for _, f in ipairs(files) do
  local bad = {}
  local n = 0
  for line in io.lines(root .. "/" .. f) do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:find("baton%.cli") then bad[#bad + 1] = n end
  end
  T.is(table.concat(bad, ","), "", f .. " names no baton.cli module")
end

T.done()
