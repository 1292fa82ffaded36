/*
 * tests/unit/test_graph.c — task graphs (SPEC C16, urt/graph.h).
 *
 *  - partition rules one by one: P1 (default, the graph's option), P2
 *    (consumers of one exchange agree), P3 (a limit-forward's producer), P4
 *    (a shuffle drops partitions without data; TAKE_COGROUP keeps them; task
 *    indexes keep their place), P5 (a broadcast: one sub-task per side input,
 *    every partition sees every unit), P6 (forward: the sum of the producers,
 *    offsets; the scan exception);
 *  - a graph with every exchange kind (forward, shuffle, broadcast, a
 *    cogroup) against a single-threaded reference, for 1, 2 and 4 workers;
 *  - step states: every step ends DEACTIVATED; a forward consumer is RUNNING
 *    while its producer still runs; a shuffle consumer's function and a
 *    processor's event() do not run before their step is RUNNING (also a
 *    processor notified by its producer before its step started);
 *  - early completion: a LIMIT step (urt_graph_complete) — at most one task
 *    per other worker starts after it was observed, most partitions never
 *    start, the graph ends with 0; a forward limit_rows clips and stops its
 *    producer; a DELIVER step upstream of a limit is not cut (it and its
 *    producer see every unit);
 *  - errors: a step returning -EIO in every position (and a prepare
 *    function) aborts the graph: callback once with -EIO, urt_graph_wait and
 *    the job say -EIO, every accepted unit is released once;
 *  - cancel and deadline: urt_graph_cancel, urt_job_cancel on the graph's
 *    job, a deadline over a graph that would run forever;
 *  - back-pressure: a fast producer behind a slow consumer holds at most
 *    `capacity` units, yields (parks), and the units arrive in order;
 *  - lanes: a step on a lane never runs two tasks at once;
 *  - processors: a sync pipeline (source -> transform -> sink, port states),
 *    a sink that finishes early closes its input (the producer's push gets
 *    -EPIPE), async work completed from a helper thread continues on the
 *    worker that started it;
 *  - runtime destroy in drain mode runs a started graph to its end.
 * Random cancels and deadlines over many graphs: tests/stress/test_graph_stress.c.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

/* ---- common bits ----------------------------------------------------------------------- */

struct done_rec {
    _Atomic int calls;
    _Atomic int status;
};

static void on_done(urt_graph *g, int status, void *arg)
{
    struct done_rec *d = arg;
    (void)g;
    atomic_store(&d->status, status);
    atomic_fetch_add(&d->calls, 1);
}

static urt_runtime *make_rt(uint32_t workers)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    return rt_create_or_skip(&cfg);
}

static urt_graph *make_graph(urt_runtime *rt, struct done_rec *d, uint32_t partitions)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = on_done;
    o.arg = d;
    o.partitions = partitions;
    urt_graph *g = NULL;
    cr_assert_eq(urt_graph_create(rt, &o, &g), 0, "%s", urt_last_error());
    return g;
}

static int add_step(urt_graph *g, const char *name, urt_graph_step_fn *fn, void *arg, uint32_t parts, uint32_t flags)
{
    struct urt_step_desc d = {.name = name, .fn = fn, .arg = arg, .partitions = parts, .flags = flags};
    int id = urt_graph_add_step(g, &d);
    cr_assert_geq(id, 0, "add_step %s: %s", name, urt_last_error());
    return id;
}

/* Units released: counted per exchange. */
struct rel {
    _Atomic uint64_t units, rows;
};

static void on_release(void *data, uint32_t rows, void *arg)
{
    struct rel *r = arg;
    (void)data;
    atomic_fetch_add(&r->units, 1);
    atomic_fetch_add(&r->rows, rows);
}

static int add_x(urt_graph *g, enum urt_exchange_kind kind, uint32_t capacity, uint64_t limit, struct rel *r)
{
    struct urt_exchange_desc d = {.kind = kind, .capacity = capacity, .limit_rows = limit};
    if (r) {
        d.release = on_release;
        d.release_arg = r;
    }
    int id = urt_graph_add_exchange(g, &d);
    cr_assert_geq(id, 0, "add_exchange: %s", urt_last_error());
    return id;
}

static void wire(urt_graph *g, int from, int x, int to)
{
    if (from >= 0)
        cr_assert_geq(urt_graph_add_output(g, from, x), 0, "output: %s", urt_last_error());
    if (to >= 0)
        cr_assert_geq(urt_graph_add_input(g, to, x), 0, "input: %s", urt_last_error());
}

/* Starts g, waits for its end, checks the callback ran once; returns the status. */
static int run_graph(urt_graph *g, struct done_rec *d)
{
    cr_assert_eq(urt_graph_start(g), 0, "start: %s", urt_last_error());
    int st = urt_graph_wait(g, 30ull * 1000000000ull);
    cr_assert_neq(st, -ETIMEDOUT, "the graph did not end within 30 s");
    cr_assert_eq(atomic_load(&d->calls), 1, "completion callback ran %d times", atomic_load(&d->calls));
    cr_assert_eq(atomic_load(&d->status), st, "callback status %d, wait %d", atomic_load(&d->status), st);
    cr_assert_eq(urt_job_poll(urt_graph_job(g)), st);
    return st;
}

static void all_deactivated(urt_graph *g, int n_steps)
{
    for (int i = 0; i < n_steps; i++)
        cr_assert_eq(urt_graph_step_state(g, i), URT_STEP_DEACTIVATED, "step %d ended in state %d", i,
                     urt_graph_step_state(g, i));
}

/* ---- P1: default counts --------------------------------------------------------------------- */

struct seen {
    _Atomic uint64_t mask; /* partitions seen (< 64) */
    _Atomic int calls;
    _Atomic int parts;     /* urt_graph_partitions as the task saw it */
};

static int record_partition(struct urt_graph_ctx *ctx, void *arg)
{
    struct seen *s = arg;
    atomic_fetch_or(&s->mask, 1ull << urt_graph_partition(ctx));
    atomic_fetch_add(&s->calls, 1);
    atomic_store(&s->parts, (int)urt_graph_partitions(ctx));
    return URT_STEP_DONE;
}

