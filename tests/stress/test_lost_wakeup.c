/*
 * tests/stress/test_lost_wakeup.c — no lost wakeup, no wake storm (SPEC C3).
 *
 * Workers suspend after 1–10 empty polls and their suspend timeout is 60 s,
 * so a worker that misses a wake message sleeps for a minute. Submitter
 * threads (not workers) each submit a task, or a small batch, wait until it
 * ran, pause a random 0–50 µs (sometimes 0.1–2 ms, long enough for every
 * worker to suspend), and repeat; 100,000 tasks per configuration.
 *
 * No rescue hides a lost wake: in the main variants there is one submitter
 * per worker, and a thread's tasks go to its preferred worker's inbox, which
 * no other worker takes from; so a lost wake shows as a wait that does not
 * end. Every wait is bounded at WAIT_LIMIT_S seconds (far below the 60 s
 * suspend timeout; the submitter then gives up and the test fails), the
 * criterion timeout is the backstop, and the whole run must take far less
 * than 60 s. The mixed variant adds more submitters than workers and urgent
 * submissions (placed on any suspended worker); the relay variant has each
 * task hand its item on to an urgent child, so wakes are sent from the
 * workers' own rings as often as from the submitters.
 *
 * Variants: the kernel's best features; per-thread wake rings instead of
 * ring-less messages (ring_disable = RINGLESS_MSG); no DEFER_TASKRUN
 * (COOP_TASKRUN or plain rings: completions are posted differently); no
 * setup flags at all; no EXT_ARG (the suspend timeout rides on a timeout SQE
 * queued with each wait instead of on io_uring_enter); SQPOLL rings (opt-in;
 * wake messages from workers go through the SQ thread).
 *
 * Wake accounting, once every worker sleeps: received <= sent (foreign +
 * worker-sent), and sent - received <= workers (at most one wake message in
 * flight per worker: no storms). The workers must really have been
 * suspending (foreign wakes sent is a large part of the submissions), or
 * the test would prove nothing.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

#define TOTAL SCALE(100000u, 40000u)
#define WAIT_LIMIT_S 10
#define MAX_BATCH 8

static urt_runtime *g_rt;
static _Atomic bool g_abort;

struct item {
    struct urt_task task;
    _Atomic uint32_t ran;
    struct urt_task child;   /* relay variant: the task's urgent child */
    bool relay;
};

static enum urt_task_result item_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct item *it = arg;
    atomic_fetch_add_explicit(&it->ran, 1, memory_order_release);
    return URT_TASK_DONE;
}

/* Relay: the submitted task hands the item on, urgently, from its worker:
 * the child goes to a suspended peer if there is one, woken by a message
 * from the worker's own ring. */
static enum urt_task_result relay_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct item *it = arg;
    urt_task_init(&it->child, item_fn, it);
    if (urt_task_submit(g_rt, &it->child, URT_SUBMIT_URGENT) != 0)
        atomic_fetch_add_explicit(&it->ran, 100, memory_order_release); /* shows as a double run */
    return URT_TASK_DONE;
}

struct submitter {
    uint64_t seed;
    uint32_t n_tasks;
    bool urgent_sometimes;
    bool relay;
    struct item items[MAX_BATCH];
    /* results */
    uint32_t done;
    uint32_t submit_errors;
    uint32_t double_runs;
    uint64_t max_wait_ns;
    bool timed_out;
};

static void pause_random(uint64_t *seed)
{
    uint64_t r = rng_next(seed);
    if (r % 100 < 3) {
        sleep_us(100 + (r >> 8) % 1900); /* long: every worker suspends */
        return;
    }
    uint64_t us = (r >> 8) % 51;
    if (us == 0)
        return;
    uint64_t end = now_ns() + us * 1000;
    while (now_ns() < end)
        ; /* short pauses spin: nanosleep cannot do a few µs */
}

