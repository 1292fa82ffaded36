/*
 * sched/watcher.c — the watcher thread: conditional tasks (SPEC C9) and the
 * watchdog (SPEC C10).
 *
 * One thread per runtime with its own backend context (backend/backend.h),
 * created in that thread (single issuer), woken exactly like a worker: by the
 * one send-wake (be_wake, the same sender and fallback as the workers') or by
 * a completion on its own context. Its loop:
 *
 *   take new tasks (MPSC add queue -> a timer each in the watcher's timer
 *   queue, sched/core/timer.h, due = now: the first check runs at once)
 *   -> drop cancelled tasks (only when a cancel was requested)
 *   -> retry hand-overs that the pending-task limit postponed
 *   -> run the due timers: checks (passed -> hand the body to a worker,
 *      urgent placement, through the normal submit path; failed -> due +=
 *      interval) and the watchdog's pass (task_runtime_limit_us > 0)
 *   -> the timer queue moves its ONE kernel timeout (absolute,
 *      CLOCK_MONOTONIC) to the nearest due time, or removes it when there is
 *      nothing to wait for
 *   -> sleep in be_wait until the timer or a wake message.
 * With nothing watched and the watchdog off, no timer is armed: the watcher
 * sleeps until a message, without periodic wake-ups (stats: sleeps, wakeups).
 *
 * Invariants:
 *  - a cond's state moves IDLE -> ADDING -> WATCHING (adder), then
 *    WATCHING -> CANCELLING (canceller) or WATCHING -> SCHEDULED (watcher):
 *    one CAS decides, so the body and the cancel callback are exclusive;
 *    back to IDLE right before the body's first call or the cancel callback;
 *  - a WATCHING/CANCELLING cond is in exactly one place: the add queue, the
 *    timer queue or the ready list (passed, waiting for an admission slot);
 *  - a watched cond waiting for its next check is a timer in the watcher's
 *    timer queue (sched/core/timer.h); the watcher thread alone touches that
 *    queue, the ready list and its context;
 *  - cancel callbacks run after the walk that found them (never inside it).
 *
 * ---- Memory-ordering contract ---------------------------------------------
 * No lost wake-up: the one protocol of sched/core/sleeper.h, with the watcher as
 * the sleeper. W1 is a push on the add queue (seq_cst exchange, inbox.h I3),
 * a fetch_add of cancel_requests, or a store of stop (seq_cst); S3 is
 * watcher_has_work(); S4 is be_wait without a timeout (the one kernel timeout
 * of the nearest due time completes the wait when one is armed). The stop
 * (watcher_close) sends its wake until one is on its way: a failed send is
 * reported at once, so the join that follows cannot wait for a lost wake.
 *
 * Add queue: the inbox's own contract (sched/core/inbox.h): the adder's writes to
 * the cond happen before its push (release), the watcher's pop acquires them.
 * cond state: ADDING -> WATCHING is a release store after the adder filled
 * priv; the canceller's and the watcher's CAS are acq_rel, so whoever wins
 * sees priv filled; the IDLE store before a callback is release, paired with
 * the next adder's acquire CAS. priv.watcher (the owner) is stored by the
 * adder with a relaxed atomic store; urt_cond_cancel reads it with a relaxed
 * atomic load, in any state, after waiting out ADDING: its owner check needs
 * only the value (a pointer compared, never followed), not what it orders.
 * Shutdown fence with adders/cancellers: they increment inflight, then load
 * closed (both seq_cst); watcher_close stores closed, then waits for
 * inflight == 0 (a waitcount, base/waitcount.h: the subs are seq_cst and the
 * last one wakes it, W1-W3), then stores stop. So an adder either sees closed
 * or its push is finished before the watcher is told to stop (and drains the
 * queue).
 * Watchdog: its passes run on the watcher thread (sched/watchdog.c).
 * Statistics: owner-written counters are relaxed load+store by the watcher;
 * the latency counters are written by workers with relaxed RMWs. Readers use
 * relaxed loads.
 *
 * Load: checks are meant to be cheap; each costs a timer-queue pop and push
 * (O(log n)). A wake message per add only when the watcher sleeps.
 */
#include "sched/watcher.h"
#include "sched/watcher_int.h"
#include "sched/core/watchdog_slot.h"
#include "sched/watchdog_pass.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urt/watchdog.h>
#include <urt/runtime.h>
#include <urt/watcher.h>

#include "sched/admission.h"
#include "sched/job.h"
#include "sched/core/sched.h"

#include "base/error.h"
#include "sched/core/timer.h"

static _Thread_local struct watcher *tls_watcher; /* set on the watcher thread */

