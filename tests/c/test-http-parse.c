/*
 * The HTTP/1.1 response parser (runtime/core/http_parse.c) on its own (TAP):
 * what tests/c/test-http.c cannot reach through a socket cheaply, above all
 * the size limits on a line and on the header block, which need more bytes
 * than the fuzz target's inputs carry.
 */
#include "http_int.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int ev;                   /* the last event: MORE, DONE or ERROR */
  size_t body, left;        /* body bytes; bytes after DONE */
  bt__http_parser_t p;
  bt__buf_t head;
} run_t;

/* Feeds s in pieces of at most piece bytes until DONE or ERROR. */
static void run(run_t *r, const char *s, size_t n, size_t piece,
                int head_only) {
  memset(r, 0, sizeof(*r));
  bt__http_parser_reset(&r->p, &r->head, head_only);
  r->ev = BT__HTTP_MORE;
  while (n && r->ev == BT__HTTP_MORE) {
    size_t k = n < piece ? n : piece, used;
    const char *q = s, *b;
    size_t bl;
    s += k;
    n -= k;
    for (;;) {
      int ev = bt__http_parse(&r->p, q, k, &used, &b, &bl);
      q += used;
      k -= used;
      if (ev == BT__HTTP_BODY) r->body += bl;
      if (ev == BT__HTTP_HEAD || ev == BT__HTTP_BODY) continue;
      r->ev = ev;
      if (ev == BT__HTTP_DONE) r->left = k + n;
      break;
    }
  }
}

static void run_free(run_t *r) {
  bt__http_parser_free(&r->p);
  free(r->head.p);
}

/* "HTTP/1.1 200 OK\r\n" + count lines "X-Pad-N: <width x's>\r\n" + end. */
static char *padded(int count, size_t width, const char *end, size_t *len) {
  size_t cap = 64 + (size_t) count * (width + 32) + strlen(end), n = 0;
  char *s = malloc(cap);
  n += (size_t) sprintf(s, "HTTP/1.1 200 OK\r\n");
  for (int i = 0; i < count; i++) {
    n += (size_t) sprintf(s + n, "X-Pad-%d: ", i);
    memset(s + n, 'x', width);
    n += width;
    n += (size_t) sprintf(s + n, "\r\n");
  }
  n += (size_t) sprintf(s + n, "%s", end);
  *len = n;
  return s;
}

int main(void) {
  run_t r;
  size_t n;
  char *s;

  /* a header line longer than BT_HTTP_MAX_HEAD, arriving in 64 KiB reads */
  s = padded(1, BT_HTTP_MAX_HEAD + 10, "\r\n", &n);
  run(&r, s, n, 64 << 10, 0);
  is_int(r.ev, BT__HTTP_ERROR, "a 256 KiB header line is refused");
  is_str(r.p.error, "line too long", "as a line too long");
  run_free(&r);
  free(s);

  /* many short headers adding up to more than the limit */
  s = padded(300, 1000, "\r\n", &n);
  run(&r, s, n, 64 << 10, 0);
  is_int(r.ev, BT__HTTP_ERROR, "a header block over 256 KiB is refused");
  is_str(r.p.error, "header block too large", "as a header block too large");
  run_free(&r);
  free(s);

  /* just under the limit passes, and the body follows */
  s = padded(200, 1000, "Content-Length: 2\r\n\r\nok", &n);
  run(&r, s, n, 4096, 0);
  is_int(r.ev, BT__HTTP_DONE, "a 200 KiB header block is fine");
  ok(r.body == 2 && r.head.len > 200000, "with its body and every header kept");
  run_free(&r);
  free(s);

  /* a chunk-size line that never ends */
  s = malloc(BT_HTTP_MAX_HEAD + 100);
  n = (size_t) sprintf(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  memset(s + n, '0', BT_HTTP_MAX_HEAD + 50);
  n += BT_HTTP_MAX_HEAD + 50;
  run(&r, s, n, 64 << 10, 0);
  is_int(r.ev, BT__HTTP_ERROR, "an endless chunk-size line is refused");
  is_str(r.p.error, "line too long", "as a line too long");
  run_free(&r);
  free(s);

  /* framing decisions */
  {
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    run(&r, head, strlen(head), 7, 1);
    ok(r.ev == BT__HTTP_DONE && r.body == 0 && r.p.framing == BT__HTTP_NO_BODY,
       "the answer to a HEAD has no body whatever its Content-Length says");
    run_free(&r);
  }
  {
    static const char two[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"
                              "abcHTTP/1.1 200 OK\r\n";
    run(&r, two, strlen(two), 1, 0);
    ok(r.ev == BT__HTTP_DONE && r.body == 3 && r.left == 17,
       "bytes after a complete response are left over, split at every byte");
    run_free(&r);
  }
  {
    static const char eof[] = "HTTP/1.0 200 OK\r\n\r\nto the end";
    run(&r, eof, strlen(eof), 5, 0);
    ok(r.ev == BT__HTTP_MORE && r.body == 10 && !r.p.keep &&
         bt__http_parser_eof_ends(&r.p),
       "a body without length ends at the close, and the close ends it");
    run_free(&r);
  }
  {
    static const char interim[] = "HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n"
                                  "HTTP/1.1 204 No Content\r\n\r\n";
    run(&r, interim, strlen(interim), 3, 0);
    ok(r.ev == BT__HTTP_DONE && r.p.status == 204 &&
         !strcmp(r.head.p, "HTTP/1.1 204 No Content\r\n\r\n"),
       "an interim 100 is dropped, head and all");
    run_free(&r);
  }
  {
    static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                  "\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n";
    run(&r, chunked, strlen(chunked), 2, 0);
    ok(r.ev == BT__HTTP_DONE && r.body == 3 && r.left == 0,
       "chunk extensions and trailers");
    run_free(&r);
  }
  {
    static const char bad[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                              "\r\n3\r\nabcX\r\n";
    run(&r, bad, strlen(bad), 4, 0);
    ok(r.ev == BT__HTTP_ERROR && !strcmp(r.p.error, "chunk not followed by CRLF"),
       "a chunk must end with CRLF");
    run_free(&r);
  }
  return tap_done();
}
