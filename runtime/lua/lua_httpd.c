/*
 * baton.httpd: an HTTP/1.1 server on the runtime's loop (httpd.c), each
 * request handled by a Lua function in its own baton coroutine, which may
 * wait (etcd calls, baton.sleep) while the loop serves everything else.
 *
 *   local srv = assert(baton.httpd.listen{
 *     addr = "127.0.0.1:0", timeout = 30, max_body = 1048576,
 *     handler = function(req)
 *       req:respond(200, {["content-type"] = "text/plain"}, req.path)
 *     end})
 *   -- srv.port, srv.addr, srv:close()
 *
 * The request is a userdata (baton.httpd.request): method, path (raw, not
 * percent-decoded, without the query), query (raw, "" when none), version
 * ("HTTP/1.1"), headers (names lower-cased, repeated ones joined with
 * ", "), body, remote, and respond(status, headers, body), which may be
 * called once. A handler that raises gets 500 {"error":"internal
 * error","code":"EINTERNAL"} and the error logged; one that ends without
 * respond gets 500 {"error":"no answer",...}.
 *
 * Options besides addr and handler: cert, key (PEM text), max_body,
 * max_body_total (bytes of bodies held at once by all requests; a request
 * past it gets 503 EBUSY), timeout (idle seconds), max_connections,
 * headers (a table added to every answer that does not set the name, the
 * server's own 413 and 503 included), and check: a function called with
 * the request as soon as its headers are in, before its body is read (the
 * request has no body then). It may answer with req:respond (the body is
 * then never read) or return to let the request go on to the handler; it
 * runs in no coroutine, so it must not wait (a check that raises or waits
 * answers 500).
 *
 * Lifetimes. The server box (Lua memory) anchors itself and the handler in
 * the registry while open, so a server keeps serving when the caller drops
 * srv; close() (or the runtime's shutdown, through a closer) releases them.
 * A request box anchors itself until its coroutine ends; its C request is
 * given back to the server by the first respond (or by the end callback).
 */
#include "err.h"
#include "httpd.h"
#include "logfmt.h"
#include "lua_mod.h"
#include "rt.h"

#include <ctype.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SRV_MT "baton.httpd.server"
#define REQ_MT "baton.httpd.request"
#define DEFAULT_MAX_BODY 1048576.0
#define DEFAULT_TIMEOUT 30.0
#define DEFAULT_MAX_CONNS 4096.0

static const char ERR_INTERNAL[] =
  "{\"error\":\"internal error\",\"code\":\"EINTERNAL\"}";
static const char ERR_NO_ANSWER[] =
  "{\"error\":\"no answer\",\"code\":\"EINTERNAL\"}";
static const char *const JSON_HEADERS[] = {
  "content-type", "application/json", NULL
};

typedef struct {
  bt_closer_t closer;     /* first: close() receives &closer */
  bt_httpd_t *h;          /* NULL once closed */
  bt_rt_t *rt;
  lua_State *L;           /* the runtime's main state */
  int self_ref;           /* anchors this box while open */
  int handler_ref;
  int check_ref;          /* LUA_NOREF when there is no check */
} lsrv_t;

typedef struct {
  bt_httpd_req_t *r;      /* NULL once answered */
  lua_State *L;
  int self_ref;           /* anchors this box until its coroutine ends */
} lreq_t;

/* ---- the server's callbacks --------------------------------------------- */

static void on_log(const char *msg, void *arg) {
  lsrv_t *b = arg;
  bt_log_field_t f[2] = {
    {"component", 9, "httpd", 5, 0},
    {"addr", 4, NULL, 0, 0},
  };
  f[1].val = b->h ? bt_httpd_addr(b->h) : "";
  f[1].val_len = strlen(f[1].val);
  bt_log_write(BT_LOG_DEBUG, msg, strlen(msg), f, 2);
}

