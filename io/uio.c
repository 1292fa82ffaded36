/*
 * io/uio.c — I/O for tasks (urt/io.h, SPEC C20): submission, completion
 * and the continuation; cancel, sweeps, shutdown and the io's own entry
 * points are in io/uio_life.c (their protocols are described here). The
 * operations themselves are in io/uio_ops.c; the state machine and the
 * memory-ordering contract of an io are in io/uio.h.
 *
 * ---- The path of one operation ------------------------------------------------
 *   urt_io_read(io, ...) on worker W, inside a task T
 *     uio_begin:  checks; room for a chain (sched_io_reserve) and in W's
 *                 in-flight array; the context of T is captured — T's job
 *                 (job_io_begin: live work, J8 of sched/job.c), else T's lane
 *                 (a transaction's counts it: lane_ops io_begin, T5 of
 *                 tx/tx.c), else W itself;
 *     uio_submit_op: the operation (a struct be_op, backend/backend.h)
 *                 submitted through sched_io_submit (sched/core/io.h), a
 *                 linked timeout behind it if one was set; the io's task is
 *                 made its continuation; tag := INFLIGHT | W
 *   handed to the kernel with what T submitted when T returns (one system call)
 *   W's loop reaps the completion (the one completion path) -> uio_cqe -> finish:
 *     out of the in-flight array; -ECANCELED / -EINTR after the linked timeout
 *     fired become -ETIME; tag |= DELIVERING; deliver: the io's task goes to
 *     the job (its lane if serial), else the lane, else W's sticky queue (its
 *     deque with URT_IO_STEALABLE)
 *   the task runs by the one run path (sched/core/run.h): cont_run clears the tag
 *     and calls fn(io, res, arg). A task of a cancelled job gets its cancel
 *     callback instead (cont_cancel), which calls fn just the same.
 *
 * ---- Sweeps: cancelling what other threads decide ------------------------------
 * Only W may cancel W's operations (its backend context is single-issuer; a
 * cancel finds operations of its own context only). A job cancel, a transaction
 * abort or urt_io_cancel from another worker therefore posts W's sweep task
 * (uio_sweep_post: the per-worker io_sweep task on the sticky queue, at most
 * once queued) and the sweep, on W, cancels every operation whose job is
 * cancelled, whose transaction aborts or whose tag carries UIO_T_CANCEL.
 *   poster:  state change (seq_cst RMW) -> exchange(io_sweep_queued, 1) seq_cst
 *   sweep:   store(io_sweep_queued, 0) seq_cst -> fence seq_cst -> read states
 * A poster whose exchange read 1 precedes the sweep's store in the single
 * total order, hence the fence, so the queued sweep sees its change; one that
 * read 0 queues a new sweep.
 *
 * ---- Shutdown (rule 9) ------------------------------------------------------------
 * Submissions fail with -ESHUTDOWN once destroy began (phase). On DRAIN the
 * worker calls uio_stop(w, false) when idle: every operation in flight is
 * asked to cancel; the completions arrive and the continuations run as
 * tasks, so the drain (which waits for io_inflight == 0) ends. Then, and
 * directly on CANCEL, the worker leaves its loop and calls uio_stop(w, true)
 * until nothing is pending: what is still in flight is cancelled, and each
 * completion's continuation runs in place (run_in_place), on the worker —
 * except a lane's (or a serial job's), which is queued on its lane as usual:
 * the lane may be running a task on a worker that has not stopped yet, and
 * it runs there after that task, or is cancelled with the leftovers.
 * Timed submissions still armed then are cancelled (io/uio_timed.c). A
 * continuation already queued when destroy(CANCEL) stops the workers is
 * cancelled with the queues: its cancel callback, on the destroying thread,
 * calls fn with the operation's result (a buffer's data included).
 * The per-worker state is torn down in two phases, because a worker's
 * buffers outlive its loop: a task on another worker (a lane's continuation)
 * or a cancelled continuation on the destroying thread may hold one and put
 * it back. Phase 1, on the worker once nothing is in flight (uio_stop): the
 * kernel's buffer rings are unregistered — only the ring's issuer may.
 * Phase 2, on the destroying thread once every worker was joined and the
 * leftovers were cancelled (uio_release, sched/core/start.c): the memory goes.
 * Between the two, a put from a worker lands in the ring's returns queue and
 * its returns task (queued on a worker that left) is cancelled with the
 * leftovers; a put on the destroying thread only clears `held`.
 */
