-- baton lock NAME [--ttl S] [--timeout S] -- CMD [ARGS...]
--
-- Holds NAME (the etcd lock recipe, so `etcdctl lock NAME` interoperates)
-- while CMD runs with BATON_LOCK_KEY and BATON_LOCK_FENCE in its
-- environment; exits with CMD's status. SIGINT/SIGTERM/SIGHUP are passed to
-- CMD (SIGKILL after GRACE), the lock is released, and baton still exits
-- with CMD's status, as a shell would report it (128 + N when signal N
-- ended it): CMD that handles SIGINT and exits 0 makes baton exit 0. A
-- signal before CMD started exits 128 + N. If the lock is lost while CMD
-- runs (the session's lease expired), CMD gets SIGTERM and baton exits 1
-- with a message.
local baton = require "baton"
local A = require "baton.cli.args"

local USAGE = "baton lock NAME [--ttl S] [--timeout S] -- CMD [ARGS...]"
local HELP = [[Holds the lock NAME (etcd's lock recipe, so etcdctl lock interoperates)
while CMD runs, with BATON_LOCK_KEY and BATON_LOCK_FENCE (the lock key's
create revision) in its environment, and exits with CMD's status.
--timeout: seconds to wait for the lock (default: forever); --ttl: the
session's lease (default 10 s). SIGINT, SIGTERM and SIGHUP are passed on
to CMD (SIGKILL 10 s later) and the lock is released; baton still exits
with CMD's status (128 + N when a signal N ended it). If the lock is lost
while CMD runs, CMD gets SIGTERM and baton exits 1.]]
local GRACE = 10 -- seconds CMD gets between SIGTERM and SIGKILL

return function(...)
  -- Handle these signals from now on (counted until someone waits), so a
  -- Ctrl-C at any moment still releases what baton holds.
  baton.signal({ "SIGINT", "SIGTERM", "SIGHUP" }, 0)
  local opts, pos, cmd = A.parse("lock", USAGE, { ttl = "number", timeout = "number" }, { ... }, HELP)
  local name = pos[1]
  if not name then return A.usage("lock", USAGE, "needs a NAME") end
  if name == "" then return A.usage("lock", USAGE, "NAME must not be empty") end
  if not cmd then
    -- etcdctl's form without "--": baton lock NAME CMD ARGS...
    cmd = { select(2, unpack(pos)) }
  elseif #pos > 1 then
    return A.usage("lock", USAGE, "unexpected argument \"" .. pos[2] .. "\" before --")
  end
  if #cmd == 0 then return A.usage("lock", USAGE, "no command given") end

  local s, err = baton.session { ttl = opts.ttl or 10 }
  if not s then return A.die("lock " .. name .. ": " .. err) end
  local m = baton.mutex(s, name)
  local child, finishing

  -- Passes sig on to CMD, SIGKILL after GRACE; returns how CMD ended.
  local function stop_child(sig)
    if not child then return nil end
    if not child:done() then
      child:kill(sig)
      if not child:wait(GRACE) then child:kill("SIGKILL") end
    end
    return child:wait()
  end

  local function finish(status)
    if finishing then return end
    finishing = true
    -- Revoking the session's lease deletes the lock key with it.
    if not s:close() then m:unlock() end
    baton.exit(status)
  end

  baton.go(function()
    local sig = baton.signal { "SIGINT", "SIGTERM", "SIGHUP" }
    if not sig or finishing then return end
    local r = stop_child(sig)
    finish(r and r.code or 128 + A.SIGNUM[sig])
  end)

  baton.go(function()
    local why = s:wait()
    if finishing then return end
    finishing = true
    io.stderr:write("baton: lock ", name, " lost: ", why, "\n")
    stop_child("SIGTERM")
    s:close()
    baton.exit(1)
  end)

  local ok, lerr = m:lock(opts.timeout)
  if not ok then
    if finishing then return end
    finishing = true
    s:close()
    return A.die("lock " .. name .. ": " .. lerr)
  end

  local spec = { env = { BATON_LOCK_KEY = m.key, BATON_LOCK_FENCE = tostring(m.fence) } }
  for i, a in ipairs(cmd) do spec[i] = a end
  local perr
  child, perr = baton.spawn(spec)
  if not child then
    io.stderr:write("baton: lock ", name, ": cannot run ", cmd[1], ": ", perr, "\n")
    return finish(1)
  end
  local r = child:wait()
  if finishing then return end
  finish(r.code)
end
