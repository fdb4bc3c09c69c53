/*
 * One error table for the whole C core, libuv style.
 *
 * A function returns 0 on success or a negative BT_E* code. System errors
 * reuse libuv's UV_E* values, so bt_strerror(UV_ECONNREFUSED) works; baton's
 * own codes sit below -4200, outside libuv's range.
 *
 * If a function that takes a callback returns an error, the callback is never
 * called; if it returns 0, the callback is called exactly once, with
 * BT_ECANCELED when the operation was cancelled.
 */
#ifndef BATON_ERR_H
#define BATON_ERR_H

#include <uv.h>

#define BT_ERRNO_MAP(XX)                                                      \
  XX(ECANCELED, UV_ECANCELED, "operation canceled")                           \
  XX(ECONNREFUSED, UV_ECONNREFUSED, "connection refused")                     \
  XX(ECONNRESET, UV_ECONNRESET, "connection reset by peer")                   \
  XX(ETIMEDOUT, UV_ETIMEDOUT, "timed out")                                    \
  XX(EINVAL, UV_EINVAL, "invalid argument")                                   \
  XX(ENOMEM, UV_ENOMEM, "out of memory")                                      \
  XX(ENOENT, UV_ENOENT, "not found")                                          \
  XX(EEXIST, UV_EEXIST, "already exists")                                     \
  XX(EACCES, UV_EACCES, "permission denied")                                  \
  XX(EPIPE, UV_EPIPE, "broken pipe")                                          \
  XX(EAI_NONAME, UV_EAI_NONAME, "unknown host")                               \
  XX(EIO, UV_EIO, "i/o error")                                                \
  XX(EBUSY, UV_EBUSY, "resource busy")                                        \
  XX(EOF, UV_EOF, "end of file")                                              \
  XX(EBADF, UV_EBADF, "bad file descriptor")                                  \
  XX(ENOTSUP, UV_ENOTSUP, "not supported")                                    \
  XX(ECLOSED, -4201, "handle already closed")                                 \
  XX(EHTTP, -4202, "unexpected http response")                               \
  XX(ETLS, -4203, "tls error")                                                \
  XX(EPROTO, -4204, "malformed response")                                     \
  XX(EUNAVAIL, -4205, "no endpoint available")                                \
  XX(EAUTH, -4206, "authentication failed")                                   \
  XX(ECOMPACTED, -4207, "revision has been compacted")                        \
  XX(EFUTUREREV, -4208, "revision is in the future")                          \
  XX(ENOLEASE, -4209, "lease not found")                                      \
  XX(ETOOLARGE, -4210, "request is too large")                                \
  XX(ENOSPACE, -4211, "database space exceeded")                              \
  XX(ENOLEADER, -4212, "etcd has no leader")                                  \
  XX(EETCD, -4213, "etcd error")                                              \
  XX(ELOST, -4214, "lease or lock lost")                                      \
  XX(ELOCKED, -4215, "locked by another session")                             \
  XX(ENOTLEADER, -4216, "not the leader")                                     \
  XX(ECRON, -4217, "invalid cron expression")                                 \
  XX(ETZ, -4218, "unknown time zone")                                         \
  XX(ECHILD, -4219, "child process failed")                                   \
  XX(EUNKNOWN, -4299, "unknown error")

typedef enum {
#define XX(name, value, msg) BT_##name = (value),
  BT_ERRNO_MAP(XX)
#undef XX
} bt_errno_t;

/** The code's name without "BT_" ("ECONNREFUSED"), for any BT_E* or UV_E*. */
const char *bt_err_name(int err);

/** A short lower-case description of the code. */
const char *bt_strerror(int err);

#endif
