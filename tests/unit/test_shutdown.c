/*
 * tests/unit/test_shutdown.c — urt_runtime_destroy in both modes (SPEC C10,
 * urt/runtime.h lifecycle rules 3 and 4).
 *
 *  - DRAIN with work in flight: binary spawn trees still growing when destroy
 *    starts, plus tasks that yield a bounded number of times; every node runs
 *    exactly once and destroy returns 0.
 *  - CANCEL with queued work: every worker held by a blocker, thousands of
 *    tasks queued behind them (embedded tasks with a cancel callback, spawned
 *    ones with urt_spawn_ex, yielders that never finish); each task ends
 *    exactly once — run or cancelled, never both, never twice — and destroy
 *    returns the number cancelled. The blockers are released only once a
 *    foreign thread's submission is refused with -ESHUTDOWN, so destroy has
 *    started for sure and the queued tasks really are cancelled.
 *  - Foreign submissions racing destroy: each is accepted (and then runs or is
 *    cancelled) or refused with -ESHUTDOWN; after the first refusal every
 *    later one is refused. A blocker keeps destroy from returning until the
 *    submitting thread has stopped, so no call touches a freed runtime.
 *  - CANCEL while running tasks keep spawning (trees far too big to finish):
 *    spawned == ran + cancelled, destroy returns the number cancelled.
 *  - destroy(NULL) == 0, an unknown mode -> -EINVAL (runtime unharmed), destroy
 *    from a worker -> -EDEADLK; create/destroy cycles in both modes.
 *  - Resources: no file descriptor left behind (worker rings, probe ring,
 *    per-thread wake rings of threads that exited), also when create fails
 *    half-way because rings cannot be created (RLIMIT_NOFILE); a thread that
 *    cannot open a wake ring of its own still wakes a suspended worker at once.
 * Memory leaks (task pool, rings, per-thread wake rings) are LeakSanitizer's
 * job in the ASan build (leak_check() in tests/helpers.h).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include <urt/lane.h>

#include "tests/helpers.h"
#include "tests/race_destroy.h"

static urt_runtime *g_rt;

/* ---- DRAIN with a growing tree ---------------------------------------------------- */

static _Atomic uint64_t tree_runs, tree_errors;
static _Atomic uint32_t *node_runs; /* per node id */

/* arg = heap id << 8 | levels still to spawn below; children of n: 2n, 2n+1. */
static enum urt_task_result tree_fn(struct urt_task *t, void *arg)
{
    (void)t;
    uintptr_t v = (uintptr_t)arg;
    uint32_t id = (uint32_t)(v >> 8), left = (uint32_t)(v & 0xff);
    atomic_fetch_add_explicit(&node_runs[id], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tree_runs, 1, memory_order_relaxed);
    if (left > 0) {
        for (uint32_t k = 0; k < 2; k++) {
            uintptr_t child = ((uintptr_t)(2 * id + k) << 8) | (left - 1);
            if (urt_spawn(g_rt, tree_fn, (void *)child, 0))
                atomic_fetch_add(&tree_errors, 1);
        }
    }
    return URT_TASK_DONE;
}

struct yielder {
    struct urt_task task;
    _Atomic int calls;
    int yields_left;         /* < 0: yields forever */
    _Atomic int done, cancelled;
};

static enum urt_task_result yielder_fn(struct urt_task *t, void *arg)
{
    struct yielder *y = arg;
    (void)t;
    atomic_fetch_add(&y->calls, 1);
    if (y->yields_left != 0) {
        if (y->yields_left > 0)
            y->yields_left--;
        return URT_TASK_YIELD;
    }
    atomic_fetch_add(&y->done, 1);
    return URT_TASK_DONE;
}

static void yielder_cancel(struct urt_task *t, void *arg)
{
    struct yielder *y = arg;
    (void)t;
    atomic_fetch_add(&y->cancelled, 1);
}

