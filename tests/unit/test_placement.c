/*
 * tests/unit/test_placement.c — where tasks run (SPEC C5), where workers run
 * (C1), and the ring feature fallbacks (C2/C3).
 *
 * Determinism: stealing is switched off with the largest stealing_wait
 * (a worker steals only after 10^6 consecutive empty local polls, and with
 * worker_try_count = 1 an idle worker polls about once per wake), so a task
 * runs on the worker it was placed on; workers suspend after one empty poll
 * (worker_try_count = 1) and the suspend timeout is 60 s, so only a wake
 * message gets a suspended worker going within a test. A "blocker" task
 * that spins until the test releases it keeps one worker busy on purpose.
 * One exception is by design: a worker does not suspend while any deque
 * holds work, it polls, and after stealing_wait empty polls it steals; so a
 * task pushed to a busy worker's deque may end up elsewhere, and the tests
 * then require the statistics to count exactly that steal.
 *
 * Where a worker runs is checked twice: the statistics (node, cpu) and the
 * affinity mask seen by a task running on that worker.
 *
 * Per-thread state of threads that are not workers is per runtime: a thread
 * feeding two runtimes keeps its preferred worker and its spawn cache in
 * each; with round robin per submission, short-lived threads that spawn once
 * spread over all workers.
 *
 * Ring fallback: ring_disable masks features to simulate an older kernel;
 * each configuration must report the fallback in urt_runtime_features(),
 * keep the features it did not mask as the unmasked probe found them, run
 * tasks, and deliver wake-ups to suspended workers from a thread that is not
 * a worker (a new thread per round: per-thread wake rings are created and
 * released) and from a worker (urgent submission to a suspended peer); and
 * destroy must not wait for the suspended workers' 60 s timeout. SQPOLL
 * rings (opt-in) too.
 */
#include <criterion/criterion.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

#define NO_STEALING 1000000u

struct probe {
    struct urt_task task;
    _Atomic int worker;
    _Atomic bool ran;
    _Atomic int runs;
    cpu_set_t affinity;
};

static enum urt_task_result probe_fn(struct urt_task *t, void *arg)
{
    struct probe *p = arg;
    (void)t;
    sched_getaffinity(0, sizeof(p->affinity), &p->affinity);
    atomic_fetch_add(&p->runs, 1);
    atomic_store_explicit(&p->ran, true, memory_order_release);
    return URT_TASK_DONE;
}

/* Every probe records the worker it ran on; the runtime is passed through a
 * global because the probe's arg is the probe itself. */
static urt_runtime *g_rt;

static enum urt_task_result probe_where_fn(struct urt_task *t, void *arg)
{
    struct probe *p = arg;
    atomic_store(&p->worker, urt_current_worker(g_rt));
    return probe_fn(t, arg);
}

static void probe_init(struct probe *p)
{
    memset(p, 0, sizeof(*p));
    atomic_init(&p->worker, -2);
    urt_task_init(&p->task, probe_where_fn, p);
}

static bool probe_wait(struct probe *p, unsigned ms)
{
    return WAIT_UNTIL(atomic_load_explicit(&p->ran, memory_order_acquire), ms);
}

static void placement_config(struct urt_config *c, uint32_t workers)
{
    test_config(c, workers);
    c->stealing_wait = NO_STEALING;
    c->worker_try_count = 1;
}

/* ---- blocker: keeps its worker busy until released -------------------------------- */

struct blocker {
    struct urt_task task;
    _Atomic int worker;
    _Atomic bool started, release, finished;
    /* optional work done by the blocker while it holds its worker */
    void (*inside)(struct blocker *b);
    void *ctx;
};

static enum urt_task_result blocker_fn(struct urt_task *t, void *arg)
{
    struct blocker *b = arg;
    (void)t;
    atomic_store(&b->worker, urt_current_worker(g_rt));
    atomic_store(&b->started, true);
    if (b->inside)
        b->inside(b);
    uint64_t deadline = now_ns() + 30ull * 1000000000ull; /* never hang the test */
    while (!atomic_load(&b->release) && now_ns() < deadline)
        sleep_us(50);
    atomic_store(&b->finished, true);
    return URT_TASK_DONE;
}

static void blocker_init(struct blocker *b)
{
    memset(b, 0, sizeof(*b));
    atomic_init(&b->worker, -2);
    urt_task_init(&b->task, blocker_fn, b);
}

/* ---- C5: a task submitted from a worker runs on that worker -------------------------- */

#define N_CHILDREN 300

struct parent_ctx {
    struct urt_task task;
    _Atomic int worker;
    struct probe children[N_CHILDREN];
    _Atomic int submit_errors;
};

static enum urt_task_result parent_fn(struct urt_task *t, void *arg)
{
    struct parent_ctx *pc = arg;
    (void)t;
    atomic_store(&pc->worker, urt_current_worker(g_rt));
    for (int i = 0; i < N_CHILDREN; i++) {
        struct probe *c = &pc->children[i];
        int err;
        switch (i % 3) {
        case 0:
            err = urt_task_submit(g_rt, &c->task, 0);
            break;
        case 1:
            err = urt_task_submit(g_rt, &c->task, URT_SUBMIT_LOCAL);
            break;
        default:
            err = urt_spawn(g_rt, probe_where_fn, c, 0);
            break;
        }
        if (err)
            atomic_fetch_add(&pc->submit_errors, 1);
    }
    return URT_TASK_DONE;
}

