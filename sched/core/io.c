/*
 * sched/core/io.c — per-worker I/O (rules in io.h), and the worker's side of the
 * timer facility (sched/core/timer.h: sched_timer_arm puts a timer in the
 * worker's queue).
 *
 * No memory ordering of its own: everything happens on the owning worker's
 * thread (prep, submit, reap, done). io_inflight is owner-only.
 */
#include "sched/core/io.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>

#include "base/clock.h"

static void io_complete(struct ring_op *op, int32_t res, uint32_t cqe_flags)
{
    struct sched_io *io = (struct sched_io *)((char *)op - offsetof(struct sched_io, op));
    struct worker *w = io->w;
    if (!(cqe_flags & IORING_CQE_F_MORE))
        w->io_inflight--; /* the SQE's last CQE (rule 2) */
    io->done(io, w, res, cqe_flags);
}

int sched_io_reserve(struct worker *w, unsigned n)
{
    assert(sched_self() == w);
    if (io_uring_sq_space_left(&w->ring.uring) >= n)
        return 0;
    ring_submit(&w->ring);
    return io_uring_sq_space_left(&w->ring.uring) >= n ? 0 : -EBUSY;
}

struct io_uring_sqe *sched_io_sqe(struct worker *w)
{
    assert(sched_self() == w);
    return ring_get_sqe(&w->ring);
}

void sched_io_bind(struct worker *w, struct io_uring_sqe *sqe, struct sched_io *io, sched_io_done_fn *done,
                   bool link)
{
    io->op.complete = io_complete;
    io->done = done;
    io->w = w;
    io_uring_sqe_set_data(sqe, &io->op);
    if (link)
        sqe->flags |= IOSQE_IO_LINK;
    w->io_inflight++;
}

int sched_io_flush(struct worker *w)
{
    assert(sched_self() == w);
    return ring_submit(&w->ring);
}

static void io_timer_fired(sched_timer *t, int32_t res)
{
    struct sched_io *io = (struct sched_io *)((char *)t - offsetof(struct sched_io, tm));
    io->done(io, io->w, res, 0);
}

int sched_timer_arm_at(struct worker *w, struct sched_io *io, uint64_t due_ns, sched_io_done_fn *done)
{
    assert(sched_self() == w);
    if (sched_timer_queued(&io->tm))
        return -EBUSY;
    io->done = done;
    io->w = w;
    int err = timerq_add(&w->timers, &io->tm, due_ns, io_timer_fired);
    if (err == 0)
        timerq_sync(&w->timers);
    return err;
}

int sched_timer_arm(struct worker *w, struct sched_io *io, uint64_t ns, sched_io_done_fn *done)
{
    return sched_timer_arm_at(w, io, urt_clock_ns() + ns, done);
}

int sched_timer_cancel(struct worker *w, struct sched_io *io)
{
    assert(sched_self() == w);
    if (sched_timer_queued(&io->tm) && io->w != w)
        return -EXDEV; /* armed on another worker: only that worker may touch its queue */
    if (!timerq_cancel(&w->timers, &io->tm))
        return -EALREADY;
    timerq_sync(&w->timers);
    return 0;
}
