/*
 * tests/stress/test_lanes.c — lanes (SPEC C6) against a reference model.
 *
 * N_LANES lanes receive tasks from N_EXT external threads and from feeder
 * tasks running on the workers (each feeder submits a run of tasks to random
 * lanes, locally). Every task carries (lane, submitter, sequence number per
 * (submitter, lane)); some yield a few times before they finish. The model:
 *  - in-use flag per lane: set (exchange) when a task first starts, cleared
 *    when it finishes after its last yield; a set flag at a start means two
 *    tasks of the lane overlapped (yields included: a yielded task keeps its
 *    place);
 *  - FIFO: per (lane, submitter) the sequence numbers must start in order
 *    0, 1, 2, ... (one submitter's submissions are ordered); the expected
 *    next number is a plain int touched only by the lane's own tasks, so a
 *    serialization failure is also a data race for TSan;
 *  - exactly once: per task a run counter (1 at the end) and a global count;
 *  - a yielded task resumes on the worker it yielded on (a lane whose head
 *    yielded is never shed, sched/lane.c V5): every task records the worker
 *    it started on and all its yields must run there.
 * Runs over a matrix: 2 and 4 workers, lane_balance on/off, a worker_try_count
 * of 10 (workers suspend and are woken all the time).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "sched/lane.h"
#include "tests/helpers.h"

#define N_LANES 32
#define N_EXT 3
#define N_FEEDERS 4
#define N_SUBMITTERS (N_EXT + N_FEEDERS)
#define PER_SUBMITTER SCALE(40000u, 6000u)
#define N_TASKS (N_SUBMITTERS * PER_SUBMITTER)

struct ltask {
    struct urt_task task;
    uint32_t lane, submitter, seq;
    uint32_t yields_left, yields;
    int worker; /* where it first started */
    _Atomic uint32_t runs;
};

struct lane_model {
    _Atomic int in_use;
    uint32_t next_seq[N_SUBMITTERS]; /* touched only by the lane's tasks */
};

static urt_runtime *g_rt;
static urt_lane *g_lanes[N_LANES];
static struct lane_model g_model[N_LANES];
static struct ltask *g_tasks;
static _Atomic uint64_t g_submitted;
static _Atomic uint64_t g_done, g_overlaps, g_order_errors, g_submit_errors, g_moved;
static struct urt_task g_feeder[N_FEEDERS];

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static enum urt_task_result lane_fn(struct urt_task *t, void *arg)
{
    struct ltask *lt = arg;
    struct lane_model *m = &g_model[lt->lane];
    (void)t;
    int w = urt_current_worker(g_rt);
    if (atomic_fetch_add_explicit(&lt->runs, 1, memory_order_relaxed) == 0) {
        /* first start */
        if (atomic_exchange_explicit(&m->in_use, 1, memory_order_acquire) != 0)
            atomic_fetch_add_explicit(&g_overlaps, 1, memory_order_relaxed);
        if (m->next_seq[lt->submitter] != lt->seq)
            atomic_fetch_add_explicit(&g_order_errors, 1, memory_order_relaxed);
        m->next_seq[lt->submitter] = lt->seq + 1;
        lt->worker = w;
    } else if (lt->worker != w) {
        atomic_fetch_add_explicit(&g_moved, 1, memory_order_relaxed); /* a yielded lane task moved */
    }
    if (lt->yields_left > 0) {
        lt->yields_left--;
        return URT_TASK_YIELD;
    }
    atomic_store_explicit(&m->in_use, 0, memory_order_release);
    atomic_fetch_add_explicit(&g_done, 1, memory_order_relaxed);
    return URT_TASK_DONE;
}

