-- baton eval lock-counter.lua NAME COUNTER N: N times: lock NAME, read the
-- counter, write it + 1 guarded by the lock, unlock. A guarded write that
-- fails is an error (it would mean two holders at once).
local name, counter, n = arg[1], arg[2], tonumber(arg[3])
local e = baton.etcd
local s = assert(baton.session { ttl = 10 })
local m = baton.mutex(s, name)
for _ = 1, n do
  assert(m:lock(60))
  local r = assert(e:get(counter))
  local v = tonumber(r.kvs[1] and r.kvs[1].value or "0")
  local t = assert(e:txn {
    compare = { m:guard() },
    success = { { put = { key = counter, value = tostring(v + 1) } } },
  })
  assert(t.succeeded, "guarded write failed while holding the lock")
  assert(m:unlock())
end
s:close()
