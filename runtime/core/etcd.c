/*
 * etcd v3 over its native gRPC API. See etcd.h for the contract and
 * shared/reference/etcd-grpc.md for the protocol facts this file relies on.
 *
 * Transport: one HTTP/2 connection per endpoint (grpc.h), made when first
 * needed; every unary call is a stream on the preferred endpoint's
 * connection. A call's request and answer keep the JSON form of etcd's
 * gateway (etcdpb.h converts), so callers see the same shapes as before;
 * the requests this file makes itself on the shared streams (watch
 * creates and cancels, lease renewals) are packed directly with
 * protoc-c's structs.
 *
 * Shared streams: ONE Watch stream carries every watch of the client (each
 * with a watch_id chosen here, never reused), and ONE LeaseKeepAlive stream
 * carries every renewal (keepers' and the one-off "/v3/lease/keepalive"
 * calls'), answers matched by lease ID. When a shared stream fails, each
 * watch re-creates itself from its next revision on the next endpoint and
 * each renewal is sent again there.
 *
 * Auth: with a user, Authenticate once and send the "token" metadata on
 * every stream; a stream refused for an invalid token makes the client
 * authenticate again (once per call) and re-open it.
 */
#include "etcd_int.h"
#include "err.h"
#include "etcd.pb-c.h"
#include "etcdpb.h"
#include "fence.h"
#include "grpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 1024
#define TEXTLEN 400


typedef struct conn_s conn_t;

struct conn_s {
  bt_etcd_t *c;
  conn_t *prev, *next;
  int ep;
  int goaway;                /* no new streams here */
  bt_grpc_conn_t *g;
};

struct bt_etcd_s {
  uv_loop_t *loop;
  char **eps;
  int neps;
  int cur;                   /* preferred endpoint */
  conn_t **conn;             /* the connection new streams go to, per endpoint */
  conn_t *conns;             /* every connection not yet closed */
  char *user, *password;
  char *token;               /* the "token" metadata, or NULL */
  unsigned token_gen;        /* bumped when the token changes */
  int authing;
  bt_etcd_call_t *calls;     /* calls in flight, waiting for auth or done */
  bt_etcd_watch_t *watches;
  bt_etcd_keep_t *keeps;
  char *cacert, *cert, *key;
  long timeout_ms, connect_timeout_ms;
  const bt_etcdpb_method_t *wm, *km; /* Watch's and LeaseKeepAlive's */
  /* the Watch stream */
  bt_grpc_stream_t *ws;
  int ws_ep;
  unsigned ws_gen;
  int64_t next_wid;
  int64_t *creating;         /* ids of the creates sent, not yet answered */
  size_t ncreating, capcreating;
  /* the LeaseKeepAlive stream */
  bt_grpc_stream_t *ks;
  int ks_ep;
  unsigned ks_gen;
  uv_timer_t done_timer;     /* completes calls that failed before a stream */
  uv_timer_t ks_timer;       /* a renewal's answer overdue */
  int refs;                  /* connections, watches, keeps, timers alive */
  int closing;
};

struct bt_etcd_call_s {
  bt_etcd_t *c;
  bt_etcd_call_t *prev, *next;
  const bt_etcdpb_method_t *m;
  uint8_t *req;              /* the packed request */
  size_t len;
  int flags;
  int ep;                    /* endpoint of the current attempt */
  int tried;                 /* attempts made */
  int reauthed;
  int waiting_auth;
  int canceled;
  unsigned gen;              /* token_gen the attempt was sent with */
  bt_grpc_stream_t *s;
  cJSON *res;                /* the decoded answer */
  int res_err;               /* the answer did not decode */
  /* a one-off keepalive, answered from the LeaseKeepAlive stream */
  int64_t lease;
  int on_ks;                 /* sent on c->ks, waiting for its answer */
  uint64_t ks_deadline;      /* mono ms */
  /* failed before reaching a stream: completed by done_timer */
  int deferred;
  int d_err;
  char *d_msg;
  bt_etcd_cb cb;
  void *arg;
};

/* internal flags */
enum { F_NOAUTH = 0x100, F_KEEP = 0x200 };

static uint64_t mono_ms(void) {
  return uv_hrtime() / 1000000u;
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

/* ---- client and connections -------------------------------------------- */

static char *dupstr(const char *s) {
  return s && *s ? strdup(s) : NULL;
}

static void on_done_timer(uv_timer_t *t);

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
  c->conn = calloc((size_t) c->neps, sizeof(*c->conn));
  if (!c->conn) {
    bt_etcd_free_endpoints(c->eps, c->neps);
    free(c);
    *err = BT_ENOMEM;
    return NULL;
  }
  c->loop = loop;
  c->user = dupstr(o->user);
  c->password = dupstr(o->password);
  c->cacert = dupstr(o->cacert);
  c->cert = dupstr(o->cert);
  c->key = dupstr(o->key);
  c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
  c->wm = bt_etcdpb_method("/v3/watch");
  c->km = bt_etcdpb_method("/v3/lease/keepalive");
  c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 1000;
  uv_timer_init(loop, &c->done_timer);
  c->done_timer.data = c;
  uv_timer_init(loop, &c->ks_timer);
  c->ks_timer.data = c;
  c->refs = 2;
  *err = 0;
  return c;
}

static void client_free(bt_etcd_t *c) {
  bt_etcd_free_endpoints(c->eps, c->neps);
  free(c->conn);
  free(c->creating);
  free(c->user);
  free(c->password);
  free(c->token);
  free(c->cacert);
  free(c->cert);
  free(c->key);
  free(c);
}

static void client_unref(bt_etcd_t *c) {
  if (--c->refs == 0 && c->closing) client_free(c);
}

const char *bt_etcd_endpoint(const bt_etcd_t *c) {
  return c->eps[c->cur];
}

/* Moves the preferred endpoint past ep after a failure there. */
static void endpoint_failed(bt_etcd_t *c, int ep) {
  if (c->cur == ep) c->cur = (ep + 1) % c->neps;
}

