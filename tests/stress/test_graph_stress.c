/*
 * tests/stress/test_graph_stress.c — task graphs (SPEC C16) under random
 * cancels, deadlines and errors while they run.
 *
 * Each round starts several graphs at once, each of one random shape built
 * from the same plan (every exchange kind: a scan with a random in-flight
 * limit into a forward of random capacity, a stream step into a shuffle, an
 * aggregate with a broadcast side input into a second shuffle, a final step;
 * beside them a one-partition source into a forward with a random LIMIT, a
 * DELIVER step behind it, and a processor pipeline). Step functions yield,
 * spin and fail (-EIO) at random; the external thread cancels some graphs
 * (urt_graph_cancel or urt_job_cancel on the graph's job) after a random
 * delay, some graphs have a random deadline, some tasks cancel their own
 * graph. The model the results are checked against:
 *   - the completion callback ran exactly once, with the status that
 *     urt_graph_wait and urt_job_poll return, which is 0 or one of the
 *     reasons this graph could have had (-ECANCELED, -ETIME, -EIO);
 *   - a graph with none of those ran to 0, and its processor sinks got
 *     every unit of their sources (or exactly the 12 they took before
 *     closing their input early);
 *   - every exchange gave back, through its release callback, exactly the
 *     units its producer had accepted (no unit lost or released twice);
 *   - every step ended DEACTIVATED;
 *   - task state: the scan, stream, shuffle, side-input, LIMIT-source and
 *     processor tasks keep a malloc'd state in urt_graph_task_state and never
 *     free it themselves: the step's cleanup gets each exactly once (states
 *     made = states given back, none twice), whether the task finished, was
 *     parked or was cut short;
 *   - the scan's partitions are each run, skipped or cut, once;
 *   - nothing leaks (LeakSanitizer in the ASan build).
 */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

#define N_GRAPHS 4
#define N_X 7

struct sg {
    uint64_t seed;
    int fail_permille, yield_permille, self_cancel_permille;
    uint32_t spin_ns;
    bool cancel, job_cancel, deadline, may_fail;
    _Atomic int calls, status, failed, self_cancelled;
    _Atomic int64_t states, cleaned, bad_cleanups;
    uint32_t scan_parts;
    int scan;
    _Atomic uint64_t released[N_X];
    int producer[N_X]; /* the producing step of exchange k */
    int n_steps;
    urt_graph *g;
    _Atomic uint32_t rng;
    /* processor state per partition of the three processor steps */
    struct {
        uint32_t i;
        bool has, closed_early;
        struct urt_graph_unit u;
    } ps[3][4];
};

static uint32_t dummy_row[16];

/* A deterministic-enough random stream shared by the graph's tasks. */
static uint32_t rnd(struct sg *s)
{
    uint32_t x = atomic_fetch_add_explicit(&s->rng, 0x9E3779B9u, memory_order_relaxed);
    x ^= x >> 16;
    x *= 0x7feb352d;
    x ^= x >> 15;
    x *= 0x846ca68b;
    return x ^ (x >> 16);
}

static void on_done(urt_graph *g, int status, void *arg)
{
    struct sg *s = arg;
    (void)g;
    atomic_store(&s->status, status);
    atomic_fetch_add(&s->calls, 1);
}

/* Task state: made on a task's first call, given back by the cleanup only. */
#define ST_MAGIC 0x5747u
struct tstate {
    uint32_t magic;
    intptr_t i; /* the task's cursor, where it has one */
};

static struct tstate *tstate(struct urt_graph_ctx *ctx, struct sg *s)
{
    struct tstate **st = (struct tstate **)urt_graph_task_state(ctx);
    if (!*st) {
        *st = calloc(1, sizeof(**st));
        (*st)->magic = ST_MAGIC;
        atomic_fetch_add(&s->states, 1);
    }
    return *st;
}

static void st_cleanup(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    struct tstate *t = *(struct tstate **)urt_graph_task_state(ctx);
    if (!t || t->magic != ST_MAGIC)
        atomic_fetch_add(&s->bad_cleanups, 1);
    else
        t->magic = 0;
    free(t);
    atomic_fetch_add(&s->cleaned, 1);
}

/* The shared random behaviour: -EIO, YIELD, self-cancel, or a little work. */
static int chaos(struct urt_graph_ctx *ctx, struct sg *s)
{
    uint32_t r = rnd(s) % 1000;
    if (s->may_fail && (int)r < s->fail_permille) {
        atomic_store(&s->failed, 1);
        return -EIO;
    }
    if ((int)(rnd(s) % 1000) < s->self_cancel_permille) {
        urt_graph_cancel(urt_graph_of(ctx));
        atomic_store(&s->self_cancelled, 1);
    }
    uint64_t until = now_ns() + s->spin_ns;
    while (now_ns() < until)
        ;
    return 0;
}

