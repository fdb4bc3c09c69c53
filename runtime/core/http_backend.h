/*
 * The HTTP client's backend interface: what its front end (http.c) and its
 * two backends share, and all they share.
 *
 *   http.c          the front end: the public API (http.h), the request
 *                   objects, URLs, and the choice of backend by scheme
 *   http_native.c   http:// spoken by baton itself over libuv TCP
 *   http_curl.c     https:// through libcurl, loaded with dlopen on first use
 *
 * The front end knows a backend only by its table of functions
 * (bt__http_backend_t); a backend knows the front end only by what is
 * declared here; neither backend knows the other. Why two backends at all:
 * linking libcurl maps 38 shared objects into every baton process (~7 ms of
 * start-up, ~6 MiB of RSS), though most of them only ever speak plain HTTP
 * to etcd, which the native backend does in a few system calls a request.
 *
 * A request's life. The front end makes the backend's per-client state on
 * the first request for its scheme (open), allocates the request (req_size
 * bytes, zeroed, the bt_http_req_t below first), fills in the shared part
 * and calls start. start either returns a BT_E* code having kept nothing
 * (the front end frees the request), or returns 0 and from then on owns
 * the request's course: it reports the end exactly once through
 * bt__http_req_done (never from inside start: a failure found there waits
 * for a later loop turn), and gives the memory back with bt__http_req_free
 * once nothing of the backend refers to the request any more.
 */
#ifndef BATON_HTTP_BACKEND_H
#define BATON_HTTP_BACKEND_H

#include "http.h"
#include "http_int.h"

#include <stddef.h>

#define BT__HTTP_ERRTEXT 256   /* a request's error text, NUL included */

typedef struct bt__http_backend_s bt__http_backend_t;

/* The request callers hold: its shared part, first in every backend's own
 * request struct. The front end sets the fields up to arg before start; the
 * backend writes the rest before it reports the end. */
struct bt_http_req_s {
  const bt__http_backend_t *be;  /* the backend that runs it */
  bt_http_t *h;                  /* the front end's client */
  bt_http_data_cb on_data;       /* NULL unless the request is a stream */
  bt_http_done_cb on_done;       /* run by bt__http_req_done only */
  void *arg;
  int unsent;                    /* bt_http_req_unsent's answer */
  bt__buf_t head;                /* the response's header block (freed by
                                    the front end) */
  char errtext[BT__HTTP_ERRTEXT]; /* the backend's words on a failure */
};

struct bt__http_backend_s {
  /* The size of the backend's request struct, which starts with a
   * bt_http_req_t. */
  size_t req_size;

  /* Makes the backend's state for one client on loop. NULL when out of
   * memory (the front end then returns BT_ENOMEM and tries again on the
   * next request). */
  void *(*open)(uv_loop_t *loop);

  /* Ends every request of the client (on_done with BT_ECANCELED, now, or
   * for a request inside its own on_data when that returns), closes its
   * handles and frees the state once libuv has closed them. */
  void (*close)(void *client);

  /* Starts req as o says (o's strings are the caller's: copy what is kept).
   * Returns 0, or a BT_E* code with nothing kept and no callback run. */
  int (*start)(void *client, bt_http_req_t *req, const bt_http_opts_t *o);

  /* As bt_http_cancel: req ends with BT_ECANCELED, now or (when called from
   * one of req's own callbacks) as soon as that callback returns. A request
   * that is already ending is left alone. */
  void (*cancel)(bt_http_req_t *req);
};

extern const bt__http_backend_t bt__http_native;  /* http_native.c */
extern const bt__http_backend_t bt__http_curl;    /* http_curl.c */

/** The one way a backend reports a request's end: unless err, an HTTP
 * answer with its status, and body as bt_http_done_cb describes it. Runs
 * req's on_done; req's memory stays the backend's until bt__http_req_free. */
void bt__http_req_done(bt_http_req_t *req, int err, long status,
                       const char *body, size_t len);

/** Frees req (and its header block), after bt__http_req_done has run. */
void bt__http_req_free(bt_http_req_t *req);

/* The parts of an http:// or https:// URL, pointing into it. */
typedef struct {
  const char *user, *pass;  /* not decoded; NULL if absent */
  size_t ulen, plen;
  const char *host;         /* without [] */
  size_t hlen;
  const char *hostport;     /* for the Host header: as written */
  size_t hplen;
  char port[8];             /* the default one when none is given */
  const char *path;         /* from the first '/' or '?', fragment dropped */
  size_t pathlen;
} bt__http_url_t;

/** Splits url as bt_http_url_ok judges it. Returns 0 or BT_EINVAL. */
int bt__http_url_parse(const char *url, bt__http_url_t *u);

#endif
