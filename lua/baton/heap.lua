-- A binary min-heap in a Lua array, ordered by less(a, b): the node's
-- timetable (node/timetable.lua), the leader's misfire queue
-- (node/misfires.lua) and each queue's waiting tasks (node/queue.lua).
--
--   heap.push(h, x, less)        heap.pop(h, less) --> the least, removed
local M = {}

function M.push(h, x, less)
  local i = #h + 1
  h[i] = x
  while i > 1 do
    local p = (i - i % 2) / 2
    if not less(h[i], h[p]) then break end
    h[p], h[i] = h[i], h[p]
    i = p
  end
end

function M.pop(h, less)
  local top, n = h[1], #h
  -- (Two statements: the order of a multiple assignment's stores is not
  -- defined, and with n == 1 the wrong order would leave the top in place.)
  h[1] = h[n]
  h[n] = nil
  n = n - 1
  local i = 1
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if l <= n and less(h[l], h[m]) then m = l end
    if r <= n and less(h[r], h[m]) then m = r end
    if m == i then break end
    h[m], h[i] = h[i], h[m]
    i = m
  end
  return top
end

return M
