/* tests/chaos/proxy: the loopback TCP proxy between one baton node and etcd
 * in the nemesis suite (tests/chaos/run). It forwards bytes and parses
 * nothing.
 *
 *   proxy PORTFILE HOST:PORT...        (1 to 8 upstreams)
 *
 * For each upstream it listens on a free port of 127.0.0.1 and forwards every
 * connection accepted there to that upstream. Once all listen, it writes the
 * listening ports, space-separated in the order of the upstreams, to PORTFILE
 * (a temporary file renamed into place, so a reader never sees half of it).
 *
 * Control, by signals (acknowledged by one line on stderr each):
 *   SIGUSR1  freeze: stop reading both sides of every connection and stop
 *            accepting (the kernel still completes handshakes into the
 *            backlog). TCP stays up and nothing is reset: requests, watch
 *            streams and keepalives stall, as on a dead link.
 *   SIGHUP   pass: read and accept again; what was held back flows on.
 *   SIGUSR2  reset: close every connection, both sides, with RST. The mode
 *            (pass or frozen) stays as it was.
 *   SIGTERM, SIGINT  exit.
 *
 * A dead upstream is shown as a dead upstream: when connecting to it is
 * refused, the client connection that wanted it is reset and the listening
 * socket stops listening while keeping its port (shutdown(SHUT_RD) on a
 * listening socket, Linux), so the node's next connects are refused, as they
 * would be by the stopped etcd itself (baton retries a write on another
 * endpoint only when it provably never left, e.g. connection refused). The
 * proxy probes the upstream every 100 ms and listens again once it accepts.
 *
 * Log lines on stderr start with the monotonic time in seconds (the clock of
 * baton.monotime()), so they can be lined up with the suite's other logs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#define MAX_UPSTREAMS 8
#define BUF_SIZE 65536
#define HIGH_WATER (1024 * 1024) /* bytes queued to one side before its peer stops reading */
#define PROBE_MS 100

typedef struct conn_s conn_t;

typedef struct listener_s {
  int index;
  struct sockaddr_in up;
  int fd; /* bound to its port for the whole run */
  int port;
  uv_poll_t poll;
  int polling;
  int down;    /* the upstream refused: not listening until a probe gets through */
  int probing; /* a probe connect is in flight */
  uv_timer_t probe_timer;
} listener_t;

typedef struct side_s {
  uv_tcp_t tcp;
  conn_t *conn;
  struct side_s *peer;
  int eof;     /* this side sent FIN */
  int reading;
  int blocked; /* not reading: the peer's write queue is over HIGH_WATER */
} side_t;

struct conn_s {
  side_t c, u; /* client (the node), upstream (etcd) */
  listener_t *l;
  uv_connect_t creq;
  int connected;
  int closing;
  int handles; /* open handles; the conn is freed when the last one closes */
  conn_t *prev, *next;
};

/* A write of bytes read from the other side; both are freed in on_write. */
typedef struct write_req_s {
  uv_write_t req;
  char *base;
} write_req_t;

typedef struct probe_s {
  uv_tcp_t tcp;
  uv_connect_t req;
  listener_t *l;
} probe_t;

static uv_loop_t *loop;
static listener_t listeners[MAX_UPSTREAMS];
static int nlisteners;
static conn_t conns; /* list head */
static int frozen;
static uv_signal_t sigs[5];

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  int n = snprintf(line, sizeof line, "%.3f proxy[%d] ", (double)uv_hrtime() / 1e9, (int)getpid());
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  if (write(2, line, (size_t)n) < 0) { /* nothing to do */ }
}

static int nconns(void) {
  int n = 0;
  for (conn_t *c = conns.next; c != &conns; c = c->next) n++;
  return n;
}

/* ---- connections ------------------------------------------------------ */

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void alloc_buf(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  buf->base = malloc(BUF_SIZE);
  buf->len = buf->base ? BUF_SIZE : 0;
}

static int wants_read(side_t *s) {
  conn_t *c = s->conn;
  return !frozen && c->connected && !c->closing && !s->eof && !s->blocked;
}

static void update_reading(side_t *s) {
  int want = wants_read(s);
  if (want && !s->reading) {
    if (uv_read_start((uv_stream_t *)&s->tcp, alloc_buf, on_read) == 0) s->reading = 1;
  } else if (!want && s->reading) {
    uv_read_stop((uv_stream_t *)&s->tcp);
    s->reading = 0;
  }
}

static void on_close(uv_handle_t *h) {
  conn_t *c = ((side_t *)h->data)->conn;
  if (--c->handles == 0) free(c);
}

/* Closes both sides of c (with RST if reset), once; it is freed when both
 * close callbacks have run, after every pending write callback. */
static void conn_close(conn_t *c, int reset) {
  side_t *sides[2] = {&c->c, &c->u};
  if (c->closing) return;
  c->closing = 1;
  c->prev->next = c->next;
  c->next->prev = c->prev;
  for (int i = 0; i < 2; i++) {
    uv_handle_t *h = (uv_handle_t *)&sides[i]->tcp;
    if (uv_is_closing(h)) continue;
    /* close_reset refuses a handle with a pending shutdown (or not yet
     * connected): then a plain close. */
    if (!reset || uv_tcp_close_reset(&sides[i]->tcp, on_close) != 0) uv_close(h, on_close);
  }
}


