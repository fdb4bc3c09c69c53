/*
 * baton.exec and baton.spawn: run a program (no shell) without blocking the
 * loop.
 *
 *   local r = assert(baton.exec{"pg_dump", "-f", path, timeout = 600})
 *   -- r.code, r.signal, r.stdout, r.stderr
 *   assert(baton.exec{"pg_dump", "-f", path, check = true})
 *   -- a non-zero exit: nil, "ECHILD: pg_dump exited with status 1: ...", "ECHILD"
 *
 *   local p = assert(baton.spawn{"rsync", "-a", src, dst})
 *   -- p.pid, p:wait([timeout]), p:kill([sig]), p:done()
 *
 * Both take the same command table ({cmd, args..., env=, cwd=}) and run the
 * child in a new session (its own process group), so a kill reaches
 * everything it started (`sh -c "a | b"`), not only the direct child.
 *
 * exec captures the output and returns when the child has exited and both
 * output pipes are closed. A timeout sends SIGTERM to the group, then
 * SIGKILL after KILL_GRACE_MS; a killed coroutine (job cancel) sends SIGKILL
 * at once. Handles are closed in every path and the state is freed by the
 * last close callback.
 *
 * spawn starts a long-running child that inherits baton's stdin, stdout and
 * stderr (or /dev/null) and returns a process object at once; see the
 * "baton.spawn" section below for its lifetime.
 *
 * In a worker, the run's output capture (baton._output_capture, below) also
 * gets the lines both of them print, unless the call says output = false.
 */
#include "cgroup.h"
#include "contain.h"
#include "err.h"
#include "fence.h"
#include "lua_mod.h"
#include "rt.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXEC_MAX_OUTPUT ((size_t) 64 << 20)   /* per stream */
#define EXEC_READ_CHUNK ((size_t) 64 << 10)
#define KILL_GRACE_MS 2000
#define PROC_MT "baton.process"
#define SINK_MT "baton.output_sink"
#define TAP_LINE_MAX 4096                    /* longer lines are cut */
#define CHECK_TAIL_LINES 5                   /* of stderr, in check's error */
#define CHECK_TAIL_BYTES 1024

extern char **environ;

/* ---- the command table, shared by exec and spawn ----------------------- */

/* A checked command table. The strings (and envp, a userdata) are anchored
 * on the Lua stack of the call that checked it. */
typedef struct {
  char **argv;
  char **envp;          /* NULL: inherit baton's environment */
  const char *cwd;      /* NULL: baton's */
} cmdline_t;

/* Raises unless the value at idx is a string (or a number, converted in
 * place) without NUL bytes; returns it. what names it in the message. */
static const char *check_str(lua_State *L, int idx, const char *api,
                             const char *what) {
  size_t len;
  const char *s;
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "%s: %s must be a string (got %s)", api, what,
               luaL_typename(L, idx));
  s = lua_tolstring(L, idx, &len);
  if (strlen(s) != len)
    luaL_error(L, "%s: %s contains a NUL byte", api, what);
  return s;
}

/* Builds the child's environment: the inherited one (none when inherit is
 * 0) with the entries of the env table (at idx) added or replacing those
 * of the same name; an entry set to false removes the variable. The
 * strings are anchored in a table and the pointer array is a userdata,
 * both left on the stack. Returns the array. */
static char **build_env(lua_State *L, int idx, const char *api, int inherit) {
  int n_env = 0, n_tab = 0, i, k = 0, anchor;
  char **envp;
  char what[300];

  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *key;
    size_t klen;
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: env names must be strings (got %s)", api,
                 luaL_typename(L, -2));
    key = lua_tolstring(L, -2, &klen);
    if (klen == 0 || strlen(key) != klen || strchr(key, '='))
      luaL_error(L, "%s: invalid env name '%s'", api, key);
    if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    snprintf(what, sizeof(what), "env %s", key);
    lua_pushvalue(L, -1);   /* check a copy; the table stays as it was */
    check_str(L, -1, api, what);
    lua_pop(L, 1);
    n_tab++;
    lua_pop(L, 1);
  }
  for (i = 0; inherit && environ[i]; i++) n_env++;

  lua_createtable(L, n_env + n_tab, 0);
  anchor = lua_gettop(L);
  envp = lua_newuserdata(L, (size_t) (n_env + n_tab + 1) * sizeof(char *));
  /* stack: ... anchor envp */
  for (i = 0; i < n_env; i++) {
    const char *eq = strchr(environ[i], '=');
    if (!eq) continue;
    lua_pushlstring(L, environ[i], (size_t) (eq - environ[i]));
    lua_rawget(L, idx);
    if (lua_isnil(L, -1)) envp[k++] = environ[i];
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -1) == LUA_TBOOLEAN) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -1);   /* a copy for tostring */
    lua_pushfstring(L, "%s=%s", lua_tostring(L, -3), lua_tostring(L, -1));
    envp[k++] = (char *) lua_tostring(L, -1);
    lua_rawseti(L, anchor, k);
    lua_pop(L, 2);
  }
  envp[k] = NULL;
  return envp;
}

/* Checks the command table at index 1 of a call to api: the argument list,
 * env and cwd, and that every other key is one of the options in opts (a
 * NULL-terminated list that includes "env" and "cwd"; the caller reads the
 * rest). usage shows the table's shape and optlist the options, for the
 * messages. Raises on misuse; fills c, whose strings it leaves anchored
 * on the stack above index 1. */
static void check_cmdline(lua_State *L, const char *api, const char *usage,
                          const char *const *opts, const char *optlist,
                          cmdline_t *c) {
  int argc, i, clear;

  memset(c, 0, sizeof(*c));
  if (lua_type(L, 1) != LUA_TTABLE)
    luaL_error(L, "%s: expects a table %s (got %s)", api, usage,
               luaL_typename(L, 1));
  lua_settop(L, 1);
  argc = (int) lua_objlen(L, 1);
  if (argc < 1)
    luaL_error(L, "%s: no command (the table's first element)", api);

  /* Every key must be an argument index or a known option. */
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TNUMBER) {
      lua_Number k = lua_tonumber(L, -1);
      if (k >= 1 && k <= argc && k == floor(k)) continue;
      luaL_error(L, "%s: argument list has a hole or a non-integer index "
                 "(%f)", api, k);
    }
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      const char *const *o;
      for (o = opts; *o && strcmp(*o, k); o++) {}
      if (*o) continue;
      luaL_error(L, "%s: unknown option '%s' (expected %s)", api, k,
                 optlist);
    }
    luaL_error(L, "%s: unexpected %s key", api, luaL_typename(L, -1));
  }

  /* stack: t argv-anchor argv */
  lua_createtable(L, argc, 0);
  c->argv = lua_newuserdata(L, (size_t) (argc + 1) * sizeof(char *));
  for (i = 1; i <= argc; i++) {
    char what[32];
    lua_rawgeti(L, 1, i);
    snprintf(what, sizeof(what), "argument %d", i);
    if (lua_isnil(L, -1)) luaL_error(L, "%s: argument %d is nil", api, i);
    c->argv[i - 1] = (char *) check_str(L, -1, api, what);
    lua_rawseti(L, 2, i);   /* anchors the converted string */
  }
  c->argv[argc] = NULL;
  if (c->argv[0][0] == '\0') luaL_error(L, "%s: empty command", api);

  /* cwd and env stay on the stack, so their strings stay valid */
  lua_getfield(L, 1, "cwd");
  if (!lua_isnil(L, -1)) c->cwd = check_str(L, -1, api, "cwd");

  /* clear_env = true (where opts has it): env is the whole environment */
  lua_getfield(L, 1, "clear_env");
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
    luaL_error(L, "%s: clear_env must be a boolean (got %s)", api, luaL_typename(L, -1));
  clear = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "env");
  if (!lua_isnil(L, -1) || clear) {
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
    } else if (lua_type(L, -1) != LUA_TTABLE) {
      luaL_error(L, "%s: env must be a table (got %s)", api,
                 luaL_typename(L, -1));
    }
    c->envp = build_env(L, lua_gettop(L), api, !clear);
  }
}

