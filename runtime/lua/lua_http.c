/*
 * baton.http: one HTTP request, waited for without blocking the loop.
 *
 *   local r = assert(baton.http{method = "POST", url = url, body = b,
 *                               headers = {["Content-Type"] = "text/plain"},
 *                               redirects = 3})
 *   -- r.status, r.headers["content-type"], r.body, r.http_version,
 *   -- r.url and r.redirects (with redirects = n > 0)
 *
 * Proxies: the environment's (curl reads http_proxy, https_proxy,
 * no_proxy), unless proxy = URL or false. HTTP/2 is offered over https for
 * bodies up to 64 KiB (l_http says why not above). docs/lua-api.md has the
 * rules (what a redirect keeps, which codes).
 *
 * All requests of a runtime share one bt_http_t (and so its kept-alive
 * connections). It is made on first use and closed by the runtime's
 * shutdown through a bt_closer_t; a later request makes a new one.
 */
#include "err.h"
#include "http.h"
#include "lua_mod.h"
#include "rt.h"

#include <ctype.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CLIENT_KEY "baton.http.client"
#define DEFAULT_TIMEOUT 30.0
#define ERRTEXT_MAX 256         /* the HTTP client's error text */
#define MAX_REDIRECTS 50        /* curl's own default limit */
#define H2_MAX_BODY 65535       /* HTTP/2's default initial window */

/* The runtime's client, boxed in a userdata kept in the registry. The box
 * lives until lua_close, which comes after the runtime has run its
 * closers; h is NULL while there is no open client. */
typedef struct {
  bt_closer_t closer;     /* first: close() receives &closer */
  bt_http_t *h;
} client_t;

/* One request in flight. co is NULL once the coroutine was killed: then
 * on_done only frees this. */
typedef struct {
  bt_co_t *co;
  bt_http_req_t *req;
  double timeout;
  int follow;             /* redirects were asked for: say where it ended */
  const char *proxy;      /* the proxy in use (in this block, without its
                             user:password), for error messages; or NULL */
  char url[];
} hwait_t;

static void client_close(bt_closer_t *self) {
  client_t *c = (client_t *) self;
  if (c->h) bt_http_close(c->h);
  c->h = NULL;
}

/* Returns the runtime's client, making it when needed; NULL when out of
 * memory. Raises only while making the box, before any C allocation. */
static bt_http_t *get_client(lua_State *L) {
  client_t *c;
  lua_getfield(L, LUA_REGISTRYINDEX, CLIENT_KEY);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    c = lua_newuserdata(L, sizeof(*c));
    memset(c, 0, sizeof(*c));
    c->closer.close = client_close;
    lua_setfield(L, LUA_REGISTRYINDEX, CLIENT_KEY);
  } else {
    c = lua_touserdata(L, -1);
    lua_pop(L, 1);
  }
  if (!c->h) {
    c->h = bt_http_new(bt_lua_loop(L));
    if (c->h) bt_rt_add_closer(bt_rt_from(L), &c->closer);
  }
  return c->h;
}

/* Pushes the response's headers as a table: names lower-cased, values
 * trimmed, repeated names joined with ", ". */
static void push_headers(lua_State *S, const char *p, size_t len) {
  const char *end = p + len, *eol, *colon, *v, *ve;
  char name[256];
  size_t i, n;

  lua_newtable(S);
  /* skip the status line */
  eol = memchr(p, '\n', len);
  p = eol ? eol + 1 : end;
  for (; p < end; p = eol + 1) {
    eol = memchr(p, '\n', (size_t) (end - p));
    if (!eol) eol = end;
    colon = memchr(p, ':', (size_t) (eol - p));
    if (!colon || colon == p || *p == ' ' || *p == '\t') {
      if (eol == end) break;
      continue;
    }
    n = (size_t) (colon - p);
    if (n >= sizeof(name)) n = sizeof(name) - 1;
    for (i = 0; i < n; i++) name[i] = (char) tolower((unsigned char) p[i]);
    v = colon + 1;
    ve = eol;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    /* stack: headers */
    lua_pushlstring(S, name, n);
    lua_pushvalue(S, -1);
    lua_rawget(S, -3);
    if (lua_isnil(S, -1)) {
      lua_pop(S, 1);
      lua_pushlstring(S, v, (size_t) (ve - v));
    } else {
      lua_pushliteral(S, ", ");
      lua_pushlstring(S, v, (size_t) (ve - v));
      lua_concat(S, 3);
    }
    lua_rawset(S, -3);
    if (eol == end) break;
  }
}