static void on_write(uv_write_t *req, int status) {
  write_req_t *w = (write_req_t *)req;
  side_t *to = req->data;
  side_t *from = to->peer;
  conn_t *c = to->conn;
  free(w->base);
  free(w);
  if (c->closing) return;
  if (status < 0) {
    conn_close(c, 1);
    return;
  }
  if (from->blocked && uv_stream_get_write_queue_size((uv_stream_t *)&to->tcp) < HIGH_WATER / 2) {
    from->blocked = 0;
    update_reading(from);
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) { free(req); }

static void probe_now(listener_t *l);

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  side_t *from = stream->data;
  side_t *to = from->peer;
  conn_t *c = from->conn;
  if (nread > 0) {
    write_req_t *w = malloc(sizeof *w);
    uv_buf_t out = uv_buf_init(buf->base, (unsigned)nread);
    if (!w) {
      free(buf->base);
      conn_close(c, 1);
      return;
    }
    w->base = buf->base;
    w->req.data = to;
    if (uv_write(&w->req, (uv_stream_t *)&to->tcp, &out, 1, on_write) != 0) {
      free(w->base);
      free(w);
      conn_close(c, 1);
      return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&to->tcp) > HIGH_WATER) {
      from->blocked = 1;
      update_reading(from);
    }
    return;
  }
  free(buf->base);
  if (nread == 0) return;
  if (nread == UV_EOF) {
    from->eof = 1;
    update_reading(from);
    if (from == &c->u) probe_now(c->l); /* etcd closing on us may mean it died */
    if (to->eof) {
      conn_close(c, 0);
    } else {
      uv_shutdown_t *req = malloc(sizeof *req);
      if (!req || uv_shutdown(req, (uv_stream_t *)&to->tcp, on_shutdown) != 0) {
        free(req);
        conn_close(c, 0);
      }
    }
    return;
  }
  /* An error: a reset is passed on as a reset. */
  if (from == &c->u) probe_now(c->l);
  conn_close(c, nread == UV_ECONNRESET);
}

static void listener_down(listener_t *l);

static void on_connect(uv_connect_t *req, int status) {
  conn_t *c = req->data;
  if (c->closing) return;
  if (status < 0) {
    say("upstream %d (port %d): connect: %s; resetting the client", c->l->index + 1, c->l->port,
         uv_strerror(status));
    if (status == UV_ECONNREFUSED) listener_down(c->l);
    conn_close(c, 1);
    return;
  }
  c->connected = 1;
  uv_tcp_nodelay(&c->u.tcp, 1);
  update_reading(&c->c);
  update_reading(&c->u);
}

/* Accepts every pending connection of l and connects each to l's upstream. */
static void on_listen_ready(uv_poll_t *p, int status, int events) {
  listener_t *l = p->data;
  for (;;) {
    conn_t *c;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        say("upstream %d: accept: %s", l->index + 1, strerror(errno));
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->l = l;
    c->c.conn = c->u.conn = c;
    c->c.peer = &c->u;
    c->u.peer = &c->c;
    c->c.tcp.data = &c->c;
    c->u.tcp.data = &c->u;
    c->creq.data = c;
    uv_tcp_init(loop, &c->c.tcp);
    uv_tcp_init(loop, &c->u.tcp);
    c->handles = 2;
    c->next = conns.next;
    c->prev = &conns;
    conns.next->prev = c;
    conns.next = c;
    if (uv_tcp_open(&c->c.tcp, fd) != 0) {
      close(fd);
      conn_close(c, 0);
      continue;
    }
    uv_tcp_nodelay(&c->c.tcp, 1);
    if (uv_tcp_connect(&c->creq, &c->u.tcp, (const struct sockaddr *)&l->up, on_connect) != 0)
      conn_close(c, 1);
  }
}

/* ---- listeners and probes --------------------------------------------- */

static void update_polling(listener_t *l) {
  int want = !frozen && !l->down;
  if (want && !l->polling) {
    uv_poll_start(&l->poll, UV_READABLE, on_listen_ready);
    l->polling = 1;
  } else if (!want && l->polling) {
    uv_poll_stop(&l->poll);
    l->polling = 0;
  }
}

static void on_probe_close(uv_handle_t *h) { free(h->data); }

static void on_probe(uv_connect_t *req, int status) {
  probe_t *pr = req->data;
  listener_t *l = pr->l;
  l->probing = 0;
  uv_close((uv_handle_t *)&pr->tcp, on_probe_close);
  if (status == 0) {
    if (l->down) {
      if (listen(l->fd, 128) != 0) {
        say("upstream %d: listen again: %s", l->index + 1, strerror(errno));
        return;
      }
      l->down = 0;
      uv_timer_stop(&l->probe_timer);
      update_polling(l);
      say("upstream %d (port %d): accepts connections again; listening", l->index + 1, l->port);
    }
  } else if (status == UV_ECONNREFUSED) {
    listener_down(l);
  }
}

