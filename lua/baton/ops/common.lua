-- What every file of baton.ops shares: the shape of an error (luv style,
-- ops/init.lua), the name check of jobs, policies and queues, and the size
-- limit of a stored job or policy source.
local job = require "baton.job"
local keys = require "baton.keys"
local util = require "baton.util"

local format, tostring = string.format, tostring

local M = {}

-- nil, msg, code (code taken from the message when not given).
local function fail(msg, code, extra)
  return nil, msg, code or msg:match("^(E[%u%d]+):") or "EIO", extra
end

-- The error of an invalid job or policy source, as job.load / policy.load
-- word it: EINVAL with {invalid = true, field = F}.
local function invalid(msg)
  return nil, msg, "EINVAL", { invalid = true, field = msg:match("field '([^']+)'") }
end

-- true when name is a valid name for a kind ("job", "policy"); else the
-- EINVAL error that says the rule.
local function check_name(kind, name)
  if not job.valid_name(name) then
    return fail(format("EINVAL: invalid %s name \"%s\" (%s)", kind, tostring(name), util.NAME_RULE), "EINVAL")
  end
  return true
end
M.fail, M.invalid, M.check_name = fail, invalid, check_name

-- The largest source job put / policy put store: etcd's request limit, less
-- the key and the request's framing.
function M.max_source(kind, name)
  return util.MAX_REQUEST - #keys.key(util.prefix(), kind == "job" and "jobs" or "policies", name) - 512
end

function M.too_big(kind, name, n)
  local max = M.max_source(kind, name)
  if n > max then
    return format("EFBIG: the %s source is %s, larger than etcd's request limit of %s "
      .. "(etcd's default --max-request-bytes); nothing was stored", kind, util.bytes(n), util.bytes(util.MAX_REQUEST))
  end
end

return M
