/*
 * HTTP/1.1 server on a libuv loop (see httpd.h), glued to libmicrohttpd.
 *
 * The glue. MHD runs with MHD_USE_EPOLL and no thread of its own: every
 * socket it serves sits in one epoll set, whose descriptor a uv_poll_t
 * watches. kick() runs MHD (MHD_run: accept, read, parse, call us, write,
 * close timed-out connections) and re-arms one uv_timer_t for MHD's next
 * deadline. The poll's and the timer's callbacks both call kick(); nothing
 * else does, so MHD never runs inside itself or inside Lua: an answer that
 * resumes a suspended connection schedules a kick on the next loop turn
 * (the timer at 0 ms).
 *
 * A request. We bind the listening socket ourselves (exact bind errors, port
 * 0) and give it to MHD. MHD calls on_uri with the raw request target before
 * it parses or percent-decodes anything: that is where a request (req_t)
 * is made and the path split from the query; the unescape callback is a
 * no-op so MHD's own copy stays raw too. on_access is then called for the
 * headers, for each piece of body, and once more at the end of the body.
 * At the headers the request is shown to on_check, which may answer it at
 * once (MHD then reads none of the body), and its announced body is
 * counted against the bodies of all requests (max_body_total); at the end
 * of the body the request is handed to on_request and, unless it was
 * answered at once, its connection suspended. bt_httpd_respond builds the MHD
 * response, resumes the connection and kicks; MHD calls on_access again,
 * which queues the response. MHD calls on_completed when it is done with
 * the request (sent, failed, timed out, or the daemon stopped).
 *
 * Body memory. A request's body is held from its first byte until the
 * request is freed. Its size is reserved in srv->body_total: all of the
 * announced Content-Length at the headers (refused with 503 when it does
 * not fit), or, for a chunked body, each time its buffer grows.
 *
 * Ownership. A request has two owners: MHD (from on_uri to on_completed;
 * conn is non-NULL meanwhile) and the caller (from on_request to
 * bt_httpd_respond; user is set). It is freed when both have let go, so an
 * answer to a client that left, or after the server stopped, finds the
 * request still there and drops the answer.
 *
 * Closing. bt_httpd_close stops listening at once, then waits until every
 * request handed out has been answered and written (ndispatched == 0), at
 * most the drain time, and only then stops MHD: MHD_stop_daemon aborts if
 * a connection is still suspended, so those left are resumed first. The
 * uv handles are closed before MHD closes its epoll descriptor, and the
 * server is freed in the last handle's close callback.
 */
#include "httpd.h"
#include "err.h"
#include "dl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* libmicrohttpd is not linked but loaded with dlopen by the first
 * bt_httpd_listen: linked, it and the GnuTLS libraries behind it (9 shared
 * objects, with constructors that parse ASN.1 tables) cost every baton
 * process ~1.2 ms of CPU at start-up, and only `baton node --http` and
 * scripts that serve HTTP use it. microhttpd.h is used for its types and
 * constants; every MHD function is called through the table mh, filled by
 * dlsym. The library is never unloaded. */
#define MHD_FUNCS(XX)                                                         \
  XX(add_response_header)                                                     \
  XX(create_response_from_buffer)                                             \
  XX(destroy_response)                                                        \
  XX(get_connection_info)                                                     \
  XX(get_connection_values_n)                                                 \
  XX(get_daemon_info)                                                         \
  XX(get_response_header)                                                     \
  XX(get_timeout)                                                             \
  XX(is_feature_supported)                                                    \
  XX(lookup_connection_value)                                                 \
  XX(queue_response)                                                          \
  XX(quiesce_daemon)                                                          \
  XX(resume_connection)                                                       \
  XX(run)                                                                     \
  XX(start_daemon)                                                            \
  XX(stop_daemon)                                                             \
  XX(suspend_connection)

#define XX(name) +1
enum { MHD_NFUNCS = 0 MHD_FUNCS(XX) };
#undef XX

static union {
  struct {
#define XX(name) __typeof__(MHD_##name) *name;
    MHD_FUNCS(XX)
#undef XX
  };
  void *v[MHD_NFUNCS];
} mh;

static bt_dl_t mhd_dl;

/* Loads libmicrohttpd and fills mh, once per process. Returns 0, or -1
 * with the reason in mhd_dl.error (the same for every later call). */
static int load_mhd(void) {
  static const char *const sonames[] = {
    "libmicrohttpd.so.12", "libmicrohttpd.so", NULL
  };
  static const char *const names[] = {
#define XX(name) "MHD_" #name,
    MHD_FUNCS(XX)
#undef XX
  };
  return bt_dl_load(&mhd_dl, sonames, "libmicrohttpd", names, mh.v,
                    MHD_NFUNCS);
}

