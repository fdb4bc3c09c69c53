-- A 3-member etcd cluster: a stopped or hung member is skipped, a watch
-- moves to another member without losing or repeating events, and a lease
-- kept alive through member failures stays alive.
local T = require "tap"
local H = require "etcdh"

local c = H.cluster()
local urls = {}
for u in c.url:gmatch("[^,]+") do urls[#urls + 1] = u end
T.is(#urls, 3, "three members")
local e = baton.etcd.new { endpoints = c.url, timeout = 2, connect_timeout = 1 }
local P = "/cl/"

assert(e:put(P .. "a", "1"))
local lease = assert(e:grant(10))
assert(lease:keepalive())
assert(e:put(P .. "leased", "x", { lease = lease }))
-- idle_timeout: a hung member sends nothing, not even progress
-- notifications (every 2 s in the harness), so the watch must give up on it.
local w = assert(e:watch(P .. "w/", { prefix = true, idle_timeout = 5 }))
T.is(e:endpoint(), urls[1], "starts on the first member")

-- Stop member 1: reads, writes and the watch go on through the others.
c:member_stop(1)
local t0 = baton.monotime()
local g = e:get(P .. "a")
T.ok(g and g.kvs[1].value == "1", "get after member 1 stopped")
T.ok(baton.monotime() - t0 < 3, "within the connect timeout")
T.ok(e:put(P .. "w/1", "1"), "put after member 1 stopped (refused: never sent)")
T.isnt(e:endpoint(), urls[1], "moved to another member")
local evs = w:next(15)
T.is(evs and evs[1].kv.key, P .. "w/1", "the watch moved too and sees the put")

-- Hang the member in use (SIGSTOP): reads time out there and move on.
local cur
for i, u in ipairs(urls) do if u == e:endpoint() then cur = i end end
assert(H.script)
local r = assert(baton.exec { H.script, "pause", c.dir, tostring(cur), timeout = 30 })
T.is(r.code, 0, "member " .. cur .. " paused")
c:member_start(1)
t0 = baton.monotime()
g = e:get(P .. "a")
T.ok(g and g.kvs[1].value == "1", "get with the member in use hung")
T.ok(baton.monotime() - t0 < 8, ("moved on after the request timeout (%.1f s)"):format(baton.monotime() - t0))
local wrote
for _ = 1, 20 do
  wrote = e:put(P .. "w/2", "2")
  if wrote then break end
  baton.sleep(0.5)
end
T.ok(wrote, "a put gets through once the client moved")
local seen = {}
local deadline = baton.monotime() + 40
while not seen[P .. "w/2"] and baton.monotime() < deadline do
  local batch = w:next(5)
  for _, ev in ipairs(batch or {}) do
    T.ok(not seen[ev.kv.key], "event " .. ev.kv.key .. " delivered once")
    seen[ev.kv.key] = true
  end
end
T.ok(seen[P .. "w/2"], "the watch got past the hung member (" .. w:connects() .. " streams)")
assert(baton.exec { H.script, "resume", c.dir, tostring(cur), timeout = 30 })

T.is(lease:state(), "alive", "the lease stayed alive through it all")
T.ok(assert(e:get(P .. "leased")).count == 1, "its key is still there")
w:cancel()
e:close()
c:destroy()
T.done()