#include "io/uio.h"
#include "sched/job.h"
#include "sched/lane.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "base/error.h"

/* Set while a continuation runs on a thread that is not a worker (cancelled
 * at destroy): its submissions get -ESHUTDOWN, not -EPERM. */
static _Thread_local bool tls_off_worker_shutdown;

int uio_arg_error(int err, const char *fn, const char *what)
{
    return urt__error(err, "%s: %s", fn, what);
}

/* ---- per-worker state ---------------------------------------------------------------- */

struct uio_worker *uio_worker(struct worker *w)
{
    if (!w->uio)
        w->uio = calloc(1, sizeof(struct uio_worker));
    return w->uio;
}

static int ops_reserve(struct uio_worker *uw)
{
    if (uw->n < uw->cap)
        return 0;
    uint32_t cap = uw->cap ? uw->cap * 2 : 64;
    struct uio **p = realloc(uw->ops, cap * sizeof(*p));
    if (!p)
        return -ENOMEM;
    uw->ops = p;
    uw->cap = cap;
    return 0;
}

static void ops_add(struct uio_worker *uw, struct uio *u)
{
    u->slot = uw->n;
    uw->ops[uw->n++] = u;
}

void uio_ops_remove(struct uio_worker *uw, struct uio *u)
{
    struct uio *last = uw->ops[--uw->n];
    uw->ops[u->slot] = last;
    last->slot = u->slot;
}

/* ---- submission -------------------------------------------------------------------- */

/* The continuation's context: the running task's job, else its lane. */
static int ctx_capture(struct worker *w, struct uio_ctx *cx, enum uio_kind kind, const char *fn)
{
    struct urt_lane *l = w->running_lane;
    cx->w = w;
    cx->lane = NULL;
    cx->job = w->running_job;
    if (!cx->job && l && l->kind == LANE_JOB)
        cx->job = l->ctx; /* a serial job's task outside its body (a cancel callback) */
    if (cx->job) {
        if (job_io_begin(cx->job)) /* (J8) */
            return urt__error(-ECANCELED, "%s: the calling task's job %p was cancelled", fn, (void *)cx->job);
        return 0;
    }
    if (!l)
        return 0;
    if (l->ops && l->ops->io_begin) {
        if (kind == UIO_K_MULTI || kind == UIO_K_REARM)
            return urt__error(-EOPNOTSUPP, "%s: a multishot operation may not belong to a transaction", fn);
        if (!l->ops->io_begin(l->ctx)) /* (T5) */
            return urt__error(-ECANCELED, "%s: the calling task's transaction is ending or has ended", fn);
    }
    cx->lane = l;
    return 0;
}

int uio_refused(struct urt_io *io, int err)
{
    if (err && io) {
        struct uio *u = uio_of(io);
        if (!(atomic_load_explicit(&u->tag, memory_order_relaxed) & UIO_T_INFLIGHT))
            u->flags &= (uint8_t)~UIO_F_TIMEOUT; /* the io is the caller's: rule 8 */
    }
    return err;
}

