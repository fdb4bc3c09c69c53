/*
 * The containment process of a worker (see contain.h). Plain C: it blocks
 * its signals and takes them one at a time with sigtimedwait, so nothing it
 * does runs in a signal handler, and it reads the process table from /proc
 * whenever it must find what is below it.
 */
#define _GNU_SOURCE
#include "contain.h"
#include "err.h"
#include "fence.h"
#include "logfmt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A snapshot of the process table: pid, parent, and whether it still runs
 * (a zombie has exited: it only waits for its parent to reap it). */
typedef struct {
  pid_t pid, ppid;
  int live;
} proc_t;

typedef struct {
  proc_t *p;
  size_t n, cap;
} ptab_t;

static pid_t self_pid, worker_pid, node_pid;
static int worker_status, worker_done;
static ptab_t table; /* reused by every look at /proc */

static void say(bt_log_level_t level, const char *msg, const char *why,
                long killed) {
  char pid[24], n[24];
  bt_log_field_t f[3];
  snprintf(pid, sizeof(pid), "%ld", (long) worker_pid);
  snprintf(n, sizeof(n), "%ld", killed);
  f[0] = (bt_log_field_t){"worker", 6, pid, strlen(pid), 1};
  f[1] = (bt_log_field_t){"processes_killed", 16, n, strlen(n), 1};
  f[2] = (bt_log_field_t){"reason", 6, why, strlen(why), 0};
  bt_log_write(level, msg, strlen(msg), f, 3);
}

/* Reads /proc into t. Processes that vanish while it reads are skipped. */
static void ptab_read(ptab_t *t) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  t->n = 0;
  if (!d) return;
  while ((de = readdir(d)) != NULL) {
    char path[300], buf[512], state;
    const char *rp;
    int fd, ppid;
    ssize_t len;
    if (!isdigit((unsigned char) de->d_name[0])) continue;
    snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
    rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2) continue;
    if (t->n == t->cap) {
      size_t cap = t->cap ? t->cap * 2 : 512;
      proc_t *np = realloc(t->p, cap * sizeof(*np));
      if (!np) break;
      t->p = np;
      t->cap = cap;
    }
    t->p[t->n].pid = (pid_t) atol(de->d_name);
    t->p[t->n].ppid = (pid_t) ppid;
    t->p[t->n].live = state != 'Z' && state != 'X';
    t->n++;
  }
  closedir(d);
}

/* Marks in in[] the processes below this one (not itself): repeated passes
 * over the table until no parent-child link adds one. Returns how many of
 * them still run. */
static size_t below(const ptab_t *t, char *in) {
  size_t i, j, live = 0;
  int grew = 1;
  memset(in, 0, t->n);
  while (grew) {
    grew = 0;
    for (i = 0; i < t->n; i++) {
      if (in[i]) continue;
      if (t->p[i].ppid == self_pid) {
        in[i] = 1;
        grew = 1;
        continue;
      }
      for (j = 0; j < t->n; j++)
        if (in[j] && t->p[j].pid == t->p[i].ppid) {
          in[i] = 1;
          grew = 1;
          break;
        }
    }
  }
  for (i = 0; i < t->n; i++) live += in[i] && t->p[i].live;
  return live;
}

/* Signals every running process below this one but spare (0: none).
 * Returns how many it signalled. */
static long signal_below(ptab_t *t, int sig, pid_t spare) {
  char *in;
  size_t i;
  long n = 0;
  ptab_read(t);
  in = malloc(t->n ? t->n : 1);
  if (!in) return 0;
  below(t, in);
  for (i = 0; i < t->n; i++)
    if (in[i] && t->p[i].live && t->p[i].pid != spare && kill(t->p[i].pid, sig) == 0)
      n++;
  free(in);
  return n;
}

/* Reaps exited children; notes the worker's status. Returns -1 once no
 * child is left, else 0. */
static int reap(void) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      if (p == worker_pid) {
        worker_status = st;
        worker_done = 1;
      }
      continue;
    }
    if (p < 0 && errno == EINTR) continue;
    return p < 0 && errno == ECHILD ? -1 : 0;
  }
}

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Kills every process below this one (the worker and its children
 * included) until none is left, not even a zombie to reap. Returns how
 * many kills it took. */
static long end_all(void) {
  long n = 0, rounds = 0;
  while (reap() == 0) {
    n += signal_below(&table, SIGKILL, 0);
    pause_ms(rounds++ < 50 ? 1 : 10);
    if (rounds == 1000) say(BT_LOG_WARN, "run processes will not die", "still waiting", n);
  }
  return n;
}

/* The children of process pid, from /proc/PID/task/TID/children (one
 * file per thread: a child belongs to the thread that forked it): at most
 * max of them in out. Returns how many there are, or -1 when the files
 * cannot be read (a kernel without CONFIG_PROC_CHILDREN). */
