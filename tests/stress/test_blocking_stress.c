/*
 * tests/stress/test_blocking_stress.c — blocking work (urt/blocking.h) from
 * every kind of task and from threads that are not workers, at once, on a
 * small pool with a small queue (so -EAGAIN, queueing and thread growth all
 * happen), ended by destroy (DRAIN, and CANCEL) with offloads in flight.
 *
 * The model: every submission attempt takes a ticket; an accepted one must
 * get exactly one call of done, its function at most one run, and done's
 * result must be the function's (ticket * 2 + 1, urt_blocking_ran) or
 * -ECANCELED with the function never run; a refused one neither. Per
 * context:
 *   plain    a task offloads, its continuation offloads again;
 *   lane     a lane task offloads once or twice, the lane's next task (a
 *            marker) must find every continuation of the round done, and
 *            no two of the lane's tasks or continuations overlap;
 *   tx       a transaction's task offloads, then commits (or aborts) its own
 *            transaction: the commit callback or the abort hook, once, must
 *            find every continuation done (a transaction cannot end under
 *            an offload);
 *   job      a job's task (serial or not) offloads, then sometimes cancels
 *            its job: the job's completion must find every continuation
 *            done;
 *   io       an I/O continuation (a sleep; on a lane for half of them)
 *            offloads; the offload's continuation sleeps again;
 *   foreign  threads submit with URT_SUBMIT_BLOCK (urt_blocking_spawn).
 * Counts are checked after destroy returned (every continuation ran by then).
 */
#include "helpers.h"

#include <pthread.h>

enum { WORKERS = 2, MAXT = 1 << 20, PER_KIND = 4, FOREIGN = 2 };

static urt_runtime *g_rt;
static _Atomic int g_stop;
static _Atomic uint32_t g_tickets;
static _Atomic uint8_t g_accepted[MAXT], g_body[MAXT], g_done[MAXT];
static _Atomic uint64_t g_bad, g_bad_lane, g_bad_end, g_refused, g_ends;

static void bad(_Atomic uint64_t *c)
{
    atomic_fetch_add(c, 1);
}

/* ---- one offload with a ticket --------------------------------------------------------------- */

struct actor;

struct rec {
    struct urt_blocking b;
    uint32_t ticket;
    uint32_t spin;
    struct actor *a;
    void (*then)(struct rec *r, int64_t res); /* after the model's bookkeeping */
};

static int64_t rec_body(void *arg)
{
    struct rec *r = arg;
    uint32_t t = r->ticket;
    if (atomic_fetch_add(&g_body[t], 1) != 0)
        bad(&g_bad);
    if (r->spin % 7 == 0)
        sleep_us(50 + r->spin % 150); /* some block, most are short */
    return (int64_t)t * 2 + 1;
}

static void rec_done(struct urt_blocking *b, int64_t res, void *arg)
{
    struct rec *r = arg;
    uint32_t t = r->ticket;
    if (urt_current_worker(g_rt) < 0 && !atomic_load(&g_stop))
        bad(&g_bad); /* before destroy, always on a worker */
    if (urt_blocking_ran(b) ? (res != (int64_t)t * 2 + 1 || atomic_load(&g_body[t]) != 1)
                            : (res != -ECANCELED || atomic_load(&g_body[t]) != 0))
        bad(&g_bad);
    if (atomic_fetch_add(&g_done[t], 1) != 0 || !atomic_load(&g_accepted[t]))
        bad(&g_bad);
    if (r->then)
        r->then(r, res);
}

/* Submits r with a new ticket: 0 if accepted. */
static int rec_submit(struct rec *r, unsigned flags)
{
    uint32_t t = atomic_fetch_add(&g_tickets, 1);
    if (t >= MAXT) {
        atomic_store(&g_stop, 1);
        return -ENOSPC;
    }
    r->ticket = t;
    r->spin = t * 2654435761u >> 7;
    urt_blocking_init(&r->b, rec_body, rec_done, r);
    atomic_store(&g_accepted[t], 1); /* before the submit: done may run before it returns */
    int err = urt_blocking_submit(g_rt, &r->b, flags);
    if (err) {
        atomic_store(&g_accepted[t], 0);
        if (err != -EAGAIN && err != -ESHUTDOWN && err != -ECANCELED)
            bad(&g_bad);
        atomic_fetch_add(&g_refused, 1);
    }
    return err;
}

/* ---- actors ---------------------------------------------------------------------------------------- */

enum kind { K_PLAIN, K_LANE, K_TX, K_JOB, K_IO, K_KINDS };

