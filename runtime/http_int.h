/*
 * Inside the HTTP client: http.c speaks HTTP/1.1 itself over libuv TCP for
 * http:// URLs and hands https:// URLs to http_curl.c, which loads libcurl
 * with dlopen on first use. A process that never makes an https request
 * never maps libcurl and the TLS stack behind it (38 shared objects, ~6 MiB
 * of RSS and ~7 ms of start-up).
 */
#ifndef BATON_HTTP_INT_H
#define BATON_HTTP_INT_H

#include "http.h"

enum { BT_HTTP_NATIVE = 0, BT_HTTP_CURL = 1 };

#define BT_HTTP_MAX_BODY (512u << 20)   /* a buffered response body */

/* A growing byte buffer, always NUL-terminated once non-empty. */
typedef struct {
  char *p;
  size_t len, cap;
} bt__buf_t;

/** Appends n bytes to b unless that makes it longer than max. Returns 0,
 * or -1 (too long, or out of memory). */
int bt__buf_add(bt__buf_t *b, const char *p, size_t n, size_t max);

/* The first member of both backends' requests: which backend owns it. */
struct bt_http_req_s {
  int backend;
};

typedef struct bt_curl_s bt_curl_t;

/** Loads libcurl (once per process) and makes a client on loop. NULL on
 * failure, with *err set (BT_ENOTSUP when libcurl cannot be loaded,
 * BT_ENOMEM) and the reason written to why (e.g. dlerror's text). */
bt_curl_t *bt_curl_new(uv_loop_t *loop, int *err, char *why, size_t whylen);

/** As bt_http_close, for the curl client. */
void bt_curl_close(bt_curl_t *c);

/** As bt_http_request; the request's base.backend is BT_HTTP_CURL. */
int bt_curl_request(bt_curl_t *c, const bt_http_opts_t *o, bt_http_req_t **out);

void bt_curl_cancel(bt_http_req_t *req);
int bt_curl_req_unsent(const bt_http_req_t *req);
const char *bt_curl_req_headers(const bt_http_req_t *req, size_t *len);
const char *bt_curl_req_errtext(const bt_http_req_t *req);
int bt_curl_active(const bt_curl_t *c);

#endif
