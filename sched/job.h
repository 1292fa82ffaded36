/*
 * sched/job.h — jobs (SPEC C7, C8), private part. Design, lifecycle and
 * memory ordering in sched/job.c; the public API is urt/job.h.
 *
 * The core's run path (sched/core/run.h) and cancellation (sched_cancel_task)
 * call into jobs through the client table (runtime/sched_clients.c) at three points:
 *   job_is_cancelled(j)         before a job task's fn: the task is cancelled
 *                               and counted instead of run;
 *   job_task_finished(s, w, j)  after the task's fn returned DONE and the task
 *                               itself was released;
 *   job_task_cancelled(s, w, j) after its cancel callback ran.
 */
#ifndef URT_SCHED_JOB_H
#define URT_SCHED_JOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/job.h>

#include "base/waitcount.h"
#include "sched/core/io.h"
#include "sched/lane.h"
#include "sched/core/sched.h"

/* status word: JOB_OPEN until the first cancel (a negative errno) or the
 * teardown's seal (JOB_SEALED_OK), whichever comes first; never changes again. */
#define JOB_OPEN 0
#define JOB_SEALED_OK 1

struct urt_job {
    alignas(64) _Atomic uint64_t live;   /* live tasks (+1 while not closed) */
    alignas(64) _Atomic int32_t status;  /* JOB_OPEN, JOB_SEALED_OK or -ECANCELED / -ETIME / an abort error */
    urt_waitcount running;               /* 1 until the teardown finished, then 0
                                            (base/waitcount.h: urt_job_wait sleeps on it) */
    _Atomic uint32_t refs;               /* see job.c "References" */
    _Atomic uint32_t closed;             /* urt_job_close was called */
    _Atomic uint32_t conds;              /* watched conditions of the job (J7) */
    _Atomic uint32_t ios;                /* its tasks' I/O in flight (J8, io/uio.c) */
    _Atomic(struct worker *) timer_worker; /* the worker the deadline is armed on */
    struct sched *s;
    struct urt_job_options opt;
    bool serial;                         /* lightweight: runs on its own lane */
    bool timer_armed;                    /* timer_worker only */
    uint64_t deadline_abs_ns;
    struct urt_task teardown_task;
    struct urt_task arm_task, disarm_task;
    struct sched_io deadline_io, ready_io;
    struct urt_lane lane;                /* serial jobs only */
};

static inline bool job_is_cancelled(const struct urt_job *j)
{
    /* acquire: pairs with the release CAS in job_cancel (J3 in job.c). */
    return atomic_load_explicit(&j->status, memory_order_acquire) < 0;
}

void job_task_finished(struct sched *s, struct worker *w, struct urt_job *job);

/* Conditions of a job (urt/watcher.h rules 7-9; sched/cond.c, sched/watcher.c).
 * job_cond_add: urt_job_submit's checks, then the cond counts as live work
 * and as watched (conds). 0 or -errno with a message naming fn.
 * job_cond_unwatch: the cond is no longer watched (its body was handed over,
 * or it is being cancelled). job_cond_submit: its body as a task of the job
 * (on the job's lane if serial), already counted. */
int job_cond_add(struct urt_job *job, const char *fn);
void job_cond_unwatch(struct urt_job *job);
void job_cond_rewatch(struct urt_job *job); /* undoes an unwatch (the body could not be submitted) */
int job_cond_submit(struct urt_job *job, struct urt_task *t, unsigned flags);
/* A task of job was cancelled (its callback ran, it was released): the job
 * is cancelled (-ECANCELED, unless it already has a reason) and counted down. */
void job_task_cancelled(struct sched *s, struct worker *w, struct urt_job *job);

/* I/O of a job's task (urt/io.h; io/uio.c). job_io_begin, by a task of
 * the job: the operation counts as live work (its continuation task carries
 * the count) and as I/O in flight (ios); 0, or -ECANCELED when the job was
 * cancelled (nothing counted). job_io_end: its last completion arrived (ios
 * only; live drops when the continuation task finishes). A cancel of a job
 * with I/O in flight asks sched_clients.io_sweep to cancel it (J8). */
int job_io_begin(struct urt_job *job);
void job_io_end(struct urt_job *job);
/* One more continuation task of a multishot operation of job (live + 1). */
void job_io_more(struct urt_job *job);


#endif