/* Debug builds: owner-only code runs on the watcher thread (STYLE 5). */
#define ASSERT_WATCHER(w) assert(tls_watcher == (w))

/* ---- wake ------------------------------------------------------------------------------ */

/* The one send-wake (be_wake: a ring-less message or a per-thread ring,
 * else the runtime's shared fallback). False when it could not be sent
 * (then nothing is in flight and the next notify sends again). */
bool watcher_notify(struct watcher *w)
{
    if (sleeper_claim_wake(&w->sl) != SLEEPER_SEND) /* W3 + W4, after the caller's W1 */
        return true;
    struct sched *s = w->s;
    if (be_wake(&s->caps, &s->be_shared, NULL, w->peer, 0) < 0) {
        sleeper_send_failed(&w->sl); /* nothing in flight */
        return false;
    }
    return true;
}

static void on_event(void *ctx, enum be_event ev, uint32_t arg)
{
    struct watcher *w = ctx;
    (void)arg;
    if (ev == BE_EV_WAKE) {
        sleeper_wake_reaped(&w->sl); /* R2 */
        WSTAT_INC(w, wake_messages);
    }
}

static void reap(struct watcher *w)
{
    be_poll(&w->be);
    be_reap(&w->be, on_event, w);
}

/* ---- checks on the timer facility (owner only; sched/core/timer.h) ------------------------------- */

static void cond_due(sched_timer *t, int32_t res);

static inline struct urt_cond *cond_of_timer(sched_timer *t)
{
    return (struct urt_cond *)((char *)t - offsetof(struct urt_cond, priv.timer));
}

/* The cond's next check at due. Room reserved by the caller (timerq_reserve,
 * or the slot of the cond just taken out): cannot fail. */
static void schedule_check(struct watcher *w, struct urt_cond *c, uint64_t due)
{
    int rc = timerq_add(&w->timers, &c->priv.timer, due, cond_due);
    assert(rc == 0);
    (void)rc;
}

/* ---- cancel -------------------------------------------------------------------------------- */

static void doom(struct watcher *w, struct urt_cond *c)
{
    cond_set_next(c, w->doomed);
    w->doomed = c;
}

/* The cancel callback of c (state CANCELLING, or WATCHING at shutdown). */
static void run_cancel(struct watcher *w, struct urt_cond *c)
{
    urt_cond_cancel_fn *cb = c->cancel;
    void *arg = c->arg;
    struct urt_job *job = c->job; /* read before the callback: it may free c */
    atomic_fetch_sub_explicit(&w->watching, 1, memory_order_relaxed);
    WSTAT_INC(w, cancelled);
    if (job)
        job_cond_unwatch(job);
    /* From here the cond is the caller's (rule 3); pairs with the next adder's CAS. */
    atomic_store_explicit(&c->priv.state, C_IDLE, memory_order_release);
    if (cb)
        cb(c, arg);
    if (job)
        job_task_finished(w->s, NULL, job); /* its teardown may run now (rule 9) */
}

/* After a walk: call the cancel callbacks of what it doomed. */
static void run_doomed(struct watcher *w)
{
    while (w->doomed) {
        struct urt_cond *c = w->doomed;
        w->doomed = cond_next(c);
        run_cancel(w, c);
    }
}

/* Cancelled by urt_cond_cancel, or its job was cancelled (rule 9): then the
 * watcher takes it WATCHING -> CANCELLING itself, by the same CAS as a
 * canceller, so the body and the cancel callback stay exclusive. */
static bool is_cancelling(struct urt_cond *c)
{
    uint32_t st = atomic_load_explicit(&c->priv.state, memory_order_acquire);
    if (st == C_CANCELLING)
        return true;
    if (!c->job || !job_is_cancelled(c->job))
        return false;
    uint32_t expected = C_WATCHING;
    return atomic_compare_exchange_strong_explicit(&c->priv.state, &expected, C_CANCELLING, memory_order_acq_rel,
                                                   memory_order_acquire) ||
           expected == C_CANCELLING;
}

