/*
 * The Lua runtime of one process: one libuv loop, one main lua_State, and
 * the coroutines baton runs on it (the OpenResty model).
 *
 * User code (an eval script, baton.go functions, later job runs) runs in
 * coroutines that C creates and anchors. A waiting API function
 *
 *   1. checks its arguments and builds its Lua objects,
 *   2. gets the waiting coroutine:  bt_co_t *co = bt_co_current(L, "name");
 *      (this raises a clear error outside a coroutine baton runs),
 *   3. starts its C operation, keeping co,
 *   4. ends with:  return bt_co_wait(L, co, cancel_fn, data);
 *
 * When the operation completes, C pushes the results onto bt_co_stack(co)
 * and calls bt_co_resume(co, nresults). That is the only way a coroutine is
 * resumed. If the coroutine is killed while waiting, cancel_fn(data) is
 * called instead, and the operation must then never resume it.
 *
 * A waiting call made inside the user's own coroutine.wrap/coroutine.create
 * works: baton's coroutine.resume passes the wait up to the baton coroutine
 * and the results back down.
 */
#ifndef BATON_RT_H
#define BATON_RT_H

#include <lua.h>
#include <uv.h>

typedef struct bt_rt_s bt_rt_t;
typedef struct bt_co_s bt_co_t;
typedef void (*bt_cancel_cb)(void *data);

/* Called when a coroutine ends: err is NULL on success, else the error
 * message with a traceback. */
typedef void (*bt_co_end_cb)(bt_co_t *co, const char *err, void *arg);

/** Makes the runtime: a loop, a Lua state with the standard libraries and
 * `baton` (also `require "baton"`). Returns NULL on failure. */
bt_rt_t *bt_rt_new(void);

/** For a sandbox (confine.h): the next bt_rt_new's Lua state allocates
 * through a counting allocator that refuses to grow past max bytes in
 * all, so that no Lua code can take more (Lua raises "not enough memory";
 * the C calls it makes allocate through it too). Call before bt_rt_new;
 * bt_rt_memory_limit changes the bound later (0: none). One per process. */
void bt_rt_count_memory(size_t max);
void bt_rt_memory_limit(size_t max);
/** Bytes the counting allocator has given out (0 without it). */
size_t bt_rt_memory_used(void);

/** Runs the loop until no coroutine is left and nothing is pending, or
 * until bt_rt_stop. */
void bt_rt_run(bt_rt_t *rt);

/** Asks the loop to stop soon (exit status for eval). */
void bt_rt_stop(bt_rt_t *rt, int status);
int bt_rt_status(const bt_rt_t *rt);

/** Kills the coroutines left (their cancel callbacks run, nothing is
 * resumed), then runs the closers, runs the loop until every handle has
 * closed, and closes Lua last, so no __gc sees a live handle. */
void bt_rt_free(bt_rt_t *rt);

bt_rt_t *bt_rt_from(lua_State *L);
lua_State *bt_rt_L(bt_rt_t *rt);
uv_loop_t *bt_rt_loop(bt_rt_t *rt);
uv_loop_t *bt_lua_loop(lua_State *L);

/* Objects with handles register a close function so that shutdown closes
 * them (the etcd client, http client, watches...). */
typedef struct bt_closer_s {
  struct bt_closer_s *prev, *next;
  void (*close)(struct bt_closer_s *self);
} bt_closer_t;
void bt_rt_add_closer(bt_rt_t *rt, bt_closer_t *c);
void bt_rt_del_closer(bt_rt_t *rt, bt_closer_t *c);

/** Starts a coroutine running the function at the top of L's stack
 * followed by nargs arguments (both popped). end_cb (may be NULL) runs when
 * it finishes. Returns NULL on out of memory. The coroutine first runs on
 * the next loop iteration. */
bt_co_t *bt_co_spawn(bt_rt_t *rt, lua_State *L, int nargs, bt_co_end_cb end_cb,
                     void *arg);

/** The baton coroutine that is running L, for waiting API `api`. Raises a
 * Lua error naming api when L cannot wait here. It has no side effect, so
 * the API may still return at once (say, when starting its operation
 * failed) instead of waiting. */
bt_co_t *bt_co_current(lua_State *L, const char *api);

/** Suspends the current coroutine until bt_co_resume. Use as a tail call:
 * `return bt_co_wait(L, co, cancel, data);`. */
int bt_co_wait(lua_State *L, bt_co_t *co, bt_cancel_cb cancel, void *data);

/** The stack to push results on before bt_co_resume. */
lua_State *bt_co_stack(bt_co_t *co);

/** Resumes co with the nret values pushed on bt_co_stack(co), on the next
 * turn of the loop. Safe from any callback, including curl's. */
void bt_co_resume(bt_co_t *co, int nret);

/** Kills a waiting coroutine: runs its cancel callback, then ends it as if
 * it had raised err. */
void bt_co_kill(bt_co_t *co, const char *err);

/** Pushes the luv-style failure triple nil, "ECODE: msg", "ECODE" on L and
 * returns 3. msg may be NULL (the code's description is used). */
int bt_push_fail(lua_State *L, int err, const char *msg);

/** Starts t (initialised on L's loop) to fire once after secs seconds,
 * measured from now rather than from the loop's cached time (which is as
 * old as the Lua code that ran since it was updated). */
void bt_timer_start_secs(lua_State *L, uv_timer_t *t, uv_timer_cb cb,
                         double secs);

/** Live coroutines. */
int bt_rt_ncoroutines(const bt_rt_t *rt);

/* `require` over the library read at start (lua_lib.c, runtime/core/lib.h):
 * called by the runtime with package, package.loaded and baton on top. */
void bt__lib_open(lua_State *L);

#endif
