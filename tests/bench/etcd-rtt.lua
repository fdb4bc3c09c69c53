-- Helper of tests/bench/etcd-rtt: N sequential puts, then N gets, of the
-- same key and a 64-byte value, each timed on the monotonic clock.
-- Prints "put p50_us=.. p99_us=.." and "get ...".
local n = tonumber(arg[1] or "2000")
local e = baton.etcd
local key, value = "/bench/rtt", string.rep("v", 64)

local function pct(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

local function run(name, fn)
  for _ = 1, 20 do assert(fn()) end -- warm-up: connection, JIT
  local t = {}
  local mono = baton.monotime
  for i = 1, n do
    local t0 = mono()
    assert(fn())
    t[i] = (mono() - t0) * 1e6
  end
  print(("%s p50_us=%d p99_us=%d n=%d"):format(name, pct(t, 0.5), pct(t, 0.99), n))
end

run("put", function() return e:put(key, value) end)
run("get", function() return e:get(key) end)
