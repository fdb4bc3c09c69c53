/*
 * libFuzzer target for the C side of what etcd's gRPC API answers, above
 * the transport (grpc.c's framing has its own target): how baton maps a
 * gRPC status and grpc-message to BT_E* codes (bt_etcd_map_status), reads
 * a Watch stream's responses (bt__etcd_watch_res, on protobuf bytes
 * decoded by etcdpb.c as etcd.c does, and on JSON directly), reads int64
 * fields (bt_etcd_int64) of decoded answers, decodes base64 keys and
 * values (b64.c, what lua/baton/etcd.lua calls on every kv), and splits
 * endpoint lists.
 *
 * Input: two bytes (little-endian) whose value modulo 20 is a gRPC
 * status, then a body. Every function sees the body. Checked, besides
 * crashes, sanitizer reports and leaks:
 *   - map_status returns one of its documented codes whatever the status,
 *     message and buffer size, and always writes a NUL-terminated,
 *     non-empty message that fits;
 *   - a watch response that reads has revisions in 0..INT64_MAX-1 (so the
 *     watch's revision + 1 cannot overflow) and non-empty events only; a
 *     decoded protobuf WatchResponse always reads (etcdpb.c writes int64
 *     as decimal strings, events as an array);
 *   - a decoded LeaseKeepAliveResponse has an ID and a TTL that read;
 *   - base64 round-trips: encode then decode gives the bytes back, and a
 *     decoded input re-encodes to something that decodes the same; decode
 *     never writes past n / 4 * 3 bytes;
 *   - an endpoint list either fails with a message or gives http(s) URLs
 *     without a trailing slash that the HTTP client accepts.
 *
 *   make fuzz-etcd               builds build/fuzz/etcd_fuzz, runs 10 min
 * Crash inputs go to fuzz/regressions/etcd/, replayed with the seeds by
 * tests/c/test-etcd-fuzz.c on every `make test`.
 */
#include "b64.h"
#include "err.h"
#include "etcd_int.h"
#include "etcdpb.h"
#include "http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

static void check_map_status(int status, const char *body, size_t len) {
  static const int codes[] = {
    BT_ECOMPACTED, BT_EFUTUREREV, BT_ENOLEASE, BT_ETOOLARGE, BT_ENOSPACE,
    BT_ENOLEADER, BT_EACCES, BT_EAUTH, BT_ETIMEDOUT, BT_EUNAVAIL, BT_EINVAL,
    BT_EPROTO, BT_EETCD,
  };
  char msg[400], tiny[8], *text = malloc(len + 1);
  int err, known = 0;
  CHECK(text);
  memcpy(text, body, len);
  text[len] = 0;                  /* grpc-message: cut at a NUL as a header is */
  err = bt_etcd_map_status(status, text, msg, sizeof(msg));
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    known |= err == codes[i];
  CHECK(known);
  CHECK(memchr(msg, 0, sizeof(msg)) && msg[0]);
  memset(tiny, 'x', sizeof(tiny));
  CHECK(bt_etcd_map_status(status, text, tiny, sizeof(tiny)) == err);
  CHECK(memchr(tiny, 0, sizeof(tiny)) && !strncmp(tiny, msg, strlen(tiny)));
  CHECK(bt_etcd_map_status(status, text, NULL, 0) == err);
  free(text);
}

/* Reads a decoded watch response; decoded says it came from etcdpb.c,
 * which must always give a readable one. */
