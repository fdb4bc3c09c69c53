/*
 * The containment process of a worker (see contain.h). Plain C: it blocks
 * its signals and takes them one at a time with sigtimedwait, so nothing it
 * does runs in a signal handler, and it reads the process table from /proc
 * whenever it must find what is below it.
 */
#define _GNU_SOURCE
#include "contain.h"
#include "cgroup.h"
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

/* The run's memory limit (BATON_RUN_MEMORY, bytes; 0: none) and who holds
 * it: the kernel, in the worker's cgroup cg_dir (made in BATON_CGROUP, the
 * node's: cgroup.h), or else this process, which adds up the resident
 * memory of every process below it every WATCH_MS (watching). over_limit:
 * the run went over it. */
#define WATCH_MS 50
static uint64_t mem_limit;
static char cg_dir[4096];
static int watching, over_limit;

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

/* A number from the /proc file path: the field after the first occurrence
 * of key (statm: key "" and the second field; status: "VmHWM:"), times
 * unit. 0 when the file is gone (the process exited). */
static uint64_t proc_number(const char *path, const char *key, int skip, uint64_t unit) {
  char buf[2048];
  const char *p;
  unsigned long long v;
  ssize_t len;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  len = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (len <= 0) return 0;
  buf[len] = '\0';
  p = *key ? strstr(buf, key) : buf;
  if (!p) return 0;
  p += strlen(key);
  while (skip-- > 0) {
    p += strspn(p, " \t");
    p += strcspn(p, " \t");
  }
  if (sscanf(p, " %llu", &v) != 1) return 0;
  return (uint64_t) v * unit;
}

/* The resident memory of process pid, in bytes. */
static uint64_t rss_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%ld/statm", (long) pid);
  return proc_number(path, "", 1, (uint64_t) sysconf(_SC_PAGESIZE));
}

/* The resident memory of every process below this one, added up. They are
 * found walking down the children files from here (children_of), or from
 * the whole process table where those cannot be read or the tree is large.
 * (Pages that processes share count once for each: the sum is higher than
 * what they hold together, never lower.) */
#define WALK_MAX 1024
static uint64_t rss_below(void) {
  static pid_t todo[WALK_MAX];
  size_t n = 0, seen = 0;
  uint64_t sum = 0;
  todo[n++] = self_pid;
  while (n > 0) {
    pid_t pid = todo[--n];
    int k;
    if (pid != self_pid) sum += rss_of(pid);
    k = children_of(pid, todo + n, (int) (WALK_MAX - n));
    if (k < 0 || n + (size_t) k > WALK_MAX || ++seen > WALK_MAX) {
      char *in;
      size_t i;
      ptab_read(&table);
      in = malloc(table.n ? table.n : 1);
      if (!in) return sum;
      below(&table, in);
      for (sum = 0, i = 0; i < table.n; i++)
        if (in[i] && table.p[i].live) sum += rss_of(table.p[i].pid);
      free(in);
      return sum;
    }
    n += (size_t) k;
  }
  return sum;
}

/* Whether the run went over its memory limit: the kernel found its cgroup
 * out of memory; or, watching, its processes hold more than the limit
 * together, or (at_end: the worker asks for its sweep) the worker did at
 * its peak, which a look every WATCH_MS may have missed. */
static int over_memory(int at_end) {
  if (!mem_limit) return 0;
  if (cg_dir[0]) return bt_cgroup_oom_events(cg_dir) > 0;
  if (rss_below() > mem_limit) return 1;
  if (at_end && !worker_done) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/status", (long) worker_pid);
    return proc_number(path, "VmHWM:", 0, 1024) > mem_limit;
  }
  return 0;
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

/* Ends every process below, then exits as the worker did; or, when the
 * run went over its memory limit, with BT_CONTAIN_OOM (the node records
 * the run failed "out of memory"). */
static void finish(bt_log_level_t level, const char *msg, const char *why) {
  long n = end_all();
  if (cg_dir[0]) {
    if (mem_limit && bt_cgroup_oom_events(cg_dir) > 0) over_limit = 1;
    bt_cgroup_remove(cg_dir);
  }
  if (msg) say(level, msg, why, n);
  if (over_limit) {
    char text[96];
    snprintf(text, sizeof(text), "over its memory limit of %llu bytes (%s)",
             (unsigned long long) mem_limit, cg_dir[0] ? "cgroup" : "watched");
    say(BT_LOG_WARN, "run out of memory: every process of its run was killed", text, n);
    _exit(BT_CONTAIN_OOM);
  }
  exit_as_worker();
}

static void out_of_memory(void) {
  over_limit = 1;
  finish(BT_LOG_INFO, NULL, NULL);
}

/* The node died. Its worker may hold a success the node had not written
 * yet (lua/baton/worker/main.lua, handoff): it writes it, guarded by the
 * run's fence, and exits once it reads the end of its channel, which the
 * node's death closed. So every other process below is killed at once,
 * and the worker gets GONE_GRACE_MS to exit by itself before it is killed
 * too (a run in progress ends at once: the worker exits at the end of its
 * channel whatever it is doing). */
#define GONE_GRACE_MS 1000
static void node_gone(void) {
  uint64_t deadline = bt_fence_now_ms() + GONE_GRACE_MS;
  signal_below(&table, SIGKILL, worker_pid);
  while (!worker_done && bt_fence_now_ms() < deadline) {
    reap();
    if (!worker_done) pause_ms(5);
  }
  finish(BT_LOG_WARN, "node gone: every process of its run was killed", "the node process exited");
}

