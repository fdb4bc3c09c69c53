/*
 * libFuzzer target for what a gRPC server sends baton, above HTTP/2: the
 * DATA bytes of a stream, cut into messages by bt__grpc_deframe
 * (runtime/core/grpc_frame.c), and each message read as etcd's protobuf
 * and turned into the gateway's JSON by bt_etcdpb_decode
 * (runtime/core/etcdpb.c).
 *
 * Input: one byte that seeds how the rest is split into chunks (as DATA
 * frames split it), then the bytes of the stream. Each whole message the
 * deframer hands over, and the rest of the input as one message too, is
 * decoded as every message of the path table (requests and answers, the
 * WatchResponse among them). Checked, besides crashes, sanitizer reports
 * and leaks:
 *   - the deframer returns 0, BT_EPROTO or BT_ETOOLARGE, never hands over
 *     more than its max, and reassembles the same messages whatever the
 *     split;
 *   - decode returns an object or NULL with BT_EPROTO (never BT_ENOMEM
 *     here), and the object prints;
 *   - what decode gives, encode takes back (no error), and that decodes
 *     to the same JSON: the two walkers agree on every message;
 *   - every member of a decoded message reads as an int64 field
 *     (bt_etcd_int64 fails with BT_EPROTO only, leaving 0) and every "key"
 *     and "value" goes through base64 as lua/baton/etcd.lua decodes kvs;
 *   - a decoded WatchResponse reads as etcd.c reads the Watch stream
 *     (bt__etcd_watch_res), with revisions in 0..INT64_MAX-1 (so that the
 *     watch's revision + 1 cannot overflow) and non-empty events only,
 *     unless it carries a revision etcd.c refuses (negative or INT64_MAX);
 *   - a decoded LeaseKeepAliveResponse has an ID and a TTL that read.
 *
 *   make fuzz-etcdpb             builds build/fuzz/etcdpb_fuzz, runs 10 min
 * Seeds: fuzz/corpus/etcdpb/, real etcd 3.4.23 answers as gRPC frames them
 * (tests/etcdpb/capture.sh). Crash inputs go to fuzz/regressions/etcdpb/,
 * replayed with the seeds by tests/c/test-etcdpb-fuzz.c on every `make test`.
 */
#include "b64.h"
#include "err.h"
#include "etcd_int.h"
#include "etcdpb.h"
#include "grpc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)
#define MAX_MESSAGE (1u << 20)

/* Every distinct message descriptor of the path table. */
static const ProtobufCMessageDescriptor *descs[128];
static size_t n_descs;

static void add_desc(const ProtobufCMessageDescriptor *d) {
  for (size_t i = 0; i < n_descs; i++)
    if (descs[i] == d) return;
  if (n_descs < sizeof(descs) / sizeof(descs[0])) descs[n_descs++] = d;
}

static void init_descs(void) {
  static const char *const paths[] = {
    "/v3/kv/range", "/v3/kv/put", "/v3/kv/deleterange", "/v3/kv/txn",
    "/v3/kv/compaction", "/v3/watch", "/v3/lease/grant", "/v3/lease/revoke",
    "/v3/lease/keepalive", "/v3/lease/timetolive", "/v3/lease/leases",
    "/v3/maintenance/status", "/v3/auth/authenticate",
  };
  if (n_descs) return;
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    const bt_etcdpb_method_t *m = bt_etcdpb_method(paths[i]);
    CHECK(m);
    add_desc(m->res);
    add_desc(m->req);
  }
}

/* Reads a decoded WatchResponse as etcd.c does; readable says that its
 * revisions are ones etcd.c accepts, so that it must read. */
static void check_watch_res(const cJSON *j, int readable) {
  bt__watch_res_t r;
  if (bt__etcd_watch_res(j, &r)) {
    CHECK(!readable);
    return;
  }
  CHECK(r.cancel_reason);
  CHECK(r.revision >= 0 && r.revision < INT64_MAX);
  CHECK(r.compact_revision >= 0 && r.compact_revision < INT64_MAX);
  CHECK(r.last_mod >= 0 && r.last_mod < INT64_MAX);
  CHECK(!r.events || (cJSON_IsArray(r.events) &&
                      cJSON_GetArraySize(r.events) > 0));
  CHECK(r.events || r.last_mod == 0);
}

/* 1 when a decoded WatchResponse carries a revision etcd.c refuses
 * (negative or INT64_MAX: the header's, compact_revision or the last
 * event's mod_revision). */
static int big_rev(const cJSON *j) {
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "events");
  int64_t v = 0;
  bt_etcd_int64(cJSON_GetObjectItemCaseSensitive(j, "header"), "revision", &v);
  if (v < 0 || v == INT64_MAX) return 1;
  v = 0;
  bt_etcd_int64(j, "compact_revision", &v);
  if (v < 0 || v == INT64_MAX) return 1;
  if (cJSON_GetArraySize(ev) > 0) {
    const cJSON *last = cJSON_GetArrayItem(ev, cJSON_GetArraySize(ev) - 1);
    v = 0;
    bt_etcd_int64(cJSON_GetObjectItemCaseSensitive(last, "kv"), "mod_revision", &v);
    if (v < 0 || v == INT64_MAX) return 1;
  }
  return 0;
}

