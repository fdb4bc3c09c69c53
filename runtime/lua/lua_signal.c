/*
 * baton.signal(names [, timeout]): wait until the process receives one of
 * the named signals; returns the signal's name.
 *
 *   local sig = baton.signal{"SIGINT", "SIGTERM"}   --> "SIGTERM"
 *   local sig, err = baton.signal("SIGHUP", 10)     --> nil, "ETIMEDOUT: ..."
 *
 * Semantics, for each signal S that may be waited for (see waitable[]):
 *
 *  - Until a call names S, S keeps its default action (SIGINT, SIGTERM and
 *    SIGHUP end the process).
 *  - The first call that names S installs baton's handler for S (a
 *    uv_signal_t), even a call with timeout 0. From then until the runtime
 *    shuts down, S no longer has its default action: each delivery of S
 *    resumes every coroutine waiting for S (each gets "S"), or, when none
 *    is waiting, adds one to S's pending count.
 *  - A call naming a signal whose pending count is not 0 returns at once,
 *    taking one from the count of the first such signal in the order the
 *    call names them. So a signal that arrives between two waits is not
 *    lost, and each delivery is returned once.
 *  - A timeout of 0 only takes a pending signal (ETIMEDOUT if none).
 *  - The handlers keep the loop alive only while someone waits. The
 *    runtime's closer removes them (libuv then restores the default
 *    action); a later call installs them again, with counts from 0.
 *  - Ordinary signals are not queued by the kernel: two deliveries of S
 *    before baton's handler runs may count once.
 *
 * The state is per runtime: a box in the registry (Lua memory, lives until
 * lua_close) points to a sigstate_t (C memory) made by the first call and
 * freed by the close callback of its last handle.
 */
#include "err.h"
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOX_KEY "baton.signal"

/* ---- names ------------------------------------------------------------- */

