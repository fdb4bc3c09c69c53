#include "b64.h"

#include <stdint.h>

static const char enc[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t bt_b64_enclen(size_t n) {
  return (n + 2) / 3 * 4 + 1;
}

size_t bt_b64_encode(char *dst, const void *src, size_t n) {
  const unsigned char *s = src;
  char *d = dst;
  size_t i;
  for (i = 0; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t) s[i] << 16 | (uint32_t) s[i + 1] << 8 | s[i + 2];
    *d++ = enc[v >> 18];
    *d++ = enc[(v >> 12) & 63];
    *d++ = enc[(v >> 6) & 63];
    *d++ = enc[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t) s[i] << 16 | (i + 1 < n ? (uint32_t) s[i + 1] << 8 : 0);
    *d++ = enc[v >> 18];
    *d++ = enc[(v >> 12) & 63];
    *d++ = i + 1 < n ? enc[(v >> 6) & 63] : '=';
    *d++ = '=';
  }
  *d = '\0';
  return (size_t) (d - dst);
}

static int val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long bt_b64_decode(void *dst, const char *src, size_t n) {
  unsigned char *d = dst;
  size_t i;
  if (n % 4) return -1;
  for (i = 0; i < n; i += 4) {
    int a = val(src[i]), b = val(src[i + 1]);
    int c = src[i + 2] == '=' ? -2 : val(src[i + 2]);
    int e = src[i + 3] == '=' ? -2 : val(src[i + 3]);
    uint32_t v;
    if (a < 0 || b < 0 || c == -1 || e == -1) return -1;
    if ((c == -2 || e == -2) && i + 4 != n) return -1;
    if (c == -2 && e != -2) return -1;
    v = (uint32_t) a << 18 | (uint32_t) b << 12 | (c < 0 ? 0 : (uint32_t) c << 6) |
        (e < 0 ? 0 : (uint32_t) e);
    *d++ = (unsigned char) (v >> 16);
    if (c >= 0) *d++ = (unsigned char) (v >> 8);
    if (e >= 0) *d++ = (unsigned char) v;
  }
  return (long) (d - (unsigned char *) dst);
}
