/* Loading a library on first use (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>

int bt_dl_load(bt_dl_t *once, const char *const sonames[], const char *what,
               const char *const names[], void *fns[], size_t n) {
  void *lib = NULL;
  size_t i;

  if (once->state) return once->state > 0 ? 0 : -1;
  for (i = 0; sonames[i] && !lib; i++) {
    lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib && i == 0) {
      const char *e = dlerror();
      snprintf(once->error, sizeof(once->error), "%s", e ? e : "dlopen failed");
    }
  }
  if (!lib) return bt_dl_fail(once, "%s", once->error);
  for (i = 0; i < n; i++)
    if (!(fns[i] = dlsym(lib, names[i])))
      return bt_dl_fail(once, "%s has no %s", what, names[i]);
  once->state = 1;
  return 0;
}

int bt_dl_fail(bt_dl_t *once, const char *fmt, ...) {
  char msg[sizeof(once->error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(once->error, sizeof(once->error), "%s", msg);
  once->state = -1;
  return -1;
}
