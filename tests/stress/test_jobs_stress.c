/*
 * tests/stress/test_jobs_stress.c — jobs that fan out recursively while other
 * threads cancel them at random times (SPEC C7).
 *
 * The driver thread creates N_JOBS jobs (a mix of heavy jobs on the stealing
 * queues and serial jobs on their own lane), each started with one root task
 * that fans out as a binary tree; CANCELLERS threads meanwhile cancel random
 * jobs at random times. Per job the model checks:
 *  - the callback ran exactly once, with -ECANCELED iff one urt_job_cancel
 *    returned 0 for it, else 0;
 *  - every submitted task either ran or got its cancel callback, once;
 *  - no task starts after the cancel was observed: once a worker skipped a
 *    task of the job (its cancel callback ran there and marked the job
 *    "seen on worker w"), no later task of that job starts on that worker.
 *    (Across workers a task may have passed the check just before the
 *    cancel and start its fn a little later: the check, not the fn's first
 *    instruction, is the start the runtime controls.) And no task starts
 *    after the job's callback;
 *  - no leak (ASan/LSan: jobs, pooled tasks).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

#define N_JOBS SCALE(600, 120)
#define DEPTH 7 /* up to 255 tasks per job */
#define CANCELLERS 2
#define LIVE_WINDOW 16

/* 256-aligned: a task's arg is the record's address | its depth */
struct jrec {
    _Alignas(256) urt_job *_Atomic job;
    _Atomic int callbacks, status, cancel_ok;
    _Atomic bool cancel_seen_on[8], ended;
    _Atomic int submitted, run, cancelled, after_seen, after_end;
};

static urt_runtime *g_rt;
static struct jrec *g_recs;
static _Atomic bool g_stop;
static _Atomic int g_created;

static void done_cb(urt_job *job, int status, void *arg)
{
    struct jrec *r = arg;
    (void)job;
    atomic_store(&r->status, status);
    atomic_store_explicit(&r->ended, true, memory_order_release);
    atomic_fetch_add(&r->callbacks, 1);
}

static void task_cancel(struct urt_task *t, void *arg)
{
    struct jrec *r = (struct jrec *)((uintptr_t)arg & ~(uintptr_t)0xff);
    (void)t;
    atomic_fetch_add(&r->cancelled, 1);
    int w = urt_current_worker(g_rt);
    if (w >= 0)
        atomic_store_explicit(&r->cancel_seen_on[w], true, memory_order_relaxed); /* read on the same thread */
}

static enum urt_task_result tree_fn(struct urt_task *t, void *arg)
{
    struct jrec *r = (struct jrec *)((uintptr_t)arg & ~(uintptr_t)0xff);
    unsigned depth = (unsigned)((uintptr_t)arg & 0xff);
    int w = urt_current_worker(g_rt);
    if (w >= 0 && atomic_load_explicit(&r->cancel_seen_on[w], memory_order_relaxed))
        atomic_fetch_add(&r->after_seen, 1);
    if (atomic_load_explicit(&r->ended, memory_order_acquire))
        atomic_fetch_add(&r->after_end, 1);
    atomic_fetch_add(&r->run, 1);
    if (depth < DEPTH) {
        urt_job *job = urt_task_job(t);
        for (int c = 0; c < 2; c++) {
            int err = urt_job_spawn(job, tree_fn, task_cancel, (void *)((uintptr_t)r | (depth + 1)), 0);
            if (err == 0)
                atomic_fetch_add(&r->submitted, 1);
            else if (err != -ECANCELED)
                atomic_fetch_add(&r->after_end, 1000); /* unexpected error */
        }
    }
    /* a little work so cancels land in the middle */
    for (volatile int i = 0; i < 1000; i++)
        ;
    return URT_TASK_DONE;
}

static void *canceller(void *arg)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
    while (!atomic_load(&g_stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int n = atomic_load(&g_created);
        if (n == 0)
            continue;
        /* mostly recent jobs (still running), sometimes any */
        int i = (x & 3) ? n - 1 - (int)((x >> 8) % (n < 8 ? (uint64_t)n : 8)) : (int)((x >> 8) % (uint64_t)n);
        struct jrec *r = &g_recs[i];
        urt_job *job = atomic_load(&r->job);
        if ((x >> 40) % 3 == 0 && job) {
            if (urt_job_cancel(job) == 0)
                atomic_fetch_add(&r->cancel_ok, 1);
        }
        sleep_us((x >> 48) % 300); /* cancels land at random points of the jobs' lives */
    }
    return NULL;
}

