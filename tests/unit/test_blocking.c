/*
 * tests/unit/test_blocking.c — blocking work (SPEC C22, urt/blocking.h):
 *  - the function runs on a pool thread (not a worker, named urt-blk-<n>),
 *    the continuation on a worker with its result, from a task and from a
 *    thread that is not a worker; the allocating form; argument errors;
 *  - lanes hold: a lane's next task starts only after the continuation of
 *    its previous task's offloads (one, several, chained, after a yield),
 *    checked against the order a model of the lane predicts;
 *  - jobs and transactions count offloads (the job ends after the
 *    continuation; a commit waits for it; an abort and a job cancel take a
 *    queued offload out: its function never runs, done sees -ECANCELED,
 *    while the only pool thread is still busy);
 *  - destroy in both modes with offloads queued and running;
 *  - the queue's bound with -EAGAIN and with URT_SUBMIT_BLOCK (threads wait
 *    for room; a worker never waits);
 *  - the pool's size: created on demand up to blocking_threads_max,
 *    blocking_threads_min started with the runtime and kept, keep-alive
 *    shrink; bad configuration values;
 *  - a worker whose task offloads a 50 ms sleep keeps running other tasks
 *    and completing I/O meanwhile;
 *  - statistics, the watchdog on pool threads, NUMA nodes (threads bound to
 *    the submitting worker's node).
 */
#include "helpers.h"

#include <pthread.h>
#include <sched.h>

static urt_runtime *g_rt;

static urt_runtime *blk_rt(uint32_t workers, uint32_t max, uint32_t min, uint64_t queue_max)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.blocking_threads_max = max;
    cfg.blocking_threads_min = min;
    if (queue_max)
        cfg.blocking_queue_max = queue_max;
    g_rt = rt_create_or_skip(&cfg);
    return g_rt;
}

static struct urt_blocking_stats blk_stats(urt_runtime *rt)
{
    struct urt_blocking_stats st;
    cr_assert_eq(urt_blocking_stats(rt, &st), 0);
    return st;
}

/* ---- one offload, recorded ----------------------------------------------------------------- */

struct off {
    struct urt_blocking b;
    uint64_t sleep_us;          /* the function sleeps this long */
    _Atomic int *gate;          /* ... or waits until *gate != 0 */
    int64_t ret;                /* what the function returns */
    _Atomic int body_calls, body_worker, done_calls, done_worker, ran;
    _Atomic int64_t res;
    _Atomic int body_named;     /* the function's thread is called urt-blk-<n> */
    _Atomic uint64_t body_end_ns, done_ns;
    void (*then)(struct off *o); /* called by done (after recording) */
};

static int64_t off_body(void *arg)
{
    struct off *o = arg;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    atomic_store(&o->body_named, strncmp(name, "urt-blk-", 8) == 0);
    atomic_store(&o->body_worker, urt_current_worker(g_rt));
    if (o->sleep_us)
        sleep_us(o->sleep_us);
    while (o->gate && !atomic_load(o->gate))
        sleep_us(200);
    atomic_store(&o->body_end_ns, urt_now_ns());
    atomic_fetch_add(&o->body_calls, 1);
    return o->ret;
}

static void off_done(struct urt_blocking *b, int64_t res, void *arg)
{
    struct off *o = arg;
    if (b != &o->b)
        atomic_store(&o->ran, -1000);
    atomic_store(&o->res, res);
    atomic_store(&o->ran, urt_blocking_ran(b));
    atomic_store(&o->done_worker, urt_current_worker(g_rt));
    atomic_store(&o->done_ns, urt_now_ns());
    if (o->then)
        o->then(o);
    atomic_fetch_add(&o->done_calls, 1);
}

static void off_init(struct off *o, int64_t ret)
{
    memset(o, 0, sizeof(*o));
    o->ret = ret;
    atomic_store(&o->body_worker, -2);
    atomic_store(&o->done_worker, -2);
    urt_blocking_init(&o->b, off_body, off_done, o);
}

/* A task that submits an offload and records the result of the call. */
struct submitter {
    struct urt_task task;
    struct off *o;
    unsigned flags;
    _Atomic int err, ran;
};

static enum urt_task_result submit_task(struct urt_task *t, void *arg)
{
    struct submitter *s = arg;
    (void)t;
    atomic_store(&s->err, urt_blocking_submit(g_rt, &s->o->b, s->flags));
    atomic_store(&s->ran, 1);
    return URT_TASK_DONE;
}

Test(blocking, function_on_a_pool_thread_continuation_on_a_worker)
{
    urt_runtime *rt = blk_rt(2, 4, 0, 0);
    /* from a task */
    struct off o;
    off_init(&o, 0x123456789abll);
    struct submitter s = {.o = &o};
    urt_task_init(&s.task, submit_task, &s);
    cr_assert_eq(urt_task_submit(rt, &s.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 1, 5000));
    cr_assert_eq(atomic_load(&s.err), 0);
    cr_assert_eq(atomic_load(&o.body_calls), 1);
    cr_assert_eq(atomic_load(&o.body_worker), -1, "the function ran on a worker");
    cr_assert(atomic_load(&o.body_named), "the pool thread is named urt-blk-<n>");
    cr_assert_geq(atomic_load(&o.done_worker), 0, "the continuation ran off the workers");
    cr_assert_eq(atomic_load(&o.res), 0x123456789abll);
    cr_assert(atomic_load(&o.ran));
    /* from this thread (not a worker); a negative result is carried as is */
    off_init(&o, -12345);
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 1, 5000));
    cr_assert_eq(atomic_load(&o.body_worker), -1);
    cr_assert_geq(atomic_load(&o.done_worker), 0);
    cr_assert_eq(atomic_load(&o.res), -12345);
    sleep_us(20000);
    cr_assert_eq(atomic_load(&o.done_calls), 1, "done once");
    cr_assert_eq(atomic_load(&o.body_calls), 1, "the function once");
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.done, 2);
    cr_assert_eq(st.cancelled, 0);
    cr_assert_eq(st.queued, 0);
    cr_assert_eq(st.running, 0);
    cr_assert_geq(st.threads, 1);
    cr_assert_leq(st.threads, 4);
    cr_assert_eq(st.threads_max, 4);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A continuation that resubmits its offload n times (the loop of rule 4). */
static _Atomic int g_loop_left, g_loop_err;
static void loop_then(struct off *o)
{
    if (atomic_fetch_sub(&g_loop_left, 1) > 1 && urt_blocking_submit(g_rt, &o->b, 0))
        atomic_fetch_add(&g_loop_err, 1);
}

