/*
 * gRPC over HTTP/2 on libuv (grpc.h): an nghttp2 client session fed from a
 * uv_tcp_t, through OpenSSL memory BIOs for https.
 *
 * Flow. Bytes read from the socket go (through SSL_read for https) into
 * nghttp2_session_mem_recv, whose callbacks fill each stream's deframer and
 * report headers, trailers and stream ends. What nghttp2 wants to send is
 * drained with nghttp2_session_mem_send straight into one write request per
 * flush (for https: into one SSL_write, whose records are read from the
 * memory BIO into the request) and written with one uv_write.
 *
 * Re-entrancy. API calls (open, send, cancel, close) only queue work in
 * nghttp2 and start the zero-delay `later` timer; the flush that may run
 * nghttp2's callbacks, and with them the user's, happens there. Code that
 * runs from libuv's own callbacks (reads, writes, timers) calls the user
 * directly.
 *
 * Streams. A stream that has been given to nghttp2 (it has an id) stays
 * allocated, finished or not, until nghttp2 reports its close (or the
 * connection goes), so no pointer nghttp2 holds can dangle; a finished
 * stream ("zombie") calls nobody.
 *
 * Timers. One timer per connection serves the connect timeout, our PING, the
 * held ACK to the server's PING (ACK_DELAY_MS) and every stream's deadline:
 * it fires at the earliest of them and scans.
 */
#define _GNU_SOURCE
#include "grpc.h"
#include "err.h"
#include "dl.h"

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenSSL is not linked but loaded with dlopen by the first https
 * connection: linked, libssl and libcrypto cost every baton process
 * ~1.5 ms of CPU at start-up (relocations and constructors), and only
 * processes that speak to an https endpoint use them. The headers are
 * used for types and constants; every OpenSSL function is called through
 * the table ossl, filled by dlsym (OpenSSL's macros, such as
 * SSL_CTX_set_min_proto_version, are spelt out as the *_ctrl calls they
 * stand for). The libraries are never unloaded. */
#define OSSL_FUNCS(XX)                                                        \
  XX(BIO_ctrl_pending) XX(BIO_free) XX(BIO_new) XX(BIO_read) XX(BIO_s_mem)   \
  XX(BIO_write)                                                               \
  XX(ERR_clear_error) XX(ERR_get_error) XX(ERR_reason_error_string)           \
  XX(SSL_CTX_check_private_key) XX(SSL_CTX_ctrl) XX(SSL_CTX_free)             \
  XX(SSL_CTX_load_verify_locations) XX(SSL_CTX_new)                           \
  XX(SSL_CTX_set_default_verify_paths) XX(SSL_CTX_set_verify)                 \
  XX(SSL_CTX_use_PrivateKey_file) XX(SSL_CTX_use_certificate_chain_file)      \
  XX(SSL_ctrl) XX(SSL_do_handshake) XX(SSL_free) XX(SSL_get0_alpn_selected)   \
  XX(SSL_get0_param) XX(SSL_get_error) XX(SSL_get_verify_result) XX(SSL_new)  \
  XX(SSL_read) XX(SSL_set1_host) XX(SSL_set_alpn_protos) XX(SSL_set_bio)      \
  XX(SSL_set_connect_state) XX(SSL_write) XX(TLS_client_method)               \
  XX(X509_VERIFY_PARAM_set1_ip_asc) XX(X509_verify_cert_error_string)

#define XX(name) +1
enum { OSSL_NFUNCS = 0 OSSL_FUNCS(XX) };
#undef XX

static union {
  struct {
#define XX(name) __typeof__(name) *name;
    OSSL_FUNCS(XX)
#undef XX
  };
  void *v[OSSL_NFUNCS];
} ossl;

static bt_dl_t ossl_dl;

/* Loads libssl and fills ossl, once per process. Returns 0, or -1 with the
 * reason in ossl_dl.error (the same for every later call). dlsym on
 * libssl's handle finds libcrypto's functions too: libssl depends on it,
 * so it is mapped with it and searched. */
static int load_ossl(void) {
  static const char *const sonames[] = { "libssl.so.3", NULL };
  static const char *const names[] = {
#define XX(name) #name,
    OSSL_FUNCS(XX)
#undef XX
  };
  return bt_dl_load(&ossl_dl, sonames, "libssl.so.3", names, ossl.v,
                    OSSL_NFUNCS);
}

#define DEFAULT_CONNECT_TIMEOUT_MS 1000
#define DEFAULT_MAX_MESSAGE ((size_t) 64 << 20)
/* Windows for what the server sends: messages are consumed as they come,
 * so large windows only keep watch streams from ever waiting for credit. */
#define STREAM_WINDOW ((int32_t) 16 << 20)
#define CONN_WINDOW ((int32_t) 256 << 20)
#define READ_BUF 65536
/* How long the ACK to a server's PING is held. grpc-go servers (etcd) send
 * a PING, for their flow-control (BDP) estimate, on data they read while
 * none of theirs is unanswered: answered at once, a client making calls one
 * at a time gets a PING with nearly every call, and etcd pays a write for
 * it and a wakeup and read for the lone ACK (paced at 1000 puts/s, 40% of
 * the segments etcd read from baton were lone ACKs, and etcd spent ~1.2x
 * the CPU per request that it spends for the npm etcd3 client). Held this
 * long, there is one such PING per ACK_DELAY_MS at most. Keepalive PINGs
 * wait seconds for their ACK; a held ACK goes at once when a newer PING
 * comes. */
#define ACK_DELAY_MS 50

struct bt_grpc_stream_s {
  bt_grpc_conn_t *c;
  bt_grpc_stream_t *next, *prev;     /* c->streams */
  int32_t id;                        /* nghttp2's stream id */
  bt_grpc_stream_cbs_t cbs;
  void *arg;
  long timeout_ms;
  uint64_t deadline;                 /* uv_now ms; 0 = none */
  uint8_t *out;                      /* framed messages not yet sent */
  size_t out_len, out_off, out_cap;
  unsigned end_queued : 1;           /* half-close after out */
  unsigned deferred : 1;             /* read callback said DEFERRED */
  unsigned headers_sent : 1;
  unsigned refused : 1;              /* REFUSED_STREAM */
  unsigned finished : 1;             /* on_close delivered (zombie) */
  unsigned in_nghttp2 : 1;           /* nghttp2 knows it */
  unsigned cancel_pending : 1;       /* cancelled from its own callback */
  int in_cb;                         /* depth of its callbacks running */
  int http_status;                   /* :status, 0 until seen */
  int grpc_status;                   /* -1 until seen */
  char *grpc_message;
  bt__grpc_deframer_t df;
};