/* Submits the PER_SUBMITTER tasks of submitter s. */
static void submit_all(uint32_t s, uint64_t seed)
{
    uint32_t seq[N_LANES] = {0};
    for (uint32_t i = 0; i < PER_SUBMITTER; i++) {
        struct ltask *lt = &g_tasks[(size_t)s * PER_SUBMITTER + i];
        uint64_t x = rng(&seed);
        lt->lane = (uint32_t)(x % N_LANES);
        lt->submitter = s;
        lt->seq = seq[lt->lane]++;
        lt->yields_left = (x >> 20) % 16 == 0 ? (uint32_t)((x >> 30) % 3) + 1 : 0;
        lt->yields = lt->yields_left;
        atomic_init(&lt->runs, 0);
        urt_task_init(&lt->task, lane_fn, lt);
        int err = urt_lane_submit(g_lanes[lt->lane], &lt->task, (x >> 40) % 64 == 0 ? URT_SUBMIT_URGENT : 0);
        if (err)
            atomic_fetch_add_explicit(&g_submit_errors, 1, memory_order_relaxed);
        else
            atomic_fetch_add_explicit(&g_submitted, 1, memory_order_relaxed);
        if (s < N_EXT && (x >> 50) % 512 == 0)
            sched_yield(); /* let the lanes run dry now and then: owners change */
    }
}

static enum urt_task_result feeder_fn(struct urt_task *t, void *arg)
{
    (void)t;
    uint32_t s = (uint32_t)(uintptr_t)arg;
    submit_all(s, 0x1234567ull * (s + 1));
    return URT_TASK_DONE;
}

static void *ext_main(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg;
    submit_all(s, 0xabcdefull * (s + 7));
    return NULL;
}

static void run_lanes(uint32_t workers, bool balance, uint32_t try_count)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.lane_balance = balance;
    cfg.worker_try_count = try_count;
    g_rt = rt_create_or_skip(&cfg);
    g_tasks = calloc(N_TASKS, sizeof(*g_tasks));
    cr_assert_not_null(g_tasks);
    memset(g_model, 0, sizeof(g_model));
    atomic_store(&g_done, 0);
    atomic_store(&g_submitted, 0);
    atomic_store(&g_overlaps, 0);
    atomic_store(&g_order_errors, 0);
    atomic_store(&g_submit_errors, 0);
    atomic_store(&g_moved, 0);
    for (int i = 0; i < N_LANES; i++)
        cr_assert_eq(urt_lane_create(g_rt, &g_lanes[i]), 0);

    pthread_t th[N_EXT];
    for (uint32_t i = 0; i < N_EXT; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, ext_main, (void *)(uintptr_t)i), 0);
    for (uint32_t i = 0; i < N_FEEDERS; i++) {
        urt_task_init(&g_feeder[i], feeder_fn, (void *)(uintptr_t)(N_EXT + i));
        cr_assert_eq(urt_task_submit(g_rt, &g_feeder[i], 0), 0);
    }
    for (uint32_t i = 0; i < N_EXT; i++)
        pthread_join(th[i], NULL);
    bool all = WAIT_UNTIL(atomic_load(&g_done) == N_TASKS, 60000);
    if (!all) {
        /* what is stuck where (kept: the state of a failure is what one needs) */
        struct sched *sc = (struct sched *)g_rt;
        fprintf(stderr, "# submitted %lu done %lu\n", (unsigned long)atomic_load(&g_submitted),
                (unsigned long)atomic_load(&g_done));
        for (int i = 0; i < N_LANES; i++) {
            struct urt_lane *l = g_lanes[i];
            uint32_t pending = atomic_load(&l->pending);
            if (pending)
                fprintf(stderr, "# lane %d: pending %u current %p q-nonempty %d runner.next %p\n", i, pending,
                        (void *)l->current,
                        l->q_tail != &l->q_stub || atomic_load(&l->q_head) != &l->q_stub ||
                            atomic_load(&l->q_stub.priv.next) != NULL,
                        (void *)atomic_load(&l->runner.priv.next));
        }
        for (uint32_t i = 0; i < sc->n_workers; i++) {
            struct worker *wk = sc->workers[i];
            fprintf(stderr, "# worker %u: state %u sticky-nonempty %d inbox-nonempty %d lanes_active %u\n", i,
                    atomic_load(&wk->sl.state), inbox_maybe_nonempty(&wk->sticky), inbox_maybe_nonempty(&wk->inbox),
                    atomic_load(&wk->lanes_active));
        }
    }
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);

    cr_assert(all, "only %lu of %u lane tasks finished", (unsigned long)atomic_load(&g_done), N_TASKS);
    cr_assert_eq(atomic_load(&g_submit_errors), 0);
    cr_assert_eq(atomic_load(&g_overlaps), 0, "%lu overlapping starts", (unsigned long)atomic_load(&g_overlaps));
    cr_assert_eq(atomic_load(&g_order_errors), 0, "%lu out-of-order starts",
                 (unsigned long)atomic_load(&g_order_errors));
    cr_assert_eq(atomic_load(&g_moved), 0, "%lu yielded lane tasks resumed on another worker",
                 (unsigned long)atomic_load(&g_moved));
    for (size_t i = 0; i < N_TASKS; i++) {
        struct ltask *lt = &g_tasks[i];
        cr_assert_eq(atomic_load(&lt->runs), lt->yields + 1, "task %zu: fn called %u times, expected %u", i,
                     atomic_load(&lt->runs), lt->yields + 1);
    }
    for (int i = 0; i < N_LANES; i++) {
        cr_assert_eq(urt_lane_pending(g_lanes[i]), 0);
        cr_assert_eq(urt_lane_destroy(g_lanes[i]), 0);
    }
    free(g_tasks);
}

