-- What is done to a job's or policy's source whatever its kind, through
-- that kind's own check and put (ops/jobs.lua, ops/policies.lua): signing
-- it for a later put (job sign, policy sign), and its version log (baton
-- .versions keeps the entries): the versions, a diff of two, a rollback,
-- the revision stored now.
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"
local sign = require "baton.sign"
local log = require "baton.versions"
local common = require "baton.ops.common"
local store = require "baton.ops.store"
local jobs = require "baton.ops.jobs"
local policies = require "baton.ops.policies"

local format = string.format
local ipairs = ipairs

local M = {}

local function etcd() return baton.etcd end

local fail, check_name, too_big = common.fail, common.check_name, common.too_big

-- sign_source(kind, name, source, secret [, chunkname]) --> {source,
-- key, create_revision, version, signed_by}: source checked as put checks
-- it, and signed by secret for the next version of its key (a new key is
-- created holding sign.PLACEHOLDER first, which nodes ignore), so that
-- anyone may then store it without the key (job put, the HTTP API's PUT),
-- until another put comes first.
function M.sign_source(kind, name, source, secret, chunkname)
  local check = kind == "job" and jobs.check_job or policies.check_policy
  local ok, err, code, extra = check(name, source, chunkname)
  if not ok then return nil, err, code, extra end
  local key = keys.key(util.prefix(), kind == "job" and "jobs" or "policies", name)
  for _ = 1, 5 do
    local base, berr, bcode = store.signing_base(kind, name, key)
    if base == nil then return nil, berr, bcode end
    if base then
      local c, v = sign.sign_for(base)
      local text = sign.sign(kind, name, source, secret, { prefix = util.prefix(), create_revision = c, version = v })
      local big = too_big(kind, name, #text)
      if big then return fail(big, "EFBIG") end
      return { source = text, key = key, create_revision = c, version = v, signed_by = sign.signer(text) }
    end
  end
  return fail(format("ECONFLICT: %s %s kept changing while it was signed", kind, name), "ECONFLICT")
end

-- versions(kind, name) --> the log, newest first (versions.list).
function M.versions(kind, name)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  return log.list(kind, name)
end

-- diff_versions(kind, name [, r1 [, r2]]) --> unified diff text ("" for
-- the same source), r1, r2: of the sources at revisions r1 and r2. r2
-- defaults to the revision stored now, r1 to the newest version before r2
-- that has a source (GET /api/v1/jobs/{name}/diff: what changed last).
function M.diff_versions(kind, name, r1, r2)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  if not r1 or not r2 then
    local list, err, code = log.list(kind, name)
    if not list then return nil, err, code end
    for _, v in ipairs(list) do
      if not r2 and v.current then r2 = v.revision end
    end
    if not r2 then
      return fail(format("ENOENT: no %s %s is stored now; give two revisions (baton %s versions %s lists them)",
        kind, name, kind, name), "ENOENT")
    end
    for _, v in ipairs(list) do -- (newest first)
      if not r1 and v.revision < r2 and v.op ~= "rm" then r1 = v.revision end
    end
    if not r1 then
      return fail(format("ENOENT: %s %s has no version before revision %d to compare it with", kind, name, r2),
        "ENOENT")
    end
  end
  local text, err, code = log.diff(kind, name, r1, r2)
  if not text then return nil, err, code end
  return text, r1, r2
end

-- rollback(kind, name, rev [, opts]) --> what put_job / put_policy
-- return, with rolled_back = rev and diff (from the current source to the
-- one put back): the source at rev (etcd's history, checked against the
-- log) put back through the normal put path (validated), recorded as op
-- "rollback of REV". opts.sign: signed again with that key, for where it
-- goes now (the old signature named another version of the key); only a
-- source that was signed by that key or one of opts.trust (sign.load_trust's)
-- where etcd stored it: anyone who can write etcd can store a version,
-- and signing it again would make it theirs to run. Without it, an old
-- signature is removed (it cannot hold anywhere but where it was). A
-- source etcd has compacted away exists only in the log, which whoever
-- writes P versions/ can rewrite: refused unless opts.from_log (and never
-- signed).
function M.rollback(kind, name, rev, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  local src, how, hkv = log.source(kind, name, rev)
  if not src then return nil, how, hkv end
  if how == "log" and not opts.from_log then
    return fail(format("EINVAL: revision %d of %s %s is no longer in etcd's history (compacted), and the "
      .. "version log's copy of it cannot be checked: whoever can write %s could have put it there. "
      .. "Review it (baton %s diff %s %d REV) and pass --from-log to use it; nothing was done", rev, kind,
      name, log.prefix(kind, name), kind, name, rev), "EINVAL")
  end
  if opts.sign then
    local trust = sign.trust_of_secret(opts.sign)
    for _, k in ipairs(opts.trust and opts.trust.keys or {}) do trust.keys[#trust.keys + 1] = k end
    local by = how == "history" and sign.signed_by(trust, kind, name, src,
      { prefix = util.prefix(), create_revision = hkv.create_revision, version = hkv.version })
    if not by then
      return fail(format("EACCES: revision %d of %s %s was not signed by key %s%s where etcd stored it, so it "
        .. "may not be yours to sign: whoever can write etcd can store a version. Review it (baton %s diff %s "
        .. "%d REV) and put it from a file with --sign; nothing was done", rev, kind, name, trust.ids[1],
        opts.trust and " nor a --trust key" or " (add older keys with --trust)", kind, name, rev), "EACCES")
    end
  end
  src = sign.split(src)
  local cur = etcd():get(keys.key(util.prefix(), kind == "job" and "jobs" or "policies", name))
  local now = cur and cur.kvs[1] and cur.kvs[1].value or ""
  local diff, derr, dcode = log.diff_text(kind, name, sign.split(now), src, "current", rev)
  if not diff then return nil, derr, dcode end
  local put = kind == "job" and jobs.put_job or policies.put_policy
  local r, perr, pcode, extra = put(name, src, { author = opts.author, keep = opts.keep, sign = opts.sign,
                                                 op = "rollback of " .. rev, revision = opts.revision })
  if not r then return nil, perr, pcode, extra end
  r.rolled_back, r.diff, r.from = rev, diff, how
  return r
end

-- current_revision(kind, name) --> the revision of the source stored now
-- (its key's mod revision), or false when none is stored: what `baton job
-- diff NAME REV` compares REV with.
function M.current_revision(kind, name)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  local g, err, code = etcd():get(keys.key(util.prefix(), kind == "job" and "jobs" or "policies", name))
  if not g then return nil, err, code end
  return g.kvs[1] and g.kvs[1].mod_revision or false
end

return M
