/*
 * HTTP/1.1 client on a libuv loop: the front end.
 *
 * It owns what callers see (http.h): the client, the request objects and
 * their life, and which URLs are taken. The work is a backend's
 * (http_backend.h), chosen by the URL's scheme: https:// goes to libcurl
 * (http_curl.c), anything else to baton's own HTTP/1.1 (http_native.c),
 * which refuses what is not http://. A backend's state for a client is
 * made on the first request for its scheme, so a process that never makes
 * an https request never loads libcurl.
 *
 * Requests hold a reference on their client until their backend gives them
 * back, so closing the client (or ending a request) from inside on_done is
 * safe: the client is freed once it is closed and its last request freed;
 * each backend frees its own state when its handles have closed.
 */
#include "http_backend.h"
#include "err.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { BE_NATIVE, BE_CURL, NBACKENDS };

static const bt__http_backend_t *const backends[NBACKENDS] = {
  &bt__http_native, &bt__http_curl,
};

struct bt_http_s {
  uv_loop_t *loop;
  void *be[NBACKENDS];     /* each backend's state, made on first use */
  int nreq;                /* requests started and not yet ended */
  int refs;                /* 1 until closed, +1 per request not yet freed */
  int closing;
};

static void client_unref(bt_http_t *h) {
  if (--h->refs == 0) free(h);
}

/* ---- what backends call ---- */

void bt__http_req_done(bt_http_req_t *req, int err, long status,
                       const char *body, size_t len) {
  req->h->nreq--;
  req->on_done(req, err, status, body, len, req->arg);
}

void bt__http_req_free(bt_http_req_t *req) {
  bt_http_t *h = req->h;
  free(req->head.p);
  free(req);
  client_unref(h);
}

/* ---- URLs ---- */

int bt__http_url_parse(const char *url, bt__http_url_t *u) {
  const char *p, *auth_end, *at = NULL, *hp, *he, *q;
  long port;

  memset(u, 0, sizeof(*u));
  if (strncasecmp(url, "http://", 7) == 0) p = url + 7, port = 80;
  else if (strncasecmp(url, "https://", 8) == 0) p = url + 8, port = 443;
  else return BT_EINVAL;
  auth_end = p + strcspn(p, "/?#");
  for (q = p; q < auth_end; q++)
    if (*q == '@') at = q;
  if (at) {
    const char *colon = memchr(p, ':', (size_t) (at - p));
    u->user = p;
    u->ulen = colon ? (size_t) (colon - p) : (size_t) (at - p);
    if (colon) {
      u->pass = colon + 1;
      u->plen = (size_t) (at - colon - 1);
    }
    p = at + 1;
  }
  u->hostport = p;
  u->hplen = (size_t) (auth_end - p);
  if (*p == '[') {
    he = memchr(p, ']', (size_t) (auth_end - p));
    if (!he) return BT_EINVAL;
    u->host = p + 1;
    u->hlen = (size_t) (he - p - 1);
    hp = he + 1;
  } else {
    he = memchr(p, ':', (size_t) (auth_end - p));
    if (!he) he = auth_end;
    u->host = p;
    u->hlen = (size_t) (he - p);
    hp = he;
  }
  if (u->hlen == 0 || u->hlen > 255) return BT_EINVAL;
  if (hp < auth_end) {
    if (*hp != ':') return BT_EINVAL;
    if (hp + 1 < auth_end) {
      port = 0;
      for (q = hp + 1; q < auth_end; q++) {
        if (!isdigit((unsigned char) *q) || port > 65535) return BT_EINVAL;
        port = port * 10 + (*q - '0');
      }
      if (port < 1 || port > 65535) return BT_EINVAL;
    }
  }
  snprintf(u->port, sizeof(u->port), "%ld", port);
  u->path = auth_end;
  u->pathlen = strcspn(auth_end, "#");
  for (q = url; *q; q++)
    if ((unsigned char) *q <= ' ' || *q == 0x7f) return BT_EINVAL;
  return 0;
}

/* ---- the public face ---- */

bt_http_t *bt_http_new(uv_loop_t *loop) {
  bt_http_t *h = calloc(1, sizeof(*h));
  if (!h) return NULL;
  h->loop = loop;
  h->refs = 1;
  return h;
}

void bt_http_close(bt_http_t *h) {
  int i;
  if (!h || h->closing) return;
  h->closing = 1;
  for (i = 0; i < NBACKENDS; i++) {
    void *state = h->be[i];
    h->be[i] = NULL;
    if (state) backends[i]->close(state);
  }
  client_unref(h);
}

int bt_http_request(bt_http_t *h, const bt_http_opts_t *o,
                    bt_http_req_t **out) {
  const bt__http_backend_t *be;
  bt_http_req_t *req;
  int i, err;

  if (!o->url || !o->on_done) return BT_EINVAL;
  if (h->closing) return BT_ECLOSED;
  i = strncasecmp(o->url, "https://", 8) == 0 ? BE_CURL : BE_NATIVE;
  be = backends[i];
  if (!h->be[i] && !(h->be[i] = be->open(h->loop))) return BT_ENOMEM;
  req = calloc(1, be->req_size);
  if (!req) return BT_ENOMEM;
  req->be = be;
  req->h = h;
  req->on_data = o->on_data;
  req->on_done = o->on_done;
  req->arg = o->arg;
  if ((err = be->start(h->be[i], req, o))) {
    free(req);
    return err;
  }
  h->nreq++;
  h->refs++;
  if (out) *out = req;
  return 0;
}

void bt_http_cancel(bt_http_req_t *req) {
  req->be->cancel(req);
}

int bt_http_req_unsent(const bt_http_req_t *req) {
  return req->unsent;
}

const char *bt_http_req_headers(const bt_http_req_t *req, size_t *len) {
  if (len) *len = req->head.len;
  return req->head.p ? req->head.p : "";
}

const char *bt_http_req_errtext(const bt_http_req_t *req) {
  return req->errtext;
}

int bt_http_url_ok(const char *url) {
  bt__http_url_t u;
  return bt__http_url_parse(url, &u) == 0;
}

int bt_http_active(const bt_http_t *h) {
  return h->nreq;
}
