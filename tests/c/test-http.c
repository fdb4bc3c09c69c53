/*
 * HTTP client tests (TAP). One libuv loop holds the client and scripted
 * servers: uv_tcp listeners on 127.0.0.1 that record the raw bytes of every
 * request and answer by the scenario's script (bytes in pieces, delays,
 * closes, silence), so no etcd and no other process is needed.
 *
 * They probe what an HTTP/1.1 client can get wrong, and what baton asks of
 * libcurl, which speaks HTTP for it: framing (Content-Length, chunked with
 * extensions and trailers, close-delimited, bodiless HEAD/204/304, 1xx
 * interim responses), responses split at every byte, connection reuse and
 * its failures, timeouts, malformed responses, and cancel and close,
 * from inside on_done too. About 4 s.
 */
#define _GNU_SOURCE
#include "http.h"
#include "b64.h"
#include "err.h"
#include "tap.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

/* ---- helpers ---------------------------------------------------------- */

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000;
}

/* Finds header name (case-insensitive) in a header block of len bytes
 * (lines up to the first empty one; a status or request line is skipped as
 * it has no "name:" prefix) and copies its value, trimmed, to val. Returns
 * 1 when found. */
static int find_hdr(const char *p, size_t len, const char *name, char *val,
                    size_t vallen) {
  const char *end = p + len;
  size_t n = strlen(name);
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t) (end - p));
    const char *le = eol ? eol : end;
    if (le > p && le[-1] == '\r') le--;
    if (le == p) return 0;                    /* the empty line */
    if ((size_t) (le - p) > n && p[n] == ':' && strncasecmp(p, name, n) == 0) {
      const char *v = p + n + 1;
      size_t vl;
      while (v < le && (*v == ' ' || *v == '\t')) v++;
      while (le > v && (le[-1] == ' ' || le[-1] == '\t')) le--;
      vl = (size_t) (le - v);
      if (vl >= vallen) vl = vallen - 1;
      memcpy(val, v, vl);
      val[vl] = '\0';
      return 1;
    }
    if (!eol) break;
    p = eol + 1;
  }
  return 0;
}

/* True when header name has exactly value exp in the block. */
static int hdr_is(const char *p, size_t len, const char *name, const char *exp) {
  char v[8192];
  return p && find_hdr(p, len, name, v, sizeof(v)) && strcmp(v, exp) == 0;
}

static int starts(const char *p, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return p && len >= n && memcmp(p, prefix, n) == 0;
}

/* ---- scripted servers ------------------------------------------------- */

enum { MAXREQ = 64, MAXSRV = 8 };

typedef struct srv_s srv_t;
typedef struct conn_s conn_t;

/* Called for request n (0-based, over the whole server) read on c. */
typedef void (*srv_cb)(srv_t *s, conn_t *c, int n);

/* One step of a connection's script: after delay_ms (counted from the end
 * of the previous step), set *flag, then write data or close. */
typedef struct act_s {
  struct act_s *next;
  uint64_t delay_ms;
  char *data;
  size_t len;
  int close;
  int *flag;
} act_t;

typedef struct {
  uv_write_t req;
  conn_t *c;
  char *data;
} wr_t;

struct conn_s {
  uv_tcp_t tcp;
  uv_timer_t timer;
  srv_t *s;
  conn_t *next;
  int id;                /* accept index */
  char *in;              /* bytes read and not yet parsed as a request */
  size_t in_len, in_cap;
  act_t *acts, *last;    /* script steps still to run */
  int busy;              /* a step's timer or write is pending */
  int answering;         /* a request was read and its answer not yet done */
  int closing, nclosed;
};

struct srv_s {
  uv_tcp_t tcp;
  int port;
  int accepts, nreq;
  int pipelined;         /* requests that arrived before the last was answered */
  int peer_closed;       /* connections the client closed */
  int refs, closing;
  char *raw[MAXREQ];     /* each request's bytes, NUL-terminated */
  size_t raw_len[MAXREQ];
  int conn_of[MAXREQ];   /* accept index of each request's connection */
  const char *resp[8];   /* answer to request n (the last one repeats) */
  size_t resp_len[8];    /* 0: strlen */
  int nresp;
  int close_after;       /* close the connection after each answer */
  int bytewise;          /* write answers a byte at a time ... */
  int gap_ms;            /* ... this far apart */
  int delay_ms;          /* delay of h_echo's answers */
  int flag;              /* set by a scripted step */
  srv_cb on_req;         /* NULL: answer from resp[] */
  conn_t *conns;
};

static srv_t *srvs[MAXSRV];

/* The loop. Callbacks that change what a test waits for stop it, so that
 * uv_run(UV_RUN_ONCE) returns instead of blocking in its poll after a
 * timer's callback. */
static uv_loop_t *loop_of_test;

static void wake(void) {
  uv_stop(loop_of_test);
}

static void conn_kick(conn_t *c);
static void conn_close(conn_t *c);

static void srv_unref(srv_t *s) {
  int i;
  if (--s->refs) return;
  for (i = 0; i < MAXREQ; i++) free(s->raw[i]);
  for (i = 0; i < MAXSRV; i++)
    if (srvs[i] == s) srvs[i] = NULL;
  free(s);
}

static void act_push(conn_t *c, uint64_t delay, const char *data, size_t len,
                     int close, int *flag) {
  act_t *a = calloc(1, sizeof(*a));
  a->delay_ms = delay;
  a->close = close;
  a->flag = flag;
  if (len) {
    a->data = malloc(len);
    memcpy(a->data, data, len);
    a->len = len;
  }
  if (c->last) c->last->next = a;
  else c->acts = a;
  c->last = a;
  conn_kick(c);
}

/* Script steps: write bytes, write a string, write bytes one per step,
 * close, write with a flag set just before. */
static void sayn(conn_t *c, uint64_t delay, const char *p, size_t n) {
  act_push(c, delay, p, n, 0, NULL);
}

static void says(conn_t *c, uint64_t delay, const char *str) {
  act_push(c, delay, str, strlen(str), 0, NULL);
}

static void say_bytewise(conn_t *c, uint64_t gap, const char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) act_push(c, gap, p + i, 1, 0, NULL);
}

static void hangup(conn_t *c, uint64_t delay) {
  act_push(c, delay, NULL, 0, 1, NULL);
}

static void step_done(conn_t *c) {
  c->busy = 0;
  if (!c->acts) c->answering = 0;
  conn_kick(c);
}

static void on_written(uv_write_t *req, int status) {
  wr_t *w = (wr_t *) req;
  conn_t *c = w->c;
  free(w->data);
  free(w);
  if (!c->closing) step_done(c);  /* write errors: the client went away */
}

static void on_act_timer(uv_timer_t *t) {
  conn_t *c = t->data;
  act_t *a = c->acts;
  c->acts = a->next;
  if (!c->acts) c->last = NULL;
  if (a->flag) *a->flag = 1;
  if (a->close) {
    free(a);
    conn_close(c);
    return;
  }
  if (a->len) {
    wr_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init(a->data, (unsigned) a->len);
    w->c = c;
    w->data = a->data;
    free(a);
    if (uv_write(&w->req, (uv_stream_t *) &c->tcp, &b, 1, on_written)) {
      free(w->data);
      free(w);
      step_done(c);
    }
    return;
  }
  free(a);
  step_done(c);
}

