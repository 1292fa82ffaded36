/*
 * sched/core/worker.c — the worker loop, suspend and wake, stealing, shutdown.
 *
 * A worker is a thread pinned by its placement that owns one backend context
 * (backend/backend.h; created in its own thread: single issuer). Its loop:
 *
 *   reap completions -> pick (sticky vs main by ratio; main = the LIFO slot,
 *   then the deque; every inbox_check_interval picks the inbox first, else
 *   the deque's oldest task: oldest_local) -> run -> account
 *   nothing? drain inbox -> steal (round robin after the last victim) ->
 *   pace (task_polling_wait; and a sched_yield every 64 empty polls) ->
 *   after spin_limit() empty polls (worker_try_count while fed a stream;
 *   after a lone wake the adaptive budget stats.spin_polls, at most that):
 *   suspend
 *
 * ---- No lost wakeup ------------------------------------------------------------
 * The one protocol of sched/core/sleeper.h (the argument is written there): a
 * worker is its sleeper. W1 is the push of the task (inbox/sticky exchange of
 * the head, seq_cst; a local deque push is seen by the owner itself); S3 is
 * has_work() over every queue; S4 is be_wait with the suspend timeout
 * (worker_suspend_timeout_us: not part of the argument; tests run with a 60 s
 * timeout to prove it).
 *
 * Surplus wakes: a worker that finds more work than it can run (local pushes
 * while the deque holds more than one task, a batch taken from its inbox, a
 * split push of work it leaves for a peer: sched_push_split) wakes one
 * suspended peer, at most one such wake runtime-wide at a time
 * (surplus_waking), so the peer can steal. Best effort: the work is not lost
 * without it, its owner runs it.
 *
 * Leaving the waker's CPU: a wake that asks a peer to help (a surplus wake;
 * a push on a suspended peer's sticky queue by a worker: a lane activated
 * or shed there, a task sent there) notes the waker's CPU in the peer
 * (waker_cpu). The kernel often runs the woken thread on its waker's CPU,
 * where it waits for the waker's time slice and then shares that CPU for
 * milliseconds before the load balancer moves one of them
 * (docs/benchmarks.md, "Where a woken worker runs": 1.8 ms, then up to 8
 * ms, on a 2-vCPU VM). When the woken worker next takes work from its
 * sticky queue and still runs on the noted CPU, it moves itself off that
 * CPU (its affinity without it, then back: leave_waker_cpu). The sticky
 * queue's work is never stolen, so a lane run beside its busy waker on one
 * CPU only time-shares it. Stealable work is left where the kernel put it:
 * moving for it as well halved spawn_many_local, whose tiny tasks gain
 * nothing from a second CPU.
 * Ordering of the note (all relaxed; it is advisory: a lost note costs a
 * move, a stale one a needless migration): the owner clears it before S1
 * (sleeper_announce, seq_cst), and a waker writes it only after its W3
 * load (seq_cst) read SLEEPING from that S1, so the clear happens before
 * the note and never erases a note of the wake that ends this sleep. The
 * owner's read after it resumes pairs with nothing: the wake message is
 * sent after the note, so the owner sees it in practice, and if it did not
 * it would only stay where it is.
 *
 * Starting and stopping (the workers' memory and threads, the drain):
 * sched/core/start.c.
 */
#include "sched/core/sched.h"
#include "sched/core/run.h"
#include "base/clock.h"
#include "base/tls.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Thread_local struct worker *sched_tls_worker URT_TLS_IE; /* sched.h: sched_self, sched_current */

static _Thread_local const struct sched *tls_service;

void sched_set_service_thread(const struct sched *s)
{
    tls_service = s;
}

bool sched_service_thread(const struct sched *s)
{
    return tls_service != NULL && tls_service == s;
}

#define ASSERT_OWNER(w) assert(sched_tls_worker == (w))

/* ---- wake ------------------------------------------------------------------ */

