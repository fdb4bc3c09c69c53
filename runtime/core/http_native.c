/*
 * The HTTP client's native backend (http_backend.h): http:// spoken by
 * baton itself over libuv TCP streams. The reason is cost, not taste: etcd's
 * gateway is plain HTTP/1.1 on most clusters and what it needs of HTTP is
 * small, while each request through curl's multi interface cost us ~30 us
 * of CPU plus a poll re-arm, and a process that never makes an https
 * request never maps libcurl at all.
 *
 * Shape. A client has hosts ("name:port"); a host has connections and a
 * FIFO of requests waiting for one. A request takes the host's most recently
 * idled connection, else opens one (up to MAX_CONNS per host), else waits.
 * One request at a time per connection, no pipelining. Idle connections keep
 * reading, so a peer's close is seen at once and the connection dropped
 * before anyone writes to it. A request that finds its reused connection
 * dead before any byte of the answer came back is sent once more on a fresh
 * connection (what curl and browsers do; such a connection was closed by the
 * peer while idle).
 *
 * Every request has a timer for its deadlines (whole request, connect, low
 * speed) that also carries failures found inside start to the next loop
 * turn, so that the request never ends before bt_http_request has returned.
 * A request is given back to the front end in that timer's close callback;
 * a connection is freed when its TCP handle and any name lookup are done;
 * the client when nothing of it is open any more.
 *
 * The bytes of a response are parsed by http_parse.c, which knows nothing
 * of sockets (so it can be fuzzed): conn_parse feeds it each read and acts
 * on the events it returns.
 */
#include "http_backend.h"
#include "b64.h"
#include "err.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_BODY BT_HTTP_MAX_BODY
#define MAX_CONNS 256            /* per host; more requests wait */
#define MAX_IDLE 32              /* idle connections kept per host */
#define MAX_ADDRS 8              /* addresses tried per connection */
#define READ_BUF (64u << 10)
#define CONNECT_TIMEOUT_MS 2000

typedef bt__buf_t buf_t;

typedef struct client_s client_t;
typedef struct host_s host_t;
typedef struct conn_s conn_t;
typedef struct hreq_s hreq_t;

/* The backend's state for one client of the front end. */
struct client_s {
  uv_loop_t *loop;
  host_t *hosts;
  hreq_t *reqs;            /* every live request, in flight or waiting */
  int nreq;
  int handles;             /* open handles and lookups; freed at 0 once closing */
  int in_api;              /* > 0 inside start */
  int closing;
  char rbuf[READ_BUF];     /* every read lands here and is consumed at once */
};

struct host_s {
  host_t *next;
  client_t *cl;
  conn_t *idle;            /* idle connections, most recently idled first */
  int nconn, nidle;
  hreq_t *wait_head, *wait_tail;
  int literal;             /* name is an IP address: addr holds it */
  struct sockaddr_storage addr;
  char port[8];
  char name[];             /* without [] for IPv6 */
};

struct conn_s {
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  uv_getaddrinfo_t gai;
  host_t *host;
  hreq_t *req;             /* the request it serves, NULL when idle */
  conn_t *iprev, *inext;   /* host's idle list */
  int refs;                /* 1 until closed, +1 open tcp, +1 lookup */
  int idle, closing, connected, tcp_open, resolving, reconnect, reused;
  int writing;             /* a uv_write of the request is pending */
  int naddr, next_addr, last_err;
  struct sockaddr_storage addrs[MAX_ADDRS];
  uint64_t t_connect;
  /* the response being read */
  bt__http_parser_t ps;
  int stream_ok;           /* its body goes to on_data */
  size_t got;              /* response bytes seen, this request */
};

struct hreq_s {
  bt_http_req_t base;      /* first: the front end's part */
  client_t *cl;
  host_t *host;
  conn_t *conn;
  hreq_t *prev, *next;     /* cl->reqs */
  hreq_t *wnext;           /* host's wait queue */
  uv_timer_t timer;
  char *out;               /* the request's bytes: head and body */
  size_t outlen;
  uint64_t t_start, timeout_ms, connect_ms, low_ms, last_rx;
  long status;
  int waiting, head_only, cancel, finishing, in_cb, retried, fresh;
  int sent;                /* some try handed bytes to the kernel */
  int pending_err;         /* a failure to report from the timer */
  buf_t body;
};

