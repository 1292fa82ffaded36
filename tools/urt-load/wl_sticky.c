/*
 * tools/urt-load/wl_sticky.c — the sticky_tx family: docs/benchmarks.md section
 * 3.8 on urt (sticky_tx, sticky_tx_remote, sticky_tx_mutex,
 * sticky_tx_remote_mutex).
 *
 * TX_N transactions of TX_TASKS tasks each; two tasks of one transaction must
 * never run at the same time. The task body (steps 1-3 of the spec): the
 * in-use check on `busy` (exchange, acquire), TX_STEPS xorshift64 steps on
 * the transaction's accumulator, `busy := 0` (release); then the completion
 * count (step 5).
 *
 * Mechanisms:
 *  - sticky_tx, sticky_tx_remote: urt's lanes (urt/lane.h), one lane per
 *    transaction. The lane serializes its tasks on the worker that owns it
 *    (a strand on that worker's sticky queue, never stolen). Step 4 (the
 *    mechanism's release) is the lane's pending decrement, which the runtime
 *    does right after the task's fn returned — so it comes after step 5 here,
 *    a single atomic RMW later.
 *  - sticky_tx_mutex, sticky_tx_remote_mutex: ordinary tasks (urt_task_submit)
 *    whose body runs under a per-transaction pthread mutex.
 * Submission modes: fan-out (t0 on the external thread, which submits TX_N
 * root tasks remotely; root t submits its transaction's tasks locally, in
 * order) and remote (the external thread submits every task: for j, for t).
 *
 * Tasks are embedded (TX_N x TX_TASKS struct urt_task, allocated once per
 * process): no allocation per task. A task object is submitted again only in
 * the next iteration, after the completion count reached the target, i.e.
 * after every task's fn returned; the runtime does not touch a task after its
 * fn returned DONE (task.h rule 3).
 *
 * body_ns: the body (steps 1-3) run 1,000,000 times on the external thread
 * before the runtime work, printed as `urt <workload> body_ns <v> ns`, so
 * the ceiling (WORKERS / body cost) is known for the machine of the run.
 * A note gives the rate without a scheduler as well (free_rate: WORKERS plain
 * threads running the body and the completion add), the most any runtime
 * can reach with the workload's own shared add included.
 *
 * Shared state: one file-static struct sticky, written by the external thread
 * before an iteration's first submission (published by it); the completion
 * protocol (measure.h) orders what the external thread reads back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "workloads.h"

#define TX_N 64
#define TX_TASKS 1000
#define TX_STEPS_DEFAULT 150
#define BODY_RUNS 1000000

struct tx {
    _Alignas(64) uint64_t acc;
    uint64_t expect;
    atomic_int busy;
    urt_lane *lane;
    pthread_mutex_t mutex;
    struct urt_task root;
};

struct sticky {
    urt_runtime *rt;
    const char *name;
    bool use_mutex;
    int steps;
    struct measure_done done;
    atomic_uint violations;
    struct tx tx[TX_N];
    struct urt_task *tasks; /* TX_N * TX_TASKS, in submission order (task_slot) */
    bool remote;
    uint64_t submit_cpu_ns, submit_iters; /* remote mode: the external thread's CPU time submitting */
};

static struct sticky ST;

static const struct wl_setting TX_STEPS_S = {"TX_STEPS", TX_STEPS_DEFAULT, 1, 1000000};
static const struct wl_setting *const STICKY_SETTINGS[] = {&TX_STEPS_S, NULL};

