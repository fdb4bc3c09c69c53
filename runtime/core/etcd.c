/*
 * etcd v3 over the JSON gateway. See etcd.h for the contract and
 * shared/reference/etcd-gateway-and-cron.md for the gateway's habits this
 * file works around: int64 as strings, omitted zero fields, error bodies
 * in two shapes, half-duplex streams (a watch is one POST whose body is
 * complete; it is cancelled by closing the connection).
 */
#include "etcd_int.h"
#include "b64.h"
#include "err.h"
#include "fence.h"
#include "http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 1024
#define TEXTLEN 400

struct bt_etcd_s {
  uv_loop_t *loop;
  bt_http_t *http;
  char **eps;
  int neps;
  int cur;                   /* preferred endpoint */
  char *user, *password;
  char *token;               /* "Authorization: <token>" header line */
  int authing;
  bt_etcd_call_t *calls;     /* calls in flight or waiting for auth */
  bt_etcd_watch_t *watches;
  bt_etcd_keep_t *keeps;
  char *cacert, *cert, *key;
  long timeout_ms, connect_timeout_ms;
  int refs;                  /* watches and keeps not yet freed */
  int closing;
};

struct bt_etcd_call_s {
  bt_etcd_t *c;
  bt_etcd_call_t *prev, *next;
  char *path;
  char *body;
  size_t len;
  int flags;
  int ep;                    /* endpoint of the current attempt */
  int tried;                 /* endpoints tried */
  int reauthed;
  int waiting_auth;
  long timeout_ms;
  bt_http_req_t *req;
  bt_etcd_cb cb;
  void *arg;
};

/* internal flags */
enum { F_NOAUTH = 0x100, F_STREAM = 0x200 };

static void set_msg(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  if (!msg || !len) return;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

/* ---- pure helpers ------------------------------------------------------ */

int bt_etcd_int64(const cJSON *obj, const char *name, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  char *end;
  *out = 0;
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsString(v)) {
    long long x;
    if (!v->valuestring[0]) return BT_EPROTO;
    errno = 0;
    x = strtoll(v->valuestring, &end, 10);
    if (*end || errno == ERANGE) return BT_EPROTO;
    *out = x;
    return 0;
  }
  if (cJSON_IsNumber(v)) {
    /* in range first: converting a double beyond int64 is undefined */
    if (!(v->valuedouble >= -9223372036854775808.0 &&
          v->valuedouble < 9223372036854775808.0))
      return BT_EPROTO;
    *out = (int64_t) v->valuedouble;
    return 0;
  }
  return BT_EPROTO;
}

static int contains(const char *s, const char *needle) {
  return s && strstr(s, needle) != NULL;
}

int bt_etcd_map_error(long status, const char *body, size_t len, char *msg,
                      size_t msglen) {
  cJSON *j = body && len ? cJSON_ParseWithLength(body, len) : NULL;
  const char *text = NULL;
  int code = -1, err;

  if (j) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
    cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "code");
    if (cJSON_IsObject(e)) { /* a stream's final error line */
      m = cJSON_GetObjectItemCaseSensitive(e, "message");
      c = cJSON_GetObjectItemCaseSensitive(e, "grpc_code");
      if (!c) c = cJSON_GetObjectItemCaseSensitive(e, "code");
    } else if (!cJSON_IsString(m) && cJSON_IsString(e)) {
      m = e;
    }
    if (cJSON_IsString(m) && m->valuestring[0]) text = m->valuestring;
    if (cJSON_IsNumber(c)) code = c->valueint;
  }
  if (!text) text = status ? "unexpected http status" : "malformed response";

  if (contains(text, "compacted")) err = BT_ECOMPACTED;
  else if (contains(text, "future revision")) err = BT_EFUTUREREV;
  else if (contains(text, "lease not found")) err = BT_ENOLEASE;
  else if (contains(text, "too large") || contains(text, "too many operations"))
    err = BT_ETOOLARGE;
  else if (contains(text, "space exceeded")) err = BT_ENOSPACE;
  else if (contains(text, "no leader") || contains(text, "leader changed"))
    err = BT_ENOLEADER;
  else if (contains(text, "permission denied")) err = BT_EACCES;
  else if (code == 16 || status == 401 || contains(text, "authentication failed")
           || contains(text, "invalid auth token") || contains(text, "user name is empty"))
    err = BT_EAUTH;
  else if (code == 4 || status == 504 || contains(text, "timed out")) err = BT_ETIMEDOUT;
  else if (code == 14 || status == 503) err = BT_EUNAVAIL;
  else if (code == 3 || status == 400) err = BT_EINVAL;
  else if (!j && status >= 200 && status < 300) err = BT_EPROTO;
  else err = BT_EETCD;
  if (status && !j && status != 200)
    set_msg(msg, msglen, "http status %ld", status);
  else
    set_msg(msg, msglen, "%s", text);
  cJSON_Delete(j);
  return err;
}

/* Writes what to say when etcd refuses a request for want of
 * authentication and this client has no user to authenticate as. */
static void no_user_text(const bt_etcd_t *c, char *text, size_t len) {
  if (c->password)
    snprintf(text, len, "etcd requires authentication: a password was given without a user: "
             "give --user or BATON_USER too");
  else
    snprintf(text, len, "etcd requires authentication: give --user/--password or "
             "BATON_USER/BATON_PASSWORD");
}