/* One connect to l's upstream, to learn whether it is there. */
static void probe_now(listener_t *l) {
  probe_t *pr;
  if (l->probing) return;
  pr = calloc(1, sizeof *pr);
  if (!pr) return;
  pr->l = l;
  pr->tcp.data = pr;
  pr->req.data = pr;
  uv_tcp_init(loop, &pr->tcp);
  if (uv_tcp_connect(&pr->req, &pr->tcp, (const struct sockaddr *)&l->up, on_probe) != 0) {
    uv_close((uv_handle_t *)&pr->tcp, on_probe_close);
    return;
  }
  l->probing = 1;
}

static void on_probe_timer(uv_timer_t *t) { probe_now(t->data); }

static void listener_down(listener_t *l) {
  if (l->down) return;
  l->down = 1;
  update_polling(l);
  /* Linux: a listening socket shut down for reading stops listening (new
   * connects are refused) and keeps its port; listen() works on it again. */
  if (shutdown(l->fd, SHUT_RD) != 0) say("upstream %d: unlisten: %s", l->index + 1, strerror(errno));
  uv_timer_start(&l->probe_timer, on_probe_timer, PROBE_MS, PROBE_MS);
  say("upstream %d (port %d): refused; not listening until it is back", l->index + 1, l->port);
}

/* A listening socket on a free port of 127.0.0.1, bound to it by number
 * (a port-0 bind would be given up by the kernel at the unlisten). */
static int listener_open(listener_t *l) {
  for (int attempt = 0; attempt < 50; attempt++) {
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
      close(fd);
      return -1;
    }
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 128) == 0) {
      l->fd = fd;
      l->port = ntohs(a.sin_port);
      uv_poll_init(loop, &l->poll, fd);
      l->poll.data = l;
      uv_timer_init(loop, &l->probe_timer);
      l->probe_timer.data = l;
      update_polling(l);
      return 0;
    }
    close(fd); /* taken meanwhile: another port */
  }
  return -1;
}

/* ---- control ------------------------------------------------------------ */

static void set_frozen(int f) {
  frozen = f;
  for (conn_t *c = conns.next; c != &conns; c = c->next) {
    update_reading(&c->c);
    update_reading(&c->u);
  }
  for (int i = 0; i < nlisteners; i++) update_polling(&listeners[i]);
}

static void on_signal(uv_signal_t *h, int signum) {
  int n;
  switch (signum) {
  case SIGUSR1:
    set_frozen(1);
    say("freeze (%d connections held)", nconns());
    break;
  case SIGHUP:
    set_frozen(0);
    say("pass (%d connections)", nconns());
    break;
  case SIGUSR2:
    n = 0;
    while (conns.next != &conns) {
      conn_close(conns.next, 1);
      n++;
    }
    say("reset (%d connections reset)%s", n, frozen ? "; still frozen" : "");
    break;
  default:
    say("exit on signal %d", signum);
    exit(0);
  }
}

static int parse_hostport(const char *s, struct sockaddr_in *a) {
  char host[64];
  const char *colon = strrchr(s, ':');
  size_t hl;
  if (!colon) return -1;
  hl = (size_t)(colon - s);
  if (hl == 0 || hl >= sizeof host) return -1;
  memcpy(host, s, hl);
  host[hl] = 0;
  if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  return uv_ip4_addr(host, atoi(colon + 1), a);
}

int main(int argc, char **argv) {
  const int signums[5] = {SIGUSR1, SIGUSR2, SIGHUP, SIGTERM, SIGINT};
  char ports[16 * MAX_UPSTREAMS], tmp[4096];
  size_t off = 0;
  FILE *f;
  if (argc < 3 || argc - 2 > MAX_UPSTREAMS) {
    fprintf(stderr, "usage: proxy PORTFILE HOST:PORT... (1 to %d upstreams)\n", MAX_UPSTREAMS);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  loop = uv_default_loop();
  conns.next = conns.prev = &conns;
  for (int i = 0; i < 5; i++) {
    uv_signal_init(loop, &sigs[i]);
    uv_signal_start(&sigs[i], on_signal, signums[i]);
  }
  nlisteners = argc - 2;
  for (int i = 0; i < nlisteners; i++) {
    listener_t *l = &listeners[i];
    l->index = i;
    if (parse_hostport(argv[i + 2], &l->up) != 0) {
      fprintf(stderr, "proxy: %s: HOST:PORT expected (an IPv4 address)\n", argv[i + 2]);
      return 2;
    }
    if (listener_open(l) != 0) {
      fprintf(stderr, "proxy: cannot listen on 127.0.0.1: %s\n", strerror(errno));
      return 1;
    }
    off += (size_t)snprintf(ports + off, sizeof ports - off, "%s%d", i ? " " : "", l->port);
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  f = fopen(tmp, "w");
  if (!f || fprintf(f, "%s\n", ports) < 0 || fclose(f) != 0 || rename(tmp, argv[1]) != 0) {
    fprintf(stderr, "proxy: %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  say("listening on %s", ports);
  return uv_run(loop, UV_RUN_DEFAULT);
}
