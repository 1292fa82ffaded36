/*
 * sched/io.c — per-worker I/O and timers (rules in io.h).
 *
 * No memory ordering of its own: everything happens on the owning worker's
 * thread (prep, submit, reap, done). io_inflight is owner-only.
 */
#include "sched/io.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>

static void io_complete(struct ring_op *op, int32_t res, uint32_t cqe_flags)
{
    struct sched_io *io = (struct sched_io *)((char *)op - offsetof(struct sched_io, op));
    struct worker *w = io->w;
    w->io_inflight--;
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

int sched_timer_arm(struct worker *w, struct sched_io *io, uint64_t ns, sched_io_done_fn *done)
{
    if (sched_io_reserve(w, 1))
        return -EBUSY;
    io->ts.tv_sec = (long long)(ns / 1000000000ull);
    io->ts.tv_nsec = (long long)(ns % 1000000000ull);
    struct io_uring_sqe *sqe = sched_io_sqe(w);
    io_uring_prep_timeout(sqe, &io->ts, 0, 0);
    sched_io_bind(w, sqe, io, done, false);
    return 0;
}

int sched_timer_cancel(struct worker *w, struct sched_io *io)
{
    assert(sched_self() == w);
    struct io_uring_sqe *sqe = ring_get_sqe(&w->ring);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)&io->op, 0);
    io_uring_sqe_set_data64(sqe, 0); /* the remove's own CQE is ignored */
    return 0;
}