#define DEFAULT_MAX_CONNS 4096
#define FD_MARGIN 1024              /* descriptors kept for everything else */
#define DRAIN_NO_TIMEOUT_MS 10000   /* drain limit when there is no timeout */
#define DISCARD_MAX ((size_t) 1 << 20)  /* chunked bytes dropped past the limit
                                       before hanging up instead of 413 */
#define MAX_TIMER_MS ((MHD_UNSIGNED_LONG_LONG) 1 << 31)
#define SPIN_MAX_MS 50

enum {
  ST_NEW,       /* headers parsed, on_access not called yet */
  ST_BODY,      /* taking the body */
  ST_DROP,      /* body refused (over max_body, or no room left among all
                   bodies): dropping the rest, then 413 or 503 */
  ST_USER,      /* handed to on_request; answer pending or ready */
  ST_DONE       /* a response is queued */
};

struct bt_httpd_req_s {
  bt_httpd_t *srv;              /* NULL once the server stopped */
  struct MHD_Connection *conn;  /* NULL once MHD is done with it */
  bt_httpd_req_t *prev, *next;  /* srv->reqs: the requests MHD has */
  int state;
  unsigned user : 1;            /* on_request has it; no answer yet */
  unsigned dispatched : 1;      /* counted in srv->ndispatched */
  unsigned in_request : 1;      /* on_check or on_request is running */
  unsigned suspended : 1;
  unsigned failed : 1;          /* no response could be made: hang up */
  unsigned drop_busy : 1;       /* ST_DROP for want of room: 503, not 413 */
  struct MHD_Response *resp;    /* the answer, until queued */
  unsigned status;
  char *method;
  char version[16];
  char *body;
  size_t body_len, body_cap, discarded;
  size_t declared;              /* Content-Length, or SIZE_MAX (none) */
  size_t reserved;              /* counted in srv->body_total */
  size_t path_len;              /* target[path_len] is the NUL put at '?' */
  const char *query;
  char remote[64];
  char target[];                /* the raw request target */
};

struct bt_httpd_s {
  uv_loop_t *loop;
  struct MHD_Daemon *d;         /* NULL once stopped */
  uv_poll_t poll;               /* MHD's epoll descriptor */
  uv_timer_t timer;             /* MHD's next deadline, or a deferred kick */
  uv_timer_t drain;             /* the closing deadline */
  int nhandles;                 /* open uv handles; freed at 0 once stopped */
  int in_run;                   /* inside MHD_run */
  uint64_t spin_ms;             /* back-off of "run again at once" */
  int closing, stopped;
  int ndispatched;              /* handed to on_request, not completed */
  bt_httpd_req_t *reqs;
  size_t max_body;
  size_t max_body_total;
  size_t body_total;            /* reserved by the requests' bodies */
  char **headers;               /* added to every answer (NULL-ended pairs) */
  unsigned timeout_secs;
  bt_httpd_check_cb on_check;
  bt_httpd_request_cb on_request;
  bt_httpd_log_cb on_log;
  void *arg;
  char *start_err;              /* while starting: MHD's last complaint */
  size_t start_err_len;
  int port;
  char addr[64];
};

static void kick(bt_httpd_t *s);
static void stop(bt_httpd_t *s);

/* ---- small helpers ------------------------------------------------------ */

/* Gives back what r's body reserved in its server's body_total. */
static void release_body(bt_httpd_req_t *r) {
  if (r->srv) r->srv->body_total -= r->reserved;
  r->reserved = 0;
}

static void req_free(bt_httpd_req_t *r) {
  release_body(r);
  if (r->resp) mh.destroy_response(r->resp);
  free(r->method);
  free(r->body);
  free(r);
}

/* Formats a socket address as "1.2.3.4:80" or "[::1]:80"; an IPv4 client
 * of a dual-stack socket is shown as IPv4. */
static void format_addr(const struct sockaddr *sa, char *out, size_t len) {
  char ip[INET6_ADDRSTRLEN];
  if (sa && sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *) sa;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    snprintf(out, len, "%s:%u", ip, (unsigned) ntohs(a->sin_port));
  } else if (sa && sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *) sa;
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], ip, sizeof(ip));
      snprintf(out, len, "%s:%u", ip, (unsigned) ntohs(a->sin6_port));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
      snprintf(out, len, "[%s]:%u", ip, (unsigned) ntohs(a->sin6_port));
    }
  } else {
    snprintf(out, len, "unknown");
  }
}

/* A response with body and headers (NULL-terminated name, value pairs),
 * all copied (Content-Length, Transfer-Encoding and empty values left
 * out), then the server's own headers that it does not set; NULL with
 * *err set when MHD refuses a header (BT_EINVAL) or memory runs out
 * (BT_ENOMEM). */
