-- The etcd client over gRPC (issue 24): one connection per endpoint, every
-- watch on one Watch stream and every lease on one LeaseKeepAlive stream;
-- streams re-opened with a new token once etcd drops the old one; failover
-- to another member when the one in use is killed; a write whose answer is
-- lost is not sent again elsewhere, a read is; a watch response etcd sends
-- in fragments is joined.
local T = require "tap"
local H = require "etcdh"
local root = os.getenv("BATON_ROOT") or "."

local url = assert(os.getenv("BATON_ENDPOINTS"), "BATON_ENDPOINTS"):match("[^,]+")

local function mypid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*n")
  f:close()
  return pid
end
local PID = mypid()

-- Established TCP connections from this process to the endpoint u.
local function conns(u)
  local port = u:match(":(%d+)$")
  local r = assert(baton.exec { "ss", "-Htnp", "state", "established", "dport", "=", ":" .. port })
  local n = 0
  for line in r.stdout:gmatch("[^\n]+") do
    if line:find("pid=" .. PID .. ",", 1, true) then n = n + 1 end
  end
  return n
end

-- Waits for a batch on w with key k; returns the keys seen on the way.
local function seen_until(w, k, secs)
  local seen = {}
  local deadline = baton.monotime() + secs
  while not seen[k] and baton.monotime() < deadline do
    for _, ev in ipairs(w:next(deadline - baton.monotime()) or {}) do
      seen[ev.kv.key] = (seen[ev.kv.key] or 0) + 1
    end
  end
  return seen
end

-- 1. Many watches and many leases: one connection, one stream each.
do
  local e = baton.etcd.new { endpoints = url }
  local P = "/grpc1/"
  local ws = {}
  for i = 1, 20 do ws[i] = assert(e:watch(P .. i .. "/", { prefix = true })) end
  local leases = {}
  for i = 1, 8 do
    leases[i] = assert(e:grant(3))
    assert(leases[i]:keep())
  end
  -- and the one-off renewals Lua makes, all at once
  local done, ttls = 0, {}
  for i = 1, 8 do
    baton.go(function()
      ttls[i] = leases[i]:keepalive()
      done = done + 1
    end)
  end
  for i = 1, 20 do assert(e:put(P .. i .. "/k", "v" .. i)) end
  local got = 0
  for i = 1, 20 do
    local evs = ws[i]:next(10)
    if evs and evs[1].kv.key == P .. i .. "/k" and evs[1].kv.value == "v" .. i then got = got + 1 end
  end
  T.is(got, 20, "20 watches each see their own put")
  local t0 = baton.monotime()
  while done < 8 and baton.monotime() - t0 < 10 do baton.sleep(0.05) end
  local good = 0
  for i = 1, 8 do if (ttls[i] or 0) > 0 then good = good + 1 end end
  T.is(good, 8, "8 concurrent keepalive() calls answered from the keepalive stream")
  T.is(conns(url), 1, "one TCP connection to etcd carries them all")
  baton.sleep(4) -- past the leases' 3 s TTL: the keepers renew them
  local alive = 0
  for i = 1, 8 do if leases[i]:state() == "alive" and leases[i]:timetolive() then alive = alive + 1 end end
  T.is(alive, 8, "8 leases kept alive past their TTL on one stream")
  -- cancelling some watches leaves the others on the stream
  for i = 1, 10 do ws[i]:cancel() end
  for i = 1, 20 do assert(e:put(P .. i .. "/k2", "w" .. i)) end
  local after, ended = 0, 0
  for i = 11, 20 do
    local evs = ws[i]:next(10)
    if evs and evs[1].kv.key == P .. i .. "/k2" then after = after + 1 end
  end
  for i = 1, 10 do
    local evs, _, code = ws[i]:next(1)
    if evs == nil and code == "ECANCELED" then ended = ended + 1 end
  end
  T.is(after, 10, "the 10 watches left go on after 10 others were cancelled")
  T.is(ended, 10, "and the cancelled ones have ended")
  local connects = 0
  for i = 11, 20 do connects = connects + ws[i]:connects() end
  T.is(connects, 10, "no watch was re-created meanwhile")
  T.is(conns(url), 1, "still one connection")
  for i = 1, 8 do assert(leases[i]:revoke()) end
  e:close()
