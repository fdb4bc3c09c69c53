-- The policy resource: listing stored and built-in scheduling policies,
-- showing one (with its self-test), checking a source as put does,
-- storing and removing.
local baton = require "baton"
local util = require "baton.util"
local policy = require "baton.policy"
local keys = require "baton.keys"
local sign = require "baton.sign"
local stored = require "baton.stored"
local versions = require "baton.versions"
local common = require "baton.ops.common"
local store = require "baton.ops.store"

local json = baton.json
local format = string.format
local type, ipairs, tostring = type, ipairs, tostring

local M = {}

local function etcd() return baton.etcd end

local fail, invalid, check_name, too_big = common.fail, common.invalid, common.check_name, common.too_big
local decode_object, field = util.decode_object, util.field

-- Status records of policies: {[name] = {{node=, revision=, error=}, ...}}
-- (of one policy when name is given).
local function policy_statuses(name, revision)
  local pfx = name and keys.dir(util.prefix(), "policy-status", name) or keys.dir(util.prefix(), "policy-status")
  local r, err, code = etcd():get(pfx, { prefix = true, revision = revision })
  if not r then return nil, err, code end
  local all = {}
  for _, kv in ipairs(r.kvs) do
    local pname, node = keys.split(util.prefix(), "policy-status", kv.key)
    if pname then
      local v = decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
      all[pname] = all[pname] or {}
      table.insert(all[pname], { node = node, revision = field(v, "revision"), error = field(v, "error") })
    end
  end
  return all
end

-- What is known of one policy: stored kv (or nil), its module (described
-- by the sandbox: stored.policy, which verifies it first where the
-- process trusts keys) or load error, the built-in of the same name, and
-- node statuses. selftest: run its self-test too (the sandbox's result is
-- the third value).
local function describe_policy(name, kv, st, selftest)
  local d = { name = name, builtin = policy.builtin(name) ~= nil, stored = kv ~= nil, broken = false }
  local mod, err, described
  if kv then
    d.revision, d.key = kv.mod_revision, kv.key
    mod, err = stored.policy(name, kv, { selftest = selftest })
    if not mod then d.broken, d.error = true, err else described = err end
  else
    mod = policy.builtin(name)
  end
  if mod then
    d.description = type(mod.description) == "string" and mod.description or nil
    d.functions = json.array(policy.functions(mod))
    d.selftest = mod.selftest ~= nil
  end
  d.status = json.array(st or {})
  for _, s in ipairs(d.status) do
    if s.error and (not kv or s.revision == nil or s.revision == kv.mod_revision) then
      d.broken = true
      d.error = d.error or (s.node .. ": " .. tostring(s.error))
    end
  end
  return d, mod, described
end

