/*
 * tests/unit/test_io_ctx.c — where an I/O's continuation runs, and
 * cancellation and shutdown with I/O in flight (urt/io.h, "Where the
 * continuation runs", rules 6 and 9):
 *  - a job's I/O is live work: the teardown runs once, after the
 *    continuation; a job cancel and a job deadline cancel the I/O in flight
 *    (-ECANCELED in the continuation, whose next submission is refused), the
 *    job ends with -ECANCELED / -ETIME;
 *  - a serial job's and a lane's continuations run on the lane, never beside
 *    another of its tasks;
 *  - a transaction counts its I/O: a commit waits for the continuation, an
 *    abort cancels the I/O and the abort hook runs after the continuation;
 *  - destroy (DRAIN and CANCEL) with operations in flight: every
 *    continuation once, -ECANCELED, on a worker, before destroy returns; a
 *    submission from it is refused with -ESHUTDOWN; timed tasks: DRAIN runs
 *    them at their time, CANCEL calls their cancel callback; a lane's
 *    continuation cancelled by a worker that leaves first still waits for
 *    the lane's task running on another worker.
 */
#include "helpers.h"
#include "io_helpers.h"

/* ---- jobs --------------------------------------------------------------------------------------- */

struct jrec {
    struct req r;
    urt_job *job;
    _Atomic int job_seen;      /* urt_task_job of the continuation's task was the job */
    _Atomic int resubmit_err;  /* the continuation's attempt to submit again */
    _Atomic int done_calls, status;
    _Atomic uint64_t done_ns;
    bool resubmit;
};

static void jrec_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct jrec *j = arg;
    atomic_store(&j->job_seen, urt_task_job(&io->task) == j->job);
    if (j->resubmit)
        atomic_store(&j->resubmit_err, urt_io_sleep(io, 1000) + 1);
    req_cont(io, res, &j->r);
}

static enum urt_task_result jrec_task(struct urt_task *t, void *arg)
{
    struct jrec *j = arg;
    (void)t;
    urt_io_init(&j->r.io, jrec_cont, j);
    atomic_store(&j->r.sub_worker, urt_current_worker(g_rt));
    atomic_store(&j->r.submit_err, req_submit(&j->r));
    atomic_store(&j->r.submitted, 1);
    return URT_TASK_DONE;
}

static void jrec_done(urt_job *job, int status, void *arg)
{
    struct jrec *j = arg;
    (void)job;
    atomic_store(&j->status, status);
    atomic_store(&j->done_ns, urt_now_ns());
    atomic_fetch_add(&j->done_calls, 1);
}

static void jrec_start(urt_runtime *rt, struct jrec *j, uint64_t deadline_ns, uint32_t work_level)
{
    struct urt_job_options o;
    urt_job_options_init(&o);
    o.done = jrec_done;
    o.arg = j;
    o.deadline_ns = deadline_ns;
    o.work_level = work_level;
    cr_assert_eq(urt_job_create(rt, &o, &j->job), 0);
    atomic_store(&j->r.calls, 0);
    cr_assert_eq(urt_job_spawn(j->job, jrec_task, NULL, j, 0), 0);
    cr_assert_eq(urt_job_close(j->job), 0);
}