int bt_etcd_parse_endpoints(const char *list, char ***out, char *msg,
                            size_t msglen) {
  char **eps = NULL;
  int n = 0;
  const char *p = list ? list : "";

  *out = NULL;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t) (e - p) : strlen(p);
    while (len && (*p == ' ' || *p == '\t')) p++, len--;
    while (len && (p[len - 1] == ' ' || p[len - 1] == '/')) len--;
    if (len) {
      char **ne = realloc(eps, sizeof(*eps) * (size_t) (n + 1));
      char *s;
      if (!ne) goto fail;
      eps = ne;
      if ((len < 7 || strncmp(p, "http://", 7)) &&
          (len < 8 || strncmp(p, "https://", 8))) {
        set_msg(msg, msglen, "endpoint \"%.*s\" is not an http:// or https:// URL",
                (int) len, p);
        goto fail;
      }
      s = malloc(len + 1);
      if (!s) goto fail;
      memcpy(s, p, len);
      s[len] = '\0';
      eps[n++] = s;
      if (!bt_http_url_ok(s)) {
        set_msg(msg, msglen, "endpoint \"%s\" is not a valid URL (host, or "
                "port 1-65535)", s);
        goto fail;
      }
    }
    p += e ? (size_t) (e - p) + 1 : strlen(p);
  }
  if (!n) {
    set_msg(msg, msglen, "no etcd endpoint given");
    free(eps);
    return 0;
  }
  *out = eps;
  return n;
fail:
  bt_etcd_free_endpoints(eps, n);
  return 0;
}

void bt_etcd_free_endpoints(char **eps, int n) {
  int i;
  for (i = 0; i < n; i++) free(eps[i]);
  free(eps);
}

/* ---- client ------------------------------------------------------------ */

static char *dupstr(const char *s) {
  return s && *s ? strdup(s) : NULL;
}

bt_etcd_t *bt_etcd_new(uv_loop_t *loop, const bt_etcd_opts_t *o, int *err,
                       char *msg, size_t msglen) {
  bt_etcd_t *c = calloc(1, sizeof(*c));
  if (!c) {
    *err = BT_ENOMEM;
    return NULL;
  }
  c->neps = bt_etcd_parse_endpoints(o->endpoints ? o->endpoints
                                    : "http://127.0.0.1:2379", &c->eps, msg, msglen);
  if (!c->neps) {
    free(c);
    *err = BT_EINVAL;
    return NULL;
  }
  c->loop = loop;
  c->http = bt_http_new(loop);
  c->user = dupstr(o->user);
  c->password = dupstr(o->password);
  c->cacert = dupstr(o->cacert);
  c->cert = dupstr(o->cert);
  c->key = dupstr(o->key);
  c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
  c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 1000;
  if (!c->http) {
    bt_etcd_free_endpoints(c->eps, c->neps);
    free(c);
    *err = BT_ENOMEM;
    return NULL;
  }
  *err = 0;
  return c;
}

static void client_free(bt_etcd_t *c) {
  bt_etcd_free_endpoints(c->eps, c->neps);
  free(c->user);
  free(c->password);
  free(c->token);
  free(c->cacert);
  free(c->cert);
  free(c->key);
  free(c);
}

const char *bt_etcd_endpoint(const bt_etcd_t *c) {
  return c->eps[c->cur];
}

/* Moves the preferred endpoint past ep after a failure there. */
static void endpoint_failed(bt_etcd_t *c, int ep) {
  if (c->cur == ep) c->cur = (ep + 1) % c->neps;
}

static void call_unlink(bt_etcd_call_t *call) {
  bt_etcd_t *c = call->c;
  if (call->prev) call->prev->next = call->next;
  else if (c->calls == call) c->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  call->prev = call->next = NULL;
}

/* Runs the callback and frees the call. */
static void call_done(bt_etcd_call_t *call, int err, cJSON *json,
                      const char *msg) {
  bt_etcd_res_t res;
  bt_etcd_t *c = call->c;
  res.err = err;
  res.json = json;
  res.msg = msg ? msg : "";
  res.endpoint = c->eps[call->ep];
  call_unlink(call);
  call->cb(&res, call->arg);
  free(call->path);
  free(call->body);
  free(call);
}

static int call_send(bt_etcd_call_t *call);
static void auth_start(bt_etcd_t *c);

