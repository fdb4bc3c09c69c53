/*
 * The coroutine runtime (see rt.h): one loop, one Lua state, and the one
 * function that resumes coroutines (run). Everything that completes an
 * operation goes through bt_co_resume, which runs the coroutine now when
 * called from the loop, or queues it when Lua is already running.
 */
#include "rt.h"
#include "err.h"
#include "lib.h"
#include "lua_mod.h"

#include <lauxlib.h>
#include <lualib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BATON_LUADIR
#define BATON_LUADIR "/usr/share/baton/lua"
#endif

#define RT_KEY "baton.rt"
#define WAIT_KEY "baton.wait"

struct bt_co_s {
  bt_rt_t *rt;
  lua_State *co;
  int ref;                   /* anchors the thread in the registry */
  int waiting;
  int queued;
  int nret;                  /* values to resume with when queued */
  bt_cancel_cb cancel;
  void *data;
  bt_co_end_cb end_cb;
  void *arg;
  bt_co_t *prev, *next;      /* all live coroutines */
  bt_co_t *qnext;            /* ready queue */
};

struct bt_rt_s {
  uv_loop_t loop;
  lua_State *L;
  bt_co_t *current;          /* the baton coroutine running now */
  int running;               /* depth of lua_resume calls */
  bt_co_t *all;
  int nco;
  bt_co_t *qhead, *qtail;
  uv_idle_t idle;            /* drains the ready queue */
  bt_closer_t *closers;
  int status;
  int exit_requested;        /* baton.exit was called */
  int stopping;
  int shut;
};

static void on_idle(uv_idle_t *h);

bt_rt_t *bt_rt_from(lua_State *L) {
  bt_rt_t *rt;
  lua_getfield(L, LUA_REGISTRYINDEX, RT_KEY);
  rt = *(bt_rt_t **) lua_touserdata(L, -1);
  lua_pop(L, 1);
  return rt;
}

lua_State *bt_rt_L(bt_rt_t *rt) { return rt->L; }
uv_loop_t *bt_rt_loop(bt_rt_t *rt) { return &rt->loop; }
uv_loop_t *bt_lua_loop(lua_State *L) { return &bt_rt_from(L)->loop; }
int bt_rt_status(const bt_rt_t *rt) { return rt->status; }
int bt_rt_ncoroutines(const bt_rt_t *rt) { return rt->nco; }

void bt_rt_add_closer(bt_rt_t *rt, bt_closer_t *c) {
  c->prev = NULL;
  c->next = rt->closers;
  if (rt->closers) rt->closers->prev = c;
  rt->closers = c;
}