struct bt_grpc_conn_s {
  uv_loop_t *loop;
  char *url, *host, *authority;
  int port, tls;
  long connect_timeout_ms, ping_interval_ms, ping_timeout_ms;
  size_t max_message;
  bt_grpc_event_cb cb;
  void *arg;

  uv_getaddrinfo_t gai;
  struct addrinfo *ai, *ai_next;     /* the host's addresses, the next to try */
  uv_connect_t connect_req;
  uv_tcp_t tcp;
  uv_timer_t timer, later;
  int handles_open;                  /* closes still to come */
  unsigned gai_pending : 1, tcp_init : 1, transport_up : 1, ready : 1,
           goaway : 1, closing : 1, torn_down : 1, later_armed : 1;
  int32_t goaway_last_id;
  int err;                           /* why the connection ends; 0 = closed */
  char msg[512];

  nghttp2_session *h2;
  SSL_CTX *ssl_ctx;
  SSL *ssl;
  BIO *rbio, *wbio;                  /* network -> SSL, SSL -> network */

  bt_grpc_stream_t *streams;         /* live and zombie */
  int live;                          /* streams not finished */
  uint64_t connect_deadline, last_read, ping_sent, timer_due;
  uint64_t ack_due;                  /* the held PING ACK's time; 0 = none */
  uint8_t ack_data[8];               /* its payload */
  int in_recv;                       /* inside nghttp2_session_mem_recv */
  char rbuf[READ_BUF];
  uint8_t *wbuf;                     /* https: one flush's plaintext */
  size_t wlen, wcap;
  bt_grpc_stats_t st;
};

static void conn_fail(bt_grpc_conn_t *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_flush(bt_grpc_conn_t *c);
static void conn_arm(bt_grpc_conn_t *c, uint64_t due);
static void conn_schedule(bt_grpc_conn_t *c);
static uint64_t conn_next_due(bt_grpc_conn_t *c);

/* ---- streams ----------------------------------------------------------- */

static void stream_free(bt_grpc_stream_t *s) {
  bt_grpc_conn_t *c = s->c;
  if (s->prev) s->prev->next = s->next;
  else c->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  bt__grpc_deframer_free(&s->df);
  free(s->out);
  free(s->grpc_message);
  free(s);
}

/* Ends s once: on_close(err, status, message), then s is freed, or kept
 * as a zombie while nghttp2 still knows it. With rst, a stream nghttp2
 * knows is reset (CANCEL). */
static void stream_finish(bt_grpc_stream_t *s, int rst, int err, int status,
                          const char *message) {
  bt_grpc_conn_t *c = s->c;
  if (s->finished) return;
  s->finished = 1;
  c->live--;
  if (rst && s->in_nghttp2 && c->h2 && !c->closing) {
    nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    conn_schedule(c);
  }
  s->in_cb++;
  if (s->cbs.on_close) s->cbs.on_close(s, err, status, message ? message : "", s->arg);
  s->in_cb--;
  if (!s->in_nghttp2) stream_free(s);
}

/* A failure's message (grpc.h): "url: strerror" and " (detail)" when fmt
 * gives one. */
static void fail_msg(char *msg, size_t len, const char *url, int err, const char *fmt,
                     va_list ap) {
  char detail[400];
  detail[0] = '\0';
  if (fmt) vsnprintf(detail, sizeof(detail), fmt, ap);
  if (detail[0])
    snprintf(msg, len, "%s: %s (%s)", url, bt_strerror(err), detail);
  else
    snprintf(msg, len, "%s: %s", url, bt_strerror(err));
}

/* Ends s with a transport error; fmt (or NULL) gives the message's detail. */
static void stream_fail(bt_grpc_stream_t *s, int rst, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void stream_fail(bt_grpc_stream_t *s, int rst, int err, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  fail_msg(msg, sizeof(msg), s->c->url, err, fmt, ap);
  va_end(ap);
  stream_finish(s, rst, err, -1, msg);
}

/* After one of s's callbacks returned: a cancel asked for inside it. */
static void stream_after_cb(bt_grpc_stream_t *s) {
  if (s->in_cb == 0 && s->cancel_pending && !s->finished) {
    s->cancel_pending = 0;
    stream_fail(s, 1, BT_ECANCELED, NULL);
  }
}

/* ---- connection teardown ---------------------------------------------- */

/* Frees c and what it holds (no handle of it may be open). */
static void conn_free(bt_grpc_conn_t *c) {
  if (c->h2) nghttp2_session_del(c->h2);
  c->h2 = NULL;
  while (c->streams) stream_free(c->streams);
  if (c->ai) uv_freeaddrinfo(c->ai);
  if (c->ssl) ossl.SSL_free(c->ssl);      /* frees the BIOs too */
  if (c->ssl_ctx) ossl.SSL_CTX_free(c->ssl_ctx);
  free(c->wbuf);
  free(c->url);
  free(c->host);
  free(c->authority);
  free(c);
}

/* Once torn down and every handle closed: CLOSED, then c is freed. */
static void conn_maybe_free(bt_grpc_conn_t *c) {
  char msg[sizeof(c->msg)];
  /* (closing without torn_down: bt_grpc_close's teardown is still to run) */
  if (!c->torn_down || c->handles_open > 0 || c->gai_pending) return;
  memcpy(msg, c->msg, sizeof(msg));
  if (c->cb) c->cb(c, BT_GRPC_CLOSED, c->err, msg, c->arg);
  conn_free(c);
}

static void on_handle_closed(uv_handle_t *h) {
  bt_grpc_conn_t *c = h->data;
  c->handles_open--;
  conn_maybe_free(c);
}

/* Ends every live stream with c->err (BT_ECANCELED after bt_grpc_close),
 * then closes the handles; CLOSED comes from the last close callback. */
static void conn_teardown(bt_grpc_conn_t *c) {
  bt_grpc_stream_t *s;
  if (c->torn_down) return;
  c->torn_down = 1;
  c->closing = 1;
again:
  for (s = c->streams; s; s = s->next) {
    if (s->finished) continue;
    if (c->err) stream_finish(s, 0, c->err, -1, c->msg);
    else stream_fail(s, 0, BT_ECANCELED, "connection closed");
    goto again;                     /* the callback may have changed the list */
  }
  if (c->gai_pending) uv_cancel((uv_req_t *) &c->gai);
  if (c->tcp_init) {
    c->handles_open++;
    uv_close((uv_handle_t *) &c->tcp, on_handle_closed);
  }
  c->handles_open += 2;
  uv_close((uv_handle_t *) &c->timer, on_handle_closed);
  uv_close((uv_handle_t *) &c->later, on_handle_closed);
}

static void conn_fail(bt_grpc_conn_t *c, int err, const char *fmt, ...) {
  va_list ap;
  if (c->closing) return;
  c->closing = 1;
  c->err = err;
  va_start(ap, fmt);
  fail_msg(c->msg, sizeof(c->msg), c->url, err, fmt, ap);
  va_end(ap);
  conn_teardown(c);
}

/* ---- output ------------------------------------------------------------ */

/* One socket write: the request and its bytes in one allocation, the
 * bytes copied into it once (from nghttp2, or from the TLS BIO). */
typedef struct {
  uv_write_t req;
  bt_grpc_conn_t *c;
  char data[];
} wreq_t;

/* A write being built: len of w's cap bytes filled. */
typedef struct {
  wreq_t *w;
  size_t len, cap;
} wbuild_t;

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *) req;
  bt_grpc_conn_t *c = w->c;
  free(w);
  if (status < 0 && status != UV_ECANCELED)
    conn_fail(c, status == UV_EPIPE ? BT_ECONNRESET : status, "write: %s",
              uv_strerror(status));
}