static void on_call_http(bt_http_req_t *req, int err, long status,
                         const char *body, size_t len, void *arg) {
  bt_etcd_call_t *call = arg;
  bt_etcd_t *c = call->c;
  const char *ep = c->eps[call->ep];
  char msg[ERRLEN], text[TEXTLEN];
  cJSON *j = NULL;

  call->req = NULL;
  if (err == BT_ECANCELED) {
    call_done(call, BT_ECANCELED, NULL, "operation canceled");
    return;
  }
  if (err) {
    const char *why = bt_http_req_errtext(req);
    endpoint_failed(c, call->ep);
    if (((call->flags & BT_ETCD_IDEMPOTENT) || bt_http_req_unsent(req)) &&
        call->tried < c->neps && !c->closing) {
      call->ep = (call->ep + 1) % c->neps;
      if (call_send(call) == 0) return;
    }
    /* The HTTP client's own words help for TLS, resets (a TLS 1.3 server
     * that wants a client certificate resets after the handshake), bad
     * answers and a missing libcurl; for refused connections and timeouts
     * they only repeat ours. */
    if ((err != BT_EIO && err != BT_ETLS && err != BT_ECONNRESET &&
         err != BT_ENOTSUP && err != BT_EPROTO) || !why[0])
      snprintf(msg, sizeof(msg), "etcd %s: %s", ep, bt_strerror(err));
    else
      snprintf(msg, sizeof(msg), "etcd %s: %s (%s)", ep, bt_strerror(err), why);
    call_done(call, err, NULL, msg);
    return;
  }
  if (status == 200) {
    j = cJSON_ParseWithLength(body, len);
    if (j && (call->flags & F_STREAM)) {
      cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
      if (!r) {
        int e = bt_etcd_map_error(status, body, len, text, sizeof(text));
        snprintf(msg, sizeof(msg), "etcd %s: %s", ep, text);
        cJSON_Delete(j);
        call_done(call, e, NULL, msg);
        return;
      }
      cJSON_DetachItemViaPointer(j, r);
      cJSON_Delete(j);
      j = r;
    }
    if (!j) {
      snprintf(msg, sizeof(msg), "etcd %s: malformed response", ep);
      call_done(call, BT_EPROTO, NULL, msg);
      return;
    }
    call_done(call, 0, j, "");
    cJSON_Delete(j);
    return;
  }
  err = bt_etcd_map_error(status, body, len, text, sizeof(text));
  if (err == BT_EAUTH && c->user && !(call->flags & F_NOAUTH) &&
      !call->reauthed) {
    /* The token expired or was revoked: authenticate again, once. */
    call->reauthed = 1;
    free(c->token);
    c->token = NULL;
    if (call_send(call) == 0) return;
  }
  if ((err == BT_EUNAVAIL || err == BT_ENOLEADER) &&
      (call->flags & BT_ETCD_IDEMPOTENT) && call->tried < c->neps) {
    endpoint_failed(c, call->ep);
    call->ep = (call->ep + 1) % c->neps;
    if (call_send(call) == 0) return;
  }
  if (err == BT_EAUTH && !c->user) no_user_text(c, text, sizeof(text));
  snprintf(msg, sizeof(msg), "etcd %s: %s", ep, text);
  j = cJSON_ParseWithLength(body, len);
  call_done(call, err, j, msg);
  cJSON_Delete(j);
}

/* Sends call to its endpoint, or parks it until a token is there. */
static int call_send(bt_etcd_call_t *call) {
  bt_etcd_t *c = call->c;
  bt_http_opts_t o;
  const char *hdrs[3];
  char url[1024];
  int n = 0;

  if (c->user && !(call->flags & F_NOAUTH) && !c->token) {
    call->waiting_auth = 1;
    auth_start(c);
    return 0;
  }
  call->waiting_auth = 0;
  hdrs[n++] = "Content-Type: application/json";
  if (c->token && !(call->flags & F_NOAUTH)) hdrs[n++] = c->token;
  hdrs[n] = NULL;
  snprintf(url, sizeof(url), "%s%s", c->eps[call->ep], call->path);
  memset(&o, 0, sizeof(o));
  o.url = url;
  o.body = call->body;
  o.body_len = call->len;
  o.headers = hdrs;
  o.timeout_ms = call->timeout_ms;
  o.connect_timeout_ms = c->connect_timeout_ms;
  o.cacert = c->cacert;
  o.cert = c->cert;
  o.key = c->key;
  o.on_done = on_call_http;
  o.arg = call;
  call->tried++;
  return bt_http_request(c->http, &o, &call->req);
}

static int call_start(bt_etcd_t *c, const char *path, const char *body,
                      size_t len, int flags, long timeout_ms, bt_etcd_cb cb,
                      void *arg, bt_etcd_call_t **out) {
  bt_etcd_call_t *call;
  int err;

  if (c->closing) return BT_ECLOSED;
  call = calloc(1, sizeof(*call));
  if (!call) return BT_ENOMEM;
  call->c = c;
  call->path = strdup(path);
  call->body = malloc(len + 1);
  if (!call->path || !call->body) {
    free(call->path);
    free(call->body);
    free(call);
    return BT_ENOMEM;
  }
  memcpy(call->body, body, len);
  call->body[len] = '\0';
  call->len = len;
  call->flags = flags;
  call->ep = c->cur;
  call->timeout_ms = timeout_ms > 0 ? timeout_ms : c->timeout_ms;
  call->cb = cb;
  call->arg = arg;
  call->next = c->calls;
  if (c->calls) c->calls->prev = call;
  c->calls = call;
  err = call_send(call);
  if (err) {
    call_unlink(call);
    free(call->path);
    free(call->body);
    free(call);
    return err;
  }
  if (out) *out = call;
  return 0;
}

int bt_etcd_call(bt_etcd_t *c, const char *path, const char *body, size_t len,
                 int flags, bt_etcd_cb cb, void *arg, bt_etcd_call_t **out) {
  int f = flags & BT_ETCD_IDEMPOTENT;
  if (strcmp(path, "/v3/lease/keepalive") == 0) f |= F_STREAM;
  return call_start(c, path, body, len, f, 0, cb, arg, out);
}

