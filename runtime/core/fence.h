/*
 * The fence board: until when this node's runs may go on, as one word of
 * shared memory that every process of the node can read.
 *
 * A node's runs are fenced by its session lease: once the lease may have
 * expired on etcd, another node may start the same run, so this node's copy
 * must be stopped first. The conductor's lease keepalive (etcd.c) knows the
 * moment: the send time of its last acknowledged renewal + TTL - a safety
 * margin, on CLOCK_MONOTONIC. It publishes that moment on the board after
 * every renewal, and 0 once the lease is lost. Each worker's containment
 * process (contain.c) reads the board and kills its run's processes when
 * the moment passes, whether or not the conductor is still running: a
 * conductor that is stopped (SIGSTOP), stalled or dead cannot hold its
 * runs past its lease.
 *
 * The board is a memfd created by the conductor without close-on-exec at a
 * high descriptor number, so the processes it spawns inherit it; its number
 * goes to them in BATON_FENCE_FD. One board per process (the conductor's);
 * readers map it read-only.
 */
#ifndef BATON_FENCE_H
#define BATON_FENCE_H

#include <stdint.h>

/* No deadline: runs may go on (no board, or nothing published yet). */
#define BT_FENCE_NONE UINT64_MAX

/** Creates this process's board (once; later calls return its fd).
 * Returns the descriptor (>= 0) or a negative BT_E* code. */
int bt_fence_create(void);

/** Makes owner (any pointer: the conductor's current lease keepalive) the
 * one publisher of this process's board. */
void bt_fence_own(const void *owner);

/** Publishes until_ms (CLOCK_MONOTONIC milliseconds; 0 = fenced now) on
 * this process's board, if it has one and owner owns it: a keepalive of a
 * session that was replaced can no longer move the board. */
void bt_fence_publish(const void *owner, uint64_t until_ms);

/** Maps the board whose descriptor is fd (read-only) and closes fd.
 * Returns 0 or a negative BT_E* code. */
int bt_fence_attach(int fd);

/** The published moment of the board this process created or attached,
 * or BT_FENCE_NONE. */
uint64_t bt_fence_until(void);

/** CLOCK_MONOTONIC in milliseconds (the clock of uv_hrtime). */
uint64_t bt_fence_now_ms(void);

#endif
