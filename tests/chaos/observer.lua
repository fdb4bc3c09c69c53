-- baton eval tests/chaos/observer.lua OUT PREFIX URL,URL,URL
-- The nemesis suite's independent witness of etcd: no libfaketime, no proxy,
-- its own connections straight to the members. It appends one JSON line per
-- observation to OUT:
--   {w, mono, type = "put"|"delete", key, create_revision, mod_revision,
--    lease [, value]}
--       every event under PREFIX (key without the prefix; mod_revision = the
--       event's revision; create_revision and lease of the key, for a delete
--       those it had, from prev_kv; value for runs/, running/ and queue/
--       keys). For a running/ marker, create_revision is the attempt's fence
--       and the value names its node and attempt. Three watchers, each
--       starting on a different member (w = 1..3), see every event: when a
--       member is killed or stopped the others still report on time, and the
--       checker takes the earliest sighting of each (key, rev).
--   {mono, type = "status", member, term, leader} when a member's raft term
--       or leader changes (each member polled every 0.5 s): elections.
--   {mono, type = "status-error", member, error} when a member stops answering.
--   {w, mono, type = "watch-error", error} when a watcher ends; it is made
--       again from the revision after the last one it delivered.
-- mono is baton.monotime() when the observation arrived here.
local out_path, P, urls = ...
assert(out_path and P and urls, "usage: observer.lua OUT PREFIX URL,URL,URL")
local json = baton.json
local out = assert(io.open(out_path, "a"))
out:setvbuf("line")

local function emit(t)
  t.mono = t.mono or baton.monotime()
  out:write(json.encode(t, { nul = "replace" }), "\n") -- (poisoned queue tasks hold a NUL)
end

local members = {}
for u in urls:gmatch("[^,]+") do members[#members + 1] = u end

local function rotated(i)
  local list = {}
  for k = 0, #members - 1 do list[#list + 1] = members[(i - 1 + k) % #members + 1] end
  return table.concat(list, ",")
end

local start = assert(baton.etcd.new { endpoints = urls }:get(P, { prefix = true, keys_only = true }))

local function watcher(i)
  local e = baton.etcd.new { endpoints = rotated(i), timeout = 2, connect_timeout = 0.5 }
  local from = start.revision + 1
  while true do
    local w, err = e:watch(P, { prefix = true, prev_kv = true, start_revision = from,
                               idle_timeout = 4 })
    if not w then
      emit { w = i, type = "watch-error", error = tostring(err) }
      baton.sleep(0.5)
    else
      while true do
        local evs, werr, code = w:next(5)
        if not evs then
          if code ~= "ETIMEDOUT" then
            emit { w = i, type = "watch-error", error = tostring(werr) }
            break
          end
        else
          local now = baton.monotime()
          for _, ev in ipairs(evs) do
            local kv, prev = ev.kv, ev.prev_kv
            local key = kv.key:sub(#P + 1)
            local src = ev.type == "delete" and prev or kv
            local line = { w = i, mono = now, type = ev.type, key = key,
                           mod_revision = kv.mod_revision,
                           create_revision = src and src.create_revision or nil,
                           lease = src and src.lease ~= "0" and src.lease or nil }
            if ev.type == "put" and (key:sub(1, 5) == "runs/" or key:sub(1, 6) == "queue/"
                                     or key:sub(1, 8) == "running/") then
              line.value = kv.value
            end
            emit(line)
            if kv.mod_revision >= from then from = kv.mod_revision + 1 end
          end
        end
      end
      w:cancel()
      baton.sleep(0.2)
    end
  end
end

local function poller(i)
  local e = baton.etcd.new { endpoints = members[i], timeout = 1, connect_timeout = 0.5 }
  local term, leader, failing
  while true do
    local st, err = e:status()
    if st then
      if st.raft_term ~= term or st.leader ~= leader then
        term, leader = st.raft_term, st.leader
        emit { type = "status", member = i, term = term, leader = tostring(leader) }
      end
      failing = false
    elseif not failing then
      failing = true
      emit { type = "status-error", member = i, error = tostring(err) }
    end
    baton.sleep(0.5)
  end
end

for i = 1, #members do
  baton.go(watcher, i)
  baton.go(poller, i)
end
baton.signal { "SIGTERM", "SIGINT" }
out:close()
baton.exit(0)
