/*
 * gRPC's pure helpers (runtime/core/grpc_frame.c), TAP: the deframer fed
 * in every split of a stream of messages, the compressed flag, the size
 * limit, a callback that stops it, a big message's buffer released, and
 * grpc-message's percent-decoding (bad escapes kept, the output cut to its
 * buffer). No network.
 */
#include "grpc.h"
#include "err.h"
#include "tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char got[1024];                  /* messages as "len:bytes|" */
  size_t len;
  int n, stop_at;
} rec_t;

static int rec(const uint8_t *m, size_t len, void *arg) {
  rec_t *r = arg;
  r->n++;
  r->len += (size_t) snprintf(r->got + r->len, sizeof(r->got) - r->len, "%zu:%.*s|", len,
                              (int) len, (const char *) m);
  return r->stop_at && r->n == r->stop_at ? 7 : 0;
}

/* Three messages: "foo", "" and "hello world". */
static const uint8_t STREAM[] = {
  0, 0, 0, 0, 3, 'f', 'o', 'o',
  0, 0, 0, 0, 0,
  0, 0, 0, 0, 11, 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd',
};
static const char WANT[] = "3:foo|0:|11:hello world|";

static void test_splits(void) {
  size_t n = sizeof(STREAM), i, j;
  int bad = 0, checked = 0;
  /* Every cut into three pieces (two cut points), and one byte at a time. */
  for (i = 0; i <= n; i++) {
    for (j = i; j <= n; j++) {
      bt__grpc_deframer_t d = { .max = 100 };
      rec_t r = { .len = 0 };
      int rc = bt__grpc_deframe(&d, STREAM, i, rec, &r);
      if (!rc) rc = bt__grpc_deframe(&d, STREAM + i, j - i, rec, &r);
      if (!rc) rc = bt__grpc_deframe(&d, STREAM + j, n - j, rec, &r);
      if (rc || strcmp(r.got, WANT) != 0 || d.hdr_have != 0) {
        if (!bad) printf("# split %zu/%zu: rc %d got %s\n", i, j, rc, r.got);
        bad++;
      }
      checked++;
      bt__grpc_deframer_free(&d);
    }
  }
  ok(bad == 0, "the same three messages from each of %d splits", checked);
  {
    bt__grpc_deframer_t d = { .max = 100 };
    rec_t r = { .len = 0 };
    for (i = 0; i < n; i++) bt__grpc_deframe(&d, STREAM + i, 1, rec, &r);
    is_str(r.got, WANT, "one byte at a time");
    ok(d.buf != NULL, "a split message was reassembled in the deframer's buffer");
    bt__grpc_deframer_free(&d);
    ok(d.buf == NULL && d.cap == 0, "freed");
  }
  {
    bt__grpc_deframer_t d = { .max = 100 };
    rec_t r = { .len = 0 };
    is_int(bt__grpc_deframe(&d, STREAM, 0, rec, &r), 0, "an empty chunk is fine");
    is_int(r.n, 0, "and gives nothing");
  }
}

static int count(const uint8_t *m, size_t len, void *arg) {
  *(size_t *) arg += len;
  return 0;
}

/* A message reassembled in a buffer over 1 MiB: the buffer goes once the
 * message is delivered (it stayed for the stream's life); a small one's
 * stays for the next message. */
static void test_buffer_released(void) {
  enum { BIG = 3 << 20 };
  uint8_t *m = calloc(1, 5 + BIG);
  bt__grpc_deframer_t d = { .max = (size_t) 64 << 20 };
  size_t got = 0;
  m[1] = (uint8_t) (BIG >> 24); m[2] = (uint8_t) (BIG >> 16);
  m[3] = (uint8_t) (BIG >> 8); m[4] = (uint8_t) BIG;
  bt__grpc_deframe(&d, m, 5 + BIG / 2, count, &got);
  ok(got == 0 && d.cap >= BIG / 2, "half of a 3 MiB message: in the deframer's buffer");
  bt__grpc_deframe(&d, m + 5 + BIG / 2, BIG - BIG / 2, count, &got);
  is_int(got, BIG, "the whole message delivered");
  ok(d.buf == NULL && d.cap == 0, "then its buffer is released (cap %zu)", d.cap);
  bt__grpc_deframe(&d, STREAM, 20, count, &got);
  bt__grpc_deframe(&d, STREAM + 20, sizeof(STREAM) - 20, count, &got);
  ok(d.buf != NULL && d.cap > 0, "a small split message's buffer is kept");
  bt__grpc_deframer_free(&d);
  free(m);
}

