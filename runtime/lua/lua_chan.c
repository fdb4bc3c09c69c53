/*
 * baton.channel: a line channel between a process and a child it started
 * with baton.spawn{..., channel = true}.
 *
 * The parent's end is p.channel; the child's end is its file descriptor 3,
 * which a baton child opens with baton.channel(). Both ends are the same
 * object: ch:send(line) queues one line (no newline inside) and returns at
 * once; ch:recv([timeout]) waits for the next whole line. The node and its
 * workers speak JSON over it, one message per line.
 *
 *   local p = assert(baton.spawn{baton._exe, "eval", "child.lua", channel = true})
 *   p.channel:send('{"run": 1}')
 *   local reply = p.channel:recv(5)
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <lauxlib.h>
#include "err.h"
#include "lua_mod.h"
#include "rt.h"

#define CHAN_MT "baton.channel"
#define CHAN_READ_CHUNK 65536
/* Past this many unread bytes the channel stops reading until recv. */
#define CHAN_HIGH_WATER (4u << 20)
/* A line longer than this ends the channel with ETOOLARGE. */
#define CHAN_MAX_LINE (64u << 20)

typedef struct chan_s {
  uv_pipe_t pipe;
  bt_rt_t *rt;
  bt_closer_t closer;     /* registered while open */
  char *buf;              /* received bytes not yet returned */
  size_t len, cap;
  bt_co_t *reader;        /* the coroutine in recv, if any */
  uv_timer_t timer;       /* its timeout */
  int timer_init, reading, open;
  int eof;                /* 0, or the BT_E* code that ended reading */
  int werr;               /* a failed write: later sends fail with it */
  int pending;            /* writes not yet done */
  int refs;               /* box + pipe handle + timer handle + writes */
  double timeout;
} chan_t;

typedef struct {
  chan_t *c;
} cbox_t;

static void chan_unref(chan_t *c) {
  if (--c->refs > 0) return;
  free(c->buf);
  free(c);
}

static void on_handle_close(uv_handle_t *h) {
  chan_unref(h->data);
}

static void stop_timer(chan_t *c) {
  if (c->timer_init) uv_timer_stop(&c->timer);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  chan_t *c = req->data;
  (void) status;
  free(req);
  uv_close((uv_handle_t *) &c->pipe, on_handle_close);
}

/* Closes the channel's handles; a waiting reader gets EOF. Lines already
 * sent still go out first (so a process may send and exit). */
static void chan_close(chan_t *c) {
  uv_shutdown_t *req;
  if (!c->open) return;
  c->open = 0;
  bt_rt_del_closer(c->rt, &c->closer);
  uv_read_stop((uv_stream_t *) &c->pipe);
  c->reading = 0;
  req = c->pending ? malloc(sizeof(*req)) : NULL;
  if (req) req->data = c;
  if (!req || uv_shutdown(req, (uv_stream_t *) &c->pipe, on_shutdown)) {
    free(req);
    uv_close((uv_handle_t *) &c->pipe, on_handle_close);
  }
  if (c->timer_init) uv_close((uv_handle_t *) &c->timer, on_handle_close);
  if (!c->eof) c->eof = BT_EOF;
  if (c->reader) {
    bt_co_t *co = c->reader;
    c->reader = NULL;
    bt_push_fail(bt_co_stack(co), BT_EOF, "channel closed");
    bt_co_resume(co, 3);
  }
}

static void chan_closer(bt_closer_t *self) {
  chan_close((chan_t *) ((char *) self - offsetof(chan_t, closer)));
}

/* Pushes on S the next whole line (taking it from the buffer), or, once
 * reading has ended and no line is left, the failure that ended it.
 * Returns the number of values pushed, 0 if neither is there yet. */
static int take(chan_t *c, lua_State *S) {
  char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
  size_t n;
  if (!nl) {
    if (!c->eof) return 0;
    return bt_push_fail(S, c->eof, c->eof == BT_EOF ? "channel closed" : NULL);
  }
  n = (size_t) (nl - c->buf);
  lua_pushlstring(S, c->buf, n);
  memmove(c->buf, nl + 1, c->len - n - 1);
  c->len -= n + 1;
  return 1;
}

/* Resumes the waiting reader with the next line or the end, if there is
 * one. Returns 1 if it was resumed. */
