-- The default scheduling policy (design.md section 8).
--
-- Placement: every eligible node (its labels include the job's) ranks the
-- live eligible nodes by rendezvous hashing of (job, instant) and waits
-- rank x GRACE seconds before trying to claim. The first-ranked node claims
-- at once; if it is dead or slow, the next one tries GRACE seconds later,
-- and so on. The claim itself is an etcd transaction, so whatever the
-- delays, one node wins each instant.
local M = {}

M.GRACE = 0.5

local bxor, rshift = bit.bxor, bit.rshift
local U32 = 4294967296

-- a * b modulo 2^32 for unsigned 32-bit numbers, exact in doubles.
local function mul32(a, b)
  local lo, hi = a % 65536, (a - a % 65536) / 65536
  return (lo * b + ((hi * b) % 65536) * 65536) % U32
end

-- FNV-1a over a string, then murmur3's finaliser so that keys differing in
-- one character spread over the whole range. A number below 2^32.
local function hash(s)
  local h = 2166136261
  for i = 1, #s do
    h = mul32(bxor(h, s:byte(i)) % U32, 16777619)
  end
  h = bxor(h, rshift(h, 16)) % U32
  h = mul32(h, 0x85ebca6b)
  h = bxor(h, rshift(h, 13)) % U32
  h = mul32(h, 0xc2b2ae35)
  return bxor(h, rshift(h, 16)) % U32
end
M.hash = hash

local function eligible(job, node)
  for k, v in pairs(job.labels or {}) do
    if not node.labels or node.labels[k] ~= v then return false end
  end
  return true
end

function M.claim_delay(job, fire, nodes, me)
  if not eligible(job, me) then return nil end
  local key = (job.name or "") .. "@" .. tostring(fire)
  local mine = hash(key .. "/" .. me.name)
  local rank = 0
  for _, n in ipairs(nodes) do
    if n.name ~= me.name and eligible(job, n) then
      local h = hash(key .. "/" .. n.name)
      if h > mine or (h == mine and n.name < me.name) then rank = rank + 1 end
    end
  end
  return rank * M.GRACE
end

return M
