/*
 * baton.exec: run a program (no shell) and wait for it without blocking the
 * loop.
 *
 *   local r = assert(baton.exec{"pg_dump", "-f", path, timeout = 600})
 *   -- r.code, r.signal, r.stdout, r.stderr
 *
 * The child runs in a new session (its own process group), so a timeout or
 * a kill reaches everything it started (`sh -c "a | b"`), not only the
 * direct child. The call returns when the child has exited and both output
 * pipes are closed. A timeout sends SIGTERM to the group, then SIGKILL after
 * KILL_GRACE_MS; a killed coroutine (job cancel) sends SIGKILL at once.
 * Handles are closed in every path and the state is freed by the last
 * close callback.
 */
#include "err.h"
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXEC_MAX_OUTPUT ((size_t) 64 << 20)   /* per stream */
#define EXEC_READ_CHUNK ((size_t) 64 << 10)
#define KILL_GRACE_MS 2000

extern char **environ;

typedef struct {
  char *p;
  size_t len, cap;
} obuf_t;

typedef struct {
  uv_process_t proc;
  uv_pipe_t out, err, in;
  uv_timer_t timer;
  uv_write_t wreq;
  bt_co_t *co;            /* the waiting coroutine; NULL once resumed/killed */
  obuf_t obuf, ebuf;
  int nopen;              /* initialised handles not yet closed */
  int pid;
  int spawned, exited, term_sig;
  int64_t exit_status;
  int out_open, err_open; /* pipes still being read */
  int timedout;           /* SIGTERM sent after the timeout */
  int fail;               /* BT_E* that ends the call (output too large) */
  const char *fail_stream;
  double timeout;         /* seconds, 0 = none */
  const char *cmd;        /* argv[0], stored after the struct */
  const char *in_data;    /* stdin, stored after the struct */
  size_t in_len;
  int has_in;
} exec_t;

static void on_close(uv_handle_t *h) {
  exec_t *e = h->data;
  if (--e->nopen > 0) return;
  free(e->obuf.p);
  free(e->ebuf.p);
  free(e);
}

static void close_handle(void *h) {
  if (!uv_is_closing((uv_handle_t *) h)) uv_close((uv_handle_t *) h, on_close);
}

/* Signals the child's process group (it is the leader of its own session),
 * falling back to the child alone. */
static void kill_group(exec_t *e, int sig) {
  if (!e->spawned) return;
  if (kill(-e->pid, sig) != 0 && !e->exited) uv_process_kill(&e->proc, sig);
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
  } else {
    /* stack: result */
    lua_createtable(S, 0, 4);
    if (e->term_sig) {
      lua_pushinteger(S, 128 + e->term_sig);
      lua_setfield(S, -2, "code");
      lua_pushinteger(S, e->term_sig);
      lua_setfield(S, -2, "signal");
    } else {
      lua_pushinteger(S, (lua_Integer) e->exit_status);
      lua_setfield(S, -2, "code");
    }
    lua_pushlstring(S, e->obuf.p ? e->obuf.p : "", e->obuf.len);
    lua_setfield(S, -2, "stdout");
    lua_pushlstring(S, e->ebuf.p ? e->ebuf.p : "", e->ebuf.len);
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
    if (b->len > EXEC_MAX_OUTPUT) fail(e, BT_ETOOLARGE, name);
    return;
  }
  if (nread == 0) return;
  if (nread == UV_ENOBUFS) {
    fail(e, BT_ENOMEM, name);
    return;
  }
  /* EOF, or a read error that ends the stream the same way. */
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

/* Raises unless the value at idx is a string (or a number, converted in
 * place) without NUL bytes; returns it. what names it in the message. */
static const char *check_str(lua_State *L, int idx, const char *what) {
  size_t len;
  const char *s;
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "baton.exec: %s must be a string (got %s)", what,
               luaL_typename(L, idx));
  s = lua_tolstring(L, idx, &len);
  if (strlen(s) != len)
    luaL_error(L, "baton.exec: %s contains a NUL byte", what);
  return s;
}

/* Builds the child's environment: the inherited one with the entries of
 * the env table (at idx) added or replacing those of the same name; an
 * entry set to false removes the variable. The strings are anchored in a
 * table and the pointer array is a userdata, both left on the stack.
 * Returns the array. */
static char **build_env(lua_State *L, int idx) {
  int n_env = 0, n_tab = 0, i, k = 0, anchor;
  char **envp;
  char what[300];

  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *key;
    size_t klen;
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "baton.exec: env names must be strings (got %s)",
                 luaL_typename(L, -2));
    key = lua_tolstring(L, -2, &klen);
    if (klen == 0 || strlen(key) != klen || strchr(key, '='))
      luaL_error(L, "baton.exec: invalid env name '%s'", key);
    if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    snprintf(what, sizeof(what), "env %s", key);
    lua_pushvalue(L, -1);   /* check a copy; the table stays as it was */
    check_str(L, -1, what);
    lua_pop(L, 1);
    n_tab++;
    lua_pop(L, 1);
  }
  for (i = 0; environ[i]; i++) n_env++;

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