/* A cancel was requested: find the cancelled tasks in the heap and the ready list. */
static void sweep_cancelled(struct watcher *w)
{
    ASSERT_WATCHER(w);
    struct urt_cond *found = NULL;
    for (uint32_t i = 0; i < timerq_count(&w->timers); i++) {
        sched_timer *t = timerq_at(&w->timers, i);
        if (t->fn == cond_due && is_cancelling(cond_of_timer(t))) {
            cond_set_next(cond_of_timer(t), found);
            found = cond_of_timer(t);
        }
    }
    while (found) {
        struct urt_cond *c = found;
        found = cond_next(c);
        timerq_remove(&w->timers, &c->priv.timer);
        doom(w, c);
    }
    /* The ready list is short (passed tasks waiting for a slot): rebuild it. */
    struct urt_cond *list = w->ready_head;
    w->ready_head = w->ready_tail = NULL;
    while (list) {
        struct urt_cond *c = list;
        list = cond_next(c);
        if (is_cancelling(c)) {
            doom(w, c);
            continue;
        }
        cond_set_next(c, NULL);
        if (w->ready_tail)
            cond_set_next(w->ready_tail, c);
        else
            w->ready_head = c;
        w->ready_tail = c;
    }
    run_doomed(w);
}

/* ---- taking tasks in ------------------------------------------------------------------------- */

static void take_adds(struct watcher *w, uint64_t now)
{
    ASSERT_WATCHER(w);
    w->add_backoff = false;
    for (;;) {
        if (timerq_reserve(&w->timers, 1) != 0) {
            w->add_backoff = true; /* the rest stays queued; retried one interval later */
            break;
        }
        struct urt_task *t = inbox_pop(&w->adds);
        if (!t)
            break;
        struct urt_cond *c = cond_of_task(t);
        if (is_cancelling(c)) {
            doom(w, c);
            continue;
        }
        schedule_check(w, c, now); /* first check at once */
    }
    run_doomed(w);
}

/* ---- hand-over ------------------------------------------------------------------------------- */

/* Hands the body of c (its check passed) to a worker. False when the pending
 * limit is reached (c stays with the watcher). */
