-- Helpers shared by the built-in scheduling policies, and free for your own
-- (`local util = require "baton.policies.util"` works in a stored policy):
-- the hash, eligibility by labels, rendezvous ranking, balanced shard
-- assignment, and the sample cluster the self-tests and `baton check` use.
-- Everything here is pure and synchronous and takes plain data.
local M = {}

local bxor, rshift = bit.bxor, bit.rshift
local floor = math.floor
local sort, concat, format = table.sort, table.concat, string.format
local pairs, ipairs, tostring, type = pairs, ipairs, tostring, type
local U32 = 4294967296

-- a * b modulo 2^32 for unsigned 32-bit numbers, exact in doubles.
local function mul32(a, b)
  local lo, hi = a % 65536, (a - a % 65536) / 65536
  return (lo * b + ((hi * b) % 65536) * 65536) % U32
end

-- murmur3's 32-bit finaliser: every input bit reaches every output bit.
local function fmix(h)
  h = bxor(h, rshift(h, 16)) % U32
  h = mul32(h, 0x85ebca6b)
  h = bxor(h, rshift(h, 13)) % U32
  h = mul32(h, 0xc2b2ae35)
  return bxor(h, rshift(h, 16)) % U32
end

-- FNV-1a over a string, then murmur3's finaliser so that keys differing in
-- one character spread over the whole range. A number below 2^32. (The
-- default policy's claim order depends on these exact values: keep them.)
function M.hash(s)
  local h = 2166136261
  for i = 1, #s do
    h = mul32(bxor(h, s:byte(i)) % U32, 16777619)
  end
  return fmix(h)
end
local hash = M.hash

-- The rendezvous score of a (key, node) pair from their two hashes: cheaper
-- than hashing the concatenated strings when one key meets many nodes.
function M.score(hkey, hnode)
  return fmix(bxor(hkey, mul32(hnode, 0x9e3779b1)) % U32)
end
local score = M.score

-- True if node has every label the job asks for.
function M.eligible(job, node)
  for k, v in pairs(job.labels or {}) do
    if not node.labels or node.labels[k] ~= v then return false end
  end
  return true
end
local eligible = M.eligible

local function by_name(a, b) return a.name < b.name end

-- The nodes of the list that may run job, sorted by name.
function M.eligible_nodes(job, nodes)
  local list = {}
  for _, n in ipairs(nodes) do
    if eligible(job, n) then list[#list + 1] = n end
  end
  sort(list, by_name)
  return list
end

-- The node of the list named name, or nil.
function M.find(nodes, name)
  for _, n in ipairs(nodes) do
    if n.name == name then return n end
  end
  return nil
end

-- The key an instant of a job is ranked by: "job@fire" (fire as given:
-- epoch seconds for an instant, a key string for a manual run or a task).
function M.instant_key(job, fire)
  return (job.name or "") .. "@" .. tostring(fire)
end

-- Rendezvous (highest random weight) ranking: the nodes sorted by
-- hash(key .. "/" .. name), highest first, ties by name. Every node that
-- sees the same list computes the same order, and removing a node only
-- removes it from the order: the others keep their relative places.
function M.rank(key, nodes)
  local h, list = {}, {}
  for i, n in ipairs(nodes) do
    list[i] = n
    h[n] = hash(key .. "/" .. n.name)
  end
  sort(list, function(a, b)
    if h[a] ~= h[b] then return h[a] > h[b] end
    return a.name < b.name
  end)
  return list
end

-- me's place (0 for the first) in the rendezvous order of key over nodes,
-- counting only the nodes for which keep(node) is true (all if keep is
-- nil); me itself is ranked even if it is missing from the list.
function M.rank_of(key, nodes, me, keep)
  local mine = hash(key .. "/" .. me.name)
  local rank = 0
  for _, n in ipairs(nodes) do
    if n.name ~= me.name and (not keep or keep(n)) then
      local h = hash(key .. "/" .. n.name)
      if h > mine or (h == mine and n.name < me.name) then rank = rank + 1 end
    end
  end
  return rank
end

-- Balanced rendezvous assignment of shards 1..shards to nodes (a list of
-- node tables, not empty): shard i goes to the highest-scoring node for
-- the key base.."#"..i that still has room, where the room of a node is
-- floor(shards/#nodes), plus one for the first shards % #nodes nodes that
-- take an extra shard. The counts differ by at most one, and as long as
-- the nodes do not change neither does the assignment. Returns
-- {[i] = name}, {[name] = count}.
function M.balanced(base, shards, nodes)
  local n = #nodes
  local hn, count = {}, {}
  for i, node in ipairs(nodes) do
    hn[i] = hash(node.name)
    count[i] = 0
  end
  local low = floor(shards / n)
  local extra = shards - low * n
  local out, by_name_count = {}, {}
  for s = 1, shards do
    local hk = hash(base .. "#" .. s)
    local best, best_score = nil, -1
    for i = 1, n do
      local c = count[i]
      if c < low or (c == low and extra > 0) then
        local sc = score(hk, hn[i])
        if sc > best_score or (sc == best_score and nodes[i].name < nodes[best].name) then
          best, best_score = i, sc
        end
      end
    end
    if count[best] == low then extra = extra - 1 end
    count[best] = count[best] + 1
    out[s] = nodes[best].name
  end
  for i, node in ipairs(nodes) do by_name_count[node.name] = count[i] end
  return out, by_name_count
end

-- The sequence number of an instant: successive instants of a schedule get
-- successive numbers, the same on every node without any talking. For a
-- schedule with a fixed period (every 2 s, hourly, daily at 02:00) that is
-- round(fire / period), the period being the gap to the next instant; a
-- fire that is not a number (a manual run's or a task's key) is hashed.
local crons = setmetatable({}, { __mode = "v" })
function M.instant_number(job, fire)
  if type(fire) ~= "number" then return hash(tostring(fire)) end
  local period
  if job.schedule then
    local id = job.schedule .. "|" .. (job.timezone or "UTC")
    local c = crons[id]
    if not c then
      local ok, made = pcall(baton.cron, job.schedule, job.timezone)
      if ok then c = made; crons[id] = c end
    end
    local nx = c and c:next(fire)
    if nx and nx > fire then period = nx - fire end
  end
  if not period then return floor(fire) end
  return floor(fire / period + 0.5)
end

-- Counts of the values of a {[i] = name} map, as "a 2, b 2, c 2".
function M.counts(map)
  local c, names = {}, {}
  for _, v in pairs(map) do
    if not c[v] then c[v] = 0; names[#names + 1] = v end
    c[v] = c[v] + 1
  end
  sort(names)
  local parts = {}
  for i, name in ipairs(names) do parts[i] = name .. " " .. c[name] end
  return concat(parts, ", "), c
end

-- A shard assignment as one line: "1:n1 2:n3 3:n2".
function M.show_assignment(map, shards)
  local parts = {}
  for i = 1, shards do parts[i] = i .. ":" .. tostring(map[i]) end
  return concat(parts, " ")
end

-- A delay for display: "0s", "0.5s", "never".
function M.show_delay(d)
  if d == nil then return "never" end
  return format("%gs", floor(d * 1000 + 0.5) / 1000)
end

-- The sample cluster the self-tests and `baton check` decide for: three
-- nodes in two zones with different loads, and a job with 6 shards and
-- retries. Fresh tables on every call: a test may change them.
function M.sample()
  local job = {
    name = "sample", labels = {}, policy = "sample", schedule = "*/10 * * * *",
    timezone = "UTC", timeout = 600, concurrency = "forbid", shards = 6,
    retry = { attempts = 3, backoff = 10, max_backoff = 300, jitter = 0.2 },
    on_node_loss = "rerun",
  }
  local nodes = {
    { name = "n1", labels = { zone = "a", region = "eu" }, running = 0, started = 1000 },
    { name = "n2", labels = { zone = "b", region = "eu" }, running = 2, started = 1100 },
    { name = "n3", labels = { zone = "a", region = "us" }, running = 1, started = 1200 },
  }
  -- three successive instants of the schedule (2026-01-01T00:00:00Z on)
  local instants = { 1767225600, 1767226200, 1767226800 }
  return { job = job, nodes = nodes, instants = instants }
end

return M
