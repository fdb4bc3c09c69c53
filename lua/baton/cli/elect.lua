-- baton elect NAME PROPOSAL [--ttl S]: campaign (the etcd election recipe,
-- so `etcdctl elect` interoperates), print the leader key and value once
-- elected, hold until SIGINT/SIGTERM, then resign.
-- baton elect -l NAME: print each leader's key and value as it changes.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"

local USAGE = "baton elect NAME PROPOSAL [--ttl S] | baton elect -l NAME"
local HELP = [[Campaigns for NAME with PROPOSAL (etcd's election recipe, so etcdctl elect
interoperates), prints the leader key and value once elected, and holds
the leadership until SIGINT or SIGTERM, then resigns. --ttl is the session's
lease (default 60 s). With -l, prints each leader's key and value as it
changes.]]

local function out(...)
  io.stdout:write(...)
  io.stdout:flush()
end

local function listen(name)
  baton.go(function()
    local sig = baton.signal { "SIGINT", "SIGTERM", "SIGHUP" }
    if sig then baton.exit(0) end
  end)
  local next_leader = require("baton.concurrency").observe(baton.etcd, name)
  while true do
    local ok, leader = pcall(next_leader)
    if not ok then return A.die("elect -l " .. name .. ": " .. tostring(leader)) end
    out(U.escape(leader.key), "\n", U.escape(leader.value), "\n")
  end
end

return function(...)
  -- Handle these signals from now on (counted until someone waits), so a
  -- Ctrl-C at any moment still releases what baton holds.
  baton.signal({ "SIGINT", "SIGTERM", "SIGHUP" }, 0)
  local opts, pos = A.parse("elect", USAGE, { ttl = "number", l = "flag", listen = "flag" }, { ... }, HELP)
  local name = pos[1]
  if not name then return A.usage("elect", USAGE, "needs a NAME") end
  if name == "" then return A.usage("elect", USAGE, "NAME must not be empty") end
  if opts.l or opts.listen then
    if pos[2] then return A.usage("elect", USAGE, "-l takes only a NAME") end
    return listen(name)
  end
  local proposal = pos[2]
  if not proposal then return A.usage("elect", USAGE, "needs a PROPOSAL") end
  if pos[3] then return A.usage("elect", USAGE, "unexpected argument \"" .. pos[3] .. "\"") end

  local s, err = baton.session { ttl = opts.ttl or 60 }
  if not s then return A.die("elect " .. name .. ": " .. err) end
  local el = baton.election(s, name)
  local done

  baton.go(function()
    local sig = baton.signal { "SIGINT", "SIGTERM", "SIGHUP" }
    if not sig or done then return end
    done = true
    el:resign()
    s:close()
    baton.exit(0)
  end)
  baton.go(function()
    local why = s:wait()
    if done then return end
    done = true
    io.stderr:write("baton: elect ", name, ": session lost: ", why, "\n")
    baton.exit(1)
  end)

  local ok, cerr = el:campaign(proposal)
  if not ok then
    if done then return end
    done = true
    s:close()
    return A.die("elect " .. name .. ": " .. cerr)
  end
  out(el.key, "\n", proposal, "\n")
  -- hold: the goroutines above end the process
end