/* Answers a request no handler will answer: 500 with body. */
static void answer_500(bt_httpd_req_t *r, const char *body) {
  bt_httpd_respond(r, 500, JSON_HEADERS, body, strlen(body));
}

/* Logs a handler's end without a proper answer. */
static void log_end(lreq_t *u, bt_log_level_t level, const char *msg,
                    const char *err) {
  lua_State *L = u->L;
  bt_log_field_t f[3];
  size_t n = 0, len;
  const char *s;
  /* stack: box fields */
  lua_rawgeti(L, LUA_REGISTRYINDEX, u->self_ref);
  lua_getfenv(L, -1);
  lua_getfield(L, -1, "method");
  s = lua_tolstring(L, -1, &len);
  f[n++] = (bt_log_field_t) {"method", 6, s ? s : "", s ? len : 0, 0};
  lua_getfield(L, -2, "path");
  s = lua_tolstring(L, -1, &len);
  f[n++] = (bt_log_field_t) {"path", 4, s ? s : "", s ? len : 0, 0};
  if (err) f[n++] = (bt_log_field_t) {"error", 5, err, strlen(err), 0};
  bt_log_write(level, msg, strlen(msg), f, n);
  lua_pop(L, 4);
}

/* A handler's coroutine ended (returned, raised or was killed): answer
 * 500 if it did not, and let go of the request box. */
static void req_end(bt_co_t *co, const char *err, void *arg) {
  lreq_t *u = arg;
  if (err) log_end(u, BT_LOG_ERROR, "http handler failed", err);
  else if (u->r) log_end(u, BT_LOG_WARN, "http handler did not respond", NULL);
  if (u->r) {
    bt_httpd_req_t *r = u->r;
    u->r = NULL;
    answer_500(r, err ? ERR_INTERNAL : ERR_NO_ANSWER);
  }
  luaL_unref(u->L, LUA_REGISTRYINDEX, u->self_ref);
  u->self_ref = LUA_NOREF;
}

typedef struct {
  lsrv_t *b;
  bt_httpd_req_t *r;
  lreq_t *u;
  int spawned;
} spawn_ctx_t;

/* Adds one request header to the table on top of L, name lower-cased;
 * a repeated name gets its values joined with ", ". */
static void add_header(const char *name, size_t nlen, const char *value,
                       size_t vlen, void *arg) {
  lua_State *L = arg;
  size_t i;
  luaL_Buffer lb;
  luaL_buffinit(L, &lb);
  for (i = 0; i < nlen; i++)
    luaL_addchar(&lb, (char) tolower((unsigned char) name[i]));
  luaL_pushresult(&lb);
  /* stack: headers name */
  lua_pushvalue(L, -1);
  lua_rawget(L, -3);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushlstring(L, value, vlen);
  } else {
    lua_pushliteral(L, ", ");
    lua_pushlstring(L, value, vlen);
    lua_concat(L, 3);
  }
  lua_rawset(L, -3);
}

/* Pushes a new request box for r (its fields; the body too when
 * with_body), not yet holding r. */
static lreq_t *push_box(lua_State *L, lsrv_t *b, bt_httpd_req_t *r,
                        int with_body) {
  lreq_t *u;
  const char *s;
  size_t len;
  u = lua_newuserdata(L, sizeof(*u));
  u->r = NULL;
  u->L = b->L;
  u->self_ref = LUA_NOREF;
  luaL_getmetatable(L, REQ_MT);
  lua_setmetatable(L, -2);
  /* stack: box */
  lua_createtable(L, 0, 7);
  lua_pushstring(L, bt_httpd_req_method(r));
  lua_setfield(L, -2, "method");
  s = bt_httpd_req_path(r, &len);
  lua_pushlstring(L, s, len);
  lua_setfield(L, -2, "path");
  s = bt_httpd_req_query(r, &len);
  lua_pushlstring(L, s, len);
  lua_setfield(L, -2, "query");
  lua_pushstring(L, bt_httpd_req_version(r));
  lua_setfield(L, -2, "version");
  if (with_body) {
    s = bt_httpd_req_body(r, &len);
    lua_pushlstring(L, s, len);
    lua_setfield(L, -2, "body");
  }
  lua_pushstring(L, bt_httpd_req_remote(r));
  lua_setfield(L, -2, "remote");
  lua_newtable(L);
  bt_httpd_req_headers(r, add_header, L);
  lua_setfield(L, -2, "headers");
  lua_setfenv(L, -2);
  return u;
}

