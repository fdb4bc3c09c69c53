/*
 * rawhttp: the reference client for baton's benchmarks. It does the least
 * work an HTTP/1.1 client can do against etcd's JSON gateway -- plain
 * blocking sockets, one kept-alive TCP connection, no libcurl, no event loop
 * -- so that a benchmark can print baton's latency next to this floor.
 *
 *   rawhttp [-n N] [-w W] [-t MS] [-H 'Name: value']... [-v]
 *           URL PATH BODY [PATH BODY]...
 *
 * Each iteration POSTs every PATH/BODY pair in order on the same connection
 * and waits for each full response (headers, then a Content-Length or chunked
 * body). W warm-up iterations (default 10) are not measured; then N
 * iterations (default 1000) are timed, each as a whole, so a pair list such
 * as a txn followed by a deleterange measures one lock/unlock cycle.
 * Prints one line on stdout:
 *
 *   p50_us=612 p99_us=1890 mean_us=655 min_us=402 max_us=3011 n=1000 reqs=2000 total_ms=655 reconnects=0
 *
 * Exit status 0; 1 on a network error, a non-2xx response or a timeout (-t,
 * default 10000 ms per send or receive); 2 on a usage error. -v prints the
 * last response body to stderr.
 *
 * Build (tests/harness/run-bench does this into build/bench/):
 *   cc -O2 -Wall -Wextra -o build/bench/rawhttp tests/bench/rawhttp.c
 *
 * Example against an etcd (keys and values are base64: "foo", "bar"):
 *   build/bench/rawhttp -n 1000 http://127.0.0.1:2379 \
 *     /v3/kv/put '{"key":"Zm9v","value":"YmFy"}' /v3/kv/range '{"key":"Zm9v"}'
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  const char *path;
  const char *body;
} req_t;

/* Input buffer of one connection: bytes [off, len) are unread. */
typedef struct {
  char *data;
  size_t off, len, cap;
} rbuf_t;

static struct {
  char host[256];    /* as written in the URL, for the Host header */
  char node[256];    /* for getaddrinfo (no IPv6 brackets) */
  char port[16];
  char prefix[1024]; /* path part of the URL, prepended to each PATH */
  char *headers;     /* extra "Name: value\r\n" lines */
  int timeout_ms;
  int verbose;
} cfg;

static int fd = -1;
static rbuf_t in;
static char *last_body;
static size_t last_body_len;
static long reconnects;

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("rawhttp: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (!p) die("out of memory");
  return p;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Splits http://host[:port][/prefix] into cfg; only plain http. */
static void parse_url(const char *url) {
  const char *p, *host_end, *path;
  if (strncmp(url, "http://", 7) != 0) {
    fprintf(stderr, "rawhttp: only http:// URLs are supported: %s\n", url);
    exit(2);
  }
  p = url + 7;
  path = p + strcspn(p, "/");
  if (*p == '[') { /* [v6]:port */
    host_end = strchr(p, ']');
    if (!host_end || host_end > path) die("bad URL %s", url);
    snprintf(cfg.node, sizeof cfg.node, "%.*s", (int)(host_end - p - 1), p + 1);
    host_end++;
  } else {
    host_end = p + strcspn(p, ":/");
    snprintf(cfg.node, sizeof cfg.node, "%.*s", (int)(host_end - p), p);
  }
  if (*host_end == ':')
    snprintf(cfg.port, sizeof cfg.port, "%.*s", (int)(path - host_end - 1), host_end + 1);
  else
    strcpy(cfg.port, "80");
  snprintf(cfg.host, sizeof cfg.host, "%.*s", (int)(path - p), p);
  /* "/v3/kv/put" appended to "http://h:p/" must not become "//v3". */
  snprintf(cfg.prefix, sizeof cfg.prefix, "%s", path);
  size_t n = strlen(cfg.prefix);
  if (n > 0 && cfg.prefix[n - 1] == '/') cfg.prefix[n - 1] = '\0';
  if (!cfg.node[0]) die("bad URL %s", url);
}

/* Opens the connection with bounded send/receive timeouts and Nagle off
 * (libcurl's default too, so the comparison is fair). */
static void connect_server(void) {
  struct addrinfo hints, *res, *ai;
  struct timeval tv = {cfg.timeout_ms / 1000, (cfg.timeout_ms % 1000) * 1000};
  int one = 1, rc, err = 0;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  rc = getaddrinfo(cfg.node, cfg.port, &hints, &res);
  if (rc != 0) die("%s:%s: %s", cfg.node, cfg.port, gai_strerror(rc));
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { err = errno; continue; }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* bounds connect too */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) die("connect %s:%s: %s", cfg.node, cfg.port, strerror(err));
  in.off = in.len = 0;
}

static void disconnect(void) {
  if (fd >= 0) close(fd);
  fd = -1;
  in.off = in.len = 0;
}