void bt_rt_del_closer(bt_rt_t *rt, bt_closer_t *c) {
  if (c->prev) c->prev->next = c->next;
  else if (rt->closers == c) rt->closers = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

int bt_push_fail(lua_State *L, int err, const char *msg) {
  const char *name = bt_err_name(err);
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", name, msg && *msg ? msg : bt_strerror(err));
  lua_pushstring(L, name);
  return 3;
}

static void wake(bt_rt_t *rt) {
  if (!uv_is_active((uv_handle_t *) &rt->idle))
    uv_idle_start(&rt->idle, on_idle);
}

static void enqueue(bt_co_t *co, int nret) {
  bt_rt_t *rt = co->rt;
  co->queued = 1;
  co->nret = nret;
  co->qnext = NULL;
  if (rt->qtail) rt->qtail->qnext = co;
  else rt->qhead = co;
  rt->qtail = co;
  wake(rt);
}

static void dequeue(bt_co_t *co) {
  bt_rt_t *rt = co->rt;
  bt_co_t **pp = &rt->qhead, *prev = NULL;
  while (*pp && *pp != co) {
    prev = *pp;
    pp = &(*pp)->qnext;
  }
  if (!*pp) return;
  *pp = co->qnext;
  if (rt->qtail == co) rt->qtail = prev;
  co->queued = 0;
}

/* Ends co: drops its anchor and frees it. err is the error text or NULL. */
static void co_end(bt_co_t *co, const char *err) {
  bt_rt_t *rt = co->rt;
  if (co->queued) dequeue(co);
  if (co->prev) co->prev->next = co->next;
  else rt->all = co->next;
  if (co->next) co->next->prev = co->prev;
  rt->nco--;
  if (co->end_cb) co->end_cb(co, err, co->arg);
  luaL_unref(rt->L, LUA_REGISTRYINDEX, co->ref);
  free(co);
  if (rt->nco == 0) wake(rt);
}

/* The only place that resumes a coroutine. */
static void run(bt_co_t *co, int nret) {
  bt_rt_t *rt = co->rt;
  bt_co_t *prev = rt->current;
  int status;

  rt->running++;
  rt->current = co;
  status = lua_resume(co->co, nret);
  rt->current = prev;
  rt->running--;

  if (status == LUA_YIELD) {
    lua_settop(co->co, 0);
    /* A bare coroutine.yield() at the top of a baton coroutine: let the
     * others run and continue on the next loop iteration. */
    if (!co->waiting) enqueue(co, 0);
    return;
  }
  if (status == 0) {
    co_end(co, NULL);
    return;
  }
  {
    const char *msg = lua_tostring(co->co, -1);
    lua_State *L = rt->L;
    if (!msg) msg = lua_isnil(co->co, -1) ? "nil error" : "(error object is not a string)";
    luaL_traceback(L, co->co, msg, 0);
    /* stack: L: traceback */
    {
      size_t n;
      const char *tb = lua_tolstring(L, -1, &n);
      char *copy = malloc(n + 1);
      if (copy) memcpy(copy, tb, n + 1);
      lua_pop(L, 1);
      co_end(co, copy ? copy : msg);
      free(copy);
    }
  }
}

void bt_co_resume(bt_co_t *co, int nret) {
  co->waiting = 0;
  co->cancel = NULL;
  co->data = NULL;
  /* Always from the idle handle: the caller may be inside a curl or libuv
   * callback where starting new requests (which the coroutine may do) is
   * not allowed. */
  enqueue(co, nret);
}

static void on_idle(uv_idle_t *h) {
  bt_rt_t *rt = h->data;
  int n = 0;
  /* Bound the batch so the loop polls I/O between long runs of resumes. */
  while (rt->qhead && n++ < 1000) {
    bt_co_t *co = rt->qhead;
    rt->qhead = co->qnext;
    if (!rt->qhead) rt->qtail = NULL;
    co->queued = 0;
    run(co, co->nret);
  }
  if (rt->exit_requested && !rt->stopping) bt_rt_stop(rt, rt->status);
  if (!rt->qhead) uv_idle_stop(&rt->idle);
  if (rt->nco == 0 && !rt->shut) {
    /* Nothing left to run: close what keeps the loop alive (clients,
     * watches, keepalives) so that uv_run returns. */
    bt_closer_t *c;
    rt->shut = 1;
    while ((c = rt->closers)) {
      bt_rt_del_closer(rt, c);
      c->close(c);
    }
  }
}

bt_co_t *bt_co_spawn(bt_rt_t *rt, lua_State *L, int nargs, bt_co_end_cb end_cb,
                     void *arg) {
  bt_co_t *co = malloc(sizeof(*co));
  lua_State *th;
  if (!co) return NULL;
  th = lua_newthread(L);
  /* stack: fn args th */
  lua_insert(L, -(nargs + 2));
  /* stack: th fn args */
  lua_xmove(L, th, nargs + 1);
  memset(co, 0, sizeof(*co));
  co->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  co->rt = rt;
  co->co = th;
  co->end_cb = end_cb;
  co->arg = arg;
  co->next = rt->all;
  if (rt->all) rt->all->prev = co;
  rt->all = co;
  rt->nco++;
  rt->shut = 0;
  enqueue(co, nargs);
  return co;
}

bt_co_t *bt_co_current(lua_State *L, const char *api) {
  bt_rt_t *rt = bt_rt_from(L);
  bt_co_t *co = rt->current;
  if (!co)
    luaL_error(L, "%s: must be called from a coroutine baton runs (a script's "
               "main chunk, a baton.go function, a job or a policy)", api);
  if (!lua_isyieldable(L))
    luaL_error(L, "%s: cannot wait here: the caller is a C function that "
               "cannot yield (a metamethod, iterator or callback called from "
               "C, such as table.sort's comparator)", api);
  if (co->waiting) luaL_error(L, "%s: coroutine is already waiting", api);
  return co;
}

int bt_co_wait(lua_State *L, bt_co_t *co, bt_cancel_cb cancel, void *data) {
  co->waiting = 1;
  co->cancel = cancel;
  co->data = data;
  if (L == co->co) return lua_yield(L, 0);
  /* Inside the user's own coroutine: yield the marker that baton's
   * coroutine.resume passes up to the baton coroutine. */
  lua_getfield(L, LUA_REGISTRYINDEX, WAIT_KEY);
  return lua_yield(L, 1);
}

lua_State *bt_co_stack(bt_co_t *co) {
  return co->co;
}

void bt_co_kill(bt_co_t *co, const char *err) {
  if (co->waiting && co->cancel) co->cancel(co->data);
  co->waiting = 0;
  co_end(co, err);
}

void bt_rt_stop(bt_rt_t *rt, int status) {
  if (status > rt->status && !rt->exit_requested) rt->status = status;
  if (rt->stopping) return;
  rt->stopping = 1;
  while (rt->all) bt_co_kill(rt->all, NULL);
  wake(rt);
}

/* ---- baton core functions ---------------------------------------------- */

typedef struct {
  uv_timer_t t;
  bt_co_t *co;
} sleep_t;

static void on_sleep_close(uv_handle_t *h) {
  free(h->data);
}

static void on_sleep(uv_timer_t *t) {
  sleep_t *s = t->data;
  bt_co_t *co = s->co;
  uv_close((uv_handle_t *) t, on_sleep_close);
  lua_pushboolean(bt_co_stack(co), 1);
  bt_co_resume(co, 1);
}

static void sleep_cancel(void *data) {
  sleep_t *s = data;
  uv_timer_stop(&s->t);
  uv_close((uv_handle_t *) &s->t, on_sleep_close);
}

void bt_timer_start_secs(lua_State *L, uv_timer_t *t, uv_timer_cb cb,
                         double secs) {
  uv_update_time(bt_lua_loop(L));
  uv_timer_start(t, cb, (uint64_t) (secs * 1000.0 + 0.5), 0);
}

static int l_sleep(lua_State *L) {
  double secs = luaL_checknumber(L, 1);
  bt_co_t *co;
  sleep_t *s;
  if (secs < 0 || secs != secs) luaL_argerror(L, 1, "must be >= 0");
  co = bt_co_current(L, "baton.sleep");
  s = malloc(sizeof(*s));
  if (!s) return bt_push_fail(L, BT_ENOMEM, NULL);
  s->co = co;
  uv_timer_init(bt_lua_loop(L), &s->t);
  s->t.data = s;
  bt_timer_start_secs(L, &s->t, on_sleep, secs);
  return bt_co_wait(L, co, sleep_cancel, s);
}

static int l_now(lua_State *L) {
  uv_timeval64_t tv;
  uv_gettimeofday(&tv);
  lua_pushnumber(L, (double) tv.tv_sec + (double) (tv.tv_usec / 1000) / 1000.0);
  return 1;
}

static int l_monotime(lua_State *L) {
  lua_pushnumber(L, (double) uv_hrtime() / 1e9);
  return 1;
}

/* Default end of a baton.go coroutine: an uncaught error fails the
 * process (baton eval is fail-fast; the node uses its own end callback). */
static void go_end(bt_co_t *co, const char *err, void *arg) {
  bt_rt_t *rt = arg;
  if (!err) return;
  fprintf(stderr, "baton: %s\n", err);
  bt_rt_stop(rt, 1);
}

/* baton.exit([status]): ends the process soon with status (default 0):
 * the calling coroutine never continues, the others are killed (their
 * pending operations cancelled), and every client and handle is closed. */
static int l_exit(lua_State *L) {
  bt_rt_t *rt = bt_rt_from(L);
  int status = (int) luaL_optinteger(L, 1, 0);
  bt_co_t *co;
  if (status < 0 || status > 255) luaL_argerror(L, 1, "status must be 0-255");
  co = bt_co_current(L, "baton.exit");
  if (!rt->exit_requested) {
    rt->exit_requested = 1;
    rt->status = status;
  }
  wake(rt);
  return bt_co_wait(L, co, NULL, NULL);
}

static int l_go(lua_State *L) {
  bt_rt_t *rt = bt_rt_from(L);
  int nargs = lua_gettop(L) - 1;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (rt->stopping) return bt_push_fail(L, BT_ECANCELED, "runtime is stopping");
  if (!bt_co_spawn(rt, L, nargs, go_end, rt)) return bt_push_fail(L, BT_ENOMEM, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* baton._cond(): a condition for coroutines of this process.
 * c:wait() suspends the caller until c:signal() (wakes the longest waiter;
 * returns whether there was one) or c:broadcast() (wakes all). */
#define COND_MT "baton.cond"

typedef struct cwait_s {
  struct cwait_s *prev, *next;
  struct cond_s *c;
  bt_co_t *co;
} cwait_t;

typedef struct cond_s {
  cwait_t *head, *tail;
} cond_t;

static void cwait_unlink(cwait_t *w) {
  cond_t *c = w->c;
  if (w->prev) w->prev->next = w->next;
  else c->head = w->next;
  if (w->next) w->next->prev = w->prev;
  else c->tail = w->prev;
}

static void cwait_cancel(void *data) {
  cwait_t *w = data;
  if (w->c) cwait_unlink(w);
  free(w);
}

static int l_cond_wait(lua_State *L) {
  cond_t *c = luaL_checkudata(L, 1, COND_MT);
  bt_co_t *co = bt_co_current(L, "baton.cond:wait");
  cwait_t *w = calloc(1, sizeof(*w));
  if (!w) return bt_push_fail(L, BT_ENOMEM, NULL);
  w->c = c;
  w->co = co;
  w->prev = c->tail;
  if (c->tail) c->tail->next = w;
  else c->head = w;
  c->tail = w;
  return bt_co_wait(L, co, cwait_cancel, w);
}

static int wake_one(cond_t *c) {
  cwait_t *w = c->head;
  bt_co_t *co;
  if (!w) return 0;
  cwait_unlink(w);
  co = w->co;
  free(w);
  lua_pushboolean(bt_co_stack(co), 1);
  bt_co_resume(co, 1);
  return 1;
}

static int l_cond_signal(lua_State *L) {
  lua_pushboolean(L, wake_one(luaL_checkudata(L, 1, COND_MT)));
  return 1;
}

static int l_cond_broadcast(lua_State *L) {
  cond_t *c = luaL_checkudata(L, 1, COND_MT);
  while (wake_one(c)) {}
  return 0;
}

/* Waiters left when the condition is collected stay suspended until they
 * are killed; they no longer point at it. */
static int l_cond_gc(lua_State *L) {
  cond_t *c = luaL_checkudata(L, 1, COND_MT);
  cwait_t *w;
  for (w = c->head; w; w = w->next) w->c = NULL;
  c->head = c->tail = NULL;
  return 0;
}

static int l_cond(lua_State *L) {
  cond_t *c = lua_newuserdata(L, sizeof(*c));
  c->head = c->tail = NULL;
  if (luaL_newmetatable(L, COND_MT)) {
    static const luaL_Reg methods[] = {
      {"wait", l_cond_wait}, {"signal", l_cond_signal},
      {"broadcast", l_cond_broadcast}, {NULL, NULL}
    };
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_cond_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return 1;
}

/* baton._coroutines(): how many coroutines live (a pooled worker checks
 * that a run left none behind). */
static int l_coroutines(lua_State *L) {
  lua_pushinteger(L, bt_rt_ncoroutines(bt_rt_from(L)));
  return 1;
}

/* baton._release_memory(): collects Lua's garbage, then gives the C
 * heap's free pages back to the system (glibc's malloc_trim). After a
 * large burst -- the node listing a store of 10,000 jobs parses megabytes
 * of JSON into small blocks -- glibc keeps the freed pages mapped, and the
 * node's resident size would stay at its peak. Returns true when pages
 * were released. */
static int l_release_memory(lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT, 0);
#ifdef __GLIBC__
  lua_pushboolean(L, malloc_trim(0));
#else
  lua_pushboolean(L, 0);
#endif
  return 1;
}

/* baton._setenv(name, value | nil): sets (or with nil removes) a variable
 * of the process's own environment, which the programs it starts inherit
 * (baton.spawn, baton.exec). For the node's setup, before it starts
 * anything (the environment is not guarded against threads that read it).
 * Returns true, or nil, "ECODE: message", code. */
static int l_setenv(lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  const char *value = luaL_optstring(L, 2, NULL);
  int rc;
  if (n == 0 || strlen(name) != n || strchr(name, '='))
    return luaL_error(L, "baton._setenv: invalid name '%s'", name);
  if (value && strlen(value) != lua_objlen(L, 2))
    return luaL_error(L, "baton._setenv: %s: the value holds a NUL byte", name);
  rc = value ? setenv(name, value, 1) : unsetenv(name);
  if (rc != 0) return bt_push_fail(L, BT_ENOMEM, name);
  lua_pushboolean(L, 1);
  return 1;
}

int bt_lua_open_core(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"sleep", l_sleep}, {"now", l_now}, {"monotime", l_monotime}, {"go", l_go},
    {"exit", l_exit}, {"_coroutines", l_coroutines}, {"_cond", l_cond},
    {"_release_memory", l_release_memory}, {"_setenv", l_setenv},
    {NULL, NULL}
  };
  const luaL_Reg *f;
  for (f = fns; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, -2, f->name);
  }
  lua_pushstring(L, BATON_VERSION);
  lua_setfield(L, -2, "version");
  {
    /* The running executable, so a node can start its workers with it. */
    char exe[4096];
    size_t n = sizeof(exe);
    if (uv_exepath(exe, &n) == 0) {
      lua_pushlstring(L, exe, n);
      lua_setfield(L, -2, "_exe");
    }
  }
  lua_getfield(L, LUA_REGISTRYINDEX, WAIT_KEY);
  lua_setfield(L, -2, "_WAIT");
  return 0;
}

