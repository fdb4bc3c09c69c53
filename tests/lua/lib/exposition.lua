-- A reader of Prometheus's text exposition format 0.0.4 for tests: parses
-- what a node's /metrics says and lists what breaks the format, including
-- what `promtool check metrics` lets pass (a family split in two, a series
-- twice, buckets out of order or not cumulative, a missing le="+Inf" or
-- one that differs from _count; docs/operations.md, "Metrics").
--
--   local X = require "exposition"
--   local fams, problems = X.parse(text)
--   fams["baton_runs_total"].type                  --> "counter"
--   X.value(fams, "baton_runs_total", { job_name = "a", state = "failed" })  --> n or nil
--   X.sum(fams, "baton_runs_total", { state = "succeeded" })   --> sum over matching series
local M = {}

local function number(s)
  if s == "+Inf" then return math.huge end
  if s == "-Inf" then return -math.huge end
  if s == "NaN" then return 0 / 0 end
  return tonumber(s)
end

local UNESCAPE = { ["\\"] = "\\", ['"'] = '"', n = "\n" }

-- Parses '{a="x",b="y"}' at position i of line; returns the labels and the
-- position after '}', or nil and a message.
local function parse_labels(line, i)
  local labels, n = {}, 0
  i = i + 1
  while true do
    if line:sub(i, i) == "}" then return labels, i + 1, n end
    local name, j = line:match("^([a-zA-Z_][a-zA-Z0-9_]*)=\"()", i)
    if not name then return nil, "bad label name at column " .. i end
    local buf = {}
    i = j
    while true do
      local c = line:sub(i, i)
      if c == "" then return nil, "unterminated label value" end
      if c == '"' then break end
      if c == "\\" then
        local e = UNESCAPE[line:sub(i + 1, i + 1)]
        if not e then return nil, "bad escape in label value" end
        buf[#buf + 1] = e
        i = i + 2
      elseif c == "\n" then
        return nil, "raw newline in label value"
      else
        buf[#buf + 1] = c
        i = i + 1
      end
    end
    if labels[name] ~= nil then return nil, "label " .. name .. " twice" end
    labels[name] = table.concat(buf)
    n = n + 1
    i = i + 1
    local c = line:sub(i, i)
    if c == "," then i = i + 1 elseif c ~= "}" then return nil, "',' or '}' expected at column " .. i end
  end
end

local function label_key(labels, skip)
  local names = {}
  for k in pairs(labels) do if k ~= skip then names[#names + 1] = k end end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. labels[k] end
  return table.concat(parts, "\0")
end

-- Returns families (name -> {name, type, help, samples = {{name, labels,
-- value}}}) and a list of problems (empty when the text is well formed).
function M.parse(text)
  local fams, problems, order = {}, {}, {}
  local function bad(msg) problems[#problems + 1] = msg end
  if text:sub(-1) ~= "\n" then bad("the text does not end with a newline") end
  if text:find("\r", 1, true) then bad("carriage return in the text") end
  local current, seen_series = nil, {}
  local function family(name, create)
    local f = fams[name]
    if not f and create then
      f = { name = name, samples = {} }
      fams[name] = f
      order[#order + 1] = f
    end
    return f
  end
  -- The family a sample name belongs to: itself, or a histogram's base.
  local function owner(name)
    if fams[name] then return fams[name] end
    local base = name:match("^(.*)_bucket$") or name:match("^(.*)_sum$") or name:match("^(.*)_count$")
    if base and fams[base] and (fams[base].type == "histogram" or fams[base].type == "summary") then
      return fams[base]
    end
  end
  -- A family's lines come together: once another family's line came, a
  -- line of the first is a split.
  local function switch(f)
    if current == f then return end
    if f.done_with then bad(f.name .. ": family split") end
    if current then current.done_with = true end
    current = f
  end
  local n = 0
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    if line == "" then -- luacheck: ignore 542 (ignored)
    elseif line:sub(1, 1) == "#" then
      local kind, name, rest = line:match("^# (%u+) ([^ ]+) ?(.*)$")
      if kind == "HELP" or kind == "TYPE" then
        local f = family(name, true)
        switch(f)
        if f[kind] then bad(name .. ": " .. kind .. " twice") end
        if #f.samples > 0 then bad(name .. ": " .. kind .. " after its samples") end
        f[kind] = true
        if kind == "TYPE" then f.type = rest else f.help = rest end
      end
    else
      local name, i = line:match("^([a-zA-Z_:][a-zA-Z0-9_:]*)()")
      if not name then bad("line " .. n .. ": no metric name: " .. line) else
        local labels, rest = {}, nil
        if line:sub(i, i) == "{" then
          local l, j = parse_labels(line, i)
          if not l then bad("line " .. n .. ": " .. j .. ": " .. line) end
          labels, i = l or {}, j or #line + 1
        end
        rest = line:sub(i)
        local v, ts = rest:match("^ (%S+)(.*)$")
        if not v then bad("line " .. n .. ": no value: " .. line)
        elseif ts ~= "" then bad("line " .. n .. ": more than a value (a timestamp?): " .. line)
        elseif number(v) == nil then bad("line " .. n .. ": bad value " .. v) end
        local f = owner(name)
        if not f then
          f = family(name, true)
          f.type = "untyped"
          bad(name .. ": sample without TYPE")
        end
        switch(f)
        local sk = name .. "\1" .. label_key(labels)
        if seen_series[sk] then bad("line " .. n .. ": series twice: " .. line) end
        seen_series[sk] = true
        f.samples[#f.samples + 1] = { name = name, labels = labels, value = number(v or "") }
      end
    end
  end
  for _, f in ipairs(order) do
    if not f.HELP then bad(f.name .. ": no HELP") end
    if f.type == "counter" and not f.name:match("_total$") then bad(f.name .. ": counter without _total") end
    if f.type ~= "counter" and f.name:match("_total$") then bad(f.name .. ": _total on a " .. tostring(f.type)) end
    if f.type == "histogram" then
      -- per series (labels without le): buckets in order, cumulative, +Inf == _count
      local groups, gorder = {}, {}
      for _, s in ipairs(f.samples) do
        local k = label_key(s.labels, "le")
        local g = groups[k]
        if not g then g = { buckets = {} }; groups[k] = g; gorder[#gorder + 1] = k end
        if s.name == f.name .. "_bucket" then
          local le = s.labels.le and number(s.labels.le)
          if not le then bad(f.name .. ": bucket without le") else
            g.buckets[#g.buckets + 1] = { le = le, n = s.value }
          end
        elseif s.name == f.name .. "_count" then g.count = s.value
        elseif s.name == f.name .. "_sum" then g.sum = s.value end
      end
      for _, k in ipairs(gorder) do
        local g, what = groups[k], f.name .. "{" .. k:gsub("%z", ",") .. "}"
        local b = g.buckets
        for j = 2, #b do
          if not (b[j].le > b[j - 1].le) then bad(what .. ": le not increasing") end -- luacheck: ignore 581 (NaN too)
          if b[j].n < b[j - 1].n then bad(what .. ": buckets not cumulative") end
        end
        if #b == 0 or b[#b].le ~= math.huge then bad(what .. ': no le="+Inf" bucket')
        elseif b[#b].n ~= g.count then bad(what .. ': le="+Inf" differs from _count') end
        if g.sum == nil then bad(what .. ": no _sum") end
      end
    end
  end
  return fams, problems
end

local function matches(s, labels)
  for k, v in pairs(labels or {}) do if s.labels[k] ~= v then return false end end
  return true
end

-- The value of the one sample of family `name` (the sample name itself for
-- counters and gauges) whose labels include `labels`; nil when none.
function M.value(fams, name, labels, sample)
  local f = fams[name]
  if not f then return nil end
  for _, s in ipairs(f.samples) do
    if s.name == (sample or name) and matches(s, labels) then return s.value end
  end
end

-- The sum over every sample of family `name` whose labels include
-- `labels` (0 when none), and how many there were.
function M.sum(fams, name, labels, sample)
  local f, total, count = fams[name], 0, 0
  for _, s in ipairs(f and f.samples or {}) do
    if s.name == (sample or name) and matches(s, labels) then
      total, count = total + s.value, count + 1
    end
  end
  return total, count
end

return M
