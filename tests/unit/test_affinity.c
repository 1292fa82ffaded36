/*
 * tests/unit/test_affinity.c — tasks and lanes sent to a given worker
 * (urt_task_submit_to, urt_spawn_to, URT_SUBMIT_LOCAL, urt_lane_create_on)
 * and the NUMA lookups (urt_worker_node, urt_node_worker):
 *  - every task sent to worker k runs on k (urt_current_worker), from foreign
 *    threads and from workers, under a load that keeps the other worker idle
 *    and stealing: per-worker counters bumped without atomics by tasks sent
 *    there add up to what the model says (a task that ran elsewhere, or two
 *    at once on one counter, would lose increments);
 *  - URT_SUBMIT_LOCAL tasks are never stolen;
 *  - a pinned lane's tasks all run on its worker;
 *  - the admission limit counts tasks sent to a worker;
 *  - bad input: worker out of range, contradicting flags, NULL, a node with
 *    no worker: -EINVAL and a message naming it.
 */
#include "helpers.h"

#include <pthread.h>
#include <urt/urt.h>

#define W 2

static urt_runtime *rt;
static uint64_t per_worker[W]; /* plain: only tasks sent to worker k touch per_worker[k] */
static _Atomic uint64_t wrong_worker, ran;

static enum urt_task_result bump(struct urt_task *t, void *arg)
{
    (void)t;
    uintptr_t k = (uintptr_t)arg;
    if (urt_current_worker(rt) != (int)k)
        atomic_fetch_add(&wrong_worker, 1);
    uint64_t v = per_worker[k];
    for (volatile int i = 0; i < 50; i++)
        ; /* widen the window a concurrent bump of the same counter would hit */
    per_worker[k] = v + 1;
    atomic_fetch_add(&ran, 1);
    return URT_TASK_DONE;
}

static urt_runtime *make_rt(uint32_t max_pending)
{
    struct urt_config cfg;
    test_config(&cfg, W);
    cfg.max_pending_tasks = max_pending;
    return rt_create_or_skip(&cfg);
}

#define PER_THREAD SCALE(20000, 3000)

static void *sender(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        uintptr_t k = (id + (uintptr_t)i) % W;
        int err;
        while ((err = urt_spawn_to(rt, (uint32_t)k, bump, NULL, (void *)k, 0)) == -ENOMEM)
            ;
        if (err)
            atomic_fetch_add(&wrong_worker, 1000000);
    }
    return NULL;
}

/* From a worker: fan out to both workers, half of it LOCAL. */
static enum urt_task_result fan(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    int self = urt_current_worker(rt);
    for (int i = 0; i < 200; i++) {
        uintptr_t k = (uintptr_t)(i % W);
        int err = (i & 1) ? urt_spawn_to(rt, (uint32_t)k, bump, NULL, (void *)k, 0)
                          : urt_spawn_ex(rt, bump, NULL, (void *)(uintptr_t)self, URT_SUBMIT_LOCAL);
        if (err)
            atomic_fetch_add(&wrong_worker, 1000000);
    }
    return URT_TASK_DONE;
}

Test(affinity, tasks_run_only_on_their_worker, .timeout = 120)
{
    rt = make_rt(0);
    memset(per_worker, 0, sizeof(per_worker));
    atomic_store(&wrong_worker, 0);
    atomic_store(&ran, 0);
    enum { T = 3 };
    pthread_t th[T];
    for (uintptr_t i = 0; i < T; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, sender, (void *)i), 0);
    int fans = 50;
    for (int i = 0; i < fans; i++)
        cr_assert_eq(urt_spawn(rt, fan, NULL, 0), 0);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    uint64_t expect = (uint64_t)T * PER_THREAD + (uint64_t)fans * 200;
    cr_assert(WAIT_UNTIL(atomic_load(&ran) == expect, 60000), "%lu of %lu ran", (unsigned long)atomic_load(&ran),
              (unsigned long)expect);
    cr_assert_eq(atomic_load(&wrong_worker), 0, "tasks ran on another worker (or a submission failed)");
    cr_assert_eq(per_worker[0] + per_worker[1], expect, "lost increments: two tasks of one worker overlapped");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A task sent to a worker stays there when it yields: a yielded task goes
 * to its worker's yield queue, and from there (when a peer wants work) into
 * the stealable deque, except a task sent to a worker (urt_task_submit_to,
 * URT_SUBMIT_LOCAL), which goes back to its worker's sticky queue. Two sent
 * yielders on worker 0, worker 1 idle and spinning (busy_worker: it never
 * suspends, it only steals): every call must run on worker 0. */