static int emit_or(struct urt_graph_ctx *ctx, uint32_t port, uint32_t part, uint32_t rows)
{
    int r = urt_graph_emit(ctx, port, part, dummy_row, rows);
    if (r == -EAGAIN)
        return URT_STEP_YIELD;
    return r == -EPIPE ? 0 : r;
}

/* scan: 2 units per partition (its task state counts them) */
static int st_scan(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    intptr_t *i = &tstate(ctx, s)->i;
    int c = chaos(ctx, s);
    if (c)
        return c;
    for (; *i < 2; (*i)++) {
        int r = emit_or(ctx, 0, 0, 10);
        if (r)
            return r;
    }
    if ((int)(rnd(s) % 1000) < s->yield_permille && *i == 2) {
        *i = 3;
        return URT_STEP_YIELD;
    }
    return URT_STEP_DONE;
}

static int st_mid(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    struct urt_graph_unit u;
    tstate(ctx, s); /* the stream's */
    int c = chaos(ctx, s);
    if (c)
        return c;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    return emit_or(ctx, 0, rnd(s) % 4, u.rows); /* a shuffle: never -EAGAIN */
}

static int st_dim(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    int c = chaos(ctx, s);
    return c ? c : emit_or(ctx, 0, 0, 3);
}

static int st_agg(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    struct urt_graph_unit u;
    tstate(ctx, s); /* the shuffle partition's */
    int c = chaos(ctx, s);
    if (c)
        return c;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        ;
    while (urt_graph_next(ctx, 1, &u) == 1) /* the side input */
        ;
    return emit_or(ctx, 0, 0, 1);
}

static int st_prepare(struct urt_graph_ctx *ctx, void *arg)
{
    tstate(ctx, arg); /* the side input's sub-task's */
    return chaos(ctx, arg);
}

static int st_fin(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    struct urt_graph_unit u;
    int c = chaos(ctx, s);
    while (!c && urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        ;
    return c;
}

/* one partition into a LIMIT: many units; stops when told or refused */
static int st_src1(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    intptr_t *i = &tstate(ctx, s)->i;
    for (; *i < 200 && !urt_graph_stopping(ctx); (*i)++) {
        int r = urt_graph_emit(ctx, 0, 0, dummy_row, 5);
        if (r == -EAGAIN)
            return URT_STEP_YIELD;
        if (r == -EPIPE)
            return URT_STEP_DONE;
        if (r)
            return r;
        if (*i % 50 == 49 && chaos(ctx, s))
            return -EIO;
    }
    return URT_STEP_DONE;
}

static int st_deliver(struct urt_graph_ctx *ctx, void *arg)
{
    struct urt_graph_unit u;
    (void)arg;
    urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u); /* its side effect: nothing here */
    return URT_STEP_DONE;
}

/* processors: source -> pass -> sink, per partition */
static int pr_src_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    uint32_t p = urt_graph_partition(ctx);
    tstate(ctx, s); /* the instance's */
    if (urt_graph_out_port(ctx, 0) & URT_PORT_FINISHED)
        return URT_PROC_FINISHED;
    if (s->ps[0][p].i == 20) {
        urt_graph_finish(ctx, 0);
        return URT_PROC_FINISHED;
    }
    if (urt_graph_out_port(ctx, 0) & URT_PORT_HAS_DATA)
        return URT_PROC_NEED_CONSUME;
    return URT_PROC_SYNC;
}

static int pr_src_process(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    uint32_t p = urt_graph_partition(ctx);
    if ((int)(rnd(s) % 1000) < s->fail_permille && s->may_fail) {
        atomic_store(&s->failed, 1);
        return -EIO;
    }
    if (urt_graph_push(ctx, 0, dummy_row, 2) == 0)
        s->ps[0][p].i++;
    return 0;
}

/* pass: gives each pulled unit back at once and pushes a unit of its own */
static int pr_pass_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    uint32_t p = urt_graph_partition(ctx);
    for (;;) {
        if (s->ps[1][p].has) {
            int r = urt_graph_push(ctx, 0, dummy_row, s->ps[1][p].u.rows);
            if (r == -EAGAIN)
                return URT_PROC_NEED_CONSUME;
            s->ps[1][p].has = false;
            if (r == -EPIPE)
                return URT_PROC_FINISHED;
        }
        int r = urt_graph_pull(ctx, 0, &s->ps[1][p].u);
        if (r == -EPIPE) {
            urt_graph_finish(ctx, 0);
            return URT_PROC_FINISHED;
        }
        if (r != 1)
            return URT_PROC_NEED_DATA;
        urt_graph_unit_release(ctx, 0, s->ps[1][p].u.data, s->ps[1][p].u.rows);
        s->ps[1][p].has = true;
    }
}

