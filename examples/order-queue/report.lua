-- examples/order-queue/report.lua [N]: what happened to the orders.
-- `baton eval report.lua N` (with the prefix the nodes use) lists every
-- order marked done under <prefix>orders/done/<id>: which node processed it,
-- at which attempt, and the done key's version: 1 means it was marked once,
-- more means it was processed more than once. Exits 0 only if orders 1..N
-- are all done, each exactly once.
local P = baton.config.prefix
if P:sub(-1) ~= "/" then P = P .. "/" end
local want = tonumber(arg[1] or "0") or 0
local r = assert(baton.etcd:get(P .. "orders/done/", { prefix = true }))
local by_id, per_node, twice = {}, {}, 0
for _, kv in ipairs(r.kvs) do
  local id = kv.key:sub(#P + #"orders/done/" + 1)
  local v = baton.json.decode(kv.value) or {}
  by_id[tonumber(id) or id] = { node = v.node, attempt = v.attempt, version = kv.version }
  per_node[v.node or "?"] = (per_node[v.node or "?"] or 0) + 1
  if kv.version > 1 then twice = twice + 1 end
end
local missing = {}
for id = 1, want do if not by_id[id] then missing[#missing + 1] = tostring(id) end end
local ids = {}
for id in pairs(by_id) do ids[#ids + 1] = id end
table.sort(ids, function(a, b)
  if type(a) == type(b) then return a < b end
  return type(a) == "number"
end)
print(("%-6s %-10s %-8s %s"):format("ORDER", "NODE", "ATTEMPT", "TIMES MARKED DONE"))
for _, id in ipairs(ids) do
  local o = by_id[id]
  print(("%-6s %-10s %-8s %d"):format(tostring(id), tostring(o.node), tostring(o.attempt), o.version))
end
local nodes = {}
for n, c in pairs(per_node) do nodes[#nodes + 1] = ("%s: %d"):format(n, c) end
table.sort(nodes)
print(("%d orders done (%s); %s; %s"):format(#ids, table.concat(nodes, ", "),
  twice == 0 and "each exactly once" or (twice .. " processed more than once"),
  #missing == 0 and "none missing" or ("missing: " .. table.concat(missing, " "))))
baton.exit((#missing == 0 and twice == 0) and 0 or 1)
