-- What a run says, in its worker: what it prints (print, io.write,
-- io.stdout / io.stderr) and its ctx.log lines become lines of the node's
-- log, tagged with the run's fields, up to a budget per attempt (the
-- node's log is not the place for a run's megabytes), and lines of its
-- kept output (worker/output.lua), every secret of the run redacted first.
local baton = require "baton"
local util = require "baton.util"
local size_text = util.bytes
local output = require "baton.worker.output"

local M = {}

-- The fields every log line of a run carries.
function M.run_fields(run)
  return { job = run.job, instant = run.id or util.instant(run.fire), node = run.node,
           attempt = run.attempt }
end

-- v with every secret of the list redacted: strings, and the string
-- keys and values of a table of fields (a copy; the node's log filter,
-- native.log_filter, redacts what is left: numbers, tables).
local function scrub(v, list)
  if type(v) == "string" then return output.redact(v, list) end
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do
    if type(k) == "string" then
      k = output.redact(k, list)
      while c[k] ~= nil do k = k .. "_" end -- (two names redacted alike)
    end
    c[k] = type(x) == "string" and output.redact(x, list) or x
  end
  return c
end

-- What of a run's output (print, io.write, ctx.log) the node's log shows:
-- the first RUN_LOG bytes of each attempt, each line counting its text and
-- RUN_LOG_LINE bytes (about what logfmt adds: ts, level, the run's fields).
-- The rest is in the kept output only (output.lua, up to its cap), and the
-- node's log says how much was left out. BATON_RUN_LOG_BYTES, from the
-- node's environment, changes the budget (0: none of it).
local RUN_LOG = tonumber(os.getenv("BATON_RUN_LOG_BYTES")) or 16 * 1024
local RUN_LOG_LINE = 100

-- The node's log for one attempt's output: log(level, text, fields) writes
-- a line while the budget lasts; once a line does not fit, it and every
-- later one are only counted (the node's log shows the beginning of the
-- output, without gaps), and one line says so. finish() says how much was
-- left out, if anything was.
function M.run_log(run)
  local left, lines, bytes = RUN_LOG, 0, 0
  local id = run.id or util.instant(run.fire)
  local where = ("baton job logs %s %s"):format(run.job, id)
  local self = {}
  function self.log(level, text, fields)
    if lines == 0 and #text + RUN_LOG_LINE <= left then
      left = left - #text - RUN_LOG_LINE
      return baton.log[level](text, fields)
    end
    if lines == 0 then
      baton.log.info(("run output: the rest of this attempt's output is not logged here; %s has it"):format(where),
                     M.run_fields(run))
    end
    lines, bytes = lines + 1, bytes + #text + 1
  end
  function self.finish()
    if lines == 0 then return end
    local f = M.run_fields(run)
    f.omitted_lines, f.omitted_bytes = lines, bytes
    baton.log.info(("run output: %s (%d line%s) more not logged here; %s has the last %s of it"):format(
      size_text(bytes), lines, lines == 1 and "" or "s", where, size_text(output.CAP)), f)
  end
  return self
end

-- ctx.log.<level>: a line of the node's log with the run's fields (through
-- nlog, the attempt's run_log), and a line of the run's kept output (buf);
-- both redacted of list.
function M.logger(fields, level, buf, list, nlog)
  return function(msg, extra)
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    for k, v in pairs(scrub(extra or {}, list)) do f[k] = v end
    local text = output.redact(tostring(msg), list)
    nlog.log(level, text, f)
    if buf then buf:add { stream = "log", level = level, text = text, fields = extra } end
  end
end

-- What a run prints (print, io.write, io.stdout:write, io.stderr:write)
-- becomes log lines of the run (through nlog, the attempt's run_log), one
-- per line as soon as the line is complete, tagged with the run's fields
-- and the stream, and lines of its kept output (kept, an output.lua
-- buffer). A line longer than
-- output.LINE_MAX is cut, its secrets redacted before it is (an
-- output.cutter per stream). out.flush() writes what is left of an
-- unfinished line at the end of the run.
function M.printed(run, kept, list, nlog)
  local fields = M.run_fields(run)
  local cuts = { stdout = output.cutter(list), stderr = output.cutter(list) }
  local function put(stream, texts)
    for _, text in ipairs(texts) do
      local f = { stream = stream }
      for k, v in pairs(fields) do f[k] = v end
      nlog.log("info", text, f)
      if kept then kept:add { stream = stream, text = text } end
    end
  end
  local function emit(stream, data)
    put(stream, cuts[stream]:feed(data))
  end
  local function writer(stream)
    return function(...)
      for i = 1, select("#", ...) do
        local v = select(i, ...)
        if type(v) ~= "string" and type(v) ~= "number" then
          error(("bad argument #%d to 'write' (string expected, got %s)"):format(i, type(v)), 2)
        end
        emit(stream, tostring(v))
      end
    end
  end
  -- A file object that writes to the run's log; its other methods do
  -- nothing useful for a log and are harmless no-ops.
  local function file(stream, real)
    local w = writer(stream)
    local f = {}
    f.write = function(self, ...) w(...); return self end
    f.flush = function(self) return self end
    f.setvbuf = function() return true end
    f.close = function() return nil, "cannot close the run's " .. stream end
    return setmetatable(f, { __tostring = function() return tostring(real) end })
  end
  local out = { stdout = file("stdout", io.stdout), stderr = file("stderr", io.stderr) }
  local write_out = writer("stdout")
  out.print = function(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    emit("stdout", table.concat(parts, "\t") .. "\n")
  end
  out.io = setmetatable({ write = function(...) write_out(...); return out.stdout end,
                          stdout = out.stdout, stderr = out.stderr,
                          output = function() return out.stdout end },
                        { __index = io })
  function out.flush()
    for stream, cut in pairs(cuts) do put(stream, cut:finish()) end
  end
  return out
end

return M