Test(blocking, continuation_resubmits)
{
    urt_runtime *rt = blk_rt(2, 2, 0, 0);
    struct off o;
    off_init(&o, 7);
    o.then = loop_then;
    atomic_store(&g_loop_left, 100);
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 100, 10000), "done calls %d", atomic_load(&o.done_calls));
    cr_assert_eq(atomic_load(&o.body_calls), 100);
    cr_assert_eq(atomic_load(&g_loop_err), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

static _Atomic int g_spawned_done, g_spawned_bad;
static int64_t spawned_body(void *arg)
{
    return (int64_t)(intptr_t)arg * 3;
}
static void spawned_done(struct urt_blocking *b, int64_t res, void *arg)
{
    if (!b || res != (int64_t)(intptr_t)arg * 3 || !urt_blocking_ran(b) || urt_current_worker(g_rt) < 0)
        atomic_fetch_add(&g_spawned_bad, 1);
    atomic_fetch_add(&g_spawned_done, 1);
}

Test(blocking, allocating_form)
{
    urt_runtime *rt = blk_rt(2, 4, 0, 0);
    atomic_store(&g_spawned_done, 0);
    for (intptr_t i = 1; i <= 50; i++)
        cr_assert_eq(urt_blocking_spawn(rt, spawned_body, spawned_done, (void *)i, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_spawned_done) == 50, 5000));
    cr_assert_eq(atomic_load(&g_spawned_bad), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0); /* LSan: every descriptor freed */
}