static bool send_wake(struct sched *s, struct worker *target, struct worker *self)
{
    int err;
    /* The stamp belongs to the winner of wake_pending (W4) until the sleeper
     * takes it at R2; release pairs with the acquire load in on_tag. */
    uint64_t sent_ns = probe_wake_timing_on() ? urt_clock_ns() : 0;
    atomic_store_explicit(&target->wake_sent_ns, sent_ns, memory_order_release);
    URT_PROBE_WAKE_SENT(self ? (int64_t)self->index : -1, target->index, sent_ns);
    err = be_wake(&s->caps, &s->be_shared, self ? &self->be : NULL, target->peer, target->index);
    if (self)
        STAT_INC(self, wakes_sent);
    else
        atomic_fetch_add_explicit(&s->foreign_wakes, 1, memory_order_relaxed);
    if (__builtin_expect(err < 0, 0)) {
        /* Nothing is in flight: let the next submitter try again. */
        sleeper_send_failed(&target->sl);
        atomic_fetch_add_explicit(&s->foreign_wake_failures, 1, memory_order_relaxed);
        return false;
    }
    return true;
}

/* help: the wake asks w to help self (a surplus wake, a sticky push): a
 * wake sent notes self's CPU in w ("Leaving the waker's CPU", above). */
static bool notify(struct sched *s, struct worker *w, struct worker *self, bool help)
{
    /* W3 + W4 (sched/core/sleeper.h), after the caller's seq_cst push (W1). */
    enum sleeper_claim c = sleeper_claim_wake(&w->sl);
    if (c != SLEEPER_SEND)
        return c == SLEEPER_IN_FLIGHT;
    if (help && self && self != w)
        atomic_store_explicit(&w->waker_cpu, sched_getcpu(), memory_order_relaxed);
    return send_wake(s, w, self == w ? NULL : self);
}

bool sched_notify(struct sched *s, struct worker *w, struct worker *self)
{
    return notify(s, w, self, false);
}

/* The owner, having taken work from its sticky queue: if a wake to help
 * noted its waker's CPU and it still runs there, it moves to another CPU it
 * may use (restoring its affinity at once: the kernel does not move it
 * back). The affinity is read, not remembered: whatever set it (placement,
 * the user's taskset) stays. */
static __attribute__((cold, noinline)) void leave_waker_cpu(struct worker *w)
{
    int from = atomic_exchange_explicit(&w->waker_cpu, -1, memory_order_relaxed); /* a note is used once */
    if (from < 0 || from >= CPU_SETSIZE || sched_getcpu() != from)
        return;
    cpu_set_t mine, others;
    if (pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine) != 0)
        return;
    others = mine;
    CPU_CLR(from, &others);
    if (CPU_COUNT(&others) == 0 || pthread_setaffinity_np(pthread_self(), sizeof(others), &others) != 0)
        return; /* bound to that CPU alone: nowhere to go */
    pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
    STAT_INC(w, cpu_moves);
}

void sched_worker_bind_cpu(struct worker *w, int cpu)
{
    ASSERT_OWNER(w);
    cpu_set_t mine, one;
    if (cpu < 0 || cpu >= CPU_SETSIZE || pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine) != 0 ||
        !CPU_ISSET(cpu, &mine) || CPU_COUNT(&mine) < 2)
        return; /* not among its CPUs, or already on it alone */
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(one), &one); /* refused (a cpuset): it stays */
}

struct worker *sched_find_sleeping(struct sched *s)
{
    if (atomic_load_explicit(&s->n_sleeping, memory_order_relaxed) == 0)
        return NULL;
    /* Prefer a sleeper that last ran on the caller's CPU: the kernel tends
     * to wake a thread where it last ran, and a wake on the waker's own CPU
     * costs a few µs where a wake across CPUs costs tens (an IPI to an idle
     * vCPU). */
    int cpu = sched_getcpu();
    struct worker *any = NULL;
    uint32_t start = atomic_load_explicit(&s->rr, memory_order_relaxed);
    for (uint32_t i = 0; i < s->n_workers; i++) {
        struct worker *w = s->workers[(start + i) % s->n_workers];
        if (!sleeper_sleeping(&w->sl))
            continue;
        if (atomic_load_explicit(&w->last_cpu, memory_order_relaxed) == cpu)
            return w;
        if (!any)
            any = w;
    }
    return any;
}

/* Wake one suspended peer so it can steal self's surplus. */
static __attribute__((cold)) void wake_peer_for_surplus(struct sched *s, struct worker *self)
{
    if (atomic_exchange_explicit(&s->surplus_waking, 1, memory_order_acq_rel))
        return;
    /* The flag is cleared by the woken worker when it resumes, or here when
     * no wake is on its way (the target resumed meanwhile). */
    struct worker *w = sched_find_sleeping(s);
    if (!w || w == self || !notify(s, w, self, true))
        atomic_store_explicit(&s->surplus_waking, 0, memory_order_relaxed);
}

