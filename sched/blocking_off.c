/*
 * sched/blocking_off.c — offloads (urt/blocking.h, SPEC C22): the public
 * API, the submitting task's context and the continuation. The threads and
 * the queue are the pool's (sched/blocking.c).
 *
 * ---- The path of one offload ------------------------------------------------------------------
 *   urt_blocking_submit(rt, b) in task T on worker W (or on any thread)
 *     context: T's job (job_io_begin: live work and "I/O" in flight, J8 of
 *              sched/job.c), a serial job's or T's lane (lane_hold: the lane
 *              holds, H1 of sched/lane.c; a transaction's lane also counts
 *              it as a task in flight: lane_ops io_begin, T5 of tx/tx.c),
 *              else W (a thread that is not a worker: the worker
 *              urt_task_submit would pick);
 *     the offload's embedded task (fn = off_work) goes to the pool's queue of
 *     W's node (blocking_queue); a refusal undoes the context's counts.
 *   a pool thread takes it: off_work calls b->fn; blocking_finish(t, true)
 *     turns the task into the continuation (fn = off_cont) and delivers it:
 *     the lane's next task (lane_resume), else W's inbox (sched_push_inbox:
 *     the push and the one wake path, MSG_RING to a suspended worker). The
 *     job's and the transaction's in-flight counts drop before the delivery:
 *     after it the continuation may have run and the job or the
 *     transaction may be gone (their live work is the continuation's).
 *   an offload taken out of the queue unrun (job cancelled, transaction
 *     aborting, destroy(CANCEL)) is delivered the same way with -ECANCELED.
 *   the continuation runs by the one run path (sched/core/run.h): off_cont clears
 *     the in-flight state, then calls b->done(b, res, arg). Cancelled as a
 *     task (its job was cancelled after the function ran, or destroy(CANCEL)
 *     found it queued), off_cont_cancel calls done just the same: exactly
 *     once, always.
 *
 * ---- Memory ordering -----------------------------------------------------------------------------
 * The offload's fields are written by the submitter before the queue push
 * (release, inbox.h I1) and read by the pool thread after its pop; res and
 * the ran bit are written by the pool thread before the delivery (a queue
 * push or a lane's Treiber push, release) and read by the continuation's
 * worker after the pop. `state` (in flight, ran) is read by other threads
 * only to detect misuse (-EBUSY) and by urt_blocking_ran: release stores,
 * acquire loads.
 */
#include "sched/blocking.h"
#include "sched/job.h"
#include "sched/lane.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"

#define OFF_INFLIGHT 0x1u
#define OFF_RAN 0x2u

struct blk_off {
    struct urt_task task; /* first: the pool's item (off_work), then the continuation (off_cont) */
    struct sched *s;
    struct worker *home;  /* where a continuation without a lane goes */
    int64_t res;
    _Atomic uint32_t state; /* OFF_INFLIGHT | OFF_RAN */
    uint32_t spawned;       /* urt_blocking_spawn's: freed after done */
};

_Static_assert(sizeof(struct blk_off) <= sizeof(struct urt_blocking_private),
               "struct blk_off must fit urt_blocking_private");
_Static_assert(_Alignof(struct blk_off) <= _Alignof(struct urt_blocking_private), "struct blk_off alignment");

static inline struct blk_off *off_of(struct urt_blocking *b)
{
    return (struct blk_off *)(void *)&b->priv;
}

static inline struct blk_off *off_of_task(struct urt_task *t)
{
    return (struct blk_off *)(void *)t; /* the task is its first member */
}

static inline struct urt_blocking *off_b(struct blk_off *o)
{
    return (struct urt_blocking *)(void *)((char *)o - offsetof(struct urt_blocking, priv));
}

struct urt_blocking *blocking_of_task(struct urt_task *t)
{
    return off_b(off_of_task(t));
}

/* ---- context ------------------------------------------------------------------------------------ */

/* Does lane l count its tasks' I/O and offloads as tasks in flight (a
 * transaction's, T5)? */
static inline bool lane_counts(const struct urt_lane *l)
{
    return l && l->ops && l->ops->io_begin;
}

/* The calling task's context into t (job, lane) and the counts it takes
 * (module comment). 0 or -ECANCELED with a message. */