Test(blocking, bad_arguments)
{
    urt_runtime *rt = blk_rt(1, 1, 0, 0);
    struct off o;
    off_init(&o, 0);
    cr_assert_eq(urt_blocking_submit(NULL, &o.b, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_blocking_submit: rt is NULL"), "%s", urt_last_error());
    cr_assert_eq(urt_blocking_submit(rt, NULL, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_blocking_submit: b is NULL"), "%s", urt_last_error());
    o.b.fn = NULL;
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "b->fn is NULL"), "%s", urt_last_error());
    off_init(&o, 0);
    o.b.done = NULL;
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "b->done is NULL"), "%s", urt_last_error());
    off_init(&o, 0);
    cr_assert_eq(urt_blocking_submit(rt, &o.b, URT_SUBMIT_URGENT), -EINVAL);
    cr_assert(strstr(urt_last_error(), "unknown flags 0x1"), "%s", urt_last_error());
    cr_assert_eq(urt_blocking_spawn(rt, NULL, spawned_done, NULL, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_blocking_spawn: fn is NULL"), "%s", urt_last_error());
    cr_assert_eq(urt_blocking_spawn(rt, spawned_body, NULL, NULL, 0), -EINVAL);
    cr_assert_eq(urt_blocking_spawn(rt, spawned_body, spawned_done, NULL, 0x100), -EINVAL);
    cr_assert_eq(urt_blocking_stats(NULL, NULL), -EINVAL);
    cr_assert(!urt_blocking_ran(NULL));
    cr_assert(!urt_blocking_ran(&o.b), "never submitted");
    urt_blocking_init(NULL, off_body, off_done, NULL); /* ignored */
    /* in flight: -EBUSY, and the offload goes on untouched */
    _Atomic int gate = 0;
    o.gate = &gate;
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), -EBUSY);
    cr_assert(strstr(urt_last_error(), "is in flight"), "%s", urt_last_error());
    atomic_store(&gate, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 1, 5000));
    sleep_us(10000);
    cr_assert_eq(atomic_load(&o.body_calls), 1);
    cr_assert_eq(atomic_load(&o.done_calls), 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- lanes hold ---------------------------------------------------------------------------------- */

/* Events of a lane, in the order they happened (the lane serializes its
 * tasks and continuations; the model says which order it must be). */
enum { EV_MAX = 256 };
static _Atomic int g_ev_n, g_inside, g_overlap;
static int g_ev[EV_MAX];

static void ev(int code)
{
    if (atomic_exchange(&g_inside, 1))
        atomic_store(&g_overlap, 1);
    int i = atomic_fetch_add(&g_ev_n, 1);
    if (i < EV_MAX)
        g_ev[i] = code;
    atomic_store(&g_inside, 0);
}

static void ev_reset(void)
{
    atomic_store(&g_ev_n, 0);
    atomic_store(&g_overlap, 0);
    memset(g_ev, 0, sizeof(g_ev));
}

static void ev_expect(const int *want, int n)
{
    cr_assert_eq(atomic_load(&g_ev_n), n, "events: %d, expected %d", atomic_load(&g_ev_n), n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(g_ev[i], want[i], "event %d: %d, expected %d", i, g_ev[i], want[i]);
    cr_assert(!atomic_load(&g_overlap), "two of the lane's tasks or continuations overlapped");
}

/* A lane task: event 10*id, then `offloads` offloads whose continuations
 * record 10*id + 1 + k (k: the order their functions return, staggered by
 * sleeps), chaining `chain` more offloads from the last one; yields once
 * first when asked. */
struct ltask {
    struct urt_task task;
    int id, offloads, chain;
    bool yield_first, yielded;
    _Atomic int *gates;  /* offload k's function returns once gates[k] is set (NULL: at once) */
    struct lcont {
        struct urt_blocking b;
        struct ltask *lt;
        int k;
        _Atomic int *gate;
    } c[4];
    _Atomic int err;
};

static int64_t lcont_body(void *arg)
{
    struct lcont *c = arg;
    while (c->gate && !atomic_load(c->gate))
        sleep_us(200);
    sleep_us(2000);
    return c->k;
}

static void lcont_done(struct urt_blocking *b, int64_t res, void *arg)
{
    struct lcont *c = arg;
    ev(10 * c->lt->id + 1 + (int)res);
    if (c->lt->chain > 0 && b == &c->lt->c[c->lt->offloads - 1].b) {
        c->lt->chain--;
        c->k = (int)res + 1;
        c->gate = NULL;
        int e = urt_blocking_submit(g_rt, b, 0);
        if (e)
            atomic_store(&c->lt->err, e);
    }
}

static enum urt_task_result ltask_fn(struct urt_task *t, void *arg)
{
    struct ltask *lt = arg;
    (void)t;
    if (lt->yield_first && !lt->yielded) {
        lt->yielded = true;
        ev(10 * lt->id + 9); /* before the yield */
        return URT_TASK_YIELD;
    }
    ev(10 * lt->id);
    for (int k = 0; k < lt->offloads; k++) {
        struct lcont *c = &lt->c[k];
        c->lt = lt;
        c->k = k;
        c->gate = lt->gates ? &lt->gates[k] : NULL;
        urt_blocking_init(&c->b, lcont_body, lcont_done, c);
        int e = urt_blocking_submit(g_rt, &c->b, 0);
        if (e)
            atomic_store(&lt->err, e);
    }
    return URT_TASK_DONE;
}

static void ltask_init(struct ltask *lt, int id, int offloads)
{
    memset(lt, 0, sizeof(*lt));
    lt->id = id;
    lt->offloads = offloads;
    urt_task_init(&lt->task, ltask_fn, lt);
}

Test(blocking, lane_next_task_waits_for_the_continuation)
{
    urt_runtime *rt = blk_rt(2, 8, 0, 0);
    urt_lane *lane;
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    /* task 1 offloads one function (20 ms); task 2 has none; both queued at once */
    struct ltask a, b;
    ev_reset();
    ltask_init(&a, 1, 1);
    ltask_init(&b, 2, 0);
    cr_assert_eq(urt_lane_submit(lane, &a.task, 0), 0);
    cr_assert_eq(urt_lane_submit(lane, &b.task, 0), 0);
    cr_assert_eq(urt_lane_destroy(lane), 0); /* waits for pending 0: the continuation is counted */
    ev_expect((int[]){10, 11, 20}, 3);
    cr_assert_eq(atomic_load(&a.err), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(blocking, lane_holds_for_several_chained_and_after_a_yield)
{
    urt_runtime *rt = blk_rt(2, 8, 0, 0);
    for (int pinned = 0; pinned <= 1; pinned++) {
        urt_lane *lane;
        cr_assert_eq(pinned ? urt_lane_create_on(rt, 1, &lane) : urt_lane_create(rt, &lane), 0);
        struct ltask a, b, c, d;
        _Atomic int gates[3] = {0, 0, 0};
        ev_reset();
        ltask_init(&a, 1, 3);  /* three offloads, made to return in the order k = 2, 1, 0 */
        a.gates = gates;
        ltask_init(&b, 2, 1);  /* one, then two chained from its continuation */
        b.chain = 2;
        ltask_init(&c, 3, 1);  /* yields first, then offloads */
        c.yield_first = true;
        ltask_init(&d, 4, 0);
        cr_assert_eq(urt_lane_submit(lane, &a.task, 0), 0);
        cr_assert_eq(urt_lane_submit(lane, &b.task, 0), 0);
        cr_assert_eq(urt_lane_submit(lane, &c.task, 0), 0);
        cr_assert_eq(urt_lane_submit(lane, &d.task, 0), 0);
        cr_assert(WAIT_UNTIL(blk_stats(rt).running == 3, 5000), "task 1's three functions run at once");
        for (int k = 2; k >= 0; k--) { /* each returns, and its continuation runs, before the next */
            atomic_store(&gates[k], 1);
            cr_assert(WAIT_UNTIL(atomic_load(&g_ev_n) >= 1 + (3 - k), 5000), "continuation %d", k);
            sleep_us(3000); /* the lane's next task would have run by now if the lane did not hold */
        }
        cr_assert_eq(urt_lane_destroy(lane), 0);
        /* the model: a task, its continuations in the order their functions
         * returned, a chain's continuations each after the last, then the
         * next task; a yielded task resumes where it was (before the next) */
        ev_expect((int[]){10, 13, 12, 11, 20, 21, 22, 23, 39, 30, 31, 40}, 12);
        cr_assert_eq(atomic_load(&a.err) | atomic_load(&b.err) | atomic_load(&c.err), 0);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Many lanes, each task offloading: per lane, a continuation always comes
 * right after its task (checked by a per-lane counter), under load on
 * every worker. */
struct mlane {
    urt_lane *lane;
    _Atomic int expect_cont; /* 1 between a task and its continuation */
    _Atomic int bad, conts, tasks;
};
struct mtask {
    struct urt_task task;
    struct urt_blocking b;
    struct mlane *ml;
};
static int64_t mt_body(void *arg)
{
    (void)arg;
    if ((urt_now_ns() >> 10) & 1)
        sched_yield();
    return 1;
}
static void mt_done(struct urt_blocking *b, int64_t res, void *arg)
{
    struct mtask *m = arg;
    (void)b;
    if (res != 1 || !atomic_exchange(&m->ml->expect_cont, 0))
        atomic_fetch_add(&m->ml->bad, 1);
    atomic_fetch_add(&m->ml->conts, 1);
}
static enum urt_task_result mt_fn(struct urt_task *t, void *arg)
{
    struct mtask *m = arg;
    (void)t;
    if (atomic_exchange(&m->ml->expect_cont, 1)) /* a task started before the previous continuation */
        atomic_fetch_add(&m->ml->bad, 1);
    atomic_fetch_add(&m->ml->tasks, 1);
    urt_blocking_init(&m->b, mt_body, mt_done, m);
    if (urt_blocking_submit(g_rt, &m->b, 0))
        atomic_fetch_add(&m->ml->bad, 100);
    return URT_TASK_DONE;
}

Test(blocking, lanes_stay_serialized_under_load)
{
    urt_runtime *rt = blk_rt(2, 16, 0, 0);
    enum { LANES = 8, PER = SCALE(200, 40) };
    static struct mlane ml[LANES];
    static struct mtask mt[LANES][PER];
    memset(ml, 0, sizeof(ml));
    for (int l = 0; l < LANES; l++)
        cr_assert_eq(urt_lane_create(rt, &ml[l].lane), 0);
    for (int i = 0; i < PER; i++)
        for (int l = 0; l < LANES; l++) {
            mt[l][i].ml = &ml[l];
            urt_task_init(&mt[l][i].task, mt_fn, &mt[l][i]);
            cr_assert_eq(urt_lane_submit(ml[l].lane, &mt[l][i].task, 0), 0);
        }
    for (int l = 0; l < LANES; l++) {
        cr_assert_eq(urt_lane_destroy(ml[l].lane), 0);
        cr_assert_eq(atomic_load(&ml[l].bad), 0, "lane %d: a task ran before its predecessor's continuation", l);
        cr_assert_eq(atomic_load(&ml[l].tasks), PER);
        cr_assert_eq(atomic_load(&ml[l].conts), PER);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- jobs -------------------------------------------------------------------------------------------- */

struct jctx {
    urt_job *job;
    struct off o;
    struct urt_task task;
    _Atomic int status, done_calls, spawn_from_cont, submit_err, task_ran;
    _Atomic uint64_t end_ns;
};

static enum urt_task_result noop_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return URT_TASK_DONE;
}

static struct jctx *g_jc;
static void job_then(struct off *o)
{
    (void)o;
    /* a closed job accepts tasks only from its own tasks: the continuation is one */
    atomic_store(&g_jc->spawn_from_cont, urt_job_spawn(g_jc->job, noop_fn, NULL, NULL, 0) + 1);
}

static enum urt_task_result job_task(struct urt_task *t, void *arg)
{
    struct jctx *j = arg;
    (void)t;
    atomic_store(&j->submit_err, urt_blocking_submit(g_rt, &j->o.b, 0));
    atomic_store(&j->task_ran, 1);
    return URT_TASK_DONE;
}

static void job_end(urt_job *job, int status, void *arg)
{
    struct jctx *j = arg;
    (void)job;
    atomic_store(&j->status, status);
    atomic_store(&j->end_ns, urt_now_ns());
    atomic_fetch_add(&j->done_calls, 1);
}

static void job_start(urt_runtime *rt, struct jctx *j, uint32_t level)
{
    struct urt_job_options opt;
    urt_job_options_init(&opt);
    opt.work_level = level;
    opt.done = job_end;
    opt.arg = j;
    cr_assert_eq(urt_job_create(rt, &opt, &j->job), 0);
    urt_task_init(&j->task, job_task, j);
    cr_assert_eq(urt_job_submit(j->job, &j->task, 0), 0);
    cr_assert_eq(urt_job_close(j->job), 0);
}

Test(blocking, job_waits_for_its_offloads)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.lightweight_job_level = 10;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    for (uint32_t level = 0; level <= 1; level++) { /* 0: serial (its lane), 60: parallel */
        struct jctx j;
        memset(&j, 0, sizeof(j));
        g_jc = &j;
        off_init(&j.o, 5);
        j.o.sleep_us = 30000;
        j.o.then = job_then;
        job_start(rt, &j, level ? URT_WORK_LEVEL_MAX : 0);
        cr_assert_eq(urt_job_wait(j.job, 5ull * 1000 * 1000 * 1000), 0);
        cr_assert_eq(atomic_load(&j.submit_err), 0);
        cr_assert_eq(atomic_load(&j.o.done_calls), 1);
        cr_assert_eq(atomic_load(&j.o.res), 5);
        cr_assert_eq(atomic_load(&j.spawn_from_cont), 1, "the continuation is a task of the job");
        cr_assert_eq(atomic_load(&j.done_calls), 1);
        cr_assert_geq(atomic_load(&j.end_ns), atomic_load(&j.o.done_ns), "the job ended before the continuation");
        urt_job_release(j.job);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* The only pool thread is busy (a gate); a job's offload waits in the
 * queue; cancelling the job takes it out at once: done gets -ECANCELED
 * while the thread is still busy, the function never runs. */
Test(blocking, job_cancel_takes_queued_offloads_out)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.blocking_threads_max = 1;
    cfg.lightweight_job_level = 10;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    for (uint32_t level = 0; level <= 1; level++) {
        _Atomic int gate = 0;
        struct off blocker;
        off_init(&blocker, 1);
        blocker.gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &blocker.b, 0), 0);
        cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000), "the blocker holds the only thread");
        struct jctx j;
        memset(&j, 0, sizeof(j));
        off_init(&j.o, 2);
        job_start(rt, &j, level ? URT_WORK_LEVEL_MAX : 0);
        cr_assert(WAIT_UNTIL(atomic_load(&j.task_ran), 5000));
        cr_assert_eq(atomic_load(&j.submit_err), 0);
        cr_assert_eq(blk_stats(rt).queued, 1, "the job's offload is queued");
        cr_assert_eq(urt_job_cancel(j.job), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&j.o.done_calls) == 1, 5000), "the cancel did not deliver it");
        cr_assert_eq(atomic_load(&blocker.body_calls), 0, "the pool thread is still busy");
        cr_assert_eq(atomic_load(&j.o.res), -ECANCELED);
        cr_assert(!atomic_load(&j.o.ran));
        cr_assert_eq(urt_job_wait(j.job, 5ull * 1000 * 1000 * 1000), -ECANCELED);
        atomic_store(&gate, 1);
        cr_assert(WAIT_UNTIL(atomic_load(&blocker.done_calls) == 1, 5000));
        sleep_us(5000);
        cr_assert_eq(atomic_load(&j.o.body_calls), 0, "a cancelled offload's function ran");
        cr_assert_eq(atomic_load(&j.o.done_calls), 1);
        urt_job_release(j.job);
    }
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.cancelled, 2);
    cr_assert_eq(st.done, 2);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A task of a job that was cancelled may not offload. */
static enum urt_task_result cancel_then_submit(struct urt_task *t, void *arg)
{
    struct jctx *j = arg;
    (void)t;
    urt_job_cancel(j->job);
    atomic_store(&j->submit_err, urt_blocking_submit(g_rt, &j->o.b, 0));
    return URT_TASK_DONE;
}

Test(blocking, cancelled_job_task_may_not_offload)
{
    urt_runtime *rt = blk_rt(1, 2, 0, 0);
    struct jctx j;
    memset(&j, 0, sizeof(j));
    off_init(&j.o, 2);
    cr_assert_eq(urt_job_create(rt, NULL, &j.job), 0);
    urt_task_init(&j.task, cancel_then_submit, &j);
    cr_assert_eq(urt_job_submit(j.job, &j.task, 0), 0);
    cr_assert_eq(urt_job_close(j.job), 0);
    cr_assert_eq(urt_job_wait(j.job, 5ull * 1000 * 1000 * 1000), -ECANCELED);
    cr_assert_eq(atomic_load(&j.submit_err), -ECANCELED);
    cr_assert_eq(atomic_load(&j.o.done_calls), 0, "a refused offload's done was called");
    urt_job_release(j.job);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- transactions ------------------------------------------------------------------------------------ */

struct txctx {
    urt_tx *tx;
    struct off o;
    struct urt_task task;
    _Atomic int submit_err, commit_status, commit_calls, log_err, abort_hooks, task_ran;
    _Atomic uint64_t commit_ns, abort_ns;
};
static struct txctx *g_tc;

static void tx_then(struct off *o)
{
    (void)o;
    /* the continuation is the transaction's running task: it may append */
    atomic_store(&g_tc->log_err, urt_tx_log(g_tc->tx, "after", 5) + 1);
}

static enum urt_task_result tx_task(struct urt_task *t, void *arg)
{
    struct txctx *c = arg;
    (void)t;
    atomic_store(&c->submit_err, urt_blocking_submit(g_rt, &c->o.b, 0));
    atomic_store(&c->task_ran, 1);
    return URT_TASK_DONE;
}

static void tx_committed(urt_tx *tx, int status, void *arg)
{
    struct txctx *c = arg;
    (void)tx;
    atomic_store(&c->commit_status, status);
    atomic_store(&c->commit_ns, urt_now_ns());
    atomic_fetch_add(&c->commit_calls, 1);
}

static void tx_abort_hook(urt_tx *tx, void *arg)
{
    struct txctx *c = arg;
    (void)tx;
    atomic_store(&c->abort_ns, urt_now_ns());
    atomic_fetch_add(&c->abort_hooks, 1);
}

static void tx_start(urt_runtime *rt, struct txctx *c)
{
    struct urt_tx_options opt;
    urt_tx_options_init(&opt);
    opt.hooks.abort = tx_abort_hook;
    opt.hooks.arg = c;
    cr_assert_eq(urt_tx_begin(rt, &opt, &c->tx), 0);
    urt_task_init(&c->task, tx_task, c);
    cr_assert_eq(urt_tx_submit(c->tx, &c->task, 0), 0);
}

Test(blocking, commit_waits_for_the_continuation)
{
    urt_runtime *rt = blk_rt(2, 2, 0, 0);
    struct txctx c;
    memset(&c, 0, sizeof(c));
    g_tc = &c;
    off_init(&c.o, 9);
    c.o.sleep_us = 30000;
    c.o.then = tx_then;
    tx_start(rt, &c);
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000), "the offload runs");
    cr_assert_eq(atomic_load(&c.submit_err), 0);
    /* the task has returned; the offload still counts as a task in flight */
    cr_assert_eq(urt_tx_commit(c.tx, URT_COMMIT_ACCEPTED, tx_committed, &c), 0);
    cr_assert_eq(urt_tx_state(c.tx), URT_TX_COMMITTING);
    cr_assert(WAIT_UNTIL(atomic_load(&c.commit_calls) == 1, 5000));
    cr_assert_eq(atomic_load(&c.commit_status), 0);
    cr_assert_eq(atomic_load(&c.o.done_calls), 1);
    cr_assert_eq(atomic_load(&c.log_err), 1, "the continuation could not append: %d", atomic_load(&c.log_err) - 1);
    cr_assert_geq(atomic_load(&c.commit_ns), atomic_load(&c.o.done_ns), "commit before the continuation");
    urt_tx_release(c.tx);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(blocking, abort_takes_a_queued_offload_out)
{
    urt_runtime *rt = blk_rt(2, 1, 0, 0);
    _Atomic int gate = 0;
    struct off blocker;
    off_init(&blocker, 1);
    blocker.gate = &gate;
    cr_assert_eq(urt_blocking_submit(rt, &blocker.b, 0), 0);
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000), "the blocker holds the only thread");
    struct txctx c;
    memset(&c, 0, sizeof(c));
    g_tc = &c;
    off_init(&c.o, 9);
    tx_start(rt, &c);
    cr_assert(WAIT_UNTIL(atomic_load(&c.task_ran), 5000));
    cr_assert_eq(atomic_load(&c.submit_err), 0);
    cr_assert_eq(blk_stats(rt).queued, 1);
    cr_assert_eq(urt_tx_abort(c.tx), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&c.abort_hooks) == 1, 5000), "the abort waited for the busy pool thread");
    cr_assert_eq(atomic_load(&c.o.done_calls), 1);
    cr_assert_eq(atomic_load(&c.o.res), -ECANCELED);
    cr_assert_geq(atomic_load(&c.abort_ns), atomic_load(&c.o.done_ns), "abort before the continuation");
    cr_assert_eq(urt_tx_state(c.tx), URT_TX_ABORTED);
    atomic_store(&gate, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&blocker.done_calls) == 1, 5000));
    sleep_us(5000);
    cr_assert_eq(atomic_load(&c.o.body_calls), 0);
    urt_tx_release(c.tx);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- destroy ---------------------------------------------------------------------------------------------- */