static void *submitter_main(void *arg)
{
    struct submitter *s = arg;
    while (s->done < s->n_tasks && !atomic_load(&g_abort)) {
        uint64_t r = rng_next(&s->seed);
        uint32_t batch = r % 100 < 70 ? 1 : 2 + (uint32_t)((r >> 8) % (MAX_BATCH - 1));
        if (batch > s->n_tasks - s->done)
            batch = s->n_tasks - s->done;
        for (uint32_t i = 0; i < batch; i++) {
            struct item *it = &s->items[i];
            atomic_store_explicit(&it->ran, 0, memory_order_relaxed);
            unsigned flags = s->urgent_sometimes && (r >> (16 + i)) % 4 == 0 ? URT_SUBMIT_URGENT : 0;
            int err;
            urt_task_fn *fn = s->relay ? relay_fn : item_fn;
            if ((r >> 24) & 1) {
                urt_task_init(&it->task, fn, it);
                err = urt_task_submit(g_rt, &it->task, flags);
            } else {
                err = urt_spawn(g_rt, fn, it, flags);
            }
            if (err) {
                s->submit_errors++;
                atomic_store(&g_abort, true);
                return NULL;
            }
        }
        uint64_t t0 = now_ns(), limit = t0 + WAIT_LIMIT_S * 1000000000ull;
        for (uint32_t i = 0; i < batch; i++) {
            uint64_t spins = 0;
            while (atomic_load_explicit(&s->items[i].ran, memory_order_acquire) == 0) {
                if ((++spins & 63) == 0) {
                    if (now_ns() > limit) {
                        s->timed_out = true;
                        atomic_store(&g_abort, true);
                        return NULL;
                    }
                    sched_yield();
                }
            }
        }
        uint64_t waited = now_ns() - t0;
        if (waited > s->max_wait_ns)
            s->max_wait_ns = waited;
        for (uint32_t i = 0; i < batch; i++)
            if (atomic_load(&s->items[i].ran) != 1)
                s->double_runs++;
        s->done += batch;
        pause_random(&s->seed);
    }
    return NULL;
}

struct variant {
    uint32_t workers;
    uint32_t threads;
    uint32_t try_count;
    uint32_t ring_disable;
    bool urgent;
    bool sqpoll;
    bool relay;
};

