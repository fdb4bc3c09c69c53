/*
 * https:// for the HTTP client: libcurl's multi interface on a libuv loop,
 * with libcurl loaded by dlopen on first use.
 *
 * Why dlopen: linking libcurl makes every baton process map it and the 37
 * libraries behind it (TLS, Kerberos, LDAP, ...) at exec, which costs ~7 ms
 * of start-up and ~6 MiB of RSS, though most processes only ever speak
 * plain http:// to etcd (http.c does that itself). So curl's header is used
 * for its types and constants only, and every curl function is called
 * through the table `cu`, filled by dlsym. The library is never unloaded:
 * libcurl and its TLS libraries keep process-wide state and exit handlers
 * that must not outlive their code.
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
#include "http_int.h"
#include "err.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BODY BT_HTTP_MAX_BODY

/* The curl functions used here: name without "curl_", return type, params. */
#define CURL_FUNCS(XX)                                                        \
  XX(global_init, CURLcode, (long))                                           \
  XX(multi_init, CURLM *, (void))                                             \
  XX(multi_setopt, CURLMcode, (CURLM *, CURLMoption, ...))                    \
  XX(multi_cleanup, CURLMcode, (CURLM *))                                     \
  XX(multi_add_handle, CURLMcode, (CURLM *, CURL *))                          \
  XX(multi_remove_handle, CURLMcode, (CURLM *, CURL *))                       \
  XX(multi_socket_action, CURLMcode, (CURLM *, curl_socket_t, int, int *))    \
  XX(multi_info_read, CURLMsg *, (CURLM *, int *))                            \
  XX(multi_assign, CURLMcode, (CURLM *, curl_socket_t, void *))               \
  XX(easy_init, CURL *, (void))                                               \
  XX(easy_setopt, CURLcode, (CURL *, CURLoption, ...))                        \
  XX(easy_getinfo, CURLcode, (CURL *, CURLINFO, ...))                         \
  XX(easy_reset, void, (CURL *))                                              \
  XX(easy_cleanup, void, (CURL *))                                            \
  XX(slist_append, struct curl_slist *, (struct curl_slist *, const char *))  \
  XX(slist_free_all, void, (struct curl_slist *))

static struct {
#define XX(name, ret, params) ret (*name) params;
  CURL_FUNCS(XX)
#undef XX
} cu;

static int loaded;           /* 0 not tried, 1 loaded, -1 failed */
static char load_error[256]; /* why it failed, kept for later callers */

typedef bt__buf_t buf_t;

typedef struct curl_req_s curl_req_t;

struct bt_curl_s {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  curl_req_t *reqs;        /* doubly linked list of requests in flight */
  int nreq;
  int in_curl;             /* > 0 while inside curl_multi_socket_action */
  int closing;
  CURL *pool[16];          /* reset easy handles kept for reuse */
  struct sock_s *socks;    /* poll handles of curl's open sockets */
  int npool;
};

struct curl_req_s {
  bt_http_req_t base;      /* first: callers hold &req->base */
  bt_curl_t *c;
  CURL *easy;
  curl_req_t *prev, *next;
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
  bt_curl_t *c;
  struct sock_s *next;
} sock_t;

/* Loads libcurl and fills cu, once per process. Returns 0, or -1 with the
 * reason in load_error (the same reason for every later call). */
static int load_curl(void) {
  void *lib;
  const char *missing = NULL;

  if (loaded) return loaded > 0 ? 0 : -1;
  lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    /* Report the soname's failure: the fallback is for odd installs only. */
    const char *e = dlerror();
    snprintf(load_error, sizeof(load_error), "%s", e ? e : "dlopen failed");
    lib = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib) {
    loaded = -1;
    return -1;
  }