static void drain_case(uint32_t workers, uint32_t depth, uint32_t roots)
{
    struct urt_config c;
    test_config(&c, workers);
    c.worker_try_count = 10;
    g_rt = rt_create_or_skip(&c);
    uint32_t nodes_per_tree = (1u << (depth + 1)) - 1;
    size_t n_ids = (size_t)roots << (depth + 1);
    node_runs = calloc(n_ids, sizeof(*node_runs));
    cr_assert_not_null(node_runs);
    atomic_store(&tree_runs, 0);
    atomic_store(&tree_errors, 0);

    enum { N_YIELDERS = 64 };
    struct yielder *ys = calloc(N_YIELDERS, sizeof(*ys));
    cr_assert_not_null(ys);
    for (int i = 0; i < N_YIELDERS; i++) {
        ys[i].yields_left = 1 + i % 50;
        urt_task_init(&ys[i].task, yielder_fn, &ys[i]);
        ys[i].task.cancel = yielder_cancel;
        cr_assert_eq(urt_task_submit(g_rt, &ys[i].task, 0), 0);
    }
    /* Root r has heap id roots + r: no root is an ancestor of another, so
     * the subtrees' ids (children of n: 2n, 2n + 1) never overlap, and all
     * stay below roots << (depth + 1). */
    for (uint32_t r = 0; r < roots; r++) {
        uintptr_t root = ((uintptr_t)(roots + r) << 8) | depth;
        cr_assert_eq(urt_spawn(g_rt, tree_fn, (void *)root, 0), 0);
    }
    /* destroy while the trees grow */
    int ret = urt_runtime_destroy(g_rt, URT_SHUTDOWN_DRAIN);
    cr_assert_eq(ret, 0, "drain returned %d (%s)", ret, urt_last_error());
    cr_assert_eq(atomic_load(&tree_errors), 0);
    cr_assert_eq(atomic_load(&tree_runs), (uint64_t)roots * nodes_per_tree, "ran %lu of %lu tree nodes",
                 (unsigned long)atomic_load(&tree_runs), (unsigned long)roots * nodes_per_tree);
    /* every node of every subtree exactly once, nothing else */
    uint64_t ones = 0;
    for (size_t id = 0; id < n_ids; id++) {
        uint32_t v = atomic_load(&node_runs[id]);
        cr_assert_leq(v, 1, "node %zu ran %u times", id, v);
        ones += v;
    }
    cr_assert_eq(ones, (uint64_t)roots * nodes_per_tree);
    for (int i = 0; i < N_YIELDERS; i++) {
        cr_assert_eq(atomic_load(&ys[i].done), 1, "yielder %d: done %d", i, atomic_load(&ys[i].done));
        cr_assert_eq(atomic_load(&ys[i].cancelled), 0, "drain cancels nothing");
        cr_assert_eq(atomic_load(&ys[i].calls), 2 + i % 50);
    }
    free(ys);
    free(node_runs);
    leak_check();
}

Test(shutdown, drain_runs_growing_trees_and_yielders, .timeout = 120)
{
    drain_case(2, SCALE(14, 11), 4);
}

Test(shutdown, drain_single_worker, .timeout = 120)
{
    drain_case(1, SCALE(12, 10), 2);
}

Test(shutdown, drain_four_workers, .timeout = 120)
{
    drain_case(4, SCALE(13, 10), 8);
}

/* ---- CANCEL with queued tasks --------------------------------------------------------- */

struct blocker {
    struct urt_task task;
    _Atomic bool started;
    _Atomic bool *release;
};

static enum urt_task_result blocker_fn(struct urt_task *t, void *arg)
{
    struct blocker *b = arg;
    (void)t;
    atomic_store(&b->started, true);
    uint64_t deadline = now_ns() + 30ull * 1000000000ull;
    while (!atomic_load(b->release) && now_ns() < deadline)
        sleep_us(100);
    return URT_TASK_DONE;
}

struct counted {
    struct urt_task task;
    _Atomic uint32_t ran, cancelled;
};

static enum urt_task_result counted_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct counted *c = arg;
    atomic_fetch_add(&c->ran, 1);
    return URT_TASK_DONE;
}

