/*
 * tools/urt-load/wl_core.c — the core workload family: docs/benchmarks.md
 * sections 3.1-3.7 on urt (spawn_many_local, spawn_many_remote, yield_many,
 * ping_pong, chained_spawn, wake_latency, wake_latency_parked).
 *
 * How each urt primitive maps onto the spec's words:
 *  - remote submission: urt_spawn() from the external (main) thread; it goes
 *    to the inbox of the thread's preferred worker (or round robin, per
 *    use_preferred_worker_for_current_thread);
 *  - local submission: urt_spawn() or urt_task_submit() with flags 0 from a
 *    task: the running worker's own deque (C5);
 *  - yield: the task returns URT_TASK_YIELD: it is queued again behind the
 *    worker's other runnable work (task.h rule 4);
 *  - wake / continuation (ping_pong): the sender writes the receiver's
 *    mailbox, then submits the receiver's continuation task locally; a round
 *    trip is two local submissions, like the run-to-completion peers.
 *
 * Embedded tasks and reuse (task.h lifecycle). ping_pong and chained_spawn
 * use embedded struct urt_task objects (zero allocation): a task is never
 * resubmitted while its own fn may still run it. Each side of ping_pong
 * alternates between two tasks and the chain rotates over CHAIN_RING tasks,
 * so when a task object is submitted again, the run that used it last has
 * already submitted its successor, and that successor (and at least one
 * more task) has run since; the old run's only remaining step is
 * `return URT_TASK_DONE`, and by rule 3 the runtime does not touch a task
 * after its fn returned DONE. Every object is re-initialised
 * (urt_task_init) before each submission.
 *
 * Shared state: one file-static struct core, written by the external
 * thread before it submits an iteration's first task (the submission
 * publishes it) and by tasks while the iteration runs; the completion
 * protocol (measure.h) orders everything the external thread reads back.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "workloads.h"

#define CHAIN_RING 4 /* rotating task objects of chained_spawn */

struct yielder {
    struct urt_task task;
    uint32_t left; /* yields still to do */
    uint32_t calls; /* calls of fn (checked: YIELDS + 1) */
};

struct pingpong {
    struct urt_task a[2], b[2]; /* A's and B's continuations, alternating by round parity */
    uint64_t to_b;              /* B's mailbox: the round A sent */
    uint64_t to_a;              /* A's mailbox: B's reply */
    uint64_t round;             /* A's state: the reply it waits for */
};

struct core {
    urt_runtime *rt;
    const char *name; /* the workload running */
    unsigned workers;
    struct measure_done done;
    struct yielder *yielders; /* yield_many: 2 * workers */
    struct pingpong pp;
    struct urt_task chain[CHAIN_RING];
};

static struct core CORE;

/* ---- helpers --------------------------------------------------------------- */

/* Waits for the iteration's completion; t1 - t0 in ns, or 0 if it failed. */
static uint64_t wait_elapsed(struct core *c)
{
    measure_event_wait(&c->done.event);
    if (atomic_load_explicit(&c->done.failed, memory_order_relaxed))
        return 0;
    uint64_t t0 = atomic_load_explicit(&c->done.t0, memory_order_relaxed);
    uint64_t t1 = atomic_load_explicit(&c->done.t1, memory_order_relaxed);
    if (t1 <= t0) {
        fprintf(stderr, "# ERROR %s %s: t1 (%llu) is not after t0 (%llu)\n", MEASURE_PEER, c->name,
                (unsigned long long)t1, (unsigned long long)t0);
        return 0;
    }
    return t1 - t0;
}

/* Submits a root task remotely (from the external thread). */
static int submit_root(struct core *c, urt_task_fn *fn)
{
    int err = urt_spawn(c->rt, fn, c, 0);
    if (err)
        fprintf(stderr, "# ERROR %s %s: urt_spawn of the root task: %s\n", MEASURE_PEER, c->name,
                strerror(-err));
    return err;
}

/* (Re)initialises an embedded task and submits it locally (from a task). */
static bool submit_embedded(struct core *c, struct urt_task *t, urt_task_fn *fn, void *arg)
{
    urt_task_init(t, fn, arg);
    int err = urt_task_submit(c->rt, t, 0);
    if (err) {
        measure_done_fail(&c->done, c->name, "urt_task_submit: %s", strerror(-err));
        return false;
    }
    return true;
}

