/*
 * io/uio_life.c — the end of an io's operations: cancel (on the worker that
 * owns them), the sweeps that carry other threads' cancels to that worker,
 * shutdown (rule 9: uio_stop, uio_release), and the io's own entry points
 * (urt_io_init, urt_io_init_ex, urt_io_set_timeout, urt_io_cancel,
 * urt_io_flags, urt_io_worker). The protocols — the sweep's ordering and the
 * two-phase teardown — are described in io/uio.c's header; the state
 * machine and the memory-ordering contract of an io in io/uio.h.
 */
#include "io/uio.h"
#include "sched/job.h"
#include "sched/lane.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"

/* ---- cancel and sweeps ------------------------------------------------------------------ */

void uio_cancel_now(struct worker *w, struct uio_worker *uw, struct uio *u)
{
    if (u->flags & UIO_F_CANCEL_SENT)
        return;
    u->flags |= UIO_F_CANCEL_SENT;
    if (u->kind == UIO_K_SLEEP) {
        sched_timer_cancel(w, &u->sio); /* uio_timer_done(-ECANCELED) runs now */
        return;
    }
    if (u->flags & UIO_F_WAIT_BUF) {
        uio_multi_end(w, u, -ECANCELED); /* nothing in the kernel: it ends here */
        return;
    }
    (void)uw;
    struct be_op op = {.kind = BE_CANCEL, .target = &u->sio.tag, .flags = BE_F_SKIP_SUCCESS};
    sched_io_submit(w, &op, NULL, NULL); /* its own completion (a failure only) is ignored */
}

static bool sweep_wants(struct uio *u)
{
    uint64_t tag = atomic_load_explicit(&u->tag, memory_order_acquire);
    if (tag & UIO_T_CANCEL)
        return true;
    struct urt_task *t = &uio_io(u)->task;
    if (t->priv.job)
        return job_is_cancelled(t->priv.job);
    struct urt_lane *l = t->priv.lane;
    return l && l->ops && l->ops->io_cancel && l->ops->io_cancel(l->ctx);
}

/* Walks w's operations (backwards: a sleep's cancel completes and leaves
 * the array at once, moving the last entry, already visited, into its slot). */
static void cancel_walk(struct worker *w, struct uio_worker *uw, bool all)
{
    for (uint32_t i = uw->n; i-- > 0;) {
        if (i >= uw->n)
            continue;
        struct uio *u = uw->ops[i];
        if (all || sweep_wants(u))
            uio_cancel_now(w, uw, u);
    }
}

static void sweep_post_one(struct sched *s, struct worker *w);

static enum urt_task_result sweep_run(struct urt_task *t, void *arg)
{
    struct worker *w = arg;
    (void)t;
    atomic_store_explicit(&w->io_sweep_queued, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst); /* see "Sweeps" */
    struct uio_worker *uw = w->uio;
    if (!uw)
        return URT_TASK_DONE;
    cancel_walk(w, uw, uw->stopped);
    return URT_TASK_DONE;
}

static void sweep_cancelled(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_store_explicit(&((struct worker *)arg)->io_sweep_queued, 0, memory_order_relaxed);
}

static void sweep_post_one(struct sched *s, struct worker *w)
{
    if (atomic_exchange_explicit(&w->io_sweep_queued, 1, memory_order_seq_cst))
        return; /* queued, not yet run: it will see our change */
    urt_task_init(&w->io_sweep, sweep_run, w);
    w->io_sweep.cancel = sweep_cancelled;
    if (sched_submit_to(s, w, &w->io_sweep) != 0)
        atomic_store_explicit(&w->io_sweep_queued, 0, memory_order_relaxed); /* destroy: io_stop does it */
}

void uio_sweep_post(struct sched *s)
{
    for (uint32_t i = 0; i < s->n_workers; i++)
        sweep_post_one(s, s->workers[i]);
}

/* ---- shutdown ----------------------------------------------------------------------------- */

void uio_stop(struct worker *w, bool exiting)
{
    struct uio_worker *uw = w->uio;
    if (!uw)
        return;
    bool walk = !uw->stopped;
    if (exiting && !uw->exiting) {
        uw->exiting = true;
        uio_timed_cancel_all(w, uw);
        walk = true;
    }
    uw->stopped = true;
    if (walk)
        cancel_walk(w, uw, true);
    if (exiting && uw->n == 0 && !uw->timed && !uw->detached) {
        uio_buf_detach(w, uw); /* phase 1: the kernel's part, on the ring's issuer */
        uw->detached = true;
    }
}