Test(lanes, stress_2_workers, .timeout = 300)
{
    run_lanes(2, true, 1000);
}

Test(lanes, stress_2_workers_no_balance, .timeout = 300)
{
    run_lanes(2, false, 1000);
}

Test(lanes, stress_4_workers_suspending, .timeout = 300)
{
    run_lanes(4, true, 10);
}

/* A yielded lane task keeps its place: the lane's next task waits for it. */
static _Atomic int g_order[4];
static _Atomic int g_order_n;

static enum urt_task_result yielder_fn(struct urt_task *t, void *arg)
{
    static int left = 50;
    (void)t;
    if (left-- > 0)
        return URT_TASK_YIELD;
    g_order[atomic_fetch_add(&g_order_n, 1)] = (int)(intptr_t)arg;
    return URT_TASK_DONE;
}

static enum urt_task_result record_fn(struct urt_task *t, void *arg)
{
    (void)t;
    g_order[atomic_fetch_add(&g_order_n, 1)] = (int)(intptr_t)arg;
    return URT_TASK_DONE;
}

Test(lanes, yield_keeps_place, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    urt_lane *lane;
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    struct urt_task a, b, c;
    urt_task_init(&a, yielder_fn, (void *)1);
    urt_task_init(&b, record_fn, (void *)2);
    urt_task_init(&c, record_fn, (void *)3);
    cr_assert_eq(urt_lane_submit(lane, &a, 0), 0);
    cr_assert_eq(urt_lane_submit(lane, &b, 0), 0);
    cr_assert_eq(urt_lane_submit(lane, &c, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_order_n) == 3, 10000));
    cr_assert_eq(g_order[0], 1);
    cr_assert_eq(g_order[1], 2);
    cr_assert_eq(g_order[2], 3);
    cr_assert_eq(urt_lane_destroy(lane), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Cancel mode: the lanes' queued tasks get their cancel callback, counted. */
static _Atomic int g_cancelled, g_ran;
static _Atomic bool g_release, g_blocking;

static enum urt_task_result blocker_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&g_blocking, true);
    while (!atomic_load(&g_release))
        sched_yield();
    atomic_fetch_add(&g_ran, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result count_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_ran, 1);
    return URT_TASK_DONE;
}