static inline void maybe_wake_peer(struct sched *s, struct worker *self)
{
    if (atomic_load_explicit(&s->n_sleeping, memory_order_relaxed) != 0 &&
        !atomic_load_explicit(&s->surplus_waking, memory_order_relaxed))
        wake_peer_for_surplus(s, self);
}

/* ---- queues ------------------------------------------------------------------ */

void sched_push_inbox(struct sched *s, struct worker *w, struct urt_task *t)
{
    struct worker *self = sched_current(s);
    probe_task_submit(t, self ? (int)self->index : -1);
    inbox_push(&w->inbox, t); /* W1 */
    sched_notify(s, w, self);
}

void sched_push_sticky(struct sched *s, struct worker *w, struct urt_task *t)
{
    struct worker *self = sched_current(s);
    probe_task_submit(t, self ? (int)self->index : -1);
    inbox_push(&w->sticky, t); /* W1 */
    notify(s, w, self, true);
}

void sched_local_push(struct worker *w, struct urt_task *t)
{
    if (__builtin_expect(deque_push(&w->deque, t) != 0, 0)) {
        /* The deque could not grow (ENOMEM): the inbox takes any number. */
        inbox_push(&w->inbox, t);
        return;
    }
    if (deque_size(&w->deque) > 1)
        maybe_wake_peer(w->s, w);
}

/* The LIFO slot (after Tokio's): the task the running task submitted last
 * waits here, not in the deque, and is the next local pick; a second
 * submission moves the first into the deque. The owner's pick order is the
 * deque's own (newest first), but a chain of tasks that each submit the next
 * (message passing, continuations) never touches the deque: no push, and no
 * pop with its fence against thieves. The price: a peer cannot steal the
 * slot's task, so it waits for its submitter to return even while a peer
 * idles (lifo_slot = false keeps every submission stealable at once). */
void sched_local_spawn(struct worker *w, struct urt_task *t)
{
    if (__builtin_expect(!w->lifo_on, 0)) {
        sched_local_push(w, t);
        return;
    }
    struct urt_task *prev = w->lifo;
    w->lifo = t;
    if (prev)
        sched_local_push(w, prev);
}

void sched_push_split(struct worker *w, struct urt_task *t)
{
    if (__builtin_expect(deque_push(&w->deque, t) != 0, 0)) {
        inbox_push(&w->inbox, t); /* ENOMEM: the owner runs it */
        return;
    }
    maybe_wake_peer(w->s, w);
}

static inline void yield_push(struct worker *w, struct urt_task *t)
{
    atomic_store_explicit(&t->priv.next, NULL, memory_order_relaxed);
    if (w->yield_tail)
        atomic_store_explicit(&w->yield_tail->priv.next, t, memory_order_relaxed);
    else
        w->yield_head = t;
    w->yield_tail = t;
}

/* Owner: the LIFO slot's task, else the deque's newest; when the deque is
 * dry, the yielded tasks move into it (oldest pushed first), so they run
 * after other work and idle peers can steal them — all but the newest,
 * which the deque's take would return at once: it runs now, without the
 * push and the take's fence (a lone yielder costs no deque operation). A
 * suspended peer is woken whenever two or more moved, as if all had. A
 * task sent to this worker (TASK_PINNED) never goes into the deque: it
 * stays in the yield queue, behind what moved, and runs here; one at the
 * head runs at once. */
static inline struct urt_task *local_pop(struct worker *w)
{
    struct urt_task *t = w->lifo;
    if (t) {
        w->lifo = NULL;
        return t;
    }
    t = deque_take(&w->deque);
    if (t || !w->yield_head)
        return t;
    struct urt_task *y = w->yield_head;
    if (y->priv.flags & TASK_PINNED) {
        /* Sent here: runs here, oldest first, in O(1) — a walk re-links
         * the pinned tasks, so it happens only when an unpinned one is at
         * the head, about once per round of the queue. */
        w->yield_head = atomic_load_explicit(&y->priv.next, memory_order_relaxed);
        if (!w->yield_head)
            w->yield_tail = NULL;
        return y;
    }
    w->yield_head = w->yield_tail = NULL;
    bool moved = false;
    for (struct urt_task *next; (next = atomic_load_explicit(&y->priv.next, memory_order_relaxed)); y = next) {
        if (y->priv.flags & TASK_PINNED) {
            yield_push(w, y); /* sent here: not stealable (rewrites y's link: next was read first) */
        } else {
            sched_local_push(w, y);
            moved = true;
        }
    }
    if (moved && deque_size(&w->deque) == 1)
        maybe_wake_peer(w->s, w); /* as when both were in the deque: a peer may take one */
    return y; /* the newest */
}