Test(graph, p1_default_partitions, .timeout = 30)
{
    urt_runtime *rt = make_rt(3);
    for (uint32_t opt = 0; opt <= 5; opt += 5) {
        struct done_rec d = {0};
        struct seen a = {0}, b = {0};
        urt_graph *g = make_graph(rt, &d, opt);
        add_step(g, "default", record_partition, &a, 0, 0);
        add_step(g, "own", record_partition, &b, 7, 0);
        cr_assert_eq(run_graph(g, &d), 0);
        uint32_t want = opt ? opt : 3; /* the runtime's workers */
        cr_assert_eq(atomic_load(&a.mask), (1ull << want) - 1);
        cr_assert_eq(atomic_load(&a.calls), (int)want);
        cr_assert_eq(atomic_load(&b.mask), (1ull << 7) - 1);
        cr_assert_eq(urt_graph_step_partitions(g, 0), (int)want);
        cr_assert_eq(urt_graph_step_partitions(g, 1), 7);
        all_deactivated(g, 2);
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- P2, P3: refused shapes ------------------------------------------------------------------ */

static int nop_step(struct urt_graph_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return URT_STEP_DONE;
}

Test(graph, p2_p3_refused_shapes, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    /* P2: two consumers of one shuffle ask 4 and 5 partitions */
    urt_graph *g = make_graph(rt, &d, 0);
    int s = add_step(g, "src", nop_step, NULL, 2, 0);
    int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
    int c1 = add_step(g, "c4", nop_step, NULL, 4, 0), c2 = add_step(g, "c5", nop_step, NULL, 5, 0);
    wire(g, s, x, c1);
    wire(g, -1, x, c2);
    cr_assert_eq(urt_graph_prepare(g), -EINVAL);
    cr_assert(strstr(urt_last_error(), "P2"), "%s", urt_last_error());
    urt_graph_release(g);
    /* P2: one asks 4, the other nothing: both get 4 */
    g = make_graph(rt, &d, 0);
    s = add_step(g, "src", nop_step, NULL, 2, 0);
    x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
    c1 = add_step(g, "c4", nop_step, NULL, 4, 0);
    c2 = add_step(g, "c?", nop_step, NULL, 0, 0);
    wire(g, s, x, c1);
    wire(g, -1, x, c2);
    cr_assert_eq(urt_graph_prepare(g), 0, "%s", urt_last_error());
    cr_assert_eq(urt_graph_step_partitions(g, c2), 4);
    urt_graph_release(g);
    /* P3: a limit-forward whose producer has 2 partitions; then 2 producers */
    for (int two_producers = 0; two_producers < 2; two_producers++) {
        g = make_graph(rt, &d, 0);
        s = add_step(g, "src", nop_step, NULL, two_producers ? 1 : 2, 0);
        x = add_x(g, URT_EXCHANGE_FORWARD, 0, 10, NULL);
        c1 = add_step(g, "sink", nop_step, NULL, 0, 0);
        wire(g, s, x, c1);
        if (two_producers)
            wire(g, add_step(g, "src2", nop_step, NULL, 1, 0), x, -1);
        cr_assert_eq(urt_graph_prepare(g), -EINVAL);
        cr_assert(strstr(urt_last_error(), "P3"), "%s", urt_last_error());
        urt_graph_release(g);
    }
    /* P6: a forward consumer that asks another count than the sum */
    g = make_graph(rt, &d, 0);
    s = add_step(g, "src", nop_step, NULL, 3, 0);
    x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
    c1 = add_step(g, "sink", nop_step, NULL, 2, 0);
    wire(g, s, x, c1);
    cr_assert_eq(urt_graph_prepare(g), -EINVAL);
    cr_assert(strstr(urt_last_error(), "P6"), "%s", urt_last_error());
    urt_graph_release(g);
    /* a forward and a broadcast from the same producer (a self-join): the forward's units would wait
     * for the side input, which waits for the producer; then the same through a forward-only chain */
    for (int chain = 0; chain < 2; chain++) {
        g = make_graph(rt, &d, 0);
        s = add_step(g, "scan", nop_step, NULL, 2, 0);
        int mid = chain ? add_step(g, "mid", nop_step, NULL, 0, 0) : s;
        c1 = add_step(g, "join", nop_step, NULL, 0, 0);
        x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
        int bx = add_x(g, URT_EXCHANGE_BROADCAST, 0, 0, NULL);
        if (chain) {
            int fx0 = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
            wire(g, s, fx0, mid);
        }
        wire(g, mid, x, c1);
        wire(g, s, bx, c1);
        cr_assert_eq(urt_graph_prepare(g), -EINVAL);
        cr_assert(strstr(urt_last_error(), "depend on each other"), "%s", urt_last_error());
        urt_graph_release(g);
    }
    /* a cycle */
    g = make_graph(rt, &d, 0);
    s = add_step(g, "a", nop_step, NULL, 1, 0);
    c1 = add_step(g, "b", nop_step, NULL, 1, 0);
    x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
    int y = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
    wire(g, s, x, c1);
    wire(g, c1, y, s);
    cr_assert_eq(urt_graph_prepare(g), -EINVAL);
    cr_assert(strstr(urt_last_error(), "cycle"), "%s", urt_last_error());
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- P6: forward sum and the scan exception ----------------------------------------------- */

struct fwd {
    _Atomic uint64_t got[16]; /* per consumer partition: bit per (producer tag, partition) */
    _Atomic int units;
};

/* Emits one unit whose data encodes (tag, partition). */
static int emit_tagged(struct urt_graph_ctx *ctx, void *arg)
{
    uintptr_t tag = (uintptr_t)arg;
    int r = urt_graph_emit(ctx, 0, 0, (void *)(tag * 64 + urt_graph_partition(ctx)), 1);
    return r == -EAGAIN ? URT_STEP_YIELD : r;
}

static struct fwd *g_fwd;
static _Atomic int g_early_steps; /* step functions called before their step was RUNNING */

static void expect_running(struct urt_graph_ctx *ctx)
{
    if (urt_graph_step_state(urt_graph_of(ctx), urt_graph_step_of(ctx)) < URT_STEP_RUNNING)
        atomic_fetch_add(&g_early_steps, 1);
}

static int collect_tagged(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) + 1, 1); /* one unit per call */
    uintptr_t v = (uintptr_t)u.data;
    atomic_fetch_or(&g_fwd->got[urt_graph_partition(ctx)], 1ull << (v % 64 + 8 * (v / 64 - 1)));
    atomic_fetch_add(&g_fwd->units, 1);
    return URT_STEP_DONE;
}

Test(graph, p6_forward_sum_and_scan, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    /* A (2 partitions) and B (3) into one forward: C has 5; A's i -> i, B's i -> 2 + i */
    struct done_rec d = {0};
    struct fwd f = {0};
    g_fwd = &f;
    urt_graph *g = make_graph(rt, &d, 0);
    int a = add_step(g, "A", emit_tagged, (void *)1, 2, 0), b = add_step(g, "B", emit_tagged, (void *)2, 3, 0);
    int x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
    int c = add_step(g, "C", collect_tagged, NULL, 0, 0);
    wire(g, a, x, c);
    wire(g, b, x, -1);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(urt_graph_step_partitions(g, c), 5);
    cr_assert_eq(atomic_load(&f.units), 5);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(atomic_load(&f.got[i]), 1ull << i, "C's partition %d got %llx", i,
                     (unsigned long long)atomic_load(&f.got[i]));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&f.got[2 + i]), 1ull << (8 + i));
    all_deactivated(g, 3);
    urt_graph_release(g);
    /* a scan (8 partitions) into a consumer of 3: partition i -> i mod 3 */
    memset(&f, 0, sizeof(f));
    memset(&d, 0, sizeof(d));
    g = make_graph(rt, &d, 0);
    a = add_step(g, "scan", emit_tagged, (void *)1, 8, URT_STEP_SCAN);
    x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
    c = add_step(g, "C", collect_tagged, NULL, 3, 0);
    wire(g, a, x, c);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(urt_graph_step_partitions(g, c), 3);
    for (int q = 0; q < 3; q++) {
        uint64_t want = 0;
        for (int i = q; i < 8; i += 3)
            want |= 1ull << i;
        cr_assert_eq(atomic_load(&f.got[q]), want, "partition %d: %llx", q, (unsigned long long)atomic_load(&f.got[q]));
    }
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- P4: a shuffle drops partitions without data ------------------------------------------ */

static uint32_t g_rows[4] = {10, 20, 30, 40};

/* Emits to consumer partitions 1 and 3 only. */
static int emit_odd(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    cr_assert_eq(urt_graph_emit(ctx, 0, 1, &g_rows[1], 2), 0);
    cr_assert_eq(urt_graph_emit(ctx, 0, 3, &g_rows[3], 3), 0);
    return URT_STEP_DONE;
}

static int sum_rows(struct urt_graph_ctx *ctx, void *arg)
{
    struct seen *s = arg;
    expect_running(ctx); /* a shuffle consumer's tasks start at RUNNING */
    struct urt_graph_unit u;
    int n = 0;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        n += (int)u.rows;
    atomic_fetch_or(&s->mask, 1ull << urt_graph_partition(ctx));
    atomic_fetch_add(&s->calls, n);
    atomic_store(&s->parts, (int)urt_graph_partitions(ctx));
    return URT_STEP_DONE;
}

Test(graph, p4_shuffle_drops_empty_partitions, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    for (int cogroup = 0; cogroup < 2; cogroup++) {
        struct done_rec d = {0};
        struct seen s = {0};
        struct rel r = {0};
        urt_graph *g = make_graph(rt, &d, 0);
        int a = add_step(g, "src", emit_odd, NULL, 3, 0);
        int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &r);
        int c = add_step(g, "agg", sum_rows, &s, 4, cogroup ? URT_STEP_TAKE_COGROUP : 0);
        wire(g, a, x, c);
        cr_assert_eq(run_graph(g, &d), 0);
        cr_assert_eq(atomic_load(&s.mask), cogroup ? 0xfull : 0xaull, "partitions run: %llx",
                     (unsigned long long)atomic_load(&s.mask));
        cr_assert_eq(atomic_load(&s.calls), 3 * 5, "rows read");
        cr_assert_eq(atomic_load(&g_early_steps), 0, "a shuffle consumer ran before its step was RUNNING");
        cr_assert_eq(urt_graph_step_partitions(g, c), cogroup ? 4 : 2);
        cr_assert_eq(atomic_load(&s.parts), cogroup ? 4 : 2);
        cr_assert_eq(atomic_load(&r.units), 6, "every unit released once");
        cr_assert_eq(atomic_load(&r.rows), 15);
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- P5: broadcast side inputs ------------------------------------------------------------- */

struct side {
    _Atomic int prepares;
    _Atomic int prepare_port;
    _Atomic int side_units_total; /* main tasks: side units seen, summed */
    _Atomic int main_calls;
    _Atomic int before_prepared;  /* a main task ran before the prepare finished */
    _Atomic int prepared;
};

static int emit_three(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(urt_graph_emit(ctx, 0, 0, &g_rows[i], 1), 0);
    return URT_STEP_DONE;
}

static int side_prepare(struct urt_graph_ctx *ctx, void *arg)
{
    struct side *s = arg;
    struct urt_graph_unit u;
    int n = 0;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        n++;
    cr_assert_eq(n, 3, "the side input has all 3 units at its prepare");
    atomic_store(&s->prepare_port, (int)urt_graph_partition(ctx));
    atomic_fetch_add(&s->prepares, 1);
    atomic_store(&s->prepared, 1);
    return URT_STEP_DONE;
}

static int side_main(struct urt_graph_ctx *ctx, void *arg)
{
    struct side *s = arg;
    if (!atomic_load(&s->prepared))
        atomic_fetch_add(&s->before_prepared, 1);
    struct urt_graph_unit u;
    int n = 0;
    while (urt_graph_next(ctx, 1, &u) == 1) /* port 1: the broadcast */
        n++;
    atomic_fetch_add(&s->side_units_total, n);
    atomic_fetch_add(&s->main_calls, 1);
    return URT_STEP_DONE;
}

Test(graph, p5_broadcast_side_input, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct side s = {0};
    struct rel r = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    int main_src = add_step(g, "main", emit_tagged, (void *)1, 4, 0);
    int side_src = add_step(g, "dim", emit_three, NULL, 1, 0);
    struct urt_step_desc jd = {.name = "join", .fn = side_main, .prepare = side_prepare, .arg = &s};
    int join = urt_graph_add_step(g, &jd);
    cr_assert_geq(join, 0);
    int fx = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL), bx = add_x(g, URT_EXCHANGE_BROADCAST, 0, 0, &r);
    wire(g, main_src, fx, join); /* port 0 */
    wire(g, side_src, bx, join); /* port 1 */
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&s.prepares), 1, "one sub-task per side input");
    cr_assert_eq(atomic_load(&s.prepare_port), 1);
    cr_assert_eq(atomic_load(&s.before_prepared), 0);
    cr_assert_eq(atomic_load(&s.main_calls), 4);
    cr_assert_eq(atomic_load(&s.side_units_total), 4 * 3, "every main task saw every side unit");
    cr_assert_eq(urt_graph_step_partitions(g, join), 4, "P5: the broadcast changes nothing");
    cr_assert_eq(atomic_load(&r.units), 3);
    all_deactivated(g, 3);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- every exchange kind against a single-threaded reference -------------------------------- */

