/*
 * tests/stress/test_exactly_once.c — 10 million tasks, each runs exactly once.
 *
 * Ids 0..N-1 are split into chunks of CHUNK ids. Four external threads each
 * own a quarter of the chunks and a window of WINDOW chunk slots; for each
 * chunk they submit a spawner task (an embedded task for odd chunks,
 * urt_spawn for even ones). The spawner marks its own id and, from inside
 * the runtime, submits the chunk's other CHUNK-1 ids: odd offsets with
 * urt_spawn, even offsets as embedded tasks living in the chunk slot. A slot
 * is reused once the spawner and all its embedded children have finished
 * (a per-slot count; SPEC task rule 3 lets a task's memory be reused by the
 * time its fn returns). So tasks come from external threads (inbox path) and
 * from workers (local deque path, stealing), embedded and pooled, with
 * embedded tasks resubmitted many times.
 *
 * Every run increments seen[id]; at the end every entry must be exactly 1,
 * the workers' tasks_run must sum to N, and destroy(DRAIN) must return 0.
 * Run with 2 and 4 workers (4 > CPUs: preemption in the middle of the
 * protocols), the second with worker_try_count = 10 so workers suspend and
 * are woken all the time.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

#define N_TASKS SCALE(10000000ull, 3000000ull)
#define N_THREADS 4
#define CHUNK 50
#define N_EMB ((CHUNK - 1) / 2) /* even offsets 2, 4, ..., CHUNK-2 */
#define WINDOW 64

static urt_runtime *g_rt;
static _Atomic uint8_t *seen;
static _Atomic uint64_t submit_errors;

struct chunk {
    struct urt_task self;
    struct urt_task emb[N_EMB];
    uint64_t base;
    _Atomic uint32_t remaining; /* embedded children + the spawner */
    _Atomic bool busy;
};

static inline void mark(uint64_t id)
{
    atomic_fetch_add_explicit(&seen[id], 1, memory_order_relaxed);
}

static inline void chunk_release(struct chunk *c)
{
    if (atomic_fetch_sub_explicit(&c->remaining, 1, memory_order_acq_rel) == 1)
        atomic_store_explicit(&c->busy, false, memory_order_release); /* slot free: pairs with acquire in submitter */
}

static enum urt_task_result leaf_fn(struct urt_task *t, void *arg)
{
    (void)t;
    mark((uint64_t)(uintptr_t)arg);
    return URT_TASK_DONE;
}

static enum urt_task_result leaf_emb_fn(struct urt_task *t, void *arg)
{
    struct chunk *c = arg;
    uint64_t j = 2 * ((uint64_t)(t - c->emb) + 1);
    mark(c->base + j);
    chunk_release(c); /* the slot may be reused from here on: touch nothing */
    return URT_TASK_DONE;
}

static enum urt_task_result spawner_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct chunk *c = arg;
    uint64_t base = c->base;
    mark(base);
    for (uint64_t j = 1; j < CHUNK; j++) {
        int err;
        if (j & 1) {
            err = urt_spawn(g_rt, leaf_fn, (void *)(uintptr_t)(base + j), 0);
        } else {
            struct urt_task *e = &c->emb[j / 2 - 1];
            urt_task_init(e, leaf_emb_fn, c);
            err = urt_task_submit(g_rt, e, 0);
            if (err)
                atomic_fetch_sub(&c->remaining, 1);
        }
        if (err)
            atomic_fetch_add(&submit_errors, 1);
    }
    chunk_release(c);
    return URT_TASK_DONE;
}

struct submitter {
    uint64_t first_chunk, n_chunks;
    struct chunk *slots; /* WINDOW */
    _Atomic int stuck;   /* a slot never came back */
};

