/*
 * tools/urt-load/wl_blocking.c — blocking work (docs/benchmarks.md 3.14):
 *
 * blocking_offload: a root task takes t0 and starts BO_TASKS = 64 tasks;
 * each performs BO_EACH = 200 offloads one after another,
 * acc = offload(body, acc), where body is BO_STEPS = 500 xorshift64 steps
 * on acc | 1 (about 0.7 µs) and runs on a thread of the runtime's blocking
 * pool (urt/blocking.h, its default size), and after each offload the task
 * goes on in the continuation, on a worker (checked: never on the pool
 * thread), which records the round trip (clock read just before the
 * submission -> clock read in the continuation) and submits the next. The
 * task that finishes the 64th set takes t1. 2 warm-up + 10 timed iterations;
 * offloads_per_s is the median of the timed iterations' rates, rtt_p50_us
 * and rtt_p99_us are nearest-rank over every offload of the timed
 * iterations. blocking_rtt: the same with 1 task doing 2,000 offloads (the
 * hand-off's own cost). Tokio's peer does spawn_blocking(body).await.
 *
 * Each task embeds its struct urt_blocking (no allocation per offload) and
 * resubmits it from its continuation (rule 4: from the call of done on, b is
 * the caller's). Each task's final acc is checked against the serial chain
 * computed before the run (exit 1 on a mismatch).
 *
 * Memory ordering: a task's state is written by its own continuations,
 * which run one after another (each submits the next offload; the queue and
 * the delivery order them: urt/blocking.h); the completion counter
 * (measure.h) publishes every task's latencies and acc to the external
 * thread, which reads them after the iteration's event.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "workloads.h"

#define BO_TASKS 64
#define BO_EACH 200
#define BO_STEPS 500
#define RTT_TASKS 1
#define RTT_EACH 2000

struct bo_task {
    struct urt_task task;
    struct urt_blocking b;
    struct bo *bo;
    uint64_t acc, start_acc, expect;
    uint32_t left;
    uint64_t ts;     /* clock read just before the submission */
    uint64_t *lat;   /* this iteration's round trips (each of its offloads) */
    uint32_t n_lat;
};

struct bo {
    urt_runtime *rt;
    const char *name;
    uint32_t tasks, each;
    struct measure_done done;
    struct urt_task root;
    struct bo_task *t;
    uint64_t *iter_lat;  /* tasks * each samples of the running iteration */
    uint64_t *all_lat;   /* the timed iterations' samples */
    size_t n_all;
    unsigned iteration;
};