static void conn_kick(conn_t *c) {
  if (c->closing || c->busy || !c->acts) return;
  c->busy = 1;
  uv_timer_start(&c->timer, on_act_timer, c->acts->delay_ms, 0);
}

static void on_conn_closed(uv_handle_t *hd) {
  conn_t *c = hd->data, **pp;
  if (++c->nclosed < 2) return;
  for (pp = &c->s->conns; *pp && *pp != c; pp = &(*pp)->next) {}
  if (*pp) *pp = c->next;
  srv_unref(c->s);
  free(c->in);
  free(c);
}

static void conn_close(conn_t *c) {
  act_t *a;
  if (c->closing) return;
  c->closing = 1;
  while ((a = c->acts)) {
    c->acts = a->next;
    free(a->data);
    free(a);
  }
  c->last = NULL;
  uv_close((uv_handle_t *) &c->tcp, on_conn_closed);
  uv_close((uv_handle_t *) &c->timer, on_conn_closed);
}

/* The default answer: resp[n] (the last one for later requests), whole or
 * a byte at a time; a NULL entry or an empty script means silence. */
static void srv_answer(srv_t *s, conn_t *c, int n) {
  int i = n < s->nresp ? n : s->nresp - 1;
  size_t len;
  if (i < 0 || !s->resp[i]) return;
  len = s->resp_len[i] ? s->resp_len[i] : strlen(s->resp[i]);
  if (s->bytewise) say_bytewise(c, (uint64_t) s->gap_ms, s->resp[i], len);
  else sayn(c, 0, s->resp[i], len);
  if (s->close_after) hangup(c, 0);
}

/* Splits c->in into requests (headers, then a Content-Length body or a
 * chunked one), records each and hands it to the script. */
static void conn_parse(conn_t *c) {
  srv_t *s = c->s;
  while (!c->closing) {
    char *e = memmem(c->in, c->in_len, "\r\n\r\n", 4), v[64];
    size_t hlen, blen = 0, total;
    int n;
    if (!e) return;
    hlen = (size_t) (e - c->in) + 4;
    if (find_hdr(c->in, hlen, "Content-Length", v, sizeof(v))) {
      blen = strtoul(v, NULL, 10);
    } else if (find_hdr(c->in, hlen, "Transfer-Encoding", v, sizeof(v))) {
      char *z = memmem(c->in + hlen, c->in_len - hlen, "\r\n0\r\n\r\n", 7);
      if (!z) return;
      blen = (size_t) (z + 7 - (c->in + hlen));
    }
    total = hlen + blen;
    if (c->in_len < total) return;
    n = s->nreq++;
    if (n < MAXREQ) {
      s->raw[n] = malloc(total + 1);
      memcpy(s->raw[n], c->in, total);
      s->raw[n][total] = '\0';
      s->raw_len[n] = total;
      s->conn_of[n] = c->id;
    }
    memmove(c->in, c->in + total, c->in_len - total);
    c->in_len -= total;
    if (c->answering) s->pipelined++;
    c->answering = 1;
    wake();
    if (s->on_req) s->on_req(s, c, n);
    else srv_answer(s, c, n);
  }
}

static void on_alloc(uv_handle_t *hd, size_t size, uv_buf_t *b) {
  b->base = malloc(65536);
  b->len = 65536;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  conn_t *c = st->data;
  if (nread < 0) {
    if (!c->closing) c->s->peer_closed++;
    wake();
    conn_close(c);
  } else if (nread > 0 && !c->closing) {
    if (c->in_len + (size_t) nread > c->in_cap) {
      c->in_cap = (c->in_len + (size_t) nread) * 2;
      c->in = realloc(c->in, c->in_cap);
    }
    memcpy(c->in + c->in_len, b->base, (size_t) nread);
    c->in_len += (size_t) nread;
    conn_parse(c);
  }
  free(b->base);
}

static void on_accept(uv_stream_t *ls, int status) {
  srv_t *s = ls->data;
  conn_t *c;
  if (status < 0) return;
  c = calloc(1, sizeof(*c));
  c->s = s;
  uv_tcp_init(ls->loop, &c->tcp);
  uv_timer_init(ls->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  if (uv_accept(ls, (uv_stream_t *) &c->tcp)) {
    s->refs++;
    c->closing = 1;
    uv_close((uv_handle_t *) &c->tcp, on_conn_closed);
    uv_close((uv_handle_t *) &c->timer, on_conn_closed);
    return;
  }
  s->refs++;
  c->id = s->accepts++;
  c->next = s->conns;
  s->conns = c;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *) &c->tcp, on_alloc, on_read);
}

static void on_srv_closed(uv_handle_t *hd) {
  srv_unref(hd->data);
}

/* A listener on 127.0.0.1 and a free port; freed once srv_close()d and
 * every connection has closed. */
static srv_t *srv_new(uv_loop_t *loop) {
  srv_t *s = calloc(1, sizeof(*s));
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof(got), i;
  uv_tcp_init(loop, &s->tcp);
  s->tcp.data = s;
  s->refs = 1;
  uv_ip4_addr("127.0.0.1", 0, &a);
  if (uv_tcp_bind(&s->tcp, (const struct sockaddr *) &a, 0) ||
      uv_listen((uv_stream_t *) &s->tcp, 128, on_accept) ||
      uv_tcp_getsockname(&s->tcp, (struct sockaddr *) &got, &len)) {
    printf("Bail out! cannot listen on 127.0.0.1\n");
    exit(2);
  }
  s->port = ntohs(((struct sockaddr_in *) &got)->sin_port);
  for (i = 0; i < MAXSRV && srvs[i]; i++) {}
  if (i < MAXSRV) srvs[i] = s;
  return s;
}

static void srv_close(srv_t *s) {
  conn_t *c, *next;
  if (s->closing) return;
  s->closing = 1;
  for (c = s->conns; c; c = next) {
    next = c->next;
    conn_close(c);
  }
  uv_close((uv_handle_t *) &s->tcp, on_srv_closed);
}

static void srv_script(srv_t *s, int i, const char *resp, size_t len) {
  s->resp[i] = resp;
  s->resp_len[i] = len;
  if (s->nresp < i + 1) s->nresp = i + 1;
}

/* The request target of request n (between the first two spaces). */
static void req_target(srv_t *s, int n, char *out, size_t outlen) {
  const char *p = n < MAXREQ && s->raw[n] ? strchr(s->raw[n], ' ') : NULL;
  const char *q = p ? strchr(p + 1, ' ') : NULL;
  size_t l = q ? (size_t) (q - p - 1) : 0;
  if (l >= outlen) l = outlen - 1;
  if (l) memcpy(out, p + 1, l);
  out[l] = '\0';
}

/* Answers with the request target as the body, after s->delay_ms;
 * "/silent" is never answered. */
static void h_echo(srv_t *s, conn_t *c, int n) {
  char t[256], r[512];
  req_target(s, n, t, sizeof(t));
  if (strcmp(t, "/silent") == 0) return;
  snprintf(r, sizeof(r), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(t), t);
  says(c, (uint64_t) s->delay_ms, r);
}

/* The body of request n (after the blank line). */
static const char *req_body(srv_t *s, int n, size_t *len) {
  const char *e = n < MAXREQ && s->raw[n] ? strstr(s->raw[n], "\r\n\r\n") : NULL;
  if (!e) {
    *len = 0;
    return "";
  }
  *len = s->raw_len[n] - (size_t) (e + 4 - s->raw[n]);
  return e + 4;
}