-- The self-test result of a policy module: from the sandbox's description
-- of a stored one, run here for a built-in (the node's own code). ok,
-- lines | false, reason.
local function selftest_of(mod, described)
  if described then
    local t = described.selftest or { ok = true, lines = {} }
    if t.ok then return true, t.lines or {} end
    return false, t.error
  end
  return policy.selftest(mod)
end

-- list_policies() --> every policy, stored and built in, by name (`baton
-- policy ls --json`): {name, builtin, stored, broken, error?, revision?,
-- key?, description?, functions [...], selftest (has one), status [...]}.
function M.list_policies()
  local pfx = keys.dir(util.prefix(), "policies")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err, code end
  local st, serr, scode = policy_statuses(nil, r.revision)
  if not st then return nil, serr, scode end
  local kvs, names = {}, {}
  for _, kv in ipairs(r.kvs) do
    local name = keys.under(pfx, kv.key)
    kvs[name] = kv
    names[#names + 1] = name
  end
  for _, name in ipairs(policy.BUILTINS) do
    if not kvs[name] then names[#names + 1] = name end
  end
  table.sort(names)
  local list = {}
  for _, name in ipairs(names) do list[#list + 1] = (describe_policy(name, kvs[name], st[name])) end
  return json.array(list)
end

-- show_policy(name) --> as in list_policies, with source (when stored) and
-- selftest = {passed, lines | error} when it has one (`baton policy show
-- --json`); ENOENT when it is neither stored nor built in.
function M.show_policy(name)
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  local key = keys.key(util.prefix(), "policies", name)
  local r, err, code = etcd():get(key)
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv and not policy.builtin(name) then
    return fail("ENOENT: no policy " .. name .. " at " .. key .. " and no built-in of that name", "ENOENT")
  end
  local st, serr, scode = policy_statuses(name, r.revision)
  if not st then return nil, serr, scode end
  local d, mod, described = describe_policy(name, kv, st[name], true)
  local sok, slines
  if mod then sok, slines = selftest_of(mod, described) end
  d.source = kv and kv.value or nil
  d.version = kv and kv.version or nil
  d.signed_by = kv and sign.signer(kv.value) or nil
  d.selftest = mod and mod.selftest and { passed = sok, lines = sok and json.array(slines) or nil,
    error = not sok and slines or nil } or nil
  return d
end

-- check_policy(name, source [, chunkname]) --> module, selftest lines:
-- compile, fields and self-test, as policy put checks before it writes.
function M.check_policy(name, source, chunkname)
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  if type(source) ~= "string" then return fail("EINVAL: the policy source must be a string", "EINVAL") end
  local big = too_big("policy", name, #source)
  if big then return fail(big, "EFBIG") end
  local kv, kopts, kcode = store.incoming("policy", name, source, chunkname)
  if not kv then return nil, kopts, kcode end
  kopts.selftest = true
  local mod, described = stored.policy(name, kv, kopts)
  if not mod then return invalid(described) end
  local sok, lines = selftest_of(mod, type(described) == "table" and described or nil)
  if not sok then return invalid(format("EINVAL: policy %s: %s; nothing stored", name, lines)) end
  return mod, lines
end

-- put_policy(name, source [, opts]) --> {name, key, revision, created,
-- overrides_builtin, selftest = {passed = true, decisions = n} | nil}:
-- stores it at P policies/<name> once check_policy passes; every node uses
-- it from its next decision on. opts.revision and opts.sign as in put_job.
function M.put_policy(name, source, opts)
  opts = opts or {}
  local mod, lines, vcode, extra = M.check_policy(name, source, opts.chunkname)
  if not mod then return nil, lines, vcode, extra end
  local res, vwarn, code = store.store_source("policy", name, source, opts)
  if not res then return nil, vwarn, code end
  res.warnings = vwarn and json.array { vwarn } or nil
  res.overrides_builtin = policy.builtin(name) ~= nil
  res.selftest = mod.selftest and { passed = true, decisions = #lines } or nil
  return res
end

-- rm_policy(name) --> {name, removed = true, now = "the built-in NAME" |
-- "the default policy"}: deletes a stored policy and its node statuses;
-- jobs naming it use the built-in of that name, or the default.
function M.rm_policy(name, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  local key = keys.key(util.prefix(), "policies", name)
  local r, err, code = etcd():txn {
    compare = { { key = key, target = "create", op = ">", value = 0 } },
    success = {
      { delete = { key = key, prev_kv = true } },
      { delete = { key = keys.dir(util.prefix(), "policy-status", name), prefix = true } },
    },
  }
  if not r then return nil, err, code end
  if not r.succeeded then
    return fail("ENOENT: no policy " .. name .. " at " .. key
      .. (policy.builtin(name) and " (built-in policies cannot be removed)" or ""), "ENOENT")
  end
  local vok, verr = versions.record("policy", name, r.revision, nil, { op = "rm", author = opts.author },
    r.responses[1].prev_kvs[1])
  return { name = name, removed = true,
           warnings = not vok and json.array { versions.warning("policy", name, verr) } or nil,
           now = policy.builtin(name) and ("the built-in " .. name) or "the default policy" }
end

return M
