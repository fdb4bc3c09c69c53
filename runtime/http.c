/*
 * libcurl's multi interface on a libuv loop.
 *
 * The shape is curl's multi-uv example: curl tells us which sockets to watch
 * (on_socket) and when to wake it (on_timer_set); uv tells curl when a socket
 * is ready or the timer fired; after every curl_multi_socket_action we drain
 * curl_multi_info_read to finish the transfers that ended.
 *
 * curl forbids removing a handle from inside its own callbacks, so a cancel
 * requested from a data callback only marks the request; the write callback
 * then aborts the transfer and it finishes through the normal path.
 */
#include "http.h"
#include "err.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BODY (512u << 20)

typedef struct {
  char *p;
  size_t len, cap;
} buf_t;

struct bt_http_s {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  bt_http_req_t *reqs;     /* doubly linked list of requests in flight */
  int nreq;
  int in_curl;             /* > 0 while inside curl_multi_socket_action */
  int closing;
  CURL *pool[16];          /* reset easy handles kept for reuse */
  struct sock_s *socks;    /* poll handles of curl's open sockets */
  int npool;
};

struct bt_http_req_s {
  bt_http_t *h;
  CURL *easy;
  bt_http_req_t *prev, *next;
  struct curl_slist *hdrs;
  char *body;
  buf_t resp, head;
  bt_http_data_cb on_data;
  bt_http_done_cb on_done;
  void *arg;
  int cancel;              /* cancel requested */
  int finishing;           /* finish() has started */
  int unsent;
  char errbuf[CURL_ERROR_SIZE];
};

typedef struct sock_s {
  uv_poll_t poll;
  curl_socket_t fd;
  bt_http_t *h;
  struct sock_s *next;
} sock_t;

static int global_refs;

static int buf_add(buf_t *b, const char *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    char *np;
    while (cap < b->len + n + 1) cap *= 2;
    if (cap > MAX_BODY) return -1;
    np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

/* Maps a finished transfer's curl code to a BT_E* code. */
static int map_curl(CURLcode c) {
  switch (c) {
  case CURLE_OK: return 0;
  case CURLE_COULDNT_CONNECT: return BT_ECONNREFUSED;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY: return BT_EAI_NONAME;
  case CURLE_OPERATION_TIMEDOUT: return BT_ETIMEDOUT;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ISSUER_ERROR: return BT_ETLS;
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE: return BT_ECONNRESET;
  case CURLE_OUT_OF_MEMORY: return BT_ENOMEM;
  case CURLE_WRITE_ERROR: return BT_ETOOLARGE; /* body over MAX_BODY */
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL: return BT_EINVAL;
  default: return BT_EIO;
  }
}

static void check_multi_info(bt_http_t *h);

/* Ends req: removes it from curl and the list, runs on_done once, frees. */
static void finish(bt_http_req_t *req, int err) {
  bt_http_t *h = req->h;
  long status = 0;

  req->finishing = 1;
  if (!err)
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
  if (err && err != BT_ECANCELED && !req->unsent) {
    curl_off_t sent = 0;
    curl_easy_getinfo(req->easy, CURLINFO_REQUEST_SIZE, &sent);
    if (sent == 0) req->unsent = 1;
  }
  curl_multi_remove_handle(h->multi, req->easy);
  if (req->prev) req->prev->next = req->next;
  else h->reqs = req->next;
  if (req->next) req->next->prev = req->prev;
  h->nreq--;

  req->on_done(req, err, status, req->on_data ? NULL : (req->resp.p ? req->resp.p : ""),
               req->resp.len, req->arg);

  /* Reusing a reset easy handle saves its setup on every request. */
  if (h->npool < (int) (sizeof(h->pool) / sizeof(h->pool[0])) && !h->closing) {
    curl_easy_reset(req->easy);
    h->pool[h->npool++] = req->easy;
  } else {
    curl_easy_cleanup(req->easy);
  }
  curl_slist_free_all(req->hdrs);
  free(req->body);
  free(req->resp.p);
  free(req->head.p);
  free(req);
}

static void check_multi_info(bt_http_t *h) {
  CURLMsg *msg;
  int pending;
  bt_http_req_t *req, *next;

  while ((msg = curl_multi_info_read(h->multi, &pending))) {
    if (msg->msg != CURLMSG_DONE) continue;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
    {
      CURLcode code = msg->data.result;
      int err = req->cancel ? BT_ECANCELED : map_curl(code);
      if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
          code == CURLE_COULDNT_RESOLVE_PROXY)
        req->unsent = 1;
      /* msg is invalid after remove_handle, so nothing of it is used below */
      finish(req, err);
    }
  }
  /* Cancels requested from inside curl callbacks of other transfers. */
  for (req = h->reqs; req; req = next) {
    next = req->next;
    if (req->cancel && !h->in_curl) finish(req, BT_ECANCELED);
  }
}

