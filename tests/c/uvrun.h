/* Running libuv's default loop (the one the C tests use) until a condition
 * holds or a time runs out (header-only, like tap.h). */
#ifndef BATON_TEST_UVRUN_H
#define BATON_TEST_UVRUN_H

#include <uv.h>

static inline void uvrun_on_guard(uv_timer_t *t) { *(int *) t->data = 1; }

/* Runs the loop until *flag >= want or ms pass; returns 1 if reached. */
static inline int run_until(int *flag, int want, long ms) {
  uv_loop_t *loop = uv_default_loop();
  uv_timer_t guard;
  int timed_out = 0;
  uv_timer_init(loop, &guard);
  guard.data = &timed_out;
  uv_timer_start(&guard, uvrun_on_guard, (uint64_t) ms, 0);
  while (*flag < want && !timed_out) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *) &guard, NULL);
  uv_run(loop, UV_RUN_NOWAIT);       /* the guard's close */
  return *flag >= want;
}

/* Runs the loop for ms. */
static inline void run_for(long ms) {
  int never = 0;
  run_until(&never, 1, ms);
}

#endif