/* ---- 3.1 / 3.2 spawn_many: children ----------------------------------------- */

/* A child carries no payload (arg NULL): one counter increment. */
static enum urt_task_result child_task(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    measure_done_count(&CORE.done);
    return URT_TASK_DONE;
}

/* ---- 3.1 spawn_many_local -------------------------------------------------- */

static enum urt_task_result spawn_root(struct urt_task *t, void *arg)
{
    struct core *c = arg;
    (void)t;
    measure_done_start(&c->done);
    for (int i = 0; i < SPAWN_N; i++) {
        int err = urt_spawn(c->rt, child_task, NULL, 0);
        if (err) {
            measure_done_fail(&c->done, c->name, "local urt_spawn %d: %s", i, strerror(-err));
            break;
        }
    }
    return URT_TASK_DONE;
}

static uint64_t it_spawn_many_local(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, SPAWN_N);
    if (submit_root(c, spawn_root))
        return 0;
    return wait_elapsed(c);
}

/* ---- 3.2 spawn_many_remote ------------------------------------------------- */

static uint64_t it_spawn_many_remote(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, SPAWN_N);
    measure_done_start(&c->done);
    for (int i = 0; i < SPAWN_N; i++) {
        int err = urt_spawn(c->rt, child_task, NULL, 0);
        if (err) {
            /* the children already submitted run and finish; the target is
             * never reached, so do not wait */
            fprintf(stderr, "# ERROR %s %s: remote urt_spawn %d: %s\n", MEASURE_PEER, c->name, i,
                    strerror(-err));
            return 0;
        }
    }
    return wait_elapsed(c);
}

/* ---- 3.3 yield_many -------------------------------------------------------- */

static enum urt_task_result yielder_task(struct urt_task *t, void *arg)
{
    struct yielder *y = arg;
    (void)t;
    y->calls++;
    if (y->left > 0) {
        y->left--;
        return URT_TASK_YIELD;
    }
    measure_done_count(&CORE.done);
    return URT_TASK_DONE;
}

static enum urt_task_result yield_root(struct urt_task *t, void *arg)
{
    struct core *c = arg;
    (void)t;
    measure_done_start(&c->done);
    for (unsigned k = 0; k < 2 * c->workers; k++) {
        struct yielder *y = &c->yielders[k];
        y->left = YIELDS;
        y->calls = 0;
        if (!submit_embedded(c, &y->task, yielder_task, y))
            break;
    }
    return URT_TASK_DONE;
}

static uint64_t it_yield_many(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, 2u * c->workers);
    if (submit_root(c, yield_root))
        return 0;
    uint64_t ns = wait_elapsed(c);
    for (unsigned k = 0; ns && k < 2 * c->workers; k++) {
        if (c->yielders[k].calls != YIELDS + 1) {
            fprintf(stderr, "# ERROR %s %s: task %u was called %u times, expected %d\n", MEASURE_PEER,
                    c->name, k, c->yielders[k].calls, YIELDS + 1);
            return 0;
        }
    }
    return ns;
}

/* ---- 3.4 ping_pong --------------------------------------------------------- */

static enum urt_task_result pp_a_task(struct urt_task *t, void *arg);

/* B: reads round r from its mailbox, replies r, wakes A's continuation. */
static enum urt_task_result pp_b_task(struct urt_task *t, void *arg)
{
    struct pingpong *pp = arg;
    (void)t;
    uint64_t r = pp->to_b;
    pp->to_a = r;
    submit_embedded(&CORE, &pp->a[r & 1], pp_a_task, pp);
    return URT_TASK_DONE;
}

/* A: checks reply r; round 0 is the handshake (t0 after it), reply PP_ROUNDS
 * ends the iteration (t1); otherwise sends r + 1 and wakes B. */