static struct MHD_Response *make_response(const bt_httpd_t *s,
                                          const char *const *headers,
                                          const char *body, size_t len,
                                          int *err) {
  struct MHD_Response *resp;
  char **h;
  resp = mh.create_response_from_buffer(len, (void *) (body ? body : ""),
                                         MHD_RESPMEM_MUST_COPY);
  if (!resp) {
    *err = BT_ENOMEM;
    return NULL;
  }
  for (; headers && headers[0] && headers[1]; headers += 2) {
    /* MHD frames the body itself and cannot send an empty value */
    if (!strcasecmp(headers[0], MHD_HTTP_HEADER_CONTENT_LENGTH) ||
        !strcasecmp(headers[0], MHD_HTTP_HEADER_TRANSFER_ENCODING) ||
        !headers[1][0])
      continue;
    if (mh.add_response_header(resp, headers[0], headers[1]) != MHD_YES) {
      mh.destroy_response(resp);
      *err = BT_EINVAL;
      return NULL;
    }
  }
  /* (MHD compares header names without regard to case) */
  for (h = s->headers; h && h[0]; h += 2)
    if (h[1][0] && !mh.get_response_header(resp, h[0]) &&
        mh.add_response_header(resp, h[0], h[1]) != MHD_YES) {
      mh.destroy_response(resp);
      *err = BT_ENOMEM;
      return NULL;
    }
  return resp;
}

/* Queues a JSON error answer of the server's own (413, 500, 503) and
 * closes the connection after it when hangup is set (after 503 EBUSY the
 * client is told when to try again). */
static enum MHD_Result answer_json(bt_httpd_req_t *r, unsigned status,
                                   const char *json, int hangup) {
  static const char *const hdrs[] = {
    "Content-Type", "application/json", "Cache-Control", "no-store", NULL
  };
  static const char *const hdrs_close[] = {
    "Content-Type", "application/json", "Cache-Control", "no-store",
    "Connection", "close", NULL
  };
  static const char *const hdrs_retry[] = {
    "Content-Type", "application/json", "Cache-Control", "no-store",
    "Connection", "close", "Retry-After", "1", NULL
  };
  struct MHD_Response *resp;
  enum MHD_Result ret;
  int err;
  resp = make_response(r->srv,
                       !hangup ? hdrs : hangup == 2 ? hdrs_retry : hdrs_close,
                       json, strlen(json), &err);
  if (!resp) return MHD_NO;
  ret = mh.queue_response(r->conn, status, resp);
  mh.destroy_response(resp);
  r->state = ST_DONE;
  return ret;
}

static enum MHD_Result answer_too_large(bt_httpd_req_t *r) {
  char json[128];
  snprintf(json, sizeof(json),
           "{\"error\":\"request body over %zu bytes\",\"code\":\"ETOOLARGE\"}",
           r->srv->max_body);
  return answer_json(r, MHD_HTTP_CONTENT_TOO_LARGE, json, 1);
}

static enum MHD_Result answer_busy(bt_httpd_req_t *r) {
  char json[192];
  snprintf(json, sizeof(json),
           "{\"error\":\"request bodies in memory would pass the server's "
           "limit of %zu bytes: try again later\",\"code\":\"EBUSY\"}",
           r->srv->max_body_total);
  return answer_json(r, MHD_HTTP_SERVICE_UNAVAILABLE, json, 2);
}

static enum MHD_Result answer_dropped(bt_httpd_req_t *r) {
  return r->drop_busy ? answer_busy(r) : answer_too_large(r);
}

static enum MHD_Result answer_closing(bt_httpd_req_t *r) {
  return answer_json(r, MHD_HTTP_SERVICE_UNAVAILABLE,
                     "{\"error\":\"server is shutting down\","
                     "\"code\":\"EUNAVAIL\"}", 1);
}

/* ---- MHD's callbacks ---------------------------------------------------- */

