/*
 * The HTTP/1.1 response parser of the native backend, apart from the
 * sockets: bytes in, events out (http_int.h). http_native.c feeds it what a
 * connection reads and acts on each event (deliver body bytes, judge the
 * body's size, complete or fail the request); fuzz/http_fuzz.c feeds it
 * anything, split anywhere. Also the byte buffer (bt__buf_add) that every
 * part of the client uses.
 *
 * It never calls out and never allocates beyond two buffers: the line
 * buffer it owns (a line split across feeds) and the header block, which
 * the caller owns so that it outlives the exchange.
 */
#include "http_int.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int bt__buf_add(bt__buf_t *b, const char *p, size_t n, size_t max) {
  if (b->len + n > max) return -1;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    char *np;
    while (cap < b->len + n + 1) cap *= 2;
    np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

void bt__http_parser_reset(bt__http_parser_t *p, bt__buf_t *head,
                           int head_only) {
  p->st = BT__HP_STATUS;
  p->keep = 1;
  p->chunked = 0;
  p->head_only = head_only;
  p->framing = BT__HTTP_NO_BODY;
  p->status = 0;
  p->clen = -1;
  p->left = 0;
  p->line.len = 0;
  p->head = head;
  p->head->len = 0;
  p->error = NULL;
}

void bt__http_parser_free(bt__http_parser_t *p) {
  free(p->line.p);
  p->line.p = NULL;
  p->line.len = p->line.cap = 0;
}

int bt__http_parser_eof_ends(const bt__http_parser_t *p) {
  return p->st == BT__HP_BODY_EOF;
}

static int fail(bt__http_parser_t *p, const char *what) {
  p->st = BT__HP_FAILED;
  p->error = what;
  return BT__HTTP_ERROR;
}

static int token_in(const char *v, size_t n, const char *tok) {
  size_t tl = strlen(tok), i = 0;
  while (i < n) {
    size_t s, e;
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    s = i;
    while (i < n && v[i] != ',') i++;
    e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e - s == tl && strncasecmp(v + s, tok, tl) == 0) return 1;
  }
  return 0;
}

/* The end of a header block: an interim (1xx) answer starts over, a final
 * one decides how its body is framed. Returns BT__HTTP_MORE (interim),
 * BT__HTTP_HEAD or BT__HTTP_ERROR. */
static int headers_done(bt__http_parser_t *p) {
  long st = p->status;

  if (st >= 100 && st < 200) {
    if (st == 101) return fail(p, "unexpected 101 Switching Protocols");
    p->head->len = 0;          /* an interim answer: the real one follows */
    p->st = BT__HP_STATUS;
    p->chunked = 0;
    p->clen = -1;
    return BT__HTTP_MORE;
  }
  if (bt__buf_add(p->head, "\r\n", 2, BT_HTTP_MAX_HEAD))
    return fail(p, "header block too large");
  if (p->head_only || st == 204 || st == 304) {
    p->framing = BT__HTTP_NO_BODY;
    p->st = BT__HP_DONE;
  } else if (p->chunked) {
    p->framing = BT__HTTP_CHUNKED;
    p->st = BT__HP_CHUNK_SIZE;
  } else if (p->clen >= 0) {
    p->framing = BT__HTTP_LENGTH;
    p->left = (uint64_t) p->clen;
    p->st = p->clen ? BT__HP_BODY_LEN : BT__HP_DONE;
  } else {
    p->framing = BT__HTTP_TO_CLOSE;
    p->keep = 0;               /* the body ends when the peer closes */
    p->st = BT__HP_BODY_EOF;
  }
  return BT__HTTP_HEAD;
}

/* One line of the status, header, chunk-size or trailer sections, without
 * its line ending. Returns BT__HTTP_MORE to read on, or an event. */