static void on_conn_event(bt_grpc_conn_t *g, int event, int err,
                          const char *msg, void *arg) {
  conn_t *cn = arg;
  bt_etcd_t *c = cn->c;
  if (event == BT_GRPC_READY) return;
  /* GOAWAY: the server is shutting down or shedding clients; streams it
   * accepted go on, new ones go to a new connection, preferably elsewhere. */
  if (c->conn[cn->ep] == cn) c->conn[cn->ep] = NULL;
  if (event == BT_GRPC_GOAWAY) {
    cn->goaway = 1;
    if (!c->closing) endpoint_failed(c, cn->ep);
    return;
  }
  if (cn->prev) cn->prev->next = cn->next;
  else c->conns = cn->next;
  if (cn->next) cn->next->prev = cn->prev;
  free(cn);
  client_unref(c);
}

/* The connection for new streams to endpoint ep, made if need be. */
static bt_grpc_conn_t *conn_get(bt_etcd_t *c, int ep, int *err, char *msg,
                                size_t msglen) {
  bt_grpc_conn_opts_t o;
  conn_t *cn = c->conn[ep];
  char text[TEXTLEN];

  if (cn && !cn->goaway) return cn->g;
  cn = calloc(1, sizeof(*cn));
  if (!cn) {
    *err = BT_ENOMEM;
    bt__etcd_set_msg(msg, msglen, "out of memory");
    return NULL;
  }
  memset(&o, 0, sizeof(o));
  o.url = c->eps[ep];
  o.cacert = c->cacert;
  o.cert = c->cert;
  o.key = c->key;
  o.connect_timeout_ms = c->connect_timeout_ms;
  /* A PING after 5.5 s without a frame finds a frozen member (no answer
   * within twice the connect timeout, at least 2 s: a loop kept busy by Lua
   * for a moment must not drop a live connection) while a stream waits on
   * it; etcd counts PINGs less than 5 s apart as abuse (too_many_pings).
   * Lease renewals have their own, shorter, answer deadline (keep_margin). */
  o.ping_interval_ms = 5500;
  o.ping_timeout_ms = c->connect_timeout_ms < 1000 ? 2000 : 2 * c->connect_timeout_ms;
  text[0] = '\0';
  cn->g = bt_grpc_connect(c->loop, &o, on_conn_event, cn, err, text, sizeof(text));
  if (!cn->g) {
    bt__etcd_set_msg(msg, msglen, "etcd %s: %s", c->eps[ep], text[0] ? text : bt_strerror(*err));
    free(cn);
    return NULL;
  }
  cn->c = c;
  cn->ep = ep;
  cn->next = c->conns;
  if (c->conns) c->conns->prev = cn;
  c->conns = cn;
  c->conn[ep] = cn;
  c->refs++;
  return cn->g;
}

/* Opens a stream to endpoint ep. A connection that is going away or has
 * failed (its CLOSED not yet here) refuses new streams: the stream goes to
 * a new connection then. Returns 0 or a BT_E* code with msg. */
static int stream_open(bt_etcd_t *c, int ep, const char *path,
                       const char *const *md, long timeout_ms,
                       const bt_grpc_stream_cbs_t *cbs, void *arg,
                       bt_grpc_stream_t **s, char *msg, size_t msglen) {
  int err = 0, tries;
  for (tries = 0; tries < 2; tries++) {
    bt_grpc_conn_t *g = conn_get(c, ep, &err, msg, msglen);
    if (!g) {
      *s = NULL;
      return err;
    }
    err = bt_grpc_open(g, path, md, timeout_ms, cbs, arg, s);
    if (err != BT_EUNAVAIL) break;
    if (c->conn[ep]) {
      c->conn[ep]->goaway = 1;
      c->conn[ep] = NULL;
    }
  }
  if (err) {
    *s = NULL;
    bt__etcd_set_msg(msg, msglen, "etcd %s: %s", c->eps[ep], bt_strerror(err));
  }
  return err;
}

/* Metadata for a new stream: the token, and hasleader for the long-lived
 * ones (a member cut off from the leader refuses them, so they move). */
static const char *const *metadata(bt_etcd_t *c, const char **md, int noauth,
                                   int hasleader) {
  int n = 0;
  if (c->token && !noauth) {
    md[n++] = "token";
    md[n++] = c->token;
  }
  if (hasleader) {
    md[n++] = "hasleader";
    md[n++] = "true";
  }
  md[n] = NULL;
  return md;
}

/* The one-line text of a transport failure: our words, and the
 * transport's when it says more. */
static void transport_text(bt_etcd_t *c, int ep, int err, const char *why,
                           char *msg, size_t len) {
  size_t n = strlen(c->eps[ep]);
  if (why && !strncmp(why, c->eps[ep], n) && !strncmp(why + n, ": ", 2)) why += n + 2;
  if (why && why[0] && !strncmp(why, bt_strerror(err), strlen(bt_strerror(err))))
    snprintf(msg, len, "etcd %s: %s", c->eps[ep], why);
  else if (why && why[0])
    snprintf(msg, len, "etcd %s: %s (%s)", c->eps[ep], bt_strerror(err), why);
  else
    snprintf(msg, len, "etcd %s: %s", c->eps[ep], bt_strerror(err));
}

/* ---- unary calls ------------------------------------------------------- */

static void call_unlink(bt_etcd_call_t *call) {
  bt_etcd_t *c = call->c;
  if (call->prev) call->prev->next = call->next;
  else if (c->calls == call) c->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  call->prev = call->next = NULL;
}

static void call_free(bt_etcd_call_t *call) {
  cJSON_Delete(call->res);
  free(call->req);
  free(call->d_msg);
  free(call);
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
  call_free(call);
}

/* Completes call on the next loop turn (callbacks never run from inside
 * the function that started the call). */
static void call_defer(bt_etcd_call_t *call, int err, const char *msg) {
  bt_etcd_t *c = call->c;
  call->deferred = 1;
  call->d_err = err;
  free(call->d_msg);
  call->d_msg = strdup(msg ? msg : "");
  uv_timer_start(&c->done_timer, on_done_timer, 0, 0);
}

static void on_done_timer(uv_timer_t *t) {
  bt_etcd_t *c = t->data;
  bt_etcd_call_t *call;
  int again = 1;
  while (again) {
    again = 0;
    for (call = c->calls; call; call = call->next)
      if (call->deferred) {
        call_done(call, call->d_err, NULL, call->d_msg);
        again = 1;
        break;
      }
  }
}

static int call_send(bt_etcd_call_t *call);
static int keep_call_send(bt_etcd_call_t *call);
static void auth_start(bt_etcd_t *c);
static void auth_invalidate(bt_etcd_t *c, unsigned gen);