static int pr_sink_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct sg *s = arg;
    uint32_t p = urt_graph_partition(ctx);
    struct urt_graph_unit u;
    int r;
    while ((r = urt_graph_pull(ctx, 0, &u)) == 1) {
        urt_graph_unit_release(ctx, 0, u.data, u.rows);
        if (++s->ps[2][p].i == 12 && (rnd(s) & 1)) {
            s->ps[2][p].closed_early = true;
            return URT_PROC_FINISHED; /* closes its input early */
        }
    }
    return r == -EPIPE ? URT_PROC_FINISHED : URT_PROC_NEED_DATA;
}

static const struct urt_processor P_SRC = {.event = pr_src_event, .process = pr_src_process};
static const struct urt_processor P_PASS = {.event = pr_pass_event};
static const struct urt_processor P_SINK = {.event = pr_sink_event};

/* ---- building ------------------------------------------------------------------------------------ */

static void on_release(void *data, uint32_t rows, void *arg)
{
    (void)data;
    (void)rows;
    atomic_fetch_add((_Atomic uint64_t *)arg, 1);
}

static int step(urt_graph *g, struct urt_step_desc d)
{
    int id = urt_graph_add_step(g, &d);
    cr_assert_geq(id, 0, "%s", urt_last_error());
    return id;
}

static void edge(struct sg *s, int from, int to, int k, struct urt_exchange_desc d)
{
    d.release = on_release;
    d.release_arg = &s->released[k];
    int x = urt_graph_add_exchange(s->g, &d);
    cr_assert_eq(x, k);
    cr_assert_geq(urt_graph_add_output(s->g, from, x), 0, "%s", urt_last_error());
    cr_assert_geq(urt_graph_add_input(s->g, to, x), 0, "%s", urt_last_error());
    s->producer[k] = from;
}

