/*
 * gRPC transport tests (TAP): runtime/core/grpc.c against the real etcd the
 * harness gives (BATON_ENDPOINTS; the etcd checks are skipped without it),
 * with protobuf bytes packed by hand, and against scripted HTTP/2 servers
 * (uv_tcp listeners on 127.0.0.1 writing raw frames) for what etcd will
 * not do on demand: silence, a GOAWAY, a bad status, a compressed message,
 * an unanswered PING, PINGs answered (their spacing), a reset. About 5 s.
 */
#define _GNU_SOURCE
#include "grpc.h"
#include "err.h"
#include "tap.h"
#include "uvrun.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static uv_loop_t *loop;

/* ---- helpers ----------------------------------------------------------- */

/* A connection's events as seen by the test. */
typedef struct {
  int ready, goaway, closed, closed_err;
  char closed_msg[600], goaway_msg[600];
  int closed_after_streams;        /* every watched stream ended before CLOSED */
  int open_at_goaway;
  int *streams_open;
} conn_rec_t;

static const bt_grpc_stream_cbs_t cbs;

static void on_event(bt_grpc_conn_t *c, int ev, int err, const char *msg, void *arg) {
  conn_rec_t *r = arg;
  if (ev == BT_GRPC_READY) r->ready++;
  if (ev == BT_GRPC_GOAWAY) {
    bt_grpc_stream_t *s;
    r->open_at_goaway = bt_grpc_open(c, "/x.Y/Z", NULL, 0, &cbs, NULL, &s);
    r->goaway++;
    snprintf(r->goaway_msg, sizeof(r->goaway_msg), "%s", msg ? msg : "");
  }
  if (ev == BT_GRPC_CLOSED) {
    r->closed++;
    r->closed_err = err;
    r->closed_after_streams = !r->streams_open || *r->streams_open == 0;
    snprintf(r->closed_msg, sizeof(r->closed_msg), "%s", msg ? msg : "");
  }
}

/* One call's outcome. */
typedef struct {
  int nmsg, closed, err, status, unsent;
  char message[600];
  uint8_t last[4096];
  size_t last_len;
  int cancel_in_msg;               /* cancel from on_message at this count */
  int *open_count;
  int msg_after_close;
} call_t;

static void on_message(bt_grpc_stream_t *s, const uint8_t *m, size_t len, void *arg) {
  call_t *c = arg;
  if (c->closed) c->msg_after_close++;
  c->nmsg++;
  c->last_len = len < sizeof(c->last) ? len : sizeof(c->last);
  memcpy(c->last, m, c->last_len);
  if (c->cancel_in_msg && c->nmsg == c->cancel_in_msg) bt_grpc_cancel(s);
}

static void on_close(bt_grpc_stream_t *s, int err, int status, const char *message,
                     void *arg) {
  call_t *c = arg;
  c->closed++;
  c->err = err;
  c->status = status;
  c->unsent = bt_grpc_stream_unsent(s);
  snprintf(c->message, sizeof(c->message), "%s", message ? message : "(null)");
  if (c->open_count) (*c->open_count)--;
}

static const bt_grpc_stream_cbs_t cbs = { on_message, on_close };

/* on_message that only counts (for messages bigger than call_t keeps). */
static size_t big_len;
static void on_big(bt_grpc_stream_t *s, const uint8_t *m, size_t len, void *arg) {
  ((call_t *) arg)->nmsg++;
  big_len += len;
}
static const bt_grpc_stream_cbs_t big_cbs = { on_big, on_close };

static uint64_t now_ms(void) { return uv_hrtime() / 1000000; }

/* A varint field of a protobuf message (top level), or -1. */
static long long pb_varint(const uint8_t *p, size_t n, int field) {
  size_t i = 0;
  while (i < n) {
    uint64_t key = 0, v = 0;
    int sh = 0;
    while (i < n) { key |= (uint64_t) (p[i] & 0x7f) << sh; sh += 7; if (!(p[i++] & 0x80)) break; }
    switch (key & 7) {
    case 0:
      sh = 0;
      while (i < n) { v |= (uint64_t) (p[i] & 0x7f) << sh; sh += 7; if (!(p[i++] & 0x80)) break; }
      if ((int) (key >> 3) == field) return (long long) v;
      break;
    case 2:
      sh = 0;
      while (i < n) { v |= (uint64_t) (p[i] & 0x7f) << sh; sh += 7; if (!(p[i++] & 0x80)) break; }
      i += v;
      break;
    case 1: i += 8; break;
    case 5: i += 4; break;
    default: return -1;
    }
  }
  return -1;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  do { p[n++] = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
  return n;
}

/* key (1) and value (2) fields: PutRequest, or RangeRequest without value. */
static size_t pb_kv(uint8_t *p, const char *key, const char *value) {
  size_t n = 0, kl = strlen(key);
  p[n++] = 0x0a;
  p[n++] = (uint8_t) kl;
  memcpy(p + n, key, kl);
  n += kl;
  if (value) {
    size_t vl = strlen(value);
    p[n++] = 0x12;
    p[n++] = (uint8_t) vl;
    memcpy(p + n, value, vl);
    n += vl;
  }
  return n;
}

static int contains(const uint8_t *p, size_t n, const char *s) {
  return memmem(p, n, s, strlen(s)) != NULL;
}

/* One unary call: opens, sends msg with end, runs until it closes. */
static int unary(bt_grpc_conn_t *c, const char *path, const uint8_t *msg, size_t len,
                 long timeout_ms, call_t *out) {
  bt_grpc_stream_t *s;
  int rc;
  memset(out, 0, sizeof(*out));
  rc = bt_grpc_open(c, path, NULL, timeout_ms, &cbs, out, &s);
  if (rc < 0) return rc;
  if ((rc = bt_grpc_send(s, msg, len, 1)) < 0) return rc;
  run_until(&out->closed, 1, 10000);
  return out->closed ? 0 : BT_ETIMEDOUT;
}

/* ---- scripted HTTP/2 servers ------------------------------------------- */

/* Frames written raw. HPACK: 0x88 is ":status: 200", 0x8d ":status: 404"
 * (static table). */
static const uint8_t SETTINGS[] = { 0, 0, 0, 4, 0, 0, 0, 0, 0 };
static const uint8_t HDR_404_END[] = { 0, 0, 1, 1, 5, 0, 0, 0, 1, 0x8d };
static const uint8_t HDR_200_END[] = { 0, 0, 1, 1, 5, 0, 0, 0, 1, 0x88 };
static const uint8_t HDR_200[] = { 0, 0, 1, 1, 4, 0, 0, 0, 1, 0x88 };
static const uint8_t DATA_COMPRESSED[] = { 0, 0, 6, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 'x' };
/* :status 200 and grpc-status 5 (a literal without indexing, new name). */
static const uint8_t TRAILERS_ONLY_5[] = { 0, 0, 16, 1, 5, 0, 0, 0, 1, 0x88, 0x00, 11,
  'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's', 1, '5' };
static const uint8_t GOAWAY0[] = { 0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };

typedef struct {
  uv_tcp_t listener;
  int port;
  const uint8_t *on_accept;        /* written at once */
  size_t on_accept_len;
  const uint8_t *on_data;          /* written when the client's bytes come */
  size_t on_data_len;
  int close_on_data;               /* then closes */
  int got;                         /* bytes read */
  uint8_t rx[8192];                /* the first of them */
  size_t rxlen;
  uv_tcp_t *peer;
  int ack_pings;                   /* answers the client's PINGs */
  int npings;                      /* PINGs seen (with ack_pings) */
  uint64_t ping_at[16];            /* when the first ones came (now_ms) */
  uint8_t fh[9 + 8];               /* the frame header being read, a PING's payload */
  size_t fhave, skip;              /* its bytes so far; bytes left to skip */
} srv_t;

static void srv_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  static char buf[65536];
  *b = uv_buf_init(buf, sizeof(buf));
}

static void srv_write(uv_tcp_t *t, const uint8_t *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *) p, (unsigned) n);
  if (n) uv_try_write((uv_stream_t *) t, &b, 1);
}