static void req_dispatch(hreq_t *req);
static void req_finish(hreq_t *req, int err);
static void req_arm(hreq_t *req);
static void on_req_timer(uv_timer_t *t);
static void conn_close(conn_t *c);
static void conn_send(conn_t *c);
static void conn_connect_next(conn_t *c);

static void buf_free(buf_t *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

static void client_maybe_free(client_t *cl) {
  host_t *ho;
  if (!cl->closing || cl->handles > 0 || cl->nreq > 0) return;
  while ((ho = cl->hosts)) {
    cl->hosts = ho->next;
    free(ho);
  }
  free(cl);
}

/* ---- requests ---- */

static void on_req_closed(uv_handle_t *hd) {
  hreq_t *req = hd->data;
  client_t *cl = req->cl;
  bt__http_req_free(&req->base);
  cl->handles--;
  client_maybe_free(cl);
}

static void wait_remove(hreq_t *req) {
  host_t *ho = req->host;
  hreq_t **pp = &ho->wait_head, *prev = NULL;
  while (*pp && *pp != req) {
    prev = *pp;
    pp = &(*pp)->wnext;
  }
  if (*pp) {
    *pp = req->wnext;
    if (ho->wait_tail == req) ho->wait_tail = prev;
  }
  req->wnext = NULL;
  req->waiting = 0;
}

/* Ends req: detaches it (closing its connection, if any: an unfinished
 * exchange leaves it unusable), reports its end to the front end once, and
 * gives it back once its timer has closed. */
static void req_finish(hreq_t *req, int err) {
  client_t *cl = req->cl;
  /* A stream's 2xx body went to on_data; any other answer is kept whole. */
  int stream = req->base.on_data && req->status >= 200 && req->status < 300;

  if (req->finishing) return;
  req->finishing = 1;
  /* A retry that could not connect does not unsend the first try. */
  if (req->sent) req->base.unsent = 0;
  if (req->waiting) wait_remove(req);
  if (req->conn) {
    conn_t *c = req->conn;
    req->conn = NULL;
    c->req = NULL;
    conn_close(c);
  }
  if (req->prev) req->prev->next = req->next;
  else cl->reqs = req->next;
  if (req->next) req->next->prev = req->prev;
  cl->nreq--;
  uv_timer_stop(&req->timer);

  bt__http_req_done(&req->base, err, err ? 0 : req->status,
                    stream ? NULL : (req->body.p ? req->body.p : ""),
                    stream ? 0 : req->body.len);

  free(req->out);
  buf_free(&req->body);
  uv_close((uv_handle_t *) &req->timer, on_req_closed);
}

/* Fails req with err and a curl-like text; from inside start
 * the failure is reported on the next loop turn. */
static void req_fail(hreq_t *req, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(req->base.errtext, sizeof(req->base.errtext), fmt, ap);
  va_end(ap);
  if (req->cl->in_api) {
    if (req->conn) {
      conn_t *c = req->conn;
      req->conn = NULL;
      c->req = NULL;
      conn_close(c);
    }
    if (req->waiting) wait_remove(req);
    req->pending_err = err;
    uv_timer_start(&req->timer, on_req_timer, 0, 0);
    return;
  }
  req_finish(req, err);
}

static void on_req_timer(uv_timer_t *t) {
  hreq_t *req = t->data;
  uint64_t now = uv_now(req->cl->loop);
  conn_t *c = req->conn;

  if (req->pending_err) {
    req_finish(req, req->pending_err);
    return;
  }
  if (c && !c->connected && now >= c->t_connect + req->connect_ms) {
    req->base.unsent = 1;
    req_fail(req, BT_ETIMEDOUT, "Connection timed out after %llu milliseconds",
             (unsigned long long) (now - c->t_connect));
    return;
  }
  if (req->timeout_ms && now >= req->t_start + req->timeout_ms) {
    if (!c || !c->connected) req->base.unsent = 1;
    req_fail(req, BT_ETIMEDOUT,
             "Operation timed out after %llu milliseconds with %zu bytes "
             "received", (unsigned long long) (now - req->t_start),
             c ? c->got : (size_t) 0);
    return;
  }
  if (req->low_ms && c && c->connected && now >= req->last_rx + req->low_ms) {
    req_fail(req, BT_ETIMEDOUT, "Operation too slow: nothing received for %llu "
             "milliseconds", (unsigned long long) (now - req->last_rx));
    return;
  }
  req_arm(req);
}

/* (Re)starts req's timer for its nearest deadline; also the path by which a
 * pending failure reaches on_req_timer. */
static void req_arm(hreq_t *req) {
  uint64_t now = uv_now(req->cl->loop), at = UINT64_MAX;
  conn_t *c = req->conn;

  if (req->pending_err) return;    /* its timer is set to report it */
  if (req->timeout_ms) at = req->t_start + req->timeout_ms;
  if (c && !c->connected && c->t_connect + req->connect_ms < at)
    at = c->t_connect + req->connect_ms;
  if (req->low_ms && c && c->connected && req->last_rx + req->low_ms < at)
    at = req->last_rx + req->low_ms;
  if (at == UINT64_MAX) uv_timer_stop(&req->timer);
  else uv_timer_start(&req->timer, on_req_timer, at > now ? at - now : 0, 0);
}

/* Sends req again on a fresh connection: its reused one turned out dead
 * before any byte of the answer came back. */
static void req_retry(hreq_t *req) {
  conn_t *c = req->conn;
  req->conn = NULL;
  c->req = NULL;
  conn_close(c);
  req->retried = 1;
  req->fresh = 1;
  req_dispatch(req);
}

/* ---- connections ---- */

static void conn_unref(conn_t *c) {
  if (--c->refs == 0) {
    bt__http_parser_free(&c->ps);
    free(c);
  }
}

static void host_kick(host_t *ho) {
  while (ho->wait_head && ho->nconn < MAX_CONNS && !ho->cl->closing) {
    hreq_t *req = ho->wait_head;
    wait_remove(req);
    req_dispatch(req);
  }
}

static void idle_remove(conn_t *c) {
  host_t *ho = c->host;
  if (!c->idle) return;
  if (c->iprev) c->iprev->inext = c->inext;
  else ho->idle = c->inext;
  if (c->inext) c->inext->iprev = c->iprev;
  c->iprev = c->inext = NULL;
  c->idle = 0;
  ho->nidle--;
}

static void on_tcp_closed(uv_handle_t *hd) {
  conn_t *c = hd->data;
  client_t *cl = c->host->cl;
  c->tcp_open = 0;
  cl->handles--;
  if (c->reconnect) {
    c->reconnect = 0;
    if (!c->closing) conn_connect_next(c);
  }
  conn_unref(c);
  client_maybe_free(cl);
}

/* Stops using c: off the idle list, its TCP handle closed, its lookup
 * cancelled; freed when those are done. The caller has detached c's
 * request, if any. */
static void conn_close(conn_t *c) {
  host_t *ho = c->host;
  if (c->closing) return;
  c->closing = 1;
  idle_remove(c);
  ho->nconn--;
  if (c->resolving) uv_cancel((uv_req_t *) &c->gai);
  if (c->tcp_open && !uv_is_closing((uv_handle_t *) &c->tcp))
    uv_close((uv_handle_t *) &c->tcp, on_tcp_closed);
  conn_unref(c);
  host_kick(ho);
}

/* Sends req on c, a connected connection nobody else uses. */
static void conn_give(conn_t *c, hreq_t *req) {
  c->req = req;
  req->conn = c;
  conn_send(c);
}

/* c finished an exchange and can carry another: to the first waiter of its
 * host, else onto the idle list (the oldest idle one closed beyond
 * MAX_IDLE). */
static void conn_release(conn_t *c) {
  host_t *ho = c->host;
  c->reused = 1;
  if (ho->wait_head) {
    hreq_t *req = ho->wait_head;
    wait_remove(req);
    conn_give(c, req);
    return;
  }
  c->idle = 1;
  c->iprev = NULL;
  c->inext = ho->idle;
  if (ho->idle) ho->idle->iprev = c;
  ho->idle = c;
  ho->nidle++;
  if (ho->nidle > MAX_IDLE) {
    conn_t *old = ho->idle;
    while (old->inext) old = old->inext;
    conn_close(old);
  }
}

/* The response on c is complete. extra: bytes of the read after it, which
 * make c unusable (nothing may come unasked). */
static void conn_complete(conn_t *c, size_t extra) {
  hreq_t *req = c->req;
  c->req = NULL;
  req->conn = NULL;
  /* An answer that came before the whole request was written (a 413, say)
   * leaves the write behind: the connection cannot carry another. */
  if (c->ps.keep && !extra && !c->writing && !c->host->cl->closing)
    conn_release(c);
  else conn_close(c);
  req_finish(req, 0);
}

static void on_alloc(uv_handle_t *hd, size_t hint, uv_buf_t *buf) {
  conn_t *c = hd->data;
  buf->base = c->host->cl->rbuf;
  buf->len = READ_BUF;
}

/* The connection ended (nread: UV_EOF or an error) or failed to write. */
static void conn_lost(conn_t *c, int err) {
  hreq_t *req = c->req;
  if (!req) {
    conn_close(c);
    return;
  }
  if (err == UV_EOF && bt__http_parser_eof_ends(&c->ps)) {
    conn_complete(c, 0);
    return;
  }
  if (c->got == 0 && c->reused && !req->retried &&
      (err == UV_EOF || err == UV_ECONNRESET || err == UV_EPIPE)) {
    req_retry(req);
    return;
  }
  if (err == UV_EOF)
    req_fail(req, BT_ECONNRESET, c->got ? "Connection closed after %zu bytes "
             "of the response" : "Empty reply from server", c->got);
  else
    req_fail(req, err == UV_EPIPE ? BT_ECONNRESET : err, "%s",
             uv_strerror(err));
}

/* Hands n body bytes to req: to on_data for a 2xx stream, else to the
 * buffer. Returns -1 when req ended meanwhile (cancelled, too large). */
static int deliver(conn_t *c, const char *p, size_t n) {
  hreq_t *req = c->req;
  if (!n) return 0;
  if (c->stream_ok) {
    req->in_cb = 1;
    req->base.on_data(&req->base, p, n, req->base.arg);
    req->in_cb = 0;
    if (req->cancel) {
      req_finish(req, BT_ECANCELED);
      return -1;
    }
    return 0;
  }
  if (bt__buf_add(&req->body, p, n, MAX_BODY)) {
    req_fail(req, req->body.len + n > MAX_BODY ? BT_ETOOLARGE : BT_ENOMEM,
             "response body over %u bytes", MAX_BODY);
    return -1;
  }
  return 0;
}

/* The final header block of c's response ended: the body goes to on_data
 * (a 2xx answer to a stream) or to the buffer, which has a size limit.
 * Returns -1 when req ended. */
static int head_done(conn_t *c) {
  hreq_t *req = c->req;
  long st = c->ps.status;
  c->stream_ok = req->base.on_data && st >= 200 && st < 300;
  if (!c->stream_ok && c->ps.framing == BT__HTTP_LENGTH &&
      (uint64_t) c->ps.clen > MAX_BODY) {
    req_fail(req, BT_ETOOLARGE, "response body of %lld bytes",
             (long long) c->ps.clen);
    return -1;
  }
  return 0;
}

/* Feeds n bytes read on c to the parser of its request's response. */
static void conn_parse(conn_t *c, const char *p, size_t n) {
  while (c->req) {
    const char *body;
    size_t used, blen;
    int ev = bt__http_parse(&c->ps, p, n, &used, &body, &blen);
    c->req->status = c->ps.status;
    p += used;
    n -= used;
    switch (ev) {
    case BT__HTTP_MORE:
      return;
    case BT__HTTP_HEAD:
      if (head_done(c)) return;
      break;
    case BT__HTTP_BODY:
      if (deliver(c, body, blen)) return;
      break;
    case BT__HTTP_DONE:
      conn_complete(c, n);
      return;
    default:
      req_fail(c->req, BT_EPROTO, "%s", c->ps.error);
      return;
    }
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  if (c->closing) return;
  if (nread > 0) {
    if (!c->req) {                           /* nothing may come unasked */
      conn_close(c);
      return;
    }
    c->got += (size_t) nread;
    c->req->last_rx = uv_now(c->host->cl->loop);
    conn_parse(c, buf->base, (size_t) nread);
  } else if (nread < 0) {
    conn_lost(c, (int) nread);
  }
}

static void on_write(uv_write_t *w, int status) {
  conn_t *c = w->data;
  c->writing = 0;
  if (status < 0 && !c->closing && c->req) conn_lost(c, status);
}

/* Writes c's request: what the kernel takes at once, the rest queued. */
static void conn_send(conn_t *c) {
  hreq_t *req = c->req;
  uv_buf_t b = uv_buf_init(req->out, (unsigned) req->outlen);
  int n;

  bt__http_parser_reset(&c->ps, &req->base.head, req->head_only);
  c->got = 0;
  req->status = 0;
  req->body.len = 0;
  req->last_rx = uv_now(c->host->cl->loop);
  req_arm(req);

  n = uv_try_write((uv_stream_t *) &c->tcp, &b, 1);
  if (n == UV_EAGAIN) n = 0;
  if (n < 0) {
    req->base.unsent = 1;          /* not one byte of it left us */
    conn_lost(c, n);
    return;
  }
  if (n > 0) req->sent = 1;
  if ((size_t) n < req->outlen) {
    int err;
    b = uv_buf_init(req->out + n, (unsigned) (req->outlen - (size_t) n));
    c->wreq.data = c;
    err = uv_write(&c->wreq, (uv_stream_t *) &c->tcp, &b, 1, on_write);
    if (err) {
      conn_lost(c, err);
      return;
    }
    c->writing = 1;
    req->sent = 1;          /* as far as we can know */
  }
}

/* A connect attempt failed with err: once the handle has closed,
 * on_tcp_closed tries the next address, and the request fails after the
 * last one. */
static void conn_connect_failed(conn_t *c, int err) {
  c->last_err = err;
  c->reconnect = 1;
  uv_close((uv_handle_t *) &c->tcp, on_tcp_closed);
}

static void on_connect(uv_connect_t *cr, int status) {
  conn_t *c = cr->data;
  hreq_t *req = c->req;

  if (c->closing || status == UV_ECANCELED) return;
  if (status < 0) {
    conn_connect_failed(c, status);
    return;
  }
  c->connected = 1;
  uv_tcp_keepalive(&c->tcp, 1, 10);
  if (uv_read_start((uv_stream_t *) &c->tcp, on_alloc, on_read)) {
    if (req) req_fail(req, BT_ECONNRESET, "cannot read from the connection");
    else conn_close(c);
    return;
  }
  if (req) conn_send(c);
  else conn_release(c);
}

/* Connects c to its next address, or fails its request when none is left. */
static void conn_connect_next(conn_t *c) {
  client_t *cl = c->host->cl;
  hreq_t *req = c->req;
  int err;

  if (c->next_addr >= c->naddr) {
    err = c->last_err ? c->last_err : UV_ECONNREFUSED;
    if (!req) {
      conn_close(c);
      return;
    }
    req->base.unsent = 1;
    req_fail(req, err, "Failed to connect to %s port %s: %s", c->host->name,
             c->host->port, uv_strerror(err));
    return;
  }
  err = uv_tcp_init(cl->loop, &c->tcp);
  if (err) {
    c->last_err = err;
    c->next_addr = c->naddr;
    conn_connect_next(c);
    return;
  }
  c->tcp.data = c;
  c->tcp_open = 1;
  c->refs++;
  cl->handles++;
  uv_tcp_nodelay(&c->tcp, 1);
  c->creq.data = c;
  err = uv_tcp_connect(&c->creq, &c->tcp,
                       (const struct sockaddr *) &c->addrs[c->next_addr++],
                       on_connect);
  if (err) conn_connect_failed(c, err);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *ai) {
  conn_t *c = g->data;
  client_t *cl = c->host->cl;
  struct addrinfo *a;

  c->resolving = 0;
  cl->handles--;
  if (!c->closing) {
    if (status < 0) {
      if (c->req) {
        c->req->base.unsent = 1;
        req_fail(c->req, BT_EAI_NONAME, "Could not resolve host: %s (%s)",
                 c->host->name, uv_strerror(status));
      } else {
        conn_close(c);
      }
    } else {
      for (a = ai; a && c->naddr < MAX_ADDRS; a = a->ai_next)
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof(c->addrs[0]))
          memcpy(&c->addrs[c->naddr++], a->ai_addr, a->ai_addrlen);
      c->last_err = UV_EAI_NONAME;
      conn_connect_next(c);
    }
  }
  uv_freeaddrinfo(ai);
  conn_unref(c);
  client_maybe_free(cl);
}

/* Opens a connection for req on its host. */
static void conn_open(hreq_t *req) {
  host_t *ho = req->host;
  client_t *cl = ho->cl;
  conn_t *c = calloc(1, sizeof(*c));
  if (!c) {
    req_fail(req, BT_ENOMEM, "out of memory");
    return;
  }
  c->host = ho;
  c->refs = 1;
  c->req = req;
  req->conn = c;
  ho->nconn++;
  c->t_connect = uv_now(cl->loop);
  req_arm(req);
  if (ho->literal) {
    c->addrs[0] = ho->addr;
    c->naddr = 1;
    conn_connect_next(c);
    return;
  }
  {
    struct addrinfo hints;
    int err;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    c->gai.data = c;
    err = uv_getaddrinfo(cl->loop, &c->gai, on_resolved, ho->name, ho->port,
                         &hints);
    if (err) {
      req->base.unsent = 1;
      req_fail(req, BT_EAI_NONAME, "Could not resolve host: %s (%s)",
               ho->name, uv_strerror(err));
      return;
    }
    c->resolving = 1;
    c->refs++;
    cl->handles++;
  }
}

/* Gives req a connection: an idle one, a new one, or a place in the queue. */
static void req_dispatch(hreq_t *req) {
  host_t *ho = req->host;
  if (ho->idle && !req->fresh) {
    conn_t *c = ho->idle;
    idle_remove(c);
    conn_give(c, req);
    return;
  }
  if (ho->nconn < MAX_CONNS) {
    conn_open(req);
    return;
  }
  req->waiting = 1;
  req->wnext = NULL;
  if (ho->wait_tail) ho->wait_tail->wnext = req;
  else ho->wait_head = req;
  ho->wait_tail = req;
  req_arm(req);
}

/* ---- the request's bytes ---- */

static size_t pct_decode(char *dst, const char *s, size_t n) {
  size_t i, o = 0;
  for (i = 0; i < n; i++) {
    if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char) s[i + 1]) && isxdigit((unsigned char) s[i + 2])) {
      char hex[3] = {s[i + 1], s[i + 2], 0};
      dst[o++] = (char) strtol(hex, NULL, 16);
      i += 2;
    } else {
      dst[o++] = s[i];
    }
  }
  return o;
}