static enum urt_task_result pp_a_task(struct urt_task *t, void *arg)
{
    struct pingpong *pp = arg;
    struct core *c = &CORE;
    (void)t;
    uint64_t r = pp->round;
    if (pp->to_a != r) {
        measure_done_fail(&c->done, c->name, "round %llu: reply %llu", (unsigned long long)r,
                          (unsigned long long)pp->to_a);
        return URT_TASK_DONE;
    }
    if (r == 0)
        measure_done_start(&c->done);
    if (r == PP_ROUNDS) {
        atomic_store_explicit(&c->done.t1, urt_now_ns(), memory_order_relaxed);
        measure_event_set(&c->done.event);
        return URT_TASK_DONE;
    }
    pp->round = r + 1;
    pp->to_b = r + 1;
    submit_embedded(c, &pp->b[(r + 1) & 1], pp_b_task, pp);
    return URT_TASK_DONE;
}

/* The root becomes A: it sends round 0 (the untimed handshake) and wakes B. */
static enum urt_task_result pp_root(struct urt_task *t, void *arg)
{
    struct core *c = arg;
    struct pingpong *pp = &c->pp;
    (void)t;
    pp->round = 0;
    pp->to_a = UINT64_MAX;
    pp->to_b = 0;
    submit_embedded(c, &pp->b[0], pp_b_task, pp);
    return URT_TASK_DONE;
}

static uint64_t it_ping_pong(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, 1);
    if (submit_root(c, pp_root))
        return 0;
    uint64_t ns = wait_elapsed(c);
    if (ns && c->pp.round != PP_ROUNDS) {
        fprintf(stderr, "# ERROR %s %s: ended at round %llu\n", MEASURE_PEER, c->name,
                (unsigned long long)c->pp.round);
        return 0;
    }
    return ns;
}

/* ---- 3.5 chained_spawn ----------------------------------------------------- */

/* Task k (arg) submits task k + 1 locally; task CHAIN_DEPTH takes t1. */
static enum urt_task_result chain_task(struct urt_task *t, void *arg)
{
    struct core *c = &CORE;
    uintptr_t k = (uintptr_t)arg;
    (void)t;
    if (k == CHAIN_DEPTH) {
        atomic_store_explicit(&c->done.t1, urt_now_ns(), memory_order_relaxed);
        measure_event_set(&c->done.event);
        return URT_TASK_DONE;
    }
    submit_embedded(c, &c->chain[(k + 1) % CHAIN_RING], chain_task, (void *)(k + 1));
    return URT_TASK_DONE;
}

static enum urt_task_result chain_root(struct urt_task *t, void *arg)
{
    struct core *c = arg;
    (void)t;
    measure_done_start(&c->done);
    submit_embedded(c, &c->chain[1], chain_task, (void *)(uintptr_t)1);
    return URT_TASK_DONE;
}

static uint64_t it_chained_spawn(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, 1);
    if (submit_root(c, chain_root))
        return 0;
    return wait_elapsed(c);
}

/* ---- 3.6 / 3.7 wake_latency ------------------------------------------------ */

/* The sample task: its first action is t_start, then it signals. */
static enum urt_task_result wake_task(struct urt_task *t, void *arg)
{
    struct core *c = arg;
    (void)t;
    atomic_store_explicit(&c->done.t1, urt_now_ns(), memory_order_relaxed);
    measure_event_set(&c->done.event);
    return URT_TASK_DONE;
}

static int wake_latency(struct core *c, int warmup, int samples, uint64_t gap_us)
{
    uint64_t *lat = calloc((size_t)samples, sizeof(*lat));
    if (!lat) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, c->name);
        return 1;
    }
    measure_sleep_us(IDLE_MS * 1000u);
    uint64_t cpu0 = 0, wall0 = 0;
    for (int i = 0; i < warmup + samples; i++) {
        if (i == warmup) {
            cpu0 = measure_cpu_ns();
            wall0 = urt_now_ns();
        }
        measure_sleep_us(gap_us);
        uint64_t t_sub = urt_now_ns();
        int err = urt_spawn(c->rt, wake_task, c, 0);
        if (err) {
            fprintf(stderr, "# ERROR %s %s: urt_spawn of sample %d: %s\n", MEASURE_PEER, c->name, i,
                    strerror(-err));
            free(lat);
            return 1;
        }
        measure_event_wait(&c->done.event);
        uint64_t t_start = atomic_load_explicit(&c->done.t1, memory_order_relaxed);
        if (t_start < t_sub) {
            fprintf(stderr, "# ERROR %s %s: sample %d started before it was submitted\n", MEASURE_PEER,
                    c->name, i);
            free(lat);
            return 1;
        }
        if (i >= warmup)
            lat[i - warmup] = t_start - t_sub;
    }
    double cpu_pct = (double)(measure_cpu_ns() - cpu0) * 100.0 / (double)(urt_now_ns() - wall0);
    measure_report_latency(c->name, lat, (size_t)samples, cpu_pct);
    free(lat);
    return 0;
}

