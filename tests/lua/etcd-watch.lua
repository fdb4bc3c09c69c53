-- Watches: every event once and in order while another process writes
-- 1,000 keys and etcd restarts in the middle; a compacted start revision is
-- reported, not looped on; progress notifications keep an idle stream
-- alive and a silent one is replaced.
local T = require "tap"
local H = require "etcdh"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local root = os.getenv("BATON_ROOT") or "."

local srv = H.start()
local e = baton.etcd.new { endpoints = srv.url }

-- 1. 1,000 keys from another process; etcd restarted after 300 events.
do
  local P = "/w1/"
  local w = assert(e:watch(P, { prefix = true }))
  T.ok(w.start_revision > 0, "watch() returns once created, with its start revision")
  local writer
  baton.go(function()
    writer = baton.exec { bin, "eval", root .. "/tests/lua/lib/put-keys.lua", P, "1000",
                          timeout = 150, env = { BATON_ENDPOINTS = srv.url } }
  end)
  local seen, n, last, in_order, dups, restarted = {}, 0, 0, true, 0, false
  while n < 1000 do
    local evs, err = w:next(60)
    if not evs then T.fail("next: " .. tostring(err)); break end
    for _, ev in ipairs(evs) do
      if ev.kv.mod_revision <= last then in_order = false end
      last = ev.kv.mod_revision
      if seen[ev.kv.key] then dups = dups + 1 end
      seen[ev.kv.key] = true
      n = n + 1
    end
    if n >= 300 and not restarted then
      restarted = true
      srv:restart()
    end
  end
  local distinct = 0
  for _ in pairs(seen) do distinct = distinct + 1 end
  T.is(n, 1000, "1,000 events seen")
  T.is(distinct, 1000, "1,000 distinct keys")
  T.is(dups, 0, "no event delivered twice")
  T.ok(in_order, "events in revision order")
  T.ok(restarted, "etcd was restarted in the middle")
  T.ok(w:connects() >= 2, "the watch reconnected (" .. w:connects() .. " streams)")
  while not writer do baton.sleep(0.1) end
  T.is(writer and writer.code, 0, "writer process finished")
  local extra = w:next(0.5)
  T.is(extra, nil, "nothing after the 1,000")
  w:cancel()
  local _, err, code = w:next()
  T.is(code, "ECANCELED", "next() after cancel: ECANCELED")
end

-- 2. A start revision that has been compacted is reported once, not looped.
do
  local P = "/w2/"
  local first = assert(e:put(P .. "x", "0"))
  for i = 1, 5 do assert(e:put(P .. "x", tostring(i))) end
  local cur = assert(e:get(P .. "x")).revision
  assert(e:compact(cur))
  local w = assert(e:watch(P, { prefix = true, start_revision = first.revision }))
  local evs, err, code, crev = w:next(10)
  T.is(evs, nil, "watch from a compacted revision: no events")
  T.is(code, "ECOMPACTED", "reported as ECOMPACTED")
  T.like(err or "", "compacted", "message says compacted")
  T.is(crev, cur, "the compact revision is returned")
  local _, _, code2 = w:next(1)
  T.is(code2, "ECOMPACTED", "asking again repeats the report without reconnecting")
  T.is(w:connects(), 1, "one stream only: no reconnect loop")
  -- the owner re-reads and watches from there
  local now = assert(e:get(P, { prefix = true }))
  T.is(now.kvs[1].value, "5", "re-read after compaction")
  local w2 = assert(e:watch(P, { prefix = true, start_revision = now.revision + 1 }))
  assert(e:put(P .. "x", "6"))
  local evs2 = assert(w2:next(10))
  T.is(evs2[1].kv.value, "6", "re-watch from the re-read revision sees the next put")
  w2:cancel()
end

-- 2b. created_revision: the store revision when etcd confirmed the watch,
-- also for a watch that starts in the past (what lets a waiter see that
-- something was written between its read and its watch).
do
  local P = "/w2b/"
  local before = assert(e:put(P .. "a", "1")).revision
  local w = assert(e:watch(P, { prefix = true, start_revision = before }))
  local after = assert(e:put(P .. "b", "2")).revision
  T.is(w.start_revision, before - 1, "start_revision: the one before the asked start")
  T.ok(w.created_revision >= before and w.created_revision < after,
    ("created_revision %s is the store's revision at creation (%d..%d)")
      :format(tostring(w.created_revision), before, after - 1))
  local evs = assert(w:next(10))
  T.is(evs[1].kv.key, P .. "a", "and the past write is delivered first")
  w:cancel()
end

-- 3. Progress notifications (every 2 s in the harness) keep an idle watch
-- on one stream; a watch whose stream stays silent past idle_timeout is
-- replaced without losing events.
do
  local P = "/w3/"
  local quiet = assert(e:watch(P, { prefix = true, idle_timeout = 5 }))
  local impatient = assert(e:watch(P, { prefix = true, idle_timeout = 1 }))
  baton.sleep(6.5)
  T.is(quiet:connects(), 1, "progress notifications keep an idle stream alive")
  T.ok(impatient:connects() >= 2, "a stream silent past idle_timeout is replaced ("
       .. impatient:connects() .. ")")
  assert(e:put(P .. "k", "v"))
  local a = assert(quiet:next(10))
  local b = assert(impatient:next(10))
  T.is(a[1].kv.value, "v", "quiet watch sees the put")
  T.is(b[1].kv.value, "v", "replaced watch sees the put")
  T.is(impatient:next(2), nil, "and only once")
  quiet:cancel()
  impatient:cancel()
end

-- 4. Deletes with prev_kv, and no_put filter.
do
  local P = "/w4/"
  assert(e:put(P .. "a", "1"))
  local w = assert(e:watch(P, { prefix = true, prev_kv = true, no_put = true }))
  assert(e:put(P .. "b", "2"))
  assert(e:delete(P .. "a"))
  local evs = assert(w:next(10))
  T.is(evs[1].type, "delete", "no_put: the first event is the delete")
  T.is(evs[1].kv.key, P .. "a", "delete event key")
  T.is(evs[1].prev_kv and evs[1].prev_kv.value, "1", "delete event prev_kv")
  w:cancel()
end

e:close()
srv:destroy()
T.done()