/* Under lua_cpcall: builds the request box and starts the handler's
 * coroutine. An error here (out of memory) is caught by on_request. */
static int spawn_handler(lua_State *L) {
  spawn_ctx_t *c = lua_touserdata(L, 1);
  bt_httpd_req_t *r = c->r;
  lreq_t *u;

  lua_settop(L, 0);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->b->handler_ref);
  u = push_box(L, c->b, r, 1);
  /* stack: handler box */
  lua_pushvalue(L, -1);
  u->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  c->u = u;
  u->r = r;
  /* stack: handler box */
  if (!bt_co_spawn(c->b->rt, L, 1, req_end, u)) return 0;
  c->spawned = 1;
  return 0;
}

/* A request arrived (bt_httpd_request_cb): run the handler on it in a new
 * coroutine, which first runs on the next loop turn. */
static void on_request(bt_httpd_req_t *r, void *arg) {
  lsrv_t *b = arg;
  spawn_ctx_t c = {b, r, NULL, 0};
  int rc = lua_cpcall(b->L, spawn_handler, &c);
  if (rc) lua_pop(b->L, 1);
  if (c.spawned) return;
  if (c.u) {
    c.u->r = NULL;
    luaL_unref(b->L, LUA_REGISTRYINDEX, c.u->self_ref);
    c.u->self_ref = LUA_NOREF;
  }
  answer_500(r, ERR_INTERNAL);
}

typedef struct {
  lsrv_t *b;
  bt_httpd_req_t *r;
  lreq_t *u;
} check_ctx_t;

/* Under lua_cpcall: calls the check with a box for the request (which
 * holds it during the call only). */
static int call_check(lua_State *L) {
  check_ctx_t *c = lua_touserdata(L, 1);
  lua_settop(L, 0);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->b->check_ref);
  c->u = push_box(L, c->b, c->r, 0);
  c->u->r = c->r;
  /* stack: check box */
  lua_call(L, 1, 0);
  return 0;
}

/* A request's headers arrived (bt_httpd_check_cb): the check may answer
 * it. A check that raises (or tries to wait) is logged and answered 500. */
static void on_check(bt_httpd_req_t *r, void *arg) {
  lsrv_t *b = arg;
  check_ctx_t c = {b, r, NULL};
  int rc = lua_cpcall(b->L, call_check, &c);
  int answered = c.u && !c.u->r;
  if (c.u) c.u->r = NULL;   /* the box is done with r, answered or not */
  if (rc) {
    const char *err = lua_tostring(b->L, -1);
    bt_log_field_t f[3] = {
      {"method", 6, bt_httpd_req_method(r), strlen(bt_httpd_req_method(r)), 0},
      {"path", 4, NULL, 0, 0},
      {"error", 5, err ? err : "?", err ? strlen(err) : 1, 0},
    };
    f[1].val = bt_httpd_req_path(r, &f[1].val_len);
    bt_log_write(BT_LOG_ERROR, "http check failed", 17, f, 3);
    lua_pop(b->L, 1);
    if (!answered) answer_500(r, ERR_INTERNAL);
  }
}

/* ---- the request object ------------------------------------------------- */

/* req:respond(status [, headers [, body]]) -> true. Raises when the
 * request was answered already; an answer to a client that has gone is
 * dropped. */