/* Pushes the failure of uv_spawn (rc) for c: "cmd: no such file or
 * directory", or "cmd: cwd DIR: ..." when the cwd is what is missing.
 * Returns the count. */
static int push_spawn_fail(lua_State *L, const cmdline_t *c, int rc) {
  char msg[600];
  struct stat st;
  if (c->cwd && (stat(c->cwd, &st) != 0 || !S_ISDIR(st.st_mode)))
    snprintf(msg, sizeof(msg), "%s: cwd %s: %s", c->argv[0], c->cwd,
             uv_strerror(rc));
  else
    snprintf(msg, sizeof(msg), "%s: %s", c->argv[0], uv_strerror(rc));
  return bt_push_fail(L, rc, msg);
}

/* Signals the process group led by pid (a child spawned with
 * UV_PROCESS_DETACHED leads its own session). If the group is gone (the
 * child left it) and proc is not NULL (the child has not been reaped), the
 * child alone gets it. Returns 0 or a negative errno. */
static int signal_group(int pid, uv_process_t *proc, int sig) {
  if (kill(-pid, sig) == 0) return 0;
  if (errno == ESRCH && proc) return uv_process_kill(proc, sig);
  return -errno;
}

/* Pushes {code=, signal=} for an exit: code is 128 + signal when a signal
 * ended the child (as a shell reports it), signal nil otherwise. nfields
 * sizes the table for fields the caller adds. */
static void push_status(lua_State *S, int64_t status, int term_sig,
                        int nfields) {
  lua_createtable(S, 0, nfields);
  if (term_sig) {
    lua_pushinteger(S, 128 + term_sig);
    lua_setfield(S, -2, "code");
    lua_pushinteger(S, term_sig);
    lua_setfield(S, -2, "signal");
  } else {
    lua_pushinteger(S, (lua_Integer) status);
    lua_setfield(S, -2, "code");
  }
}


/* ---- a run's captured output ------------------------------------------- */

/*
 * A worker installs one sink per run (baton._output_capture(cap)). While it
 * is installed, the stdout and stderr of every program baton.exec or
 * baton.spawn starts (unless the call says output = false, or spawn's
 * stdio = "null") are cut into lines by a tap per stream and queued in the
 * sink, which keeps at most cap bytes of text: the oldest lines are dropped
 * and counted. The worker takes the lines with sink:take(), which never
 * waits, and stores them with the rest of the run's output
 * (lua/baton/worker/output.lua). So a program that prints a megabyte a second
 * costs the loop a memchr and a malloc per line, and memory up to cap.
 *
 * A line longer than TAP_LINE_MAX is queued in pieces of that size, each
 * but the last marked cont, all with the number of their tap: the worker
 * joins them again to redact its secrets before it cuts the line for good
 * (a secret is never stored in two halves). A cont piece of a tap is always
 * followed by another piece of the same tap (its end is queued when the
 * stream ends), unless the sink drops it or closes.
 *
 * The sink is counted: one reference for its box, one while it is the
 * installed capture, one per tap; the last one frees it.
 */
typedef struct oline_s {
  struct oline_s *next;
  double t;               /* wall clock, epoch seconds, when it was complete */
  size_t len;             /* of the text */
  double tap;             /* the tap's number */
  int is_err;             /* from stderr */
  int cont;               /* a piece of a longer line: more of it follows */
  char *text;             /* points into data: cmd NUL text NUL */
  char data[];
} oline_t;

typedef struct {
  int refs;
  int closed;             /* no more lines are kept */
  size_t cap, bytes;      /* bytes: text of the queued lines */
  oline_t *head, *tail;
  lua_Number dropped;     /* lines dropped since the last take */
} sink_t;

typedef struct {
  sink_t *sink;           /* NULL: not tapped (or ended) */
  double id;              /* its number, unique in the process */
  int is_err;
  const char *cmd;        /* argv[0]; owned by the exec or spawn state */
  size_t len;
  char part[TAP_LINE_MAX];
} tap_t;

typedef struct {
  sink_t *s;
} sinkbox_t;

static sink_t *capture;   /* the installed sink, or NULL (one per process) */
static double tap_seq;    /* the last tap's number */

static void sink_clear(sink_t *s) {
  oline_t *l = s->head, *n;
  for (; l; l = n) {
    n = l->next;
    free(l);
  }
  s->head = s->tail = NULL;
  s->bytes = 0;
}

static void sink_unref(sink_t *s) {
  if (--s->refs > 0) return;
  sink_clear(s);
  free(s);
}

/* Queues one line of tap t (without its newline), or a piece of one (cont),
 * dropping the oldest lines while the text kept would pass the cap. */
static void sink_push(const tap_t *t, const char *text, size_t len, int cont) {
  sink_t *s = t->sink;
  size_t clen = strlen(t->cmd);
  struct timespec ts;
  oline_t *l;
  if (s->closed) return;
  while (s->head && s->bytes + len > s->cap) {
    oline_t *h = s->head;
    s->head = h->next;
    if (!s->head) s->tail = NULL;
    s->bytes -= h->len;
    s->dropped++;
    free(h);
  }
  l = malloc(sizeof(*l) + clen + len + 2);
  if (!l) {
    s->dropped++;
    return;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  l->t = (double) ts.tv_sec + ts.tv_nsec / 1e9;
  l->next = NULL;
  l->len = len;
  l->tap = t->id;
  l->is_err = t->is_err;
  l->cont = cont;
  memcpy(l->data, t->cmd, clen + 1);
  l->text = l->data + clen + 1;
  memcpy(l->text, text, len);
  l->text[len] = '\0';
  if (s->tail) s->tail->next = l;
  else s->head = l;
  s->tail = l;
  s->bytes += len;
}

/* Taps a stream of a program into the installed sink, if there is one and
 * want is true. */
static void tap_init(tap_t *t, const char *cmd, int is_err, int want) {
  t->sink = want ? capture : NULL;
  t->id = ++tap_seq;
  t->is_err = is_err;
  t->cmd = cmd;
  t->len = 0;
  if (t->sink) t->sink->refs++;
}

/* Cuts n bytes of output into lines for the sink. */
static void tap_feed(tap_t *t, const char *p, size_t n) {
  if (!t->sink) return;
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t) (nl - p) : n;
    if (t->len + take > TAP_LINE_MAX) {
      size_t room = TAP_LINE_MAX - t->len;
      memcpy(t->part + t->len, p, room);
      sink_push(t, t->part, TAP_LINE_MAX, 1);
      t->len = 0;
      p += room;
      n -= room;
      continue;
    }
    memcpy(t->part + t->len, p, take);
    t->len += take;
    if (!nl) return;
    sink_push(t, t->part, t->len, 0);
    t->len = 0;
    p = nl + 1;
    n -= take + 1;
  }
}

/* The stream ended: an unfinished last line is queued, the sink let go. */
static void tap_end(tap_t *t) {
  if (!t->sink) return;
  if (t->len > 0) sink_push(t, t->part, t->len, 0);
  t->len = 0;
  sink_unref(t->sink);
  t->sink = NULL;
}

/* The output option of exec and spawn (at idx): true unless false. */
static int want_output(lua_State *L, int idx, const char *api) {
  if (lua_isnil(L, idx)) return 1;
  if (!lua_isboolean(L, idx))
    return luaL_error(L, "%s: output must be a boolean (got %s)", api,
                      luaL_typename(L, idx));
  return lua_toboolean(L, idx);
}