/* Makes room in b for n more bytes (4 KiB at least, doubling). */
static int wbuild_room(wbuild_t *b, size_t n) {
  size_t cap;
  wreq_t *nw;
  if (b->len + n <= b->cap) return 0;
  cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n) cap *= 2;
  if (!(nw = realloc(b->w, sizeof(*nw) + cap))) return BT_ENOMEM;
  b->w = nw;
  b->cap = cap;
  return 0;
}

static int wbuild_add(wbuild_t *b, const void *p, size_t n) {
  int rc = wbuild_room(b, n);
  if (rc < 0) return rc;
  memcpy(b->w->data + b->len, p, n);
  b->len += n;
  return 0;
}

/* Writes what b holds with one uv_write (none when empty). b's request
 * goes to libuv (on_write frees it) or is freed here; b is left empty. */
static int wbuild_write(bt_grpc_conn_t *c, wbuild_t *b) {
  wreq_t *w = b->w;
  size_t n = b->len;
  uv_buf_t buf;
  int rc;
  b->w = NULL;
  b->len = b->cap = 0;
  if (n == 0) {
    free(w);
    return 0;
  }
  w->c = c;
  buf = uv_buf_init(w->data, (unsigned) n);
  if ((rc = uv_write(&w->req, (uv_stream_t *) &c->tcp, &buf, 1, on_write)) < 0) {
    free(w);
    return rc;
  }
  c->st.writes++;
  return 0;
}

/* https: one flush's plaintext, for one SSL_write (few TLS records). */
static int wbuf_add(bt_grpc_conn_t *c, const void *p, size_t n) {
  if (c->wlen + n > c->wcap) {
    size_t cap = c->wcap ? c->wcap : 16384;
    uint8_t *nb;
    while (cap < c->wlen + n) cap *= 2;
    if (!(nb = realloc(c->wbuf, cap))) return BT_ENOMEM;
    c->wbuf = nb;
    c->wcap = cap;
  }
  memcpy(c->wbuf + c->wlen, p, n);
  c->wlen += n;
  return 0;
}

/* OpenSSL's reason for the last failure, for messages. */
static void tls_reason(bt_grpc_conn_t *c, char *buf, size_t len) {
  unsigned long e = ossl.ERR_get_error();
  long vr = c->ssl ? ossl.SSL_get_verify_result(c->ssl) : X509_V_OK;
  if (vr != X509_V_OK)
    snprintf(buf, len, "SSL certificate problem: %s", ossl.X509_verify_cert_error_string(vr));
  else if (e) {
    const char *r = ossl.ERR_reason_error_string(e);
    snprintf(buf, len, "%s", r ? r : "unknown TLS error");
  } else
    snprintf(buf, len, "TLS failure");
  ossl.ERR_clear_error();
}

/* Sends what the TLS engine wrote into its memory BIO with one write,
 * read into the write request (hint: the bytes expected). */
static int tls_drain(bt_grpc_conn_t *c, size_t hint) {
  wbuild_t b = { 0 };
  size_t pending = ossl.BIO_ctrl_pending(c->wbio);
  if (pending == 0) return 0; /* (after most reads: nothing to send) */
  if (pending > hint) hint = pending;
  for (;;) {
    size_t room;
    int n, rc;
    if (b.len == b.cap && (rc = wbuild_room(&b, b.cap ? 1 : hint)) < 0) {
      free(b.w);
      return rc;
    }
    room = b.cap - b.len;
    n = ossl.BIO_read(c->wbio, b.w->data + b.len, (int) (room < 1u << 30 ? room : 1u << 30));
    if (n <= 0) break;
    b.len += (size_t) n;
  }
  return wbuild_write(c, &b);
}

/* Drains nghttp2's output into the socket. Runs nghttp2's (and so the
 * user's) callbacks: only from libuv callbacks. */
static void conn_flush(bt_grpc_conn_t *c) {
  wbuild_t b = { 0 };                /* http: the bytes go here at once */
  int rc = 0;
  if (c->closing || !c->transport_up || c->in_recv) return;
  c->wlen = 0;
  for (;;) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(c->h2, &p);
    if (n < 0) {
      free(b.w);
      conn_fail(c, BT_EPROTO, "http2: %s", nghttp2_strerror((int) n));
      return;
    }
    if (n == 0) break;
    rc = c->tls ? wbuf_add(c, p, (size_t) n) : wbuild_add(&b, p, (size_t) n);
    if (rc < 0 || c->closing) break;
  }
  if (c->closing) {
    free(b.w);
    return;
  }
  if (rc == 0 && c->tls && c->wlen) {
    int w = ossl.SSL_write(c->ssl, c->wbuf, (int) c->wlen);
    if (w <= 0) {
      char why[256];
      tls_reason(c, why, sizeof(why));
      conn_fail(c, BT_ETLS, "%s", why);
      return;
    }
    /* the records: the plaintext and 5 + 8 + 16 bytes per 16 KiB */
    rc = tls_drain(c, c->wlen + (c->wlen / 16384 + 1) * 32);
  } else if (rc == 0) {
    rc = wbuild_write(c, &b);
  }
  free(b.w);                         /* (after a failure; else NULL) */
  c->wlen = 0;
  if (c->wcap > (1 << 20)) {         /* don't keep a big burst's buffer */
    free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = 0;
  }
  if (rc < 0) {
    conn_fail(c, rc, "write: %s", bt_strerror(rc));
    return;
  }
  /* nghttp2 is done with the session: after a GOAWAY once no stream is
   * left, or after a connection error it answered with its own GOAWAY. */
  if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) {
    if (c->goaway) conn_fail(c, BT_EUNAVAIL, "the server sent GOAWAY");
    else conn_fail(c, BT_EPROTO, "HTTP/2 session ended by a protocol error");
  }
}

static void on_later(uv_timer_t *t) {
  bt_grpc_conn_t *c = t->data;
  c->later_armed = 0;
  if (c->closing) conn_teardown(c);
  else conn_flush(c);
}