static void on_call_message(bt_grpc_stream_t *s, const uint8_t *p, size_t len,
                            void *arg) {
  bt_etcd_call_t *call = arg;
  int err = 0;
  if (call->res || call->res_err) return; /* a unary call has one answer */
  call->res = bt_etcdpb_decode(call->m->res, p, len, &err);
  if (!call->res) call->res_err = err ? err : BT_EPROTO;
}

/* Tries the call again on the next endpoint; 1 if it was sent. */
static int call_retry(bt_etcd_call_t *call) {
  bt_etcd_t *c = call->c;
  if (call->tried >= c->neps || c->closing) return 0;
  endpoint_failed(c, call->ep);
  call->ep = (call->ep + 1) % c->neps;
  cJSON_Delete(call->res);
  call->res = NULL;
  call->res_err = 0;
  return call_send(call) == 0;
}

static void on_call_close(bt_grpc_stream_t *s, int err, int status,
                          const char *message, void *arg) {
  bt_etcd_call_t *call = arg;
  bt_etcd_t *c = call->c;
  const char *ep = c->eps[call->ep];
  char msg[ERRLEN], text[TEXTLEN];
  int unsent = bt_grpc_stream_unsent(s);

  call->s = NULL;
  if (call->canceled || (err == BT_ECANCELED && c->closing)) {
    call_done(call, BT_ECANCELED, NULL, "operation canceled");
    return;
  }
  if (err == BT_ETOOLARGE) {
    /* an answer over the transport's limit: the same anywhere */
    transport_text(c, call->ep, err, message, msg, sizeof(msg));
    call_done(call, err, NULL, msg);
    return;
  }
  if (err) {
    endpoint_failed(c, call->ep);
    if (((call->flags & BT_ETCD_IDEMPOTENT) || unsent) && call_retry(call)) return;
    transport_text(c, call->ep, err, message, msg, sizeof(msg));
    call_done(call, err, NULL, msg);
    return;
  }
  if (status == 0) {
    if (call->res) {
      cJSON *j = call->res;
      call->res = NULL;
      call_done(call, 0, j, "");
      cJSON_Delete(j);
      return;
    }
    snprintf(msg, sizeof(msg), "etcd %s: malformed response%s", ep,
             call->res_err ? "" : " (no message)");
    call_done(call, call->res_err == BT_ENOMEM ? BT_ENOMEM : BT_EPROTO, NULL, msg);
    return;
  }
  err = bt_etcd_map_status(status, message, text, sizeof(text));
  if (err == BT_EAUTH && c->user && !(call->flags & F_NOAUTH) && !call->reauthed) {
    /* The token expired or was revoked: authenticate again, once. */
    call->reauthed = 1;
    auth_invalidate(c, call->gen);
    if (call_send(call) == 0) return;
  }
  if ((err == BT_EUNAVAIL || err == BT_ENOLEADER) &&
      ((call->flags & BT_ETCD_IDEMPOTENT) || unsent) && call_retry(call))
    return;
  if (err == BT_EUNAVAIL || err == BT_ENOLEADER) endpoint_failed(c, call->ep);
  if (err == BT_EAUTH && !c->user) no_user_text(c, text, sizeof(text));
  snprintf(msg, sizeof(msg), "etcd %s: %s", ep, text);
  call_done(call, err, NULL, msg);
}

/* Sends call to its endpoint, or parks it until a token is there. Returns
 * 0 (failures after this point are completed through the callback). */
static int call_send(bt_etcd_call_t *call) {
  static const bt_grpc_stream_cbs_t cbs = { on_call_message, on_call_close };
  bt_etcd_t *c = call->c;
  const char *md[8];
  char msg[ERRLEN];
  int err;

  if (c->user && !(call->flags & F_NOAUTH) && !c->token) {
    call->waiting_auth = 1;
    auth_start(c);
    return 0;
  }
  call->waiting_auth = 0;
  if (call->flags & F_KEEP) return keep_call_send(call);
  call->tried++;
  call->gen = c->token_gen;
  err = stream_open(c, call->ep, call->m->method,
                    metadata(c, md, call->flags & F_NOAUTH, 0), c->timeout_ms,
                    &cbs, call, &call->s, msg, sizeof(msg));
  if (err) {
    call_defer(call, err, msg);
    return 0;
  }
  /* Queuing fails only for want of memory; the stream's deadline then
   * ends it (on a later turn, as callbacks must come). */
  bt_grpc_send(call->s, call->req, call->len, 1);
  return 0;
}

static int call_start(bt_etcd_t *c, const char *path, const cJSON *body,
                      int flags, bt_etcd_cb cb, void *arg,
                      bt_etcd_call_t **out) {
  bt_etcd_call_t *call;
  char text[TEXTLEN], msg[ERRLEN];
  int err = 0;

  if (c->closing) return BT_ECLOSED;
  call = calloc(1, sizeof(*call));
  if (!call) return BT_ENOMEM;
  call->c = c;
  call->flags = flags;
  call->ep = c->cur;
  call->cb = cb;
  call->arg = arg;
  call->next = c->calls;
  if (c->calls) c->calls->prev = call;
  c->calls = call;
  if (out) *out = call;
  call->m = bt_etcdpb_method(path);
  if (!call->m || (call->m->stream && strcmp(path, "/v3/lease/keepalive"))) {
    snprintf(msg, sizeof(msg), "etcd request %s: %s", path,
             call->m ? "a stream, not a call" : "no such request path");
    call_defer(call, BT_EINVAL, msg);
    return 0;
  }
  if (call->m->stream) {
    /* Lua's one-off renewal: answered from the LeaseKeepAlive stream. */
    call->flags |= F_KEEP | BT_ETCD_IDEMPOTENT;
    if (!cJSON_IsObject(body) || bt_etcd_int64(body, "ID", &call->lease) ||
        call->lease == 0) {
      snprintf(msg, sizeof(msg), "etcd request %s: ID: a lease id expected", path);
      call_defer(call, BT_EINVAL, msg);
      return 0;
    }
  }
  text[0] = '\0';
  err = bt_etcdpb_encode(call->m->req, body, &call->req, &call->len, text, sizeof(text));
  if (err) {
    snprintf(msg, sizeof(msg), "etcd request %s: %s", path,
             text[0] ? text : bt_strerror(err));
    call_defer(call, err, msg);
    return 0;
  }
  return call_send(call);
}

