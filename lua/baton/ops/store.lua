-- Storing a checked job or policy source (job put, policy put, rollback):
-- verifying it first where the process trusts keys, the precondition on
-- the key's revision, signing it for the version it becomes, and the
-- version log's entry (baton.versions) once it is stored.
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"
local sign = require "baton.sign"
local stored = require "baton.stored"
local versions = require "baton.versions"
local common = require "baton.ops.common"

local format = string.format

local M = {}

local function etcd() return baton.etcd end

local fail, too_big = common.fail, common.too_big

-- A source about to be stored, as stored.job / stored.policy take it: in a
-- process that trusts keys (a node's API with --trust), verified first,
-- for the place its signature names (it is stored there only: see
-- store_source); anywhere else, the caller's own text. Returns kv, opts,
-- or nil, err, code when it is not trusted here.
function M.incoming(kind, name, source, chunkname)
  local kv = { value = source }
  if not stored.trusting() then return kv, { file = true, chunkname = chunkname } end
  kv.create_revision, kv.version = sign.binding(source)
  local ok, err = stored.verify(kind, name, kv)
  if not ok then
    return fail(format("EACCES: %s; this node runs only code signed by its --trust keys, so nothing was "
      .. "stored", err), "EACCES")
  end
  return kv, { chunkname = chunkname }
end

-- The compare of a put that must find the key in the state given: at mod
-- revision rev (0: absent), or created at c and at version v - 1.
local function where_compare(key, rev, c, v)
  local cmp = {}
  if rev then cmp[#cmp + 1] = { key = key, target = "mod", op = "==", value = rev } end
  if c then
    cmp[#cmp + 1] = { key = key, target = "create", op = "==", value = c }
    cmp[#cmp + 1] = { key = key, target = "version", op = "==", value = v - 1 }
  end
  return cmp
end

-- The key's state for a signed put: the current kv, after making the
-- placeholder a new key starts with (sign.lua); nil, err, code. rev: the
-- caller's precondition (a placeholder counts as no key).
function M.signing_base(kind, name, key, rev)
  local e = etcd()
  local g, err, code = e:get(key)
  if not g then return nil, err, code end
  local cur = g.kvs[1]
  local absent = not cur or cur.value == sign.PLACEHOLDER
  if rev == 0 and not absent then
    return fail(format("EEXIST: %s %s exists (revision %d); nothing was stored", kind, name, cur.mod_revision),
      "EEXIST")
  elseif rev and rev ~= 0 and (absent or cur.mod_revision ~= rev) then
    return fail(format("ECONFLICT: %s %s is %s, not at revision %d; nothing was stored", kind, name,
      absent and "not stored" or format("at revision %d", cur.mod_revision), rev), "ECONFLICT")
  end
  if cur then return cur end
  local t, terr, tcode = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = sign.PLACEHOLDER } } },
  }
  if not t then return nil, terr, tcode end
  if not t.succeeded then return false end -- (created meanwhile: look again)
  return { key = key, value = sign.PLACEHOLDER, create_revision = t.revision, mod_revision = t.revision,
           version = 1 }
end

-- Stores a checked source of a job or policy (kind) at P jobs/<name> or
-- P policies/<name>, only if the stored one is at mod revision opts.revision
-- when that is given (0: only if there is none), then records it in the
-- version log (baton.versions: opts.author, opts.keep, opts.op).
--   opts.sign (a secret key, sign.lua): signed first, for the next version
--   of the key as it is (a new key is created holding sign.PLACEHOLDER
--   first; the signature line, a Lua comment, changes nothing the checks
--   saw); tried again should another put come in between.
--   A source signed already is stored only where its signature says: as
--   version V of the key created at revision C, else ECONFLICT.
-- Returns {name, key, revision, created, signed_by} and the version log's
-- warning (nil when it was recorded), or nil, err, code (EFBIG, EEXIST /
-- ECONFLICT when opts.revision or the signature's place did not hold;
-- nothing stored).
function M.store_source(kind, name, source, opts)
  local key, rev = keys.key(util.prefix(), kind == "job" and "jobs" or "policies", name), opts.revision
  local r, err, code
  for _ = 1, 5 do
    local text, c, v = source, nil, nil
    if opts.sign then
      local base, berr, bcode = M.signing_base(kind, name, key, rev)
      if base == nil then return nil, berr, bcode end
      if base then
        c, v = sign.sign_for(base)
        text = sign.sign(kind, name, source, opts.sign,
                         { prefix = util.prefix(), create_revision = c, version = v })
        local big = too_big(kind, name, #text)
        if big then return fail(big, "EFBIG") end
      end
    else
      c, v = sign.binding(source)
    end
    if not opts.sign or c then
      r, err, code = etcd():txn {
        compare = where_compare(key, not opts.sign and rev or nil, c, v),
        success = { { put = { key = key, value = text, prev_kv = true } } },
        failure = { { get = { key = key, keys_only = true } } },
      }
      if not r then return nil, err, code end
      if r.succeeded then source = text; break end
      local cur = r.responses[1].kvs[1]
      if c and not opts.sign then
        local now = not cur and "not there"
          or cur.create_revision ~= c and format("created at revision %d (a %s put back after it was removed?)",
            cur.create_revision, kind)
          or cur.version >= v and format("at version %d already (a source stored before, put again?)", cur.version)
          or format("at version %d", cur.version)
        return fail(format("ECONFLICT: the source is signed for version %d of %s created at revision %d, and "
          .. "that key is %s; sign it again (baton %s put --sign, or baton %s sign); nothing was stored", v, key,
          c, now, kind, kind), "ECONFLICT")
      elseif not opts.sign then
        if rev == 0 then
          return fail(format("EEXIST: %s %s exists (revision %d); nothing was stored", kind, name,
            cur.mod_revision), "EEXIST")
        end
        return fail(format("ECONFLICT: %s %s is %s, not at revision %d; nothing was stored", kind, name,
          cur and format("at revision %d", cur.mod_revision) or "not stored", rev), "ECONFLICT")
      end
    end
    r = nil -- (another put came in between: sign again)
  end
  if not r then
    return fail(format("ECONFLICT: %s %s kept changing while it was signed; nothing was stored", kind, name),
      "ECONFLICT")
  end
  local prev = r.responses[1].prev_kv
  if prev and prev.value == sign.PLACEHOLDER then prev = nil end
  local vok, verr = versions.record(kind, name, r.revision, source, opts, prev)
  return { name = name, key = key, revision = r.revision, created = prev == nil,
           signed_by = sign.signer(source) }, not vok and versions.warning(kind, name, verr) or nil
end

return M