static void socket_action(bt_http_t *h, curl_socket_t fd, int flags) {
  int running;
  h->in_curl++;
  curl_multi_socket_action(h->multi, fd, flags, &running);
  h->in_curl--;
  check_multi_info(h);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  sock_t *sk = p->data;
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  socket_action(sk->h, sk->fd, flags);
}

static void on_timer(uv_timer_t *t) {
  socket_action(t->data, CURL_SOCKET_TIMEOUT, 0);
}

static void on_sock_close(uv_handle_t *hd) {
  free(hd->data);
}

/* The poll handle of fd, if one is kept (a kept-alive connection's handle
 * outlives its transfers: stopping a poll is cheaper than closing it and
 * making a new one, which costs epoll and ioctl calls per request). */
static sock_t *sock_find(bt_http_t *h, curl_socket_t fd) {
  sock_t *sk;
  for (sk = h->socks; sk; sk = sk->next)
    if (sk->fd == fd) return sk;
  return NULL;
}

static void sock_drop(sock_t *sk) {
  bt_http_t *h = sk->h;
  sock_t **pp = &h->socks;
  while (*pp && *pp != sk) pp = &(*pp)->next;
  if (*pp) *pp = sk->next;
  uv_close((uv_handle_t *) &sk->poll, on_sock_close);
}

/* curl closes its sockets through here, so that the poll handle is closed
 * (and libuv stops watching the fd) before the fd is, never after. */
static int on_close_socket(void *userp, curl_socket_t fd) {
  bt_http_t *h = userp;
  sock_t *sk = sock_find(h, fd);
  if (sk) sock_drop(sk);
  return close(fd);
}

/* curl's socket callback: start, change or stop watching fd. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp,
                     void *socketp) {
  bt_http_t *h = userp;
  sock_t *sk = socketp;
  int events = 0;

  if (!sk) sk = sock_find(h, fd);
  if (what == CURL_POLL_REMOVE) {
    if (sk) uv_poll_stop(&sk->poll);
    return 0;
  }
  if (!sk) {
    sk = calloc(1, sizeof(*sk));
    if (!sk) return -1;
    sk->fd = fd;
    sk->h = h;
    if (uv_poll_init_socket(h->loop, &sk->poll, fd)) {
      free(sk);
      return -1;
    }
    sk->poll.data = sk;
    sk->next = h->socks;
    h->socks = sk;
  }
  curl_multi_assign(h->multi, fd, sk);
  if (what & CURL_POLL_IN) events |= UV_READABLE;
  if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
  uv_poll_start(&sk->poll, events, on_poll);
  return 0;
}

/* curl's timer callback: wake curl after ms; -1 stops. 0 means "as soon as
 * possible but not from inside this callback": a 0 ms uv timer fires on the
 * loop's next turn, never synchronously. (Rounding it up to 1 ms, as some
 * examples do, adds a millisecond to every request.) */
static int on_timer_set(CURLM *m, long ms, void *userp) {
  bt_http_t *h = userp;
  if (ms < 0) uv_timer_stop(&h->timer);
  else uv_timer_start(&h->timer, on_timer, (uint64_t) ms, 0);
  return 0;
}

static size_t on_write(char *p, size_t sz, size_t n, void *ud) {
  bt_http_req_t *req = ud;
  size_t len = sz * n;
  long status = 0;
  if (req->cancel) return 0;
  if (req->on_data) {
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    /* An error status streams an error body: keep it whole for on_done. */
    if (status >= 200 && status < 300) {
      req->on_data(req, p, len, req->arg);
      return req->cancel ? 0 : len;
    }
  }
  return buf_add(&req->resp, p, len) ? 0 : len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  bt_http_req_t *req = ud;
  size_t len = sz * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) req->head.len = 0;
  return buf_add(&req->head, p, len) ? 0 : len;
}

