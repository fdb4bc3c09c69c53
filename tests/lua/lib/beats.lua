-- Beats for tests of run containment: a shell script that a job runs as
-- its child process (`sh B.script TAG B.file N`), appending "TAG UPTIME"
-- to B.file every `gap` seconds, N times (/proc/uptime, which libfaketime
-- does not fake), and readers of what it wrote: when each tag's copy
-- beat first and last.
local F = require "files"

local M = {}
local B = {}
B.__index = B

function M.new(dir, gap)
  local b = setmetatable({ script = dir .. "/beat.sh", file = dir .. "/beats" }, B)
  F.write(b.script, ([[
# beat.sh TAG FILE N: "TAG UPTIME" to FILE every %g s, N times
i=0
while [ "$i" -lt "$3" ]; do
  read up _ < /proc/uptime
  echo "$1 $up" >> "$2"
  i=$((i+1))
  sleep %g
done
]]):format(gap or 0.1, gap or 0.1))
  return b
end

-- {tag = {tag =, first =, last =, n =}} of the beats so far.
function B:spans()
  local span = {}
  for tag, up in (F.read(self.file) or ""):gmatch("(%S+) ([%d.]+)\n") do
    local s = span[tag] or { tag = tag, first = math.huge, last = 0, n = 0 }
    up = tonumber(up)
    s.first, s.last, s.n = math.min(s.first, up), math.max(s.last, up), s.n + 1
    span[tag] = s
  end
  return span
end

-- The spans whose tag starts with prefix (all without one), by first beat.
function B:list(prefix)
  local list = {}
  for tag, s in pairs(self:spans()) do
    if not prefix or tag:find(prefix, 1, true) == 1 then list[#list + 1] = s end
  end
  table.sort(list, function(x, y) return x.first < y.first end)
  return list
end

-- Lines written so far.
function B:count()
  return select(2, (F.read(self.file) or ""):gsub("\n", ""))
end

-- The machine's uptime now, the clock the beats are on.
function M.now()
  return tonumber(F.read("/proc/uptime"):match("^[%d.]+"))
end

return M