static void cancel_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_cancelled, 1);
}

static void *release_later(void *arg)
{
    (void)arg;
    sleep_us(20000);
    atomic_store(&g_release, true);
    return NULL;
}

Test(lanes, cancel_at_destroy, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    urt_lane *lane;
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    static struct urt_task tasks[100];
    urt_task_init(&tasks[0], blocker_fn, NULL);
    cr_assert_eq(urt_lane_submit(lane, &tasks[0], 0), 0);
    for (int i = 1; i < 100; i++) {
        urt_task_init(&tasks[i], count_fn, NULL);
        tasks[i].cancel = cancel_fn;
        cr_assert_eq(urt_lane_submit(lane, &tasks[i], 0), 0);
    }
    cr_assert_eq(urt_lane_pending(lane), 100);
    cr_assert(WAIT_UNTIL(atomic_load(&g_blocking), 5000));
    /* The blocker is released by a helper thread once destroy has started:
     * the queued tasks behind it must be cancelled, not run. */
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, release_later, NULL), 0);
    int r = urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
    cr_assert_geq(r, 0);
    cr_assert_eq(atomic_load(&g_ran) + atomic_load(&g_cancelled), 100, "ran %d + cancelled %d", atomic_load(&g_ran),
                 atomic_load(&g_cancelled));
    cr_assert_eq(r, atomic_load(&g_cancelled), "destroy says %d cancelled, callbacks %d", r, atomic_load(&g_cancelled));
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&g_ran), 1, "only the running blocker may finish, %d ran", atomic_load(&g_ran));
    cr_assert_eq(urt_lane_pending(lane), 0);
    cr_assert_eq(urt_lane_destroy(lane), 0);
}

/* V5 (sched/lane.c): a worker that owns several busy lanes hands some to a
 * suspended peer between batches; order and one-at-a-time hold across the
 * move, and lanes made with urt_lane_create_on never move. All lanes are
 * activated by a seeder task on worker 0 with lane_balance off, so without
 * shedding every task would run on worker 0. */
#define SHED_LANES 8
#define SHED_TASKS SCALE(3000u, 600u)

struct shed_task {
    struct urt_task task;
    uint32_t lane, seq;
};

struct shed_lane {
    _Atomic int in_use;
    uint32_t next;  /* touched only by the lane's tasks (TSan sees a broken serialization) */
    uint32_t on[2]; /* tasks run on worker 0 / 1 (likewise) */
};

static urt_lane *g_shed_lanes[SHED_LANES];
static struct shed_lane g_shed[SHED_LANES];
static struct shed_task *g_shed_tasks;
static _Atomic uint64_t g_shed_done, g_shed_errors;
static struct urt_task g_seeder;

static enum urt_task_result shed_fn(struct urt_task *t, void *arg)
{
    struct shed_task *st = arg;
    struct shed_lane *l = &g_shed[st->lane];
    (void)t;
    if (atomic_exchange_explicit(&l->in_use, 1, memory_order_acquire) != 0 || l->next != st->seq)
        atomic_fetch_add_explicit(&g_shed_errors, 1, memory_order_relaxed);
    l->next = st->seq + 1;
    int w = urt_current_worker(g_rt);
    if (w == 0 || w == 1)
        l->on[w]++;
    uint64_t until = now_ns() + 2000; /* about 2 µs of work */
    while (now_ns() < until)
        ;
    atomic_store_explicit(&l->in_use, 0, memory_order_release);
    atomic_fetch_add_explicit(&g_shed_done, 1, memory_order_relaxed);
    return URT_TASK_DONE;
}