static const struct {
  const char *name;
  int num;
} names[] = {
  {"SIGHUP", SIGHUP}, {"SIGINT", SIGINT}, {"SIGQUIT", SIGQUIT},
  {"SIGILL", SIGILL}, {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},
  {"SIGBUS", SIGBUS}, {"SIGFPE", SIGFPE}, {"SIGKILL", SIGKILL},
  {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
  {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
  {"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
  {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU},
  {"SIGURG", SIGURG}, {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ},
  {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
  {"SIGIO", SIGIO}, {"SIGSYS", SIGSYS},
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

/* The signals baton.signal can wait for. Not the others: SIGKILL and
 * SIGSTOP cannot be caught; SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
 * SIGABRT and SIGSYS report faults that a deferred handler cannot fix;
 * baton ignores SIGPIPE and libuv owns SIGCHLD. */
static const int waitable[] = {
  SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM,
  SIGCONT, SIGTSTP,
};
#define NSLOTS ((int) (sizeof(waitable) / sizeof(waitable[0])))
#define WAITABLE_LIST "SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, " \
  "SIGWINCH, SIGALRM, SIGCONT, SIGTSTP"

int bt__signal_number(const char *name) {
  size_t i;
  for (i = 0; i < NNAMES; i++)
    if (!strcmp(names[i].name, name)) return names[i].num;
  return 0;
}

const char *bt__signal_name(int signum) {
  size_t i;
  for (i = 0; i < NNAMES; i++)
    if (names[i].num == signum) return names[i].name;
  return NULL;
}

/* ---- state ------------------------------------------------------------- */

typedef struct sigstate_s sigstate_t;
typedef struct sigwait_s sigwait_t;

/* One waitable signal. */
typedef struct {
  uv_signal_t h;
  sigstate_t *st;
  int inited;              /* h initialised: closed by the closer */
  int started;             /* handler installed */
  int nwait;               /* coroutines waiting for it */
  unsigned long pending;   /* deliveries nobody waited for, not yet taken */
} slot_t;

struct sigstate_s {
  slot_t slot[NSLOTS];
  sigwait_t *waiters;
  int nopen;               /* handles initialised and not yet closed */
  int closed;              /* the closer ran; freed with the last handle */
};

/* One coroutine in baton.signal(); freed after its timer's close, if it
 * has one. */
struct sigwait_s {
  sigwait_t *prev, *next;
  sigstate_t *st;
  bt_co_t *co;
  unsigned mask;           /* bit i: waiting for waitable[i] */
  uv_timer_t timer;
  int timed;               /* timer initialised */
  char msg[200];           /* the ETIMEDOUT message */
};

/* The registry's box: the runtime's state, made by the first call. */
typedef struct {
  bt_closer_t closer;      /* first: close() receives &closer */
  sigstate_t *st;          /* NULL before the first call, after shutdown */
} sigbox_t;

/* Waiting handlers keep the loop alive; the others do not. */
static void slot_ref(slot_t *s) {
  if (!s->inited) return;
  if (s->nwait > 0) uv_ref((uv_handle_t *) &s->h);
  else uv_unref((uv_handle_t *) &s->h);
}

static void on_slot_close(uv_handle_t *h) {
  sigstate_t *st = ((slot_t *) h->data)->st;
  if (--st->nopen == 0 && st->closed) free(st);
}

static void on_wait_close(uv_handle_t *h) {
  free(h->data);
}

/* Takes w off the lists and frees it, after closing its timer. */
static void wait_end(sigwait_t *w) {
  sigstate_t *st = w->st;
  int i;
  if (w->prev) w->prev->next = w->next;
  else st->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  for (i = 0; i < NSLOTS; i++) {
    if (!(w->mask & (1u << i))) continue;
    st->slot[i].nwait--;
    slot_ref(&st->slot[i]);
  }
  if (w->timed) uv_close((uv_handle_t *) &w->timer, on_wait_close);
  else free(w);
}

/* A delivery: every coroutine waiting for it gets its name, or, with none
 * waiting, it is counted. */
static void on_signal(uv_signal_t *h, int signum) {
  slot_t *s = h->data;
  sigstate_t *st = s->st;
  unsigned bit = 1u << (s - st->slot);
  sigwait_t *w, *next;

  if (s->nwait == 0) {
    if (s->pending < ULONG_MAX) s->pending++;
    return;
  }
  for (w = st->waiters; w; w = next) {
    bt_co_t *co = w->co;
    next = w->next;
    if (!(w->mask & bit)) continue;
    lua_pushstring(bt_co_stack(co), bt__signal_name(signum));
    wait_end(w);
    bt_co_resume(co, 1);
  }
}

static void on_wait_timeout(uv_timer_t *t) {
  sigwait_t *w = t->data;
  bt_co_t *co = w->co;
  bt_push_fail(bt_co_stack(co), BT_ETIMEDOUT, w->msg);
  wait_end(w);
  bt_co_resume(co, 3);
}

/* The waiting coroutine was killed: forget it. Deliveries from now on are
 * counted as pending (if nobody else waits). */
static void wait_cancel(void *data) {
  wait_end(data);
}

/* Shutdown: removes the handlers (libuv restores the default actions when
 * the last handle of a signal stops). Nobody can be waiting here (the
 * runtime kills its coroutines first); if someone were, it gets
 * ECANCELED. */
static void on_closer(bt_closer_t *self) {
  sigbox_t *box = (sigbox_t *) self;
  sigstate_t *st = box->st;
  int i;

  if (!st) return;
  box->st = NULL;
  while (st->waiters) {
    sigwait_t *w = st->waiters;
    bt_co_t *co = w->co;
    bt_push_fail(bt_co_stack(co), BT_ECANCELED, "runtime is shutting down");
    wait_end(w);
    bt_co_resume(co, 3);
  }
  st->closed = 1;
  for (i = 0; i < NSLOTS; i++)
    if (st->slot[i].inited)
      uv_close((uv_handle_t *) &st->slot[i].h, on_slot_close);
  if (st->nopen == 0) free(st);
}

/* Returns the runtime's state, making it on first use; NULL when out of
 * memory. */
static sigstate_t *get_state(lua_State *L) {
  sigbox_t *box;
  sigstate_t *st;
  int i;

  lua_getfield(L, LUA_REGISTRYINDEX, BOX_KEY);
  box = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (box->st) return box->st;
  st = calloc(1, sizeof(*st));
  if (!st) return NULL;
  for (i = 0; i < NSLOTS; i++) st->slot[i].st = st;
  box->st = st;
  bt_rt_add_closer(bt_rt_from(L), &box->closer);
  return st;
}

/* The slot of the signal named by the string at idx; raises unless it is
 * one baton.signal can wait for. */
static int check_slot(lua_State *L, int idx) {
  const char *name = lua_tostring(L, idx);
  int num = bt__signal_number(name), i;
  if (!num)
    luaL_error(L, "baton.signal: unknown signal '%s' (expected %s)", name,
               WAITABLE_LIST);
  for (i = 0; i < NSLOTS; i++)
    if (waitable[i] == num) return i;
  return luaL_error(L, "baton.signal: cannot wait for %s (expected %s)", name,
                    WAITABLE_LIST);
}

/* Installs the handler of slot i if it is not yet; 0 or a UV error. */
static int install(lua_State *L, sigstate_t *st, int i) {
  slot_t *s = &st->slot[i];
  int rc;
  if (s->started) return 0;
  if (!s->inited) {
    rc = uv_signal_init(bt_lua_loop(L), &s->h);
    if (rc) return rc;
    s->h.data = s;
    s->inited = 1;
    st->nopen++;
  }
  rc = uv_signal_start(&s->h, on_signal, waitable[i]);
  if (rc) return rc;
  s->started = 1;
  slot_ref(s);
  return 0;
}

/* baton.signal(name | {names...} [, timeout]) -> name | nil, err, code */
static int l_signal(lua_State *L) {
  int order[NSLOTS], n = 0, i, rc;
  unsigned mask = 0;
  double timeout = -1;
  char list[160] = "";
  sigstate_t *st;
  sigwait_t *w;
  bt_co_t *co;

  if (lua_type(L, 1) == LUA_TSTRING) {
    order[n++] = check_slot(L, 1);
    mask = 1u << order[0];
  } else if (lua_type(L, 1) == LUA_TTABLE) {
    int len = (int) lua_objlen(L, 1);
    if (len == 0) return luaL_error(L, "baton.signal: no signal named");
    for (i = 1; i <= len; i++) {
      int k;
      lua_rawgeti(L, 1, i);
      if (lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "baton.signal: signal names must be strings "
                          "(got %s)", luaL_typename(L, -1));
      k = check_slot(L, -1);
      lua_pop(L, 1);
      if (mask & (1u << k)) continue;
      mask |= 1u << k;
      order[n++] = k;
    }
  } else {
    return luaL_error(L, "baton.signal: expects a signal name or a list of "
                      "names (got %s)", luaL_typename(L, 1));
  }
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TNUMBER)
      return luaL_error(L, "baton.signal: timeout must be a number of "
                        "seconds (got %s)", luaL_typename(L, 2));
    timeout = lua_tonumber(L, 2);
    if (!(timeout >= 0) || timeout > 1e9)
      return luaL_error(L, "baton.signal: timeout must be >= 0 seconds");
  }
  co = bt_co_current(L, "baton.signal");

  st = get_state(L);
  if (!st) return bt_push_fail(L, BT_ENOMEM, NULL);
  for (i = 0; i < n; i++) {
    rc = install(L, st, order[i]);
    if (rc) {
      char msg[100];
      snprintf(msg, sizeof(msg), "cannot handle %s: %s",
               bt__signal_name(waitable[order[i]]), uv_strerror(rc));
      return bt_push_fail(L, rc, msg);
    }
  }
  for (i = 0; i < n; i++) {
    slot_t *s = &st->slot[order[i]];
    if (s->pending > 0) {
      s->pending--;
      lua_pushstring(L, bt__signal_name(waitable[order[i]]));
      return 1;
    }
  }

  /* "no SIGINT or SIGTERM within 5 s" */
  for (i = 0; i < n; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof(list) - len, "%s%s",
             i == 0 ? "" : i == n - 1 ? " or " : ", ",
             bt__signal_name(waitable[order[i]]));
  }
  if (timeout == 0) {
    char msg[200];
    snprintf(msg, sizeof(msg), "no %s pending", list);
    return bt_push_fail(L, BT_ETIMEDOUT, msg);
  }

  w = calloc(1, sizeof(*w));
  if (!w) return bt_push_fail(L, BT_ENOMEM, NULL);
  w->st = st;
  w->co = co;
  w->mask = mask;
  snprintf(w->msg, sizeof(w->msg), "no %s within %g s", list, timeout);
  w->next = st->waiters;
  if (st->waiters) st->waiters->prev = w;
  st->waiters = w;
  for (i = 0; i < n; i++) {
    st->slot[order[i]].nwait++;
    slot_ref(&st->slot[order[i]]);
  }
  if (timeout > 0) {
    uv_loop_t *loop = bt_lua_loop(L);
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->timed = 1;
    bt_timer_start_secs(L, &w->timer, on_wait_timeout, timeout);
  }
  return bt_co_wait(L, co, wait_cancel, w);
}

int bt_lua_open_signal(lua_State *L) {
  sigbox_t *box;
  /* stack: baton box */
  box = lua_newuserdata(L, sizeof(*box));
  memset(box, 0, sizeof(*box));
  box->closer.close = on_closer;
  lua_setfield(L, LUA_REGISTRYINDEX, BOX_KEY);
  lua_pushcfunction(L, l_signal);
  lua_setfield(L, -2, "signal");
  return 0;
}