/* Runs conn_flush (or the teardown) on a later loop turn. */
static void conn_schedule(bt_grpc_conn_t *c) {
  if (c->later_armed || c->torn_down) return;
  c->later_armed = 1;
  uv_timer_start(&c->later, on_later, 0, 0);
}

/* ---- nghttp2 callbacks ------------------------------------------------- */

/* Queues the held PING ACK (nghttp2's automatic ACK is off). */
static void ack_send(bt_grpc_conn_t *c) {
  c->ack_due = 0;
  nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_ACK, c->ack_data);
}

static void stream_end_by_server(bt_grpc_stream_t *s, uint32_t error_code, int rst);

static bt_grpc_stream_t *stream_of(nghttp2_session *h2, int32_t id) {
  return nghttp2_session_get_stream_user_data(h2, id);
}

static ssize_t on_read_body(nghttp2_session *h2, int32_t id, uint8_t *buf,
                            size_t length, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
  bt_grpc_stream_t *s = src->ptr;
  size_t n;
  if (s->finished) {                 /* cancelled: its RST follows */
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  n = s->out_len - s->out_off;
  if (n == 0) {
    if (s->end_queued) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n > length) n = length;
  memcpy(buf, s->out + s->out_off, n);
  s->out_off += n;
  if (s->out_off == s->out_len) {
    s->out_off = s->out_len = 0;
    if (s->end_queued) *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return (ssize_t) n;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud) {
  bt_grpc_stream_t *s;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  s = stream_of(h2, f->hd.stream_id);
  if (!s || s->finished) return 0;
  if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
    int v = 0;
    size_t i;
    for (i = 0; i < valuelen && i < 3; i++) v = v * 10 + (value[i] - '0');
    s->http_status = v;
  } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
    int v = 0;
    size_t i;
    for (i = 0; i < valuelen && i < 9; i++) {
      if (value[i] < '0' || value[i] > '9') { v = 2; break; }   /* UNKNOWN */
      v = v * 10 + (value[i] - '0');
    }
    s->grpc_status = valuelen ? v : 2;
  } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
    char *m = malloc(valuelen + 1);
    if (m) {
      bt__grpc_percent_decode((const char *) value, valuelen, m, valuelen + 1);
      free(s->grpc_message);
      s->grpc_message = m;
    }
  }
  return 0;
}

static int deliver_message(const uint8_t *msg, size_t len, void *arg) {
  bt_grpc_stream_t *s = arg;
  if (s->cbs.on_message) {
    s->in_cb++;
    s->cbs.on_message(s, msg, len, s->arg);
    s->in_cb--;
  }
  /* Stop at a cancel or a close made inside the callback. */
  return (s->cancel_pending || s->finished || s->c->closing) ? 1 : 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *ud) {
  bt_grpc_stream_t *s = stream_of(h2, id);
  bt_grpc_conn_t *c = ud;
  int rc;
  if (!s || s->finished || c->closing) return 0;
  rc = bt__grpc_deframe(&s->df, data, len, deliver_message, s);
  if (rc == 1) {
    stream_after_cb(s);
  } else if (rc == BT_EPROTO) {
    stream_fail(s, 1, BT_EPROTO, "compressed message (none was asked for)");
  } else if (rc == BT_ETOOLARGE) {
    stream_fail(s, 1, BT_ETOOLARGE, "message of %zu bytes, over the limit of %zu",
                s->df.len, s->df.max);
  } else if (rc < 0) {
    stream_fail(s, 1, rc, "receiving a message");
  }
  return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f,
                         void *ud) {
  bt_grpc_conn_t *c = ud;
  if (c->closing) return 0;
  switch (f->hd.type) {
  case NGHTTP2_HEADERS:
  case NGHTTP2_DATA:
    /* The server is done while we are not: the call is over (gRPC ends
     * at the trailers); the rest of our side is reset, not sent. */
    if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
      bt_grpc_stream_t *s = stream_of(h2, f->hd.stream_id);
      if (s && !s->finished && !nghttp2_session_get_stream_local_close(h2, f->hd.stream_id))
        stream_end_by_server(s, NGHTTP2_NO_ERROR, 1);
    }
    break;
  case NGHTTP2_SETTINGS:
    if (!(f->hd.flags & NGHTTP2_FLAG_ACK) && !c->ready) {
      c->ready = 1;
      c->connect_deadline = 0;
      if (c->cb && !c->goaway) c->cb(c, BT_GRPC_READY, 0, NULL, c->arg);
    }
    break;
  case NGHTTP2_PING:
    if (f->hd.flags & NGHTTP2_FLAG_ACK) {
      /* The timer waits for ping_sent + ping_timeout_ms: bring it back to
       * the next PING's time (last_read + ping_interval_ms). */
      c->ping_sent = 0;
      conn_arm(c, conn_next_due(c));
      break;
    }
    c->st.pings_in++;
    if (c->ack_due) ack_send(c);     /* one held at a time: the older goes */
    memcpy(c->ack_data, f->ping.opaque_data, sizeof(c->ack_data));
    c->ack_due = uv_now(c->loop) + ACK_DELAY_MS;
    conn_arm(c, c->ack_due);
    break;
  case NGHTTP2_GOAWAY:
    if (!c->goaway) {
      char msg[600];
      const uint8_t *d = f->goaway.opaque_data;
      size_t dl = f->goaway.opaque_data_len;
      c->goaway = 1;
      c->goaway_last_id = f->goaway.last_stream_id;
      snprintf(msg, sizeof(msg), "%s: GOAWAY %s%s%.*s", c->url,
               nghttp2_http2_strerror(f->goaway.error_code), dl ? ": " : "",
               (int) (dl > 200 ? 200 : dl), d ? (const char *) d : "");
      if (c->cb) c->cb(c, BT_GRPC_GOAWAY, 0, msg, c->arg);
    }
    break;
  default:
    break;
  }
  return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *f,
                         void *ud) {
  bt_grpc_conn_t *c = ud;
  if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) c->st.ping_acks_out++;
  if (f->hd.type == NGHTTP2_HEADERS) {
    bt_grpc_stream_t *s = stream_of(h2, f->hd.stream_id);
    c->st.headers_out++;
    if (s) s->headers_sent = 1;
  }
  return 0;
}

static int on_frame_not_send(nghttp2_session *h2, const nghttp2_frame *f,
                             int lib_error_code, void *ud) {
  bt_grpc_stream_t *s;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  s = stream_of(h2, f->hd.stream_id);
  if (!s || s->finished) return 0;
  s->refused = 1;
  stream_fail(s, 0, BT_EUNAVAIL, "stream not started: %s",
              nghttp2_strerror(lib_error_code));
  return 0;
}

