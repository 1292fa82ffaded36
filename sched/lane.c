/*
 * sched/lane.c — lanes (SPEC C6): tasks of a lane run one at a time, in
 * submission order, on the worker that owns the lane; never stolen.
 *
 * ---- Design: a strand on the owner's sticky queue ---------------------------
 * A lane holds its own FIFO (a Vyukov intrusive MPSC queue, sched/core/inbox.h
 * mpsc_*), a count `pending` and one embedded runner task. pending counts the
 * lane's tasks that were submitted and have not finished (queued, running or
 * yielded). The FIFO's producers' end, pending and the stub's link lie on one
 * cache line (lane.h): L1 and L2 write that line only, and the runner that
 * finds the FIFO empty (the stub pushed back) and settles (L4) writes the
 * same one — fed from another CPU, a lane that goes idle and active again
 * moves one line each way, not three.
 *
 *   submit(t):  L1 push t on the lane's FIFO (one exchange);
 *               L2 fetch_add pending; if it was 0, the owner is chosen by
 *                  the placement rules (below); the owner is not stored:
 *                  only its sticky queue knows the lane;
 *               L3 if pending was 0: push the runner on the owner's sticky
 *                  queue (and wake the owner if it sleeps).
 *   runner:     pops the FIFO head and runs it, up to LANE_BATCH tasks
 *               (fairness with the other lanes of the worker) and no more
 *               than it knows are counted (V4), or until the FIFO looks
 *               empty; then L4 fetch_sub pending by the number of
 *               tasks that finished (their fn returned DONE). At 0 the runner
 *               stops (the lane is idle and may move at its next
 *               submission); otherwise it pushes itself to the tail of the
 *               owner's sticky queue. One RMW per batch, not per task, keeps
 *               the pending count's line off the runner's path.
 *
 * Why this and not "every task into the owner's sticky queue" (jogasaki): a
 * task that yields must keep its place. In a shared sticky queue a yielded
 * task pushed back to the tail would be overtaken by the later tasks of its
 * lane; here it stays the lane's head (`current`) and the runner, not the
 * task, goes to the tail, so the lane's order holds and other lanes still get
 * the worker. It also costs one shared-queue operation per batch, not per
 * task, and the runner keeps the lane's tasks hot on one core.
 *
 * Invariants:
 *  (V1) At most one runner execution touches the lane's tasks at a time: the
 *       runner is queued only by the submitter that moved pending 0 -> 1, and
 *       re-queues itself only while pending > 0 (so no 0 -> 1 can happen
 *       meanwhile). Hence tasks of a lane never overlap, and `current` is
 *       touched by one thread at a time.
 *  (V2) pending > 0 after L4 implies the FIFO holds a task (or the yielded
 *       `current`): every submitter pushes (L1) before it counts (L2), and at
 *       L4 every popped task is finished and subtracted, so pushed - popped >=
 *       counted - subtracted > 0. The task may be "in transit" (a producer
 *       between its exchange and its link): the runner then re-queues itself
 *       and retries.
 *  (V3) The owner is chosen at 0 -> 1 and the runner runs only on the owner
 *       (sticky queues are never stolen): a lane moves only when its runner
 *       itself hands it over between two batches (V5), never while one of
 *       its tasks runs, so V1 and the order hold across the move.
 *  (V5) Shedding: at the end of a batch, a lane with work left whose worker
 *       owns two or more active lanes goes to an idle peer (suspended, or
 *       spinning with nothing to run: worker.idle) that owns fewer
 *       (lane_shed_target) instead of its own sticky queue's tail. A
 *       busy worker cannot be robbed of lanes (sticky queues are not
 *       stealable); this is how an idle one gets some, e.g. at the tail of
 *       a fan-out where one worker ends its lanes first. Pinned lanes
 *       (urt_lane_create_on) never move, nor does a lane whose head is a
 *       yielded task (it resumes on the worker it yielded on).
 *  (V4) A runner pops at most `budget` tasks between two L4s, budget being a
 *       pending count it knows (the previous L4's result; 1 at activation,
 *       the task whose submission queued the runner): a task
 *       may be popped before its submitter counted it (L1 done, L2 not yet),
 *       so without the bound the runner could run more tasks than are
 *       counted and L4 would take pending below zero. Only the runner
 *       decrements, so pending >= budget until its next L4.
 *
 * Placement at 0 -> 1 (C5, plus balance, plus V5 later): from a worker, that worker; from
 * any other thread, its preferred worker (or round robin, per
 * use_preferred_worker_for_current_thread); URT_SUBMIT_URGENT prefers a
 * suspended worker. From a worker, with lane_balance (default true) the C5
 * choice is compared with one round-robin candidate and the one owning fewer
 * active lanes wins (the "power of two choices"); lane_balance = false keeps
 * the C5 choice strictly. From any other thread the C5 choice is kept too,
 * balance or not: its lanes gather on its preferred worker and idle peers get
 * them by shedding (V5), just as they get its plain tasks by stealing. Balanced
 * at activation, a submitting thread that feeds many lanes activated them on
 * suspended workers, paying their wakes itself (~1,000 system calls in
 * sticky_tx_remote's 12 iterations), and spread fine-grained lanes over both
 * CPUs of a 2-CPU machine while it needed one itself: with 10-step bodies
 * that ran at 0.6x urt's plain tasks under a mutex, which stay on the
 * preferred worker (docs/benchmarks.md, sticky family).
 * A lane made by urt_lane_create_on (pinned >= 0) always goes to its worker.
 *
 * ---- Memory ordering (the contract, once) -----------------------------------
 *  (M1) A task's contents are published by the FIFO push (inbox.h I1) and
 *       read after the runner's acquire pop.
 *  (M2) L4 is a release RMW; L2 is an acquire RMW. The submitter that moves
 *       pending 0 -> 1 therefore reads-from the runner's last L4 and sees
 *       every write of the lane's earlier tasks; it publishes that to the
 *       next runner through the sticky queue push (release) and pop
 *       (acquire). So task k+1 of a lane happens-after task k even when the
 *       lane moved to another worker.
 *  (M3) lanes_active (per worker, for balance) and the worker's idle mark
 *       (sched/core/worker.c, written by its owner on idle transitions) are
 *       advisory: relaxed, paired with nothing. A stale value moves a lane
 *       to a worker that just got busy, or keeps it; the move itself is
 *       ordered by the sticky push (M2), whatever the mark said.
 *  (M4) Shutdown: a submitter that is not a worker brackets its push with
 *       foreign_enter / foreign_leave (sched/core/foreign.h), exactly as
 *       sched/core/submit.c does, so sched_stop either sees its push or the
 *       submitter sees the phase.
 *  (M6) Holds (below): the park CAS and the deliveries' CASes on `conts`
 *       are acq_rel (the stack's contents published, the runner's acquire
 *       exchange takes them); the park CAS releases park_w and budget to
 *       the delivery that clears LANE_PARKED, whose sticky push (release)
 *       hands them, and the lane, to the runner's next run (acquire pop),
 *       as M2.
 *  (M5) destroying (urt_lane_create's lanes only): relaxed store by
 *       urt_lane_destroy before it waits, relaxed load by urt_lane_submit /
 *       urt_lane_spawn. It only detects misuse (a submission while destroy
 *       waits: -EINVAL); rule 3 of urt/lane.h (no submission races with
 *       destroy) is what makes destroy safe.
 *
 * ---- Holds: blocking work on a lane (urt/blocking.h) ----------------------------
 * A task of the lane that offloads a function (sched/blocking_off.c) is not
 * finished until the offload's continuation ran: the lane's next task waits.
 *  (H1) lane_hold, by the task inside the runner: holding + 1 (the runner's),
 *       pending + 1 (the continuation is a task of the lane: never an
 *       activation, the running task is counted).
 *  (H2) The runner, while holding > 0, runs only delivered continuations
 *       (oldest first; a yielded task waits in `current`); with none, it
 *       settles (L4: pending stays >= holding > 0), stores park_w and CASes
 *       `conts` from empty to LANE_PARKED: parked, it is queued nowhere and
 *       returns.
 *  (H3) lane_resume (any thread: the pool thread whose function returned)
 *       pushes the continuation on `conts` (a Treiber stack of
 *       continuations whose head word also carries LANE_PARKED) with one
 *       CAS that clears the bit. Push and unpark are one step: a park CAS
 *       succeeds only on an empty stack, so either the runner sees the
 *       continuation or the delivery sees LANE_PARKED and pushes the
 *       runner on park_w's sticky queue (waking it): exactly one requeue,
 *       no lost continuation. Without the bit the CAS is the delivery's
 *       last touch of the lane (the continuation may run and the lane end
 *       right after it); with it, the lane waits for the requeue.
 *  (H4) A continuation that finished: holding - 1 (it cannot yield). At 0
 *       the lane goes on: `current`, then the FIFO. V1 holds (the runner is
 *       requeued only by the delivery that unparked it), V4 holds (pending
 *       only grew), the lane is never idle while it holds.
 *
 * Load: one exchange + one fetch_add per submission, no lock, no allocation; the
 * runner does one fetch_sub and one sticky push per batch.
 */