static int begin_checks(struct urt_io *io, const char *fn, enum uio_kind kind, unsigned ops, struct uio_ctx *cx)
{
    if (!io || !io->fn)
        return urt__error(-EINVAL, "%s: %s is NULL", fn, io ? "io->fn" : "io");
    struct worker *w = sched_self();
    if (!w) {
        if (tls_off_worker_shutdown)
            return urt__error(-ESHUTDOWN, "%s: the runtime is being destroyed", fn);
        return urt__error(-EPERM, "%s: the calling thread is not a worker (submit a task that submits the "
                                  "operation: urt_spawn)", fn);
    }
    struct uio *u = uio_of(io);
    if (atomic_load_explicit(&w->s->phase, memory_order_relaxed) != PHASE_RUNNING)
        return urt__error(-ESHUTDOWN, "%s: the runtime is being destroyed", fn);
    if (atomic_load_explicit(&u->tag, memory_order_relaxed) & UIO_T_INFLIGHT)
        return urt__error(-EBUSY, "%s: io %p is in flight (rule 2)", fn, (void *)io);
    bool tmo = u->flags & UIO_F_TIMEOUT;
    if (tmo && kind != UIO_K_OP)
        return urt__error(-EOPNOTSUPP, "%s: a timeout (urt_io_set_timeout) is not for sleeps and multishot "
                                       "operations", fn);
    struct uio_worker *uw = uio_worker(w);
    if (!uw || ops_reserve(uw))
        return urt__error(-ENOMEM, "%s: out of memory for the worker's table of operations", fn);
    if (ops)
        sched_io_reserve(w, ops + (tmo ? 1 : 0)); /* never refused: sched/core/io.h rule 7 */
    bool timer = kind == UIO_K_SLEEP || (tmo && !(uio_features(w) & BE_IO_LINK_TIMEOUT));
    if (timer && timerq_reserve(&w->timers, 1))
        return urt__error(-ENOMEM, "%s: out of memory for the worker's timer queue", fn);
    int err = ctx_capture(w, cx, kind, fn);
    if (err)
        return err;
    u->kind = (uint8_t)kind;
    u->flags &= UIO_F_TIMEOUT;
    return 0;
}

int uio_begin(struct urt_io *io, const char *fn, enum uio_kind kind, unsigned ops, struct uio_ctx *cx)
{
    return uio_refused(io, begin_checks(io, fn, kind, ops, cx));
}

static enum urt_task_result cont_run(struct urt_task *t, void *arg);
static void cont_cancel(struct urt_task *t, void *arg);
static void uio_cqe(struct sched_io *sio, struct worker *w, int32_t res, uint32_t cqe_flags);
static void uio_tmo_cqe(struct be_tag *tag, int32_t res, uint32_t flags);
static void uio_tmo_fire(sched_timer *t, int32_t res);

/* The deadline of rule 8: a linked timeout behind the operation
 * (BE_LINK_TIMEOUT), or, without the kernel feature, a timer of the worker
 * that cancels it. Either way it counts from the submitting call: the
 * linked timeout is absolute (CLOCK_MONOTONIC like urt_now_ns), because the
 * operations a task submits reach the kernel only when the task returns,
 * and a relative one would start then — a task that went on working for 200 µs after its
 * submission saw its deadline fire 200 µs late (bench: io_deadline). */
static void arm_deadline(struct worker *w, struct uio *u)
{
    uint64_t due = urt_now_ns() + u->sio.ns;
    if (uio_features(w) & BE_IO_LINK_TIMEOUT) {
        struct be_op t = {.kind = BE_LINK_TIMEOUT, .off = due}; /* reserved by uio_begin */
        u->tmo.complete = uio_tmo_cqe;
        be_submit(&w->be, &t, &u->tmo);
        w->io_inflight++;
        u->cqes++;
        return;
    }
    u->sio.tm = (sched_timer){0};
    timerq_add(&w->timers, &u->sio.tm, due, uio_tmo_fire); /* room reserved by uio_begin */
    timerq_sync(&w->timers);
    u->flags |= UIO_F_TMO_TIMER;
}

void uio_submit_op(struct uio_ctx *cx, struct urt_io *io, struct be_op *op)
{
    struct uio *u = uio_of(io);
    struct worker *w = cx->w;
    bool tmo = u->flags & UIO_F_TIMEOUT;
    if (tmo && (uio_features(w) & BE_IO_LINK_TIMEOUT))
        op->flags |= BE_F_LINK;
    u->flags &= ~UIO_F_TIMEOUT;
    sched_io_submit(w, op, &u->sio, uio_cqe);
    u->cqes = 1;
    if (tmo)
        arm_deadline(w, u);
    uio_submit_done(cx, io);
}