/* ---- entry points ------------------------------------------------------------ */

static struct core *core_begin(urt_runtime *rt, const char *name)
{
    struct core *c = &CORE;
    c->rt = rt;
    c->name = name;
    c->workers = urt_runtime_config(rt)->workers;
    atomic_store_explicit(&c->done.failed, false, memory_order_relaxed);
    return c;
}

static int run_spawn_many_local(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    measure_note(name, "root: urt_spawn from the external thread; children: urt_spawn(rt, fn, NULL, 0) "
                       "from the root task (the worker's own deque), one per child");
    return measure_throughput(name, "tasks_per_s", "tasks/s", SPAWN_N, it_spawn_many_local, c);
}

static int run_spawn_many_remote(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    measure_note(name, "children: urt_spawn(rt, fn, NULL, 0) from the external thread (%s)",
                 urt_runtime_config(rt)->use_preferred_worker_for_current_thread
                     ? "inbox of its preferred worker"
                     : "round-robin inboxes");
    return measure_throughput(name, "tasks_per_s", "tasks/s", SPAWN_N, it_spawn_many_remote, c);
}

static int run_yield_many(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    c->yielders = calloc(2u * c->workers, sizeof(*c->yielders));
    if (!c->yielders) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, name);
        return 1;
    }
    measure_note(name, "yield: the task returns URT_TASK_YIELD (re-queued behind the worker's other "
                       "work); %u embedded tasks submitted locally with urt_task_submit by the root",
                 2 * c->workers);
    int rc = measure_throughput(name, "yields_per_s", "yields/s", 2.0 * c->workers * YIELDS, it_yield_many, c);
    /* Rule 3 of workloads.h: after a successful run every yielder has
     * counted, so none is queued. After a failure some may still run: keep
     * their memory (the process ends soon). */
    if (rc == 0) {
        free(c->yielders);
        c->yielders = NULL;
    }
    return rc;
}

static int run_ping_pong(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    measure_note(name, "wake: the sender writes the receiver's mailbox, then submits the receiver's "
                       "continuation (embedded struct urt_task, two alternating per side) locally with "
                       "urt_task_submit; a round trip is two local submissions");
    return measure_throughput(name, "round_trips_per_s", "round_trips/s", PP_ROUNDS, it_ping_pong, c);
}

static int run_chained_spawn(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    measure_note(name, "task k submits task k+1 locally with urt_task_submit (embedded struct urt_task, "
                       "%d rotating objects: no allocation)",
                 CHAIN_RING);
    return measure_throughput(name, "spawns_per_s", "spawns/s", CHAIN_DEPTH, it_chained_spawn, c);
}

static void note_wake_policy(urt_runtime *rt, const char *name, uint64_t gap_us)
{
    const struct urt_config *cfg = urt_runtime_config(rt);
    measure_note(name, "sample: urt_spawn from the external thread after a %llu us nanosleep; "
                       "busy_worker=%s worker_try_count=%u worker_spin_adaptive=%s task_polling_wait=%u",
                 (unsigned long long)gap_us, cfg->busy_worker ? "true" : "false", cfg->worker_try_count,
                 cfg->worker_spin_adaptive ? "true" : "false", cfg->task_polling_wait);
}

static int run_wake_latency(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    note_wake_policy(rt, name, WL_GAP_US);
    return wake_latency(c, WL_WARMUP, WL_SAMPLES, WL_GAP_US);
}

static int run_wake_latency_parked(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    note_wake_policy(rt, name, WLP_GAP_US);
    return wake_latency(c, WLP_WARMUP, WLP_SAMPLES, WLP_GAP_US);
}

/* ---- affinity_counters (urt's own: tasks sent to a worker, C5) ---------------- */

