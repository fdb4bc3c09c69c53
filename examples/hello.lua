-- bin/baton eval examples/hello.lua [NAME]
-- Writes a key, watches it change, and keeps a lease-bound key alive.
local e = baton.etcd
local name = ... or "world"
local key = "/examples/hello/" .. name

local w = assert(e:watch(key))
assert(e:put(key, "hello, " .. name))
local events = assert(w:next(5))
print(events[1].type, events[1].kv.key, events[1].kv.value)
w:cancel()

local lease = assert(e:grant(5))
assert(lease:keepalive())
assert(e:put(key .. "/presence", "here", {lease = lease}))
print("lease", lease.id, "ttl", lease.ttl)
assert(lease:revoke())
assert(e:delete(key, {prefix = true}))