/* baton.exec{cmd, args..., timeout=, env=, cwd=, stdin=}. */
static int l_exec(lua_State *L) {
  uv_process_options_t opts;
  uv_stdio_container_t stdio[3];
  const char *cwd = NULL, *in_data = NULL, *cmd;
  size_t in_len = 0, cmd_len;
  double timeout = 0;
  char **argv, **envp = NULL;
  int argc, i, rc;
  bt_co_t *co;
  exec_t *e;
  uv_loop_t *loop;

  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "baton.exec: expects a table {cmd, args..., "
                      "timeout=, env=, cwd=, stdin=} (got %s)",
                      luaL_typename(L, 1));
  lua_settop(L, 1);
  argc = (int) lua_objlen(L, 1);
  if (argc < 1)
    return luaL_error(L, "baton.exec: no command (the table's first element)");

  /* Every key must be an argument index or a known option. */
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TNUMBER) {
      lua_Number k = lua_tonumber(L, -1);
      if (k >= 1 && k <= argc && k == floor(k)) continue;
      return luaL_error(L, "baton.exec: argument list has a hole or a "
                        "non-integer index (%f)", k);
    }
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      if (!strcmp(k, "timeout") || !strcmp(k, "env") || !strcmp(k, "cwd") ||
          !strcmp(k, "stdin"))
        continue;
      return luaL_error(L, "baton.exec: unknown option '%s' (expected "
                        "timeout, env, cwd or stdin)", k);
    }
    return luaL_error(L, "baton.exec: unexpected %s key",
                      luaL_typename(L, -1));
  }

  /* stack: t argv-anchor argv */
  lua_createtable(L, argc, 0);
  argv = lua_newuserdata(L, (size_t) (argc + 1) * sizeof(char *));
  for (i = 1; i <= argc; i++) {
    char what[32];
    lua_rawgeti(L, 1, i);
    snprintf(what, sizeof(what), "argument %d", i);
    if (lua_isnil(L, -1))
      return luaL_error(L, "baton.exec: argument %d is nil", i);
    argv[i - 1] = (char *) check_str(L, -1, what);
    lua_rawseti(L, 2, i);   /* anchors the converted string */
  }
  argv[argc] = NULL;
  cmd = argv[0];
  cmd_len = strlen(cmd);
  if (cmd_len == 0) return luaL_error(L, "baton.exec: empty command");

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

  /* cwd, stdin and env stay on the stack, so their strings stay valid */
  lua_getfield(L, 1, "cwd");
  if (!lua_isnil(L, -1)) cwd = check_str(L, -1, "cwd");

  lua_getfield(L, 1, "stdin");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "baton.exec: stdin must be a string (got %s)",
                        luaL_typename(L, -1));
    in_data = lua_tolstring(L, -1, &in_len);
  }

  lua_getfield(L, 1, "env");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TTABLE)
      return luaL_error(L, "baton.exec: env must be a table (got %s)",
                        luaL_typename(L, -1));
    envp = build_env(L, lua_gettop(L));
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

  memset(&opts, 0, sizeof(opts));
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
  opts.file = cmd;
  opts.args = argv;
  opts.env = envp;
  opts.cwd = cwd;
  opts.flags = UV_PROCESS_DETACHED;
  opts.stdio_count = 3;
  opts.stdio = stdio;
  opts.exit_cb = on_exit_cb;

  rc = uv_spawn(loop, &e->proc, &opts);
  if (rc) {
    char msg[600];
    struct stat st;
    /* uv_spawn initialised the process handle even though it failed. */
    close_handle(&e->proc);
    close_handle(&e->out);
    close_handle(&e->err);
    close_handle(&e->timer);
    if (e->has_in) close_handle(&e->in);
    if (cwd && (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)))
      snprintf(msg, sizeof(msg), "%s: cwd %s: %s", cmd, cwd, uv_strerror(rc));
    else
      snprintf(msg, sizeof(msg), "%s: %s", cmd, uv_strerror(rc));
    return bt_push_fail(L, rc, msg);
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
    /* From now, not from the loop's cached time (Lua may have run long). */
    uv_update_time(loop);
    uv_timer_start(&e->timer, on_timer, (uint64_t) (timeout * 1000.0 + 0.5),
                   0);
  }
  return bt_co_wait(L, co, exec_cancel, e);
}

int bt_lua_open_exec(lua_State *L) {
  /* A child that exits before reading its stdin must not kill us with
   * SIGPIPE; uv_spawn resets signal dispositions in the child. */
  signal(SIGPIPE, SIG_IGN);
  lua_pushcfunction(L, l_exec);
  lua_setfield(L, -2, "exec");
  return 0;
}