static void srv_peer_closed(uv_handle_t *h) { free(h); }

/* Follows the client's frames as they stream in (after the 24-byte
 * preface, skipped as srv_start set s->skip) and ACKs each PING. */
static void srv_ack_pings(srv_t *s, uv_tcp_t *t, const uint8_t *p, size_t n) {
  while (n > 0) {
    size_t want, k;
    if (s->skip) {
      k = n < s->skip ? n : s->skip;
      s->skip -= k;
      p += k;
      n -= k;
      continue;
    }
    want = s->fhave < 9 ? 9 : 9 + 8;
    k = want - s->fhave < n ? want - s->fhave : n;
    memcpy(s->fh + s->fhave, p, k);
    s->fhave += k;
    p += k;
    n -= k;
    if (s->fhave < want) return;
    if (s->fhave == 9) {
      size_t len = (size_t) s->fh[0] << 16 | (size_t) s->fh[1] << 8 | s->fh[2];
      if (s->fh[3] == 6 && !(s->fh[4] & 1) && len == 8) continue;   /* a PING: its payload */
      s->skip = len;
      s->fhave = 0;
      continue;
    }
    if (s->npings < (int) (sizeof(s->ping_at) / sizeof(s->ping_at[0])))
      s->ping_at[s->npings] = now_ms();
    s->npings++;
    s->fh[4] = 1;                  /* ACK, same payload */
    srv_write(t, s->fh, sizeof(s->fh));
    s->fhave = 0;
  }
}

static void srv_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  srv_t *s = st->data;
  if (n < 0) {
    if (!uv_is_closing((uv_handle_t *) st)) uv_close((uv_handle_t *) st, srv_peer_closed);
    if (s->peer == (uv_tcp_t *) st) s->peer = NULL;
    return;
  }
  if (n == 0) return;
  if (s->got == 0 && s->on_data) srv_write((uv_tcp_t *) st, s->on_data, s->on_data_len);
  s->got += (int) n;
  if (s->ack_pings) srv_ack_pings(s, (uv_tcp_t *) st, (const uint8_t *) b->base, (size_t) n);
  if (s->rxlen + (size_t) n <= sizeof(s->rx)) {
    memcpy(s->rx + s->rxlen, b->base, (size_t) n);
    s->rxlen += (size_t) n;
  }
  if (s->close_on_data && !uv_is_closing((uv_handle_t *) st)) {
    uv_close((uv_handle_t *) st, srv_peer_closed);
    if (s->peer == (uv_tcp_t *) st) s->peer = NULL;
  }
}

static void srv_accept(uv_stream_t *l, int status) {
  srv_t *s = l->data;
  uv_tcp_t *t = malloc(sizeof(*t));
  uv_tcp_init(loop, t);
  t->data = s;
  if (uv_accept(l, (uv_stream_t *) t) < 0) {
    uv_close((uv_handle_t *) t, srv_peer_closed);
    return;
  }
  s->peer = t;
  srv_write(t, s->on_accept, s->on_accept_len);
  uv_read_start((uv_stream_t *) t, srv_alloc, srv_read);
}

static void srv_start(srv_t *s) {
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof(got);
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  s->skip = 24;                    /* the client's preface */
  uv_tcp_bind(&s->listener, (const struct sockaddr *) &a, 0);
  uv_listen((uv_stream_t *) &s->listener, 8, srv_accept);
  uv_tcp_getsockname(&s->listener, (struct sockaddr *) &got, &len);
  s->port = ntohs(((struct sockaddr_in *) &got)->sin_port);
}

static void srv_stop(srv_t *s) {
  if (s->peer && !uv_is_closing((uv_handle_t *) s->peer))
    uv_close((uv_handle_t *) s->peer, srv_peer_closed);
  uv_close((uv_handle_t *) &s->listener, NULL);
  run_for(20);
}

/* Connects to the scripted server s with opts (its url set here; NULL for
 * the defaults) and opens one stream, its empty message sent with its
 * request side ended unless open. */