/* scan (SCAN, 16 partitions of ROWS/16 rows) -> forward -> filter (stream, keeps v % 3 != 0) ->
 * shuffle by key % 8 -> agg (8 partitions, cogroup with a second shuffle from "extra") with
 * a broadcast side input of multipliers -> shuffle(1) -> final: checksum. */
#define EK_ROWS 65536u
#define EK_SCANS 16u
#define EK_KEYS 64u

struct ek_row {
    uint32_t key, value;
};

struct ek {
    struct ek_row *scan_out[EK_SCANS];   /* per scan partition */
    struct ek_row *filt[EK_SCANS][8];    /* filter output per (stream, key partition) */
    uint32_t filt_n[EK_SCANS][8];
    uint32_t mark[EK_SCANS][8];          /* filter: rows emitted so far */
    struct ek_row extra[8][4];           /* "extra": 4 rows per partition */
    uint64_t mult[4];                    /* broadcast: multipliers by key % 4 */
    uint64_t agg[8];                     /* per agg partition */
    uint64_t checksum;
    struct rel rel_fwd, rel_sh, rel_bc, rel_x, rel_fin;
};

static struct ek *g_ek;

/* Emit in the every-kind graph: 0, or -EPIPE once the graph is being aborted (error tests). */
static void ek_emit(struct urt_graph_ctx *ctx, uint32_t port, uint32_t part, void *data, uint32_t rows)
{
    int r = urt_graph_emit(ctx, port, part, data, rows);
    cr_assert(r == 0 || (r == -EPIPE && urt_graph_stopping(ctx)), "emit: %d (%s)", r, urt_last_error());
}

static inline uint64_t mix64(uint64_t z)
{
    z = (z + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int ek_scan(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t p = urt_graph_partition(ctx), n = EK_ROWS / EK_SCANS;
    struct ek_row *out = g_ek->scan_out[p];
    for (uint32_t i = 0; i < n; i++) {
        uint64_t z = mix64(p * n + i);
        out[i] = (struct ek_row){(uint32_t)(z >> 40) % EK_KEYS, (uint32_t)z & 0xffff};
    }
    /* in 4 units of n/4 rows */
    for (uint32_t k = 0; k < 4; k++)
        ek_emit(ctx, 0, 0, out + k * (n / 4), n / 4); /* capacity 256: never full here */
    return URT_STEP_DONE;
}

static int ek_filter(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    uint32_t s = urt_graph_partition(ctx);
    const struct ek_row *in = u.data;
    for (uint32_t i = 0; i < u.rows; i++)
        if (in[i].value % 3 != 0) {
            uint32_t q = in[i].key % 8;
            g_ek->filt[s][q][g_ek->filt_n[s][q]++] = in[i]; /* one stream at a time per partition */
        }
    /* emit what this unit added, partition by partition */
    uint32_t *mark = g_ek->mark[s];
    for (uint32_t q = 0; q < 8; q++) {
        if (g_ek->filt_n[s][q] > mark[q])
            ek_emit(ctx, 0, q, g_ek->filt[s][q] + mark[q], g_ek->filt_n[s][q] - mark[q]);
        mark[q] = g_ek->filt_n[s][q];
    }
    return URT_STEP_DONE;
}

static int ek_extra(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    for (uint32_t q = 0; q < 8; q++)
        ek_emit(ctx, 0, q, g_ek->extra[q], 4);
    return URT_STEP_DONE;
}

static int ek_dim(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    ek_emit(ctx, 0, 0, g_ek->mult, 4);
    return URT_STEP_DONE;
}

static int ek_agg(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u, side;
    if (urt_graph_next(ctx, 2, &side) != 1) {
        cr_assert(urt_graph_stopping(ctx), "the broadcast's unit");
        return URT_STEP_DONE; /* aborted while it prepared */
    }
    const uint64_t *mult = side.data;
    uint64_t acc = 0;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) { /* both shuffles */
        const struct ek_row *r = u.data;
        for (uint32_t i = 0; i < u.rows; i++)
            acc += (uint64_t)r[i].value * mult[r[i].key % 4] + r[i].key;
    }
    uint32_t p = urt_graph_partition(ctx);
    g_ek->agg[p] = acc;
    ek_emit(ctx, 0, 0, &g_ek->agg[p], 1);
    return URT_STEP_DONE;
}

static int ek_final(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    uint64_t cs = 0;
    int n = 0;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        cs += *(const uint64_t *)u.data * 1000003ull;
        n++;
    }
    cr_assert(n == 8 || urt_graph_stopping(ctx));
    g_ek->checksum = cs;
    return URT_STEP_DONE;
}

static uint64_t ek_reference(const struct ek *e)
{
    uint64_t agg[8] = {0};
    for (uint32_t i = 0; i < EK_ROWS; i++) {
        uint64_t z = mix64(i);
        uint32_t key = (uint32_t)(z >> 40) % EK_KEYS, value = (uint32_t)z & 0xffff;
        if (value % 3 != 0)
            agg[key % 8] += (uint64_t)value * e->mult[key % 4] + key;
    }
    for (uint32_t q = 0; q < 8; q++)
        for (uint32_t j = 0; j < 4; j++)
            agg[q] += (uint64_t)e->extra[q][j].value * e->mult[e->extra[q][j].key % 4] + e->extra[q][j].key;
    uint64_t cs = 0;
    for (uint32_t q = 0; q < 8; q++)
        cs += agg[q] * 1000003ull;
    return cs;
}

static void ek_alloc(struct ek *e)
{
    for (uint32_t s = 0; s < EK_SCANS; s++) {
        e->scan_out[s] = calloc(EK_ROWS / EK_SCANS, sizeof(struct ek_row));
        for (uint32_t q = 0; q < 8; q++)
            e->filt[s][q] = calloc(EK_ROWS / EK_SCANS, sizeof(struct ek_row));
    }
    for (uint32_t q = 0; q < 8; q++)
        for (uint32_t j = 0; j < 4; j++)
            e->extra[q][j] = (struct ek_row){q + 8 * j, 100 + q * 4 + j};
    for (uint32_t j = 0; j < 4; j++)
        e->mult[j] = 3 + 2 * j;
}

static void ek_free(struct ek *e)
{
    for (uint32_t s = 0; s < EK_SCANS; s++) {
        free(e->scan_out[s]);
        for (uint32_t q = 0; q < 8; q++)
            free(e->filt[s][q]);
    }
}

static urt_graph *ek_build(urt_runtime *rt, struct done_rec *d, struct ek *e, int *n_steps)
{
    urt_graph *g = make_graph(rt, d, 0);
    int scan = add_step(g, "scan", ek_scan, NULL, EK_SCANS, URT_STEP_SCAN);
    int filter = add_step(g, "filter", ek_filter, NULL, EK_SCANS, 0);
    int extra = add_step(g, "extra", ek_extra, NULL, 1, 0);
    int dim = add_step(g, "dim", ek_dim, NULL, 1, 0);
    int agg = add_step(g, "agg", ek_agg, NULL, 8, 0);
    int fin = add_step(g, "final", ek_final, NULL, 1, URT_STEP_TAKE_COGROUP);
    int fwd = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &e->rel_fwd);
    int sh = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e->rel_sh);
    int sx = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e->rel_x);
    int bc = add_x(g, URT_EXCHANGE_BROADCAST, 0, 0, &e->rel_bc);
    int sf = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e->rel_fin);
    wire(g, scan, fwd, filter);
    wire(g, filter, sh, agg); /* agg port 0 */
    wire(g, extra, sx, agg);  /* agg port 1 */
    wire(g, dim, bc, agg);    /* agg port 2 */
    wire(g, agg, sf, fin);
    *n_steps = 6;
    return g;
}