static int ctx_begin(struct worker *w, struct urt_task *t, const char *fn)
{
    struct urt_job *job = w ? w->running_job : NULL;
    struct urt_lane *lane = w ? w->running_lane : NULL;
    if (!job && lane && lane->kind == LANE_JOB)
        job = lane->ctx; /* a serial job's task outside its body (a cancel callback) */
    if (job) {
        if (job_io_begin(job)) /* (J8) */
            return urt__error(-ECANCELED, "%s: the calling task's job %p was cancelled", fn, (void *)job);
        lane = job->serial ? &job->lane : NULL;
    } else if (lane_counts(lane) && !lane->ops->io_begin(lane->ctx)) { /* (T5) */
        return urt__error(-ECANCELED, "%s: the calling task's transaction is ending or has ended", fn);
    }
    if (lane)
        lane_hold(lane); /* (H1) */
    t->priv.job = job;
    t->priv.lane = lane;
    return 0;
}

/* A refused submission gives the counts back (the calling task still holds
 * its own, so none of them ends anything). */
static void ctx_undo(struct sched *s, struct urt_task *t)
{
    struct urt_job *job = t->priv.job;
    struct urt_lane *lane = t->priv.lane;
    if (lane)
        lane_unhold(lane);
    if (job) {
        job_io_end(job);
        job_task_finished(s, sched_current(s), job);
    } else if (lane_counts(lane)) {
        lane->ops->io_end(lane->ctx);
        lane->ops->leave(lane->ctx, NULL);
    }
}

/* ---- the pool's side ---------------------------------------------------------------------------------- */

static enum urt_task_result off_work(struct urt_task *t, void *arg)
{
    struct urt_blocking *b = arg;
    struct blk_off *o = off_of_task(t);
    o->res = b->fn(b->arg);
    atomic_store_explicit(&o->state, OFF_INFLIGHT | OFF_RAN, memory_order_release);
    return URT_TASK_DONE;
}

bool blocking_doomed(const struct urt_task *t)
{
    if (t->priv.job)
        return job_is_cancelled(t->priv.job);
    const struct urt_lane *l = t->priv.lane;
    return l && l->ops && l->ops->io_cancel && l->ops->io_cancel(l->ctx);
}

static enum urt_task_result off_cont(struct urt_task *t, void *arg);
static void off_cont_cancel(struct urt_task *t, void *arg);

void blocking_finish(struct urt_task *t, bool ran)
{
    struct blk_off *o = off_of_task(t);
    struct urt_job *job = t->priv.job;
    struct urt_lane *lane = t->priv.lane;
    if (!ran)
        o->res = -ECANCELED;
    t->fn = off_cont;
    t->cancel = off_cont_cancel;
    t->priv.flags = TASK_IO_CONT; /* a transaction's lane lets it in: counted at submission (T5) */
    /* The in-flight counts first: once delivered, the continuation may run
     * and end the job or the transaction (module comment). The lane's own
     * hold keeps a transaction alive until then (its lane is active). */
    if (job)
        job_io_end(job);
    else if (lane_counts(lane))
        lane->ops->io_end(lane->ctx);
    if (lane)
        lane_resume(lane, t); /* (H3) */
    else
        sched_push_inbox(o->s, o->home, t);
}

/* ---- the continuation -------------------------------------------------------------------------------- */

/* Calls done (b is the caller's again from this call on: rule 4). */
static void off_call(struct urt_blocking *b)
{
    struct blk_off *o = off_of(b);
    int64_t res = o->res;
    bool spawned = o->spawned;
    uint32_t st = atomic_load_explicit(&o->state, memory_order_relaxed);
    atomic_store_explicit(&o->state, st & OFF_RAN, memory_order_release);
    b->done(b, res, b->arg);
    if (spawned)
        free(b);
}

static enum urt_task_result off_cont(struct urt_task *t, void *arg)
{
    (void)t;
    off_call(arg);
    return URT_TASK_DONE;
}

/* The continuation's task was cancelled (its job was cancelled, or destroy
 * cancelled the queues): done still runs, once, with the result. */
static void off_cont_cancel(struct urt_task *t, void *arg)
{
    struct urt_lane *lane = t->priv.job ? NULL : t->priv.lane;
    struct worker *w = sched_self();
    if (w) {
        struct urt_job *saved = w->running_job;
        w->running_job = t->priv.job; /* its submissions see the cancelled job (-ECANCELED) */
        off_call(arg);
        w->running_job = saved;
    } else {
        off_call(arg); /* destroy: the workers are gone; its submissions get -ESHUTDOWN */
    }
    if (lane_counts(lane))
        lane->ops->leave(lane->ctx, NULL); /* not run through the lane: leave it here (T5) */
}

/* ---- public API ------------------------------------------------------------------------------------ */

URT_API void urt_blocking_init(struct urt_blocking *b, urt_blocking_fn *fn, urt_blocking_done_fn *done, void *arg)
{
    if (!b)
        return;
    memset(b, 0, sizeof(*b));
    b->fn = fn;
    b->done = done;
    b->arg = arg;
}