#define INBOX_BATCH 128

/* Owner: the oldest inbox task; up to INBOX_BATCH more move to the deque. */
static struct urt_task *drain_inbox(struct worker *w)
{
    struct urt_task *first = inbox_pop(&w->inbox);
    if (!first)
        return NULL;
    STAT_INC(w, inbox_drains);
    unsigned moved = 0;
    struct urt_task *t;
    while (moved < INBOX_BATCH && (t = inbox_pop(&w->inbox))) {
        if (deque_push(&w->deque, t) != 0) {
            inbox_push(&w->inbox, t);
            break;
        }
        moved++;
    }
    w->fed += 1 + moved;
    if (moved > 0)
        maybe_wake_peer(w->s, w);
    return first;
}

static struct urt_task *steal(struct worker *w)
{
    struct sched *s = w->s;
    uint32_t n = s->n_workers;
    /* Round robin, starting after the last victim we stole from (C4). */
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t v = (w->last_victim + i) % n;
        if (v == w->index)
            continue;
        struct worker *victim = s->workers[v];
        if (deque_size(&victim->deque) == 0)
            continue;
        STAT_INC(w, steal_attempts);
        struct urt_task *t;
        for (int tries = 0; tries < 4; tries++) {
            t = deque_steal(&victim->deque);
            if (t != DEQUE_ABORT)
                break;
        }
        if (t && t != DEQUE_ABORT) {
            w->last_victim = v;
            STAT_INC(w, tasks_stolen);
            URT_PROBE_STEAL(w->index, v, t->priv.id);
            return t;
        }
    }
    return NULL;
}

static inline bool sticky_maybe_nonempty(struct worker *w)
{
    return w->sticky.tail != &w->sticky.stub ||
           atomic_load_explicit(&w->sticky.stub.priv.next, memory_order_relaxed) != NULL;
}

/* Owner, on every inbox_check_interval-th pick that found the inbox empty:
 * the deque's oldest task, taken from its top as a thief takes it (the owner
 * may: the CAS on top decides against thieves), when the top has not moved
 * since the last such look. Without it a task that keeps spawning its
 * successor (pushed at the bottom, taken next: LIFO) starves every task
 * queued under it for as long as the chain lasts, unless a peer is idle
 * enough to steal them: with both workers busy, clients of urt-load's commit
 * workloads waited up to 470 ms for their turn (ASan build), and some had no
 * commit answered in a 200 ms window. With it the chain yields its worker at
 * least once every two looks while nobody else takes the oldest tasks, so a
 * task k places from the top waits at most about 2k intervals (64 queued
 * clients: about 8,000 picks, commit_available_c64's p999 1.1-1.4 ms). While
 * thieves move the top the owner leaves it to them. Looking only every 8th
 * interval made that p999 5 ms (the rotation 8 times slower) and measured no
 * cheaper; alternating pairs against no look at all: spawn_many_local 1.00,
 * chained_spawn 1.06, ping_pong 0.97, yield_many 0.99. */
static inline struct urt_task *oldest_local(struct worker *w)
{
    int64_t top = deque_top(&w->deque), seen = w->oldest_seen;
    w->oldest_seen = top;
    if (top != seen || deque_size(&w->deque) < (w->lifo ? 1u : 2u)) /* the slot's task is above them all */
        return NULL;
    struct urt_task *t = deque_steal(&w->deque);
    if (t == DEQUE_ABORT || !t)
        return NULL;
    w->oldest_seen = top + 1;
    return t;
}

/* Every inbox_check_interval-th pick (fairness): the inbox's oldest task,
 * else the deque's (oldest_local); NULL: the usual order. Out of line: the
 * task loop's hot path keeps only the countdown. */