void uio_release(struct worker *w)
{
    struct uio_worker *uw = w->uio;
    if (!uw)
        return;
    uio_buf_release(uw); /* phase 2: every worker stopped, the leftovers were cancelled */
    free(uw->ops);
    free(uw);
    w->uio = NULL;
}

URT_API void urt_io_init(struct urt_io *io, urt_io_fn *fn, void *arg)
{
    if (!io)
        return;
    memset(io, 0, sizeof(*io));
    io->fn = fn;
    io->arg = arg;
}

URT_API int urt_io_init_ex(struct urt_io *io, urt_io_fn *fn, void *arg, unsigned flags)
{
    if (!io)
        return urt__error(-EINVAL, "urt_io_init_ex: io is NULL");
    if (urt__check_flags("urt_io_init_ex", flags, URT_IO_INIT_FLAGS_ALL))
        return -EINVAL;
    urt_io_init(io, fn, arg);
    uio_of(io)->opts = (uint8_t)flags;
    return 0;
}

URT_API int urt_io_set_timeout(struct urt_io *io, uint64_t ns)
{
    if (!io)
        return urt__error(-EINVAL, "urt_io_set_timeout: io is NULL");
    if (ns == 0)
        return urt__error(-EINVAL, "urt_io_set_timeout: ns is 0 (a timeout must be > 0)");
    struct uio *u = uio_of(io);
    if (atomic_load_explicit(&u->tag, memory_order_acquire) & UIO_T_INFLIGHT)
        return urt__error(-EBUSY, "urt_io_set_timeout: io %p is in flight (rule 2)", (void *)io);
    u->sio.ns = ns;
    u->flags |= UIO_F_TIMEOUT;
    return 0;
}

URT_API int urt_io_cancel(struct urt_io *io)
{
    if (!io)
        return urt__error(-EINVAL, "urt_io_cancel: io is NULL");
    struct worker *w = sched_self();
    if (!w)
        return urt__error(-EPERM, "urt_io_cancel: the calling thread is not a worker");
    struct uio *u = uio_of(io);
    uint64_t tag = atomic_load_explicit(&u->tag, memory_order_acquire);
    struct sched *s = w->s;
    if (!(tag & UIO_T_INFLIGHT) || (tag & UIO_T_DELIVERING))
        return urt__error(-EALREADY, "urt_io_cancel: io %p is not in flight (or its last completion is being "
                                     "delivered)", (void *)io);
    uint32_t idx = (uint32_t)(tag & UIO_T_WORKER) - 1;
    if (((tag & UIO_T_RT) >> UIO_T_RT_SHIFT) != (s->id & 0xff) || idx >= s->n_workers)
        return urt__error(-EPERM, "urt_io_cancel: io %p belongs to another runtime", (void *)io);
    if (idx == w->index) {
        uio_cancel_now(w, w->uio, u);
        return 0;
    }
    /* Another worker's: mark it, and that worker's sweep cancels it. */
    while (!atomic_compare_exchange_weak_explicit(&u->tag, &tag, tag | UIO_T_CANCEL, memory_order_seq_cst,
                                                  memory_order_acquire)) {
        if (!(tag & UIO_T_INFLIGHT) || (tag & UIO_T_DELIVERING))
            return urt__error(-EALREADY, "urt_io_cancel: io %p completed meanwhile", (void *)io);
    }
    sweep_post_one(s, s->workers[idx]);
    return 0;
}

URT_API unsigned urt_io_flags(const struct urt_io *io)
{
    if (!io)
        return 0;
    uint32_t f = uio_of_const(io)->cflags;
    return (f & BE_CF_MORE ? URT_IO_F_MORE : 0) | (f & BE_CF_BUFFER ? URT_IO_F_BUFFER : 0) |
           (f & BE_CF_NOTIF ? URT_IO_F_NOTIF : 0);
}

URT_API int urt_io_worker(const struct urt_io *io)
{
    if (!io)
        return -1;
    uint64_t tag = atomic_load_explicit(&uio_of_const(io)->tag, memory_order_relaxed);
    return (tag & UIO_T_WORKER) ? (int)(tag & UIO_T_WORKER) - 1 : -1;
}
