/*
 * baton._etcd: the binding of the etcd engine (etcd.h). It moves JSON
 * bodies and results between Lua and the engine; the request shapes and the
 * documented API (get/put/delete/txn/grant/watch) are in lua/baton/etcd.lua.
 *
 *   _etcd.new(opts)                  -> client | nil, err, code
 *   client:call(path, body, idem)    -> decoded JSON table | nil, err, code
 *   client:watch(opts)               -> watcher, revision, created_revision
 *                                       | nil, err, code
 *   watcher:next([timeout])          -> events, revision | nil, err, code[, rev]
 *   watcher:cancel()
 *   client:keepalive(id, ttl)        -> keeper; keeper:state(), :wait(), :stop()
 *   client:close(), client:endpoint()
 *   _etcd.b64encode(s), _etcd.b64decode(s)
 */
#include "b64.h"
#include "err.h"
#include "etcd.h"
#include "fence.h"
#include "lua_json.h"
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define CLIENT_MT "baton.etcd_client"
#define WATCH_MT "baton.watcher"
#define KEEP_MT "baton.keepalive"

/* ---- client ------------------------------------------------------------ */

typedef struct {
  bt_etcd_t *c;
  bt_rt_t *rt;
  bt_closer_t closer;        /* first field after these: see closer_client */
} client_t;

static void client_close(client_t *cl) {
  if (!cl->c) return;
  bt_rt_del_closer(cl->rt, &cl->closer);
  bt_etcd_close(cl->c);
  cl->c = NULL;
}

static void on_closer(bt_closer_t *self) {
  client_t *cl = (client_t *) ((char *) self - offsetof(client_t, closer));
  if (!cl->c) return;
  bt_etcd_close(cl->c);
  cl->c = NULL;
}

static client_t *check_client(lua_State *L) {
  client_t *cl = luaL_checkudata(L, 1, CLIENT_MT);
  if (!cl->c) luaL_error(L, "attempt to use a closed etcd client");
  return cl;
}

static const char *opt_string(lua_State *L, int idx, const char *name) {
  const char *s;
  lua_getfield(L, idx, name);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "etcd option %s: string expected, got %s", name,
               luaL_typename(L, -1));
  s = lua_tostring(L, -1);
  lua_pop(L, 1); /* the string stays alive in the options table */
  return s;
}

static double opt_number(lua_State *L, int idx, const char *name, double dflt) {
  double d = dflt;
  lua_getfield(L, idx, name);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "option %s: number expected, got %s", name,
                 luaL_typename(L, -1));
    d = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return d;
}

static int opt_bool(lua_State *L, int idx, const char *name) {
  int b;
  lua_getfield(L, idx, name);
  b = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return b;
}

static int l_new(lua_State *L) {
  bt_etcd_opts_t o;
  client_t *cl;
  char msg[512] = "";
  int err;

  luaL_checktype(L, 1, LUA_TTABLE);
  memset(&o, 0, sizeof(o));
  o.endpoints = opt_string(L, 1, "endpoints");
  o.user = opt_string(L, 1, "user");
  o.password = opt_string(L, 1, "password");
  o.cacert = opt_string(L, 1, "cacert");
  o.cert = opt_string(L, 1, "cert");
  o.key = opt_string(L, 1, "key");
  o.timeout_ms = (long) (opt_number(L, 1, "timeout", 5) * 1000);
  o.connect_timeout_ms = (long) (opt_number(L, 1, "connect_timeout", 1) * 1000);
  cl = lua_newuserdata(L, sizeof(*cl));
  memset(cl, 0, sizeof(*cl));
  luaL_setmetatable(L, CLIENT_MT);
  cl->c = bt_etcd_new(bt_lua_loop(L), &o, &err, msg, sizeof(msg));
  if (!cl->c) return bt_push_fail(L, err, msg);
  cl->rt = bt_rt_from(L);
  cl->closer.close = on_closer;
  bt_rt_add_closer(cl->rt, &cl->closer);
  return 1;
}

