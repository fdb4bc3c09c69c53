/*
 * libFuzzer target for the etcd client's pure helpers that read what
 * etcd (or the operator) says, above the transport: how baton maps a
 * call's gRPC status and grpc-message to BT_E* codes (bt_etcd_map_status),
 * base64 (b64.c, what lua/baton/etcd.lua calls on every kv) and endpoint
 * lists. (etcd's protobuf answers, the Watch stream's responses among
 * them, are fuzz/etcdpb_fuzz.c's.)
 *
 * Input: two bytes (little-endian) whose value modulo 20 is a gRPC
 * status (0, OK, is never mapped: map_status is not called then), then a
 * body: the grpc-message (cut at a NUL, as a header is),
 * and the bytes that base64 and the endpoint list see. Checked, besides
 * crashes, sanitizer reports and leaks:
 *   - map_status returns one of its documented codes whatever the status,
 *     message and buffer size, and always writes a NUL-terminated,
 *     non-empty message that fits;
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
#include "etcd.h"
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
  int status;
  const char *body;
  size_t len;
  char *str;

  if (size < 2) return 0;
  status = (data[0] | data[1] << 8) % 20;
  body = (const char *) data + 2;
  len = size - 2;

  if (status) check_map_status(status, body, len); /* 0 is OK: never mapped */
  check_b64(data + 2, len);
  str = malloc(len + 1);
  CHECK(str);
  memcpy(str, body, len);
  str[len] = 0;
  check_endpoints(str);
  free(str);
  return 0;
}
