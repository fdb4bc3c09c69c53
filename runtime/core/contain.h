/*
 * Containment of a worker's processes (docs/architecture.md, "The pieces":
 * nothing user code does may outlive its run).
 *
 * `baton worker` starts in bt_contain_worker(), before any Lua. The process
 * becomes the worker's *containment process*: it forks the worker (which
 * returns from bt_contain_worker and runs lua/baton/worker/main.lua) and
 * stays its parent, as a child subreaper (PR_SET_CHILD_SUBREAPER), so every
 * process a run starts stays below it, even one whose parent exited
 * (`sh -c "daemon &"`) or that made its own session. It runs no Lua and
 * only waits for signals, so no job can stall it, and it ends every process
 * below it:
 *
 *   - when the worker exits (a crash, a retirement, the end of its channel);
 *   - on SIGUSR1 from the node (the run is stopped: timeout, replace, the
 *     node stopping or fencing itself), and when the node dies (it is the
 *     parent-death signal), even by SIGKILL: then the worker, whose channel
 *     the death closed, gets a second to write the successes the node had
 *     not recorded yet and exit by itself (its run's processes are killed
 *     at once);
 *   - when the node's fence board (fence.h) says the node's lease may have
 *     expired: the run is fenced even if the node is stopped or stalled;
 *
 * and only then exits, with the worker's exit status (or dies of the same
 * signal), so the node's wait for the process's exit is the proof that the
 * run's processes are gone. SIGTERM is passed on to every process below it
 * (cooperative stop: ctx:cancelled() in the worker, and the job's own
 * children get it too). BT_CONTAIN_SWEEP from the worker, at the end of
 * each run, kills every process below it but the worker and answers with
 * BT_CONTAIN_SWEPT once they are gone.
 *
 * A run's memory limit (BATON_RUN_MEMORY, bytes) is held for the worker
 * and every process below it: by the kernel in a cgroup of the worker's
 * own, made below BATON_CGROUP (cgroup.h), or, without one, by this
 * process, which adds up their resident memory every 50 ms and at the end
 * of each run. A run over its limit has all its processes killed (the
 * worker too), and this process exits with BT_CONTAIN_OOM. The worker and
 * the processes of its runs get an OOM score of at least 500, so that the
 * kernel's OOM killer takes them before the node.
 *
 * Environment: BATON_NODE_PID (the node; if it is gone already, the worker
 * is not started), BATON_FENCE_FD (the node's fence board, optional),
 * BATON_RUN_MEMORY and BATON_CGROUP (optional; the worker, and so the
 * run's processes, keep the first: their limit).
 */
#ifndef BATON_CONTAIN_H
#define BATON_CONTAIN_H

#include <signal.h>

/* The worker asks for a sweep, and the answer (real-time signals, out of
 * the way of anything a job may wait for). */
#define BT_CONTAIN_SWEEP (SIGRTMIN + 2)
#define BT_CONTAIN_SWEPT (SIGRTMIN + 3)

/* The exit status of a containment process whose run went over its memory
 * limit (lua/baton/node/runs.lua: "out of memory"). */
#define BT_CONTAIN_OOM 86

/** Starts the containment process and the worker below it. Returns 0 in
 * the worker; never returns in the containment process, which exits as
 * described above. Returns a negative BT_E* code if containment cannot be
 * set up (the caller should not run a worker then). */
int bt_contain_worker(void);

#endif