Test(placement, task_from_worker_runs_on_that_worker, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    g_rt = rt_create_or_skip(&c);
    struct parent_ctx *pc = calloc(1, sizeof(*pc));
    cr_assert_not_null(pc);
    uint64_t elsewhere = 0;
    for (int round = 0; round < 6; round++) {
        memset(pc, 0, sizeof(*pc));
        atomic_init(&pc->worker, -2);
        for (int i = 0; i < N_CHILDREN; i++)
            probe_init(&pc->children[i]);
        urt_task_init(&pc->task, parent_fn, pc);
        cr_assert_eq(urt_task_submit(g_rt, &pc->task, 0), 0);
        for (int i = 0; i < N_CHILDREN; i++)
            cr_assert(probe_wait(&pc->children[i], 10000), "round %d child %d never ran", round, i);
        int w = atomic_load(&pc->worker);
        cr_assert(w >= 0 && w < 3);
        cr_assert_eq(atomic_load(&pc->submit_errors), 0);
        for (int i = 0; i < N_CHILDREN; i++) {
            int cw = atomic_load(&pc->children[i].worker);
            cr_assert(cw >= 0 && cw < 3);
            if (cw != w)
                elsewhere++;
            cr_assert_eq(atomic_load(&pc->children[i].runs), 1);
        }
    }
    /* A child runs elsewhere only if a peer stole it (a peer that cannot
     * suspend while a deque holds work spins, and steals after
     * stealing_wait empty polls): the counts must match exactly. */
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_eq(st->total.tasks_stolen, elsewhere, "%lu children ran away from their parent's worker, %lu stolen",
                 (unsigned long)elsewhere, (unsigned long)st->total.tasks_stolen);
    cr_assert_lt(elsewhere, 6 * N_CHILDREN / 10, "with stealing_wait %u most children stay local", NO_STEALING);
    cr_assert_eq(st->total.tasks_run, 6 * (N_CHILDREN + 1));
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(pc);
}

/* ---- C5: a thread that is not a worker has a preferred worker --------------------------- */

#define N_FOREIGN 100

struct foreign_run {
    struct probe probes[N_FOREIGN];
    _Atomic int errors;
    _Atomic int timeouts;
    unsigned flags;
};

static void *foreign_submitter(void *arg)
{
    struct foreign_run *fr = arg;
    for (int i = 0; i < N_FOREIGN; i++) {
        probe_init(&fr->probes[i]);
        int err = (i & 1) ? urt_task_submit(g_rt, &fr->probes[i].task, fr->flags)
                          : urt_spawn(g_rt, probe_where_fn, &fr->probes[i], fr->flags);
        if (err)
            atomic_fetch_add(&fr->errors, 1);
    }
    for (int i = 0; i < N_FOREIGN; i++)
        if (!WAIT_UNTIL(atomic_load_explicit(&fr->probes[i].ran, memory_order_acquire), 10000))
            atomic_fetch_add(&fr->timeouts, 1);
    return NULL;
}

Test(placement, foreign_thread_preferred_worker, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    cr_assert(c.use_preferred_worker_for_current_thread, "the default");
    g_rt = rt_create_or_skip(&c);
    struct foreign_run *fr = calloc(1, sizeof(*fr));
    cr_assert_not_null(fr);
    /* Threads one after another: preferred workers are handed out round
     * robin on each thread's first submission: 0, 1, 2, 0, 1. */
    /* Each thread's submissions all go to the inbox of its preferred
     * worker: only that worker drains an inbox while the thread runs, and a
     * task runs elsewhere only if a peer stole it (the placement exception
     * in the design comment above), so those counts match. */
    for (int th = 0; th < 5; th++) {
        memset(fr, 0, sizeof(*fr));
        struct urt_stats *before = urt_stats_snapshot(g_rt);
        cr_assert_not_null(before);
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, foreign_submitter, fr), 0);
        pthread_join(t, NULL);
        cr_assert_eq(atomic_load(&fr->errors), 0);
        cr_assert_eq(atomic_load(&fr->timeouts), 0);
        struct urt_stats *after = urt_stats_snapshot(g_rt); /* every task ran: the counts are final */
        cr_assert_not_null(after);
        for (int w = 0; w < 3; w++)
            if (w != th % 3)
                cr_assert_eq(after->workers[w].inbox_drains, before->workers[w].inbox_drains,
                             "thread %d: worker %d took tasks from its inbox, its preferred worker is %d", th, w,
                             th % 3);
        cr_assert_gt(after->workers[th % 3].inbox_drains, before->workers[th % 3].inbox_drains);
        uint64_t elsewhere = 0;
        for (int i = 0; i < N_FOREIGN; i++) {
            int w = atomic_load(&fr->probes[i].worker);
            cr_assert(w >= 0 && w < 3, "thread %d task %d ran on worker %d", th, i, w);
            elsewhere += w != th % 3;
        }
        uint64_t stolen = after->total.tasks_stolen - before->total.tasks_stolen;
        cr_assert_eq(elsewhere, stolen, "thread %d: %lu tasks ran away from its preferred worker %d, %lu stolen", th,
                     (unsigned long)elsewhere, th % 3, (unsigned long)stolen);
        urt_stats_free(before);
        urt_stats_free(after);
    }
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(fr);
}

Test(placement, round_robin_without_preferred_worker, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    c.use_preferred_worker_for_current_thread = false;
    g_rt = rt_create_or_skip(&c);
    enum { N = 60 };
    struct probe *p = calloc(N, sizeof(*p));
    cr_assert_not_null(p);
    for (int i = 0; i < N; i++) {
        probe_init(&p[i]);
        cr_assert_eq(urt_task_submit(g_rt, &p[i].task, 0), 0);
    }
    /* Task i went to worker i % 3; it ran elsewhere only if a peer stole it
     * (the placement exception in the design comment above). */
    uint64_t elsewhere = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(probe_wait(&p[i], 10000), "task %d never ran", i);
        int w = atomic_load(&p[i].worker);
        cr_assert(w >= 0 && w < 3, "task %d ran on worker %d", i, w);
        elsewhere += w != i % 3;
    }
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_not_null(st);
    cr_assert_eq(elsewhere, st->total.tasks_stolen, "%lu tasks ran off their round-robin worker, %lu stolen",
                 (unsigned long)elsewhere, (unsigned long)st->total.tasks_stolen);
    for (int w = 0; w < 3; w++)
        cr_assert_gt(st->workers[w].inbox_drains, 0, "round robin sent worker %d nothing", w);
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(p);
}