static void run(uint32_t workers, uint32_t lightweight)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.lightweight_job_level = lightweight;
    g_rt = rt_create_or_skip(&cfg);
    g_recs = aligned_alloc(256, N_JOBS * sizeof(*g_recs));
    cr_assert_not_null(g_recs);
    memset(g_recs, 0, N_JOBS * sizeof(*g_recs));
    atomic_store(&g_stop, false);
    atomic_store(&g_created, 0);
    pthread_t th[CANCELLERS];
    for (uintptr_t i = 0; i < CANCELLERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, canceller, (void *)i), 0);

    for (int i = 0; i < N_JOBS; i++) {
        if (i >= LIVE_WINDOW) { /* bounded number of live jobs */
            int st = urt_job_wait(atomic_load(&g_recs[i - LIVE_WINDOW].job), 60ull * 1000 * 1000 * 1000);
            cr_assert(st == 0 || st == -ECANCELED, "wait: %d", st);
        }
        struct jrec *r = &g_recs[i];
        struct urt_job_options o;
        urt_job_options_init(&o);
        o.done = done_cb;
        o.arg = r;
        o.work_level = (i % 3 == 0) ? 0 : URT_WORK_LEVEL_MAX; /* a third serial (lightweight) */
        o.flags = (i % 5 == 0) ? URT_JOB_TEARDOWN_TASK : 0;
        urt_job *job;
        cr_assert_eq(urt_job_create(g_rt, &o, &job), 0);
        atomic_store(&r->job, job);
        atomic_fetch_add(&g_created, 1);
        int err = urt_job_spawn(job, tree_fn, task_cancel, (void *)((uintptr_t)r | 0), 0);
        cr_assert(err == 0 || err == -ECANCELED, "root spawn: %d", err);
        if (err == 0)
            atomic_fetch_add(&r->submitted, 1);
        cr_assert_eq(urt_job_close(job), 0);
    }
    atomic_store(&g_stop, true);
    for (int i = 0; i < CANCELLERS; i++)
        pthread_join(th[i], NULL);
    long ran = 0, cancelled = 0, cancelled_jobs = 0;
    for (int i = 0; i < N_JOBS; i++) {
        struct jrec *r = &g_recs[i];
        urt_job *job = atomic_load(&r->job);
        ran += atomic_load(&r->run);
        cancelled += atomic_load(&r->cancelled);
        cancelled_jobs += atomic_load(&r->cancel_ok);
        int st = urt_job_wait(job, 60ull * 1000 * 1000 * 1000);
        cr_assert(st == 0 || st == -ECANCELED, "job %d: wait %d", i, st);
        cr_assert_eq(atomic_load(&r->callbacks), 1, "job %d: %d callbacks", i, atomic_load(&r->callbacks));
        cr_assert_leq(atomic_load(&r->cancel_ok), 1, "job %d: two cancels succeeded", i);
        int want = atomic_load(&r->cancel_ok) ? -ECANCELED : 0;
        cr_assert_eq(atomic_load(&r->status), want, "job %d: status %d, expected %d", i, atomic_load(&r->status),
                     want);
        cr_assert_eq(st, want);
        cr_assert_eq(atomic_load(&r->submitted), atomic_load(&r->run) + atomic_load(&r->cancelled),
                     "job %d: %d submitted, %d ran, %d cancelled", i, atomic_load(&r->submitted),
                     atomic_load(&r->run), atomic_load(&r->cancelled));
        cr_assert_eq(atomic_load(&r->after_seen), 0, "job %d: %d tasks started after the cancel was seen", i,
                     atomic_load(&r->after_seen));
        cr_assert_eq(atomic_load(&r->after_end), 0, "job %d: tasks after the end, or spawn errors", i);
        if (want == 0)
            cr_assert_eq(atomic_load(&r->cancelled), 0);
        urt_job_release(job);
    }
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(g_recs);
    cr_log_info("%d jobs (%ld cancelled): %ld tasks ran, %ld cancelled", N_JOBS, cancelled_jobs, ran, cancelled);
    cr_assert_gt(ran, 0);
}

Test(jobs_stress, random_cancels_2_workers, .timeout = 300)
{
    run(2, 0);
}

Test(jobs_stress, random_cancels_4_workers, .timeout = 300)
{
    run(4, 0);
}