static int req_respond(lua_State *L) {
  lreq_t *u = luaL_checkudata(L, 1, REQ_MT);
  const char **headers = NULL;
  const char *body = NULL;
  size_t body_len = 0;
  lua_Number status;
  bt_httpd_req_t *r;
  int rc;

  if (!u->r) return luaL_error(L, "req:respond: the request was answered "
                               "already (or its check ended: the handler "
                               "answers it)");
  lua_settop(L, 4);
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "req:respond: status must be a number (got %s)",
                      luaL_typename(L, 2));
  status = lua_tonumber(L, 2);
  if (status != (int) status || status < 200 || status > 599)
    return luaL_error(L, "req:respond: status must be an integer from 200 "
                      "to 599 (got %s)", lua_tostring(L, 2));
  if (!lua_isnil(L, 4)) {
    if (lua_type(L, 4) != LUA_TSTRING)
      return luaL_error(L, "req:respond: body must be a string (got %s)",
                        luaL_typename(L, 4));
    body = lua_tolstring(L, 4, &body_len);
  }
  if (!lua_isnil(L, 3)) {
    if (lua_type(L, 3) != LUA_TTABLE)
      return luaL_error(L, "req:respond: headers must be a table (got %s)",
                        luaL_typename(L, 3));
    headers = bt__lua_header_pairs(L, 3, "req:respond");
  }
  r = u->r;
  u->r = NULL;
  rc = bt_httpd_respond(r, (int) status, headers, body, body_len);
  if (rc == BT_ENOMEM) return bt_push_fail(L, rc, "cannot build the answer");
  if (rc) return bt_push_fail(L, rc, "libmicrohttpd refused the headers");
  lua_pushboolean(L, 1);
  return 1;
}

/* box.<field> for a request or a server box of metatable mt: a method
 * (upvalue 1: the methods), else a field of the box's environment table. */
static int box_index(lua_State *L, const char *mt) {
  luaL_checkudata(L, 1, mt);
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);
  lua_getfenv(L, 1);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

static int req_index(lua_State *L) { return box_index(L, REQ_MT); }

static int req_tostring(lua_State *L) {
  luaL_checkudata(L, 1, REQ_MT);
  lua_getfenv(L, 1);
  lua_getfield(L, -1, "method");
  lua_getfield(L, -2, "path");
  lua_pushfstring(L, "baton.httpd.request: %s %s", lua_tostring(L, -2),
                  lua_tostring(L, -1));
  return 1;
}

/* Safety net: a request box collected with its request unanswered (its
 * coroutine's end normally answers). No Lua is called. */
static int req_gc(lua_State *L) {
  lreq_t *u = luaL_checkudata(L, 1, REQ_MT);
  if (u->r) {
    bt_httpd_req_t *r = u->r;
    u->r = NULL;
    answer_500(r, ERR_NO_ANSWER);
  }
  return 0;
}

/* ---- the server object -------------------------------------------------- */

/* Stops the server's C side (idempotent): no Lua is called. */
static void srv_stop(lsrv_t *b) {
  bt_httpd_t *h = b->h;
  if (!h) return;
  b->h = NULL;
  bt_rt_del_closer(b->rt, &b->closer);
  bt_httpd_close(h);
}

/* Closes the server (idempotent): stops listening, lets the requests in
 * flight be answered, and drops the box's anchors. */
static void srv_shut(lsrv_t *b) {
  if (!b->h) return;
  srv_stop(b);
  luaL_unref(b->L, LUA_REGISTRYINDEX, b->handler_ref);
  b->handler_ref = LUA_NOREF;
  luaL_unref(b->L, LUA_REGISTRYINDEX, b->check_ref);
  b->check_ref = LUA_NOREF;
  luaL_unref(b->L, LUA_REGISTRYINDEX, b->self_ref);
  b->self_ref = LUA_NOREF;
}

static void srv_closer(bt_closer_t *self) {
  srv_shut((lsrv_t *) self);
}

