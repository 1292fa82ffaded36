/*
 * urt/watchdog.h — the watchdog: tasks that run too long; the state dump.
 *
 * With task_runtime_limit_us = L > 0, the watcher thread looks at
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
#ifndef URT_WATCHDOG_H
#define URT_WATCHDOG_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

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