static int req_hdr_is(srv_t *s, int n, const char *name, const char *exp) {
  return n < MAXREQ && s->raw[n] && hdr_is(s->raw[n], s->raw_len[n], name, exp);
}

static int req_has_hdr(srv_t *s, int n, const char *name) {
  char v[256];
  return n < MAXREQ && s->raw[n] && find_hdr(s->raw[n], s->raw_len[n], name, v, sizeof(v));
}

/* ---- the client side -------------------------------------------------- */

typedef struct res_s res_t;

/* What one request's callbacks saw, copied. */
struct res_s {
  int done, err, nul_ok;
  long status;
  char *body, *head;
  size_t len, head_len;
  char errtext[256];
  uint64_t t0, t1;
  bt_http_req_t *req;
  int cancel_self_on_done;   /* bt_http_cancel(req) inside on_done */
  bt_http_t *close_on_done;  /* bt_http_close() this inside on_done */
  void (*hook)(res_t *r);    /* run at the end of on_done */
  void *ud;
};

static int twice;            /* on_done calls beyond the first */

static void on_done(bt_http_req_t *req, int err, long status, const char *body,
                    size_t len, void *arg) {
  res_t *r = arg;
  const char *hd;
  size_t hl = 0;
  wake();
  if (r->done++) {
    twice++;
    return;
  }
  r->t1 = now_ms();
  r->err = err;
  r->status = status;
  r->len = len;
  if (body) {
    r->body = malloc(len + 1);
    memcpy(r->body, body, len);
    r->body[len] = '\0';
    r->nul_ok = body[len] == '\0';
  }
  hd = bt_http_req_headers(req, &hl);
  r->head = malloc(hl + 1);
  if (hl) memcpy(r->head, hd, hl);
  r->head[hl] = '\0';
  r->head_len = hl;
  snprintf(r->errtext, sizeof(r->errtext), "%s", bt_http_req_errtext(req));
  r->req = NULL;
  if (r->cancel_self_on_done) bt_http_cancel(req);
  if (r->close_on_done) bt_http_close(r->close_on_done);
  if (r->hook) r->hook(r);
}

/* How many of the n requests r[] have not ended yet. */
static int pending(const res_t *r, int n) {
  int i, k = 0;
  for (i = 0; i < n; i++) k += !r[i].done;
  return k;
}

static void res_free(res_t *r) {
  free(r->body);
  free(r->head);
  memset(r, 0, sizeof(*r));
}

static bt_http_opts_t opts(res_t *r, const char *url) {
  bt_http_opts_t o;
  memset(&o, 0, sizeof(o));
  o.url = url;
  o.timeout_ms = 5000;       /* a backstop: no test waits this long */
  o.on_done = on_done;
  o.arg = r;
  return o;
}

static int start(bt_http_t *h, const bt_http_opts_t *o, res_t *r) {
  r->t0 = now_ms();
  return bt_http_request(h, o, &r->req);
}

/* Diagnostics of a failed request. */
static void diag(const res_t *r) {
  printf("#   err %d (%s) status %ld errtext \"%s\"\n", r->err,
         r->err ? bt_err_name(r->err) : "0", r->status, r->errtext);
}

/* ---- running the loop ------------------------------------------------- */

static uv_timer_t watchdog;
static int expired;

static void on_watchdog(uv_timer_t *t) {
  expired = 1;
  uv_stop(t->loop);
}

/* Runs the loop until *count reaches want, or ms pass; true if it did. */
static int wait_for(uv_loop_t *loop, const int *count, int want, uint64_t ms) {
  expired = 0;
  uv_timer_start(&watchdog, on_watchdog, ms, 0);
  while (*count < want && !expired) uv_run(loop, UV_RUN_ONCE);
  uv_timer_stop(&watchdog);
  return *count >= want;
}

static void run_for(uv_loop_t *loop, uint64_t ms) {
  static const int never = 0;
  wait_for(loop, &never, 1, ms);
}

/* Runs the loop until no handle is left (true), or 3 s pass (false). */
static int settle(uv_loop_t *loop) {
  expired = 0;
  uv_timer_start(&watchdog, on_watchdog, 3000, 0);
  uv_unref((uv_handle_t *) &watchdog);
  while (uv_run(loop, UV_RUN_DEFAULT) && !expired) {}
  uv_ref((uv_handle_t *) &watchdog);
  uv_timer_stop(&watchdog);
  return !expired;
}

/* Starts a request and runs the loop until it is done (at most 6 s). */
static int fetch(uv_loop_t *loop, bt_http_t *h, const bt_http_opts_t *o,
                 res_t *r) {
  int err = start(h, o, r);
  if (err) return err;
  wait_for(loop, &r->done, 1, 6000);
  return 0;
}

/* Closes the client (if any) and every server, and drains the loop. */
static void finish(uv_loop_t *loop, bt_http_t *h, const char *name) {
  int i;
  if (h) bt_http_close(h);
  for (i = 0; i < MAXSRV; i++)
    if (srvs[i]) srv_close(srvs[i]);
  if (!settle(loop)) ok(0, "%s: the loop drains after close", name);
}

static char url[512];

static const char *mkurl(srv_t *s, const char *path) {
  snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, path);
  return url;
}

/* ---- 1. GET with Content-Length ------------------------------------- */

static const char get_resp[] =
  "HTTP/1.1 200 OK\r\ncontent-length:  11\r\nX-Test: abc\r\n"
  "X-Empty:\r\n\r\nhello\0world";

static void test_get(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;
  char host[64];

  srv_script(s, 0, get_resp, sizeof(get_resp) - 1);
  o = opts(&r, mkurl(s, "/path?q=a%20b&r"));
  r.cancel_self_on_done = 1;
  is_int(start(h, &o, &r), 0, "get: request starts");
  is_int(pending(&r, 1), 1, "get: one request active");
  wait_for(loop, &r.done, 1, 3000);
  is_int(r.done, 1, "get: on_done once");
  if (!ok(r.err == 0 && r.status == 200, "get: err 0, status 200")) diag(&r);
  ok(r.len == 11 && r.body && memcmp(r.body, "hello\0world", 11) == 0,
     "get: body with a NUL inside, 11 bytes (len %zu)", r.len);
  ok(r.nul_ok, "get: body is NUL-terminated");
  ok(hdr_is(r.head, r.head_len, "X-Test", "abc"), "get: header block has "
     "X-Test: abc");
  ok(!strstr(r.head, "hello"), "get: header block holds no body bytes");
  is_int(pending(&r, 1), 0, "get: none active after");
  ok(starts(s->raw[0], s->raw_len[0], "GET /path?q=a%20b&r HTTP/1.1\r\n"),
     "get: request line is GET /path?q=a%%20b&r HTTP/1.1");
  snprintf(host, sizeof(host), "127.0.0.1:%d", s->port);
  ok(req_hdr_is(s, 0, "Host", host), "get: Host header is host:port");
  size_t bl;
  req_body(s, 0, &bl);
  ok(bl == 0 && (!req_has_hdr(s, 0, "Content-Length") ||
                 req_hdr_is(s, 0, "Content-Length", "0")),
     "get: no request body");

  /* a URL without a path asks for / */
  o = opts(&r2, mkurl(s, ""));
  fetch(loop, h, &o, &r2);
  ok(r2.err == 0 && r2.status == 200 && r2.len == 11, "get: URL without path");
  ok(starts(s->raw[1], s->raw_len[1], "GET / HTTP/1.1\r\n"),
     "get: ... sends GET / HTTP/1.1");
  finish(loop, h, "get");
  is_int(r.done, 1, "get: cancel inside its own on_done is a no-op");
  res_free(&r);
  res_free(&r2);
}