static int l_client_gc(lua_State *L) {
  client_close(luaL_checkudata(L, 1, CLIENT_MT));
  return 0;
}

static int l_client_close(lua_State *L) {
  client_close(check_client(L));
  lua_pushboolean(L, 1);
  return 1;
}

static int l_client_endpoint(lua_State *L) {
  lua_pushstring(L, bt_etcd_endpoint(check_client(L)->c));
  return 1;
}

typedef struct {
  bt_co_t *co;
  bt_etcd_call_t *call;
  int killed;
} creq_t;

static void on_call(const bt_etcd_res_t *res, void *arg) {
  creq_t *r = arg;
  if (!r->killed) {
    lua_State *S = bt_co_stack(r->co);
    if (res->err) {
      bt_co_resume(r->co, bt_push_fail(S, res->err, res->msg));
    } else {
      bt_lua_push_json(S, res->json);
      bt_co_resume(r->co, 1);
    }
  }
  free(r);
}

static void call_cancel(void *data) {
  creq_t *r = data;
  r->killed = 1;
  bt_etcd_call_cancel(r->call);
}

static int l_call(lua_State *L) {
  client_t *cl = check_client(L);
  const char *path = luaL_checkstring(L, 2);
  int flags = lua_toboolean(L, 4) ? BT_ETCD_IDEMPOTENT : 0;
  char err[256];
  cJSON *j;
  bt_co_t *co;
  creq_t *r;
  int e;

  luaL_checktype(L, 3, LUA_TTABLE);
  co = bt_co_current(L, "etcd request");
  j = bt_lua_to_json(L, 3, err, sizeof(err));
  if (!j) return luaL_error(L, "etcd request body: %s", err);
  r = calloc(1, sizeof(*r));
  if (!r) {
    cJSON_Delete(j);
    return bt_push_fail(L, BT_ENOMEM, NULL);
  }
  r->co = co;
  e = bt_etcd_call(cl->c, path, j, flags, on_call, r, &r->call);
  cJSON_Delete(j);
  if (e) {
    free(r);
    return bt_push_fail(L, e, NULL);
  }
  return bt_co_wait(L, co, call_cancel, r);
}

/* ---- watch ------------------------------------------------------------- */

enum { W_CREATING, W_LIVE, W_ENDED };

typedef struct {
  bt_etcd_watch_t *w;
  lua_State *L;              /* the main state */
  int self_ref;              /* pins the userdata while the C watch lives */
  int queue_ref;             /* {{events, revision}, ...} */
  int qhead, qtail;
  bt_co_t *waiter;
  uv_timer_t *timer;         /* next()'s timeout; freed in its close cb */
  int state;
  int err;
  int connects;              /* streams established, kept after the end */
  int64_t rev;               /* created revision, or the compact revision */
  char msg[512];
} watch_t;

static void on_timer_free(uv_handle_t *h) {
  free(h);
}

static void watch_push_self(lua_State *S, watch_t *wt) {
  lua_rawgeti(S, LUA_REGISTRYINDEX, wt->self_ref);
}

/* Pushes the ended watch's failure on S; returns the count. */
static int push_end(lua_State *S, watch_t *wt) {
  int n = bt_push_fail(S, wt->err ? wt->err : BT_ECANCELED,
                       wt->msg[0] ? wt->msg : "watch was cancelled");
  if (wt->err == BT_ECOMPACTED) {
    lua_pushnumber(S, (double) wt->rev);
    n++;
  }
  return n;
}

/* Pops the oldest queued response onto S (events, revision). */
static int pop_queue(lua_State *S, watch_t *wt) {
  lua_rawgeti(S, LUA_REGISTRYINDEX, wt->queue_ref);
  lua_rawgeti(S, -1, wt->qhead);
  lua_pushnil(S);
  lua_rawseti(S, -3, wt->qhead);
  wt->qhead++;
  /* stack: queue item */
  lua_rawgeti(S, -1, 1);
  lua_rawgeti(S, -2, 2);
  lua_remove(S, -3);
  lua_remove(S, -3);
  return 2;
}