/* srv:close() -> true; returns at once. */
static int srv_close(lua_State *L) {
  srv_shut(luaL_checkudata(L, 1, SRV_MT));
  lua_pushboolean(L, 1);
  return 1;
}

static int srv_index(lua_State *L) { return box_index(L, SRV_MT); }

static int srv_tostring(lua_State *L) {
  lsrv_t *b = luaL_checkudata(L, 1, SRV_MT);
  lua_getfenv(L, 1);
  lua_getfield(L, -1, "addr");
  lua_pushfstring(L, "baton.httpd.server: %s%s", lua_tostring(L, -1),
                  b->h ? "" : " (closed)");
  return 1;
}

/* Safety net; the box is anchored while open, so this only runs at
 * lua_close, after the closers. */
static int srv_gc(lua_State *L) {
  srv_stop(luaL_checkudata(L, 1, SRV_MT));
  return 0;
}

/* ---- baton.httpd.listen ------------------------------------------------- */

/* Reads the number option k of the table at 1, between lo and hi, or def. */
static double opt_number(lua_State *L, const char *k, double def, double lo,
                         double hi) {
  double v;
  lua_getfield(L, 1, k);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) != LUA_TNUMBER)
    luaL_error(L, "baton.httpd.listen: %s must be a number (got %s)", k,
               luaL_typename(L, -1));
  v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (!(v >= lo && v <= hi))
    luaL_error(L, "baton.httpd.listen: %s must be from %.0f to %.0f", k, lo,
               hi);
  return v;
}

/* Reads the string option k of the table at 1 (left on the stack, so the
 * string stays valid), or NULL. */
static const char *opt_string(lua_State *L, const char *k) {
  lua_getfield(L, 1, k);
  if (lua_isnil(L, -1)) return NULL;
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "baton.httpd.listen: %s must be a string (got %s)", k,
               luaL_typename(L, -1));
  return lua_tostring(L, -1);
}

/* baton.httpd.listen{addr=, handler=, check=, cert=, key=, max_body=,
 * max_body_total=, timeout=, max_connections=, headers=} -> server | nil,
 * err, code */
