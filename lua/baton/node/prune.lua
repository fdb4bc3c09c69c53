-- History pruning, done by the leader (node/leader.lua, every minute): the
-- newest `history` (--history) run records per job are kept; an older
-- record goes, with its kept output (output/<job>/<id>/@..., output.lua),
-- unless its run is still in flight.
local keys = require "baton.keys"

local M = {}

-- History pruning does not read every job's records every round: a store
-- of 100,000 jobs would cost 100,000 requests a minute. A round counts the
-- records (count_only, PRUNE_TXN jobs per transaction) of the jobs that may
-- have new ones (self.prune.dirty: jobs with scheduled instants since the
-- last round, from the misfire check; jobs run by hand, from node/store.lua's
-- trigger events; every queue and event job), plus a slice of all jobs in
-- turn, so that every job is counted at least once every PRUNE_SWEEP
-- rounds whatever made its records; only the jobs over `history` are
-- listed and pruned.
M.PRUNE_SWEEP, M.PRUNE_TXN = 30, 128

-- Deletes job name's oldest records (count of them now) beyond history,
-- each with its kept output, in transactions of 100.
local function prune_job(self, name, count)
  local P, e, keep = self.P, self.e, self.history
  local dir = keys.dir(P, "runs", name)
  local r = e:get(dir, { prefix = true, keys_only = true, sort = "key", limit = count - keep })
  if not r then return end
  local n = math.min(#r.kvs, r.count - keep)
  local ops = {}
  for i = 1, n do
    local key = r.kvs[i].key
    -- (the id as it is, "" for a stray runs/<job>/ key: it counts towards
    -- the history and goes like any record)
    local id = keys.under(dir, key)
    ops[#ops + 1] = { txn = {
      compare = { { key = keys.key(P, "inflight", name, id), target = "create", op = "==", value = 0 } },
      success = { { delete = { key = key } },
                  { delete = { key = keys.output(P, name, id), prefix = true } } } } }
    if #ops == 100 or i == n then e:txn { success = ops }; ops = {} end
  end
end

-- One round (see above): counts the records of the jobs it wants, prunes
-- those over history.
function M.round(self)
  local P, e = self.P, self.e
  local want = self.prune.dirty
  self.prune.dirty = {}
  for name in pairs(self.event_jobs or {}) do want[name] = true end
  for name, j in pairs(self.jobs) do
    if j.spec.queue then want[name] = true end
  end
  -- the sweep: a sorted list of all jobs, taken in PRUNE_SWEEP slices
  local sw = self.prune.sweep
  if not sw or sw.next > #sw.names then
    local names = {}
    for name in pairs(self.jobs) do names[#names + 1] = name end
    table.sort(names)
    sw = { names = names, next = 1, step = math.ceil(#names / M.PRUNE_SWEEP) }
    self.prune.sweep = sw
  end
  for i = sw.next, math.min(#sw.names, sw.next + sw.step - 1) do want[sw.names[i]] = true end
  sw.next = sw.next + math.max(sw.step, 1)
  local names = {}
  for name in pairs(want) do if self.jobs[name] then names[#names + 1] = name end end
  for i = 1, #names, M.PRUNE_TXN do
    local ops = {}
    for k = i, math.min(i + M.PRUNE_TXN - 1, #names) do
      ops[#ops + 1] = { get = { key = keys.dir(P, "runs", names[k]), prefix = true, count_only = true } }
    end
    local r = e:txn { success = ops }
    for k = i, math.min(i + M.PRUNE_TXN - 1, #names) do
      local name = names[k]
      if not r then
        self.prune.dirty[name] = true -- counted again next round
      elseif r.responses[k - i + 1].count > self.history then
        prune_job(self, name, r.responses[k - i + 1].count)
      end
    end
  end
end

-- Job name may have new records (instants since the last misfire check, a
-- run by hand): the next round counts them.
function M.note(self, name)
  self.prune.dirty[name] = true
end

return M