/* The containment loop: sleeps until a signal or the fence moment. */
static void contain(const sigset_t *set) {
  for (;;) {
    struct timespec ts, *tp = NULL;
    siginfo_t info;
    uint64_t until = bt_fence_until(), now = bt_fence_now_ms(), d = UINT64_MAX;
    int sig;
    if (until != BT_FENCE_NONE) {
      if (now >= until)
        finish(BT_LOG_WARN, "run fenced: the node's lease may have expired, so "
               "every process of its run was killed", "lease deadline passed");
      d = until - now;
      if (d > 1000) d = 1000; /* the board may also move to 0 at any time */
    }
    if (watching && d > WATCH_MS) d = WATCH_MS;
    if (d != UINT64_MAX) {
      ts.tv_sec = (time_t) (d / 1000);
      ts.tv_nsec = (long) (d % 1000) * 1000000L;
      tp = &ts;
    }
    sig = sigtimedwait(set, &info, tp);
    if (sig < 0) {
      /* the timeout (or EINTR): look at the board, and the run's memory */
      if (watching && over_memory(0)) out_of_memory();
      continue;
    }
    if (sig == SIGCHLD) {
      reap();
      if (worker_done) finish(BT_LOG_INFO, NULL, NULL);
    } else if (sig == SIGUSR1) {
      if (node_pid && getppid() != node_pid) node_gone();
      finish(BT_LOG_INFO, NULL, NULL);
    } else if (sig == BT_CONTAIN_SWEEP) {
      if (info.si_pid != worker_pid) continue;
      if (over_memory(1)) out_of_memory();
      sweep();
      if (!worker_done) kill(worker_pid, BT_CONTAIN_SWEPT);
    } else {
      signal_below(&table, SIGTERM, 0);
    }
  }
}

/* Sets up the run's memory limit (before the worker is forked): a cgroup
 * where the node has one for its workers, else watching. */
static void limit_memory(void) {
  const char *m = getenv("BATON_RUN_MEMORY"), *base = getenv("BATON_CGROUP");
  char *end;
  unsigned long long v;
  if (!m || !*m) return;
  errno = 0;
  v = strtoull(m, &end, 10);
  if (errno || *end || v == 0) return;
  mem_limit = (uint64_t) v;
  if (base && *base) {
    int e = bt_cgroup_create(base, (long) self_pid, mem_limit, cg_dir, sizeof(cg_dir));
    if (e == 0) return;
    cg_dir[0] = '\0';
    say(BT_LOG_WARN, "cannot make a cgroup for the run's memory limit: watching it instead",
        bt_strerror(e), 0);
  }
  watching = 1;
}

/* The worker and every process of its runs are the first the OOM killer
 * takes, before the node (docs/security.md, "Limits"): a process may
 * raise its own score. */
#define WORKER_OOM_SCORE_ADJ 500
static void raise_oom_score(void) {
  char buf[16];
  int fd = open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
  ssize_t len;
  if (fd < 0) return;
  len = read(fd, buf, sizeof(buf) - 1);
  if (len > 0) {
    buf[len] = '\0';
    if (atoi(buf) < WORKER_OOM_SCORE_ADJ) {
      int n = snprintf(buf, sizeof(buf), "%d", WORKER_OOM_SCORE_ADJ);
      if (lseek(fd, 0, SEEK_SET) == 0 && write(fd, buf, (size_t) n) < 0) {
        /* (not allowed: left as it is) */
      }
    }
  }
  close(fd);
}

int bt_contain_worker(void) {
  sigset_t set, old;
  const char *np = getenv("BATON_NODE_PID"), *ff = getenv("BATON_FENCE_FD");
  pid_t pid;
  int go[2] = {-1, -1};

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
  limit_memory();
  /* (the worker waits for its cgroup: go) */
  if (cg_dir[0] && pipe2(go, O_CLOEXEC) < 0) {
    bt_cgroup_remove(cg_dir);
    return uv_translate_sys_error(errno);
  }
  pid = fork();
  if (pid < 0) {
    if (cg_dir[0]) bt_cgroup_remove(cg_dir);
    return uv_translate_sys_error(errno);
  }
  if (pid == 0) {
    /* The worker: its own process group, so that the node's signals to the
     * containment process's group reach only that; dies with it. */
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self_pid) _exit(1);
    raise_oom_score();
    if (go[0] >= 0) {
      char c;
      ssize_t r;
      close(go[1]);
      do r = read(go[0], &c, 1); while (r < 0 && errno == EINTR);
      if (r != 1) _exit(1);
      close(go[0]);
    }
    setenv("BATON_CONTAINED", "1", 1);
    unsetenv("BATON_CGROUP");
    return 0;
  }
  worker_pid = pid;
  if (go[0] >= 0) {
    int e = bt_cgroup_attach(cg_dir, pid);
    if (e) {
      bt_cgroup_remove(cg_dir);
      cg_dir[0] = '\0';
      watching = 1;
      say(BT_LOG_WARN, "cannot move the worker into its cgroup: watching its memory instead",
          bt_strerror(e), 0);
    }
    close(go[0]);
    if (write(go[1], "g", 1) != 1) {
      /* (the worker died already: its SIGCHLD ends this process) */
    }
    close(go[1]);
  }
  /* The channel (fd 3) and stdin are the worker's: when it dies, the node
   * must see its channel end. */
  close(3);
  close(0);
  contain(&set);
  return 0; /* not reached */
}