/* True when headers has a line "name:..." or "name;" (set, suppressed or
 * sent empty by the caller). */
static int has_header(const char *const *headers, const char *name) {
  size_t n = strlen(name);
  int i;
  for (i = 0; headers && headers[i]; i++)
    if (strncasecmp(headers[i], name, n) == 0 &&
        (headers[i][n] == ':' || headers[i][n] == ';'))
      return 1;
  return 0;
}

/* How a caller's header line is sent, in curl's conventions: "Name: v" as
 * is; "Name:" with no value suppresses the header; "Name;" sends it empty.
 * Framing headers are ours to write. Returns the bytes it takes, 0 if none;
 * writes them to w unless w is NULL. */
static size_t header_line(const char *line, char *w) {
  size_t n = strlen(line), nl = strcspn(line, ":;");
  const char *v;
  if (nl == 0 || nl == n) return 0;
  if ((nl == 14 && strncasecmp(line, "Content-Length", 14) == 0) ||
      (nl == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0))
    return 0;
  if (line[nl] == ';') {
    if (nl + 1 != n) return 0;
    if (w) {
      memcpy(w, line, nl);
      memcpy(w + nl, ":\r\n", 3);
    }
    return nl + 3;
  }
  for (v = line + nl + 1; *v == ' ' || *v == '\t'; v++) {}
  if (!*v) return 0;
  if (w) {
    memcpy(w, line, n);
    memcpy(w + n, "\r\n", 2);
  }
  return n + 2;
}

