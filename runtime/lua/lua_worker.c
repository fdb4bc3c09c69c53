/*
 * The worker's own binding: what `baton worker` (a pooled worker of baton
 * node) needs around a run and no other process has. main.c opens it into
 * `baton` for that command only, after the runtime's modules; job code
 * running in the worker sees these names too, as private ones.
 *
 *   local sink = baton._output_capture(cap)  -- programs' lines, this run
 *   local lines, dropped = sink:take()         -- never waits
 *   sink:close()
 *   baton._sweep(timeout)   -- end every process the run left (contain.h)
 *   baton._fenced()         -- the node's fence board says stop (fence.h)
 *   baton._exit_text(code, signal, stderr)  -- a command job's failure
 *
 * The capture itself (lines, taps, the cap) is runtime/core/capture.c;
 * baton.exec and baton.spawn (lua_exec.c) tap the installed one.
 */
#include "capture.h"
#include "contain.h"
#include "err.h"
#include "exit_text.h"
#include "fence.h"
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <lua.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define SINK_MT "baton.output_sink"

/* ---- a run's captured output ------------------------------------------- */

/* A capture (capture.h) boxed in a "baton.output_sink" userdata, which
 * holds the opener's reference until close() or __gc. */
typedef struct {
  bt_capture_t *c;        /* NULL once closed */
} sinkbox_t;

static bt_capture_t *check_sink(lua_State *L) {
  sinkbox_t *b = luaL_checkudata(L, 1, SINK_MT);
  if (!b->c) luaL_error(L, "baton.output_sink: closed");
  return b->c;
}

/* Lets go of the box's capture: no more lines, and no longer installed. */
static void sinkbox_close(sinkbox_t *b) {
  bt_capture_t *c = b->c;
  if (!c) return;
  b->c = NULL;
  bt_capture_close(c);
}

/* baton._output_capture(cap) -> sink: from now on, until sink:close(), the
 * output of programs started by exec and spawn is queued in it too, at
 * most cap bytes of text (one at a time: a new one replaces the installed
 * one). */
static int l_output_capture(lua_State *L) {
  lua_Number cap = luaL_checknumber(L, 1);
  sinkbox_t *b;
  int e;
  if (!(cap >= 1) || cap > 1e12)
    return luaL_error(L, "baton._output_capture: cap must be >= 1 byte");
  b = lua_newuserdata(L, sizeof(*b));
  b->c = NULL;
  luaL_getmetatable(L, SINK_MT);
  lua_setmetatable(L, -2);
  e = bt_capture_open((size_t) cap, &b->c);
  if (e) return bt_push_fail(L, e, NULL);
  return 1;
}

/* sink:take() -> {{t=, stream=, cmd=, text=, tap=, cont=}, ...}, dropped;
 * nothing at all when no line came and none was dropped since the last
 * take. tap numbers the stream of a program; cont is true for a piece of a
 * longer line (capture.h). */
static int l_sink_take(lua_State *L) {
  bt_capture_t *c = check_sink(L);
  bt_capture_line_t *l, *n;
  double dropped;
  int i = 0;
  l = bt_capture_take(c, &dropped);
  if (!l && dropped == 0) return 0;
  /* stack: sink list */
  lua_newtable(L);
  for (; l; l = n) {
    n = l->next;
    lua_createtable(L, 0, 6);
    lua_pushnumber(L, l->t);
    lua_setfield(L, -2, "t");
    lua_pushnumber(L, l->tap);
    lua_setfield(L, -2, "tap");
    if (l->cont) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "cont");
    }
    lua_pushstring(L, l->is_err ? "stderr" : "stdout");
    lua_setfield(L, -2, "stream");
    lua_pushstring(L, l->data);
    lua_setfield(L, -2, "cmd");
    lua_pushlstring(L, l->text, l->len);
    lua_setfield(L, -2, "text");
    lua_rawseti(L, -2, ++i);
    free(l);
  }
  lua_pushnumber(L, dropped);
  return 2;
}

static int l_sink_close(lua_State *L) {
  sinkbox_close(luaL_checkudata(L, 1, SINK_MT));
  return 0;
}

static int l_sink_gc(lua_State *L) {
  sinkbox_close(luaL_checkudata(L, 1, SINK_MT));
  return 0;
}

/* ---- the end of a run --------------------------------------------------- */