static void lost_wakeup(struct variant v)
{
    struct urt_config c;
    test_config(&c, v.workers);
    c.worker_try_count = v.try_count;
    c.worker_suspend_timeout_us = 60ull * 1000 * 1000;
    c.ring_disable = v.ring_disable;
    c.sqpoll = v.sqpoll;
    c.sqpoll_idle_ms = 1;
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(&c, &rt);
    if (v.sqpoll && (err == -EPERM || err == -EINVAL))
        cr_skip_test("SQPOLL rings not available here: %s", urt_last_error());
    if (err == -ENOSYS || err == -EPERM)
        cr_skip_test("io_uring unavailable: %s", urt_last_error());
    cr_assert_eq(err, 0, "%s", urt_last_error());
    g_rt = rt;
    atomic_store(&g_abort, false);
    struct urt_features f;
    urt_runtime_features(g_rt, &f);
    char desc[256];
    urt_features_describe(&f, desc, sizeof(desc));

    struct submitter *subs = calloc(v.threads, sizeof(*subs));
    pthread_t *th = calloc(v.threads, sizeof(*th));
    cr_assert(subs && th);
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < v.threads; i++) {
        subs[i].seed = 0x9E3779B97F4A7C15ull * (i + 1) + v.ring_disable;
        subs[i].n_tasks = TOTAL / v.threads;
        subs[i].urgent_sometimes = v.urgent;
        subs[i].relay = v.relay;
        cr_assert_eq(pthread_create(&th[i], NULL, submitter_main, &subs[i]), 0);
    }
    for (uint32_t i = 0; i < v.threads; i++)
        pthread_join(th[i], NULL);
    uint64_t wall = now_ns() - t0;

    uint64_t done = 0, max_wait = 0;
    for (uint32_t i = 0; i < v.threads; i++) {
        cr_assert_eq(subs[i].submit_errors, 0, "thread %u: submit failed", i);
        cr_assert_not(subs[i].timed_out,
                      "thread %u: a task did not run within %d s after %u tasks: lost wakeup (%s)", i, WAIT_LIMIT_S,
                      subs[i].done, desc);
        cr_assert_eq(subs[i].double_runs, 0, "thread %u: a task ran twice", i);
        done += subs[i].done;
        if (subs[i].max_wait_ns > max_wait)
            max_wait = subs[i].max_wait_ns;
    }
    cr_assert_eq(done, (uint64_t)(TOTAL / v.threads) * v.threads);
    cr_assert_lt(wall, 30ull * 1000000000ull, "%lu tasks took %.1f s: wake-ups too slow (timeout rescue?)",
                 (unsigned long)done, (double)wall / 1e9);

    cr_assert(rt_wait_all_sleeping(g_rt, v.workers, 10000), "workers did not suspend after the run");
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    uint64_t sent = st->total.wakes_sent + st->foreign_wakes_sent, received = st->total.wakes_received;
    cr_log_info("%u workers, %u threads, ring_disable=0x%x (%s): %lu tasks in %.2f s, max wait %.3f ms; "
                "suspends %lu, wakes sent %lu (foreign %lu), received %lu",
                v.workers, v.threads, v.ring_disable, desc, (unsigned long)done, (double)wall / 1e9,
                (double)max_wait / 1e6, (unsigned long)st->total.suspends, (unsigned long)sent,
                (unsigned long)st->foreign_wakes_sent, (unsigned long)received);
    cr_assert_leq(received, sent, "received %lu wakes, %lu sent", (unsigned long)received, (unsigned long)sent);
    cr_assert_leq(sent - received, v.workers, "%lu wakes in flight for %u workers: more than one per worker",
                  (unsigned long)(sent - received), v.workers);
    if (v.relay)
        cr_assert_geq(st->total.wakes_sent, TOTAL / 20, "only %lu wakes from workers: the relay did not wake peers",
                      (unsigned long)st->total.wakes_sent);
    cr_assert_geq(st->foreign_wakes_sent, TOTAL / 20,
                  "only %lu foreign wakes for %u tasks: workers were not suspending, the test proves nothing",
                  (unsigned long)st->foreign_wakes_sent, TOTAL);
    cr_assert_geq(st->total.suspends, TOTAL / 20);
    cr_assert_eq(st->total.tasks_run, v.relay ? 2 * done : done);
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(subs);
    free(th);
}

Test(lost_wakeup, best_features, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1});
}

Test(lost_wakeup, per_thread_wake_rings, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 3, .ring_disable = URT_RING_RINGLESS_MSG});
}

Test(lost_wakeup, no_defer_taskrun, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1, .ring_disable = URT_RING_DEFER_TASKRUN});
}

Test(lost_wakeup, no_setup_flags_per_thread_rings, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2,
                                 .threads = 2,
                                 .try_count = 10,
                                 .ring_disable = URT_RING_DEFER_TASKRUN | URT_RING_COOP_TASKRUN |
                                                 URT_RING_SINGLE_ISSUER | URT_RING_RINGLESS_MSG});
}

Test(lost_wakeup, four_workers_four_threads, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 4, .threads = 4, .try_count = 2});
}

Test(lost_wakeup, mixed_urgent_more_threads_than_workers, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 5, .try_count = 1, .urgent = true});
}

Test(lost_wakeup, no_ext_arg_timeout_sqe, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1, .ring_disable = URT_RING_EXT_ARG});
}

Test(lost_wakeup, nothing_at_all, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1, .ring_disable = URT_RING_ALL_FEATURES});
}

Test(lost_wakeup, sqpoll_rings, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1, .sqpoll = true});
}

Test(lost_wakeup, relay_from_workers, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 2, .threads = 2, .try_count = 1, .relay = true});
}

Test(lost_wakeup, relay_from_workers_no_defer, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 3, .threads = 3, .try_count = 2, .relay = true,
                                 .ring_disable = URT_RING_DEFER_TASKRUN | URT_RING_COOP_TASKRUN});
}

/* Oversubscribed: 8 workers and 8 submitters on a small machine, so threads
 * are preempted inside the suspend and wake protocols. */
Test(lost_wakeup, oversubscribed_eight_workers, .timeout = 120)
{
    lost_wakeup((struct variant){.workers = 8, .threads = 8, .try_count = 1, .urgent = true});
}
