-- Notification channels (docs/guide.md, "Alerting"): P config/notify
-- decoded and checked, the channel a notifier sends to, and what a
-- notifier job is. The format is in baton/notify.lua's header.
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"
local names = require "baton.names"

local json = baton.json
local format, concat = string.format, table.concat

local M = {}

-- (the keys without the prefix, as messages name them)
M.CONFIG = keys.key("", "config", "notify")
M.OUTBOX = keys.dir("", "notify", "outbox")
M.TYPES = { "webhook", "mail" }
M.WEBHOOK_TIMEOUT = 15 -- seconds, a webhook channel's default timeout
M.DRAIN_MAX = 100      -- outbox entries one run sends at most
M.CLAIM_SLACK = 30     -- seconds a claim of an entry outlives its delivery's timeout
M.COUNT_LIMIT = 10000  -- outbox keys read per count (the total is exact beyond it)

local CHANNEL_NAME = "^[%a][%w_-]*$"
local SECRET_NAME = "^[%a_][%w_]*$"
local ADDRESS = "^[^%s@,<>\"]+@[^%s@,<>\"]+$"

-- The fields of each type of channel, in the order `baton notify show`
-- prints them.
local FIELDS = {
  webhook = { "type", "url", "url_secret", "timeout" },
  mail = { "type", "to", "from" },
}
local ALL_FIELDS = { "type", "url", "url_secret", "timeout", "to", "from" }

local function is_type(t) return t == "webhook" or t == "mail" end

-- The type of channel name with settings ch: its `type`, or its name.
local function type_of(name, ch)
  local t = ch.type
  if t == nil and is_type(name) then t = name end
  return t
end


-- The error of one field: "channel webhook: url: must be ...".
local function ferr(name, field, msg)
  return format("channel %s: %s%s", name, field and (field .. ": ") or "", msg)
end

local function check_url(s)
  if type(s) ~= "string" then return "must be a string" end
  if #s > 2048 then return "is longer than 2048 bytes" end
  if not s:find("^[hH][tT][tT][pP][sS]?://[^%s/?#]+[^%s]*$") then
    return format("must be an http:// or https:// URL, got %q", s)
  end
end

-- "a@x, b@y" as a list of addresses, or nil, why.
local function addresses(s, one)
  if type(s) ~= "string" then return nil, "must be a string" end
  local list = {}
  for part in (s .. ","):gmatch("([^,]*),") do
    part = part:match("^%s*(.-)%s*$")
    if part ~= "" then
      if not part:find(ADDRESS) then return nil, format("%q is not a mail address (name@domain)", part) end
      list[#list + 1] = part
    end
  end
  if #list == 0 then return nil, "names no address" end
  if one and #list > 1 then return nil, "must be one address" end
  return list
end

-- Checks one channel's settings: nil when they are valid, else why (one
-- line naming the channel and the field).
local function check_channel(name, ch)
  if type(name) ~= "string" or not name:find(CHANNEL_NAME) or #name > 64 then
    return format("%q is not a channel name (letters, digits, '_' and '-', starting with a letter)", tostring(name))
  end
  if type(ch) ~= "table" or ch[1] ~= nil then return ferr(name, nil, "must be an object of settings") end
  local t = type_of(name, ch)
  if t == nil then
    local hint = names.did_you_mean(name, M.TYPES)
    return ferr(name, "type", "missing (webhook or mail; the type is the name only for a channel named webhook or mail)"
      .. (hint and format(" (did you mean channel %s?)", hint) or ""))
  end
  if not is_type(t) then return ferr(name, "type", format("must be webhook or mail, got %s", json.encode(t))) end
  local known = {}
  for _, f in ipairs(FIELDS[t]) do known[f] = true end
  for k in pairs(ch) do
    if not known[k] then
      local hint = type(k) == "string" and require("baton.job").did_you_mean(k, FIELDS[t])
      return ferr(name, nil, format("unknown setting %s for a %s channel (settings: %s)%s", json.encode(k), t,
        concat(FIELDS[t], ", "), hint and format(" (did you mean %s?)", hint) or ""))
    end
  end
  if t == "webhook" then
    if ch.url ~= nil and ch.url_secret ~= nil then return ferr(name, nil, "give url or url_secret, not both") end
    if ch.url == nil and ch.url_secret == nil then return ferr(name, "url", "missing (or url_secret)") end
    if ch.url ~= nil then
      local e = check_url(ch.url)
      if e then return ferr(name, "url", e) end
    end
    if ch.url_secret ~= nil and (type(ch.url_secret) ~= "string" or not ch.url_secret:find(SECRET_NAME)) then
      return ferr(name, "url_secret", format("must be a secret's name (letters, digits and '_'), got %s",
        json.encode(ch.url_secret)))
    end
    if ch.timeout ~= nil and (type(ch.timeout) ~= "number" or ch.timeout < 1 or ch.timeout > 300) then
      return ferr(name, "timeout", format("must be a number of seconds from 1 to 300, got %s", json.encode(ch.timeout)))
    end
  else
    if ch.to == nil then return ferr(name, "to", "missing (one or more addresses, comma-separated)") end
    local _, e = addresses(ch.to)
    if e then return ferr(name, "to", e) end
    if ch.from ~= nil then
      _, e = addresses(ch.from, true)
      if e then return ferr(name, "from", e) end
    end
  end