/* A sweep request to the worker's containment process (contain.h): the
 * answer signal or the timer ends it, whichever comes first; both handles
 * are closed and the box freed by the second close callback. */
typedef struct {
  uv_signal_t sig;
  uv_timer_t timer;
  bt_co_t *co;
  int open;
} sweep_t;

static void on_sweep_close(uv_handle_t *h) {
  sweep_t *s = h->data;
  if (--s->open == 0) free(s);
}

static void sweep_close(sweep_t *s) {
  uv_signal_stop(&s->sig);
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *) &s->sig, on_sweep_close);
  uv_close((uv_handle_t *) &s->timer, on_sweep_close);
}

static void sweep_end(sweep_t *s, int ok) {
  bt_co_t *co = s->co;
  lua_State *S = bt_co_stack(co);
  sweep_close(s);
  if (ok) {
    lua_pushboolean(S, 1);
    bt_co_resume(co, 1);
  } else {
    bt_co_resume(co, bt_push_fail(S, BT_ETIMEDOUT, "the run's processes did not end"));
  }
}

static void on_swept(uv_signal_t *h, int signum) {
  sweep_end(h->data, 1);
}

static void on_sweep_timeout(uv_timer_t *t) {
  sweep_end(t->data, 0);
}

static void sweep_cancel(void *data) {
  sweep_close(data);
}

/* baton._sweep(timeout) -> true | nil, err, code: asks the containment
 * process to end every process of the run but the worker, and waits until
 * it says they are gone. false when the worker runs without containment. */
static int l_sweep(lua_State *L) {
  double secs = luaL_checknumber(L, 1);
  bt_co_t *co;
  sweep_t *s;
  if (!getenv("BATON_CONTAINED")) {
    lua_pushboolean(L, 0);
    return 1;
  }
  co = bt_co_current(L, "baton._sweep");
  s = calloc(1, sizeof(*s));
  if (!s) return bt_push_fail(L, BT_ENOMEM, NULL);
  s->co = co;
  s->open = 2;
  uv_signal_init(bt_lua_loop(L), &s->sig);
  uv_timer_init(bt_lua_loop(L), &s->timer);
  s->sig.data = s->timer.data = s;
  uv_signal_start_oneshot(&s->sig, on_swept, BT_CONTAIN_SWEPT);
  bt_timer_start_secs(L, &s->timer, on_sweep_timeout, secs);
  kill(getppid(), BT_CONTAIN_SWEEP);
  return bt_co_wait(L, co, sweep_cancel, s);
}

/* baton._fenced() -> bool: the fence board this process can read (a
 * worker reads its node's, fence.h) says the node's lease may be gone. */
static int l_fenced(lua_State *L) {
  uint64_t until = bt_fence_until();
  lua_pushboolean(L, until != BT_FENCE_NONE && bt_fence_now_ms() >= until);
  return 1;
}

/* baton._exit_text(code, signal, stderr) -> "exited with status 3: ..."
 * (what baton.exec's check says after the program's name, exit_text.h) or
 * nil for code 0 and no signal: for a command job, whose stderr the worker
 * redacts of its secrets before it is cut. */
static int l_exit_text(lua_State *L) {
  char text[BT_EXIT_TEXT_MAX];
  lua_Number code = luaL_checknumber(L, 1);
  int sig = (int) luaL_optnumber(L, 2, 0);
  size_t len = 0;
  const char *err = luaL_optlstring(L, 3, "", &len);
  if (code == 0 && sig == 0) return 0;
  bt_exit_text(text, sizeof(text), (int64_t) code, sig, sig ? bt__signal_name(sig) : NULL,
               err, len);
  lua_pushstring(L, text);
  return 1;
}

int bt_lua_open_worker(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"_output_capture", l_output_capture}, {"_sweep", l_sweep}, {"_fenced", l_fenced},
    {"_exit_text", l_exit_text}, {NULL, NULL}
  };
  const luaL_Reg *f;
  /* stack: baton */
  if (luaL_newmetatable(L, SINK_MT)) {
    static const luaL_Reg sink_methods[] = {
      {"take", l_sink_take}, {"close", l_sink_close}, {NULL, NULL}
    };
    /* stack: baton mt */
    lua_newtable(L);
    luaL_register(L, NULL, sink_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_sink_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  for (f = fns; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, -2, f->name);
  }
  return 0;
}