/* MHD's error log: to on_log, or kept as the reason while starting. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  bt_httpd_t *s = cls;
  char line[512];
  size_t n;
  vsnprintf(line, sizeof(line), fmt, ap);
  n = strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                   line[n - 1] == ' ' || line[n - 1] == '.'))
    line[--n] = '\0';
  if (s->start_err) {
    snprintf(s->start_err, s->start_err_len, "%s", line);
    return;
  }
  if (s->on_log) s->on_log(line, s->arg);
}

/* Nothing is percent-decoded: paths reach the caller as sent. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
  return strlen(s);
}

/* A request line was read: make the request from its raw target. Its
 * return value is MHD's *con_cls for this request (NULL when out of
 * memory: on_access then hangs up). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  bt_httpd_t *s = cls;
  size_t n = strlen(uri);
  bt_httpd_req_t *r = calloc(1, sizeof(*r) + n + 1);
  char *q;
  if (!r) return NULL;
  memcpy(r->target, uri, n + 1);
  q = strchr(r->target, '?');
  if (q) {
    *q = '\0';
    r->path_len = (size_t) (q - r->target);
    r->query = q + 1;
  } else {
    r->path_len = n;
    r->query = r->target + n;
  }
  r->srv = s;
  r->conn = conn;
  r->state = ST_NEW;
  r->next = s->reqs;
  if (s->reqs) s->reqs->prev = r;
  s->reqs = r;
  return r;
}

/* The Content-Length value as a number, SIZE_MAX when over it (a value
 * that is not a number cannot reach us: MHD answers 400 itself). */
static size_t length_of(const char *v) {
  uint64_t n = 0;
  for (; *v == ' ' || *v == '\t'; v++) {}
  for (; *v >= '0' && *v <= '9'; v++) {
    if (n > (UINT64_MAX - 9) / 10) return SIZE_MAX;
    n = n * 10 + (uint64_t) (*v - '0');
  }
  return n >= (uint64_t) SIZE_MAX ? SIZE_MAX : (size_t) n;
}

/* Refuses the rest of r's body: drops what it holds and, as it comes, the
 * rest (up to DISCARD_MAX), then answers 413 or, when busy, 503. */
static void drop_body(bt_httpd_req_t *r, size_t n, int busy) {
  r->state = ST_DROP;
  r->drop_busy = busy ? 1 : 0;
  free(r->body);
  r->body = NULL;
  r->body_len = r->body_cap = 0;
  release_body(r);
  r->discarded = n;
}

/* One piece of body: kept while under max_body and while the bodies of all
 * requests fit in max_body_total; dropped after. */
static enum MHD_Result take_body(bt_httpd_req_t *r, const char *data,
                                 size_t *size) {
  bt_httpd_t *s = r->srv;
  size_t n = *size, max = s->max_body;
  *size = 0;
  if (r->state == ST_DROP) {
    r->discarded += n;
    return r->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
  }
  if (n > max - r->body_len) {
    drop_body(r, n, 0);
    return MHD_YES;
  }
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
    char *p;
    if (cap < r->body_len + n) cap = r->body_len + n;
    /* a body of known length gets that much at once (MHD takes no more) */
    if (r->declared != SIZE_MAX && r->declared >= r->body_len + n)
      cap = r->declared;
    if (cap > max) cap = max;
    if (cap > r->reserved) {
      /* a chunked body (or one past its length, which MHD prevents) */
      if (cap - r->reserved > s->max_body_total - s->body_total) {
        drop_body(r, n, 1);
        return MHD_YES;
      }
      s->body_total += cap - r->reserved;
      r->reserved = cap;
    }
    p = realloc(r->body, cap);
    if (!p) return MHD_NO;
    r->body = p;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, data, n);
  r->body_len += n;
  return MHD_YES;
}

/* Queues the caller's answer (MHD_NO, closing the connection, when none
 * could be made). */
static enum MHD_Result queue_answer(bt_httpd_req_t *r) {
  enum MHD_Result ret;
  if (r->failed || !r->resp) return MHD_NO;
  ret = mh.queue_response(r->conn, r->status, r->resp);
  mh.destroy_response(r->resp);
  r->resp = NULL;
  r->state = ST_DONE;
  return ret;
}

/* The headers are in: keeps the method, version and client address, then
 * shows the request to on_check. Returns MHD_YES to go on (read the
 * body), MHD_NO to hang up, or with the check's answer queued. */
static enum MHD_Result check(bt_httpd_req_t *r, const char *method,
                             const char *version, int *answered) {
  bt_httpd_t *s = r->srv;
  const union MHD_ConnectionInfo *ci;
  *answered = 0;
  r->method = strdup(method);
  if (!r->method) return MHD_NO;
  snprintf(r->version, sizeof(r->version), "%s", version ? version : "");
  ci = mh.get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  format_addr(ci ? ci->client_addr : NULL, r->remote, sizeof(r->remote));
  if (!s->on_check) return MHD_YES;
  r->in_request = 1;
  s->on_check(r, s->arg);
  r->in_request = 0;
  if (!r->resp && !r->failed) return MHD_YES;
  *answered = 1;
  return queue_answer(r);
}

/* The whole request is in: hand it to on_request, then queue its answer
 * if it came at once, else suspend the connection until it comes. */
