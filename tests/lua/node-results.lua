-- How a run's end is read from its run function: nil/false and an error
-- fail it with that error, a non-string error is recorded as its JSON, and
-- what a job prints becomes log lines of its run, at once.
local T = require "tap"
local N = require "nodes"

local c = N.new("noderesults")
c:start("a", 3)

local cases = {
  { "nilerr", [[return nil, "disk full"]], "failed", "disk full" },
  { "falseerr", [[return false, "nope"]], "failed", "nope" },
  { "falsealone", [[return false]], "failed", "run returned false" },
  { "tableerr", [[error({ code = 1 })]], "failed", '{"code":1}' },
  { "niltable", [[return nil, { code = 2, why = "x" }]], "failed", nil },
  { "oktrue", [[return true]], "succeeded", nil },
  { "oknil", [[return nil]], "succeeded", nil },
  { "okvalue", [[return "fine", nil]], "succeeded", nil },
}
for _, case in ipairs(cases) do
  local rev = c:put_job(case[1], ("return { schedule = '@manual', run = function(ctx) %s end }"):format(case[2]))
  T.ok(c:loaded(case[1], rev), case[1] .. " loaded")
  c:cli("job", "run", case[1])
end
for _, case in ipairs(cases) do
  local r = N.wait(20, function()
    local rec = c:records(case[1])[1]
    return rec and rec.state ~= "running" and rec
  end)
  T.is(r and r.state, case[3], case[1] .. ": " .. case[2] .. " -> " .. case[3])
  if case[4] then T.is(r and r.error, case[4], case[1] .. ": recorded error") end
  if case[1] == "niltable" then
    local ok, v = pcall(baton.json.decode, r and r.error or "")
    T.ok(ok and type(v) == "table" and v.code == 2 and v.why == "x", "niltable: the error is its JSON")
  end
end

-- print and io.write: log lines of the run, tagged, as soon as a line ends.
local rev = c:put_job("printer", [[
return { schedule = '@manual', timeout = 30,
         run = function(ctx)
           print("hello from printer", 42)
           io.write("partial ")
           io.write("line\n")
           io.stdout:write("via stdout\n")
           io.stderr:write("to stderr\n")
           io.write("no newline at the end")
           baton.sleep(4)
         end }]])
T.ok(c:loaded("printer", rev), "printer loaded")
c:cli("job", "run", "printer")
local function line(text)
  for l in c:log("a"):gmatch("[^\n]+") do
    if l:find(text, 1, true) and l:find("job=printer", 1, true) then return l end
  end
end
local seen = N.wait(3, function() return line("hello from printer") end)
T.ok(seen, "a printed line is in the log while the run still runs")
local rec = c:records("printer")[1]
T.is(rec and rec.state, "running", "(the run was still running)")
T.like(seen or "", "instant=", "the line names the run's instant")
T.like(seen or "", "attempt=1", "and attempt")
T.like(seen or "", "stream=stdout", "and the stream")
T.like(seen or "", "42", "print's arguments are tab-separated on one line")
T.ok(line("partial line"), "io.write pieces make one line")
T.ok(line("via stdout"), "io.stdout:write")
T.like(line("to stderr") or "", "stream=stderr", "io.stderr:write, as stream stderr")
N.wait(10, function()
  local r = c:records("printer")[1]
  return r and r.state ~= "running"
end)
T.ok(line("no newline at the end"), "an unfinished last line is written when the run ends")

c:destroy()
T.done()