static bt_grpc_conn_t *srv_open(srv_t *s, const bt_grpc_conn_opts_t *opts, int open,
                                conn_rec_t *r, call_t *call) {
  char url[64];
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_conn_t *c;
  bt_grpc_stream_t *st;
  int err;
  char msg[256];
  if (opts) o = *opts;
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", s->port);
  o.url = url;
  memset(r, 0, sizeof(*r));
  memset(call, 0, sizeof(*call));
  c = bt_grpc_connect(loop, &o, on_event, r, &err, msg, sizeof(msg));
  if (!c) return NULL;
  if (bt_grpc_open(c, "/x.Y/Z", NULL, 0, &cbs, call, &st) == 0)
    bt_grpc_send(st, (const uint8_t *) "", 0, !open);
  return c;
}

/* ---- tests against etcd ------------------------------------------------- */

static char prefix[64];

static void test_unary(bt_grpc_conn_t *c, conn_rec_t *r) {
  uint8_t buf[256];
  char key[128];
  call_t call;
  size_t n;
  snprintf(key, sizeof(key), "%sk", prefix);
  n = pb_kv(buf, key, "v1");
  is_int(unary(c, "/etcdserverpb.KV/Put", buf, n, 5000, &call), 0, "Put runs");
  is_int(call.err, 0, "Put: no transport error");
  is_int(call.status, 0, "Put: grpc-status 0");
  is_str(call.message, "", "Put: grpc-message empty");
  is_int(call.nmsg, 1, "Put: one response message");
  ok(pb_varint(call.last, call.last_len, 1) == -1 && call.last_len > 0 && call.last[0] == 0x0a,
     "Put: the response starts with its header (field 1)");
  is_int(call.unsent, 0, "Put: a call that ran is not unsent");
  ok(r->ready == 1, "READY came once");

  n = pb_kv(buf, key, NULL);
  unary(c, "/etcdserverpb.KV/Range", buf, n, 5000, &call);
  is_int(call.status, 0, "Range: status 0");
  ok(call.nmsg == 1 && contains(call.last, call.last_len, key) &&
     contains(call.last, call.last_len, "v1"), "Range: the key and its value come back");

  unary(c, "/etcdserverpb.KV/Nope", buf, n, 5000, &call);
  is_int(call.err, 0, "unknown method: no transport error");
  is_int(call.status, 12, "unknown method: UNIMPLEMENTED");
  ok(strstr(call.message, "unknown method Nope") != NULL, "with its message: %s", call.message);
  is_int(call.nmsg, 0, "and no message");

  /* A trailers-only answer with a percent-encoded message. */
  unary(c, "/etcdserverpb.KV/Range", (const uint8_t *) "", 0, 5000, &call);
  is_int(call.status, 3, "empty key: INVALID_ARGUMENT (trailers-only)");
  is_str(call.message, "etcdserver: key is not provided", "its message");
}

static void test_metadata_and_deadline(bt_grpc_conn_t *c, const char *url) {
  uint8_t watch[128];
  char key[128];
  call_t call;
  bt_grpc_stream_t *s;
  const char *md[] = { "hasleader", "true", NULL };
  uint64_t t0;
  size_t kl;
  snprintf(key, sizeof(key), "%sw", prefix);
  kl = strlen(key);
  /* WatchRequest{create_request{key}}: a stream that never ends by itself. */
  watch[0] = 0x0a; watch[1] = (uint8_t) (kl + 2); watch[2] = 0x0a; watch[3] = (uint8_t) kl;
  memcpy(watch + 4, key, kl);
  memset(&call, 0, sizeof(call));
  t0 = now_ms();
  is_int(bt_grpc_open(c, "/etcdserverpb.Watch/Watch", md, 300, &cbs, &call, &s), 0,
         "a Watch with a 300 ms deadline opens");
  bt_grpc_send(s, watch, kl + 4, 0);
  run_until(&call.closed, 1, 5000);
  is_int(call.err, BT_ETIMEDOUT, "its deadline ends it with ETIMEDOUT");
  ok(now_ms() - t0 >= 290 && now_ms() - t0 < 3000, "after about 300 ms (%llu)",
     (unsigned long long) (now_ms() - t0));
  is_int(call.nmsg, 1, "after the created response");
  ok(strstr(call.message, "deadline") != NULL && strstr(call.message, url) != NULL,
     "the message says why and names the url: %s", call.message);
}

static void test_many(bt_grpc_conn_t *c) {
  enum { N = 300 };
  static call_t calls[N];
  uint8_t buf[256];
  char key[128];
  int open = 0, i, good = 0, opened = 0;
  for (i = 0; i < N; i++) {
    bt_grpc_stream_t *s;
    size_t n;
    memset(&calls[i], 0, sizeof(calls[i]));
    calls[i].open_count = &open;
    snprintf(key, sizeof(key), "%smany/%d", prefix, i);
    n = pb_kv(buf, key, i % 2 ? NULL : "x");
    if (bt_grpc_open(c, i % 2 ? "/etcdserverpb.KV/Range" : "/etcdserverpb.KV/Put",
                     NULL, 10000, &cbs, &calls[i], &s) == 0 &&
        bt_grpc_send(s, buf, n, 1) == 0) {
      open++;
      opened++;
    }
  }
  is_int(opened, N, "%d concurrent streams open on one connection", N);
  {
    uint64_t t0 = now_ms();
    while (open > 0 && now_ms() - t0 < 20000) uv_run(loop, UV_RUN_ONCE);
  }
  for (i = 0; i < N; i++)
    if (calls[i].closed == 1 && calls[i].err == 0 && calls[i].status == 0 && calls[i].nmsg == 1)
      good++;
  is_int(good, N, "all of them answered with status 0 and one message");
}

/* Paced calls, one at a time, as a node makes them: etcd's Go server sends a
 * PING (its flow-control estimate) on most requests it reads while none is
 * unanswered; answered at once, each ACK is one more segment etcd wakes up
 * for, and the next request brings the next PING. Held (issue 24), the ACKs
 * are few and nearly every write is a request. */
