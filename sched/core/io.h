/*
 * sched/core/io.h — I/O and timers on a worker's own ring, continued on that worker.
 *
 * One mechanism, several users (docs/design.md, "The I/O path"): job
 * deadlines (timeout SQEs), the write-ahead log (write linked with fdatasync),
 * and, once C20 is built, tasks that do file or socket I/O. A user embeds
 * struct sched_io, takes an SQE on the worker it runs on (sched_io_reserve,
 * sched_io_sqe), fills it (io_uring_prep_*), tags it (sched_io_bind; rule
 * 6), and gets done(io, w, res, cqe_flags) called
 * on the same worker, from its loop, when the CQE arrives.
 *
 * Rules:
 *  1. Worker only: prep and cancel run on w's own thread (single issuer).
 *  2. done runs once per CQE. An SQE has one CQE (no IOSQE_CQE_SKIP_SUCCESS),
 *     except a multishot SQE (IORING_CQE_F_MORE on every CQE but its last)
 *     and a zero-copy send (its result with F_MORE, then a notification with
 *     IORING_CQE_F_NOTIF): the SQE counts in io_inflight until the CQE
 *     without F_MORE. Linked SQEs each carry their own sched_io (or the same
 *     one, counted once per SQE).
 *  3. The io must stay valid until done ran; done may free or reuse it.
 *  4. Prepared SQEs are submitted when the running task returns (batched into
 *     one io_uring_enter), or at once with sched_io_flush().
 *  6. A chain of linked SQEs (IOSQE_IO_LINK: each runs after the previous
 *     one succeeded; a failure or short read/write cancels the rest with
 *     -ECANCELED) is built with sched_io_reserve(n), then n times:
 *     sqe = sched_io_sqe(w); io_uring_prep_*(sqe, ...);
 *     sched_io_bind(w, sqe, io, done, link_to_next). The tag is set after the
 *     prep (which clears user_data), so nothing is saved and restored.
 *  5. While any SQE is in flight the worker looks for completions every 64
 *     tasks and whenever it is idle, and its suspension ends at the completion.
 */
#ifndef URT_SCHED_IO_H
#define URT_SCHED_IO_H

#include "sched/core/sched.h"
#include "sched/core/timer.h"

struct sched_io;
typedef void sched_io_done_fn(struct sched_io *io, struct worker *w, int32_t res, uint32_t cqe_flags);

struct sched_io {
    struct ring_op op;              /* first: its address is the SQE's user_data */
    sched_io_done_fn *done;
    struct worker *w;
    union {
        struct __kernel_timespec ts; /* I/O that takes a timespec (read by the kernel at submission) */
        sched_timer tm;       /* sched_timer_arm(): the worker's timer queue (sched/core/timer.h) */
    };
};

/* Worker only: makes room for n SQEs that must go into the SQ together (a
 * linked chain), submitting what is prepared if needed. 0, or -EBUSY when
 * the ring cannot take them now (the kernel refused to drain the SQ): the
 * caller retries later; nothing was taken. */
int sched_io_reserve(struct worker *w, unsigned n);
/* Worker only, after sched_io_reserve(): the next free SQE, to be filled
 * with an io_uring_prep_*() and then tagged with sched_io_bind(). */
struct io_uring_sqe *sched_io_sqe(struct worker *w);
/* Worker only: tags a filled SQE with io (done(io, w, res, flags) runs on w
 * when its CQE arrives); link = IOSQE_IO_LINK to the next SQE of the chain. */
void sched_io_bind(struct worker *w, struct io_uring_sqe *sqe, struct sched_io *io, sched_io_done_fn *done,
                   bool link);

/* Worker only: submits what is prepared. Returns the count or -errno. */
int sched_io_flush(struct worker *w);

/* Timers: the worker's one timer queue (sched/core/timer.h), not an SQE each.
 * Worker only: done(io, w, -ETIME, 0) runs on w from its loop ns nanoseconds
 * from now (sched_timer_arm) or once urt_clock_ns() >= due_ns
 * (sched_timer_arm_at). 0, -EBUSY (io is armed already) or -ENOMEM. */
int sched_timer_arm(struct worker *w, struct sched_io *io, uint64_t ns, sched_io_done_fn *done);
int sched_timer_arm_at(struct worker *w, struct sched_io *io, uint64_t due_ns, sched_io_done_fn *done);
/* Worker only: cancels a timer armed on this worker: done(io, w,
 * -ECANCELED, 0) runs before it returns. 0, -EALREADY when io is not
 * armed (its done ran already), or -EXDEV when it is armed on another
 * worker (only the worker a timer is armed on may cancel it). */
int sched_timer_cancel(struct worker *w, struct sched_io *io);

/* The worker the calling thread runs on (any runtime), or NULL. */
struct worker *sched_self(void);

#endif