struct actor {
    enum kind kind;
    int idx;
    uint64_t rng;
    struct rec r[2];
    urt_lane *lane;        /* K_LANE, half of K_IO */
    urt_tx *tx;            /* K_TX: this round's */
    urt_job *job;          /* K_JOB: this round's */
    _Atomic int inside;    /* a task or continuation of its lane runs */
    _Atomic int accepted, conts; /* this round's accepted offloads and their finished continuations */
    bool round_refused;    /* none of this round's offloads was accepted */
    struct urt_task t_round, t_marker, t_next;
    struct urt_io io;
};

static struct actor g_act[K_KINDS][PER_KIND];

static void lane_in(struct actor *a)
{
    if (a->lane && atomic_exchange(&a->inside, 1))
        bad(&g_bad_lane);
}

static void lane_out(struct actor *a)
{
    if (a->lane)
        atomic_store(&a->inside, 0);
}

static void round_cont(struct rec *r, int64_t res)
{
    (void)res;
    lane_in(r->a);
    atomic_fetch_add(&r->a->conts, 1);
    lane_out(r->a);
}

/* The round's task: offloads once or twice (the continuations count). */
static void offload_round(struct actor *a)
{
    int n = 1 + (int)(rng_next(&a->rng) & 1);
    atomic_store(&a->accepted, 0);
    atomic_store(&a->conts, 0);
    for (int i = 0; i < n; i++) {
        a->r[i].a = a;
        a->r[i].then = round_cont;
        if (rec_submit(&a->r[i], 0) == 0)
            atomic_fetch_add(&a->accepted, 1);
    }
    a->round_refused = atomic_load(&a->accepted) == 0;
}

static void start_round(struct actor *a);

/* K_PLAIN: the continuation offloads again (refused: a new task tries). */
static enum urt_task_result plain_start(struct urt_task *t, void *arg);

static void plain_retry(struct actor *a)
{
    urt_spawn_at(g_rt, urt_now_ns() + 200 * 1000, plain_start, NULL, a, 0); /* the queue is full: later */
}

static void plain_again(struct rec *r, int64_t res)
{
    (void)res;
    if (!atomic_load(&g_stop) && rec_submit(r, 0) == -EAGAIN)
        plain_retry(r->a);
}

static enum urt_task_result plain_start(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    a->r[0].a = a;
    a->r[0].then = plain_again;
    if (!atomic_load(&g_stop) && rec_submit(&a->r[0], 0) == -EAGAIN)
        plain_retry(a);
    return URT_TASK_DONE;
}

/* K_LANE: a round task, then a marker that must find the round finished. */
static enum urt_task_result lane_round(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    lane_in(a);
    offload_round(a);
    lane_out(a);
    return URT_TASK_DONE;
}

static enum urt_task_result lane_marker(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    lane_in(a);
    if (atomic_load(&a->conts) != atomic_load(&a->accepted))
        bad(&g_bad_lane); /* the lane did not hold for the round's continuations */
    lane_out(a);
    start_round(a);
    return URT_TASK_DONE;
}

/* K_TX: the task offloads, then ends its own transaction. */
static void tx_end_check(struct actor *a)
{
    if (atomic_load(&a->conts) != atomic_load(&a->accepted))
        bad(&g_bad_end);
    atomic_fetch_add(&g_ends, 1);
}

static void tx_committed(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    (void)status;
    tx_end_check(arg);
    start_round(arg);
}

static void tx_aborted(urt_tx *tx, void *arg)
{
    (void)tx;
    tx_end_check(arg);
    start_round(arg);
}

static enum urt_task_result tx_round(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    offload_round(a);
    if (rng_next(&a->rng) % 4 == 0)
        urt_tx_abort(a->tx);
    else if (urt_tx_commit(a->tx, URT_COMMIT_ACCEPTED, tx_committed, a) != 0)
        bad(&g_bad_end);
    return URT_TASK_DONE;
}

/* K_JOB: the task offloads, sometimes cancels its job. */
static enum urt_task_result job_round(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    offload_round(a);
    if (rng_next(&a->rng) % 4 == 0)
        urt_job_cancel(a->job);
    return URT_TASK_DONE;
}

static void job_ended(urt_job *job, int status, void *arg)
{
    struct actor *a = arg;
    (void)job;
    (void)status;
    if (atomic_load(&a->conts) != atomic_load(&a->accepted))
        bad(&g_bad_end);
    atomic_fetch_add(&g_ends, 1);
    start_round(a);
}

/* K_IO: a sleep whose continuation offloads; the offload's continuation sleeps again. */
static void io_slept(struct urt_io *io, int32_t res, void *arg);