static void test_errors(void) {
  static const uint8_t compressed[] = { 1, 0, 0, 0, 1, 'x' };
  static const uint8_t big[] = { 0, 0, 0, 0, 11, 'h', 'e', 'l', 'l', 'o' };
  static const uint8_t huge[] = { 0, 0xff, 0xff, 0xff, 0xff };
  bt__grpc_deframer_t d = { .max = 10 };
  rec_t r = { .len = 0 };
  is_int(bt__grpc_deframe(&d, compressed, sizeof(compressed), rec, &r), BT_EPROTO,
         "a compressed message: EPROTO");
  is_int(r.n, 0, "nothing given");
  bt__grpc_deframer_free(&d);
  memset(&d, 0, sizeof(d));
  d.max = 10;
  is_int(bt__grpc_deframe(&d, big, 3, rec, &r), 0, "a partial prefix waits");
  is_int(bt__grpc_deframe(&d, big + 3, sizeof(big) - 3, rec, &r), BT_ETOOLARGE,
         "11 bytes over a limit of 10: ETOOLARGE, as soon as the prefix is whole");
  bt__grpc_deframer_free(&d);
  memset(&d, 0, sizeof(d));
  d.max = (size_t) 64 << 20;
  is_int(bt__grpc_deframe(&d, huge, sizeof(huge), rec, &r), BT_ETOOLARGE,
         "a 4 GiB length: ETOOLARGE, nothing allocated");
  ok(d.buf == NULL, "no buffer for the announced length");
  bt__grpc_deframer_free(&d);
  memset(&d, 0, sizeof(d));
  d.max = 10;
  {
    static const uint8_t exact[] = { 0, 0, 0, 0, 10, '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' };
    is_int(bt__grpc_deframe(&d, exact, sizeof(exact), rec, &r), 0, "exactly the limit is fine");
  }
  bt__grpc_deframer_free(&d);
  memset(&d, 0, sizeof(d));
  d.max = 100;
  memset(&r, 0, sizeof(r));
  r.stop_at = 1;
  is_int(bt__grpc_deframe(&d, STREAM, sizeof(STREAM), rec, &r), 7,
         "the callback's nonzero return stops it and is returned");
  is_int(r.n, 1, "after one message");
  bt__grpc_deframer_free(&d);
}

static void test_percent(void) {
  char out[64];
  bt__grpc_percent_decode("a%20b", 5, out, sizeof(out));
  is_str(out, "a b", "%%20 is a space");
  bt__grpc_percent_decode("A%2525B%25C3%25A9", 17, out, sizeof(out));
  is_str(out, "A%25B%C3%A9", "etcd's double-encoded method name decodes once");
  bt__grpc_percent_decode("%C3%A9t%c3%a9", 13, out, sizeof(out));
  is_str(out, "\xc3\xa9t\xc3\xa9", "UTF-8 bytes, upper and lower case hex");
  bt__grpc_percent_decode("100% %zz %4", 11, out, sizeof(out));
  is_str(out, "100% %zz %4", "bad escapes stay as they are");
  bt__grpc_percent_decode("%41%4", 5, out, sizeof(out));
  is_str(out, "A%4", "an escape cut at the end stays");
  bt__grpc_percent_decode("abcdef", 6, out, 4);
  is_str(out, "abc", "cut to the buffer, terminated");
  bt__grpc_percent_decode("abcdef", 3, out, sizeof(out));
  is_str(out, "abc", "n bytes only (no NUL needed)");
  out[0] = 'x';
  bt__grpc_percent_decode("abc", 3, out, 0);
  is_int(out[0], 'x', "a zero-size buffer is left alone");
  bt__grpc_percent_decode("", 0, out, sizeof(out));
  is_str(out, "", "empty");
}

int main(void) {
  test_splits();
  test_buffer_released();
  test_errors();
  test_percent();
  return tap_done();
}