void uio_resubmit(struct worker *w, const struct be_op *op, struct uio *u)
{
    sched_io_submit(w, op, &u->sio, uio_cqe);
}

void uio_submit_done(struct uio_ctx *cx, struct urt_io *io)
{
    struct uio *u = uio_of(io);
    struct worker *w = cx->w;
    struct urt_task *t = &io->task;
    u->res = 0;
    u->cflags = 0;
    urt_task_init(t, cont_run, io);
    t->cancel = cont_cancel;
    t->priv.job = cx->job;
    t->priv.lane = cx->lane;
    t->priv.flags = TASK_IO_CONT;
    ops_add(w->uio, u);
    uint64_t tag = UIO_T_INFLIGHT | ((w->s->id & 0xff) << UIO_T_RT_SHIFT) | (w->index + 1);
    atomic_store_explicit(&u->tag, tag, memory_order_release);
}

/* ---- the continuation ----------------------------------------------------------------- */

/* Calls fn with the completion being delivered. The last one makes the io
 * the caller's again first (rule 3); a multishot one with more to come
 * (BE_CF_MORE) leaves it in flight. */
static void cont_call(struct urt_io *io)
{
    struct uio *u = uio_of(io);
    int32_t res = u->res;
    if (uio_kind_multi(u->kind) && (u->cflags & BE_CF_MORE)) {
        io->fn(io, res, io->arg);
        return;
    }
    if (u->more)
        uio_more_free(u);
    uint64_t tag = atomic_load_explicit(&u->tag, memory_order_relaxed);
    atomic_store_explicit(&u->tag, tag & (UIO_T_WORKER | UIO_T_RT), memory_order_release);
    io->fn(io, res, io->arg);
}

static void deliver_next(struct worker *w, struct uio *u);

static enum urt_task_result pump_run(struct urt_task *t, void *arg);
static void pump_cancel(struct urt_task *t, void *arg);

/* After a multishot continuation returned (F_MORE: the io is still ours):
 * the next queued completion goes out. Its queue is its worker's; a lane's
 * continuation may have run elsewhere, so the task goes back to the worker
 * first (as a pump: no job count, the context kept in priv.lane). */
static void multi_after(struct urt_io *io, bool more)
{
    if (!more)
        return;
    struct uio *u = uio_of(io);
    /* The io's worker from its tag (acquire: pairs with the release stores
     * of the tag), not from sio.w: a lane's continuation may run here while
     * the io's worker re-arms the receive (a buffer came back: go_on), and
     * sched_io_bind rewrites sio there. The worker is the same for the io's
     * whole life (a multishot is re-armed where it was submitted). */
    struct worker *self = sched_self();
    uint64_t tag = atomic_load_explicit(&u->tag, memory_order_acquire);
    struct worker *w = self->s->workers[(tag & UIO_T_WORKER) - 1];
    if (self == w) {
        u->flags &= ~UIO_F_QUEUED;
        if (u->more->n)
            deliver_next(w, u);
        return;
    }
    struct urt_task *t = &io->task;
    if (t->priv.job)
        t->priv.lane = &t->priv.job->lane; /* a serial job's: kept through the hop */
    t->priv.job = NULL;
    t->fn = pump_run;
    t->cancel = pump_cancel;
    sched_push_sticky(w->s, w, t);
}

static enum urt_task_result pump_run(struct urt_task *t, void *arg)
{
    struct urt_lane *l = t->priv.lane;
    t->fn = cont_run;
    t->cancel = cont_cancel;
    if (l && l->kind == LANE_JOB) {
        t->priv.job = l->ctx;
        t->priv.lane = NULL;
    }
    multi_after(arg, true);
    return URT_TASK_DONE;
}

