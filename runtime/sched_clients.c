/*
 * runtime/sched_clients.c — the table through which the scheduler's core calls its
 * clients (struct sched_client_ops, sched/core/sched.h): the admission limit,
 * jobs, lanes, the watcher, the tasks' I/O (io/uio.c) and the blocking
 * pool (sched/blocking.c). This file is the one place that knows both sides;
 * the core includes none of the clients' headers.
 *
 * No memory ordering of its own: each entry carries its function's contract.
 */
#include "sched/core/sched.h"
#include "sched/admission.h"
#include "sched/blocking.h"
#include "sched/job.h"
#include "sched/lane.h"
#include "io/uio.h"
#include "sched/watcher.h"

#include <inttypes.h>
#include <stdio.h>

static void dump_state(struct sched *s, int fd)
{
    if (s->watcher)
        dprintf(fd, "urt state: watcher: %" PRIu64 " conditional tasks watched\n", watcher_watching(s));
    if (s->adm) {
        struct urt_admission_stats a;
        admission_read_stats(s, &a);
        dprintf(fd, "urt state: admission: %" PRIu64 " pending of %" PRIu64 ", %" PRIu64 " submitters waiting\n",
                a.pending, a.limit, a.waiting);
    }
    if (s->blocking) {
        struct urt_blocking_stats b;
        blocking_read_stats(s, &b);
        dprintf(fd, "urt state: blocking pool: %" PRIu64 " threads (%" PRIu64 " idle), %" PRIu64 " running, %" PRIu64
                    " queued\n", b.threads, b.threads_idle, b.running, b.queued);
    }
}

static void release_slot(struct sched *s)
{
    admission_release(s->adm);
}

/* A job was cancelled or a transaction aborts (sched/job.c J8, tx/tx.c T5):
 * its I/O in flight and its queued offloads go, the one sweep for both. */
static void sweep_io_and_offloads(struct sched *s)
{
    uio_sweep_post(s);
    blocking_sweep(s);
}

static bool job_cancelled(const struct urt_job *job)
{
    return job_is_cancelled(job);
}

const struct sched_client_ops sched_clients = {
    .admit = admission_submit,
    .release = release_slot,
    .job_cancelled = job_cancelled,
    .job_task_finished = job_task_finished,
    .job_task_cancelled = job_task_cancelled,
    .cancel_lane_runner = lane_cancel_runner,
    .stop_watcher = watcher_stop,
    .dump_state = dump_state,
    .io_sweep = sweep_io_and_offloads,
    .io_stop = uio_stop,
    .io_pending = uio_pending,
    .io_release = uio_release,
    .blocking_busy = blocking_busy,
    .blocking_quiesce = blocking_quiesce,
    .blocking_stop = blocking_stop,
};
