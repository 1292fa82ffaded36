/*
 * tests/unit/test_timer.c — the one timer facility (sched/core/timer.h).
 *
 *  - model: random add / move / remove / cancel / run on a queue, against a
 *    plain array of (due, id): every timer runs exactly once (-ETIME at or
 *    after its due, in due order; -ECANCELED when cancelled), removed ones
 *    never; the queue's next due time is the model's minimum;
 *  - the one kernel timeout on a real backend context: timers far apart fire
 *    through its completion, in order, none early, and an emptied queue removes its
 *    timeout (no further CQE);
 *  - on the workers (sched_timer_arm, as job deadlines use it): many timers
 *    armed from tasks fire once each, not before their time, on the worker
 *    that armed them; cancelled ones report -ECANCELED at once.
 */
#include "helpers.h"

#include "sched/core/io.h"
#include "sched/core/timer.h"

#include "base/clock.h"

/* ---- model ------------------------------------------------------------------------------- */

#define NT 200

struct mt {
    sched_timer t;
    int id;
    int fired;        /* -ETIME calls */
    int cancelled;    /* -ECANCELED calls */
    uint64_t fired_at; /* the run's now */
};

static struct mt timers[NT];
static uint64_t run_now;
static uint64_t last_fired_due;
static int order_violations;

static void model_fn(sched_timer *t, int32_t res)
{
    struct mt *m = (struct mt *)((char *)t - offsetof(struct mt, t));
    if (res == -ETIME) {
        m->fired++;
        m->fired_at = run_now;
        if (t->due < last_fired_due)
            order_violations++;
        last_fired_due = t->due;
    } else {
        cr_assert_eq(res, -ECANCELED);
        m->cancelled++;
    }
}

static uint64_t model_min(const bool *queued, const uint64_t *due)
{
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < NT; i++)
        if (queued[i] && due[i] < m)
            m = due[i];
    return m;
}

Test(timer, model_every_timer_once_in_due_order)
{
    struct be_ctx r;
    struct be_caps caps;
    int err = be_probe(0, false, 0, &caps);
    if (err == -EPERM || err == -ENOSYS)
        cr_skip_test("io_uring is refused here (%d)", err);
    cr_assert_eq(err, 0);
    struct be_shared sh;
    cr_assert_eq(be_shared_init(&sh, &caps), 0);
    cr_assert_eq(be_init(&r, &caps, &sh, 64, 256), 0);
    struct timerq q;
    timerq_init(&q, &r, NULL);
    srand(7);
    bool queued[NT] = {0}, removed[NT] = {0}, cancelled[NT] = {0};
    uint64_t due[NT];
    memset(timers, 0, sizeof(timers));
    uint64_t now = 1000;
    int expect_fired = 0;
    for (int step = 0; step < 20000; step++) {
        int i = rand() % NT;
        int op = rand() % 10;
        if (op < 4 && !queued[i] && !timers[i].fired && !removed[i] && !cancelled[i]) {
            due[i] = now + (uint64_t)(rand() % 5000);
            cr_assert_eq(timerq_add(&q, &timers[i].t, due[i], model_fn), 0);
            queued[i] = true;
        } else if (op == 4 && queued[i]) {
            due[i] = now + (uint64_t)(rand() % 5000);
            timerq_move(&q, &timers[i].t, due[i]);
        } else if (op == 5 && queued[i]) {
            cr_assert(timerq_remove(&q, &timers[i].t));
            queued[i] = false;
            removed[i] = true;
        } else if (op == 6 && queued[i]) {
            cr_assert(timerq_cancel(&q, &timers[i].t));
            queued[i] = false;
            cancelled[i] = true;
            cr_assert_eq(timers[i].cancelled, 1);
        } else if (op == 7) {
            now += (uint64_t)(rand() % 700);
            run_now = now;
            last_fired_due = 0;
            unsigned n = timerq_run(&q, now);
            int due_now = 0;
            for (int k = 0; k < NT; k++)
                if (queued[k] && due[k] <= now) {
                    due_now++;
                    queued[k] = false;
                    cr_assert_eq(timers[k].fired, 1, "timer %d due %lu now %lu fired %d", k,
                                 (unsigned long)due[k], (unsigned long)now, timers[k].fired);
                }
            cr_assert_eq((int)n, due_now);
            expect_fired += due_now;
        }
        cr_assert_eq(timerq_next(&q), model_min(queued, due));
        if (op == 8) {
            timerq_sync(&q); /* the timeout follows the earliest due time */
            be_flush(&r);
        }
    }
    cr_assert_eq(order_violations, 0);
    int fired = 0;
    for (int k = 0; k < NT; k++) {
        cr_assert_leq(timers[k].fired + timers[k].cancelled, 1, "timer %d ran twice", k);
        if (removed[k])
            cr_assert_eq(timers[k].fired + timers[k].cancelled, 0);
        fired += timers[k].fired;
        cr_assert(!cancelled[k] || timers[k].cancelled == 1);
    }
    cr_assert_eq(fired, expect_fired);
    cr_assert(!timerq_cancel(&q, &timers[0].t) || queued[0]);
    timerq_destroy(&q);
    be_exit(&r);
    be_shared_exit(&sh);
}

