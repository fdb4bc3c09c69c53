/*
 * Differential test: baton's next() against npm cron-parser (the exact
 * version pinned in tests/cron/package.json), over the fixtures that
 * tests/cron/gen.js computed with it: thousands of generated expressions,
 * eight zones, start instants around DST transitions.
 *
 *   test-cron-diff.t [FIXTURES]     default: $BATON_ROOT/tests/cron/
 *                                   fixtures.tsv, else the path from this
 *                                   source file
 *
 * Lines tagged "ok" must agree exactly (the same 5 instants, or both
 * reject). Lines tagged "x:<reason>" are documented divergences
 * (tests/cron/README.md); they are counted by reason, never compared, and
 * an unknown reason fails the test. tests/cron/diff.t regenerates the
 * fixtures with node and checks that they are the committed ones.
 */
#include "cron.h"
#include "err.h"
#include "tz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const known[] = {
  "vixie-star-step", "duplicate-values", "reference-loop-limit",
  "lord-howe-overlap",
};
#define NKNOWN (sizeof known / sizeof known[0])

static int ntest, nfail;

static void ok(int cond, const char *name) {
  ntest++;
  if (!cond) nfail++;
  printf("%sok %d - %s\n", cond ? "" : "not ", ntest, name);
}

static FILE *open_fixtures(int argc, char **argv, char *path, size_t len) {
  const char *root = getenv("BATON_ROOT");
  if (argc > 1) {
    snprintf(path, len, "%s", argv[1]);
  } else if (root) {
    snprintf(path, len, "%s/tests/cron/fixtures.tsv", root);
  } else {
    /* tests/c/test-cron-diff.c -> tests/cron/fixtures.tsv */
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(path, len, "%.*s/../cron/fixtures.tsv",
             slash ? (int)(slash - src) : 1, slash ? src : ".");
  }
  return fopen(path, "r");
}

int main(int argc, char **argv) {
  static const char *zones[] = {
    "UTC", "America/New_York", "Europe/London", "Europe/Berlin",
    "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata",
    "Pacific/Chatham",
  };
  enum { NZ = sizeof zones / sizeof zones[0] };
  int checked[NZ] = { 0 }, bad[NZ] = { 0 }, excluded[NKNOWN] = { 0 };
  int agree_anyway[NKNOWN] = { 0 };
  int unknown = 0, lines = 0, shown = 0, other_zone = 0;
  char path[4096], line[4096];
  FILE *f = open_fixtures(argc, argv, path, sizeof path);
  if (!f) {
    printf("1..0 # SKIP no fixtures at %s\n", path);
    return 0;
  }
  while (fgets(line, sizeof line, f)) {
    char *fld[5], *s = line;
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    while (n < 5) {
      fld[n++] = s;
      s = strchr(s, '\t');
      if (!s) break;
      *s++ = 0;
    }
    if (n != 5) continue;
    lines++;
    size_t z;
    for (z = 0; z < NZ && strcmp(zones[z], fld[1]); z++) {}
    if (z == NZ) {
      other_zone++;
      continue;
    }
    const bt_tz_t *tz;
    bt_cron_t c;
    char err[512], got[512] = "";
    int64_t t = strtoll(fld[2], NULL, 10);
    if (bt_tz_load(fld[1], &tz) < 0) {
      snprintf(got, sizeof got, "ETZ");
    } else if (bt_cron_parse(&c, fld[3], err, sizeof err) < 0) {
      snprintf(got, sizeof got, "ERR");
    } else {
      size_t o = 0;
      for (int i = 0; i < 5; i++) {
        if (bt_cron_next(&c, tz, t, &t) < 0) break;
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? "," : "",
                              (long long)t);
      }
    }
    if (!strncmp(fld[0], "x:", 2)) {
      size_t k;
      for (k = 0; k < NKNOWN && strcmp(fld[0] + 2, known[k]); k++) {}
      if (k < NKNOWN) {
        excluded[k]++;
        agree_anyway[k] += !strcmp(got, fld[4]);
      } else if (unknown++ < 5) {
        printf("# unknown divergence %s\n", fld[0]);
      }
      continue;
    }
    checked[z]++;
    if (strcmp(got, fld[4])) {
      bad[z]++;
      if (shown++ < 30)
        printf("# %s from %s \"%s\":\n#   baton        %s\n"
               "#   cron-parser  %s\n", fld[1], fld[2], fld[3], got, fld[4]);
    }
  }
  fclose(f);
  printf("# %d fixture lines from %s\n", lines, path);
  ok(lines >= 1000, "thousands of fixture lines");
  for (size_t z = 0; z < NZ; z++) {
    char name[160];
    snprintf(name, sizeof name, "%s: %d of %d cases agree with cron-parser",
             zones[z], checked[z] - bad[z], checked[z]);
    ok(checked[z] > 0 && bad[z] == 0, name);
  }
  for (size_t k = 0; k < NKNOWN; k++)
    printf("# excluded, documented divergence %s: %d (%d of them agree "
           "anyway)\n", known[k], excluded[k], agree_anyway[k]);
  ok(unknown == 0, "every excluded case has a documented reason");
  ok(other_zone == 0, "every zone is one of the eight");
  bt_tz_cache_free();
  printf("1..%d\n", ntest);
  return nfail != 0;
}
