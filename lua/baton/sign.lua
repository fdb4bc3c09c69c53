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
--   -- baton-signature: ed25519 <key id> <base64 of the 64-byte signature>
--
-- so the value at P jobs/<name> stays runnable Lua, and source and
-- signature cannot diverge (one key, one put). The signature covers the
-- kind ("job" or "policy"), the name and every byte before that line, so a
-- signed job cannot be replayed under another name or as a policy.
local baton = require "baton"

local S = baton._sign
local b64encode, b64decode = baton._etcd.b64encode, baton._etcd.b64decode
local format = string.format

local M = {}

local PUBLIC, SECRET = "baton-ed25519-public", "baton-ed25519-secret"
local SIGLINE = "-- baton-signature: ed25519 "

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

-- The message a signature covers.
local function message(kind, name, body)
  return "baton-signature-v1\0" .. kind .. "\0" .. name .. "\0" .. body
end

-- source without a signature line it ends with (if any), then the
-- signature line's key id and signature (nil when unsigned).
function M.split(source)
  local s, e = source:find("\n?" .. SIGLINE:gsub("%-", "%%-") .. "[^\n]*\n?$")
  if not s then return source end
  local line = source:sub(s, e)
  local body = source:sub(1, s) -- (keeps the newline before the line)
  if line:sub(1, 1) ~= "\n" then
    if s > 1 then return source end -- (not a line of its own: no signature)
    body = ""
  end
  local id, sig = line:match("ed25519 (%x+) ([%w+/=]+)%s*$")
  return body, id or "?", sig or ""
end

-- The key id a source's signature line names, nil when it has none (not
-- a proof of anything: verify is).
function M.signer(source)
  local _, id = M.split(source)
  return id
end

-- sign(kind, name, source, secret) --> the source to store: source (any
-- signature line it ends with replaced) with a signature by secret.
function M.sign(kind, name, source, secret)
  local body = M.split(source)
  if body ~= "" and body:sub(-1) ~= "\n" then body = body .. "\n" end
  local id = S.keyid(S.public_of(secret))
  return body .. SIGLINE .. id .. " " .. b64encode(S.sign(secret, message(kind, name, body))) .. "\n"
end

-- load_trust(paths) --> trust {keys = {{id, pub, file}...}}: the public
-- keys of each path, a file of key lines (blank lines and # comments
-- skipped) or a directory of *.pub files; nil, one-line error.
function M.load_trust(paths)
  local keys, seen = {}, {}
  local function add_file(p)
    local text, err = read(p)
    if not text then return nil, "--trust " .. p .. ": " .. err end
    local n = 0
    for line in text:gmatch("[^\n]+") do
      if not line:match("^%s*#") and line:match("%S") then
        local pub = M.parse_public(line)
        if not pub then
          return nil, "--trust " .. p .. ": " .. (line:find(SECRET, 1, true) and
            "is a secret key; trust its .pub file" or "not a baton public key (baton keygen makes FILE.pub)")
        end
        local id = S.keyid(pub)
        if not seen[id] then
          seen[id] = true
          keys[#keys + 1] = { id = id, pub = pub, file = p }
        end
        n = n + 1
      end
    end
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
  local ids = {}
  for i, k in ipairs(keys) do ids[i] = k.id end
  return { keys = keys, ids = ids }
end

-- verify(trust, kind, name, source) --> key id of the trusted key that
-- signed it, or nil, "untrusted: ..." (one line).
function M.verify(trust, kind, name, source)
  local body, id, sig = M.split(source)
  if not id then
    return nil, format("untrusted: %s %s is not signed (this node runs only code signed by a --trust key)",
      kind, name)
  end
  local raw = (#sig % 4 == 0 and #sig > 0) and b64decode(sig) or nil
  local msg = message(kind, name, body)
  for _, k in ipairs(trust.keys) do
    if raw and S.verify(k.pub, msg, raw) then return k.id end
  end
  for _, k in ipairs(trust.keys) do
    if k.id == id then
      return nil, format("untrusted: %s %s: the signature by key %s does not verify "
        .. "(changed after signing, or signed for another name or kind)", kind, name, id)
    end
  end
  return nil, format("untrusted: %s %s is signed by key %s, which this node does not trust (it trusts %s)",
    kind, name, id, table.concat(trust.ids, ", "))
end

return M
