/*
 * gRPC's pure helpers (grpc.h): the deframer that cuts length-prefixed
 * messages out of arbitrary DATA chunks, and grpc-message's percent-decoding.
 * No nghttp2 and no libuv calls here: the fuzz target links this file alone.
 */
#include "grpc.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>

/* The largest buffer kept once its message is delivered. */
#define DEFRAMER_KEEP ((size_t) 1 << 20)

/* Appends n bytes to the message being reassembled, growing the buffer as
 * bytes arrive (not by the length the peer announced) up to d->len. */
static int deframer_append(bt__grpc_deframer_t *d, const uint8_t *p, size_t n) {
  if (d->have + n > d->cap) {
    size_t cap = d->cap ? d->cap : 4096;
    uint8_t *nb;
    while (cap < d->have + n) cap *= 2;
    if (cap > d->len) cap = d->len;
    nb = realloc(d->buf, cap);
    if (!nb) return BT_ENOMEM;
    d->buf = nb;
    d->cap = cap;
  }
  memcpy(d->buf + d->have, p, n);
  d->have += n;
  return 0;
}

int bt__grpc_deframe(bt__grpc_deframer_t *d, const uint8_t *p, size_t len,
                     int (*fn)(const uint8_t *msg, size_t len, void *arg),
                     void *arg) {
  static const uint8_t empty[1];
  while (len > 0) {
    int rc;
    if (d->hdr_have < 5) {
      size_t n = 5 - d->hdr_have;
      if (n > len) n = len;
      memcpy(d->hdr + d->hdr_have, p, n);
      d->hdr_have += n;
      p += n;
      len -= n;
      if (d->hdr_have < 5) return 0;
      if (d->hdr[0] != 0) return BT_EPROTO;   /* compressed (or junk) */
      d->len = (size_t) d->hdr[1] << 24 | (size_t) d->hdr[2] << 16 |
               (size_t) d->hdr[3] << 8 | d->hdr[4];
      d->have = 0;
      if (d->len > d->max) return BT_ETOOLARGE;
      /* The whole message is in this chunk: hand it over in place. */
      if (len >= d->len) {
        const uint8_t *m = d->len ? p : empty;
        size_t ml = d->len;
        p += ml;
        len -= ml;
        d->hdr_have = 0;
        d->len = 0;
        if ((rc = fn(m, ml, arg)) != 0) return rc;
        continue;
      }
    }
    if (len == 0) return 0;
    if (d->have < d->len) {
      size_t n = d->len - d->have;
      if (n > len) n = len;
      if ((rc = deframer_append(d, p, n)) != 0) return rc;
      p += n;
      len -= n;
    }
    if (d->have == d->len) {
      size_t ml = d->len;
      d->hdr_have = 0;
      d->len = 0;
      d->have = 0;
      rc = fn(ml ? d->buf : empty, ml, arg);
      /* Don't keep a big message's buffer for the stream's life (a Watch
       * that once got a 30 MB event). */
      if (d->cap > DEFRAMER_KEEP) {
        free(d->buf);
        d->buf = NULL;
        d->cap = 0;
      }
      if (rc != 0) return rc;
    }
  }
  return 0;
}

void bt__grpc_deframer_free(bt__grpc_deframer_t *d) {
  free(d->buf);
  d->buf = NULL;
  d->cap = d->have = d->len = d->hdr_have = 0;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

void bt__grpc_percent_decode(const char *src, size_t n, char *dst,
                             size_t dstlen) {
  size_t i = 0, o = 0;
  if (dstlen == 0) return;
  while (i < n && o + 1 < dstlen) {
    int hi, lo;
    if (src[i] == '%' && i + 2 < n &&
        (hi = hexval(src[i + 1])) >= 0 && (lo = hexval(src[i + 2])) >= 0) {
      dst[o++] = (char) (hi << 4 | lo);
      i += 3;
    } else {
      dst[o++] = src[i++];
    }
  }
  dst[o] = '\0';
}