static enum urt_task_result seeder_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    for (uint32_t i = 0; i < SHED_TASKS; i++)
        for (uint32_t l = 0; l < SHED_LANES; l++) {
            struct shed_task *st = &g_shed_tasks[(size_t)l * SHED_TASKS + i];
            st->lane = l;
            st->seq = i;
            urt_task_init(&st->task, shed_fn, st);
            if (urt_lane_submit(g_shed_lanes[l], &st->task, 0))
                atomic_fetch_add_explicit(&g_shed_errors, 1, memory_order_relaxed);
        }
    return URT_TASK_DONE;
}

/* Returns worker 0's lanes_moved; *on1: tasks that ran on worker 1. With
 * spinning, the idle worker never suspends (busy_worker). */
static uint64_t run_shed(bool pinned, bool spinning, uint64_t *on1)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.lane_balance = false;
    cfg.worker_try_count = 10; /* the idle worker suspends at once */
    cfg.busy_worker = spinning;
    g_rt = rt_create_or_skip(&cfg);
    memset(g_shed, 0, sizeof(g_shed));
    atomic_store(&g_shed_done, 0);
    atomic_store(&g_shed_errors, 0);
    g_shed_tasks = calloc((size_t)SHED_LANES * SHED_TASKS, sizeof(*g_shed_tasks));
    cr_assert_not_null(g_shed_tasks);
    for (int l = 0; l < SHED_LANES; l++)
        cr_assert_eq(pinned ? urt_lane_create_on(g_rt, 0, &g_shed_lanes[l]) : urt_lane_create(g_rt, &g_shed_lanes[l]),
                     0);
    urt_task_init(&g_seeder, seeder_fn, NULL);
    cr_assert_eq(urt_task_submit_to(g_rt, 0, &g_seeder, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_shed_done) == (uint64_t)SHED_LANES * SHED_TASKS, 60000),
              "only %lu of %u lane tasks ran", (unsigned long)atomic_load(&g_shed_done), SHED_LANES * SHED_TASKS);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_not_null(st);
    uint64_t moved = st->workers[0].lanes_moved;
    cr_assert_eq(st->workers[1].lanes_moved + moved, st->total.lanes_moved);
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&g_shed_errors), 0, "%lu overlaps, order errors or refused submissions",
                 (unsigned long)atomic_load(&g_shed_errors));
    *on1 = 0;
    for (int l = 0; l < SHED_LANES; l++) {
        cr_assert_eq(g_shed[l].next, SHED_TASKS);
        cr_assert_eq(g_shed[l].on[0] + g_shed[l].on[1], SHED_TASKS);
        *on1 += g_shed[l].on[1];
        cr_assert_eq(urt_lane_destroy(g_shed_lanes[l]), 0);
    }
    free(g_shed_tasks);
    return moved;
}

Test(lanes, busy_worker_sheds_lanes_to_a_suspended_peer, .timeout = 120)
{
    uint64_t on1;
    uint64_t moved = run_shed(false, false, &on1);
    cr_assert_gt(moved, 0, "worker 0 owned %d busy lanes beside a suspended peer and moved none", SHED_LANES);
    cr_assert_gt(on1, 0, "%lu lane moves, but no lane task ran on worker 1", (unsigned long)moved);
}

/* The peer spins and never suspends: only its idle mark tells worker 0 that
 * it has nothing to run (sched/lane.c idle_peer). */
Test(lanes, busy_worker_sheds_lanes_to_a_spinning_peer, .timeout = 120)
{
    uint64_t on1;
    uint64_t moved = run_shed(false, true, &on1);
    cr_assert_gt(moved, 0, "worker 0 owned %d busy lanes beside an idle spinning peer and moved none", SHED_LANES);
    cr_assert_gt(on1, 0, "%lu lane moves, but no lane task ran on worker 1", (unsigned long)moved);
}

Test(lanes, pinned_lanes_never_move, .timeout = 120)
{
    uint64_t on1;
    uint64_t moved = run_shed(true, true, &on1);
    cr_assert_eq(moved, 0, "pinned lanes moved %lu times", (unsigned long)moved);
    cr_assert_eq(on1, 0, "%lu tasks of lanes pinned to worker 0 ran on worker 1", (unsigned long)on1);
}