static sink_t *check_sink(lua_State *L) {
  sinkbox_t *b = luaL_checkudata(L, 1, SINK_MT);
  if (!b->s) luaL_error(L, "baton.output_sink: closed");
  return b->s;
}

/* Lets go of the box's sink: no more lines, and no longer installed. */
static void sinkbox_close(sinkbox_t *b) {
  sink_t *s = b->s;
  if (!s) return;
  b->s = NULL;
  s->closed = 1;
  sink_clear(s);
  if (capture == s) {
    capture = NULL;
    s->refs--;            /* the capture's; the box still holds one */
  }
  sink_unref(s);
}

/* baton._output_capture(cap) -> sink: from now on, until sink:close(), the
 * output of programs started by exec and spawn is queued in it too (worker
 * only; one at a time: a new one replaces the installed one). */
static int l_output_capture(lua_State *L) {
  lua_Number cap = luaL_checknumber(L, 1);
  sinkbox_t *b;
  sink_t *s;
  if (!(cap >= 1) || cap > 1e12)
    return luaL_error(L, "baton._output_capture: cap must be >= 1 byte");
  b = lua_newuserdata(L, sizeof(*b));
  b->s = NULL;
  luaL_getmetatable(L, SINK_MT);
  lua_setmetatable(L, -2);
  s = calloc(1, sizeof(*s));
  if (!s) return bt_push_fail(L, BT_ENOMEM, NULL);
  s->cap = (size_t) cap;
  s->refs = 2;            /* the box, the capture */
  if (capture) sink_unref(capture);
  capture = s;
  b->s = s;
  return 1;
}

/* sink:take() -> {{t=, stream=, cmd=, text=, tap=, cont=}, ...}, dropped;
 * nothing at all when no line came and none was dropped since the last
 * take. tap numbers the stream of a program; cont is true for a piece of a
 * longer line (see above). */
static int l_sink_take(lua_State *L) {
  sink_t *s = check_sink(L);
  oline_t *l, *n;
  int i = 0;
  if (!s->head && s->dropped == 0) return 0;
  lua_newtable(L);
  /* stack: sink list */
  for (l = s->head; l; l = n) {
    n = l->next;
    lua_createtable(L, 0, 6);
    lua_pushnumber(L, l->t);
    lua_setfield(L, -2, "t");
    lua_pushnumber(L, l->tap);
    lua_setfield(L, -2, "tap");
    if (l->cont) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "cont");
    }
    lua_pushstring(L, l->is_err ? "stderr" : "stdout");
    lua_setfield(L, -2, "stream");
    lua_pushstring(L, l->data);
    lua_setfield(L, -2, "cmd");
    lua_pushlstring(L, l->text, l->len);
    lua_setfield(L, -2, "text");
    lua_rawseti(L, -2, ++i);
    free(l);
  }
  s->head = s->tail = NULL;
  s->bytes = 0;
  lua_pushnumber(L, s->dropped);
  s->dropped = 0;
  return 2;
}

static int l_sink_close(lua_State *L) {
  sinkbox_close(luaL_checkudata(L, 1, SINK_MT));
  return 0;
}

static int l_sink_gc(lua_State *L) {
  sinkbox_close(luaL_checkudata(L, 1, SINK_MT));
  return 0;
}

/* ---- baton.exec -------------------------------------------------------- */
typedef struct {
  char *p;
  size_t len, cap;
  int cut;                /* tail mode: older bytes were dropped */
} obuf_t;

typedef struct {
  uv_process_t proc;
  uv_pipe_t out, err, in;
  uv_timer_t timer;
  uv_write_t wreq;
  bt_co_t *co;            /* the waiting coroutine; NULL once resumed/killed */
  obuf_t obuf, ebuf;
  tap_t tout, terr;       /* into the run's output capture, if any */
  int nopen;              /* initialised handles not yet closed */
  int pid;
  int spawned, exited, term_sig;
  int64_t exit_status;
  int out_open, err_open; /* pipes still being read */
  int timedout;           /* SIGTERM sent after the timeout */
  int fail;               /* BT_E* that ends the call (output too large) */
  const char *fail_stream;
  double timeout;         /* seconds, 0 = none */
  size_t tail;            /* keep only the last tail bytes of each stream (0: all) */
  int check;              /* a non-zero exit or a signal is a failure */
  const char *cmd;        /* argv[0], stored after the struct */
  const char *in_data;    /* stdin, stored after the struct */
  size_t in_len;
  int has_in;
} exec_t;

static void on_close(uv_handle_t *h) {
  exec_t *e = h->data;
  if (--e->nopen > 0) return;
  tap_end(&e->tout);
  tap_end(&e->terr);
  free(e->obuf.p);
  free(e->ebuf.p);
  free(e);
}

static void close_handle(void *h) {
  if (!uv_is_closing((uv_handle_t *) h)) uv_close((uv_handle_t *) h, on_close);
}

/* Signals the child's process group (see signal_group). */
static void kill_group(exec_t *e, int sig) {
  if (!e->spawned) return;
  signal_group(e->pid, e->exited ? NULL : &e->proc, sig);
}

/* Stops reading output: the pipes are closed, their EOF no longer awaited. */
static void close_pipes(exec_t *e) {
  if (e->out_open) {
    e->out_open = 0;
    close_handle(&e->out);
  }
  if (e->err_open) {
    e->err_open = 0;
    close_handle(&e->err);
  }
  if (e->has_in) close_handle(&e->in);
}

/* Pushes what b holds of a stream: all of it, or its last tail bytes. */
static void push_stream(lua_State *S, const obuf_t *b, size_t tail) {
  size_t len = b->len;
  const char *p = b->p ? b->p : "";
  if (tail && len > tail) {
    p += len - tail;
    len = tail;
  }
  lua_pushlstring(S, p, len);
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The tail of a program's stderr for an error message, into out (size at
 * least CHECK_TAIL_BYTES + 8): its last CHECK_TAIL_LINES non-empty lines,
 * trailing blanks removed, joined by " | ", at most CHECK_TAIL_BYTES bytes
 * of them. When that limit falls inside a line, the text starts after the
 * first blank past it (so that no word, a secret perhaps, is shown cut in
 * two) and "..." says something was left out. Returns the length (0: the
 * program wrote nothing but blanks). lua/baton/worker/main.lua makes the
 * same tail for a command job, after redacting its secrets. */
static size_t stderr_tail(const char *p, size_t len, char *out) {
  size_t starts[CHECK_TAIL_LINES], ends[CHECK_TAIL_LINES];
  size_t nl = 0, keep = 0, total = 0, i = len, o = 0, k;
  /* the last lines, newest first: [starts[k], ends[k]) */
  while (nl < CHECK_TAIL_LINES) {
    while (i > 0 && is_space(p[i - 1])) i--;
    if (i == 0) break;
    ends[nl] = i;
    while (i > 0 && p[i - 1] != '\n') i--;
    starts[nl] = i;
    while (is_space(p[starts[nl]])) starts[nl]++;
    nl++;
  }
  if (nl == 0) return 0;
  /* the newest of them that fit, with a " | " between two */
  while (keep < nl) {
    size_t add = ends[keep] - starts[keep] + (keep ? 3 : 0);
    if (total + add > CHECK_TAIL_BYTES) break;
    total += add;
    keep++;
  }
  if (keep == 0) {
    /* the last line alone is too long: its end, from a word's start */
    size_t s = ends[0] - (CHECK_TAIL_BYTES - 3);
    for (k = s; k < ends[0] && !is_space(p[k]); k++) {}
    if (k < ends[0]) s = k + 1;
    else while (s < ends[0] && ((unsigned char) p[s] & 0xc0) == 0x80) s++;
    memcpy(out, "...", 3);
    memcpy(out + 3, p + s, ends[0] - s);
    return 3 + ends[0] - s;
  }
  if (keep < nl) {
    memcpy(out, "... | ", 6);
    o = 6;
  }
  for (k = keep; k-- > 0;) {
    memcpy(out + o, p + starts[k], ends[k] - starts[k]);
    o += ends[k] - starts[k];
    if (k > 0) {
      memcpy(out + o, " | ", 3);
      o += 3;
    }
  }
  return o;
}

