-- A Prometheus registry of counters, gauges and histograms, rendered in
-- the text exposition format 0.0.4: each family's lines together, HELP and
-- TYPE once before its samples, series in a stable (sorted) order, label
-- values escaped, histogram buckets cumulative and ending in le="+Inf"
-- (equal to _count), no timestamps. Nothing here waits.
--
--   local prom = require "baton.prom"
--   local reg = prom.new()
--   local c = reg:counter("baton_x_total", "What it counts.", { "job_name" })
--   c:inc({ job_name = "backup" })         c:inc(labels, n)   (n >= 0)
--   local g = reg:gauge("baton_y", "...")  g:set(nil, 3)
--   local h = reg:histogram("baton_z_seconds", "...", { "job_name" }, { 0.1, 1, 10 })
--   h:observe({ job_name = "backup" }, 0.42)
--   reg:forget("job_name", "backup")       drops every series of that job
--   reg:render()                           --> the text
local type, pairs, ipairs, tostring, error, select = type, pairs, ipairs, tostring, error, select
local setmetatable, pcall = setmetatable, pcall
local concat, sort = table.concat, table.sort
local huge = math.huge

local M = {}

---------------------------------------------------------------------------
-- output buffer: LuaJIT's string.buffer when there is one, else a table

local newbuf
do
  local ok, sb = pcall(require, "string.buffer")
  if ok and type(sb) == "table" and sb.new then
    newbuf = function(size) return sb.new(size) end
  else
    local Buf = {}
    Buf.__index = Buf
    function Buf:put(...)
      local n = self.n
      for i = 1, select("#", ...) do
        n = n + 1
        self[n] = tostring((select(i, ...)))
      end
      self.n = n
      return self
    end
    function Buf:tostring() return concat(self, "", 1, self.n) end
    newbuf = function() return setmetatable({ n = 0 }, Buf) end
  end
end

---------------------------------------------------------------------------
-- formatting

local NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
local LABEL = "^[a-zA-Z_][a-zA-Z0-9_]*$"

-- A sample value as Go's ParseFloat reads it: numbers as Lua prints them
-- (%.14g), and the three that Lua spells otherwise.
local function value(v)
  if v ~= v then return "NaN" end
  if v == huge then return "+Inf" end
  if v == -huge then return "-Inf" end
  return v
end

local ESC_LABEL = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }
local ESC_HELP = { ["\\"] = "\\\\", ["\n"] = "\\n" }

function M.escape_label(s) return (s:gsub('[\\"\n]', ESC_LABEL)) end

-- A bucket bound as written in le="...": %.14g as for values ("0.005",
-- "60"), "+Inf" for the last.
local function le(b)
  if b == huge then return "+Inf" end
  return tostring(b)
end

---------------------------------------------------------------------------
-- the registry

local Registry = {}
Registry.__index = Registry
local Family = {}
Family.__index = Family

function M.new()
  return setmetatable({ families = {}, by_name = {} }, Registry)
end

local function check_labels(fn, labelnames)
  labelnames = labelnames or {}
  if type(labelnames) ~= "table" then error(fn .. ": label names: table expected", 3) end
  for _, l in ipairs(labelnames) do
    if type(l) ~= "string" or not l:match(LABEL) or l:sub(1, 2) == "__" or l == "le" then
      error(fn .. ": bad label name " .. tostring(l), 3)
    end
  end
  return labelnames
end

