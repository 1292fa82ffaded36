/*
 * sched/core/io.h — operations and timers on a worker's own backend context,
 * continued on that worker.
 *
 * One mechanism, several users (docs/design.md, "The I/O path"): the
 * write-ahead log (a write linked with an fdatasync), tasks' I/O (io/), and
 * the timer facility's one kernel timeout. A user embeds struct sched_io,
 * describes the operation with a struct be_op (backend/backend.h: kind, fd,
 * buffer, length, offset, flags) and submits it with sched_io_submit on the
 * worker it runs on; done(io, w, res, flags) is called on the same worker,
 * from its loop, when the operation completes (flags: BE_CF_*).
 *
 * Rules:
 *  1. Worker only: submit and cancel run on w's own thread (single issuer).
 *  2. done runs once per completion. An operation has one completion, except
 *     a multishot one (BE_CF_MORE on every completion but its last) and a
 *     zero-copy send (its result with BE_CF_MORE, then a notification with
 *     BE_CF_NOTIF): the operation counts in io_inflight until the completion
 *     without BE_CF_MORE. Linked operations each carry their own sched_io
 *     (or the same one, counted once per operation).
 *  3. The io must stay valid until done ran; done may free or reuse it.
 *  4. Submitted operations reach the kernel when the running task returns
 *     (batched into one system call), or at once with sched_io_flush().
 *  5. While any operation is in flight the worker looks for completions
 *     every 64 tasks and whenever it is idle, and its suspension ends at the
 *     completion.
 *  6. A chain (BE_F_LINK on every member but the last: each runs after the
 *     previous one succeeded; a failure or short transfer ends the rest with
 *     -ECANCELED) is submitted as sched_io_reserve(w, n), then n
 *     sched_io_submit calls, so that it reaches the kernel whole.
 *  7. Nothing is refused: an operation the kernel's queue cannot take now
 *     waits in the backend's overflow list, in order, and moves on from the
 *     worker's loop (the one full-queue policy, backend/backend.h).
 */
#ifndef URT_SCHED_IO_H
#define URT_SCHED_IO_H

#include "sched/core/sched.h"
#include "sched/core/timer.h"

struct sched_io;
typedef void sched_io_done_fn(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);

struct sched_io {
    struct be_tag tag;              /* first: what the backend hands back */
    sched_io_done_fn *done;
    struct worker *w;
    union {
        uint64_t ns;                /* free for the user (tasks' I/O: the timeout of rule 8 of urt/io.h) */
        sched_timer tm;             /* sched_timer_arm(): the worker's timer queue (sched/core/timer.h) */
    };
};

/* Worker only: the next n operations reach the kernel together (rule 6). */
static inline void sched_io_reserve(struct worker *w, unsigned n)
{
    be_reserve(&w->be, n);
}

/* Worker only: submits op; done(io, w, res, flags) runs on w at its
 * completion (rule 2). io NULL: no completion (a cancel, or BE_F_SKIP_SUCCESS
 * whose failure nobody waits for). Out of line (the backend's translation
 * is inlined in it): the one point every operation passes, which the log's
 * property test wraps (tests/property/prop_trace.c). */
void sched_io_submit(struct worker *w, const struct be_op *op, struct sched_io *io, sched_io_done_fn *done);

/* Worker only: hands what is submitted to the kernel. The count or -errno. */
int sched_io_flush(struct worker *w);

/* Timers: the worker's one timer queue (sched/core/timer.h), not an
 * operation each. Worker only: done(io, w, -ETIME, 0) runs on w from its
 * loop ns nanoseconds from now (sched_timer_arm) or once urt_clock_ns() >=
 * due_ns (sched_timer_arm_at). 0, -EBUSY (io is armed already) or -ENOMEM. */
int sched_timer_arm(struct worker *w, struct sched_io *io, uint64_t ns, sched_io_done_fn *done);
int sched_timer_arm_at(struct worker *w, struct sched_io *io, uint64_t due_ns, sched_io_done_fn *done);
/* Worker only: cancels a timer armed on this worker: done(io, w,
 * -ECANCELED, 0) runs before it returns. 0, -EALREADY when io is not
 * armed (its done ran already), or -EXDEV when it is armed on another
 * worker (only the worker a timer is armed on may cancel it). */
int sched_timer_cancel(struct worker *w, struct sched_io *io);

#endif