static void check_watch_res(const cJSON *j, int decoded) {
  bt__watch_res_t r;
  if (bt__etcd_watch_res(j, &r)) {
    CHECK(!decoded);
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

/* Decodes a base64 string of n bytes into a buffer of exactly n / 4 * 3
 * bytes; checks that what decodes re-encodes to an equivalent string. */
static void check_unb64(const char *s, size_t n) {
  size_t cap = n / 4 * 3;
  unsigned char *dec = malloc(cap ? cap : 1);
  long len;
  CHECK(dec);
  len = bt_b64_decode(dec, s, n);
  CHECK(len >= -1 && len <= (long) cap);
  if (len >= 0) {
    char *enc = malloc(bt_b64_enclen((size_t) len));
    unsigned char *again = malloc((size_t) len + 1);
    CHECK(enc && again);
    CHECK(bt_b64_encode(enc, dec, (size_t) len) == n);
    CHECK(bt_b64_decode(again, enc, n) == len &&
          !memcmp(again, dec, (size_t) len));
    free(enc);
    free(again);
  }
  free(dec);
}

static void check_b64(const uint8_t *p, size_t n) {
  size_t need = bt_b64_enclen(n);
  char *enc = malloc(need);
  unsigned char *dec = malloc(n + 1);
  CHECK(enc && dec);
  CHECK(bt_b64_encode(enc, p, n) == need - 1 && enc[need - 1] == 0);
  CHECK(bt_b64_decode(dec, enc, need - 1) == (long) n && !memcmp(dec, p, n));
  free(enc);
  free(dec);
  check_unb64((const char *) p, n);
}

/* Walks a parsed answer: every member as an int64 field (bt_etcd_int64
 * never fails other than with EPROTO, and leaves 0 then), every "key" and
 * "value" string through base64 as the Lua side decodes kvs. */
static void walk(const cJSON *j, int depth) {
  const cJSON *c;
  if (depth > 64) return;
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

/* 1 when a decoded response carries a revision etcd.c refuses (negative
 * or INT64_MAX: compact_revision or the last event's mod_revision). */
static int big_rev(const cJSON *j) {
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "events");
  int64_t v = 0;
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

static void check_endpoints(const char *list) {
  char **eps, msg[300];
  int n;
  msg[0] = 'x';
  n = bt_etcd_parse_endpoints(list, &eps, msg, sizeof(msg));
  CHECK(n >= 0);
  if (n == 0) {
    CHECK(eps == NULL && memchr(msg, 0, sizeof(msg)) && msg[0] != 'x');
    return;
  }
  for (int i = 0; i < n; i++) {
    size_t len = strlen(eps[i]);
    CHECK(!strncmp(eps[i], "http://", 7) || !strncmp(eps[i], "https://", 8));
    CHECK(eps[i][len - 1] != '/' && bt_http_url_ok(eps[i]));
  }
  bt_etcd_free_endpoints(eps, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const bt_etcdpb_method_t *watch = bt_etcdpb_method("/v3/watch");
  const bt_etcdpb_method_t *keep = bt_etcdpb_method("/v3/lease/keepalive");
  int status, err;
  const char *body;
  size_t len;
  char *str;
  cJSON *j;

  if (size < 2) return 0;
  status = (data[0] | data[1] << 8) % 20;
  body = (const char *) data + 2;
  len = size - 2;

  check_map_status(status, body, len);
  if ((j = bt_etcdpb_decode(watch->res, data + 2, len, &err))) {
    /* revisions beyond INT64_MAX - 1 are etcd's to send and ours to
     * refuse: only the other invariants hold for any decoded bytes */
    int64_t rev = 0;
    bt_etcd_int64(cJSON_GetObjectItemCaseSensitive(j, "header"), "revision", &rev);
    check_watch_res(j, rev >= 0 && rev < INT64_MAX && !big_rev(j));
    walk(j, 0);
    cJSON_Delete(j);
  }
  if ((j = bt_etcdpb_decode(keep->res, data + 2, len, &err))) {
    int64_t v;
    CHECK(bt_etcd_int64(j, "ID", &v) == 0 && bt_etcd_int64(j, "TTL", &v) == 0);
    cJSON_Delete(j);
  }
  check_b64(data + 2, len);
  if ((j = cJSON_ParseWithLength(body, len))) {
    check_watch_res(j, 0);
    walk(j, 0);
    cJSON_Delete(j);
  }
  str = malloc(len + 1);
  CHECK(str);
  memcpy(str, body, len);
  str[len] = 0;
  check_endpoints(str);
  free(str);
  return 0;
}