static uint64_t body_steps(uint64_t acc)
{
    uint64_t x = acc | 1;
    for (int i = 0; i < BO_STEPS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static int64_t bo_body(void *arg)
{
    struct bo_task *t = arg;
    return (int64_t)body_steps(t->acc);
}

static void bo_submit(struct bo_task *t)
{
    t->ts = urt_now_ns();
    int err = urt_blocking_submit(t->bo->rt, &t->b, 0);
    if (err)
        measure_done_fail(&t->bo->done, t->bo->name, "urt_blocking_submit: %s (%s)", strerror(-err),
                          urt_last_error());
}

static void bo_done(struct urt_blocking *b, int64_t res, void *arg)
{
    struct bo_task *t = arg;
    uint64_t now = urt_now_ns();
    (void)b;
    t->lat[t->n_lat++] = now - t->ts;
    if (urt_current_worker(t->bo->rt) < 0) {
        measure_done_fail(&t->bo->done, t->bo->name, "a continuation ran off the workers");
        return;
    }
    t->acc = (uint64_t)res;
    if (--t->left) {
        bo_submit(t);
        return;
    }
    if (t->acc != t->expect)
        atomic_store_explicit(&t->bo->done.failed, true, memory_order_relaxed);
    measure_done_count(&t->bo->done);
}

static enum urt_task_result bo_start(struct urt_task *task, void *arg)
{
    struct bo_task *t = arg;
    (void)task;
    bo_submit(t);
    return URT_TASK_DONE;
}

static enum urt_task_result bo_root(struct urt_task *task, void *arg)
{
    struct bo *bo = arg;
    (void)task;
    measure_done_start(&bo->done);
    for (uint32_t i = 0; i < bo->tasks; i++) {
        struct bo_task *t = &bo->t[i];
        urt_task_init(&t->task, bo_start, t);
        int err = urt_task_submit(bo->rt, &t->task, 0);
        if (err) {
            measure_done_fail(&bo->done, bo->name, "urt_task_submit: %s", strerror(-err));
            break;
        }
    }
    return URT_TASK_DONE;
}

static uint64_t it_blocking(void *ctx)
{
    struct bo *bo = ctx;
    measure_done_reset(&bo->done, bo->tasks);
    for (uint32_t i = 0; i < bo->tasks; i++) {
        struct bo_task *t = &bo->t[i];
        t->acc = t->start_acc;
        t->left = bo->each;
        t->lat = bo->iter_lat + (size_t)i * bo->each;
        t->n_lat = 0;
        urt_blocking_init(&t->b, bo_body, bo_done, t);
    }
    urt_task_init(&bo->root, bo_root, bo);
    int err = urt_task_submit(bo->rt, &bo->root, 0);
    if (err) {
        fprintf(stderr, "# ERROR %s %s: urt_task_submit of the root task: %s\n", MEASURE_PEER, bo->name,
                strerror(-err));
        return 0;
    }
    measure_event_wait(&bo->done.event);
    if (atomic_load_explicit(&bo->done.failed, memory_order_relaxed)) {
        fprintf(stderr, "# ERROR %s %s: a task's result is not the serial chain's\n", MEASURE_PEER, bo->name);
        return 0;
    }
    if (bo->iteration++ >= WARMUP) {
        memcpy(bo->all_lat + bo->n_all, bo->iter_lat, (size_t)bo->tasks * bo->each * sizeof(uint64_t));
        bo->n_all += (size_t)bo->tasks * bo->each;
    }
    uint64_t t0 = atomic_load_explicit(&bo->done.t0, memory_order_relaxed);
    uint64_t t1 = atomic_load_explicit(&bo->done.t1, memory_order_relaxed);
    return t1 > t0 ? t1 - t0 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int run_blocking(urt_runtime *rt, const char *name)
{
    static struct bo bo;
    bool rtt = strcmp(name, "blocking_rtt") == 0;
    bo.rt = rt;
    bo.name = name;
    bo.tasks = rtt ? RTT_TASKS : BO_TASKS;
    bo.each = rtt ? RTT_EACH : BO_EACH;
    size_t per_iter = (size_t)bo.tasks * bo.each;
    bo.t = calloc(bo.tasks, sizeof(*bo.t));
    bo.iter_lat = calloc(per_iter, sizeof(uint64_t));
    bo.all_lat = calloc(per_iter * ITERS, sizeof(uint64_t));
    if (!bo.t || !bo.iter_lat || !bo.all_lat) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, name);
        return 1;
    }
    for (uint32_t i = 0; i < bo.tasks; i++) {
        struct bo_task *t = &bo.t[i];
        t->bo = &bo;
        t->start_acc = (uint64_t)i + 1;
        uint64_t acc = t->start_acc;
        for (uint32_t k = 0; k < bo.each; k++)
            acc = body_steps(acc);
        t->expect = acc;
    }
    const struct urt_config *cfg = urt_runtime_config(rt);
    measure_note(name, "%u tasks x %u offloads (urt_blocking_submit of an embedded struct urt_blocking, "
                       "resubmitted from its continuation); body %d xorshift64 steps; pool max %u threads",
                 bo.tasks, bo.each, BO_STEPS, cfg->blocking_threads_max);
    uint64_t cpu0 = measure_cpu_ns(), w0 = urt_now_ns();
    int rc = measure_throughput(name, "offloads_per_s", "offloads/s", (double)per_iter, it_blocking, &bo);
    uint64_t cpu1 = measure_cpu_ns(), w1 = urt_now_ns();
    if (rc == 0) {
        qsort(bo.all_lat, bo.n_all, sizeof(uint64_t), cmp_u64);
        printf("%s %s rtt_p50_us %.2f us\n", MEASURE_PEER, name, measure_percentile(bo.all_lat, bo.n_all, 500) / 1e3);
        printf("%s %s rtt_p99_us %.2f us\n", MEASURE_PEER, name, measure_percentile(bo.all_lat, bo.n_all, 990) / 1e3);
        fflush(stdout);
        struct urt_blocking_stats st;
        urt_blocking_stats(rt, &st);
        measure_note(name, "rtt samples %zu, min %.2f us, max %.2f us; pool: %llu threads started, %llu alive, "
                           "%llu functions run; cpu %.0f %% of one CPU over the run",
                     bo.n_all, bo.all_lat[0] / 1e3, bo.all_lat[bo.n_all - 1] / 1e3,
                     (unsigned long long)st.threads_started, (unsigned long long)st.threads,
                     (unsigned long long)st.done, 100.0 * (double)(cpu1 - cpu0) / (double)(w1 - w0));
    }
    free(bo.t);
    free(bo.iter_lat);
    free(bo.all_lat);
    return rc;
}

const struct workload WL_BLOCKING[] = {
    {.name = "blocking_offload",
     .summary = "64 tasks x 200 offloads of a 0.7 us body to the blocking pool, continued on a worker (3.14)",
     .metrics = {"offloads_per_s", "rtt_p50_us", "rtt_p99_us", NULL},
     .run = run_blocking},
    {.name = "blocking_rtt",
     .summary = "1 task x 2,000 offloads: the hand-off's round trip (3.14)",
     .metrics = {"offloads_per_s", "rtt_p50_us", "rtt_p99_us", NULL},
     .run = run_blocking},
    {0},
};