void bt_etcd_call_cancel(bt_etcd_call_t *call) {
  if (call->req) bt_http_cancel(call->req);
  else call_done(call, BT_ECANCELED, NULL, "operation canceled");
}

/* ---- authentication ---------------------------------------------------- */

static void watch_auth_ready(bt_etcd_t *c);

static void on_auth(const bt_etcd_res_t *res, void *arg) {
  bt_etcd_t *c = arg;
  bt_etcd_call_t *call, *next;
  char msg[ERRLEN];
  cJSON *tok = res->err ? NULL : cJSON_GetObjectItemCaseSensitive(res->json, "token");

  c->authing = 0;
  if (cJSON_IsString(tok)) {
    size_t n = strlen(tok->valuestring) + 32;
    free(c->token);
    c->token = malloc(n);
    if (c->token) snprintf(c->token, n, "Authorization: %s", tok->valuestring);
  }
  if (c->token) {
    for (call = c->calls; call; call = next) {
      next = call->next;
      if (call->waiting_auth && call_send(call))
        call_done(call, BT_ENOMEM, NULL, "out of memory");
    }
    watch_auth_ready(c);
    return;
  }
  if (res->err == BT_ECANCELED) return;
  snprintf(msg, sizeof(msg), "etcd %s: authentication failed for user \"%s\": %s",
           res->endpoint, c->user,
           res->err != BT_EAUTH && res->err != BT_EINVAL ? res->msg :
           !c->password || !c->password[0] ?
             "no password given: give --password or BATON_PASSWORD" :
             "wrong user name or password");
  for (call = c->calls; call; call = next) {
    next = call->next;
    if (call->waiting_auth) call_done(call, BT_EAUTH, NULL, msg);
  }
  watch_auth_ready(c);
}

static void auth_start(bt_etcd_t *c) {
  cJSON *j;
  char *body;
  if (c->authing) return;
  j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", c->user);
  cJSON_AddStringToObject(j, "password", c->password ? c->password : "");
  body = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!body) return;
  c->authing = 1;
  if (call_start(c, "/v3/auth/authenticate", body, strlen(body),
                 F_NOAUTH | BT_ETCD_IDEMPOTENT, 0, on_auth, c, NULL))
    c->authing = 0;
  free(body);
}

/* ---- watches ----------------------------------------------------------- */

struct bt_etcd_watch_s {
  bt_etcd_t *c;
  bt_etcd_watch_t *prev, *next;
  char *key, *range_end;      /* base64 */
  int prev_kv, no_put, no_delete;
  long idle_ms;
  int64_t next_rev;           /* 0 until the first created response */
  int64_t created_rev;        /* store revision at the first created response */
  int created;                /* CREATED delivered */
  int connects;
  int failures;               /* consecutive failed attempts */
  int ep;
  int waiting_auth;
  int reauthed;
  int stopping;
  int in_cb;
  int timer_closing;
  int closed;
  uint64_t last_data;         /* uv_now of the last byte */
  bt_http_req_t *req;
  char *line;
  size_t line_len, line_cap;
  uv_timer_t timer;           /* reconnect backoff and idle watchdog */
  bt_etcd_watch_cb cb;
  void *arg;
};

static void watch_connect(bt_etcd_watch_t *w);
static void watch_stop(bt_etcd_watch_t *w);

static void watch_deliver(bt_etcd_watch_t *w, int kind, int err, cJSON *json,
                          int64_t rev, const char *msg) {
  w->in_cb++;
  w->cb(w, kind, err, json, rev, msg ? msg : "", w->arg);
  w->in_cb--;
}

static void on_watch_timer_close(uv_handle_t *h) {
  bt_etcd_watch_t *w = h->data;
  bt_etcd_t *c = w->c;
  if (w->prev) w->prev->next = w->next;
  else c->watches = w->next;
  if (w->next) w->next->prev = w->prev;
  watch_deliver(w, BT_WATCH_CLOSED, BT_ECANCELED, NULL, w->next_rev - 1, NULL);
  free(w->key);
  free(w->range_end);
  free(w->line);
  free(w);
  if (--c->refs == 0 && c->closing) client_free(c);
}

/* Frees w once its stream has ended; called whenever either part ends. */
static void watch_maybe_close(bt_etcd_watch_t *w) {
  if (!w->stopping || w->req || w->timer_closing || w->in_cb) return;
  w->timer_closing = 1;
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *) &w->timer, on_watch_timer_close);
}

static void on_watch_timer(uv_timer_t *t) {
  bt_etcd_watch_t *w = t->data;
  if (w->stopping) return;
  if (w->req) {
    /* The idle watchdog: nothing, not even a progress notification, came
     * for idle_ms. The connection is presumed dead. */
    if (uv_now(w->c->loop) - w->last_data >= (uint64_t) w->idle_ms)
      bt_http_cancel(w->req);
    else
      uv_timer_start(&w->timer, on_watch_timer,
                     (uint64_t) w->idle_ms - (uv_now(w->c->loop) - w->last_data), 0);
    return;
  }
  watch_connect(w);
}

