/*
 * gRPC over HTTP/2 on a libuv loop: one connection to one endpoint, every
 * call a stream on it. HTTP/2 is nghttp2's (its session fed from and to
 * libuv TCP, through OpenSSL memory BIOs for https with ALPN "h2"); this
 * file adds gRPC's framing (a 5-byte prefix per message, messages
 * reassembled across DATA frames), its headers and trailers, and a PING
 * that finds a dead connection. No threads; it never blocks.
 *
 * It knows nothing of etcd or protobuf: messages are bytes. etcd.c owns
 * endpoints, failover, authentication and what each call means.
 *
 * Lifetimes. A stream ends exactly once, through its on_close; a
 * connection ends exactly once, through its on_event(BT_GRPC_CLOSED),
 * after every stream of it ended. No callback runs from inside the call
 * that caused it (bt_grpc_open, bt_grpc_send, bt_grpc_cancel,
 * bt_grpc_close): failures found there are reported on a later loop turn.
 * (The one exception: bt_grpc_cancel's own on_close, see there.)
 */
#ifndef BATON_GRPC_H
#define BATON_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct bt_grpc_conn_s bt_grpc_conn_t;
typedef struct bt_grpc_stream_s bt_grpc_stream_t;

typedef struct {
  const char *url;            /* "http://host:port" or "https://host:port" */
  const char *cacert, *cert, *key;  /* PEM files for https, or NULL */
  long connect_timeout_ms;    /* TCP + TLS + HTTP/2 preface; default 1000 */
  long ping_interval_ms;      /* a PING after this long without a frame
                                 read, while a stream is open (etcd's h2c
                                 listener counts PINGs on an idle
                                 connection, or less than 5 s apart, as
                                 abuse: GOAWAY too_many_pings); 0 = none */
  long ping_timeout_ms;       /* the connection is dropped (BT_ETIMEDOUT)
                                 when a PING goes unanswered this long;
                                 default 20000 */
  size_t max_message;         /* largest message accepted; default 64 MiB */
} bt_grpc_conn_opts_t;

/* Connection events. */
enum {
  BT_GRPC_READY,   /* connected; streams opened before now are sent now */
  BT_GRPC_GOAWAY,  /* the server will take no new streams: open the next
                      ones elsewhere; streams it accepted go on (err 0;
                      msg has the code and debug data). Once none is
                      left the connection ends: CLOSED with EUNAVAIL */
  BT_GRPC_CLOSED   /* last, once: err is 0 after bt_grpc_close, else why
                      the connection failed (msg says, naming the url);
                      c is freed when the callback returns */
};
/* Messages (msg here, and an on_close's message when err != 0) read
 * "<url>: <bt_strerror(err)>" or "<url>: <bt_strerror(err)> (<detail>)",
 * e.g. "https://127.0.0.1:2379: tls error (SSL certificate problem: unable
 * to get local issuer certificate)"; GOAWAY's is "<url>: GOAWAY <code>[:
 * <debug data>]". */
typedef void (*bt_grpc_event_cb)(bt_grpc_conn_t *c, int event, int err,
                                 const char *msg, void *arg);

/** Starts connecting. Returns NULL with *err (BT_EINVAL for a malformed
 * url, BT_ENOTSUP for https when OpenSSL cannot be loaded, BT_ETLS for
 * unreadable certificates, BT_ENOMEM) and msg. */
bt_grpc_conn_t *bt_grpc_connect(uv_loop_t *loop, const bt_grpc_conn_opts_t *o,
                                bt_grpc_event_cb cb, void *arg, int *err,
                                char *msg, size_t msglen);

/** Ends every stream (BT_ECANCELED), closes the connection; on_event
 * CLOSED comes last, all on a later loop turn. Allowed until CLOSED has
 * come (also while a failed connection is ending: a no-op then), never
 * after. */
void bt_grpc_close(bt_grpc_conn_t *c);

/* A stream's callbacks. on_message gets each whole message (its bytes
 * valid during the call only). on_close comes once, last: err is a BT_E*
 * transport failure (the connection died, a timeout, a cancel), or 0 when
 * the server ended the stream, with status its grpc-status (0 = OK) and
 * message its grpc-message (percent-decoded, "" when absent). With err !=
 * 0, status is -1 and message says what failed, naming the url. The
 * errors: the connection's own (ECONNREFUSED, ETIMEDOUT, ECONNRESET,
 * ETLS, EPROTO...); ETIMEDOUT (the deadline); ECANCELED; EUNAVAIL (refused
 * by the server: REFUSED_STREAM, above a GOAWAY, HTTP 503); EPROTO (an
 * HTTP status other than 200, a reset without grpc-status, a compressed
 * message); ETOOLARGE (a message over max_message; the stream is reset,
 * the connection goes on). s is freed when on_close returns. */