/* The server ended s (its END_STREAM, or the stream closed with
 * error_code): the outcome from its status, grpc-status, or the reset. */
static void stream_end_by_server(bt_grpc_stream_t *s, uint32_t error_code, int rst) {
  if (s->http_status != 0 && s->http_status != 200) {
    if (s->http_status == 503)
      stream_fail(s, rst, BT_EUNAVAIL, "HTTP status 503");
    else
      stream_fail(s, rst, BT_EPROTO, "HTTP status %d", s->http_status);
  } else if (s->grpc_status >= 0) {
    stream_finish(s, rst, 0, s->grpc_status, s->grpc_message ? s->grpc_message : "");
  } else if (error_code == NGHTTP2_REFUSED_STREAM) {
    s->refused = 1;
    stream_fail(s, rst, BT_EUNAVAIL, "stream refused");
  } else if (error_code != NGHTTP2_NO_ERROR) {
    stream_fail(s, rst, BT_EPROTO, "stream reset: %s",
                nghttp2_http2_strerror(error_code));
  } else {
    stream_fail(s, rst, BT_EPROTO, "stream ended without grpc-status");
  }
}

static int on_stream_close(nghttp2_session *h2, int32_t id,
                           uint32_t error_code, void *ud) {
  bt_grpc_stream_t *s = stream_of(h2, id);
  if (!s) return 0;
  s->in_nghttp2 = 0;
  nghttp2_session_set_stream_user_data(h2, id, NULL);
  if (s->finished) stream_free(s);
  else stream_end_by_server(s, error_code, 0);
  return 0;
}

/* ---- input ------------------------------------------------------------- */

/* Feeds decrypted bytes to nghttp2, then sends what it answers. */
static void conn_recv(bt_grpc_conn_t *c, const uint8_t *p, size_t n) {
  ssize_t rv;
  c->last_read = uv_now(c->loop);
  c->in_recv++;
  rv = nghttp2_session_mem_recv(c->h2, p, n);
  c->in_recv--;
  if (c->closing) return;
  if (rv < 0) {
    conn_fail(c, BT_EPROTO, "http2: %s", nghttp2_strerror((int) rv));
    return;
  }
  conn_flush(c);
}

static void tls_handshake(bt_grpc_conn_t *c);