static void io_again(struct rec *r, int64_t res)
{
    (void)res;
    struct actor *a = r->a;
    lane_in(a);
    lane_out(a);
    if (atomic_load(&g_stop))
        return;
    urt_io_init(&a->io, io_slept, a);
    urt_io_sleep(&a->io, 20 * 1000); /* fails only at destroy */
}

static void io_slept(struct urt_io *io, int32_t res, void *arg)
{
    struct actor *a = arg;
    (void)io;
    (void)res;
    lane_in(a);
    a->r[0].a = a;
    a->r[0].then = io_again;
    int err = rec_submit(&a->r[0], 0);
    lane_out(a);
    if (err == -EAGAIN)
        io_again(&a->r[0], 0); /* try again after another sleep */
}

static enum urt_task_result io_start(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    urt_io_init(&a->io, io_slept, a);
    urt_io_sleep(&a->io, 20 * 1000);
    return URT_TASK_DONE;
}

/* The next round of a lane, tx or job actor: a new task from wherever the
 * previous round ended (a lane task, a commit callback, an abort hook, a
 * job's completion), through a plain task that releases the old handle. */
static enum urt_task_result next_round(struct urt_task *t, void *arg)
{
    struct actor *a = arg;
    (void)t;
    if (a->kind == K_TX) {
        urt_tx_release(a->tx);
        a->tx = NULL;
        if (atomic_load(&g_stop) || urt_tx_begin(g_rt, &(struct urt_tx_options){.hooks = {NULL, tx_aborted, a}},
                                                 &a->tx) != 0)
            return URT_TASK_DONE;
        urt_task_init(&a->t_round, tx_round, a);
        if (urt_tx_submit(a->tx, &a->t_round, 0) != 0)
            bad(&g_bad_end);
        return URT_TASK_DONE;
    }
    /* K_JOB */
    urt_job_release(a->job);
    a->job = NULL;
    if (atomic_load(&g_stop))
        return URT_TASK_DONE;
    struct urt_job_options o;
    urt_job_options_init(&o);
    o.work_level = rng_next(&a->rng) & 1 ? 0 : URT_WORK_LEVEL_MAX; /* serial (own lane) or not */
    o.done = job_ended;
    o.arg = a;
    if (urt_job_create(g_rt, &o, &a->job) != 0)
        return URT_TASK_DONE;
    urt_task_init(&a->t_round, job_round, a);
    if (urt_job_submit(a->job, &a->t_round, 0) != 0 || urt_job_close(a->job) != 0)
        bad(&g_bad_end);
    return URT_TASK_DONE;
}

static enum urt_task_result start_later(struct urt_task *t, void *arg)
{
    (void)t;
    start_round(arg);
    return URT_TASK_DONE;
}

static void start_round(struct actor *a)
{
    if (atomic_load(&g_stop))
        return;
    if (a->round_refused) { /* the queue was full: the next round a little later */
        a->round_refused = false;
        urt_spawn_at(g_rt, urt_now_ns() + 200 * 1000, start_later, NULL, a, 0);
        return;
    }
    switch (a->kind) {
    case K_LANE:
        urt_task_init(&a->t_round, lane_round, a);
        urt_task_init(&a->t_marker, lane_marker, a);
        if (urt_lane_submit(a->lane, &a->t_round, 0) || urt_lane_submit(a->lane, &a->t_marker, 0))
            bad(&g_bad_lane);
        break;
    case K_TX:
    case K_JOB:
        urt_task_init(&a->t_next, next_round, a);
        if (urt_task_submit(g_rt, &a->t_next, 0) != 0 && !atomic_load(&g_stop))
            bad(&g_bad_end);
        break;
    default:
        break;
    }
}

/* ---- foreign threads ---------------------------------------------------------------------------------- */

static void foreign_done(struct urt_blocking *b, int64_t res, void *arg)
{
    rec_done(b, res, arg);
    free(arg);
}

static void *foreign_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop)) {
        struct rec *r = calloc(1, sizeof(*r));
        uint32_t t = atomic_fetch_add(&g_tickets, 1);
        if (t >= MAXT) {
            free(r);
            break;
        }
        r->ticket = t;
        r->spin = t * 2654435761u >> 7;
        atomic_store(&g_accepted[t], 1);
        int err = urt_blocking_spawn(g_rt, rec_body, foreign_done, r, URT_SUBMIT_BLOCK);
        if (err) {
            atomic_store(&g_accepted[t], 0);
            if (err != -ESHUTDOWN)
                bad(&g_bad);
            free(r);
            break;
        }
        sleep_us(100); /* the queue is shared with the workers' tasks */
    }
    return NULL;
}