static void resume_waiter(watch_t *wt) {
  bt_co_t *co = wt->waiter;
  lua_State *S;
  if (!co) return;
  wt->waiter = NULL;
  if (wt->timer) uv_timer_stop(wt->timer);
  S = bt_co_stack(co);
  if (wt->state == W_CREATING) return;
  if (wt->qhead < wt->qtail) bt_co_resume(co, pop_queue(S, wt));
  else if (wt->state == W_ENDED) bt_co_resume(co, push_end(S, wt));
}

static void on_watch(bt_etcd_watch_t *w, int kind, int err, cJSON *json,
                     int64_t rev, const char *msg, void *arg) {
  watch_t *wt = arg;
  lua_State *L = wt->L;

  switch (kind) {
  case BT_WATCH_CREATED:
    wt->state = W_LIVE;
    wt->rev = rev;
    if (wt->waiter) {
      bt_co_t *co = wt->waiter;
      lua_State *S = bt_co_stack(co);
      wt->waiter = NULL;
      watch_push_self(S, wt);
      lua_pushnumber(S, (double) rev);
      lua_pushnumber(S, (double) bt_etcd_watch_created_revision(w));
      bt_co_resume(co, 3);
    }
    return;
  case BT_WATCH_EVENTS:
    lua_rawgeti(L, LUA_REGISTRYINDEX, wt->queue_ref);
    lua_createtable(L, 2, 0);
    bt_lua_push_json(L, json);
    lua_rawseti(L, -2, 1);
    lua_pushnumber(L, (double) rev);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, wt->qtail++);
    lua_pop(L, 1);
    resume_waiter(wt);
    return;
  case BT_WATCH_COMPACTED:
  case BT_WATCH_ERROR:
    if (wt->state == W_CREATING && wt->waiter) {
      bt_co_t *co = wt->waiter;
      wt->waiter = NULL;
      wt->state = W_ENDED;
      wt->err = err;
      wt->rev = rev;
      snprintf(wt->msg, sizeof(wt->msg), "%s", msg);
      bt_co_resume(co, push_end(bt_co_stack(co), wt));
      return;
    }
    wt->state = W_ENDED;
    wt->err = err;
    wt->rev = rev;
    snprintf(wt->msg, sizeof(wt->msg), "%s", msg);
    resume_waiter(wt);
    return;
  case BT_WATCH_CLOSED:
    wt->connects = bt_etcd_watch_connects(w);
    wt->w = NULL;
    if (wt->state != W_ENDED) {
      wt->state = W_ENDED;
      wt->err = BT_ECANCELED;
      snprintf(wt->msg, sizeof(wt->msg), "watch was cancelled");
    }
    if (wt->waiter) {
      bt_co_t *co = wt->waiter;
      wt->waiter = NULL;
      if (wt->timer) uv_timer_stop(wt->timer);
      bt_co_resume(co, push_end(bt_co_stack(co), wt));
    }
    if (wt->timer) {
      uv_close((uv_handle_t *) wt->timer, on_timer_free);
      wt->timer = NULL;
    }
    luaL_unref(L, LUA_REGISTRYINDEX, wt->self_ref);
    wt->self_ref = LUA_NOREF;
    return;
  }
}

static void watch_wait_cancel(void *data) {
  watch_t *wt = data;
  wt->waiter = NULL;
  if (wt->timer) uv_timer_stop(wt->timer);
  if (wt->state == W_CREATING && wt->w) bt_etcd_watch_cancel(wt->w);
}