static void counted_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct counted *c = arg;
    atomic_fetch_add(&c->cancelled, 1);
}

/* Foreign thread: submits probes until one is refused with -ESHUTDOWN (so
 * destroy has started), checks that later ones are refused too, then lets
 * the blockers go. */
struct refuser {
    struct counted *probes;
    size_t cap;
    _Atomic size_t accepted;
    _Atomic int other_errors;
    _Atomic int refused_later;
    _Atomic bool *release;
};

static void *refuser_main(void *arg)
{
    struct refuser *r = arg;
    for (size_t i = 0;; i++) {
        if (i == r->cap) { /* destroy never refused us: report, and let the blockers go */
            atomic_fetch_add(&r->other_errors, 1);
            break;
        }
        struct counted *p = &r->probes[i];
        urt_task_init(&p->task, counted_fn, p);
        p->task.cancel = counted_cancel;
        int err = urt_task_submit(g_rt, &p->task, 0);
        if (err == -ESHUTDOWN)
            break;
        if (err) {
            atomic_fetch_add(&r->other_errors, 1);
            break;
        }
        atomic_store(&r->accepted, i + 1);
        sleep_us(20);
    }
    /* Destroy has started: everything from now on is refused. */
    for (int k = 0; k < 200; k++) {
        struct counted dummy;
        urt_task_init(&dummy.task, counted_fn, &dummy);
        if (urt_task_submit(g_rt, &dummy.task, k & 1 ? URT_SUBMIT_URGENT : 0) == -ESHUTDOWN &&
            urt_spawn(g_rt, counted_fn, &dummy, 0) == -ESHUTDOWN)
            atomic_fetch_add(&r->refused_later, 1);
    }
    atomic_store(r->release, true);
    return NULL;
}

static enum urt_task_result never_run_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return URT_TASK_DONE;
}