static enum urt_task_result cont_run(struct urt_task *t, void *arg)
{
    struct uio *u = uio_of(arg);
    bool more = uio_kind_multi(u->kind) && (u->cflags & BE_CF_MORE);
    (void)t;
    cont_call(arg);
    multi_after(arg, more);
    return URT_TASK_DONE;
}

static void io_ended(struct urt_job *job, struct urt_lane *lane);

/* Multishot: the oldest queued completion becomes the one being delivered
 * (u->res, u->cflags). Returns whether it is the last (no F_MORE). */
static bool more_pop(struct uio *u)
{
    struct uio_more *m = u->more;
    struct uio_ent e = m->e[m->head];
    m->head = (m->head + 1) % m->cap;
    m->n--;
    u->res = e.res;
    u->cflags = e.cflags;
    return !(e.cflags & BE_CF_MORE);
}

/* Destroy cancelled a multishot delivery after the workers stopped: the
 * completions still queued (the last one among them: a worker leaves only
 * once every operation's last CQE arrived) are delivered here, on the
 * destroying thread, in order; the last one ends the io's job count. */
static void drain_off_worker(struct urt_io *io, struct urt_job *job, struct urt_lane *lane)
{
    struct uio *u = uio_of(io);
    struct sched *s = u->sio.w->s; /* the workers' memory lives until the leftovers are cancelled */
    tls_off_worker_shutdown = true;
    while (u->more && u->more->n) {
        bool last = more_pop(u);
        cont_call(io); /* the last one frees the queue; a buffer's data is still there (phase 2 frees it) */
        if (last) {
            io_ended(job, lane);
            if (job)
                sched_clients.job_task_finished(s, NULL, job);
            break;
        }
    }
    tls_off_worker_shutdown = false;
}

static void pump_cancel(struct urt_task *t, void *arg)
{
    struct urt_lane *l = t->priv.lane;
    struct urt_job *job = l && l->kind == LANE_JOB ? l->ctx : NULL;
    drain_off_worker(arg, job, job ? NULL : l);
}

/* A counted lane (a transaction's) uncounts a continuation that did not run
 * through its lane runner. */
static void lane_leave_counted(struct urt_lane *lane, uint32_t task_flags)
{
    if (lane && (task_flags & TASK_IO_CONT) && lane->ops && lane->ops->io_begin && lane->ops->leave)
        lane->ops->leave(lane->ctx, NULL);
}

/* The continuation's task was cancelled (its job was cancelled, or destroy
 * cancelled the queues): fn still runs, once, with the result. */
static void cont_cancel(struct urt_task *t, void *arg)
{
    struct worker *w = sched_self();
    struct urt_lane *lane = t->priv.job ? NULL : t->priv.lane;
    uint32_t tf = t->priv.flags;
    struct uio *u = uio_of(arg);
    bool more = uio_kind_multi(u->kind) && (u->cflags & BE_CF_MORE);
    if (w) {
        struct urt_job *saved = w->running_job;
        w->running_job = t->priv.job; /* its submissions see the cancelled job (-ECANCELED) */
        cont_call(arg);
        w->running_job = saved;
        multi_after(arg, more);
    } else {
        struct urt_job *job = t->priv.job;
        tls_off_worker_shutdown = true;
        cont_call(arg); /* destroy: the workers are gone, their buffer rings not yet */
        tls_off_worker_shutdown = false;
        if (more)
            drain_off_worker(arg, job, lane); /* the rest of a multishot, here */
    }
    lane_leave_counted(lane, tf);
}

/* ---- completion --------------------------------------------------------------------- */

/* The operation's last completion arrived: its job / transaction hear it. */
static void io_ended(struct urt_job *job, struct urt_lane *lane)
{
    if (job)
        job_io_end(job);
    else if (lane && lane->ops && lane->ops->io_end)
        lane->ops->io_end(lane->ctx);
}

/* Destroy: the worker left its loop, nothing runs tasks any more; the
 * continuation runs here, on the worker, in the task's context. */
