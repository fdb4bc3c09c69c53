/*
 * The regression half of a libFuzzer target (fuzz/<target>_fuzz.c), in the
 * normal build: feeds every file of fuzz/corpus/<target>/ (the seeds) and
 * fuzz/regressions/<target>/ (every input a fuzzer ever failed on) to the
 * target's LLVMFuzzerTestOneInput, so a fixed crash stays fixed. The
 * target aborts on a failed check, which fails the test; the file being
 * replayed is named in a comment first. TAP, one test per file. The
 * directories are found from $BATON_ROOT, else relative to this header.
 *
 * Include it after the target's source, then call fuzz_replay("http").
 */
#ifndef BATON_TEST_FUZZ_REPLAY_H
#define BATON_TEST_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_REPLAY_MAX (1 << 20)

static int fuzz_replay_n;

/* Replays every file of dir, in name order. */
static void fuzz_replay_dir(const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, alphasort);
  static uint8_t buf[FUZZ_REPLAY_MAX];
  if (n < 0) {
    printf("# no directory %s\n", dir);
    return;
  }
  for (int i = 0; i < n; i++) {
    char path[4096];
    FILE *f;
    size_t len;
    if (names[i]->d_name[0] == '.') goto next;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    if (!(f = fopen(path, "rb"))) goto next;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    printf("# replaying %s\n", path);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, len);    /* aborts on a failed check */
    printf("ok %d - %s\n", ++fuzz_replay_n, path);
  next:
    free(names[i]);
  }
  free(names);
}

/* Replays target's seeds and regressions; returns main's exit status. */
static int fuzz_replay(const char *target) {
  char base[4096], dir[4400];
  const char *root = getenv("BATON_ROOT");
  if (root) {
    snprintf(base, sizeof base, "%s/fuzz", root);
  } else {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(base, sizeof base, "%.*s/../../fuzz",
             slash ? (int) (slash - src) : 1, slash ? src : ".");
  }
  snprintf(dir, sizeof dir, "%s/corpus/%s", base, target);
  fuzz_replay_dir(dir);
  snprintf(dir, sizeof dir, "%s/regressions/%s", base, target);
  fuzz_replay_dir(dir);
  if (fuzz_replay_n == 0) {
    printf("1..0 # SKIP no fuzz inputs found under %s\n", base);
    return 0;
  }
  printf("1..%d\n", fuzz_replay_n);
  return 0;
}

#endif