Test(graph, every_exchange_kind_against_reference, .timeout = 120)
{
    static struct ek e;
    g_ek = &e;
    ek_alloc(&e);
    const uint64_t want = ek_reference(&e);
    for (uint32_t workers = 1; workers <= 4; workers *= 2) {
        urt_runtime *rt = make_rt(workers);
        for (int round = 0; round < SCALE(5, 2); round++) {
            struct done_rec d = {0};
            memset(e.filt_n, 0, sizeof(e.filt_n));
            memset(e.mark, 0, sizeof(e.mark));
            memset(&e.rel_fwd, 0, sizeof(struct rel) * 5);
            e.checksum = 0;
            int n = 0;
            urt_graph *g = ek_build(rt, &d, &e, &n);
            cr_assert_eq(run_graph(g, &d), 0);
            cr_assert_eq(e.checksum, want, "workers %u round %d: checksum %llx, reference %llx", workers, round,
                         (unsigned long long)e.checksum, (unsigned long long)want);
            all_deactivated(g, n);
            cr_assert_eq(atomic_load(&e.rel_fwd.units), EK_SCANS * 4, "forward units released");
            cr_assert_eq(atomic_load(&e.rel_x.units), 8);
            cr_assert_eq(atomic_load(&e.rel_bc.units), 1);
            cr_assert_eq(atomic_load(&e.rel_fin.units), 8);
            struct urt_graph_step_stats st;
            cr_assert_eq(urt_graph_step_stats(g, 1, &st), 0);
            cr_assert_eq(st.units_in, EK_SCANS * 4);
            cr_assert_eq(atomic_load(&e.rel_sh.units), st.units_out);
            urt_graph_release(g);
        }
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
    ek_free(&e);
}

/* ---- step states while running -------------------------------------------------------------- */

struct gate {
    _Atomic int open;
    _Atomic int consumer_ran;
    urt_graph *g;
    _Atomic int state_seen; /* the consumer's state while its producer was still running */
};

static int gated_producer(struct urt_graph_ctx *ctx, void *arg)
{
    struct gate *gt = arg;
    static int dummy;
    if (!*urt_graph_task_state(ctx)) {
        *urt_graph_task_state(ctx) = &dummy;
        cr_assert_eq(urt_graph_emit(ctx, 0, 0, &dummy, 1), 0);
    }
    if (!atomic_load(&gt->consumer_ran))
        return URT_STEP_YIELD; /* wait (yielding) until the consumer ran */
    atomic_store(&gt->state_seen, urt_graph_step_state(urt_graph_of(ctx), 1));
    return URT_STEP_DONE;
}

static int gated_consumer(struct urt_graph_ctx *ctx, void *arg)
{
    struct gate *gt = arg;
    (void)ctx;
    atomic_store(&gt->consumer_ran, 1);
    return URT_STEP_DONE;
}

Test(graph, forward_consumer_runs_while_producer_runs, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct gate gt = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    int p = add_step(g, "producer", gated_producer, &gt, 1, 0);
    int x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
    int c = add_step(g, "consumer", gated_consumer, &gt, 0, 0);
    wire(g, p, x, c);
    cr_assert_eq(urt_graph_step_state(g, c), URT_STEP_CREATED);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&gt.state_seen), URT_STEP_RUNNING, "the consumer was %d while its producer ran",
                 atomic_load(&gt.state_seen));
    all_deactivated(g, 2);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- early completion ------------------------------------------------------------------------- */

#define EC_PARTS 4096u
struct ec {
    _Atomic int observed;    /* the limit called urt_graph_complete */
    _Atomic int late_starts; /* scan bodies that started after that */
    _Atomic int scans;
    _Atomic int taken;       /* rows the limit took */
    _Atomic int limit_calls_after;
    _Atomic int parked;      /* emits refused by a full exchange (back-pressure) */
    _Atomic int bad_emit;    /* an emit error other than -EAGAIN and -EPIPE */
    uint32_t rows[EC_PARTS];
    bool retry[EC_PARTS];    /* the partition's unit is still to be emitted (its task yielded) */
};

/* A scan partition: 20 µs of work, then its unit. A full exchange (the
 * limit's worker lost its CPU while the others scanned on: 256 units in
 * flight) refuses the emit with -EAGAIN; the task yields and emits the same
 * unit when it is called again (the work is not done twice). */
static int ec_scan(struct urt_graph_ctx *ctx, void *arg)
{
    struct ec *e = arg;
    uint32_t p = urt_graph_partition(ctx);
    if (!e->retry[p]) {
        if (atomic_load(&e->observed))
            atomic_fetch_add(&e->late_starts, 1);
        uint64_t spin = now_ns() + 20000; /* a morsel's work: 20 µs */
        while (now_ns() < spin)
            ;
    }
    int r = urt_graph_emit(ctx, 0, 0, &e->rows[p], 7);
    if (r == -EAGAIN) {
        e->retry[p] = true; /* the next call of this partition's task reads it (the runtime orders the two) */
        atomic_fetch_add(&e->parked, 1);
        return URT_STEP_YIELD;
    }
    e->retry[p] = false;
    if (r != 0 && r != -EPIPE)
        atomic_store(&e->bad_emit, r); /* checked by the test thread: no assertion off it */
    atomic_fetch_add(&e->scans, 1);  /* a call that returned DONE: what tasks_run counts */
    return URT_STEP_DONE;
}

static int ec_limit(struct urt_graph_ctx *ctx, void *arg)
{
    struct ec *e = arg;
    struct urt_graph_unit u;
    if (atomic_load(&e->observed))
        atomic_fetch_add(&e->limit_calls_after, 1);
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    if (atomic_fetch_add(&e->taken, (int)u.rows) + (int)u.rows >= 100) {
        cr_assert_eq(urt_graph_complete(ctx), 0);
        cr_assert_eq(urt_graph_complete(ctx), -EALREADY);
        atomic_store(&e->observed, 1);
    }
    return URT_STEP_DONE;
}

Test(graph, early_completion_by_a_limit_step, .timeout = 60)
{
    for (uint32_t workers = 1; workers <= 4; workers *= 2) {
        urt_runtime *rt = make_rt(workers);
        struct done_rec d = {0};
        static struct ec e;
        memset(&e, 0, sizeof(e));
        struct rel r = {0};
        urt_graph *g = make_graph(rt, &d, 0);
        struct urt_step_desc sd = {.name = "scan", .fn = ec_scan, .arg = &e, .partitions = EC_PARTS,
                                   .max_in_flight = 4 * workers, .flags = URT_STEP_SCAN};
        int scan = urt_graph_add_step(g, &sd);
        int x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &r);
        int lim = add_step(g, "limit", ec_limit, &e, 1, 0);
        wire(g, scan, x, lim);
        cr_assert_eq(run_graph(g, &d), 0);
        cr_assert_eq(atomic_load(&e.bad_emit), 0, "emit returned %d", atomic_load(&e.bad_emit));
        if (atomic_load(&e.parked))
            cr_log_info("workers %u: %d emits waited for room in the exchange", workers, atomic_load(&e.parked));
        int scans = atomic_load(&e.scans);
        /* 100 rows are 15 units; the others were in flight, or ran while the limit's task waited
         * for its worker (on a loaded machine a worker may lose its CPU for milliseconds) */
        cr_assert_geq(scans, 15);
        cr_assert_lt(scans, (int)EC_PARTS / 4, "workers %u: %d scans ran", workers, scans);
        cr_assert_leq(atomic_load(&e.late_starts), (int)workers - 1,
                      "workers %u: %d scans started after the limit was observed", workers, atomic_load(&e.late_starts));
        cr_assert_eq(atomic_load(&e.limit_calls_after), 0, "the limit ran after it completed");
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, scan, &st), 0);
        cr_assert_eq(st.tasks_run, (uint64_t)scans);
        cr_assert_eq(st.tasks_run + st.tasks_skipped + st.tasks_cut, EC_PARTS, "run %llu + skipped %llu + cut %llu",
                     (unsigned long long)st.tasks_run, (unsigned long long)st.tasks_skipped,
                     (unsigned long long)st.tasks_cut);
        cr_assert_leq(st.tasks_cut, (uint64_t)atomic_load(&e.parked), "only scans that yielded are cut short");
        cr_assert_eq(atomic_load(&r.units), st.units_out, "accepted units are released once");
        all_deactivated(g, 2);
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
}

/* forward limit_rows: one producer partition emitting 10-row units; the sink gets 25 rows. */
struct fl {
    _Atomic int emitted, refused, sink_rows, sink_units;
    uint32_t buf[1];
};

static int fl_producer(struct urt_graph_ctx *ctx, void *arg)
{
    struct fl *f = arg;
    for (;;) {
        if (urt_graph_stopping(ctx))
            return URT_STEP_DONE;
        int r = urt_graph_emit(ctx, 0, 0, f->buf, 10);
        if (r == -EAGAIN)
            return URT_STEP_YIELD;
        if (r == -EPIPE) {
            atomic_fetch_add(&f->refused, 1);
            return URT_STEP_DONE;
        }
        cr_assert_eq(r, 0);
        if (atomic_fetch_add(&f->emitted, 1) > 100000)
            return -EOVERFLOW; /* the limit never stopped it */
    }
}

