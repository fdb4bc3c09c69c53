/*
 * HTTP client on a libuv loop (http.h): http:// and https:// through
 * libcurl's multi interface, with libcurl loaded by dlopen when a client
 * makes its first request.
 *
 * Why dlopen: linking libcurl makes every baton process map it and the 37
 * libraries behind it (TLS, Kerberos, LDAP, ...) at exec, which costs ~7 ms
 * of start-up and ~6 MiB of RSS, though most baton processes (`baton lock`,
 * `baton job ls`, `baton eval` of most scripts) never make an HTTP request.
 * So curl's header is used for its types and constants only, every curl
 * function is called through the table `cu`, filled by dlsym, and
 * bt_http_new loads nothing: the first bt_http_request does. The library is
 * never unloaded: libcurl and its TLS libraries keep process-wide state and
 * exit handlers that must not outlive their code. When it cannot be loaded,
 * the client still takes requests and fails each on the next loop turn with
 * BT_ENOTSUP and dlopen's reason (a bare code returned from bt_http_request
 * would lose the reason).
 *
 * The shape is curl's multi-uv example: curl tells us which sockets to watch
 * (on_socket) and when to wake it (on_timer_set); uv tells curl when a socket
 * is ready or the timer fired; after every curl_multi_socket_action we drain
 * curl_multi_info_read to finish the transfers that ended.
 *
 * No callback of the caller runs inside curl: on_done runs from
 * check_multi_info, after curl_multi_socket_action has returned, so a
 * request can be cancelled, and the client closed, from anywhere (curl
 * forbids removing a handle from inside its own callbacks).
 *
 * Requests hold a reference on their client until they are freed, and so
 * does the client's timer until libuv has closed it, so closing the client
 * (or ending a request) from inside on_done is safe: the client is freed
 * once it is closed, its last request freed and its timer closed.
 */
#include "http.h"
#include "dl.h"
#include "err.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BODY (512u << 20)   /* a buffered response body, or header block */
#define ERRTEXT 256             /* a request's error text, NUL included */
#define NEEDS_CURL "libcurl could not be loaded: "  /* curl_dl.error follows */

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
  XX(slist_free_all, void, (struct curl_slist *))                             \
  XX(version_info, curl_version_info_data *, (CURLversion))

#define XX(name, ret, params) +1
enum { CURL_NFUNCS = 0 CURL_FUNCS(XX) };
#undef XX

static union {
  struct {
#define XX(name, ret, params) ret (*name) params;
    CURL_FUNCS(XX)
#undef XX
  };
  void *v[CURL_NFUNCS];
} cu;

static bt_dl_t curl_dl;

/* A growing byte buffer, always NUL-terminated once non-empty. */
typedef struct {
  char *p;
  size_t len, cap;
} buf_t;

typedef struct bt_http_s client_t;
typedef struct bt_http_req_s curl_req_t;

struct bt_http_s {
  uv_loop_t *loop;
  CURLM *multi;            /* NULL when libcurl could not be loaded */
  int opened;              /* the first request has loaded libcurl (or tried) */
  uv_timer_t timer;        /* curl's timeouts; initialised with the client */
  curl_req_t *reqs;        /* doubly linked list of requests in flight */
  int refs;                /* 1 until closed, +1 per request not yet freed,
                              +1 for the timer until libuv has closed it */
  int closing;             /* bt_http_close was called */
  CURL *pool[16];          /* reset easy handles kept for reuse */
  struct sock_s *socks;    /* poll handles of curl's open sockets */
  int npool;
};

struct bt_http_req_s {
  client_t *c;
  bt_http_done_cb on_done;
  void *arg;
  CURL *easy;              /* NULL when libcurl could not be loaded */
  curl_req_t *prev, *next;
  struct curl_slist *hdrs;
  char *body;
  buf_t resp;
  buf_t head;              /* the response's header block */
  int finishing;           /* finish() has started */
  int due;                 /* without libcurl: fails on this timer turn */
  const char *toolarge;    /* what went over MAX_BODY, or NULL */
  char errtext[ERRTEXT];   /* curl's words on a failure (its ERRORBUFFER) */
};

_Static_assert(ERRTEXT >= CURL_ERROR_SIZE, "errtext fits curl's text");

/* Appends n bytes to b unless that makes it longer than max. Returns 0, or
 * -1 (too long, or out of memory). */