int bt_etcd_call(bt_etcd_t *c, const char *path, const cJSON *body, int flags,
                 bt_etcd_cb cb, void *arg, bt_etcd_call_t **out) {
  return call_start(c, path, body, flags & BT_ETCD_IDEMPOTENT, cb, arg, out);
}

void bt_etcd_call_cancel(bt_etcd_call_t *call) {
  call->canceled = 1;
  if (call->s) bt_grpc_cancel(call->s);
  else call_done(call, BT_ECANCELED, NULL, "operation canceled");
}

/* ---- authentication ---------------------------------------------------- */

static void watch_auth_ready(bt_etcd_t *c);
static void keep_auth_ready(bt_etcd_t *c);

/* Forgets the token that an attempt sent with token_gen gen was refused
 * with, unless a newer one came meanwhile. */
static void auth_invalidate(bt_etcd_t *c, unsigned gen) {
  if (gen != c->token_gen || !c->token) return;
  free(c->token);
  c->token = NULL;
  c->token_gen++;
}

static void on_auth(const bt_etcd_res_t *res, void *arg) {
  bt_etcd_t *c = arg;
  bt_etcd_call_t *call, *next;
  char msg[ERRLEN];
  cJSON *tok = res->err ? NULL : cJSON_GetObjectItemCaseSensitive(res->json, "token");

  c->authing = 0;
  if (cJSON_IsString(tok) && tok->valuestring[0]) {
    free(c->token);
    c->token = strdup(tok->valuestring);
    c->token_gen++;
  }
  if (c->token) {
    for (call = c->calls; call; call = next) {
      next = call->next;
      if (call->waiting_auth) call_send(call);
    }
    watch_auth_ready(c);
    keep_auth_ready(c);
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
  if (c->authing || c->closing) return;
  j = cJSON_CreateObject();
  if (!j) return;
  cJSON_AddStringToObject(j, "name", c->user);
  cJSON_AddStringToObject(j, "password", c->password ? c->password : "");
  c->authing = 1;
  if (call_start(c, "/v3/auth/authenticate", j, F_NOAUTH | BT_ETCD_IDEMPOTENT,
                 on_auth, c, NULL))
    c->authing = 0;
  cJSON_Delete(j);
}

/* ---- watches ----------------------------------------------------------- */

enum { W_OFF, W_CREATING, W_ON };

struct bt_etcd_watch_s {
  bt_etcd_t *c;
  bt_etcd_watch_t *prev, *next;
  uint8_t *key, *range_end;   /* bytes; range_end NULL when none */
  size_t key_len, range_end_len;
  int prev_kv, no_put, no_delete;
  long idle_ms;
  int64_t next_rev;           /* 0 until the first created response */
  int64_t created_rev;        /* store revision at the first created response */
  int created;                /* CREATED delivered */
  int connects;
  int failures;               /* consecutive failed attempts */
  int64_t id;                 /* watch_id on the Watch stream */
  int state;                  /* W_OFF, W_CREATING, W_ON: while not
                                 off, it is on c->ws (endpoint ws_ep) */
  int waiting_auth;
  int reauthed;
  int stopping;
  int in_cb;
  int timer_closing;
  uint64_t last_data;         /* uv_now of its last response */
  cJSON *frag;                /* events of a fragmented response so far */
  uv_timer_t timer;           /* reconnect backoff and idle watchdog */
  bt_etcd_watch_cb cb;
  void *arg;
};

static void watch_connect(bt_etcd_watch_t *w);
static void watch_maybe_close(bt_etcd_watch_t *w);
static void watch_stop(bt_etcd_watch_t *w);
static void ws_failed(bt_etcd_t *c, int err, const char *msg, int count);

static void watch_deliver(bt_etcd_watch_t *w, int kind, int err, cJSON *json,
                          int64_t rev, const char *msg) {
  w->in_cb++;
  w->cb(w, kind, err, json, rev, msg ? msg : "", w->arg);
  w->in_cb--;
  if (kind != BT_WATCH_CLOSED && w->stopping && !w->in_cb) watch_maybe_close(w);
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
  cJSON_Delete(w->frag);
  free(w);
  client_unref(c);
}

/* Frees w once it has stopped and no callback of it runs. */
static void watch_maybe_close(bt_etcd_watch_t *w) {
  if (!w->stopping || w->timer_closing || w->in_cb) return;
  w->timer_closing = 1;
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *) &w->timer, on_watch_timer_close);
}

/* Packs req and sends it on the Watch stream. Returns 0 or BT_E*. */
static int ws_send(bt_etcd_t *c, const Etcdserverpb__WatchRequest *req) {
  size_t len;
  uint8_t *buf;
  int err;
  if (!c->ws) return BT_ECLOSED;
  len = etcdserverpb__watch_request__get_packed_size(req);
  if (!(buf = malloc(len ? len : 1))) return BT_ENOMEM;
  etcdserverpb__watch_request__pack(req, buf);
  err = bt_grpc_send(c->ws, buf, len, 0);
  free(buf);
  return err;
}

static void ws_cancel_id(bt_etcd_t *c, int64_t id) {
  Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
  Etcdserverpb__WatchCancelRequest cr = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
  cr.watch_id = id;
  req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
  req.cancel_request = &cr;
  ws_send(c, &req);
}

/* Takes w off the Watch stream (cancelling it there if it was on). */
static void watch_off(bt_etcd_watch_t *w) {
  if (w->state == W_ON && w->c->ws && !w->c->closing) ws_cancel_id(w->c, w->id);
  /* A create not yet answered is cancelled when its answer comes: the
   * answer finds no watch with its id. */
  w->state = W_OFF;
  w->id = 0;
  cJSON_Delete(w->frag);
  w->frag = NULL;
}

static void on_watch_timer(uv_timer_t *t) {
  bt_etcd_watch_t *w = t->data;
  bt_etcd_t *c = w->c;
  uint64_t now = uv_now(c->loop);
  if (w->stopping) return;
  if (w->state != W_OFF) {
    char msg[ERRLEN];
    /* The idle watchdog: nothing, not even a progress notification, came
     * for idle_ms. */
    if (now - w->last_data < (uint64_t) w->idle_ms) {
      uv_timer_start(&w->timer, on_watch_timer,
                     (uint64_t) w->idle_ms - (now - w->last_data), 0);
      return;
    }
    snprintf(msg, sizeof(msg), "etcd %s: watch silent for %.1f s", c->eps[c->ws_ep],
             (double) (now - w->last_data) / 1000.0);
    if (c->ws && c->cur != c->ws_ep) {
      /* The client moved elsewhere (calls failed there): the member is
       * presumed dead, every watch moves. (A dead connection is found by
       * its PINGs, grpc.h; the other watches may be talking.) */
      ws_failed(c, BT_ETIMEDOUT, msg, 1);
      return;
    }
    /* The stream is alive, this watch alone is silent: create it again. */
    watch_off(w);
    w->failures++;
    uv_timer_start(&w->timer, on_watch_timer, 50, 0);
    return;
  }
  watch_connect(w);
}

