-- A job's secrets (docs/security.md, "Secrets"): the names a job declares
-- (secrets = {"DB_PASSWORD", ...}, checked by baton.job) are resolved on the
-- node that runs it, by the conductor, for that run only, and given to
-- run(ctx) as ctx.secrets. Each name is read from the node's --secrets-dir
-- (a file of that name, its trailing newline removed), or else from the
-- node's environment.
--
-- A secret may be restricted to some jobs: next to DIR/NAME, a file
-- DIR/NAME.jobs lists the jobs that may have it (one name a line; blank
-- lines and # comments ignored). A restricted secret is given only to a
-- run of a job that declares it and that the list names; on a --trust node
-- the job was verified as signed before it loaded (nothing else loads
-- there), so the list names signed code. It is never taken from the
-- environment.
--
-- The values never cross etcd. The conductor sends them to the worker of
-- the run with the run itself (node/pool.lua, over the worker's channel);
-- the worker does not know where they come from (no BATON_SECRETS_DIR in
-- its environment) and redacts them (and the node's own secrets) from
-- every line it logs or stores (worker/secrets.lua). A worker that was
-- given a restricted secret is not reused for another run.
local baton = require "baton"
local bit = require "bit"

local format = string.format

local M = {}

-- Checks dir for `baton node --secrets-dir DIR`: true, or nil and why not.
function M.check_dir(dir)
  local mode, regular = baton._sign.mode(dir)
  if not mode then return nil, "--secrets-dir " .. dir .. ": " .. tostring(regular) end
  if regular then return nil, "--secrets-dir " .. dir .. ": not a directory" end
  return true
end

local warned = {}

-- The text of dir/file (nil when there is no such file), warning once per
-- file in the node's log when others than its owner may read it (a
-- secret) or write it (list: a NAME.jobs). A file that exists but cannot
-- be read is an error (nil, message).
local function read_file(dir, file, list)
  local path = dir .. "/" .. file
  local mode, regular = baton._sign.mode(path)
  if not mode then return nil end
  if not regular then return nil, format("%s is not a regular file", path) end
  -- 0044: group or others may read it; 0022: write it
  if bit.band(mode, list and 2 * 8 + 2 or 4 * 8 + 4) ~= 0 and not warned[path] then
    warned[path] = true
    baton.log.warn(list and "a secret's list of jobs may be written by others than its owner: chmod 644 it"
                     or "a secret file may be read by others than its owner: chmod 600 it",
                   { file = path, mode = format("%04o", mode) })
  end
  local f, err = io.open(path, "rb")
  if not f then return nil, format("cannot read %s: %s", path, tostring(err)) end
  local v = f:read("*a")
  f:close()
  return v
end

-- The jobs DIR/NAME.jobs allows (a set), or nil when there is no such
-- file (the secret is not restricted), or nil, err.
local function allowed_jobs(dir, name)
  local text, err = read_file(dir, name .. ".jobs", true)
  if not text then return nil, err end
  local set = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line:gsub("#.*$", ""):match("^%s*(.-)%s*$")
    if line ~= "" then set[line] = true end
  end
  return set
end

-- The values of names (a job's spec.secrets) for a run of job `job` on
-- node `node`, read from dir (the node's --secrets-dir, may be nil) or the
-- environment: a table name -> value and whether one of them is restricted
-- (see the top of this file); or nil and an error naming the first one
-- missing or not allowed (never a value).
function M.resolve(names, node, dir, job)
  local values, restricted = {}, false
  for _, name in ipairs(names or {}) do
    local v, ferr, allow
    if dir then
      allow, ferr = allowed_jobs(dir, name)
      if ferr then return nil, format("secret %s on node %s: %s", name, tostring(node), ferr) end
      if allow and not allow[tostring(job)] then
        return nil, format("secret %s on node %s is restricted to the jobs listed in %s/%s.jobs, "
          .. "and job %s is not one of them", name, tostring(node), dir, name, tostring(job))
      end
      v, ferr = read_file(dir, name)
      if ferr then return nil, format("secret %s on node %s: %s", name, tostring(node), ferr) end
      if v then v = v:gsub("\r?\n$", "") end
    end
    if allow then
      restricted = true
      if v == nil then
        return nil, format("secret %s is not set on node %s (%s/%s.jobs restricts it, and there is no file %s/%s)",
                           name, tostring(node), dir, name, dir, name)
      end
    elseif v == nil then
      v = os.getenv(name)
      if v == "" then v = nil end
    end
    if v == nil then
      return nil, format("secret %s is not set on node %s (%s, no environment variable)", name,
                         tostring(node), dir and ("no file in --secrets-dir " .. dir) or "no --secrets-dir")
    end
    if v:find("\0", 1, true) then
      return nil, format("secret %s on node %s holds a NUL byte, which a run cannot be given", name, tostring(node))
    end
    values[name] = v
  end
  return values, restricted
end

-- What the conductor sends with a run of job (spec) on node self: {secrets
-- = values, restricted = bool}, or {secrets_error = why}; nil when the job
-- declares none.
function M.for_run(self, job, spec)
  if not spec or not spec.secrets or #spec.secrets == 0 then return nil end
  local values, restricted = M.resolve(spec.secrets, self.name, self.secrets_dir, job)
  if not values then return { secrets_error = restricted } end
  return { secrets = values, restricted = restricted }
end

return M