/* Copies url (len bytes) to out without its user:password@ part, so that
 * error messages, which end up in logs, do not carry credentials. A URL
 * without a scheme (a proxy given as "user:pw@host:3128") is read as an
 * authority. */
static void copy_url(char *out, const char *url, size_t len) {
  const char *auth = strstr(url, "://"), *end, *at = NULL, *p;
  auth = auth ? auth + 3 : url;
  end = auth + strcspn(auth, "/?#");
  for (p = auth; p < end; p++)
    if (*p == '@') at = p;
  if (!at) {
    memcpy(out, url, len + 1);
    return;
  }
  memcpy(out, url, (size_t) (auth - url));
  memcpy(out + (auth - url), at + 1, len - (size_t) (at + 1 - url) + 1);
}

/* True when host (hlen bytes) matches the no_proxy list np as curl 7.88
 * reads it: "*" matches every host; otherwise entries separated by commas
 * or spaces, each a host name that matches itself and its subdomains (a
 * leading dot is ignored) or an IP address. (curl also takes CIDR ranges:
 * they are not matched here, which only loses the proxy from a message.) */
static int no_proxy_match(const char *np, const char *host, size_t hlen) {
  const char *p = np, *e;
  size_t n;
  while (hlen > 0 && host[hlen - 1] == '.') hlen--;
  if (strcmp(np, "*") == 0) return 1;
  while (*p) {
    p += strspn(p, ", \t");
    e = p + strcspn(p, ", \t");
    if (*p == '.') p++;
    n = (size_t) (e - p);
    while (n > 0 && p[n - 1] == '.') n--;
    if (n > 0 && n <= hlen && strncasecmp(host + hlen - n, p, n) == 0 &&
        (n == hlen || host[hlen - n - 1] == '.'))
      return 1;
    p = e;
  }
  return 0;
}

/* The proxy curl takes from the environment for url, as curl 7.88 picks
 * it: none when no_proxy (or NO_PROXY) matches the host; else
 * <scheme>_proxy (upper case too, except HTTP_PROXY: httpoxy), then
 * all_proxy or ALL_PROXY. Returns the variable's value, or NULL. Used for
 * error messages only: curl makes its own choice. */
static const char *env_proxy(const char *url) {
  const char *h = strstr(url, "://"), *end, *at, *np, *v;
  int https = strncasecmp(url, "https", 5) == 0;
  size_t hlen;

  if (!h) return NULL;
  h += 3;
  end = h + strcspn(h, "/?#");
  for (at = end; at > h && at[-1] != '@'; at--) {}
  if (at > h) h = at;
  if (*h == '[') {
    h++;
    hlen = strcspn(h, "]");
  } else {
    hlen = strcspn(h, ":/?#");
  }
  /* A variable set, even to "", hides the next one, as in curl. */
  if (!(np = getenv("no_proxy"))) np = getenv("NO_PROXY");
  if (np && no_proxy_match(np, h, hlen)) return NULL;
  v = getenv(https ? "https_proxy" : "http_proxy");
  if (!v && https) v = getenv("HTTPS_PROXY");
  if (!v) v = getenv("all_proxy");
  if (!v) v = getenv("ALL_PROXY");
  return v && *v ? v : NULL;
}

/* The request ended (bt_http_done_cb): resume the coroutine with the
 * response or the failure, unless it was killed. */
