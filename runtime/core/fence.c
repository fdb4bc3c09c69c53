/*
 * The fence board (see fence.h): one page of a memfd; its first word is
 * the published moment, written and read with atomic operations.
 */
#define _GNU_SOURCE
#include "fence.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BOARD_SIZE 4096
#define BOARD_FD_MIN 64 /* out of the way of the stdio a child gets */

/* This process's board: created by the conductor, or attached by a
 * containment process. One per process by design (fence.h). */
static uint64_t *board;
static int board_fd = -1;
static const void *board_owner;

int bt_fence_create(void) {
  int fd, hi;
  void *p;
  if (board_fd >= 0) return board_fd;
  fd = memfd_create("baton-fence", 0);
  if (fd < 0) return uv_translate_sys_error(errno);
  hi = fcntl(fd, F_DUPFD, BOARD_FD_MIN);
  close(fd);
  if (hi < 0) return uv_translate_sys_error(errno);
  if (ftruncate(hi, BOARD_SIZE) < 0) {
    int err = uv_translate_sys_error(errno);
    close(hi);
    return err;
  }
  p = mmap(NULL, BOARD_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, hi, 0);
  if (p == MAP_FAILED) {
    int err = uv_translate_sys_error(errno);
    close(hi);
    return err;
  }
  board = p;
  __atomic_store_n(board, BT_FENCE_NONE, __ATOMIC_SEQ_CST);
  board_fd = hi;
  return hi;
}

void bt_fence_own(const void *owner) {
  board_owner = owner;
}

void bt_fence_publish(const void *owner, uint64_t until_ms) {
  if (board && board_fd >= 0 && owner == board_owner)
    __atomic_store_n(board, until_ms, __ATOMIC_SEQ_CST);
}

int bt_fence_attach(int fd) {
  void *p = mmap(NULL, BOARD_SIZE, PROT_READ, MAP_SHARED, fd, 0);
  int err = p == MAP_FAILED ? uv_translate_sys_error(errno) : 0;
  close(fd);
  if (err) return err;
  board = p;
  return 0;
}

uint64_t bt_fence_until(void) {
  return board ? __atomic_load_n(board, __ATOMIC_SEQ_CST) : BT_FENCE_NONE;
}

uint64_t bt_fence_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}