static int fl_sink(struct urt_graph_ctx *ctx, void *arg)
{
    struct fl *f = arg;
    struct urt_graph_unit u;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        atomic_fetch_add(&f->sink_rows, (int)u.rows);
        atomic_fetch_add(&f->sink_units, 1);
    }
    return URT_STEP_DONE;
}

Test(graph, early_completion_by_limit_rows, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct fl f = {0};
    struct rel r = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    int p = add_step(g, "producer", fl_producer, &f, 1, 0);
    int x = add_x(g, URT_EXCHANGE_FORWARD, 4, 25, &r);
    int s = add_step(g, "sink", fl_sink, &f, 0, 0);
    wire(g, p, x, s);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&f.sink_rows), 25, "LIMIT 25");
    cr_assert_eq(atomic_load(&f.sink_units), 3, "10 + 10 + 5 (clipped)");
    cr_assert_eq(atomic_load(&r.units), 3);
    cr_assert_eq(atomic_load(&r.rows), 30, "the release callback gets the rows emitted, not the clipped ones");
    cr_assert_eq(urt_graph_step_stats(g, p, &(struct urt_graph_step_stats){0}), 0);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A DELIVER step between a source and a limit: neither is cut. */
#define DV_UNITS 200
struct dv {
    _Atomic int produced, delivered, sink_rows;
    uint32_t buf[1];
};

static int dv_source(struct urt_graph_ctx *ctx, void *arg)
{
    struct dv *v = arg;
    intptr_t *i = (intptr_t *)urt_graph_task_state(ctx);
    for (; *i < DV_UNITS; (*i)++) {
        int r = urt_graph_emit(ctx, 0, 0, v->buf, 10);
        if (r == -EAGAIN)
            return URT_STEP_YIELD;
        cr_assert_eq(r, 0, "the deliver step's input is never cut (%d)", r);
        atomic_fetch_add(&v->produced, 1);
    }
    return URT_STEP_DONE;
}

static int dv_deliver(struct urt_graph_ctx *ctx, void *arg)
{
    struct dv *v = arg;
    struct urt_graph_unit u;
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    atomic_fetch_add(&v->delivered, 1); /* the side effect */
    int r = urt_graph_emit(ctx, 0, 0, v->buf, 10);
    if (r == -EAGAIN)
        return URT_STEP_YIELD;
    cr_assert(r == 0 || r == -EPIPE);
    return URT_STEP_DONE;
}

static int dv_sink(struct urt_graph_ctx *ctx, void *arg)
{
    struct dv *v = arg;
    struct urt_graph_unit u;
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    atomic_fetch_add(&v->sink_rows, (int)u.rows);
    return URT_STEP_DONE;
}

Test(graph, deliver_step_is_not_cut, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct dv v = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    int src = add_step(g, "source", dv_source, &v, 1, 0);
    int del = add_step(g, "insert", dv_deliver, &v, 0, URT_STEP_DELIVER);
    int sink = add_step(g, "sink", dv_sink, &v, 0, 0);
    int x1 = add_x(g, URT_EXCHANGE_FORWARD, 8, 0, NULL), x2 = add_x(g, URT_EXCHANGE_FORWARD, 8, 30, NULL);
    wire(g, src, x1, del);
    wire(g, del, x2, sink);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&v.produced), DV_UNITS, "the deliver step's producer ran to its end");
    cr_assert_eq(atomic_load(&v.delivered), DV_UNITS, "the deliver step saw every unit");
    cr_assert_eq(atomic_load(&v.sink_rows), 30);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- errors in every step position --------------------------------------------------------------- */

static _Atomic int g_fail_step = -1; /* the step (index in ek_build) whose function fails */
static _Atomic int g_fail_calls;

#define FAILING(name, inner, idx)                                                                            \
    static int name(struct urt_graph_ctx *ctx, void *arg)                                                    \
    {                                                                                                        \
        if (atomic_load(&g_fail_step) == (idx) && atomic_fetch_add(&g_fail_calls, 1) == 0)                   \
            return -EIO;                                                                                     \
        return inner(ctx, arg);                                                                              \
    }
FAILING(f_scan, ek_scan, 0)
FAILING(f_filter, ek_filter, 1)
FAILING(f_extra, ek_extra, 2)
FAILING(f_dim, ek_dim, 3)
FAILING(f_agg, ek_agg, 4)
FAILING(f_final, ek_final, 5)
FAILING(f_prepare, nop_step, 6)

Test(graph, an_error_in_every_step_position, .timeout = 120)
{
    static struct ek e;
    g_ek = &e;
    ek_alloc(&e);
    urt_runtime *rt = make_rt(2);
    urt_graph_step_fn *fns[] = {f_scan, f_filter, f_extra, f_dim, f_agg, f_final};
    for (int pos = 0; pos <= 6; pos++) {
        struct done_rec d = {0};
        memset(e.filt_n, 0, sizeof(e.filt_n));
        memset(e.mark, 0, sizeof(e.mark));
        memset(&e.rel_fwd, 0, sizeof(struct rel) * 5);
        atomic_store(&g_fail_step, pos);
        atomic_store(&g_fail_calls, 0);
        int n = 0;
        urt_graph *g = make_graph(rt, &d, 0);
        int scan = add_step(g, "scan", fns[0], NULL, EK_SCANS, URT_STEP_SCAN);
        int filter = add_step(g, "filter", fns[1], NULL, EK_SCANS, 0);
        int extra = add_step(g, "extra", fns[2], NULL, 1, 0);
        int dim = add_step(g, "dim", fns[3], NULL, 1, 0);
        struct urt_step_desc ad = {.name = "agg", .fn = fns[4], .prepare = f_prepare, .partitions = 8};
        int agg = urt_graph_add_step(g, &ad);
        int fin = add_step(g, "final", fns[5], NULL, 1, URT_STEP_TAKE_COGROUP);
        int fwd = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &e.rel_fwd), sh = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e.rel_sh);
        int sx = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e.rel_x), bc = add_x(g, URT_EXCHANGE_BROADCAST, 0, 0, &e.rel_bc);
        int sf = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &e.rel_fin);
        wire(g, scan, fwd, filter);
        wire(g, filter, sh, agg);
        wire(g, extra, sx, agg);
        wire(g, dim, bc, agg);
        wire(g, agg, sf, fin);
        n = 6;
        cr_assert_eq(run_graph(g, &d), -EIO, "failing step %d: status %d", pos, atomic_load(&d.status));
        cr_assert_eq(urt_job_wait(urt_graph_job(g), 0), -EIO);
        all_deactivated(g, n);
        /* every accepted unit was released once */
        uint64_t out[6] = {0};
        for (int i = 0; i < 6; i++) {
            struct urt_graph_step_stats st;
            cr_assert_eq(urt_graph_step_stats(g, i, &st), 0);
            out[i] = st.units_out;
        }
        cr_assert_eq(atomic_load(&e.rel_fwd.units), out[0], "pos %d: forward", pos);
        cr_assert_eq(atomic_load(&e.rel_sh.units), out[1], "pos %d: shuffle", pos);
        cr_assert_eq(atomic_load(&e.rel_x.units), out[2], "pos %d: cogroup", pos);
        cr_assert_eq(atomic_load(&e.rel_bc.units), out[3], "pos %d: broadcast", pos);
        cr_assert_eq(atomic_load(&e.rel_fin.units), out[4], "pos %d: final shuffle", pos);
        urt_graph_release(g);
    }
    atomic_store(&g_fail_step, -1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    ek_free(&e);
}

/* ---- cancel and deadline ----------------------------------------------------------------------------- */

static int forever(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    if (urt_graph_stopping(ctx))
        return URT_STEP_DONE;
    return URT_STEP_YIELD;
}

Test(graph, cancel_deadline_and_the_job, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    for (int how = 0; how < 3; how++) {
        struct done_rec d = {0};
        struct urt_graph_options o;
        urt_graph_options_init(&o);
        o.done = on_done;
        o.arg = &d;
        o.deadline_ns = how == 2 ? 20 * 1000000ull : 0;
        urt_graph *g = NULL;
        cr_assert_eq(urt_graph_create(rt, &o, &g), 0);
        int a = add_step(g, "spin", forever, NULL, 4, 0);
        int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
        int b = add_step(g, "after", nop_step, NULL, 2, 0);
        wire(g, a, x, b);
        cr_assert_eq(urt_graph_cancel(g), -EINVAL, "not started");
        cr_assert_eq(urt_graph_start(g), 0);
        cr_assert_eq(urt_graph_start(g), -EALREADY);
        sleep_us(5000);
        if (how == 0)
            cr_assert_eq(urt_graph_cancel(g), 0);
        else if (how == 1)
            cr_assert_eq(urt_job_cancel(urt_graph_job(g)), 0);
        int want = how == 2 ? -ETIME : -ECANCELED;
        cr_assert_eq(urt_graph_wait(g, 10ull * 1000000000ull), want, "how %d", how);
        cr_assert_eq(atomic_load(&d.calls), 1);
        cr_assert_eq(atomic_load(&d.status), want);
        cr_assert_eq(urt_graph_cancel(g), -EALREADY);
        all_deactivated(g, 2);
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, b, &st), 0);
        cr_assert_eq(st.tasks_run, 0, "no task of the step behind the shuffle ran");
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- back-pressure --------------------------------------------------------------------------------- */

