-- The runtime's private functions that a worker calls (not part of the
-- documented Lua API), named here and nowhere else in the worker's Lua:
-- where the runtime keeps them (today fields of `baton` set by
-- runtime/lua/lua_worker.c, the binding only `baton worker` opens, and by
-- lua_exec.c, lua_log.c and lua_rt.c) is this file's business alone.
--
--   fenced()                 true once the node's fence board says its
--                            lease may be gone: write nothing more
--   sweep(secs)              ends every process the run started (the
--                            containment process, runtime/core/contain.h):
--                            true once they are gone, nil and an error
--                            when some would not die within secs, false
--                            without containment
--   children()               how many processes the run left running
--   coroutines()             how many coroutines are alive
--   output_capture(cap)      a sink of what the run's programs print
--                            (their lines, at most cap bytes kept)
--   exit_text(code, signal, stderr)  how a program ended, as text, or nil
--                            for a success
--   log_filter(fn)           every line the process logs goes through fn
--                            (nil: none); fn must not wait
local baton = require "baton"

return {
  fenced = baton._fenced,
  sweep = baton._sweep,
  children = baton._children,
  coroutines = baton._coroutines,
  output_capture = baton._output_capture,
  exit_text = baton._exit_text,
  log_filter = baton._log_filter,
}