#define XX(name, ret, params)                                                 \
  if (!missing) {                                                             \
    cu.name = (ret(*) params) dlsym(lib, "curl_" #name);                      \
    if (!cu.name) missing = "curl_" #name;                                    \
  }
  CURL_FUNCS(XX)
#undef XX
  if (missing) {
    snprintf(load_error, sizeof(load_error), "libcurl has no %s", missing);
    loaded = -1;
    return -1;
  }
  /* Once per process, never undone: like the library, its global state
   * (TLS) stays for the life of the process. */
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(load_error, sizeof(load_error), "curl_global_init failed");
    loaded = -1;
    return -1;
  }
  loaded = 1;
  return 0;
}

/* Maps a finished transfer's curl code to a BT_E* code. */
static int map_curl(CURLcode code) {
  switch (code) {
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

/* Ends req: removes it from curl and the list, runs on_done once, frees. */
static void finish(curl_req_t *req, int err) {
  bt_curl_t *c = req->c;
  long status = 0;

  req->finishing = 1;
  if (!err)
    cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
  if (err && err != BT_ECANCELED && !req->unsent) {
    curl_off_t sent = 0;
    cu.easy_getinfo(req->easy, CURLINFO_REQUEST_SIZE, &sent);
    if (sent == 0) req->unsent = 1;
  }
  cu.multi_remove_handle(c->multi, req->easy);
  if (req->prev) req->prev->next = req->next;
  else c->reqs = req->next;
  if (req->next) req->next->prev = req->prev;
  c->nreq--;

  /* A stream's 2xx body went to on_data; any other answer is kept whole. */
  req->on_done(&req->base, err, status,
               req->on_data && status >= 200 && status < 300
                   ? NULL : (req->resp.p ? req->resp.p : ""),
               req->resp.len, req->arg);

  /* Reusing a reset easy handle saves its setup on every request. */
  if (c->npool < (int) (sizeof(c->pool) / sizeof(c->pool[0])) && !c->closing) {
    cu.easy_reset(req->easy);
    c->pool[c->npool++] = req->easy;
  } else {
    cu.easy_cleanup(req->easy);
  }
  cu.slist_free_all(req->hdrs);
  free(req->body);
  free(req->resp.p);
  free(req->head.p);
  free(req);
}

static void check_multi_info(bt_curl_t *c) {
  CURLMsg *msg;
  int pending;
  curl_req_t *req, *next;

  while ((msg = cu.multi_info_read(c->multi, &pending))) {
    if (msg->msg != CURLMSG_DONE) continue;
    cu.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
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
  for (req = c->reqs; req; req = next) {
    next = req->next;
    if (req->cancel && !c->in_curl) finish(req, BT_ECANCELED);
  }
}

static void socket_action(bt_curl_t *c, curl_socket_t fd, int flags) {
  int running;
  c->in_curl++;
  cu.multi_socket_action(c->multi, fd, flags, &running);
  c->in_curl--;
  check_multi_info(c);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  sock_t *sk = p->data;
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  socket_action(sk->c, sk->fd, flags);
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
static sock_t *sock_find(bt_curl_t *c, curl_socket_t fd) {
  sock_t *sk;
  for (sk = c->socks; sk; sk = sk->next)
    if (sk->fd == fd) return sk;
  return NULL;
}

static void sock_drop(sock_t *sk) {
  bt_curl_t *c = sk->c;
  sock_t **pp = &c->socks;
  while (*pp && *pp != sk) pp = &(*pp)->next;
  if (*pp) *pp = sk->next;
  uv_close((uv_handle_t *) &sk->poll, on_sock_close);
}

/* curl closes its sockets through here, so that the poll handle is closed
 * (and libuv stops watching the fd) before the fd is, never after. */
static int on_close_socket(void *userp, curl_socket_t fd) {
  bt_curl_t *c = userp;
  sock_t *sk = sock_find(c, fd);
  if (sk) sock_drop(sk);
  return close(fd);
}

/* curl's socket callback: start, change or stop watching fd. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp,
                     void *socketp) {
  bt_curl_t *c = userp;
  sock_t *sk = socketp;
  int events = 0;

  if (!sk) sk = sock_find(c, fd);
  if (what == CURL_POLL_REMOVE) {
    if (sk) uv_poll_stop(&sk->poll);
    return 0;
  }
  if (!sk) {
    sk = calloc(1, sizeof(*sk));
    if (!sk) return -1;
    sk->fd = fd;
    sk->c = c;
    if (uv_poll_init_socket(c->loop, &sk->poll, fd)) {
      free(sk);
      return -1;
    }
    sk->poll.data = sk;
    sk->next = c->socks;
    c->socks = sk;
  }
  cu.multi_assign(c->multi, fd, sk);
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
  bt_curl_t *c = userp;
  if (ms < 0) uv_timer_stop(&c->timer);
  else uv_timer_start(&c->timer, on_timer, (uint64_t) ms, 0);
  return 0;
}

static size_t on_write(char *p, size_t sz, size_t n, void *ud) {
  curl_req_t *req = ud;
  size_t len = sz * n;
  long status = 0;
  if (req->cancel) return 0;
  if (req->on_data) {
    cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    /* An error status streams an error body: keep it whole for on_done. */
    if (status >= 200 && status < 300) {
      req->on_data(&req->base, p, len, req->arg);
      return req->cancel ? 0 : len;
    }
  }
  return bt__buf_add(&req->resp, p, len, MAX_BODY) ? 0 : len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  curl_req_t *req = ud;
  size_t len = sz * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) req->head.len = 0;
  return bt__buf_add(&req->head, p, len, MAX_BODY) ? 0 : len;
}

bt_curl_t *bt_curl_new(uv_loop_t *loop, int *err, char *why, size_t whylen) {
  bt_curl_t *c;
  int e = BT_ENOMEM;

  if (why && whylen) why[0] = '\0';
  if (load_curl()) {
    e = BT_ENOTSUP;
    if (why && whylen)
      snprintf(why, whylen, "https needs libcurl: %s", load_error);
    goto fail;
  }
  c = calloc(1, sizeof(*c));
  if (!c) goto fail;
  c->loop = loop;
  c->multi = cu.multi_init();
  if (!c->multi) {
    free(c);
    goto fail;
  }
  cu.multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  cu.multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  cu.multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
  cu.multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  cu.multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 64L);
  /* A burst of requests queues in curl beyond this many connections to one
   * endpoint instead of opening a socket (and buffers) per request.
   * Streams (watches) hold a connection each, so the bound is generous. */
  cu.multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 256L);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  if (err) *err = 0;
  return c;

