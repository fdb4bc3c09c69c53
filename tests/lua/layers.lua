-- The shape of lua/baton, checked: dependencies point one way (the front
-- ends -> ops -> node and worker -> the rest), no require cycle (lazy
-- requires inside functions count), the size limits (no file over 600
-- lines, node/init.lua under 250, no function over 80 lines unless the
-- line above it says why: "-- long: ..."), docs/architecture.md's
-- "Where things are" names every module and only those, and the CLI only
-- parses and formats: no file of cli/ talks to etcd itself (baton.ops
-- does), but those on one list.
local T = require "tap"

local root = assert(os.getenv("BATON_ROOT"), "BATON_ROOT")
local list = assert(baton.exec { "sh", "-c", "cd \"$0\" && find lua/baton -name '*.lua' | sort", root }).stdout

-- A module's layer: a module may require its own layer's and lower
-- layers' modules. node and worker share a rank but not each other.
local FRONT = { ["baton.node.http"] = true, ["baton.node.api"] = true, ["baton.node.view"] = true } -- the node's HTTP face
-- The one upward edge: the node's wiring starts its HTTP face.
local WIRING = { ["baton.node"] = { ["baton.node.http"] = true } }
-- The protocol both ends of a node<->worker exchange speak lives with the
-- worker and depends on nothing above baton: it counts as below both.
local SHARED = { ["baton.worker.protocol"] = true }
local function layer(m)
  if SHARED[m] then return 1, "base" end
  if m:find("^baton%.cli%.") or FRONT[m] then return 4, "front end" end
  if m == "baton.ops" or m:find("^baton%.ops%.") then return 3, "ops" end
  if m == "baton.node" or m:find("^baton%.node%.") then return 2, "node" end
  if m == "baton.worker" or m:find("^baton%.worker%.") then return 2, "worker" end
  return 1, "base"
end