static void run_in_place(struct worker *w, struct urt_io *io, bool last)
{
    struct urt_task *t = &io->task;
    struct urt_job *job = t->priv.job;
    struct urt_lane *lane = t->priv.lane;
    uint32_t tf = t->priv.flags;
    struct urt_job *sj = w->running_job;
    struct urt_lane *sl = w->running_lane;
    w->running_job = job;
    w->running_lane = job ? (job->serial ? &job->lane : NULL) : lane;
    cont_call(io); /* io may be gone from here on when last */
    w->running_job = sj;
    w->running_lane = sl;
    lane_leave_counted(lane, tf);
    if (last)
        io_ended(job, lane);
    if (job)
        sched_clients.job_task_finished(w->s, w, job);
}

/* Queues io's task in its context; last: the io's final completion.
 * Returns true when the continuation ran here, in place (destroy). A lane's
 * (or a serial job's) continuation is queued on its lane even then: the lane
 * may be running on a worker that has not stopped yet, and its tasks run one
 * at a time — there, or cancelled with the leftovers on the destroying
 * thread once every worker stopped. */
static bool deliver(struct worker *w, struct uio_worker *uw, struct uio *u, bool last)
{
    struct urt_io *io = uio_io(u);
    struct urt_task *t = &io->task;
    struct urt_job *job = t->priv.job;
    struct urt_lane *lane = t->priv.lane;
    if (!last && job)
        job_io_more(job); /* each multishot delivery is a task of the job; the last uses the io's count */
    if (uw->exiting && !(job ? job->serial : lane != NULL)) {
        run_in_place(w, io, last);
        return true;
    }
    /* A plain lane may be destroyed by its owner as soon as the queued
     * continuation ran (urt_lane_destroy waits for pending tasks only): read
     * whether the lane counts I/O before queueing, touch it afterwards only
     * if it does (a transaction's lane lives until its io_end, T5). */
    bool lane_counts = !job && lane && lane->ops && lane->ops->io_end;
    if (job && job->serial)
        lane_submit(&job->lane, t, 0); /* from the worker: cannot fail */
    else if (lane)
        lane_submit(lane, t, 0);
    else if ((u->opts & URT_IO_STEALABLE) && !uio_kind_multi(u->kind))
        sched_local_push(w, t);
    else
        inbox_push(&w->sticky, t); /* never stolen; we are awake */
    if (last)
        io_ended(job, lane_counts ? lane : NULL); /* after the queueing: a transaction's lane holds it now (T5) */
    return false;
}

/* Multishot: the oldest queued completion goes out (on u's worker). */
static void deliver_next(struct worker *w, struct uio *u)
{
    struct uio_worker *uw = w->uio;
    do {
        bool last = more_pop(u);
        u->flags |= UIO_F_QUEUED;
        if (last)
            atomic_fetch_or_explicit(&u->tag, UIO_T_DELIVERING, memory_order_acq_rel);
        if (!deliver(w, uw, u, last) || last)
            return;
        u->flags &= ~UIO_F_QUEUED; /* ran in place: the next one, without recursion */
    } while (u->more->n);
}

static int more_grow(struct uio_more *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 16;
    struct uio_ent *e = malloc(cap * sizeof(*e));
    if (!e)
        return -ENOMEM;
    for (uint32_t i = 0; i < m->n; i++)
        e[i] = m->e[(m->head + i) % m->cap];
    free(m->e);
    m->e = e;
    m->head = 0;
    m->cap = cap;
    return 0;
}

void uio_push(struct worker *w, struct uio *u, int32_t res, uint32_t cqe_flags)
{
    struct uio_more *m = u->more;
    bool last = !(cqe_flags & BE_CF_MORE);
    if (last)
        uio_ops_remove(w->uio, u);
    if (m->n == m->cap && more_grow(m)) {
        /* No memory to queue it (the queue is sized for a buffer ring's
         * buffers, so only accepts get here): a new connection is closed,
         * never leaked; a last completion takes the place of the newest. */
        if (!last) {
            if (res >= 0 && m->op == UIO_MOP_ACCEPT)
                uio_drop_accepted(w, u, res);
            return;
        }
        m->n--;
    }
    m->e[(m->head + m->n) % m->cap] = (struct uio_ent){res, cqe_flags};
    m->n++;
    if (!(u->flags & UIO_F_QUEUED))
        deliver_next(w, u);
}