/* Schedules the next attempt after a failure. */
static void watch_retry(bt_etcd_watch_t *w, int err, const char *msg) {
  bt_etcd_t *c = w->c;
  uint64_t delay;
  if (w->stopping) return;
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

static bt_etcd_watch_t *watch_find(bt_etcd_t *c, int64_t id) {
  bt_etcd_watch_t *w;
  if (id <= 0) return NULL;
  for (w = c->watches; w; w = w->next)
    if (w->id == id && w->state != W_OFF && !w->stopping) return w;
  return NULL;
}

/* Handles one response of the Watch stream. Returns non-zero when the
 * stream must be dropped. */
static int ws_response(bt_etcd_t *c, cJSON *j) {
  bt__watch_res_t r;
  bt_etcd_watch_t *w;
  char msg[ERRLEN];

  if (bt__etcd_watch_res(j, &r)) return 1;
  if (r.created) {
    /* Creates are answered in order: this answers the oldest one sent. */
    int64_t id;
    if (!c->ncreating) return 1;
    id = c->creating[0];
    memmove(c->creating, c->creating + 1, (c->ncreating - 1) * sizeof(*c->creating));
    c->ncreating--;
    w = watch_find(c, id);
    if (!w) {
      if (!r.canceled) ws_cancel_id(c, id);
      return 0;
    }
  } else {
    w = watch_find(c, r.watch_id);
    if (!w || w->state != W_ON) return 0; /* cancelled here, or progress for all */
  }
  w->last_data = uv_now(c->loop);
  if (r.canceled) {
    const char *reason = r.cancel_reason;
    int refusal;
    if (r.compact_revision > 0) {
      snprintf(msg, sizeof(msg), "etcd %s: watch from revision %lld: required "
               "revision has been compacted (compact revision %lld)",
               c->eps[c->ws_ep], (long long) w->next_rev,
               (long long) r.compact_revision);
      w->state = W_OFF;
      watch_deliver(w, BT_WATCH_COMPACTED, BT_ECOMPACTED, NULL,
                    r.compact_revision, msg);
      watch_stop(w);
    } else if ((refusal = bt__etcd_refusal(reason)) != 0) {
      if (c->user && !w->reauthed && refusal == BT_EAUTH) {
        /* The stream's token is no longer good: authenticate again and
         * re-open the stream with the new one. */
        w->reauthed = 1;
        auth_invalidate(c, c->ws_gen);
        snprintf(msg, sizeof(msg), "etcd %s: watch refused: %s", c->eps[c->ws_ep], reason);
        ws_failed(c, BT_EAUTH, msg, 0);
        return 0;
      } else {
        char text[TEXTLEN];
        if (!c->user) no_user_text(c, text, sizeof(text));
        snprintf(msg, sizeof(msg), "etcd %s: watch refused: %s", c->eps[c->ws_ep],
                 c->user || refusal == BT_EACCES ? reason : text);
        w->state = W_OFF;
        watch_deliver(w, BT_WATCH_ERROR, refusal, NULL, 0, msg);
        watch_stop(w);
      }
    } else {
      /* Cancelled for another reason (the member is going away, say):
       * create it again. */
      snprintf(msg, sizeof(msg), "etcd %s: watch cancelled: %s", c->eps[c->ws_ep],
               reason[0] ? reason : "no reason given");
      watch_off(w);
      watch_retry(w, BT_ECONNRESET, msg);
    }
    return 0;
  }
  if (r.created) {
    w->state = W_ON;
    if (r.watch_id > 0) w->id = r.watch_id; /* as etcd names it */
    w->connects++;
    w->failures = 0;
    w->reauthed = 0;
    if (w->next_rev == 0) w->next_rev = r.revision + 1;
    if (!w->created) {
      w->created = 1;
      w->created_rev = r.revision;
      watch_deliver(w, BT_WATCH_CREATED, 0, NULL, w->next_rev - 1, NULL);
    }
    return 0;
  }
  if (r.events) {
    cJSON *evs = r.events;
    if (r.fragment || w->frag) {
      /* A large response in parts: join the events until the last one. */
      cJSON *e;
      if (!w->frag && !(w->frag = cJSON_CreateArray())) return 1;
      while ((e = r.events->child)) {
        cJSON_DetachItemViaPointer(r.events, e);
        cJSON_AddItemToArray(w->frag, e);
      }
      if (r.fragment) return 0;
      evs = w->frag;
    }
    if (r.last_mod >= w->next_rev) w->next_rev = r.last_mod + 1;
    if (!w->stopping)
      watch_deliver(w, BT_WATCH_EVENTS, 0, evs, r.revision, NULL);
    if (evs == w->frag) {
      cJSON_Delete(w->frag);
      w->frag = NULL;
    }
  } else if (r.revision >= w->next_rev && w->created && !w->frag) {
    /* A progress notification: every event up to rev has been sent. */
    w->next_rev = r.revision + 1;
  }
  return 0;
}

static void on_ws_message(bt_grpc_stream_t *s, const uint8_t *p, size_t len,
                          void *arg) {
  bt_etcd_t *c = arg;
  const bt_etcdpb_method_t *m = c->wm;
  cJSON *j;
  int err = 0, drop;
  char msg[ERRLEN];

  if (s != c->ws) return;
  j = bt_etcdpb_decode(m->res, p, len, &err);
  drop = !j || ws_response(c, j);
  cJSON_Delete(j);
  if (drop && s == c->ws) {
    snprintf(msg, sizeof(msg), "etcd %s: malformed watch response", c->eps[c->ws_ep]);
    ws_failed(c, BT_EPROTO, msg, 1);
  }
}

static void on_ws_close(bt_grpc_stream_t *s, int err, int status,
                        const char *message, void *arg) {
  bt_etcd_t *c = arg;
  char msg[ERRLEN], text[TEXTLEN];
  int count = 1;

  if (s != c->ws) return;
  c->ws = NULL;
  if (c->closing) return;
  if (err) {
    transport_text(c, c->ws_ep, err, message, msg, sizeof(msg));
  } else if (status) {
    err = bt_etcd_map_status(status, message, text, sizeof(text));
    if (err == BT_EAUTH && c->user) {
      auth_invalidate(c, c->ws_gen);
      count = 0;
    }
    snprintf(msg, sizeof(msg), "etcd %s: %s", c->eps[c->ws_ep], text);
  } else {
    err = BT_ECONNRESET;
    snprintf(msg, sizeof(msg), "etcd %s: watch stream ended", c->eps[c->ws_ep]);
  }
  ws_failed(c, err, msg, count);
}

/* The Watch stream failed (or is dropped): every watch on it tries again,
 * from its next revision, on the next endpoint. count = 0 when it is no
 * failure of the watches (the token is being renewed). */
static void ws_failed(bt_etcd_t *c, int err, const char *msg, int count) {
  bt_grpc_stream_t *s = c->ws;
  bt_etcd_watch_t *w, *next;
  c->ws = NULL;
  c->ncreating = 0;
  if (s) bt_grpc_cancel(s);
  if (c->closing) return;
  if (count) endpoint_failed(c, c->ws_ep);
  for (w = c->watches; w; w = next) {
    next = w->next;
    if (w->stopping || w->state == W_OFF) continue;
    w->state = W_OFF;
    w->id = 0;
    cJSON_Delete(w->frag);
    w->frag = NULL;
    if (count) watch_retry(w, err, msg);
    else uv_timer_start(&w->timer, on_watch_timer, 0, 0);
  }
}

/* Opens the Watch stream if there is none. Returns 0, 1 when waiting for a
 * token, or a BT_E* code with msg. */
static int ws_open(bt_etcd_t *c, char *msg, size_t msglen) {
  static const bt_grpc_stream_cbs_t cbs = { on_ws_message, on_ws_close };
  const char *md[8];
  int err;

  if (c->ws) return 0;
  if (c->user && !c->token) {
    auth_start(c);
    return 1;
  }
  err = stream_open(c, c->cur, c->wm->method, metadata(c, md, 0, 1), 0, &cbs, c, &c->ws,
                    msg, msglen);
  if (err) return err;
  c->ws_ep = c->cur;
  c->ws_gen = c->token_gen;
  c->ncreating = 0;
  return 0;
}

static void watch_connect(bt_etcd_watch_t *w) {
  bt_etcd_t *c = w->c;
  Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
  Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
  Etcdserverpb__WatchCreateRequest__FilterType filters[2];
  char msg[ERRLEN];
  int err;

  if (w->stopping || c->closing) return;
  err = ws_open(c, msg, sizeof(msg));
  if (err == 1) {
    w->waiting_auth = 1;
    return;
  }
  w->waiting_auth = 0;
  if (err) {
    watch_retry(w, err, msg);
    return;
  }
  if (c->ncreating == c->capcreating) {
    size_t cap = c->capcreating ? c->capcreating * 2 : 8;
    int64_t *p = realloc(c->creating, cap * sizeof(*p));
    if (!p) {
      watch_retry(w, BT_ENOMEM, "out of memory");
      return;
    }
    c->creating = p;
    c->capcreating = cap;
  }
  w->id = ++c->next_wid;
  cr.key.data = w->key;
  cr.key.len = w->key_len;
  cr.range_end.data = w->range_end;
  cr.range_end.len = w->range_end_len;
  cr.start_revision = w->next_rev > 0 ? w->next_rev : 0;
  cr.prev_kv = w->prev_kv != 0;
  cr.progress_notify = 1;
  if (w->no_put)
    filters[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
  if (w->no_delete)
    filters[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE;
  cr.filters = filters;
  cr.watch_id = w->id;
  cr.fragment = 1;
  req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
  req.create_request = &cr;
  err = ws_send(c, &req);
  if (err) {
    snprintf(msg, sizeof(msg), "etcd %s: watch request: %s", c->eps[c->ws_ep],
             bt_strerror(err));
    w->id = 0;
    watch_retry(w, err, msg);
    return;
  }
  c->creating[c->ncreating++] = w->id;
  w->state = W_CREATING;
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
      w->waiting_auth = 0;
      watch_deliver(w, BT_WATCH_ERROR, BT_EAUTH, NULL, 0, "authentication failed");
      watch_stop(w);
    }
  }
}

/* A malloc'd copy of n bytes (one byte at least, so that NULL means no
 * memory). */
static uint8_t *bytesdup(const char *p, size_t n) {
  uint8_t *s = malloc(n ? n : 1);
  if (s && n) memcpy(s, p, n);
  return s;
}

int bt_etcd_watch(bt_etcd_t *c, const bt_etcd_watch_opts_t *o,
                  bt_etcd_watch_cb cb, void *arg, bt_etcd_watch_t **out) {
  bt_etcd_watch_t *w;
  if (c->closing) return BT_ECLOSED;
  if (!o->key) return BT_EINVAL;
  w = calloc(1, sizeof(*w));
  if (!w) return BT_ENOMEM;
  w->key = bytesdup(o->key, o->key_len);
  w->key_len = o->key_len;
  w->range_end = o->range_end ? bytesdup(o->range_end, o->range_end_len) : NULL;
  w->range_end_len = o->range_end ? o->range_end_len : 0;
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
  /* On the next turn, as before: the stream may fail at once, and the
   * caller must hold the watch before any callback. */
  uv_timer_start(&w->timer, on_watch_timer, 0, 0);
  return 0;
}

static void watch_stop(bt_etcd_watch_t *w) {
  if (w->stopping) return;
  watch_off(w);
  w->stopping = 1;
  uv_timer_stop(&w->timer);
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
  int64_t lid;
  uint8_t req[16];           /* its LeaseKeepAliveRequest, packed once */
  size_t req_len;
  int64_t ttl;
  uint64_t last_ok;          /* ms, monotonic: send time of the last success */
  uint64_t sent_at;
  uint64_t answer_by;        /* the renewal in flight fails then */
  int inflight;              /* a renewal sent, its answer not yet here */
  int waiting_auth;
  uv_timer_t timer;
  int stopping, closing, lost;
  int fences;                /* publishes its fence moment (fence.h) */
  bt_etcd_keep_cb cb;
  void *arg;
};

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
  client_unref(c);
}