static void build(urt_runtime *rt, struct sg *s, uint64_t *seed)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = on_done;
    o.arg = s;
    o.deadline_ns = s->deadline ? 200000 + rng_next(seed) % 3000000 : 0;
    cr_assert_eq(urt_graph_create(rt, &o, &s->g), 0);
    urt_graph *g = s->g;
    uint32_t scan_parts = 4 + rng_next(seed) % 29;
    s->scan_parts = scan_parts;
    int scan = step(g, (struct urt_step_desc){.name = "scan", .fn = st_scan, .cleanup = st_cleanup, .arg = s,
                                              .partitions = scan_parts, .max_in_flight = (uint32_t)(rng_next(seed) % 6),
                                              .flags = URT_STEP_SCAN});
    s->scan = scan;
    int mid = step(g, (struct urt_step_desc){.name = "mid", .fn = st_mid, .cleanup = st_cleanup, .arg = s,
                                             .partitions = 3});
    int dim = step(g, (struct urt_step_desc){.name = "dim", .fn = st_dim, .arg = s, .partitions = 1});
    int agg = step(g, (struct urt_step_desc){.name = "agg", .fn = st_agg, .prepare = st_prepare, .cleanup = st_cleanup,
                                             .arg = s, .partitions = 4,
                                             .flags = (rng_next(seed) & 1) ? URT_STEP_TAKE_COGROUP : 0});
    int fin = step(g, (struct urt_step_desc){.name = "fin", .fn = st_fin, .arg = s, .partitions = 1});
    int src1 = step(g, (struct urt_step_desc){.name = "src1", .fn = st_src1, .cleanup = st_cleanup, .arg = s,
                                              .partitions = 1});
    int del = step(g, (struct urt_step_desc){.name = "deliver", .fn = st_deliver, .arg = s,
                                             .flags = URT_STEP_DELIVER});
    int p0 = step(g, (struct urt_step_desc){.name = "psrc", .processor = &P_SRC, .cleanup = st_cleanup, .arg = s,
                                            .partitions = 2});
    int p1 = step(g, (struct urt_step_desc){.name = "ppass", .processor = &P_PASS, .arg = s});
    int p2 = step(g, (struct urt_step_desc){.name = "psink", .processor = &P_SINK, .arg = s});
    s->n_steps = 10;
    edge(s, scan, mid, 0, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD,
                                                     .capacity = 1 + (uint32_t)(rng_next(seed) % 16)});
    edge(s, mid, agg, 1, (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    edge(s, dim, agg, 2, (struct urt_exchange_desc){.kind = URT_EXCHANGE_BROADCAST});
    edge(s, agg, fin, 3, (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    edge(s, src1, del, 4, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD, .capacity = 4,
                                                     .limit_rows = 1 + rng_next(seed) % 600});
    edge(s, p0, p1, 5, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
    edge(s, p1, p2, 6, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
}

static void one_round(urt_runtime *rt, uint64_t *seed)
{
    static struct sg sgs[N_GRAPHS];
    for (int i = 0; i < N_GRAPHS; i++) {
        struct sg *s = &sgs[i];
        memset(s, 0, sizeof(*s));
        atomic_store(&s->rng, (uint32_t)rng_next(seed));
        uint32_t mode = rng_next(seed) % 8;
        s->cancel = mode == 1;
        s->job_cancel = mode == 2;
        s->deadline = mode == 3 || mode == 4;
        s->may_fail = mode == 5 || mode == 4;
        s->fail_permille = 5 + rng_next(seed) % 60;
        s->yield_permille = (int)(rng_next(seed) % 300);
        s->self_cancel_permille = mode == 6 ? 20 : 0;
        s->spin_ns = (uint32_t)(rng_next(seed) % 20000);
        build(rt, s, seed);
    }
    for (int i = 0; i < N_GRAPHS; i++)
        cr_assert_eq(urt_graph_start(sgs[i].g), 0, "%s", urt_last_error());
    sleep_us(rng_next(seed) % 1500);
    for (int i = 0; i < N_GRAPHS; i++) {
        if (sgs[i].cancel)
            urt_graph_cancel(sgs[i].g); /* -EALREADY if it ended */
        if (sgs[i].job_cancel)
            urt_job_cancel(urt_graph_job(sgs[i].g));
    }
    for (int i = 0; i < N_GRAPHS; i++) {
        struct sg *s = &sgs[i];
        int st = urt_graph_wait(s->g, 30ull * 1000000000ull);
        cr_assert_neq(st, -ETIMEDOUT, "graph %d did not end", i);
        cr_assert_eq(atomic_load(&s->calls), 1, "callback ran %d times", atomic_load(&s->calls));
        cr_assert_eq(atomic_load(&s->status), st);
        cr_assert_eq(urt_job_poll(urt_graph_job(s->g)), st);
        bool cancelled = s->cancel || s->job_cancel || atomic_load(&s->self_cancelled);
        bool ok = st == 0 || (st == -ECANCELED && cancelled) || (st == -ETIME && s->deadline) ||
                  (st == -EIO && atomic_load(&s->failed));
        cr_assert(ok, "graph %d ended with %d (cancel %d/%d/%d deadline %d failed %d)", i, st, s->cancel,
                  s->job_cancel, atomic_load(&s->self_cancelled), s->deadline, atomic_load(&s->failed));
        if (!cancelled && !s->deadline && !atomic_load(&s->failed))
            cr_assert_eq(st, 0);
        for (int q = 0; q < 2 && st == 0; q++) /* a run to its end: every unit reached the sink */
            cr_assert_eq(s->ps[2][q].i, s->ps[2][q].closed_early ? 12u : 20u, "graph %d sink %d got %u units", i, q,
                         s->ps[2][q].i);
        for (int k = 0; k < N_X; k++) {
            struct urt_graph_step_stats stats;
            cr_assert_eq(urt_graph_step_stats(s->g, s->producer[k], &stats), 0);
            cr_assert_eq(atomic_load(&s->released[k]), stats.units_out, "graph %d exchange %d: %llu released, %llu accepted",
                         i, k, (unsigned long long)atomic_load(&s->released[k]), (unsigned long long)stats.units_out);
        }
        for (int k = 0; k < s->n_steps; k++)
            cr_assert_eq(urt_graph_step_state(s->g, k), URT_STEP_DEACTIVATED, "graph %d step %d", i, k);
        cr_assert_eq(atomic_load(&s->bad_cleanups), 0, "graph %d: a cleanup got a state twice or a wrong one", i);
        cr_assert_eq(atomic_load(&s->cleaned), atomic_load(&s->states), "graph %d (status %d): %lld states made, %lld "
                     "given to the cleanup", i, st, (long long)atomic_load(&s->states),
                     (long long)atomic_load(&s->cleaned));
        struct urt_graph_step_stats ss;
        cr_assert_eq(urt_graph_step_stats(s->g, s->scan, &ss), 0);
        cr_assert_eq(ss.tasks_run + ss.tasks_skipped + ss.tasks_cut, s->scan_parts,
                     "graph %d scan: run %llu + skipped %llu + cut %llu != %u partitions", i,
                     (unsigned long long)ss.tasks_run, (unsigned long long)ss.tasks_skipped,
                     (unsigned long long)ss.tasks_cut, s->scan_parts);
        urt_graph_release(s->g);
    }
}

static void stress(uint32_t workers, int rounds, uint64_t seed)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    for (int r = 0; r < rounds; r++)
        one_round(rt, &seed);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(graph_stress, random_cancels_deadlines_errors_2_workers, .timeout = 300)
{
    stress(2, SCALE(150, 30), 0x1234567ull);
}

Test(graph_stress, random_cancels_deadlines_errors_4_workers, .timeout = 300)
{
    stress(4, SCALE(100, 20), 0xabcdef1ull);
}
