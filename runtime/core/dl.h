/*
 * Loading a library with dlopen on first use, once per process: libcurl
 * (http.c), libmicrohttpd (httpd.c) and OpenSSL (grpc.c) are compiled
 * against but not linked, so that the processes that never use them do not
 * pay for mapping them and the libraries behind them at start-up.
 */
#ifndef BATON_DL_H
#define BATON_DL_H

#include <stddef.h>

/* A library's loading, tried once: state 0 not tried, 1 loaded, -1 failed
 * with the reason in error. Zero-initialised (a static). */
typedef struct {
  int state;
  char error[256];
} bt_dl_t;

/** Loads a library and fills fns[i] with dlsym(names[i]) for i < n, once:
 * sonames is NULL-ended and the first that loads wins (a failure reports
 * the first name's reason: the others are for odd installs). what names
 * the library in "<what> has no <symbol>". Returns 0, or -1 with the reason
 * in once->error; every later call returns the same without trying again.
 * The library is never unloaded: libraries such as libcurl and OpenSSL
 * keep process-wide state and exit handlers that must not outlive their
 * code. */
int bt_dl_load(bt_dl_t *once, const char *const sonames[], const char *what,
               const char *const names[], void *fns[], size_t n);

/** Marks once as failed with a reason (printf-style): for a check the
 * caller makes after bt_dl_load succeeded (a version too old, an init that
 * failed). Returns -1. */
int bt_dl_fail(bt_dl_t *once, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