static void *submitter_main(void *arg)
{
    struct submitter *s = arg;
    for (uint64_t k = 0; k < s->n_chunks; k++) {
        struct chunk *c = &s->slots[k % WINDOW];
        uint64_t spins = 0, deadline = 0;
        while (atomic_load_explicit(&c->busy, memory_order_acquire)) {
            if ((++spins & 1023) == 0) {
                if (!deadline)
                    deadline = now_ns() + 30ull * 1000000000ull;
                else if (now_ns() > deadline) {
                    atomic_store(&s->stuck, 1);
                    return NULL;
                }
            }
            sched_yield();
        }
        uint64_t chunk_no = s->first_chunk + k;
        c->base = chunk_no * CHUNK;
        atomic_store_explicit(&c->remaining, N_EMB + 1, memory_order_relaxed);
        atomic_store_explicit(&c->busy, true, memory_order_relaxed);
        int err;
        if (chunk_no & 1) {
            urt_task_init(&c->self, spawner_fn, c);
            err = urt_task_submit(g_rt, &c->self, 0);
        } else {
            err = urt_spawn(g_rt, spawner_fn, c, 0);
        }
        if (err) {
            atomic_fetch_add(&submit_errors, 1);
            atomic_store(&c->busy, false);
        }
    }
    return NULL;
}

static uint64_t total_tasks_run(void)
{
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_not_null(st);
    uint64_t n = st->total.tasks_run;
    urt_stats_free(st);
    return n;
}