/* How a program ended, for an error message, into msg (size bytes):
 * "exited with status 3: <stderr's tail>" or "was killed by signal 9
 * (SIGKILL): ...", without the tail when err holds nothing but blanks. */
static void exit_text(char *msg, size_t size, int64_t status, int term_sig,
                      const char *err, size_t errlen) {
  char tail[CHECK_TAIL_BYTES + 8];
  size_t tlen = stderr_tail(err, errlen, tail);
  const char *name = term_sig ? bt__signal_name(term_sig) : NULL;
  int n;
  if (term_sig)
    n = snprintf(msg, size, "was killed by signal %d%s%s%s", term_sig, name ? " (" : "",
                 name ? name : "", name ? ")" : "");
  else
    n = snprintf(msg, size, "exited with status %d", (int) status);
  if (n < 0 || (size_t) n + 2 + tlen >= size) return;
  memcpy(msg + n, ": ", 2);
  memcpy(msg + n + 2, tail, tlen);
  msg[n + 2 + tlen] = '\0';
  if (tlen == 0) msg[n] = '\0';
}

/* Pushes check's failure for a program that exited with a non-zero status
 * or was killed: nil, "ECHILD: cmd exited with status 3: <stderr's tail>",
 * "ECHILD". */
static int push_check_fail(lua_State *S, const exec_t *e) {
  char text[CHECK_TAIL_BYTES + 100];
  const char *err = e->ebuf.p ? e->ebuf.p : "";
  size_t len = e->ebuf.len;
  int n;
  if (e->tail && len > e->tail) {
    /* (what r.stderr would have been) */
    err += len - e->tail;
    len = e->tail;
  }
  exit_text(text, sizeof(text), e->exit_status, e->term_sig, err, len);
  lua_pushfstring(S, "%s %s", e->cmd, text);
  /* stack: text nil msg code */
  n = bt_push_fail(S, BT_ECHILD, lua_tostring(S, -1));
  lua_remove(S, -n - 1);
  return n;
}

/* baton._exit_text(code, signal, stderr) -> "exited with status 3: ..."
 * (what check's error says after the program's name) or nil for code 0
 * and no signal: for a command job (lua/baton/worker/main.lua), which
 * redacts stderr's secrets before it is cut. */
static int l_exit_text(lua_State *L) {
  char text[CHECK_TAIL_BYTES + 100];
  lua_Number code = luaL_checknumber(L, 1);
  int sig = (int) luaL_optnumber(L, 2, 0);
  size_t len = 0;
  const char *err = luaL_optlstring(L, 3, "", &len);
  if (code == 0 && sig == 0) return 0;
  exit_text(text, sizeof(text), (int64_t) code, sig, err, len);
  lua_pushstring(L, text);
  return 1;
}

/* Pushes the result (or failure) onto the coroutine's stack and resumes it;
 * then closes what is left. The process handle is closed in on_exit. */
static void finish(exec_t *e) {
  bt_co_t *co = e->co;
  lua_State *S = bt_co_stack(co);
  int n;
  char msg[512];

  e->co = NULL;
  if (e->timedout || e->fail) {
    /* The leader has exited; take any stragglers of its group with it. */
    kill_group(e, SIGKILL);
    if (e->timedout)
      snprintf(msg, sizeof(msg), "%s timed out after %g s", e->cmd, e->timeout);
    else if (e->fail == BT_ETOOLARGE)
      snprintf(msg, sizeof(msg), "%s: %s exceeds %zu MiB", e->cmd,
               e->fail_stream, EXEC_MAX_OUTPUT >> 20);
    else
      snprintf(msg, sizeof(msg), "%s: reading %s: %s", e->cmd, e->fail_stream,
               uv_strerror(e->fail));
    n = bt_push_fail(S, e->timedout ? BT_ETIMEDOUT : e->fail, msg);
  } else if (e->check && (e->term_sig || e->exit_status != 0)) {
    n = push_check_fail(S, e);
  } else {
    /* stack: result */
    push_status(S, e->exit_status, e->term_sig, 4);
    push_stream(S, &e->obuf, e->tail);
    lua_setfield(S, -2, "stdout");
    push_stream(S, &e->ebuf, e->tail);
    lua_setfield(S, -2, "stderr");
    n = 1;
  }
  /* Lua has its own copies now. */
  free(e->obuf.p);
  free(e->ebuf.p);
  memset(&e->obuf, 0, sizeof(e->obuf));
  memset(&e->ebuf, 0, sizeof(e->ebuf));
  close_pipes(e);
  close_handle(&e->timer);
  bt_co_resume(co, n);
}

/* Finishes the call once everything it waits for has happened: the exit,
 * and the EOF of both pipes (unless the call already failed). */
static void check_done(exec_t *e) {
  if (!e->co || !e->exited) return;
  if (!e->timedout && !e->fail && (e->out_open || e->err_open)) return;
  finish(e);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  exec_t *e = p->data;
  e->exited = 1;
  e->exit_status = status;
  e->term_sig = sig;
  close_handle(&e->proc);
  if (!e->co) {
    /* Killed coroutine: the child is reaped, nothing else to wait for. */
    close_pipes(e);
    return;
  }
  check_done(e);
}

/* Ends the call with err (the output is dropped): kills the group at once
 * and stops reading. */