Test(io_ctx, job_io_is_live_work)
{
    urt_runtime *rt = io_rt(2);
    for (uint32_t level = 0; level <= 1; level++) { /* 0: serial (its own lane), 60: parallel */
        struct jrec j = {.r = {.op = OP_SLEEP, .ns = 30 * 1000 * 1000}};
        jrec_start(rt, &j, 0, level ? URT_WORK_LEVEL_MAX : 0);
        cr_assert_eq(urt_job_wait(j.job, 5ull * 1000 * 1000 * 1000), 0);
        cr_assert_eq(atomic_load(&j.r.submit_err), 0);
        cr_assert_eq(atomic_load(&j.r.calls), 1);
        cr_assert_eq(atomic_load(&j.r.res), 0);
        cr_assert(atomic_load(&j.job_seen), "the continuation is a task of the job");
        cr_assert_eq(atomic_load(&j.done_calls), 1);
        cr_assert_geq(atomic_load(&j.done_ns), atomic_load(&j.r.done_ns), "teardown before the continuation");
        urt_job_release(j.job);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_ctx, job_cancel_and_deadline_cancel_its_io)
{
    urt_runtime *rt = io_rt(2);
    int sv[2];
    tcp_pair(sv);
    char buf[8];
    for (int deadline = 0; deadline <= 1; deadline++) {
        for (uint32_t level = 0; level <= 1; level++) {
            struct jrec j = {.r = {.op = OP_RECV, .fd = sv[0], .buf = buf, .len = sizeof(buf)}, .resubmit = true};
            jrec_start(rt, &j, deadline ? 30 * 1000 * 1000 : 0, level ? URT_WORK_LEVEL_MAX : 0);
            cr_assert(WAIT_UNTIL(atomic_load(&j.r.submitted), 5000));
            cr_assert_eq(atomic_load(&j.r.submit_err), 0);
            uint64_t t0 = urt_now_ns();
            if (!deadline) {
                sleep_us(10000);
                cr_assert_eq(atomic_load(&j.r.calls), 0);
                cr_assert_eq(urt_job_cancel(j.job), 0);
            }
            int st = urt_job_wait(j.job, 5ull * 1000 * 1000 * 1000);
            cr_assert_eq(st, deadline ? -ETIME : -ECANCELED, "job status %d", st);
            cr_assert_lt(urt_now_ns() - t0, 2ull * 1000 * 1000 * 1000, "the cancel took too long");
            cr_assert_eq(atomic_load(&j.r.calls), 1);
            cr_assert_eq(atomic_load(&j.r.res), -ECANCELED);
            cr_assert_eq(atomic_load(&j.resubmit_err), -ECANCELED + 1, "a cancelled job's task may not submit");
            cr_assert_eq(atomic_load(&j.done_calls), 1);
            cr_assert_geq(atomic_load(&j.done_ns), atomic_load(&j.r.done_ns));
            urt_job_release(j.job);
        }
    }
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- lanes ------------------------------------------------------------------------------------- */

struct lrec {
    struct urt_io io;
    urt_lane *lane;
    _Atomic int inside, overlap, conts, plain, left; /* left: continuations still to chain */
    _Atomic int lane_tasks;
};

static void lane_enter(struct lrec *l)
{
    if (atomic_exchange(&l->inside, 1))
        atomic_store(&l->overlap, 1);
}

static void lane_exit(struct lrec *l)
{
    atomic_store(&l->inside, 0);
}

static void lrec_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct lrec *l = arg;
    lane_enter(l);
    (void)res;
    sleep_us(200); /* widen the window for an overlap */
    atomic_fetch_add(&l->conts, 1);
    if (atomic_fetch_sub(&l->left, 1) > 1 && urt_io_sleep(io, 100000) != 0)
        atomic_store(&l->overlap, 2);
    lane_exit(l);
}

static enum urt_task_result lrec_plain(struct urt_task *t, void *arg)
{
    struct lrec *l = arg;
    (void)t;
    lane_enter(l);
    sleep_us(100);
    atomic_fetch_add(&l->plain, 1);
    lane_exit(l);
    return URT_TASK_DONE;
}

static enum urt_task_result lrec_first(struct urt_task *t, void *arg)
{
    struct lrec *l = arg;
    (void)t;
    lane_enter(l);
    urt_io_init(&l->io, lrec_cont, l);
    if (urt_io_sleep(&l->io, 100000) != 0)
        atomic_store(&l->overlap, 3);
    lane_exit(l);
    return URT_TASK_DONE;
}

Test(io_ctx, lane_continuations_run_on_the_lane)
{
    urt_runtime *rt = io_rt(2);
    struct lrec l = {0};
    atomic_store(&l.left, 20);
    cr_assert_eq(urt_lane_create(rt, &l.lane), 0);
    cr_assert_eq(urt_lane_spawn(l.lane, lrec_first, NULL, &l, 0), 0);
    for (int i = 0; i < 400; i++) {
        cr_assert_eq(urt_lane_spawn(l.lane, lrec_plain, NULL, &l, 0), 0);
        if (i % 20 == 0)
            sleep_us(500);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&l.conts) == 20 && atomic_load(&l.plain) == 400, 10000));
    cr_assert_eq(atomic_load(&l.overlap), 0, "a continuation ran beside a task of its lane (%d)",
                 atomic_load(&l.overlap));
    cr_assert(WAIT_UNTIL(urt_lane_pending(l.lane) == 0, 5000));
    cr_assert_eq(urt_lane_destroy(l.lane), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- transactions ----------------------------------------------------------------------------- */

struct trec {
    struct req r;
    urt_tx *tx;
    _Atomic int aborts, commits, commit_status;
    _Atomic uint64_t abort_ns, commit_ns;
};

static void trec_abort(urt_tx *tx, void *arg)
{
    struct trec *x = arg;
    (void)tx;
    atomic_store(&x->abort_ns, urt_now_ns());
    atomic_fetch_add(&x->aborts, 1);
}

static void trec_committed(urt_tx *tx, int status, void *arg)
{
    struct trec *x = arg;
    (void)tx;
    atomic_store(&x->commit_status, status);
    atomic_store(&x->commit_ns, urt_now_ns());
    atomic_fetch_add(&x->commits, 1);
}

static enum urt_task_result trec_task(struct urt_task *t, void *arg)
{
    struct trec *x = arg;
    (void)t;
    urt_io_init(&x->r.io, req_cont, &x->r);
    atomic_store(&x->r.submit_err, req_submit(&x->r));
    atomic_store(&x->r.submitted, 1);
    return URT_TASK_DONE;
}

static void trec_begin(urt_runtime *rt, struct trec *x)
{
    struct urt_tx_options o;
    urt_tx_options_init(&o);
    o.hooks.abort = trec_abort;
    o.hooks.arg = x;
    cr_assert_eq(urt_tx_begin(rt, &o, &x->tx), 0);
    cr_assert_eq(urt_tx_spawn(x->tx, trec_task, NULL, x, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&x->r.submitted), 5000));
    cr_assert_eq(atomic_load(&x->r.submit_err), 0, "%s", urt_last_error());
}