static _Atomic uint32_t sent_yield_calls, sent_yield_elsewhere;

static enum urt_task_result sent_yielder(struct urt_task *t, void *arg)
{
    (void)t;
    if (urt_current_worker(rt) != (int)(uintptr_t)arg)
        atomic_fetch_add(&sent_yield_elsewhere, 1);
    return atomic_fetch_add(&sent_yield_calls, 1) < 200000 ? URT_TASK_YIELD : URT_TASK_DONE;
}

static enum urt_task_result local_yielders(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    cr_assert_eq(urt_spawn_ex(rt, sent_yielder, NULL, (void *)(uintptr_t)urt_current_worker(rt), URT_SUBMIT_LOCAL), 0);
    cr_assert_eq(urt_spawn_ex(rt, sent_yielder, NULL, (void *)(uintptr_t)urt_current_worker(rt), URT_SUBMIT_LOCAL), 0);
    return URT_TASK_DONE;
}

Test(affinity, sent_tasks_that_yield_stay_on_their_worker, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, W);
    cfg.busy_worker = true;
    for (int local = 0; local < 2; local++) {
        rt = rt_create_or_skip(&cfg);
        atomic_store(&sent_yield_calls, 0);
        atomic_store(&sent_yield_elsewhere, 0);
        if (local) {
            cr_assert_eq(urt_spawn_to(rt, 0, local_yielders, NULL, NULL, 0), 0);
        } else {
            cr_assert_eq(urt_spawn_to(rt, 0, sent_yielder, NULL, (void *)0, 0), 0);
            cr_assert_eq(urt_spawn_to(rt, 0, sent_yielder, NULL, (void *)0, 0), 0);
        }
        cr_assert(WAIT_UNTIL(atomic_load(&sent_yield_calls) >= 200002, 30000), "%u calls",
                  atomic_load(&sent_yield_calls));
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        cr_assert_eq(atomic_load(&sent_yield_elsewhere), 0,
                     "%s: %u of %u calls of yielding tasks sent to worker 0 ran on another worker",
                     local ? "URT_SUBMIT_LOCAL" : "urt_spawn_to", atomic_load(&sent_yield_elsewhere),
                     atomic_load(&sent_yield_calls));
    }
}

/* Many sent yielders mixed with plain ones on one worker: the sent ones
 * run there only, the plain ones move into the deque and an idle peer may
 * take them, and every task gets all its calls (a pinned task at the head
 * of the yield queue runs at once; a walk that moves the plain ones keeps
 * the pinned ones in order). */
#define MIX_SENT 64
#define MIX_PLAIN 4
#define MIX_YIELDS 500
static _Atomic uint32_t mix_calls[MIX_SENT + MIX_PLAIN], mix_sent_elsewhere, mix_done;