static enum MHD_Result dispatch(bt_httpd_req_t *r) {
  bt_httpd_t *s = r->srv;
  r->state = ST_USER;
  r->user = 1;
  r->dispatched = 1;
  s->ndispatched++;
  r->in_request = 1;
  s->on_request(r, s->arg);
  r->in_request = 0;
  if (r->resp || r->failed) return queue_answer(r);
  mh.suspend_connection(r->conn);
  r->suspended = 1;
  return MHD_YES;
}

/* MHD's access handler: called once the headers are in, once per piece of
 * body, once at the end of the body, and again after each resume. */
static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn,
                                 const char *url, const char *method,
                                 const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls) {
  bt_httpd_t *s = cls;
  bt_httpd_req_t *r = *con_cls;
  enum MHD_Result ret;
  const char *cl;
  int answered;

  if (!r) return MHD_NO;
  switch (r->state) {
  case ST_NEW:
    r->state = ST_BODY;
    r->declared = SIZE_MAX;
    if (s->closing) return answer_closing(r);
    ret = check(r, method, version, &answered);
    if (answered || ret != MHD_YES) return ret;
    cl = mh.lookup_connection_value(conn, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl) return MHD_YES;
    /* 413 or 503 before reading any of the body; MHD then closes. */
    r->declared = length_of(cl);
    if (r->declared > s->max_body) return answer_too_large(r);
    if (r->declared > s->max_body_total - s->body_total)
      return answer_busy(r);
    r->reserved = r->declared;
    s->body_total += r->reserved;
    return MHD_YES;
  case ST_BODY:
  case ST_DROP:
    if (*upload_data_size) return take_body(r, upload_data, upload_data_size);
    if (r->state == ST_DROP) return answer_dropped(r);
    if (s->closing) return answer_closing(r);
    return dispatch(r);
  case ST_USER:
    if (r->resp || r->failed) return queue_answer(r);
    mh.suspend_connection(conn);
    r->suspended = 1;
    return MHD_YES;
  default:
    return MHD_YES;
  }
}

/* MHD is done with a request (answered, failed, timed out, or stopped). */
static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode toe) {
  bt_httpd_t *s = cls;
  bt_httpd_req_t *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  if (r->prev) r->prev->next = r->next;
  else s->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->conn = NULL;
  if (r->resp) {
    mh.destroy_response(r->resp);
    r->resp = NULL;
  }
  if (r->dispatched) {
    r->dispatched = 0;
    s->ndispatched--;
  }
  if (r->user) {
    release_body(r);
    r->srv = NULL;    /* the caller's respond frees it */
    return;
  }
  req_free(r);
}

/* ---- the loop side ------------------------------------------------------ */

static void srv_free(bt_httpd_t *s) {
  free(s->headers);
  free(s);
}

static void on_handle_closed(uv_handle_t *h) {
  bt_httpd_t *s = h->data;
  if (--s->nhandles == 0) srv_free(s);
}

static void on_timer(uv_timer_t *t) {
  kick(t->data);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  bt_httpd_t *s = p->data;
  s->spin_ms = 0;
  if (status < 0 && s->on_log) {
    char line[128];
    snprintf(line, sizeof(line), "epoll descriptor: %s", uv_strerror(status));
    s->on_log(line, s->arg);
  }
  kick(s);
}

static void on_drain(uv_timer_t *t) {
  stop(t->data);
}

/* Runs MHD until it has nothing to do now, then re-arms the timer for its
 * next deadline; once closing and drained, stops the server. */
static void kick(bt_httpd_t *s) {
  MHD_UNSIGNED_LONG_LONG ms;
  if (!s->d) return;
  s->in_run++;
  mh.run(s->d);
  s->in_run--;
  if (s->closing && s->ndispatched == 0) {
    stop(s);
    return;
  }
  if (mh.get_timeout(s->d, &ms) != MHD_YES) {
    uv_timer_stop(&s->timer);
    return;
  }
  /* "Run again at once", said again and again, is backed off: MHD 0.9.75
   * says it for as long as a TLS handshake waits for the client (the
   * connection stays marked ready), which would spin the CPU and, with a
   * re-armed 0 ms timer, starve the loop (libuv 1.44 runs such a timer
   * again in the same pass). New I/O on MHD's sockets wakes the poll
   * anyway, and resets the back-off. */
  if (ms == 0) {
    ms = s->spin_ms;
    s->spin_ms = s->spin_ms ? s->spin_ms * 2 : 1;
    if (s->spin_ms > SPIN_MAX_MS) s->spin_ms = SPIN_MAX_MS;
  } else {
    s->spin_ms = 0;
  }
  uv_timer_start(&s->timer, on_timer, ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms,
                 0);
}

