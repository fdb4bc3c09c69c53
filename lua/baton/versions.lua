-- The version log of jobs and policies: who changed what, and the source of
-- each version, to diff or go back to (docs/security.md "Version
-- history"; ops/versions.lua's rollback puts one back).
--
--   P versions/<job>/<revision>             one entry per put/rm of P jobs/<job>
--   P policy-versions/<policy>/<revision>   the same for P policies/<policy>
--
-- (the jobs' log is a key of docs/architecture.md's "Key layout"; jobs and
-- policies may share names, so the policies' log has a prefix of its own, as
-- policy-status/ beside status/.) <revision> is the etcd revision of the put
-- or delete. An entry's value is one line of JSON -- {op, author, time,
-- sha256, revision, size, etcd_user?} -- then "\n" and the source as stored
-- (nothing for an rm): the source outlives etcd's compaction, and needs no
-- escaping.
--
-- baton.ops records an entry after each put_job/put_policy/rm_job/rm_policy
-- (record below), in a txn that follows the write and prunes the log to the
-- last `keep` entries (default 20). A write that did not go through baton
-- (a raw etcdctl put) has no entry: list() shows the current source as
-- author "unknown".
local baton = require "baton"
local U = require "baton.util"
local keys = require "baton.keys"

local json = baton.json
local format = string.format
local type, ipairs, tonumber, tostring = type, ipairs, tonumber, tostring

local M = {}

M.KEEP = 20 -- entries kept per job or policy unless --keep-versions says otherwise

local KINDS = { job = "jobs", policy = "policies" } -- where the sources are
local LOGS = { job = "versions", policy = "policy-versions" } -- and their logs

local function etcd() return baton.etcd end
local function fail(msg, code) return nil, msg, code or msg:match("^(E[%u%d]+):") or "EIO" end

-- The prefix of the log of one job or policy, with its trailing "/".
function M.prefix(kind, name)
  return keys.dir(U.prefix(), LOGS[kind], name)
end

-- The key of the entry of revision rev in that log.
local function entry_key(kind, name, rev)
  return keys.key(U.prefix(), LOGS[kind], name, rev)
end

-- Who makes this change: the given author; else, when the client
-- authenticates to etcd, "etcd-user:NAME"; else $USER@host.
function M.author(given)
  if type(given) == "string" and given ~= "" then return given end
  local user = baton.config and baton.config.user
  if user and user ~= "" then return "etcd-user:" .. user end
  return U.who()
end

-- An entry's value as (meta table, source or nil); nil when unreadable.
local function parse(value)
  local head, source = value:match("^([^\n]*)\n(.*)$")
  head = head or value
  local ok, meta = pcall(json.decode, head)
  if not ok or type(meta) ~= "table" then return nil end
  if meta.op == "rm" then source = nil end
  return meta, source
end