/* One counter per worker, on its own cache line, bumped without atomics by
 * the tasks sent to that worker only (urt_spawn_to): affinity is what makes
 * the plain increment safe. */
#define AFF_MAX_WORKERS 256
static struct {
    alignas(64) uint64_t n;
} AFF[AFF_MAX_WORKERS];
static uint64_t aff_sent;

static enum urt_task_result aff_task(struct urt_task *t, void *arg)
{
    (void)t;
    AFF[(uintptr_t)arg].n++;
    measure_done_count(&CORE.done);
    return URT_TASK_DONE;
}

static uint64_t it_affinity(void *ctx)
{
    struct core *c = ctx;
    measure_done_reset(&c->done, SPAWN_N);
    measure_done_start(&c->done);
    for (int i = 0; i < SPAWN_N; i++) {
        uintptr_t k = (uintptr_t)i % c->workers;
        int err = urt_spawn_to(c->rt, (uint32_t)k, aff_task, NULL, (void *)k, 0);
        if (err) {
            fprintf(stderr, "# ERROR %s %s: urt_spawn_to %d: %s\n", MEASURE_PEER, c->name, i, strerror(-err));
            return 0;
        }
        aff_sent++;
    }
    return wait_elapsed(c);
}

static int run_affinity_counters(urt_runtime *rt, const char *name)
{
    struct core *c = core_begin(rt, name);
    if (c->workers > AFF_MAX_WORKERS) {
        fprintf(stderr, "# ERROR %s %s: more than %d workers\n", MEASURE_PEER, name, AFF_MAX_WORKERS);
        return 1;
    }
    measure_note(name, "the external thread sends %d tasks round robin to the %u workers with urt_spawn_to; "
                       "each bumps its worker's counter without atomics",
                 SPAWN_N, c->workers);
    int rc = measure_throughput(name, "tasks_per_s", "tasks/s", SPAWN_N, it_affinity, c);
    uint64_t sum = 0;
    for (unsigned k = 0; k < c->workers; k++)
        sum += AFF[k].n;
    if (rc == 0 && sum != aff_sent) {
        fprintf(stderr, "# ERROR %s %s: counters hold %llu increments, %llu tasks were sent\n", MEASURE_PEER, name,
                (unsigned long long)sum, (unsigned long long)aff_sent);
        return 1;
    }
    measure_note(name, "counters checked: %llu increments for %llu tasks sent", (unsigned long long)sum,
                 (unsigned long long)aff_sent);
    return rc;
}

#define LATENCY_METRICS {"p50_us", "p99_us", "p999_us", "cpu_pct", NULL}

const struct workload WL_CORE[] = {
    {.name = "spawn_many_local",
     .summary = "a root task spawns 10,000 children locally (3.1)",
     .metrics = {"tasks_per_s", NULL},
     .run = run_spawn_many_local},
    {.name = "spawn_many_remote",
     .summary = "the external thread spawns 10,000 children (3.2)",
     .metrics = {"tasks_per_s", NULL},
     .run = run_spawn_many_remote},
    {.name = "yield_many",
     .summary = "2 x WORKERS tasks yield 1,000 times each (3.3)",
     .metrics = {"yields_per_s", NULL},
     .run = run_yield_many},
    {.name = "ping_pong",
     .summary = "two tasks exchange 1,000 messages through continuations (3.4)",
     .metrics = {"round_trips_per_s", NULL},
     .run = run_ping_pong},
    {.name = "chained_spawn",
     .summary = "task k spawns task k+1, 1,000 deep (3.5)",
     .metrics = {"spawns_per_s", NULL},
     .run = run_chained_spawn},
    {.name = "wake_latency",
     .summary = "external submit -> task start, 200 us gaps (3.6)",
     .metrics = LATENCY_METRICS,
     .run = run_wake_latency},
    {.name = "wake_latency_parked",
     .summary = "external submit -> task start, 2 ms gaps: parked workers (3.7)",
     .metrics = LATENCY_METRICS,
     .run = run_wake_latency_parked},
    {.name = "affinity_counters",
     .summary = "tasks sent to each worker bump its counter without atomics (urt only)",
     .metrics = {"tasks_per_s", NULL},
     .run = run_affinity_counters},
    {0},
};
