/*
 * sched/core/io.c — per-worker operations (rules in io.h), and the worker's side of the
 * timer facility (sched/core/timer.h: sched_timer_arm puts a timer in the
 * worker's queue).
 *
 * No memory ordering of its own: everything happens on the owning worker's
 * thread (submit, reap, done). io_inflight is owner-only.
 */
#include "sched/core/io.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>

#include "base/clock.h"

static void sched_io_complete(struct be_tag *tag, int32_t res, uint32_t flags)
{
    struct sched_io *io = (struct sched_io *)((char *)tag - offsetof(struct sched_io, tag));
    struct worker *w = io->w;
    if (!(flags & BE_CF_MORE))
        w->io_inflight--; /* the operation's last completion (rule 2) */
    io->done(io, w, res, flags);
}

void sched_io_submit(struct worker *w, const struct be_op *op, struct sched_io *io, sched_io_done_fn *done)
{
    assert(sched_self() == w);
    if (io) {
        io->tag.complete = sched_io_complete;
        io->done = done;
        io->w = w;
        w->io_inflight++;
    }
    be_submit(&w->be, op, io ? &io->tag : NULL);
}

int sched_io_flush(struct worker *w)
{
    assert(sched_self() == w);
    return be_flush(&w->be);
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