static void keep_finish(bt_etcd_keep_t *k) {
  if (k->closing) return;
  k->closing = 1;
  k->inflight = 0;
  uv_timer_stop(&k->timer);
  uv_close((uv_handle_t *) &k->timer, on_keep_close);
}

static void keep_lost(bt_etcd_keep_t *k, const char *msg) {
  if (k->lost || k->stopping) return;
  k->lost = 1;
  k->stopping = 1;
  keep_publish(k);
  k->cb(k, BT_ELOST, msg, k->arg);
  keep_finish(k);
}

static void on_keep_timer(uv_timer_t *t);

static void keep_arm(bt_etcd_keep_t *k, uint64_t in_ms) {
  uint64_t now = mono_ms();
  uint64_t deadline = keep_fence_at(k);
  if (k->closing) return;
  if (now + in_ms > deadline) in_ms = deadline > now ? deadline - now : 0;
  uv_timer_start(&k->timer, on_keep_timer, in_ms, 0);
}

/* A renewal's answer: ttl 0 means the lease is gone. */
static void keep_answer(bt_etcd_keep_t *k, int64_t ttl) {
  char msg[ERRLEN];
  k->inflight = 0;
  if (ttl <= 0) {
    snprintf(msg, sizeof(msg), "lease %s expired or was revoked", k->id);
    keep_lost(k, msg);
    return;
  }
  k->ttl = ttl;
  k->last_ok = k->sent_at;
  keep_publish(k);
  keep_arm(k, (uint64_t) ttl * 1000 / 3);
}