static void on_done(bt_http_req_t *req, int err, long status, const char *body,
                    size_t len, void *arg) {
  hwait_t *w = arg;
  bt_co_t *co = w->co;
  lua_State *S;
  size_t hlen;
  const char *head;
  int n;

  if (!co) {
    free(w);
    return;
  }
  S = bt_co_stack(co);
  if (err) {
    char msg[1024], detail[ERRTEXT_MAX];
    size_t dl;
    /* the client's own words (curl's for https), trimmed */
    snprintf(detail, sizeof(detail), "%s", bt_http_req_errtext(req));
    dl = strlen(detail);
    while (dl > 0 && (detail[dl - 1] == ' ' || detail[dl - 1] == '\n'))
      detail[--dl] = '\0';
    char via[300] = "";
    if (w->proxy && err != BT_ECANCELED)
      snprintf(via, sizeof(via), " (proxy %s)", w->proxy);
    if (err == BT_ETIMEDOUT)
      snprintf(msg, sizeof(msg), "%s: timed out after %g s%s", w->url,
               w->timeout, via);
    else if (err == BT_ETOOLARGE && detail[0])
      snprintf(msg, sizeof(msg), "%s: %s%s", w->url, detail, via);
    else if (err == BT_ECONNREFUSED || err == BT_ECANCELED || !detail[0])
      snprintf(msg, sizeof(msg), "%s: %s%s", w->url, bt_strerror(err), via);
    else
      snprintf(msg, sizeof(msg), "%s: %s (%s)%s", w->url, bt_strerror(err),
               detail, via);
    n = bt_push_fail(S, err, msg);
  } else {
    head = bt_http_req_headers(req, &hlen);
    /* stack: result */
    lua_createtable(S, 0, 3);
    lua_pushinteger(S, (lua_Integer) status);
    lua_setfield(S, -2, "status");
    push_headers(S, head, hlen);
    lua_setfield(S, -2, "headers");
    lua_pushlstring(S, body ? body : "", body ? len : 0);
    lua_setfield(S, -2, "body");
    lua_pushstring(S, bt_http_req_version(req));
    lua_setfield(S, -2, "http_version");
    if (w->follow) {
      const char *url = bt_http_req_url(req);
      char *clean;
      size_t ulen;
      if (!url) url = w->url;
      ulen = strlen(url);
      /* a redirect's URL may carry credentials too: never shown */
      clean = malloc(ulen + 1);
      if (clean) {
        copy_url(clean, url, ulen);
        lua_pushstring(S, clean);
        free(clean);
      } else {
        lua_pushstring(S, w->url);
      }
      lua_setfield(S, -2, "url");
      lua_pushinteger(S, (lua_Integer) bt_http_req_redirects(req));
      lua_setfield(S, -2, "redirects");
    }
    n = 1;
  }
  free(w);
  bt_co_resume(co, n);
}

/* The coroutine was killed: cancel the request; on_done then frees w
 * (now, or once the client lets go of it). */
static void http_cancel(void *data) {
  hwait_t *w = data;
  w->co = NULL;
  bt_http_cancel(w->req);
}

static int is_token(const char *s, size_t n) {
  size_t i;
  if (n == 0) return 0;
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char) s[i];
    if (!isalnum(c) && !strchr("!#$%&'*+-.^_`|~", c)) return 0;
  }
  return 1;
}

/* Checks the headers table at idx (names: HTTP tokens; values: strings or
 * numbers without line breaks; api names the caller in errors, which are
 * raised) and returns its name, value pairs as a NULL-terminated array: a
 * userdata left on the stack, its strings anchored in a table left below
 * it. Shared by baton.http and the server's req:respond (lua_mod.h). */
const char **bt__lua_header_pairs(lua_State *L, int idx, const char *api) {
  const char **pairs;
  int n = 0, k = 0, anchor;

  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *name, *v;
    size_t nlen, vlen;
    int vt = lua_type(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: header names must be strings (got %s)", api,
                 luaL_typename(L, -2));
    name = lua_tolstring(L, -2, &nlen);
    if (!is_token(name, nlen))
      luaL_error(L, "%s: invalid header name '%s'", api, name);
    if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
      luaL_error(L, "%s: header %s must be a string (got %s)", api, name,
                 luaL_typename(L, -1));
    lua_pushvalue(L, -1);     /* convert a copy */
    v = lua_tolstring(L, -1, &vlen);
    if (strcspn(v, "\r\n") != vlen)
      luaL_error(L, "%s: header %s contains a line break or NUL", api, name);
    lua_pop(L, 2);
    n++;
  }
  lua_createtable(L, 2 * n, 0);
  anchor = lua_gettop(L);
  pairs = lua_newuserdata(L, (size_t) (2 * n + 1) * sizeof(char *));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    /* stack: ... anchor pairs key value */
    lua_pushvalue(L, -2);
    pairs[k++] = lua_tostring(L, -1);
    lua_rawseti(L, anchor, k);
    pairs[k++] = lua_tostring(L, -1);   /* converts a number in place */
    lua_rawseti(L, anchor, k);
  }
  pairs[k] = NULL;
  return pairs;
}

/* Builds the "Name: value" lines of the headers table at idx, anchored in
 * a new table; returns the NULL-terminated array (a userdata). The pairs
 * of bt__lua_header_pairs and both of these are left on the stack. */