/* Schedules the next connection attempt after a failure. */
static void watch_retry(bt_etcd_watch_t *w, int err, const char *msg) {
  bt_etcd_t *c = w->c;
  uint64_t delay;
  if (w->stopping) return;
  endpoint_failed(c, w->ep);
  w->failures++;
  if (!w->created && w->failures >= c->neps && err) {
    /* Never established anywhere: report instead of trying forever. */
    char m[ERRLEN];
    snprintf(m, sizeof(m), "%.1000s", msg);
    watch_deliver(w, BT_WATCH_ERROR, err, NULL, 0, m);
    watch_stop(w);
    return;
  }
  delay = w->failures <= c->neps ? 50 : 100u << (w->failures > 5 ? 5 : w->failures);
  if (delay > 2000) delay = 2000;
  uv_timer_start(&w->timer, on_watch_timer, delay, 0);
}

/* A revision as watch lines carry it: 0 when absent or malformed (as
 * bt_etcd_int64 leaves it); -1 when out of 0..INT64_MAX-1. */
static int64_t line_rev(const cJSON *obj, const char *name) {
  int64_t v = 0;
  bt_etcd_int64(obj, name, &v);
  return v < 0 || v == INT64_MAX ? -1 : v;
}

int bt__etcd_watch_line(const char *p, size_t len, bt__watch_line_t *l) {
  cJSON *r, *why, *ev;
  memset(l, 0, sizeof(*l));
  l->cancel_reason = "";
  if (!(l->json = cJSON_ParseWithLength(p, len))) return BT_EPROTO;
  r = cJSON_GetObjectItemCaseSensitive(l->json, "result");
  if (!cJSON_IsObject(r)) goto bad;
  l->revision = line_rev(cJSON_GetObjectItemCaseSensitive(r, "header"),
                         "revision");
  l->compact_revision = line_rev(r, "compact_revision");
  l->canceled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "canceled"));
  l->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "created"));
  why = cJSON_GetObjectItemCaseSensitive(r, "cancel_reason");
  if (cJSON_IsString(why)) l->cancel_reason = why->valuestring;
  ev = cJSON_GetObjectItemCaseSensitive(r, "events");
  if (cJSON_IsArray(ev) && cJSON_GetArraySize(ev) > 0) {
    cJSON *last = cJSON_GetArrayItem(ev, cJSON_GetArraySize(ev) - 1);
    l->events = ev;
    l->last_mod = line_rev(cJSON_GetObjectItemCaseSensitive(last, "kv"),
                           "mod_revision");
  }
  if (l->revision < 0 || l->compact_revision < 0 || l->last_mod < 0) goto bad;
  return 0;
bad:
  cJSON_Delete(l->json);
  l->json = NULL;
  return BT_EPROTO;
}

/* Handles one response line of the stream. Returns non-zero when the stream
 * must be dropped (and the watch retried or stopped). */
static int watch_line(bt_etcd_watch_t *w, const char *p, size_t len) {
  bt__watch_line_t l;
  int ret = 0;

  if (bt__etcd_watch_line(p, len, &l)) return 1;
  if (l.canceled) {
    const char *reason = l.cancel_reason;
    char msg[ERRLEN];
    if (l.compact_revision > 0) {
      snprintf(msg, sizeof(msg), "etcd %s: watch from revision %lld: required "
               "revision has been compacted (compact revision %lld)",
               w->c->eps[w->ep], (long long) w->next_rev,
               (long long) l.compact_revision);
      watch_deliver(w, BT_WATCH_COMPACTED, BT_ECOMPACTED, NULL,
                    l.compact_revision, msg);
      watch_stop(w);
    } else if (contains(reason, "Unauthenticated") || contains(reason, "auth") ||
               contains(reason, "user name is empty")) {
      if (w->c->user && !w->reauthed) {
        w->reauthed = 1;
        free(w->c->token);
        w->c->token = NULL;
        ret = 1;
      } else {
        char text[TEXTLEN];
        if (!w->c->user) no_user_text(w->c, text, sizeof(text));
        snprintf(msg, sizeof(msg), "etcd %s: watch refused: %s", w->c->eps[w->ep],
                 w->c->user ? reason : text);
        watch_deliver(w, BT_WATCH_ERROR,
                      contains(reason, "permission") ? BT_EACCES : BT_EAUTH,
                      NULL, 0, msg);
        watch_stop(w);
      }
    } else {
      ret = 1;
    }
    cJSON_Delete(l.json);
    return ret;
  }
  if (l.created) {
    w->connects++;
    w->failures = 0;
    w->reauthed = 0;
    if (w->next_rev == 0) w->next_rev = l.revision + 1;
    if (!w->created) {
      w->created = 1;
      w->created_rev = l.revision;
      watch_deliver(w, BT_WATCH_CREATED, 0, NULL, w->next_rev - 1, NULL);
    }
  }
  if (l.events) {
    if (l.last_mod >= w->next_rev) w->next_rev = l.last_mod + 1;
    if (!w->stopping)
      watch_deliver(w, BT_WATCH_EVENTS, 0, l.events, l.revision, NULL);
  } else if (l.revision >= w->next_rev && w->created) {
    /* A progress notification: every event up to rev has been sent. */
    w->next_rev = l.revision + 1;
  }
  cJSON_Delete(l.json);
  return ret;
}