/* ---- C5: urgent submissions go to a suspended worker -------------------------------------- */

Test(placement, urgent_from_foreign_thread_goes_to_suspended_worker, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    g_rt = rt_create_or_skip(&c);
    struct blocker b;
    blocker_init(&b);
    /* The main thread's first submission: its preferred worker is 0. */
    cr_assert_eq(urt_task_submit(g_rt, &b.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&b.started), 10000));
    cr_assert_eq(atomic_load(&b.worker), 0);
    uint32_t mask = 0;
    cr_assert(WAIT_UNTIL((rt_sleeping_count(g_rt, &mask), mask == 0x6), 10000), "workers 1 and 2 never suspended");

    struct urt_stats *before = urt_stats_snapshot(g_rt);
    for (int round = 0; round < 10; round++) {
        cr_assert(WAIT_UNTIL((rt_sleeping_count(g_rt, &mask), mask == 0x6), 10000), "round %d: not asleep", round);
        struct probe p;
        probe_init(&p);
        cr_assert_eq(urt_task_submit(g_rt, &p.task, URT_SUBMIT_URGENT), 0);
        cr_assert(probe_wait(&p, 10000), "round %d: the urgent task did not run while worker 0 was busy", round);
        int w = atomic_load(&p.worker);
        cr_assert(w == 1 || w == 2, "round %d: urgent task ran on worker %d (the busy preferred worker)", round, w);
        cr_assert_not(atomic_load(&b.finished));
    }
    struct urt_stats *after = urt_stats_snapshot(g_rt);
    cr_assert_geq(after->foreign_wakes_sent - before->foreign_wakes_sent, 10, "each urgent task woke a worker");
    urt_stats_free(after);
    /* A wake sent while its target was already leaving its suspension is
     * received at its next suspension: wait for the count to catch up. */
    uint64_t received = 0;
    bool caught_up = WAIT_UNTIL(((after = urt_stats_snapshot(g_rt)),
                                 (received = after->workers[1].wakes_received + after->workers[2].wakes_received -
                                             before->workers[1].wakes_received - before->workers[2].wakes_received),
                                 urt_stats_free(after), received >= 10),
                                5000);
    cr_assert(caught_up, "workers 1 and 2 received %lu wakes, expected >= 10", (unsigned long)received);
    urt_stats_free(before);

    /* Without URGENT the task waits for its preferred (busy) worker. */
    struct probe q;
    probe_init(&q);
    cr_assert_eq(urt_task_submit(g_rt, &q.task, 0), 0);
    sleep_us(100000);
    cr_assert_not(atomic_load(&q.ran), "a non-urgent task from this thread belongs to busy worker 0");
    atomic_store(&b.release, true);
    cr_assert(probe_wait(&q, 10000));
    cr_assert_eq(atomic_load(&q.worker), 0);

    /* No worker asleep: URGENT falls back to the ordinary rules. */
    struct blocker b1, b2;
    blocker_init(&b1);
    blocker_init(&b2);
    cr_assert(rt_wait_all_sleeping(g_rt, 3, 10000));
    cr_assert_eq(urt_task_submit(g_rt, &b1.task, URT_SUBMIT_URGENT), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&b1.started), 10000));
    cr_assert_eq(urt_task_submit(g_rt, &b2.task, URT_SUBMIT_URGENT), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&b2.started), 10000));
    struct blocker b0;
    blocker_init(&b0);
    cr_assert_eq(urt_task_submit(g_rt, &b0.task, URT_SUBMIT_URGENT), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&b0.started), 10000));
    int seen = (1 << atomic_load(&b0.worker)) | (1 << atomic_load(&b1.worker)) | (1 << atomic_load(&b2.worker));
    cr_assert_eq(seen, 0x7, "three urgent blockers took the three suspended workers");
    struct probe r;
    probe_init(&r);
    cr_assert_eq(urt_task_submit(g_rt, &r.task, URT_SUBMIT_URGENT), 0);
    sleep_us(50000);
    cr_assert_not(atomic_load(&r.ran), "every worker is busy");
    atomic_store(&b0.release, true);
    atomic_store(&b1.release, true);
    atomic_store(&b2.release, true);
    cr_assert(probe_wait(&r, 10000));
    cr_assert_eq(atomic_load(&r.worker), 0, "no suspended worker: the preferred worker");
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A blocker on worker 0 submits an urgent child once the others sleep. */
struct urgent_inside {
    _Atomic bool go;
    struct probe urgent, local;
    _Atomic bool urgent_ran_while_blocked;
    _Atomic bool local_ran_while_blocked;
    _Atomic int errors;
};

static void urgent_inside_fn(struct blocker *b)
{
    struct urgent_inside *u = b->ctx;
    uint64_t deadline = now_ns() + 10ull * 1000000000ull;
    while (!atomic_load(&u->go) && now_ns() < deadline)
        sleep_us(50);
    if (urt_spawn(g_rt, probe_where_fn, &u->urgent, URT_SUBMIT_URGENT))
        atomic_fetch_add(&u->errors, 1);
    if (urt_task_submit(g_rt, &u->local.task, 0))
        atomic_fetch_add(&u->errors, 1);
    deadline = now_ns() + 10ull * 1000000000ull;
    while (!atomic_load(&u->urgent.ran) && now_ns() < deadline)
        sleep_us(50);
    atomic_store(&u->urgent_ran_while_blocked, atomic_load(&u->urgent.ran));
    sleep_us(50000);
    atomic_store(&u->local_ran_while_blocked, atomic_load(&u->local.ran));
}