/* ---- the one kernel timeout on a real context ------------------------------------------------------------ */

static void noop_event(void *ctx, enum be_event ev, uint32_t arg)
{
    (void)ctx;
    (void)ev;
    (void)arg;
}

static uint64_t ring_fire_at[4];
static int ring_fired;

static void ring_fn(sched_timer *t, int32_t res)
{
    (void)t;
    cr_assert_eq(res, -ETIME);
    ring_fire_at[ring_fired++] = urt_clock_ns();
}

/* The timer facility's one kernel timeout, on either backend (caps). */
static void one_timeout_fires_in_order_and_is_removed_when_empty(struct be_caps caps)
{
    struct be_ctx r;
    ring_fired = 0;
    struct be_shared sh;
    cr_assert_eq(be_shared_init(&sh, &caps), 0);
    cr_assert_eq(be_init(&r, &caps, &sh, 16, 64), 0);
    uint32_t inflight = 0;
    struct timerq q;
    timerq_init(&q, &r, &inflight);
    sched_timer t[3] = {0};
    uint64_t t0 = urt_clock_ns();
    uint64_t due[3] = {t0 + 30000000, t0 + 10000000, t0 + 20000000}; /* 30, 10, 20 ms */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(timerq_add(&q, &t[i], due[i], ring_fn), 0);
        timerq_sync(&q);
    }
    cr_assert_eq(inflight, 1, "one kernel timeout for three timers");
    while (ring_fired < 3) {
        be_wait(&r, 1000000000ull);
        be_reap(&r, noop_event, NULL);
    }
    cr_assert_geq(ring_fire_at[0], t0 + 10000000);
    cr_assert_geq(ring_fire_at[1], t0 + 20000000);
    cr_assert_geq(ring_fire_at[2], t0 + 30000000);
    cr_assert_eq(inflight, 0, "nothing left: no timeout armed");
    cr_assert_geq(atomic_load(&q.fires), 3);

    /* Armed, then emptied: the removal means no expiry reaches the queue. */
    sched_timer late = {0};
    cr_assert_eq(timerq_add(&q, &late, urt_clock_ns() + 20000000, ring_fn), 0);
    timerq_sync(&q);
    be_flush(&r);
    cr_assert_eq(inflight, 1);
    cr_assert(timerq_remove(&q, &late));
    timerq_sync(&q);
    for (int i = 0; i < 5; i++) {
        be_wait(&r, 10000000ull);
        be_reap(&r, noop_event, NULL);
    }
    cr_assert_eq(ring_fired, 3, "a removed timer never runs");
    cr_assert_eq(inflight, 0, "the removed timeout completed (-ECANCELED)");
    timerq_destroy(&q);
    be_exit(&r);
    be_shared_exit(&sh);
}