/* The base64 of a URL's "user:password", decoded from %-escapes (malloc'd),
 * or NULL when out of memory. */
static char *basic_credentials(const bt__http_url_t *u) {
  char *cred = malloc(u->ulen + u->plen + 2), *b = NULL;
  size_t cl;
  if (!cred) return NULL;
  cl = pct_decode(cred, u->user, u->ulen);
  cred[cl++] = ':';
  if (u->pass) cl += pct_decode(cred + cl, u->pass, u->plen);
  b = malloc(bt_b64_enclen(cl));
  if (b) bt_b64_encode(b, cred, cl);
  free(cred);
  return b;
}

/* Writes req's bytes to req->out. Returns 0 or BT_ENOMEM. */
static int build_request(hreq_t *req, const bt_http_opts_t *o,
                         const bt__http_url_t *u, const char *method) {
  char *cred = NULL, *w;
  size_t n, i;
  int with_len = o->body || !strcmp(method, "POST") || !strcmp(method, "PUT") ||
                 !strcmp(method, "PATCH");
  int own_host = !has_header(o->headers, "Host");
  char lenline[48] = "";

  if (u->user && !has_header(o->headers, "Authorization") &&
      !(cred = basic_credentials(u)))
    return BT_ENOMEM;
  if (with_len)
    snprintf(lenline, sizeof(lenline), "Content-Length: %zu\r\n",
             o->body ? o->body_len : (size_t) 0);

  n = strlen(method) + 1 + (u->pathlen ? u->pathlen : 1) + 11;
  if (own_host) n += 6 + u->hplen + 2;
  if (cred) n += 21 + strlen(cred) + 2;
  n += strlen(lenline);
  for (i = 0; o->headers && o->headers[i]; i++)
    n += header_line(o->headers[i], NULL);
  n += 2 + (o->body ? o->body_len : 0);

  req->out = w = malloc(n + 1);
  if (!w) {
    free(cred);
    return BT_ENOMEM;
  }
  w += sprintf(w, "%s ", method);
  if (u->pathlen == 0 || u->path[0] == '?') *w++ = '/';
  memcpy(w, u->path, u->pathlen);
  w += u->pathlen;
  w += sprintf(w, " HTTP/1.1\r\n");
  if (own_host) {
    memcpy(w, "Host: ", 6);
    memcpy(w + 6, u->hostport, u->hplen);
    w += 6 + u->hplen;
    *w++ = '\r';
    *w++ = '\n';
  }
  if (cred) w += sprintf(w, "Authorization: Basic %s\r\n", cred);
  w += sprintf(w, "%s", lenline);
  for (i = 0; o->headers && o->headers[i]; i++)
    w += header_line(o->headers[i], w);
  *w++ = '\r';
  *w++ = '\n';
  if (o->body && o->body_len) {
    memcpy(w, o->body, o->body_len);
    w += o->body_len;
  }
  req->outlen = (size_t) (w - req->out);
  free(cred);
  return 0;
}