/* ---- 2. request bodies, headers, big bodies ------------------------- */

static const char ok_resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

static void test_post(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;
  static const char body[] = "a=1&b=2\r\n\r\n\0\xff tail";
  static char longval[4096 + 16];
  const char *hdrs[] = { "X-A: 1", "Content-Type: application/octet-stream",
                         "X-Spaced: a  b c", longval, NULL };
  size_t bl;
  const char *b;

  memcpy(longval, "X-Long: ", 8);
  memset(longval + 8, 'L', 4096);
  longval[8 + 4096] = '\0';
  srv_script(s, 0, ok_resp, 0);

  o = opts(&r, mkurl(s, "/post"));
  o.body = body;
  o.body_len = sizeof(body) - 1;
  o.headers = hdrs;
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200 && r.body && strcmp(r.body, "ok") == 0,
          "post: answered")) diag(&r);
  ok(starts(s->raw[0], s->raw_len[0], "POST /post HTTP/1.1\r\n"),
     "post: default method with a body is POST");
  b = req_body(s, 0, &bl);
  ok(bl == sizeof(body) - 1 && memcmp(b, body, bl) == 0,
     "post: body arrives byte-exact (%zu bytes)", bl);
  {
    char cl[32];
    snprintf(cl, sizeof(cl), "%zu", sizeof(body) - 1);
    ok(req_hdr_is(s, 0, "Content-Length", cl), "post: Content-Length %s", cl);
  }
  ok(req_hdr_is(s, 0, "X-A", "1") &&
     req_hdr_is(s, 0, "Content-Type", "application/octet-stream") &&
     req_hdr_is(s, 0, "X-Spaced", "a  b c") &&
     req_hdr_is(s, 0, "X-Long", longval + 8), "post: custom headers arrive exact");
  res_free(&r);

  /* PUT with a body, DELETE without, POST with an empty body */
  o = opts(&r, mkurl(s, "/put"));
  o.method = "PUT";
  o.body = "{}";
  o.body_len = 2;
  fetch(loop, h, &o, &r);
  b = req_body(s, 1, &bl);
  ok(r.err == 0 && starts(s->raw[1], s->raw_len[1], "PUT /put HTTP/1.1\r\n") &&
     bl == 2 && memcmp(b, "{}", 2) == 0, "post: PUT with a body");
  res_free(&r);
  o = opts(&r, mkurl(s, "/del"));
  o.method = "DELETE";
  fetch(loop, h, &o, &r);
  ok(r.err == 0 && starts(s->raw[2], s->raw_len[2], "DELETE /del HTTP/1.1\r\n"),
     "post: DELETE");
  res_free(&r);
  o = opts(&r, mkurl(s, "/empty"));
  o.body = "";
  o.body_len = 0;
  fetch(loop, h, &o, &r);
  ok(r.err == 0 && starts(s->raw[3], s->raw_len[3], "POST /empty HTTP/1.1\r\n") &&
     req_hdr_is(s, 3, "Content-Length", "0"), "post: empty body sends "
     "Content-Length: 0");
  is_int(s->accepts, 1, "post: the four requests share one connection");
  finish(loop, h, "post");
  res_free(&r);
}

static void test_big(uv_loop_t *loop) {
  enum { REQ = 1 << 20, RESP = 4 << 20, CHUNK = 65536, NCHUNK = 16 };
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;
  char *big = malloc(REQ), *resp = malloc(RESP + 128), *chunked, *p;
  size_t bl, hl, i;
  const char *b;
  int good;

  for (i = 0; i < REQ; i++) big[i] = (char) (i * 131 + (i >> 12));
  hl = (size_t) sprintf(resp, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n",
                        RESP);
  for (i = 0; i < RESP; i++) resp[hl + i] = (char) (i * 7 + (i >> 16));
  chunked = malloc(NCHUNK * (CHUNK + 16) + 128);
  p = chunked + sprintf(chunked, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                        "\r\n\r\n");
  for (i = 0; i < NCHUNK; i++) {
    p += sprintf(p, "%x\r\n", CHUNK);
    memset(p, 'a' + (int) i, CHUNK);
    p += CHUNK;
    p += sprintf(p, "\r\n");
  }
  p += sprintf(p, "0\r\n\r\n");
  srv_script(s, 0, ok_resp, 0);
  srv_script(s, 1, resp, hl + RESP);
  srv_script(s, 2, chunked, (size_t) (p - chunked));

  o = opts(&r, mkurl(s, "/big"));
  o.body = big;
  o.body_len = REQ;
  fetch(loop, h, &o, &r);
  b = req_body(s, 0, &bl);
  if (!ok(r.err == 0 && r.status == 200, "big: 1 MiB POST answered")) diag(&r);
  ok(bl == REQ && memcmp(b, big, REQ) == 0, "big: 1 MiB request body arrives "
     "exact (%zu bytes)", bl);
  ok(!req_has_hdr(s, 0, "Expect"), "big: no Expect: 100-continue round trip");
  res_free(&r);

  o = opts(&r, mkurl(s, "/4m"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "big: 4 MiB response")) diag(&r);
  ok(r.len == RESP && r.body && memcmp(r.body, resp + hl, RESP) == 0 && r.nul_ok,
     "big: 4 MiB body exact (%zu bytes)", r.len);
  res_free(&r);

  o = opts(&r, mkurl(s, "/1m-chunked"));
  fetch(loop, h, &o, &r);
  good = r.err == 0 && r.len == NCHUNK * CHUNK && r.body;
  for (i = 0; good && i < NCHUNK * CHUNK; i++)
    if (r.body[i] != 'a' + (char) (i / CHUNK)) good = 0;
  ok(good, "big: 1 MiB chunked response in 64 KiB chunks (%zu bytes)", r.len);
  finish(loop, h, "big");
  res_free(&r);
  free(big);
  free(resp);
  free(chunked);
}

/* ---- 3. keep-alive and concurrency ---------------------------------- */

typedef struct {
  bt_http_t *h;
  res_t *next;
  const char *url;
  int err;
} chain_t;

static void start_next(res_t *r) {
  chain_t *ch = r->ud;
  bt_http_opts_t o = opts(ch->next, ch->url);
  ch->err = start(ch->h, &o, ch->next);
}

static void test_keepalive(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r[3] = {{0}};
  bt_http_opts_t o;
  char u2[128];
  chain_t ch;
  int i;

  s->on_req = h_echo;
  snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/two", s->port);
  ch.h = h;
  ch.next = &r[1];
  ch.url = u2;
  ch.err = -1;
  r[0].hook = start_next;           /* the second starts inside on_done */
  r[0].ud = &ch;
  o = opts(&r[0], mkurl(s, "/one"));
  start(h, &o, &r[0]);
  wait_for(loop, &r[1].done, 1, 3000);
  is_int(ch.err, 0, "keepalive: a request starts inside on_done");
  o = opts(&r[2], mkurl(s, "/three"));
  fetch(loop, h, &o, &r[2]);
  ok(r[0].err == 0 && r[1].err == 0 && r[2].err == 0 &&
     strcmp(r[0].body, "/one") == 0 && strcmp(r[1].body, "/two") == 0 &&
     strcmp(r[2].body, "/three") == 0, "keepalive: three sequential answers");
  is_int(s->nreq, 3, "keepalive: three requests");
  is_int(s->accepts, 1, "keepalive: one connection");
  finish(loop, h, "keepalive");
  for (i = 0; i < 3; i++) res_free(&r[i]);
}