static int buf_add(buf_t *b, const char *p, size_t n, size_t max) {
  if (b->len + n > max) return -1;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    char *np;
    while (cap < b->len + n + 1) cap *= 2;
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

static void client_unref(client_t *c) {
  if (--c->refs == 0) free(c);
}

typedef struct sock_s {
  uv_poll_t poll;
  curl_socket_t fd;
  client_t *c;
  struct sock_s *next;
} sock_t;

/* Loads libcurl and fills cu, once per process. Returns 0, or -1 with the
 * reason in curl_dl.error (the same reason for every later call).
 *
 * A libcurl older than 7.85 is refused: it would take the options this
 * file sets without a check and ignore those it does not know
 * (CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR are 7.85's,
 * CURLOPT_PREREQFUNCTION 7.80's), and then follow a redirect to ftp://. */
static int load_curl(void) {
  static const char *const sonames[] = { "libcurl.so.4", "libcurl.so", NULL };
  static const char *const names[] = {
#define XX(name, ret, params) "curl_" #name,
    CURL_FUNCS(XX)
#undef XX
  };
  const curl_version_info_data *v;

  if (curl_dl.state) return curl_dl.state > 0 ? 0 : -1;
  if (bt_dl_load(&curl_dl, sonames, "libcurl", names, cu.v, CURL_NFUNCS))
    return -1;
  v = cu.version_info(CURLVERSION_NOW);
  if (!v || v->version_num < 0x075500)
    return bt_dl_fail(&curl_dl, "libcurl 7.85 or later is needed, found %s",
                      v && v->version ? v->version : "an unknown version");
  /* Once per process, never undone: like the library, its global state
   * (TLS) stays for the life of the process. */
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return bt_dl_fail(&curl_dl, "curl_global_init failed");
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
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2_STREAM: return BT_ECONNRESET;  /* a stream reset */
  case CURLE_OUT_OF_MEMORY: return BT_ENOMEM;
  case CURLE_FILESIZE_EXCEEDED: return BT_ETOOLARGE; /* Content-Length */
  case CURLE_WRITE_ERROR: return BT_ENOMEM; /* unless over MAX_BODY: below */
  case CURLE_TOO_MANY_REDIRECTS: return BT_EHTTP;
  case CURLE_HTTP2:
  case CURLE_WEIRD_SERVER_REPLY:
  case CURLE_BAD_CONTENT_ENCODING: return BT_EPROTO;
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL: return BT_EINVAL;
  default: return BT_EIO;
  }
}

/* Ends req: removes it from curl and the list, reports its end once
 * (on_done), frees it. */
static void finish(curl_req_t *req, int err) {
  client_t *c = req->c;
  long status = 0;

  req->finishing = 1;
  if (req->easy) {
    if (!err)
      cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    cu.multi_remove_handle(c->multi, req->easy);
  }
  if (req->prev) req->prev->next = req->next;
  else c->reqs = req->next;
  if (req->next) req->next->prev = req->prev;

  req->on_done(req, err, status, req->resp.p ? req->resp.p : "",
               req->resp.len, req->arg);

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
  free(req->head.p);
  free(req);
  client_unref(c);
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
  curl_req_t *req;

  /* An on_done may close the client: no multi handle after that. */
  while (c->multi && (msg = cu.multi_info_read(c->multi, &pending))) {
    if (msg->msg != CURLMSG_DONE) continue;
    cu.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
    {
      CURLcode code = msg->data.result;
      int err = map_curl(code);
      /* After a connection (curl has the peer's address): not a URL of
       * another scheme but a redirect to one (refused: the last answer was
       * a 3xx), or an answer that is not HTTP/1.x ("Received HTTP/0.9 when
       * not allowed"). */
      if (err == BT_EINVAL && code == CURLE_UNSUPPORTED_PROTOCOL) {
        long last = 0;
        char *ip = NULL;
        cu.easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &last);
        cu.easy_getinfo(req->easy, CURLINFO_PRIMARY_IP, &ip);
        if (last >= 300 && last < 400) err = BT_EHTTP;
        else if (ip && *ip) err = BT_EPROTO;
      }
      if (req->toolarge || code == CURLE_FILESIZE_EXCEEDED) {
        err = BT_ETOOLARGE;
        snprintf(req->errtext, sizeof(req->errtext), "%s over 512 MiB",
                 req->toolarge ? req->toolarge : "response body");
      }
      /* msg is invalid after remove_handle, so nothing of it is used below */
      finish(req, err);
    }
  }
}

