-- Sharding: a job with 6 shards every 2 s on 2 then 3 nodes: every shard of
-- every instant runs exactly once, shards spread over the live nodes, and
-- after a kill -9 the next instants' shards all land on live nodes while the
-- dead node's in-flight shards are failed over.
local T = require "tap"
local N = require "nodes"
local c = N.new("nodeshards")
local e, P = c.e, c.P
local TTL = 3

c:start("a", TTL)
c:start("b", TTL)
local rev = c:put_job("sharded", ([[
return { schedule = "*/2 * * * * *", shards = 6, timeout = 20, concurrency = "allow",
         shard_params = { "p1", "p2", "p3", "p4", "p5", "p6" },
         run = function(ctx)
           assert(ctx.shard and ctx.shard.total == 6, "ctx.shard")
           assert(ctx.shard.param == "p" .. ctx.shard.index, "shard param")
           -- shard 1 runs longer than the nodes' lease TTL
           baton.sleep(ctx.shard.index == 1 and ctx.attempt == 1 and 5 or 0.1)
           assert(ctx:put_fenced(%q .. string.format("%%d", ctx.fire) .. "/" .. ctx.shard.index
             .. "/" .. ctx.node .. "-" .. math.random(1e9), ctx.node))
         end }]]):format(P .. "out/"))
T.ok(c:loaded("sharded", rev), "sharded job loaded on 2 nodes")
baton.sleep(5)
c:start("c", TTL)
T.ok(c:loaded("sharded", rev), "and on the third")
baton.sleep(9)

local function tally()
  local r = assert(e:get(P .. "out/", { prefix = true }))
  local by = {}
  for _, kv in ipairs(r.kvs) do
    local f, i = kv.key:sub(#P + 5):match("^(%d+)/(%d+)/")
    f, i = tonumber(f), tonumber(i)
    by[f] = by[f] or {}
    by[f][i] = by[f][i] or {}
    table.insert(by[f][i], kv.value)
  end
  return by
end

local by = tally()
local fires = {}
for f in pairs(by) do fires[#fires + 1] = f end
table.sort(fires)
T.ok(#fires >= 3, "several instants ran (" .. #fires .. ")")
local bad, nodes_per_fire = {}, {}
local settled = baton.now() - 6 -- shard 1 takes 5 s
for k = 1, #fires do
  local f = fires[k]
  if f > settled then break end
  local used = {}
  for i = 1, 6 do
    local n = by[f][i] and #by[f][i] or 0
    if n ~= 1 then bad[#bad + 1] = ("%d/%d ran %d times"):format(f, i, n) end
    if by[f][i] then used[by[f][i][1]] = true end
  end
  local u = 0
  for _ in pairs(used) do u = u + 1 end
  nodes_per_fire[#nodes_per_fire + 1] = u
end
T.is(#bad, 0, "every shard of every instant ran exactly once " .. table.concat(bad, ", "))
T.ok(nodes_per_fire[#nodes_per_fire] == 3, "with three nodes the shards spread over all three ("
  .. table.concat(nodes_per_fire, ",") .. ")")

-- kill -9 the node running shard 1 of the current instant
local victim
for _ = 1, 40 do
  local r = assert(e:get(P .. "running/sharded/", { prefix = true }))
  for _, kv in ipairs(r.kvs) do
    if kv.key:match("/1$") then victim = baton.json.decode(kv.value).node end
  end
  if victim then break end
  baton.sleep(0.05)
end
T.ok(victim, "found the node running shard 1: " .. tostring(victim))
c:signal(victim, "KILL")
c.nodes[victim] = nil
local killed = baton.now()
baton.sleep(TTL + 5)
c:cli("job", "pause", "sharded")
baton.sleep(6) -- let the last shard 1 runs (5 s) end
by = tally()
local after, on_dead, missing = 0, 0, 0
for f, shards in pairs(by) do
  if f > killed + TTL + 1.5 then
    after = after + 1
    for i = 1, 6 do
      if not shards[i] then missing = missing + 1
      elseif shards[i][1] == victim then on_dead = on_dead + 1 end
    end
  end
end
T.ok(after >= 1, "instants ran after the kill (" .. after .. ")")
T.is(on_dead, 0, "no later shard landed on the dead node")
T.is(missing, 0, "and no shard was missing")
-- the killed node's in-flight shard 1 was failed over (attempt 2 elsewhere)
local recs = c:records("sharded")
local failed_over = false
for _, r in ipairs(recs) do
  if r.shard == 1 and r.attempt == 2 and r.attempts and r.attempts[1]
     and r.attempts[1].state == "lost" and r.node ~= victim then
    failed_over = true
  end
end
T.ok(failed_over, "the dead node's in-flight shard was re-run elsewhere")
c:destroy()

-- Shards are accounted one by one: instants where shard 1 ran but shard 2
-- never did (its claims all failed, and then the leader changed) are
-- found by the next leader and recorded skipped, shard by shard.
do
  local c2 = N.new("nodeshards2")
  local e2, P2 = c2.e, c2.P
  local rev2 = c2:put_job("part", [[
return { schedule = "* * * * * *", shards = 2, misfire = "skip", concurrency = "allow",
         run = function(ctx) end }]])
  local x = math.floor(baton.now()) - 1
  local util = require "baton.cli.util"
  for _, f in ipairs { x - 1, x } do
    local now = baton.now()
    assert(e2:put(P2 .. "runs/part/" .. util.instant(f) .. "/1", baton.json.encode {
      job = "part", fire = f, shard = 1, node = "gone", attempt = 1, state = "succeeded",
      started = now, finished = now, code_revision = rev2 }))
  end
  c2:start("a", TTL)
  T.ok(c2:loaded("part", rev2), "sharded job loaded")
  local function shard2(f)
    local r = assert(e2:get(P2 .. "runs/part/" .. util.instant(f) .. "/2")).kvs[1]
    return r and baton.json.decode(r.value)
  end
  local got = N.wait(20, function() return shard2(x - 1) and shard2(x) and true end)
  T.ok(got, "the missing shard 2 of both instants was found")
  for _, f in ipairs { x - 1, x } do
    local r = shard2(f) or {}
    T.is(r.state, "skipped", "shard 2 of " .. util.instant(f) .. " is recorded skipped")
    T.like(r.error or "", "misfire", "with the misfire reason")
    T.is(r.shard, 2, "as shard 2")
  end
  local one = assert(e2:get(P2 .. "runs/part/" .. util.instant(x) .. "/1")).kvs[1]
  T.is(baton.json.decode(one.value).node, "gone", "shard 1's record is left as it was")
  c2:destroy()
end
T.done()
