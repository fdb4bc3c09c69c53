-- Small argument parser for the subcommands written in Lua.
local baton = require "baton"
local M = {}

-- Prints "baton: <cmd>: <msg>" and the usage line, exits 2.
function M.usage(cmd, usage, msg)
  io.stderr:write("baton: ", cmd, ": ", msg, "\nusage: ", usage, "\n")
  io.stderr:flush()
  baton.exit(2)
end

-- Prints the help of a command on stdout: its usage line(s), then what it
-- does (text, optional), and exits 0.
function M.help(usage, text)
  io.stdout:write("usage: ", usage, "\n")
  if text and text ~= "" then io.stdout:write("\n", text, text:sub(-1) == "\n" and "" or "\n") end
  io.stdout:flush()
  baton.exit(0)
end

-- True if a is a request for help: -h or --help.
function M.is_help(a)
  return a == "--help" or a == "-h"
end

-- Prints "baton: <msg>" and exits with status (1 by default).
function M.die(msg, status)
  io.stderr:write("baton: ", require("baton.cli.util").escape(msg, true), "\n")
  io.stderr:flush()
  baton.exit(status or 1)
end

-- Parses flags (spec: name -> "number" (seconds > 0) | "count" (integer >= 1)
-- | "string" | "flag" | "list" (repeatable: a list of the values given))
-- until "--" or the end. -h or --help before "--" prints the command's help
-- (M.help with usage and help) and exits 0.
-- Returns opts, positional args, and the arguments after "--" (or nil).
function M.parse(cmd, usage, spec, argv, help)
  local opts, pos, rest = {}, {}, nil
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--" then
      rest = {}
      for k = i + 1, #argv do rest[#rest + 1] = argv[k] end
      break
    end
    if M.is_help(a) then return M.help(usage, help) end
    local name, value = a:match("^%-%-([%w-]+)=(.*)$")
    name = name or a:match("^%-%-([%w-]+)$") or a:match("^%-(%a)$")
    if name and spec[name] then
      if spec[name] == "flag" then
        opts[name] = true
      else
        if not value then
          i = i + 1
          value = argv[i]
          if value == nil then M.usage(cmd, usage, a .. " needs a value") end
        end
        if spec[name] == "string" then
          opts[name] = value
        elseif spec[name] == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], value)
        elseif spec[name] == "count" then
          local n = tonumber(value)
          if not n or n < 1 or n ~= math.floor(n) then
            M.usage(cmd, usage, a .. " needs a whole number >= 1, not \"" .. value .. "\"")
          end
          opts[name] = n
        else
          local n = tonumber(value)
          if not n or n <= 0 then M.usage(cmd, usage, a .. " needs a positive number of seconds, not \"" .. value .. "\"") end
          opts[name] = n
        end
      end
    elseif a:sub(1, 1) == "-" and a ~= "-" and #pos == 0 then
      M.usage(cmd, usage, "unknown flag " .. a)
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return opts, pos, rest
end

M.SIGNUM = { SIGHUP = 1, SIGINT = 2, SIGTERM = 15 }

-- Runs the subcommand argv[1] of command cmd ("job", "policy"): its help
-- (cmd --help, cmd help [SUB], cmd SUB --help), or the subcommand with its
-- parsed flags and positionals (its name is positional 1, so flags may come
-- before NAME; a flag it does not know lands after NAME and is refused).
-- d = {sub =, usages =, helps =, usage =, help =, flags =,
--      fail = function(msg) (a usage error), select = function(what)}.
function M.dispatch(cmd, argv, d)
  local what = argv[1]
  if not what then return d.fail("needs a subcommand") end
  if M.is_help(what) or what == "help" then
    local about = argv[2]
    if about and d.sub[about] then return M.help(d.usages[about], d.helps[about]) end
    if about and what == "help" then return d.fail("unknown subcommand \"" .. about .. "\"") end
    return M.help(d.usage, d.help)
  end
  if not d.sub[what] then return d.fail("unknown subcommand \"" .. what .. "\"") end
  if d.select then d.select(what) end
  local opts, pos = M.parse(cmd .. " " .. what, d.usages[what], d.flags[what], { unpack(argv) }, d.helps[what])
  for i = 2, #pos do
    if pos[i]:match("^%-") and pos[i] ~= "-" then return d.fail("unknown flag " .. pos[i]) end
  end
  return d.sub[what](pos, opts)
end

return M
