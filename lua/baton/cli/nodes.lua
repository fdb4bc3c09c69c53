-- baton nodes [--json]: the live nodes, from the JSON each one keeps at
-- P nodes/<name> on its session lease: {name, labels, version, running,
-- started, clock, max_skew, trust = {signed, keys = [key ids]}}. No nodes: says so on stderr (a wrong --prefix
-- is the usual reason) and exits 0.
--
-- OFFSET is the node's clock against the cluster's (node/clock.lua):
-- "+2.003s±0.002" (seconds ahead, +- the error bound), "!" after it when
-- beyond the node's --max-skew, "?" while not measured yet, "-" for a node
-- that does not publish its clock.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local keys = require "baton.keys"

local USAGE = "baton nodes [--json]"
local HELP = [[The live nodes under <prefix>nodes/: name, version, running runs, start time,
labels, what code it runs (TRUST: "signed (N keys)" for a node started with
--trust, "unsigned ok" for one that runs any job stored in etcd), and the
clock's offset against the cluster's (! beyond its --max-skew, ? not
measured yet).]]

-- The OFFSET cell of a node's published clock.
local function offset(k)
  if type(k) ~= "table" then return "-" end
  if k.known ~= true or type(k.correction) ~= "number" then return "?" end
  local c = math.floor(k.correction * 1000 + 0.5) / 1000
  if c == 0 then c = 0 end -- "+0.000s", never "-0.000s"
  return ("%+.3fs±%.3f"):format(c, type(k.error) == "number" and k.error or 0) .. (k.skewed == true and "!" or "")
end

-- The TRUST cell: "signed (N keys)" for a node started with --trust,
-- which loads only signed jobs and policies; "unsigned ok" for one that
-- runs any code stored in etcd; "-" for a node that does not say.
local function trust(t)
  if type(t) ~= "table" then return "-" end
  if t.signed ~= true then return "unsigned ok" end
  local n = type(t.keys) == "table" and #t.keys or 0
  return ("signed (%d key%s)"):format(n, n == 1 and "" or "s")
end

-- "running" may be a count or a list of runs.
local function count(v)
  if type(v) == "number" then return v end
  if type(v) == "table" then return #v end
  return 0
end

return function(...)
  local opts, pos = A.parse("nodes", USAGE, { json = "flag" }, { ... }, HELP)
  if pos[1] then return A.usage("nodes", USAGE, "unexpected argument \"" .. pos[1] .. "\"") end
  local list, err = require("baton.ops").nodes()
  if not list then return A.die("nodes: " .. err) end
  local rows = {}
  for _, v in ipairs(list) do
    local labels = type(U.field(v, "labels")) == "table" and v.labels or {}
    local l = {}
    for _, k in ipairs(U.sorted_keys(labels)) do l[#l + 1] = k .. "=" .. tostring(labels[k]) end
    local started = U.field(v, "started")
    rows[#rows + 1] = {
      v.name, tostring(U.field(v, "version") or "-"), tostring(count(U.field(v, "running"))),
      type(started) == "number" and U.instant(started) or "-", #l > 0 and table.concat(l, ",") or "-",
      trust(U.field(v, "trust")), offset(U.field(v, "clock")),
    }
  end
  if #list == 0 and not opts.json then
    io.stderr:write("baton: nodes: no live nodes under ", keys.key(U.prefix(), "nodes"), "/ (is --prefix right?)\n")
  end
  if opts.json then
    U.print_json(list)
  else
    -- (OFFSET last; "!": beyond the node's --max-skew)
    U.print_table({ "NAME", "VERSION", "RUNNING", "STARTED", "LABELS", "TRUST", "OFFSET" }, rows, nil,
      { flex = { 5 }, color = { [7] = function(v) return v:find("!", 1, true) and "31" or nil end } })
  end
  baton.exit(0)
end