static void test_paced_writes(const char *url) {
  enum { N = 100 };
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_stats_t st0, st;
  conn_rec_t r;
  call_t call;
  uint8_t buf[256];
  char key[128], msg[256];
  int err, i, good = 0;
  uint64_t t0, most;
  bt_grpc_conn_t *c;
  o.url = url;
  memset(&r, 0, sizeof(r));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  if (!c) {
    ok(0, "connect for the paced calls: %s", msg);
    return;
  }
  run_until(&r.ready, 1, 5000);
  snprintf(key, sizeof(key), "%spaced", prefix);
  unary(c, "/etcdserverpb.KV/Put", buf, pb_kv(buf, key, "x"), 5000, &call);
  bt_grpc_stats(c, &st0);
  t0 = now_ms();
  for (i = 0; i < N; i++) {
    run_for(3);
    if (unary(c, "/etcdserverpb.KV/Put", buf, pb_kv(buf, key, "x"), 5000, &call) == 0 &&
        call.status == 0 && call.nmsg == 1)
      good++;
  }
  /* at most one ACK per 50 ms (however slow a loaded machine makes it) */
  most = (now_ms() - t0) / 50 + 2;
  bt_grpc_stats(c, &st);
  is_int(good, N, "%d paced Puts answered", N);
  is_int((int) (st.headers_out - st0.headers_out), N,
         "the stats count one HEADERS frame sent per call");
  ok(st.pings_in > st0.pings_in, "etcd sent PINGs meanwhile (%llu)",
     (unsigned long long) (st.pings_in - st0.pings_in));
  ok(st.ping_acks_out - st0.ping_acks_out <= most,
     "at most one PING ACK per 50 ms (%llu ACKs for %d calls in %llu ms, %llu PINGs)",
     (unsigned long long) (st.ping_acks_out - st0.ping_acks_out), N,
     (unsigned long long) (now_ms() - t0), (unsigned long long) (st.pings_in - st0.pings_in));
  ok(st.writes - st0.writes <= N + most, "one socket write per call, besides those ACKs (%llu for %d)",
     (unsigned long long) (st.writes - st0.writes), N);
  bt_grpc_close(c);
  run_until(&r.closed, 1, 5000);
}

static void test_bidi(bt_grpc_conn_t *c) {
  uint8_t buf[64];
  call_t call, ka;
  bt_grpc_stream_t *s;
  long long id;
  size_t n;
  int i;
  /* LeaseGrantRequest{TTL=60}. */
  buf[0] = 0x08; buf[1] = 60;
  unary(c, "/etcdserverpb.Lease/LeaseGrant", buf, 2, 5000, &call);
  id = pb_varint(call.last, call.last_len, 2);
  ok(call.status == 0 && id > 0, "LeaseGrant gives a lease id (%lld)", id);

  memset(&ka, 0, sizeof(ka));
  is_int(bt_grpc_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", NULL, 0, &cbs, &ka, &s), 0,
         "LeaseKeepAlive opens");
  buf[0] = 0x08;
  n = 1 + put_varint(buf + 1, (uint64_t) id);
  for (i = 0; i < 3; i++) {
    int want = ka.nmsg + 1;
    bt_grpc_send(s, buf, n, 0);
    run_until(&ka.nmsg, want, 5000);
  }
  is_int(ka.nmsg, 3, "three keepalives, three answers, one at a time on one stream");
  is_int(pb_varint(ka.last, ka.last_len, 2), id, "the answer names the lease");
  is_int(pb_varint(ka.last, ka.last_len, 3), 60, "with its TTL");
  /* Two at once, then cancel from outside any callback. */
  bt_grpc_send(s, buf, n, 0);
  bt_grpc_send(s, buf, n, 0);
  run_until(&ka.nmsg, 5, 5000);
  is_int(ka.nmsg, 5, "two keepalives queued together get two answers");
  is_int(ka.closed, 0, "the stream is still open");
  bt_grpc_cancel(s);
  is_int(ka.closed, 1, "bt_grpc_cancel from outside its callbacks closes it at once");
  is_int(ka.err, BT_ECANCELED, "with ECANCELED");
  run_for(50);
  is_int(ka.closed, 1, "once");

  /* Cancel from inside on_message: on_close after it returns, no more messages. */
  memset(&ka, 0, sizeof(ka));
  ka.cancel_in_msg = 1;
  bt_grpc_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", NULL, 0, &cbs, &ka, &s);
  bt_grpc_send(s, buf, n, 0);
  bt_grpc_send(s, buf, n, 0);
  run_until(&ka.closed, 1, 5000);
  run_for(100);
  is_int(ka.err, BT_ECANCELED, "cancel inside on_message: on_close(ECANCELED)");
  is_int(ka.nmsg, 1, "and no message after it");
  is_int(ka.closed, 1, "on_close once");

  /* Cancelled before anything was written: unsent, and nothing breaks. */
  memset(&ka, 0, sizeof(ka));
  bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 5000, &cbs, &ka, &s);
  bt_grpc_send(s, buf, n, 1);
  bt_grpc_cancel(s);
  ok(ka.closed == 1 && ka.err == BT_ECANCELED && ka.unsent == 1,
     "a call cancelled before it was written: ECANCELED, unsent");
  run_for(50);
  is_int(ka.closed, 1, "on_close once");

  /* LeaseRevokeRequest{ID}. */
  buf[0] = 0x08;
  unary(c, "/etcdserverpb.Lease/LeaseRevoke", buf, n, 5000, &call);
  is_int(call.status, 0, "LeaseRevoke: status 0");
}

