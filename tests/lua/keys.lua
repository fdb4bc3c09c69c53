-- baton.keys, the one owner of the etcd key layout: its builders and
-- parsers round-trip (no etcd needed), and no file of lua/ assembles or
-- cuts a key by hand (a prefix joined to a kind's literal, an offset past
-- the prefix, the old builders).
local T = require "tap"
local keys = require "baton.keys"

local P = "/baton/"

-- 1. Building.
T.is(keys.key(P, "jobs", "backup"), "/baton/jobs/backup", "key: a job")
T.is(keys.key(P, "runs", "backup", "2026-11-29T02:00:00Z/3"), "/baton/runs/backup/2026-11-29T02:00:00Z/3",
     "key: a shard's run (the id holds a /)")
T.is(keys.key(P, "status", "backup", "n1"), "/baton/status/backup/n1", "key: two parts")
T.is(keys.key(P, "election"), "/baton/election", "key: a kind alone")
T.is(keys.key(P, "runs", "backup", nil, "x"), "/baton/runs/backup", "key: the parts end at a nil")
T.is(keys.key(P, "versions", "backup", 42), "/baton/versions/backup/42", "key: a number part")
T.is(keys.key(P, "notify", "outbox", "alerts", "x"), "/baton/notify/outbox/alerts/x", "key: notify/outbox")
T.is(keys.key(P, "config", "notify"), "/baton/config/notify", "key: config/notify")
T.is(keys.key(P, "clock", "ping", "n1"), "/baton/clock/ping/n1", "key: clock/ping")
T.is(keys.dir(P, "jobs"), "/baton/jobs/", "dir: every job")
T.is(keys.dir(P, "runs", "backup"), "/baton/runs/backup/", "dir: a job's runs")
T.is(keys.key("/other/prefix/", "nodes", "n1"), "/other/prefix/nodes/n1", "another prefix")
T.error_like(function() keys.key(P, "job", "x") end, "unknown kind of key job", "an unknown kind raises")
T.error_like(function() keys.key(nil, "jobs", "x") end, "the prefix must be a string", "no prefix raises")
T.error_like(function() keys.dir(P, "run") end, "unknown kind of key run", "dir: an unknown kind raises")

local r = keys.run(P, "backup", "2026-11-29T02:00:00Z")
T.is_deeply(r, {
  run = "/baton/runs/backup/2026-11-29T02:00:00Z",
  marker = "/baton/running/backup/2026-11-29T02:00:00Z",
  inflight = "/baton/inflight/backup/2026-11-29T02:00:00Z",
  pending = "/baton/pending/backup/2026-11-29T02:00:00Z",
  active = "/baton/active/backup",
  cancel = "/baton/cancel/backup/2026-11-29T02:00:00Z",
}, "run: the keys of one run")
T.is(keys.run(P, "backup", "2026-11-29T02:00:00Z/2").active, "/baton/active/backup/2",
     "run: a shard's run has a concurrency key per shard")
T.is(keys.run(P, "q", "1764381600000-0123456789abcdef").active, "/baton/active/q", "run: a queue task's")
T.is(keys.output(P, "backup", "2026-11-29T02:00:00Z"), "/baton/output/backup/2026-11-29T02:00:00Z/@",
     "output: every attempt's chunks")
T.is(keys.output(P, "backup", "2026-11-29T02:00:00Z", 2), "/baton/output/backup/2026-11-29T02:00:00Z/@2/",
     "output: one attempt's")

-- 2. Parsing: what was built comes back.
T.is(keys.rest(P, "jobs", keys.key(P, "jobs", "backup")), "backup", "rest: a job's name")
T.is(keys.rest(P, "nodes", "/baton/nodes/n1"), "n1", "rest: a node's name")
T.is(keys.rest(P, "jobs", "/baton/jobsx/backup"), nil, "rest: not a prefix of the kind's dir")
T.is(keys.rest(P, "jobs", "/other/jobs/backup"), nil, "rest: another prefix")
T.is(keys.rest(P, "jobs", "/baton/jobs"), nil, "rest: the kind without its /")
T.is(keys.rest(P, "jobs", "/baton/jobs/"), "", "rest: the kind's dir itself: empty")
T.error_like(function() keys.rest(P, "job", "/baton/job/x") end, "unknown kind of key job", "rest: misuse raises")
for _, id in ipairs { "2026-11-29T02:00:00Z", "2026-11-29T02:00:00.123Z", "2026-11-29T02:00:00Z/3",
                      "1764381600000-0123456789abcdef",
                      "2026-11-29T02:00:04.120Z~extract~2026-11-29T02:00:00Z~succeeded" } do
  for _, kind in ipairs { "runs", "running", "inflight", "pending", "cancel", "trigger" } do
    local job, got = keys.split(P, kind, keys.key(P, kind, "backup", id))
    T.is(job .. " " .. got, "backup " .. id, "split " .. kind .. ": " .. id)
  end