Test(placement, urgent_from_worker_goes_to_suspended_peer, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    g_rt = rt_create_or_skip(&c);
    struct urgent_inside u;
    memset(&u, 0, sizeof(u));
    probe_init(&u.urgent);
    probe_init(&u.local);
    struct blocker b;
    blocker_init(&b);
    b.inside = urgent_inside_fn;
    b.ctx = &u;
    cr_assert_eq(urt_task_submit(g_rt, &b.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&b.started), 10000));
    int bw = atomic_load(&b.worker);
    uint32_t mask = 0, others = 0x7 & ~(1u << bw);
    cr_assert(WAIT_UNTIL((rt_sleeping_count(g_rt, &mask), mask == others), 10000), "the other workers never slept");
    struct urt_stats *before = urt_stats_snapshot(g_rt);
    atomic_store(&u.go, true);
    atomic_store(&b.release, true); /* the blocker returns after its inside part */
    cr_assert(WAIT_UNTIL(atomic_load(&b.finished), 30000));
    cr_assert_eq(atomic_load(&u.errors), 0);
    cr_assert(atomic_load(&u.urgent_ran_while_blocked), "the urgent child waited for its busy parent's worker");
    int uw = atomic_load(&u.urgent.worker);
    cr_assert(uw >= 0 && uw != bw, "urgent child ran on %d, parent's worker %d", uw, bw);
    /* The plain child went to the busy worker's own deque: it ran there, or
     * a peer stole it (a peer cannot suspend while a deque holds work: it
     * polls, and steals after stealing_wait empty polls). */
    cr_assert(probe_wait(&u.local, 10000));
    struct urt_stats *after = urt_stats_snapshot(g_rt);
    int lw = atomic_load(&u.local.worker);
    if (lw != bw)
        cr_assert_eq(after->total.tasks_stolen - before->total.tasks_stolen, 1,
                     "the plain child ran on %d, not on its parent's worker %d, without being stolen", lw, bw);
    else
        cr_assert_not(atomic_load(&u.local_ran_while_blocked), "ran on the busy worker while it was busy?");
    cr_assert_geq(after->workers[bw].wakes_sent, before->workers[bw].wakes_sent + 1,
                  "the worker woke its peer through its own ring");
    urt_stats_free(before);
    urt_stats_free(after);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- C1: where the workers run ------------------------------------------------------------ */

/* Runs one probe on every worker (round robin, no stealing) and returns them. */
static struct probe *probe_every_worker(urt_runtime *rt, uint32_t n)
{
    struct probe *p = calloc(n, sizeof(*p));
    cr_assert_not_null(p);
    for (uint32_t i = 0; i < n; i++) {
        probe_init(&p[i]);
        cr_assert_eq(urt_task_submit(rt, &p[i].task, 0), 0);
    }
    for (uint32_t i = 0; i < n; i++) {
        cr_assert(probe_wait(&p[i], 10000));
        cr_assert_eq(atomic_load(&p[i].worker), (int)i, "round robin: probe %u on worker %d", i,
                     atomic_load(&p[i].worker));
    }
    return p;
}

static void need_cpus_0_and_1(void)
{
    cpu_set_t s;
    cr_assert_eq(sched_getaffinity(0, sizeof(s), &s), 0);
    if (!CPU_ISSET(0, &s) || !CPU_ISSET(1, &s))
        cr_skip_test("needs CPUs 0 and 1 in the affinity mask");
}

static urt_runtime *placed_runtime(enum urt_placement placement, const char *topology, uint32_t workers)
{
    struct urt_config c;
    placement_config(&c, workers);
    c.use_preferred_worker_for_current_thread = false;
    c.placement = placement;
    c.topology = topology;
    return rt_create_or_skip(&c);
}