end

-- Checks a whole configuration (decoded JSON): true, or nil, "EINVAL: ...".
function M.check(cfg)
  if type(cfg) ~= "table" or cfg[1] ~= nil then
    return nil, "EINVAL: " .. M.CONFIG .. " must be a JSON object of channels", "EINVAL"
  end
  for _, name in ipairs(util.sorted_keys(cfg)) do
    local e = check_channel(name, cfg[name])
    if e then return nil, "EINVAL: " .. M.CONFIG .. ": " .. e, "EINVAL" end
  end
  return true
end

-- Decodes the text stored at P config/notify: the configuration (a
-- table; with strict, every channel checked), or nil, "EINVAL: ...".
function M.decode(text, strict)
  local ok, cfg, derr = pcall(json.decode, text)
  if not ok or cfg == nil then
    return nil, "EINVAL: " .. M.CONFIG .. " is not JSON: " .. tostring(ok and derr or cfg), "EINVAL"
  end
  if type(cfg) ~= "table" or cfg[1] ~= nil then
    return nil, "EINVAL: " .. M.CONFIG .. " must be a JSON object of channels", "EINVAL"
  end
  if strict then
    local good, err = M.check(cfg)
    if not good then return nil, err, "EINVAL" end
  end
  return cfg
end

-- The stored configuration: cfg ({} when there is none; with strict,
-- every channel checked, else each is checked when it is used: a channel
-- stored wrong by a raw etcd put stops only the notifiers that use it),
-- its kv (nil when absent); or nil, err, code (etcd failed, or what is
-- stored is not valid).
function M.read(e, P, strict)
  local r, err, code = e:get(keys.key(P, "config", "notify"))
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv then return {}, nil end
  local cfg, derr = M.decode(kv.value, strict)
  if not cfg then return nil, derr, "EINVAL" end
  return cfg, kv
end

-- The channel a run sends to: {name, type, url | url_secret, timeout, to,
-- from, env}, from cfg, or else (the way of earlier versions, on this node
-- only) from the node's environment: BATON_WEBHOOK_URL for a channel named
-- webhook, BATON_MAIL_TO (and BATON_MAIL_FROM) for one named mail. nil,
-- why when there is none.
function M.channel(cfg, name)
  local ch = cfg and cfg[name]
  if ch ~= nil then
    local bad = check_channel(name, ch)
    if bad then return nil, "EINVAL: " .. M.CONFIG .. ": " .. bad end
    local out = { name = name, type = type_of(name, ch) }
    for k, v in pairs(ch) do if k ~= "type" then out[k] = v end end
    return out
  end
  if name == "webhook" and (os.getenv("BATON_WEBHOOK_URL") or "") ~= "" then
    return { name = name, type = "webhook", url = os.getenv("BATON_WEBHOOK_URL"), env = true }
  end
  if name == "mail" and (os.getenv("BATON_MAIL_TO") or "") ~= "" then
    local from = os.getenv("BATON_MAIL_FROM")
    return { name = name, type = "mail", to = os.getenv("BATON_MAIL_TO"), env = true,
             from = from ~= "" and from or nil }
  end
  return nil, format("channel %s is not set in %s (baton notify set %s)", name, M.CONFIG,
    name == "mail" and "mail.to ADDRESS" or
      (name == "webhook" and "webhook.url URL" or (name .. ".type webhook " .. name .. ".url URL")))
end

-- Whether spec (a loaded job) is a notifier: a job with `on` and a
-- `channel` parameter.
function M.is_notifier(spec)
  local p = type(spec) == "table" and spec.params
  return type(spec) == "table" and spec.on ~= nil and type(p) == "table"
    and type(p.channel) == "string" and p.channel ~= ""
end

M.FIELDS, M.ALL_FIELDS, M.CHANNEL_NAME = FIELDS, ALL_FIELDS, CHANNEL_NAME
M.type_of, M.check_channel, M.check_url = type_of, check_channel, check_url
return M