#define BP_UNITS 2000
#define BP_CAP 8
struct bp {
    _Atomic int outstanding, max_outstanding, next_expected, disorder;
    uint32_t vals[BP_UNITS];
};

static void bp_release(void *data, uint32_t rows, void *arg)
{
    struct bp *b = arg;
    (void)data;
    (void)rows;
    atomic_fetch_sub(&b->outstanding, 1);
}

static int bp_producer(struct urt_graph_ctx *ctx, void *arg)
{
    struct bp *b = arg;
    intptr_t *i = (intptr_t *)urt_graph_task_state(ctx);
    for (; *i < BP_UNITS; (*i)++) {
        int o = atomic_fetch_add(&b->outstanding, 1) + 1;
        int r = urt_graph_emit(ctx, 0, 0, &b->vals[*i], 1);
        if (r == -EAGAIN) {
            atomic_fetch_sub(&b->outstanding, 1);
            return URT_STEP_YIELD;
        }
        cr_assert_eq(r, 0);
        int m = atomic_load(&b->max_outstanding);
        while (o > m && !atomic_compare_exchange_weak(&b->max_outstanding, &m, o))
            ;
    }
    return URT_STEP_DONE;
}

static int bp_consumer(struct urt_graph_ctx *ctx, void *arg)
{
    struct bp *b = arg;
    struct urt_graph_unit u;
    cr_assert_eq(urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u), 1);
    uint32_t v = *(uint32_t *)u.data;
    if ((int)v != atomic_load(&b->next_expected))
        atomic_fetch_add(&b->disorder, 1);
    atomic_store(&b->next_expected, (int)v + 1);
    uint64_t spin = now_ns() + 2000; /* slow: 2 µs a unit */
    while (now_ns() < spin)
        ;
    return URT_STEP_DONE;
}

Test(graph, back_pressure_bounds_memory, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    static struct bp b;
    memset(&b, 0, sizeof(b));
    for (uint32_t i = 0; i < BP_UNITS; i++)
        b.vals[i] = i;
    urt_graph *g = make_graph(rt, &d, 0);
    int p = add_step(g, "fast", bp_producer, &b, 1, 0);
    struct urt_exchange_desc xd = {.kind = URT_EXCHANGE_FORWARD, .capacity = BP_CAP, .release = bp_release,
                                   .release_arg = &b};
    int x = urt_graph_add_exchange(g, &xd);
    int c = add_step(g, "slow", bp_consumer, &b, 0, 0);
    wire(g, p, x, c);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&b.next_expected), BP_UNITS);
    cr_assert_eq(atomic_load(&b.disorder), 0, "units of one partition arrive in order");
    cr_assert_leq(atomic_load(&b.max_outstanding), BP_CAP + 1, "at most capacity units held (+1 being emitted)");
    cr_assert_eq(atomic_load(&b.outstanding), 0);
    struct urt_graph_step_stats st;
    cr_assert_eq(urt_graph_step_stats(g, p, &st), 0);
    cr_assert_gt(st.yields, 0, "the producer was held back");
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- lanes ----------------------------------------------------------------------------------------- */

struct ln {
    _Atomic int busy, overlaps, runs;
};

static int lane_step(struct urt_graph_ctx *ctx, void *arg)
{
    struct ln *l = arg;
    (void)ctx;
    if (atomic_exchange(&l->busy, 1))
        atomic_fetch_add(&l->overlaps, 1);
    uint64_t spin = now_ns() + 20000;
    while (now_ns() < spin)
        ;
    atomic_store(&l->busy, 0);
    atomic_fetch_add(&l->runs, 1);
    return URT_STEP_DONE;
}

Test(graph, a_step_on_a_lane_runs_one_task_at_a_time, .timeout = 30)
{
    urt_runtime *rt = make_rt(4);
    urt_lane *lane = NULL;
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    struct done_rec d = {0};
    struct ln l = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    struct urt_step_desc sd = {.name = "on-lane", .fn = lane_step, .arg = &l, .partitions = 64, .lane = lane};
    cr_assert_geq(urt_graph_add_step(g, &sd), 0);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&l.runs), 64);
    cr_assert_eq(atomic_load(&l.overlaps), 0);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(urt_lane_destroy(lane), 0);
}

/* ---- runtime destroy in drain mode ------------------------------------------------------------------ */

Test(graph, destroy_in_drain_mode_runs_the_graph_to_its_end, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct seen s = {0};
    urt_graph *g = make_graph(rt, &d, 0);
    int a = add_step(g, "src", emit_tagged, (void *)1, 32, 0);
    int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
    int b = add_step(g, "agg", record_partition, &s, 1, 0);
    wire(g, a, x, b);
    cr_assert_eq(urt_graph_start(g), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&d.calls), 1);
    cr_assert_eq(atomic_load(&d.status), 0);
    cr_assert_eq(atomic_load(&s.calls), 1);
    urt_graph_release(g);
}

/* ---- processors ----------------------------------------------------------------------------------- */

#define PR_N 500
#define PR_PARTS 2
struct pr {
    urt_runtime *rt;
    uint64_t vals[PR_PARTS][PR_N];
    uint64_t outs[PR_PARTS][PR_N];
    _Atomic uint64_t sum;
    _Atomic int pushed1, pushed2, sink_units;
    int sink_stop_after;          /* > 0: the sink finishes after that many units */
    struct rel rel1, rel2;
    /* async */
    bool async_src;
    _Atomic int async_calls, wrong_worker, async_fail_at;
    _Atomic int early_events; /* event() calls before the processor's step was RUNNING */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct urt_graph_ctx *queue[64];
    int q_head, q_tail;
    bool helper_stop;
};

struct pstate {
    uint32_t i;          /* source: next value; transform: outputs made */
    bool has, got, ready;
    uint64_t *out;
    struct urt_graph_unit u;
    int async_worker;
};

/* Instance state lives beside the test (an aborted graph calls no processor again). */
static struct pstate g_pstates[3][PR_PARTS];

static int g_pstate_steps[3] = {0, 1, 2}; /* the step ids of source, transform, sink */

static struct pstate *pstate(struct urt_graph_ctx *ctx)
{
    int id = urt_graph_step_of(ctx), k = id == g_pstate_steps[0] ? 0 : id == g_pstate_steps[1] ? 1 : 2;
    return &g_pstates[k][urt_graph_partition(ctx)];
}

static void pstate_free(struct urt_graph_ctx *ctx)
{
    (void)ctx;
}

static int src_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    if (p->async_src && st->ready && st->async_worker != -2) {
        if (st->async_worker != urt_current_worker(p->rt))
            atomic_fetch_add(&p->wrong_worker, 1); /* a continuation on another worker */
        st->async_worker = -2;
    }
    unsigned out = urt_graph_out_port(ctx, 0);
    if (out & URT_PORT_FINISHED) {
        pstate_free(ctx);
        return URT_PROC_FINISHED; /* the consumer closed */
    }
    if (st->i == PR_N) {
        urt_graph_finish(ctx, 0);
        pstate_free(ctx);
        return URT_PROC_FINISHED;
    }
    if (out & URT_PORT_HAS_DATA)
        return URT_PROC_NEED_CONSUME;
    if (p->async_src && !st->ready)
        return URT_PROC_ASYNC;
    return URT_PROC_SYNC;
}

static int src_process(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    int r = urt_graph_push(ctx, 0, &p->vals[urt_graph_partition(ctx)][st->i], 1);
    if (r == -EAGAIN)
        return 0;
    if (r == -EPIPE)
        return 0; /* event() sees the closed port next */
    cr_assert_eq(r, 0);
    st->i++;
    st->ready = false;
    atomic_fetch_add(&p->pushed1, 1);
    return 0;
}

static void check_running(struct urt_graph_ctx *ctx, struct pr *p)
{
    if (urt_graph_step_state(urt_graph_of(ctx), urt_graph_step_of(ctx)) < URT_STEP_RUNNING)
        atomic_fetch_add(&p->early_events, 1);
}

static int tr_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    check_running(ctx, p);
    if (st->has) {
        int r = urt_graph_push(ctx, 0, st->out, 1);
        if (r == -EAGAIN)
            return URT_PROC_NEED_CONSUME;
        if (r == -EPIPE) {
            pstate_free(ctx);
            return URT_PROC_FINISHED;
        }
        atomic_fetch_add(&p->pushed2, 1);
        st->has = false;
    }
    int r = urt_graph_pull(ctx, 0, &st->u);
    if (r == 1) {
        st->got = true;
        return URT_PROC_SYNC;
    }
    if (r == -EPIPE) {
        urt_graph_finish(ctx, 0);
        pstate_free(ctx);
        return URT_PROC_FINISHED;
    }
    cr_assert_eq(r, 0);
    /* NEED_DATA, unless the producer pushed or finished since (it clears the bit) */
    cr_assert(urt_graph_in_port(ctx, 0) & (URT_PORT_NEED_DATA | URT_PORT_HAS_DATA | URT_PORT_FINISHED));
    return URT_PROC_NEED_DATA;
}

