/* runtime/core/confine.c: what a confined sandbox can and cannot do. A
 * child is confined as `baton sandbox` is (its channel on descriptor 3),
 * tries things, and writes what happened to the channel; the parent reads
 * it. Skipped under valgrind, whose own system calls a seccomp filter would
 * refuse. */
#define _GNU_SOURCE
#include "confine.h"
#include "err.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZONE "/usr/share/zoneinfo/UTC"

/* Writes "name=value\n" to the channel. */
static void say(const char *name, long value) {
  char line[128];
  int n = snprintf(line, sizeof line, "%s=%ld\n", name, value);
  if (write(3, line, (size_t) n) < 0) _exit(3);
}

/* The result of a call that returns -1 and errno: the errno, or 0 when it
 * worked (its descriptor or pid is closed or reaped). */
static long failed_with(long rc) {
  return rc < 0 ? errno : 0;
}

static void child(void) {
  struct rlimit rl;
  int landlocked = -1, fd, e;
  /* A descriptor the parent left open must be gone. */
  fd = open("/dev/null", O_RDONLY);
  if (fd >= 0 && fd != 9) { dup2(fd, 9); close(fd); }
  e = bt_confine_process(-1);
  say("process", e);
  say("fd9_open", fcntl(9, F_GETFD) >= 0);
  say("dumpable", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
  say("nnp", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  say("nproc", getrlimit(RLIMIT_NPROC, &rl) == 0 ? (long) rl.rlim_cur : -1);
  e = bt_confine_syscalls("/usr/share/zoneinfo", &landlocked);
  say("syscalls", e);
  say("landlocked", landlocked);
  fd = open("/etc/passwd", O_RDONLY);
  say("open_passwd", failed_with(fd));
  fd = open(ZONE, O_RDONLY);
  say("open_zone", failed_with(fd));
  if (fd >= 0) close(fd);
  fd = open(ZONE, O_WRONLY);
  say("open_zone_write", failed_with(fd));
  fd = open("/tmp/baton-confine-test", O_WRONLY | O_CREAT, 0600);
  say("create", failed_with(fd));
  say("socket", failed_with(socket(AF_INET, SOCK_STREAM, 0)));
  say("fork", failed_with(fork()));
  {
    char *argv[] = {"/bin/true", NULL}, *envp[] = {NULL};
    say("execve", failed_with(execve("/bin/true", argv, envp)));
  }
  say("kill", failed_with(kill(getppid(), 0)));
  {
    void *p = malloc(1 << 20);
    say("malloc", p != NULL);
    free(p);
  }
  say("done", 1);
  _exit(0);
}

/* The value of name in the child's report, or LONG_MIN. */
static long get(const char *report, const char *name) {
  char key[64];
  const char *p;
  snprintf(key, sizeof key, "\n%s=", name);
  p = strstr(report, key);
  return p ? strtol(p + strlen(key), NULL, 10) : -999999;
}

int main(void) {
  int sv[2], status;
  char report[4096] = "\n";
  size_t len = 1;
  ssize_t n;
  pid_t pid;
  const char *vg = getenv("BATON_VALGRIND");

  if (vg && !strcmp(vg, "1")) {
    printf("1..0 # SKIP a seccomp filter would refuse valgrind's own system calls\n");
    return 0;
  }
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    close(sv[0]);
    if (sv[1] != 3) {
      dup2(sv[1], 3);
      close(sv[1]);
    }
    child();
  }
  close(sv[1]);
  while (len < sizeof report - 1 && (n = read(sv[0], report + len, sizeof report - 1 - len)) > 0)
    len += (size_t) n;
  report[len] = '\0';
  waitpid(pid, &status, 0);

  ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the confined child exits 0");
  is_int(get(report, "done"), 1, "it ran to its end");
  is_int(get(report, "process"), 0, "bt_confine_process: 0");
  is_int(get(report, "fd9_open"), 0, "a descriptor it inherited is closed");
  is_int(get(report, "dumpable"), 0, "not dumpable (no ptrace by the same user)");
  is_int(get(report, "nnp"), 1, "no new privileges");
  is_int(get(report, "nproc"), 0, "may start no process (RLIMIT_NPROC 0)");
  is_int(get(report, "syscalls"), 0, "bt_confine_syscalls: 0");
  ok(get(report, "open_passwd") == EPERM || get(report, "open_passwd") == EACCES,
     "cannot open /etc/passwd (%ld)", get(report, "open_passwd"));
  if (get(report, "landlocked") == 1) {
    is_int(get(report, "open_zone"), 0, "may read a time zone file (Landlock)");
  } else {
    ok(get(report, "open_zone") != 0, "without Landlock, opens nothing, time zones included");
  }
  ok(get(report, "open_zone_write") != 0, "cannot open a time zone file for writing");
  ok(get(report, "create") != 0, "cannot create a file");
  is_int(get(report, "socket"), EPERM, "cannot make a socket");
  is_int(get(report, "fork"), EPERM, "cannot fork");
  is_int(get(report, "execve"), EPERM, "cannot exec");
  is_int(get(report, "kill"), EPERM, "cannot signal its parent");
  is_int(get(report, "malloc"), 1, "manages its own memory");
  unlink("/tmp/baton-confine-test");
  return tap_done();
}