static bool hand_over(struct watcher *w, struct urt_cond *c)
{
    struct sched *s = w->s;
    bool admitted = false;
    if (s->adm) {
        if (!admission_try_take(s->adm)) {
            WSTAT_INC(w, admission_retries);
            return false;
        }
        admitted = true;
    }
    uint32_t expected = C_WATCHING;
    if (!atomic_compare_exchange_strong_explicit(&c->priv.state, &expected, C_SCHEDULED, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        /* Cancelled meanwhile: the canceller won. */
        if (admitted)
            admission_release(s->adm);
        doom(w, c);
        return true;
    }
    atomic_fetch_sub_explicit(&w->watching, 1, memory_order_relaxed);
    WSTAT_INC(w, bodies_scheduled);
    c->priv.task.priv.flags = admitted ? TASK_ADMITTED : 0;
    c->priv.task.priv.submit_flags = URT_SUBMIT_URGENT;
    int err;
    if (c->job) {
        job_cond_unwatch(c->job);
        err = job_cond_submit(c->job, &c->priv.task, URT_SUBMIT_URGENT); /* a task of the job (rule 8) */
    } else {
        err = sched_submit(s, &c->priv.task, URT_SUBMIT_URGENT);
    }
    if (__builtin_expect(err != 0, 0)) {
        /* The scheduler is shutting down: the body will not run. */
        if (admitted)
            admission_release(s->adm);
        atomic_fetch_add_explicit(&w->watching, 1, memory_order_relaxed);
        if (c->job)
            job_cond_rewatch(c->job); /* run_cancel unwatches it once more */
        doom(w, c);
    }
    return true;
}

static void ready_append(struct watcher *w, struct urt_cond *c)
{
    cond_set_next(c, NULL);
    if (w->ready_tail)
        cond_set_next(w->ready_tail, c);
    else
        w->ready_head = c;
    w->ready_tail = c;
}

/* Passed tasks that waited for an admission slot, oldest first. */
static void retry_ready(struct watcher *w)
{
    while (w->ready_head) {
        struct urt_cond *c = w->ready_head;
        struct urt_cond *next = cond_next(c);
        if (!hand_over(w, c))
            break;
        w->ready_head = next;
        if (!next)
            w->ready_tail = NULL;
    }
    run_doomed(w);
}

/* A cond's check is due (-ETIME), from timerq_run. */
static void cond_due(sched_timer *t, int32_t res)
{
    struct urt_cond *c = cond_of_timer(t);
    struct watcher *w = c->priv.watcher;
    ASSERT_WATCHER(w);
    assert(res == -ETIME); /* conds leave the queue by timerq_remove, never by a cancel */
    (void)res;
    if (is_cancelling(c)) {
        doom(w, c);
        return;
    }
    WSTAT_INC(w, checks_run);
    uint64_t now = urt_clock_ns();
    if (!c->check(c, c->arg)) {
        /* Keep the cadence: next due one interval after this one. */
        uint64_t due = t->due + c->priv.interval_ns;
        schedule_check(w, c, due > now ? due : now + c->priv.interval_ns); /* its own slot: no allocation */
        return;
    }
    WSTAT_INC(w, checks_passed);
    c->priv.passed_ns = urt_clock_ns();
    if (w->ready_head || !hand_over(w, c))
        ready_append(w, c); /* behind older passed tasks: FIFO */
}

/* ---- the watcher's own timers ---------------------------------------------------------------- */

/* Passed conds waiting for an admission slot, or adds postponed for lack of
 * memory: the loop retries them (retry_ready, take_adds) when this fires. */
static void retry_due(sched_timer *t, int32_t res)
{
    (void)t;
    (void)res;
}

static void wd_due(sched_timer *t, int32_t res)
{
    struct watcher *w = (struct watcher *)((char *)t - offsetof(struct watcher, wd_timer));
    if (res == -ETIME)
        watchdog_pass(w->wd, urt_clock_ns());
}

/* Puts t at due (UINT64_MAX: out of the queue). Keeps an earlier due. */
static void own_timer_set(struct watcher *w, sched_timer *t, uint64_t due, sched_timer_fn *fn)
{
    if (due == UINT64_MAX) {
        timerq_remove(&w->timers, t);
        return;
    }
    if (sched_timer_queued(t)) {
        if (t->due != due)
            timerq_move(&w->timers, t, due);
        return;
    }
    if (timerq_add(&w->timers, t, due, fn) != 0 && fn == retry_due)
        w->add_backoff = true; /* no memory now: the next loop tries again */
}

/* Before sleeping: the retry timer, the watchdog's timer, and the one SQE. */
static void plan_timers(struct watcher *w, uint64_t now)
{
    bool retry = w->ready_head || w->add_backoff;
    if (!retry)
        own_timer_set(w, &w->retry_timer, UINT64_MAX, retry_due);
    else if (!sched_timer_queued(&w->retry_timer))
        own_timer_set(w, &w->retry_timer, now + w->interval_ns, retry_due);
    own_timer_set(w, &w->wd_timer, watchdog_next_pass(w->wd), wd_due);
    timerq_sync(&w->timers);
}

/* ---- the loop ----------------------------------------------------------------------------------- */

/* S3: anything to do? The add queue as seen by its consumer (inbox_maybe_nonempty:
 * its tail, then seq_cst loads of head and the stub's link), then seq_cst flags. */
static bool watcher_has_work(struct watcher *w)
{
    return inbox_maybe_nonempty(&w->adds) || atomic_load_explicit(&w->cancel_requests, memory_order_seq_cst) != 0 ||
           atomic_load_explicit(&w->stop, memory_order_seq_cst) != 0;
}

static void watcher_sleep(struct watcher *w)
{
    sleeper_announce(&w->sl); /* S1, S2 */
    if (!watcher_has_work(w)) { /* S3 */
        WSTAT_INC(w, sleeps);
        be_wait(&w->be, UINT64_MAX); /* S4 */
        WSTAT_INC(w, wakeups);
    }
    sleeper_awake(&w->sl); /* R1 */
    reap(w);               /* R2 */
    sleeper_after_reap();  /* R3 */
}

/* At stop: every task still watched gets its cancel callback. */
static void cancel_everything(struct watcher *w)
{
    struct urt_task *t;
    while ((t = inbox_pop(&w->adds)) != NULL)
        doom(w, cond_of_task(t));
    while (timerq_count(&w->timers)) {
        sched_timer *t = timerq_at(&w->timers, 0);
        timerq_remove(&w->timers, t);
        if (t->fn == cond_due)
            doom(w, cond_of_timer(t));
    }
    while (w->ready_head) {
        struct urt_cond *c = w->ready_head;
        w->ready_head = cond_next(c);
        doom(w, c);
    }
    w->ready_tail = NULL;
    run_doomed(w);
}

static void watcher_loop(struct watcher *w)
{
    for (;;) {
        uint64_t now = urt_clock_ns();
        take_adds(w, now);
        if (atomic_exchange_explicit(&w->cancel_requests, 0, memory_order_acquire))
            sweep_cancelled(w);
        if (atomic_load_explicit(&w->stop, memory_order_acquire))
            break;
        retry_ready(w);
        timerq_run(&w->timers, now); /* due checks (cond_due), the watchdog's pass (wd_due) */
        run_doomed(w);
        plan_timers(w, urt_clock_ns());
        watcher_sleep(w);
    }
}

/* The drain at the end of the watcher's life: until its timeout's removal came back. */
static bool timeout_armed(void *arg)
{
    struct watcher *w = arg;
    return w->timers.armed;
}

static void *watcher_main(void *arg)
{
    struct watcher *w = arg;
    struct sched *s = w->s;
    pthread_setname_np(pthread_self(), "urt-watcher");
    tls_watcher = w;
    sched_set_service_thread(s); /* never blocks in the runtime (sched/core/sched.h) */
    int err = be_init(&w->be, &s->caps, &s->be_shared, 16, 64);
    pthread_mutex_lock(&w->start_lock);
    w->start_err = err;
    w->peer = err ? be_peer_none() : be_peer_of(&w->be);
    w->started = true;
    pthread_cond_broadcast(&w->start_cond);
    pthread_mutex_unlock(&w->start_lock);
    if (err)
        return NULL;
    watcher_loop(w);
    cancel_everything(w);
    timerq_sync(&w->timers); /* removes the timeout */
    be_drain(&w->be, 10 * 1000 * 1000, NULL, timeout_armed, w, on_event, w);
    timerq_destroy(&w->timers);
    be_exit(&w->be);
    tls_watcher = NULL;
    sched_set_service_thread(NULL);
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------------ */

static void watcher_dealloc(struct watcher *w)
{
    pthread_mutex_destroy(&w->start_lock);
    pthread_cond_destroy(&w->start_cond);
    watchdog_free(w->wd);
    free(w);
}

/* A job with watched conds was cancelled (sched/job.c J7): sweep now. Any thread. */
static void watcher_sweep_soon(struct sched *s)
{
    struct watcher *w = s->watcher;
    atomic_fetch_add_explicit(&w->inflight, 1, memory_order_seq_cst); /* the shutdown fence of cond.c's enter() */
    if (!atomic_load_explicit(&w->closed, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&w->cancel_requests, 1, memory_order_seq_cst); /* W1 */
        watcher_notify(w);
    }
    urt_waitcount_sub(&w->inflight, 1);
}

int watcher_start(struct sched *s)
{
    struct watcher *w = aligned_alloc(64, (sizeof(*w) + 63) & ~(size_t)63);
    if (!w)
        return -ENOMEM;
    memset(w, 0, sizeof(*w));
    w->s = s;
    sleeper_init(&w->sl);
    atomic_init(&w->stop, 0);
    atomic_init(&w->closed, 0);
    atomic_init(&w->inflight, 0);
    atomic_init(&w->cancel_requests, 0);
    atomic_init(&w->watching, 0);
    inbox_init(&w->adds);
    w->peer = be_peer_none();
    w->interval_ns = s->cfg->watcher_interval_us * 1000ull;
    pthread_mutex_init(&w->start_lock, NULL);
    pthread_cond_init(&w->start_cond, NULL);
    /* Before the thread: urt_watcher_stats reads its fires counter from any thread. */
    timerq_init(&w->timers, &w->be, NULL);
    w->wd = watchdog_create(s);
    if (!w->wd) {
        watcher_dealloc(w);
        return -ENOMEM;
    }
    int err = -pthread_create(&w->thread, NULL, watcher_main, w);
    if (err) {
        watcher_dealloc(w);
        return err;
    }
    pthread_mutex_lock(&w->start_lock);
    while (!w->started)
        pthread_cond_wait(&w->start_cond, &w->start_lock);
    err = w->start_err;
    pthread_mutex_unlock(&w->start_lock);
    if (err) {
        pthread_join(w->thread, NULL);
        watcher_dealloc(w);
        return err;
    }
    s->watcher = w;
    s->job_conds_cancelled = watcher_sweep_soon;
    return 0;
}

void watcher_close(struct sched *s)
{
    struct watcher *w = s->watcher;
    if (!w || atomic_load_explicit(&w->stop, memory_order_relaxed))
        return;
    atomic_store_explicit(&w->closed, 1, memory_order_seq_cst);
    urt_waitcount_wait(&w->inflight, URT_WAITCOUNT_FOREVER); /* the last sub wakes us (by address only) */
    atomic_store_explicit(&w->stop, 1, memory_order_seq_cst);
    while (!watcher_notify(w)) { /* a failed send is reported at once (nothing in flight): send again */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void watcher_stop(struct sched *s)
{
    struct watcher *w = s->watcher;
    if (!w || w->joined)
        return;
    watcher_close(s);
    pthread_join(w->thread, NULL); /* the stop's wake is on its way (watcher_close) */
    w->joined = true;
}

void watcher_free(struct sched *s)
{
    if (!s->watcher)
        return;
    s->job_conds_cancelled = NULL;
    watcher_dealloc(s->watcher);
    s->watcher = NULL;
}