end

-- 2. A token that etcd forgets (2 s idle here): a watch made afterwards
-- re-opens the Watch stream with a new token, and the watch already on it
-- moves over without losing or repeating events.
do
  local srv = H.start("--auth", "--auth-token-ttl=2")
  local e = baton.etcd.new { endpoints = srv.url, user = "baton", password = "batonpw" }
  local w1 = assert(e:watch("/tok/a/", { prefix = true }))
  local lease = assert(e:grant(4))
  assert(lease:keep())
  assert(e:put("/tok/a/1", "1"))
  T.is(assert(w1:next(10))[1].kv.key, "/tok/a/1", "first watch, first token")
  baton.sleep(3.5) -- the token has expired by now
  local w2, err = e:watch("/tok/b/", { prefix = true })
  T.ok(w2, "a watch after the token expired is created" .. (w2 and "" or ": " .. tostring(err)))
  assert(e:put("/tok/a/2", "2"))
  assert(e:put("/tok/b/1", "3"))
  local s1 = seen_until(w1, "/tok/a/2", 10)
  T.is_deeply(s1, { ["/tok/a/2"] = 1 }, "the first watch sees the next put once, and nothing again")
  local evs = w2 and w2:next(10)
  T.is(evs and evs[1].kv.key, "/tok/b/1", "the new watch sees its put")
  T.is(lease:state(), "alive", "the lease is still kept alive")
  T.is(conns(srv.url), 1, "one connection throughout")
  e:close()
  srv:destroy()
end