static __attribute__((noinline)) struct urt_task *interval_pick(struct worker *w)
{
    w->inbox_countdown = w->s->cfg->inbox_check_interval;
    struct urt_task *t = inbox_pop(&w->inbox);
    if (t) {
        STAT_INC(w, inbox_drains);
        w->fed++;
        return t;
    }
    return oldest_local(w);
}

#define STEAL_BACKOFF_AFTER 32

static struct urt_task *find_task(struct worker *w)
{
    struct sched *s = w->s;
    const struct urt_config *cfg = s->cfg;
    struct urt_task *t;

    w->tick++;
    if (__builtin_expect(--w->inbox_countdown == 0, 0) && (t = interval_pick(w)))
        return t;
    if (sticky_maybe_nonempty(w)) {
        bool main_first = false;
        w->ratio_acc += cfg->dev_thousandths_ratio_check_local_first;
        if (w->ratio_acc >= 1000) {
            w->ratio_acc -= 1000;
            main_first = true;
        }
        if (main_first && (t = local_pop(w)))
            return t;
        if ((t = inbox_pop(&w->sticky))) {
            if (__builtin_expect(atomic_load_explicit(&w->waker_cpu, memory_order_relaxed) >= 0, 0))
                leave_waker_cpu(w);
            STAT_INC(w, sticky_runs);
            return t;
        }
    }
    if ((t = local_pop(w))) {
        w->empty_local = 0;
        return t;
    }
    if ((t = drain_inbox(w))) {
        w->empty_local = 0;
        return t;
    }
    if (s->n_workers > 1 && ++w->empty_local >= cfg->stealing_wait) {
        /* After STEAL_BACKOFF_AFTER fruitless sweeps, sweep only every 8th
         * poll: reading the victims' deque indices on every poll keeps
         * pulling those lines away from their owners. */
        if (w->failed_sweeps < STEAL_BACKOFF_AFTER || (w->tick & 7) == 0) {
            if ((t = steal(w))) {
                w->failed_sweeps = 0;
                w->fed++;
                return t;
            }
            w->failed_sweeps++;
        }
    }
    return NULL;
}

/* Anything this worker could run, or steal? (S3) */
static bool has_work(struct worker *w)
{
    if (w->lifo || deque_size(&w->deque) || w->yield_head || inbox_maybe_nonempty(&w->inbox) || inbox_maybe_nonempty(&w->sticky))
        return true;
    /* Work in a peer's deque keeps us awake: we steal it once stealing_wait
     * empty polls have passed, rather than leave it behind a busy owner. */
    struct sched *s = w->s;
    for (uint32_t i = 0; i < s->n_workers; i++)
        if (deque_size(&s->workers[i]->deque) > 0)
            return true;
    return false;
}

/* ---- running ------------------------------------------------------------------- */

/* One task on the worker's own loop (the run path: sched/core/run.h). */
static inline void run_task(struct worker *w, struct urt_task *t)
{
    uint32_t flags = t->priv.flags;     /* read before fn: fn may free t */
    struct urt_job *job = t->priv.job;
    if (sched_run_skip(w, t))
        return;
    struct run_result rr = sched_run_body(w, t, NULL);
    STAT_INC(w, tasks_run);
    if (rr.r == URT_TASK_YIELD) {
        STAT_INC(w, yields);
        t->priv.enqueue_ns = rr.end_ns; /* queued again: queue delay restarts (0: not timed) */
        yield_push(w, t);
        return;
    }
    sched_finish_task(w, t, flags, job);
}

void sched_cancel_task(struct sched *s, struct worker *self, struct urt_task *t)
{
    uint32_t flags = t->priv.flags;
    struct urt_job *job = t->priv.job;
    if (t->cancel)
        t->cancel(t, t->arg);
    if (flags & TASK_ADMITTED)
        sched_clients.release(s);
    if (self)
        STAT_INC(self, tasks_cancelled);
    if (flags & TASK_POOLED) {
        if (self) {
            taskpool_free(&s->pool, &self->cache, t);
        } else {
            struct taskcache c = {0};
            taskpool_free(&s->pool, &c, t); /* chunk memory is freed with the pool */
        }
    }
    if (job)
        sched_clients.job_task_cancelled(s, self, job);
}

