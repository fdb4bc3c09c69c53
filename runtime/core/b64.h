/* Standard base64 with padding, as etcd's JSON gateway speaks it. */
#ifndef BATON_B64_H
#define BATON_B64_H

#include <stddef.h>

/** Bytes needed to encode n bytes, including the terminating NUL. */
size_t bt_b64_enclen(size_t n);

/** Encodes src into dst (bt_b64_enclen(n) bytes); returns the length
 * written, without the NUL. */
size_t bt_b64_encode(char *dst, const void *src, size_t n);

/** Decodes src (padded standard alphabet; whitespace not allowed) into dst,
 * which needs at most n / 4 * 3 bytes. Returns the decoded length, or -1 on
 * malformed input. */
long bt_b64_decode(void *dst, const char *src, size_t n);

#endif