static void exactly_once(uint32_t workers, uint32_t try_count)
{
    _Static_assert(N_TASKS % (N_THREADS * CHUNK) == 0, "ids split evenly");
    struct urt_config c;
    test_config(&c, workers);
    c.worker_try_count = try_count;
    g_rt = rt_create_or_skip(&c);
    seen = calloc(N_TASKS, sizeof(*seen));
    cr_assert_not_null(seen);
    atomic_store(&submit_errors, 0);

    uint64_t t0 = now_ns();
    struct submitter sub[N_THREADS];
    pthread_t th[N_THREADS];
    uint64_t chunks_per_thread = N_TASKS / CHUNK / N_THREADS;
    for (int i = 0; i < N_THREADS; i++) {
        memset(&sub[i], 0, sizeof(sub[i]));
        sub[i].first_chunk = (uint64_t)i * chunks_per_thread;
        sub[i].n_chunks = chunks_per_thread;
        sub[i].slots = calloc(WINDOW, sizeof(struct chunk));
        cr_assert_not_null(sub[i].slots);
        cr_assert_eq(pthread_create(&th[i], NULL, submitter_main, &sub[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(atomic_load(&sub[i].stuck), 0, "submitter %d: a chunk never finished", i);
    cr_assert_eq(atomic_load(&submit_errors), 0);
    bool all = WAIT_UNTIL(total_tasks_run() >= N_TASKS, 60000);
    uint64_t ran = total_tasks_run();
    uint64_t t1 = now_ns();
    cr_assert(all, "only %lu of %llu tasks ran within 60 s", (unsigned long)ran, (unsigned long long)N_TASKS);
    cr_assert_eq(ran, N_TASKS, "tasks_run %lu, submitted %llu", (unsigned long)ran, (unsigned long long)N_TASKS);

    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_log_info("%u workers: %llu tasks in %.2f s (%.2f M/s); stolen %lu, suspends %lu, wakes sent %lu + foreign %lu",
                workers, (unsigned long long)N_TASKS, (double)(t1 - t0) / 1e9, (double)N_TASKS * 1e3 / (double)(t1 - t0),
                (unsigned long)st->total.tasks_stolen, (unsigned long)st->total.suspends,
                (unsigned long)st->total.wakes_sent, (unsigned long)st->foreign_wakes_sent);
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);

    uint64_t bad = 0, first_bad = UINT64_MAX;
    for (uint64_t id = 0; id < N_TASKS; id++) {
        if (atomic_load_explicit(&seen[id], memory_order_relaxed) != 1) {
            if (first_bad == UINT64_MAX)
                first_bad = id;
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%lu ids did not run exactly once (first: id %lu ran %u times)", (unsigned long)bad,
                 (unsigned long)first_bad, first_bad == UINT64_MAX ? 0 : atomic_load(&seen[first_bad]));
    for (int i = 0; i < N_THREADS; i++)
        free(sub[i].slots);
    free(seen);
}

Test(exactly_once, two_workers, .timeout = 300)
{
    exactly_once(2, 1000);
}

Test(exactly_once, four_workers_suspending, .timeout = 300)
{
    exactly_once(4, 10);
}

/* ---- yielding tasks: every task's fn is called exactly yields + 1 times ------------------------ */

#define N_YIELD_TASKS SCALE(2000000ull, 600000ull)
#define YIELD_WINDOW 50000

static _Atomic uint8_t *calls;
static _Atomic uint64_t finished;

static enum urt_task_result yielding_fn(struct urt_task *t, void *arg)
{
    (void)t;
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint8_t before = atomic_fetch_add_explicit(&calls[id], 1, memory_order_relaxed);
    if (before < id % 4) /* ids yield 0..3 times */
        return URT_TASK_YIELD;
    atomic_fetch_add_explicit(&finished, 1, memory_order_relaxed);
    return URT_TASK_DONE;
}

struct ysubmitter {
    uint64_t first, n;
    _Atomic int errors;
};

static void *ysubmitter_main(void *arg)
{
    struct ysubmitter *s = arg;
    uint64_t deadline = now_ns() + 120ull * 1000000000ull;
    for (uint64_t i = 0; i < s->n; i++) {
        /* keep at most about YIELD_WINDOW tasks per thread in flight */
        while ((i & 1023) == 0 && i > YIELD_WINDOW &&
               atomic_load_explicit(&finished, memory_order_relaxed) + 4 * YIELD_WINDOW < 4 * i) {
            if (now_ns() > deadline) {
                atomic_fetch_add(&s->errors, 1);
                return NULL;
            }
            sched_yield();
        }
        if (urt_spawn(g_rt, yielding_fn, (void *)(uintptr_t)(s->first + i), 0))
            atomic_fetch_add(&s->errors, 1);
    }
    return NULL;
}

static void yielding(uint32_t workers)
{
    struct urt_config c;
    test_config(&c, workers);
    c.worker_try_count = 10;
    g_rt = rt_create_or_skip(&c);
    calls = calloc(N_YIELD_TASKS, sizeof(*calls));
    cr_assert_not_null(calls);
    atomic_store(&finished, 0);
    struct ysubmitter sub[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        memset(&sub[i], 0, sizeof(sub[i]));
        sub[i].first = (uint64_t)i * (N_YIELD_TASKS / N_THREADS);
        sub[i].n = N_YIELD_TASKS / N_THREADS;
        cr_assert_eq(pthread_create(&th[i], NULL, ysubmitter_main, &sub[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(atomic_load(&sub[i].errors), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&finished) >= N_YIELD_TASKS, 60000), "%lu of %llu finished",
              (unsigned long)atomic_load(&finished), (unsigned long long)N_YIELD_TASKS);
    uint64_t expect_calls = 0;
    for (uint64_t id = 0; id < N_YIELD_TASKS; id++)
        expect_calls += id % 4 + 1;
    /* A task's last call counts in tasks_run just after its fn returned
     * (after it counted itself finished): wait for the count, then check it. */
    WAIT_UNTIL(total_tasks_run() >= expect_calls, 10000);
    struct urt_stats *st = urt_stats_snapshot(g_rt);
    cr_assert_eq(st->total.tasks_run, expect_calls);
    cr_assert_eq(st->total.yields, expect_calls - N_YIELD_TASKS);
    cr_log_info("%u workers: %llu yielding tasks, %lu calls, stolen %lu", workers, (unsigned long long)N_YIELD_TASKS,
                (unsigned long)st->total.tasks_run, (unsigned long)st->total.tasks_stolen);
    urt_stats_free(st);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&finished), N_YIELD_TASKS);
    for (uint64_t id = 0; id < N_YIELD_TASKS; id++)
        cr_assert_eq(atomic_load(&calls[id]), id % 4 + 1, "task %lu: fn called %u times, expected %lu",
                     (unsigned long)id, atomic_load(&calls[id]), (unsigned long)(id % 4 + 1));
    free(calls);
}

Test(exactly_once, yielding_tasks_two_workers, .timeout = 300)
{
    yielding(2);
}

Test(exactly_once, yielding_tasks_three_workers, .timeout = 300)
{
    yielding(3);
}