/* Placement at activation from a thread that is not a worker: the C5 worker
 * (the thread's preferred worker), even with lane_balance on and that worker
 * busy with another lane; idle peers get lanes by shedding (V5), as they get
 * a foreign thread's plain tasks by stealing. Lane A's task holds worker P
 * (the thread's preferred one: the first activation, both workers idle); lane
 * B, activated while A's task runs, must run on P after it. Balancing at
 * activation sent B to the other worker (it owned fewer lanes), which made a
 * submitting thread wake suspended workers and spread fine-grained lanes over
 * the CPUs it needed itself (sticky_tx_remote). */
static _Atomic int g_where_a = -1, g_where_b = -1;
static _Atomic bool g_hold_release;

static enum urt_task_result hold_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&g_where_a, urt_current_worker(g_rt));
    while (!atomic_load(&g_hold_release))
        sched_yield();
    return URT_TASK_DONE;
}

static enum urt_task_result where_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&g_where_b, urt_current_worker(g_rt));
    return URT_TASK_DONE;
}

Test(lanes, foreign_activation_goes_to_the_preferred_worker, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.lane_balance = true;
    cfg.use_preferred_worker_for_current_thread = true;
    g_rt = rt_create_or_skip(&cfg);
    urt_lane *a, *b;
    cr_assert_eq(urt_lane_create(g_rt, &a), 0);
    cr_assert_eq(urt_lane_create(g_rt, &b), 0);
    struct urt_task ta, tb;
    urt_task_init(&ta, hold_fn, NULL);
    urt_task_init(&tb, where_fn, NULL);
    cr_assert_eq(urt_lane_submit(a, &ta, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_where_a) >= 0, 10000), "lane A's task did not start");
    cr_assert_eq(urt_lane_submit(b, &tb, 0), 0);
    sleep_us(20000); /* on the other worker B would run now */
    int early = atomic_load(&g_where_b);
    atomic_store(&g_hold_release, true);
    cr_assert(WAIT_UNTIL(atomic_load(&g_where_b) >= 0, 10000), "lane B's task did not run");
    cr_assert_eq(early, -1, "lane B ran on worker %d while A's task held worker %d", early, atomic_load(&g_where_a));
    cr_assert_eq(atomic_load(&g_where_b), atomic_load(&g_where_a), "lane B ran on worker %d, not on the preferred %d",
                 atomic_load(&g_where_b), atomic_load(&g_where_a));
    cr_assert_eq(urt_lane_destroy(a), 0);
    cr_assert_eq(urt_lane_destroy(b), 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* The FIFO's empty <-> busy edge (sched/lane.c L1-L4; the producers' end,
 * the count and the stub's link share one line, lane.h): two threads that
 * are not workers feed one lane, each submitting its next task only after
 * its previous one ran, so the lane runs dry and is activated again all the
 * time (the stub is pushed back and a submission finds it). The lane is
 * embedded with lane_ops counting its active/idle edges. Model: no overlap,
 * each submitter's order, every task exactly once; the edges pair up (every
 * activation ends idle) and happen more than once; pending is 0 at the end. */
#define EDGE_TASKS SCALE(20000u, 3000u)
#define EDGE_THREADS 2

struct edge_task {
    struct urt_task task;
    uint32_t submitter, seq;
    _Atomic uint32_t runs;
    _Atomic bool ran;
};

static struct {
    alignas(64) struct urt_lane lane;
    _Atomic int in_use;
    uint32_t next_seq[EDGE_THREADS]; /* touched only by the lane's tasks */
    _Atomic uint64_t active, idle, overlaps, order_errors, extra_runs, done, submit_errors;
    struct edge_task *tasks;
} g_edge;

static void edge_active(void *ctx)
{
    (void)ctx;
    atomic_fetch_add_explicit(&g_edge.active, 1, memory_order_relaxed);
}

