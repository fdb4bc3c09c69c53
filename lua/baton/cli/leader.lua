-- baton leader [--json]: the elected cluster leader, i.e. the oldest key
-- (smallest create revision) under P election/ (etcd's election recipe:
-- P election/<lease hex>). Prints the leader's value (the node's name);
-- "no leader" and exit 1 when there is none.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"

local USAGE = "baton leader [--json]"
local HELP = "The name of the node elected cluster leader (it does the housekeeping); exit 1 when there is none."

return function(...)
  local opts, pos = A.parse("leader", USAGE, { json = "flag" }, { ... }, HELP)
  if pos[1] then return A.usage("leader", USAGE, "unexpected argument \"" .. pos[1] .. "\"") end
  local l, err = require("baton.ops").leader()
  if not l then return A.die("leader: " .. err) end
  if opts.json then
    U.print_json(l)
  else
    io.stdout:write(U.escape(l.value), "\n")
  end
  baton.exit(0)
end