static void test_watch_events(bt_grpc_conn_t *c) {
  uint8_t watch[128], buf[256];
  char key[128];
  call_t w, put;
  bt_grpc_stream_t *s;
  size_t kl, n;
  int i;
  snprintf(key, sizeof(key), "%sev", prefix);
  kl = strlen(key);
  watch[0] = 0x0a; watch[1] = (uint8_t) (kl + 2); watch[2] = 0x0a; watch[3] = (uint8_t) kl;
  memcpy(watch + 4, key, kl);
  memset(&w, 0, sizeof(w));
  bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &w, &s);
  bt_grpc_send(s, watch, kl + 4, 0);
  run_until(&w.nmsg, 1, 5000);
  is_int(pb_varint(w.last, w.last_len, 3), 1, "Watch: created");
  for (i = 0; i < 3; i++) {
    char v[16];
    snprintf(v, sizeof(v), "e%d", i);
    n = pb_kv(buf, key, v);
    unary(c, "/etcdserverpb.KV/Put", buf, n, 5000, &put);
    run_until(&w.nmsg, 2 + i, 5000);
  }
  is_int(w.nmsg, 4, "Watch: one event message per Put");
  ok(contains(w.last, w.last_len, "e2"), "the last holds the last value");
  /* Half-closed (an empty DATA with END_STREAM), it still gets events. */
  is_int(bt_grpc_send(s, NULL, 0, 1), 0, "half-closing the Watch");
  is_int(bt_grpc_send(s, watch, kl + 4, 0), BT_EINVAL, "no message after the half-close");
  n = pb_kv(buf, key, "after");
  unary(c, "/etcdserverpb.KV/Put", buf, n, 5000, &put);
  run_until(&w.nmsg, 5, 5000);
  ok(w.nmsg == 5 && contains(w.last, w.last_len, "after") && w.closed == 0,
     "a half-closed Watch still gets events");
  bt_grpc_cancel(s);
  is_int(w.err, BT_ECANCELED, "then cancelled");
}

/* Messages bigger than a frame and a window: a 200 KB Put, then a Range
 * answering 10 of them (2 MB, over etcd's 64 KB initial h2c window), then
 * the same Range on a connection that accepts 1 MB messages at most. */
static void test_big(bt_grpc_conn_t *c, const char *url) {
  enum { VAL = 200000, NKEYS = 10 };
  uint8_t *buf = malloc(VAL + 256);
  uint8_t rq[128];
  char key[128], end[128];
  call_t *call = malloc(sizeof(*call));
  int i, good = 0;
  size_t kl, n;
  for (i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof(key), "%sbig/%d", prefix, i);
    kl = strlen(key);
    n = 0;
    buf[n++] = 0x0a; buf[n++] = (uint8_t) kl;
    memcpy(buf + n, key, kl); n += kl;
    buf[n++] = 0x12; n += put_varint(buf + n, VAL);
    memset(buf + n, 'a' + i, VAL); n += VAL;
    unary(c, "/etcdserverpb.KV/Put", buf, n, 10000, call);
    if (call->err == 0 && call->status == 0) good++;
  }
  is_int(good, NKEYS, "%d Puts of %d-byte values (requests over many DATA frames)", NKEYS, VAL);
  /* RangeRequest{key = prefix "big/", range_end = prefix "big0"}. */
  snprintf(key, sizeof(key), "%sbig/", prefix);
  snprintf(end, sizeof(end), "%sbig0", prefix);
  n = 0;
  rq[n++] = 0x0a; rq[n++] = (uint8_t) strlen(key); memcpy(rq + n, key, strlen(key)); n += strlen(key);
  rq[n++] = 0x12; rq[n++] = (uint8_t) strlen(end); memcpy(rq + n, end, strlen(end)); n += strlen(end);
  {
    bt_grpc_stream_t *s;
    uint64_t t0 = now_ms();
    big_len = 0;
    memset(call, 0, sizeof(*call));
    bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 20000, &big_cbs, call, &s);
    bt_grpc_send(s, rq, n, 1);
    run_until(&call->closed, 1, 20000);
    ok(call->err == 0 && call->status == 0 && call->nmsg == 1 && big_len > NKEYS * VAL,
       "a Range of %d such keys: one %zu-byte message in %llu ms", NKEYS, big_len,
       (unsigned long long) (now_ms() - t0));
  }
  {
    bt_grpc_conn_opts_t o = { 0 };
    conn_rec_t r;
    int err;
    char msg[256];
    bt_grpc_conn_t *small;
    o.url = url;
    o.max_message = 1 << 20;
    memset(&r, 0, sizeof(r));
    small = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
    unary(small, "/etcdserverpb.KV/Range", rq, n, 20000, call);
    ok(call->err == BT_ETOOLARGE && strstr(call->message, "over the limit"),
       "with max_message 1 MiB: ETOOLARGE (%s)", call->message);
    unary(small, "/etcdserverpb.KV/Range", buf, pb_kv(buf, "/nokey", NULL), 5000, call);
    ok(call->err == 0 && call->status == 0, "the connection goes on serving other calls");
    bt_grpc_close(small);
    run_until(&r.closed, 1, 5000);
  }
  {
    bt_grpc_stream_t *s;
    const char *bad1[] = { "Token", "x", NULL }, *bad2[] = { "grpc-x", "x", NULL },
               *bad3[] = { "token", "a\nb", NULL }, *bad4[] = { "token", NULL };
    ok(bt_grpc_open(c, "/x.Y/Z", bad1, 0, &cbs, call, &s) == BT_EINVAL &&
       bt_grpc_open(c, "/x.Y/Z", bad2, 0, &cbs, call, &s) == BT_EINVAL &&
       bt_grpc_open(c, "/x.Y/Z", bad3, 0, &cbs, call, &s) == BT_EINVAL &&
       bt_grpc_open(c, "/x.Y/Z", bad4, 0, &cbs, call, &s) == BT_EINVAL &&
       bt_grpc_open(c, "x.Y/Z", NULL, 0, &cbs, call, &s) == BT_EINVAL,
       "metadata with an upper-case or grpc- name, a control character, no value, "
       "or a path without '/': EINVAL");
  }
  free(buf);
  free(call);
}

/* The server ends a stream whose request side is still open (a Watch
 * sent a malformed message: 13 INTERNAL from etcd's unmarshalling). */
static void test_server_ends_open_stream(bt_grpc_conn_t *c) {
  call_t w;
  bt_grpc_stream_t *s;
  static const uint8_t junk[] = { 0xff, 0xff, 0xff };
  memset(&w, 0, sizeof(w));
  bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &w, &s);
  bt_grpc_send(s, junk, sizeof(junk), 0);
  run_until(&w.closed, 1, 5000);
  ok(w.closed == 1 && w.err == 0 && w.status != 0,
     "a stream the server ends while ours is open closes with its status (%d %s)", w.status,
     w.message);
}

