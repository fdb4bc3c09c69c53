/*
 * HTTP/1.1 server on a libuv loop, built on libmicrohttpd (MHD) in its
 * external-epoll mode: MHD parses HTTP (and speaks TLS); this file watches
 * MHD's one epoll descriptor with a uv_poll_t, runs MHD's timeouts on a
 * uv_timer_t, and hands each complete request (headers and body) to the
 * caller, who may answer it at once or later from any loop callback. The
 * loop is never blocked: a request waiting for its answer is suspended in
 * MHD and costs no polling.
 *
 * A request is shown to on_check (when given) as soon as its headers are
 * in, before any of its body is read: an answer given there (401, 421, ...)
 * is sent without reading the body, so a client that is refused costs no
 * body memory. Otherwise the body is read, then the request handed to
 * on_request.
 *
 * The server answers some requests itself, without calling on_request:
 * a body over max_body gets 413 (decided from Content-Length before any of
 * the body is read, or, for a chunked body, once it passes the limit; the
 * connection is then closed); a body that would take the bodies held in
 * memory by all requests together past max_body_total gets 503 EBUSY
 * (decided from Content-Length before reading, or for a chunked body as it
 * grows); requests that arrive while the server is closing get 503. These
 * answers are JSON {"error": "...", "code": "..."}. Every answer, these
 * included, carries the server's headers (opts.headers) unless the answer
 * sets that header itself.
 *
 * Limits: no HTTP/2; a client that goes away while its request waits for
 * an answer is only noticed when the answer is written (the answer is then
 * dropped); the timeout is MHD's idle timeout (time without any byte read
 * or written), not a deadline for the whole request.
 */
#ifndef BATON_HTTPD_H
#define BATON_HTTPD_H

#include <stddef.h>
#include <uv.h>

typedef struct bt_httpd_s bt_httpd_t;
typedef struct bt_httpd_req_s bt_httpd_req_t;

/* A complete request arrived. The callee owns req until it passes it to
 * bt_httpd_respond, which it must do exactly once, now or later. Runs
 * inside the server's processing: it must not call bt_httpd_close. */
typedef void (*bt_httpd_request_cb)(bt_httpd_req_t *req, void *arg);

/* The headers of a request arrived, none of its body is read yet. The
 * callee may answer it now with bt_httpd_respond (the body is then never
 * read, and the connection is closed after the answer if one was
 * announced), or return without answering: the body is read and req
 * handed to on_request. req is valid during the call only; its body is
 * "" then. Runs inside the server's processing, like on_request. */
typedef void (*bt_httpd_check_cb)(bt_httpd_req_t *req, void *arg);

/* A line from MHD's error log (no newline): client protocol errors, TLS
 * handshake failures, connections refused at the limit. */
typedef void (*bt_httpd_log_cb)(const char *msg, void *arg);

typedef struct {
  const char *addr;             /* "HOST:PORT", "[IPV6]:PORT", ":PORT";
                                   HOST is an IP address or localhost;
                                   port 0 takes any free port */
  const char *cert, *key;       /* PEM text, both or neither (HTTPS) */
  size_t max_body;              /* bytes (0: no body at all) */
  size_t max_body_total;        /* bytes of request bodies held at once, all
                                   connections together; 0 = 16 * max_body */
  unsigned timeout_secs;        /* idle connections closed; 0 = never */
  unsigned max_connections;     /* 0 = 4096 */
  const char *const *headers;   /* NULL, or name, value pairs ending in NULL
                                   added to every answer that does not set
                                   the name itself (copied) */
  bt_httpd_check_cb on_check;   /* may be NULL: every request is read */
  bt_httpd_request_cb on_request;
  bt_httpd_log_cb on_log;       /* may be NULL: MHD's lines are dropped */
  void *arg;                    /* given to the callbacks */
} bt_httpd_opts_t;

/** Binds, listens and starts serving on loop. On failure returns a
 * negative code (UV_EADDRINUSE, UV_EACCES, UV_EADDRNOTAVAIL, BT_EINVAL for
 * a malformed address, BT_ETLS for a certificate or key MHD refused,
 * BT_ENOMEM, ...) and writes a one-line reason that starts with the
 * address to msg ("127.0.0.1:80: permission denied"). Raises the soft
 * RLIMIT_NOFILE, within the hard limit, to fit max_connections. */
int bt_httpd_listen(uv_loop_t *loop, const bt_httpd_opts_t *o,
                    bt_httpd_t **out, char *msg, size_t msglen);

/** The bound port and "host:port" ("[::]:8080" for all interfaces). */
int bt_httpd_port(const bt_httpd_t *s);
const char *bt_httpd_addr(const bt_httpd_t *s);

/** Stops listening at once (new connections are refused) and answers
 * requests that arrive on open connections with 503. Requests already
 * handed to on_request keep their answers: the server stops (closes every
 * connection and its handles, then frees itself) once those are answered
 * and written, or after the idle timeout (10 s without one), whichever
 * comes first; a request still unanswered then stays valid for its
 * bt_httpd_respond, which drops the answer. on_request is never called
 * after this returns. */
void bt_httpd_close(bt_httpd_t *s);

/* The request, valid until bt_httpd_respond. The path is the raw request
 * target up to '?' (not percent-decoded: "/jobs/a%2Fb"), the query what
 * follows '?' ("" when none); both are NUL-terminated. The version is as
 * sent ("HTTP/1.1"). The remote address is "1.2.3.4:5678" or
 * "[::1]:5678". */
const char *bt_httpd_req_method(const bt_httpd_req_t *r);
const char *bt_httpd_req_version(const bt_httpd_req_t *r);
const char *bt_httpd_req_path(const bt_httpd_req_t *r, size_t *len);
const char *bt_httpd_req_query(const bt_httpd_req_t *r, size_t *len);
const char *bt_httpd_req_body(const bt_httpd_req_t *r, size_t *len);
const char *bt_httpd_req_remote(const bt_httpd_req_t *r);

/* Calls cb for each request header, in the order received, names as sent
 * (not case-folded). Only during on_check and on_request. */
typedef void (*bt_httpd_header_cb)(const char *name, size_t nlen,
                                   const char *value, size_t vlen, void *arg);
void bt_httpd_req_headers(const bt_httpd_req_t *r, bt_httpd_header_cb cb,
                          void *arg);

/** Answers r and gives it back: r is invalid after the call, whatever it
 * returns. headers is NULL or a NULL-terminated list of name, value pairs
 * ({"content-type", "text/plain", NULL}); the body is framed by
 * Content-Length, so given Content-Length and Transfer-Encoding headers are
 * left out, and so are headers with an empty value (MHD cannot send one). Returns 0; BT_EINVAL when MHD refused a header
 * or the status is outside 100-999 (the client then gets 500); BT_ENOMEM
 * (the connection is closed). When the client or the server has gone, the
 * answer is dropped and 0 returned. Safe from any loop callback, including
 * on_check and on_request themselves. */
int bt_httpd_respond(bt_httpd_req_t *r, int status,
                     const char *const *headers, const char *body,
                     size_t len);

#endif
