/*
 * etcd v3 client over etcd's native gRPC API (grpc.h, etcdpb.h), on a libuv
 * loop.
 *
 * The engine moves requests and streams: it picks the endpoint, fails over
 * to the next one when that is safe, authenticates (the "token" metadata,
 * re-authenticating when etcd says the token is invalid), maps gRPC
 * statuses to BT_E* codes, keeps leases alive and resumes watches. The
 * requests of its own streams (watch creates and cancels, lease renewals)
 * it packs itself; bt_etcd_call takes any request as a JSON body in the
 * form of etcd's JSON gateway and gives the answer in that form (etcdpb.h
 * converts to and from protobuf), so that its callers need not know
 * protobuf.
 */
#ifndef BATON_ETCD_H
#define BATON_ETCD_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct bt_etcd_s bt_etcd_t;
typedef struct bt_etcd_call_s bt_etcd_call_t;
typedef struct bt_etcd_watch_s bt_etcd_watch_t;
typedef struct bt_etcd_keep_s bt_etcd_keep_t;

typedef struct {
  const char *endpoints;      /* comma-separated URLs */
  const char *user, *password;
  const char *cacert, *cert, *key;
  long timeout_ms;            /* per request; default 5000 */
  long connect_timeout_ms;    /* default 1000 */
} bt_etcd_opts_t;

/* Result of a call, valid during the callback only. json is the response
 * object on success (in the gateway's form: for "/v3/lease/keepalive" what
 * the gateway had as "result"), NULL on failure. msg is a one-line
 * description naming the endpoint, "" on success. */
typedef struct {
  int err;
  cJSON *json;
  const char *msg;
  const char *endpoint;
} bt_etcd_res_t;

typedef void (*bt_etcd_cb)(const bt_etcd_res_t *res, void *arg);

/* Call flags. */
enum {
  /* Safe to repeat: retried on the next endpoint after any failure. Without
   * it a call moves on only when it provably never reached etcd. */
  BT_ETCD_IDEMPOTENT = 1
};

/** Makes a client. *err gets a BT_E* code and NULL is returned when the
 * options are unusable (no endpoint, a malformed URL). */
bt_etcd_t *bt_etcd_new(uv_loop_t *loop, const bt_etcd_opts_t *o, int *err,
                       char *msg, size_t msglen);

/** Cancels everything in flight (callbacks get BT_ECANCELED), stops lease
 * keepalives and watches, and frees the client once its handles closed. */
void bt_etcd_close(bt_etcd_t *c);

/** Sends body (a JSON object in the gateway's form, read during the call
 * only) as the request the gateway path names ("/v3/kv/range" ->
 * KV/Range); cb runs once, on a later loop turn. An unknown path or a body
 * that does not fit the request is answered with BT_EINVAL and a message.
 * "/v3/lease/keepalive" is answered from the client's LeaseKeepAlive
 * stream (the gateway's "result" object). */
int bt_etcd_call(bt_etcd_t *c, const char *path, const cJSON *body, int flags,
                 bt_etcd_cb cb, void *arg, bt_etcd_call_t **out);

/** Cancels a call: its callback runs with BT_ECANCELED. */
void bt_etcd_call_cancel(bt_etcd_call_t *call);

/** The endpoint currently preferred. */
const char *bt_etcd_endpoint(const bt_etcd_t *c);

/* ---- watches ---------------------------------------------------------- */

typedef struct {
  const char *key;            /* bytes */
  size_t key_len;
  const char *range_end;      /* bytes or NULL */
  size_t range_end_len;
  int64_t start_revision;     /* 0 = from now */
  int prev_kv;
  int no_put, no_delete;      /* filters */
  long idle_ms;               /* created again when silent this long (on
                                 the next endpoint if the client moved
                                 there); default 660000 (etcd's 10 min
                                 progress notifications + margin) */
} bt_etcd_watch_opts_t;

/* Watch events:
 *  - BT_WATCH_CREATED once the first stream is established (revision = the
 *    store revision the watch starts after);
 *  - BT_WATCH_EVENTS with json = the response's "events" array;
 *  - BT_WATCH_COMPACTED when the next revision to deliver was compacted
 *    (revision = the compact revision): the watch has stopped;
 *  - BT_WATCH_ERROR for a failure the watch cannot recover from (err, msg):
 *    it has stopped;
 *  - BT_WATCH_CLOSED last, once, after bt_etcd_watch_cancel or any stop. */
