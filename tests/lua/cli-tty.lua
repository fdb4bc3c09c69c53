-- The CLI on a terminal (a real pty, through util-linux's script): states
-- in colour (off with NO_COLOR, TERM=dumb, or when piped), tables cut to
-- the terminal's width (stty cols, or COLUMNS) with "…", and stored text
-- still escaped: the only colour codes are baton's own. And
-- baton._terminal(fd), the binding that tells (runtime/lua/lua_os.c).
local T = require "tap"
local N = require "nodes"
local F = require "files"

local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

if not assert(baton.exec { "sh", "-c", "command -v script" }).stdout:find("script") then
  T.skip_all("no script(1) (util-linux) for a pty")
end

local c = N.new("clitty")
c:start("a", 3)

-- A word for sh, quoted.
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Runs baton ARGS on a pty of cols columns (stty), with env (a table of
-- VAR = value; false unsets): its output with "\r\n" as "\n", its status.
-- (The variables are set by env(1) right before baton: the shell that
-- script starts sets COLUMNS itself after stty.)
local function pty(cols, env, ...)
  local e = { TERM = "xterm", NO_COLOR = false, COLUMNS = false }
  for k, v in pairs(env or {}) do e[k] = v end
  local words = { "stty cols " .. cols .. " rows 40;", "exec", "env" }
  for k, v in pairs(e) do if not v then words[#words + 1] = "-u " .. k end end
  for k, v in pairs(e) do if v then words[#words + 1] = q(k .. "=" .. v) end end
  for _, a in ipairs { bin, "--endpoints", eps, "--prefix", c.P, ... } do words[#words + 1] = q(a) end
  local r = assert(baton.exec { "script", "-qec", table.concat(words, " "), "/dev/null", timeout = 60 })
  return (r.stdout:gsub("\r\n", "\n")), r.code
end

-- The same, piped (no terminal).
local function piped(env, ...)
  local args = { bin, "--endpoints", eps, "--prefix", c.P, timeout = 60,
                 env = { TERM = "xterm", NO_COLOR = false, COLUMNS = false } }
  for k, v in pairs(env or {}) do args.env[k] = v end
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = assert(baton.exec(args))
  return r.stdout, r.code
end

local ESC = "\27"
local function plain(s) return (s:gsub("\27%[[%d;]*m", "")) end
local function widest(s)
  local w = 0
  for line in plain(s):gmatch("[^\n]*") do
    local _, cont = line:gsub("[\128-\191]", "")
    if #line - cont > w then w = #line - cont end
  end
  return w
end

-- 1. The binding.
do
  local f = c.dir .. "/term.lua"
  F.write(f, "print(baton._terminal(1)); print(baton._terminal(0)); print(pcall(baton._terminal, 7))")
  local out = pty(57, nil, "eval", f)
  T.like(out, "^true\t57\t40\ntrue\t57\t40\nfalse\t.-fd must be 0, 1 or 2", "_terminal on a pty: true, its size")
  out = piped(nil, "eval", f)
  T.like(out, "^false\n", "_terminal of a pipe: false")
end

-- 2. A run that failed with a long error that holds a colour code of its
-- own, and one that succeeded.
local long = "\27[32mnot ours\27[0m and then a long explanation of what went wrong, " .. ("word "):rep(30)
local rev = c:put_job("failing", ([[
return { schedule = "@manual", run = function() error(%q, 0) end }]]):format(long))
T.ok(c:loaded("failing", rev), "failing loaded")
rev = c:put_job("fine", 'return { schedule = "@manual", run = function() end }')
T.ok(c:loaded("fine", rev), "fine loaded")
-- (job run, then the record: what is tested here is not --wait)
local function run(job)
  piped(nil, "job", "run", job)
  return N.wait(30, function()
    local rec = c:records(job)[1]
    return rec and rec.state ~= "running" and rec.state
  end)
end
T.is(run("failing"), "failed", "failing failed")
T.is(run("fine"), "succeeded", "fine succeeded")

-- 3. job history on a terminal of 100 columns: the state in red, the
-- error cut to fit with "…", its own code escaped.
do
  local out, rc = pty(100, nil, "job", "history", "failing")
  T.is(rc, 0, "history on a pty: exit 0")
  T.like(out, ESC .. "%[31mfailed" .. ESC .. "%[0m", "the state failed in red")
  T.ok(widest(out) <= 100, "every line fits 100 columns (widest " .. widest(out) .. ")")
  T.like(out, "\\x1b%[32mnot ours\\x1b%[0m and then a long[^\n]*…\n", "the error escaped, then cut with …")
  T.ok(not out:find(ESC .. "[32m", 1, true), "the stored colour code never reaches the terminal")
  local _, nesc = out:gsub(ESC, "")
  T.is(nesc, 2, "baton's own codes only: one colour and its reset")
  -- COLUMNS wins over the terminal's own width.
  out = pty(100, { COLUMNS = "80" }, "job", "history", "failing")
  T.ok(widest(out) <= 80 and widest(out) > 70, "COLUMNS=80: every line fits 80 columns (widest " .. widest(out) .. ")")
  -- NO_COLOR and TERM=dumb: no colour, still cut.
  out = pty(72, { NO_COLOR = "1" }, "job", "history", "failing")
  T.ok(not out:find(ESC, 1, true), "NO_COLOR: no colour code at all")
  T.ok(widest(out) <= 72, "NO_COLOR: still fits")
  out = pty(72, { TERM = "dumb" }, "job", "history", "failing")
  T.ok(not out:find(ESC, 1, true), "TERM=dumb: no colour")
  -- Piped: no colour, nothing cut, whatever COLUMNS says.
  out = piped({ COLUMNS = "40" }, "job", "history", "failing")
  T.ok(not out:find(ESC, 1, true), "piped: no colour")
  T.like(out, "and then a long explanation of what went wrong, " .. ("word "):rep(29) .. "word\n",
    "piped: the whole error")
end

-- 4. job ls: active in green, the last run's state in its colour, the
-- LAST RUN column cut to fit; job run --wait's end line in colour.
do
  local out = pty(60, nil, "job", "ls")
  T.like(out, "\nfailing +@manual .-" .. ESC .. "%[32mactive" .. ESC .. "%[0m +" .. ESC .. "%[31mfailed ",
    "job ls: active in green, a failed last run in red")
  T.like(out, "\nfine +@manual .-" .. ESC .. "%[32msucceeded ", "and a succeeded one in green")
  T.ok(widest(out) <= 60, "job ls fits 60 columns (widest " .. widest(out) .. ")")
  local plain_out = piped(nil, "job", "ls")
  T.ok(widest(plain_out) > 60, "piped, the same table is wider (" .. widest(plain_out) .. ")")
  out = pty(100, nil, "job", "run", "failing", "--wait")
  T.like(out, "%-%-%- run ended: " .. ESC .. "%[31mfailed" .. ESC .. "%[0m %(", "--wait: the end line's state in red")
end

c:destroy()
T.done()