static void test_concurrent(uv_loop_t *loop) {
  enum { N = 20 };
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  static res_t r[N];
  static int ndone;
  bt_http_opts_t o;
  char path[32];
  int i, good = 1;

  s->on_req = h_echo;
  s->delay_ms = 100;
  memset(r, 0, sizeof(r));
  for (i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "/c%d", i);
    o = opts(&r[i], mkurl(s, path));
    start(h, &o, &r[i]);
  }
  is_int(pending(r, 2), 2, "concurrent: two active");
  wait_for(loop, &r[1].done, 1, 3000);
  wait_for(loop, &r[0].done, 1, 3000);
  ok(r[0].err == 0 && r[1].err == 0 && r[0].body && r[1].body &&
     strcmp(r[0].body, "/c0") == 0 && strcmp(r[1].body, "/c1") == 0,
     "concurrent: both answered right");
  is_int(s->accepts, 2, "concurrent: two connections");
  is_int(s->pipelined, 0, "concurrent: no pipelining");
  for (i = 0; i < 2; i++) res_free(&r[i]);

  /* a burst: every answer reaches its own request */
  s->delay_ms = 20;
  ndone = 0;
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof(path), "/burst/%d", i);
    o = opts(&r[i], mkurl(s, path));
    start(h, &o, &r[i]);
  }
  is_int(pending(r, N), N, "concurrent: %d active", N);
  for (i = 0; i < N; i++) wait_for(loop, &r[i].done, 1, 3000);
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof(path), "/burst/%d", i);
    if (r[i].done != 1 || r[i].err || !r[i].body || strcmp(r[i].body, path))
      good = 0;
    ndone += r[i].done;
  }
  ok(good && ndone == N, "concurrent: a burst of %d, each answered right", N);
  is_int(s->pipelined, 0, "concurrent: still no pipelining");
  is_int(pending(r, N), 0, "concurrent: none active after");
  finish(loop, h, "concurrent");
  for (i = 0; i < N; i++) res_free(&r[i]);
}

/* ---- 4. chunked ------------------------------------------------------ */

static const char chunked_resp[] =
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nX-Head: 1\r\n\r\n"
  "5;x=y\r\nhello\r\n"
  "A\r\n0123456789\r\n"
  "a; q=\"r\"\r\nabcdefghij\r\n"
  "00010\r\n0123456789ABCDEF\r\n"
  "0\r\nX-Trailer: t\r\n\r\n";
static const char chunked_body[] = "hello0123456789abcdefghij0123456789ABCDEF";

static void test_chunked(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;

  srv_script(s, 0, chunked_resp, 0);
  o = opts(&r, mkurl(s, "/ch"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "chunked: answered")) diag(&r);
  is_str(r.body, chunked_body, "chunked: body assembled (extensions, A/a, "
         "leading zeros)");
  is_int(r.len, sizeof(chunked_body) - 1, "chunked: length");
  ok(hdr_is(r.head, r.head_len, "X-Head", "1"), "chunked: header block");
  o = opts(&r2, mkurl(s, "/ch2"));
  fetch(loop, h, &o, &r2);
  is_str(r2.body, chunked_body, "chunked: the next request on the connection "
         "(trailer consumed)");
  is_int(s->accepts, 1, "chunked: one connection");
  finish(loop, h, "chunked");
  res_free(&r);
  res_free(&r2);
}

/* ---- 5. a byte at a time -------------------------------------------- */

static const char cl_resp[] =
  "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-B: 1\r\n\r\n0123456789";

static void test_bytewise(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;

  s->bytewise = 1;
  s->gap_ms = 1;
  srv_script(s, 0, cl_resp, 0);
  srv_script(s, 1, chunked_resp, 0);
  o = opts(&r, mkurl(s, "/b1"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "bytewise: Content-Length answered"))
    diag(&r);
  is_str(r.body, "0123456789", "bytewise: Content-Length body");
  ok(hdr_is(r.head, r.head_len, "X-B", "1"), "bytewise: header block");
  o = opts(&r2, mkurl(s, "/b2"));
  fetch(loop, h, &o, &r2);
  if (!ok(r2.err == 0 && r2.status == 200, "bytewise: chunked answered"))
    diag(&r2);
  is_str(r2.body, chunked_body, "bytewise: chunked body");
  ok(hdr_is(r2.head, r2.head_len, "X-Head", "1"), "bytewise: chunked header "
     "block");
  is_int(s->accepts, 1, "bytewise: one connection");
  finish(loop, h, "bytewise");
  res_free(&r);
  res_free(&r2);
}

/* ---- 6. Connection: close, close-delimited bodies, HTTP/1.0 --------- */

static void h_close_delimited(srv_t *s, conn_t *c, int n) {
  says(c, 0, "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nfirst part|");
  says(c, 30, "second part");
  hangup(c, 30);
}

static void h_close_later(srv_t *s, conn_t *c, int n) {
  says(c, 0, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\n"
       "abc");
  hangup(c, 300);            /* a reused connection would see request 2 */
}