static void fail(exec_t *e, int err, const char *stream) {
  if (e->fail || e->timedout) return;
  e->fail = err;
  e->fail_stream = stream;
  kill_group(e, SIGKILL);
  close_pipes(e);
  check_done(e);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  exec_t *e = h->data;
  obuf_t *b = h == (uv_handle_t *) &e->out ? &e->obuf : &e->ebuf;
  (void) suggested;
  if (b->cap - b->len < EXEC_READ_CHUNK) {
    /* double, but never past the cap plus one chunk (to see it exceeded) */
    size_t cap = b->cap ? b->cap * 2 : EXEC_READ_CHUNK;
    char *np;
    if (cap > EXEC_MAX_OUTPUT + EXEC_READ_CHUNK)
      cap = EXEC_MAX_OUTPUT + EXEC_READ_CHUNK;
    if (cap < b->len + EXEC_READ_CHUNK) cap = b->len + EXEC_READ_CHUNK;
    np = realloc(b->p, cap);
    if (!np) {
      *buf = uv_buf_init(NULL, 0);   /* read_cb gets UV_ENOBUFS */
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  *buf = uv_buf_init(b->p + b->len, (unsigned) (b->cap - b->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  exec_t *e = s->data;
  int is_out = s == (uv_stream_t *) &e->out;
  obuf_t *b = is_out ? &e->obuf : &e->ebuf;
  const char *name = is_out ? "stdout" : "stderr";
  (void) buf;

  if (nread > 0) {
    b->len += (size_t) nread;
    tap_feed(is_out ? &e->tout : &e->terr, b->p + b->len - nread, (size_t) nread);
    if (e->tail && b->len >= 2 * e->tail) {
      /* tail mode: the last tail bytes move to the front (at most every
       * tail bytes read, so the copying stays linear) */
      memmove(b->p, b->p + b->len - e->tail, e->tail);
      b->len = e->tail;
      b->cut = 1;
    } else if (!e->tail && b->len > EXEC_MAX_OUTPUT) {
      fail(e, BT_ETOOLARGE, name);
    }
    return;
  }
  if (nread == 0) return;
  if (nread == UV_ENOBUFS) {
    fail(e, BT_ENOMEM, name);
    return;
  }
  /* EOF, or a read error that ends the stream the same way. */
  tap_end(is_out ? &e->tout : &e->terr);
  if (is_out && e->out_open) {
    e->out_open = 0;
    close_handle(&e->out);
  } else if (!is_out && e->err_open) {
    e->err_open = 0;
    close_handle(&e->err);
  }
  check_done(e);
}

static void on_written(uv_write_t *w, int status) {
  exec_t *e = w->data;
  (void) status;    /* EPIPE: the child did not read it all; not an error */
  close_handle(&e->in);
}

/* First the timeout: SIGTERM to the group and a grace period; when the
 * grace has passed too: SIGKILL, and stop waiting for the pipes. */
static void on_timer(uv_timer_t *t) {
  exec_t *e = t->data;
  if (e->fail) return;    /* already killed; the exit is on its way */
  if (!e->timedout) {
    e->timedout = 1;
    kill_group(e, SIGTERM);
    if (e->exited) {
      check_done(e);
      return;
    }
    uv_timer_start(&e->timer, on_timer, KILL_GRACE_MS, 0);
    return;
  }
  kill_group(e, SIGKILL);
  close_pipes(e);
}

/* The coroutine was killed: kill the child at once and close everything;
 * the process handle stays open until the exit (so the child is reaped). */
static void exec_cancel(void *data) {
  exec_t *e = data;
  e->co = NULL;
  if (!e->exited || e->out_open || e->err_open) kill_group(e, SIGKILL);
  close_pipes(e);
  close_handle(&e->timer);
}

/* baton.exec{cmd, args..., timeout=, env=, cwd=, stdin=, output=, check=,
 * tail=}. check = true: a non-zero exit or a signal returns nil, "ECHILD:
 * ...", "ECHILD" (with the tail of stderr) instead of the result. tail = n:
 * r.stdout and r.stderr are the last n bytes of each stream, and more
 * output than EXEC_MAX_OUTPUT is no error. */
static int l_exec(lua_State *L) {
  static const char *const opts[] = {"timeout", "env", "cwd", "stdin", "output", "check", "tail",
                                     NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  const char *in_data = NULL, *cmd;
  size_t in_len = 0, cmd_len;
  double timeout = 0, tail = 0;
  cmdline_t c;
  int rc, output, check = 0;
  bt_co_t *co;
  exec_t *e;
  uv_loop_t *loop;

  check_cmdline(L, "baton.exec", "{cmd, args..., timeout=, env=, cwd=, "
                "stdin=, output=, check=, tail=}", opts,
                "timeout, env, cwd, stdin, output, check or tail", &c);
  cmd = c.argv[0];
  cmd_len = strlen(cmd);
  lua_getfield(L, 1, "output");
  output = want_output(L, -1, "baton.exec");
  lua_pop(L, 1);
  lua_getfield(L, 1, "check");
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
    return luaL_error(L, "baton.exec: check must be a boolean (got %s)", luaL_typename(L, -1));
  check = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "tail");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      return luaL_error(L, "baton.exec: tail must be a number of bytes (got %s)",
                        luaL_typename(L, -1));
    tail = lua_tonumber(L, -1);
    if (!(tail >= 1) || tail > (double) EXEC_MAX_OUTPUT || tail != floor(tail))
      return luaL_error(L, "baton.exec: tail must be a whole number of bytes from 1 to %d",
                        (int) EXEC_MAX_OUTPUT);
  }
  lua_pop(L, 1);

  lua_getfield(L, 1, "timeout");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      return luaL_error(L, "baton.exec: timeout must be a number of seconds "
                        "(got %s)", luaL_typename(L, -1));
    timeout = lua_tonumber(L, -1);
    if (!(timeout > 0) || timeout > 1e9)
      return luaL_error(L, "baton.exec: timeout must be > 0 seconds");
  }
  lua_pop(L, 1);

  /* stdin stays on the stack, so its string stays valid */
  lua_getfield(L, 1, "stdin");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "baton.exec: stdin must be a string (got %s)",
                        luaL_typename(L, -1));
    in_data = lua_tolstring(L, -1, &in_len);
  }

  co = bt_co_current(L, "baton.exec");
  loop = bt_lua_loop(L);

  /* C memory last: the state, then argv[0] and stdin copied after it. */
  e = calloc(1, sizeof(*e) + cmd_len + 1 + in_len);
  if (!e) return bt_push_fail(L, BT_ENOMEM, NULL);
  memcpy((char *) (e + 1), cmd, cmd_len + 1);
  e->cmd = (const char *) (e + 1);
  if (in_data) {
    memcpy((char *) (e + 1) + cmd_len + 1, in_data, in_len);
    e->in_data = (const char *) (e + 1) + cmd_len + 1;
    e->in_len = in_len;
    e->has_in = 1;
  }
  e->timeout = timeout;
  e->tail = (size_t) tail;
  e->check = check;
  tap_init(&e->tout, e->cmd, 0, output);
  tap_init(&e->terr, e->cmd, 1, output);

  uv_timer_init(loop, &e->timer);
  uv_pipe_init(loop, &e->out, 0);
  uv_pipe_init(loop, &e->err, 0);
  e->timer.data = e->out.data = e->err.data = e->proc.data = e;
  e->nopen = 4;
  if (e->has_in) {
    uv_pipe_init(loop, &e->in, 0);
    e->in.data = e->wreq.data = e;
    e->nopen++;
  }

  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  if (e->has_in) {
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *) &e->in;
  } else {
    stdio[0].flags = UV_IGNORE;    /* /dev/null */
  }
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *) &e->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *) &e->err;
  po.file = cmd;
  po.args = c.argv;
  po.env = c.envp;
  po.cwd = c.cwd;
  po.flags = UV_PROCESS_DETACHED;
  po.stdio_count = 3;
  po.stdio = stdio;
  po.exit_cb = on_exit_cb;

  rc = uv_spawn(loop, &e->proc, &po);
  if (rc) {
    /* uv_spawn initialised the process handle even though it failed. */
    close_handle(&e->proc);
    close_handle(&e->out);
    close_handle(&e->err);
    close_handle(&e->timer);
    if (e->has_in) close_handle(&e->in);
    return push_spawn_fail(L, &c, rc);
  }
  e->spawned = 1;
  e->pid = e->proc.pid;
  e->co = co;
  e->out_open = e->err_open = 1;
  uv_read_start((uv_stream_t *) &e->out, on_alloc, on_read);
  uv_read_start((uv_stream_t *) &e->err, on_alloc, on_read);
  if (e->has_in) {
    uv_buf_t b = uv_buf_init((char *) e->in_data, (unsigned) e->in_len);
    if (e->in_len == 0 ||
        uv_write(&e->wreq, (uv_stream_t *) &e->in, &b, 1, on_written) != 0)
      close_handle(&e->in);
  }
  if (timeout > 0) {
    bt_timer_start_secs(L, &e->timer, on_timer, timeout);
  }
  return bt_co_wait(L, co, exec_cancel, e);
}

/* ---- baton.spawn ------------------------------------------------------- */

/*
 * A spawned child is a proc_t (C memory) boxed in a "baton.process"
 * userdata. The proc_t is counted: one reference for the process handle
 * until its close callback, one for the box until its __gc, and one for
 * each coroutine waiting in p:wait(); the last one frees it. So the exit
 * status outlives the handle, and a box collected while someone still
 * waits (or while the child runs) is harmless.
 *
 * While the child runs, a closer is registered: at the runtime's shutdown
 * it sends SIGKILL to the child's group and leaves the handle open until
 * the exit, so the child is reaped. A killed waiting coroutine only stops
 * waiting; the child keeps running. __gc never kills the child either.
 */