/* Reads more bytes into the buffer. Returns the count, 0 on EOF. */
static size_t fill(void) {
  ssize_t n;
  if (in.off > 0 && in.off == in.len) in.off = in.len = 0;
  if (in.cap - in.len < 16384) {
    if (in.off > 0) { /* compact before growing */
      memmove(in.data, in.data + in.off, in.len - in.off);
      in.len -= in.off;
      in.off = 0;
    }
    if (in.cap - in.len < 16384) {
      in.cap = in.cap ? in.cap * 2 : 65536;
      in.data = xrealloc(in.data, in.cap);
    }
  }
  do n = recv(fd, in.data + in.len, in.cap - in.len, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ECONNRESET) n = 0; /* a reset is a close here */
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) die("timed out after %d ms waiting for a response", cfg.timeout_ms);
    die("recv: %s", strerror(errno));
  }
  in.len += (size_t)n;
  return (size_t)n;
}

/* Returns the next line without its CRLF (NUL-terminated in place). */
static char *read_line(void) {
  for (;;) {
    char *start = in.data + in.off;
    char *nl = memchr(start, '\n', in.len - in.off);
    if (nl) {
      in.off = (size_t)(nl - in.data) + 1;
      if (nl > start && nl[-1] == '\r') nl--;
      *nl = '\0';
      return start;
    }
    if (in.len - in.off > 65536) die("response line too long");
    if (fill() == 0) die("connection closed in the middle of a response");
  }
}

/* Consumes n body bytes, appending them to last_body (*kept bytes so far). */
static void read_body(size_t n, size_t *kept) {
  while (n > 0) {
    if (in.off == in.len && fill() == 0) die("connection closed in the middle of a body");
    size_t take = in.len - in.off < n ? in.len - in.off : n;
    last_body = xrealloc(last_body, *kept + take + 1);
    memcpy(last_body + *kept, in.data + in.off, take);
    *kept += take;
    last_body[*kept] = '\0';
    in.off += take;
    n -= take;
  }
}

static int write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Sends one POST and reads its whole response. Returns the status, or -1 if
 * the server had closed the kept-alive connection before answering (the
 * caller reconnects and sends again). Sets *close_after when the response
 * ends the connection. */
static int exchange(const char *req, size_t req_len, int *close_after) {
  int status, chunked = 0;
  long long clen = -1;
  char *line;
  size_t kept = 0;

  if (write_all(req, req_len) < 0) {
    if (errno == EPIPE || errno == ECONNRESET) return -1;
    die("send: %s", strerror(errno));
  }
  if (in.off == in.len && fill() == 0) return -1;
  line = read_line();
  if (sscanf(line, "HTTP/%*d.%*d %d", &status) != 1) die("bad status line: %s", line);
  *close_after = strncmp(line, "HTTP/1.0", 8) == 0;
  while (*(line = read_line()) != '\0') {
    char *colon = strchr(line, ':'), *v;
    if (!colon) continue;
    *colon = '\0';
    v = colon + 1 + strspn(colon + 1, " \t");
    if (!strcasecmp(line, "content-length")) clen = strtoll(v, NULL, 10);
    else if (!strcasecmp(line, "transfer-encoding")) chunked = strcasestr(v, "chunked") != NULL;
    else if (!strcasecmp(line, "connection")) {
      if (strcasestr(v, "close")) *close_after = 1;
      else if (strcasestr(v, "keep-alive")) *close_after = 0;
    }
  }
  if (status == 204 || status == 304 || (status >= 100 && status < 200)) {
    /* no body */
  } else if (chunked) {
    for (;;) {
      unsigned long long size = strtoull(read_line(), NULL, 16);
      if (size == 0) {
        while (*read_line() != '\0') {} /* trailers */
        break;
      }
      read_body((size_t)size, &kept);
      if (*read_line() != '\0') die("bad chunk terminator");
    }
  } else if (clen >= 0) {
    read_body((size_t)clen, &kept);
  } else { /* body until EOF */
    while (in.off < in.len || fill() > 0) read_body(in.len - in.off, &kept);
    *close_after = 1;
  }
  if (kept == 0 && last_body) last_body[0] = '\0';
  last_body_len = kept;
  return status;
}

static char *build_request(const req_t *r, size_t *len) {
  size_t blen = strlen(r->body);
  int n = snprintf(NULL, 0,
                   "POST %s%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n%s\r\n",
                   cfg.prefix, r->path, cfg.host, blen, cfg.headers ? cfg.headers : "");
  char *s = xrealloc(NULL, (size_t)n + blen + 1);
  snprintf(s, (size_t)n + 1,
           "POST %s%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
           "Content-Length: %zu\r\n%s\r\n",
           cfg.prefix, r->path, cfg.host, blen, cfg.headers ? cfg.headers : "");
  memcpy(s + n, r->body, blen + 1);
  *len = (size_t)n + blen;
  return s;
}

