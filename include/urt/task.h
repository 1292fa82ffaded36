/*
 * urt/task.h — tasks and their submission.
 *
 * A task is an intrusive struct: the caller embeds struct urt_task in its own
 * object (zero allocation), fills it with urt_task_init() and submits it.
 * urt_spawn() is the convenience form: it takes a task from a per-thread cache
 * (no malloc on the hot path) and returns it to the cache after it ran.
 *
 * Lifecycle of an embedded task (numbered rules, libuv style):
 *  1. The caller initialises it (urt_task_init) and owns it until submission.
 *  2. From a successful urt_task_submit() until its fn returns
 *     URT_TASK_DONE or its cancel callback is called, the task belongs to the
 *     runtime: do not modify, resubmit or free it.
 *  3. fn may free or reuse the task's memory before returning URT_TASK_DONE;
 *     the runtime does not touch the task after fn returns URT_TASK_DONE.
 *  4. fn returning URT_TASK_YIELD gives up the worker: the task is queued
 *     again (behind the worker's other runnable work) and fn is called again later.
 *  5. If the task is cancelled (runtime destroyed with URT_SHUTDOWN_CANCEL,
 *     a cancelled job), its cancel callback (if any) is called exactly once
 *     instead of fn, and the task is the caller's again from that call on.
 *  6. A failed submit (-errno) leaves the task with the caller; neither fn nor
 *     cancel will be called.
 */
#ifndef URT_TASK_H
#define URT_TASK_H

#include <urt/common.h>

#ifdef __cplusplus
extern "C" {
#endif

enum urt_task_result {
    URT_TASK_DONE = 0,  /* finished: the runtime forgets the task */
    URT_TASK_YIELD = 1, /* run me again later (re-queued on this worker) */
};

struct urt_task;
struct urt_job;
struct urt_lane;

typedef enum urt_task_result urt_task_fn(struct urt_task *task, void *arg);
typedef void urt_task_cancel_fn(struct urt_task *task, void *arg);

/* Runtime-private part of a task: do not touch. */
struct urt_task_private {
    struct urt_task *_Atomic next; /* intrusive link (inbox, sticky queue, free list) */
    struct urt_job *job;           /* owning job, or NULL */
    struct urt_lane *lane;         /* owning lane, or NULL */
    uint64_t enqueue_ns;           /* submission stamp (only when timing is on) */
    uint64_t id;                   /* sequence for tracing (only when timing is on) */
    uint32_t flags;                /* the runtime's own task flags (internal: sched/core/sched.h TASK_*) */
    uint32_t submit_flags;         /* the URT_SUBMIT_* flags of the submission */
};

struct urt_task {
    urt_task_fn *fn;
    void *arg;
    urt_task_cancel_fn *cancel; /* optional: called instead of fn if the task is cancelled */
    struct urt_task_private priv;
};

/* Submission flags. */
#define URT_SUBMIT_URGENT 0x1u /* place on a suspended worker if there is one, and wake it */
#define URT_SUBMIT_LOCAL 0x2u  /* worker only: run on this worker and nowhere else (as
                                  urt_task_submit_to the calling worker; -EINVAL from another
                                  thread, or with URT_SUBMIT_URGENT) */
#define URT_SUBMIT_BLOCK 0x4u  /* with a pending-task limit: block instead of failing with -EAGAIN */
#define URT_SUBMIT_FLAGS_ALL 0x7u

/* Initialises task to run fn(task, arg). cancel is cleared. Any thread. */
URT_API void urt_task_init(struct urt_task *task, urt_task_fn *fn, void *arg);

/* Submits an initialised task. Placement: from a worker, its own LIFO slot,
 * to run next, the slot's previous task going to its deque, where other
 * workers may steal it (lifo_slot false: the deque at once; urt/config.h);
 * from another thread, the inbox of that thread's preferred worker
 * (assigned round robin on its first submission; round robin per
 * submission with use_preferred_worker_for_current_thread false);
 * URT_SUBMIT_URGENT: a suspended worker, woken. Returns 0, -EINVAL (NULL rt,
 * task or task->fn, unknown flags), -ESHUTDOWN (runtime is being destroyed),
 * or -EAGAIN (pending-task limit reached, urt/admission.h). Any thread. */
URT_API int urt_task_submit(urt_runtime *rt, struct urt_task *task, unsigned flags);

/* Runs fn(task, arg) on a worker, with a task from the runtime's cache;
 * cancel (may be NULL) is called instead if the task is cancelled. Same
 * returns as urt_task_submit (NULL fn instead of task), plus -ENOMEM. Any
 * thread. */
URT_API int urt_spawn(urt_runtime *rt, urt_task_fn *fn, void *arg, unsigned flags);
URT_API int urt_spawn_ex(urt_runtime *rt, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                         unsigned flags);

/* Index of the calling worker of rt (0..workers-1), or -1 when the calling
 * thread is not one of rt's workers. Any thread. */
URT_API int urt_current_worker(const urt_runtime *rt);

/* Affinity: for data owned per worker or per NUMA node.
 *
 * urt_task_submit_to / urt_spawn_to run the task on worker `worker` (the
 * argument after rt, where the _at forms take the time)
 * (0..workers-1) and nowhere else, also after it yields: it goes to that
 * worker's sticky queue, which is never stolen, so tasks sent to one worker never run concurrently
 * with each other and may share that worker's data without atomics. Same
 * returns as urt_task_submit / urt_spawn_ex (admission included), plus
 * -EINVAL for a worker out of range or with URT_SUBMIT_URGENT or
 * URT_SUBMIT_LOCAL. Any thread. */
URT_API int urt_task_submit_to(urt_runtime *rt, uint32_t worker, struct urt_task *task, unsigned flags);
URT_API int urt_spawn_to(urt_runtime *rt, uint32_t worker, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                         unsigned flags);
/* The NUMA node worker `worker` is placed on (-1: placement none), or
 * -EINVAL (worker out of range). Any thread. */
URT_API int urt_worker_node(const urt_runtime *rt, uint32_t worker);
/* A worker placed on NUMA node `node` (round robin over that node's workers:
 * pass it to urt_task_submit_to), or -EINVAL when none is. Any thread. */
URT_API int urt_node_worker(urt_runtime *rt, int node);

/* Timed submission: runs task (or fn) at or after due_ns (urt_now_ns()
 * clock) on a worker (the caller's if it is one, else as urt_task_submit
 * places it), through that worker's one timer facility (the ring's, which
 * also serves urt_io_sleep, urt/io.h); when due, the task is submitted from
 * that worker with flags (URT_SUBMIT_LOCAL: it runs there). The time is the
 * argument after rt, where the _to forms take the worker. Flags and returns
 * as urt_task_submit / urt_spawn_ex (-EINVAL, -ESHUTDOWN, -EAGAIN, -ENOMEM);
 * with max_pending_tasks the task is pending from the call on. A due time in
 * the past runs at once. At destroy, URT_SHUTDOWN_DRAIN waits for the timed
 * tasks and runs them at their time; URT_SHUTDOWN_CANCEL calls the cancel
 * callback of those not yet due. Any thread. */
URT_API int urt_task_submit_at(urt_runtime *rt, uint64_t due_ns, struct urt_task *task, unsigned flags);
URT_API int urt_spawn_at(urt_runtime *rt, uint64_t due_ns, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                         unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