static void cancel_case(uint32_t workers, size_t n_tasks)
{
    struct urt_config c;
    test_config(&c, workers);
    c.use_preferred_worker_for_current_thread = false; /* round robin: a blocker per worker */
    c.stealing_wait = 1000000;
    g_rt = rt_create_or_skip(&c);

    _Atomic bool release = false;
    struct blocker *bl = calloc(workers, sizeof(*bl));
    cr_assert_not_null(bl);
    for (uint32_t i = 0; i < workers; i++) {
        bl[i].release = &release;
        urt_task_init(&bl[i].task, blocker_fn, &bl[i]);
        cr_assert_eq(urt_task_submit(g_rt, &bl[i].task, 0), 0);
    }
    for (uint32_t i = 0; i < workers; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&bl[i].started), 10000), "blocker %u never started", i);

    /* Queue: embedded tasks (half with a cancel callback submitted from here),
     * spawned ones with urt_spawn_ex, and yielders that never finish. */
    struct counted *tasks = calloc(n_tasks, sizeof(*tasks));
    cr_assert_not_null(tasks);
    for (size_t i = 0; i < n_tasks; i++) {
        if (i % 2) {
            urt_task_init(&tasks[i].task, counted_fn, &tasks[i]);
            tasks[i].task.cancel = counted_cancel;
            cr_assert_eq(urt_task_submit(g_rt, &tasks[i].task, i % 7 == 0 ? URT_SUBMIT_URGENT : 0), 0);
        } else {
            cr_assert_eq(urt_spawn_ex(g_rt, counted_fn, counted_cancel, &tasks[i], 0), 0);
        }
    }
    enum { N_YIELDERS = 16 };
    struct yielder ys[N_YIELDERS];
    memset(ys, 0, sizeof(ys));
    for (int i = 0; i < N_YIELDERS; i++) {
        ys[i].yields_left = -1; /* forever */
        urt_task_init(&ys[i].task, yielder_fn, &ys[i]);
        ys[i].task.cancel = yielder_cancel;
        cr_assert_eq(urt_task_submit(g_rt, &ys[i].task, 0), 0);
    }
    /* A task without a cancel callback is cancelled silently but counted. */
    struct urt_task plain;
    urt_task_init(&plain, never_run_fn, NULL);
    cr_assert_eq(urt_task_submit(g_rt, &plain, 0), 0);

    struct refuser rf;
    memset(&rf, 0, sizeof(rf));
    rf.cap = 100000;
    rf.probes = calloc(rf.cap, sizeof(*rf.probes));
    rf.release = &release;
    cr_assert_not_null(rf.probes);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, refuser_main, &rf), 0);

    int cancelled_ret = urt_runtime_destroy(g_rt, URT_SHUTDOWN_CANCEL);
    pthread_join(th, NULL);
    cr_assert_geq(cancelled_ret, 0, "%s", urt_last_error());
    cr_assert_eq(atomic_load(&rf.other_errors), 0);
    cr_assert_eq(atomic_load(&rf.refused_later), 200, "every submission after the first -ESHUTDOWN is refused");

    uint64_t ran = 0, cancelled = 0;
    for (size_t i = 0; i < n_tasks; i++) {
        uint32_t r = atomic_load(&tasks[i].ran), k = atomic_load(&tasks[i].cancelled);
        cr_assert_eq(r + k, 1, "task %zu: ran %u, cancelled %u", i, r, k);
        ran += r;
        cancelled += k;
    }
    size_t accepted = atomic_load(&rf.accepted);
    for (size_t i = 0; i < accepted; i++) {
        uint32_t r = atomic_load(&rf.probes[i].ran), k = atomic_load(&rf.probes[i].cancelled);
        cr_assert_eq(r + k, 1, "probe %zu: ran %u, cancelled %u", i, r, k);
        ran += r;
        cancelled += k;
    }
    for (size_t i = accepted; i < rf.cap; i++)
        cr_assert_eq(atomic_load(&rf.probes[i].ran) + atomic_load(&rf.probes[i].cancelled), 0);
    uint64_t ycancelled = 0;
    for (int i = 0; i < N_YIELDERS; i++) {
        cr_assert_eq(atomic_load(&ys[i].done), 0);
        cr_assert_eq(atomic_load(&ys[i].cancelled), 1, "yielder %d cancelled %d times", i,
                     atomic_load(&ys[i].cancelled));
        ycancelled++;
    }
    cr_assert_eq(ran + cancelled, n_tasks + accepted, "(ran %lu + cancelled %lu) != submitted %zu",
                 (unsigned long)ran, (unsigned long)cancelled, n_tasks + accepted);
    /* The blockers held every worker until destroy had started: nothing of
     * the queue could run... except what a worker picked between the
     * release and seeing the stop; the queued tasks were mostly cancelled. */
    cr_assert_gt(cancelled, n_tasks / 2, "only %lu of %zu queued tasks were cancelled", (unsigned long)cancelled,
                 n_tasks);
    /* destroy's count: every cancelled task, with or without a callback */
    cr_assert_geq((uint64_t)cancelled_ret, cancelled + ycancelled);
    cr_assert_leq((uint64_t)cancelled_ret, cancelled + ycancelled + 1, "the plain task is the only one uncounted");
    free(rf.probes);
    free(tasks);
    free(bl);
    leak_check();
}

Test(shutdown, cancel_queued_tasks_one_worker, .timeout = 120)
{
    cancel_case(1, SCALE(20000, 5000));
}

Test(shutdown, cancel_queued_tasks_three_workers, .timeout = 120)
{
    cancel_case(3, SCALE(30000, 6000));
}