static void edge_idle(void *ctx)
{
    (void)ctx;
    atomic_fetch_add_explicit(&g_edge.idle, 1, memory_order_relaxed);
}

static const struct lane_ops edge_ops = {.active = edge_active, .idle = edge_idle};

static enum urt_task_result edge_fn(struct urt_task *t, void *arg)
{
    struct edge_task *et = arg;
    (void)t;
    if (atomic_fetch_add_explicit(&et->runs, 1, memory_order_relaxed) != 0)
        atomic_fetch_add_explicit(&g_edge.extra_runs, 1, memory_order_relaxed);
    if (atomic_exchange_explicit(&g_edge.in_use, 1, memory_order_acquire) != 0)
        atomic_fetch_add_explicit(&g_edge.overlaps, 1, memory_order_relaxed);
    if (g_edge.next_seq[et->submitter] != et->seq)
        atomic_fetch_add_explicit(&g_edge.order_errors, 1, memory_order_relaxed);
    g_edge.next_seq[et->submitter] = et->seq + 1;
    atomic_store_explicit(&g_edge.in_use, 0, memory_order_release);
    atomic_fetch_add_explicit(&g_edge.done, 1, memory_order_relaxed);
    atomic_store_explicit(&et->ran, true, memory_order_release);
    return URT_TASK_DONE;
}

static void *edge_main(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg;
    for (uint32_t i = 0; i < EDGE_TASKS; i++) {
        struct edge_task *et = &g_edge.tasks[(size_t)s * EDGE_TASKS + i];
        et->submitter = s;
        et->seq = i;
        urt_task_init(&et->task, edge_fn, et);
        if (lane_submit(&g_edge.lane, &et->task, 0) != 0) {
            atomic_fetch_add_explicit(&g_edge.submit_errors, 1, memory_order_relaxed);
            return NULL;
        }
        while (!atomic_load_explicit(&et->ran, memory_order_acquire))
            sched_yield();
    }
    return NULL;
}

Test(lanes, fifo_runs_dry_and_is_activated_again_from_two_threads, .timeout = 120)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    g_rt = rt_create_or_skip(&cfg);
    g_edge.tasks = calloc((size_t)EDGE_THREADS * EDGE_TASKS, sizeof(*g_edge.tasks));
    cr_assert_not_null(g_edge.tasks);
    lane_init(&g_edge.lane, sched_of(g_rt), LANE_PLAIN, &edge_ops, NULL);
    pthread_t th[EDGE_THREADS];
    for (uintptr_t i = 0; i < EDGE_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, edge_main, (void *)i), 0);
    for (int i = 0; i < EDGE_THREADS; i++)
        pthread_join(th[i], NULL);
    uint64_t n = (uint64_t)EDGE_THREADS * EDGE_TASKS;
    cr_assert_eq(atomic_load(&g_edge.submit_errors), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_edge.done) == n && atomic_load(&g_edge.idle) == atomic_load(&g_edge.active),
                         10000),
              "done %lu of %lu, %lu activations, %lu idle", (unsigned long)atomic_load(&g_edge.done),
              (unsigned long)n, (unsigned long)atomic_load(&g_edge.active), (unsigned long)atomic_load(&g_edge.idle));
    cr_assert_eq(atomic_load(&g_edge.overlaps), 0);
    cr_assert_eq(atomic_load(&g_edge.order_errors), 0);
    cr_assert_eq(atomic_load(&g_edge.extra_runs), 0);
    cr_assert_eq(atomic_load_explicit(&g_edge.lane.pending, memory_order_acquire), 0);
    cr_assert_gt(atomic_load(&g_edge.active), 1, "the lane never ran dry");
    for (uint64_t i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&g_edge.tasks[i].runs), 1, "task %lu ran %u times", (unsigned long)i,
                     atomic_load(&g_edge.tasks[i].runs));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(g_edge.tasks);
}