end
local k = keys.run(P, "backup", "2026-11-29T02:00:00Z/3")
T.is(table.concat({ keys.split(P, "running", k.marker) }, " "), "backup 2026-11-29T02:00:00Z/3",
     "split: a run's marker")
T.is(keys.split(P, "pending", "/baton/pending/backup"), nil, "split: no id")
T.is(keys.split(P, "pending", "/baton/pending/backup/"), nil, "split: an empty id")
T.is(keys.split(P, "pending", "/baton/runs/backup/x"), nil, "split: another kind")
local kind, rest = keys.kind(P, "/baton/policies/fast")
T.is(kind .. " " .. rest, "policies fast", "kind: a policy's key")
kind, rest = keys.kind(P, "/baton/policy-status/fast/n1")
T.is(kind .. " " .. rest, "policy-status fast/n1", "kind: a policy status's key")
T.is(keys.kind(P, "/baton/unknown/x"), nil, "kind: not a kind of baton's")
T.is(keys.kind(P, "/other/jobs/x"), nil, "kind: another prefix")
T.is(keys.kind(P, "/baton/jobs"), nil, "kind: no / after the kind")
T.is(keys.under(keys.dir(P, "runs", "backup"), "/baton/runs/backup/2026-11-29T02:00:00Z/3"), "2026-11-29T02:00:00Z/3",
     "under: what follows a dir")
T.is(keys.under(keys.dir(P, "runs", "backup"), "/baton/runs/backup/"), "", "under: the dir itself")
T.is(keys.under(keys.dir(P, "runs", "backup"), "/baton/runs/backupx/1"), nil, "under: not below the dir")
for kind_ in pairs(keys.KINDS) do
  local got, tail = keys.kind(P, keys.key(P, kind_, "a", "b"))
  T.is(got .. " " .. tail, kind_ .. " a/b", "kind round trip: " .. kind_)
end

-- 3. No key is assembled or cut outside keys.lua.
local root = os.getenv("BATON_ROOT") or "."
local rules = {
  { "%f[%w_]P%s*%.%.", "the prefix P joined to something" },
  { "%.P%s*%.%.", "a node's prefix (self.P, node.P) joined to something" },
  { "prefix%(%)%s*%.%.", "prefix() joined to something" },
  { "#%s*[%w_%.]*P%s*[%+%-]", "an offset past the prefix (#P + N)" },
  { "#%s*U%.key", "an offset past a key (#U.key(...))" },
  { ":sub%(%s*#", "a key cut by a length (keys.under, keys.rest, keys.split do that)" },
  { "%f[%w_]U%.key%(", "cli/util.lua's old key builder" },
  { "%f[%w_]util%.key%(", "cli/util.lua's old key builder" },
  { "[%w_]%.keys%(", "runs.lua's old key builder (runs.keys)" },
  { "%f[%w_]M%.key%(", "cli/util.lua's old key builder" },
}
for kind_ in pairs(keys.KINDS) do
  rules[#rules + 1] = { '["\']' .. kind_:gsub("%-", "%%-") .. "/", "a literal that starts with the kind " .. kind_ .. "/" }
end
local files = assert(baton.exec { "sh", "-c", "cd \"$0\" && find lua -name '*.lua' | sort", root }).stdout
local bad = {}
for f in files:gmatch("[^\n]+") do
  if f ~= "lua/baton/keys.lua" then
    local n = 0
    for line in io.lines(root .. "/" .. f) do
      n = n + 1
      -- (a comment may name keys; a "--" in a string ends the check early;
      -- "-- keys: not a key" marks a line that only looks like one)
      local code = line:find("%-%- keys: not a key") and "" or line:gsub("%-%-.*$", "")
      for _, rule in ipairs(rules) do
        if code:find(rule[1]) then bad[#bad + 1] = ("%s:%d: %s: %s"):format(f, n, rule[2], line:match("^%s*(.-)%s*$")) end
      end
    end
  end
end
T.is(#bad, 0, "no key assembled or cut outside lua/baton/keys.lua")
for i = 1, math.min(#bad, tonumber(os.getenv("KEYS_SHOW")) or 80) do T.diag(bad[i]) end

T.done()