/* A kick on the next loop turn (from outside MHD's callbacks' reach). */
static void schedule_kick(bt_httpd_t *s) {
  if (!s || !s->d) return;
  s->spin_ms = 0;
  uv_timer_start(&s->timer, on_timer, 0, 0);
}

/* Stops MHD and closes the handles; the last close callback frees s. */
static void stop(bt_httpd_t *s) {
  bt_httpd_req_t *r;
  if (s->stopped) return;
  s->stopped = 1;
  /* libuv forgets the epoll descriptor before MHD closes it. */
  uv_close((uv_handle_t *) &s->poll, on_handle_closed);
  uv_close((uv_handle_t *) &s->timer, on_handle_closed);
  uv_close((uv_handle_t *) &s->drain, on_handle_closed);
  for (r = s->reqs; r; r = r->next)
    if (r->suspended) {
      r->suspended = 0;
      mh.resume_connection(r->conn);
    }
  /* on_completed runs for every request left: the unanswered ones are
   * detached for their respond. */
  mh.stop_daemon(s->d);
  s->d = NULL;
}

/* ---- binding the socket ------------------------------------------------- */

/* Parses "HOST:PORT", "[IPV6]:PORT" or ":PORT" into ss; *any is set for
 * ":PORT". Returns 0 or BT_EINVAL. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss,
                      int *any) {
  char host[INET6_ADDRSTRLEN + 2];
  const char *colon, *p;
  unsigned long port = 0;
  size_t hl;

  memset(ss, 0, sizeof(*ss));
  *any = 0;
  if (!addr) return BT_EINVAL;
  colon = strrchr(addr, ':');
  if (!colon || !colon[1] || strlen(colon + 1) > 5) return BT_EINVAL;
  for (p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9') return BT_EINVAL;
    port = port * 10 + (unsigned long) (*p - '0');
  }
  if (port > 65535) return BT_EINVAL;
  hl = (size_t) (colon - addr);
  if (hl == 0) {
    *any = 1;
    ((struct sockaddr_in6 *) ss)->sin6_family = AF_INET6;
    ((struct sockaddr_in6 *) ss)->sin6_port = htons((uint16_t) port);
    ((struct sockaddr_in6 *) ss)->sin6_addr = in6addr_any;
    return 0;
  }
  if (addr[0] == '[') {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *) ss;
    if (hl < 3 || addr[hl - 1] != ']' || hl - 2 >= sizeof(host))
      return BT_EINVAL;
    memcpy(host, addr + 1, hl - 2);
    host[hl - 2] = '\0';
    if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) return BT_EINVAL;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t) port);
    return 0;
  }
  {
    struct sockaddr_in *a = (struct sockaddr_in *) ss;
    if (hl >= sizeof(host)) return BT_EINVAL;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (!strcmp(host, "localhost")) strcpy(host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1) return BT_EINVAL;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t) port);
    return 0;
  }
}

/* A non-blocking listening socket bound to ss ("::" dual-stack for any,
 * 0.0.0.0 where IPv6 is off). Returns the descriptor or a negative UV
 * code. */
static int listen_on(struct sockaddr_storage *ss, int any) {
  int fd, on = 1, off = 0, err;
  socklen_t len;
  fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 && any && errno == EAFNOSUPPORT) {
    uint16_t port = ((struct sockaddr_in6 *) ss)->sin6_port;
    struct sockaddr_in *a = (struct sockaddr_in *) ss;
    memset(ss, 0, sizeof(*ss));
    a->sin_family = AF_INET;
    a->sin_port = port;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  if (fd < 0) return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (ss->ss_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, any ? &off : &on, sizeof(on));
  len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                  : sizeof(struct sockaddr_in);
  if (bind(fd, (struct sockaddr *) ss, len) || listen(fd, SOMAXCONN)) {
    err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

/* A copy of the NULL-ended name, value pairs in one block (NULL for none);
 * returns BT_ENOMEM, or BT_EINVAL for a name without a value. */
static int copy_headers(const char *const *h, char ***out) {
  size_t n = 0, bytes = 0, i;
  char **v, *p;
  *out = NULL;
  if (!h) return 0;
  for (; h[n]; n += 2) {
    if (!h[n + 1]) return BT_EINVAL;
    bytes += strlen(h[n]) + strlen(h[n + 1]) + 2;
  }
  if (n == 0) return 0;
  v = malloc((n + 1) * sizeof(*v) + bytes);
  if (!v) return BT_ENOMEM;
  p = (char *) (v + n + 1);
  for (i = 0; i < n; i++) {
    size_t len = strlen(h[i]) + 1;
    memcpy(p, h[i], len);
    v[i] = p;
    p += len;
  }
  v[n] = NULL;
  *out = v;
  return 0;
}

/* Lets the process open max_conns connections and FD_MARGIN more files:
 * raises the soft limit, within the hard one. Says so when it cannot. */
static void raise_nofile(bt_httpd_t *s, unsigned max_conns) {
  struct rlimit rl;
  rlim_t need = (rlim_t) max_conns + FD_MARGIN;
  if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY ||
      rl.rlim_cur >= need)
    return;
  rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need)
                  ? need : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < need && s->on_log) {
    char line[160];
    snprintf(line, sizeof(line), "open files limited to %lu (hard limit): "
             "fewer than max_connections %u + %d",
             (unsigned long) rl.rlim_cur, max_conns, FD_MARGIN);
    s->on_log(line, s->arg);
  }
}