static int children_of(pid_t pid, pid_t *out, int max) {
  char path[64];
  DIR *d;
  struct dirent *de;
  int n = 0;
  snprintf(path, sizeof(path), "/proc/%ld/task", (long) pid);
  d = opendir(path);
  if (!d) return -1;
  while ((de = readdir(d)) != NULL) {
    char file[320], buf[4096], *p, *end;
    int fd;
    ssize_t len;
    if (!isdigit((unsigned char) de->d_name[0])) continue;
    snprintf(file, sizeof(file), "/proc/%ld/task/%s/children", (long) pid, de->d_name);
    fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue; /* the thread ended meanwhile */
      n = -1;
      break;
    }
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len < 0) {
      n = -1;
      break;
    }
    buf[len] = '\0';
    for (p = buf;; p = end) {
      long c = strtol(p, &end, 10);
      if (end == p) break;
      if (n < max) out[n] = (pid_t) c;
      n++;
    }
  }
  closedir(d);
  return n;
}

/* Whether nothing but the worker is below this process, seen without
 * reading the whole process table: the worker has no child, and then this
 * process none but the worker. That covers every descendant, because this
 * process is a subreaper: a descendant whose parent exits becomes its
 * child, at the moment the parent dies. Read in that order, a process the
 * first look missed cannot hide from the second. 0 when unsure. */
static int nothing_below_worker(void) {
  pid_t kids[2];
  if (children_of(worker_pid, kids, 2) != 0) return 0;
  return children_of(self_pid, kids, 2) == 1 && kids[0] == worker_pid;
}

/* Kills every process below this one but the worker, until each of them
 * has exited (the worker's own children then only wait to be reaped by the
 * worker). The worker asks for it at the end of every run; most runs leave
 * nothing, which the quick look finds without reading all of /proc. */
static void sweep(void) {
  long rounds = 0;
  if (nothing_below_worker()) return;
  for (;;) {
    reap();
    if (signal_below(&table, SIGKILL, worker_pid) == 0 || worker_done) break;
    pause_ms(rounds++ < 50 ? 1 : 10);
  }
}

/* Exits the way the worker did: the same status, or the same signal. */
static void exit_as_worker(void) {
  if (worker_done && WIFSIGNALED(worker_status)) {
    int sig = WTERMSIG(worker_status);
    struct rlimit none = {0, 0};
    sigset_t s;
    setrlimit(RLIMIT_CORE, &none);
    signal(sig, SIG_DFL);
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    _exit(128 + sig);
  }
  _exit(worker_done && WIFEXITED(worker_status) ? WEXITSTATUS(worker_status) : 1);
}

static void finish(bt_log_level_t level, const char *msg, const char *why) {
  long n = end_all();
  if (msg) say(level, msg, why, n);
  exit_as_worker();
}

/* The containment loop: sleeps until a signal or the fence moment. */
static void contain(const sigset_t *set) {
  for (;;) {
    struct timespec ts, *tp = NULL;
    siginfo_t info;
    uint64_t until = bt_fence_until(), now = bt_fence_now_ms();
    int sig;
    if (until != BT_FENCE_NONE) {
      uint64_t d;
      if (now >= until)
        finish(BT_LOG_WARN, "run fenced: the node's lease may have expired, so "
               "every process of its run was killed", "lease deadline passed");
      d = until - now;
      if (d > 1000) d = 1000; /* the board may also move to 0 at any time */
      ts.tv_sec = (time_t) (d / 1000);
      ts.tv_nsec = (long) (d % 1000) * 1000000L;
      tp = &ts;
    }
    sig = sigtimedwait(set, &info, tp);
    if (sig < 0) continue; /* the timeout (or EINTR): look at the board */
    if (sig == SIGCHLD) {
      reap();
      if (worker_done) finish(BT_LOG_INFO, NULL, NULL);
    } else if (sig == SIGUSR1) {
      if (node_pid && getppid() != node_pid)
        finish(BT_LOG_WARN, "node gone: every process of its run was killed",
               "the node process exited");
      finish(BT_LOG_INFO, NULL, NULL);
    } else if (sig == BT_CONTAIN_SWEEP) {
      if (info.si_pid != worker_pid) continue;
      sweep();
      if (!worker_done) kill(worker_pid, BT_CONTAIN_SWEPT);
    } else {
      signal_below(&table, SIGTERM, 0);
    }
  }
}

int bt_contain_worker(void) {
  sigset_t set, old;
  const char *np = getenv("BATON_NODE_PID"), *ff = getenv("BATON_FENCE_FD");
  pid_t pid;

  self_pid = getpid();
  node_pid = np ? (pid_t) atol(np) : 0;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, BT_CONTAIN_SWEEP);
  if (sigprocmask(SIG_BLOCK, &set, &old) < 0) return uv_translate_sys_error(errno);
  signal(SIGPIPE, SIG_IGN);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 || prctl(PR_SET_PDEATHSIG, SIGUSR1) < 0)
    return uv_translate_sys_error(errno);
  if (node_pid && getppid() != node_pid) _exit(1); /* the node died already */
  if (ff && *ff) {
    int e = bt_fence_attach(atoi(ff));
    if (e) return e;
  }
  pid = fork();
  if (pid < 0) return uv_translate_sys_error(errno);
  if (pid == 0) {
    /* The worker: its own process group, so that the node's signals to the
     * containment process's group reach only that; dies with it. */
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self_pid) _exit(1);
    setenv("BATON_CONTAINED", "1", 1);
    return 0;
  }
  worker_pid = pid;
  /* The channel (fd 3) and stdin are the worker's: when it dies, the node
   * must see its channel end. */
  close(3);
  close(0);
  contain(&set);
  return 0; /* not reached */
}
