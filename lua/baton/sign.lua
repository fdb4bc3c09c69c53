-- Signed job and policy sources (docs/security.md, "Signed code").
--
-- Keys are one line of text each:
--
--   baton-ed25519-public <base64 of the 32-byte public key>
--   baton-ed25519-secret <base64 of the 64-byte secret key>
--
-- A signed source is stored as the source itself (ending with a newline,
-- one is added if it has none) followed by one Lua comment line,
--
--   -- baton-signature: ed25519 <key id> c<C> v<V> <base64 of the signature>
--
-- so the value at P jobs/<name> stays runnable Lua, and source and
-- signature cannot diverge (one key, one put). The signature covers the
-- kind ("job" or "policy"), the prefix P, the name, and where in etcd's
-- history the source may stand: version V of the key P jobs/<name> created
-- at revision C (etcd's create_revision and version of the key, which
-- every read returns). So a signed source is good at one place only: not
-- under another name, kind or prefix, not as an older version put back (a
-- replay: the key's version has moved on), not after the job was deleted
-- and created again (a resurrection: another create revision). A new key
-- is first created holding PLACEHOLDER (which nodes ignore), then the
-- signed source is put as its version 2: sign_for tells what to sign for.
local baton = require "baton"

local S = baton._sign
local b64encode, b64decode = baton._etcd.b64encode, baton._etcd.b64decode
local format = string.format

local M = {}

local PUBLIC, SECRET = "baton-ed25519-public", "baton-ed25519-secret"
local SIGLINE = "-- baton-signature: ed25519 "

-- What a signed put stores first at a key that does not exist yet: no
-- code, only the promise of a signed source, which nodes neither load nor
-- report (a put --sign that died halfway leaves it; the next one goes on).
M.PLACEHOLDER = "-- baton: a signed source is being stored here\n"

-- The key of type tag in text (one line, optional trailing white space),
-- n bytes decoded; nil, why.
local function parse_key(text, tag, n)
  local b = text:match("^" .. tag:gsub("%-", "%%-") .. " ([%w+/=]+)%s*$")
  if not b then return nil end
  local raw = (#b % 4 == 0) and b64decode(b) or nil
  if not raw or #raw ~= n then return nil end
  return raw
end

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read(4096) or ""
  f:close()
  return s
end

-- A public key from its text; nil if it is not one.
function M.parse_public(text) return parse_key(text, PUBLIC, 32) end

function M.keyid(pub) return S.keyid(pub) end

-- keygen(path) --> key id: writes a new key pair, the secret key at path
-- (mode 0600) and the public one at path.pub (0644); refuses to replace
-- either. nil, "EEXIST: ..." on failure.
function M.keygen(path)
  local pub, sec = S.keypair()
  for _, p in ipairs { path, path .. ".pub" } do
    local f = io.open(p, "rb")
    if f then
      f:close()
      return nil, "EEXIST: " .. p .. " exists; nothing was written (remove it first to make a new key)", "EEXIST"
    end
  end
  local ok, err, code = S.create(path, SECRET .. " " .. b64encode(sec) .. "\n", tonumber("600", 8))
  if not ok then return nil, err, code end
  ok, err, code = S.create(path .. ".pub", PUBLIC .. " " .. b64encode(pub) .. "\n", tonumber("644", 8))
  if not ok then os.remove(path); return nil, err, code end
  return S.keyid(pub)
end

-- The secret key in file path; nil, "EINVAL: ..." when it is not one.
function M.load_secret(path)
  local text, err = read(path)
  if not text then return nil, "ENOENT: " .. err, "ENOENT" end
  local sec = parse_key(text, SECRET, 64)
  if not sec then
    local what = parse_key(text, PUBLIC, 32) and "a public key (sign with the secret key, the file without .pub)"
      or "not a baton secret key (baton keygen makes one)"
    return nil, format("EINVAL: %s: %s", path, what), "EINVAL"
  end
  return sec
end

-- The message a signature covers: where (prefix, create revision and
-- version of the key) and what.
local function message(kind, prefix, name, created, version, body)
  return format("baton-signature-v2\0%s\0%s\0%s\0%d\0%d\0", kind, prefix, name, created, version) .. body
end

-- source without a signature line it ends with (if any), then the
-- signature line's key id, signature, and the create revision and version
-- it names (nil, nil when the line is of the old form, which named
-- neither); id is nil when unsigned.
function M.split(source)
  local s, e = source:find("\n?" .. SIGLINE:gsub("%-", "%%-") .. "[^\n]*\n?$")
  if not s then return source end
  local line = source:sub(s, e)
  local body = source:sub(1, s) -- (keeps the newline before the line)
  if line:sub(1, 1) ~= "\n" then
    if s > 1 then return source end -- (not a line of its own: no signature)
    body = ""
  end
  local id, c, v, sig = line:match("ed25519 (%x+) c(%d+) v(%d+) ([%w+/=]+)%s*$")
  if id then return body, id, sig, tonumber(c), tonumber(v) end
  id, sig = line:match("ed25519 (%x+) ([%w+/=]+)%s*$")
  return body, id or "?", sig or ""
end

-- The key id a source's signature line names, nil when it has none (not
-- a proof of anything: verify is).
function M.signer(source)
  local _, id = M.split(source)
  return id
end

-- The create revision and version a signed source names (nil when it
-- names none: unsigned, or signed in the old form).
function M.binding(source)
  local _, _, _, c, v = M.split(source)
  return c, v
end

-- sign_for(kv) --> the create revision and version to sign for, to replace
-- kv (a key as etcd returned it: a new one holds PLACEHOLDER) with the
-- next version; nil when kv is nil (make the placeholder first).
function M.sign_for(kv)
  if not kv then return nil end
  return kv.create_revision, kv.version + 1
end

-- sign(kind, name, source, secret, where) --> the source to store: source
-- (any signature line it ends with replaced) with a signature by secret
-- for where = {prefix, create_revision, version}: the key the source will
-- be, and the version of it that it will be.
function M.sign(kind, name, source, secret, where)
  local body = M.split(source)
  if body ~= "" and body:sub(-1) ~= "\n" then body = body .. "\n" end
  local id = S.keyid(S.public_of(secret))
  local c, v = where.create_revision, where.version
  local sig = S.sign(secret, message(kind, where.prefix, name, c, v, body))
  return format("%s%s%s c%d v%d %s\n", body, SIGLINE, id, c, v, b64encode(sig))
end

-- The keys of text (key lines; blank lines and # comments skipped) added
-- to keys (seen: ids already there); the count, or nil, the reason.
local function add_keys(text, keys, seen, file)
  local n = 0
  for line in text:gmatch("[^\n]+") do
    if not line:match("^%s*#") and line:match("%S") then
      local pub = M.parse_public(line)
      if not pub then
        return nil, line:find(SECRET, 1, true) and "is a secret key; trust its .pub file"
          or "not a baton public key (baton keygen makes FILE.pub)"
      end
      local id = S.keyid(pub)
      if not seen[id] then
        seen[id] = true
        keys[#keys + 1] = { id = id, pub = pub, file = file }
      end
      n = n + 1
    end
  end
  return n
end

local function trust_of(keys)
  local ids = {}
  for i, k in ipairs(keys) do ids[i] = k.id end
  return { keys = keys, ids = ids }
end

-- load_trust(paths) --> trust {keys = {{id, pub, file}...}, ids}: the
-- public keys of each path, a file of key lines (blank lines and #
-- comments skipped) or a directory of *.pub files; nil, one-line error.
function M.load_trust(paths)
  local keys, seen = {}, {}
  local function add_file(p)
    local text, err = read(p)
    if not text then return nil, "--trust " .. p .. ": " .. err end
    local n, why = add_keys(text, keys, seen, p)
    if not n then return nil, "--trust " .. p .. ": " .. why end
    if n == 0 then return nil, "--trust " .. p .. ": no public key in it" end
    return true
  end
  for _, p in ipairs(paths) do
    local names, _, code = S.pubfiles(p)
    if names then
      if #names == 0 then return nil, "--trust " .. p .. ": no *.pub file in the directory" end
      for _, n in ipairs(names) do
        local ok, err = add_file(p .. "/" .. n)
        if not ok then return nil, err end
      end
    elseif code == "ENOTDIR" then
      local ok, err = add_file(p)
      if not ok then return nil, err end
    else
      return nil, "--trust " .. p .. ": " .. (code == "ENOENT" and "no such file or directory" or tostring(code))
    end
  end
  return trust_of(keys)
end

-- The trusted keys as text (one key line each), which trust_text_load
-- reads back: how a node hands its trust to its workers.
function M.trust_text(trust)
  local lines = {}
  for i, k in ipairs(trust.keys) do lines[i] = PUBLIC .. " " .. b64encode(k.pub) end
  return table.concat(lines, "\n")
end

function M.trust_text_load(text)
  local keys = {}
  local n, why = add_keys(text, keys, {}, "(the node's)")
  if not n or n == 0 then return nil, why or "no key" end
  return trust_of(keys)
end

-- The trust of one secret key's own public key (what its holder signed).
function M.trust_of_secret(secret)
  local pub = S.public_of(secret)
  return trust_of { { id = S.keyid(pub), pub = pub, file = "(--sign)" } }
end

-- The message of the old form (kind, name and body only).
local function message_v1(kind, name, body)
  return "baton-signature-v1\0" .. kind .. "\0" .. name .. "\0" .. body
end

-- signed_by(trust, kind, name, source, where) --> the id of the trusted
-- key that signed source, or nil: as verify for the new form; a source
-- signed in the old form is judged by its content alone (for deciding
-- whether an old version is one's own, as rollback --sign does, never for
-- running it).
function M.signed_by(trust, kind, name, source, where)
  local body, id, sig, c = M.split(source)
  if not id then return nil end
  if c then return (M.verify(trust, kind, name, source, where)) end
  local raw = (#sig % 4 == 0 and #sig > 0) and b64decode(sig) or nil
  for _, k in ipairs(trust.keys) do
    if raw and S.verify(k.pub, message_v1(kind, name, body), raw) then return k.id end
  end
end

-- verify(trust, kind, name, source, where) --> key id of the trusted key
-- that signed source for this place, or nil, "untrusted: ..." (one line).
-- where = {prefix, create_revision, version}: the key the source was read
-- from, as etcd returned it.
function M.verify(trust, kind, name, source, where)
  local body, id, sig, c, v = M.split(source)
  if not id then
    return nil, format("untrusted: %s %s is not signed (this node runs only code signed by a --trust key)",
      kind, name)
  end
  if not c then
    return nil, format("untrusted: %s %s is signed in an older form that does not say which version of "
      .. "the key it is for (a replayed or resurrected source would verify); put it again with --sign",
      kind, name)
  end
  local raw = (#sig % 4 == 0 and #sig > 0) and b64decode(sig) or nil
  local msg = message(kind, where.prefix, name, c, v, body)
  local by
  for _, k in ipairs(trust.keys) do
    if raw and S.verify(k.pub, msg, raw) then by = k.id; break end
  end
  if not by then
    for _, k in ipairs(trust.keys) do
      if k.id == id then
        return nil, format("untrusted: %s %s: the signature by key %s does not verify "
          .. "(changed after signing, or signed for another name, kind or prefix)", kind, name, id)
      end
    end
    return nil, format("untrusted: %s %s is signed by key %s, which this node does not trust (it trusts %s)",
      kind, name, id, table.concat(trust.ids, ", "))
  end
  if c ~= where.create_revision then
    return nil, format("untrusted: %s %s was signed for the key created at revision %d, and this one was "
      .. "created at revision %d (a deleted %s put back, or a source signed for another cluster)",
      kind, name, c, where.create_revision, kind)
  end
  if v ~= where.version then
    return nil, format("untrusted: %s %s was signed as version %d of its key, and this is version %d "
      .. "(%s)", kind, name, v, where.version,
      v < where.version and "an older signed version put back: a replay" or "not the put it was signed for")
  end
  return by
end

return M