-- record(kind, name, revision, source, opts) --> true, or nil, err, code:
-- stores the entry of the write at revision (source nil for an rm) and
-- deletes the oldest entries beyond opts.keep (default M.KEEP).
-- opts.op: "put" (default), "rm", "rollback of REV"; opts.author: see
-- M.author. prev: the kv the write replaced (the txn's prev_kv); when it
-- has no entry (a raw etcdctl put), one is written for it, author
-- "unknown", so that its source stays in the log. The write itself is
-- done: a failure here is the caller's warning, not its error.
function M.record(kind, name, revision, source, opts, prev)
  opts = opts or {}
  local keep = tonumber(opts.keep) or M.KEEP
  if keep < 1 then keep = 1 end
  local pfx = M.prefix(kind, name)
  local e = etcd()
  local r, err, code = e:get(pfx, { prefix = true, keys_only = true })
  if not r then return nil, err, code end
  local revs, have = {}, {}
  for _, kv in ipairs(r.kvs) do
    local rev = tonumber(keys.under(pfx, kv.key))
    if rev and rev ~= revision then revs[#revs + 1] = rev end
    if rev then have[rev] = true end
  end
  table.sort(revs, function(a, b) return a > b end)
  -- The raw put this write replaced, when it is among the keep - 1 newest
  -- others: its own txn (two sources in one could pass etcd's limit).
  local pr = prev and prev.mod_revision
  if pr and pr ~= revision and not have[pr] and keep > 1 and (#revs < keep - 1 or pr > revs[keep - 1]) then
    local raw = { op = "put (not through baton)", author = "unknown", revision = pr,
                  sha256 = baton._sha256(prev.value or ""), size = #(prev.value or "") }
    local ok, rerr, rcode = e:put(entry_key(kind, name, pr), json.encode(raw) .. "\n" .. (prev.value or ""))
    if not ok then return nil, rerr, rcode end
    have[pr] = true
    revs[#revs + 1] = pr
    table.sort(revs, function(a, b) return a > b end)
  end
  local meta = {
    op = opts.op or (source and "put" or "rm"), author = M.author(opts.author), time = baton.now(),
    revision = revision, sha256 = source and baton._sha256(source) or nil, size = source and #source or nil,
    etcd_user = baton.config and baton.config.user or nil,
  }
  local ops = { { put = { key = entry_key(kind, name, revision), value = json.encode(meta) .. "\n" .. (source or "") } } }
  for i = keep, #revs do ops[#ops + 1] = { delete = { key = entry_key(kind, name, revs[i]) } } end
  local t, terr, tcode = e:txn { success = ops }
  if not t then return nil, terr, tcode end
  return true
end

-- The warning a write returns when its entry could not be recorded.
function M.warning(kind, name, err)
  return format("the %s %s was stored, but its version entry was not recorded: %s", kind, name, tostring(err))
end

-- The source at revision rev in etcd's own history of key: the value and
-- the kv, or false when etcd no longer has it (compacted) or never had it
-- there; nil, err, code when etcd cannot be asked.
local function history(key, rev)
  local h, err, code = etcd():get(key, { revision = rev })
  if not h then
    if code == "ECOMPACTED" then return false end
    return nil, err, code
  end
  local kv = h.kvs[1]
  if kv and kv.mod_revision == rev then return kv.value, kv end
  return false
end

-- list(kind, name) --> the log, newest first: {revision, time, author, op,
-- sha256, size, etcd_user?, current = bool, checked}; a current source
-- without an entry (a raw put) comes first with author "unknown". checked
-- compares each entry with etcd's own history of the key (the log is only
-- as honest as whoever can write it): "ok" (the same bytes), "mismatch"
-- (the entry's SHA-256 is not that of the source etcd stored at that
-- revision: the log was rewritten), "compacted" (etcd no longer has it),
-- "-" for a removal. ENOENT when there is neither an entry nor a stored
-- source.
function M.list(kind, name)
  local key = keys.key(U.prefix(), KINDS[kind], name)
  local pfx = M.prefix(kind, name)
  local r, err, code = etcd():txn { success = {
    { get = { key = key } },
    { get = { key = pfx, prefix = true } },
  } }
  if not r then return nil, err, code end
  local cur = r.responses[1].kvs[1]
  local list, seen = {}, {}
  for _, kv in ipairs(r.responses[2].kvs) do
    local rev = tonumber(keys.under(pfx, kv.key))
    local meta = rev and parse(kv.value)
    if meta then
      meta.revision = rev
      meta.current = cur ~= nil and cur.mod_revision == rev
      list[#list + 1] = meta
      seen[rev] = true
    end
  end
  if cur and not seen[cur.mod_revision] then
    list[#list + 1] = { revision = cur.mod_revision, author = "unknown", op = "put (not through baton)",
                        sha256 = baton._sha256(cur.value), size = #cur.value, current = true }
  end
  table.sort(list, function(a, b) return a.revision > b.revision end)
  if #list == 0 then
    return fail(format("ENOENT: no %s %s at %s and no versions of it under %s", kind, name, key, pfx), "ENOENT")
  end
  for _, v in ipairs(list) do
    if v.op == "rm" then
      v.checked = "-"
    else
      local src, herr, hcode = history(key, v.revision)
      if src == nil then return nil, herr, hcode end
      v.checked = not src and "compacted" or baton._sha256(src) == v.sha256 and "ok" or "mismatch"
    end
  end
  return json.array(list)
end

-- source(kind, name, rev) --> the source stored at revision rev, and where
-- it was read: "history" (etcd's own, whose SHA-256 the log entry, if any,
-- must match; then the kv as etcd stored it too), or "log" (etcd compacted
-- it away: the version log's copy, which nothing can check); or nil, err,
-- code (ECONFLICT when the log
-- entry does not match etcd's history: the log was rewritten).
function M.source(kind, name, rev)
  local key = keys.key(U.prefix(), KINDS[kind], name)
  local r, err, code = etcd():get(entry_key(kind, name, rev))
  if not r then return nil, err, code end
  local ekv = r.kvs[1]
  local meta, logged
  if ekv then
    meta, logged = parse(ekv.value)
    if meta and meta.op == "rm" then
      return fail(format("EINVAL: revision %d of %s %s is its removal, which has no source", rev, kind, name),
        "EINVAL")
    end
  end
  local src, hkv, hcode = history(key, rev)
  if src == nil then return nil, hkv, hcode end
  if src then
    if meta and meta.sha256 and meta.sha256 ~= baton._sha256(src) then
      return fail(format("ECONFLICT: the version log's entry for revision %d of %s %s (SHA-256 %s) does not "
        .. "match what etcd stored at that revision (SHA-256 %s): the log was rewritten; nothing was done",
        rev, kind, name, tostring(meta.sha256):sub(1, 12), baton._sha256(src):sub(1, 12)), "ECONFLICT")
    end
    return src, "history", hkv
  end
  if logged then return logged, "log" end
  return fail(format("ENOENT: no version of %s %s at revision %d (baton %s versions %s lists them)",
    kind, name, rev, kind, name), "ENOENT")
end

-- diff_text(kind, name, a, b, la, lb) --> the unified diff (diff -u) of
-- sources a and b, labelled NAME@la and NAME@lb; "" when they are the
-- same.
function M.diff_text(kind, name, a, b, la, lb)
  if a == b then return "" end
  local fa, fb = os.tmpname(), os.tmpname()
  local function write(path, s)
    local f = assert(io.open(path, "wb"))
    f:write(s)
    f:close()
  end
  write(fa, a)
  write(fb, b)
  local res, xerr = baton.exec { "diff", "-u", "--label", format("%s@%s", name, la),
                                 "--label", format("%s@%s", name, lb), fa, fb, timeout = 30 }
  os.remove(fa)
  os.remove(fb)
  if not res then return fail("EIO: running diff: " .. tostring(xerr), "EIO") end
  if res.code ~= 0 and res.code ~= 1 then
    return fail("EIO: diff failed: " .. tostring(res.stderr):gsub("\n$", ""), "EIO")
  end
  return res.stdout
end

-- diff(kind, name, r1, r2) --> the unified diff (diff -u) of the sources
-- at the two revisions, "" when they are the same.
function M.diff(kind, name, r1, r2)
  local a, aerr, acode = M.source(kind, name, r1)
  if not a then return nil, aerr, acode end
  local b, berr, bcode = M.source(kind, name, r2)
  if not b then return nil, berr, bcode end
  return M.diff_text(kind, name, a, b, r1, r2)
end

return M