static void socket_action(client_t *c, curl_socket_t fd, int flags) {
  int running;
  cu.multi_socket_action(c->multi, fd, flags, &running);
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
  if (req->resp.len + len > MAX_BODY) {
    req->toolarge = "response body";
    return 0;
  }
  return buf_add(&req->resp, p, len, MAX_BODY) ? 0 : len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  curl_req_t *req = ud;
  size_t len = sz * n;
  /* A new status line: a 1xx's or a followed redirect's headers (and a
   * redirect's body, which curl may have written) are not the answer's. */
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    req->head.len = 0;
    req->resp.len = 0;
    if (req->resp.p) req->resp.p[0] = '\0';
  }
  if (req->head.len + len > MAX_BODY) {
    req->toolarge = "response header block";
    return 0;
  }
  return buf_add(&req->head, p, len, MAX_BODY) ? 0 : len;
}

/* On the client's first request: loads libcurl if this is the process's
 * first request, and makes the multi handle. Without libcurl the client
 * goes on without one, to fail its requests with the reason. Returns 0, or
 * BT_ENOMEM (tried again on the next request). */
static int client_open(client_t *c) {
  if (load_curl() == 0) {
    c->multi = cu.multi_init();
    if (!c->multi) return BT_ENOMEM;
    cu.multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    cu.multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    cu.multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
    cu.multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    cu.multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 64L);
    /* A burst of requests queues in curl beyond this many connections to
     * one endpoint instead of opening a socket (and buffers) per request;
     * generous, so that a script's many slow requests to one server (long
     * polls, say) do not wait behind each other. */
    cu.multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 256L);
  }
  c->opened = 1;
  return 0;
}

static void on_timer_close(uv_handle_t *hd) {
  client_unref(hd->data);
}

bt_http_t *bt_http_new(uv_loop_t *loop) {
  client_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->loop = loop;
  c->refs = 2;  /* open, and the timer */
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  return c;
}

/* Ends every request, closes the handles, drops the client's "open"
 * reference. */
static void close_now(client_t *c) {
  while (c->reqs) finish(c->reqs, BT_ECANCELED);
  while (c->npool) cu.easy_cleanup(c->pool[--c->npool]);
  /* curl_multi_cleanup closes cached connections: REMOVE callbacks close
   * their polls before the loop runs again. */
  if (c->multi) cu.multi_cleanup(c->multi);
  c->multi = NULL;
  while (c->socks) sock_drop(c->socks); /* sockets curl did not close */
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *) &c->timer, on_timer_close);
  client_unref(c);
}

void bt_http_close(bt_http_t *c) {
  if (!c || c->closing) return;
  c->closing = 1;
  close_now(c);
}

static void link_req(client_t *c, curl_req_t *req) {
  req->next = c->reqs;
  if (c->reqs) c->reqs->prev = req;
  c->reqs = req;
}

/* Sets req up as o says and hands it to curl. Returns 0, or a BT_E* code
 * with nothing kept (the caller frees req). */