Test(timer, one_timeout_sqe_fires_in_order_and_is_removed_when_empty, .timeout = 30)
{
    struct be_caps caps;
    int err = be_probe(0, false, 0, &caps);
    if (err == -EPERM || err == -ENOSYS)
        cr_skip_test("io_uring is refused here (%d)", err);
    cr_assert_eq(err, 0);
    one_timeout_fires_in_order_and_is_removed_when_empty(caps);
}

Test(timer, portable_one_timeout_fires_in_order_and_is_removed_when_empty, .timeout = 30)
{
    struct be_caps caps;
    cr_assert_eq(be_probe_portable(0, 1, &caps), 0);
    one_timeout_fires_in_order_and_is_removed_when_empty(caps);
}

/* ---- on the workers ---------------------------------------------------------------------- */

#define NW 256

struct wt {
    struct sched_io io;
    uint64_t armed_at, delay;
    _Atomic int calls;
    _Atomic int res;
    _Atomic int early;
    int armed_worker;
    _Atomic int fired_worker;
};

static struct wt wts[NW];
static _Atomic int w_done;
static _Atomic int w_bad;

static void wt_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    struct wt *x = (struct wt *)((char *)io - offsetof(struct wt, io));
    (void)w;
    (void)flags;
    if (res == -ETIME && urt_clock_ns() < x->armed_at + x->delay)
        atomic_store(&x->early, 1);
    atomic_store(&x->res, res);
    atomic_store(&x->fired_worker, sched_self() ? (int)sched_self()->index : -1);
    atomic_fetch_add(&x->calls, 1);
    atomic_fetch_add(&w_done, 1);
}

static enum urt_task_result arm_fn(struct urt_task *t, void *arg)
{
    struct wt *x = arg;
    (void)t;
    struct worker *w = sched_self();
    x->armed_worker = (int)w->index;
    x->armed_at = urt_clock_ns();
    /* No criterion assertion off the main thread: count what is wrong. */
    if (sched_timer_arm(w, &x->io, x->delay, wt_done) != 0)
        atomic_fetch_add(&w_bad, 1);
    if (sched_timer_arm(w, &x->io, x->delay, wt_done) != -EBUSY) /* armed twice */
        atomic_fetch_add(&w_bad, 1);
    if ((x - wts) % 5 == 0) {
        if (sched_timer_cancel(w, &x->io) != 0 || atomic_load(&x->res) != -ECANCELED) /* done before it returns */
            atomic_fetch_add(&w_bad, 1);
        if (sched_timer_cancel(w, &x->io) != -EALREADY)
            atomic_fetch_add(&w_bad, 1);
    }
    return URT_TASK_DONE;
}

Test(timer, worker_timers_fire_once_not_early_on_their_worker, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    srand(11);
    memset(wts, 0, sizeof(wts));
    for (int i = 0; i < NW; i++) {
        wts[i].delay = (uint64_t)(rand() % 30) * 1000000ull; /* 0..29 ms */
        cr_assert_eq(urt_spawn(rt, arm_fn, &wts[i], 0), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&w_done) == NW, 20000), "%d of %d timers ran", atomic_load(&w_done), NW);
    sleep_us(50000);
    cr_assert_eq(atomic_load(&w_bad), 0, "arm/cancel returned something unexpected");
    for (int i = 0; i < NW; i++) {
        cr_assert_eq(atomic_load(&wts[i].calls), 1, "timer %d ran %d times", i, atomic_load(&wts[i].calls));
        cr_assert_eq(atomic_load(&wts[i].res), i % 5 == 0 ? -ECANCELED : -ETIME);
        cr_assert_eq(atomic_load(&wts[i].early), 0, "timer %d fired early", i);
        cr_assert_eq(atomic_load(&wts[i].fired_worker), wts[i].armed_worker, "timer %d on another worker", i);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