/* ---- setup and teardown ------------------------------------------------ */

/* The counting allocator of a sandbox (bt_rt_count_memory). */
static int mem_counted;
static size_t mem_used, mem_max;

static void *counted_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  void *p;
  (void) ud;
  if (nsize == 0) {
    free(ptr);
    mem_used -= ptr ? osize : 0;
    return NULL;
  }
  if (!ptr) osize = 0;
  if (nsize > osize && mem_max && (nsize - osize > mem_max || mem_used > mem_max - (nsize - osize)))
    return NULL;
  p = realloc(ptr, nsize);
  if (!p) return nsize <= osize ? ptr : NULL; /* (a shrink must not fail) */
  mem_used = mem_used - osize + nsize;
  return p;
}

void bt_rt_count_memory(size_t max) {
  mem_counted = 1;
  mem_max = max;
}

void bt_rt_memory_limit(size_t max) {
  mem_max = max;
}

size_t bt_rt_memory_used(void) {
  return mem_used;
}

static int on_panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "baton: unprotected Lua error: %s\n", msg ? msg : "?");
  return 0;
}

static int open_baton(lua_State *L) {
  int (*opens[])(lua_State *) = {
    bt_lua_open_core, bt_lua_open_json, bt_lua_open_log, bt_lua_open_etcd,
    bt_lua_open_exec, bt_lua_open_http, bt_lua_open_cron, bt_lua_open_signal,
    bt_lua_open_chan, bt_lua_open_httpd, bt_lua_open_sign, bt_lua_open_hash,
    bt_lua_open_sandbox, bt_lua_open_os, NULL
  };
  int i;

  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_newtable(L);
  /* stack: package loaded baton */
  for (i = 0; opens[i]; i++) opens[i](L);
  /* baton's modules: from the library as read when the process started */
  bt__lib_open(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "baton");
  lua_setglobal(L, "baton");
  lua_pop(L, 2);
  /* The parts written in Lua: the etcd API, coroutine wrappers, ... */
  lua_getglobal(L, "require");
  lua_pushstring(L, "baton.core");
  lua_call(L, 1, 0);
  return 0;
}