enum { DQ = 6 };

/* DRAIN: every offload runs, every continuation on a worker, before destroy returns. */
Test(blocking, destroy_drain_runs_everything)
{
    urt_runtime *rt = blk_rt(2, 2, 0, 0);
    static struct off o[DQ];
    for (int i = 0; i < DQ; i++) {
        off_init(&o[i], i);
        o[i].sleep_us = 10000;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 2, 5000));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    for (int i = 0; i < DQ; i++) {
        cr_assert_eq(atomic_load(&o[i].body_calls), 1, "offload %d", i);
        cr_assert_eq(atomic_load(&o[i].done_calls), 1, "offload %d", i);
        cr_assert_eq(atomic_load(&o[i].res), i);
        cr_assert_geq(atomic_load(&o[i].done_worker), 0, "offload %d's continuation ran off the workers", i);
    }
}

/* A continuation that offloads again during the drain (a worker may). */
static _Atomic int g_redo_err = 1;
static void redo_once(struct off *o)
{
    if (atomic_load(&o->done_calls) == 0)
        atomic_store(&g_redo_err, urt_blocking_submit(g_rt, &o->b, 0));
}

Test(blocking, destroy_drain_waits_for_offloads_made_while_draining)
{
    urt_runtime *rt = blk_rt(2, 2, 0, 0);
    struct off o;
    off_init(&o, 3);
    o.sleep_us = 20000;
    o.then = redo_once;
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&g_redo_err), 0, "a worker's offload during the drain was refused");
    cr_assert_eq(atomic_load(&o.body_calls), 2);
    cr_assert_eq(atomic_load(&o.done_calls), 2);
}