-- 3. Failover: the member in use is killed (SIGKILL); reads, writes, the
-- watch and the lease go on through another member.
do
  local c = H.cluster()
  local urls = {}
  for u in c.url:gmatch("[^,]+") do urls[#urls + 1] = u end
  local e = baton.etcd.new { endpoints = c.url, timeout = 2, connect_timeout = 1 }
  local w = assert(e:watch("/fo/", { prefix = true }))
  local lease = assert(e:grant(4))
  assert(lease:keep())
  assert(e:put("/fo/1", "1"))
  T.is(assert(w:next(10))[1].kv.key, "/fo/1", "watch on member 1")
  T.is(conns(urls[1]) + conns(urls[2]) + conns(urls[3]), 1, "one connection, to member 1")
  assert(baton.exec { H.script, "member-kill", c.dir, "1", timeout = 30 })
  local t0 = baton.monotime()
  local put
  for _ = 1, 20 do
    put = e:put("/fo/2", "2")
    if put then break end
    baton.sleep(0.2)
  end
  T.ok(put, "a put gets through after member 1 was killed")
  T.ok(baton.monotime() - t0 < 5, ("within %.1f s"):format(baton.monotime() - t0))
  local s = seen_until(w, "/fo/2", 15)
  T.is_deeply(s, { ["/fo/2"] = 1 }, "the watch moved and sees the put once")
  baton.sleep(5) -- past the lease's TTL
  T.is(lease:state(), "alive", "the lease was renewed through another member")
  T.ok(lease:timetolive(), "and etcd agrees")
  T.is(conns(urls[1]), 0, "nothing left on the dead member")
  T.ok(conns(urls[2]) <= 1 and conns(urls[3]) <= 1 and conns(urls[2]) + conns(urls[3]) >= 1,
       ("at most one connection per live member (%d, %d)"):format(conns(urls[2]), conns(urls[3])))
  e:close()
  c:destroy()
end

-- 4. A lost answer: the connection to endpoint 1 freezes (the chaos proxy)
-- then dies. A put that was written is not sent again to endpoint 2 (it
-- may have been applied: the caller reads back, as a node's claims do); a
-- get is retried there.
do
  local proxy = root .. "/build/chaos/proxy"
  if not io.open(proxy) then
    T.skip("no " .. proxy .. " (make chaos-proxy)", 5)
  else
    local dir = os.tmpname()
    os.remove(dir)
    assert(baton.exec { "mkdir", "-p", dir })
    local p = assert(baton.spawn { proxy, dir .. "/ports", (url:gsub("^http://", "")), stdio = "null" })
    local port
    for _ = 1, 100 do
      local f = io.open(dir .. "/ports")
      if f then port = f:read("*n"); f:close(); break end
      baton.sleep(0.05)
    end
    assert(port, "proxy port")
    local e = baton.etcd.new { endpoints = "http://127.0.0.1:" .. port .. "," .. url, timeout = 1 }
    assert(e:put("/lost/warm", "1"))
    T.is(e:endpoint(), "http://127.0.0.1:" .. port, "through the proxy")
    assert(p:kill("SIGUSR1")) -- freeze
    baton.sleep(0.2)
    local r, err, code = e:put("/lost/k", "v")
    T.is(code, "ETIMEDOUT", "a put with no answer fails: " .. tostring(err))
    assert(p:kill("SIGUSR2")) -- reset: the put never arrives
    baton.sleep(0.2)
    local g = e:get("/lost/k")
    T.ok(g and #g.kvs == 0, "it was not sent again to endpoint 2")
    assert(p:kill("SIGHUP")) -- pass
    local e2 = baton.etcd.new { endpoints = "http://127.0.0.1:" .. port .. "," .. url, timeout = 1 }
    assert(e2:get("/lost/warm"))
    assert(p:kill("SIGUSR1"))
    baton.sleep(0.2)
    local t0 = baton.monotime()
    g = e2:get("/lost/warm")
    T.ok(g and g.kvs[1].value == "1", "a get with no answer is retried on endpoint 2")
    T.ok(baton.monotime() - t0 < 3, ("after the request timeout (%.1f s)"):format(baton.monotime() - t0))
    e:close()
    e2:close()
    p:kill("SIGTERM")
    p:wait(5)
    baton.exec { "rm", "-rf", dir }
  end
end


-- 5. A response etcd sends in fragments: a watch that catches up on 30
-- puts of 60,000 bytes gets them in one WatchResponse of 1.8 MB, which
-- etcd splits (the watch asks for fragment) into parts of at most
-- --max-request-bytes + 512 KiB, 589,824 bytes here: 4 parts of 9, 9, 9
-- and 3 events. The client joins them: one batch, every event once and in
-- order; and it resumes after the last part's revision, not the first's.
do
  local srv = H.start("--max-request-bytes=65536",
                      "--experimental-watch-progress-notify-interval=10m")
  local e = baton.etcd.new { endpoints = srv.url }
  -- etcd's count of messages sent on Watch streams
  local function sent()
    local r = assert(baton.exec { "curl", "-sf", srv.url .. "/metrics" })
    return tonumber(r.stdout:match('grpc_server_msg_sent_total{grpc_method="Watch",'
      .. 'grpc_service="etcdserverpb.Watch",[^}]*} (%d+)'))
  end
  local P, N = "/frag/", 30
  local big = ("x"):rep(60000)
  local first
  for i = 1, N do
    local r = assert(e:put(("%s%02d"):format(P, i), i .. big))
    first = first or r.revision
  end
  local before = assert(sent(), "etcd's Watch message count")
  local w = assert(e:watch(P, { prefix = true, start_revision = first, idle_timeout = 3 }))
  local evs = w:next(20) or {}
  T.is(#evs, N, "the 30 events come as one batch")
  local once, in_order, last = true, true, first - 1
  for i, ev in ipairs(evs) do
    if ev.kv.key ~= ("%s%02d"):format(P, i) or ev.kv.value ~= i .. big then once = false end
    if ev.kv.mod_revision ~= last + 1 then in_order = false end
    last = ev.kv.mod_revision
  end
  T.ok(once, "each event once, whole")
  T.ok(in_order, "in revision order")
  -- created + 4 parts (nothing else: progress notifications are off)
  T.is(sent() - before, 5, "etcd sent them in 4 fragments")
  -- the idle watchdog (3 s) re-creates the watch from its next revision
  baton.sleep(4)
  T.ok(w:connects() >= 2, "the watch was re-created (" .. w:connects() .. ")")
  assert(e:put(P .. "after", "1"))
  local s = seen_until(w, P .. "after", 10)
  T.is_deeply(s, { [P .. "after"] = 1 }, "from after the last part: no event again")
  T.is(w:next(1), nil, "and nothing more")
  w:cancel()
  e:close()
  srv:destroy()
end

T.done()