#include "sched/lane.h"
#include "sched/admission.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include <urt/lane.h>

#include "sched/core/run.h"

#include "base/args.h"
#include "base/error.h"
#include "base/waitcount.h"

/* Tasks a runner runs before it lets the worker's other lanes and queues in. */
#define LANE_BATCH 64

/* ---- placement --------------------------------------------------------------- */

static struct worker *lane_pick(const struct urt_lane *l, struct sched *s, struct worker *self, unsigned flags)
{
    if (l->pinned >= 0)
        return s->workers[l->pinned]; /* urt_lane_create_on */
    struct worker *w = NULL;
    if (flags & URT_SUBMIT_URGENT)
        w = sched_find_sleeping(s);
    if (!w)
        w = self ? self : sched_pick_worker(s);
    if (!s->cfg->lane_balance || s->n_workers == 1 || !self)
        return w; /* strict C5; always from a thread that is not a worker (see the top) */
    uint32_t i = atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed) % s->n_workers;
    struct worker *c = s->workers[i];
    if (c == w)
        c = s->workers[(i + 1) % s->n_workers];
    /* (M3) advisory counts */
    if (atomic_load_explicit(&c->lanes_active, memory_order_relaxed) <
        atomic_load_explicit(&w->lanes_active, memory_order_relaxed))
        w = c;
    return w;
}