enum { BT_WATCH_CREATED, BT_WATCH_EVENTS, BT_WATCH_COMPACTED, BT_WATCH_ERROR,
       BT_WATCH_CLOSED };

typedef void (*bt_etcd_watch_cb)(bt_etcd_watch_t *w, int kind, int err,
                                 cJSON *json, int64_t revision,
                                 const char *msg, void *arg);

/** Starts a watch; it reconnects by itself (next endpoint, from the last
 * revision seen + 1) until cancelled, compacted or failed for good. */
int bt_etcd_watch(bt_etcd_t *c, const bt_etcd_watch_opts_t *o,
                  bt_etcd_watch_cb cb, void *arg, bt_etcd_watch_t **out);

/** Stops a watch; BT_WATCH_CLOSED is delivered (now, or once the current
 * callback returns). */
void bt_etcd_watch_cancel(bt_etcd_watch_t *w);

/** The revision the next event will have at least (last seen + 1). */
int64_t bt_etcd_watch_next_revision(const bt_etcd_watch_t *w);

/** The store revision when etcd confirmed the watch (the header of its
 * first created response). A watch that starts at or before it is one etcd
 * catches up on in a loop that runs every 100 ms, so its first events can
 * come that much later than the writes. */
int64_t bt_etcd_watch_created_revision(const bt_etcd_watch_t *w);

/** Number of times the stream was (re)established. */
int bt_etcd_watch_connects(const bt_etcd_watch_t *w);

/* ---- lease keepalive -------------------------------------------------- */

/* Called when the lease is lost (err = BT_ELOST: etcd answered TTL 0, or no
 * keepalive succeeded for longer than the TTL minus a margin, measured on the
 * monotonic clock); then, always last and once, with BT_ECANCELED when the
 * keeper is freed (after a loss or bt_etcd_keep_stop). */
typedef void (*bt_etcd_keep_cb)(bt_etcd_keep_t *k, int err, const char *msg,
                                void *arg);

/** Keeps lease id (decimal string) alive every ttl/3 seconds. */
int bt_etcd_keep(bt_etcd_t *c, const char *id, int64_t ttl,
                 bt_etcd_keep_cb cb, void *arg, bt_etcd_keep_t **out);

/** Stops the keepalive; the callback runs with BT_ECANCELED. */
void bt_etcd_keep_stop(bt_etcd_keep_t *k);

/** Monotonic ms (uv_hrtime based) until which the lease is surely still
 * alive on the server, as far as this client knows, with a safety margin:
 * the send time of the last acknowledged renewal + TTL - margin. At that
 * moment the keeper declares the lease lost. */
uint64_t bt_etcd_keep_deadline(const bt_etcd_keep_t *k);

/** Declares the lease lost now (why says how the caller knows: its key
 * on the lease was deleted, say), as if the keepalive had found out. */
void bt_etcd_keep_lose(bt_etcd_keep_t *k, const char *why);

/** Makes this keepalive the publisher of the process's fence board
 * (fence.h, created if needed): its deadline after every renewal, 0 once
 * the lease is lost or the keepalive stopped. Returns 0 or BT_E*. */
int bt_etcd_keep_fence(bt_etcd_keep_t *k);

/* ---- pure helpers (unit-tested) --------------------------------------- */

/** Maps a call's gRPC status (non-zero) and grpc-message to a BT_E* code
 * and writes the message (etcd's own text, or a stand-in when empty) to
 * msg. */
int bt_etcd_map_status(int status, const char *message, char *msg,
                       size_t msglen);

/** Reads an int64 that etcd sends as a JSON string (or number); missing
 * means 0. Returns 0, or BT_EPROTO if present but malformed. */
int bt_etcd_int64(const cJSON *obj, const char *name, int64_t *out);

/** Splits a comma-separated endpoint list; returns the count (0 on a
 * malformed entry, with msg saying which). The array and strings are
 * malloc'd; free with bt_etcd_free_endpoints. */
int bt_etcd_parse_endpoints(const char *list, char ***out, char *msg,
                            size_t msglen);
void bt_etcd_free_endpoints(char **eps, int n);

#endif