/* Yielders in a cancel with nothing blocking: each ends exactly once. */
Test(shutdown, cancel_with_running_yielders, .timeout = 60)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    enum { N = 200 };
    struct yielder *ys = calloc(N, sizeof(*ys));
    cr_assert_not_null(ys);
    for (int i = 0; i < N; i++) {
        ys[i].yields_left = i % 2 ? -1 : 1000;
        urt_task_init(&ys[i].task, yielder_fn, &ys[i]);
        ys[i].task.cancel = yielder_cancel;
        cr_assert_eq(urt_task_submit(g_rt, &ys[i].task, 0), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&ys[N - 1].calls) > 10, 10000));
    int ret = urt_runtime_destroy(g_rt, URT_SHUTDOWN_CANCEL);
    int cancelled = 0;
    for (int i = 0; i < N; i++) {
        int d = atomic_load(&ys[i].done), k = atomic_load(&ys[i].cancelled);
        cr_assert_eq(d + k, 1, "yielder %d: done %d cancelled %d", i, d, k);
        if (i % 2)
            cr_assert_eq(k, 1, "an endless yielder can only end by cancel");
        cancelled += k;
    }
    cr_assert_eq(ret, cancelled, "destroy returned %d, %d cancel callbacks ran", ret, cancelled);
    free(ys);
    leak_check();
}

/* ---- submissions racing destroy ---------------------------------------------------------- */

/* racers threads submit until destroy refuses them (plain spawns, or lane
 * spawns on N_RACE_LANES lanes): the model and its invariants are
 * tests/race_destroy.h's. */
#define N_RACE_LANES 4

static void race_case(enum urt_shutdown mode, int racers, bool lanes)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    char msg[256] = "";
    int rc = race_run(g_rt, mode, racers, lanes ? N_RACE_LANES : 0, false, SCALE(400000, 100000), msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s", msg);
    leak_check();
}

Test(shutdown, foreign_submissions_racing_drain, .timeout = 120)
{
    race_case(URT_SHUTDOWN_DRAIN, 3, false);
}

Test(shutdown, foreign_submissions_racing_cancel, .timeout = 120)
{
    race_case(URT_SHUTDOWN_CANCEL, 3, false);
}

Test(shutdown, foreign_lane_submissions_racing_drain, .timeout = 120)
{
    race_case(URT_SHUTDOWN_DRAIN, 3, true);
}

Test(shutdown, foreign_lane_submissions_racing_cancel, .timeout = 120)
{
    race_case(URT_SHUTDOWN_CANCEL, 3, true);
}


/* ---- argument checks ----------------------------------------------------------------------- */

Test(shutdown, destroy_null_is_a_noop, .timeout = 10)
{
    cr_assert_eq(urt_runtime_destroy(NULL, URT_SHUTDOWN_DRAIN), 0);
    cr_assert_eq(urt_runtime_destroy(NULL, URT_SHUTDOWN_CANCEL), 0);
    cr_assert_eq(urt_runtime_destroy(NULL, (enum urt_shutdown)99), 0);
}

Test(shutdown, destroy_bad_mode_is_einval, .timeout = 30)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    cr_assert_eq(urt_runtime_destroy(g_rt, (enum urt_shutdown)2), -EINVAL);
    cr_assert_not_null(strstr(urt_last_error(), "mode"), "%s", urt_last_error());
    cr_assert_eq(urt_runtime_destroy(g_rt, (enum urt_shutdown)-1), -EINVAL);
    /* the runtime is unharmed */
    _Atomic uint32_t hit = 0;
    cr_assert_eq(urt_spawn(g_rt, race_hit_fn, &hit, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&hit) == 1, 10000));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

struct self_destroy {
    _Atomic int ret;
    _Atomic bool ran;
    char msg[256];
};

static enum urt_task_result self_destroy_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct self_destroy *sd = arg;
    int r = urt_runtime_destroy(g_rt, URT_SHUTDOWN_DRAIN);
    snprintf(sd->msg, sizeof(sd->msg), "%s", urt_last_error());
    atomic_store(&sd->ret, r);
    atomic_store_explicit(&sd->ran, true, memory_order_release);
    return URT_TASK_DONE;
}