bt_rt_t *bt_rt_new(void) {
  bt_rt_t *rt;
  lua_State *L;
  char err[4096 * 4];
  /* The library is read once per process (lib.h), or taken from the node. */
  if (bt_lib_init(BATON_VERSION, BATON_LUADIR, err, sizeof(err))) {
    fprintf(stderr, "baton: %s\n", err);
    return NULL;
  }
  rt = calloc(1, sizeof(*rt));
  if (!rt) return NULL;
  /* A peer (etcd, a child's stdin) closing on us must be an EPIPE error,
   * not the end of the process. */
  signal(SIGPIPE, SIG_IGN);
  if (uv_loop_init(&rt->loop)) {
    free(rt);
    return NULL;
  }
  uv_idle_init(&rt->loop, &rt->idle);
  rt->idle.data = rt;
  L = mem_counted ? lua_newstate(counted_alloc, NULL) : luaL_newstate();
  if (L && mem_counted) lua_atpanic(L, on_panic);
  if (!L) {
    bt_rt_free(rt);
    return NULL;
  }
  rt->L = L;
  *(bt_rt_t **) lua_newuserdata(L, sizeof(bt_rt_t *)) = rt;
  lua_setfield(L, LUA_REGISTRYINDEX, RT_KEY);
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, WAIT_KEY);
  lua_pushcfunction(L, open_baton);
  if (lua_pcall(L, 0, 0, 0)) {
    fprintf(stderr, "baton: cannot load the Lua library: %s\n", lua_tostring(L, -1));
    bt_rt_free(rt);
    return NULL;
  }
  return rt;
}

void bt_rt_run(bt_rt_t *rt) {
  uv_run(&rt->loop, UV_RUN_DEFAULT);
}

static void walk_close(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

void bt_rt_free(bt_rt_t *rt) {
  bt_closer_t *c;
  if (!rt) return;
  while (rt->all) bt_co_kill(rt->all, NULL);
  while ((c = rt->closers)) {
    bt_rt_del_closer(rt, c);
    c->close(c);
  }
  uv_run(&rt->loop, UV_RUN_DEFAULT);
  if (!uv_is_closing((uv_handle_t *) &rt->idle))
    uv_close((uv_handle_t *) &rt->idle, NULL);
  uv_run(&rt->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&rt->loop) == UV_EBUSY) {
    /* Something forgot its handle; close it rather than leak the loop. */
    uv_walk(&rt->loop, walk_close, NULL);
    uv_run(&rt->loop, UV_RUN_DEFAULT);
    uv_loop_close(&rt->loop);
  }
  if (rt->L) lua_close(rt->L);
  free(rt);
}
