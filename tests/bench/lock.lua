-- Helper of tests/bench/lock. Mode "uncontended N": N lock+unlock cycles
-- of one session. Mode "handoff N": two sessions on separate clients; A
-- holds, B waits; the time from A's unlock call to B's lock returning.
-- Mode "put N": N put round trips, the reference for the hand-off.
local mode, n = arg[1], tonumber(arg[2] or "500")
local function pct(t, p) table.sort(t); return t[math.max(1, math.ceil(#t * p))] end
local mono = baton.monotime
local name = "/bench/lock/" .. mode

if mode == "uncontended" then
  local s = assert(baton.session { ttl = 30 })
  local m = baton.mutex(s, name)
  for _ = 1, 20 do assert(m:lock()); assert(m:unlock()) end
  local t = {}
  for i = 1, n do
    local t0 = mono()
    assert(m:lock())
    assert(m:unlock())
    t[i] = (mono() - t0) * 1e6
  end
  print(("p50_us=%d p99_us=%d n=%d"):format(pct(t, 0.5), pct(t, 0.99), n))
  s:close()
elseif mode == "handoff" then
  local ca = baton.etcd.new(baton.config)
  local cb = baton.etcd.new(baton.config)
  local sa = assert(baton.session { ttl = 30, client = ca })
  local sb = assert(baton.session { ttl = 30, client = cb })
  local ma, mb = baton.mutex(sa, name), baton.mutex(sb, name)
  local t = {}
  for i = 1, n + 10 do
    assert(ma:lock())
    local got, t0
    baton.go(function() assert(mb:lock()); got = mono() end)
    baton.sleep(0.005) -- let B queue behind A
    t0 = mono()
    assert(ma:unlock())
    while not got do baton.sleep(0) end
    if i > 10 then t[#t + 1] = (got - t0) * 1e6 end
    assert(mb:unlock())
  end
  print(("p50_us=%d p99_us=%d n=%d"):format(pct(t, 0.5), pct(t, 0.99), n))
  sa:close(); sb:close()
elseif mode == "put" then
  local e = baton.etcd
  for _ = 1, 20 do assert(e:put(name, "x")) end
  local t = {}
  for i = 1, n do
    local t0 = mono()
    assert(e:put(name, "x"))
    t[i] = (mono() - t0) * 1e6
  end
  print(("p50_us=%d p99_us=%d n=%d"):format(pct(t, 0.5), pct(t, 0.99), n))
end