static host_t *host_get(client_t *cl, const bt__http_url_t *u) {
  host_t *ho;
  for (ho = cl->hosts; ho; ho = ho->next)
    if (strlen(ho->name) == u->hlen && !memcmp(ho->name, u->host, u->hlen) &&
        !strcmp(ho->port, u->port))
      return ho;
  ho = calloc(1, sizeof(*ho) + u->hlen + 1);
  if (!ho) return NULL;
  ho->cl = cl;
  memcpy(ho->name, u->host, u->hlen);
  snprintf(ho->port, sizeof(ho->port), "%s", u->port);
  if (uv_ip4_addr(ho->name, atoi(ho->port), (struct sockaddr_in *) &ho->addr) == 0 ||
      uv_ip6_addr(ho->name, atoi(ho->port), (struct sockaddr_in6 *) &ho->addr) == 0)
    ho->literal = 1;
  ho->next = cl->hosts;
  cl->hosts = ho;
  return ho;
}

/* ---- the backend ---- */

static void *native_open(uv_loop_t *loop) {
  client_t *cl = calloc(1, sizeof(*cl));
  if (cl) cl->loop = loop;
  return cl;
}

static void native_close(void *client) {
  client_t *cl = client;
  hreq_t *req, *next;
  host_t *ho;

  cl->closing = 1;
  for (req = cl->reqs; req; req = next) {
    next = req->next;
    if (req->in_cb) req->cancel = 1;   /* ends when its on_data returns */
    else req_finish(req, BT_ECANCELED);
  }
  for (ho = cl->hosts; ho; ho = ho->next)
    while (ho->idle) conn_close(ho->idle);
  client_maybe_free(cl);
}