static void tls_recv(bt_grpc_conn_t *c) {
  for (;;) {
    int n = ossl.SSL_read(c->ssl, c->rbuf, sizeof(c->rbuf));
    if (n > 0) {
      conn_recv(c, (const uint8_t *) c->rbuf, (size_t) n);
      if (c->closing) return;
      continue;
    }
    switch (ossl.SSL_get_error(c->ssl, n)) {
    case SSL_ERROR_WANT_READ:
      if (tls_drain(c, 4096) < 0) conn_fail(c, BT_ECONNRESET, "write failed");
      return;
    case SSL_ERROR_ZERO_RETURN:
      conn_fail(c, BT_ECONNRESET, "connection closed by the server");
      return;
    default: {
      char why[256];
      tls_reason(c, why, sizeof(why));
      conn_fail(c, BT_ETLS, "%s", why);
      return;
    }
    }
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  bt_grpc_conn_t *c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  bt_grpc_conn_t *c = st->data;
  if (c->closing) return;
  if (n < 0) {
    if (n == UV_EOF)
      conn_fail(c, BT_ECONNRESET, "connection closed by the server");
    else
      conn_fail(c, (int) n, "read: %s", uv_strerror((int) n));
    return;
  }
  if (n == 0) return;
  if (!c->tls) {
    conn_recv(c, (const uint8_t *) buf->base, (size_t) n);
    return;
  }
  if (ossl.BIO_write(c->rbio, buf->base, (int) n) != (int) n) {
    conn_fail(c, BT_ENOMEM, "TLS buffer");
    return;
  }
  if (!c->transport_up) tls_handshake(c);
  else tls_recv(c);
}

/* ---- connecting -------------------------------------------------------- */

static void transport_up(bt_grpc_conn_t *c) {
  c->transport_up = 1;
  c->last_read = uv_now(c->loop);
  conn_flush(c);
  if (!c->closing) conn_arm(c, conn_next_due(c));
}

static void tls_handshake(bt_grpc_conn_t *c) {
  int rc = ossl.SSL_do_handshake(c->ssl);
  if (tls_drain(c, 4096) < 0) {
    conn_fail(c, BT_ECONNRESET, "write failed");
    return;
  }
  if (rc == 1) {
    const unsigned char *alpn = NULL;
    unsigned alpnlen = 0;
    ossl.SSL_get0_alpn_selected(c->ssl, &alpn, &alpnlen);
    if (alpnlen != 2 || memcmp(alpn, "h2", 2) != 0) {
      conn_fail(c, BT_ETLS, "the server did not agree to HTTP/2 (ALPN h2)");
      return;
    }
    transport_up(c);
    if (!c->closing) tls_recv(c);      /* bytes that came with the handshake */
    return;
  }
  if (ossl.SSL_get_error(c->ssl, rc) == SSL_ERROR_WANT_READ) return;
  {
    char why[256];
    tls_reason(c, why, sizeof(why));
    conn_fail(c, BT_ETLS, "%s", why);
  }
}

static void start_connect(bt_grpc_conn_t *c, const struct sockaddr *sa);

/* The socket of a failed attempt is closed: the next address. */
static void on_retry_closed(uv_handle_t *h) {
  bt_grpc_conn_t *c = h->data;
  const struct addrinfo *ai = c->ai_next;
  c->handles_open--;
  if (c->closing) {
    conn_maybe_free(c);
    return;
  }
  c->ai_next = ai->ai_next;
  start_connect(c, ai->ai_addr);
}

static void on_connect(uv_connect_t *req, int status) {
  bt_grpc_conn_t *c = req->data;
  int rc;
  if (status == UV_ECANCELED || c->closing) return;
  if (status < 0 && c->ai_next) {    /* e.g. ::1 refused, 127.0.0.1 next */
    c->tcp_init = 0;
    c->handles_open++;
    uv_close((uv_handle_t *) &c->tcp, on_retry_closed);
    return;
  }
  if (status < 0) {
    conn_fail(c, status, NULL);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if ((rc = uv_read_start((uv_stream_t *) &c->tcp, on_alloc, on_read)) < 0) {
    conn_fail(c, rc, "read: %s", uv_strerror(rc));
    return;
  }
  if (c->tls) tls_handshake(c);
  else transport_up(c);
}

static void start_connect(bt_grpc_conn_t *c, const struct sockaddr *sa) {
  int rc;
  if ((rc = uv_tcp_init(c->loop, &c->tcp)) < 0) {
    conn_fail(c, rc, NULL);
    return;
  }
  c->tcp_init = 1;
  c->tcp.data = c;
  c->connect_req.data = c;
  if ((rc = uv_tcp_connect(&c->connect_req, &c->tcp, sa, on_connect)) < 0)
    conn_fail(c, rc, NULL);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai) {
  bt_grpc_conn_t *c = req->data;
  c->gai_pending = 0;
  if (c->closing) {
    if (ai) uv_freeaddrinfo(ai);
    conn_maybe_free(c);
    return;
  }
  if (status < 0 || !ai) {
    conn_fail(c, status < 0 ? status : BT_EAI_NONAME, "resolving %s: %s", c->host,
              uv_strerror(status < 0 ? status : UV_EAI_NONAME));
    if (ai) uv_freeaddrinfo(ai);
    return;
  }
  c->ai = ai;
  c->ai_next = ai->ai_next;
  start_connect(c, ai->ai_addr);
}

/* ---- timers ------------------------------------------------------------ */

static uint64_t conn_next_due(bt_grpc_conn_t *c) {
  uint64_t due = 0;
  bt_grpc_stream_t *s;
#define MIN_DUE(t) do { uint64_t t_ = (t); if (t_ && (!due || t_ < due)) due = t_; } while (0)
  if (!c->ready) MIN_DUE(c->connect_deadline);
  MIN_DUE(c->ack_due);
  if (c->ping_interval_ms > 0 && c->transport_up && c->live > 0) {
    if (c->ping_sent) MIN_DUE(c->ping_sent + (uint64_t) c->ping_timeout_ms);
    else MIN_DUE(c->last_read + (uint64_t) c->ping_interval_ms);
  }
  for (s = c->streams; s; s = s->next)
    if (!s->finished) MIN_DUE(s->deadline);
#undef MIN_DUE
  return due;
}

static void on_timer(uv_timer_t *t);

/* Makes the timer fire by due (absolute uv_now ms) at the latest. */
static void conn_arm(bt_grpc_conn_t *c, uint64_t due) {
  uint64_t now = uv_now(c->loop);
  if (!due || c->torn_down) return;
  if (c->timer_due && c->timer_due <= due) return;
  c->timer_due = due;
  uv_timer_start(&c->timer, on_timer, due > now ? due - now : 0, 0);
}

static void on_timer(uv_timer_t *t) {
  bt_grpc_conn_t *c = t->data;
  uint64_t now = uv_now(c->loop);
  bt_grpc_stream_t *s;
  c->timer_due = 0;
  if (c->closing) return;
  if (!c->ready && c->connect_deadline && now >= c->connect_deadline) {
    conn_fail(c, BT_ETIMEDOUT, "connecting took over %ld ms", c->connect_timeout_ms);
    return;
  }
again:
  for (s = c->streams; s; s = s->next) {
    if (!s->finished && s->deadline && now >= s->deadline) {
      stream_fail(s, 1, BT_ETIMEDOUT, "deadline of %ld ms exceeded", s->timeout_ms);
      if (c->closing) return;
      goto again;
    }
  }
  if (c->ping_interval_ms > 0 && c->transport_up && c->live > 0) {
    if (c->ping_sent) {
      if (now >= c->ping_sent + (uint64_t) c->ping_timeout_ms) {
        conn_fail(c, BT_ETIMEDOUT, "no answer to a PING in %ld ms", c->ping_timeout_ms);
        return;
      }
    } else if (now >= c->last_read + (uint64_t) c->ping_interval_ms) {
      /* (Failing, it would leave the PING due and the timer firing at
       * once, again and again; nghttp2 fails it for memory only.) */
      int rv = nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL);
      if (rv != 0) {
        conn_fail(c, rv == NGHTTP2_ERR_NOMEM ? BT_ENOMEM : BT_EPROTO, "PING: %s",
                  nghttp2_strerror(rv));
        return;
      }
      c->ping_sent = now ? now : 1;
    }
  }
  if (c->ack_due && now >= c->ack_due) ack_send(c);
  conn_flush(c);
  if (!c->closing) conn_arm(c, conn_next_due(c));
}

/* ---- API --------------------------------------------------------------- */

static int set_err(int *err, char *msg, size_t msglen, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int set_err(int *err, char *msg, size_t msglen, int code, const char *fmt, ...) {
  va_list ap;
  if (err) *err = code;
  if (msg && msglen) {
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Splits "http[s]://host:port[/]" into c's fields. */
static int parse_url(bt_grpc_conn_t *c, const char *url) {
  const char *p, *h, *he, *port;
  char *end;
  long v;
  if (strncmp(url, "http://", 7) == 0) { c->tls = 0; p = url + 7; }
  else if (strncmp(url, "https://", 8) == 0) { c->tls = 1; p = url + 8; }
  else return BT_EINVAL;
  if (*p == '[') {
    h = p + 1;
    if (!(he = strchr(h, ']'))) return BT_EINVAL;
    port = he + 1;
  } else {
    h = p;
    he = p + strcspn(p, ":/");
    port = he;
  }
  if (he == h) return BT_EINVAL;
  if (*port == ':') {
    v = strtol(port + 1, &end, 10);
    if (end == port + 1 || v <= 0 || v > 65535) return BT_EINVAL;
  } else {
    v = c->tls ? 443 : 80;
    end = (char *) port;
  }
  if (!(*end == '\0' || (end[0] == '/' && end[1] == '\0'))) return BT_EINVAL;
  c->port = (int) v;
  if (!(c->host = strndup(h, (size_t) (he - h)))) return BT_ENOMEM;
  if (!(c->authority = malloc(strlen(c->host) + 10))) return BT_ENOMEM;
  sprintf(c->authority, strchr(c->host, ':') ? "[%s]:%d" : "%s:%d", c->host, c->port);
  return 0;
}

static int tls_setup(bt_grpc_conn_t *c, const bt_grpc_conn_opts_t *o, char *why,
                     size_t whylen) {
  static const unsigned char alpn[] = "\x02h2";
  unsigned long e;
  const char *what = NULL;
  struct in6_addr a6;
  struct in_addr a4;
  if (!(c->ssl_ctx = ossl.SSL_CTX_new(ossl.TLS_client_method()))) { what = "SSL_CTX_new"; goto fail; }
  ossl.SSL_CTX_ctrl(c->ssl_ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
  ossl.SSL_CTX_set_verify(c->ssl_ctx, SSL_VERIFY_PEER, NULL);
  if (o->cacert && *o->cacert) {
    if (ossl.SSL_CTX_load_verify_locations(c->ssl_ctx, o->cacert, NULL) != 1) {
      what = o->cacert;
      goto fail;
    }
  } else if (ossl.SSL_CTX_set_default_verify_paths(c->ssl_ctx) != 1) {
    what = "the system's CA certificates";
    goto fail;
  }
  if (o->cert && *o->cert &&
      ossl.SSL_CTX_use_certificate_chain_file(c->ssl_ctx, o->cert) != 1) {
    what = o->cert;
    goto fail;
  }
  if ((o->key && *o->key) || (o->cert && *o->cert)) {
    const char *key = o->key && *o->key ? o->key : o->cert;
    if (ossl.SSL_CTX_use_PrivateKey_file(c->ssl_ctx, key, SSL_FILETYPE_PEM) != 1) {
      what = key;
      goto fail;
    }
    if (ossl.SSL_CTX_check_private_key(c->ssl_ctx) != 1) {
      what = key;
      goto fail;
    }
  }
  if (!(c->ssl = ossl.SSL_new(c->ssl_ctx))) { what = "SSL_new"; goto fail; }
  if (ossl.SSL_set_alpn_protos(c->ssl, alpn, 3) != 0) { what = "ALPN"; goto fail; }
  if (inet_pton(AF_INET, c->host, &a4) == 1 || inet_pton(AF_INET6, c->host, &a6) == 1) {
    if (ossl.X509_VERIFY_PARAM_set1_ip_asc(ossl.SSL_get0_param(c->ssl), c->host) != 1) {
      what = c->host;
      goto fail;
    }
  } else {
    ossl.SSL_ctrl(c->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, c->host);
    if (ossl.SSL_set1_host(c->ssl, c->host) != 1) { what = c->host; goto fail; }
  }
  c->rbio = ossl.BIO_new(ossl.BIO_s_mem());
  c->wbio = ossl.BIO_new(ossl.BIO_s_mem());
  if (!c->rbio || !c->wbio) {
    ossl.BIO_free(c->rbio);
    ossl.BIO_free(c->wbio);
    c->rbio = c->wbio = NULL;
    what = "BIO_new";
    goto fail;
  }
  ossl.SSL_set_bio(c->ssl, c->rbio, c->wbio);
  ossl.SSL_set_connect_state(c->ssl);
  return 0;
fail:
  e = ossl.ERR_get_error();
  snprintf(why, whylen, "%s: %s", what ? what : "TLS",
           e && ossl.ERR_reason_error_string(e) ? ossl.ERR_reason_error_string(e) : "failed");
  ossl.ERR_clear_error();
  return BT_ETLS;
}

static int h2_setup(bt_grpc_conn_t *c) {
  nghttp2_session_callbacks *cbs;
  nghttp2_option *opt;
  nghttp2_settings_entry iv[] = {
    { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
    { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t) STREAM_WINDOW },
    { NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20 },
  };
  int rc;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return BT_ENOMEM;
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    return BT_ENOMEM;
  }
  /* etcd allows 2^32-1 streams; don't guess 100 before its SETTINGS come. */
  nghttp2_option_set_peer_max_concurrent_streams(opt, 1000);
  nghttp2_option_set_no_auto_ping_ack(opt, 1);   /* ACKs held: ACK_DELAY_MS */
  rc = nghttp2_session_client_new2(&c->h2, cbs, c, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rc != 0) return BT_ENOMEM;
  if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0 ||
      nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
    return BT_ENOMEM;
  return 0;
}

bt_grpc_conn_t *bt_grpc_connect(uv_loop_t *loop, const bt_grpc_conn_opts_t *o,
                                bt_grpc_event_cb cb, void *arg, int *err,
                                char *msg, size_t msglen) {
  bt_grpc_conn_t *c;
  struct sockaddr_storage ss;
  int rc;
  char why[400];
  if (!o || !o->url) {
    set_err(err, msg, msglen, BT_EINVAL, "no url");
    return NULL;
  }
  if (!(c = calloc(1, sizeof(*c)))) {
    set_err(err, msg, msglen, BT_ENOMEM, "%s: out of memory", o->url);
    return NULL;
  }
  c->loop = loop;
  c->cb = cb;
  c->arg = arg;
  c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                                    : DEFAULT_CONNECT_TIMEOUT_MS;
  c->ping_interval_ms = o->ping_interval_ms > 0 ? o->ping_interval_ms : 0;
  c->ping_timeout_ms = o->ping_timeout_ms > 0 ? o->ping_timeout_ms : 20000;
  c->max_message = o->max_message ? o->max_message : DEFAULT_MAX_MESSAGE;
  if (!(c->url = strdup(o->url))) {
    conn_free(c);
    set_err(err, msg, msglen, BT_ENOMEM, "%s: out of memory", o->url);
    return NULL;
  }
  if ((rc = parse_url(c, o->url)) < 0) {
    conn_free(c);
    set_err(err, msg, msglen, rc, rc == BT_EINVAL
            ? "%s: invalid url (expected http://host:port or https://host:port)"
            : "%s: out of memory", o->url);
    return NULL;
  }
  if (c->tls && load_ossl() < 0) {
    conn_free(c);
    set_err(err, msg, msglen, BT_ENOTSUP, "%s: OpenSSL could not be loaded: %s", o->url,
            ossl_dl.error);
    return NULL;
  }
  if (c->tls && (rc = tls_setup(c, o, why, sizeof(why))) < 0) {
    conn_free(c);
    set_err(err, msg, msglen, rc, "%s: tls error (%s)", o->url, why);
    return NULL;
  }
  if ((rc = h2_setup(c)) < 0) {
    conn_free(c);
    set_err(err, msg, msglen, rc, "%s: out of memory", o->url);
    return NULL;
  }
  uv_timer_init(loop, &c->timer);
  uv_timer_init(loop, &c->later);
  c->timer.data = c->later.data = c;
  c->connect_deadline = uv_now(loop) + (uint64_t) c->connect_timeout_ms;
  conn_arm(c, c->connect_deadline);
  if (uv_ip4_addr(c->host, c->port, (struct sockaddr_in *) &ss) == 0 ||
      uv_ip6_addr(c->host, c->port, (struct sockaddr_in6 *) &ss) == 0) {
    start_connect(c, (struct sockaddr *) &ss);
    /* A synchronous failure was recorded; CLOSED comes on a later turn. */
  } else {
    struct addrinfo hints;
    char port[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", c->port);
    c->gai.data = c;
    if ((rc = uv_getaddrinfo(loop, &c->gai, on_resolved, c->host, port, &hints)) < 0)
      conn_fail(c, rc, "resolving %s: %s", c->host, uv_strerror(rc));
    else
      c->gai_pending = 1;
  }
  if (err) *err = 0;
  return c;
}

void bt_grpc_close(bt_grpc_conn_t *c) {
  if (!c || c->closing) return;
  c->closing = 1;
  c->err = 0;
  snprintf(c->msg, sizeof(c->msg), "%s: closed", c->url);
  conn_schedule(c);
}

void bt_grpc_stats(const bt_grpc_conn_t *c, bt_grpc_stats_t *st) {
  *st = c->st;
}

/* grpc-timeout's value: at most 8 digits and a unit. */
static void grpc_timeout(long ms, char *buf, size_t len) {
  if (ms < 100000000L) snprintf(buf, len, "%ldm", ms);
  else if (ms / 1000 < 100000000L) snprintf(buf, len, "%ldS", ms / 1000);
  else snprintf(buf, len, "%ldM", ms / 60000 < 100000000L ? ms / 60000 : 99999999L);
}

/* gRPC's custom metadata: a name of 0-9 a-z _ - . (not grpc-*, not a
 * pseudo-header), a value of printable ASCII. */
static int md_valid(const char *name, const char *value) {
  const char *p;
  if (!*name || strncmp(name, "grpc-", 5) == 0) return 0;
  for (p = name; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || *p == '_' || *p == '-' ||
          *p == '.'))
      return 0;
  for (p = value; *p; p++)
    if ((unsigned char) *p < 0x20 || (unsigned char) *p > 0x7e) return 0;
  return 1;
}

#define NV(n, v) { (uint8_t *) (n), (uint8_t *) (v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

int bt_grpc_open(bt_grpc_conn_t *c, const char *path,
                 const char *const *metadata, long timeout_ms,
                 const bt_grpc_stream_cbs_t *cbs, void *arg,
                 bt_grpc_stream_t **out) {
  bt_grpc_stream_t *s;
  nghttp2_data_provider prd;
  nghttp2_nv stack_nv[16], *nv = stack_nv;
  size_t nmd = 0, n = 0, i;
  char tmo[24];
  int32_t id;
  if (out) *out = NULL;
  if (!c || !path || path[0] != '/' || !cbs) return BT_EINVAL;
  if (c->closing || c->goaway) return BT_EUNAVAIL;
  if (metadata) {
    while (metadata[nmd]) {
      if (!metadata[nmd + 1] || !md_valid(metadata[nmd], metadata[nmd + 1]))
        return BT_EINVAL;
      nmd += 2;
    }
  }
  if (!(s = calloc(1, sizeof(*s)))) return BT_ENOMEM;
  s->c = c;
  s->cbs = *cbs;
  s->arg = arg;
  s->grpc_status = -1;
  s->df.max = c->max_message;
  s->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
  if (7 + nmd / 2 > sizeof(stack_nv) / sizeof(stack_nv[0]) &&
      !(nv = malloc((7 + nmd / 2) * sizeof(*nv)))) {
    free(s);
    return BT_ENOMEM;
  }
  {
    nghttp2_nv base[] = {
      NV(":method", "POST"), NV(":scheme", c->tls ? "https" : "http"),
      NV(":path", path), NV(":authority", c->authority),
    };
    for (i = 0; i < 4; i++) nv[n++] = base[i];
  }
  if (s->timeout_ms) {
    nghttp2_nv t = NV("grpc-timeout", tmo);
    /* The server's deadline a little later than ours, so that a call
     * that runs out of time ends here, with ETIMEDOUT, rather than by a
     * race with the server's status 4 (DEADLINE_EXCEEDED). */
    grpc_timeout(s->timeout_ms + s->timeout_ms / 10 + 20, tmo, sizeof(tmo));
    t.valuelen = strlen(tmo);
    nv[n++] = t;
  }
  {
    nghttp2_nv ct = NV("content-type", "application/grpc"), te = NV("te", "trailers");
    nv[n++] = ct;
    nv[n++] = te;
  }
  for (i = 0; i < nmd; i += 2) {
    nghttp2_nv m = NV(metadata[i], metadata[i + 1]);
    nv[n++] = m;
  }
  prd.source.ptr = s;
  prd.read_callback = on_read_body;
  id = nghttp2_submit_request(c->h2, NULL, nv, n, &prd, s);
  if (nv != stack_nv) free(nv);
  if (id < 0) {
    free(s);
    return id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE ? BT_EUNAVAIL
         : id == NGHTTP2_ERR_NOMEM ? BT_ENOMEM : BT_EINVAL;
  }
  s->id = id;
  s->in_nghttp2 = 1;
  s->next = c->streams;
  if (c->streams) c->streams->prev = s;
  c->streams = s;
  if (c->live++ == 0) c->last_read = uv_now(c->loop);
  if (s->timeout_ms) {
    s->deadline = uv_now(c->loop) + (uint64_t) s->timeout_ms;
    conn_arm(c, s->deadline);
  }
  if (c->ping_interval_ms > 0 && c->transport_up && c->live == 1)
    conn_arm(c, c->last_read + (uint64_t) c->ping_interval_ms);
  conn_schedule(c);
  if (out) *out = s;
  return 0;
}

int bt_grpc_send(bt_grpc_stream_t *s, const uint8_t *msg, size_t len, int end) {
  bt_grpc_conn_t *c;
  size_t need;
  if (!s || (len && !msg)) return BT_EINVAL;
  c = s->c;
  if (s->finished || s->cancel_pending) return BT_ECLOSED;
  if (s->end_queued) return BT_EINVAL;
  if (len > 0xffffffffu) return BT_ETOOLARGE;
  need = s->out_len + 5 + len;
  if (need > s->out_cap) {
    size_t cap = s->out_cap ? s->out_cap : 256;
    uint8_t *nb;
    while (cap < need) cap *= 2;
    if (!(nb = realloc(s->out, cap))) return BT_ENOMEM;
    s->out = nb;
    s->out_cap = cap;
  }
  s->out[s->out_len] = 0;
  s->out[s->out_len + 1] = (uint8_t) (len >> 24);
  s->out[s->out_len + 2] = (uint8_t) (len >> 16);
  s->out[s->out_len + 3] = (uint8_t) (len >> 8);
  s->out[s->out_len + 4] = (uint8_t) len;
  if (len) memcpy(s->out + s->out_len + 5, msg, len);
  s->out_len += 5 + len;
  if (end) s->end_queued = 1;
  if (s->deferred && s->in_nghttp2 && !c->closing) {
    s->deferred = 0;
    nghttp2_session_resume_data(c->h2, s->id);
  }
  conn_schedule(c);
  return 0;
}

void bt_grpc_cancel(bt_grpc_stream_t *s) {
  if (!s || s->finished) return;
  if (s->in_cb > 0) {
    s->cancel_pending = 1;
    return;
  }
  stream_fail(s, 1, BT_ECANCELED, NULL);
}

int bt_grpc_stream_unsent(const bt_grpc_stream_t *s) {
  return !s->headers_sent || s->refused ||
         (s->c->goaway && s->id > s->c->goaway_last_id);
}