-- extra: fields the family needs before its first series (a histogram's
-- bounds).
local function family(reg, kind, fn, name, help, labelnames, extra)
  if type(name) ~= "string" or not name:match(NAME) then error(fn .. ": bad metric name " .. tostring(name), 3) end
  if reg.by_name[name] then error(fn .. ": " .. name .. " is registered already", 3) end
  if type(help) ~= "string" then error(fn .. ": help text expected", 3) end
  local f = setmetatable({
    reg = reg, name = name, kind = kind, labelnames = check_labels(fn, labelnames),
    help = (help:gsub("[\\\n]", ESC_HELP)),
    -- key (the label values joined by "\0") -> series:
    --   counter, gauge: { 'name{a="x",b="y"} ', value }
    --   histogram:      { '{a="x"' or "", sum, count, bucket counts... }
    series = {},
    keys = {},     -- the keys in render order (sorted when `sorted`)
    sorted = true,
  }, Family)
  for k, v in pairs(extra or {}) do f[k] = v end
  reg.families[#reg.families + 1] = f
  reg.by_name[name] = f
  -- A family without labels has its one series from the start (at 0).
  if #f.labelnames == 0 then f:touch() end
  return f
end

function Registry:counter(name, help, labelnames)
  return family(self, "counter", "counter", name, help, labelnames)
end

function Registry:gauge(name, help, labelnames)
  return family(self, "gauge", "gauge", name, help, labelnames)
end

-- buckets: increasing upper bounds; +Inf is added.
function Registry:histogram(name, help, labelnames, buckets)
  if type(buckets) ~= "table" or #buckets == 0 then error("histogram: buckets expected", 2) end
  local bounds = {}
  for i, b in ipairs(buckets) do
    if type(b) ~= "number" or b ~= b or (i > 1 and b <= buckets[i - 1]) then
      error("histogram: buckets must be increasing numbers", 2)
    end
    if b ~= huge then bounds[#bounds + 1] = b end
  end
  local text, open = {}, #(labelnames or {}) > 0 and ',le="' or '{le="'
  -- The text after the labels of each bucket line: ,le="0.1"} or {le="0.1"} .
  for i = 1, #bounds + 1 do text[i] = open .. le(bounds[i] or huge) .. '"} ' end
  return family(self, "histogram", "histogram", name, help, labelnames,
                { bounds = bounds, le_text = text })
end

local function key_of(f, labels, level)
  local names = f.labelnames
  local n = #names
  if n == 0 then return "" end
  if n == 1 then
    local v = labels and labels[names[1]]
    if v == nil then error(f.name .. ": label " .. names[1] .. " missing", level + 1) end
    return tostring(v)
  end
  local parts = {}
  for i = 1, n do
    local v = labels and labels[names[i]]
    if v == nil then error(f.name .. ": label " .. names[i] .. " missing", level + 1) end
    parts[i] = tostring(v)
  end
  return concat(parts, "\0")
end

local purge

-- The series of labels (a table name -> value; nil when the family has
-- none), made at 0 when it does not exist yet.
function Family:touch(labels)
  local key = key_of(self, labels, 3)
  local s = self.series[key]
  if s then return s end
  local names = self.labelnames
  -- A job forgotten and back before the next render keeps its new series.
  if self.reg.forgotten then purge(self.reg) end
  local text = {}
  for i = 1, #names do
    text[i] = names[i] .. '="' .. M.escape_label(tostring(labels[names[i]])) .. '"'
  end
  local lbl = concat(text, ",")
  if self.kind == "histogram" then
    s = { lbl == "" and "" or "{" .. lbl, 0, 0 }
    for i = 1, #self.bounds do s[3 + i] = 0 end
  else
    s = { lbl == "" and self.name .. " " or self.name .. "{" .. lbl .. "} ", 0 }
  end
  self.series[key] = s
  self.keys[#self.keys + 1] = key
  self.sorted = false
  return s
end

-- Counters: adds n (default 1; a counter never goes down).
function Family:inc(labels, n)
  n = n or 1
  if self.kind == "counter" and not (n >= 0) then -- luacheck: ignore 581 (NaN too)
    error(self.name .. ": a counter only rises (inc by " .. tostring(n) .. ")", 2)
  end
  local s = self:touch(labels)
  s[2] = s[2] + n
end

-- Gauges: sets the value.
function Family:set(labels, v)
  if self.kind ~= "gauge" then error(self.name .. ": set on a " .. self.kind, 2) end
  self:touch(labels)[2] = v
end

-- Histograms: counts one observation (NaN is ignored).
function Family:observe(labels, v)
  if v ~= v then return end
  local s = self:touch(labels)
  local bounds = self.bounds
  for i = 1, #bounds do
    if v <= bounds[i] then s[3 + i] = s[3 + i] + 1; break end
  end
  s[2] = s[2] + v
  s[3] = s[3] + 1
end

-- The value of a series (counters, gauges), or a histogram's count, sum
-- and cumulative bucket counts {[bound] = n}; nil when the series does not
-- exist.
function Family:get(labels)
  local s = self.series[key_of(self, labels, 2)]
  if not s then return nil end
  if self.kind ~= "histogram" then return s[2] end
  local cum, buckets = 0, {}
  for i, b in ipairs(self.bounds) do cum = cum + s[3 + i]; buckets[b] = cum end
  return s[3], s[2], buckets
end

-- Drops every series.
function Family:clear()
  self.series, self.keys, self.sorted = {}, {}, true
end

-- Drops every series whose label `label` (the first label of its family)
-- is v: a job that was removed takes its series with it. (Done at the
-- next render, in one pass whatever the number of jobs removed.)
function Registry:forget(label, v)
  self.forgotten = self.forgotten or {}
  local set = self.forgotten[label] or {}
  self.forgotten[label] = set
  set[tostring(v)] = true
end

function purge(reg)
  local forgotten = reg.forgotten
  reg.forgotten = nil
  for _, f in ipairs(reg.families) do
    local set = forgotten[f.labelnames[1]]
    if set then
      local keep, series = {}, f.series
      for _, key in ipairs(f.keys) do
        if set[key:match("^[^%z]*")] then series[key] = nil else keep[#keep + 1] = key end
      end
      f.keys = keep
    end
  end
end

local function render_family(f, b)
  local keys = f.keys
  if #keys == 0 then return end
  if not f.sorted then
    sort(keys)
    f.sorted = true
  end
  local name, series = f.name, f.series
  b:put("# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", f.kind, "\n")
  if f.kind ~= "histogram" then
    for i = 1, #keys do
      local s = series[keys[i]]
      b:put(s[1], value(s[2]), "\n")
    end
    return
  end
  local bucket, le_text, nb = name .. "_bucket", f.le_text, #f.bounds
  local sum_name, count_name = name .. "_sum", name .. "_count"
  for i = 1, #keys do
    local s = series[keys[i]]
    local open, cum = s[1], 0
    for k = 1, nb do
      cum = cum + s[3 + k]
      b:put(bucket, open, le_text[k], cum, "\n")
    end
    b:put(bucket, open, le_text[nb + 1], s[3], "\n")
    if open == "" then
      b:put(sum_name, " ", value(s[2]), "\n", count_name, " ", s[3], "\n")
    else
      b:put(sum_name, open, "} ", value(s[2]), "\n", count_name, open, "} ", s[3], "\n")
    end
  end
end

function Registry:render()
  if self.forgotten then purge(self) end
  -- (room for as much as last time: the buffer does not grow by copies)
  local b = newbuf(self.size)
  for _, f in ipairs(self.families) do render_family(f, b) end
  local text = b:tostring()
  self.size = #text + 4096
  return text
end

M.Registry, M.Family = Registry, Family
return M