static void on_watch_data(bt_http_req_t *req, const char *data, size_t len,
                          void *arg) {
  bt_etcd_watch_t *w = arg;
  size_t start = 0, i;

  w->last_data = uv_now(w->c->loop);
  if (w->line_len + len > w->line_cap) {
    size_t cap = w->line_cap ? w->line_cap : 4096;
    char *p;
    while (cap < w->line_len + len) cap *= 2;
    p = realloc(w->line, cap);
    if (!p) {
      bt_http_cancel(req);
      return;
    }
    w->line = p;
    w->line_cap = cap;
  }
  memcpy(w->line + w->line_len, data, len);
  w->line_len += len;
  for (i = 0; i < w->line_len; i++) {
    if (w->line[i] != '\n') continue;
    if (i > start && watch_line(w, w->line + start, i - start)) {
      bt_http_cancel(req);
      w->line_len = 0;
      return;
    }
    start = i + 1;
    if (w->stopping) {
      bt_http_cancel(req);
      w->line_len = 0;
      return;
    }
  }
  memmove(w->line, w->line + start, w->line_len - start);
  w->line_len -= start;
}

static void on_watch_done(bt_http_req_t *req, int err, long status,
                          const char *body, size_t len, void *arg) {
  bt_etcd_watch_t *w = arg;
  char msg[ERRLEN], text[TEXTLEN];

  w->req = NULL;
  w->line_len = 0;
  if (w->stopping) {
    watch_maybe_close(w);
    return;
  }
  if (!err && status != 200) {
    err = bt_etcd_map_error(status, body, len, text, sizeof(text));
    if (err == BT_EAUTH && !w->c->user) no_user_text(w->c, text, sizeof(text));
    snprintf(msg, sizeof(msg), "etcd %s: %s", w->c->eps[w->ep], text);
    if (err == BT_EAUTH && w->c->user && !w->reauthed) {
      w->reauthed = 1;
      free(w->c->token);
      w->c->token = NULL;
    } else if (err == BT_EINVAL || err == BT_EACCES || err == BT_EAUTH) {
      watch_deliver(w, BT_WATCH_ERROR, err, NULL, 0, msg);
      watch_stop(w);
      return;
    }
  } else if (err && err != BT_ECANCELED) {
    snprintf(msg, sizeof(msg), "etcd %s: %s", w->c->eps[w->ep], bt_strerror(err));
  } else {
    /* The stream ended cleanly or we dropped it: reconnect. */
    err = 0;
    snprintf(msg, sizeof(msg), "etcd %s: watch stream ended", w->c->eps[w->ep]);
  }
  watch_retry(w, err ? err : BT_ECONNRESET, msg);
}

static void watch_connect(bt_etcd_watch_t *w) {
  bt_etcd_t *c = w->c;
  bt_http_opts_t o;
  cJSON *j, *cr;
  char *body, url[1024], rev[32];
  const char *hdrs[3];
  int n = 0, err;

  if (c->user && !c->token) {
    w->waiting_auth = 1;
    auth_start(c);
    return;
  }
  w->waiting_auth = 0;
  w->ep = c->cur;
  j = cJSON_CreateObject();
  cr = cJSON_AddObjectToObject(j, "create_request");
  cJSON_AddStringToObject(cr, "key", w->key);
  if (w->range_end) cJSON_AddStringToObject(cr, "range_end", w->range_end);
  if (w->next_rev > 0) {
    snprintf(rev, sizeof(rev), "%lld", (long long) w->next_rev);
    cJSON_AddStringToObject(cr, "start_revision", rev);
  }
  if (w->prev_kv) cJSON_AddTrueToObject(cr, "prev_kv");
  cJSON_AddTrueToObject(cr, "progress_notify");
  if (w->no_put || w->no_delete) {
    cJSON *f = cJSON_AddArrayToObject(cr, "filters");
    if (w->no_put) cJSON_AddItemToArray(f, cJSON_CreateString("NOPUT"));
    if (w->no_delete) cJSON_AddItemToArray(f, cJSON_CreateString("NODELETE"));
  }
  body = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!body) {
    watch_retry(w, BT_ENOMEM, "out of memory");
    return;
  }
  hdrs[n++] = "Content-Type: application/json";
  if (c->token) hdrs[n++] = c->token;
  hdrs[n] = NULL;
  snprintf(url, sizeof(url), "%s/v3/watch", c->eps[w->ep]);
  memset(&o, 0, sizeof(o));
  o.url = url;
  o.body = body;
  o.body_len = strlen(body);
  o.headers = hdrs;
  o.connect_timeout_ms = c->connect_timeout_ms;
  o.cacert = c->cacert;
  o.cert = c->cert;
  o.key = c->key;
  o.on_data = on_watch_data;
  o.on_done = on_watch_done;
  o.arg = w;
  err = bt_http_request(c->http, &o, &w->req);
  free(body);
  if (err) {
    watch_retry(w, err, bt_strerror(err));
    return;
  }
  w->last_data = uv_now(c->loop);
  uv_timer_start(&w->timer, on_watch_timer, (uint64_t) w->idle_ms, 0);
}