typedef struct proc_s proc_t;

/* One coroutine in p:wait(); freed after its timer's close, if it has
 * one. p is only used while linked. */
typedef struct pwait_s {
  struct pwait_s *prev, *next;
  proc_t *p;
  bt_co_t *co;
  uv_timer_t timer;
  int timed;              /* timer initialised */
  double timeout;
} pwait_t;

struct proc_s {
  uv_process_t proc;
  bt_rt_t *rt;
  bt_closer_t closer;     /* registered while has_closer */
  pwait_t *waiters;
  int refs;               /* handle + box + waiters */
  int pid;
  int exited, term_sig;
  int64_t exit_status;
  int has_closer;
  int stop_signal;        /* what the closer sends; SIGKILL by default */
  int piped;              /* stdout and stderr are pipes into the capture */
  uv_pipe_t out, err;     /* (then) read until their EOF */
  tap_t tout, terr;
  char cmd[];             /* argv[0], for messages */
};

typedef struct {
  proc_t *p;              /* NULL only if spawning failed */
} pbox_t;

/* Children started by baton.spawn that have not exited yet (one runtime
 * per process). */
static int live_children;

static void proc_unref(proc_t *p) {
  if (--p->refs == 0) free(p);
}

static void on_proc_close(uv_handle_t *h) {
  proc_unref(h->data);
}

/* A captured output pipe of a spawned program is closed: its tap ends. */
static void on_spawn_pipe_close(uv_handle_t *h) {
  proc_t *p = h->data;
  tap_end(h == (uv_handle_t *) &p->out ? &p->tout : &p->terr);
  proc_unref(p);
}

static void spawn_pipe_close(uv_pipe_t *pipe) {
  if (!uv_is_closing((uv_handle_t *) pipe))
    uv_close((uv_handle_t *) pipe, on_spawn_pipe_close);
}

/* Reads go to the tap at once, so one buffer serves every pipe. */
static char spawn_rbuf[EXEC_READ_CHUNK];

static void on_spawn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void) h;
  (void) suggested;
  *buf = uv_buf_init(spawn_rbuf, sizeof(spawn_rbuf));
}

static void on_spawn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  proc_t *p = st->data;
  int is_out = st == (uv_stream_t *) &p->out;
  if (nread > 0) {
    tap_feed(is_out ? &p->tout : &p->terr, buf->base, (size_t) nread);
    return;
  }
  if (nread == 0) return;
  spawn_pipe_close(is_out ? &p->out : &p->err);
}

static void on_pwait_close(uv_handle_t *h) {
  free(h->data);
}

/* Takes w off its process's list (dropping its reference) and frees it,
 * after closing its timer. */
static void pwait_end(pwait_t *w) {
  proc_t *p = w->p;
  if (w->prev) w->prev->next = w->next;
  else p->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  w->p = NULL;
  proc_unref(p);
  if (w->timed) uv_close((uv_handle_t *) &w->timer, on_pwait_close);
  else free(w);
}

/* The child exited: record how, stop guarding it at shutdown, close the
 * handle and resume every waiter with its own result table. */
static void on_proc_exit(uv_process_t *h, int64_t status, int sig) {
  proc_t *p = h->data;
  p->exited = 1;
  live_children--;
  p->exit_status = status;
  p->term_sig = sig;
  if (p->has_closer) {
    p->has_closer = 0;
    bt_rt_del_closer(p->rt, &p->closer);
  }
  /* The handle's reference keeps p alive through the loop below. */
  uv_close((uv_handle_t *) h, on_proc_close);
  while (p->waiters) {
    pwait_t *w = p->waiters;
    bt_co_t *co = w->co;
    push_status(bt_co_stack(co), status, sig, 2);
    pwait_end(w);
    bt_co_resume(co, 1);
  }
}

static void on_pwait_timeout(uv_timer_t *t) {
  pwait_t *w = t->data;
  bt_co_t *co = w->co;
  char msg[300];
  snprintf(msg, sizeof(msg), "%s (pid %d) still running after %g s",
           w->p->cmd, w->p->pid, w->timeout);
  bt_push_fail(bt_co_stack(co), BT_ETIMEDOUT, msg);
  pwait_end(w);
  bt_co_resume(co, 3);
}

/* The waiting coroutine was killed: stop waiting; the child runs on. */
static void pwait_cancel(void *data) {
  pwait_end(data);
}

/* Shutdown: the child must not outlive the runtime. The handle closes when
 * the exit comes (on_proc_exit), so the child is reaped. */
static void proc_closer(bt_closer_t *self) {
  proc_t *p = (proc_t *) ((char *) self - offsetof(proc_t, closer));
  p->has_closer = 0;
  if (!p->exited) signal_group(p->pid, &p->proc, p->stop_signal);
  if (p->piped) {
    spawn_pipe_close(&p->out);
    spawn_pipe_close(&p->err);
  }
}

static proc_t *check_proc(lua_State *L) {
  pbox_t *b = luaL_checkudata(L, 1, PROC_MT);
  if (!b->p) luaL_error(L, "baton.process: not a process");
  return b->p;
}

/* An optional uid= or gid= of baton.spawn's table at idx: a whole number
 * from 0 to 2^32 - 2, or -1 when absent. */
static double spawn_id(lua_State *L, int idx, const char *name) {
  double v;
  lua_getfield(L, idx, name);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return -1;
  }
  if (lua_type(L, -1) != LUA_TNUMBER)
    return luaL_error(L, "baton.spawn: %s must be a number (got %s)", name, luaL_typename(L, -1));
  v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (v != (double) (int64_t) v || v < 0 || v > 4294967294.0)
    return luaL_error(L, "baton.spawn: %s must be a whole number from 0 to 4294967294", name);
  return v;
}

/* baton.spawn{cmd, args..., env=, cwd=, stdio="inherit"|"null",
 * channel=true, output=, argv0=, clear_env=true, uid=, gid=}. clear_env:
 * the child inherits no variable, env is all it gets. With an output
 * capture installed (a worker's run) and output not false, an inherited
 * stdout and stderr are pipes into it instead. uid and gid (a process
 * started as root): the child runs as that user and group, with no
 * supplementary groups. */