struct gate_release {
    _Atomic int *gate;
    uint64_t after_us;
};
static void *release_later(void *arg)
{
    struct gate_release *g = arg;
    sleep_us(g->after_us);
    atomic_store(g->gate, 1);
    return NULL;
}

/* CANCEL: the queued ones never run (-ECANCELED), the running one is waited
 * for; every continuation once, before destroy returns. */
Test(blocking, destroy_cancel_takes_queued_out_waits_for_running)
{
    urt_runtime *rt = blk_rt(2, 1, 0, 0);
    _Atomic int gate = 0;
    static struct off o[DQ];
    for (int i = 0; i < DQ; i++) {
        off_init(&o[i], i);
        o[i].gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000));
    pthread_t th;
    struct gate_release gr = {&gate, 30000};
    cr_assert_eq(pthread_create(&th, NULL, release_later, &gr), 0);
    int r = urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
    cr_assert_geq(r, DQ, "the continuations count as cancelled tasks: %d", r);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&o[0].body_calls), 1, "the running one ran to its end");
    cr_assert_eq(atomic_load(&o[0].res), 0);
    for (int i = 0; i < DQ; i++)
        cr_assert_eq(atomic_load(&o[i].done_calls), 1, "offload %d: done %d times", i, atomic_load(&o[i].done_calls));
    for (int i = 1; i < DQ; i++) {
        cr_assert_eq(atomic_load(&o[i].body_calls), 0, "queued offload %d ran", i);
        cr_assert_eq(atomic_load(&o[i].res), -ECANCELED);
        cr_assert(!atomic_load(&o[i].ran));
    }
    leak_check();
}