Test(placement, topology_override_numa_spreads_over_nodes, .timeout = 60)
{
    need_cpus_0_and_1();
    enum { W = 4 };
    g_rt = placed_runtime(URT_PLACEMENT_NUMA, "0;1", W);
    struct urt_features f;
    urt_runtime_features(g_rt, &f);
    cr_assert_eq(f.numa_nodes, 2);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_eq(st->n_workers, W);
    for (int i = 0; i < W; i++) {
        cr_assert_eq(st->workers[i].node, i % 2, "worker %d on node %d", i, st->workers[i].node);
        cr_assert_eq(st->workers[i].cpu, -1, "numa placement binds to a node, not to one CPU");
    }
    urt_stats_free(st);
    struct probe *p = probe_every_worker(g_rt, W);
    for (int i = 0; i < W; i++) {
        cr_assert_eq(CPU_COUNT(&p[i].affinity), 1, "worker %d: node %d has one CPU", i, i % 2);
        cr_assert(CPU_ISSET(i % 2, &p[i].affinity), "worker %d not bound to node %d's CPU", i, i % 2);
    }
    free(p);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(placement, topology_override_numa_multi_cpu_nodes, .timeout = 60)
{
    need_cpus_0_and_1();
    /* node 0 = {0,1}, node 1 = {1}: overlapping on purpose, the override is trusted */
    enum { W = 3 };
    g_rt = placed_runtime(URT_PLACEMENT_NUMA, "0-1;1", W);
    struct probe *p = probe_every_worker(g_rt, W);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    for (int i = 0; i < W; i++)
        cr_assert_eq(st->workers[i].node, i % 2);
    urt_stats_free(st);
    cr_assert_eq(CPU_COUNT(&p[0].affinity), 2);
    cr_assert_eq(CPU_COUNT(&p[1].affinity), 1);
    cr_assert(CPU_ISSET(1, &p[1].affinity));
    cr_assert_eq(CPU_COUNT(&p[2].affinity), 2);
    free(p);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(placement, core_placement_binds_one_cpu_each, .timeout = 60)
{
    need_cpus_0_and_1();
    enum { W = 4 };
    g_rt = placed_runtime(URT_PLACEMENT_CORE, "0;1", W);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    for (int i = 0; i < W; i++) {
        cr_assert_eq(st->workers[i].cpu, i % 2, "worker %d bound to cpu %d", i, st->workers[i].cpu);
        cr_assert_eq(st->workers[i].node, i % 2);
    }
    urt_stats_free(st);
    struct probe *p = probe_every_worker(g_rt, W);
    for (int i = 0; i < W; i++) {
        cr_assert_eq(CPU_COUNT(&p[i].affinity), 1);
        cr_assert(CPU_ISSET(i % 2, &p[i].affinity));
    }
    free(p);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);

    /* Discovered topology: distinct allowed CPUs while there are enough. */
    cpu_set_t allowed;
    sched_getaffinity(0, sizeof(allowed), &allowed);
    uint32_t n = (uint32_t)CPU_COUNT(&allowed);
    if (n > 8)
        n = 8;
    g_rt = placed_runtime(URT_PLACEMENT_CORE, NULL, n);
    st = urt_stats_snapshot(g_rt);
    cpu_set_t used;
    CPU_ZERO(&used);
    for (uint32_t i = 0; i < n; i++) {
        int cpu = st->workers[i].cpu;
        cr_assert(cpu >= 0 && CPU_ISSET(cpu, &allowed), "worker %u on cpu %d", i, cpu);
        cr_assert_not(CPU_ISSET(cpu, &used), "cpu %d given twice", cpu);
        CPU_SET(cpu, &used);
    }
    p = probe_every_worker(g_rt, n);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(CPU_COUNT(&p[i].affinity), 1);
        cr_assert(CPU_ISSET(st->workers[i].cpu, &p[i].affinity));
    }
    urt_stats_free(st);
    free(p);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(placement, none_leaves_workers_unbound, .timeout = 60)
{
    enum { W = 3 };
    cpu_set_t mine;
    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    g_rt = placed_runtime(URT_PLACEMENT_NONE, "0;1", W);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    for (int i = 0; i < W; i++) {
        cr_assert_eq(st->workers[i].node, -1);
        cr_assert_eq(st->workers[i].cpu, -1);
    }
    urt_stats_free(st);
    struct probe *p = probe_every_worker(g_rt, W);
    for (int i = 0; i < W; i++)
        cr_assert(CPU_EQUAL(&p[i].affinity, &mine), "worker %d: affinity differs from its creator's", i);
    free(p);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- C2/C3: ring feature fallbacks --------------------------------------------------------- */

struct wake_round {
    struct probe first;  /* submitted by a fresh foreign thread */
    struct probe urgent; /* submitted urgently by first, from its worker */
    _Atomic int errors;
    _Atomic bool first_ok;
};

static enum urt_task_result first_fn(struct urt_task *t, void *arg)
{
    struct wake_round *wr = arg;
    atomic_store(&wr->first.worker, urt_current_worker(g_rt));
    if (urt_task_submit(g_rt, &wr->urgent.task, URT_SUBMIT_URGENT))
        atomic_fetch_add(&wr->errors, 1);
    return probe_fn(t, &wr->first);
}

static void *wake_round_thread(void *arg)
{
    struct wake_round *wr = arg;
    if (urt_task_submit(g_rt, &wr->first.task, 0)) {
        atomic_fetch_add(&wr->errors, 1);
        return NULL;
    }
    atomic_store(&wr->first_ok,
                 WAIT_UNTIL(atomic_load_explicit(&wr->first.ran, memory_order_acquire), 10000));
    return NULL;
}

static void fallback_case(uint32_t disable)
{
    /* What the kernel offers with nothing masked. */
    struct urt_config c;
    placement_config(&c, 1);
    urt_runtime *base = rt_create_or_skip(&c);
    struct urt_features bf, f;
    urt_runtime_features(base, &bf);
    rt_destroy_clean(base, URT_SHUTDOWN_DRAIN, 0);

    test_config(&c, 2);
    c.worker_try_count = 1;
    c.ring_disable = disable;
    g_rt = rt_create_or_skip(&c);
    urt_runtime_features(g_rt, &f);
    char desc[256];
    urt_features_describe(&f, desc, sizeof(desc));
    cr_log_info("ring_disable=0x%x: %s", disable, desc);

    if (disable & URT_RING_DEFER_TASKRUN) {
        cr_assert_not(f.defer_taskrun, "%s", desc);
        cr_assert_eq(f.setup_flags & IORING_SETUP_DEFER_TASKRUN, 0);
        if (bf.defer_taskrun && !(disable & URT_RING_COOP_TASKRUN))
            cr_assert(f.coop_taskrun, "a kernel with DEFER_TASKRUN has COOP_TASKRUN: %s", desc);
    } else if (!(disable & URT_RING_SINGLE_ISSUER)) {
        cr_assert_eq(f.defer_taskrun, bf.defer_taskrun, "%s", desc);
    }
    if ((disable & URT_RING_SINGLE_ISSUER) && !(disable & URT_RING_COOP_TASKRUN) && (bf.defer_taskrun || bf.coop_taskrun))
        cr_assert(f.coop_taskrun, "without SINGLE_ISSUER, COOP_TASKRUN is the fallback: %s", desc);
    if (disable & URT_RING_COOP_TASKRUN)
        cr_assert_not(f.coop_taskrun, "%s", desc);
    if (disable & URT_RING_SINGLE_ISSUER) {
        cr_assert_not(f.single_issuer, "%s", desc);
        cr_assert_not(f.defer_taskrun, "DEFER_TASKRUN needs SINGLE_ISSUER");
    } else if (bf.single_issuer) {
        cr_assert(f.single_issuer, "SINGLE_ISSUER kept when only other flags are masked: %s", desc);
    }
    if ((disable & (URT_RING_DEFER_TASKRUN | URT_RING_COOP_TASKRUN | URT_RING_SINGLE_ISSUER)) ==
        (URT_RING_DEFER_TASKRUN | URT_RING_COOP_TASKRUN | URT_RING_SINGLE_ISSUER))
        cr_assert_eq(f.setup_flags, 0, "every setup flag masked: %s", desc);
    /* The line names the backend; io_uring's fields only where it runs
     * (the portable backend, e.g. under urt-nouring, has none). */
    bool uring = f.backend == URT_BACKEND_IO_URING;
    cr_assert_not_null(strstr(desc, uring ? "backend=io_uring setup=" : "backend=portable "), "%s", desc);
    if (!uring)
        cr_assert_null(strstr(desc, "ringfd="), "%s", desc);
    if (disable & URT_RING_RINGLESS_MSG) {
        cr_assert_not(f.ringless_msg);
        cr_assert(!uring || strstr(desc, "per-thread-ring"), "%s", desc);
    } else {
        cr_assert_eq(f.ringless_msg, bf.ringless_msg);
    }
    if (disable & URT_RING_REGISTERED_FD) {
        cr_assert_not(f.registered_ring_fd);
        cr_assert(!uring || strstr(desc, "ringfd=plain"), "%s", desc);
    } else {
        cr_assert_eq(f.registered_ring_fd, bf.registered_ring_fd);
    }
    if (disable & URT_RING_EXT_ARG)
        cr_assert_not(f.ext_arg);
    else
        cr_assert_eq(f.ext_arg, bf.ext_arg);
    cr_assert_eq(f.kernel_features, bf.kernel_features);

    /* Tasks run. */
    enum { N = 2000 };
    struct probe *p = calloc(N, sizeof(*p));
    cr_assert_not_null(p);
    for (int i = 0; i < N; i++) {
        probe_init(&p[i]);
        cr_assert_eq(urt_spawn(g_rt, probe_where_fn, &p[i], 0), 0);
    }
    for (int i = 0; i < N; i++)
        cr_assert(probe_wait(&p[i], 10000), "task %d never ran", i);
    free(p);

    /* Wake-ups reach suspended workers, from other threads and from workers. */
    uint64_t sent0, recv0;
    rt_wake_counts(g_rt, &sent0, &recv0);
    struct urt_stats *before = urt_stats_snapshot(g_rt);
    enum { ROUNDS = 20 };
    for (int round = 0; round < ROUNDS; round++) {
        cr_assert(rt_wait_all_sleeping(g_rt, 2, 10000), "round %d: workers never suspended", round);
        struct wake_round wr;
        memset(&wr, 0, sizeof(wr));
        probe_init(&wr.first);
        probe_init(&wr.urgent);
        urt_task_init(&wr.first.task, first_fn, &wr);
        uint64_t t0 = now_ns();
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, wake_round_thread, &wr), 0);
        pthread_join(th, NULL);
        cr_assert_eq(atomic_load(&wr.errors), 0);
        cr_assert(atomic_load(&wr.first_ok), "round %d: a suspended worker was not woken from a foreign thread",
                  round);
        cr_assert(probe_wait(&wr.urgent, 10000), "round %d: the urgent child was not run", round);
        cr_assert_lt(now_ns() - t0, 10ull * 1000000000ull);
    }
    struct urt_stats *after = urt_stats_snapshot(g_rt);
    /* Usually one foreign wake per round; a round may find the wake of an
     * earlier one still in flight (wake_pending) and rely on it. */
    cr_assert_geq(after->foreign_wakes_sent - before->foreign_wakes_sent, ROUNDS / 2,
                  "suspended workers were woken from foreign threads");
    cr_assert_gt(after->total.wakes_sent - before->total.wakes_sent, 0, "a worker woke a peer through its ring");
    cr_assert_geq(after->total.suspends - before->total.suspends, ROUNDS / 2);
    urt_stats_free(before);
    urt_stats_free(after);
    cr_assert(rt_wait_all_sleeping(g_rt, 2, 10000));
    uint64_t sent, recv;
    rt_wake_counts(g_rt, &sent, &recv);
    cr_assert_leq(recv, sent, "received %lu wakes, sent %lu", (unsigned long)recv, (unsigned long)sent);
    cr_assert_leq(sent - recv, 2, "at most one wake in flight per worker (sent %lu, received %lu)",
                  (unsigned long)sent, (unsigned long)recv);
    /* Destroy wakes the suspended workers (60 s timeout): it must not wait. */
    uint64_t d0 = now_ns();
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_lt(now_ns() - d0, 5ull * 1000000000ull, "destroy took %.2f s with suspended workers",
                 (double)(now_ns() - d0) / 1e9);
}