/* ---- running ------------------------------------------------------------------- */

/* Runs t on w (the run path: sched/core/run.h, with the runner as the outer
 * watched task); returns what its fn returned (DONE also for a skipped or
 * refused task). */
static inline enum urt_task_result run_one(struct worker *w, struct urt_lane *l, struct urt_task *t)
{
    const struct lane_ops *ops = l->ops;
    struct urt_job *job = t->priv.job;
    uint32_t flags = t->priv.flags; /* read before fn: fn may free t */
    w->running_lane = l; /* also around a cancel callback: an I/O continuation's context */
    if (sched_run_skip(w, t)) {
        w->running_lane = NULL;
        return URT_TASK_DONE;
    }
    if (ops && ops->enter && !ops->enter(l->ctx, t)) {
        sched_cancel_task(w->s, w, t); /* the task may not start (tx ending) */
        w->running_lane = NULL;
        return URT_TASK_DONE;
    }
    struct run_result rr = sched_run_body(w, t, &l->runner);
    w->running_lane = NULL;
    if (ops && ops->leave)
        ops->leave(l->ctx, t);
    if (rr.r == URT_TASK_YIELD) {
        STAT_INC(w, yields);
        t->priv.enqueue_ns = rr.end_ns; /* waits again: queue delay restarts (0: not timed) */
        return rr.r;
    }
    sched_finish_task(w, t, flags, job);
    return URT_TASK_DONE;
}

/* L4: subtracts the tasks that finished; returns the pending count left.
 * At 0 the lane is idle: the runner's last access to it. */
static inline uint32_t lane_settle(struct urt_lane *l, uint32_t finished)
{
    l->budget = 0; /* what the next activation starts from (written before L4) */
    /* release: pairs with the acquire CAS of the next 0 -> 1 (M2) */
    uint32_t old = atomic_fetch_sub_explicit(&l->pending, finished, memory_order_acq_rel);
    assert(old >= finished); /* (V4) */
    return old - finished;
}

/* An idle peer of w: a suspended one if any, else the next worker after w
 * in index order (rotating by batch) if it marked itself idle (its spin
 * found nothing for a few polls). One peer's line read per batch, not a
 * scan: the line is written only on the peer's idle transitions. */