static void watch_auth_ready(bt_etcd_t *c) {
  bt_etcd_watch_t *w, *next;
  for (w = c->watches; w; w = next) {
    next = w->next;
    if (!w->waiting_auth || w->stopping) continue;
    if (c->token) watch_connect(w);
    else {
      watch_deliver(w, BT_WATCH_ERROR, BT_EAUTH, NULL, 0, "authentication failed");
      watch_stop(w);
    }
  }
}

static char *b64dup(const char *p, size_t n) {
  char *s = malloc(bt_b64_enclen(n));
  if (s) bt_b64_encode(s, p, n);
  return s;
}

int bt_etcd_watch(bt_etcd_t *c, const bt_etcd_watch_opts_t *o,
                  bt_etcd_watch_cb cb, void *arg, bt_etcd_watch_t **out) {
  bt_etcd_watch_t *w;
  if (c->closing) return BT_ECLOSED;
  if (!o->key) return BT_EINVAL;
  w = calloc(1, sizeof(*w));
  if (!w) return BT_ENOMEM;
  w->key = b64dup(o->key, o->key_len);
  w->range_end = o->range_end ? b64dup(o->range_end, o->range_end_len) : NULL;
  if (!w->key || (o->range_end && !w->range_end)) {
    free(w->key);
    free(w->range_end);
    free(w);
    return BT_ENOMEM;
  }
  w->c = c;
  w->prev_kv = o->prev_kv;
  w->no_put = o->no_put;
  w->no_delete = o->no_delete;
  w->idle_ms = o->idle_ms > 0 ? o->idle_ms : 660000;
  w->next_rev = o->start_revision > 0 ? o->start_revision : 0;
  w->cb = cb;
  w->arg = arg;
  uv_timer_init(c->loop, &w->timer);
  w->timer.data = w;
  w->next = c->watches;
  if (c->watches) c->watches->prev = w;
  c->watches = w;
  c->refs++;
  if (out) *out = w;
  watch_connect(w);
  return 0;
}

static void watch_stop(bt_etcd_watch_t *w) {
  if (w->stopping) return;
  w->stopping = 1;
  uv_timer_stop(&w->timer);
  if (w->req) bt_http_cancel(w->req);
  watch_maybe_close(w);
}

void bt_etcd_watch_cancel(bt_etcd_watch_t *w) {
  watch_stop(w);
}

int64_t bt_etcd_watch_next_revision(const bt_etcd_watch_t *w) {
  return w->next_rev;
}

int64_t bt_etcd_watch_created_revision(const bt_etcd_watch_t *w) {
  return w->created_rev;
}

int bt_etcd_watch_connects(const bt_etcd_watch_t *w) {
  return w->connects;
}

/* ---- lease keepalive --------------------------------------------------- */

struct bt_etcd_keep_s {
  bt_etcd_t *c;
  bt_etcd_keep_t *prev, *next;
  char id[24];
  int64_t ttl;
  uint64_t last_ok;          /* ms, monotonic: send time of the last success */
  uint64_t sent_at;
  bt_etcd_call_t *call;
  uv_timer_t timer;
  int stopping, closing, lost;
  int fences;                /* publishes its fence moment (fence.h) */
  bt_etcd_keep_cb cb;
  void *arg;
};

static uint64_t mono_ms(void) {
  return uv_hrtime() / 1000000u;
}

static uint64_t keep_margin(const bt_etcd_keep_t *k) {
  uint64_t m = (uint64_t) k->ttl * 1000 / 6;
  if (m < 200) m = 200;
  if (m > 2000) m = 2000;
  return m;
}

/* The moment past which the lease may be gone on the server, as far as
 * this client knows, less the safety margin: the keeper declares the lease
 * lost then, and the node's runs are fenced. */
static uint64_t keep_fence_at(const bt_etcd_keep_t *k) {
  return k->last_ok + (uint64_t) k->ttl * 1000 - keep_margin(k);
}

static void keep_publish(bt_etcd_keep_t *k) {
  if (k->fences) bt_fence_publish(k, k->lost || k->stopping ? 0 : keep_fence_at(k));
}

static void on_keep_close(uv_handle_t *h) {
  bt_etcd_keep_t *k = h->data;
  bt_etcd_t *c = k->c;
  if (k->prev) k->prev->next = k->next;
  else c->keeps = k->next;
  if (k->next) k->next->prev = k->prev;
  k->cb(k, BT_ECANCELED, "keepalive stopped", k->arg);
  free(k);
  if (--c->refs == 0 && c->closing) client_free(c);
}

static void keep_finish(bt_etcd_keep_t *k) {
  if (k->closing || k->call) return;
  k->closing = 1;
  uv_timer_stop(&k->timer);
  uv_close((uv_handle_t *) &k->timer, on_keep_close);
}

static void keep_lost(bt_etcd_keep_t *k, const char *msg) {
  if (k->lost || k->stopping) return;
  k->lost = 1;
  k->stopping = 1;
  keep_publish(k);
  k->cb(k, BT_ELOST, msg, k->arg);
  if (k->call) bt_etcd_call_cancel(k->call);
  keep_finish(k);
}

static void on_keep_timer(uv_timer_t *t);

