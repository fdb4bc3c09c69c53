/*
 * libFuzzer target for the HTTP/1.1 response parser (runtime/core/http_parse.c),
 * the code that reads every byte an etcd gateway or any http:// server
 * sends to baton.
 *
 * Input: a flags byte (bit 0: the request was a HEAD), a count byte k
 * (k % 16 split points), k 16-bit split offsets, then the response bytes.
 * The response is parsed twice: whole, and cut at the split points, each
 * piece in a malloc'd buffer of its exact size (so ASan sees any read past
 * it). Checked, besides crashes, sanitizer reports and leaks:
 *   - each call takes at most what it is given, everything on MORE;
 *   - BODY bytes lie inside what was fed, only after HEAD, never for a
 *     bodiless response, never more than Content-Length, and exactly
 *     Content-Length when such a response is DONE;
 *   - HEAD comes once, with a status that is not 1xx, a header block that
 *     starts with the status line and ends with an empty line, and a
 *     framing that agrees with the status, the method and keep;
 *   - DONE and ERROR are final (repeat, taking nothing); ERROR has a text;
 *   - the outcome (events, status, head, body, error, bytes left over) does
 *     not depend on where the input was cut.
 *
 *   make fuzz-http               builds build/fuzz/http_fuzz, runs 10 min
 * Crash inputs go to fuzz/regressions/http/, replayed with the seeds by
 * tests/c/test-http-fuzz.c on every `make test`.
 */
#include "http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

/* What one parse of a response produced. */
typedef struct {
  int last;                 /* the final event: MORE, DONE or ERROR */
  int heads;
  long status;
  int framing, keep;
  int64_t clen;
  size_t left_over;         /* bytes fed after DONE */
  const char *error;
  bt__buf_t head, body;
} outcome_t;

/* Feeds one piece [p, p + n) to hp, acting on every event. Returns 1 once
 * the response is DONE or failed. */
static int feed(bt__http_parser_t *hp, outcome_t *o, const char *p,
                size_t n) {
  while (1) {
    const char *body;
    size_t used, blen;
    int ev = bt__http_parse(hp, p, n, &used, &body, &blen);
    CHECK(used <= n);
    switch (ev) {
    case BT__HTTP_MORE:
      CHECK(used == n);
      return 0;
    case BT__HTTP_HEAD:
      CHECK(o->heads++ == 0);
      CHECK(hp->status < 100 || hp->status > 199);
      CHECK(hp->status >= 0 && hp->status <= 999);
      CHECK(o->head.len >= 16 && !memcmp(o->head.p, "HTTP/1.", 7));
      CHECK(!memcmp(o->head.p + o->head.len - 4, "\r\n\r\n", 4));
      CHECK(o->head.len <= BT_HTTP_MAX_HEAD);
      if (hp->head_only || hp->status == 204 || hp->status == 304)
        CHECK(hp->framing == BT__HTTP_NO_BODY);
      else if (hp->framing == BT__HTTP_LENGTH)
        CHECK(hp->clen >= 0 && !hp->chunked);
      else if (hp->framing == BT__HTTP_TO_CLOSE)
        CHECK(!hp->keep && hp->clen < 0 && !hp->chunked);
      else
        CHECK(hp->framing == BT__HTTP_CHUNKED && hp->chunked);
      o->status = hp->status;
      o->framing = hp->framing;
      o->clen = hp->clen;
      break;
    case BT__HTTP_BODY:
      CHECK(o->heads == 1 && o->framing != BT__HTTP_NO_BODY);
      CHECK(blen > 0 && body >= p && body + blen == p + used);
      CHECK(bt__buf_add(&o->body, body, blen, SIZE_MAX) == 0);
      if (o->framing == BT__HTTP_LENGTH)
        CHECK(o->body.len <= (uint64_t) o->clen);
      break;
    case BT__HTTP_DONE: {
      size_t again;
      CHECK(o->heads == 1);
      if (o->framing == BT__HTTP_LENGTH)
        CHECK(o->body.len == (uint64_t) o->clen);
      if (o->framing == BT__HTTP_NO_BODY) CHECK(o->body.len == 0);
      CHECK(o->framing != BT__HTTP_TO_CLOSE);
      CHECK(bt__http_parse(hp, p + used, n - used, &again, &body, &blen) ==
                BT__HTTP_DONE && again == 0);
      o->last = ev;
      o->keep = hp->keep;
      o->left_over += n - used;
      return 1;
    }
    case BT__HTTP_ERROR: {
      size_t again;
      CHECK(hp->error && hp->error[0]);
      CHECK(bt__http_parse(hp, p + used, n - used, &again, &body, &blen) ==
                BT__HTTP_ERROR && again == 0);
      o->last = ev;
      o->error = hp->error;
      return 1;
    }
    default:
      abort();
    }
    p += used;
    n -= used;
  }
}