static _Atomic int g_destroy_err, g_nop_done;
static int64_t destroy_from_pool(void *arg)
{
    atomic_store(&g_destroy_err, urt_runtime_destroy(arg, URT_SHUTDOWN_DRAIN));
    return 0;
}
static void nop_done(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    (void)res;
    (void)arg;
    atomic_fetch_add(&g_nop_done, 1);
}
static void ignore_done(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    (void)res;
    atomic_fetch_add((_Atomic int *)arg, 1);
}

Test(blocking, destroy_from_a_pool_thread_is_refused)
{
    urt_runtime *rt = blk_rt(1, 1, 0, 0);
    cr_assert_eq(urt_blocking_spawn(rt, destroy_from_pool, nop_done, rt, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_nop_done) == 1, 5000));
    cr_assert_eq(atomic_load(&g_destroy_err), -EDEADLK);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A function that offloads again (from a pool thread: a thread that is not
 * a worker) until destroy began: accepted ones still run, then -ESHUTDOWN. */
static _Atomic int g_late_ok, g_late_err, g_late_done;
static int64_t noop_body(void *arg)
{
    (void)arg;
    return 0;
}
static void late_done(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    (void)res;
    (void)arg;
    atomic_fetch_add(&g_late_done, 1);
}
static int64_t submit_until_refused(void *arg)
{
    uint64_t until = urt_now_ns() + 5000000000ull;
    while (urt_now_ns() < until) {
        int e = urt_blocking_spawn(arg, noop_body, late_done, NULL, 0);
        if (e) {
            atomic_store(&g_late_err, e);
            break;
        }
        atomic_fetch_add(&g_late_ok, 1);
        sleep_us(1000);
    }
    return 0;
}

Test(blocking, shutdown_refuses_foreign_submissions)
{
    urt_runtime *rt = blk_rt(1, 2, 0, 0);
    cr_assert_eq(urt_blocking_spawn(rt, submit_until_refused, nop_done, rt, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_late_ok) >= 3, 5000));
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0);
    cr_assert_eq(atomic_load(&g_late_err), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&g_late_done), atomic_load(&g_late_ok), "every accepted offload ran once");
    leak_check();
}

/* ---- the queue's bound ---------------------------------------------------------------------------------- */

struct blocker_thread {
    urt_runtime *rt;
    struct off *o;
    unsigned flags;
    _Atomic int err, returned;
    _Atomic uint64_t ret_ns;
};
static void *submit_from_thread(void *arg)
{
    struct blocker_thread *b = arg;
    atomic_store(&b->err, urt_blocking_submit(b->rt, &b->o->b, b->flags));
    atomic_store(&b->ret_ns, urt_now_ns());
    atomic_store(&b->returned, 1);
    return NULL;
}

Test(blocking, queue_bound_eagain_and_block)
{
    urt_runtime *rt = blk_rt(2, 1, 0, 2);
    _Atomic int gate = 0;
    static struct off o[8];
    for (int i = 0; i < 3; i++) {
        off_init(&o[i], i);
        o[i].gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0, "offload %d", i);
        if (i == 0)
            cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000));
    }
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.queued, 2);
    cr_assert_eq(st.queue_max, 2);
    /* full: -EAGAIN from this thread without URT_SUBMIT_BLOCK ... */
    off_init(&o[3], 3);
    cr_assert_eq(urt_blocking_submit(rt, &o[3].b, 0), -EAGAIN);
    cr_assert(strstr(urt_last_error(), "blocking_queue_max (2)"), "%s", urt_last_error());
    /* ... and from a worker even with it */
    struct submitter s = {.o = &o[3], .flags = URT_SUBMIT_BLOCK};
    urt_task_init(&s.task, submit_task, &s);
    cr_assert_eq(urt_task_submit(rt, &s.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.ran), 5000));
    cr_assert_eq(atomic_load(&s.err), -EAGAIN, "a worker waited for room: %d", atomic_load(&s.err));
    /* with URT_SUBMIT_BLOCK, two threads wait until there is room */
    struct blocker_thread bt[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        off_init(&o[4 + i], 4 + i);
        bt[i] = (struct blocker_thread){.rt = rt, .o = &o[4 + i], .flags = URT_SUBMIT_BLOCK};
        cr_assert_eq(pthread_create(&th[i], NULL, submit_from_thread, &bt[i]), 0);
        cr_assert(WAIT_UNTIL(blk_stats(rt).blocked == (uint64_t)i + 1, 5000));
    }
    sleep_us(10000);
    cr_assert(!atomic_load(&bt[0].returned) && !atomic_load(&bt[1].returned), "a submitter did not wait");
    atomic_store(&gate, 1); /* the queue drains: both get in, the first one first */
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&bt[0].err), 0);
    cr_assert_eq(atomic_load(&bt[1].err), 0); /* their order is the limiter's (tests/unit/test_admission.c) */
    for (int i = 0; i < 6; i++)
        if (i != 3)
            cr_assert(WAIT_UNTIL(atomic_load(&o[i].done_calls) == 1, 5000), "offload %d", i);
    st = blk_stats(rt);
    cr_assert_eq(st.rejected, 2);
    cr_assert_eq(st.blocked, 2);
    cr_assert_eq(st.max_queued, 2);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(blocking, destroy_releases_a_blocked_submitter)
{
    urt_runtime *rt = blk_rt(1, 1, 0, 1);
    _Atomic int gate = 0;
    struct off a, b, c;
    off_init(&a, 1);
    a.gate = &gate;
    off_init(&b, 2);
    off_init(&c, 3);
    cr_assert_eq(urt_blocking_submit(rt, &a.b, 0), 0);
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 1, 5000));
    cr_assert_eq(urt_blocking_submit(rt, &b.b, 0), 0);
    struct blocker_thread bt = {.rt = rt, .o = &c, .flags = URT_SUBMIT_BLOCK};
    pthread_t th, rel;
    cr_assert_eq(pthread_create(&th, NULL, submit_from_thread, &bt), 0);
    cr_assert(WAIT_UNTIL(blk_stats(rt).blocked == 1, 5000));
    struct gate_release gr = {&gate, 30000};
    cr_assert_eq(pthread_create(&rel, NULL, release_later, &gr), 0);
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0);
    pthread_join(th, NULL);
    pthread_join(rel, NULL);
    cr_assert_eq(atomic_load(&bt.err), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&a.done_calls), 1);
    cr_assert_eq(atomic_load(&b.done_calls), 1);
    cr_assert_eq(atomic_load(&c.done_calls), 0);
    leak_check();
}