/* ---- the run ---------------------------------------------------------------------------------------------- */

static void run(enum urt_shutdown mode)
{
    struct urt_config cfg;
    test_config(&cfg, WORKERS);
    cfg.blocking_threads_max = 4;
    cfg.blocking_queue_max = 12;
    cfg.blocking_keepalive_ms = 20; /* threads come and go */
    cfg.lightweight_job_level = 0;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    memset(g_act, 0, sizeof(g_act));
    for (int k = 0; k < K_KINDS; k++)
        for (int i = 0; i < PER_KIND; i++) {
            struct actor *a = &g_act[k][i];
            a->kind = (enum kind)k;
            a->idx = i;
            a->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(k * PER_KIND + i + 1);
            if (k == K_LANE || (k == K_IO && i % 2))
                cr_assert_eq(urt_lane_create(rt, &a->lane), 0);
        }
    for (int i = 0; i < PER_KIND; i++) {
        cr_assert_eq(urt_spawn(rt, plain_start, &g_act[K_PLAIN][i], 0), 0);
        start_round(&g_act[K_LANE][i]);
        start_round(&g_act[K_TX][i]);
        start_round(&g_act[K_JOB][i]);
        struct actor *a = &g_act[K_IO][i];
        urt_task_init(&a->t_round, io_start, a);
        if (a->lane)
            cr_assert_eq(urt_lane_submit(a->lane, &a->t_round, 0), 0);
        else
            cr_assert_eq(urt_task_submit(rt, &a->t_round, 0), 0);
    }
    pthread_t th[FOREIGN];
    for (int i = 0; i < FOREIGN; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, foreign_main, NULL), 0);
    sleep_us(SCALE(1500, 800) * 1000ull);
    atomic_store(&g_stop, 1); /* the actors stop looping (so a drain ends); offloads are in flight */
    int r = urt_runtime_destroy(rt, mode);
    cr_assert_geq(r, 0, "destroy: %d %s", r, urt_last_error());
    for (int i = 0; i < FOREIGN; i++)
        pthread_join(th[i], NULL);
    uint32_t n = atomic_load(&g_tickets);
    if (n > MAXT)
        n = MAXT;
    uint64_t accepted = 0, ran = 0;
    for (uint32_t t = 0; t < n; t++) {
        bool acc = atomic_load(&g_accepted[t]);
        accepted += acc;
        ran += atomic_load(&g_body[t]);
        cr_assert_eq(atomic_load(&g_done[t]), acc ? 1 : 0, "ticket %u (accepted %d): done %d times", t, acc,
                     atomic_load(&g_done[t]));
        cr_assert_leq(atomic_load(&g_body[t]), acc ? 1 : 0, "ticket %u: function ran %d times", t,
                      atomic_load(&g_body[t]));
    }
    cr_assert_eq(atomic_load(&g_bad), 0, "results against the model: %lu wrong", (unsigned long)atomic_load(&g_bad));
    cr_assert_eq(atomic_load(&g_bad_lane), 0, "lanes did not hold or overlapped: %lu",
                 (unsigned long)atomic_load(&g_bad_lane));
    cr_assert_eq(atomic_load(&g_bad_end), 0, "a job or transaction ended under an offload: %lu",
                 (unsigned long)atomic_load(&g_bad_end));
    cr_assert_gt(accepted, 1000, "too little happened: %lu offloads", (unsigned long)accepted);
    cr_assert_gt(atomic_load(&g_ends), 50, "too few jobs and transactions ended");
    fprintf(stderr, "# blocking stress (%s): %u tickets, %lu accepted, %lu ran, %lu refused, %lu tx/job ends\n",
            mode == URT_SHUTDOWN_DRAIN ? "drain" : "cancel", n, (unsigned long)accepted, (unsigned long)ran,
            (unsigned long)atomic_load(&g_refused), (unsigned long)atomic_load(&g_ends));
    for (int k = 0; k < K_KINDS; k++)
        for (int i = 0; i < PER_KIND; i++) {
            struct actor *a = &g_act[k][i];
            if (a->lane)
                cr_assert_eq(urt_lane_destroy(a->lane), 0);
            if (a->tx)
                urt_tx_release(a->tx);
            if (a->job)
                urt_job_release(a->job);
        }
    leak_check();
}

Test(blocking_stress, every_context_exactly_once_drain)
{
    run(URT_SHUTDOWN_DRAIN);
}

Test(blocking_stress, every_context_exactly_once_cancel)
{
    run(URT_SHUTDOWN_CANCEL);
}