Test(shutdown, destroy_from_worker_is_edeadlk, .timeout = 30)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    struct self_destroy sd;
    memset(&sd, 0, sizeof(sd));
    cr_assert_eq(urt_spawn(g_rt, self_destroy_fn, &sd, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load_explicit(&sd.ran, memory_order_acquire), 10000));
    cr_assert_eq(atomic_load(&sd.ret), -EDEADLK);
    cr_assert_not_null(strstr(sd.msg, "worker"), "%s", sd.msg);
    /* still running */
    _Atomic uint32_t hit = 0;
    cr_assert_eq(urt_spawn(g_rt, race_hit_fn, &hit, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&hit) == 1, 10000));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Create and destroy repeatedly, idle and busy, in both modes (rings,
 * threads and the task pool are released every time: LSan checks). */
Test(shutdown, create_destroy_cycles, .timeout = 120)
{
    for (int i = 0; i < SCALE(40, 10); i++) {
        struct urt_config c;
        test_config(&c, 1 + i % 3);
        c.worker_try_count = 1 + (uint32_t)i % 5;
        urt_runtime *rt = rt_create_or_skip(&c);
        g_rt = rt;
        _Atomic uint32_t hits = 0;
        int n = i % 4 == 0 ? 0 : 100 * i;
        for (int k = 0; k < n; k++)
            cr_assert_eq(urt_spawn(rt, race_hit_fn, &hits, 0), 0);
        if (i % 2 == 0) {
            rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
            cr_assert_eq(atomic_load(&hits), (uint32_t)n);
        } else {
            /* race_hit_cancel counts too: every task ends once either way */
            int r = urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
            cr_assert_geq(r, 0);
            cr_assert_eq(atomic_load(&hits), (uint32_t)n - (uint32_t)r, "ran %u, cancelled %d of %d",
                         atomic_load(&hits), r, n);
        }
    }
    leak_check();
}

/* ---- file descriptors: worker rings, probe rings, per-thread wake rings ------------------ */

#include <dirent.h>

static int fd_count(void)
{
    int n = proc_entries("/proc/self/fd");
    cr_assert_geq(n, 0, "/proc/self/fd cannot be read");
    return n;
}

struct one_shot {
    _Atomic uint32_t hit;
    _Atomic int err;
};

static void *one_shot_main(void *arg)
{
    struct one_shot *o = arg;
    int err = urt_spawn(g_rt, race_hit_fn, (void *)&o->hit, 0);
    if (err)
        atomic_store(&o->err, err);
    else if (!WAIT_UNTIL(atomic_load(&o->hit) == 1, 10000))
        atomic_store(&o->err, -ETIMEDOUT);
    return NULL;
}

static void fd_case(uint32_t ring_disable)
{
    int before = fd_count();
    for (int cycle = 0; cycle < 5; cycle++) {
        struct urt_config c;
        test_config(&c, 2);
        c.worker_try_count = 1;
        c.ring_disable = ring_disable;
        g_rt = rt_create_or_skip(&c);
        /* Threads that are not workers come and go; each wakes a suspended
         * worker (with its own small ring unless ring-less messages work). */
        for (int i = 0; i < 40; i++) {
            cr_assert(rt_wait_all_sleeping(g_rt, 2, 10000));
            struct one_shot o;
            memset(&o, 0, sizeof(o));
            pthread_t th;
            cr_assert_eq(pthread_create(&th, NULL, one_shot_main, &o), 0);
            pthread_join(th, NULL);
            cr_assert_eq(atomic_load(&o.err), 0, "thread %d: %d", i, atomic_load(&o.err));
        }
        int running = fd_count();
        /* io_uring: 2 worker rings, this thread's wake ring, the runtime's
         * fallback wake ring; the portable backend: an epoll instance and two
         * eventfds per context (2 workers, the watcher), nothing per thread */
        int own = urt_runtime_backend(g_rt, NULL) == URT_BACKEND_PORTABLE ? 3 * (2 + 1) : 2 + 2;
        cr_assert_leq(running, before + own, "cycle %d: %d fds open with 2 workers, %d before: per-thread rings "
                      "of exited threads are not released", cycle, running, before);
        rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
        int after = fd_count();
        if (cycle == 0) {
            /* destroy wakes workers from this thread: without ring-less
             * messages that gives this thread its own small ring, kept
             * until the thread exits (by design) */
            cr_assert_leq(after, before + 1, "%d fds open after destroy, %d before", after, before);
            before = after;
        }
        cr_assert_eq(after, before, "cycle %d: %d fds open after destroy, %d after the first", cycle, after, before);
    }
}