/* ---- completions -------------------------------------------------------------------- */

static void on_event(void *ctx, enum be_event ev, uint32_t arg)
{
    struct worker *w = ctx;
    switch (ev) {
    case BE_EV_WAKE: {
        /* Take the sender's stamp before freeing wake_pending (the next
         * sender writes it only after winning wake_pending again). */
        uint64_t sent_ns = atomic_load_explicit(&w->wake_sent_ns, memory_order_acquire); /* pairs with send_wake */
        if (sent_ns)
            atomic_store_explicit(&w->wake_sent_ns, 0, memory_order_relaxed);
        probe_wake_received(&w->hists, w->index, sent_ns);
        sleeper_wake_reaped(&w->sl); /* R2 */
        STAT_INC(w, wakes_received);
        break;
    }
    case BE_EV_WAKE_FAILED: {
        /* A wake we sent did not arrive: free the target's flag and retry. */
        uint32_t target = arg;
        if (target < w->s->n_workers) {
            struct worker *tw = w->s->workers[target];
            STAT_INC(w, wake_failures);
            sleeper_send_failed(&tw->sl);
            sched_notify(w->s, tw, w);
        }
        break;
    }
    default:
        break;
    }
}

static inline void reap(struct worker *w)
{
    if (be_ready(&w->be))
        be_reap(&w->be, on_event, w);
}

/* ---- adaptive spin ------------------------------------------------------------------
 * A worker spins (empty polls) before it suspends so that work arriving soon
 * is taken without a suspend and a wake message (a system call on each side,
 * and the wake's latency). The spin pays for its CPU only when work arrives
 * during it, so its length follows how long the worker then slept:
 * the budget (stats.spin_polls, a gauge the owner writes and snapshots
 * read) starts at worker_try_count (the cap) and, at each suspend,
 *   slept < SPIN_SHORT_NS (work came soon after the spin ended, or before
 *     the suspend: a longer spin would likely have caught it): doubles, up to
 *     the cap;
 *   slept >= SPIN_LONG_NS SPIN_LONG_RUN times in a row with no short one
 *     between (the spin was CPU spent for nothing): halves, down to
 *     SPIN_MIN_POLLS (or the cap when that is smaller);
 *   in between: stays.
 * A worker woken every few milliseconds (parked between requests) thus spins
 * ~32 polls instead of 1000, and a stream with short gaps keeps the full
 * spin; a burst after a long pause costs one suspend and wake per doubling
 * (5 from 32 to 1000). busy_worker never suspends and is not affected. Two
 * clock reads per suspend, on the slow path beside its system calls.
 * The budget applies after a lone wake (at most one task taken from the
 * inbox or stolen since the wake: spin_limit); a worker fed a stream spins
 * worker_try_count, yielding every IDLE_YIELD_EVERY polls. Without that rule
 * (the first version) the idle worker of spawn_many_local (one worker
 * spawning 10,000 empty tasks) ended its short spins before its first
 * sched_yield, stole 3x as many of the empty tasks and the rate fell by
 * about 15 %. Default on (worker_spin_adaptive); off spins worker_try_count
 * always. */
#define SPIN_MIN_POLLS 32u
#define SPIN_SHORT_NS (50 * 1000ull)
#define SPIN_LONG_NS (500 * 1000ull)
#define SPIN_LONG_RUN 4u /* long suspensions in a row (no short one between) before it shrinks */

static void spin_adapt(struct worker *w, uint64_t slept_ns)
{
    uint32_t cap = w->s->cfg->worker_try_count;
    uint32_t floor = cap < SPIN_MIN_POLLS ? cap : SPIN_MIN_POLLS;
    uint32_t budget = (uint32_t)atomic_load_explicit(&w->stats.spin_polls, memory_order_relaxed);
    if (slept_ns < SPIN_SHORT_NS) {
        w->long_sleeps = 0;
        budget = budget > cap / 2 ? cap : budget * 2;
    } else if (slept_ns >= SPIN_LONG_NS && ++w->long_sleeps >= SPIN_LONG_RUN) {
        budget = budget / 2 < floor ? floor : budget / 2;
    }
    STAT_SET(w, spin_polls, budget); /* owner-written, read relaxed by the loop and by snapshots (O3 style) */
}

/* ---- suspend ------------------------------------------------------------------------ */

