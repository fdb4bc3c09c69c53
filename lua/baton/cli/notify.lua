-- baton notify show|set|unset: where the notifiers send (P config/notify,
-- read by each notifier run: a change applies at once on every node) and
-- the notifications not delivered yet (P notify/outbox/), read and written
-- by baton.ops (ops/notify.lua); this file parses and formats. The format
-- and the notifiers' behaviour: lua/baton/notify.lua and docs/guide.md,
-- "Alerting".
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local keys = require "baton.keys"
local notify = require "baton.notify"
local ops = require "baton.ops"

local format = string.format

local USAGES = {
  show = "baton notify show [--json]",
  set = "baton notify set CHANNEL.SETTING VALUE [CHANNEL.SETTING VALUE ...] [--json]",
  unset = "baton notify unset CHANNEL[.SETTING] [--json]",
}
local ORDER = { "show", "set", "unset" }
local USAGE = "baton notify show|set|unset ..."
for _, k in ipairs(ORDER) do USAGE = USAGE .. "\n       " .. USAGES[k] end
local HELPS = {
  show = [[The channels stored in <prefix>config/notify, and the notifications that
are not delivered yet (<prefix>notify/outbox/), oldest first: the notifier
job, the event, since when, the failed attempts and the last error.
--json prints {key, revision, config, error, pending, pending_total}.]],
  set = [[Sets settings of channels in <prefix>config/notify, in one write that
holds only if nothing changed it meanwhile; every notifier reads it at its
next message, on every node, with no restart. Settings:
  webhook channels: url (http:// or https://), or url_secret (the name of a
                    node secret holding the URL, which the notifier job must
                    list in its secrets), timeout (seconds, default 15)
  mail channels:    to (addresses, comma-separated), from (one address)
  any channel:      type (webhook or mail; defaults to the channel's name
                    when that is webhook or mail)
Examples:
  baton notify set webhook.url https://hooks.slack.com/services/T0/B0/XX
  baton notify set mail.to "ops@example.com, dba@example.com"
  baton notify set oncall.type webhook oncall.url_secret ONCALL_URL
Setting url removes url_secret and the other way round. The whole result
is checked before it is stored; nothing is stored when a setting is wrong.
--json prints {config, revision, key}.]],
  unset = [[Removes a setting, or a whole channel, from <prefix>config/notify
(the key goes when no channel is left). --json prints {config, revision, key}.]],
}
local HELP = [[Where the notifiers (jobs/notify-webhook.lua, jobs/notify-mail.lua) send,
stored in etcd at <prefix>config/notify, and what they could not send yet.
baton notify SUBCOMMAND --help says more; docs/guide.md, "Alerting".]]
local current

local function usage(msg)
  return A.usage(current and ("notify " .. current) or "notify", current and USAGES[current] or USAGE, msg)
end
local function die(sub, err) return A.die("notify " .. sub .. ": " .. err) end

local function when(t)
  return type(t) == "number" and os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t)) or "-"
end

local sub = {}

function sub.show(pos, opts)
  if pos[2] then return usage("unexpected argument \"" .. pos[2] .. "\"") end
  local r, stored = ops.notify_show(1000)
  if not r then return die("show", stored) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  local key, cfg, pending, total = r.key, r.config, r.pending, r.pending_total
  if not stored then
    io.stdout:write(format("no channels in %s (baton notify set webhook.url URL, baton notify set mail.to ADDRESS)\n",
      key))
  elseif r.error ~= baton.json.null then
    io.stdout:write(format("%s (revision %d) is not valid: %s\n", key, r.revision, r.error:gsub("^EINVAL: ", "")))
    U.write(true, stored, "\n")
  else
    io.stdout:write(format("channels in %s (revision %d):\n", key, r.revision))
    local rows = {}
    for _, name in ipairs(U.sorted_keys(cfg)) do
      rows[#rows + 1] = { "  " .. name, notify.type_of(name, cfg[name]), notify.settings_text(name, cfg[name]) }
    end
    U.print_table({ "  CHANNEL", "TYPE", "SETTINGS" }, rows)
  end
  if total == 0 then
    io.stdout:write("not delivered: none\n")
  else
    io.stdout:write(format("not delivered: %d (%s)\n", total, keys.dir(U.prefix(), "notify", "outbox")))
    local rows = {}
    for _, p in ipairs(pending) do
      rows[#rows + 1] = { "  " .. tostring(p.job), tostring(p.channel or "-"),
        format("%s %s", tostring(p.event_job or "?"), tostring(p.event_state or "?")), when(p.since),
        tostring(p.attempts or "-"), tostring(p.error or "-") }
    end
    U.print_table({ "  JOB", "CHANNEL", "EVENT", "SINCE", "ATTEMPTS", "LAST ERROR" }, rows)
    if total > #pending then io.stdout:write(format("  ... and %d more\n", total - #pending)) end
  end
  baton.exit(0)
end

-- Prints the result of set/unset, and the channel lines as they now are.
local function done(what, r, opts)
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(format("%s in %s (revision %d)\n", what, r.key, r.revision))
  for _, name in ipairs(U.sorted_keys(r.config)) do
    io.stdout:write(format("  %s  %s  %s\n", name, notify.type_of(name, r.config[name]),
      U.escape(notify.settings_text(name, r.config[name]))))
  end
  baton.exit(0)
end

function sub.set(pos, opts)
  if not pos[2] then return usage("needs CHANNEL.SETTING VALUE") end
  local settings, names = {}, {}
  for i = 2, #pos, 2 do
    local name, field = notify.parse_path(pos[i], true)
    if not name then return usage(field) end
    if pos[i + 1] == nil then return usage(pos[i] .. " needs a VALUE") end
    settings[#settings + 1] = { name, field, pos[i + 1] }
    names[#names + 1] = pos[i]
  end
  local r, err = ops.notify_set(settings)
  if not r then return die("set", err) end
  return done("set " .. table.concat(names, ", "), r, opts)
end

function sub.unset(pos, opts)
  if not pos[2] then return usage("needs CHANNEL or CHANNEL.SETTING") end
  if pos[3] then return usage("unexpected argument \"" .. pos[3] .. "\"") end
  local name, field = notify.parse_path(pos[2])
  if not name then return usage(field) end
  local r, err = ops.notify_unset(name, field)
  if not r then return die("unset", err) end
  return done("removed " .. pos[2], r, opts)
end

local FLAGS = { show = { json = "flag" }, set = { json = "flag" }, unset = { json = "flag" } }

return function(...)
  return A.dispatch("notify", { ... }, { sub = sub, usages = USAGES, helps = HELPS, usage = USAGE,
    help = HELP, flags = FLAGS, fail = usage, select = function(what) current = what end })
end