static const char **build_headers(lua_State *L, int idx) {
  const char **pairs = bt__lua_header_pairs(L, idx, "baton.http"), **lines;
  int n = 0, k, anchor;

  while (pairs[2 * n]) n++;
  lua_createtable(L, n, 0);
  anchor = lua_gettop(L);
  lines = lua_newuserdata(L, (size_t) (n + 1) * sizeof(char *));
  for (k = 0; k < n; k++) {
    if (pairs[2 * k + 1][0] == '\0')
      /* "Name;" sends an empty header ("Name:" would remove it) */
      lua_pushfstring(L, "%s;", pairs[2 * k]);
    else
      lua_pushfstring(L, "%s: %s", pairs[2 * k], pairs[2 * k + 1]);
    lines[k] = lua_tostring(L, -1);
    lua_rawseti(L, anchor, k + 1);
  }
  lines[n] = NULL;
  return lines;
}

#define OPTIONS "method, url, headers, body, timeout, redirects, proxy, cacert"

/* baton.http{method=, url=, headers=, body=, timeout=, redirects=, proxy=,
 * cacert=}. */
static int l_http(lua_State *L) {
  bt_http_opts_t o;
  const char *url, *body = NULL;
  size_t url_len, body_len = 0, mlen, i;
  const char **headers = NULL;
  char method[32];
  double timeout = DEFAULT_TIMEOUT;
  long redirects = 0;
  const char *proxy = NULL, *cacert = NULL;
  const char *via;
  size_t via_len;
  int env_proxy_on = 1;
  bt_http_t *h;
  bt_co_t *co;
  hwait_t *w;
  int rc;

  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "baton.http: expects a table {method=, url=, "
                      "headers=, body=, timeout=, ...} (got %s)",
                      luaL_typename(L, 1));
  lua_settop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k;
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "baton.http: unexpected %s key (options are "
                        OPTIONS ")", luaL_typename(L, -1));
    k = lua_tostring(L, -1);
    if (strcmp(k, "method") && strcmp(k, "url") && strcmp(k, "headers") &&
        strcmp(k, "body") && strcmp(k, "timeout") && strcmp(k, "redirects") &&
        strcmp(k, "proxy") && strcmp(k, "cacert"))
      return luaL_error(L, "baton.http: unknown option '%s' (options are "
                        OPTIONS ")", k);
  }

  /* Each value stays on the stack, so its string stays valid. */
  lua_getfield(L, 1, "url");                                  /* 2 */
  if (lua_type(L, 2) != LUA_TSTRING)
    return luaL_error(L, "baton.http: url must be a string (got %s)",
                      luaL_typename(L, 2));
  url = lua_tolstring(L, 2, &url_len);
  if (strlen(url) != url_len || strcspn(url, " \r\n\t") != url_len)
    return luaL_error(L, "baton.http: url contains a space or control "
                      "character");
  if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
    return luaL_error(L, "baton.http: url must start with http:// or "
                      "https:// (got '%s')", url);

  lua_getfield(L, 1, "method");                               /* 3 */
  if (lua_isnil(L, 3)) {
    method[0] = '\0';
  } else {
    const char *m;
    if (lua_type(L, 3) != LUA_TSTRING)
      return luaL_error(L, "baton.http: method must be a string (got %s)",
                        luaL_typename(L, 3));
    m = lua_tolstring(L, 3, &mlen);
    if (!is_token(m, mlen) || mlen >= sizeof(method))
      return luaL_error(L, "baton.http: invalid method '%s'", m);
    for (i = 0; i <= mlen; i++)
      method[i] = (char) toupper((unsigned char) m[i]);
  }

  lua_getfield(L, 1, "body");                                 /* 4 */
  if (!lua_isnil(L, 4)) {
    if (lua_type(L, 4) != LUA_TSTRING)
      return luaL_error(L, "baton.http: body must be a string (got %s)",
                        luaL_typename(L, 4));
    body = lua_tolstring(L, 4, &body_len);
  }

  lua_getfield(L, 1, "timeout");                              /* 5 */
  if (!lua_isnil(L, 5)) {
    if (lua_type(L, 5) != LUA_TNUMBER)
      return luaL_error(L, "baton.http: timeout must be a number of seconds "
                        "(got %s)", luaL_typename(L, 5));
    timeout = lua_tonumber(L, 5);
    if (!(timeout > 0) || timeout > 1e6)
      return luaL_error(L, "baton.http: timeout must be > 0 seconds");
  }

  lua_getfield(L, 1, "redirects");                            /* 6 */
  if (!lua_isnil(L, 6)) {
    double n;
    if (lua_type(L, 6) != LUA_TNUMBER)
      return luaL_error(L, "baton.http: redirects must be a number (got %s)",
                        luaL_typename(L, 6));
    n = lua_tonumber(L, 6);
    if (!(n >= 0 && n <= MAX_REDIRECTS) || n != (double) (long) n)
      return luaL_error(L, "baton.http: redirects must be a whole number "
                        "from 0 to %d", MAX_REDIRECTS);
    redirects = (long) n;
  }

  lua_getfield(L, 1, "proxy");                                /* 7 */
  if (lua_type(L, 7) == LUA_TBOOLEAN && !lua_toboolean(L, 7)) {
    env_proxy_on = 0;
  } else if (!lua_isnil(L, 7)) {
    if (lua_type(L, 7) != LUA_TSTRING)
      return luaL_error(L, "baton.http: proxy must be a URL or false "
                        "(got %s)", luaL_typename(L, 7));
    size_t plen;
    proxy = lua_tolstring(L, 7, &plen);
    if (!bt_http_url_ok(proxy)) {
      /* the message may end up in a log: no user:password in it */
      char *clean = lua_newuserdata(L, plen + 1);
      copy_url(clean, proxy, plen);
      return luaL_error(L, "baton.http: proxy must be an http:// or "
                        "https:// URL with a host (got '%s')", clean);
    }
  }

  lua_getfield(L, 1, "cacert");                               /* 8 */
  if (!lua_isnil(L, 8)) {
    if (lua_type(L, 8) != LUA_TSTRING)
      return luaL_error(L, "baton.http: cacert must be a file name (got %s)",
                        luaL_typename(L, 8));
    if (lua_objlen(L, 8) == 0)
      return luaL_error(L, "baton.http: cacert must be a file name (got an "
                        "empty string)");
    cacert = lua_tostring(L, 8);
  }

  /* last: build_headers pushes more on the stack */
  lua_getfield(L, 1, "headers");                              /* 9 */
  if (!lua_isnil(L, 9)) {
    if (lua_type(L, 9) != LUA_TTABLE)
      return luaL_error(L, "baton.http: headers must be a table (got %s)",
                        luaL_typename(L, 9));
    headers = build_headers(L, 9);
  }

  co = bt_co_current(L, "baton.http");
  h = get_client(L);
  if (!h) return bt_push_fail(L, BT_ENOMEM, NULL);
  via = proxy ? proxy : env_proxy_on ? env_proxy(url) : NULL;
  via_len = via ? strlen(via) : 0;
  w = malloc(sizeof(*w) + url_len + 1 + (via ? via_len + 1 : 0));
  if (!w) return bt_push_fail(L, BT_ENOMEM, NULL);
  w->co = co;
  w->req = NULL;
  w->timeout = timeout;
  w->follow = redirects > 0;
  copy_url(w->url, url, url_len);
  w->proxy = NULL;
  if (via) {
    char *p = w->url + url_len + 1;
    copy_url(p, via, via_len);
    w->proxy = p;
  }

  memset(&o, 0, sizeof(o));
  o.method = method[0] ? method : NULL;
  o.url = url;
  o.body = body;
  o.body_len = body_len;
  o.headers = headers;
  o.timeout_ms = (long) (timeout * 1000.0 + 0.5);
  /* The request's timeout bounds the connect too (curl's would be 2 s). */
  o.connect_timeout_ms = o.timeout_ms;
  o.max_redirects = redirects;
  o.proxy = proxy;
  o.env_proxy = env_proxy_on;
  o.cacert = cacert;
  /* HTTP/2 where https offers it, except for bodies over what the server
   * takes before reading (HTTP/2's initial window): a server that answers
   * early (a 401, a 413) then resets the stream, and libcurl 7.88 reports
   * that as an error instead of the answer, where HTTP/1.1 returns it. */
  o.http2 = body_len <= H2_MAX_BODY;
  o.on_done = on_done;
  o.arg = w;
  rc = bt_http_request(h, &o, &w->req);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s: %s", w->url, bt_strerror(rc));
    free(w);
    return bt_push_fail(L, rc, msg);
  }
  return bt_co_wait(L, co, http_cancel, w);
}

int bt_lua_open_http(lua_State *L) {
  lua_pushcfunction(L, l_http);
  lua_setfield(L, -2, "http");
  return 0;
}
