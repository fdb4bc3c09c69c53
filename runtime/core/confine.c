/*
 * Confinement of a sandbox process (see confine.h): prctl, rlimits and
 * descriptors first; then Landlock (when the kernel has it) and a seccomp
 * filter built with libseccomp.
 */
#define _GNU_SOURCE
#include "confine.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FIRST_FD 4 /* 0, 1, 2 and the channel (3) stay */

static int err_of(int e) {
  return e > 0 ? -e : BT_EUNKNOWN;
}

/* Closes every descriptor from `from` up, keep excepted. */
static void close_from(int from, int keep) {
  struct rlimit rl;
  long fd, max;
  if (keep < from) keep = -1;
#ifdef SYS_close_range
  if (keep < 0) {
    if (syscall(SYS_close_range, from, ~0U, 0) == 0) return;
  } else if ((keep == from || syscall(SYS_close_range, from, keep - 1, 0) == 0) &&
             syscall(SYS_close_range, keep + 1, ~0U, 0) == 0) {
    return;
  }
#endif
  max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long) rl.rlim_cur : 65536;
  for (fd = from; fd < max; fd++)
    if (fd != keep) close((int) fd);
}

static int set_limit(int res, rlim_t n) {
  struct rlimit rl = {n, n};
  if (getrlimit(res, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n) n = rl.rlim_max;
  rl.rlim_cur = rl.rlim_max = n;
  return setrlimit(res, &rl) == 0 ? 0 : err_of(errno);
}

int bt_confine_process(int keep_fd) {
  int e;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return err_of(errno);
  if (getppid() == 1) return BT_ECHILD; /* the parent is gone already */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return err_of(errno);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return err_of(errno);
  if ((e = set_limit(RLIMIT_CORE, 0)) || (e = set_limit(RLIMIT_NPROC, 0)) ||
      (e = set_limit(RLIMIT_NOFILE, 64)))
    return e;
  close_from(FIRST_FD, keep_fd);
  return 0;
}

/* ---- Landlock ----------------------------------------------------------- */

/* Everything about the file system that this kernel's Landlock can deny. */
static uint64_t fs_rights(int abi) {
  uint64_t r = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
               LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
               LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
               LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
               LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |
               LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
               LANDLOCK_ACCESS_FS_MAKE_SYM;
#ifdef LANDLOCK_ACCESS_FS_REFER
  if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
#ifdef LANDLOCK_ACCESS_FS_IOCTL_DEV
  if (abi >= 5) r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
#endif
  (void) abi;
  return r;
}

/* Restricts the file system to reading below dir. Returns 1 when done, 0
 * when this kernel has no Landlock (or dir cannot be opened), < 0 on
 * error. */
static int landlock(const char *dir) {
#if defined(SYS_landlock_create_ruleset) && defined(SYS_landlock_add_rule) && \
    defined(SYS_landlock_restrict_self)
  struct landlock_ruleset_attr ra;
  struct landlock_path_beneath_attr pb;
  long abi;
  int rs, fd, e = 0;
  abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) return 0;
  memset(&ra, 0, sizeof ra);
  ra.handled_access_fs = fs_rights((int) abi);
  rs = (int) syscall(SYS_landlock_create_ruleset, &ra, sizeof ra, 0);
  if (rs < 0) return 0;
  if (dir && (fd = open(dir, O_PATH | O_CLOEXEC | O_DIRECTORY)) >= 0) {
    memset(&pb, 0, sizeof pb);
    pb.allowed_access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
    pb.parent_fd = fd;
    if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) e = err_of(errno);
    close(fd);
  }
  if (!e && syscall(SYS_landlock_restrict_self, rs, 0) != 0) e = err_of(errno);
  close(rs);
  return e ? e : 1;
#else
  (void) dir;
  return 0;
#endif
}

/* ---- seccomp ------------------------------------------------------------ */

/* What a confined sandbox may always do: its descriptors, its memory, the
 * clock, signals it gets, and exit. (Names the architecture lacks are
 * skipped.) */
static const char *const always[] = {
  "read", "readv", "pread64", "write", "writev", "close", "lseek", "fstat",
  "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
  "rt_sigreturn", "rt_sigprocmask", "sigaltstack", "restart_syscall",
  "futex", "sched_yield", "getrandom", "getpid", "gettid",
  "clock_gettime", "clock_getres", "gettimeofday", "time",
  "exit", "exit_group", NULL
};

static int allow(scmp_filter_ctx c, const char *name, unsigned n, const struct scmp_arg_cmp *args) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return 0; /* not on this architecture */
  return seccomp_rule_add_array(c, SCMP_ACT_ALLOW, nr, n, args);
}

int bt_confine_syscalls(const char *read_dir, int *landlocked) {
  scmp_filter_ctx c;
  struct scmp_arg_cmp a;
  int i, rc = 0, ll;
  /* (blocking reads and writes on the channel from now on) */
  int fl = fcntl(3, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(3, F_SETFL, fl & ~O_NONBLOCK);
  ll = landlock(read_dir);
  if (ll < 0) return ll;
  *landlocked = ll;
  c = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (!c) return BT_ENOMEM;
  for (i = 0; always[i] && !rc; i++) rc = allow(c, always[i], 0, NULL);
  /* stat of a descriptor, as glibc spells fstat (path "", AT_EMPTY_PATH) */
  a = (struct scmp_arg_cmp) SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH);
  if (!rc) rc = allow(c, "newfstatat", 1, &a);
  a = (struct scmp_arg_cmp) SCMP_A2(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH);
  if (!rc) rc = allow(c, "statx", 1, &a);
  if (ll == 1) {
    /* read-only opens; Landlock keeps them below read_dir */
    a = (struct scmp_arg_cmp) SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC, O_RDONLY);
    if (!rc) rc = allow(c, "openat", 1, &a);
    a = (struct scmp_arg_cmp) SCMP_A1(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC, O_RDONLY);
    if (!rc) rc = allow(c, "open", 1, &a);
  }
  if (!rc) rc = seccomp_load(c);
  seccomp_release(c);
  return rc < 0 ? (rc == -ENOMEM ? BT_ENOMEM : err_of(-rc)) : 0;
}
