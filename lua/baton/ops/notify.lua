-- The notification channels as `baton notify` shows and changes them: P
-- config/notify with the notifications not delivered yet (P
-- notify/outbox/), and the edits of set and unset. The format, its checks
-- and the outbox are baton.notify's (the engine the notifiers run); here
-- they are read and written under the configured prefix.
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"
local notify = require "baton.notify"

local json = baton.json
local ipairs, pcall, select, type = ipairs, pcall, select, type

local M = {}

local function etcd() return baton.etcd end

-- notify_show([limit]) --> {key, revision, config, error, pending,
-- pending_total} (`baton notify show --json`): the stored channels
-- (checked: error says why they are not valid, config is then what was
-- stored, if it is a JSON object), and the outbox's entries, oldest first
-- (at most limit, default 1000; pending_total counts them all). Second
-- value: the text stored at P config/notify, nil when there is none.
function M.notify_show(limit)
  local e, P = etcd(), util.prefix()
  local key = keys.key(P, "config", "notify")
  local g, gerr, gcode = e:get(key)
  if not g then return nil, gerr, gcode end
  local kv = g.kvs[1]
  local cfg, cerr
  if kv then cfg, cerr = notify.decode(kv.value, true) end
  local pending, total, pcode = notify.pending(e, P, limit or 1000)
  if not pending then return nil, total, pcode end
  local raw = kv and select(2, pcall(json.decode, kv.value))
  return { key = key, revision = kv and kv.mod_revision or json.null,
           config = (cfg or (type(raw) == "table" and raw)) or json.null,
           error = cerr or json.null, pending = json.array(pending), pending_total = total }, kv and kv.value
end

-- Applies the edits (notify.setter's, notify.unsetter's) in one write of P
-- config/notify (notify.update).
local function update(edits)
  return notify.update(etcd(), util.prefix(), function(cfg)
    for _, edit in ipairs(edits) do
      local ok, why = edit(cfg)
      if not ok then return nil, why end
    end
    return true
  end)
end

-- notify_set(settings) --> {config, revision, key}: settings = {{channel,
-- setting, value}, ...} (a CHANNEL.SETTING as notify.parse_path splits
-- it) set in one write that holds only if nothing changed the channels
-- meanwhile; the whole result is checked first (EINVAL: nothing stored).
function M.notify_set(settings)
  local edits = {}
  for _, s in ipairs(settings) do edits[#edits + 1] = notify.setter(s[1], s[2], s[3]) end
  return update(edits)
end

-- notify_unset(channel [, setting]) --> {config, revision, key}: removes
-- the setting, or the whole channel (the key goes when no channel is
-- left); EINVAL when it is not set.
function M.notify_unset(channel, setting)
  return update { notify.unsetter(channel, setting) }
end

return M