static void keep_arm(bt_etcd_keep_t *k, uint64_t in_ms) {
  uint64_t now = mono_ms();
  uint64_t deadline = keep_fence_at(k);
  if (now + in_ms > deadline) in_ms = deadline > now ? deadline - now : 0;
  uv_timer_start(&k->timer, on_keep_timer, in_ms, 0);
}

static void on_keep_res(const bt_etcd_res_t *res, void *arg) {
  bt_etcd_keep_t *k = arg;
  int64_t ttl = 0;
  char msg[ERRLEN];

  k->call = NULL;
  if (k->stopping) {
    keep_finish(k);
    return;
  }
  if (!res->err) {
    bt_etcd_int64(res->json, "TTL", &ttl);
    if (ttl <= 0) {
      snprintf(msg, sizeof(msg), "lease %s expired or was revoked", k->id);
      keep_lost(k, msg);
      return;
    }
    k->ttl = ttl;
    k->last_ok = k->sent_at;
    keep_publish(k);
    keep_arm(k, (uint64_t) ttl * 1000 / 3);
    return;
  }
  if (res->err == BT_ENOLEASE) {
    snprintf(msg, sizeof(msg), "lease %s not found", k->id);
    keep_lost(k, msg);
    return;
  }
  /* A transport or server failure (every endpoint tried): try again soon;
   * on_keep_timer declares the lease lost once the deadline passes. */
  keep_arm(k, 250);
}

static void on_keep_timer(uv_timer_t *t) {
  bt_etcd_keep_t *k = t->data;
  uint64_t now = mono_ms();
  char body[64], msg[ERRLEN];
  long attempt_ms;
  int err;

  if (k->stopping) return;
  if (now >= keep_fence_at(k)) {
    snprintf(msg, sizeof(msg), "lease %s: no successful keepalive for %.1f s "
             "(ttl %lld s)", k->id, (double) (now - k->last_ok) / 1000.0,
             (long long) k->ttl);
    keep_lost(k, msg);
    return;
  }
  if (k->call) { /* still waiting for the previous answer */
    keep_arm(k, 250);
    return;
  }
  snprintf(body, sizeof(body), "{\"ID\":\"%s\"}", k->id);
  k->sent_at = now;
  /* A hung member must not eat the lease's budget: each attempt gets
   * ttl/6 (0.5 to 2 s), after which the call moves to the next endpoint. */
  attempt_ms = (long) keep_margin(k);
  if (attempt_ms < 500) attempt_ms = 500;
  err = call_start(k->c, "/v3/lease/keepalive", body, strlen(body),
                   BT_ETCD_IDEMPOTENT | F_STREAM, attempt_ms, on_keep_res, k,
                   &k->call);
  if (err) keep_arm(k, 250);
  else keep_arm(k, (uint64_t) k->ttl * 1000); /* only the deadline check */
}

int bt_etcd_keep(bt_etcd_t *c, const char *id, int64_t ttl, bt_etcd_keep_cb cb,
                 void *arg, bt_etcd_keep_t **out) {
  bt_etcd_keep_t *k;
  if (c->closing) return BT_ECLOSED;
  if (ttl <= 0 || strlen(id) >= sizeof(k->id)) return BT_EINVAL;
  k = calloc(1, sizeof(*k));
  if (!k) return BT_ENOMEM;
  k->c = c;
  snprintf(k->id, sizeof(k->id), "%s", id);
  k->ttl = ttl;
  k->last_ok = mono_ms();
  k->cb = cb;
  k->arg = arg;
  uv_timer_init(c->loop, &k->timer);
  k->timer.data = k;
  k->next = c->keeps;
  if (c->keeps) c->keeps->prev = k;
  c->keeps = k;
  c->refs++;
  keep_arm(k, (uint64_t) ttl * 1000 / 3);
  if (out) *out = k;
  return 0;
}

void bt_etcd_keep_stop(bt_etcd_keep_t *k) {
  if (k->stopping) return;
  k->stopping = 1;
  keep_publish(k);
  if (k->call) bt_etcd_call_cancel(k->call);
  keep_finish(k);
}

uint64_t bt_etcd_keep_deadline(const bt_etcd_keep_t *k) {
  return keep_fence_at(k);
}

void bt_etcd_keep_lose(bt_etcd_keep_t *k, const char *why) {
  char msg[ERRLEN];
  snprintf(msg, sizeof(msg), "lease %s: %s", k->id, why);
  keep_lost(k, msg);
}

int bt_etcd_keep_fence(bt_etcd_keep_t *k) {
  int fd = bt_fence_create();
  if (fd < 0) return fd;
  if (k->stopping) return BT_ECLOSED;
  k->fences = 1;
  bt_fence_own(k);
  keep_publish(k);
  return 0;
}

/* ---- shutdown ---------------------------------------------------------- */

void bt_etcd_close(bt_etcd_t *c) {
  if (!c || c->closing) return;
  c->closing = 1;
  while (c->calls) bt_etcd_call_cancel(c->calls);
  {
    bt_etcd_watch_t *w;
    bt_etcd_keep_t *k;
    for (w = c->watches; w; w = w->next) watch_stop(w);
    for (k = c->keeps; k; k = k->next) bt_etcd_keep_stop(k);
  }
  bt_http_close(c->http);
  c->http = NULL;
  if (c->refs == 0) client_free(c);
}