static void worker_suspend(struct worker *w, uint64_t timeout_ns)
{
    struct sched *s = w->s;
    ASSERT_OWNER(w);
    if (s->hooks.before_suspend && s->hooks.before_suspend(s->hooks.ctx, w))
        return;
    atomic_store_explicit(&w->last_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&w->waker_cpu, -1, memory_order_relaxed); /* a note lasts until it sleeps: before S1 */
    atomic_fetch_add_explicit(&s->n_sleeping, 1, memory_order_relaxed);
    sleeper_announce(&w->sl); /* S1, S2 (sched/core/sleeper.h) */
    bool adapt = s->cfg->worker_spin_adaptive;
    uint64_t slept_ns = 0;
    if (!has_work(w) && atomic_load_explicit(&s->phase, memory_order_relaxed) != PHASE_STOPPING) { /* S3 */
        STAT_INC(w, suspends);
        URT_PROBE_SUSPEND(w->index, timeout_ns);
        uint64_t t0 = adapt ? urt_clock_ns() : 0; /* the clock only for the adaptive spin */
        be_wait(&w->be, timeout_ns); /* S4 */
        slept_ns = adapt ? urt_clock_ns() - t0 : 0;
    }
    sleeper_awake(&w->sl); /* R1 */
    atomic_fetch_sub_explicit(&s->n_sleeping, 1, memory_order_relaxed);
    if (atomic_load_explicit(&s->surplus_waking, memory_order_relaxed))
        atomic_store_explicit(&s->surplus_waking, 0, memory_order_relaxed);
    reap(w);                                   /* R2 (the wait ran deferred task work) */
    sleeper_after_reap(); /* R3 */
    w->idle_polls = 0;
    atomic_store_explicit(&w->idle, 0, memory_order_relaxed); /* woken: marked again after IDLE_MARK_POLLS */
    w->fed = 0;
    if (adapt)
        spin_adapt(w, slept_ns); /* after R1-R3: wakers see RUNNING no later for it */
}

static void pace(struct worker *w)
{
    uint32_t wait = w->s->cfg->task_polling_wait;
    if (wait == 0)
        return;
    if (wait == 1) {
        sched_yield();
        return;
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(wait - 2) * 1000};
    nanosleep(&ts, NULL);
}

#define IDLE_YIELD_EVERY 64 /* empty polls between two sched_yield() while spinning */
#define IDLE_MARK_POLLS 8    /* empty polls in a row before w->idle says so (lane shedding) */

/* A stream arrives: more than one task from the inbox or by stealing since
 * the worker woke. It keeps the full spin and yields while spinning. */
static inline bool fed_stream(const struct worker *w)
{
    return w->fed > 1;
}

/* Empty polls before a suspend: the adaptive budget after a lone wake, the
 * full worker_try_count while a stream arrives (see spin_adapt). */
static inline uint32_t spin_limit(const struct worker *w, const struct urt_config *cfg)
{
    if (fed_stream(w))
        return cfg->worker_try_count;
    return (uint32_t)atomic_load_explicit(&w->stats.spin_polls, memory_order_relaxed);
}