static int tr_process(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    cr_assert(st->got);
    uint32_t part = urt_graph_partition(ctx);
    st->out = &p->outs[part][st->i++];
    *st->out = *(uint64_t *)st->u.data * 2;
    urt_graph_unit_release(ctx, 0, st->u.data, st->u.rows); /* done with the input */
    st->got = false;
    st->has = true;
    return 0;
}

static int sink_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    check_running(ctx, p);
    if (p->sink_stop_after && st->i >= (uint32_t)p->sink_stop_after) {
        pstate_free(ctx);
        return URT_PROC_FINISHED; /* early: closes its input */
    }
    int r = urt_graph_pull(ctx, 0, &st->u);
    if (r == 1)
        return URT_PROC_SYNC;
    if (r == -EPIPE) {
        pstate_free(ctx);
        return URT_PROC_FINISHED;
    }
    return URT_PROC_NEED_DATA;
}

static int sink_process(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    atomic_fetch_add(&p->sum, *(uint64_t *)st->u.data);
    atomic_fetch_add(&p->sink_units, 1);
    urt_graph_unit_release(ctx, 0, st->u.data, st->u.rows);
    st->i++;
    return 0;
}

/* async: the helper thread completes each request 50 µs later */
static void *pr_helper(void *arg)
{
    struct pr *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->q_head == p->q_tail && !p->helper_stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->q_head == p->q_tail)
            break;
        struct urt_graph_ctx *ctx = p->queue[p->q_head++ % 64];
        pthread_mutex_unlock(&p->mu);
        sleep_us(50);
        struct pstate *st = pstate(ctx);
        st->ready = true;
        int fail = atomic_fetch_sub(&p->async_fail_at, 1) == 1;
        cr_assert_eq(urt_graph_async_done(ctx, fail ? -EIO : 0), 0);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int src_async(struct urt_graph_ctx *ctx, void *arg)
{
    struct pr *p = arg;
    struct pstate *st = pstate(ctx);
    st->async_worker = urt_current_worker(p->rt);
    atomic_fetch_add(&p->async_calls, 1);
    pthread_mutex_lock(&p->mu);
    p->queue[p->q_tail++ % 64] = ctx;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static const struct urt_processor SRC = {.event = src_event, .process = src_process, .async = src_async};
static const struct urt_processor TR = {.event = tr_event, .process = tr_process};
static const struct urt_processor SINK = {.event = sink_event, .process = sink_process};

static urt_graph *pr_build(urt_runtime *rt, struct done_rec *d, struct pr *p)
{
    urt_graph *g = make_graph(rt, d, 0);
    struct urt_step_desc a = {.name = "src", .processor = &SRC, .arg = p, .partitions = PR_PARTS};
    struct urt_step_desc b = {.name = "double", .processor = &TR, .arg = p};
    struct urt_step_desc c = {.name = "sum", .processor = &SINK, .arg = p};
    int s0 = urt_graph_add_step(g, &a), s1 = urt_graph_add_step(g, &b), s2 = urt_graph_add_step(g, &c);
    cr_assert(s0 >= 0 && s1 >= 0 && s2 >= 0, "%s", urt_last_error());
    int x1 = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &p->rel1), x2 = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &p->rel2);
    wire(g, s0, x1, s1);
    wire(g, s1, x2, s2);
    return g;
}

static void pr_init(struct pr *p, urt_runtime *rt)
{
    memset(p, 0, sizeof(*p));
    memset(g_pstates, 0, sizeof(g_pstates));
    p->rt = rt;
    for (int q = 0; q < PR_PARTS; q++)
        for (int i = 0; i < PR_N; i++)
            p->vals[q][i] = (uint64_t)q * 1000 + i;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
}

Test(graph, processors_sync_pipeline, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    static struct pr p;
    pr_init(&p, rt);
    urt_graph *g = pr_build(rt, &d, &p);
    cr_assert_eq(run_graph(g, &d), 0);
    uint64_t want = 0;
    for (int q = 0; q < PR_PARTS; q++)
        for (int i = 0; i < PR_N; i++)
            want += 2 * p.vals[q][i];
    cr_assert_eq(atomic_load(&p.sum), want);
    cr_assert_eq(atomic_load(&p.rel1.units), PR_PARTS * PR_N);
    cr_assert_eq(atomic_load(&p.rel2.units), PR_PARTS * PR_N);
    all_deactivated(g, 3);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* The controller starts steps in topological order: with many unrelated
 * steps between them, the source processor runs and pushes before its
 * consumers' steps started. They must not run (or finish) before then. */
Test(graph, processors_notified_before_their_step_started, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    for (int round = 0; round < SCALE(5, 2); round++) {
        struct done_rec d = {0};
        static struct pr p;
        pr_init(&p, rt);
        p.sink_stop_after = 1; /* a sink instance that ran early would also finish early */
        urt_graph *g = make_graph(rt, &d, 0);
        struct urt_step_desc a = {.name = "src", .processor = &SRC, .arg = &p, .partitions = PR_PARTS};
        int s0 = urt_graph_add_step(g, &a);
        for (int k = 0; k < 3000; k++) /* started between the source and its consumers */
            add_step(g, "filler", nop_step, NULL, 1, 0);
        struct urt_step_desc b = {.name = "double", .processor = &TR, .arg = &p};
        struct urt_step_desc c = {.name = "sum", .processor = &SINK, .arg = &p};
        int s1 = urt_graph_add_step(g, &b), s2 = urt_graph_add_step(g, &c);
        int x1 = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &p.rel1), x2 = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, &p.rel2);
        wire(g, s0, x1, s1);
        wire(g, s1, x2, s2);
        g_pstate_steps[0] = s0, g_pstate_steps[1] = s1, g_pstate_steps[2] = s2;
        cr_assert_eq(run_graph(g, &d), 0);
        cr_assert_eq(atomic_load(&p.early_events), 0, "round %d: a processor ran before its step started", round);
        cr_assert_eq(atomic_load(&p.sink_units), PR_PARTS, "round %d: %d units reached the sink", round,
                     atomic_load(&p.sink_units));
        cr_assert_eq(atomic_load(&p.rel1.units), (uint64_t)atomic_load(&p.pushed1));
        cr_assert_eq(urt_graph_step_state(g, s2), URT_STEP_DEACTIVATED);
        urt_graph_release(g);
    }
    g_pstate_steps[0] = 0, g_pstate_steps[1] = 1, g_pstate_steps[2] = 2;
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(graph, processor_that_finishes_early_closes_its_input, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    static struct pr p;
    pr_init(&p, rt);
    p.sink_stop_after = 10;
    urt_graph *g = pr_build(rt, &d, &p);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&p.sink_units), PR_PARTS * 10, "sink units %d (partition 0: %u, 1: %u)",
                 atomic_load(&p.sink_units), g_pstates[2][0].i, g_pstates[2][1].i);
    cr_assert_lt(atomic_load(&p.pushed1), PR_PARTS * PR_N, "the source was stopped by the closed ports");
    cr_assert_eq(atomic_load(&p.rel1.units), (uint64_t)atomic_load(&p.pushed1), "every pushed unit released once");
    cr_assert_eq(atomic_load(&p.rel2.units), (uint64_t)atomic_load(&p.pushed2));
    all_deactivated(g, 3);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(graph, async_processor_continues_on_its_worker, .timeout = 60)
{
    urt_runtime *rt = make_rt(4);
    for (int fail = 0; fail < 2; fail++) {
        struct done_rec d = {0};
        static struct pr p;
        pr_init(&p, rt);
        p.async_src = true;
        atomic_store(&p.async_fail_at, fail ? 40 : 0);
        pthread_t helper;
        cr_assert_eq(pthread_create(&helper, NULL, pr_helper, &p), 0);
        urt_graph *g = pr_build(rt, &d, &p);
        int st = run_graph(g, &d);
        pthread_mutex_lock(&p.mu);
        p.helper_stop = true;
        pthread_cond_signal(&p.cv);
        pthread_mutex_unlock(&p.mu);
        pthread_join(helper, NULL);
        if (fail) {
            cr_assert_eq(st, -EIO, "a failed async operation aborts the graph");
        } else {
            cr_assert_eq(st, 0);
            cr_assert_eq(atomic_load(&p.async_calls), PR_PARTS * PR_N);
            cr_assert_eq(atomic_load(&p.sink_units), PR_PARTS * PR_N);
        }
        cr_assert_eq(atomic_load(&p.wrong_worker), 0, "a continuation ran on another worker");
        cr_assert_eq(atomic_load(&p.rel1.units), (uint64_t)atomic_load(&p.pushed1));
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- async processors on urt I/O (urt/io.h) ----------------------------------------------------------- */

#define AIO_CHUNK 4096
#define AIO_CHUNKS 64
struct aio {
    urt_runtime *rt;
    int fd;
    uint64_t sleep_ns;          /* > 0: each async step is a urt_io_sleep of this long */
    _Atomic int wrong_worker, completions, cancelled_seen;
    _Atomic uint64_t sum;       /* the sink's sum of every byte */
    struct aio_inst {
        struct urt_io io;
        struct urt_graph_ctx *ctx;
        int worker;             /* where async() ran */
        uint32_t next;          /* next chunk to read */
        int32_t res;            /* the last read's result */
        bool have, pending;
        unsigned char buf[AIO_CHUNKS / 2][AIO_CHUNK]; /* one per chunk: a pulled unit is the sink's */
        int cur;
    } inst[2];
};

static void aio_done(struct urt_io *io, int32_t res, void *arg)
{
    struct aio_inst *in = arg;
    (void)io;
    in->res = res;
    urt_graph_async_done(in->ctx, res < 0 ? res : 0);
}

static int aio_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct aio *a = arg;
    struct aio_inst *in = &a->inst[urt_graph_partition(ctx)];
    if (in->pending) { /* back from async(): on the worker that started it */
        in->pending = false;
        if (in->worker != urt_current_worker(a->rt))
            atomic_fetch_add(&a->wrong_worker, 1);
        atomic_fetch_add(&a->completions, 1);
        in->have = true;
    }
    if (urt_graph_out_port(ctx, 0) & URT_PORT_FINISHED)
        return URT_PROC_FINISHED;
    if (in->have) {
        int r = urt_graph_push(ctx, 0, in->buf[in->cur], a->sleep_ns ? 1 : (uint32_t)in->res);
        if (r == -EAGAIN)
            return URT_PROC_NEED_CONSUME;
        in->have = false;
    }
    if (in->next == AIO_CHUNKS / 2) {
        urt_graph_finish(ctx, 0);
        return URT_PROC_FINISHED;
    }
    return URT_PROC_ASYNC;
}

static int aio_async(struct urt_graph_ctx *ctx, void *arg)
{
    struct aio *a = arg;
    uint32_t p = urt_graph_partition(ctx);
    struct aio_inst *in = &a->inst[p];
    in->ctx = ctx;
    in->worker = urt_current_worker(a->rt);
    in->pending = true;
    urt_io_init(&in->io, aio_done, in);
    in->cur = (int)in->next;
    uint32_t chunk = p * (AIO_CHUNKS / 2) + in->next++;
    int r = a->sleep_ns ? urt_io_sleep(&in->io, a->sleep_ns)
                        : urt_io_read(&in->io, a->fd, in->buf[in->cur], AIO_CHUNK, (int64_t)chunk * AIO_CHUNK);
    if (r)
        in->pending = false;
    return r;
}

static int aio_sink_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct aio *a = arg;
    struct urt_graph_unit u;
    int r;
    while ((r = urt_graph_pull(ctx, 0, &u)) == 1) {
        uint64_t s = 0;
        for (uint32_t i = 0; i < u.rows; i++)
            s += ((const unsigned char *)u.data)[i];
        atomic_fetch_add(&a->sum, s);
    }
    return r == -EPIPE ? URT_PROC_FINISHED : URT_PROC_NEED_DATA;
}