Test(io_ctx, transaction_commit_waits_and_abort_cancels)
{
    urt_runtime *rt = io_rt(2);
    /* commit with a sleep in flight: deferred until the continuation left */
    struct trec c = {.r = {.op = OP_SLEEP, .ns = 40 * 1000 * 1000}};
    trec_begin(rt, &c);
    cr_assert_eq(urt_tx_commit(c.tx, URT_COMMIT_ACCEPTED, trec_committed, &c), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&c.commits) == 1, 5000));
    cr_assert_eq(atomic_load(&c.commit_status), 0);
    cr_assert_eq(atomic_load(&c.r.calls), 1);
    cr_assert_eq(atomic_load(&c.r.res), 0, "the sleep completed");
    cr_assert_geq(atomic_load(&c.commit_ns), atomic_load(&c.r.done_ns), "committed before the continuation");
    urt_tx_release(c.tx);
    /* abort with a receive in flight: cancelled, then the hook */
    int sv[2];
    tcp_pair(sv);
    char buf[8];
    struct trec a = {.r = {.op = OP_RECV, .fd = sv[0], .buf = buf, .len = sizeof(buf)}};
    trec_begin(rt, &a);
    sleep_us(5000);
    cr_assert_eq(urt_tx_abort(a.tx), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&a.aborts) == 1, 5000));
    cr_assert_eq(atomic_load(&a.r.calls), 1);
    cr_assert_eq(atomic_load(&a.r.res), -ECANCELED);
    cr_assert_geq(atomic_load(&a.abort_ns), atomic_load(&a.r.done_ns), "abort hook before the continuation");
    urt_tx_release(a.tx);
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- shutdown ---------------------------------------------------------------------------------- */