static int l_spawn(lua_State *L) {
  static const char *const opts[] = {"env", "cwd", "stdio", "channel", "stop_signal", "output",
                                     "argv0", "clear_env", "uid", "gid", NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[4];
  cmdline_t c;
  int null_stdio = 0, channel = 0, stop_signal = SIGKILL, rc, i, output;
  uv_stream_t *chan = NULL;
  size_t cmd_len;
  pbox_t *b;
  proc_t *p;
  const char *argv0 = NULL;
  double uid, gid;

  check_cmdline(L, "baton.spawn", "{cmd, args..., env=, cwd=, stdio=, channel=, stop_signal=, "
                "output=, argv0=, clear_env=, uid=, gid=}", opts,
                "env, cwd, stdio, channel, stop_signal, output, argv0, clear_env, uid or gid", &c);
  uid = spawn_id(L, 1, "uid");
  gid = spawn_id(L, 1, "gid");
  /* (left on the stack: it anchors the string) */
  lua_getfield(L, 1, "argv0");
  if (lua_type(L, -1) == LUA_TSTRING)
    argv0 = lua_tostring(L, -1);
  else if (!lua_isnil(L, -1))
    return luaL_error(L, "baton.spawn: argv0 must be a string (got %s)", luaL_typename(L, -1));
  lua_getfield(L, 1, "output");
  output = want_output(L, -1, "baton.spawn");
  lua_pop(L, 1);
  lua_getfield(L, 1, "stop_signal");
  if (lua_type(L, -1) == LUA_TSTRING) {
    stop_signal = bt__signal_number(lua_tostring(L, -1));
    if (!stop_signal)
      return luaL_error(L, "baton.spawn: unknown stop_signal '%s'", lua_tostring(L, -1));
  } else if (!lua_isnil(L, -1)) {
    return luaL_error(L, "baton.spawn: stop_signal must be a signal name such as "
                      "\"SIGTERM\" (got %s)", luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "channel");
  if (lua_isboolean(L, -1))
    channel = lua_toboolean(L, -1);
  else if (!lua_isnil(L, -1))
    return luaL_error(L, "baton.spawn: channel must be a boolean (got %s)",
                      luaL_typename(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 1, "stdio");
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tostring(L, -1);
    if (!strcmp(s, "null"))
      null_stdio = 1;
    else if (strcmp(s, "inherit"))
      return luaL_error(L, "baton.spawn: stdio must be \"inherit\" or "
                        "\"null\" (got \"%s\")", s);
  } else if (!lua_isnil(L, -1)) {
    return luaL_error(L, "baton.spawn: stdio must be \"inherit\" or "
                      "\"null\" (got %s)", luaL_typename(L, -1));
  }
  lua_pop(L, 1);

  /* stack: ... box (the result) */
  b = lua_newuserdata(L, sizeof(*b));
  b->p = NULL;
  luaL_getmetatable(L, PROC_MT);
  lua_setmetatable(L, -2);
  /* The box's environment holds its channel: p.channel. */
  lua_newtable(L);
  if (channel) {
    chan = bt__chan_new(L);
    if (!chan) return bt_push_fail(L, BT_ENOMEM, NULL);
    lua_setfield(L, -2, "channel");
  }
  lua_setfenv(L, -2);

  /* C memory last */
  cmd_len = strlen(c.argv[0]);
  p = calloc(1, sizeof(*p) + cmd_len + 1);
  if (!p) return bt_push_fail(L, BT_ENOMEM, NULL);
  memcpy(p->cmd, c.argv[0], cmd_len + 1);
  p->rt = bt_rt_from(L);
  p->proc.data = p;

  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  for (i = 0; i < 3; i++) {
    stdio[i].flags = null_stdio ? UV_IGNORE : UV_INHERIT_FD;
    stdio[i].data.fd = i;
  }
  if (!null_stdio && output && capture) {
    p->piped = 1;
    uv_pipe_init(bt_lua_loop(L), &p->out, 0);
    uv_pipe_init(bt_lua_loop(L), &p->err, 0);
    p->out.data = p->err.data = p;
    stdio[1].flags = stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *) &p->out;
    stdio[2].data.stream = (uv_stream_t *) &p->err;
    tap_init(&p->tout, p->cmd, 0, 1);
    tap_init(&p->terr, p->cmd, 1, 1);
  }
  po.file = c.argv[0];
  po.args = c.argv;
  /* argv0: the program's name for itself (what ps shows); cmd is still what
   * runs, and what errors name (restored below) */
  if (argv0) c.argv[0] = (char *) argv0;
  po.env = c.envp;
  po.cwd = c.cwd;
  po.flags = UV_PROCESS_DETACHED;
  if (uid >= 0) {
    po.flags |= UV_PROCESS_SETUID;
    po.uid = (uv_uid_t) uid;
  }
  if (gid >= 0) {
    po.flags |= UV_PROCESS_SETGID;
    po.gid = (uv_gid_t) gid;
  }
  po.stdio_count = 3;
  if (chan) {
    stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = chan;
    po.stdio_count = 4;
  }
  po.stdio = stdio;
  po.exit_cb = on_proc_exit;

  /* What Lua printed so far comes out before what the child prints. */
  fflush(stdout);
  fflush(stderr);
  rc = uv_spawn(bt_lua_loop(L), &p->proc, &po);
  c.argv[0] = (char *) po.file;
  if (chan) {
    lua_getfenv(L, -1);
    lua_getfield(L, -1, "channel");
    bt__chan_started(L, -1, rc == 0);
    lua_pop(L, 2);
  }
  if (rc) {
    /* uv_spawn initialised the handle even though it failed. */
    p->refs = p->piped ? 3 : 1;
    uv_close((uv_handle_t *) &p->proc, on_proc_close);
    if (p->piped) {
      spawn_pipe_close(&p->out);
      spawn_pipe_close(&p->err);
    }
    return push_spawn_fail(L, &c, rc);
  }
  p->refs = p->piped ? 4 : 2;   /* + the pipes */
  if (p->piped) {
    uv_read_start((uv_stream_t *) &p->out, on_spawn_alloc, on_spawn_read);
    uv_read_start((uv_stream_t *) &p->err, on_spawn_alloc, on_spawn_read);
  }
  p->pid = p->proc.pid;
  live_children++;
  p->closer.close = proc_closer;
  p->has_closer = 1;
  p->stop_signal = stop_signal;
  bt_rt_add_closer(p->rt, &p->closer);
  b->p = p;
  return 1;
}

/* p:wait([timeout]) -> {code=, signal=} | nil, "ETIMEDOUT: ...", code */
static int l_proc_wait(lua_State *L) {
  proc_t *p = check_proc(L);
  double timeout = -1;
  bt_co_t *co;
  pwait_t *w;

  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TNUMBER)
      return luaL_error(L, "baton.process:wait: timeout must be a number of "
                        "seconds (got %s)", luaL_typename(L, 2));
    timeout = lua_tonumber(L, 2);
    if (!(timeout >= 0) || timeout > 1e9)
      return luaL_error(L, "baton.process:wait: timeout must be >= 0 "
                        "seconds");
  }
  co = bt_co_current(L, "baton.process:wait");
  if (p->exited) {
    push_status(L, p->exit_status, p->term_sig, 2);
    return 1;
  }
  if (timeout == 0) {
    char msg[300];
    snprintf(msg, sizeof(msg), "%s (pid %d) still running after 0 s",
             p->cmd, p->pid);
    return bt_push_fail(L, BT_ETIMEDOUT, msg);
  }
  w = calloc(1, sizeof(*w));
  if (!w) return bt_push_fail(L, BT_ENOMEM, NULL);
  w->p = p;
  w->co = co;
  w->timeout = timeout;
  w->next = p->waiters;
  if (p->waiters) p->waiters->prev = w;
  p->waiters = w;
  p->refs++;
  if (timeout > 0) {
    uv_loop_t *loop = bt_lua_loop(L);
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->timed = 1;
    bt_timer_start_secs(L, &w->timer, on_pwait_timeout, timeout);
  }
  return bt_co_wait(L, co, pwait_cancel, w);
}

/* p:kill([sig]) -> true | nil, "ESRCH: ...", "ESRCH". sig is a name
 * ("SIGTERM", the default) or a number. */
static int l_proc_kill(lua_State *L) {
  proc_t *p = check_proc(L);
  int sig = SIGTERM, rc;
  char msg[300];

  if (lua_type(L, 2) == LUA_TSTRING) {
    sig = bt__signal_number(lua_tostring(L, 2));
    if (!sig)
      return luaL_error(L, "baton.process:kill: unknown signal '%s'",
                        lua_tostring(L, 2));
  } else if (lua_type(L, 2) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, 2);
    if (n != floor(n) || n < 1 || n >= NSIG)
      return luaL_error(L, "baton.process:kill: signal number must be an "
                        "integer from 1 to %d", NSIG - 1);
    sig = (int) n;
  } else if (!lua_isnoneornil(L, 2)) {
    return luaL_error(L, "baton.process:kill: signal must be a name such as "
                      "\"SIGTERM\" or a number (got %s)",
                      luaL_typename(L, 2));
  }
  rc = signal_group(p->pid, p->exited ? NULL : &p->proc, sig);
  if (rc == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (rc == UV_ESRCH)
    snprintf(msg, sizeof(msg), "%s (pid %d) has exited", p->cmd, p->pid);
  else
    snprintf(msg, sizeof(msg), "%s (pid %d): %s", p->cmd, p->pid,
             uv_strerror(rc));
  return bt_push_fail(L, rc, msg);
}

