-- Policies in a running cluster: a custom policy put changes placement from
-- the next instant on, without a restart; a broken put keeps the previous
-- version and shows the error; pinned keeps a job on its node until that
-- node dies; a retry curve end to end.
local T = require "tap"
local N = require "nodes"
local c = N.new("nodepol")
local e, P = c.e, c.P
local TTL = 3

c:start("a", TTL)
baton.sleep(0.5) -- a is the longest-running node (pinned prefers it)
c:start("b", TTL)
c:start("c", TTL)

local function only(node)
  return ([[
return {
  description = "everything on %s",
  claim_delay = function(job, fire, nodes, me)
    if me.name == %q then return 0 end
    return nil
  end,
}]]):format(node, node)
end

local function put_policy(name, source)
  local f = c.dir .. "/" .. name .. ".lua"
  local fh = assert(io.open(f, "w"))
  fh:write(source)
  fh:close()
  return c:cli("policy", "put", f, "--name", name)
end

local function policy_loaded(name, rev)
  return N.wait(10, function()
    local r = assert(e:get(P .. "policy-status/" .. name .. "/", { prefix = true }))
    local n = 0
    for _, kv in ipairs(r.kvs) do
      if baton.json.decode(kv.value).revision == rev then n = n + 1 end
    end
    return n >= 3
  end)
end

local function nodes_since(job, t)
  local seen, n = {}, 0
  for _, r in ipairs(c:records(job)) do
    if r.fire > t and r.state == "succeeded" then seen[r.node] = (seen[r.node] or 0) + 1; n = n + 1 end
  end
  return seen, n
end

-- 1. A custom policy, then a new version of it while the cluster runs.
T.is(put_policy("mine", only("a")).code, 0, "policy put")
local prev = assert(e:get(P .. "policies/mine")).kvs[1].mod_revision
T.ok(policy_loaded("mine", prev), "every node loaded the policy")
local rev = c:put_job("tick", [[
return { schedule = "* * * * * *", policy = "mine", run = function(ctx) end }]])
T.ok(c:loaded("tick", rev), "job loaded")
local t0 = baton.now()
baton.sleep(3.5)
local seen, n = nodes_since("tick", t0)
T.ok(n >= 2 and seen.a == n, "runs on a only (" .. n .. " runs)")

T.is(put_policy("mine", only("b")).code, 0, "put version 2 of the policy")
local rev2 = assert(e:get(P .. "policies/mine")).kvs[1].mod_revision
local t_put = baton.now()
T.ok(policy_loaded("mine", rev2), ("every node has version 2 (%.2f s)"):format(baton.now() - t_put))
baton.sleep(3.5)
seen, n = nodes_since("tick", t_put + 1)
T.ok(n >= 2 and seen.b == n, "from the next instant on, runs on b only (" .. n .. " runs)")

-- 2. A broken put keeps version 2 deciding and shows the error.
assert(e:put(P .. "policies/mine", "return { claim_delay = function( }"))
local badrev = assert(e:get(P .. "policies/mine")).kvs[1].mod_revision
local errors = N.wait(10, function()
  local r = assert(e:get(P .. "policy-status/mine/", { prefix = true }))
  local k = 0
  for _, kv in ipairs(r.kvs) do
    local st = baton.json.decode(kv.value)
    if st.revision == badrev and st.error ~= baton.json.null then k = k + 1 end
  end
  return k >= 3
end)
T.ok(errors, "every node reports the broken version's error")
local show = c:cli("policy", "show", "mine")
T.like(show.stdout, "error", "baton policy show shows it")
local t_bad = baton.now()
baton.sleep(3)
seen, n = nodes_since("tick", t_bad)
T.ok(n >= 2 and seen.b == n, "version 2 still decides: runs on b (" .. n .. ")")
c:cli("job", "rm", "tick")

-- 3. pinned: the job stays on its node until that node dies.
rev = c:put_job("pin", [[
return { schedule = "* * * * * *", policy = "pinned", run = function(ctx) end }]])
T.ok(c:loaded("pin", rev), "pinned job loaded")
t0 = baton.now()
baton.sleep(3.5)
seen, n = nodes_since("pin", t0)
T.ok(n >= 2 and seen.a == n, "pinned to the longest-running node a (" .. n .. ")")
c:signal("a", "KILL")
c.nodes.a = nil
local killed = baton.now()
baton.sleep(TTL + 4)
seen, n = nodes_since("pin", killed + TTL + 1.5)
local moved_to
for k in pairs(seen) do moved_to = k end
T.ok(n >= 1 and not seen.a and moved_to, "after a died, the job moved to " .. tostring(moved_to))
local t_moved = baton.now()
baton.sleep(3)
local seen2, n2 = nodes_since("pin", t_moved)
T.ok(n2 >= 2 and seen2[moved_to] == n2, "and stays there (" .. n2 .. " runs)")
c:cli("job", "rm", "pin")

-- 4. The fixed retry curve: failing twice then succeeding, delays ~1 s each.
rev = c:put_job("curve", ([[
return {
  schedule = "@manual", policy = "fixed", timeout = 10,
  retry = { attempts = 3, backoff = 1, jitter = 0 },
  run = function(ctx)
    if ctx.attempt < 3 then error("attempt " .. ctx.attempt .. " fails") end
  end,
}]]))
T.ok(c:loaded("curve", rev), "retry job loaded")
c:cli("job", "run", "curve")
local rec = N.wait(20, function()
  local r = c:records("curve")[1]
  return r and r.state == "succeeded" and r
end)
T.ok(rec, "the run succeeded in the end")
rec = rec or { attempts = {} }
T.is(#rec.attempts, 3, "three attempts")
local d1 = rec.attempts[2] and rec.attempts[2].started - rec.attempts[1].finished or -1
local d2 = rec.attempts[3] and rec.attempts[3].started - rec.attempts[2].finished or -1
T.ok(d1 > 0.8 and d1 < 2.2 and d2 > 0.8 and d2 < 2.2,
     ("fixed delays of ~1 s (%.2f, %.2f)"):format(d1, d2))

c:destroy()
T.done()
