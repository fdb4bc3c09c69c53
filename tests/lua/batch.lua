-- The node's write batcher (lua/baton/node/batch.lua), against a real etcd:
-- concurrent transactions go as the nested transactions of few requests,
-- each keeps its own compares and answer, members that touch the same key
-- never share a request (but register writes of one key do: only the
-- newest goes), an error reaches every member, a request etcd refuses as
-- a whole is sent again member by member, and a member that may linger
-- waits for company (or for one that may not).
local T = require "tap"
local batch = require "baton.node.batch"
local e = baton.etcd
local P = "/test/batch/" .. tostring(baton.now()):gsub("%.", "") .. "/"

-- An etcd client that counts requests and remembers how many nested
-- transactions each carried.
local function counting(inner)
  local c = { requests = 0, sizes = {} }
  function c:txn(t)
    self.requests = self.requests + 1
    local nested = 0
    for _, op in ipairs(t.success or {}) do if op.txn then nested = nested + 1 end end
    self.sizes[#self.sizes + 1] = nested
    return inner:txn(t)
  end
  return c
end

-- Runs fn(i) for i = 1..n in coroutines started in one turn of the loop;
-- returns their results once all are back.
local function all(n, fn)
  local res, left, done = {}, n, baton._cond()
  for i = 1, n do
    baton.go(function()
      res[i] = { fn(i) }
      left = left - 1
      if left == 0 then done:signal() end
    end)
  end
  done:wait()
  return res
end

local function create(key, value)
  return { compare = { { key = key, target = "create", op = "==", value = 0 } },
           success = { { put = { key = key, value = value } } },
           failure = { { get = { key = key } } } }
end

-- 1. 50 claims of distinct keys, one of them taken already: few requests,
-- and the taken one fails alone.
assert(e:put(P .. "a/7", "taken"))
local c = counting(e)
local b = batch.new(c)
local res = all(50, function(i) return b:txn(create(P .. "a/" .. i, "mine-" .. i)) end)
local won, lost = 0, {}
for i, r in ipairs(res) do
  local x = r[1]
  if x and x.succeeded then won = won + 1
  elseif x then lost[#lost + 1] = i end
end
T.is(won, 49, "49 claims succeeded")
T.is(table.concat(lost, ","), "7", "the one whose key existed failed, alone")
T.ok(res[7][1] and res[7][1].responses[1].kvs[1].value == "taken",
     "and got its own failure branch's answer")
T.ok(c.requests <= 3, ("50 claims in %d requests"):format(c.requests))
local n = 0
for _, kv in ipairs(assert(e:get(P .. "a/", { prefix = true })).kvs) do
  if kv.value:match("^mine%-") then n = n + 1 end
end
T.is(n, 49, "etcd holds exactly the 49 claimed keys")

-- 2. Members that write the same key never travel together: the outcome is
-- that of one after the other (one create wins, the other sees it).
c = counting(e)
b = batch.new(c)
res = all(2, function(i) return b:txn(create(P .. "same", "writer-" .. i)) end)
local s1, s2 = res[1][1], res[2][1]
T.ok(s1 and s2 and (s1.succeeded ~= s2.succeeded), "of two creates of one key, exactly one won")
T.is(c.requests, 2, "in two requests")
-- a member that compares a key another one writes waits too
c = counting(e)
b = batch.new(c)
res = all(2, function(i)
  if i == 1 then return b:txn { success = { { put = { key = P .. "flag", value = "set" } } } } end
  return b:txn { compare = { { key = P .. "flag", target = "create", op = ">", value = 0 } },
                 success = { { put = { key = P .. "saw-flag", value = "yes" } } } }
end)
T.ok(res[2][1] and res[2][1].succeeded, "a compare on a key written by an earlier member sees the write")
T.is(c.requests, 2, "(they went one after the other, in order)")

-- 3. An error of the request reaches every member as its own.
local failing = { txn = function() return nil, "EUNAVAIL: no endpoint available", "EUNAVAIL" end }
b = batch.new(failing)
res = all(5, function(i) return b:txn(create(P .. "x/" .. i, "v")) end)
local errs = 0
for _, r in ipairs(res) do if r[1] == nil and r[3] == "EUNAVAIL" then errs = errs + 1 end end
T.is(errs, 5, "every member got the error and its code")

-- 4. A request etcd refuses as a whole (here: too many operations for its
-- --max-txn-ops of 128, as the batcher is told otherwise) is sent again
-- one member at a time.
local saved = batch.MAX_TXN_OPS
batch.MAX_TXN_OPS = 100000
c = counting(e)
b = batch.new(c)
res = all(40, function(i)
  local ops = {}
  for k = 1, 100 do ops[k] = { put = { key = P .. "big/" .. i .. "/" .. k, value = "v" } } end
  return b:txn { success = ops }
end)
batch.MAX_TXN_OPS = saved
local ok = 0
for _, r in ipairs(res) do if r[1] and r[1].succeeded then ok = ok + 1 end end
T.is(ok, 40, "every member of a refused request succeeded by itself")
T.ok(c.requests > 40, ("one refused request, then one each (%d requests)"):format(c.requests))
T.is(assert(e:get(P .. "big/", { prefix = true, count_only = true })).count, 4000, "all their keys are there")

-- 5. Within etcd's limit when told the truth: 40 such members are split so
-- that no request is refused.
c = counting(e)
b = batch.new(c)
res = all(40, function(i)
  local ops = {}
  for k = 1, 60 do ops[k] = { put = { key = P .. "mid/" .. i .. "/" .. k, value = "v" } } end
  return b:txn { success = ops }
end)
ok = 0
for _, r in ipairs(res) do if r[1] and r[1].succeeded then ok = ok + 1 end end
T.is(ok, 40, "40 members of 60 operations each succeeded")
T.is(c.requests, #c.sizes, "no request was refused and sent again")
local most = 0
for _, sz in ipairs(c.sizes) do if sz > most then most = sz end end
T.ok(most > 1 and most + 60 <= 128, ("as batches within --max-txn-ops (largest: %d members)"):format(most))

-- 6. Lingering: an end of a run waits for company, up to its linger; a
-- member that may not linger takes the waiting ones along.
c = counting(e)
b = batch.new(c)
local t0 = baton.monotime()
local r1 = b:txn({ success = { { put = { key = P .. "l/1", value = "v" } } } }, 0.2)
local waited = baton.monotime() - t0
T.ok(r1 and r1.succeeded, "a lone lingering member is written")
T.ok(waited >= 0.15 and waited < 2, ("after its linger (%.3f s)"):format(waited))
c = counting(e)
b = batch.new(c)
t0 = baton.monotime()
res = all(11, function(i)
  if i == 11 then
    baton.sleep(0.05)
    return b:txn { success = { { put = { key = P .. "l/urgent", value = "v" } } } }
  end
  return b:txn({ success = { { put = { key = P .. "l/x" .. i, value = "v" } } } }, 5)
end)
ok = 0
for _, r in ipairs(res) do if r[1] and r[1].succeeded then ok = ok + 1 end end
T.is(ok, 11, "ten lingering members and one that may not: all written")
T.ok(baton.monotime() - t0 < 2, "when the one that may not came, not after the linger")
T.is(c.requests, 1, "in one request")

-- 7. Register writes: runs of one job each raise P last/<job> to their id
-- (run_end.last_op); they share a request, the newest one's write goes, and
-- the key ends as if each had gone alone.
local run_end = require "baton.run_end"
c = counting(e)
b = batch.new(c)
local ids = {}
for i = 1, 12 do ids[i] = ("2026-01-01T00:00:%02dZ"):format(i) end
res = all(12, function(i)
  local id = ids[(i * 5) % 12 + 1] -- (not in order of arrival)
  local last = run_end.last_op(P, "job", id, { state = "succeeded", fire = i })
  return b:txn({ success = { { put = { key = P .. "runs/job/" .. id, value = "rec" } }, last } },
               nil, run_end.last_register(P, "job", id, last))
end)
ok = 0
for _, r in ipairs(res) do if r[1] and r[1].succeeded then ok = ok + 1 end end
T.is(ok, 12, "twelve runs of one job, each with its last/ write: all succeeded")
T.is(c.requests, 1, "in one request")
local lv = assert(e:get(P .. "last/job")).kvs[1]
T.like(lv and lv.value or "", '^{"run":"2026%-01%-01T00:00:12Z"', "last/ names the newest run")
T.is(assert(e:get(P .. "runs/job/", { prefix = true, count_only = true })).count, 12, "and every record is there")
-- an older run's write after that leaves it alone
local older = run_end.last_op(P, "job", ids[3], { state = "failed" })
assert(b:txn({ success = { older } }, nil, run_end.last_register(P, "job", ids[3], older)))
lv = assert(e:get(P .. "last/job")).kvs[1]
T.like(lv and lv.value or "", '^{"run":"2026%-01%-01T00:00:12Z"', "an older run does not take it back")
-- a plain write of that key does not travel with register writes
c = counting(e)
b = batch.new(c)
res = all(2, function(i)
  if i == 1 then
    local l = run_end.last_op(P, "job", "2026-01-01T00:01:00Z", { state = "succeeded" })
    return b:txn({ success = { l } }, nil, run_end.last_register(P, "job", "2026-01-01T00:01:00Z", l))
  end
  return b:txn { success = { { delete = { key = P .. "last/job" } } } }
end)
T.is(c.requests, 2, "a plain write of a register's key goes in a request of its own")
T.is(assert(e:get(P .. "last/job", { count_only = true })).count, 0, "after the register write (order kept)")

assert(e:delete(P, { prefix = true }))
T.done()