struct srec {
    struct req r;
    _Atomic int resubmit_err;
};

static void srec_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct srec *s = arg;
    atomic_store(&s->resubmit_err, urt_io_sleep(io, 1000));
    req_cont(io, res, &s->r);
}

static enum urt_task_result srec_task(struct urt_task *t, void *arg)
{
    struct srec *s = arg;
    (void)t;
    urt_io_init(&s->r.io, srec_cont, s);
    atomic_store(&s->r.submit_err, req_submit(&s->r));
    atomic_store(&s->r.submitted, 1);
    return URT_TASK_DONE;
}

static void shutdown_with_io(enum urt_shutdown mode)
{
    urt_runtime *rt = io_rt(2);
    int sv[2];
    tcp_pair(sv);
    enum { N = 40 };
    static char bufs[N][8];
    struct srec *s = calloc(N, sizeof(*s));
    for (int i = 0; i < N; i++) {
        if (i % 2)
            s[i].r = (struct req){.op = OP_RECV, .fd = sv[0], .buf = bufs[i], .len = 8};
        else
            s[i].r = (struct req){.op = OP_SLEEP, .ns = 30ull * 1000 * 1000 * 1000};
        atomic_store(&s[i].r.cont_worker, -2);
        cr_assert_eq(urt_spawn(rt, srec_task, &s[i], 0), 0);
    }
    for (int i = 0; i < N; i++) {
        cr_assert(WAIT_UNTIL(atomic_load(&s[i].r.submitted), 5000));
        cr_assert_eq(atomic_load(&s[i].r.submit_err), 0);
    }
    sleep_us(10000);
    uint64_t t0 = now_ns();
    int r = urt_runtime_destroy(rt, mode);
    cr_assert_geq(r, 0, "destroy: %d (%s)", r, urt_last_error());
    cr_assert_lt(now_ns() - t0, 5ull * 1000 * 1000 * 1000, "destroy waited for the I/O");
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&s[i].r.calls), 1, "op %d: %d continuations", i, atomic_load(&s[i].r.calls));
        cr_assert_eq(atomic_load(&s[i].r.res), -ECANCELED, "op %d: %d", i, atomic_load(&s[i].r.res));
        cr_assert_geq(atomic_load(&s[i].r.cont_worker), 0, "op %d: continuation not on a worker", i);
        cr_assert_eq(atomic_load(&s[i].resubmit_err), -ESHUTDOWN);
    }
    free(s);
    close(sv[0]);
    close(sv[1]);
    leak_check();
}

Test(io_ctx, destroy_drain_with_io_in_flight)
{
    shutdown_with_io(URT_SHUTDOWN_DRAIN);
}

Test(io_ctx, destroy_cancel_with_io_in_flight)
{
    shutdown_with_io(URT_SHUTDOWN_CANCEL);
}

/* destroy(CANCEL) with a lane's receive in flight on worker 0 while the
 * lane runs a task on worker 1: worker 0 leaves first and cancels the
 * receive, but its continuation is a task of the lane and must not run
 * beside the lane's running task (it ran in place on worker 0 before). The
 * running task holds the lane until worker 0's thread is gone; the
 * continuation runs after it (on worker 1, or cancelled with the leftovers
 * on the destroying thread), once, with -ECANCELED. */
struct lexcl {
    struct urt_io io;
    urt_lane *lane;
    int fd;
    char buf[8];
    _Atomic int armed, holding, destroying, inside, calls, overlap, res, bad;
    struct urt_task arm, hold, a0, a1;
};