static inline uint64_t xorshift_steps(uint64_t x, int n)
{
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

/* Steps 1-3 of the spec. */
static inline void tx_body(struct tx *tx, int steps)
{
    if (atomic_exchange_explicit(&tx->busy, 1, memory_order_acquire) != 0)
        atomic_fetch_add_explicit(&ST.violations, 1, memory_order_relaxed);
    tx->acc = xorshift_steps(tx->acc, steps);
    atomic_store_explicit(&tx->busy, 0, memory_order_release);
}

static enum urt_task_result lane_task(struct urt_task *t, void *arg)
{
    (void)t;
    tx_body(arg, ST.steps);
    measure_done_count(&ST.done);
    return URT_TASK_DONE;
}

static enum urt_task_result mutex_task(struct urt_task *t, void *arg)
{
    struct tx *tx = arg;
    (void)t;
    pthread_mutex_lock(&tx->mutex);
    tx_body(tx, ST.steps);
    pthread_mutex_unlock(&tx->mutex);
    measure_done_count(&ST.done);
    return URT_TASK_DONE;
}

/* Task (t, j)'s object. The objects lie in the order the submitter writes
 * them: by transaction in fan-out mode (a root submits its own 1,000), by
 * round in remote mode (for j, for t). Laid out by transaction in remote
 * mode, task (t, j) would share a cache line with (t, j - 1), which a worker
 * is popping and running while the external thread writes (t, j): a line
 * bouncing per submission that is the benchmark's layout, not the runtime. */
static struct urt_task *task_slot(struct sticky *s, unsigned t, unsigned j)
{
    return &s->tasks[s->remote ? (size_t)j * TX_N + t : (size_t)t * TX_TASKS + j];
}

/* Submits task (t, j). From a root task (fan-out) or the external thread. */
static int submit_one(struct sticky *s, unsigned t, unsigned j)
{
    struct urt_task *task = task_slot(s, t, j);
    struct tx *tx = &s->tx[t];
    if (s->use_mutex) {
        urt_task_init(task, mutex_task, tx);
        return urt_task_submit(s->rt, task, 0);
    }
    urt_task_init(task, lane_task, tx);
    return urt_lane_submit(tx->lane, task, 0);
}

static enum urt_task_result root_task(struct urt_task *task, void *arg)
{
    struct tx *tx = arg;
    unsigned t = (unsigned)(tx - ST.tx);
    (void)task;
    for (unsigned j = 0; j < TX_TASKS; j++) {
        int err = submit_one(&ST, t, j);
        if (err) {
            measure_done_fail(&ST.done, ST.name, "local submission of task (%u, %u): %s", t, j, strerror(-err));
            break;
        }
    }
    return URT_TASK_DONE;
}

static void reset(struct sticky *s)
{
    for (unsigned t = 0; t < TX_N; t++) {
        s->tx[t].acc = t + 1;
        atomic_store_explicit(&s->tx[t].busy, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&s->violations, 0, memory_order_relaxed);
    measure_done_reset(&s->done, (uint64_t)TX_N * TX_TASKS);
}

/* Waits, then checks every accumulator and the violation count. */
static uint64_t finish(struct sticky *s)
{
    measure_event_wait(&s->done.event);
    if (atomic_load_explicit(&s->done.failed, memory_order_relaxed))
        return 0;
    unsigned bad = 0;
    for (unsigned t = 0; t < TX_N; t++)
        bad += s->tx[t].acc != s->tx[t].expect;
    unsigned viol = atomic_load_explicit(&s->violations, memory_order_relaxed);
    if (bad || viol) {
        fprintf(stderr, "# ERROR %s %s: %u wrong accumulators, %u concurrent executions\n", MEASURE_PEER,
                s->name, bad, viol);
        return 0;
    }
    uint64_t t0 = atomic_load_explicit(&s->done.t0, memory_order_relaxed);
    uint64_t t1 = atomic_load_explicit(&s->done.t1, memory_order_relaxed);
    return t1 > t0 ? t1 - t0 : 0;
}

static uint64_t it_fanout(void *ctx)
{
    struct sticky *s = ctx;
    reset(s);
    measure_done_start(&s->done); /* t0 on the external thread */
    for (unsigned t = 0; t < TX_N; t++) {
        urt_task_init(&s->tx[t].root, root_task, &s->tx[t]);
        int err = urt_task_submit(s->rt, &s->tx[t].root, 0);
        if (err) {
            fprintf(stderr, "# ERROR %s %s: submitting root %u: %s\n", MEASURE_PEER, s->name, t, strerror(-err));
            return 0; /* the target is never reached: do not wait */
        }
    }
    return finish(s);
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t it_remote(void *ctx)
{
    struct sticky *s = ctx;
    reset(s);
    measure_done_start(&s->done);
    uint64_t c0 = thread_cpu_ns();
    for (unsigned j = 0; j < TX_TASKS; j++)
        for (unsigned t = 0; t < TX_N; t++) {
            int err = submit_one(s, t, j);
            if (err) {
                fprintf(stderr, "# ERROR %s %s: submitting task (%u, %u): %s\n", MEASURE_PEER, s->name, t, j,
                        strerror(-err));
                return 0;
            }
        }
    s->submit_cpu_ns += thread_cpu_ns() - c0;
    s->submit_iters++;
    return finish(s);
}

/* The body's own cost on one thread (ns per run). */
static double body_ns(int steps)
{
    struct tx *tx = &ST.tx[0];
    tx->acc = 1;
    uint64_t t0 = urt_now_ns();
    for (int i = 0; i < BODY_RUNS; i++)
        tx_body(tx, steps);
    uint64_t t1 = urt_now_ns();
    /* keep the result alive */
    if (tx->acc == 0)
        fprintf(stderr, "# (acc 0)\n");
    return (double)(t1 - t0) / BODY_RUNS;
}

/* ---- the rate without a scheduler ------------------------------------------------------
 * The workload's own per-task operations (the body, steps 1-3, and step 5's
 * add on a shared completion counter) run by WORKERS plain threads, thread k
 * taking the transactions t with t % WORKERS == k in batches of 64 tasks, as
 * a lane runner does: what a scheduler that cost nothing would reach on this
 * machine (the printed ceiling leaves step 5 out). Printed as a note. */
#define FREE_RUNS 5
#define FREE_BATCH 64

struct free_arg {
    unsigned k, workers;
    int steps;
    atomic_ulong *count;
};

static void *free_thread(void *p)
{
    struct free_arg *a = p;
    for (unsigned j = 0; j < TX_TASKS; j += FREE_BATCH)
        for (unsigned t = a->k; t < TX_N; t += a->workers)
            for (unsigned i = j; i < j + FREE_BATCH && i < TX_TASKS; i++) {
                tx_body(&ST.tx[t], a->steps);
                atomic_fetch_add_explicit(a->count, 1, memory_order_acq_rel); /* step 5 */
            }
    return NULL;
}

/* tasks/s, the median of FREE_RUNS runs; 0 if a thread could not start. */
static double free_rate(unsigned workers, int steps)
{
    double rates[FREE_RUNS];
    struct free_arg args[TX_N];
    pthread_t th[TX_N];
    if (workers > TX_N)
        workers = TX_N; /* one more would have no transaction of its own */
    static _Alignas(64) atomic_ulong count;
    for (int r = 0; r < FREE_RUNS; r++) {
        atomic_store(&count, 0);
        uint64_t t0 = urt_now_ns();
        unsigned started = 0;
        for (; started < workers; started++) {
            args[started] = (struct free_arg){started, workers, steps, &count};
            if (pthread_create(&th[started], NULL, free_thread, &args[started]) != 0)
                break;
        }
        for (unsigned i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (started < workers)
            return 0;
        rates[r] = (double)atomic_load(&count) * 1e9 / (double)(urt_now_ns() - t0);
    }
    return measure_median(rates, FREE_RUNS);
}

static int run_sticky(urt_runtime *rt, const char *name)
{
    struct sticky *s = &ST;
    s->rt = rt;
    s->name = name;
    s->use_mutex = strstr(name, "_mutex") != NULL;
    bool remote = strstr(name, "_remote") != NULL;
    s->remote = remote;
    s->steps = (int)measure_setting(name, &TX_STEPS_S);
    atomic_store_explicit(&s->done.failed, false, memory_order_relaxed);

    int rc = 1;
    s->tasks = calloc((size_t)TX_N * TX_TASKS, sizeof(*s->tasks));
    if (!s->tasks) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, name);
        return 1;
    }
    unsigned made = 0;
    for (; made < TX_N; made++) {
        struct tx *tx = &s->tx[made];
        pthread_mutex_init(&tx->mutex, NULL);
        int err = urt_lane_create(rt, &tx->lane);
        if (err) {
            fprintf(stderr, "# ERROR %s %s: urt_lane_create: %s\n", MEASURE_PEER, name, strerror(-err));
            pthread_mutex_destroy(&tx->mutex);
            goto out;
        }
        tx->expect = xorshift_steps(made + 1, s->steps * TX_TASKS);
    }

    double bns = body_ns(s->steps);
    const struct urt_config *cfg = urt_runtime_config(rt);
    measure_note(name, "tx=%d tasks/tx=%d xorshift steps/task=%d; %s; %s submission; lane_balance=%s "
                       "ratio_check_local_first=%u",
                 TX_N, TX_TASKS, s->steps,
                 s->use_mutex ? "per-transaction pthread mutex around the body (ordinary tasks)"
                              : "one urt lane per transaction (strand on the owner's sticky queue)",
                 remote ? "remote (external thread submits every task)" : "fan-out (64 roots, local submission)",
                 cfg->lane_balance ? "true" : "false", cfg->dev_thousandths_ratio_check_local_first);
    measure_note(name, "ceiling = WORKERS / body = %.0f tasks/s", cfg->workers * 1e9 / bns);
    double no_sched = free_rate(cfg->workers, s->steps);
    if (no_sched > 0)
        measure_note(name, "without a scheduler = %.0f tasks/s (WORKERS plain threads, each its own transactions "
                           "in batches of 64: the body, step 1's exchange, step 5's shared add; median of %d runs)",
                     no_sched, FREE_RUNS);
    else
        measure_note(name, "without a scheduler: not measured (a thread could not start)");
    rc = measure_throughput(name, "tasks_per_s", "tasks/s", (double)TX_N * TX_TASKS, remote ? it_remote : it_fanout,
                            s);
    printf("%s %s body_ns %.2f ns\n", MEASURE_PEER, name, bns);
    fflush(stdout);
    if (remote && s->submit_iters)
        measure_note(name, "external thread: %.1f ns of CPU per submission (mean over %llu iterations)",
                     (double)s->submit_cpu_ns / ((double)s->submit_iters * TX_N * TX_TASKS),
                     (unsigned long long)s->submit_iters);
    s->submit_cpu_ns = s->submit_iters = 0;

out:
    /* rule 3 of workloads.h: nothing of ours is queued any more (every
     * iteration waited for its count, or never submitted); the lanes are
     * idle or about to be (urt_lane_destroy waits for that). */
    for (unsigned t = 0; t < made; t++) {
        urt_lane_destroy(s->tx[t].lane);
        pthread_mutex_destroy(&s->tx[t].mutex);
    }
    free(s->tasks);
    s->tasks = NULL;
    return rc;
}

const struct workload WL_STICKY[] = {
    {.name = "sticky_tx",
     .summary = "64 transactions x 1,000 tasks on urt lanes, fan-out from 64 roots (3.8)",
     .metrics = {"tasks_per_s", "body_ns", NULL},
     .run = run_sticky,
     .settings = STICKY_SETTINGS},
    {.name = "sticky_tx_mutex",
     .summary = "as sticky_tx, ordinary tasks under a per-transaction mutex (3.8)",
     .metrics = {"tasks_per_s", "body_ns", NULL},
     .run = run_sticky,
     .settings = STICKY_SETTINGS},
    {.name = "sticky_tx_remote",
     .summary = "64 x 1,000 lane tasks, all submitted by the external thread (3.8)",
     .metrics = {"tasks_per_s", "body_ns", NULL},
     .run = run_sticky,
     .settings = STICKY_SETTINGS},
    {.name = "sticky_tx_remote_mutex",
     .summary = "as sticky_tx_remote, ordinary tasks under a per-transaction mutex (3.8)",
     .metrics = {"tasks_per_s", "body_ns", NULL},
     .run = run_sticky,
     .settings = STICKY_SETTINGS},
    {0},
};