static int l_watch(lua_State *L) {
  client_t *cl = check_client(L);
  bt_etcd_watch_opts_t o;
  watch_t *wt;
  bt_co_t *co;
  int e;

  luaL_checktype(L, 2, LUA_TTABLE);
  memset(&o, 0, sizeof(o));
  lua_getfield(L, 2, "key");
  o.key = luaL_checklstring(L, -1, &o.key_len);
  lua_getfield(L, 2, "range_end");
  if (!lua_isnil(L, -1)) o.range_end = luaL_checklstring(L, -1, &o.range_end_len);
  lua_pop(L, 2); /* both strings stay alive in the options table */
  o.start_revision = (int64_t) opt_number(L, 2, "start_revision", 0);
  o.prev_kv = opt_bool(L, 2, "prev_kv");
  o.no_put = opt_bool(L, 2, "no_put");
  o.no_delete = opt_bool(L, 2, "no_delete");
  o.idle_ms = (long) (opt_number(L, 2, "idle_timeout", 0) * 1000);
  co = bt_co_current(L, "etcd watch");

  wt = lua_newuserdata(L, sizeof(*wt));
  memset(wt, 0, sizeof(*wt));
  wt->self_ref = wt->queue_ref = LUA_NOREF;
  luaL_setmetatable(L, WATCH_MT);
  lua_newtable(L);
  wt->queue_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, -1);
  wt->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  wt->L = bt_rt_L(bt_rt_from(L));
  wt->qhead = wt->qtail = 1;
  wt->state = W_CREATING;
  wt->waiter = co;
  e = bt_etcd_watch(cl->c, &o, on_watch, wt, &wt->w);
  if (e) {
    luaL_unref(L, LUA_REGISTRYINDEX, wt->self_ref);
    wt->self_ref = LUA_NOREF;
    wt->state = W_ENDED;
    return bt_push_fail(L, e, NULL);
  }
  return bt_co_wait(L, co, watch_wait_cancel, wt);
}

static void on_next_timeout(uv_timer_t *t) {
  watch_t *wt = t->data;
  bt_co_t *co = wt->waiter;
  if (!co) return;
  wt->waiter = NULL;
  bt_co_resume(co, bt_push_fail(bt_co_stack(co), BT_ETIMEDOUT,
                                "no watch event before the timeout"));
}

static int l_next(lua_State *L) {
  watch_t *wt = luaL_checkudata(L, 1, WATCH_MT);
  double timeout = luaL_optnumber(L, 2, -1);
  bt_co_t *co;

  if (wt->qhead < wt->qtail) return pop_queue(L, wt);
  if (wt->state == W_ENDED) return push_end(L, wt);
  if (wt->waiter) luaL_error(L, "watcher:next: another coroutine is already waiting on this watcher");
  co = bt_co_current(L, "watcher:next");
  if (timeout >= 0) {
    if (!wt->timer) {
      wt->timer = malloc(sizeof(uv_timer_t));
      if (!wt->timer) return bt_push_fail(L, BT_ENOMEM, NULL);
      uv_timer_init(bt_lua_loop(L), wt->timer);
      wt->timer->data = wt;
    }
    bt_timer_start_secs(L, wt->timer, on_next_timeout, timeout);
  }
  wt->waiter = co;
  return bt_co_wait(L, co, watch_wait_cancel, wt);
}