static struct worker *idle_peer(struct sched *s, struct worker *w)
{
    struct worker *to = sched_find_sleeping(s);
    if (to || s->n_workers < 2)
        return to;
    uint32_t k = 1 + (uint32_t)(w->tick % (s->n_workers - 1));
    to = s->workers[(w->index + k) % s->n_workers];
    return atomic_load_explicit(&to->idle, memory_order_relaxed) ? to : NULL;
}

/* (V5) The shed rule: a lane that goes on may move to an idle peer (one
 * that is suspended, or spinning with nothing to run) between two batches
 * when its worker owns at least two active lanes and the peer owns fewer
 * than this worker would after the move. A spinning peer takes the lane
 * without a suspend and a wake: at the end of sticky_tx_remote, where one
 * worker ran out of lanes while the other (which shared its CPU with the
 * submitting thread) still had several, moving lanes only to suspended
 * peers cost a suspend/wake cycle per lane moved. The counts and the idle
 * mark are advisory (M3): a stale read costs balance, never correctness. */
static struct worker *lane_shed_target(const struct urt_lane *l, struct worker *w)
{
    struct sched *s = w->s;
    if (l->pinned >= 0 || l->current)
        return NULL; /* pinned; a yielded task resumes where it yielded */
    uint32_t mine = atomic_load_explicit(&w->lanes_active, memory_order_relaxed);
    if (mine < 2)
        return NULL;
    struct worker *to = idle_peer(s, w);
    if (!to || to == w || atomic_load_explicit(&to->lanes_active, memory_order_relaxed) + 1 >= mine)
        return NULL;
    return to;
}

/* pending > 0: the runner goes to the tail of a sticky queue — its own (we
 * are awake: no wake; the queue's exchange orders it for has_work()), or a
 * idle peer's (V5; sched_push_sticky wakes it if it sleeps; the push's release and
 * the peer's acquire pop order this batch before the next, M2). */
static void lane_requeue(struct urt_lane *l, struct worker *w)
{
    struct worker *to = lane_shed_target(l, w);
    if (__builtin_expect(to == NULL, 1)) {
        inbox_push(&w->sticky, &l->runner);
        return;
    }
    atomic_fetch_sub_explicit(&w->lanes_active, 1, memory_order_relaxed); /* (M3) */
    atomic_fetch_add_explicit(&to->lanes_active, 1, memory_order_relaxed);
    STAT_INC(w, lanes_moved);
    sched_push_sticky(w->s, to, &l->runner);
}

/* ---- holds (H1-H4) ------------------------------------------------------------- */

#define LANE_PARKED ((uintptr_t)1) /* in `conts`: the runner is parked (tasks are 8-byte aligned) */

/* The runner: the oldest delivered continuation, or NULL. */
static struct urt_task *cont_next(struct urt_lane *l)
{
    struct urt_task *t = l->conts_head;
    if (!t) {
        uintptr_t top = atomic_exchange_explicit(&l->conts, 0, memory_order_acquire);
        struct urt_task *stack = (struct urt_task *)top; /* never LANE_PARKED: we run */
        while (stack) { /* newest first: reverse into arrival order */
            struct urt_task *next = atomic_load_explicit(&stack->priv.next, memory_order_relaxed);
            atomic_store_explicit(&stack->priv.next, t, memory_order_relaxed);
            t = stack;
            stack = next;
        }
        if (!t)
            return NULL;
    }
    l->conts_head = atomic_load_explicit(&t->priv.next, memory_order_relaxed);
    return t;
}

/* (H2) true: parked (the next delivery requeues the runner); false: a
 * continuation was delivered meanwhile. */
static bool lane_park(struct urt_lane *l, struct worker *w)
{
    l->park_w = w;
    uintptr_t none = 0;
    return atomic_compare_exchange_strong_explicit(&l->conts, &none, LANE_PARKED, memory_order_acq_rel,
                                                   memory_order_acquire); /* (M6) */
}

void lane_hold(struct urt_lane *l)
{
    l->holding++; /* (H1) the runner's own thread */
    atomic_fetch_add_explicit(&l->pending, 1, memory_order_acq_rel);
}

void lane_unhold(struct urt_lane *l)
{
    l->holding--;
    atomic_fetch_sub_explicit(&l->pending, 1, memory_order_acq_rel); /* > 0: the running task counts */
}