/* ---- the pool's size -------------------------------------------------------------------------------------- */

Test(blocking, threads_on_demand_up_to_max)
{
    urt_runtime *rt = blk_rt(2, 3, 0, 0);
    _Atomic int gate = 0;
    static struct off o[6];
    for (int i = 0; i < 6; i++) {
        off_init(&o[i], i);
        o[i].gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 3, 5000), "three blocked functions need three threads");
    sleep_us(20000);
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.threads, 3, "never more than blocking_threads_max");
    cr_assert_eq(st.running, 3);
    cr_assert_eq(st.queued, 3);
    atomic_store(&gate, 1);
    for (int i = 0; i < 6; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&o[i].done_calls) == 1, 5000));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(blocking, min_threads_started_and_kept_keepalive_shrinks_the_rest)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.blocking_threads_max = 6;
    cfg.blocking_threads_min = 2;
    cfg.blocking_keepalive_ms = 50;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.threads, 2, "blocking_threads_min threads start with the runtime");
    cr_assert_eq(st.threads_started, 2);
    _Atomic int gate = 0;
    static struct off o[5];
    for (int i = 0; i < 5; i++) {
        off_init(&o[i], i);
        o[i].gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 5, 5000));
    cr_assert_geq(blk_stats(rt).threads, 5); /* (a race may start one more that finds nothing) */
    atomic_store(&gate, 1);
    for (int i = 0; i < 5; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&o[i].done_calls) == 1, 5000));
    /* idle for more than the keep-alive: back to the minimum */
    cr_assert(WAIT_UNTIL(blk_stats(rt).threads == 2, 3000), "threads %lu", (unsigned long)blk_stats(rt).threads);
    sleep_us(150000); /* three more keep-alives: the minimum stays */
    st = blk_stats(rt);
    cr_assert_eq(st.threads, 2);
    cr_assert_geq(st.threads_started, 5);
    cr_assert_eq(st.threads_exited, st.threads_started - 2, "started %lu, exited %lu",
                 (unsigned long)st.threads_started, (unsigned long)st.threads_exited);
    /* and the pool grows again on demand (slots of exited threads reused) */
    atomic_store(&gate, 0);
    for (int i = 0; i < 4; i++) {
        off_init(&o[i], i);
        o[i].gate = &gate;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    cr_assert(WAIT_UNTIL(blk_stats(rt).running == 4, 5000));
    atomic_store(&gate, 1);
    for (int i = 0; i < 4; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&o[i].done_calls) == 1, 5000));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(blocking, bad_config_values)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cr_assert_eq(cfg.blocking_threads_max, 512);
    cr_assert_eq(cfg.blocking_threads_min, 0);
    cr_assert_eq(cfg.blocking_keepalive_ms, 10000);
    cr_assert_eq(cfg.blocking_queue_max, 65536);
    struct {
        const char *field;
        void (*set)(struct urt_config *);
    } bad[] = {
        {"blocking_threads_max", NULL},
        {"blocking_threads_min", NULL},
        {"blocking_keepalive_ms", NULL},
        {"blocking_queue_max", NULL},
    };
    char err[256];
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        urt_config_init(&cfg);
        switch (i) {
        case 0: cfg.blocking_threads_max = 0; break;
        case 1: cfg.blocking_threads_min = 600; break; /* above max (512) */
        case 2: cfg.blocking_keepalive_ms = 0; break;
        case 3: cfg.blocking_queue_max = 0; break;
        }
        cr_assert_eq(urt_config_validate(&cfg, err, sizeof(err)), -EINVAL, "%s", bad[i].field);
        cr_assert(strstr(err, bad[i].field), "message \"%s\" does not name %s", err, bad[i].field);
        urt_runtime *rt = NULL;
        cr_assert_eq(urt_runtime_create(&cfg, &rt), -EINVAL);
        cr_assert_null(rt);
    }
    urt_config_init(&cfg);
    cr_assert_eq(urt_config_set(&cfg, "blocking_threads_max", "40000"), -EINVAL);
    cr_assert(strstr(urt_last_error(), "blocking_threads_max"), "%s", urt_last_error());
    cr_assert_eq(urt_config_set(&cfg, "blocking_keepalive_ms", "x"), -EINVAL);
    cr_assert_eq(urt_config_set(&cfg, "blocking_threads_min", "3"), 0);
    cr_assert_eq(cfg.blocking_threads_min, 3);
    setenv("URT_BLOCKING_QUEUE_MAX", "17", 1);
    setenv("URT_BLOCKING_THREADS_MAX", "nope", 1);
    cr_assert_eq(urt_config_from_env(&cfg), -EINVAL);
    cr_assert(strstr(urt_last_error(), "URT_BLOCKING_THREADS_MAX"), "%s", urt_last_error());
    unsetenv("URT_BLOCKING_THREADS_MAX");
    cr_assert_geq(urt_config_from_env(&cfg), 1);
    cr_assert_eq(cfg.blocking_queue_max, 17);
    unsetenv("URT_BLOCKING_QUEUE_MAX");
}

/* ---- a worker keeps serving while its tasks' functions block ---------------------------------------------- */

static _Atomic int g_sleeping, g_others, g_others_during, g_io_during, g_io_done, g_wake_up;

/* Sleeps 50 ms, again until the test has seen what it waits for (so that
 * a loaded machine cannot make "meanwhile" a matter of timing). */
static int64_t sleep50(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_sleeping, 1);
    do
        sleep_us(50000);
    while (!atomic_load(&g_wake_up));
    atomic_fetch_sub(&g_sleeping, 1);
    return 0;
}

static enum urt_task_result other_task(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    if (atomic_load(&g_sleeping) > 0)
        atomic_fetch_add(&g_others_during, 1);
    atomic_fetch_add(&g_others, 1);
    return URT_TASK_DONE;
}

static void io_slept(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)arg;
    if (res == 0 && atomic_load(&g_sleeping) > 0)
        atomic_fetch_add(&g_io_during, 1);
    atomic_fetch_add(&g_io_done, 1);
}

struct io_task {
    struct urt_task task;
    struct urt_io io;
};

static enum urt_task_result start_io(struct urt_task *t, void *arg)
{
    struct io_task *it = arg;
    (void)t;
    urt_io_init(&it->io, io_slept, it);
    if (urt_io_sleep(&it->io, 5 * 1000 * 1000))
        atomic_fetch_add(&g_io_done, 1000);
    return URT_TASK_DONE;
}

