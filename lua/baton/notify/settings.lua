-- Changing the channels (baton notify set / unset): a CHANNEL.SETTING
-- path, an edit applied to P config/notify only if it still checks and
-- nobody changed it meanwhile, and a channel's settings as one line.
local baton = require "baton"
local names = require "baton.names"
local keys = require "baton.keys"
local C = require "baton.notify.config"

local json = baton.json
local format, concat = string.format, table.concat
local FIELDS, ALL_FIELDS, CHANNEL_NAME, type_of = C.FIELDS, C.ALL_FIELDS, C.CHANNEL_NAME, C.type_of

local M = {}

-- A CHANNEL.FIELD path: channel, field (nil for the channel alone); or
-- nil, why.
function M.parse_path(path, need_field)
  local name, field = tostring(path):match("^([^.]+)%.([^.]+)$")
  if not name then name = tostring(path):match("^([^.]+)$") end
  if not name or not name:find(CHANNEL_NAME) then
    return nil, format("%q is not CHANNEL.SETTING (webhook.url, mail.to, ...)", tostring(path))
  end
  if need_field and not field then
    return nil, format("%q names no setting: CHANNEL.SETTING (%s.url, %s.to, ...)", path, name, name)
  end
  if field then
    local known = false
    for _, f in ipairs(ALL_FIELDS) do known = known or f == field end
    if not known then
      local hint = names.did_you_mean(field, ALL_FIELDS)
      return nil, format("unknown setting %q (settings: %s)%s", field, concat(ALL_FIELDS, ", "),
        hint and format(" (did you mean %s?)", hint) or "")
    end
  end
  return name, field
end

-- Applies change(cfg) (which edits cfg in place, or returns nil, why) to
-- the stored configuration, checks the result and stores it only if
-- P config/notify is still as read (else reads again, 5 times). An empty
-- configuration deletes the key. Returns {config, revision, key} or nil,
-- err, code.
function M.update(e, P, change)
  local key = keys.key(P, "config", "notify")
  for _ = 1, 5 do
    local r, err, code = e:get(key)
    if not r then return nil, err, code end
    local kv = r.kvs[1]
    local cfg = {}
    if kv then
      local ok, v = pcall(json.decode, kv.value)
      -- (a stored value that is not an object is replaced, not merged)
      if ok and type(v) == "table" and v[1] == nil then cfg = v end
    end
    local ok, why = change(cfg)
    if not ok then return nil, "EINVAL: " .. why, "EINVAL" end
    local good, cerr = C.check(cfg)
    if not good then return nil, cerr .. "; nothing was stored", "EINVAL" end
    local empty = next(cfg) == nil
    local t, terr, tcode = e:txn {
      compare = { kv and { key = key, target = "mod", op = "==", value = kv.mod_revision }
                  or { key = key, target = "create", op = "==", value = 0 } },
      success = { empty and { delete = { key = key } } or { put = { key = key, value = json.encode(cfg) } } },
    }
    if not t then return nil, terr, tcode end
    if t.succeeded then return { config = cfg, revision = t.revision, key = key } end
  end
  return nil, "ECONFLICT: " .. key .. " kept changing; nothing was stored", "ECONFLICT"
end

-- The edit of `baton notify set CHANNEL.FIELD VALUE`: value as the field
-- takes it (timeout: a number). url and url_secret replace each other.
function M.setter(name, field, value)
  return function(cfg)
    local v = value
    if field == "timeout" then
      v = tonumber(value)
      if not v then return nil, format("%s.timeout: %q is not a number of seconds", name, value) end
    end
    if v == "" then return nil, format("%s.%s: empty value (baton notify unset %s.%s removes it)", name, field,
      name, field) end
    local ch = type(cfg[name]) == "table" and cfg[name] or {}
    cfg[name] = ch
    ch[field] = v
    if field == "url" then ch.url_secret = nil elseif field == "url_secret" then ch.url = nil end
    return true
  end
end

-- The edit of `baton notify unset CHANNEL[.FIELD]`.
function M.unsetter(name, field)
  return function(cfg)
    if cfg[name] == nil or (field and (type(cfg[name]) ~= "table" or cfg[name][field] == nil)) then
      return nil, format("%s is not set", field and (name .. "." .. field) or ("channel " .. name))
    end
    if field then cfg[name][field] = nil else cfg[name] = nil end
    return true
  end
end

-- A channel's settings as one line: "url=https://... timeout=10".
function M.settings_text(name, ch)
  local parts = {}
  for _, f in ipairs(FIELDS[type_of(name, ch)] or ALL_FIELDS) do
    if f ~= "type" and ch[f] ~= nil then parts[#parts + 1] = f .. "=" .. tostring(ch[f]) end
  end
  return concat(parts, " ")
end

return M