static int check_submit(const char *fn, const urt_runtime *rt, const struct urt_blocking *b, bool has_fns,
                        unsigned flags)
{
    if (!rt)
        return urt__error(-EINVAL, "%s: rt is NULL", fn);
    if (!has_fns)
        return urt__error(-EINVAL, "%s: %s is NULL", fn, !b ? "b" : !b->fn ? "b->fn" : "b->done");
    if (urt__check_flags(fn, flags, URT_BLOCKING_FLAGS_ALL))
        return -EINVAL;
    return 0;
}

static int submit_error(const char *fn, int err, const struct sched *s)
{
    if (err == -EAGAIN) {
        if (blocking_busy((struct sched *)s))
            return urt__error(err, "%s: blocking_queue_max (%llu) offloads wait for a pool thread already", fn,
                              (unsigned long long)s->cfg->blocking_queue_max);
        return urt__error(err, "%s: no blocking pool thread runs and none could be started", fn);
    }
    return urt__error(err, "%s: the runtime is being destroyed", fn);
}

/* Queues b's task (its context already in it) with its continuation bound
 * for home; a refusal undoes the context's counts. */
static int queue_offload(const char *fn, struct sched *s, struct urt_blocking *b, struct worker *home,
                         unsigned flags)
{
    struct blk_off *o = off_of(b);
    o->s = s;
    o->home = home;
    o->res = 0;
    atomic_store_explicit(&o->state, OFF_INFLIGHT, memory_order_relaxed); /* published by the queue push */
    int err = blocking_queue(s, &o->task, blocking_node_of(s, home), flags);
    if (err) {
        atomic_store_explicit(&o->state, 0, memory_order_relaxed);
        ctx_undo(s, &o->task);
        return submit_error(fn, err, s);
    }
    return 0;
}

static int submit(const char *fn, struct sched *s, struct urt_blocking *b, unsigned flags)
{
    struct blk_off *o = off_of(b);
    if (atomic_load_explicit(&o->state, memory_order_acquire) & OFF_INFLIGHT)
        return urt__error(-EBUSY, "%s: offload %p is in flight (rule 2)", fn, (void *)b);
    struct worker *w = sched_current(s);
    struct urt_task *t = &o->task;
    urt_task_init(t, off_work, b);
    int err = ctx_begin(w, t, fn);
    if (err)
        return err;
    return queue_offload(fn, s, b, w ? w : sched_pick_worker(s), flags);
}

int blocking_submit_own(struct sched *s, struct urt_blocking *b, struct worker *home)
{
    struct blk_off *o = off_of(b);
    if (atomic_load_explicit(&o->state, memory_order_acquire) & OFF_INFLIGHT)
        return urt__error(-EBUSY, "blocking_submit_own: offload %p is in flight (rule 2)", (void *)b);
    o->spawned = 0;
    urt_task_init(&o->task, off_work, b); /* no job, no lane: nothing of a user's waits for it */
    return queue_offload("blocking_submit_own", s, b, home, 0);
}

URT_API int urt_blocking_submit(urt_runtime *rt, struct urt_blocking *b, unsigned flags)
{
    int err = check_submit("urt_blocking_submit", rt, b, b && b->fn && b->done, flags);
    if (err)
        return err;
    off_of(b)->spawned = 0;
    return submit("urt_blocking_submit", sched_of(rt), b, flags);
}

URT_API int urt_blocking_spawn(urt_runtime *rt, urt_blocking_fn *fn, urt_blocking_done_fn *done, void *arg,
                               unsigned flags)
{
    if (!rt || !fn || !done)
        return urt__error(-EINVAL, "urt_blocking_spawn: %s is NULL", !rt ? "rt" : !fn ? "fn" : "done");
    int err = check_submit("urt_blocking_spawn", rt, NULL, true, flags);
    if (err)
        return err;
    struct urt_blocking *b = malloc(sizeof(*b));
    if (!b)
        return urt__error(-ENOMEM, "urt_blocking_spawn: out of memory for the offload");
    urt_blocking_init(b, fn, done, arg);
    off_of(b)->spawned = 1;
    err = submit("urt_blocking_spawn", sched_of(rt), b, flags);
    if (err)
        free(b);
    return err;
}

URT_API bool urt_blocking_ran(const struct urt_blocking *b)
{
    if (!b)
        return false;
    const struct blk_off *o = (const struct blk_off *)(const void *)&b->priv;
    return atomic_load_explicit(&((struct blk_off *)o)->state, memory_order_acquire) & OFF_RAN;
}

URT_API int urt_blocking_stats(const urt_runtime *rt, struct urt_blocking_stats *out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_blocking_stats: %s is NULL", rt ? "out" : "rt");
    blocking_read_stats(sched_of(rt), out);
    return 0;
}