int bt_httpd_listen(uv_loop_t *loop, const bt_httpd_opts_t *o,
                    bt_httpd_t **out, char *msg, size_t msglen) {
  struct sockaddr_storage ss;
  struct MHD_OptionItem ops[12];
  const union MHD_DaemonInfo *di;
  unsigned max_conns = o->max_connections ? o->max_connections
                                          : DEFAULT_MAX_CONNS;
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  char why[512] = "";
  socklen_t len = sizeof(ss);
  bt_httpd_t *s;
  int any, fd, n = 0, rc;

  *out = NULL;
  if (parse_addr(o->addr, &ss, &any)) {
    snprintf(msg, msglen, "%s: expected HOST:PORT, [IPV6]:PORT or :PORT "
             "(HOST an IP address or localhost)", o->addr ? o->addr : "");
    return BT_EINVAL;
  }
  if (!o->cert != !o->key) {
    snprintf(msg, msglen, "%s: cert and key go together", o->addr);
    return BT_EINVAL;
  }
  if (load_mhd()) {
    snprintf(msg, msglen, "%s: libmicrohttpd could not be loaded: %s", o->addr,
             mhd_dl.error);
    return BT_ENOTSUP;
  }
  if (o->cert && mh.is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    snprintf(msg, msglen, "%s: this libmicrohttpd has no TLS", o->addr);
    return BT_ENOTSUP;
  }
  s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(msg, msglen, "%s: %s", o->addr, bt_strerror(BT_ENOMEM));
    return BT_ENOMEM;
  }
  s->loop = loop;
  s->max_body = o->max_body;
  s->max_body_total = o->max_body_total;
  if (!s->max_body_total)
    s->max_body_total = s->max_body > SIZE_MAX / 16 ? SIZE_MAX
                                                     : s->max_body * 16;
  s->timeout_secs = o->timeout_secs;
  s->on_check = o->on_check;
  s->on_request = o->on_request;
  s->on_log = o->on_log;
  s->arg = o->arg;
  if ((rc = copy_headers(o->headers, &s->headers))) {
    snprintf(msg, msglen, "%s: %s", o->addr, rc == BT_ENOMEM
             ? bt_strerror(rc) : "a header name without a value");
    free(s);
    return rc;
  }

  fd = listen_on(&ss, any);
  if (fd < 0) {
    snprintf(msg, msglen, "%s: %s", o->addr, uv_strerror(fd));
    srv_free(s);
    return fd;
  }
  if (getsockname(fd, (struct sockaddr *) &ss, &len) == 0) {
    format_addr((struct sockaddr *) &ss, s->addr, sizeof(s->addr));
    s->port = ntohs(ss.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *) &ss)->sin6_port
                      : ((struct sockaddr_in *) &ss)->sin_port);
  }
  if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  raise_nofile(s, max_conns);

  /* the logger first, so that it hears start-up complaints */
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_EXTERNAL_LOGGER, (intptr_t) on_mhd_log, s};
  ops[n++] = (struct MHD_OptionItem) {MHD_OPTION_LISTEN_SOCKET, fd, NULL};
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_URI_LOG_CALLBACK, (intptr_t) on_uri, s};
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t) no_unescape, s};
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_NOTIFY_COMPLETED, (intptr_t) on_completed, s};
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t) o->timeout_secs, NULL};
  ops[n++] = (struct MHD_OptionItem) {
    MHD_OPTION_CONNECTION_LIMIT, (intptr_t) max_conns, NULL};
  if (o->cert) {
    flags |= MHD_USE_TLS;
    ops[n++] = (struct MHD_OptionItem) {
      MHD_OPTION_HTTPS_MEM_KEY, 0, (void *) o->key};
    ops[n++] = (struct MHD_OptionItem) {
      MHD_OPTION_HTTPS_MEM_CERT, 0, (void *) o->cert};
  }
  ops[n] = (struct MHD_OptionItem) {MHD_OPTION_END, 0, NULL};

  s->start_err = why;
  s->start_err_len = sizeof(why);
  s->d = mh.start_daemon(flags, 0, NULL, NULL, on_access, s,
                          MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
  s->start_err = NULL;
  if (!s->d) {
    /* MHD closes the socket on some of its failure paths, not all. */
    if (fcntl(fd, F_GETFD) != -1) close(fd);
    rc = o->cert ? BT_ETLS : BT_EIO;
    snprintf(msg, msglen, "%s: %s%s%s", o->addr,
             o->cert ? "cannot start HTTPS" : "cannot start the server",
             why[0] ? ": " : "", why);
    srv_free(s);
    return rc;
  }
  di = mh.get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
  if (!di || (rc = uv_poll_init(loop, &s->poll, di->epoll_fd))) {
    mh.stop_daemon(s->d);
    snprintf(msg, msglen, "%s: cannot watch the server's epoll descriptor",
             o->addr);
    srv_free(s);
    return BT_EIO;
  }
  uv_timer_init(loop, &s->timer);
  uv_timer_init(loop, &s->drain);
  s->poll.data = s->timer.data = s->drain.data = s;
  s->nhandles = 3;
  uv_poll_start(&s->poll, UV_READABLE, on_poll);
  schedule_kick(s);
  *out = s;
  return 0;
}

