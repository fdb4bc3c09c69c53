-- The operations that `baton job|policy|queue|nodes|leader` and the node's
-- HTTP API (node/http.lua, docs/api.md) share, as data: each takes plain
-- arguments, reads and writes etcd under the prefix (docs/architecture.md,
-- "Key layout"), and returns plain data -- the CLI's --json output and the
-- API's response bodies are these values -- or, luv style,
--
--   nil, "ECODE: message", "ECODE" [, {invalid = true}]
--
-- Codes: EINVAL (bad input: a name, a parameter, a limit), ENOENT (no such
-- job, run, policy, leader), EEXIST (a put with revision = 0 found the key,
-- a queue id collision), ECONFLICT (the state forbids it: a put whose
-- revision no longer matches, no live node can run the job, the run is not
-- running), EFBIG (over etcd's request limit), and the etcd client's own
-- codes (ECONNREFUSED, ETIMEDOUT, EAUTH, ...) when etcd cannot be asked.
-- A job or policy source that does not validate is EINVAL with a fourth
-- value {invalid = true, field = "schedule"|nil}: the message is the one
-- `baton check` prints ("EINVAL: job NAME: field 'F': ..."), and the API
-- answers it 422 rather than 400. Messages that the CLI printed without a
-- code before this module existed keep their words (their code is only
-- the third value).
--
-- Every function may wait (etcd requests): call it in a coroutine that
-- baton runs.
--
-- The operations live in one file per resource, and this table gathers
-- those that are the API (the files export a few helpers to each other):
--
--   ops/jobs.lua      list, show, check, put, rm, pause, resume
--   ops/runs.lua      history, recent runs, one run and its output, run, kill
--   ops/queue.lua     push a task, or a batch
--   ops/policies.lua  list, show, check, put, rm
--   ops/cluster.lua   the live nodes, the leader
--   ops/versions.lua  sign a source for later, its versions, diff, rollback,
--                     the revision stored now
--   ops/notify.lua    the notification channels and the outbox
--
-- and below them ops/store.lua (storing a checked source), ops/cycles.lua
-- (trigger cycles through the stored jobs) and ops/common.lua (errors, the
-- name check, the source size limit). They use the node's modules for what
-- a run's keys hold (node/cancel.lua, output.lua), and baton.keys,
-- baton.util, baton.versions, baton.stored, baton.notify below that;
-- nothing of the CLI.
local M = {}

-- Copies the named functions (and values) of one file into M.
local function export(mod, names)
  for _, name in ipairs(names) do
    assert(mod[name] ~= nil and M[name] == nil, name)
    M[name] = mod[name]
  end
end

export(require "baton.ops.common", { "check_name", "max_source" })
export(require "baton.ops.jobs", { "no_job", "jobs_view", "last_entry", "last_fallback", "list_jobs", "show_job",
                                   "check_job", "put_job", "rm_job", "pause_job", "resume_job" })
export(require "baton.ops.runs", { "history", "recent_runs", "get_run", "run_job", "kill_job" })
export(require "baton.ops.queue", { "queue_push", "queue_tasks", "PUSH_TXN_OPS", "PUSH_TXN_BYTES",
                                    "queue_push_many" })
export(require "baton.ops.policies", { "list_policies", "show_policy", "check_policy", "put_policy", "rm_policy" })
export(require "baton.ops.cluster", { "nodes", "leader" })
export(require "baton.ops.versions", { "sign_source", "versions", "diff_versions", "rollback",
                                       "current_revision" })
export(require "baton.ops.runs", { "wait_runs" })
export(require "baton.ops.notify", { "notify_show", "notify_set", "notify_unset" })

return M
