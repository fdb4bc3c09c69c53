-- examples/nightly-backup/report.lua: what happened to each instant of the
-- nightly-backup job. `baton eval report.lua` (with the nodes' prefix)
-- prints, per instant: the node that ran it, its attempts (an attempt whose
-- node died shows as "lost"), and the backups that really completed (the
-- keys the job wrote with ctx:put_fenced under <prefix>backups/done/).
-- Exits 0 when no instant has more than one completed backup and every
-- succeeded run has exactly one.
local P = baton.config.prefix
if P:sub(-1) ~= "/" then P = P .. "/" end
local e = baton.etcd
local runs = assert(e:get(P .. "runs/nightly-backup/", { prefix = true }))
local done = assert(e:get(P .. "backups/done/", { prefix = true, keys_only = true }))
local completed = {}
for _, kv in ipairs(done.kvs) do
  local instant, who = kv.key:sub(#P + #"backups/done/" + 1):match("^([^/]+)/(.+)$")
  if instant then
    completed[instant] = completed[instant] or {}
    table.insert(completed[instant], who)
  end
end
local rows, bad = {}, 0
for _, kv in ipairs(runs.kvs) do
  local instant = kv.key:match("[^/]+$")
  local rec = baton.json.decode(kv.value) or {}
  local hist = {}
  for _, a in ipairs(rec.attempts or {}) do
    if a.attempt ~= rec.attempt then
      hist[#hist + 1] = ("attempt %s on %s %s"):format(tostring(a.attempt), tostring(a.node), tostring(a.state))
    end
  end
  local c = completed[instant] or {}
  table.sort(c)
  local ok = (#c <= 1) and (rec.state ~= "succeeded" or #c == 1)
  if not ok then bad = bad + 1 end
  rows[#rows + 1] = ("%-21s %-8s %-8s %-10s %-28s %s%s"):format(instant, tostring(rec.node),
    tostring(rec.attempt), tostring(rec.state), #c == 0 and "-" or table.concat(c, " "),
    #hist > 0 and table.concat(hist, "; ") or "", ok and "" or "   <-- WRONG")
end
print(("%-21s %-8s %-8s %-10s %-28s %s"):format("INSTANT", "NODE", "ATTEMPT", "STATE",
  "COMPLETED BACKUPS", "EARLIER ATTEMPTS"))
for _, r in ipairs(rows) do print(r) end
print(("%d instants; %s"):format(#rows, bad == 0
  and "no instant backed up twice, every succeeded run backed up once"
  or (bad .. " instants with a wrong number of completed backups")))
baton.exit(bad == 0 and 0 or 1)