typedef struct {
  void (*on_message)(bt_grpc_stream_t *s, const uint8_t *msg, size_t len,
                     void *arg);
  void (*on_close)(bt_grpc_stream_t *s, int err, int status,
                   const char *message, void *arg);
} bt_grpc_stream_cbs_t;

/** Opens a stream for method path ("/etcdserverpb.KV/Range") with extra
 * metadata (pairs "name", "value", ..., NULL; may be NULL) and a deadline
 * (timeout_ms > 0: the stream is cancelled with BT_ETIMEDOUT then, and
 * grpc-timeout is sent, 10% + 20 ms later, so that the server's own
 * deadline does not race ours; 0: none, for long-lived streams). Before the
 * connection is READY the stream waits and is sent then. Returns 0, or
 * BT_EUNAVAIL (after GOAWAY or bt_grpc_close, or once the connection
 * failed), BT_EINVAL (a path without '/', metadata names other than
 * 0-9 a-z _ - . or grpc-*, values other than printable ASCII), BT_ENOMEM;
 * then no callback comes. */
int bt_grpc_open(bt_grpc_conn_t *c, const char *path,
                 const char *const *metadata, long timeout_ms,
                 const bt_grpc_stream_cbs_t *cbs, void *arg,
                 bt_grpc_stream_t **out);

/** Queues one message (len bytes; framed here); end = 1 half-closes the
 * stream after it (a unary call sends one message with end = 1; msg NULL
 * and len 0 with end = 1 only half-closes). BT_EINVAL after the
 * half-close, BT_ECLOSED once the stream is ending. */
int bt_grpc_send(bt_grpc_stream_t *s, const uint8_t *msg, size_t len,
                 int end);

/** Cancels a stream (RST_STREAM CANCEL): on_close with BT_ECANCELED, now
 * if called from outside the stream's callbacks (the one exception to
 * "no callback from inside the call": the caller asked for it, and gets it
 * before bt_grpc_cancel returns), else when they return (no on_message
 * after it). A no-op on a stream already ending. */
void bt_grpc_cancel(bt_grpc_stream_t *s);

/** 1 when the stream's request surely never reached the server's
 * application: never sent, refused (REFUSED_STREAM), or above a GOAWAY's
 * last stream id. A failed call that is unsent may be retried anywhere.
 * Valid until on_close returns ("sent" means nghttp2 gave its HEADERS
 * to the socket). */
int bt_grpc_stream_unsent(const bt_grpc_stream_t *s);

/* What went over a connection so far, for tests (what a request costs the
 * server: each socket write is a segment the server wakes up for). */
typedef struct {
  uint64_t writes;            /* socket writes (uv_write calls) */
  uint64_t headers_out;       /* HEADERS frames sent (one per stream) */
  uint64_t pings_in;          /* the server's PINGs (not ACKs) */
  uint64_t ping_acks_out;     /* our ACKs to them */
} bt_grpc_stats_t;

/** Fills *st with c's counters. */
void bt_grpc_stats(const bt_grpc_conn_t *c, bt_grpc_stats_t *st);

/* ---- pure helpers (unit-tested, fuzzed) -------------------------------- */

/* gRPC's length-prefixed messages out of arbitrary DATA chunks. */
typedef struct {
  uint8_t hdr[5];
  size_t hdr_have;
  uint8_t *buf;               /* the message being reassembled */
  size_t len, have, cap;      /* its length, bytes so far, buf's size */
  size_t max;                 /* largest message accepted */
} bt__grpc_deframer_t;

/** Feeds len bytes; calls fn for each whole message. Returns 0, or
 * BT_EPROTO (a compressed message: we never ask for compression) or
 * BT_ETOOLARGE (over max), or fn's own nonzero return. */
int bt__grpc_deframe(bt__grpc_deframer_t *d, const uint8_t *p, size_t len,
                     int (*fn)(const uint8_t *msg, size_t len, void *arg),
                     void *arg);
void bt__grpc_deframer_free(bt__grpc_deframer_t *d);

/** grpc-message is percent-encoded: decodes src (n bytes) into dst
 * (dstlen bytes, NUL-terminated, cut if need be). */
void bt__grpc_percent_decode(const char *src, size_t n, char *dst,
                             size_t dstlen);

#endif
