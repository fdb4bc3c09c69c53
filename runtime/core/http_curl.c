/*
 * The HTTP client's curl backend (http_backend.h): https:// through
 * libcurl's multi interface on a libuv loop, with libcurl loaded by dlopen
 * when a client makes its first https request.
 *
 * Why dlopen: linking libcurl makes every baton process map it and the 37
 * libraries behind it (TLS, Kerberos, LDAP, ...) at exec, which costs ~7 ms
 * of start-up and ~6 MiB of RSS, though most processes only ever speak
 * plain http:// to etcd (the native backend, http_native.c, does that). So
 * curl's header is used for its types and constants only, and every curl
 * function is called through the table `cu`, filled by dlsym. The library
 * is never unloaded: libcurl and its TLS libraries keep process-wide state
 * and exit handlers that must not outlive their code. When it cannot be
 * loaded, the client still takes requests and fails each on the next loop
 * turn with BT_ENOTSUP and dlopen's reason (a bare code returned from
 * bt_http_request would lose the reason).
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
#include "http_backend.h"
#include "err.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BODY BT_HTTP_MAX_BODY
#define NEEDS_CURL "https needs libcurl: "  /* load_error follows */

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

typedef struct client_s client_t;
typedef struct curl_req_s curl_req_t;

/* The backend's state for one client of the front end. */
struct client_s {
  uv_loop_t *loop;
  CURLM *multi;            /* NULL when libcurl could not be loaded */
  uv_timer_t timer;
  curl_req_t *reqs;        /* doubly linked list of requests in flight */
  int in_curl;             /* > 0 while inside curl_multi_socket_action */
  int closing;
  CURL *pool[16];          /* reset easy handles kept for reuse */
  struct sock_s *socks;    /* poll handles of curl's open sockets */
  int npool;
};

struct curl_req_s {
  bt_http_req_t base;      /* first: the front end's part */
  client_t *c;
  CURL *easy;              /* NULL when libcurl could not be loaded */
  curl_req_t *prev, *next;
  struct curl_slist *hdrs;
  char *body;
  buf_t resp;
  int cancel;              /* cancel requested */
  int finishing;           /* finish() has started */
  int due;                 /* without libcurl: fails on this timer turn */
};

/* curl writes its error text into the front end's buffer. */
_Static_assert(BT__HTTP_ERRTEXT >= CURL_ERROR_SIZE, "errtext fits curl's text");

typedef struct sock_s {
  uv_poll_t poll;
  curl_socket_t fd;
  client_t *c;
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

/* Ends req: removes it from curl and the list, reports its end to the
 * front end once, gives it back. */
static void finish(curl_req_t *req, int err) {
  client_t *c = req->c;
  long status = 0;

  req->finishing = 1;
  if (req->easy) {
    if (!err)
      cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    if (err && err != BT_ECANCELED && !req->base.unsent) {
      curl_off_t sent = 0;
      cu.easy_getinfo(req->easy, CURLINFO_REQUEST_SIZE, &sent);
      if (sent == 0) req->base.unsent = 1;
    }
    cu.multi_remove_handle(c->multi, req->easy);
  }
  if (req->prev) req->prev->next = req->next;
  else c->reqs = req->next;
  if (req->next) req->next->prev = req->prev;

  /* A stream's 2xx body went to on_data; any other answer is kept whole. */
  bt__http_req_done(&req->base, err, status,
                    req->base.on_data && status >= 200 && status < 300
                        ? NULL : (req->resp.p ? req->resp.p : ""),
                    req->resp.len);

  if (req->easy) {
    /* Reusing a reset easy handle saves its setup on every request. */
    if (c->npool < (int) (sizeof(c->pool) / sizeof(c->pool[0])) &&
        !c->closing) {
      cu.easy_reset(req->easy);
      c->pool[c->npool++] = req->easy;
    } else {
      cu.easy_cleanup(req->easy);
    }
    cu.slist_free_all(req->hdrs);
  }
  free(req->body);
  free(req->resp.p);
  bt__http_req_free(&req->base);
}

/* Without libcurl: fails the requests started before this timer turn (not
 * those their on_done starts: they fail on the next one). */
static void fail_unloaded(client_t *c) {
  curl_req_t *req;
  for (req = c->reqs; req; req = req->next) req->due = 1;
  for (;;) {
    for (req = c->reqs; req && !req->due; req = req->next) {}
    if (!req) break;
    finish(req, BT_ENOTSUP);
  }
}

static void check_multi_info(client_t *c) {
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
        req->base.unsent = 1;
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

static void socket_action(client_t *c, curl_socket_t fd, int flags) {
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
  client_t *c = t->data;
  if (!c->multi) fail_unloaded(c);
  else socket_action(c, CURL_SOCKET_TIMEOUT, 0);
}

static void on_sock_close(uv_handle_t *hd) {
  free(hd->data);
}

/* The poll handle of fd, if one is kept (a kept-alive connection's handle
 * outlives its transfers: stopping a poll is cheaper than closing it and
 * making a new one, which costs epoll and ioctl calls per request). */
static sock_t *sock_find(client_t *c, curl_socket_t fd) {
  sock_t *sk;
  for (sk = c->socks; sk; sk = sk->next)
    if (sk->fd == fd) return sk;
  return NULL;
}

static void sock_drop(sock_t *sk) {
  client_t *c = sk->c;
  sock_t **pp = &c->socks;
  while (*pp && *pp != sk) pp = &(*pp)->next;
  if (*pp) *pp = sk->next;
  uv_close((uv_handle_t *) &sk->poll, on_sock_close);
}

/* curl closes its sockets through here, so that the poll handle is closed
 * (and libuv stops watching the fd) before the fd is, never after. */
static int on_close_socket(void *userp, curl_socket_t fd) {
  client_t *c = userp;
  sock_t *sk = sock_find(c, fd);
  if (sk) sock_drop(sk);
  return close(fd);
}

/* curl's socket callback: start, change or stop watching fd. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp,
                     void *socketp) {
  client_t *c = userp;
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
  client_t *c = userp;
  if (ms < 0) uv_timer_stop(&c->timer);
  else uv_timer_start(&c->timer, on_timer, (uint64_t) ms, 0);
  return 0;
}

static size_t on_write(char *p, size_t sz, size_t n, void *ud) {
  curl_req_t *req = ud;
  size_t len = sz * n;
  long status = 0;
  if (req->cancel) return 0;
  if (req->base.on_data) {
    cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    /* An error status streams an error body: keep it whole for on_done. */
    if (status >= 200 && status < 300) {
      req->base.on_data(&req->base, p, len, req->base.arg);
      return req->cancel ? 0 : len;
    }
  }
  return bt__buf_add(&req->resp, p, len, MAX_BODY) ? 0 : len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  curl_req_t *req = ud;
  size_t len = sz * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) req->base.head.len = 0;
  return bt__buf_add(&req->base.head, p, len, MAX_BODY) ? 0 : len;
}