static int l_listen(lua_State *L) {
  static const char *const keys[] = {
    "addr", "handler", "check", "cert", "key", "max_body", "max_body_total",
    "timeout", "max_connections", "headers", NULL
  };
  bt_httpd_opts_t o;
  char msg[600];
  lsrv_t *b;
  double timeout;
  int rc, i;

  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "baton.httpd.listen: expects a table {addr=, "
                      "handler=, ...} (got %s)", luaL_typename(L, 1));
  lua_settop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k;
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "baton.httpd.listen: unexpected %s key",
                        luaL_typename(L, -1));
    k = lua_tostring(L, -1);
    for (i = 0; keys[i] && strcmp(keys[i], k); i++) {}
    if (!keys[i])
      return luaL_error(L, "baton.httpd.listen: unknown option '%s' "
                        "(expected addr, handler, check, cert, key, "
                        "max_body, max_body_total, timeout, "
                        "max_connections or headers)", k);
  }
  memset(&o, 0, sizeof(o));
  o.addr = opt_string(L, "addr");                              /* 2 */
  if (!o.addr) return luaL_error(L, "baton.httpd.listen: addr is required");
  lua_getfield(L, 1, "handler");                               /* 3 */
  if (lua_type(L, 3) != LUA_TFUNCTION)
    return luaL_error(L, "baton.httpd.listen: handler must be a function "
                      "(got %s)", luaL_typename(L, 3));
  o.cert = opt_string(L, "cert");                              /* 4 */
  o.key = opt_string(L, "key");                                /* 5 */
  if (!o.cert != !o.key)
    return luaL_error(L, "baton.httpd.listen: cert and key go together "
                      "(both PEM text, or neither)");
  o.max_body = (size_t) opt_number(L, "max_body", DEFAULT_MAX_BODY, 0,
                                   1099511627776.0);
  timeout = opt_number(L, "timeout", DEFAULT_TIMEOUT, 0, 86400);
  o.timeout_secs = (unsigned) timeout;
  if (o.timeout_secs < timeout) o.timeout_secs++;   /* 0.5 s -> 1 s */
  o.max_connections = (unsigned) opt_number(L, "max_connections",
                                            DEFAULT_MAX_CONNS, 1, 1000000);
  o.max_body_total = (size_t) opt_number(L, "max_body_total", 0, 0,
                                         1099511627776.0);
  if (o.max_body_total && o.max_body_total < o.max_body)
    return luaL_error(L, "baton.httpd.listen: max_body_total must not be "
                      "under max_body");
  lua_getfield(L, 1, "check");                                 /* 6 */
  if (!lua_isnil(L, 6) && lua_type(L, 6) != LUA_TFUNCTION)
    return luaL_error(L, "baton.httpd.listen: check must be a function "
                      "(got %s)", luaL_typename(L, 6));
  lua_getfield(L, 1, "headers");                               /* 7 */
  if (!lua_isnil(L, 7)) {
    if (lua_type(L, 7) != LUA_TTABLE)
      return luaL_error(L, "baton.httpd.listen: headers must be a table "
                        "(got %s)", luaL_typename(L, 7));
    o.headers = bt__lua_header_pairs(L, 7, "baton.httpd.listen"); /* 8 9 */
  }
  lua_settop(L, 9);

  /* Lua objects first: the box, its fields table and its anchors. */
  b = lua_newuserdata(L, sizeof(*b));                          /* 10 */
  memset(b, 0, sizeof(*b));
  b->closer.close = srv_closer;
  b->rt = bt_rt_from(L);
  b->L = bt_rt_L(b->rt);
  b->self_ref = b->handler_ref = b->check_ref = LUA_NOREF;
  luaL_getmetatable(L, SRV_MT);
  lua_setmetatable(L, 10);
  lua_createtable(L, 0, 2);
  lua_setfenv(L, 10);
  lua_pushvalue(L, 3);
  b->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (!lua_isnil(L, 6)) {
    lua_pushvalue(L, 6);
    b->check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_pushvalue(L, 10);
  b->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  o.on_check = b->check_ref == LUA_NOREF ? NULL : on_check;
  o.on_request = on_request;
  o.on_log = on_log;
  o.arg = b;
  rc = bt_httpd_listen(bt_lua_loop(L), &o, &b->h, msg, sizeof(msg));
  if (rc) {
    luaL_unref(L, LUA_REGISTRYINDEX, b->handler_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, b->check_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, b->self_ref);
    b->handler_ref = b->check_ref = b->self_ref = LUA_NOREF;
    return bt_push_fail(L, rc, msg);
  }
  bt_rt_add_closer(b->rt, &b->closer);
  lua_getfenv(L, 10);
  lua_pushinteger(L, bt_httpd_port(b->h));
  lua_setfield(L, -2, "port");
  lua_pushstring(L, bt_httpd_addr(b->h));
  lua_setfield(L, -2, "addr");
  lua_settop(L, 10);
  return 1;
}

int bt_lua_open_httpd(lua_State *L) {
  /* stack: baton */
  luaL_newmetatable(L, REQ_MT);
  lua_newtable(L);
  lua_pushcfunction(L, req_respond);
  lua_setfield(L, -2, "respond");
  lua_pushcclosure(L, req_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, req_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, req_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  luaL_newmetatable(L, SRV_MT);
  lua_newtable(L);
  lua_pushcfunction(L, srv_close);
  lua_setfield(L, -2, "close");
  lua_pushcclosure(L, srv_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, srv_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, srv_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  lua_newtable(L);
  lua_pushcfunction(L, l_listen);
  lua_setfield(L, -2, "listen");
  lua_setfield(L, -2, "httpd");
  return 0;
}