static int start(client_t *c, curl_req_t *req, const bt_http_opts_t *o) {
  CURL *e;
  const char *method = o->method;
  int i;

  if (!c->multi) {
    snprintf(req->errtext, sizeof(req->errtext), "%s%.*s",
             NEEDS_CURL, (int) (sizeof(req->errtext) - sizeof(NEEDS_CURL)),
             curl_dl.error);
    link_req(c, req);
    uv_timer_start(&c->timer, on_timer, 0, 0);
    return 0;
  }
  e = c->npool ? c->pool[--c->npool] : cu.easy_init();
  if (!e) return BT_ENOMEM;
  req->easy = e;

  cu.easy_setopt(e, CURLOPT_URL, o->url);
  cu.easy_setopt(e, CURLOPT_PRIVATE, (char *) req);
  cu.easy_setopt(e, CURLOPT_ERRORBUFFER, req->errtext);
  cu.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  /* A proxy only when asked for: "" makes curl ignore the environment's
   * variables (and spares it reading them on every request); NOPROXY ""
   * makes a given proxy serve every host, whatever no_proxy says. */
  if (o->proxy) {
    cu.easy_setopt(e, CURLOPT_PROXY, o->proxy);
    cu.easy_setopt(e, CURLOPT_NOPROXY, "");
  } else if (!o->env_proxy) {
    cu.easy_setopt(e, CURLOPT_PROXY, "");
  }
  cu.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (o->max_redirects > 0) {
    /* Only to http(s). curl itself keeps credentials to the first host:
     * user:password of the URL, and custom Authorization and Cookie
     * headers, are not sent after a change of host, port or scheme
     * (CURLOPT_UNRESTRICTED_AUTH stays 0); tests/lua/http-options.lua
     * checks it. A POST becomes a GET after a 301, 302 or 303; other
     * methods are repeated as they are (below). */
    cu.easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    cu.easy_setopt(e, CURLOPT_MAXREDIRS, o->max_redirects);
    cu.easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  cu.easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  cu.easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
  /* 2TLS: HTTP/2 only where ALPN offers it (https); http:// stays 1.1,
   * with no h2c upgrade. */
  cu.easy_setopt(e, CURLOPT_HTTP_VERSION,
                 (long) (o->http2 ? CURL_HTTP_VERSION_2TLS
                                  : CURL_HTTP_VERSION_1_1));
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
  /* A Content-Length over the limit fails at the headers, not 512 MiB on. */
  cu.easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) MAX_BODY);
  if (o->cacert) cu.easy_setopt(e, CURLOPT_CAINFO, o->cacert);
  if (o->body) {
    req->body = malloc(o->body_len ? o->body_len : 1);
    if (!req->body) goto nomem;
    memcpy(req->body, o->body, o->body_len);
    cu.easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    cu.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) o->body_len);
    if (!method) method = "POST";
  }
  if (method && strcmp(method, o->body ? "POST" : "GET") != 0) {
    if (strcmp(method, "HEAD") == 0) {
      cu.easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
      cu.easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
      /* curl repeats a custom method on every redirect, but would drop its
       * body after a 301, 302 or 303 (as for a POST it turns into a GET):
       * an empty PUT at the new place. The body goes with the method. */
      if (o->body && o->max_redirects > 0)
        cu.easy_setopt(e, CURLOPT_POSTREDIR, (long) CURL_REDIR_POST_ALL);
    }
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

int bt_http_request(bt_http_t *c, const bt_http_opts_t *o,
                    bt_http_req_t **out) {
  curl_req_t *req;
  int err;

  if (!o->url || !o->on_done) return BT_EINVAL;
  if (c->closing) return BT_ECLOSED;
  if (!c->opened && (err = client_open(c))) return err;
  req = calloc(1, sizeof(*req));
  if (!req) return BT_ENOMEM;
  req->c = c;
  req->on_done = o->on_done;
  req->arg = o->arg;
  if ((err = start(c, req, o))) {
    free(req);
    return err;
  }
  c->refs++;
  if (out) *out = req;
  return 0;
}

void bt_http_cancel(bt_http_req_t *req) {
  if (!req->finishing) finish(req, BT_ECANCELED);
}

const char *bt_http_req_headers(const bt_http_req_t *req, size_t *len) {
  if (len) *len = req->head.len;
  return req->head.p ? req->head.p : "";
}

const char *bt_http_req_url(const bt_http_req_t *req) {
  char *url = NULL;
  if (!req->easy) return NULL;
  cu.easy_getinfo(req->easy, CURLINFO_EFFECTIVE_URL, &url);
  return url;
}

long bt_http_req_redirects(const bt_http_req_t *req) {
  long n = 0;
  if (req->easy) cu.easy_getinfo(req->easy, CURLINFO_REDIRECT_COUNT, &n);
  return n;
}

const char *bt_http_req_version(const bt_http_req_t *req) {
  long v = 0;
  if (req->easy) cu.easy_getinfo(req->easy, CURLINFO_HTTP_VERSION, &v);
  switch (v) {
  case CURL_HTTP_VERSION_1_0: return "1.0";
  case CURL_HTTP_VERSION_1_1: return "1.1";
  case CURL_HTTP_VERSION_2_0: return "2";
  case CURL_HTTP_VERSION_3: return "3";
  default: return "";
  }
}

const char *bt_http_req_errtext(const bt_http_req_t *req) {
  return req->errtext;
}