#define D URT_RING_DEFER_TASKRUN
#define C URT_RING_COOP_TASKRUN
#define S URT_RING_SINGLE_ISSUER

Test(ring_fallback, all_features, .timeout = 120) { fallback_case(0); }
Test(ring_fallback, no_defer_taskrun, .timeout = 120) { fallback_case(D); }
Test(ring_fallback, no_defer_no_coop, .timeout = 120) { fallback_case(D | C); }
Test(ring_fallback, no_setup_flags, .timeout = 120) { fallback_case(D | C | S); }
Test(ring_fallback, no_setup_flags_no_ringless, .timeout = 120) { fallback_case(D | C | S | URT_RING_RINGLESS_MSG); }
Test(ring_fallback, no_setup_flags_no_ringless_no_regfd, .timeout = 120)
{
    fallback_case(D | C | S | URT_RING_RINGLESS_MSG | URT_RING_REGISTERED_FD);
}
Test(ring_fallback, nothing_at_all, .timeout = 120) { fallback_case(URT_RING_ALL_FEATURES); }
Test(ring_fallback, only_ringless_masked, .timeout = 120) { fallback_case(URT_RING_RINGLESS_MSG); }
Test(ring_fallback, only_ext_arg_masked, .timeout = 120) { fallback_case(URT_RING_EXT_ARG); }

/* ---- C5: a thread that submits to two runtimes keeps its preferred worker in each ---------- */

struct two_rt {
    urt_runtime *rt[2];
    struct probe *probes[2];
    int n;
    _Atomic int errors;
};

static urt_runtime *g_two[2];