local function module_of(f)
  return (f:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", "."))
end

local files, mods, requires, lines_of = {}, {}, {}, {}
for f in list:gmatch("[^\n]+") do
  local m = module_of(f)
  files[#files + 1], mods[m] = f, f
  local src = {}
  for line in io.lines(root .. "/" .. f) do src[#src + 1] = line end
  lines_of[f] = src
  local req = {}
  for n, line in ipairs(src) do
    local code = line:gsub("%-%-.*$", "")
    for r in code:gmatch("require%s*%(?%s*[\"']([%w_%.]+)[\"']") do
      if r:find("^baton") then req[#req + 1] = { to = r, line = n } end
    end
  end
  requires[m] = req
end

-- 1. Direction.
local wrong = {}
for m, req in pairs(requires) do
  local rank, name = layer(m)
  for _, r in ipairs(req) do
    local rrank, rname = layer(r.to)
    if (rrank > rank or (rrank == rank and rank == 2 and rname ~= name)) and not (WIRING[m] or {})[r.to] then
      wrong[#wrong + 1] = ("%s:%d: %s (%s) requires %s (%s)"):format(mods[m], r.line, m, name, r.to, rname)
    end
  end
end
table.sort(wrong)
T.is(#wrong, 0, "every require points down: front ends -> ops -> node, worker -> the rest")
for _, w in ipairs(wrong) do T.diag(w) end

-- 2. No cycle (depth-first search; a grey module met again closes one).
local colour, cycles, stack = {}, {}, {}
local function visit(m)
  colour[m] = "grey"
  stack[#stack + 1] = m
  for _, r in ipairs(requires[m] or {}) do
    if mods[r.to] then
      if colour[r.to] == "grey" then
        local from
        for i = #stack, 1, -1 do if stack[i] == r.to then from = i break end end
        cycles[#cycles + 1] = table.concat(stack, " -> ", from) .. " -> " .. r.to
      elseif not colour[r.to] then
        visit(r.to)
      end
    end
  end
  stack[#stack] = nil
  colour[m] = "black"
end
local names = {}
for m in pairs(requires) do names[#names + 1] = m end
table.sort(names)
for _, m in ipairs(names) do if not colour[m] then visit(m) end end
T.is(#cycles, 0, "no require cycle, lazy requires included")
for _, c in ipairs(cycles) do T.diag(c) end

-- 3. Sizes.
local big, long = {}, {}
for _, f in ipairs(files) do
  local src = lines_of[f]
  local limit = f == "lua/baton/node/init.lua" and 250 or 600
  if #src > limit then big[#big + 1] = ("%s: %d lines (limit %d)"):format(f, #src, limit) end
  -- A function ends at the first "end" at its own indentation.
  for n, line in ipairs(src) do
    -- (strings and comments blanked first: a "function" in them is not one)
    local code = line:gsub("\\.", ""):gsub('"[^"]*"', '""'):gsub("'[^']*'", "''"):gsub("%-%-.*$", "")
    local ind = code:match("^(%s*)")
    local opens = code:find("%f[%w_]function%f[^%w_][%s%w_.:]*%(")
    if opens and not code:find("%f[%w_]end%f[^%w_][%s,)]*$") then
      local why = n > 1 and src[n - 1]:find("^%s*%-%- long:")
      for k = n + 1, #src do
        if src[k]:find("^" .. ind .. "end%f[^%w_]") then
          if k - n + 1 > 80 and not why then
            long[#long + 1] = ("%s:%d: %d lines: %s"):format(f, n, k - n + 1, line:match("^%s*(.-)%s*$"))
          end
          break
        end
      end
    end
  end
end
T.is(#big, 0, "no file of lua/baton over its limit")
for _, b in ipairs(big) do T.diag(b) end
T.is(#long, 0, "no function over 80 lines without a \"-- long:\" line saying why")
for _, l in ipairs(long) do T.diag(l) end

-- 4. The map: docs/architecture.md's "Where things are" names every module
-- of lua/baton/ (policies/ as a directory) and no file that is not there.
local doc = assert(io.open(root .. "/docs/architecture.md")):read("*a")
local map = doc:match("\n## Where things are\n(.-)\n## ")
T.ok(map, "docs/architecture.md has a \"Where things are\" section")
local named, in_tree = {}, {}
for path in (map or ""):gmatch("`([%w_/]+%.lua)`") do
  if not path:find("^tests/") and not path:find("^runtime/") then named[path] = true end
end
for _, f in ipairs(files) do
  local rel = f:gsub("^lua/baton/", "")
  if not rel:find("^policies/") then in_tree[rel] = true end
end
local unnamed, gone = {}, {}
for rel in pairs(in_tree) do if not named[rel] then unnamed[#unnamed + 1] = rel end end
for rel in pairs(named) do if not in_tree[rel] then gone[#gone + 1] = rel end end
table.sort(unnamed)
table.sort(gone)
T.is(#unnamed, 0, "every module of lua/baton/ is on the map")
for _, u in ipairs(unnamed) do T.diag("not on the map: " .. u) end
T.is(#gone, 0, "the map names no module that is not in the tree")
for _, g in ipairs(gone) do T.diag("on the map, not in lua/baton/: " .. g) end

-- 5. The CLI only parses and formats: no file of lua/baton/cli/ names the
-- etcd client (baton.etcd, or any x.etcd) or calls :get, :put, :txn,
-- :watch or :delete on anything, in code (comments and strings, long ones
-- too, are blanked first), except the files listed here.
local CLI_ETCD = {
  ["lua/baton/cli/elect.lua"] = "etcd's election recipe, through baton.concurrency",
  ["lua/baton/cli/logs.lua"] = "following a run: not moved into ops yet",
}
-- The end of the comment or string that starts at s of text (its first
-- character: - [ " '), or nil when none starts there.
local function skip(text, s)
  local c = text:sub(s, s)
  if c == "-" or c == "[" then
    local at = c == "-" and s + 2 or s
    if c == "-" and text:sub(s + 1, s + 1) ~= "-" then return nil end
    local eq = text:match("^%[(=*)%[", at)
    if eq then return select(2, text:find("]" .. eq .. "]", at, true)) or #text end
    if c == "[" then return nil end
    return (text:find("\n", s, true) or #text + 1) - 1
  end
  local k = s + 1
  while true do
    local q = text:find("[\\\n" .. c .. "]", k)
    if not q or text:sub(q, q) ~= "\\" then return q and q - (text:sub(q, q) == "\n" and 1 or 0) or #text end
    k = q + 2
  end
end
-- src (a file's lines) as code: each comment blanked, each string blanked
-- but its first character (so a call f "x" still shows), lines kept.
local function code_of(src)
  local text, parts, i = table.concat(src, "\n"), {}, 1
  while true do
    local s = text:find("[%-%[\"']", i)
    if not s then break end
    local e = skip(text, s)
    if e then
      local keep = text:sub(s, s) == "-" and "" or text:sub(s, s)
      parts[#parts + 1] = text:sub(i, s - 1) .. keep .. text:sub(s + #keep, e):gsub("[^\n]", " ")
      i = e + 1
    else
      parts[#parts + 1] = text:sub(i, s)
      i = s + 1
    end
  end
  parts[#parts + 1] = text:sub(i)
  local out = {}
  for line in (table.concat(parts) .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end
local CALLS = { "get", "put", "txn", "watch", "delete" }
local talks = {}
for _, f in ipairs(files) do
  if f:find("^lua/baton/cli/[^/]+%.lua$") and not CLI_ETCD[f] then
    for n, line in ipairs(code_of(lines_of[f])) do
      local bad = line:find("%.%s*etcd%f[^%w_]")
      for _, m in ipairs(CALLS) do bad = bad or line:find(":%s*" .. m .. "%s*[%(%{\"'%[]") end
      if bad then talks[#talks + 1] = ("%s:%d: %s"):format(f, n, lines_of[f][n]:match("^%s*(.-)%s*$")) end
    end
  end
end
T.is(#talks, 0, "no file of cli/ talks to etcd itself (baton.ops does), but those CLI_ETCD lists")
for _, t in ipairs(talks) do T.diag(t) end

T.done()
