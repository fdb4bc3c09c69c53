-- Helper of tests/bench/etcd-transport: baton's half (baton.etcd as baton
-- itself uses it, over whatever transport this baton has). Run as
--
--   baton --endpoints URL eval etcd-transport.lua WORKLOAD ETCD_PID N CONC BASE [RATE]
--
-- WORKLOAD is one of
--   setup    makes sure the marker key BASE/marker exists and puts the
--            1000 keys BASE/k/000..999; prints "fence=<its create_revision>"
--   put      N txns like ctx:put_fenced: compare create_revision of
--            BASE/marker == its fence (holds), success: put BASE/k/<i % 1000>
--            (100-byte value)
--   get      N single-key range gets of BASE/k/<i % 1000>
--   nested   N txns of 32 nested txns each (as the node's write batcher
--            sends claims and ends of runs), each nested one a put txn as
--            above on its own key
-- with CONC requests in flight (CONC coroutines sharing one client), after
-- a warm-up of 4*CONC requests; with RATE > 0, request i starts no earlier
-- than i/RATE seconds after the first (at most CONC in flight still). The same requests as tests/bench/grpc/bench.js
-- sends. Prints "ticks=<etcd utime+stime, clock ticks> wall_us=<..> n=<N>
-- self_ticks=<this process's utime+stime> etcd_syscr=<..> etcd_syscw=<..>",
-- etcd's CPU read from /proc/ETCD_PID/stat, its read and write system calls
-- (sockets and files) from /proc/ETCD_PID/io and this process's CPU from
-- /proc/self/stat, around the N requests only.
local workload, pid = arg[1], arg[2]
local n, conc = tonumber(arg[3]), tonumber(arg[4])
local base = arg[5]
local rate = tonumber(arg[6] or "0")
assert(workload and pid and n and conc and base, "usage: WORKLOAD ETCD_PID N CONC BASE")
local e = baton.etcd
local mono = baton.monotime
local marker = base .. "/marker"
local value = string.rep("v", 100)
local NESTED = 32

local function key(i) return ("%s/k/%03d"):format(base, i % 1000) end

-- utime + stime of a process (fields 14 and 15 of /proc/PID/stat; counted
-- after the ")" that ends the command name, which may hold spaces): etcd's,
-- or with "self" this process's, all its threads
local function ticks(p)
  local f = assert(io.open("/proc/" .. p .. "/stat"))
  local s = f:read("*a")
  f:close()
  local fields = {}
  for w in s:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
  return tonumber(fields[12]) + tonumber(fields[13])
end

-- read and write system calls of a process (syscr, syscw of /proc/PID/io)
local function syscalls(p)
  local f = assert(io.open("/proc/" .. p .. "/io"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("syscr: (%d+)")), tonumber(s:match("syscw: (%d+)"))
end

local fence
local function put_txn(i)
  return {
    compare = { { key = marker, target = "create", op = "==", value = fence } },
    success = { { put = { key = key(i), value = value } } },
  }
end

local ops = {
  put = function(i)
    local r = assert(e:txn(put_txn(i)))
    assert(r.succeeded, "put txn: compare failed")
  end,
  get = function(i)
    local r = assert(e:get(key(i)))
    assert(r.kvs[1], "get: no key")
  end,
  nested = function(i)
    local success = {}
    for j = 1, NESTED do success[j] = { txn = put_txn(i * NESTED + j) } end
    local r = assert(e:txn { success = success })
    assert(r.succeeded and #r.responses == NESTED, "nested txn: wrong answer")
    for j = 1, NESTED do assert(r.responses[j].succeeded, "nested txn: compare failed") end
  end,
}

local m = assert(e:get(marker))
if not m.kvs[1] then
  assert(e:put(marker, "fence"))
  m = assert(e:get(marker))
end
fence = m.kvs[1].create_revision

if workload == "setup" then
  for i = 0, 999, 100 do
    local success = {}
    for j = i, i + 99 do success[#success + 1] = { put = { key = key(j), value = value } } end
    assert(e:txn { success = success })
  end
  print("fence=" .. fence)
  return
end

local op = assert(ops[workload], "unknown workload " .. workload)

-- CONC coroutines take the next index until N are done; the last one to
-- finish reads the clock and etcd's CPU.
local function run(count, done, paced)
  local next_i, running = 0, conc
  local t0 = mono()
  for _ = 1, conc do
    baton.go(function()
      while next_i < count do
        next_i = next_i + 1
        local i = next_i
        if paced then
          local wait = t0 + (i - 1) / rate - mono()
          if wait > 0 then baton.sleep(wait) end
        end
        op(i)
      end
      running = running - 1
      if running == 0 then done() end
    end)
  end
end

run(4 * conc, function()
  local r0, w0 = syscalls(pid)
  local t0, c0, s0 = mono(), ticks(pid), ticks("self")
  run(n, function()
    local t1, c1, s1 = mono(), ticks(pid), ticks("self")
    local r1, w1 = syscalls(pid)
    print(("ticks=%d wall_us=%d n=%d self_ticks=%d etcd_syscr=%d etcd_syscw=%d"):format(
      c1 - c0, (t1 - t0) * 1e6, n, s1 - s0, r1 - r0, w1 - w0))
  end, rate > 0)
end)
