-- baton node [--name ID] [--ttl S] [--workers N] [--labels k=v,...] [--max-skew S]
-- Runs a scheduler node until SIGINT/SIGTERM (see lua/baton/node.lua).
-- --max-skew: seconds this node's clock may be off the cluster's before it
-- warns and is flagged in baton nodes (default 0.5; node/clock.lua).
local baton = require "baton"
local A = require "baton.cli.args"

local USAGE = "baton node [--name ID] [--ttl S] [--workers N] [--labels k=v,...] [--history N] [--max-skew S]"
local HELP = [[Runs a scheduler node until SIGINT or SIGTERM (which stop its runs in order).
  --name ID       unique among live nodes (default: the host name)
  --ttl S         the node's lease in seconds (default 10): a dead node's
                  runs are taken over within TTL + 1 s
  --workers N     runs at once on this node (default 16)
  --labels k=v,.. what this machine is; a job with labels runs only on
                  nodes having all of them
  --history N     run records kept per job, the newest (default 100); the
                  cluster leader deletes older ones
  --max-skew S    clock offset against the cluster's, in seconds, beyond
                  which the node warns and is flagged in baton nodes
                  (default 0.5)]]

local function hostname()
  local f = io.open("/etc/hostname")
  local h = f and f:read("*l")
  if f then f:close() end
  return (h and h ~= "") and h or "node"
end

return function(...)
  baton.signal({ "SIGINT", "SIGTERM", "SIGHUP" }, 0)
  local opts, pos = A.parse("node", USAGE, { name = "string", ttl = "count",
    workers = "count", labels = "string", history = "count", ["max-skew"] = "number" }, { ... }, HELP)
  if pos[1] then return A.usage("node", USAGE, "unexpected argument \"" .. pos[1] .. "\"") end
  local name = opts.name or hostname()
  if not name:match("^[%w][%w_.-]*$") then
    return A.usage("node", USAGE, "--name: letters, digits, '_', '.', '-' expected, not \"" .. name .. "\"")
  end
  local labels = {}
  for pair in (opts.labels or ""):gmatch("[^,]+") do
    local k, v = pair:match("^%s*([%w_.-]+)=([^,]*)$")
    if not k then return A.usage("node", USAGE, "--labels: k=v,... expected, not \"" .. pair .. "\"") end
    labels[k] = v
  end
  local ok, err = require("baton.node").run { name = name, ttl = opts.ttl, labels = labels,
                                             workers = opts.workers, history = opts.history,
                                             max_skew = opts["max-skew"] }
  if not ok then return A.die(err) end
  baton.exit(0)
end