static void ks_failed(bt_etcd_t *c, int err, const char *msg, int count);

static void on_ks_timer(uv_timer_t *t);

/* Arms ks_timer for the earliest answer due on the LeaseKeepAlive stream. */
static void ks_timer_arm(bt_etcd_t *c) {
  bt_etcd_keep_t *k;
  bt_etcd_call_t *call;
  uint64_t first = UINT64_MAX, now = mono_ms();
  if (c->closing) return;
  for (k = c->keeps; k; k = k->next)
    if (k->inflight && k->answer_by < first) first = k->answer_by;
  for (call = c->calls; call; call = call->next)
    if (call->on_ks && call->ks_deadline < first) first = call->ks_deadline;
  if (first == UINT64_MAX) uv_timer_stop(&c->ks_timer);
  else uv_timer_start(&c->ks_timer, on_ks_timer, first > now ? first - now : 0, 0);
}

/* An answer overdue on the LeaseKeepAlive stream: the member is hung or
 * the connection dead; renewals move to the next endpoint. */
static void on_ks_timer(uv_timer_t *t) {
  bt_etcd_t *c = t->data;
  bt_etcd_keep_t *k;
  bt_etcd_call_t *call;
  uint64_t now = mono_ms();
  int late = 0;
  char msg[ERRLEN];
  for (k = c->keeps; k; k = k->next) late |= k->inflight && k->answer_by <= now;
  for (call = c->calls; call; call = call->next)
    late |= call->on_ks && call->ks_deadline <= now;
  if (late) {
    snprintf(msg, sizeof(msg), "etcd %s: no keepalive answer in time", c->eps[c->ks_ep]);
    ks_failed(c, BT_ETIMEDOUT, msg, 1);
  }
  ks_timer_arm(c);
}

static void on_ks_message(bt_grpc_stream_t *s, const uint8_t *p, size_t len,
                          void *arg) {
  bt_etcd_t *c = arg;
  const bt_etcdpb_method_t *m = c->km;
  bt_etcd_keep_t *k, *next;
  bt_etcd_call_t *call;
  int64_t id = 0, ttl = 0;
  int err = 0;
  cJSON *j;
  char msg[ERRLEN];

  if (s != c->ks) return;
  j = bt_etcdpb_decode(m->res, p, len, &err);
  if (!j || bt_etcd_int64(j, "ID", &id) || bt_etcd_int64(j, "TTL", &ttl)) {
    cJSON_Delete(j);
    snprintf(msg, sizeof(msg), "etcd %s: malformed keepalive response", c->eps[c->ks_ep]);
    ks_failed(c, BT_EPROTO, msg, 1);
    return;
  }
  for (k = c->keeps; k; k = next) {
    next = k->next;
    if (k->inflight && k->lid == id) keep_answer(k, ttl);
  }
  for (call = c->calls; call; call = call->next)
    if (call->on_ks && call->lease == id) {
      call->on_ks = 0;
      call_done(call, 0, j, "");
      break; /* one answer per request */
    }
  cJSON_Delete(j);
  ks_timer_arm(c);
}

static void on_ks_close(bt_grpc_stream_t *s, int err, int status,
                        const char *message, void *arg) {
  bt_etcd_t *c = arg;
  char msg[ERRLEN], text[TEXTLEN];
  int count = 1;

  if (s != c->ks) return;
  c->ks = NULL;
  if (c->closing) return;
  if (err) {
    transport_text(c, c->ks_ep, err, message, msg, sizeof(msg));
  } else if (status) {
    err = bt_etcd_map_status(status, message, text, sizeof(text));
    if (err == BT_EAUTH && c->user) {
      auth_invalidate(c, c->ks_gen);
      count = 0;
    }
    snprintf(msg, sizeof(msg), "etcd %s: %s", c->eps[c->ks_ep], text);
  } else {
    err = BT_ECONNRESET;
    snprintf(msg, sizeof(msg), "etcd %s: keepalive stream ended", c->eps[c->ks_ep]);
  }
  ks_failed(c, err, msg, count);
}

/* The LeaseKeepAlive stream failed (or is dropped): renewals in flight are
 * sent again, on the next endpoint when count. */
static void ks_failed(bt_etcd_t *c, int err, const char *msg, int count) {
  bt_grpc_stream_t *s = c->ks;
  bt_etcd_keep_t *k;
  bt_etcd_call_t *call;
  int again = 1;

  c->ks = NULL;
  if (s) bt_grpc_cancel(s);
  if (c->closing) return;
  if (count) endpoint_failed(c, c->ks_ep);
  for (k = c->keeps; k; k = k->next)
    if (k->inflight) {
      k->inflight = 0;
      keep_arm(k, count ? 100 : 0);
    }
  while (again) {
    again = 0;
    for (call = c->calls; call; call = call->next) {
      if (!call->on_ks) continue;
      call->on_ks = 0;
      if (call->tried >= c->neps && count) call_done(call, err, NULL, msg);
      else call_send(call);
      again = 1;
      break;
    }
  }
  ks_timer_arm(c);
}

