-- P last/<job> (lua/baton/run_end.lua, M.last_op): every write of a run
-- record also makes last/<job> name the job's newest run (in the order of
-- the run keys), whatever order the writes come in; and job ls reads it,
-- falling back to the newest record for a job that has none.
local T = require "tap"
local run_end = require "baton.run_end"
local json = baton.json
local e = baton.etcd
local bin = os.getenv("BATON_BIN") or "bin/baton"
local P = "/test/joblast/" .. tostring(baton.now()):gsub("%.", "") .. "/"

-- Writes the record of run id of job j as the node does: record and
-- last/ in one transaction.
local function write(j, id, state)
  local rec = { job = j, fire = 1, node = "n1", attempt = 1, state = state, started = 2 }
  assert(e:txn { success = { { put = { key = P .. "runs/" .. j .. "/" .. id, value = json.encode(rec) } },
                             run_end.last_op(P, j, id, rec) } })
end

local function last(j)
  local kv = assert(e:get(P .. "last/" .. j)).kvs[1]
  return kv and json.decode(kv.value)
end

-- The newest run key of job j, as job ls read it before last/ existed.
local function newest(j)
  local r = assert(e:get(P .. "runs/" .. j .. "/", { prefix = true, sort = "key", order = "desc", limit = 1 }))
  return r.kvs[1] and r.kvs[1].key:sub(#P + 7 + #j)
end

do
  write("a", "2026-11-29T02:00:00Z", "running")
  T.is_deeply({ last("a").run, last("a").state }, { "2026-11-29T02:00:00Z", "running" }, "a first record makes the entry")
  write("a", "2026-11-29T02:00:00Z", "succeeded")
  T.is(last("a").state, "succeeded", "the same run's next write updates it")
  write("a", "2026-11-29T01:00:00Z", "skipped")
  T.is(last("a").run, "2026-11-29T02:00:00Z", "an older run's record does not")
  write("a", "2026-11-29T02:00:00Z/1", "running")
  T.is(last("a").run, "2026-11-29T02:00:00Z/1", "a shard sorts after its instant, as its key does")
  write("a", "2026-11-29T02:00:00.123Z", "running")
  T.is(last("a").run, "2026-11-29T02:00:00Z/1", "a manual run's id sorts as its key does")
  write("a", "2026-11-29T03:00:00Z", "failed")
  T.is(last("a").run, newest("a"), "the entry names the newest record")
  local v = assert(e:get(P .. "last/a")).kvs[1].value
  T.like(v, '^{"run":"2026%-11%-29T03:00:00Z",', "the value starts with the run id")
  T.ok(last("a").node == "n1" and last("a").started == 2 and last("a").attempt == 1, "with node, started, attempt")

  -- Many runs in a random order: the entry ends on the newest.
  local ids = {}
  for i = 1, 40 do ids[i] = ("2026-11-29T%02d:%02d:00Z"):format(math.floor(i / 3), i % 60) end
  for i = #ids, 2, -1 do
    local k = math.random(i)
    ids[i], ids[k] = ids[k], ids[i]
  end
  for _, id in ipairs(ids) do write("b", id, "succeeded") end
  T.is(last("b").run, newest("b"), "in any order of writes, the newest run")
end

-- job ls: the entry, or the newest record when there is none.
do
  assert(e:put(P .. "jobs/a", 'return { schedule = "@manual", run = function() end }'))
  assert(e:put(P .. "jobs/c", 'return { schedule = "@manual", run = function() end }'))
  assert(e:put(P .. "jobs/d", 'return { schedule = "@manual", run = function() end }'))
  assert(e:put(P .. "runs/c/2026-11-29T05:00:00Z", json.encode { job = "c", state = "failed" }))
  local r = assert(baton.exec { bin, "--prefix", P, "job", "ls", "--json", timeout = 30 })
  local by = {}
  for _, j in ipairs(json.decode(r.stdout) or {}) do by[j.name] = j end
  T.ok(by.a and by.a.last and by.a.last.run == "2026-11-29T03:00:00Z" and by.a.last.state == "failed",
    "job ls: the last run from last/")
  T.ok(by.c and by.c.last and by.c.last.run == "2026-11-29T05:00:00Z" and by.c.last.state == "failed",
    "job ls: a record without last/ is found all the same")
  T.ok(by.d and by.d.last == nil, "job ls: a job that never ran has no last run")
  r = assert(baton.exec { bin, "--prefix", P, "job", "rm", "a", "--purge", timeout = 30 })
  T.is(r.code, 0, "job rm --purge")
  T.is(assert(e:get(P .. "last/a")).count, 0, "removes last/ with the records")
  T.is(assert(e:get(P .. "last/b")).count, 1, "and only the job's")
end

assert(e:delete(P, { prefix = true }))
T.done()