/* (M4) The shutdown fence holds a foreign activation (sched/core/submit.c
 * "Shutdown fence"): a thread that is not a worker activates an embedded
 * lane whose active callback runs inside the fence (L2 done, the runner not
 * yet queued, L3) and returns only 50 ms after the runtime's destroy stored
 * its phase. Destroy must wait for it: the runner is then queued, and the
 * task ends exactly once (run by a drain, cancelled by a cancel) with the
 * lane's count back at 0. Without the wait (sched_stop's
 * wait_foreign_submitters) both cases fail: destroy returns while the push is
 * in the fence and the task never ends. The racing tests
 * (shutdown::foreign_*_racing_*) did not notice that wait missing. */
static struct {
    alignas(64) struct urt_lane lane;
    struct urt_task task;
    _Atomic int ran, cancelled, active_done;
    _Atomic bool in_active;
} g_fence;

static void fence_active(void *ctx)
{
    (void)ctx;
    struct sched *s = sched_of(g_rt);
    atomic_store(&g_fence.in_active, true);
    while (atomic_load(&s->phase) == PHASE_RUNNING)
        sched_yield();
    sleep_us(50000); /* destroy would run ahead now without the fence */
    atomic_store(&g_fence.active_done, 1);
}

static enum urt_task_result fence_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_fence.ran, 1);
    return URT_TASK_DONE;
}

static void fence_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_fence.cancelled, 1);
}

static const struct lane_ops fence_ops = {.active = fence_active};

static void *fence_submitter(void *arg)
{
    (void)arg;
    urt_task_init(&g_fence.task, fence_fn, NULL);
    g_fence.task.cancel = fence_cancel;
    cr_assert_eq(lane_submit(&g_fence.lane, &g_fence.task, 0), 0);
    return NULL;
}

static void fence_case(enum urt_shutdown mode, bool spare)
{
#if URT_FAULT_INJECTION
    atomic_store(&urt__foreign_fault_no_mark, spare); /* the submitter holds the spare mark, not its own */
#else
    if (spare)
        cr_skip_test("needs -Dfault_injection=true (the README's test command sets it)");
#endif
    struct urt_config cfg;
    test_config(&cfg, 2);
    g_rt = rt_create_or_skip(&cfg);
    lane_init(&g_fence.lane, sched_of(g_rt), LANE_PLAIN, &fence_ops, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, fence_submitter, NULL), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_fence.in_active), 10000));
    int ret = urt_runtime_destroy(g_rt, mode);
    cr_assert_eq(atomic_load(&g_fence.active_done), 1, "destroy returned while a foreign push was in the fence");
    pthread_join(th, NULL);
    int ran = atomic_load(&g_fence.ran), cancelled = atomic_load(&g_fence.cancelled);
    cr_assert_eq(ran + cancelled, 1, "the task ran %d times and was cancelled %d times", ran, cancelled);
    cr_assert_eq(ret, cancelled);
    if (mode == URT_SHUTDOWN_DRAIN)
        cr_assert_eq(ran, 1);
    cr_assert_eq(atomic_load(&g_fence.lane.pending), 0);
#if URT_FAULT_INJECTION
    atomic_store(&urt__foreign_fault_no_mark, false);
#endif
}

Test(lanes, fence_holds_a_foreign_activation_cancel, .timeout = 60)
{
    fence_case(URT_SHUTDOWN_CANCEL, false);
}

Test(lanes, fence_holds_a_foreign_activation_drain, .timeout = 60)
{
    fence_case(URT_SHUTDOWN_DRAIN, false);
}

/* The same from a thread that got no mark of its own (sched/core/foreign.h:
 * the spare, under its lock): destroy waits for the spare as well. */
Test(lanes, fence_holds_a_foreign_activation_on_the_spare_mark, .timeout = 60)
{
    fence_case(URT_SHUTDOWN_CANCEL, true);
}