static int on_line(bt__http_parser_t *p, const char *l, size_t n) {
  switch (p->st) {
  case BT__HP_STATUS: {
    int i;
    long st = 0;
    if (n < 12 || memcmp(l, "HTTP/1.", 7) || !isdigit((unsigned char) l[7]) ||
        l[8] != ' ')
      return fail(p, "bad status line");
    for (i = 9; i < 12; i++) {
      if (!isdigit((unsigned char) l[i])) return fail(p, "bad status");
      st = st * 10 + (l[i] - '0');
    }
    if (n > 12 && l[12] != ' ') return fail(p, "bad status");
    p->keep = l[7] >= '1';     /* HTTP/1.0 closes unless it says keep-alive */
    p->status = st;
    if (bt__buf_add(p->head, l, n, BT_HTTP_MAX_HEAD) ||
        bt__buf_add(p->head, "\r\n", 2, BT_HTTP_MAX_HEAD))
      return fail(p, "header block too large");
    p->st = BT__HP_HEADER;
    return BT__HTTP_MORE;
  }
  case BT__HP_HEADER: {
    const char *colon, *v, *ve;
    size_t nl;
    if (n == 0) return headers_done(p);
    if (bt__buf_add(p->head, l, n, BT_HTTP_MAX_HEAD) ||
        bt__buf_add(p->head, "\r\n", 2, BT_HTTP_MAX_HEAD))
      return fail(p, "header block too large");
    colon = memchr(l, ':', n);
    if (!colon) return BT__HTTP_MORE;   /* not ours to judge: kept as is */
    nl = (size_t) (colon - l);
    v = colon + 1;
    ve = l + n;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    if (nl == 14 && strncasecmp(l, "Content-Length", 14) == 0) {
      int64_t len = 0;
      const char *q;
      if (v == ve) return fail(p, "empty Content-Length");
      for (q = v; q < ve; q++) {
        if (!isdigit((unsigned char) *q) || len > (INT64_MAX - 9) / 10)
          return fail(p, "bad Content-Length");
        len = len * 10 + (*q - '0');
      }
      if (p->clen >= 0 && p->clen != len)
        return fail(p, "conflicting Content-Length");
      p->clen = len;
    } else if (nl == 17 && strncasecmp(l, "Transfer-Encoding", 17) == 0) {
      p->chunked = token_in(v, (size_t) (ve - v), "chunked");
      if (!p->chunked) return fail(p, "unsupported Transfer-Encoding");
    } else if (nl == 10 && strncasecmp(l, "Connection", 10) == 0) {
      if (token_in(v, (size_t) (ve - v), "close")) p->keep = 0;
      else if (token_in(v, (size_t) (ve - v), "keep-alive")) p->keep = 1;
    }
    return BT__HTTP_MORE;
  }
  case BT__HP_CHUNK_SIZE: {
    uint64_t size = 0;
    size_t i = 0;
    while (i < n && isxdigit((unsigned char) l[i])) {
      int d = isdigit((unsigned char) l[i])
                  ? l[i] - '0'
                  : (tolower((unsigned char) l[i]) - 'a' + 10);
      if (size > (UINT64_MAX >> 4)) return fail(p, "chunk too large");
      size = size * 16 + (uint64_t) d;
      i++;
    }
    if (i == 0) return fail(p, "bad chunk size");
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    if (i < n && l[i] != ';') return fail(p, "bad chunk size");
    if (size == 0) {
      p->st = BT__HP_TRAILER;
      return BT__HTTP_MORE;
    }
    p->left = size;
    p->st = BT__HP_CHUNK_DATA;
    return BT__HTTP_MORE;
  }
  case BT__HP_CHUNK_END:
    if (n) return fail(p, "chunk not followed by CRLF");
    p->st = BT__HP_CHUNK_SIZE;
    return BT__HTTP_MORE;
  case BT__HP_TRAILER:
    if (n == 0) p->st = BT__HP_DONE;
    return BT__HTTP_MORE;
  }
  return fail(p, "parser state");
}

int bt__http_parse(bt__http_parser_t *p, const char *data, size_t n,
                   size_t *used, const char **body, size_t *blen) {
  const char *s = data;
  int ev = BT__HTTP_MORE;

  *body = NULL;
  *blen = 0;
  while (ev == BT__HTTP_MORE) {
    switch (p->st) {
    case BT__HP_DONE:
      ev = BT__HTTP_DONE;
      break;
    case BT__HP_FAILED:
      ev = BT__HTTP_ERROR;
      break;
    case BT__HP_BODY_LEN:
    case BT__HP_CHUNK_DATA: {
      size_t take = n < p->left ? n : (size_t) p->left;
      if (!take) goto out;
      *body = s;
      *blen = take;
      s += take;
      n -= take;
      p->left -= take;
      if (p->left == 0)
        p->st = p->st == BT__HP_CHUNK_DATA ? BT__HP_CHUNK_END : BT__HP_DONE;
      ev = BT__HTTP_BODY;
      break;
    }
    case BT__HP_BODY_EOF:
      if (!n) goto out;
      *body = s;
      *blen = n;
      s += n;
      n = 0;
      ev = BT__HTTP_BODY;
      break;
    default: {
      const char *nl, *l;
      size_t take, ln;
      if (!n) goto out;
      nl = memchr(s, '\n', n);
      if (!nl) {
        if (bt__buf_add(&p->line, s, n, BT_HTTP_MAX_HEAD))
          ev = fail(p, "line too long");
        s += n;
        n = 0;
        break;
      }
      take = (size_t) (nl - s) + 1;
      if (p->line.len) {
        if (bt__buf_add(&p->line, s, take, BT_HTTP_MAX_HEAD)) {
          ev = fail(p, "line too long");
          break;
        }
        l = p->line.p;
        ln = p->line.len;
      } else {
        l = s;
        ln = take;
      }
      s += take;
      n -= take;
      ln--;                                  /* the \n */
      if (ln && l[ln - 1] == '\r') ln--;
      ev = on_line(p, l, ln);
      p->line.len = 0;
    }
    }
  }
out:
  *used = (size_t) (s - data);
  return ev;
}