/* Opens the LeaseKeepAlive stream if there is none. Returns 0, 1 when
 * waiting for a token, or a BT_E* code with msg. */
static int ks_open(bt_etcd_t *c, char *msg, size_t msglen) {
  static const bt_grpc_stream_cbs_t cbs = { on_ks_message, on_ks_close };
  const char *md[8];
  int err;

  if (c->ks) return 0;
  if (c->user && !c->token) {
    auth_start(c);
    return 1;
  }
  err = stream_open(c, c->cur, c->km->method, metadata(c, md, 0, 1), 0, &cbs, c, &c->ks,
                    msg, msglen);
  if (err) return err;
  c->ks_ep = c->cur;
  c->ks_gen = c->token_gen;
  return 0;
}

/* Sends one renewal, req (a packed LeaseKeepAliveRequest, len bytes);
 * 0, 1 (waiting for a token) or BT_E*. */
static int ks_renew(bt_etcd_t *c, const uint8_t *req, size_t len, char *msg,
                    size_t msglen) {
  int err = ks_open(c, msg, msglen);
  if (err) return err;
  err = bt_grpc_send(c->ks, req, len, 0);
  if (err) bt__etcd_set_msg(msg, msglen, "etcd %s: keepalive: %s", c->eps[c->ks_ep], bt_strerror(err));
  return err;
}

/* A one-off "/v3/lease/keepalive" call: sent on the LeaseKeepAlive stream,
 * answered by the next answer for its lease. */
static int keep_call_send(bt_etcd_call_t *call) {
  bt_etcd_t *c = call->c;
  char msg[ERRLEN];
  int err = ks_renew(c, call->req, call->len, msg, sizeof(msg));
  if (err == 1) {
    call->waiting_auth = 1;
    return 0;
  }
  call->tried++;
  if (err) {
    call_defer(call, err, msg);
    return 0;
  }
  call->ep = c->ks_ep;
  call->on_ks = 1;
  call->ks_deadline = mono_ms() + (uint64_t) c->timeout_ms;
  ks_timer_arm(c);
  return 0;
}

static void on_keep_timer(uv_timer_t *t) {
  bt_etcd_keep_t *k = t->data;
  bt_etcd_t *c = k->c;
  uint64_t now = mono_ms();
  char msg[ERRLEN];
  uint64_t attempt_ms;
  int err;

  if (k->stopping) return;
  if (now >= keep_fence_at(k)) {
    snprintf(msg, sizeof(msg), "lease %s: no successful keepalive for %.1f s "
             "(ttl %lld s)", k->id, (double) (now - k->last_ok) / 1000.0,
             (long long) k->ttl);
    keep_lost(k, msg);
    return;
  }
  if (k->inflight) { /* still waiting for the previous answer */
    keep_arm(k, 250);
    return;
  }
  err = ks_renew(c, k->req, k->req_len, msg, sizeof(msg));
  if (err) {
    k->waiting_auth = err == 1;
    keep_arm(k, 250);
    return;
  }
  k->sent_at = now;
  k->inflight = 1;
  /* A hung member must not eat the lease's budget: each renewal gets ttl/6
   * (0.5 to 2 s) for its answer, after which the stream moves to the next
   * endpoint. */
  attempt_ms = keep_margin(k);
  if (attempt_ms < 500) attempt_ms = 500;
  k->answer_by = now + attempt_ms;
  ks_timer_arm(c);
  keep_arm(k, (uint64_t) k->ttl * 1000); /* only the deadline check */
}

static void keep_auth_ready(bt_etcd_t *c) {
  bt_etcd_keep_t *k;
  for (k = c->keeps; k; k = k->next)
    if (k->waiting_auth && !k->stopping) {
      k->waiting_auth = 0;
      keep_arm(k, 0);
    }
}

int bt_etcd_keep(bt_etcd_t *c, const char *id, int64_t ttl, bt_etcd_keep_cb cb,
                 void *arg, bt_etcd_keep_t **out) {
  bt_etcd_keep_t *k;
  Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
  char *end;
  long long lid;
  if (c->closing) return BT_ECLOSED;
  if (ttl <= 0 || strlen(id) >= sizeof(k->id) || !id[0]) return BT_EINVAL;
  errno = 0;
  lid = strtoll(id, &end, 10);
  if (*end || errno == ERANGE || lid == 0) return BT_EINVAL;
  k = calloc(1, sizeof(*k));
  if (!k) return BT_ENOMEM;
  k->c = c;
  snprintf(k->id, sizeof(k->id), "%s", id);
  k->lid = lid;
  req.id = lid;
  /* at most 11 bytes: a tag and a 10-byte varint */
  k->req_len = etcdserverpb__lease_keep_alive_request__pack(&req, k->req);
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

static void on_client_timer_close(uv_handle_t *h) {
  client_unref(h->data);
}

void bt_etcd_close(bt_etcd_t *c) {
  bt_etcd_watch_t *w;
  bt_etcd_keep_t *k;
  conn_t *cn;
  if (!c || c->closing) return;
  c->closing = 1;
  for (;;) {
    bt_etcd_call_t *call;
    /* (a stream whose callback is running ends once it returns) */
    for (call = c->calls; call && call->canceled && call->s; call = call->next) {}
    if (!call) break;
    bt_etcd_call_cancel(call);
  }
  for (w = c->watches; w; w = w->next) watch_stop(w);
  for (k = c->keeps; k; k = k->next) bt_etcd_keep_stop(k);
  if (c->ws) {
    bt_grpc_stream_t *s = c->ws;
    c->ws = NULL;
    bt_grpc_cancel(s);
  }
  if (c->ks) {
    bt_grpc_stream_t *s = c->ks;
    c->ks = NULL;
    bt_grpc_cancel(s);
  }
  for (cn = c->conns; cn; cn = cn->next) bt_grpc_close(cn->g);
  uv_close((uv_handle_t *) &c->done_timer, on_client_timer_close);
  uv_close((uv_handle_t *) &c->ks_timer, on_client_timer_close);
}