static void test_close_with_streams(const char *url) {
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t a, b;
  bt_grpc_stream_t *s;
  int err, open = 2;
  char msg[256];
  bt_grpc_conn_t *c;
  o.url = url;
  memset(&r, 0, sizeof(r));
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.open_count = b.open_count = &open;
  r.streams_open = &open;
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  bt_grpc_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", NULL, 0, &cbs, &a, &s);
  bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &b, &s);
  run_until(&r.ready, 1, 5000);
  run_for(50);
  bt_grpc_close(c);
  is_int(a.closed + b.closed + r.closed, 0, "bt_grpc_close calls nothing from inside");
  is_int(bt_grpc_open(c, "/x.Y/Z", NULL, 0, &cbs, &a, &s), BT_EUNAVAIL,
         "bt_grpc_open after bt_grpc_close: EUNAVAIL");
  run_until(&r.closed, 1, 5000);
  ok(a.closed == 1 && b.closed == 1 && a.err == BT_ECANCELED && b.err == BT_ECANCELED,
     "bt_grpc_close ends every stream with ECANCELED");
  ok(r.closed == 1 && r.closed_err == 0 && r.closed_after_streams,
     "then CLOSED, err 0, after every stream");
}

static void test_closed_before_connected(const char *url) {
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t a;
  bt_grpc_stream_t *s;
  int err;
  char msg[256];
  bt_grpc_conn_t *c;
  o.url = url;
  memset(&r, 0, sizeof(r));
  memset(&a, 0, sizeof(a));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 1000, &cbs, &a, &s);
  bt_grpc_close(c);
  run_until(&r.closed, 1, 5000);
  ok(a.closed == 1 && a.err == BT_ECANCELED && a.unsent == 1,
     "closed before connecting: the stream ends ECANCELED and unsent");
  ok(r.closed == 1 && r.ready == 0, "CLOSED without READY");
}

/* etcd's h2c listener takes PINGs less than 5 s apart as abuse: with a
 * 200 ms interval under an idle Watch, the 3rd strike gets a GOAWAY
 * ENHANCE_YOUR_CALM "too_many_pings", then the connection closes. */
static void test_too_many_pings(const char *url) {
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t w;
  bt_grpc_stream_t *s;
  int err;
  char msg[256];
  bt_grpc_conn_t *c;
  o.url = url;
  o.ping_interval_ms = 200;
  o.ping_timeout_ms = 2000;
  memset(&r, 0, sizeof(r));
  memset(&w, 0, sizeof(w));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &w, &s);
  run_until(&r.closed, 1, 10000);
  is_int(r.goaway, 1, "PINGs every 200 ms: etcd sends GOAWAY");
  ok(strstr(r.goaway_msg, "ENHANCE_YOUR_CALM") && strstr(r.goaway_msg, "too_many_pings"),
     "the event's message gives the code and debug data: %s", r.goaway_msg);
  ok(r.closed == 1 && r.closed_err != 0, "then the connection ends (%s)", r.closed_msg);
  ok(w.closed == 1 && w.err == r.closed_err, "and the Watch with it");
}

/* Closed while its name is being resolved. */
static void test_closed_resolving(const char *url) {
  char u[256];
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t a;
  bt_grpc_stream_t *s;
  int err;
  char msg[256];
  bt_grpc_conn_t *c;
  snprintf(u, sizeof(u), "http://localhost%s", strrchr(url, ':'));
  o.url = u;
  memset(&r, 0, sizeof(r));
  memset(&a, 0, sizeof(a));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 1000, &cbs, &a, &s);
  bt_grpc_close(c);
  run_until(&r.closed, 1, 5000);
  ok(r.closed == 1 && r.closed_err == 0 && a.closed == 1 && a.err == BT_ECANCELED,
     "closed while resolving its name: ECANCELED, then CLOSED");
}

/* A name, not an IP: uv_getaddrinfo. */
static void test_localhost(const char *url) {
  char u[256];
  const char *port = strrchr(url, ':');
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t call;
  int err;
  char msg[256];
  bt_grpc_conn_t *c;
  uint8_t buf[64];
  snprintf(u, sizeof(u), "http://localhost%s", port);
  o.url = u;
  memset(&r, 0, sizeof(r));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  unary(c, "/etcdserverpb.KV/Range", buf, pb_kv(buf, "/nokey", NULL), 5000, &call);
  ok(call.err == 0 && call.status == 0, "a host name is resolved (%s): %s", u, call.message);
  bt_grpc_close(c);
  run_until(&r.closed, 1, 5000);
}

/* ---- tests without etcd -------------------------------------------------- */

static void test_bad_urls(void) {
  const char *bad[] = { "etcd:2379", "http://", "http://:80", "http://h:0", "http://h:99999",
                        "http://h:80/path", "ftp://h:1", "http://h:12x", NULL };
  int i;
  for (i = 0; bad[i]; i++) {
    bt_grpc_conn_opts_t o = { 0 };
    int err = 0;
    char msg[256] = "";
    o.url = bad[i];
    ok(bt_grpc_connect(loop, &o, on_event, NULL, &err, msg, sizeof(msg)) == NULL &&
       err == BT_EINVAL && strstr(msg, bad[i]),
       "url %s: EINVAL naming it (%s)", bad[i], msg);
  }
  {
    bt_grpc_conn_opts_t o = { 0 };
    int err = 0;
    char msg[256] = "";
    o.url = "https://127.0.0.1:1";
    o.cacert = "/nonexistent/ca.pem";
    ok(bt_grpc_connect(loop, &o, on_event, NULL, &err, msg, sizeof(msg)) == NULL &&
       err == BT_ETLS && strstr(msg, "/nonexistent/ca.pem"),
       "an unreadable CA file: ETLS naming it (%s)", msg);
  }
}

