-- The claim path (lua/baton/node/claim.lua) without etcd or a running
-- node, on a bare node table: what the claim transaction compares, writes
-- and deletes for each kind of attempt (claim.claim_txn), what a skip
-- writes (claim.skip_txn, claim.concurrency_skip_txn), and how the answer
-- is read (claim.claim, sending through a stand-in for the write batcher):
-- claimed, lost to another node, skipped for concurrency, the session
-- gone.
local T = require "tap"
local claim = require "baton.node.claim"
local cancel = require "baton.node.cancel"
local runs = require "baton.node.runs"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"
local json = baton.json

local P = "/t/"
local NOW = 1796000000.5
local FIRE = 1796000000
local LEASE = 7077

-- A session that holds (done() says whether it was lost).
local function session(lease)
  local s = { lease = lease, lost = false }
  function s.done(x) return x.lost end
  return s
end

-- A bare node: its name, prefix, session, clock and loaded jobs; its write
-- batcher answers from `answers` in turn and keeps what it was sent.
local function node(jobs, answers)
  local n = {
    name = "n1", P = P, s = session(LEASE), claims = 0, jobs = jobs or {},
    now = function() return NOW end,
    sent = {}, posted = {}, lost = {}, skips = {},
  }
  n.batch = { txn = function(_, t, linger, reg)
    n.sent[#n.sent + 1] = { txn = t, linger = linger, reg = reg }
    local a = table.remove(answers or {}, 1)
    if type(a) == "function" then return a(n) end
    if a == "lost" then return nil, "EUNAVAILABLE: no answer" end
    return a
  end }
  n.board = { note = function(_, job, id) n.posted[#n.posted + 1] = job .. "/" .. id end,
              has = function() return false end }
  n.metrics = { claim_lost = function(_, job) n.lost[#n.lost + 1] = job end,
                skip = function(_, job, why) n.skips[#n.skips + 1] = job .. ":" .. why end }
  return n
end

local function spec(o)
  local s = { revision = 12, concurrency = "allow", timeout = 60 }
  for k, v in pairs(o or {}) do s[k] = v end
  return s
end

local function job(sp, o)
  local j = { spec = sp }
  for k, v in pairs(o or {}) do j[k] = v end
  return j
end

-- The operations of a transaction's list by kind: {put = {[key] = op},
-- delete = {[key] = true}, get = {[key] = op}, txn = {op, ...}}.
local function ops_of(list)
  local by = { put = {}, delete = {}, get = {}, txn = {} }
  for _, op in ipairs(list) do
    if op.put then by.put[op.put.key] = op.put
    elseif op.delete then by.delete[op.delete.key] = true
    elseif op.get then by.get[op.get.key] = op.get
    elseif op.txn then by.txn[#by.txn + 1] = op end
  end
  return by
end

-- The compares of a transaction as "key target op value" lines, sorted.
local function compares(t)
  local out = {}
  for _, c in ipairs(t.compare) do out[#out + 1] = ("%s %s %s %s"):format(c.key, c.target, c.op, tostring(c.value)) end
  table.sort(out)
  return out
end

-- The value put at key by the operations by (ops_of), and it decoded
-- ({} when nothing is put there).
local function put_at(by, key) return by.put[key] and by.put[key].value end
local function decoded(by, key)
  local v = put_at(by, key)
  return v and json.decode(v) or {}
end

local function sorted(list) table.sort(list) return list end

local ALIVE = ("%s lease == %d"):format(keys.key(P, "nodes", "n1"), LEASE)

---------------------------------------------------------------------------
-- 1. A first attempt (a scheduled instant of an allow job).
do
  local sp = spec { params = { region = "eu" } }
  local n = node { nightly = job(sp) }
  local run = { job = "nightly", id = "2026-11-29T02:00:00Z", fire = FIRE, spec = sp }
  local k = keys.run(P, "nightly", run.id)
  run.attempt = claim.next_attempt(nil)
  T.is(run.attempt, 1, "first attempt: attempt 1")
  local txn, rec, reg, skippable = claim.claim_txn(n, run, {}, NOW, n.s, "n1:7077:1")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0" },
              "first attempt: compares the node's session and that the record does not exist")
  local by = ops_of(txn.success)
  local gets = {}
  for key in pairs(by.get) do gets[#gets + 1] = key end
  T.is_deeply(gets, { k.cancel }, "first attempt: reads the run's cancel/ key")
  T.is(txn.success[1].get and txn.success[1].get.key, k.cancel, "the cancel/ read is the first response")
  T.is_deeply(decoded(by, k.run), json.decode(record.encode(rec)), "the record put is the one returned")
  T.is_deeply(rec, record.claimed(run, "n1", NOW, { code_revision = 12, token = "n1:7077:1", exclusive = false,
                                                    params = { region = "eu" } }),
              "the record: baton.record's claimed, with the job's revision, the token and its parameters")
  T.is(by.put[k.marker].lease, LEASE, "the running/ marker is bound to the session's lease")
  T.is_deeply(decoded(by, k.marker), { node = "n1", attempt = 1, token = "n1:7077:1" },
              "the marker says node, attempt and token")
  T.is(put_at(by, k.inflight), put_at(by, k.marker), "inflight/ holds the same")
  T.is(by.put[k.inflight].lease, nil, "inflight/ has no lease")
  T.is(by.put[k.active], nil, "an allow job's run takes no active/")
  T.is(next(by.delete), nil, "a first attempt deletes nothing")
  T.is(#by.txn, 1, "one nested transaction: last/")
  T.is_deeply(by.txn[1], run_end.last_op(P, "nightly", run.id, rec, nil), "last/<job> written as run_end.last_op")
  T.ok(by.txn[1].txn.failure, "last/ not known to be there: its create branch goes too")
  T.is_deeply(reg, { op = by.txn[1], key = keys.key(P, "last", "nightly"), order = run.id },
              "the register write of last/<job>")
  T.is_deeply(txn.failure, {}, "no failure branch")
  T.is(skippable, false, "nor a skip")
  -- once a claim of the job succeeded here, last/ is known to be there
  n.jobs.nightly.last_known = true
  local txn2 = claim.claim_txn(n, run, {}, NOW, n.s, "n1:7077:2")
  T.is(ops_of(txn2.success).txn[1].txn.failure, nil, "last/ known: its create branch is left out")
end

---------------------------------------------------------------------------
-- 2. A next attempt: takes over the record at its mod revision and
-- deletes its pending/ entry.
do
  local sp = spec()
  local n = node { nightly = job(sp) }
  local id = "2026-11-29T02:00:00Z"
  local k = keys.run(P, "nightly", id)
  local prev_rec = { job = "nightly", fire = FIRE, node = "n2", attempt = 2, state = "retrying",
                     params = { who = "first" }, attempts = { { attempt = 1, state = "failed" },
                                                              { attempt = 2, state = "failed" } } }
  local prev = { rec = prev_rec, mod = 40, pending = 41 }
  local run = { job = "nightly", id = id, fire = FIRE, spec = sp }
  run.attempt = claim.next_attempt(prev)
  T.is(run.attempt, 3, "next attempt: the one after the record's")
  local txn, rec = claim.claim_txn(n, run, { prev = prev }, NOW, n.s, "n1:7077:3")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " mod == 40", k.pending .. " mod == 41",
                                      k.marker .. " create == 0" },
              "next attempt: compares the record's and the pending entry's revisions and that no marker is there")
  local by = ops_of(txn.success)
  T.is_deeply(by.delete, { [k.pending] = true }, "next attempt: deletes its pending/ entry")
  T.is(rec.attempt, 3, "the record says attempt 3")
  T.is_deeply(rec.attempts, prev_rec.attempts, "and keeps the attempts before")
  T.is_deeply(rec.params, { who = "first" }, "and the run's parameters")
  T.is(decoded(by, k.marker).attempt, 3, "the marker says attempt 3")
  T.is_deeply(txn.failure, {}, "no failure branch")
end

---------------------------------------------------------------------------
-- 3. A shard of a forbid job: concurrency per shard.
do
  local sp = spec { concurrency = "forbid", shards = 3, shard_params = { "a", "b", "c" } }
  local n = node { split = job(sp) }
  local id = "2026-11-29T02:00:00Z/2"
  local run = { job = "split", id = id, fire = FIRE, spec = sp, shard = runs.shard_of(sp, id) }
  T.is_deeply(run.shard, { index = 2, total = 3, param = "b" }, "the shard of its id")
  run.attempt = 1
  local k = keys.run(P, "split", id)
  T.is(k.active, P .. "active/split/2", "its active/ key is the shard's")
  local txn, rec, _, skippable = claim.claim_txn(n, run, {}, NOW, n.s, "n1:7077:1")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0", k.active .. " create == 0" },
              "shard: compares that the shard's active/ is free")
  T.is(put_at(ops_of(txn.success), k.active), id, "and takes it")
  T.is(rec.shard, 2, "the record names the shard")
  T.is(rec.exclusive, true, "and holds active/")
  T.ok(skippable, "a first attempt that takes active/ may be skipped")
end

---------------------------------------------------------------------------
-- 4. A queue task: forced (tasks of a queue run in parallel), with the
-- queue's compare on the task.
do
  local sp = spec { concurrency = "forbid" }
  local n = node { q = job(sp) }
  local task = { key = P .. "queue/q/t1", value = "payload" }
  local run = { job = "q", id = "t1", fire = FIRE, spec = sp, task = task, attempt = 1 }
  local k = keys.run(P, "q", "t1")
  local opts = { force = true, turn = "first",
                 extra_compare = { { key = task.key, target = "create", op = "==", value = 33 } } }
  local txn, rec, _, skippable = claim.claim_txn(n, run, opts, NOW, n.s, "n1:7077:1")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0", task.key .. " create == 33" },
              "queue task: no active/ compare, the task's own")
  local by = ops_of(txn.success)
  T.is(by.put[k.active], nil, "a task takes no active/")
  T.is(by.delete[task.key], nil, "its task stays until the run ends")
  T.is(rec.task, task.key, "the record names the task's key")
  T.is(rec.exclusive, nil, "and holds no active/")
  T.is(skippable, false, "a task is not skipped for concurrency")
end

---------------------------------------------------------------------------
-- 5. A manual trigger: its parameters over the job's, its trigger key
-- compared and deleted.
do
  local sp = spec { params = { region = "eu", size = "s" } }
  local n = node { nightly = job(sp) }
  local tkey = keys.key(P, "trigger", "nightly", "x1")
  local run = { job = "nightly", id = "2026-11-29T02:00:00.123Z", fire = FIRE, spec = sp, manual = true,
                params = { size = "xl", [1] = "ignored", n = 5 }, attempt = 1 }
  local k = keys.run(P, "nightly", run.id)
  local txn, rec = claim.claim_txn(n, run, {
    extra_compare = { { key = tkey, target = "create", op = ">", value = 0 } },
    extra_success = { { delete = { key = tkey } } } }, NOW, n.s, "n1:7077:1")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0", tkey .. " create > 0" },
              "manual: compares that its trigger is still there")
  T.is_deeply(ops_of(txn.success).delete, { [tkey] = true }, "and deletes it")
  T.is(rec.manual, true, "the record says manual")
  T.is_deeply(rec.params, { region = "eu", size = "xl" }, "the job's parameters, overridden by the string ones given")
end

---------------------------------------------------------------------------
-- 6. Concurrency: forbid and replace take active/ (a next attempt keeps
-- it only if the run held it); allow and a forced run do not.
do
  local id = "2026-11-29T02:00:00Z"
  local k = keys.run(P, "c", id)
  local what_is_there = { { get = { key = k.active, count_only = true } }, { get = { key = k.run, count_only = true } } }
  for _, mode in ipairs { "forbid", "replace" } do
    local sp = spec { concurrency = mode }
    local n = node { c = job(sp) }
    local txn, rec, _, skippable = claim.claim_txn(n, { job = "c", id = id, fire = FIRE, spec = sp, attempt = 1 },
                                                   {}, NOW, n.s, "t")
    T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0", k.active .. " create == 0" },
                mode .. ": compares that active/ is free")
    T.is(put_at(ops_of(txn.success), k.active), id, mode .. ": takes active/ with the run's id")
    T.is(rec.exclusive, true, mode .. ": the record holds it")
    T.is_deeply(txn.failure, what_is_there, mode .. ": the failure branch reads active/ and the run key")
    T.ok(skippable, mode .. ": a failed first attempt may be skipped")
    -- its next attempt, the run holding active/
    local prev = { rec = { attempt = 1, exclusive = true }, mod = 50, pending = 51 }
    local ntxn, nrec, _, nskip = claim.claim_txn(n, { job = "c", id = id, fire = FIRE, spec = sp, attempt = 2 },
                                                 { prev = prev }, NOW, n.s, "t")
    T.is_deeply(compares(ntxn), sorted { ALIVE, k.run .. " mod == 50", k.pending .. " mod == 51",
                                         k.marker .. " create == 0", k.active .. " value == " .. id },
                mode .. ", next attempt: compares that active/ is still the run's")
    T.is(ops_of(ntxn.success).put[k.active], nil, mode .. ", next attempt: does not put it again")
    T.is(nrec.exclusive, true, mode .. ", next attempt: still holds it")
    T.is_deeply(ntxn.failure, {}, mode .. ", next attempt: no failure branch")
    T.is(nskip, false, mode .. ", next attempt: never skipped")
    -- a next attempt of a run that did not hold it (forced, or a task)
    prev.rec.exclusive = nil
    local ftxn, frec = claim.claim_txn(n, { job = "c", id = id, fire = FIRE, spec = sp, attempt = 2 },
                                       { prev = prev }, NOW, n.s, "t")
    T.is(#compares(ftxn), 4, mode .. ", next attempt of a run without active/: no active/ compare")
    T.is(frec.exclusive, nil, mode .. ", next attempt of a run without active/: does not take it")
    -- forced
    local xtxn, xrec = claim.claim_txn(n, { job = "c", id = id, fire = FIRE, spec = sp, attempt = 1 },
                                       { force = true }, NOW, n.s, "t")
    T.is_deeply(compares(xtxn), sorted { ALIVE, k.run .. " create == 0" }, mode .. ", forced: no active/ compare")
    T.is(ops_of(xtxn.success).put[k.active], nil, mode .. ", forced: takes no active/")
    T.is(xrec.exclusive, nil, mode .. ", forced: the record does not hold it")
  end
  local sp = spec { concurrency = "allow" }
  local n = node { c = job(sp) }
  local txn, rec, _, skippable = claim.claim_txn(n, { job = "c", id = id, fire = FIRE, spec = sp, attempt = 1 },
                                                 {}, NOW, n.s, "t")
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0" }, "allow: no active/ compare")
  T.is(ops_of(txn.success).put[k.active], nil, "allow: takes no active/")
  T.is(rec.exclusive, nil, "allow: the record does not hold it")
  T.is(skippable, false, "allow: never skipped")
end

---------------------------------------------------------------------------
-- 7. Skips: attempt 0 recorded skipped, only while nobody has the run.
do
  local sp = spec { concurrency = "forbid", params = { region = "eu" } }
  local on = { skipped = { "c" } }
  local n = node { c = job(sp), watcher = job(spec { on = on }) }
  local id = "2026-11-29T02:00:00Z"
  local k = keys.run(P, "c", id)
  local tkey = keys.key(P, "trigger", "c", "x1")
  local run = { job = "c", id = id, fire = FIRE, spec = sp }
  local txn, reg = claim.concurrency_skip_txn(n, run, n.s, NOW + 1, {
    extra_compare = { { key = tkey, target = "create", op = ">", value = 0 } },
    skip_ops = { { delete = { key = tkey } } } })
  T.is_deeply(compares(txn), sorted { ALIVE, k.run .. " create == 0", k.active .. " create > 0", tkey .. " create > 0" },
              "concurrency skip: the session, nobody has the run, active/ is held, the trigger's own")
  local by = ops_of(txn.success)
  local want = record.skipped(run, "n1", NOW + 1, "concurrency forbid: a previous run is still running",
                              { code_revision = 12, params = { region = "eu" } })
  T.is_deeply(decoded(by, k.run), json.decode(record.encode(want)),
              "the record: baton.record's skipped (attempt 0, the reason, the run's parameters)")
  T.is(by.put[k.marker], nil, "no marker")
  T.is(by.put[k.active], nil, "no active/")
  T.is(by.put[k.inflight], nil, "no inflight/")
  T.is_deeply(by.delete, { [tkey] = true }, "the trigger's skip_ops")
  local events = {}
  for key in pairs(by.put) do
    if keys.kind(P, key) == "pending" then events[#events + 1] = keys.split(P, "pending", key) end
  end
  T.is_deeply(events, { "watcher" }, "an event for the job whose on.skipped names it")
  T.is_deeply(txn.success[2], run_end.last_op(P, "c", id, want, nil), "last/<job>")
  T.is_deeply(reg, { op = txn.success[2], key = keys.key(P, "last", "c"), order = id }, "and its register write")
  T.is_deeply(txn.failure, { { get = { key = k.active, count_only = true } }, { get = { key = k.run, count_only = true } } },
              "its failure branch reads active/ and the run key")
  -- a skip of an instant past its starting_deadline: no active/ compare
  local dtxn = claim.skip_txn(n, run, n.s, "late", NOW)
  T.is_deeply(compares(dtxn), sorted { ALIVE, k.run .. " create == 0" }, "deadline skip: the session, nobody has the run")
  T.is(decoded(ops_of(dtxn.success), k.run).error, "late", "its reason")
end

---------------------------------------------------------------------------
-- 8. How the answer is read (claim.claim, through the batcher).
local ID = "2026-11-29T02:00:00Z"
local K = keys.run(P, "c", ID)
local function claim_run(mode, answers, opts, jo)
  local sp = spec { concurrency = mode }
  local n = node({ c = job(sp, jo) }, answers)
  local run = { job = "c", id = ID, fire = FIRE, spec = sp }
  local fence, rec = claim.claim(n, run, opts or {})
  return n, run, fence, rec
end

do -- claimed
  local n, run, fence, rec = claim_run("allow", { { succeeded = true, revision = 77, responses = { { kvs = {} } } } },
                                       { turn = "first" })
  T.is(fence, 77, "claimed: the fence is the transaction's revision")
  T.is(rec.fence, 77, "the record is fenced")
  T.is(rec.mod_revision, 77, "at its mod revision")
  T.is(run.attempt, 1, "the run's attempt is set")
  T.is(run.session, n.s, "the run is on the node's session")
  T.is(run.cancel, nil, "no cancel asked")
  T.is(n.jobs.c.last_known, true, "last/ known to be there from now on")
  T.is(#n.sent, 1, "one transaction sent")
  T.is(n.sent[1].txn.success[1].get.key, K.cancel, "the claim, as claim_txn builds it")
  T.is(n.claims, 1, "claims counted")
  T.is(decoded(ops_of(n.sent[1].txn.success), K.marker).token, "n1:7077:1", "the token: node, lease, count")
  T.is_deeply(n.posted, { "c/" .. ID }, "a run nodes go for in turn goes on the claims board")
  T.is(#n.lost, 0, "no claim lost")
end

do -- claimed, with a cancel asked between its attempts
  local value = cancel.cancel_value("killed by alice@host", "alice@host")
  local _, run, fence = claim_run("allow", { { succeeded = true, revision = 78,
                                              responses = { { kvs = { { key = K.cancel, value = value } } } } } })
  T.is(fence, 78, "claimed with a cancel/ key there")
  T.is_deeply(run.cancel, { reason = "killed by alice@host", by = "alice@host" }, "the run gets the request")
end

do -- lost to another node
  local n, _, fence = claim_run("allow", { { succeeded = false, responses = {} } }, { turn = "later" })
  T.is(fence, nil, "lost: no fence")
  T.is_deeply(n.lost, { "c" }, "counted as a claim lost")
  T.is(#n.sent, 1, "nothing else sent")
  T.is(#n.posted, 0, "nothing posted")
end

do -- forbid, held by another run, claimed by nobody: skipped
  local n, _, fence = claim_run("forbid", { { succeeded = false, responses = { { count = 1 }, { count = 0 } } },
                                            { succeeded = true } }, { turn = "first" })
  T.is(fence, nil, "skipped: no fence")
  T.is(#n.sent, 2, "the claim, then the skip")
  local skip = n.sent[2].txn
  T.ok(table.concat(compares(skip), "\n"):find(K.active .. " create > 0", 1, true), "the skip compares active/ held")
  T.is(decoded(ops_of(skip.success), K.run).state, "skipped", "and records the run skipped")
  T.is_deeply(n.skips, { "c:concurrency" }, "counted as a concurrency skip")
  T.is_deeply(n.posted, { "c/" .. ID }, "posted on the board")
  T.is(#n.lost, 0, "not a claim lost")
end

do -- forbid, the instant claimed by another node: no skip
  local n, _, fence = claim_run("forbid", { { succeeded = false, responses = { { count = 1 }, { count = 1 } } } })
  T.is(fence, nil, "claimed elsewhere: no fence")
  T.is(#n.sent, 1, "no skip sent")
  T.is_deeply(n.lost, { "c" }, "a claim lost")
end

do -- forbid, the run on ended before the skip: claimed again, once
  local n, _, fence = claim_run("forbid", { { succeeded = false, responses = { { count = 1 }, { count = 0 } } },
                                            { succeeded = false, responses = { { count = 0 }, { count = 0 } } },
                                            { succeeded = true, revision = 90, responses = { { kvs = {} } } } })
  T.is(fence, 90, "active/ freed meanwhile: claimed on the second try")
  T.is(#n.sent, 3, "claim, skip, claim")
  T.is_deeply((n.sent[3] or {}).txn, n.sent[1].txn, "the same claim sent again")
  T.is(#n.skips, 0, "not skipped")
end

do -- the session gone: before the claim, and before its answer came
  local n = node({ c = job(spec()) }, {})
  n.stopping = true
  T.is(claim.claim(n, { job = "c", id = ID, fire = FIRE, spec = spec() }, {}), nil, "a stopping node claims nothing")
  T.is(#n.sent, 0, "and sends nothing")
  n.stopping, n.fenced = false, true
  T.is(claim.claim(n, { job = "c", id = ID, fire = FIRE, spec = spec() }, {}), nil, "a fenced node claims nothing")
  T.is(#n.sent, 0, "and sends nothing")
  local gone = function(x)
    x.s.lost = true
    return { succeeded = true, revision = 91, responses = { { kvs = {} } } }
  end
  local m, run, fence = claim_run("allow", { gone }, { turn = "first" })
  T.is(fence, nil, "applied after the session was lost: not run here")
  T.is(run.session, nil, "the run is on no session")
  T.is(#m.posted, 0, "not posted")
  T.is(#m.lost, 0, "not counted as lost to another node")
end

do -- the answer lost: the marker says whether the claim was applied
  local sp = spec()
  local n = node({ c = job(sp) }, { "lost" })
  n.e = { get = function(_, key)
    T.is(key, K.marker, "the lost answer: the marker is read")
    return { kvs = { { key = key, create_revision = 95,
                       value = json.encode { node = "n1", attempt = 1, token = "n1:7077:1" } } } }
  end }
  local fence = claim.claim(n, { job = "c", id = ID, fire = FIRE, spec = sp }, {})
  T.is(fence, 95, "the marker holds this claim's token: claimed, fenced at its create revision")
  T.is(#n.sent, 1, "not sent again")
end

T.done()