static void worker_loop(struct worker *w)
{
    struct sched *s = w->s;
    const struct urt_config *cfg = s->cfg;

    for (;;) {
        uint32_t phase = atomic_load_explicit(&s->phase, memory_order_relaxed);
        if (__builtin_expect(phase == PHASE_STOPPING, 0))
            break;
        if (__builtin_expect(w->io_inflight != 0, 0) && (w->tick & 63) == 0) {
            be_poll(&w->be);
            reap(w);
        }
        struct urt_task *t = find_task(w);
        if (t) {
            if (__builtin_expect(w->idle_polls >= IDLE_MARK_POLLS, 0))
                atomic_store_explicit(&w->idle, 0, memory_order_relaxed);
            w->idle_polls = 0;
            run_task(w, t);
            STAT_INC(w, tasks_settled); /* after what the run submitted, even from a job's teardown */
            if (__builtin_expect(be_dirty(&w->be), 0))
                be_flush(&w->be); /* what the task submitted (sched/core/io.h rule 4) */
            continue;
        }
        reap(w);
        if (__builtin_expect(be_backlog(&w->be), 0))
            be_flush(&w->be); /* what waits in the overflow list moves on (sched/core/io.h rule 7) */
        if (++w->idle_polls == IDLE_MARK_POLLS)
            atomic_store_explicit(&w->idle, 1, memory_order_relaxed); /* advisory: sched/lane.c V5 */
        if (__builtin_expect(phase == PHASE_DRAINING, 0)) {
            sched_clients.io_stop(w, false); /* tasks' I/O in flight is cancelled (urt/io.h rule 9) */
            /* Report an empty poll to the destroyer (not while I/O is in
             * flight: its completion may still create work), then rest. */
            if (w->io_inflight == 0)
                atomic_store_explicit(&w->idle_sweeps, atomic_load_explicit(&w->idle_sweeps, memory_order_relaxed) + 1,
                                  memory_order_release);
            worker_suspend(w, 100 * 1000);
            continue;
        }
        if (cfg->busy_worker || w->idle_polls < spin_limit(w, cfg)) {
            pace(w);
            /* While a stream of work arrives (more than one task from the
             * inbox or by stealing since this worker woke), offer the CPU to
             * other runnable threads now and then (a no-op when there are
             * none): with more threads than CPUs, a spinning worker must not
             * starve the thread that submits its work. After a lone task the
             * spin stays free of system calls. */
            if (fed_stream(w) && (w->idle_polls & (IDLE_YIELD_EVERY - 1)) == 0)
                sched_yield();
            continue;
        }
        worker_suspend(w, s->suspend_timeout_ns);
    }
}

/* ---- start and stop ------------------------------------------------------------------- */

static bool io_exit_more(void *arg)
{
    return sched_clients.io_pending(arg);
}

static void io_exit_step(void *arg)
{
    sched_clients.io_stop(arg, true);
}

/* After the loop: the tasks' I/O still in flight is cancelled and its
 * completions are awaited here (the backend's one drain); their
 * continuations run in place (urt/io.h rule 9). io_stop is called again
 * after each wait (with nothing pending it frees its state). */
static void io_exit(struct worker *w)
{
    be_drain(&w->be, 10 * 1000 * 1000, io_exit_step, io_exit_more, w, on_event, w);
}

void *sched_worker_main(void *arg)
{
    struct worker *w = arg;
    struct sched *s = w->s;
    char name[16];
    snprintf(name, sizeof(name), "urt-w%u", w->index);
    pthread_setname_np(pthread_self(), name);
    if (w->place.bind)
        pthread_setaffinity_np(pthread_self(), sizeof(w->place.cpus), &w->place.cpus);
    sched_tls_worker = w;

    int err = be_init(&w->be, &s->caps, &s->be_shared, s->cfg->ring_entries,
                      s->cfg->ring_cq_entries ? s->cfg->ring_cq_entries : 4 * s->cfg->ring_entries);
    if (err == 0) {
        w->peer = be_peer_of(&w->be);
        timerq_init(&w->timers, &w->be, &w->io_inflight);
    }
    pthread_mutex_lock(&s->start_lock);
    w->start_err = err;
    s->n_started++;
    pthread_cond_broadcast(&s->start_cond);
    pthread_mutex_unlock(&s->start_lock);
    if (err)
        return NULL;

    /* Wait until every worker is up (or one failed and we are told to stop). */
    pthread_mutex_lock(&s->start_lock);
    while (s->n_started < s->n_workers + 1)
        pthread_cond_wait(&s->start_cond, &s->start_lock);
    pthread_mutex_unlock(&s->start_lock);

    if (atomic_load_explicit(&s->phase, memory_order_acquire) != PHASE_STOPPING) {
        if (s->hooks.worker_start)
            s->hooks.worker_start(s->hooks.ctx, w);
        worker_loop(w);
        io_exit(w);
        if (s->hooks.worker_stop)
            s->hooks.worker_stop(s->hooks.ctx, w);
    }
    /* Deliver what is still in the context (a late wake) before closing it. */
    be_poll(&w->be);
    reap(w);
    /* No wake message may target the ring from now on (sched_notify sends
     * only to sleeping workers), so its fd number can be reused safely. */
    sleeper_exit(&w->sl);
    timerq_destroy(&w->timers); /* what is still queued never fires (sched/job.c cancels its deadlines) */
    be_exit(&w->be);
    sched_tls_worker = NULL;
    return NULL;
}

