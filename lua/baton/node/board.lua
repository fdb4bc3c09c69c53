-- The claims board (P claims/<node>): which runs each node lately claimed,
-- or recorded skipped, of those that every eligible node goes for in turn
-- (scheduled instants and shards, queue tasks), so that the nodes whose
-- turn comes later know without asking etcd.
--
-- Every eligible node goes for every instant of a job, each after its
-- policy's claim_delay (node/triggers.lua, instant_due; queue tasks likewise,
-- node/queue.lua). The node ranked first claims at once; each of the
-- others, when its turn comes, used to read the run key first (claim.lua,
-- taken): one etcd read per instant for every node but one, so a cluster's
-- cost per instant grew with its size.
--
-- Instead, a node that claimed (or recorded skipped) such runs posts their
-- run ids, at most every EVERY seconds and only while another node is
-- registered: one put of P claims/<node>, on its session's lease, that
-- goes with its other writes (node/batch.lua). Every node watches
-- P claims/ and remembers the runs the others posted for KEEP to 2*KEEP
-- seconds. When a node's turn comes for a run another node posted, it
-- goes no further (counted in baton_claims_lost_total, as a read that found
-- it taken). Otherwise it reads and claims as before.
--
-- Why this keeps every guarantee: a run id is posted only after the
-- transaction that created its run key succeeded, and run keys are not
-- deleted while a turn can still come; so what the board says is what the
-- read would have answered. It is only ever a reason not to ask: claims
-- stay the transactions that fail when the run key exists, and a post that
-- is late, lost, compacted away or never made (a node frozen right after
-- its claim, a watch that fell behind, a node that joined later) leaves
-- the later nodes to read and claim as before, so a frozen node's runs are
-- still taken over after its grace.
local baton = require "baton"
local keys = require "baton.keys"
local runs = require "baton.node.runs"
local json = baton.json

local M = {}

M.EVERY = 0.1     -- seconds between two posts of one node (while it has runs to post)
M.KEEP = 15       -- a posted run is remembered KEEP to 2 * KEEP seconds
M.MAX_POST = 2000 -- run ids per post (a longer list goes in several)

local B = {}
B.__index = B

function M.new(self)
  return setmetatable({ node = self, notes = {}, n = 0, cond = baton._cond(),
                        cur = {}, old = {}, turned = baton.monotime() }, B)
end

-- Whether another node is registered (one that may read the posts).
local function others(self)
  for name in pairs(self.nodes) do
    if name ~= self.name then return true end
  end
  return false
end

-- This node's claim (or skip record) of run id of job succeeded: posted
-- within EVERY seconds. (Not an id with a NUL byte, from a raw etcd key:
-- a post is JSON text, where it would be changed into another id; unposted,
-- the later nodes read, as they do when a post is lost.)
function B:note(job, id)
  if not others(self.node) or id:find("\0", 1, true) then return end
  local list = self.notes[job]
  if not list then list = {}; self.notes[job] = list end
  list[#list + 1] = id
  self.n = self.n + 1
  if self.n == 1 then self.cond:signal() end
end

-- Whether another node posted run id of job.
function B:has(job, id)
  local k = job .. "/" .. id
  return self.cur[k] or self.old[k] or false
end

-- Remembers the runs of one post (its value: {"runs": {job: [id, ...]}});
-- anything else in it is ignored.
function B:learn(value)
  local now = baton.monotime()
  if now - self.turned > M.KEEP then
    self.old, self.cur, self.turned = self.cur, {}, now
  end
  local ok, post = pcall(json.decode, value)
  if not ok or type(post) ~= "table" or type(post.runs) ~= "table" then return end
  local cur = self.cur
  for job, ids in pairs(post.runs) do
    if type(job) == "string" and type(ids) == "table" then
      for _, id in ipairs(ids) do
        if type(id) == "string" then cur[job .. "/" .. id] = true end
      end
    end
  end
end

-- Takes up to MAX_POST noted runs: the value of one post.
function B:take()
  local runs_, n = {}, 0
  for job, list in pairs(self.notes) do
    if n == M.MAX_POST then break end
    if n + #list <= M.MAX_POST then
      runs_[job], n = list, n + #list
      self.notes[job] = nil
    else
      local part, rest, room = {}, {}, M.MAX_POST - n
      for i, id in ipairs(list) do
        if i <= room then part[i] = id else rest[i - room] = id end
      end
      self.notes[job] = rest
      runs_[job], n = part, M.MAX_POST
      break
    end
  end
  self.n = self.n - n
  return json.encode({ runs = runs_ }, { nul = "replace" }) -- (B:note: none holds a NUL)
end

-- Posts what was noted, every EVERY seconds at most, while the node runs.
local function post_loop(self)
  local node = self.node
  local key = keys.key(node.P, "claims", node.name)
  while not node.stopping do
    if self.n == 0 then self.cond:wait() end
    baton.sleep(M.EVERY)
    if self.n > 0 and not node.stopping then
      local value = self:take()
      local s = runs.live(node)
      -- (without a live session the runs go unposted: later nodes read)
      if s then
        node.batch:txn({ success = { { put = { key = key, value = value, lease = s.lease } } } },
                       M.EVERY / 2)
      end
    end
  end
end

-- Follows the other nodes' posts while the node runs (from now on: older
-- ones are for turns that have passed).
local function watch_loop(self)
  local node = self.node
  local pfx, own = keys.dir(node.P, "claims"), keys.key(node.P, "claims", node.name)
  while not node.stopping do
    local w = node.e:watch(pfx, { prefix = true, no_delete = true })
    if not w then
      baton.sleep(1)
    else
      while not node.stopping do
        local evs = w:next()
        if not evs then break end
        for _, ev in ipairs(evs) do
          if ev.kv.key ~= own then self:learn(ev.kv.value) end
        end
      end
      w:cancel()
      if not node.stopping then baton.sleep(0.2) end
    end
  end
end

-- The board's tasks, given the node (node/init.lua starts them): posting
-- this node's claims, and learning the others'.
function M.post(node) return post_loop(node.board) end
function M.watch(node) return watch_loop(node.board) end

return M
