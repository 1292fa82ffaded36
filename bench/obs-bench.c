/*
 * bench/obs-bench.c — the two task micro-benchmarks (docs/benchmarks.md 3.1, 3.3) that the
 * observability overhead is measured on (until urt-load is in main):
 *
 *   spawn_many_local  a root task submitted from outside spawns SPAWN_N
 *                     (10,000) children locally; each child does one
 *                     fetch_add; the last one ends the iteration. Unit: task.
 *   yield_many        2*WORKERS tasks submitted locally by a root each yield
 *                     YIELDS (1,000) times, then fetch_add. Unit: yield.
 *
 *   obs-bench WORKLOAD [iterations] [--wait-trace]
 *
 * Prints "WORKLOAD ns_per_unit MEDIAN" (median over iterations, after one
 * warm-up iteration). Configuration from URT_* variables (URT_WORKERS,
 * URT_STATS_TIMING=true, ...). --wait-trace waits (up to 20 s) until a probe
 * consumer is attached (urt_stats.timing turns true) before measuring, so a
 * script can attach urt-trace first. Linked with the shared liburt, where
 * the USDT probes live.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urt/urt.h>

#define SPAWN_N 10000
#define YIELDS 1000

static urt_runtime *rt;
static unsigned workers;
static _Atomic uint64_t counter;
static _Atomic uint64_t t1;
static uint64_t target;

static void finish_one(void)
{
    /* target is read before the fetch_add: the last child's acq_rel add and
     * its release of t1 order every read before main's next write. */
    uint64_t want = target;
    if (atomic_fetch_add_explicit(&counter, 1, memory_order_acq_rel) + 1 == want)
        atomic_store_explicit(&t1, urt_now_ns(), memory_order_release);
}

static enum urt_task_result child(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    finish_one();
    return URT_TASK_DONE;
}

static enum urt_task_result spawn_root(struct urt_task *t, void *arg)
{
    (void)t;
    *(uint64_t *)arg = urt_now_ns();
    for (int i = 0; i < SPAWN_N; i++)
        if (urt_spawn(rt, child, NULL, 0) != 0)
            abort();
    return URT_TASK_DONE;
}

struct yielder {
    struct urt_task task;
    uint32_t left;
};
static struct yielder *yielders;

static enum urt_task_result yielder(struct urt_task *t, void *arg)
{
    (void)arg;
    struct yielder *y = (struct yielder *)t;
    if (y->left > 0) {
        y->left--;
        return URT_TASK_YIELD;
    }
    finish_one();
    return URT_TASK_DONE;
}

static enum urt_task_result yield_root(struct urt_task *t, void *arg)
{
    (void)t;
    *(uint64_t *)arg = urt_now_ns();
    for (unsigned i = 0; i < 2 * workers; i++) {
        urt_task_init(&yielders[i].task, yielder, NULL);
        yielders[i].left = YIELDS;
        if (urt_task_submit(rt, &yielders[i].task, 0) != 0)
            abort();
    }
    return URT_TASK_DONE;
}

static double iteration(bool yield)
{
    static uint64_t t0;
    atomic_store(&counter, 0);
    atomic_store(&t1, 0);
    target = yield ? 2 * workers : SPAWN_N;
    if (urt_spawn(rt, yield ? yield_root : spawn_root, &t0, 0) != 0)
        abort();
    uint64_t end;
    while ((end = atomic_load_explicit(&t1, memory_order_acquire)) == 0)
        ;
    double units = yield ? 2.0 * workers * YIELDS : SPAWN_N;
    return (double)(end - t0) / units;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "spawn_many_local") && strcmp(argv[1], "yield_many"))) {
        fprintf(stderr, "usage: obs-bench spawn_many_local|yield_many [iterations] [--wait-trace]\n");
        return 2;
    }
    bool yield = strcmp(argv[1], "yield_many") == 0;
    int iters = 50;
    bool wait_trace = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--wait-trace") == 0)
            wait_trace = true;
        else
            iters = atoi(argv[i]);
    }
    if (iters < 1)
        iters = 1;
    struct urt_config cfg;
    urt_config_init(&cfg);
    if (urt_config_from_env(&cfg) < 0) {
        fprintf(stderr, "obs-bench: %s\n", urt_last_error());
        return 2;
    }
    if (urt_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "obs-bench: %s\n", urt_last_error());
        return 2;
    }
    workers = urt_runtime_config(rt)->workers;
    yielders = calloc(2 * workers, sizeof(*yielders));
    if (wait_trace) {
        fprintf(stderr, "# pid %d waiting for a probe consumer\n", (int)getpid());
        bool on = false;
        for (int i = 0; i < 20000 && !on; i++) {
            struct urt_stats *st = urt_stats_snapshot(rt);
            on = st->timing;
            urt_stats_free(st);
            if (!on) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
        if (!on) {
            fprintf(stderr, "obs-bench: no probe consumer attached within 20 s\n");
            return 1;
        }
    }
    double *v = calloc((size_t)iters, sizeof(*v));
    iteration(yield); /* warm-up */
    for (int i = 0; i < iters; i++)
        v[i] = iteration(yield);
    qsort(v, (size_t)iters, sizeof(*v), cmp);
    struct urt_stats *st = urt_stats_snapshot(rt);
    printf("%s ns_per_unit %.2f probes_fired %llu timing %d\n", argv[1], v[iters / 2],
           (unsigned long long)st->probes_fired, (int)st->timing);
    urt_stats_free(st);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    free(v);
    free(yielders);
    return 0;
}
