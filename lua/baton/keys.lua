-- Every etcd key baton uses, built and parsed here and nowhere else. P is
-- the prefix (--prefix, BATON_PREFIX; default "/baton/"), which always ends
-- in "/" (M.prefix()). The layout, as docs/architecture.md ("Key
-- layout") describes it:
--
--   P jobs/<name>                  a job's Lua source (operators)
--   P policies/<name>              a scheduling policy's Lua source
--   P paused/<name>                present while the job is paused
--   P trigger/<job>/<id>           a manual-run request, consumed by a node
--   P queue/<queue>/<id>           a task of a queue job
--   P nodes/<name>                 a node's info, on its session lease
--   P election/<lease hex>         the cluster election (etcd's recipe)
--   P status/<job>/<node>          what a node made of a job's version
--   P policy-status/<policy>/<node>  the same for a stored policy
--   P versions/<job>/<revision>    a job's version log (versions.lua)
--   P policy-versions/<policy>/<revision>  a policy's version log
--   P runs/<job>/<id>              the run record
--   P running/<job>/<id>           the run is in progress on a node (the
--                                  marker, on its lease; its create
--                                  revision is the fence)
--   P inflight/<job>/<id>          the run is not finished
--   P pending/<job>/<id>           the run waits for its next attempt
--   P active/<job>[/<shard>]       which run of a forbid/replace job is on
--   P cancel/<job>/<id>            a request to stop that run for good
--   P output/<job>/<id>/@<attempt>/<chunk>  what an attempt said
--   P claims/<node>                the node's claims board
--   P clock/ping/<node>, P clock/pong/<node>  clock offset exchanges
--   P config/notify                the notifiers' channels
--   P notify/outbox/<job>/<id>     a message a notifier could not send yet
--   P last/<job>                   the job's newest run
--
-- <id> is a run's id (runs.lua): an instant (M.instant), an instant with milliseconds,
-- <instant>/<shard>, a queue task's id or an event's id; it may hold "/".
--
-- Building (kind is the first segment, one of M.KINDS; misuse raises):
--   keys.key(P, kind, ...)          P kind/a/b    (the parts joined by "/")
--   keys.dir(P, kind, ...)          P kind/a/b/   the range below it, for
--                                                 prefix reads, watches and
--                                                 deletes
--   keys.run(P, job, id)            the keys of one run, by their role:
--                                   {run, marker, inflight, pending,
--                                   active, cancel}
--   keys.output(P, job, id[, attempt])  P output/<job>/<id>/@ (every
--                                   attempt's chunks), or
--                                   P output/<job>/<id>/@<attempt>/
-- Parsing (nil when key is not of that kind):
--   keys.rest(P, kind, key)         what follows P kind/
--   keys.split(P, kind, key)        P kind/<a>/<b>: a (no "/") and b (not
--                                   empty, may hold "/"): job and id
--   keys.kind(P, key)               the kind of key and what follows it
--   keys.under(dir, key)            what follows dir (a keys.dir) in key
local baton = require "baton"

local type, tostring, select, error = type, tostring, select, error
local find, sub, concat = string.find, string.sub, table.concat
local floor = math.floor

local M = {}

-- The configured prefix (--prefix, BATON_PREFIX, default "/baton/"), with
-- a trailing "/" added when missing.
function M.prefix()
  local p = (baton.config and baton.config.prefix) or "/baton/"
  if p:sub(-1) ~= "/" then p = p .. "/" end
  return p
end

-- An instant as a run key names it: 2026-11-29T02:00:00Z (UTC, whole
-- seconds).
function M.instant(t)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", floor(t))
end

M.KINDS = {}
for _, k in ipairs { "jobs", "policies", "paused", "trigger", "queue", "nodes", "election", "status",
                     "policy-status", "versions", "policy-versions", "runs", "running", "inflight", "pending",
                     "active", "cancel", "output", "claims", "clock", "config", "notify", "last" } do
  M.KINDS[k] = true
end

local function check_kind(kind, level)
  if not M.KINDS[kind] then
    error("baton.keys: unknown kind of key " .. tostring(kind), level + 1)
  end
end

-- (The parts end at the first nil, as cli/util.lua's key builder had it.)
local function build(P, kind, ...)
  if type(P) ~= "string" then error("baton.keys: the prefix must be a string", 3) end
  check_kind(kind, 3)
  local parts = { P .. kind }
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if v == nil then break end
    parts[i + 1] = tostring(v)
  end
  return concat(parts, "/")
end

function M.key(P, kind, ...)
  return build(P, kind, ...)
end

function M.dir(P, kind, ...)
  return build(P, kind, ...) .. "/"
end

function M.run(P, job, id)
  -- A shard run's id is <instant>/<shard>: concurrency applies per shard.
  local shard = id:match("/(%d+)$")
  local tail = job .. "/" .. id
  return {
    run = P .. "runs/" .. tail,
    marker = P .. "running/" .. tail,
    inflight = P .. "inflight/" .. tail,
    pending = P .. "pending/" .. tail,
    active = P .. "active/" .. job .. (shard and ("/" .. shard) or ""),
    cancel = P .. "cancel/" .. tail,
  }
end

function M.output(P, job, id, attempt)
  local run = P .. "output/" .. job .. "/" .. id .. "/@"
  if attempt == nil then return run end
  return run .. tostring(attempt) .. "/"
end

function M.rest(P, kind, key)
  check_kind(kind, 2)
  local head = #P + #kind + 1
  if sub(key, 1, #P) ~= P or sub(key, #P + 1, head) ~= kind .. "/" then return nil end
  return sub(key, head + 1)
end

function M.split(P, kind, key)
  local rest = M.rest(P, kind, key)
  if not rest then return nil end
  return rest:match("^([^/]+)/(.+)$")
end

function M.under(dir, key)
  if sub(key, 1, #dir) ~= dir then return nil end
  return sub(key, #dir + 1)
end

function M.kind(P, key)
  if type(key) ~= "string" or sub(key, 1, #P) ~= P then return nil end
  local slash = find(key, "/", #P + 1, true)
  if not slash then return nil end
  local kind = sub(key, #P + 1, slash - 1)
  if not M.KINDS[kind] then return nil end
  return kind, sub(key, slash + 1)
end

return M