/* One request with one retry on a connection the server closed while idle;
 * any other failure, and any non-2xx status, ends the program. */
static void do_request(const req_t *r, const char *raw, size_t raw_len) {
  int close_after = 0, status, attempt;
  for (attempt = 0; attempt < 2; attempt++) {
    if (fd < 0) {
      connect_server();
      reconnects++;
    }
    status = exchange(raw, raw_len, &close_after);
    if (status >= 0) break;
    disconnect();
  }
  if (status < 0) die("%s: the server closed the connection without answering", r->path);
  if (close_after) disconnect();
  if (status < 200 || status > 299)
    die("POST %s: HTTP %d: %.*s", r->path, status, (int)(last_body_len > 500 ? 500 : last_body_len),
        last_body ? last_body : "");
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static uint64_t pct(const uint64_t *v, long n, int p) {
  long rank = (long)(((long long)p * n + 99) / 100);
  if (rank < 1) rank = 1;
  return v[rank - 1];
}

__attribute__((noreturn)) static void usage(void) {
  fputs("usage: rawhttp [-n N] [-w WARMUP] [-t TIMEOUT_MS] [-H 'Name: value']... [-v]\n"
        "               URL PATH BODY [PATH BODY]...\n",
        stderr);
  exit(2);
}

int main(int argc, char **argv) {
  long n = 1000, warmup = 10, i;
  int opt, nreq, j;
  size_t hlen = 0;
  cfg.timeout_ms = 10000;
  while ((opt = getopt(argc, argv, "n:w:t:H:vh")) != -1) {
    switch (opt) {
      case 'n': n = strtol(optarg, NULL, 10); break;
      case 'w': warmup = strtol(optarg, NULL, 10); break;
      case 't': cfg.timeout_ms = atoi(optarg); break;
      case 'H': {
        size_t l = strlen(optarg);
        cfg.headers = xrealloc(cfg.headers, hlen + l + 3);
        memcpy(cfg.headers + hlen, optarg, l);
        memcpy(cfg.headers + hlen + l, "\r\n", 3);
        hlen += l + 2;
        break;
      }
      case 'v': cfg.verbose = 1; break;
      default: usage();
    }
  }
  if (n < 1 || warmup < 0 || cfg.timeout_ms < 1) usage();
  if (argc - optind < 3 || (argc - optind - 1) % 2 != 0) usage();
  parse_url(argv[optind]);
  nreq = (argc - optind - 1) / 2;

  req_t *reqs = xrealloc(NULL, sizeof *reqs * (size_t)nreq);
  char **raw = xrealloc(NULL, sizeof *raw * (size_t)nreq);
  size_t *raw_len = xrealloc(NULL, sizeof *raw_len * (size_t)nreq);
  for (j = 0; j < nreq; j++) {
    reqs[j].path = argv[optind + 1 + 2 * j];
    reqs[j].body = argv[optind + 2 + 2 * j];
    if (reqs[j].path[0] != '/') die("PATH must start with '/': %s", reqs[j].path);
    raw[j] = build_request(&reqs[j], &raw_len[j]);
  }

  /* The first connect is not a reconnect. */
  connect_server();
  reconnects = 0;
  for (i = 0; i < warmup; i++)
    for (j = 0; j < nreq; j++) do_request(&reqs[j], raw[j], raw_len[j]);

  uint64_t *lat = xrealloc(NULL, sizeof *lat * (size_t)n);
  uint64_t t_start = now_ns(), sum = 0;
  for (i = 0; i < n; i++) {
    uint64_t t0 = now_ns();
    for (j = 0; j < nreq; j++) do_request(&reqs[j], raw[j], raw_len[j]);
    lat[i] = now_ns() - t0;
    sum += lat[i];
  }
  uint64_t total = now_ns() - t_start;

  qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
  printf("p50_us=%llu p99_us=%llu mean_us=%llu min_us=%llu max_us=%llu n=%ld reqs=%ld "
         "total_ms=%llu reconnects=%ld\n",
         (unsigned long long)(pct(lat, n, 50) / 1000), (unsigned long long)(pct(lat, n, 99) / 1000),
         (unsigned long long)(sum / (uint64_t)n / 1000), (unsigned long long)(lat[0] / 1000),
         (unsigned long long)(lat[n - 1] / 1000), n, n * nreq, (unsigned long long)(total / 1000000),
         reconnects);
  if (cfg.verbose && last_body) fprintf(stderr, "%.*s\n", (int)last_body_len, last_body);

  disconnect();
  for (j = 0; j < nreq; j++) free(raw[j]);
  free(raw);
  free(raw_len);
  free(reqs);
  free(lat);
  free(last_body);
  free(in.data);
  free(cfg.headers);
  return 0;
}
