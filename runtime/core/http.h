/*
 * HTTP client on a libuv loop: http:// and https:// through libcurl, loaded
 * on a process's first request (http.c says why). HTTP/1.1, or HTTP/2 over
 * https when asked for and the server agrees. Connections are kept alive and
 * reused across requests of one bt_http_t. Every request has a timeout and
 * can be cancelled. Redirects are followed and proxies used only when asked
 * for.
 */
#ifndef BATON_HTTP_H
#define BATON_HTTP_H

#include <stddef.h>
#include <uv.h>

typedef struct bt_http_s bt_http_t;
typedef struct bt_http_req_s bt_http_req_t;

/* Called exactly once when the request ends. err is 0 when an HTTP response
 * was received (whatever its status), else a BT_E* code; body is the whole
 * response body (NUL-terminated, valid only during the call). The request
 * is freed right after; on_done may cancel other requests and close the
 * client. */
typedef void (*bt_http_done_cb)(bt_http_req_t *req, int err, long status,
                                const char *body, size_t len, void *arg);

typedef struct {
  const char *method;           /* default "POST" when body, else "GET" */
  const char *url;
  const char *body;             /* copied */
  size_t body_len;
  const char *const *headers;   /* NULL-terminated "Name: value" lines */
  long timeout_ms;              /* whole request; 0 = none */
  long connect_timeout_ms;      /* default 2000 */
  const char *cacert;           /* CA file for https, or NULL: the system's */
  long max_redirects;           /* follow up to this many 3xx (to http and
                                   https URLs only); 0 = return the 3xx */
  const char *proxy;            /* proxy URL for every request, or NULL */
  int env_proxy;                /* with proxy NULL: the environment's
                                   http_proxy, https_proxy, all_proxy and
                                   no_proxy, as curl reads them; 0 = none */
  int http2;                    /* offer HTTP/2 over https (ALPN); http://
                                   stays HTTP/1.1 */
  bt_http_done_cb on_done;
  void *arg;
} bt_http_opts_t;

/** Makes a client on loop. Returns NULL when out of memory. */
bt_http_t *bt_http_new(uv_loop_t *loop);

/** Cancels every request (their callbacks run with BT_ECANCELED), closes
 * the handles and frees the client once libuv has closed them. */
void bt_http_close(bt_http_t *h);

/** Starts a request. On success *out (if not NULL) is the request, valid
 * until its on_done has returned. */
int bt_http_request(bt_http_t *h, const bt_http_opts_t *o, bt_http_req_t **out);

/** Cancels req: its on_done runs at once with BT_ECANCELED (from req's own
 * on_done, where it has ended, this does nothing). */
void bt_http_cancel(bt_http_req_t *req);

/** The response's header block ("Name: value\r\n" lines), valid in on_done. */
const char *bt_http_req_headers(const bt_http_req_t *req, size_t *len);

/** The URL the response came from (after redirects), valid in on_done;
 * NULL when the request never reached curl. */
const char *bt_http_req_url(const bt_http_req_t *req);

/** Number of redirects followed, valid in on_done. */
long bt_http_req_redirects(const bt_http_req_t *req);

/** The response's HTTP version ("1.0", "1.1", "2", "3"), valid in on_done;
 * "" when there was no response. */
const char *bt_http_req_version(const bt_http_req_t *req);

/** curl's words on the failure ("Empty reply from server"), valid in
 * on_done ("" if none). */
const char *bt_http_req_errtext(const bt_http_req_t *req);

/** True when url is an http:// or https:// URL this client can request:
 * a host, a port from 1 to 65535 if one is given, no spaces or controls. */
int bt_http_url_ok(const char *url);

#endif
