-- baton eval lock-holder.lua NAME TTL TAG: takes NAME, publishes its fence
-- at /test/holder/TAG/ready, then waits (polling) for /test/holder/TAG/check
-- and reports m:held() and whether a guarded write still succeeds at
-- /test/holder/TAG/result as JSON.
local name, ttl, tag = arg[1], tonumber(arg[2]), arg[3]
local e = baton.etcd
local base = "/test/holder/" .. tag .. "/"
local s = assert(baton.session { ttl = ttl })
local m = baton.mutex(s, name)
assert(m:lock(30))
assert(e:put(base .. "ready", tostring(m.fence)))
while true do
  local r = e:get(base .. "check")
  if r and r.count > 0 then break end
  baton.sleep(0.1)
end
local held = m:held()
local t = e:txn {
  compare = { m:guard() },
  success = { { put = { key = base .. "guarded", value = "written" } } },
}
assert(e:put(base .. "result", baton.json.encode {
  held = held, guarded = t and t.succeeded or false, lost = (s:done()) }))