static void lexcl_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct lexcl *x = arg;
    (void)io;
    if (atomic_load(&x->inside))
        atomic_store(&x->overlap, 1); /* beside the lane's running task */
    atomic_store(&x->res, res);
    atomic_fetch_add(&x->calls, 1);
}

static enum urt_task_result lexcl_arm(struct urt_task *t, void *arg)
{
    struct lexcl *x = arg;
    (void)t;
    urt_io_init(&x->io, lexcl_cont, x);
    int err = urt_current_worker(g_rt) == 0 ? urt_io_recv(&x->io, x->fd, x->buf, sizeof(x->buf), 0) : -1000;
    atomic_store(&x->armed, err ? err : 1);
    return URT_TASK_DONE;
}

static enum urt_task_result lexcl_hold(struct urt_task *t, void *arg)
{
    struct lexcl *x = arg;
    (void)t;
    atomic_store(&x->inside, 1);
    atomic_store(&x->holding, urt_current_worker(g_rt) == 1 ? 1 : -1);
    while (!atomic_load(&x->destroying))
        sleep_us(200);
    if (!WAIT_UNTIL(!thread_named("urt-w0"), 10000))
        atomic_store(&x->bad, 1); /* worker 0 never left */
    sleep_us(2000);
    atomic_store(&x->inside, 0);
    return URT_TASK_DONE;
}

/* On a worker: queue a task on the lane (lane_balance off: the idle lane goes
 * to the submitting worker). */
static enum urt_task_result lexcl_submit_arm(struct urt_task *t, void *arg)
{
    struct lexcl *x = arg;
    (void)t;
    if (urt_lane_submit(x->lane, &x->arm, 0))
        atomic_store(&x->armed, -2000);
    return URT_TASK_DONE;
}

static enum urt_task_result lexcl_submit_hold(struct urt_task *t, void *arg)
{
    struct lexcl *x = arg;
    (void)t;
    if (urt_lane_submit(x->lane, &x->hold, 0))
        atomic_store(&x->holding, -2000);
    return URT_TASK_DONE;
}

Test(io_ctx, destroy_cancel_keeps_a_lane_one_at_a_time)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.lane_balance = false;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    int sv[2];
    tcp_pair(sv);
    struct lexcl *x = calloc(1, sizeof(*x));
    x->fd = sv[0];
    cr_assert_eq(urt_lane_create(rt, &x->lane), 0);
    urt_task_init(&x->arm, lexcl_arm, x);
    urt_task_init(&x->hold, lexcl_hold, x);
    urt_task_init(&x->a0, lexcl_submit_arm, x);
    urt_task_init(&x->a1, lexcl_submit_hold, x);
    cr_assert_eq(urt_task_submit_to(rt, 0, &x->a0, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&x->armed) != 0, 5000));
    cr_assert_eq(atomic_load(&x->armed), 1, "the receive: %d", atomic_load(&x->armed));
    cr_assert(WAIT_UNTIL(urt_lane_pending(x->lane) == 0, 5000));
    cr_assert_eq(urt_task_submit_to(rt, 1, &x->a1, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&x->holding) != 0, 5000));
    cr_assert_eq(atomic_load(&x->holding), 1, "the holder: %d", atomic_load(&x->holding));
    atomic_store(&x->destroying, 1);
    cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
    cr_assert_eq(atomic_load(&x->bad), 0);
    cr_assert_eq(atomic_load(&x->calls), 1);
    cr_assert_eq(atomic_load(&x->res), -ECANCELED);
    cr_assert_eq(atomic_load(&x->overlap), 0, "the lane's continuation ran beside its running task");
    cr_assert_eq(urt_lane_destroy(x->lane), 0);
    close(sv[0]);
    close(sv[1]);
    free(x);
}

/* destroy(DRAIN) runs the queued tasks and what they submit, but not their
 * I/O (urt/runtime.h rule 3, urt/io.h rule 9): a task queued behind a slow
 * one runs during the drain; its read is refused with -ESHUTDOWN, the task
 * it spawns and a timed task it submits run. */