fail:
  if (err) *err = e;
  if (e == BT_ENOMEM && why && whylen) snprintf(why, whylen, "out of memory");
  return NULL;
}

static void on_timer_close(uv_handle_t *hd) {
  bt_curl_t *c = hd->data;
  free(c);
}

void bt_curl_close(bt_curl_t *c) {
  if (!c || c->closing) return;
  c->closing = 1;
  while (c->reqs) finish(c->reqs, BT_ECANCELED);
  while (c->npool) cu.easy_cleanup(c->pool[--c->npool]);
  /* curl_multi_cleanup closes cached connections: REMOVE callbacks close
   * their polls before the loop runs again. */
  cu.multi_cleanup(c->multi);
  c->multi = NULL;
  while (c->socks) sock_drop(c->socks); /* sockets curl did not close */
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *) &c->timer, on_timer_close);
}

int bt_curl_request(bt_curl_t *c, const bt_http_opts_t *o,
                    bt_http_req_t **out) {
  curl_req_t *req;
  CURL *e;
  const char *method = o->method;
  int i;

  if (!o->url || !o->on_done) return BT_EINVAL;
  if (c->closing) return BT_ECLOSED;
  req = calloc(1, sizeof(*req));
  if (!req) return BT_ENOMEM;
  e = c->npool ? c->pool[--c->npool] : cu.easy_init();
  if (!e) {
    free(req);
    return BT_ENOMEM;
  }
  req->base.backend = BT_HTTP_CURL;
  req->c = c;
  req->easy = e;
  req->on_data = o->on_data;
  req->on_done = o->on_done;
  req->arg = o->arg;

  cu.easy_setopt(e, CURLOPT_URL, o->url);
  cu.easy_setopt(e, CURLOPT_PRIVATE, (char *) req);
  cu.easy_setopt(e, CURLOPT_ERRORBUFFER, req->errbuf);
  cu.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  /* No proxy: etcd is reached directly, and it spares curl reading the
   * proxy variables of the environment on every request. */
  cu.easy_setopt(e, CURLOPT_PROXY, "");
  cu.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  cu.easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  cu.easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
  cu.easy_setopt(e, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
  cu.easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  cu.easy_setopt(e, CURLOPT_WRITEDATA, req);
  cu.easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  cu.easy_setopt(e, CURLOPT_HEADERDATA, req);
  cu.easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  cu.easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  cu.easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
  cu.easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
  cu.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                 o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000L);
  if (o->timeout_ms > 0) cu.easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms);
  if (o->low_speed_secs > 0) {
    cu.easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    cu.easy_setopt(e, CURLOPT_LOW_SPEED_TIME, o->low_speed_secs);
  }
  if (o->cacert) cu.easy_setopt(e, CURLOPT_CAINFO, o->cacert);
  if (o->cert) cu.easy_setopt(e, CURLOPT_SSLCERT, o->cert);
  if (o->key) cu.easy_setopt(e, CURLOPT_SSLKEY, o->key);
  if (o->insecure) {
    cu.easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    cu.easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (o->body) {
    req->body = malloc(o->body_len ? o->body_len : 1);
    if (!req->body) goto nomem;
    memcpy(req->body, o->body, o->body_len);
    cu.easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    cu.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) o->body_len);
    if (!method) method = "POST";
  }
  if (method && strcmp(method, o->body ? "POST" : "GET") != 0) {
    if (strcmp(method, "HEAD") == 0) cu.easy_setopt(e, CURLOPT_NOBODY, 1L);
    else cu.easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  }
  /* No "Expect: 100-continue" round trip for large bodies. */
  req->hdrs = cu.slist_append(NULL, "Expect:");
  if (!req->hdrs) goto nomem;
  for (i = 0; o->headers && o->headers[i]; i++) {
    struct curl_slist *n = cu.slist_append(req->hdrs, o->headers[i]);
    if (!n) goto nomem;
    req->hdrs = n;
  }
  cu.easy_setopt(e, CURLOPT_HTTPHEADER, req->hdrs);

  if (cu.multi_add_handle(c->multi, e) != CURLM_OK) goto nomem;
  req->next = c->reqs;
  if (c->reqs) c->reqs->prev = req;
  c->reqs = req;
  c->nreq++;
  if (out) *out = &req->base;
  return 0;

nomem:
  cu.easy_cleanup(e);
  cu.slist_free_all(req->hdrs);
  free(req->body);
  free(req);
  return BT_ENOMEM;
}

void bt_curl_cancel(bt_http_req_t *r) {
  curl_req_t *req = (curl_req_t *) r;
  if (req->cancel || req->finishing) return;
  req->cancel = 1;
  if (!req->c->in_curl) finish(req, BT_ECANCELED);
}

int bt_curl_req_unsent(const bt_http_req_t *r) {
  return ((const curl_req_t *) r)->unsent;
}

const char *bt_curl_req_headers(const bt_http_req_t *r, size_t *len) {
  const curl_req_t *req = (const curl_req_t *) r;
  if (len) *len = req->head.len;
  return req->head.p ? req->head.p : "";
}

const char *bt_curl_req_errtext(const bt_http_req_t *r) {
  return ((const curl_req_t *) r)->errbuf;
}

int bt_curl_active(const bt_curl_t *c) {
  return c->nreq;
}