static const struct urt_processor AIO_SRC = {.event = aio_event, .async = aio_async};
static const struct urt_processor AIO_SINK = {.event = aio_sink_event};

static urt_graph *aio_build(urt_runtime *rt, struct done_rec *d, struct aio *a, uint64_t deadline_ns)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = on_done;
    o.arg = d;
    o.deadline_ns = deadline_ns;
    urt_graph *g = NULL;
    cr_assert_eq(urt_graph_create(rt, &o, &g), 0);
    int s = urt_graph_add_step(g, &(struct urt_step_desc){.name = "read", .processor = &AIO_SRC, .arg = a,
                                                          .partitions = 2});
    int k = urt_graph_add_step(g, &(struct urt_step_desc){.name = "sum", .processor = &AIO_SINK, .arg = a});
    int x = add_x(g, URT_EXCHANGE_FORWARD, 0, 0, NULL);
    wire(g, s, x, k);
    return g;
}

Test(graph, async_processor_reads_a_file_with_urt_io, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    static struct aio a;
    memset(&a, 0, sizeof(a));
    a.rt = rt;
    char path[] = "/tmp/urt-graph-aio.XXXXXX";
    a.fd = mkstemp(path);
    cr_assert_geq(a.fd, 0);
    unlink(path);
    uint64_t want = 0;
    static unsigned char data[AIO_CHUNK * AIO_CHUNKS];
    for (size_t i = 0; i < sizeof(data); i++) {
        data[i] = (unsigned char)(i * 7 + i / 4096);
        want += data[i];
    }
    cr_assert_eq(write(a.fd, data, sizeof(data)), (ssize_t)sizeof(data));
    struct done_rec d = {0};
    urt_graph *g = aio_build(rt, &d, &a, 0);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&a.sum), want, "every byte read through urt_io_read reached the sink");
    cr_assert_eq(atomic_load(&a.completions), AIO_CHUNKS);
    cr_assert_eq(atomic_load(&a.wrong_worker), 0, "a continuation ran on another worker");
    urt_graph_release(g);
    close(a.fd);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(graph, async_processor_sleeps_with_urt_io_and_the_deadline_cancels_it, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    static struct aio a;
    /* short sleeps: the graph runs to its end, each step on its worker */
    memset(&a, 0, sizeof(a));
    a.rt = rt;
    a.sleep_ns = 100 * 1000;
    struct done_rec d = {0};
    urt_graph *g = aio_build(rt, &d, &a, 0);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&a.completions), AIO_CHUNKS);
    cr_assert_eq(atomic_load(&a.wrong_worker), 0);
    urt_graph_release(g);
    /* 10 s sleeps under a 20 ms deadline: the job's deadline cancels the sleeps in flight */
    memset(&a, 0, sizeof(a));
    a.rt = rt;
    a.sleep_ns = 10ull * 1000000000ull;
    memset(&d, 0, sizeof(d));
    g = aio_build(rt, &d, &a, 20 * 1000000ull);
    uint64_t t0 = now_ns();
    cr_assert_eq(run_graph(g, &d), -ETIME);
    cr_assert_lt(now_ns() - t0, 2000000000ull, "the deadline did not cut the 10 s sleeps short");
    all_deactivated(g, 2);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- runtime destroy in cancel mode ------------------------------------------------------------------ */

static int slow_source(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint64_t until = now_ns() + 200000;
    while (now_ns() < until)
        ;
    int r = urt_graph_emit(ctx, 0, urt_graph_partition(ctx) % 2, &g_rows[0], 1);
    return r == -EPIPE ? URT_STEP_DONE : r;
}

Test(graph, destroy_in_cancel_mode_aborts_the_graph, .timeout = 30)
{
    for (int round = 0; round < SCALE(20, 5); round++) {
        urt_runtime *rt = make_rt(2);
        struct done_rec d = {0};
        struct rel r = {0};
        urt_graph *g = make_graph(rt, &d, 0);
        int a = add_step(g, "slow", slow_source, NULL, 2000, 0);
        int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, &r);
        int b = add_step(g, "sink", nop_step, NULL, 2, 0);
        wire(g, a, x, b);
        cr_assert_eq(urt_graph_start(g), 0);
        sleep_us(1000 + round * 300);
        cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
        cr_assert_eq(atomic_load(&d.calls), 1, "the callback ran %d times", atomic_load(&d.calls));
        int st_ = atomic_load(&d.status); /* -ESHUTDOWN: a submission of the graph was refused first */
        cr_assert(st_ == -ECANCELED || st_ == -ESHUTDOWN, "status %d", st_);
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, a, &st), 0);
        cr_assert_eq(atomic_load(&r.units), st.units_out);
        cr_assert_lt(st.tasks_run, 2000);
        urt_graph_release(g);
        leak_check();
    }
}

/* ---- urt_graph_cancel from the completion callback, which releases the handle ---------------------- */

struct cb_cancel {
    _Atomic int calls, cancel_ret;
};

static void cancel_in_callback(urt_graph *g, int status, void *arg)
{
    struct cb_cancel *c = arg;
    (void)status;
    atomic_store(&c->cancel_ret, urt_graph_cancel(g)); /* the graph is ending: -EALREADY */
    urt_graph_release(g);                              /* rule 6: the callback may release */
    atomic_fetch_add(&c->calls, 1);
}

Test(graph, cancel_and_release_in_the_completion_callback, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    for (int round = 0; round < SCALE(50, 10); round++) {
        struct cb_cancel c = {0};
        struct urt_graph_options o;
        urt_graph_options_init(&o);
        o.done = cancel_in_callback;
        o.arg = &c;
        urt_graph *g = NULL;
        cr_assert_eq(urt_graph_create(rt, &o, &g), 0);
        int a = add_step(g, "src", emit_tagged, (void *)1, 8, 0);
        int x = add_x(g, URT_EXCHANGE_SHUFFLE, 0, 0, NULL);
        int b = add_step(g, "sink", nop_step, NULL, 2, 0);
        wire(g, a, x, b);
        cr_assert_eq(urt_graph_start(g), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&c.calls) == 1, 10000));
        cr_assert_eq(atomic_load(&c.cancel_ret), -EALREADY);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