static enum urt_task_result probe_rt0_fn(struct urt_task *t, void *arg)
{
    atomic_store(&((struct probe *)arg)->worker, urt_current_worker(g_two[0]));
    return probe_fn(t, arg);
}

static enum urt_task_result probe_rt1_fn(struct urt_task *t, void *arg)
{
    atomic_store(&((struct probe *)arg)->worker, urt_current_worker(g_two[1]));
    return probe_fn(t, arg);
}

static void *alternating_submitter(void *arg)
{
    struct two_rt *tr = arg;
    for (int i = 0; i < tr->n; i++) {
        for (int r = 0; r < 2; r++) {
            struct probe *p = &tr->probes[r][i];
            if (urt_spawn(tr->rt[r], r ? probe_rt1_fn : probe_rt0_fn, p, 0))
                atomic_fetch_add(&tr->errors, 1);
        }
    }
    return NULL;
}

Test(placement, preferred_worker_kept_per_runtime, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 3);
    g_two[0] = rt_create_or_skip(&c);
    g_two[1] = rt_create_or_skip(&c);
    struct two_rt tr = {.rt = {g_two[0], g_two[1]}, .n = 2000};
    for (int r = 0; r < 2; r++) {
        tr.probes[r] = calloc((size_t)tr.n, sizeof(struct probe));
        cr_assert_not_null(tr.probes[r]);
        for (int i = 0; i < tr.n; i++)
            probe_init(&tr.probes[r][i]);
    }
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, alternating_submitter, &tr), 0);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&tr.errors), 0);
    /* Every submission of the thread went to one worker's inbox per
     * runtime: only that worker drained an inbox. A task ran elsewhere
     * only if a peer stole it from that worker's deque (the placement
     * exception: a peer that cannot suspend while a deque holds work polls,
     * and steals after stealing_wait empty polls; on a loaded machine the
     * preferred worker's vCPU may be away that long), so the counts match. */
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < tr.n; i++)
            cr_assert(probe_wait(&tr.probes[r][i], 10000));
        struct urt_stats *st = urt_stats_snapshot(g_two[r]); /* after every task ran: the counts are final */
        cr_assert_not_null(st);
        int preferred = -1;
        for (uint32_t w = 0; w < st->n_workers; w++) {
            if (st->workers[w].inbox_drains == 0)
                continue;
            cr_assert_eq(preferred, -1, "runtime %d: workers %d and %u both took tasks from their inbox", r,
                         preferred, w);
            preferred = (int)w;
        }
        cr_assert_geq(preferred, 0, "runtime %d: no worker took a task from its inbox", r);
        uint64_t moved = 0;
        for (int i = 0; i < tr.n; i++) {
            int w = atomic_load(&tr.probes[r][i].worker);
            cr_assert(w >= 0 && w < 3);
            if (w != preferred)
                moved++;
        }
        cr_assert_eq(moved, st->total.tasks_stolen,
                     "runtime %d: %lu of %d tasks of one thread left its preferred worker %d, %lu stolen", r,
                     (unsigned long)moved, tr.n, preferred, (unsigned long)st->total.tasks_stolen);
        urt_stats_free(st);
    }
    for (int r = 0; r < 2; r++) {
        rt_destroy_clean(g_two[r], URT_SHUTDOWN_DRAIN, 0);
        free(tr.probes[r]);
    }
}

/* The per-thread task cache of urt_spawn must survive switching runtimes:
 * a thread alternating between two runtimes must not take a fresh batch of
 * tasks from the pool (and strand the rest of its cache) at each switch. */
static long resident_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    long size = 0, res = 0;
    cr_assert_eq(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static enum urt_task_result nop_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add((_Atomic uint64_t *)arg, 1);
    return URT_TASK_DONE;
}