static int l_watch_cancel(lua_State *L) {
  watch_t *wt = luaL_checkudata(L, 1, WATCH_MT);
  if (wt->w) bt_etcd_watch_cancel(wt->w);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_watch_revision(lua_State *L) {
  watch_t *wt = luaL_checkudata(L, 1, WATCH_MT);
  lua_pushnumber(L, wt->w ? (double) bt_etcd_watch_next_revision(wt->w) - 1 : (double) wt->rev);
  return 1;
}

static int l_watch_connects(lua_State *L) {
  watch_t *wt = luaL_checkudata(L, 1, WATCH_MT);
  lua_pushinteger(L, wt->w ? bt_etcd_watch_connects(wt->w) : wt->connects);
  return 1;
}

static int l_watch_gc(lua_State *L) {
  watch_t *wt = luaL_checkudata(L, 1, WATCH_MT);
  /* Only reached once the C watch has closed (self_ref pins it before). */
  luaL_unref(L, LUA_REGISTRYINDEX, wt->queue_ref);
  wt->queue_ref = LUA_NOREF;
  return 0;
}

/* ---- lease keepalive --------------------------------------------------- */

enum { K_ALIVE, K_LOST, K_STOPPED };

typedef struct {
  bt_etcd_keep_t *k;
  lua_State *L;
  int self_ref;
  int state;
  bt_co_t *waiter;
  char msg[512];
} keep_t;

static void on_keep(bt_etcd_keep_t *k, int err, const char *msg, void *arg) {
  keep_t *kt = arg;
  if (err == BT_ELOST) {
    kt->state = K_LOST;
    snprintf(kt->msg, sizeof(kt->msg), "%s", msg);
  } else {
    kt->k = NULL;
    if (kt->state == K_ALIVE) kt->state = K_STOPPED;
  }
  if (kt->waiter) {
    bt_co_t *co = kt->waiter;
    lua_State *S = bt_co_stack(co);
    kt->waiter = NULL;
    lua_pushstring(S, kt->state == K_LOST ? "lost" : "stopped");
    lua_pushstring(S, kt->msg);
    bt_co_resume(co, 2);
  }
  if (err == BT_ECANCELED) {
    luaL_unref(kt->L, LUA_REGISTRYINDEX, kt->self_ref);
    kt->self_ref = LUA_NOREF;
  }
}

static int l_keepalive(lua_State *L) {
  client_t *cl = check_client(L);
  const char *id = luaL_checkstring(L, 2);
  lua_Number ttl = luaL_checknumber(L, 3);
  keep_t *kt;
  int e;
  if (ttl < 1) luaL_argerror(L, 3, "ttl must be >= 1");
  kt = lua_newuserdata(L, sizeof(*kt));
  memset(kt, 0, sizeof(*kt));
  kt->self_ref = LUA_NOREF;
  luaL_setmetatable(L, KEEP_MT);
  kt->L = bt_rt_L(bt_rt_from(L));
  e = bt_etcd_keep(cl->c, id, (int64_t) ttl, on_keep, kt, &kt->k);
  if (e) return bt_push_fail(L, e, NULL);
  lua_pushvalue(L, -1);
  kt->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int l_keep_state(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  lua_pushstring(L, kt->state == K_ALIVE ? "alive" : kt->state == K_LOST ? "lost" : "stopped");
  lua_pushstring(L, kt->msg);
  return 2;
}

static int l_keep_deadline(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  if (!kt->k) lua_pushnumber(L, 0);
  else lua_pushnumber(L, (double) bt_etcd_keep_deadline(kt->k) / 1000.0);
  return 1;
}

/* keeper:lose(why): the lease is lost now (the caller saw a key of it
 * deleted); the state turns "lost" and waiters wake. */
static int l_keep_lose(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  const char *why = luaL_checkstring(L, 2);
  if (kt->k && kt->state == K_ALIVE) bt_etcd_keep_lose(kt->k, why);
  return 0;
}

/* keeper:fence() -> fd | nil, err, code: this keepalive publishes its
 * deadline on the process's fence board (fence.h), whose descriptor the
 * node hands to its workers. */
static int l_keep_fence(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  int e;
  if (!kt->k) return bt_push_fail(L, BT_ECLOSED, "the keepalive has ended");
  e = bt_etcd_keep_fence(kt->k);
  if (e) return bt_push_fail(L, e, NULL);
  lua_pushinteger(L, bt_fence_create());
  return 1;
}

static void keep_wait_cancel(void *data) {
  ((keep_t *) data)->waiter = NULL;
}

static int l_keep_wait(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  bt_co_t *co;
  if (kt->state != K_ALIVE) return l_keep_state(L);
  if (kt->waiter) luaL_error(L, "keepalive:wait: another coroutine is already waiting");
  co = bt_co_current(L, "keepalive:wait");
  kt->waiter = co;
  return bt_co_wait(L, co, keep_wait_cancel, kt);
}

static int l_keep_stop(lua_State *L) {
  keep_t *kt = luaL_checkudata(L, 1, KEEP_MT);
  if (kt->k) bt_etcd_keep_stop(kt->k);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- base64 ------------------------------------------------------------ */

static int l_b64encode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  char small[256], *dst = small;
  size_t need = bt_b64_enclen(n), len;
  if (need > sizeof(small)) {
    dst = malloc(need);
    if (!dst) return luaL_error(L, "out of memory");
    len = bt_b64_encode(dst, s, n);
    lua_pushlstring(L, dst, len);
    free(dst);
    return 1;
  }
  len = bt_b64_encode(dst, s, n);
  lua_pushlstring(L, dst, len);
  return 1;
}

/* The lowercase hex form of a lease id, as etcd's lock and election
 * recipes name keys ("name/<hex>"); ids are decimal strings in Lua. */
static int l_hexid(lua_State *L) {
  const char *s = luaL_checkstring(L, 1);
  char *end, buf[24];
  long long v = strtoll(s, &end, 10);
  if (!*s || *end) luaL_argerror(L, 1, "a lease id (decimal digits) expected");
  snprintf(buf, sizeof(buf), "%llx", (unsigned long long) v);
  lua_pushstring(L, buf);
  return 1;
}

static int l_b64decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  char small[256], *dst = small;
  long len;
  if (n / 4 * 3 > sizeof(small)) {
    dst = malloc(n / 4 * 3 + 1);
    if (!dst) return luaL_error(L, "out of memory");
  }
  len = bt_b64_decode(dst, s, n);
  if (len < 0) {
    if (dst != small) free(dst);
    return bt_push_fail(L, BT_EPROTO, "malformed base64");
  }
  lua_pushlstring(L, dst, (size_t) len);
  if (dst != small) free(dst);
  return 1;
}

static void new_mt(lua_State *L, const char *name, const luaL_Reg *methods,
                   lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  if (gc) {
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
}

int bt_lua_open_etcd(lua_State *L) {
  static const luaL_Reg client_m[] = {
    {"call", l_call}, {"watch", l_watch}, {"keepalive", l_keepalive},
    {"close", l_client_close}, {"endpoint", l_client_endpoint}, {NULL, NULL}
  };
  static const luaL_Reg watch_m[] = {
    {"next", l_next}, {"cancel", l_watch_cancel}, {"revision", l_watch_revision},
    {"connects", l_watch_connects}, {NULL, NULL}
  };
  static const luaL_Reg keep_m[] = {
    {"state", l_keep_state}, {"wait", l_keep_wait}, {"stop", l_keep_stop},
    {"deadline", l_keep_deadline}, {"fence", l_keep_fence}, {"lose", l_keep_lose},
    {NULL, NULL}
  };
  new_mt(L, CLIENT_MT, client_m, l_client_gc);
  new_mt(L, WATCH_MT, watch_m, l_watch_gc);
  new_mt(L, KEEP_MT, keep_m, NULL);
  lua_newtable(L);
  lua_pushcfunction(L, l_new);
  lua_setfield(L, -2, "new");
  lua_pushcfunction(L, l_b64encode);
  lua_setfield(L, -2, "b64encode");
  lua_pushcfunction(L, l_b64decode);
  lua_setfield(L, -2, "b64decode");
  lua_pushcfunction(L, l_hexid);
  lua_setfield(L, -2, "hexid");
  lua_setfield(L, -2, "_etcd");
  return 0;
}