Test(shutdown, no_fd_leak_ringless, .timeout = 60)
{
    fd_case(0);
}

Test(shutdown, no_fd_leak_per_thread_rings, .timeout = 60)
{
    fd_case(URT_RING_RINGLESS_MSG);
}

Test(shutdown, no_fd_leak_plain_rings, .timeout = 60)
{
    fd_case(URT_RING_ALL_FEATURES);
}

/* ---- CANCEL while tasks keep spawning ------------------------------------------------------- */

/* Every spawn that succeeded ends exactly once: run or cancelled. */
static _Atomic uint64_t grow_spawned, grow_ran, grow_cancelled, grow_spawn_failed;

static enum urt_task_result grow_fn(struct urt_task *t, void *arg);

static void grow_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&grow_cancelled, 1);
}

static enum urt_task_result grow_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&grow_ran, 1);
    uintptr_t left = (uintptr_t)arg;
    if (left == 0)
        return URT_TASK_DONE;
    for (int k = 0; k < 2; k++) {
        int err = urt_spawn_ex(g_rt, grow_fn, grow_cancel, (void *)(left - 1), k ? URT_SUBMIT_URGENT : 0);
        if (err == 0)
            atomic_fetch_add(&grow_spawned, 1);
        else
            atomic_fetch_add(&grow_spawn_failed, 1);
    }
    return URT_TASK_DONE;
}

Test(shutdown, cancel_while_tasks_spawn, .timeout = 120)
{
    uint64_t total_cancelled = 0;
    for (int round = 0; round < SCALE(20, 5); round++) {
        struct urt_config c;
        test_config(&c, 1 + (uint32_t)round % 3);
        c.worker_try_count = 1 + (uint32_t)round % 4;
        g_rt = rt_create_or_skip(&c);
        atomic_store(&grow_spawned, 0);
        atomic_store(&grow_ran, 0);
        atomic_store(&grow_cancelled, 0);
        atomic_store(&grow_spawn_failed, 0);
        for (int r = 0; r < 4; r++) {
            cr_assert_eq(urt_spawn_ex(g_rt, grow_fn, grow_cancel, (void *)(uintptr_t)22, 0), 0);
            atomic_fetch_add(&grow_spawned, 1);
        }
        /* let the trees grow a little, differently each round */
        cr_assert(WAIT_UNTIL(atomic_load(&grow_ran) >= 1000u * (uint64_t)(round % 5 + 1), 10000));
        int ret = urt_runtime_destroy(g_rt, URT_SHUTDOWN_CANCEL);
        cr_assert_geq(ret, 0);
        uint64_t spawned = atomic_load(&grow_spawned), ran = atomic_load(&grow_ran),
                 cancelled = atomic_load(&grow_cancelled);
        cr_assert_eq(atomic_load(&grow_spawn_failed), 0, "spawns from running tasks never fail");
        cr_assert_eq(ran + cancelled, spawned, "round %d: spawned %lu, ran %lu + cancelled %lu", round,
                     (unsigned long)spawned, (unsigned long)ran, (unsigned long)cancelled);
        cr_assert_eq((uint64_t)ret, cancelled, "destroy returned %d, %lu cancel callbacks", ret,
                     (unsigned long)cancelled);
        total_cancelled += cancelled;
        leak_check();
    }
    /* the trees have 2^23 - 1 nodes each: destroy comes long before they end */
    cr_assert_gt(total_cancelled, 0, "no round cancelled anything: the test did not test cancelling");
}

/* ---- create fails cleanly when a worker cannot get its ring ---------------------------------- */

#include <sys/resource.h>