static void test_close(uv_loop_t *loop) {
  srv_t *s = srv_new(loop), *s2 = srv_new(loop), *s3 = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;

  s->on_req = h_close_later;
  o = opts(&r, mkurl(s, "/c1"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "abc", "close: Connection: close response body");
  res_free(&r);
  o = opts(&r, mkurl(s, "/c2"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "abc", "close: the next request is answered");
  is_int(s->accepts, 2, "close: ... on a new connection");
  res_free(&r);

  s2->on_req = h_close_delimited;
  o = opts(&r, mkurl(s2, "/cd"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "close: close-delimited answered"))
    diag(&r);
  is_str(r.body, "first part|second part", "close: body is everything up to "
         "the close");
  res_free(&r);

  /* HTTP/1.0 without keep-alive is not reused, even if the server keeps
   * the connection open */
  srv_script(s3, 0, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nv0", 0);
  o = opts(&r, mkurl(s3, "/a"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "v0", "close: HTTP/1.0 response");
  res_free(&r);
  o = opts(&r, mkurl(s3, "/b"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "v0", "close: HTTP/1.0 again");
  is_int(s3->accepts, 2, "close: HTTP/1.0 connection not reused");
  finish(loop, h, "close");
  res_free(&r);
}

/* ---- 7. idle kept-alive connection closed by the server ------------- */

static void h_ok_then_idle_close(srv_t *s, conn_t *c, int n) {
  says(c, 0, ok_resp);
  hangup(c, 50);
}

static void test_idle_close(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;

  s->on_req = h_ok_then_idle_close;
  o = opts(&r, mkurl(s, "/1"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "ok", "idle close: first answer");
  run_for(loop, 200);
  o = opts(&r2, mkurl(s, "/2"));
  fetch(loop, h, &o, &r2);
  if (!ok(r2.err == 0 && r2.status == 200, "idle close: next request after "
          "the server closed the idle connection succeeds")) diag(&r2);
  is_int(s->accepts, 2, "idle close: on a new connection");
  is_int(s->nreq, 2, "idle close: the server saw two requests");
  finish(loop, h, "idle close");
  res_free(&r);
  res_free(&r2);
}

/* ---- 8. (new) a reused connection dropped without an answer --------- */

static void h_drop_on_reuse(srv_t *s, conn_t *c, int n) {
  if (c->id == 0 && n == 1) hangup(c, 0);
  else says(c, 0, ok_resp);
}

static void h_drop(srv_t *s, conn_t *c, int n) {
  hangup(c, 0);
}

/* Drops the reused connection after reading request 2 and stops
 * listening: the retry cannot connect. */
static void h_drop_and_stop(srv_t *s, conn_t *c, int n) {
  if (n == 1) srv_close(s);
  else says(c, 0, ok_resp);
}

static void test_retry(uv_loop_t *loop) {
  srv_t *s = srv_new(loop), *s2 = srv_new(loop), *s3 = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0}, r3 = {0};
  bt_http_opts_t o;

  s->on_req = h_drop_on_reuse;
  o = opts(&r, mkurl(s, "/1"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "ok", "retry: first answer");
  o = opts(&r2, mkurl(s, "/2"));
  fetch(loop, h, &o, &r2);
  if (!ok(r2.err == 0 && r2.status == 200 && r2.body &&
          strcmp(r2.body, "ok") == 0, "retry (new): dropped on a reused "
          "connection -> retried, succeeds")) diag(&r2);
  ok(s->nreq == 3 && s->conn_of[1] == 0 && s->conn_of[2] == 1,
     "retry (new): request 2 seen twice, on the reused then a fresh "
     "connection (%d requests)", s->nreq);
  is_int(s->accepts, 2, "retry (new): two connections");
  res_free(&r);

  s2->on_req = h_drop;
  o = opts(&r, mkurl(s2, "/fresh"));
  fetch(loop, h, &o, &r);
  is_int(r.done, 1, "retry: dropped on a fresh connection: on_done once");
  ok(r.err != 0, "retry: ... with an error (%s)", r.err ? bt_err_name(r.err) : "0");
  run_for(loop, 50);
  is_int(s2->nreq, 1, "retry: ... and not retried");
  res_free(&r);

  /* Sent once on a reused connection, the retry refused: one on_done, with
   * the retry's error. */
  s3->on_req = h_drop_and_stop;
  o = opts(&r, mkurl(s3, "/1"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "ok", "retry: (server 3) first answer");
  o = opts(&r3, mkurl(s3, "/2"));
  fetch(loop, h, &o, &r3);
  is_int(r3.done, 1, "retry: dropped, then the retry refused: on_done once");
  is_int(r3.err, BT_ECONNREFUSED, "retry: ... with ECONNREFUSED");
  finish(loop, h, "retry");
  res_free(&r);
  res_free(&r2);
  res_free(&r3);
}

/* ---- 9. 1xx interim responses --------------------------------------- */

static void h_interim(srv_t *s, conn_t *c, int n) {
  if (n == 0) {
    says(c, 0, "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
         "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok");
  } else {
    says(c, 0, "HTTP/1.1 100 Continue\r\n\r\n");
    says(c, 20, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n");
    says(c, 20, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Final: 2\r\n\r\nyes");
  }
}

static void test_interim(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;

  s->on_req = h_interim;
  o = opts(&r, mkurl(s, "/i"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 201, "interim: 100 then 201: status 201 "
          "(%ld)", r.status)) diag(&r);
  is_str(r.body, "ok", "interim: final body");
  ok(hdr_is(r.head, r.head_len, "X-Final", "1") && !strstr(r.head, "X-Interim"),
     "interim: header block is the final response's");
  o = opts(&r2, mkurl(s, "/i2"));
  fetch(loop, h, &o, &r2);
  ok(r2.err == 0 && r2.status == 200 && r2.body && strcmp(r2.body, "yes") == 0,
     "interim: 100 and 103 in separate writes, then 200");
  ok(hdr_is(r2.head, r2.head_len, "X-Final", "2") && !strstr(r2.head, "Link"),
     "interim: ... header block is the final response's");
  finish(loop, h, "interim");
  res_free(&r);
  res_free(&r2);
}

/* ---- 10. bodiless responses ----------------------------------------- */

static void test_bodiless(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;

  srv_script(s, 0, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-H: 1\r\n\r\n", 0);
  srv_script(s, 1, "HTTP/1.1 204 No Content\r\nX-N: 1\r\n\r\n", 0);
  srv_script(s, 2, "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n"
             "Content-Length: 50\r\n\r\n", 0);
  srv_script(s, 3, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext", 0);
  o = opts(&r, mkurl(s, "/head"));
  o.method = "HEAD";
  fetch(loop, h, &o, &r);
  if (!ok(r.done == 1 && r.err == 0 && r.status == 200 && r.len == 0 &&
          r.t1 - r.t0 < 1000, "bodiless: HEAD with Content-Length: 1234 "
          "completes promptly, empty body (%llu ms)",
          (unsigned long long) (r.t1 - r.t0))) diag(&r);
  ok(starts(s->raw[0], s->raw_len[0], "HEAD /head HTTP/1.1\r\n"),
     "bodiless: request line HEAD");
  ok(hdr_is(r.head, r.head_len, "Content-Length", "1234"), "bodiless: HEAD "
     "header block");
  res_free(&r);
  o = opts(&r, mkurl(s, "/204"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 204 && r.len == 0 && r.t1 - r.t0 < 1000,
          "bodiless: 204 without length completes")) diag(&r);
  res_free(&r);
  o = opts(&r, mkurl(s, "/304"));
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 304 && r.len == 0 && r.t1 - r.t0 < 1000,
          "bodiless: 304 with Content-Length: 50 completes")) diag(&r);
  res_free(&r);
  o = opts(&r, mkurl(s, "/after"));
  fetch(loop, h, &o, &r);
  is_str(r.body, "next", "bodiless: then a body again");
  is_int(s->accepts, 1, "bodiless: all four on one connection");
  finish(loop, h, "bodiless");
  res_free(&r);
}

/* ---- 11. errors ------------------------------------------------------ */

static void test_errors(uv_loop_t *loop) {
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;
  uv_tcp_t t;
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof(got), port, i, rc;
  srv_t *s;
  char *huge, *p;
  static const char *bad[] = {
    "FOO\r\n\r\n",
    "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
  };
  static const char *bad_name[] = { "garbage status line",
    "non-numeric status", "non-numeric Content-Length", "bad chunk size" };

  /* refused: a port bound, then closed */
  uv_tcp_init(loop, &t);
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_bind(&t, (const struct sockaddr *) &a, 0);
  uv_tcp_getsockname(&t, (struct sockaddr *) &got, &len);
  port = ntohs(((struct sockaddr_in *) &got)->sin_port);
  uv_close((uv_handle_t *) &t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
  o = opts(&r, url);
  fetch(loop, h, &o, &r);
  if (!ok(r.done == 1 && r.err == BT_ECONNREFUSED, "errors: refused -> "
          "BT_ECONNREFUSED")) diag(&r);
  ok(r.done && r.t1 - r.t0 < 1000, "errors: refused within a second");
  res_free(&r);

  /* a server that never answers */
  s = srv_new(loop);
  o = opts(&r, mkurl(s, "/never"));
  o.timeout_ms = 300;
  fetch(loop, h, &o, &r);
  if (!ok(r.done == 1 && r.err == BT_ETIMEDOUT, "errors: no answer, "
          "timeout_ms 300 -> BT_ETIMEDOUT")) diag(&r);
  ok(r.done && r.t1 - r.t0 >= 250 && r.t1 - r.t0 <= 3000,
     "errors: ... after %llu ms", (unsigned long long) (r.t1 - r.t0));
  is_int(s->nreq, 1, "errors: ... the server got the request");
  res_free(&r);

  /* malformed responses fail promptly */
  for (i = 0; i < 4; i++) {
    s = srv_new(loop);
    srv_script(s, 0, bad[i], 0);
    o = opts(&r, mkurl(s, "/bad"));
    o.timeout_ms = 3000;
    fetch(loop, h, &o, &r);
    ok(r.done == 1 && r.err != 0 && r.t1 - r.t0 < 2000,
       "errors: %s -> an error (%s)", bad_name[i],
       r.err ? bt_err_name(r.err) : "0");
    res_free(&r);
    srv_close(s);
  }

  /* a header block over 1 MiB, in lines of 1000 bytes */
  huge = malloc(1200 * 1000 + 128);
  p = huge + sprintf(huge, "HTTP/1.1 200 OK\r\n");
  for (i = 0; i < 1200; i++) {
    p += sprintf(p, "X-Pad-%04d: ", i);
    memset(p, 'p', 1000 - 14);
    p += 1000 - 14;
    p += sprintf(p, "\r\n");
  }
  p += sprintf(p, "Content-Length: 0\r\n\r\n");
  s = srv_new(loop);
  srv_script(s, 0, huge, (size_t) (p - huge));
  o = opts(&r, mkurl(s, "/huge"));
  o.timeout_ms = 3000;
  fetch(loop, h, &o, &r);
  ok(r.done == 1 && r.err != 0, "errors: 1.2 MB header block -> an error (%s)",
     r.err ? bt_err_name(r.err) : "0");
  res_free(&r);

  /* one header line over 1 MiB that never ends */
  p = huge + sprintf(huge, "HTTP/1.1 200 OK\r\nX-Long: ");
  memset(p, 'q', 1100 * 1000);
  p += 1100 * 1000;
  s = srv_new(loop);
  srv_script(s, 0, huge, (size_t) (p - huge));
  o = opts(&r, mkurl(s, "/long"));
  o.timeout_ms = 3000;
  fetch(loop, h, &o, &r);
  ok(r.done == 1 && r.err != 0 && r.err != BT_ETIMEDOUT,
     "errors: an endless 1.1 MB header line -> an error, not a timeout (%s)",
     r.err ? bt_err_name(r.err) : "0");
  res_free(&r);
  free(huge);

  /* a Content-Length over 512 MiB: ETOOLARGE at the headers, saying so */
  s = srv_new(loop);
  srv_script(s, 0, "HTTP/1.1 200 OK\r\nContent-Length: 600000000\r\n\r\nabc",
             0);
  o = opts(&r, mkurl(s, "/toolarge"));
  o.timeout_ms = 3000;
  fetch(loop, h, &o, &r);
  if (!ok(r.done == 1 && r.err == BT_ETOOLARGE, "errors: a Content-Length "
          "over 512 MiB -> BT_ETOOLARGE")) diag(&r);
  is_str(r.errtext, "response body over 512 MiB", "errors: ... saying so");
  res_free(&r);

  /* an answer that is not HTTP: EPROTO with the reason, as documented for
   * baton.http (docs/lua-api.md), not EINVAL (curl calls it an unsupported
   * protocol, HTTP/0.9) */
  s = srv_new(loop);
  srv_script(s, 0, "garbage here\r\n\r\n", 16);
  o = opts(&r, mkurl(s, "/garbage"));
  fetch(loop, h, &o, &r);
  if (!ok(r.done == 1 && r.err == BT_EPROTO, "errors: not an HTTP answer -> "
          "BT_EPROTO")) diag(&r);
  ok(r.errtext[0] != 0, "errors: ... with a reason (%s)", r.errtext);
  res_free(&r);

  /* unknown host */
  o = opts(&r, "http://no-such-host.invalid/");
  fetch(loop, h, &o, &r);
  ok(r.done == 1 && r.err != 0, "errors: unknown host -> an error (%s)",
     r.err ? bt_err_name(r.err) : "0");
  res_free(&r);

  /* bad arguments and URLs: returned, or reported once through on_done */
  o = opts(&r, NULL);
  is_int(bt_http_request(h, &o, NULL), BT_EINVAL, "errors: no url -> BT_EINVAL");
  o = opts(&r, "ftp://127.0.0.1/");
  rc = start(h, &o, &r);
  if (!rc) wait_for(loop, &r.done, 1, 3000);
  ok(rc ? r.done == 0 : (r.done == 1 && r.err != 0), "errors: ftp:// URL fails "
     "(%s)", rc ? "returned" : "in on_done");
  res_free(&r);
  o = opts(&r, "http://[::1/");
  rc = start(h, &o, &r);
  if (!rc) wait_for(loop, &r.done, 1, 3000);
  ok(rc ? r.done == 0 : (r.done == 1 && r.err != 0), "errors: malformed URL "
     "fails (%s)", rc ? "returned" : "in on_done");
  finish(loop, h, "errors");
  res_free(&r);
}

/* ---- 12. cancel and close -------------------------------------------- */

static void h_stale_then_fresh(srv_t *s, conn_t *c, int n) {
  if (n == 0) says(c, 200, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale");
  else says(c, 0, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh");
}

static void test_cancel(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0}, r2 = {0};
  bt_http_opts_t o;

  /* right after the start */
  srv_script(s, 0, NULL, 0);
  o = opts(&r, mkurl(s, "/x"));
  start(h, &o, &r);
  bt_http_cancel(r.req);
  is_int(r.done, 1, "cancel: at once -> on_done during bt_http_cancel");
  is_int(r.err, BT_ECANCELED, "cancel: ... with BT_ECANCELED");
  is_int(pending(&r, 1), 0, "cancel: ... none active");
  run_for(loop, 50);
  is_int(r.done, 1, "cancel: ... and only once");
  res_free(&r);
  finish(loop, NULL, "cancel");

  /* after the server read it: the late answer reaches no one */
  s = srv_new(loop);
  s->on_req = h_stale_then_fresh;
  o = opts(&r, mkurl(s, "/stale"));
  start(h, &o, &r);
  wait_for(loop, &s->nreq, 1, 2000);
  is_int(pending(&r, 1), 1, "cancel: one in flight");
  bt_http_cancel(r.req);
  is_int(r.done, 1, "cancel: in flight -> on_done once");
  is_int(r.err, BT_ECANCELED, "cancel: ... with BT_ECANCELED");
  o = opts(&r2, mkurl(s, "/fresh"));
  fetch(loop, h, &o, &r2);
  is_str(r2.body, "fresh", "cancel: the next request gets its own answer, not "
         "the cancelled one's");
  run_for(loop, 250);
  is_int(r.done, 1, "cancel: no second on_done when the late answer comes");
  finish(loop, h, "cancel");
  res_free(&r);
  res_free(&r2);
}

static void test_close_inflight(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r[3] = {{0}}, a = {0}, b = {0};
  bt_http_opts_t o;
  int i, n = 0, canc = 0;
  uint64_t t0;

  srv_script(s, 0, NULL, 0);
  for (i = 0; i < 3; i++) {
    o = opts(&r[i], mkurl(s, "/hang"));
    start(h, &o, &r[i]);
  }
  wait_for(loop, &s->nreq, 3, 2000);
  is_int(pending(r, 3), 3, "close: three in flight");
  bt_http_close(h);
  for (i = 0; i < 3; i++) {
    n += r[i].done;
    canc += r[i].err == BT_ECANCELED;
  }
  ok(n == 3 && canc == 3, "close: three on_done with BT_ECANCELED (%d, %d)",
     n, canc);
  srv_close(s);
  t0 = now_ms();
  ok(settle(loop), "close: then the loop ends (%llu ms)",
     (unsigned long long) (now_ms() - t0));
  n = 0;
  for (i = 0; i < 3; i++) {
    n += r[i].done;
    res_free(&r[i]);
  }
  is_int(n, 3, "close: no further on_done");

  /* bt_http_close from inside an on_done, another request in flight */
  s = srv_new(loop);
  s->on_req = h_echo;
  h = bt_http_new(loop);
  a.close_on_done = h;
  o = opts(&b, mkurl(s, "/silent"));
  start(h, &o, &b);
  wait_for(loop, &s->nreq, 1, 2000);
  o = opts(&a, mkurl(s, "/a"));
  start(h, &o, &a);
  wait_for(loop, &a.done, 1, 3000);
  ok(a.done == 1 && a.err == 0 && a.body && strcmp(a.body, "/a") == 0,
     "close in on_done: that request answered");
  ok(b.done == 1 && b.err == BT_ECANCELED, "close in on_done: the other "
     "cancelled");
  finish(loop, NULL, "close in on_done");
  ok(a.done == 1 && b.done == 1, "close in on_done: each on_done once");
  res_free(&a);
  res_free(&b);
}

/* ---- 13. name resolution and user info ----------------------------- */

static void test_names(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o;
  char host[64];

  srv_script(s, 0, ok_resp, 0);
  snprintf(url, sizeof(url), "http://localhost:%d/", s->port);
  o = opts(&r, url);
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "names: http://localhost:PORT/"))
    diag(&r);
  snprintf(host, sizeof(host), "localhost:%d", s->port);
  ok(req_hdr_is(s, 0, "Host", host), "names: Host is localhost:PORT");
  res_free(&r);

  snprintf(url, sizeof(url), "http://user:pa%%3Ass@127.0.0.1:%d/auth", s->port);
  o = opts(&r, url);
  fetch(loop, h, &o, &r);
  if (!ok(r.err == 0 && r.status == 200, "names: URL with user:password"))
    diag(&r);
  ok(req_hdr_is(s, 1, "Authorization", "Basic dXNlcjpwYTpzcw=="),
     "names: Authorization: Basic base64(user:pa:ss)");
  snprintf(host, sizeof(host), "127.0.0.1:%d", s->port);
  ok(req_hdr_is(s, 1, "Host", host) &&
     starts(s->raw[1], s->raw_len[1], "GET /auth HTTP/1.1\r\n"),
     "names: no user info in Host or the request line");
  res_free(&r);

  /* Credentials of any length are sent, not dropped. */
  {
    char big[1200], cred[710], want[1000];
    memset(cred, 'p', sizeof(cred));
    memcpy(cred, "u:", 2);
    snprintf(big, sizeof(big), "http://%.*s@127.0.0.1:%d/long",
             (int) sizeof(cred), cred, s->port);
    memcpy(want, "Basic ", 6);
    bt_b64_encode(want + 6, cred, sizeof(cred));
    o = opts(&r, big);
    fetch(loop, h, &o, &r);
    ok(r.err == 0 && req_hdr_is(s, 2, "Authorization", want),
       "names: a 710-byte user:password is sent whole");
    res_free(&r);
  }
  finish(loop, h, "names");
}

/* ---- 14. https goes elsewhere --------------------------------------- */

static void test_https(uv_loop_t *loop) {
  bt_http_t *h = bt_http_new(loop);
  res_t r = {0};
  bt_http_opts_t o = opts(&r, "https://127.0.0.1:1/");
  is_int(fetch(loop, h, &o, &r), 0, "https: request starts");
  ok(r.done == 1 && r.err != 0, "https: refused port -> an error (%s)",
     r.err ? bt_err_name(r.err) : "0");
  finish(loop, h, "https");
  res_free(&r);
}

/* ---- 15. http and https in one client ----------------------------- */

static void test_two_schemes(uv_loop_t *loop) {
  srv_t *s = srv_new(loop);
  bt_http_t *h = bt_http_new(loop);
  res_t plain = {0}, tls = {0};
  bt_http_opts_t o;
  char tls_url[64];

  /* Silent: the http request waits for its answer, the https one for the
   * server's TLS hello. */
  srv_script(s, 0, NULL, 0);
  snprintf(tls_url, sizeof(tls_url), "https://127.0.0.1:%d/", s->port);
  o = opts(&plain, mkurl(s, "/plain"));
  start(h, &o, &plain);
  o = opts(&tls, tls_url);
  start(h, &o, &tls);
  wait_for(loop, &s->accepts, 2, 3000);
  is_int(pending(&plain, 1) + pending(&tls, 1), 2,
         "two schemes: http and https in flight");
  bt_http_close(h);
  ok(plain.done == 1 && plain.err == BT_ECANCELED &&
     tls.done == 1 && tls.err == BT_ECANCELED,
     "two schemes: close cancels both (%d %d)", plain.err, tls.err);
  finish(loop, NULL, "two schemes");
  res_free(&plain);
  res_free(&tls);

  /* Closing the client from an https request's on_done ends the http one
   * too, and the client is freed only after both are given back. */
  s = srv_new(loop);
  srv_script(s, 0, NULL, 0);
  h = bt_http_new(loop);
  o = opts(&plain, mkurl(s, "/plain"));
  start(h, &o, &plain);
  wait_for(loop, &s->nreq, 1, 2000);
  o = opts(&tls, "https://127.0.0.1:1/");
  tls.close_on_done = h;
  start(h, &o, &tls);
  wait_for(loop, &tls.done, 1, 6000);
  ok(tls.done == 1 && tls.err != 0 && tls.err != BT_ECANCELED,
     "close in an https on_done: that request failed on its own (%s)",
     tls.err ? bt_err_name(tls.err) : "0");
  ok(plain.done == 1 && plain.err == BT_ECANCELED,
     "close in an https on_done: the http request cancelled");
  finish(loop, NULL, "close in an https on_done");
  res_free(&plain);
  res_free(&tls);
}

int main(void) {
  uv_loop_t loop;
  uint64_t t0 = now_ms();
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  uv_loop_init(&loop);
  loop_of_test = &loop;
  uv_timer_init(&loop, &watchdog);
  test_get(&loop);
  test_post(&loop);
  test_big(&loop);
  test_keepalive(&loop);
  test_concurrent(&loop);
  test_chunked(&loop);
  test_bytewise(&loop);
  test_close(&loop);
  test_idle_close(&loop);
  test_retry(&loop);
  test_interim(&loop);
  test_bodiless(&loop);
  test_errors(&loop);
  test_cancel(&loop);
  test_close_inflight(&loop);
  test_names(&loop);
  test_https(&loop);
  test_two_schemes(&loop);
  is_int(twice, 0, "no on_done ran twice");
  uv_close((uv_handle_t *) &watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ok(uv_loop_close(&loop) == 0, "every handle closed");
  printf("# %llu ms\n", (unsigned long long) (now_ms() - t0));
  return tap_done();
}