static void test_refused(void) {
  srv_t s;
  bt_grpc_conn_opts_t o = { 0 };
  conn_rec_t r;
  call_t call;
  bt_grpc_stream_t *st;
  char url[64], msg[256];
  int err;
  bt_grpc_conn_t *c;
  /* A port that was just free: bind, note it, close. */
  memset(&s, 0, sizeof(s));
  srv_start(&s);
  uv_close((uv_handle_t *) &s.listener, NULL);
  run_for(10);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", s.port);
  o.url = url;
  memset(&r, 0, sizeof(r));
  memset(&call, 0, sizeof(call));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  ok(c != NULL, "connect returns a connection before knowing");
  is_int(bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 0, &cbs, &call, &st), 0,
         "a stream may be opened before READY");
  bt_grpc_send(st, (const uint8_t *) "\x0a\x01k", 3, 1);
  is_int(call.closed + r.closed, 0, "nothing is called from inside connect/open/send");
  run_until(&r.closed, 1, 5000);
  is_int(r.closed_err, BT_ECONNREFUSED, "refused port: CLOSED with ECONNREFUSED");
  ok(strstr(r.closed_msg, url) != NULL, "naming the url: %s", r.closed_msg);
  ok(call.closed == 1 && call.err == BT_ECONNREFUSED, "the waiting stream ends ECONNREFUSED");
  is_int(call.unsent, 1, "and is unsent");
  is_int(r.ready, 0, "no READY");
}

/* A scripted server writing on_accept at once and on_data when the
 * client's bytes come (either may be NULL), started in *s. */
static void script_start(srv_t *s, const uint8_t *on_accept, size_t on_accept_len,
                         const uint8_t *on_data, size_t on_data_len) {
  memset(s, 0, sizeof(*s));
  s->on_accept = on_accept;
  s->on_accept_len = on_accept_len;
  s->on_data = on_data;
  s->on_data_len = on_data_len;
  srv_start(s);
}

/* Closes c unless it ended already, runs until CLOSED, stops s. */
static void script_end(srv_t *s, bt_grpc_conn_t *c, conn_rec_t *r) {
  if (c && !r->closed) bt_grpc_close(c);
  run_until(&r->closed, 1, 3000);
  srv_stop(s);
}

/* Scripts answering a call after the server's SETTINGS, and how the call
 * ends: its err, its status, a part of its message. */
static void test_scripted_answers(void) {
  static uint8_t compressed[sizeof(HDR_200) + sizeof(DATA_COMPRESSED)];
  static const struct {
    const char *what;
    const uint8_t *script;
    size_t len;
    int open;                      /* the request side left open */
    int err, status;
    const char *says;              /* in the message, or NULL */
  } cases[] = {
    { "HTTP 404: EPROTO saying so", HDR_404_END, sizeof(HDR_404_END), 0, BT_EPROTO, -1,
      "HTTP status 404" },
    { "a stream ended without grpc-status: EPROTO", HDR_200_END, sizeof(HDR_200_END), 0,
      BT_EPROTO, -1, "grpc-status" },
    /* and no RST_STREAM after the trailers: the call ends at them */
    { "the server's trailers end a call whose request side is open", TRAILERS_ONLY_5,
      sizeof(TRAILERS_ONLY_5), 1, 0, 5, NULL },
    { "a compressed message: EPROTO", compressed, sizeof(compressed), 0, BT_EPROTO, -1,
      "compressed" },
  };
  size_t i;
  memcpy(compressed, HDR_200, sizeof(HDR_200));
  memcpy(compressed + sizeof(HDR_200), DATA_COMPRESSED, sizeof(DATA_COMPRESSED));
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    srv_t s;
    conn_rec_t r;
    call_t call;
    bt_grpc_conn_t *c;
    script_start(&s, SETTINGS, sizeof(SETTINGS), cases[i].script, cases[i].len);
    c = srv_open(&s, NULL, cases[i].open, &r, &call);
    run_until(&call.closed, 1, 5000);
    ok(call.closed == 1 && call.err == cases[i].err && call.status == cases[i].status &&
       call.nmsg == 0 && (!cases[i].says || strstr(call.message, cases[i].says)),
       "%s (err %d status %d: %s)", cases[i].what, call.err, call.status, call.message);
    is_int(r.ready, 1, "READY came with the server's SETTINGS");
    script_end(&s, c, &r);
  }
}

static void test_scripted(void) {
  srv_t s;
  conn_rec_t r;
  call_t call;
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_conn_t *c;
  uint64_t t0;

  /* Silence: the connect timeout. */
  script_start(&s, NULL, 0, NULL, 0);
  t0 = now_ms();
  o.connect_timeout_ms = 300;
  c = srv_open(&s, &o, 0, &r, &call);
  run_until(&r.closed, 1, 3000);
  is_int(r.closed_err, BT_ETIMEDOUT, "a server that never answers: ETIMEDOUT");
  ok(now_ms() - t0 >= 290 && now_ms() - t0 < 2000, "after the 300 ms connect timeout");
  ok(call.closed == 1 && call.err == BT_ETIMEDOUT, "the stream ends with it too");
  script_end(&s, c, &r);

  test_scripted_answers();

  /* GOAWAY with last stream id 0: our stream 1 was refused. */
  script_start(&s, SETTINGS, sizeof(SETTINGS), GOAWAY0, sizeof(GOAWAY0));
  c = srv_open(&s, NULL, 0, &r, &call);
  run_until(&call.closed, 1, 5000);
  is_int(r.goaway, 1, "GOAWAY: the event");
  ok(call.closed == 1 && call.err == BT_EUNAVAIL && call.unsent == 1,
     "a stream above last_stream_id ends EUNAVAIL, unsent (%s)", call.message);
  is_int(r.open_at_goaway, BT_EUNAVAIL, "after GOAWAY, bt_grpc_open gives EUNAVAIL");
  run_until(&r.closed, 1, 3000);
  ok(r.closed == 1 && r.closed_err == BT_EUNAVAIL,
     "with no stream left, the connection ends by itself: EUNAVAIL (%s)", r.closed_msg);
  script_end(&s, c, &r);

  /* The server closes after reading the request: ECONNRESET, not unsent. */
  script_start(&s, SETTINGS, sizeof(SETTINGS), NULL, 0);
  s.close_on_data = 1;
  c = srv_open(&s, NULL, 0, &r, &call);
  run_until(&r.closed, 1, 3000);
  ok(call.err == BT_ECONNRESET && call.unsent == 0,
     "a connection closed under a sent stream: ECONNRESET, not unsent (%s)", call.message);
  is_int(r.closed_err, BT_ECONNRESET, "CLOSED with ECONNRESET");
  script_end(&s, c, &r);

  /* SETTINGS, then silence under an open stream: the PING goes unanswered. */
  script_start(&s, SETTINGS, sizeof(SETTINGS), NULL, 0);
  t0 = now_ms();
  o.connect_timeout_ms = 5000;
  o.ping_interval_ms = 200;
  o.ping_timeout_ms = 300;
  c = srv_open(&s, &o, 0, &r, &call);
  run_until(&r.closed, 1, 8000);
  is_int(r.closed_err, BT_ETIMEDOUT, "an unanswered PING: ETIMEDOUT");
  ok(strstr(r.closed_msg, "PING") != NULL, "saying so: %s", r.closed_msg);
  ok(now_ms() - t0 >= 450 && now_ms() - t0 < 2500, "after interval + timeout (%llu ms)",
     (unsigned long long) (now_ms() - t0));
  ok(call.closed == 1 && call.err == BT_ETIMEDOUT, "its stream ends ETIMEDOUT");
  script_end(&s, c, &r);
}