static enum urt_task_result mix_yielder(struct urt_task *t, void *arg)
{
    (void)t;
    uintptr_t i = (uintptr_t)arg;
    if (i < MIX_SENT && urt_current_worker(rt) != 0)
        atomic_fetch_add(&mix_sent_elsewhere, 1);
    if (atomic_fetch_add(&mix_calls[i], 1) + 1 < MIX_YIELDS)
        return URT_TASK_YIELD;
    atomic_fetch_add(&mix_done, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result mix_root(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    for (uintptr_t i = 0; i < MIX_SENT + MIX_PLAIN; i++)
        cr_assert_eq(urt_spawn_ex(rt, mix_yielder, NULL, (void *)i, i < MIX_SENT ? URT_SUBMIT_LOCAL : 0), 0);
    return URT_TASK_DONE;
}

Test(affinity, sent_and_plain_yielders_mixed_on_one_worker, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, W);
    cfg.busy_worker = true;
    rt = rt_create_or_skip(&cfg);
    memset(mix_calls, 0, sizeof(mix_calls));
    atomic_store(&mix_sent_elsewhere, 0);
    atomic_store(&mix_done, 0);
    cr_assert_eq(urt_spawn_to(rt, 0, mix_root, NULL, NULL, 0), 0);
    bool all = WAIT_UNTIL(atomic_load(&mix_done) == MIX_SENT + MIX_PLAIN, 30000);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert(all, "%u of %d yielders finished", atomic_load(&mix_done), MIX_SENT + MIX_PLAIN);
    for (int i = 0; i < MIX_SENT + MIX_PLAIN; i++)
        cr_assert_eq(atomic_load(&mix_calls[i]), MIX_YIELDS, "yielder %d: %u calls", i, atomic_load(&mix_calls[i]));
    cr_assert_eq(atomic_load(&mix_sent_elsewhere), 0, "%u calls of sent yielders ran on worker 1",
                 atomic_load(&mix_sent_elsewhere));
}

static _Atomic int lane_wrong;
static _Atomic uint64_t lane_ran;

static enum urt_task_result lane_task(struct urt_task *t, void *arg)
{
    (void)t;
    if (urt_current_worker(rt) != (int)(uintptr_t)arg)
        atomic_fetch_add(&lane_wrong, 1);
    atomic_fetch_add(&lane_ran, 1);
    return URT_TASK_DONE;
}

Test(affinity, pinned_lanes_stay_on_their_worker, .timeout = 60)
{
    rt = make_rt(0);
    enum { L = 8, N = 2000 };
    urt_lane *lanes[L];
    for (int i = 0; i < L; i++)
        cr_assert_eq(urt_lane_create_on(rt, (uint32_t)(i % W), &lanes[i]), 0, "%s", urt_last_error());
    for (int n = 0; n < N; n++)
        for (int i = 0; i < L; i++)
            cr_assert_eq(urt_lane_spawn(lanes[i], lane_task, NULL, (void *)(uintptr_t)(i % W),
                                        (n % 7 == 0) ? URT_SUBMIT_URGENT : 0),
                         0);
    cr_assert(WAIT_UNTIL(atomic_load(&lane_ran) == (uint64_t)L * N, 30000));
    cr_assert_eq(atomic_load(&lane_wrong), 0, "a pinned lane ran a task on another worker");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    for (int i = 0; i < L; i++)
        cr_assert_eq(urt_lane_destroy(lanes[i]), 0);
}

static _Atomic int blocked_in;

static enum urt_task_result slow(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    sleep_us(2000);
    return URT_TASK_DONE;
}

Test(affinity, admission_counts_tasks_sent_to_a_worker, .timeout = 60)
{
    rt = make_rt(4);
    int ok = 0, again = 0;
    for (int i = 0; i < 20; i++) {
        int err = urt_spawn_to(rt, 1, slow, NULL, NULL, 0);
        if (err == 0)
            ok++;
        else if (err == -EAGAIN)
            again++;
        else
            cr_assert_fail("urt_spawn_to: %d %s", err, urt_last_error());
    }
    cr_assert_leq(ok, 4 + 1, "the cap of 4 let %d in at once", ok); /* one may have finished meanwhile */
    cr_assert_gt(again, 0, "no -EAGAIN: tasks sent to a worker are not counted");
    cr_assert_eq(urt_spawn_to(rt, 0, slow, NULL, NULL, URT_SUBMIT_BLOCK), 0, "a blocking submission waits");
    atomic_store(&blocked_in, 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(affinity, bad_input_is_refused_with_a_message, .timeout = 30)
{
    rt = make_rt(0);
    struct urt_task t;
    urt_task_init(&t, bump, NULL);
    cr_assert_eq(urt_task_submit_to(rt, W, &t, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "out of range"), "%s", urt_last_error());
    cr_assert_eq(urt_task_submit_to(rt, 0, &t, URT_SUBMIT_URGENT), -EINVAL);
    cr_assert(strstr(urt_last_error(), "URGENT"), "%s", urt_last_error());
    cr_assert_eq(urt_task_submit_to(rt, 0, &t, URT_SUBMIT_LOCAL), -EINVAL);
    cr_assert_eq(urt_task_submit_to(NULL, 0, &t, 0), -EINVAL);
    cr_assert_eq(urt_task_submit_to(rt, 0, NULL, 0), -EINVAL);
    cr_assert_eq(urt_spawn_to(rt, 7, bump, NULL, NULL, 0), -EINVAL);
    cr_assert_eq(urt_spawn_to(rt, 0, NULL, NULL, NULL, 0), -EINVAL);
    urt_lane *l;
    cr_assert_eq(urt_lane_create_on(rt, W, &l), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_lane_create_on"), "%s", urt_last_error());
    cr_assert_eq(urt_worker_node(rt, W), -EINVAL);
    int node0 = urt_worker_node(rt, 0);
    cr_assert_geq(node0, -1);
    cr_assert_eq(urt_node_worker(rt, 12345), -EINVAL);
    cr_assert(strstr(urt_last_error(), "12345"), "%s", urt_last_error());
    int k = urt_node_worker(rt, node0);
    cr_assert(k >= 0 && k < W, "a worker of node %d: %d", node0, k);
    cr_assert_eq(urt_worker_node(rt, (uint32_t)k), node0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