/* p:done() -> true once the child has exited (and been reaped) */
static int l_proc_done(lua_State *L) {
  lua_pushboolean(L, check_proc(L)->exited);
  return 1;
}

/* p.pid, and the methods */
static int l_proc_index(lua_State *L) {
  proc_t *p = check_proc(L);
  if (lua_type(L, 2) == LUA_TSTRING && !strcmp(lua_tostring(L, 2), "pid")) {
    lua_pushinteger(L, p->pid);
    return 1;
  }
  if (lua_type(L, 2) == LUA_TSTRING && !strcmp(lua_tostring(L, 2), "channel")) {
    lua_getfenv(L, 1);
    lua_getfield(L, -1, "channel");
    return 1;
  }
  lua_getmetatable(L, 1);
  lua_getfield(L, -1, "methods");
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  /* stack: p k mt methods v */
  return 1;
}

static int l_proc_tostring(lua_State *L) {
  proc_t *p = check_proc(L);
  if (!p->exited)
    lua_pushfstring(L, "baton.process: %s (pid %d, running)", p->cmd,
                    p->pid);
  else if (p->term_sig)
    lua_pushfstring(L, "baton.process: %s (pid %d, killed by signal %d)",
                    p->cmd, p->pid, p->term_sig);
  else
    lua_pushfstring(L, "baton.process: %s (pid %d, exited with code %d)",
                    p->cmd, p->pid, (int) p->exit_status);
  return 1;
}

/* Drops the box's reference; the child, if still running, is left alone
 * (the closer still guards it). */
static int l_proc_gc(lua_State *L) {
  pbox_t *b = luaL_checkudata(L, 1, PROC_MT);
  if (b->p) proc_unref(b->p);
  b->p = NULL;
  return 0;
}

/* baton._children(): children of baton.spawn still running. */
static int l_children(lua_State *L) {
  lua_pushinteger(L, live_children);
  return 1;
}

/* ---- the end of a worker's run ---------------------------------------- */

/* A sweep request to the worker's containment process (contain.h): the
 * answer signal or the timer ends it, whichever comes first; both handles
 * are closed and the box freed by the second close callback. */
typedef struct {
  uv_signal_t sig;
  uv_timer_t timer;
  bt_co_t *co;
  int open;
} sweep_t;

static void on_sweep_close(uv_handle_t *h) {
  sweep_t *s = h->data;
  if (--s->open == 0) free(s);
}

static void sweep_close(sweep_t *s) {
  uv_signal_stop(&s->sig);
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *) &s->sig, on_sweep_close);
  uv_close((uv_handle_t *) &s->timer, on_sweep_close);
}

static void sweep_end(sweep_t *s, int ok) {
  bt_co_t *co = s->co;
  lua_State *S = bt_co_stack(co);
  sweep_close(s);
  if (ok) {
    lua_pushboolean(S, 1);
    bt_co_resume(co, 1);
  } else {
    bt_co_resume(co, bt_push_fail(S, BT_ETIMEDOUT, "the run's processes did not end"));
  }
}

static void on_swept(uv_signal_t *h, int signum) {
  sweep_end(h->data, 1);
}

static void on_sweep_timeout(uv_timer_t *t) {
  sweep_end(t->data, 0);
}

static void sweep_cancel(void *data) {
  sweep_close(data);
}

/* baton._sweep(timeout) -> true | nil, err, code (worker only): asks the
 * containment process to end every process of the run but the worker, and
 * waits until it says they are gone. false when the worker runs without
 * containment. */
static int l_sweep(lua_State *L) {
  double secs = luaL_checknumber(L, 1);
  bt_co_t *co;
  sweep_t *s;
  if (!getenv("BATON_CONTAINED")) {
    lua_pushboolean(L, 0);
    return 1;
  }
  co = bt_co_current(L, "baton._sweep");
  s = calloc(1, sizeof(*s));
  if (!s) return bt_push_fail(L, BT_ENOMEM, NULL);
  s->co = co;
  s->open = 2;
  uv_signal_init(bt_lua_loop(L), &s->sig);
  uv_timer_init(bt_lua_loop(L), &s->timer);
  s->sig.data = s->timer.data = s;
  uv_signal_start_oneshot(&s->sig, on_swept, BT_CONTAIN_SWEPT);
  bt_timer_start_secs(L, &s->timer, on_sweep_timeout, secs);
  kill(getppid(), BT_CONTAIN_SWEEP);
  return bt_co_wait(L, co, sweep_cancel, s);
}

/* baton._fenced() -> bool: the fence board this process can read (a
 * worker reads its node's, fence.h) says the node's lease may be gone. */
static int l_fenced(lua_State *L) {
  uint64_t until = bt_fence_until();
  lua_pushboolean(L, until != BT_FENCE_NONE && bt_fence_now_ms() >= until);
  return 1;
}

/* baton._cgroup_prepare() -> dir | nil, err, code (the node, once, before
 * it starts a worker): readies this process's cgroup for its workers'
 * memory limits (cgroup.h); dir is where their cgroups go. */
static int l_cgroup_prepare(lua_State *L) {
  char dir[4096], why[600];
  int e;
  why[0] = '\0';
  e = bt_cgroup_prepare_self(dir, sizeof(dir), why, sizeof(why));
  if (e) return bt_push_fail(L, e, why[0] ? why : NULL);
  lua_pushstring(L, dir);
  return 1;
}

int bt_lua_open_exec(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"wait", l_proc_wait}, {"kill", l_proc_kill}, {"done", l_proc_done},
    {NULL, NULL}
  };
  /* A child that exits before reading its stdin must not kill us with
   * SIGPIPE; uv_spawn resets signal dispositions in the child. */
  signal(SIGPIPE, SIG_IGN);
  /* stack: baton */
  if (luaL_newmetatable(L, PROC_MT)) {
    /* stack: baton mt */
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "methods");
    lua_pushcfunction(L, l_proc_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_proc_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, l_proc_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, PROC_MT);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SINK_MT)) {
    static const luaL_Reg sink_methods[] = {
      {"take", l_sink_take}, {"close", l_sink_close}, {NULL, NULL}
    };
    /* stack: baton mt */
    lua_newtable(L);
    luaL_register(L, NULL, sink_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_sink_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_output_capture);
  lua_setfield(L, -2, "_output_capture");
  lua_pushcfunction(L, l_exec);
  lua_setfield(L, -2, "exec");
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, -2, "spawn");
  lua_pushcfunction(L, l_children);
  lua_setfield(L, -2, "_children");
  lua_pushcfunction(L, l_exit_text);
  lua_setfield(L, -2, "_exit_text");
  lua_pushcfunction(L, l_sweep);
  lua_setfield(L, -2, "_sweep");
  lua_pushcfunction(L, l_fenced);
  lua_setfield(L, -2, "_fenced");
  lua_pushcfunction(L, l_cgroup_prepare);
  lua_setfield(L, -2, "_cgroup_prepare");
  /* the exit status of a worker whose run went over its memory limit */
  lua_pushinteger(L, BT_CONTAIN_OOM);
  lua_setfield(L, -2, "_contain_oom");
  return 0;
}
