/*
 * libFuzzer target for gRPC's message framing out of HTTP/2 DATA chunks
 * (bt__grpc_deframe in runtime/core/grpc_frame.c) and grpc-message's
 * percent-decoding (bt__grpc_percent_decode): both read bytes a server
 * sends.
 *
 * The input: byte 0 picks the size limit (0..255 bytes, or 64 KiB when
 * odd and above 127), byte 1 seeds the chunk sizes, the rest is the
 * stream's bytes. The checks: fed whole and fed in the seeded chunks, the
 * deframer gives the same messages (their lengths and bytes) and the same
 * result; no message is over the limit; a compressed flag is EPROTO and
 * an oversized length ETOOLARGE, and nothing is given after an error.
 * Percent-decoding never writes more than the buffer, always terminates
 * it, never grows the text, and leaves text without '%' as it is.
 *
 *   make fuzz-grpc               builds build/fuzz/grpc_fuzz, runs 10 min
 *   make fuzz-grpc FUZZ_TIME=60  shorter
 * Failing inputs go to fuzz/regressions/grpc/ and are replayed, with the
 * seeds of fuzz/corpus/grpc/, by tests/c/test-grpc-fuzz.c on `make test`.
 */
#include "err.h"
#include "grpc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                       \
  do {                                                                 \
    if (!(c)) {                                                        \
      fprintf(stderr, "grpc_fuzz: check failed: %s (line %d)\n", #c,   \
              __LINE__);                                               \
      abort();                                                         \
    }                                                                  \
  } while (0)

typedef struct {
  uint8_t *out;                    /* every message: 4-byte length + bytes */
  size_t len, cap;
  size_t n, max;
} record_t;

static int record(const uint8_t *m, size_t len, void *arg) {
  record_t *r = arg;
  CHECK(m != NULL);
  CHECK(len <= r->max);
  if (r->len + 4 + len > r->cap) {
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + 4 + len) cap *= 2;
    r->out = realloc(r->out, cap);
    CHECK(r->out != NULL);
    r->cap = cap;
  }
  memcpy(r->out + r->len, &len, 4);
  memcpy(r->out + r->len + 4, m, len);
  r->len += 4 + len;
  r->n++;
  return 0;
}

/* Feeds p in chunks whose sizes come from seed; the result of the first
 * failing feed, after which nothing more is fed. */
static int feed(bt__grpc_deframer_t *d, const uint8_t *p, size_t n, unsigned seed,
                record_t *r) {
  size_t off = 0;
  while (off < n) {
    size_t k = seed ? 1 + (seed % 7) : n - off;
    int rc;
    if (k > n - off) k = n - off;
    seed = seed * 1103515245u + 12345u;
    seed = (seed >> 16) & 0x7fff;
    if (seed == 0) seed = 1;
    rc = bt__grpc_deframe(d, p + off, k, record, r);
    if (rc) return rc;
    off += k;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bt__grpc_deframer_t a, b;
  record_t ra, rb;
  int rca, rcb;
  size_t max;
  if (size < 2) return 0;
  max = (data[0] & 1) && data[0] > 127 ? 65536 : data[0];
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  memset(&ra, 0, sizeof(ra));
  memset(&rb, 0, sizeof(rb));
  a.max = b.max = ra.max = rb.max = max;
  rca = feed(&a, data + 2, size - 2, 0, &ra);
  rcb = feed(&b, data + 2, size - 2, data[1] ? data[1] : 1, &rb);
  CHECK(rca == rcb);
  CHECK(rca == 0 || rca == BT_EPROTO || rca == BT_ETOOLARGE);
  CHECK(ra.n == rb.n && ra.len == rb.len);
  CHECK(ra.len == 0 || memcmp(ra.out, rb.out, ra.len) == 0);
  bt__grpc_deframer_free(&a);
  bt__grpc_deframer_free(&b);
  free(ra.out);
  free(rb.out);

  {
    size_t n = size - 2, dl = data[1] % 64;
    char *dst = malloc(dl + 1), *dst2 = malloc(n + 1);
    CHECK(dst && dst2);
    dst[dl] = 'Z';                 /* a guard byte past dstlen */
    bt__grpc_percent_decode((const char *) data + 2, n, dst, dl);
    CHECK(dst[dl] == 'Z');
    if (dl) CHECK(strlen(dst) < dl);
    bt__grpc_percent_decode((const char *) data + 2, n, dst2, n + 1);
    if (!memchr(data + 2, '%', n) && !memchr(data + 2, 0, n))
      CHECK(strlen(dst2) == n && memcmp(dst2, data + 2, n) == 0);
    CHECK(strlen(dst2) <= n);
    free(dst);
    free(dst2);
  }
  return 0;
}
