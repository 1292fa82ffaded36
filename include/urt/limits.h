/*
 * urt/limits.h — admission limit and watchdog (SPEC C10).
 *
 * Admission. With max_pending_tasks = N > 0 (configuration), at most N tasks
 * are pending runtime-wide: a task is pending from its successful submission
 * until its function returns URT_TASK_DONE or it is cancelled. Every way a
 * task comes in counts: urt_task_submit, urt_spawn*, urt_task_submit_to,
 * urt_spawn_to, urt_lane_submit/spawn, urt_tx_submit/spawn,
 * urt_job_submit/spawn (serial jobs included), and a conditional task's body
 * when the watcher hands it over (it never blocks: at the limit it keeps the
 * passed task and retries every interval). Exempt, with the reason: the
 * runtime's own tasks (lane runners, job teardown and deadline tasks, the
 * log's flush and notification tasks: each serves tasks or commits already
 * admitted, and refusing one would strand them), and log commits
 * (urt_log_commit, urt_tx_commit): a commit is the end of work that was
 * admitted, its memory is the caller's, and the log bounds its own backlog by
 * group commit. Timed submissions (urt_task_submit_at, urt_spawn_at, urt/io.h)
 * count from the call on, while they wait for their time. An I/O
 * continuation (urt/io.h) is exempt: it is the rest of a task that was
 * admitted, and refusing it would lose the operation's result.
 * A yield is not a completion. At the limit a submission fails with -EAGAIN,
 * or, with URT_SUBMIT_BLOCK, waits until a slot frees up. Blocked submitters
 * get slots in the order they blocked (first come, first served: a slot freed
 * while someone waits goes to the oldest waiter, never to a newcomer). A
 * worker never blocks: its URT_SUBMIT_BLOCK submissions fail with -EAGAIN
 * at the limit (a task that resubmits itself still holds its own slot until
 * it returns). Destroying the runtime makes blocked submitters return
 * -ESHUTDOWN. With max_pending_tasks = 0 (the default) nothing is counted.
 *
 * Watchdog. With task_runtime_limit_us = L > 0, the watcher thread looks at
 * every worker's running task every P = max(L/4, 100 µs); a task seen running
 * for longer than L is reported once (per run of its function) through the
 * watchdog callback, between L and L + 2P after it started. The run time is
 * measured from the first look that saw the task running (workers read no
 * clock per task), so elapsed_ns is a lower bound, short of the true run
 * time by less than P. The default callback writes one line to stderr. With
 * watchdog_abort = true, every worker's state is then written to stderr and
 * the process aborts (SIGABRT). Workers publish their running task (three
 * plain stores per task) only when L > 0. The blocking pool's threads
 * (urt/blocking.h) are watched the same way: a function running longer than
 * L is reported once (pool_thread >= 0, blocking = the offload); it does not
 * abort the process, since it blocks no worker.
 */
#ifndef URT_LIMITS_H
#define URT_LIMITS_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct urt_admission_stats {
    uint64_t limit;       /* max_pending_tasks (0: no limit, everything else 0) */
    uint64_t pending;     /* pending tasks now */
    uint64_t max_pending; /* highest pending count seen */
    uint64_t rejected;    /* submissions that failed with -EAGAIN */
    uint64_t blocked;     /* submissions that had to wait */
    uint64_t waiting;     /* submitters waiting right now */
};

/* Reads the admission counters. Returns 0 or -EINVAL (NULL rt or out). Any
 * thread. */
URT_API int urt_admission_stats(const urt_runtime *rt, struct urt_admission_stats *out);

struct urt_blocking;

struct urt_watchdog_report {
    uint32_t worker;        /* index of the worker running the task (UINT32_MAX: a pool thread's) */
    struct urt_task *task;  /* the task (for identification only: it may be gone) */
    struct urt_job *job;    /* its job, or NULL */
    uint64_t elapsed_ns;    /* how long it had run when reported (a lower bound, see above) */
    uint64_t limit_ns;      /* task_runtime_limit_us in ns */
    /* A blocking pool thread's function (urt/blocking.h rule 10) instead of a
     * task: pool_thread is its thread's number (urt-blk-<n>), blocking the
     * offload (identification only), task its internal task; -1 and NULL
     * for a worker's task. Such a report never aborts (watchdog_abort is for
     * workers: a pool thread blocks none). */
    int32_t pool_thread;
    struct urt_blocking *blocking;
};

/* Called on the watcher thread; must not block for long (it delays checks). */
typedef void urt_watchdog_fn(void *ctx, const struct urt_watchdog_report *report);

/* Replaces the watchdog callback (NULL restores the default, which logs one
 * line to stderr). Returns 0 or -EINVAL (NULL rt). Any thread; takes effect for the
 * next report. */
URT_API int urt_watchdog_set_callback(urt_runtime *rt, urt_watchdog_fn *fn, void *ctx);

/* Writes every worker's state (running task and for how long, queue lengths,
 * suspended or not) to fd, one line per worker, then a line each for the
 * watcher, the admission limit and the blocking pool (threads, idle,
 * running, queued) — what the abort policy prints. Returns 0 or -EINVAL
 * (NULL rt, negative fd). Any thread (a racy snapshot). */
URT_API int urt_dump_state(const urt_runtime *rt, int fd);

#ifdef __cplusplus
}
#endif

#endif