static void finish(struct worker *w, struct uio *u)
{
    struct uio_worker *uw = w->uio;
    uio_ops_remove(uw, u);
    int32_t res = u->res;
    if ((u->flags & UIO_F_TIMED_OUT) && (res == -ECANCELED || res == -EINTR))
        res = -ETIME; /* rule 8 */
    else if (res == -EINTR && (u->flags & UIO_F_CANCEL_SENT))
        res = -ECANCELED; /* an io-wq worker interrupted by the cancel */
    if (res >= 0 && (u->flags & UIO_F_FIXED))
        res = uio_accepted_fixed(w, u, res); /* an accept into the file table */
    u->res = res;
    atomic_fetch_or_explicit(&u->tag, UIO_T_DELIVERING, memory_order_acq_rel);
    deliver(w, uw, u, true);
}

static void uio_cqe(struct sched_io *sio, struct worker *w, int32_t res, uint32_t cqe_flags)
{
    struct uio *u = (struct uio *)(void *)sio; /* sio is its first member */
    if (uio_kind_multi(u->kind)) {
        uio_multi_cqe(w, u, res, cqe_flags);
        return;
    }
    if (cqe_flags & BE_CF_NOTIF) {
        u->cflags |= BE_CF_NOTIF; /* zero-copy send: the buffer is the caller's again */
    } else {
        u->res = res;
        u->cflags = cqe_flags & ~BE_CF_MORE;
        if (cqe_flags & BE_CF_MORE)
            u->cqes++; /* a zero-copy send's notification follows */
    }
    if (u->flags & UIO_F_TMO_TIMER) {
        u->flags &= ~UIO_F_TMO_TIMER;
        timerq_remove(&w->timers, &u->sio.tm);
        timerq_sync(&w->timers);
    }
    if (--u->cqes == 0)
        finish(w, u);
}

static void uio_tmo_cqe(struct be_tag *tag, int32_t res, uint32_t flags)
{
    struct uio *u = (struct uio *)(void *)((char *)tag - offsetof(struct uio, tmo));
    struct worker *w = u->sio.w;
    (void)flags;
    w->io_inflight--;
    if (res == -ETIME)
        u->flags |= UIO_F_TIMED_OUT;
    if (--u->cqes == 0)
        finish(w, u);
}

/* The timer that stands in for a linked timeout fired: cancel the op. */
static void uio_tmo_fire(sched_timer *t, int32_t res)
{
    struct uio *u = (struct uio *)(void *)((char *)t - offsetof(struct uio, sio.tm));
    struct worker *w = u->sio.w;
    u->flags &= ~UIO_F_TMO_TIMER;
    if (res != -ETIME)
        return;
    u->flags |= UIO_F_TIMED_OUT;
    uio_cancel_now(w, w->uio, u);
    sched_io_flush(w); /* from the worker's loop, not a task */
}

void uio_timer_done(struct sched_io *sio, struct worker *w, int32_t res, uint32_t cqe_flags)
{
    struct uio *u = (struct uio *)(void *)sio;
    (void)cqe_flags;
    u->res = res == -ETIME ? 0 : res; /* the sleep ended; -ECANCELED: cancelled */
    u->cflags = 0;
    finish(w, u);
}

bool uio_off_worker_shutdown(void)
{
    return tls_off_worker_shutdown;
}

uint32_t uio_pending(const struct worker *w)
{
    const struct uio_worker *uw = w->uio;
    return uw ? uw->n + (uw->timed != NULL) : 0;
}

/* ---- public API ---------------------------------------------------------------------------- */