int bt_httpd_port(const bt_httpd_t *s) { return s->port; }
const char *bt_httpd_addr(const bt_httpd_t *s) { return s->addr; }

void bt_httpd_close(bt_httpd_t *s) {
  MHD_socket lfd;
  if (s->closing) return;
  s->closing = 1;
  lfd = mh.quiesce_daemon(s->d);
  if (lfd != MHD_INVALID_SOCKET) close(lfd);
  if (s->ndispatched == 0 && !s->in_run) {
    stop(s);
    return;
  }
  uv_timer_start(&s->drain, on_drain,
                 s->timeout_secs ? (uint64_t) s->timeout_secs * 1000
                                 : DRAIN_NO_TIMEOUT_MS, 0);
  schedule_kick(s);
}

/* ---- requests ----------------------------------------------------------- */

const char *bt_httpd_req_method(const bt_httpd_req_t *r) {
  return r->method;
}

const char *bt_httpd_req_version(const bt_httpd_req_t *r) {
  return r->version;
}

const char *bt_httpd_req_path(const bt_httpd_req_t *r, size_t *len) {
  if (len) *len = r->path_len;
  return r->target;
}

const char *bt_httpd_req_query(const bt_httpd_req_t *r, size_t *len) {
  if (len) *len = strlen(r->query);
  return r->query;
}

const char *bt_httpd_req_body(const bt_httpd_req_t *r, size_t *len) {
  if (len) *len = r->body_len;
  return r->body ? r->body : "";
}

const char *bt_httpd_req_remote(const bt_httpd_req_t *r) {
  return r->remote;
}

typedef struct {
  bt_httpd_header_cb cb;
  void *arg;
} hiter_t;

static enum MHD_Result header_iter(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
  hiter_t *it = cls;
  it->cb(key, key_size, value ? value : "", value ? value_size : 0, it->arg);
  return MHD_YES;
}

void bt_httpd_req_headers(const bt_httpd_req_t *r, bt_httpd_header_cb cb,
                          void *arg) {
  hiter_t it = {cb, arg};
  if (!r->conn) return;
  mh.get_connection_values_n(r->conn, MHD_HEADER_KIND, header_iter, &it);
}

int bt_httpd_respond(bt_httpd_req_t *r, int status,
                     const char *const *headers, const char *body,
                     size_t len) {
  static const char *const json[] = {
    "Content-Type", "application/json", NULL
  };
  static const char internal[] =
    "{\"error\":\"internal error\",\"code\":\"EINTERNAL\"}";
  int rc = 0;

  r->user = 0;
  if (!r->conn) {
    /* MHD is done with it (the server stopped): drop the answer */
    req_free(r);
    return 0;
  }
  if (status < 100 || status > 999) rc = BT_EINVAL;
  else r->resp = make_response(r->srv, headers, body, len, &rc);
  if (!r->resp && rc == BT_EINVAL) {
    status = 500;
    r->resp = make_response(r->srv, json, internal, sizeof(internal) - 1,
                            &rc);
    if (!r->resp) rc = BT_ENOMEM;
    else rc = BT_EINVAL;
  }
  if (!r->resp) r->failed = 1;
  r->status = (unsigned) status;
  if (r->suspended) {
    r->suspended = 0;
    mh.resume_connection(r->conn);
    schedule_kick(r->srv);
  }
  return rc;
}
