-- A new leader looks at the instants its predecessor had no time to check.
-- The only node that may run a labelled job is frozen, so its instants are
-- missed; the leader is killed before its misfire check reaches the last of
-- them (it checks a few seconds behind). The next leader, which never led
-- before and whose own timer fired for those instants too (it is not
-- eligible, so that proves nothing), must record every one of them.
local T = require "tap"
local N = require "nodes"
local TTL = 3

local c = N.new("misfireleader")
c:start("l1", TTL)
T.ok(N.wait(10, function() return c:cli("leader").stdout == "l1\n" end), "l1 leads")
c:start("l2", TTL)
c:start("x", TTL, "--labels role=x")
local rev = c:put_job("lab", [[
return { schedule = "* * * * * *", labels = { role = "x" }, misfire = "skip",
         run = function() end }]])
T.ok(c:loaded("lab", rev), "the labelled job is loaded")
T.ok(N.wait(10, function()
  for _, r in ipairs(c:records("lab")) do if r.node == "x" and r.state == "succeeded" then return true end end
end), "x runs it")

local stopped = baton.now()
c:signal("x", "STOP")
baton.sleep(3)
local killed = baton.now()
c:signal("l1", "KILL")
c.nodes.l1 = nil
T.ok(N.wait(TTL + 10, function() return c:cli("leader").stdout == "l2\n" end), "l2 leads after l1's death")
c:signal("x", "CONT")
-- every instant from x's freeze to l1's death has a record (run or skipped)
local want = {}
for f = math.ceil(stopped + 0.5), math.floor(killed) do want[#want + 1] = f end
local missing
T.ok(N.wait(20, function()
  local have = {}
  for _, r in ipairs(c:records("lab")) do have[r.fire] = r end
  missing = {}
  for _, f in ipairs(want) do if not have[f] then missing[#missing + 1] = os.date("!%H:%M:%S", f) end end
  return #missing == 0
end), ("every instant of the freeze before l1's death has a record (%d instants; missing: %s)")
  :format(#want, table.concat(missing or {}, " ")))
local skipped = 0
for _, r in ipairs(c:records("lab")) do
  if r.state == "skipped" and r.fire >= want[1] and r.fire <= want[#want] then skipped = skipped + 1 end
end
T.ok(skipped >= 1, "skipped ones among them (" .. skipped .. ")")

c:destroy()
T.done()
