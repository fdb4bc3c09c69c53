-- baton eval lock-waiter.lua NAME TTL TAG: publishes its pid at
-- /test/waiter/TAG/pid, waits for NAME (30 s at most), and writes the
-- outcome {ok=, code=, err=} to /test/waiter/TAG/result.
local name, ttl, tag = arg[1], tonumber(arg[2]), arg[3]
local e = baton.etcd
local base = "/test/waiter/" .. tag .. "/"
local s = assert(baton.session { ttl = ttl })
local m = baton.mutex(s, name)
local stat = io.open("/proc/self/stat"):read("*l")
assert(e:put(base .. "pid", stat:match("^(%d+)")))
local ok, err, code = m:lock(30)
assert(e:put(base .. "result", baton.json.encode { ok = ok or false, code = code or "", err = err or "" }))
if ok then m:unlock() end
s:close()