Test(placement, spawn_cache_kept_per_runtime, .timeout = 120)
{
    struct urt_config c;
    test_config(&c, 1);
    urt_runtime *a = rt_create_or_skip(&c), *b = rt_create_or_skip(&c);
    enum { SWITCHES = 20000 };
    _Atomic uint64_t ran = 0;
    /* warm up both pools */
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(urt_spawn(a, nop_fn, &ran, 0), 0);
        cr_assert_eq(urt_spawn(b, nop_fn, &ran, 0), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&ran) == 2000, 10000));
    long before = resident_kb();
    for (int i = 0; i < SWITCHES; i++) {
        cr_assert_eq(urt_spawn(a, nop_fn, &ran, 0), 0);
        cr_assert_eq(urt_spawn(b, nop_fn, &ran, 0), 0);
        if (i % 1000 == 999) /* keep the queues short: growth must come from the pools */
            cr_assert(WAIT_UNTIL(atomic_load(&ran) == 2000 + 2ull * (i + 1), 10000));
    }
    cr_assert(WAIT_UNTIL(atomic_load(&ran) == 2000 + 2ull * SWITCHES, 10000));
    long grown = resident_kb() - before;
    /* Stranding a cache per switch costs a 64-task batch per switch:
     * 2 x 20000 x 64 x sizeof(struct urt_task) = ~180 MB. */
    cr_assert_lt(grown, 16 * 1024, "resident memory grew by %ld kB over %d runtime switches", grown, SWITCHES);
    rt_destroy_clean(a, URT_SHUTDOWN_DRAIN, 0);
    rt_destroy_clean(b, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- SQPOLL (opt-in): tasks run and suspended workers wake ----------------------------------- */

Test(ring_fallback, sqpoll_opt_in, .timeout = 120)
{
    struct urt_config c;
    test_config(&c, 2);
    c.sqpoll = true;
    c.worker_try_count = 1;
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(&c, &rt);
    if (err == -EPERM || err == -ENOSYS || err == -EINVAL)
        cr_skip_test("SQPOLL rings not available here: %d %s", err, urt_last_error());
    cr_assert_eq(err, 0, "%s", urt_last_error());
    g_rt = rt;
    struct urt_features f;
    urt_runtime_features(rt, &f);
    cr_assert(f.sqpoll);
    cr_assert(f.setup_flags & IORING_SETUP_SQPOLL);
    cr_assert_not(f.defer_taskrun, "DEFER_TASKRUN is not allowed with SQPOLL");
    for (int round = 0; round < 20; round++) {
        cr_assert(rt_wait_all_sleeping(rt, 2, 10000), "round %d", round);
        struct wake_round wr;
        memset(&wr, 0, sizeof(wr));
        probe_init(&wr.first);
        probe_init(&wr.urgent);
        urt_task_init(&wr.first.task, first_fn, &wr);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, wake_round_thread, &wr), 0);
        pthread_join(th, NULL);
        cr_assert_eq(atomic_load(&wr.errors), 0);
        cr_assert(atomic_load(&wr.first_ok), "round %d: a suspended worker was not woken", round);
        cr_assert(probe_wait(&wr.urgent, 10000), "round %d: the urgent child (wake from a worker's SQPOLL ring)",
                  round);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(ring_fallback, only_single_issuer_masked, .timeout = 120) { fallback_case(S); }
Test(ring_fallback, only_coop_masked, .timeout = 120) { fallback_case(C); }
Test(ring_fallback, only_registered_fd_masked, .timeout = 120) { fallback_case(URT_RING_REGISTERED_FD); }

/* Per-submission round robin holds for urt_spawn from short-lived threads
 * too: a thread's first spawn must not consume a round-robin slot of its own
 * (with 2 workers that would send every thread's single spawn to worker 1). */
struct single_spawn {
    struct probe p;
    _Atomic int err;
};

static void *single_spawn_main(void *arg)
{
    struct single_spawn *ss = arg;
    atomic_store(&ss->err, urt_spawn(g_rt, probe_where_fn, &ss->p, 0));
    return NULL;
}

Test(placement, round_robin_spawn_from_short_lived_threads, .timeout = 60)
{
    struct urt_config c;
    placement_config(&c, 2);
    c.use_preferred_worker_for_current_thread = false;
    g_rt = rt_create_or_skip(&c);
    enum { THREADS = 20 };
    int per_worker[2] = {0};
    for (int i = 0; i < THREADS; i++) {
        struct single_spawn ss;
        memset(&ss, 0, sizeof(ss));
        probe_init(&ss.p);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, single_spawn_main, &ss), 0);
        pthread_join(th, NULL);
        cr_assert_eq(atomic_load(&ss.err), 0);
        cr_assert(probe_wait(&ss.p, 10000));
        int w = atomic_load(&ss.p.worker);
        cr_assert(w == 0 || w == 1);
        per_worker[w]++;
    }
    cr_assert_eq(per_worker[0], THREADS / 2, "round robin per submission: %d tasks on worker 0, %d on worker 1",
                 per_worker[0], per_worker[1]);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- submission arguments and urt_current_worker ------------------------------------------------ */

static _Atomic int never_calls;

static enum urt_task_result never_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&never_calls, 1);
    return URT_TASK_DONE;
}

static void never_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&never_calls, 1);
}

struct other_rt_probe {
    urt_runtime *other;
    _Atomic int in_own, in_other;
    _Atomic bool ran;
};

static enum urt_task_result other_rt_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct other_rt_probe *o = arg;
    atomic_store(&o->in_own, urt_current_worker(g_rt));
    atomic_store(&o->in_other, urt_current_worker(o->other));
    atomic_store(&o->ran, true);
    return URT_TASK_DONE;
}

Test(placement, submit_rejects_bad_arguments_and_never_runs_them, .timeout = 30)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    struct urt_task t;
    urt_task_init(&t, never_fn, NULL);
    t.cancel = never_cancel;
    cr_assert_eq(urt_task_submit(NULL, &t, 0), -EINVAL);
    cr_assert_eq(urt_task_submit(g_rt, NULL, 0), -EINVAL);
    cr_assert_eq(urt_task_submit(g_rt, &t, 0x100), -EINVAL, "unknown flag");
    cr_assert_eq(urt_task_submit(g_rt, &t, ~(unsigned)URT_SUBMIT_FLAGS_ALL), -EINVAL);
    struct urt_task nofn;
    urt_task_init(&nofn, NULL, NULL);
    cr_assert_eq(urt_task_submit(g_rt, &nofn, 0), -EINVAL, "task without fn");
    cr_assert_eq(urt_spawn(NULL, never_fn, NULL, 0), -EINVAL);
    cr_assert_eq(urt_spawn(g_rt, NULL, NULL, 0), -EINVAL);
    cr_assert_eq(urt_spawn_ex(g_rt, never_fn, never_cancel, NULL, 0x80), -EINVAL);
    /* urt_task_init clears cancel */
    struct urt_task fresh;
    memset(&fresh, 0xff, sizeof(fresh));
    urt_task_init(&fresh, never_fn, &fresh);
    cr_assert_eq(fresh.fn, never_fn);
    cr_assert_eq(fresh.arg, &fresh);
    cr_assert_null(fresh.cancel);
    /* urt_current_worker: -1 for NULL and for threads that are not its workers */
    cr_assert_eq(urt_current_worker(NULL), -1);
    cr_assert_eq(urt_current_worker(g_rt), -1);
    struct urt_config c1;
    test_config(&c1, 1);
    struct other_rt_probe o = {.other = rt_create_or_skip(&c1)};
    cr_assert_eq(urt_spawn(g_rt, other_rt_fn, &o, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&o.ran), 10000));
    cr_assert(atomic_load(&o.in_own) == 0 || atomic_load(&o.in_own) == 1);
    cr_assert_eq(atomic_load(&o.in_other), -1, "a worker of another runtime is not a worker of this one");
    rt_destroy_clean(o.other, URT_SHUTDOWN_DRAIN, 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_CANCEL, 0);
    cr_assert_eq(atomic_load(&never_calls), 0, "a failed submission never calls fn or cancel");
}
