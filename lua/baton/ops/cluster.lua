-- The cluster as operators see it: the live nodes (`baton nodes`), the
-- leader (`baton leader`), and whether any live node has a job's labels
-- (job put warns, job run refuses).
local baton = require "baton"
local keys = require "baton.keys"
local util = require "baton.util"
local policies_util = require "baton.policies.util"
local common = require "baton.ops.common"

local json = baton.json
local format, concat = string.format, table.concat
local type, ipairs, tostring = type, ipairs, tostring

local M = {}

local function etcd() return baton.etcd end

local fail = common.fail
local decode_object, field = util.decode_object, util.field

-- The live nodes (the JSON each keeps at P nodes/<name>), sorted by name:
-- list of {name=, labels=, ...}, or nil, err. A record on no lease is not
-- a node's (a node keeps it on its session's lease, and etcd deletes it
-- with the lease): a forged or stray key, left out (docs/security.md).
function M.live_nodes()
  local pfx = keys.dir(util.prefix(), "nodes")
  local r, err = baton.etcd:get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    if kv.lease then
      local v = decode_object(kv.value) or {}
      v.name = field(v, "name") or keys.under(pfx, kv.key)
      if type(field(v, "labels")) ~= "table" then v.labels = {} end
      list[#list + 1] = v
    end
  end
  return list
end

-- Labels as k=v,... sorted ("-" for none).
local function labels_text(labels)
  local l = {}
  for _, k in ipairs(util.sorted_keys(labels or {})) do l[#l + 1] = k .. "=" .. tostring(labels[k]) end
  return #l > 0 and concat(l, ",") or "-"
end

-- Why no live node can run a job with these labels, or nil when one can
-- (nodes: live_nodes()). The nodes decide by labels the same way
-- (baton.policies.util.eligible).
function M.no_eligible_node(labels, nodes)
  local eligible = policies_util.eligible
  for _, n in ipairs(nodes) do
    if eligible({ labels = labels }, n) then return nil end
  end
  if #nodes == 0 then
    return format("no node is live under %s (is a node running, with this --prefix?)", keys.dir(util.prefix(), "nodes"))
  end
  local seen = {}
  for i, n in ipairs(nodes) do
    if i > 5 then seen[#seen + 1] = format("and %d more", #nodes - 5); break end
    seen[#seen + 1] = format("%s (%s)", n.name, labels_text(n.labels))
  end
  return format("no live node has the labels %s (live: %s)", labels_text(labels), concat(seen, ", "))
end

-- nodes() --> the live nodes (`baton nodes --json`): the JSON each keeps
-- at P nodes/<name> ({name, labels, version, running, started, clock,
-- max_skew, ...}) with lease, by name. A record on no lease is no node's
-- (M.live_nodes): left out.
function M.nodes()
  local pfx = keys.dir(util.prefix(), "nodes")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    if kv.lease then
      local v = decode_object(kv.value) or {}
      v.name = field(v, "name") or keys.under(pfx, kv.key)
      v.lease = kv.lease
      list[#list + 1] = v
    end
  end
  return json.array(list)
end

-- leader() --> {value (the node's name), key, lease, create_revision}:
-- the oldest key under P election/ (etcd's election recipe); ENOENT when
-- there is none.
function M.leader()
  local pfx = keys.dir(util.prefix(), "election")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "create", order = "asc", limit = 1 })
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv then return fail("no leader (nothing under " .. pfx .. ")", "ENOENT") end
  return { value = kv.value, key = kv.key, lease = kv.lease, create_revision = kv.create_revision }
end

return M
