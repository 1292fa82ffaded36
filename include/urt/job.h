/*
 * urt/job.h — jobs and hybrid scheduling.
 *
 * A job is a set of tasks that grows while it runs: its tasks submit more
 * tasks of the same job. It counts its live tasks; when the count reaches
 * zero (and the job was closed) it ends exactly once with its teardown: the
 * readiness predicate (if any) is checked, the completion callback runs —
 * in place on the worker that finished the last task (default), or in a
 * teardown task (URT_JOB_TEARDOWN_TASK) — and the job's runtime resources
 * are released. The callback's status is 0, -ECANCELED (urt_job_cancel, or
 * runtime destroyed in cancel mode) or -ETIME (the deadline passed).
 *
 * A cancelled job (or one past its deadline) runs none of its remaining
 * tasks: each one's cancel callback runs instead; tasks already running can
 * see urt_job_cancelled(). Submitting to a cancelled job fails with
 * -ECANCELED.
 *
 * Hybrid scheduling: a job whose work_level (0..60) is at or below the
 * runtime's lightweight_job_level runs serially on one worker through its own
 * lane (never stolen); heavier jobs' tasks use the ordinary queues and
 * stealing. The default work level is URT_WORK_LEVEL_MAX (heavy).
 *
 * Lifecycle of a urt_job (numbered rules):
 *  1. urt_job_create() returns a job with one handle (the caller's) and open
 *     for submissions from any thread.
 *  2. Tasks are submitted with urt_job_submit()/urt_job_spawn(): from any
 *     thread until urt_job_close(), and from the job's own running tasks at
 *     any time (their count keeps the job alive).
 *  3. urt_job_close() says no submission will come from outside the job's
 *     tasks: from then on the job ends when its count reaches 0. A job that
 *     is never closed never ends.
 *  4. urt_job_wait()/urt_job_poll() tell whether it ended and with what
 *     status, as long as the handle is held.
 *  5. urt_job_release() gives the handle back (the job goes on and ends as
 *     usual); the memory is freed once the job ended and the handle was
 *     released. Releasing NULL is a no-op.
 *  6. The completion callback runs exactly once per created job, before any
 *     urt_job_wait() returns the status; it may release the handle.
 *  7. Misuse is detected while the handle is held: a submission to a job
 *     that ended (its count reached 0: the callback ran or is running, also
 *     from inside the callback) or, after urt_job_close(), from a thread
 *     that is not running one of the job's tasks fails with -EINVAL and a
 *     message; the job is not touched. Using a handle after
 *     urt_job_release() is undefined behaviour (the memory may be gone; as
 *     with libuv handles, it cannot be detected).
 */
#ifndef URT_JOB_H
#define URT_JOB_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_job urt_job;

#define URT_WORK_LEVEL_MAX 60

/* Completion: status 0, -ECANCELED, -ETIME or urt_job_abort's err. Runs
 * once, on a worker (or on the destroying thread at runtime destroy). */
typedef void urt_job_done_fn(urt_job *job, int status, void *arg);
/* Readiness predicate: false delays the teardown; it is checked again every
 * ready_interval_ns (a timer on the worker's ring, not a spin). */
typedef bool urt_job_ready_fn(urt_job *job, void *arg);

#define URT_JOB_TEARDOWN_TASK 0x1u /* run the teardown in its own task, not in place */
#define URT_JOB_FLAGS_ALL 0x1u

struct urt_job_options {
    urt_job_done_fn *done;        /* optional */
    void *arg;
    urt_job_ready_fn *ready;      /* optional */
    void *ready_arg;
    uint64_t ready_interval_ns;   /* default 100 µs; 1 µs .. 10 s */
    uint64_t deadline_ns;         /* from creation; 0 = none */
    uint32_t work_level;          /* 0..URT_WORK_LEVEL_MAX (default: the max, heavy) */
    uint32_t flags;               /* URT_JOB_* */
    uint32_t reserved[4];         /* must be zero */
};

/* Sets the defaults. Any thread. */
URT_API void urt_job_options_init(struct urt_job_options *opt);

/* Creates a job (rule 1); opt may be NULL. The deadline, if any, is armed
 * as a timeout on a worker's ring. Returns 0 and *out, -EINVAL (bad option,
 * see urt_last_error()), -ENOMEM, -ESHUTDOWN. Any thread. */
URT_API int urt_job_create(urt_runtime *rt, const struct urt_job_options *opt, urt_job **out);

/* Submits task as a task of job (placement as urt_task_submit, or the job's
 * lane for a serial job). Returns 0, or
 *   -EINVAL     NULL job, task or task->fn; unknown flags; the job ended;
 *               the job is closed and the caller is not one of its tasks
 *               (rule 7);
 *   -ECANCELED  the job was cancelled (or its deadline passed);
 *   -EAGAIN     max_pending_tasks reached (urt/admission.h; heavy jobs only,
 *               a serial job's lane is not counted);
 *   -ESHUTDOWN  the runtime is being destroyed.
 * Any thread before urt_job_close(); afterwards only from a task of the job. */
URT_API int urt_job_submit(urt_job *job, struct urt_task *task, unsigned flags);
/* The same with a task from the runtime's cache: the same returns (NULL fn
 * instead of task), plus -ENOMEM. */
URT_API int urt_job_spawn(urt_job *job, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags);

/* Rule 3. Returns 0, -EALREADY if it was closed before, -EINVAL (NULL job).
 * Any thread. */
URT_API int urt_job_close(urt_job *job);

/* Cancels the job: its remaining tasks are not run; the callback receives
 * -ECANCELED. Returns 0, -EALREADY (already cancelled, timed out, or its
 * teardown already started), -EINVAL (NULL job). Any thread. */
URT_API int urt_job_cancel(urt_job *job);

/* Cancels the job like urt_job_cancel, with err as the reason: the
 * callback, urt_job_poll and urt_job_wait report err instead of -ECANCELED
 * (a graph's first error, urt/graph.h). err: a negative errno (-4095..-1)
 * other than -EINPROGRESS. Returns 0, -EALREADY (already cancelled, timed
 * out, aborted, or its teardown started), -EINVAL (NULL job, err out of
 * range). Any thread. */
URT_API int urt_job_abort(urt_job *job, int err);

/* True once the job was cancelled, aborted or its deadline passed. Any
 * thread (tasks use it to stop early). */
URT_API bool urt_job_cancelled(const urt_job *job);

/* The job's status if it ended (0, -ECANCELED, -ETIME, an abort's err), else -EINPROGRESS;
 * -EINVAL for a NULL job. Any thread. */
URT_API int urt_job_poll(const urt_job *job);

#define URT_WAIT_FOREVER UINT64_MAX
/* Blocks until the job ended (its callback returned) or timeout_ns passed.
 * Returns the status (as urt_job_poll), -ETIMEDOUT, -EINVAL (NULL job), or
 * -EDEADLK when called on a worker (workers never block). Threads that are
 * not workers only. */
URT_API int urt_job_wait(urt_job *job, uint64_t timeout_ns);

/* In a task's fn or cancel callback: its job, or NULL. */
URT_API urt_job *urt_task_job(const struct urt_task *task);

/* Rule 5. Any thread. */
URT_API void urt_job_release(urt_job *job);

#ifdef __cplusplus
}
#endif

#endif