static enum urt_task_result offload_sleeps(struct urt_task *t, void *arg)
{
    _Atomic int *done = arg;
    (void)t;
    for (int i = 0; i < 3; i++)
        if (urt_blocking_spawn(g_rt, sleep50, ignore_done, (void *)done, 0))
            atomic_fetch_add(done, 1000);
    return URT_TASK_DONE;
}

Test(blocking, worker_keeps_serving_while_functions_block)
{
    urt_runtime *rt = blk_rt(1, 8, 0, 0); /* one worker: everything below runs on it */
    _Atomic int sleeps_done = 0;
    cr_assert_eq(urt_spawn(rt, offload_sleeps, (void *)&sleeps_done, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_sleeping) == 3, 5000), "the three sleeps run at once");
    /* meanwhile: tasks and an I/O on the one worker */
    struct io_task it;
    urt_task_init(&it.task, start_io, &it);
    cr_assert_eq(urt_task_submit(rt, &it.task, 0), 0);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(urt_spawn(rt, other_task, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_others) == 100 && atomic_load(&g_io_done) == 1, 5000),
              "the worker stopped serving while its tasks' functions slept");
    atomic_store(&g_wake_up, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&sleeps_done) == 3, 5000));
    cr_assert_eq(atomic_load(&g_others), 100);
    cr_assert_eq(atomic_load(&g_others_during), 100, "tasks waited for the blocked functions");
    cr_assert_eq(atomic_load(&g_io_done), 1);
    cr_assert_eq(atomic_load(&g_io_during), 1, "the I/O waited for the blocked functions");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- statistics, watchdog, NUMA ---------------------------------------------------------------------------- */

Test(blocking, statistics_with_timing)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.stats_timing = true;
    cfg.blocking_threads_max = 2;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    static struct off o[10];
    for (int i = 0; i < 10; i++) {
        off_init(&o[i], i);
        o[i].sleep_us = 2000;
        cr_assert_eq(urt_blocking_submit(rt, &o[i].b, 0), 0);
    }
    for (int i = 0; i < 10; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&o[i].done_calls) == 1, 5000));
    struct urt_blocking_stats st = blk_stats(rt);
    cr_assert_eq(st.done, 10);
    cr_assert_eq(st.run_time.count, 10);
    cr_assert_eq(st.queue_wait.count, 10);
    cr_assert_geq(st.run_time.p50_ns, 2000000, "a 2 ms sleep ran %lu ns", (unsigned long)st.run_time.p50_ns);
    cr_assert_geq(st.queue_wait.max_ns, 2000000, "with two threads, later ones waited for a turn");
    cr_assert_leq(st.max_queued, 10);
    cr_assert_geq(st.max_queued, 1);
    cr_assert_eq(st.nodes, 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

static struct urt_watchdog_report g_wd;
static _Atomic int g_wd_n;
static void wd_record(void *ctx, const struct urt_watchdog_report *r)
{
    (void)ctx;
    if (atomic_load(&g_wd_n) == 0)
        g_wd = *r;
    atomic_fetch_add(&g_wd_n, 1);
}

Test(blocking, watchdog_reports_a_long_function)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.task_runtime_limit_us = 20000;
    cfg.watchdog_abort = true; /* a pool thread's report never aborts */
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    cr_assert_eq(urt_watchdog_set_callback(rt, wd_record, NULL), 0);
    struct off o;
    off_init(&o, 1);
    o.sleep_us = 150000;
    cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 1, 5000));
    cr_assert_eq(atomic_load(&g_wd_n), 1, "one report per long run");
    cr_assert_geq(g_wd.pool_thread, 0);
    cr_assert_eq(g_wd.worker, UINT32_MAX);
    cr_assert_eq(g_wd.blocking, &o.b);
    cr_assert_null(g_wd.job);
    cr_assert_gt(g_wd.elapsed_ns, 20000000);
    /* the state dump has the pool's line */
    char path[] = "/tmp/urt-blocking-dump.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(urt_dump_state(rt, fd), 0);
    char dump[4096] = "";
    cr_assert_gt(pread(fd, dump, sizeof(dump) - 1, 0), 0);
    close(fd);
    cr_assert(strstr(dump, "urt state: blocking pool: "), "%s", dump);
    /* short functions are not reported */
    for (int i = 0; i < 20; i++) {
        off_init(&o, 1);
        cr_assert_eq(urt_blocking_submit(rt, &o.b, 0), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&o.done_calls) == 1, 5000));
    }
    sleep_us(30000);
    cr_assert_eq(atomic_load(&g_wd_n), 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Offloads of a worker of node 1 run on threads bound to node 1's CPUs. */
struct node_probe {
    struct urt_task task;
    struct urt_blocking b;
    cpu_set_t seen;
    _Atomic int done;
};
static int64_t read_affinity(void *arg)
{
    struct node_probe *np = arg;
    sched_getaffinity(0, sizeof(np->seen), &np->seen);
    return 0;
}
static void np_done(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    (void)res;
    atomic_store(&((struct node_probe *)arg)->done, 1);
}
static enum urt_task_result np_submit(struct urt_task *t, void *arg)
{
    struct node_probe *np = arg;
    (void)t;
    urt_blocking_init(&np->b, read_affinity, np_done, np);
    if (urt_blocking_submit(g_rt, &np->b, 0))
        atomic_store(&np->done, -1);
    return URT_TASK_DONE;
}

Test(blocking, threads_bound_to_the_submitting_workers_node)
{
    cpu_set_t allowed;
    sched_getaffinity(0, sizeof(allowed), &allowed);
    if (!CPU_ISSET(0, &allowed) || !CPU_ISSET(1, &allowed))
        cr_skip_test("needs CPUs 0 and 1");
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.placement = URT_PLACEMENT_NUMA;
    cfg.topology = "0;1"; /* two nodes of one CPU each: worker i on node i */
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    cr_assert_eq(blk_stats(rt).nodes, 2);
    for (uint32_t w = 0; w < 2; w++) {
        struct node_probe np;
        memset(&np, 0, sizeof(np));
        urt_task_init(&np.task, np_submit, &np);
        cr_assert_eq(urt_task_submit_to(rt, w, &np.task, 0), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&np.done) != 0, 5000));
        cr_assert_eq(atomic_load(&np.done), 1);
        cr_assert_eq(CPU_COUNT(&np.seen), 1, "worker %u's offload ran unbound", w);
        cr_assert(CPU_ISSET((int)w, &np.seen), "worker %u's offload ran off its node", w);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