/* PINGs answered at once go every ping_interval, also when ping_timeout is
 * longer (etcd.c makes it twice the connect timeout): the ACK brings the
 * timer back from the PING's timeout to the next PING. (It did not: the
 * PINGs went every ping_timeout, and a dead peer took up to twice that to
 * find.) */
static void test_ping_interval(void) {
  srv_t s;
  conn_rec_t r;
  call_t call;
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_conn_t *c;
  int i, even = 1;
  script_start(&s, SETTINGS, sizeof(SETTINGS), NULL, 0);
  s.ack_pings = 1;
  o.ping_interval_ms = 100;
  o.ping_timeout_ms = 1000;
  c = srv_open(&s, &o, 1, &r, &call);
  run_until(&s.npings, 4, 2500);
  ok(s.npings >= 4, "PINGs every 100 ms with a 1 s timeout, answered: 4 of them within 2.5 s "
     "(%d)", s.npings);
  for (i = 1; i < s.npings && i < 4; i++) {
    uint64_t gap = s.ping_at[i] - s.ping_at[i - 1];
    if (gap < 90 || gap > 500) {
      printf("# PING %d came %llu ms after the one before\n", i, (unsigned long long) gap);
      even = 0;
    }
  }
  ok(s.npings >= 4 && even, "each about ping_interval after the one before");
  ok(call.closed == 0 && r.closed == 0, "answered PINGs end nothing");
  script_end(&s, c, &r);
}

/* The server's PINGs are answered with their payloads, the newest held
 * (ACK_DELAY_MS, 50) so that a grpc-go server's flow-control PINGs do not
 * come with every request; an older one goes when a newer one comes. */
static void test_ping_ack(void) {
  static const uint8_t script[] = {
    0, 0, 0, 4, 0, 0, 0, 0, 0,                                   /* SETTINGS */
    0, 0, 8, 6, 0, 0, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h',   /* PING */
    0, 0, 8, 6, 0, 0, 0, 0, 0, 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p',   /* PING */
  };
  static const uint8_t ack1[] = { 0, 0, 8, 6, 1, 0, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h' };
  static const uint8_t ack2[] = { 0, 0, 8, 6, 1, 0, 0, 0, 0, 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p' };
  static srv_t s;
  conn_rec_t r;
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_conn_t *c;
  char url[64], msg[256];
  int err;
  uint64_t t0, t1 = 0, t2 = 0;
  memset(&s, 0, sizeof(s));
  s.on_accept = script; s.on_accept_len = sizeof(script);
  srv_start(&s);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", s.port);
  o.url = url;
  memset(&r, 0, sizeof(r));
  c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
  run_until(&r.ready, 1, 3000);
  t0 = now_ms();
  while ((!t1 || !t2) && now_ms() - t0 < 3000) {
    run_for(2);
    if (!t1 && memmem(s.rx, s.rxlen, ack1, sizeof(ack1))) t1 = now_ms();
    if (!t2 && memmem(s.rx, s.rxlen, ack2, sizeof(ack2))) t2 = now_ms();
  }
  ok(t1 && t2, "both PINGs ACKed with their own payloads");
  ok(t2 >= t0 + 40, "the newer ACK held about 50 ms (%llu ms)",
     (unsigned long long) (t2 ? t2 - t0 : 0));
  ok(t1 <= t2, "the older one first");
  bt_grpc_close(c);
  run_until(&r.closed, 1, 3000);
  srv_stop(&s);
}

int main(void) {
  const char *eps = getenv("BATON_ENDPOINTS");
  char url[256];
  loop = uv_default_loop();
  snprintf(prefix, sizeof(prefix), "/test-grpc/%d/", (int) getpid());

  test_bad_urls();
  test_refused();
  test_scripted();
  test_ping_interval();
  test_ping_ack();

  if (!eps || !*eps) {
    printf("# BATON_ENDPOINTS is not set: the etcd checks are skipped\n");
  } else {
    bt_grpc_conn_opts_t o = { 0 };
    conn_rec_t r;
    int err;
    char msg[256];
    bt_grpc_conn_t *c;
    snprintf(url, sizeof(url), "%.*s", (int) strcspn(eps, ","), eps);
    o.url = url;
    o.ping_interval_ms = 10000;
    o.ping_timeout_ms = 5000;
    memset(&r, 0, sizeof(r));
    c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
    ok(c != NULL, "connect to %s", url);
    if (c && strncmp(url, "http://", 7) == 0) {
      test_unary(c, &r);
      test_metadata_and_deadline(c, url);
      test_many(c);
      test_bidi(c);
      test_watch_events(c);
      test_big(c, url);
      test_server_ends_open_stream(c);
      ok(r.closed == 0 && r.goaway == 0, "the connection stayed up throughout");
      bt_grpc_close(c);
      run_until(&r.closed, 1, 5000);
      is_int(r.closed_err, 0, "closed by us: CLOSED with err 0");
      test_close_with_streams(url);
      test_closed_before_connected(url);
      test_localhost(url);
      test_closed_resolving(url);
      test_too_many_pings(url);
      test_paced_writes(url);
    }
  }
  run_for(20);
  is_int(uv_loop_close(loop), 0, "every handle closed");
  return tap_done();
}
