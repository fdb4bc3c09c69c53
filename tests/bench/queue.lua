-- Helper of tests/bench/queue, run with `baton --prefix P eval`:
--
--   job DIR              puts job "bench" (queue = "bench"), whose run
--                        appends "<task id> <node> <epoch seconds>" to
--                        DIR/<node>.log (no etcd write of its own)
--   wait-loaded N S      waits (S seconds at most) until N nodes report
--                        job bench loaded in P status/bench/
--   wait-empty S         waits (S seconds at most) until P queue/bench/ is
--                        empty; prints "empty at=<epoch seconds> left=N"
--   check DIR N [KEYS]   reads DIR/*.log: executions, distinct tasks,
--                        duplicates, missing (of N), the first and last
--                        execution time, executions per node; with KEYS
--                        (the --json output of the push), the ids of up
--                        to 5 missing tasks (missing_ids=a,b)
local e = baton.etcd
local json = baton.json
local P = baton.config.prefix
if P:sub(-1) ~= "/" then P = P .. "/" end
local mode = arg[1]

if mode == "job" then
  local dir = arg[2]
  local src = ([[
return { queue = "bench", timeout = 60,
  run = function(ctx)
    local f = assert(io.open(%q .. "/" .. ctx.node .. ".log", "a"))
    f:write(ctx.task.key:match("[^/]+$"), " ", ctx.node, " ", string.format("%%.3f", baton.now()), "\n")
    f:close()
  end }
]]):format(dir)
  assert(e:put(P .. "jobs/bench", src))

elseif mode == "wait-loaded" then
  local n, limit = tonumber(arg[2]), tonumber(arg[3] or "60")
  local deadline = baton.monotime() + limit
  while baton.monotime() < deadline do
    local r = assert(e:get(P .. "status/bench/", { prefix = true }))
    local ok = 0
    for _, kv in ipairs(r.kvs) do
      local st = json.decode(kv.value)
      if type(st) == "table" and st.error == json.null then ok = ok + 1 end
    end
    if ok >= n then print("loaded n=" .. ok); baton.exit(0) end
    baton.sleep(0.05)
  end
  print("loaded timeout")
  baton.exit(1)

elseif mode == "wait-empty" then
  local limit = tonumber(arg[2] or "120")
  local deadline = baton.monotime() + limit
  local left
  while baton.monotime() < deadline do
    left = assert(e:get(P .. "queue/bench/", { prefix = true, count_only = true })).count
    if left == 0 then break end
    baton.sleep(0.05)
  end
  print(("empty at=%.3f left=%d"):format(baton.now(), left))

elseif mode == "check" then
  local dir, n = arg[2], tonumber(arg[3])
  local ls = assert(baton.exec { "sh", "-c", "ls " .. dir .. "/*.log 2>/dev/null" })
  local seen, execs, distinct, dup = {}, 0, 0, 0
  local first, last, per = math.huge, 0, {}
  for path in ls.stdout:gmatch("[^\n]+") do
    for line in io.lines(path) do
      local id, node, t = line:match("^(%S+) (%S+) (%S+)$")
      if id then
        execs = execs + 1
        t = tonumber(t)
        if t < first then first = t end
        if t > last then last = t end
        per[node] = (per[node] or 0) + 1
        if seen[id] then dup = dup + 1 else distinct = distinct + 1 end
        seen[id] = true
      end
    end
  end
  local nodes = {}
  for k, v in pairs(per) do nodes[#nodes + 1] = k .. ":" .. v end
  table.sort(nodes)
  local gone = {}
  if arg[4] then
    local f = assert(io.open(arg[4]))
    local pushed = json.decode(f:read("*a"))
    f:close()
    for _, key in ipairs(type(pushed) == "table" and pushed.keys or {}) do
      local id = key:match("[^/]+$")
      if not seen[id] and #gone < 5 then gone[#gone + 1] = id end
    end
  end
  print(("check execs=%d distinct=%d dup=%d missing=%d first=%.3f last=%.3f nodes=%s missing_ids=%s"):format(
    execs, distinct, dup, n - distinct, execs > 0 and first or 0, last, table.concat(nodes, ","),
    #gone > 0 and table.concat(gone, ",") or "-"))

else
  io.stderr:write("queue.lua: unknown mode " .. tostring(mode) .. "\n")
  baton.exit(2)
end