/* Takes req on cl: writes its bytes, makes its timer, puts it on the
 * client's list (from here on it ends through req_finish) and gives it a
 * connection or a place in its host's queue. */
static int native_start(void *client, bt_http_req_t *base,
                        const bt_http_opts_t *o) {
  client_t *cl = client;
  hreq_t *req = (hreq_t *) base;
  bt__http_url_t u;
  const char *method = o->method ? o->method : (o->body ? "POST" : "GET");
  int err;

  if ((err = bt__http_url_parse(o->url, &u))) return err;
  req->cl = cl;
  if ((err = build_request(req, o, &u, method)) ||
      !(req->host = host_get(cl, &u))) {
    free(req->out);
    req->out = NULL;
    return err ? err : BT_ENOMEM;
  }
  req->head_only = strcmp(method, "HEAD") == 0;
  /* (the loop's cached time may be stale by what this loop iteration has
   * run so far: a timeout counts from now, not from then) */
  uv_update_time(cl->loop);
  req->t_start = uv_now(cl->loop);
  req->timeout_ms = o->timeout_ms > 0 ? (uint64_t) o->timeout_ms : 0;
  req->connect_ms = o->connect_timeout_ms > 0 ? (uint64_t) o->connect_timeout_ms
                                              : CONNECT_TIMEOUT_MS;
  req->low_ms = o->low_speed_secs > 0 ? (uint64_t) o->low_speed_secs * 1000 : 0;
  uv_timer_init(cl->loop, &req->timer);
  req->timer.data = req;
  cl->handles++;
  req->next = cl->reqs;
  if (cl->reqs) cl->reqs->prev = req;
  cl->reqs = req;
  cl->nreq++;
  cl->in_api++;
  req_dispatch(req);
  cl->in_api--;
  return 0;
}

static void native_cancel(bt_http_req_t *base) {
  hreq_t *req = (hreq_t *) base;
  if (req->cancel || req->finishing) return;
  req->cancel = 1;
  if (!req->in_cb) req_finish(req, BT_ECANCELED);
}

const bt__http_backend_t bt__http_native = {
  sizeof(hreq_t), native_open, native_close, native_start, native_cancel,
};
