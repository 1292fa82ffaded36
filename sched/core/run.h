/*
 * sched/core/run.h — the one task run/finish path, used by the worker loop
 * (worker.c run_task) and by the lane runner (lane.c) for each lane task.
 *
 * Phases of one run:
 *   1. skip:   a task of a cancelled job gets its cancel callback instead
 *              (sched_cancel_task) and counts as done;
 *   2. watch:  the watchdog watches this task (when task_runtime_limit_us is
 *              set); inside a lane runner the runner's own watch is closed
 *              first and reopened after, so each lane task is watched alone;
 *   3. body:   probe stamp, running_job set for the body (a closed job
 *              accepts tasks only from its own), fn, probe done;
 *   4. finish: on URT_TASK_DONE (sched_finish_task) the admission slot is
 *              returned (TASK_ADMITTED), a pooled task goes back to the pool,
 *              and its job's live count drops. A YIELD is not a finish: the
 *              caller queues the task again (worker: its yield list; lane:
 *              the head of the lane).
 * Owner-only: runs on w's thread; no memory ordering of its own (the job,
 * admission and pool calls carry theirs).
 */
#ifndef URT_SCHED_RUN_H
#define URT_SCHED_RUN_H

#include "bpf/probes.h"
#include "sched/core/sched.h"
#include "sched/core/taskpool.h"
#include "sched/core/watchdog_slot.h"

struct run_result {
    enum urt_task_result r;
    uint64_t end_ns;    /* probe stamp at the end of the body (0: not timed) */
};

/* Phase 1: true when t belongs to a cancelled job; its cancel callback ran
 * instead, it counts as done. */
static inline bool sched_run_skip(struct worker *w, struct urt_task *t)
{
    if (!t->priv.job || !sched_clients.job_cancelled(t->priv.job))
        return false;
    sched_cancel_task(w->s, w, t);
    return true;
}

/* Phases 2-3. outer: the task whose watchdog run is open around this one
 * (the lane runner), or NULL. */
static inline struct run_result sched_run_body(struct worker *w, struct urt_task *t, struct urt_task *outer)
{
    struct run_result out = {URT_TASK_DONE, 0};
    struct urt_job *job = t->priv.job;
    bool watched = w->s->cfg->task_runtime_limit_us != 0;
    if (__builtin_expect(watched, 0)) {
        if (outer)
            watchdog_end(&w->wd);
        watchdog_begin(&w->wd, t);
    }
    struct probe_run pr;
    bool timed = probe_task_start(w->index, t, &pr); /* one load when nobody consumes stamps */
    if (job)
        w->running_job = job; /* NULL outside a job task's body */
    out.r = t->fn(t, t->arg); /* t may be freed from here on */
    if (job)
        w->running_job = NULL;
    if (__builtin_expect(watched, 0)) {
        watchdog_end(&w->wd);
        if (outer)
            watchdog_begin(&w->wd, outer);
    }
    if (__builtin_expect(timed, 0))
        probe_task_done(&w->hists, w->index, &pr);
    out.end_ns = pr.end_ns;
    return out;
}

/* Phase 4, for a task whose body returned URT_TASK_DONE. flags and job were
 * read before the body ran (it may have freed the task). */
static inline void sched_finish_task(struct worker *w, struct urt_task *t, uint32_t flags, struct urt_job *job)
{
    struct sched *s = w->s;
    if (__builtin_expect(flags & TASK_ADMITTED, 0))
        sched_clients.release(s);
    if (flags & TASK_POOLED)
        taskpool_free(&s->pool, &w->cache, t);
    if (job)
        sched_clients.job_task_finished(s, w, job);
}

#endif