void lane_resume(struct urt_lane *l, struct urt_task *t)
{
    struct sched *s = l->s;
    struct worker *self = sched_current(s);
    t->priv.lane = l;
    probe_task_submit(t, self ? (int)self->index : -1);
    uintptr_t top = atomic_load_explicit(&l->conts, memory_order_relaxed);
    do {
        atomic_store_explicit(&t->priv.next, (struct urt_task *)(top & ~LANE_PARKED), memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(&l->conts, &top, (uintptr_t)t, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (H3) */
    /* Not parked: that CAS was the last touch (the runner may run t and the
     * lane end at once). Parked: the lane waits for this push. */
    if (top & LANE_PARKED) /* our CAS read the park CAS: park_w, budget (M6) */
        sched_push_sticky(s, l->park_w, &l->runner);
}

enum lane_pick { PICK_TASK, PICK_NONE, PICK_PARKED };

/* The runner's next task: a delivered continuation while the lane holds
 * (H2: none yet, it settles and parks), else the yielded head, else the
 * FIFO's (PICK_NONE: empty, or in transit, V2). *cont: a continuation. */
static enum lane_pick lane_next(struct urt_lane *l, struct worker *w, uint32_t *finished, uint32_t *budget,
                                struct urt_task **t, bool *cont)
{
    *cont = __builtin_expect(l->holding != 0, 0);
    if (*cont) {
        while (!(*t = cont_next(l))) {
            if (*finished) {
                *budget = lane_settle(l, *finished); /* > 0: the lane holds */
                *finished = 0;
            }
            l->budget = *budget;
            if (lane_park(l, w))
                return PICK_PARKED;
        } /* a continuation arrived meanwhile */
        return PICK_TASK;
    }
    if ((*t = l->current)) {
        l->current = NULL;
        return PICK_TASK;
    }
    return (*t = mpsc_pop(&l->q_head, &l->q_tail, &l->q_stub)) ? PICK_TASK : PICK_NONE;
}

/* The runner counts as one task run; the tasks it ran beyond it. */
static inline void runner_stats(struct worker *w, unsigned ran)
{
    if (ran > 1) {
        STAT_ADD(w, tasks_run, ran - 1);
        STAT_ADD(w, sticky_runs, ran - 1);
    }
}

static enum urt_task_result lane_runner(struct urt_task *runner, void *arg)
{
    struct urt_lane *l = arg;
    struct worker *w = sched_current(l->s);
    void (*idle)(void *) = l->ops ? l->ops->idle : NULL;
    void *ctx = l->ctx;
    unsigned ran = 0;
    uint32_t finished = 0;
    /* (V4) tasks known to be counted and not finished: at activation (budget
     * 0) at least the one whose submission queued the runner. */
    uint32_t budget = l->budget ? l->budget : 1;
    (void)runner;
    while (ran < LANE_BATCH) {
        if (finished == budget) {
            /* every task we knew of is done: settle, and learn how many more */
            uint32_t left = lane_settle(l, finished);
            if (left == 0)
                goto idle;
            budget = left;
            finished = 0;
        }
        if (__builtin_expect(atomic_load_explicit(&l->s->phase, memory_order_relaxed) == PHASE_STOPPING, 0))
            break; /* destroy(CANCEL): the queued tasks are cancelled, not run */
        struct urt_task *t;
        bool cont;
        enum lane_pick p = lane_next(l, w, &finished, &budget, &t, &cont);
        if (p == PICK_PARKED) {
            runner_stats(w, ran); /* (H2) the delivery of a continuation queues the runner again */
            return URT_TASK_DONE;
        }
        if (p == PICK_NONE)
            break;
        ran++;
        enum urt_task_result r = run_one(w, l, t);
        if (cont)
            l->holding--; /* (H4) */
        if (r == URT_TASK_YIELD) {
            l->current = t; /* keeps its place at the head of the lane */
            break;
        }
        finished++;
    }
    if (finished) {
        uint32_t left = lane_settle(l, finished);
        if (left == 0)
            goto idle;
        budget = left;
    }
    l->budget = budget; /* still ours: pending > 0 */
    runner_stats(w, ran);
    lane_requeue(l, w);
    return URT_TASK_DONE;

idle:
    /* The lane may be re-activated (even freed) from here on: touch nothing
     * of it. */
    runner_stats(w, ran);
    atomic_fetch_sub_explicit(&w->lanes_active, 1, memory_order_relaxed);
    if (idle)
        idle(ctx);
    return URT_TASK_DONE;
}

/* ---- submission ------------------------------------------------------------------ */

void lane_init(struct urt_lane *l, struct sched *s, enum lane_kind kind, const struct lane_ops *ops, void *ctx)
{
    atomic_init(&l->pending, 0);
    mpsc_init(&l->q_head, &l->q_tail, &l->q_stub);
    urt_task_init(&l->runner, lane_runner, l);
    l->runner.priv.flags = TASK_LANE_RUNNER;
    l->current = NULL;
    l->budget = 0;
    l->holding = 0;
    l->conts_head = NULL;
    l->park_w = NULL;
    atomic_init(&l->conts, 0);
    l->s = s;
    l->ops = ops;
    l->ctx = ctx;
    l->kind = kind;
    l->heap = false;
    l->pinned = -1;
    atomic_init(&l->destroying, false);
}

int lane_submit(struct urt_lane *l, struct urt_task *t, unsigned flags)
{
    struct sched *s = l->s;
    struct worker *self = sched_current(s);
    if (!self && !sched_foreign_enter(s)) /* (M4) */
        return -ESHUTDOWN;
    t->priv.lane = l;
    probe_task_submit(t, self ? (int)self->index : -1); /* one load when nobody consumes stamps */
    mpsc_push(&l->q_head, t); /* L1 (M1) */

    /* L2, acquire: pairs with the runner's release L4 (M2). */
    uint32_t old = atomic_fetch_add_explicit(&l->pending, 1, memory_order_acq_rel);
    if (old == 0) {
        struct worker *target = lane_pick(l, s, self, flags);
        atomic_fetch_add_explicit(&target->lanes_active, 1, memory_order_relaxed); /* (M3) */
        if (l->ops && l->ops->active)
            l->ops->active(l->ctx);
        if (target == self)
            inbox_push(&self->sticky, &l->runner); /* L3: we are awake */
        else
            sched_push_sticky(s, target, &l->runner); /* L3 + wake */
    }
    if (!self)
        sched_foreign_leave(); /* (M4) */
    return 0;
}

static int place_lane(void *ctx, struct urt_task *t, unsigned flags)
{
    return lane_submit(ctx, t, flags);
}

int lane_submit_counted(struct urt_lane *l, struct urt_task *t, unsigned flags, bool *gone)
{
    *gone = false;
    if (__builtin_expect(l->s->adm == NULL, 1))
        return lane_submit(l, t, flags);
    bool pooled = t->priv.flags & TASK_POOLED;
    int err = admission_submit_via(l->s, t, flags, place_lane, l); /* sched/admission.c */
    *gone = err && pooled;
    return err;
}

/* The message of a refused lane submission. */
int lane_submit_error(const char *fn, int err)
{
    if (err == -EAGAIN)
        return urt__error(err, "%s: max_pending_tasks reached", fn);
    return urt__error(err, "%s: the runtime is being destroyed", fn);
}

int lane_cancel_runner(struct sched *s, struct urt_task *runner)
{
    struct urt_lane *l = runner->arg;
    int n = 0;
    struct urt_task *t;
    void (*idle)(void *) = l->ops ? l->ops->idle : NULL;
    void *ctx = l->ctx;
    /* Continuations first (H2): every offload delivered before the workers
     * were joined (sched/blocking.c blocking_quiesce). */
    while ((t = cont_next(l))) {
        sched_cancel_task(s, NULL, t);
        n++;
    }
    l->holding = 0;
    if ((t = l->current)) {
        l->current = NULL;
        sched_cancel_task(s, NULL, t);
        n++;
    }
    /* The workers are gone and no submitter is in flight: nothing is in transit. */
    while ((t = mpsc_pop(&l->q_head, &l->q_tail, &l->q_stub))) {
        sched_cancel_task(s, NULL, t);
        n++;
    }
    l->budget = 0;
    atomic_store_explicit(&l->pending, 0, memory_order_release);
    if (idle)
        idle(ctx);
    return n;
}

/* ---- public API ----------------------------------------------------------------- */

static int lane_create(const char *fn, urt_runtime *rt, int32_t pinned, urt_lane **out)
{
    struct urt_lane *l = aligned_alloc(64, (sizeof(*l) + 63) & ~(size_t)63);
    if (!l)
        return urt__error(-ENOMEM, "%s: out of memory", fn);
    lane_init(l, sched_of(rt), LANE_PLAIN, NULL, NULL);
    l->heap = true;
    l->pinned = pinned;
    *out = l;
    return 0;
}

URT_API int urt_lane_create(urt_runtime *rt, urt_lane **out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_lane_create: %s is NULL", rt ? "out" : "rt");
    return lane_create("urt_lane_create", rt, -1, out);
}

URT_API int urt_lane_create_on(urt_runtime *rt, uint32_t worker, urt_lane **out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_lane_create_on: %s is NULL", rt ? "out" : "rt");
    uint32_t n = sched_of(rt)->n_workers;
    if (urt__check_range("urt_lane_create_on", "worker", worker, 0, n - 1))
        return -EINVAL;
    return lane_create("urt_lane_create_on", rt, (int32_t)worker, out);
}

/* The checks of urt_lane_submit / urt_lane_spawn: what names the task
 * argument. */
static int lane_check(const char *fn, const struct urt_lane *l, bool has_fn, const char *what, unsigned flags)
{
    if (!l || !has_fn)
        return urt__error(-EINVAL, "%s: %s is NULL", fn, !l ? "lane" : what);
    if (urt__check_flags(fn, flags, URT_SUBMIT_FLAGS_ALL))
        return -EINVAL;
    if (l->kind != LANE_PLAIN)
        return urt__error(-EINVAL, "%s: lane %p belongs to a transaction or a job", fn, (const void *)l);
    if (atomic_load_explicit(&l->destroying, memory_order_relaxed)) /* (M5) */
        return urt__error(-EINVAL, "%s: lane %p is being destroyed", fn, (const void *)l);
    return 0;
}

URT_API int urt_lane_submit(urt_lane *lane, struct urt_task *task, unsigned flags)
{
    int err = lane_check("urt_lane_submit", lane, task && task->fn, task ? "task->fn" : "task", flags);
    if (err)
        return err;
    task->priv.submit_flags = flags;
    task->priv.flags &= ~(TASK_POOLED | TASK_ADMITTED);
    task->priv.job = NULL;
    bool gone;
    err = lane_submit_counted(lane, task, flags, &gone);
    return err ? lane_submit_error("urt_lane_submit", err) : 0;
}

URT_API int urt_lane_spawn(urt_lane *lane, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags)
{
    int err = lane_check("urt_lane_spawn", lane, fn != NULL, "fn", flags);
    if (err)
        return err;
    struct sched *s = lane->s;
    struct urt_task *t = sched_spawn_task(s, fn, cancel, arg, flags);
    if (!t)
        return urt__error(-ENOMEM, "urt_lane_spawn: out of memory for a pooled task");
    bool gone;
    err = lane_submit_counted(lane, t, flags, &gone);
    if (err && !gone)
        sched_task_free(s, t);
    return err ? lane_submit_error("urt_lane_spawn", err) : 0;
}

URT_API uint32_t urt_lane_pending(const urt_lane *lane)
{
    return lane ? atomic_load_explicit(&lane->pending, memory_order_acquire) : 0;
}

/* acquire: pairs with the runner's release L4, its last access (M2). */
static bool lane_drained(void *lane)
{
    return atomic_load_explicit(&((urt_lane *)lane)->pending, memory_order_acquire) == 0;
}

URT_API int urt_lane_destroy(urt_lane *lane)
{
    if (!lane)
        return 0;
    if (!lane->heap)
        return urt__error(-EINVAL, "urt_lane_destroy: lane %p belongs to a transaction or a job", (void *)lane);
    struct worker *self = sched_current(lane->s);
    uint32_t pending = atomic_load_explicit(&lane->pending, memory_order_acquire);
    if (self && pending != 0) /* a worker may not wait: a task of this lane could be queued behind us */
        return urt__error(-EBUSY, "urt_lane_destroy: lane %p has %u task(s) pending and a worker may not wait",
                          (void *)lane, pending);
    atomic_store_explicit(&lane->destroying, true, memory_order_relaxed); /* (M5) */
    /* A poll, not a waitcount: the runner's L4 reads the exact count it
     * leaves (V4), so no waiting bit may share the word, and L4 is its last
     * access, so it cannot wake anyone after it (base/waitcount.h). */
    urt_wait_poll(lane_drained, lane, URT_WAITCOUNT_FOREVER);
    free(lane);
    return 0;
}
