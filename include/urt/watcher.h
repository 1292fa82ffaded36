/*
 * urt/watcher.h — conditional (watcher) tasks.
 *
 * A conditional task is a cheap check plus a body. The runtime's watcher
 * thread calls check(cond, arg) every interval (the task's own interval_us, or
 * the configuration's watcher_interval_us); the first time it returns true,
 * the body is handed to the workers with urgent placement (a suspended worker
 * if there is one) and runs there once, as an ordinary task. A check that
 * returns false is retried one interval later. The first check runs as soon as
 * the watcher has taken the task in (right after urt_cond_add, not one
 * interval later).
 *
 * Checks run on the watcher thread, one after another: keep them short and
 * non-blocking (read an epoch, a flag, a counter). The body runs on a worker.
 *
 * Lifecycle of a struct urt_cond (numbered rules):
 *  1. The caller embeds it in its own object and fills it with
 *     urt_cond_init() (then may set interval_us, cancel and job).
 *  2. From a successful urt_cond_add() it belongs to the runtime until
 *     either its body is called or its cancel callback is called — exactly
 *     one of the two, exactly once. Do not modify, add again or free it
 *     meanwhile.
 *  3. The body and the cancel callback get the cond; from that call on it is
 *     the caller's again: they may free it, or add it again (to watch the
 *     next occurrence), provided the body then returns URT_TASK_DONE.
 *  4. urt_cond_cancel() succeeds (returns 0) only while the body has not been
 *     handed to a worker; the cancel callback then runs once, soon, on the
 *     watcher thread. Without a cancel callback the caller learns nothing
 *     more: set one if you must know when the memory may be reused.
 *  5. Destroying the runtime cancels every watched task (cancel callback),
 *     in both shutdown modes; a body already handed to a worker is drained or
 *     cancelled like any task (URT_SHUTDOWN_DRAIN runs it, _CANCEL calls the
 *     cancel callback).
 *  6. A failed urt_cond_add() (-errno) leaves the cond with the caller;
 *     nothing is ever called.
 *  7. With job set (urt/job.h), the cond is work of that job from
 *     urt_cond_add() until its body returned URT_TASK_DONE or its cancel
 *     callback ran: the job does not end (its teardown waits) meanwhile.
 *     urt_cond_add() follows urt_job_submit()'s rules: -ECANCELED for a
 *     cancelled job, -EINVAL for a job that ended, or that is closed and the
 *     caller is not one of its tasks.
 *  8. The body runs as a task of the job (urt_task_job() of the task it runs
 *     in is the job; a serial job's body runs on the job's lane).
 *  9. Cancelling the job (urt_job_cancel, or its deadline) cancels its watched
 *     conds soon — on the watcher thread, without waiting for their next
 *     check: their cancel callbacks run, their bodies never, and the job's
 *     teardown runs once after them. urt_cond_cancel() of a job's cond does
 *     not cancel the job.
 *
 * Admission (urt/admission.h): a body counts as a pending task from the moment
 * the watcher hands it to a worker until it completes. If the pending-task
 * limit is reached, the watcher keeps the passed task (without checking it
 * again) and retries the hand-over every interval; it never blocks.
 */
#ifndef URT_WATCHER_H
#define URT_WATCHER_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct urt_cond;

/* On the watcher thread: true when the body should run now. */
typedef bool urt_cond_check_fn(struct urt_cond *cond, void *arg);
/* On a worker: the body (URT_TASK_YIELD re-queues it like any task). */
typedef enum urt_task_result urt_cond_body_fn(struct urt_cond *cond, void *arg);
/* Instead of the body when the task is cancelled (watcher or destroying thread,
 * or a worker at shutdown). */
typedef void urt_cond_cancel_fn(struct urt_cond *cond, void *arg);

/* Runtime-private part: do not touch. */
struct urt_cond_private {
    struct urt_task task;   /* the body's task; its link chains the watcher's queues */
    _Atomic uint32_t state; /* internal: idle, watching, cancelling, scheduled */
    struct urt_timer_private timer; /* its next check (watcher thread only) */
    uint64_t interval_ns;   /* resolved at add */
    uint64_t passed_ns;     /* when the check passed (for the latency statistic) */
    void *watcher;          /* the watcher it was added to */
};

struct urt_cond {
    urt_cond_check_fn *check;
    urt_cond_body_fn *body;
    urt_cond_cancel_fn *cancel; /* optional */
    void *arg;
    uint64_t interval_us;       /* 0: the runtime's watcher_interval_us */
    struct urt_job *job;        /* optional: the job the body belongs to (rules 7-9) */
    struct urt_cond_private priv;
};

/* Sets check, body and arg; clears every other field. Any thread. */
URT_API void urt_cond_init(struct urt_cond *cond, urt_cond_check_fn *check, urt_cond_body_fn *body, void *arg);

/* Starts watching cond. Returns 0, -EINVAL (NULL argument, no check or body,
 * interval_us above one hour), -EBUSY (cond is already watched, its body is
 * pending, or it was cancelled and its cancel callback has not run yet: rule
 * 2), -ESHUTDOWN (the runtime is being destroyed), -ECANCELED (job set and
 * cancelled), -EINVAL (job set and ended, or closed to this thread: rule 7). Wait-free apart
 * from waking the watcher when it sleeps. Any thread. */
URT_API int urt_cond_add(urt_runtime *rt, struct urt_cond *cond);

/* Stops watching cond. Returns 0 when the body will never run (the cancel
 * callback, if any, runs once on the watcher thread), -EALREADY when it is
 * too late (the body was handed to a worker, or cond is not watched, or a
 * cancel already succeeded), -EINVAL for NULL arguments or a cond added to
 * another runtime (checked first: whatever the cond's state there — watched,
 * body handed over or run, cancelled), -ESHUTDOWN while the runtime is being
 * destroyed (the shutdown cancels it). Any thread. */
URT_API int urt_cond_cancel(urt_runtime *rt, struct urt_cond *cond);

struct urt_watcher_stats {
    uint64_t checks_run;       /* check calls */
    uint64_t checks_passed;    /* checks that returned true */
    uint64_t watching;         /* conditional tasks watched right now (added, body not handed over) */
    uint64_t bodies_scheduled; /* bodies handed to workers */
    uint64_t cancelled;        /* cancel callbacks the watcher ran (cancel + shutdown) */
    uint64_t admission_retries;/* hand-overs postponed by the pending-task limit */
    uint64_t sleeps;           /* times the watcher waited in its ring */
    uint64_t wakeups;          /* returns from those waits (timer, message or completion) */
    uint64_t timer_fires;      /* expired IORING_OP_TIMEOUTs */
    uint64_t wake_messages;    /* wake messages received */
    uint64_t watchdog_reports; /* tasks reported by the watchdog (urt/watchdog.h) */
    /* check-to-body latency: from the passing check to the body's start on a worker */
    uint64_t latency_count;
    uint64_t latency_sum_ns;
    uint64_t latency_max_ns;
    uint64_t latency_p50_ns;   /* upper bound of the log2 bucket holding the median */
    uint64_t latency_p99_ns;
};

/* Reads the watcher's counters (relaxed loads while it runs). Returns 0 or
 * -EINVAL (NULL rt or out). Any thread. */
URT_API int urt_watcher_stats(const urt_runtime *rt, struct urt_watcher_stats *out);

#ifdef __cplusplus
}
#endif

#endif