/* Decodes a base64 string of n bytes into a buffer of exactly n / 4 * 3
 * bytes; what decodes re-encodes to the same string (etcdpb.c writes
 * padded standard base64). */
static void check_unb64(const char *s, size_t n) {
  size_t cap = n / 4 * 3;
  unsigned char *dec = malloc(cap ? cap : 1);
  long len;
  CHECK(dec);
  len = bt_b64_decode(dec, s, n);
  CHECK(len >= 0 && len <= (long) cap);
  {
    char *enc = malloc(bt_b64_enclen((size_t) len));
    CHECK(enc);
    CHECK(bt_b64_encode(enc, dec, (size_t) len) == n && !memcmp(enc, s, n));
    free(enc);
  }
  free(dec);
}

/* Walks a decoded message: every member as an int64 field, every "key"
 * and "value" string through base64. */
static void walk(const cJSON *j, int depth) {
  const cJSON *c;
  if (depth > BT_ETCDPB_MAX_DEPTH * 3) return;
  for (c = j->child; c; c = c->next) {
    if (cJSON_IsObject(j) && c->string) {
      int64_t v = 1;
      int rc = bt_etcd_int64(j, c->string, &v);
      CHECK(rc == 0 || (rc == BT_EPROTO && v == 0));
      if (cJSON_IsString(c) && (!strcmp(c->string, "key") ||
                                !strcmp(c->string, "value")))
        check_unb64(c->valuestring, strlen(c->valuestring));
    }
    walk(c, depth + 1);
  }
}

/* What etcd.c and lua/baton/etcd.lua read of a decoded message d. */
static void check_read(const ProtobufCMessageDescriptor *d, const cJSON *j) {
  static const ProtobufCMessageDescriptor *watch, *keep;
  if (!watch) {
    watch = bt_etcdpb_method("/v3/watch")->res;
    keep = bt_etcdpb_method("/v3/lease/keepalive")->res;
  }
  walk(j, 0);
  if (d == watch) check_watch_res(j, !big_rev(j));
  if (d == keep) {
    int64_t v;
    CHECK(bt_etcd_int64(j, "ID", &v) == 0 && bt_etcd_int64(j, "TTL", &v) == 0);
  }
}

static void decode_all(const uint8_t *msg, size_t len) {
  for (size_t i = 0; i < n_descs; i++) {
    int err = 0, err2 = 0, rc;
    char *text, emsg[256];
    uint8_t *again = NULL;
    size_t alen = 0;
    cJSON *j = bt_etcdpb_decode(descs[i], msg, len, &err), *j2;
    if (!j) {
      CHECK(err == BT_EPROTO);
      continue;
    }
    CHECK(cJSON_IsObject(j));
    text = cJSON_PrintUnformatted(j);
    CHECK(text);
    free(text);
    check_read(descs[i], j);
    rc = bt_etcdpb_encode(descs[i], j, &again, &alen, emsg, sizeof emsg);
    CHECK(rc == 0);
    j2 = bt_etcdpb_decode(descs[i], again, alen, &err2);
    CHECK(j2 && cJSON_Compare(j, j2, 1));
    free(again);
    cJSON_Delete(j);
    cJSON_Delete(j2);
  }
}

/* The messages of one pass, to compare two splits. */
typedef struct {
  uint64_t hash;
  size_t count, bytes;
  int decode;
} seen_t;

static int on_message(const uint8_t *msg, size_t len, void *arg) {
  seen_t *s = arg;
  CHECK(len <= MAX_MESSAGE);
  s->count++;
  s->bytes += len;
  s->hash = s->hash * 1000003u ^ len;
  for (size_t i = 0; i < len; i++) s->hash = (s->hash ^ msg[i]) * 1099511628211u;
  if (s->decode) decode_all(msg, len);
  return 0;
}

/* Feeds data in chunks whose sizes come from seed (0: all at once). */
static int feed(const uint8_t *data, size_t size, unsigned seed, seen_t *s) {
  bt__grpc_deframer_t d;
  uint32_t x = seed * 2654435761u + 1;
  size_t off = 0;
  int rc = 0;
  memset(&d, 0, sizeof d);
  d.max = MAX_MESSAGE;
  while (off < size && rc == 0) {
    size_t n = size - off;
    if (seed) {
      x ^= x << 13; x ^= x >> 17; x ^= x << 5;
      n = (x & 7) == 0 ? (x >> 8) % 4096 + 1 : (x >> 8) % 9 + 1;
      if (n > size - off) n = size - off;
    }
    rc = bt__grpc_deframe(&d, data + off, n, on_message, s);
    off += n;
  }
  bt__grpc_deframer_free(&d);
  CHECK(rc == 0 || rc == BT_EPROTO || rc == BT_ETOOLARGE);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  seen_t a, b;
  int ra, rb;
  init_descs();
  if (size < 1) return 0;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.decode = 1;
  ra = feed(data + 1, size - 1, data[0], &a);
  rb = feed(data + 1, size - 1, 0, &b);
  CHECK(ra == rb && a.count == b.count && a.bytes == b.bytes && a.hash == b.hash);
  if (size - 1 <= MAX_MESSAGE) decode_all(data + 1, size - 1);
  return 0;
}
