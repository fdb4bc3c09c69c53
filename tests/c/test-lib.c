/*
 * Unit tests of the library snapshot (runtime/core/lib.c), printing TAP:
 * where the library is looked for and the one-line message when it is
 * nowhere, the snapshot of a directory, the sealed memfd a node hands its
 * workers, and a worker attaching it (this program run again with
 * BATON_LIB_FD, as a node starts its workers).
 */
#define _GNU_SOURCE
#include "err.h"
#include "lib.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int ntests, nfailed;

static void ok(int cond, const char *name) {
  ntests++;
  if (!cond) nfailed++;
  printf("%sok %d - %s\n", cond ? "" : "not ", ntests, name);
}

static void is_str(const char *got, const char *want, const char *name) {
  ok(got && strcmp(got, want) == 0, name);
  if (!got || strcmp(got, want) != 0)
    fprintf(stderr, "#      got: [%s]\n# expected: [%s]\n", got ? got : "(null)", want);
}

static void like(const char *got, const char *part, const char *name) {
  ok(strstr(got, part) != NULL, name);
  if (!strstr(got, part)) fprintf(stderr, "#      got: [%s]\n# expected to contain: [%s]\n", got, part);
}

static char tmp[256];

static void put(const char *rel, const char *text) {
  char path[512], dir[512], *slash;
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", tmp, rel);
  snprintf(dir, sizeof(dir), "%s", path);
  for (slash = dir + strlen(tmp) + 1; (slash = strchr(slash, '/')) != NULL; slash++) {
    *slash = '\0';
    mkdir(dir, 0755);
    *slash = '/';
  }
  f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

/* The worker's side, in a fresh process: attach BATON_LIB_FD as version,
 * and say what it found on stdout, one line. */
static int child(const char *version) {
  char err[4096];
  const char *fdtext = getenv("BATON_LIB_FD");
  int fd = fdtext ? atoi(fdtext) : -1;
  size_t len;
  const char *core;
  if (bt_lib_init(version, NULL, err, sizeof(err))) {
    printf("error: %s\n", err);
    return 0;
  }
  core = bt_lib_file("baton/core.lua", &len);
  printf("dir=%s core=%.*s env=%s fd_open=%d\n", bt_lib_dir(), core ? (int) len : 4,
         core ? core : "none", getenv("BATON_LIB_FD") ? "set" : "unset",
         fcntl(fd, F_GETFD) >= 0);
  return 0;
}

/* Runs this program as a worker of the library in fd: its output line. */
static void run_child(int fd, const char *version, char *out, size_t len) {
  int pipefd[2];
  pid_t pid;
  ssize_t n;
  char fdtext[16], self[4096];
  ssize_t slen;
  /* (its path, not /proc/self/exe: under valgrind that is valgrind's tool) */
  slen = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (slen <= 0 || pipe(pipefd) < 0) exit(1);
  self[slen] = '\0';
  snprintf(fdtext, sizeof(fdtext), "%d", fd);
  pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    setenv("BATON_LIB_FD", fdtext, 1);
    execl(self, "test-lib", "--child", version, (char *) NULL);
    _exit(127);
  }
  close(pipefd[1]);
  n = read(pipefd[0], out, len - 1);
  out[n > 0 ? n : 0] = '\0';
  if (n > 0 && out[n - 1] == '\n') out[n - 1] = '\0';
  close(pipefd[0]);
  waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
  char dir[8192], exe[512], want[1024], err[4096], *blob, out[8192];
  size_t len;
  const char *s;
  int r, fd, seals;

  if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  setvbuf(stdout, NULL, _IONBF, 0);

  snprintf(tmp, sizeof(tmp), "%s/baton-test-lib.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp)) return 1;

  /* ---- where the library is looked for ---- */
  snprintf(exe, sizeof(exe), "%s/pfx/bin/baton", tmp);
  r = bt_lib_search(NULL, exe, "/nonexistent/share/baton/lua", dir, sizeof(dir));
  ok(r == BT_ENOENT, "no library anywhere: ENOENT");
  snprintf(want, sizeof(want), "baton's Lua library is not installed: no baton/core.lua in "
           "%s/pfx/share/baton/lua, %s/pfx/lua or /nonexistent/share/baton/lua; "
           "set BATON_LUADIR to its directory", tmp, tmp);
  is_str(dir, want, "the message names every place searched and BATON_LUADIR");
  ok(strchr(dir, '\n') == NULL, "in one line");

  r = bt_lib_search("/nonexistent/lua", exe, NULL, dir, sizeof(dir));
  ok(r == BT_ENOENT, "BATON_LUADIR without a library: ENOENT");
  is_str(dir, "baton's Lua library is not in BATON_LUADIR=/nonexistent/lua (no baton/core.lua there)",
         "the message names BATON_LUADIR");

  put("pfx/lua/baton/core.lua", "return 'source tree'\n");
  r = bt_lib_search(NULL, exe, "/nonexistent", dir, sizeof(dir));
  snprintf(want, sizeof(want), "%s/pfx/lua", tmp);
  ok(r == 0, "found next to bin/ (the source tree)");
  is_str(dir, want, "<prefix>/lua");

  put("pfx/share/baton/lua/baton/core.lua", "return 'installed'\n");
  put("pfx/share/baton/lua/baton/node/pool.lua", "return 'pool'\n");
  put("pfx/share/baton/lua/baton/web/index.html", "<html></html>\n");
  put("pfx/share/baton/lua/baton/.hidden.lua", "return 'hidden'\n");
  put("pfx/share/baton/lua/empty.lua", "");
  r = bt_lib_search(NULL, exe, "/nonexistent", dir, sizeof(dir));
  snprintf(want, sizeof(want), "%s/pfx/share/baton/lua", tmp);
  ok(r == 0, "found in the installed layout");
  is_str(dir, want, "<prefix>/share/baton/lua comes before <prefix>/lua");

  snprintf(want, sizeof(want), "%s/pfx/lua", tmp);
  r = bt_lib_search(want, exe, NULL, dir, sizeof(dir));
  ok(r == 0 && strcmp(dir, want) == 0, "BATON_LUADIR comes first");
  r = bt_lib_search(NULL, NULL, want, dir, sizeof(dir));
  ok(r == 0 && strcmp(dir, want) == 0, "the compiled-in directory comes last");

  /* ---- the snapshot ---- */
  snprintf(want, sizeof(want), "%s/pfx/share/baton/lua", tmp);
  r = bt_lib_read_dir(want, "9.9.9", &blob, &len, err, sizeof(err));
  ok(r == 0, "a directory is read");
  if (r == 0) {
    ok(len > 12 && memcmp(blob, "baton-lib 1\n9.9.9\n", 18) == 0, "the blob starts with its version");
    ok(memmem(blob, len, "hidden", 6) == NULL, "dot files are left out");
    free(blob);
  }
  r = bt_lib_read_dir("/nonexistent/lua", "9.9.9", &blob, &len, err, sizeof(err));
  ok(r == UV_ENOENT, "a missing directory: ENOENT");
  like(err, "/nonexistent/lua: No such file or directory", "the error names it");

  setenv("BATON_LUADIR", want, 1);
  r = bt_lib_init("9.9.9", NULL, err, sizeof(err));
  ok(r == 0, "bt_lib_init reads BATON_LUADIR");
  is_str(bt_lib_dir(), want, "bt_lib_dir");
  s = bt_lib_file("baton/core.lua", &len);
  ok(s && len == 19 && memcmp(s, "return 'installed'\n", 19) == 0, "a file's content");
  s = bt_lib_file("baton/node/pool.lua", &len);
  ok(s && len == 14, "a file in a subdirectory");
  s = bt_lib_file("empty.lua", &len);
  ok(s && len == 0, "an empty file");
  ok(bt_lib_file("baton/web/index.html", &len) != NULL, "files other than Lua are kept too");
  ok(bt_lib_file("baton/nope.lua", &len) == NULL, "a missing file: NULL");

  /* Replacing the files now changes nothing. */
  put("pfx/share/baton/lua/baton/core.lua", "return 'replaced'\n");
  put("pfx/share/baton/lua/baton/added.lua", "return 'added'\n");
  ok(bt_lib_init("9.9.9", NULL, err, sizeof(err)) == 0, "bt_lib_init again: a no-op");
  s = bt_lib_file("baton/core.lua", &len);
  ok(s && len == 19 && memcmp(s, "return 'installed'\n", 19) == 0,
     "a file replaced on disk: the snapshot keeps the old content");
  ok(bt_lib_file("baton/added.lua", &len) == NULL, "a file added on disk: not in the snapshot");

  /* ---- the memfd for workers ---- */
  fd = bt_lib_fd();
  ok(fd >= 64, "bt_lib_fd: a descriptor >= 64");
  ok(bt_lib_fd() == fd, "the same one on every call");
  ok(fd >= 0 && !(fcntl(fd, F_GETFD) & FD_CLOEXEC), "inherited across exec");
  seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : -1;
  ok(seals >= 0 && (seals & F_SEAL_WRITE) && (seals & F_SEAL_SEAL), "sealed against writes");
  ok(fd >= 0 && pwrite(fd, "x", 1, 0) < 0, "a write is refused");

  run_child(fd, "9.9.9", out, sizeof(out));
  snprintf(want, sizeof(want), "dir=%s/pfx/share/baton/lua core=return 'installed'\n env=unset fd_open=0",
           tmp);
  is_str(out, want, "a worker attaches the snapshot, then closes it and unsets BATON_LIB_FD");
  run_child(fd, "1.0.0", out, sizeof(out));
  is_str(out, "error: the node's Lua library is of baton 9.9.9, this is baton 1.0.0",
         "a worker of another version refuses it");
  run_child(1, "9.9.9", out, sizeof(out));
  like(out, "error: BATON_LIB_FD=1 is not", "a descriptor that is not a snapshot is refused");

  {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", tmp);
  }
  printf("1..%d\n", ntests);
  return nfailed ? 1 : 0;
}
