-- baton.election: campaign, leader, proclaim, resign, observe; a second
-- candidate takes over when the leader resigns or its session ends.
local T = require "tap"
local N = "/test/election/" .. tostring(baton.now())

local s1 = assert(baton.session { ttl = 10 })
local s2 = assert(baton.session { ttl = 10 })
local a, b = baton.election(s1, N), baton.election(s2, N)

local none, nerr, ncode = a:leader()
T.is(ncode, "ENOENT", "no leader yet: ENOENT")

local changes = {}
local next_leader, observer = a:observe()
local observer_done
baton.go(function()
  for l in next_leader do changes[#changes + 1] = l.value end
  observer_done = true
end)

T.ok(a:campaign("alpha"), "first candidate leads at once")
local l = assert(a:leader())
T.is(l.value, "alpha", "leader value")
T.is(l.key, a.key, "leader key is name/<lease hex>")
T.like(a.key, "/%x+$", "hex lease suffix")
T.is(l.lease, s1.lease, "leader lease")

local _, terr, tcode = b:campaign("beta", 0.3)
T.is(tcode, "ETIMEDOUT", "second candidate's campaign times out while alpha leads")
T.is(assert(baton.etcd:get(N .. "/", { prefix = true })).count, 1, "and withdraws its key")

T.ok(a:proclaim("alpha-2"), "the leader proclaims a new value")
T.is(assert(a:leader()).value, "alpha-2", "leader() sees it")
local _, perr, pcode = b:proclaim("nope")
T.is(pcode, "ENOTLEADER", "a non-leader cannot proclaim")

local b_leads
baton.go(function() b_leads = b:campaign("beta", 10) end)
baton.sleep(0.3)
T.ok(not b_leads, "beta waits")
T.ok(a:resign(), "alpha resigns")
local deadline = baton.monotime() + 5
while not b_leads and baton.monotime() < deadline do baton.sleep(0.02) end
T.ok(b_leads, "beta leads after alpha resigned")
T.is(assert(b:leader()).value, "beta", "leader is beta")
local _, rerr, rcode = a:proclaim("x")
T.is(rcode, "ENOTLEADER", "a resigned leader cannot proclaim")

-- a leader whose session ends is replaced
local c = baton.election(s1, N)
local c_leads
baton.go(function() c_leads = c:campaign("gamma", 10) end)
baton.sleep(0.3)
s2:close()
deadline = baton.monotime() + 5
while not c_leads and baton.monotime() < deadline do baton.sleep(0.02) end
T.ok(c_leads, "when the leader's session closes, the next candidate leads")

baton.sleep(0.3)
T.ok(observer:cancel(), "cancel the observer")
baton.sleep(0.1)
T.ok(observer_done, "its loop ended")
T.is_deeply(changes, { "alpha", "alpha-2", "beta", "gamma" }, "observe saw every leader and value in order")
T.error_like(function() a:campaign(5) end, "string expected", "campaign needs a string")
T.error_like(function() baton.election(s1, "") end, "name must not be empty", "empty name raises")
c:resign()
s1:close()
T.done()