/* The RLIMIT_NOFILE value that leaves exactly `spare` fd numbers free (new
 * fds take the lowest free number below the limit). */
static rlim_t limit_with_spare(int spare)
{
    enum { MAXFD = 4096 };
    static bool open_fd[MAXFD];
    memset(open_fd, 0, sizeof(open_fd));
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd != self && fd < MAXFD)
            open_fd[fd] = true;
    }
    closedir(d);
    int free_seen = 0;
    for (int n = 0; n < MAXFD; n++) {
        if (!open_fd[n] && free_seen++ == spare)
            return (rlim_t)n; /* n itself is the first number not allowed */
    }
    cr_assert_fail("no room");
    return 0;
}

Test(shutdown, create_failure_cleans_up, .timeout = 60)
{
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    int before = fd_count();
    for (int spare = 0; spare <= 5; spare++) {
        /* room for the probe ring and a few worker rings, not for 8 */
        struct rlimit lim = old;
        lim.rlim_cur = limit_with_spare(spare);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
        struct urt_config c;
        test_config(&c, 8);
        urt_runtime *rt = (urt_runtime *)&c;
        int err = urt_runtime_create(&c, &rt);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
        if (err == -ENOSYS || err == -EPERM)
            cr_skip_test("io_uring unavailable");
        cr_assert_lt(err, 0, "create with %d spare fds for 8 rings succeeded", spare);
        cr_assert_null(rt);
        cr_assert_neq(err, -EINVAL, "a resource failure is not a bad configuration: %s", urt_last_error());
        cr_log_info("%d spare fds: %d (%s)", spare, err, urt_last_error());
        cr_assert_not_null(strstr(urt_last_error(), "ring"), "%s", urt_last_error());
        cr_assert_eq(fd_count(), before, "spare %d: %d fds open after the failed create, %d before", spare,
                     fd_count(), before);
        leak_check();
    }
    /* and a create that can succeed does */
    struct urt_config c;
    test_config(&c, 8);
    g_rt = rt_create_or_skip(&c);
    _Atomic uint32_t hit = 0;
    cr_assert_eq(urt_spawn(g_rt, race_hit_fn, &hit, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&hit) == 1, 10000));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- a thread that cannot get a wake ring still wakes a suspended worker ---------------------- */

struct fdless {
    _Atomic uint32_t hit;
    _Atomic int err;
    uint64_t waited_ns;
};

static void *fdless_main(void *arg)
{
    struct fdless *f = arg;
    uint64_t t0 = now_ns();
    int err = urt_spawn(g_rt, race_hit_fn, (void *)&f->hit, 0);
    if (err) {
        atomic_store(&f->err, err);
        return NULL;
    }
    WAIT_UNTIL(atomic_load(&f->hit) == 1, 10000);
    f->waited_ns = now_ns() - t0;
    return NULL;
}

Test(shutdown, wake_from_thread_without_free_fds, .timeout = 60)
{
    struct urt_config c;
    test_config(&c, 1);
    c.worker_try_count = 1;
    c.worker_suspend_timeout_us = 5ull * 1000 * 1000;
    c.ring_disable = URT_RING_RINGLESS_MSG; /* threads that are not workers need a ring of their own */
    g_rt = rt_create_or_skip(&c);
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    for (int round = 0; round < 3; round++) {
        cr_assert(rt_wait_all_sleeping(g_rt, 1, 10000));
        struct fdless f;
        memset(&f, 0, sizeof(f));
        struct rlimit lim = old;
        lim.rlim_cur = limit_with_spare(0);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, fdless_main, &f), 0);
        pthread_join(th, NULL);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
        cr_assert_eq(atomic_load(&f.err), 0);
        cr_assert_eq(atomic_load(&f.hit), 1);
        cr_assert_lt(f.waited_ns, 1000ull * 1000000, "round %d: the task waited %.2f s for the suspend timeout: the "
                     "wake of a thread that could not open its wake ring was lost", round, (double)f.waited_ns / 1e9);
    }
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}
