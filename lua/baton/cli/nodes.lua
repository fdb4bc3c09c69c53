-- baton nodes [--json]: the live nodes, from the JSON each one keeps at
-- P nodes/<name> on its session lease: {name, labels, version, running,
-- started}. No nodes: prints nothing and exits 0.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"

local USAGE = "baton nodes [--json]"

-- "running" may be a count or a list of runs.
local function count(v)
  if type(v) == "number" then return v end
  if type(v) == "table" then return #v end
  return 0
end

return function(...)
  local opts, pos = A.parse("nodes", USAGE, { json = "flag" }, { ... })
  if pos[1] then return A.usage("nodes", USAGE, "unexpected argument \"" .. pos[1] .. "\"") end
  local pfx = U.key("nodes") .. "/"
  local r, err = baton.etcd:get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return A.die("nodes: " .. err) end
  local list, rows = {}, {}
  for _, kv in ipairs(r.kvs) do
    local v = U.decode_object(kv.value) or {}
    local name = U.field(v, "name") or kv.key:sub(#pfx + 1)
    local labels = type(U.field(v, "labels")) == "table" and v.labels or {}
    local l = {}
    for _, k in ipairs(U.sorted_keys(labels)) do l[#l + 1] = k .. "=" .. tostring(labels[k]) end
    local started = U.field(v, "started")
    v.name = name
    v.lease = kv.lease
    list[#list + 1] = v
    rows[#rows + 1] = {
      name, tostring(U.field(v, "version") or "-"), tostring(count(U.field(v, "running"))),
      type(started) == "number" and U.instant(started) or "-", #l > 0 and table.concat(l, ",") or "-",
    }
  end
  if opts.json then
    U.print_json(baton.json.array(list))
  else
    U.print_table({ "NAME", "VERSION", "RUNNING", "STARTED", "LABELS" }, rows)
  end
  baton.exit(0)
end