/* Makes the client; loads libcurl first if this is the process's first
 * https request. Without libcurl the client is made all the same (with no
 * multi handle), to fail its requests with the reason. */
static void *curl_open(uv_loop_t *loop) {
  client_t *c = calloc(1, sizeof(*c));

  if (!c) return NULL;
  c->loop = loop;
  if (load_curl() == 0) {
    c->multi = cu.multi_init();
    if (!c->multi) {
      free(c);
      return NULL;
    }
    cu.multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    cu.multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    cu.multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
    cu.multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    cu.multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 64L);
    /* A burst of requests queues in curl beyond this many connections to
     * one endpoint instead of opening a socket (and buffers) per request.
     * Streams (watches) hold a connection each, so the bound is generous. */
    cu.multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 256L);
  }
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  return c;
}

static void on_timer_close(uv_handle_t *hd) {
  client_t *c = hd->data;
  free(c);
}

static void curl_close(void *client) {
  client_t *c = client;
  c->closing = 1;
  while (c->reqs) finish(c->reqs, BT_ECANCELED);
  while (c->npool) cu.easy_cleanup(c->pool[--c->npool]);
  /* curl_multi_cleanup closes cached connections: REMOVE callbacks close
   * their polls before the loop runs again. */
  if (c->multi) cu.multi_cleanup(c->multi);
  c->multi = NULL;
  while (c->socks) sock_drop(c->socks); /* sockets curl did not close */
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *) &c->timer, on_timer_close);
}

static void link_req(client_t *c, curl_req_t *req) {
  req->next = c->reqs;
  if (c->reqs) c->reqs->prev = req;
  c->reqs = req;
}

static int curl_start(void *client, bt_http_req_t *base,
                      const bt_http_opts_t *o) {
  client_t *c = client;
  curl_req_t *req = (curl_req_t *) base;
  CURL *e;
  const char *method = o->method;
  int i;

  req->c = c;
  if (!c->multi) {
    req->base.unsent = 1;
    snprintf(req->base.errtext, sizeof(req->base.errtext), "%s%.*s",
             NEEDS_CURL, (int) (sizeof(req->base.errtext) - sizeof(NEEDS_CURL)),
             load_error);
    link_req(c, req);
    uv_timer_start(&c->timer, on_timer, 0, 0);
    return 0;
  }
  e = c->npool ? c->pool[--c->npool] : cu.easy_init();
  if (!e) return BT_ENOMEM;
  req->easy = e;

  cu.easy_setopt(e, CURLOPT_URL, o->url);
  cu.easy_setopt(e, CURLOPT_PRIVATE, (char *) req);
  cu.easy_setopt(e, CURLOPT_ERRORBUFFER, req->base.errtext);
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
  link_req(c, req);
  return 0;

nomem:
  cu.easy_cleanup(e);
  cu.slist_free_all(req->hdrs);
  req->hdrs = NULL;
  free(req->body);
  req->body = NULL;
  return BT_ENOMEM;
}

static void curl_cancel(bt_http_req_t *base) {
  curl_req_t *req = (curl_req_t *) base;
  if (req->cancel || req->finishing) return;
  req->cancel = 1;
  if (!req->c->in_curl) finish(req, BT_ECANCELED);
}

const bt__http_backend_t bt__http_curl = {
  sizeof(curl_req_t), curl_open, curl_close, curl_start, curl_cancel,
};