/* Parses resp cut at the sorted offsets cuts[0..ncut), into *o. */
static void parse(const uint8_t *resp, size_t size, int head_only,
                  const size_t *cuts, int ncut, outcome_t *o) {
  bt__http_parser_t hp;
  size_t at = 0;
  int done = 0;
  memset(&hp, 0, sizeof(hp));
  memset(o, 0, sizeof(*o));
  bt__http_parser_reset(&hp, &o->head, head_only);
  for (int i = 0; i <= ncut; i++) {
    size_t end = i < ncut ? cuts[i] : size, n = end - at;
    char *piece = malloc(n ? n : 1);
    CHECK(piece);
    memcpy(piece, resp + at, n);
    if (!done) done = feed(&hp, o, piece, n);
    else if (o->last == BT__HTTP_DONE) o->left_over += n;
    free(piece);
    at = end;
  }
  if (!done) {
    o->last = BT__HTTP_MORE;
    o->status = hp.status;
    /* the peer closing now ends a body framed by the close, nothing else */
    CHECK(bt__http_parser_eof_ends(&hp) ==
          (o->heads == 1 && o->framing == BT__HTTP_TO_CLOSE));
  }
  bt__http_parser_free(&hp);
}

static void outcome_free(outcome_t *o) {
  free(o->head.p);
  free(o->body.p);
}

static int same_buf(const bt__buf_t *a, const bt__buf_t *b) {
  return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t cuts[16], at = 2;
  int ncut, head_only;
  outcome_t whole, split;

  if (size < 2) return 0;
  head_only = data[0] & 1;
  ncut = data[1] % 16;
  if (size < at + 2 * (size_t) ncut) return 0;
  const uint8_t *resp = data + at + 2 * ncut;
  size_t rsize = size - at - 2 * (size_t) ncut;
  for (int i = 0; i < ncut; i++) {
    size_t c = (size_t) (data[at + 2 * i] | data[at + 2 * i + 1] << 8);
    cuts[i] = rsize ? c % (rsize + 1) : 0;
  }
  for (int i = 1; i < ncut; i++)          /* insertion sort */
    for (int k = i; k > 0 && cuts[k - 1] > cuts[k]; k--) {
      size_t t = cuts[k];
      cuts[k] = cuts[k - 1];
      cuts[k - 1] = t;
    }
  parse(resp, rsize, head_only, NULL, 0, &whole);
  parse(resp, rsize, head_only, cuts, ncut, &split);
  CHECK(whole.last == split.last && whole.heads == split.heads);
  CHECK(whole.status == split.status && whole.framing == split.framing);
  CHECK(whole.keep == split.keep && whole.left_over == split.left_over);
  CHECK(same_buf(&whole.head, &split.head) &&
        same_buf(&whole.body, &split.body));
  CHECK((!whole.error && !split.error) ||
        (whole.error && split.error && !strcmp(whole.error, split.error)));
  CHECK(whole.body.len <= rsize);
  outcome_free(&whole);
  outcome_free(&split);
  return 0;
}