bt_http_t *bt_http_new(uv_loop_t *loop) {
  bt_http_t *h = calloc(1, sizeof(*h));
  if (!h) return NULL;
  if (global_refs++ == 0) curl_global_init(CURL_GLOBAL_DEFAULT);
  h->loop = loop;
  h->multi = curl_multi_init();
  if (!h->multi) {
    free(h);
    return NULL;
  }
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, 64L);
  /* A burst of requests queues in curl beyond this many connections to one
   * endpoint instead of opening a socket (and buffers) per request.
   * Streams (watches) hold a connection each, so the bound is generous. */
  curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 256L);
  uv_timer_init(loop, &h->timer);
  h->timer.data = h;
  return h;
}

static void on_timer_close(uv_handle_t *hd) {
  bt_http_t *h = hd->data;
  free(h);
  if (--global_refs == 0) curl_global_cleanup();
}

void bt_http_close(bt_http_t *h) {
  if (!h || h->closing) return;
  h->closing = 1;
  while (h->reqs) finish(h->reqs, BT_ECANCELED);
  while (h->npool) curl_easy_cleanup(h->pool[--h->npool]);
  /* curl_multi_cleanup closes cached connections: REMOVE callbacks close
   * their polls before the loop runs again. */
  curl_multi_cleanup(h->multi);
  h->multi = NULL;
  while (h->socks) sock_drop(h->socks); /* sockets curl did not close */
  uv_timer_stop(&h->timer);
  uv_close((uv_handle_t *) &h->timer, on_timer_close);
}

int bt_http_request(bt_http_t *h, const bt_http_opts_t *o,
                    bt_http_req_t **out) {
  bt_http_req_t *req;
  CURL *e;
  const char *method = o->method;
  int i;

  if (!o->url || !o->on_done) return BT_EINVAL;
  if (h->closing) return BT_ECLOSED;
  req = calloc(1, sizeof(*req));
  if (!req) return BT_ENOMEM;
  e = h->npool ? h->pool[--h->npool] : curl_easy_init();
  if (!e) {
    free(req);
    return BT_ENOMEM;
  }
  req->h = h;
  req->easy = e;
  req->on_data = o->on_data;
  req->on_done = o->on_done;
  req->arg = o->arg;

  curl_easy_setopt(e, CURLOPT_URL, o->url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *) req);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  /* No proxy: etcd is reached directly, and it spares curl reading the
   * proxy variables of the environment on every request. */
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, h);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, req);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000L);
  if (o->timeout_ms > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms);
  if (o->low_speed_secs > 0) {
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, o->low_speed_secs);
  }
  if (o->cacert) curl_easy_setopt(e, CURLOPT_CAINFO, o->cacert);
  if (o->cert) curl_easy_setopt(e, CURLOPT_SSLCERT, o->cert);
  if (o->key) curl_easy_setopt(e, CURLOPT_SSLKEY, o->key);
  if (o->insecure) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (o->body) {
    req->body = malloc(o->body_len ? o->body_len : 1);
    if (!req->body) goto nomem;
    memcpy(req->body, o->body, o->body_len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) o->body_len);
    if (!method) method = "POST";
  }
  if (method && strcmp(method, o->body ? "POST" : "GET") != 0) {
    if (strcmp(method, "HEAD") == 0) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  }
  /* No "Expect: 100-continue" round trip for large bodies. */
  req->hdrs = curl_slist_append(NULL, "Expect:");
  if (!req->hdrs) goto nomem;
  for (i = 0; o->headers && o->headers[i]; i++) {
    struct curl_slist *n = curl_slist_append(req->hdrs, o->headers[i]);
    if (!n) goto nomem;
    req->hdrs = n;
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->hdrs);

  if (curl_multi_add_handle(h->multi, e) != CURLM_OK) goto nomem;
  req->next = h->reqs;
  if (h->reqs) h->reqs->prev = req;
  h->reqs = req;
  h->nreq++;
  if (out) *out = req;
  return 0;

nomem:
  curl_easy_cleanup(e);
  curl_slist_free_all(req->hdrs);
  free(req->body);
  free(req);
  return BT_ENOMEM;
}

void bt_http_cancel(bt_http_req_t *req) {
  if (req->cancel || req->finishing) return;
  req->cancel = 1;
  if (!req->h->in_curl) finish(req, BT_ECANCELED);
}

int bt_http_req_unsent(const bt_http_req_t *req) {
  return req->unsent;
}

const char *bt_http_req_headers(const bt_http_req_t *req, size_t *len) {
  if (len) *len = req->head.len;
  return req->head.p ? req->head.p : "";
}

const char *bt_http_req_errtext(const bt_http_req_t *req) {
  return req->errbuf;
}

int bt_http_active(const bt_http_t *h) {
  return h->nreq;
}
