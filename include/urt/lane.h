/*
 * urt/lane.h — lanes: serialization domains.
 *
 * The tasks of a lane run one at a time, in submission order (the order in
 * which the submissions returned, for one submitting thread; any order for
 * submissions that overlap), on the worker that currently owns the lane, and
 * are never stolen. A task of a lane that yields (URT_TASK_YIELD) keeps its
 * place: the lane's next task runs only after it finished. The lane's owner
 * is chosen when the lane becomes active (its pending count goes from 0 to
 * 1) by the placement rules of urt_task_submit (on a worker balanced with
 * lane_balance, urt/config.h; from another thread its preferred worker, as
 * for its tasks), and stays until the count is 0 again, with
 * one exception: between two batches of its tasks (never while one runs,
 * never while its head task has yielded) a worker that owns two or more
 * busy lanes hands one to an idle peer (suspended, or spinning with nothing
 * to run) that owns fewer, so an idle
 * worker gets work that could not be stolen (counted in the statistics as
 * lanes_moved). Lanes made by urt_lane_create_on never move.
 *
 * Lifecycle (numbered rules):
 *  1. urt_lane_create() allocates a lane (once per lane, not per task).
 *  2. Tasks are submitted with urt_lane_submit()/urt_lane_spawn() from any
 *     thread; the task rules of urt/task.h apply.
 *  3. urt_lane_destroy() frees the lane once its pending count is 0; called
 *     from a thread that is not a worker it waits (yielding the CPU) for the
 *     lane's tasks to finish; from a worker it fails with -EBUSY instead.
 *     No submission may race with it: one that starts while destroy waits is
 *     refused with -EINVAL ("being destroyed"); after destroy returned the
 *     lane's memory is gone and using the handle is undefined behaviour (it
 *     cannot be detected). Destroying NULL is a no-op.
 *  4. At runtime destroy (cancel mode) the lane's queued tasks are cancelled
 *     like any queued task; destroy the lanes after the runtime is destroyed
 *     or drained.
 */
#ifndef URT_LANE_H
#define URT_LANE_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_lane urt_lane;

/* Creates a lane of rt. Returns 0 and *out, -EINVAL (NULL rt or out) or
 * -ENOMEM. Any thread. */
URT_API int urt_lane_create(urt_runtime *rt, urt_lane **out);

/* Creates a lane pinned to worker `worker` (0..workers-1) for its lifetime:
 * its tasks always run on that worker (a connection's or a partition's lane
 * next to the data that worker owns; urt_task_submit_to in urt/task.h).
 * URT_SUBMIT_URGENT does not move it. Returns as urt_lane_create, plus
 * -EINVAL for a worker out of range. Any thread. */
URT_API int urt_lane_create_on(urt_runtime *rt, uint32_t worker, urt_lane **out);

/* Queues task on lane (flags as urt_task_submit: URT_SUBMIT_URGENT prefers a
 * suspended worker when the lane becomes active). One exchange and one
 * compare-and-swap, no lock, no allocation. Returns 0, -EINVAL (NULL lane,
 * task or task->fn, unknown flags, the lane is being destroyed: rule 3) or
 * -ESHUTDOWN. Any thread. */
URT_API int urt_lane_submit(urt_lane *lane, struct urt_task *task, unsigned flags);

/* The same with a task from the runtime's cache (NULL fn instead of task;
 * plus -ENOMEM). Any thread. */
URT_API int urt_lane_spawn(urt_lane *lane, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                           unsigned flags);

/* Tasks of the lane submitted and not finished (a snapshot). Any thread. */
URT_API uint32_t urt_lane_pending(const urt_lane *lane);

/* Frees the lane (rule 3). Returns 0, -EBUSY (from a worker, tasks pending),
 * -EINVAL (a lane that urt_lane_create did not make). Any thread but the
 * lane's own tasks; it waits only on threads that are not workers. */
URT_API int urt_lane_destroy(urt_lane *lane);

#ifdef __cplusplus
}
#endif

#endif