struct drainio {
    _Atomic int slow_running, read_err, spawned_ran, timed_ran;
    char buf[8];
    struct urt_io io;
};

static enum urt_task_result drainio_slow(struct urt_task *t, void *arg)
{
    struct drainio *d = arg;
    (void)t;
    atomic_store(&d->slow_running, 1);
    sleep_us(100 * 1000); /* destroy begins meanwhile */
    return URT_TASK_DONE;
}

static enum urt_task_result drainio_spawned(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_store(&((struct drainio *)arg)->spawned_ran, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result drainio_timed(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_store(&((struct drainio *)arg)->timed_ran, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result drainio_late(struct urt_task *t, void *arg)
{
    struct drainio *d = arg;
    (void)t;
    urt_io_init(&d->io, req_cont_discard, NULL);
    atomic_store(&d->read_err, urt_io_read(&d->io, 0, d->buf, sizeof(d->buf), 0));
    urt_spawn(g_rt, drainio_spawned, d, 0);
    urt_spawn_at(g_rt, urt_now_ns() + 20 * 1000 * 1000, drainio_timed, NULL, d, 0);
    return URT_TASK_DONE;
}

Test(io_ctx, destroy_drain_runs_tasks_but_not_their_io)
{
    urt_runtime *rt = io_rt(1);
    struct drainio d = {0};
    atomic_store(&d.read_err, 1);
    cr_assert_eq(urt_spawn(rt, drainio_slow, &d, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&d.slow_running), 5000));
    cr_assert_eq(urt_spawn(rt, drainio_late, &d, 0), 0); /* queued behind the slow task */
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&d.read_err), -ESHUTDOWN, "the read during the drain: %d", atomic_load(&d.read_err));
    cr_assert_eq(atomic_load(&d.spawned_ran), 1);
    cr_assert_eq(atomic_load(&d.timed_ran), 1);
}

struct timed {
    _Atomic int runs, cancels;
};

static enum urt_task_result timed_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&((struct timed *)arg)->runs, 1);
    return URT_TASK_DONE;
}

static void timed_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&((struct timed *)arg)->cancels, 1);
}

static enum urt_task_result spawn_at_task(struct urt_task *t, void *arg)
{
    (void)t;
    urt_spawn_at(g_rt, urt_now_ns() + 20ull * 1000 * 1000 * 1000, timed_fn, timed_cancel, arg, 0);
    return URT_TASK_DONE;
}

Test(io_ctx, destroy_and_timed_tasks)
{
    /* DRAIN: a task due soon runs before destroy returns */
    urt_runtime *rt = io_rt(2);
    struct timed a = {0};
    cr_assert_eq(urt_spawn_at(rt, urt_now_ns() + 50 * 1000 * 1000, timed_fn, timed_cancel, &a, 0), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&a.runs), 1);
    cr_assert_eq(atomic_load(&a.cancels), 0);
    /* CANCEL: tasks due later get their cancel callback (armed from a thread and from a worker) */
    rt = io_rt(2);
    struct timed b = {0}, c = {0};
    cr_assert_eq(urt_spawn_at(rt, urt_now_ns() + 20ull * 1000 * 1000 * 1000, timed_fn, timed_cancel, &b, 0), 0);
    cr_assert_eq(urt_spawn(rt, spawn_at_task, &c, 0), 0);
    sleep_us(20000);
    uint64_t t0 = now_ns();
    rt_destroy_clean(rt, URT_SHUTDOWN_CANCEL, -1);
    cr_assert_lt(now_ns() - t0, 5ull * 1000 * 1000 * 1000);
    cr_assert_eq(atomic_load(&b.runs) + atomic_load(&c.runs), 0);
    cr_assert_eq(atomic_load(&b.cancels), 1);
    cr_assert_eq(atomic_load(&c.cancels), 1);
}