static int deliver(chan_t *c) {
  bt_co_t *co = c->reader;
  int n;
  if (!co || !(n = take(c, bt_co_stack(co)))) return 0;
  c->reader = NULL;
  stop_timer(c);
  bt_co_resume(co, n);
  return 1;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  chan_t *c = h->data;
  (void) suggested;
  if (c->cap - c->len < CHAN_READ_CHUNK) {
    size_t cap = c->cap ? c->cap * 2 : CHAN_READ_CHUNK;
    char *np;
    while (cap - c->len < CHAN_READ_CHUNK) cap *= 2;
    np = realloc(c->buf, cap);
    if (!np) {
      *buf = uv_buf_init(NULL, 0);   /* on_read gets UV_ENOBUFS */
      return;
    }
    c->buf = np;
    c->cap = cap;
  }
  *buf = uv_buf_init(c->buf + c->len, (unsigned) (c->cap - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  chan_t *c = s->data;
  (void) buf;
  if (nread == 0) return;
  if (nread > 0) {
    c->len += (size_t) nread;
    if (c->len > CHAN_MAX_LINE && !memchr(c->buf, '\n', c->len)) {
      c->eof = BT_ETOOLARGE;
    } else if (c->len > CHAN_HIGH_WATER && !c->reader) {
      uv_read_stop(s);
      c->reading = 0;
    }
  } else {
    c->eof = nread == UV_EOF ? BT_EOF : (int) nread;
  }
  if (c->eof) {
    uv_read_stop(s);
    c->reading = 0;
  }
  while (deliver(c)) {}
}

static void on_timeout(uv_timer_t *t) {
  chan_t *c = t->data;
  bt_co_t *co = c->reader;
  char msg[100];
  if (!co) return;
  c->reader = NULL;
  snprintf(msg, sizeof(msg), "no message on the channel after %g s", c->timeout);
  bt_push_fail(bt_co_stack(co), BT_ETIMEDOUT, msg);
  bt_co_resume(co, 3);
}

/* The reader was killed: stop waiting. */
static void recv_cancel(void *data) {
  chan_t *c = data;
  c->reader = NULL;
  stop_timer(c);
}

static void start_reading(chan_t *c) {
  if (c->reading || c->eof || !c->open) return;
  if (uv_read_start((uv_stream_t *) &c->pipe, on_alloc, on_read) == 0)
    c->reading = 1;
}

/* Makes a channel object on L's stack (the box) whose pipe is initialised
 * but not yet connected. */
static chan_t *chan_push(lua_State *L) {
  cbox_t *b = lua_newuserdata(L, sizeof(*b));
  chan_t *c;
  b->c = NULL;
  luaL_getmetatable(L, CHAN_MT);
  lua_setmetatable(L, -2);
  c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->rt = bt_rt_from(L);
  uv_pipe_init(bt_lua_loop(L), &c->pipe, 0);
  c->pipe.data = c;
  c->refs = 2;            /* box + pipe */
  c->open = 1;
  c->closer.close = chan_closer;
  bt_rt_add_closer(c->rt, &c->closer);
  b->c = c;
  return c;
}

uv_stream_t *bt__chan_new(lua_State *L) {
  chan_t *c = chan_push(L);
  return c ? (uv_stream_t *) &c->pipe : NULL;
}

void bt__chan_started(lua_State *L, int idx, int ok) {
  cbox_t *b = luaL_checkudata(L, idx, CHAN_MT);
  if (!b->c) return;
  if (ok) start_reading(b->c);
  else chan_close(b->c);
}

static chan_t *check_chan(lua_State *L) {
  cbox_t *b = luaL_checkudata(L, 1, CHAN_MT);
  if (!b->c) luaL_error(L, "baton.channel: not a channel");
  return b->c;
}

/* baton.channel([fd]): the child's end (fd 3 by default). */
static int l_channel(lua_State *L) {
  int fd = (int) luaL_optinteger(L, 1, 3), rc;
  struct stat st;
  chan_t *c;
  char msg[160];
  if (fd < 0) return luaL_argerror(L, 1, "must be a file descriptor");
  if (fstat(fd, &st) < 0 || !(S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode))) {
    snprintf(msg, sizeof(msg), "file descriptor %d is not a channel (start "
             "this process with baton.spawn{..., channel = true})", fd);
    return bt_push_fail(L, BT_EBADF, msg);
  }
  c = chan_push(L);
  if (!c) return bt_push_fail(L, BT_ENOMEM, NULL);
  rc = uv_pipe_open(&c->pipe, fd);
  if (rc) {
    chan_close(c);
    snprintf(msg, sizeof(msg), "file descriptor %d: %s", fd, uv_strerror(rc));
    return bt_push_fail(L, rc, msg);
  }
  /* The job's own children must not hold the channel open. */
  fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  start_reading(c);
  return 1;
}

static void on_written(uv_write_t *w, int status) {
  chan_t *c = w->data;
  if (status && !c->werr) c->werr = status;
  c->pending--;
  free(w);
  chan_unref(c);
}

/* ch:send(line) -> true | nil, err, code. Queued; returns at once. */
static int l_send(lua_State *L) {
  chan_t *c = check_chan(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  uv_write_t *w;
  uv_buf_t buf;
  int rc;
  if (memchr(s, '\n', n))
    return luaL_error(L, "baton.channel:send: a message is one line (it "
                      "contains a newline)");
  if (!c->open) return bt_push_fail(L, BT_EOF, "channel closed");
  if (c->werr) return bt_push_fail(L, c->werr, "channel: the other end is gone");
  w = malloc(sizeof(*w) + n + 1);
  if (!w) return bt_push_fail(L, BT_ENOMEM, NULL);
  memcpy((char *) (w + 1), s, n);
  ((char *) (w + 1))[n] = '\n';
  buf = uv_buf_init((char *) (w + 1), (unsigned) (n + 1));
  w->data = c;
  rc = uv_write(w, (uv_stream_t *) &c->pipe, &buf, 1, on_written);
  if (rc) {
    free(w);
    return bt_push_fail(L, rc, "channel: the other end is gone");
  }
  c->refs++;
  c->pending++;
  lua_pushboolean(L, 1);
  return 1;
}

/* ch:recv([timeout]) -> line | nil, "EOF: channel closed", "EOF" |
 * nil, "ETIMEDOUT: ...", "ETIMEDOUT" */
static int l_recv(lua_State *L) {
  chan_t *c = check_chan(L);
  double timeout = -1;
  bt_co_t *co;
  if (!lua_isnoneornil(L, 2)) {
    timeout = luaL_checknumber(L, 2);
    if (!(timeout >= 0) || timeout > 1e9)
      return luaL_error(L, "baton.channel:recv: timeout must be >= 0 seconds");
  }
  co = bt_co_current(L, "baton.channel:recv");
  if (c->reader)
    return luaL_error(L, "baton.channel:recv: another coroutine is "
                      "already receiving");
  /* A whole line (or the end) may be buffered already. (A closed channel
   * has eof set.) */
  {
    int n = take(c, L);
    if (n) return n;
  }
  if (timeout == 0)
    return bt_push_fail(L, BT_ETIMEDOUT, "no message on the channel after 0 s");
  c->reader = co;
  start_reading(c);
  if (timeout > 0) {
    if (!c->timer_init) {
      uv_timer_init(bt_lua_loop(L), &c->timer);
      c->timer.data = c;
      c->timer_init = 1;
      c->refs++;
    }
    c->timeout = timeout;
    bt_timer_start_secs(L, &c->timer, on_timeout, timeout);
  }
  return bt_co_wait(L, co, recv_cancel, c);
}

static int l_close(lua_State *L) {
  chan_close(check_chan(L));
  return 0;
}

static int l_tostring(lua_State *L) {
  chan_t *c = check_chan(L);
  lua_pushfstring(L, "baton.channel (%s)", c->open ? "open" : "closed");
  return 1;
}

static int l_gc(lua_State *L) {
  cbox_t *b = luaL_checkudata(L, 1, CHAN_MT);
  if (b->c) {
    chan_close(b->c);
    chan_unref(b->c);
    b->c = NULL;
  }
  return 0;
}

int bt_lua_open_chan(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"send", l_send}, {"recv", l_recv}, {"close", l_close}, {NULL, NULL}
  };
  /* stack: baton */
  if (luaL_newmetatable(L, CHAN_MT)) {
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, l_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, CHAN_MT);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_channel);
  lua_setfield(L, -2, "channel");
  return 0;
}
