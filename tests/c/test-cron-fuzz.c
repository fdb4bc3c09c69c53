/*
 * Replays the fuzz target (fuzz/cron_fuzz.c) on its seed corpus and on
 * every input it ever crashed on (fuzz/regressions/), so a fixed crash stays
 * fixed. TAP; one test per file. The directories are found from
 * $BATON_ROOT, else relative to this source file.
 */
#include "../../fuzz/cron_fuzz.c"

#include <dirent.h>
#include <stdio.h>

static int ntest;

static void replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  if (!d) {
    printf("# no directory %s\n", dir);
    return;
  }
  while ((de = readdir(d))) {
    char path[4096];
    if (de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);   /* aborts on a failed check */
    printf("ok %d - %s\n", ++ntest, path);
  }
  closedir(d);
}

int main(void) {
  char base[4096], dir[4200];
  const char *root = getenv("BATON_ROOT");
  if (root) {
    snprintf(base, sizeof base, "%s/fuzz", root);
  } else {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(base, sizeof base, "%.*s/../../fuzz",
             slash ? (int)(slash - src) : 1, slash ? src : ".");
  }
  snprintf(dir, sizeof dir, "%s/corpus", base);
  replay_dir(dir);
  snprintf(dir, sizeof dir, "%s/regressions", base);
  replay_dir(dir);
  bt_tz_cache_free();
  if (ntest == 0) {
    printf("1..0 # SKIP no fuzz inputs found under %s\n", base);
    return 0;
  }
  printf("1..%d\n", ntest);
  return 0;
}
