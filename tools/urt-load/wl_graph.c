/*
 * tools/urt-load/wl_graph.c — the task-graph family: docs/benchmarks.md
 * sections 3.10 (graph_aggregate), 3.11 (graph_limit) and 3.15
 * (graph_pipeline) on urt's task graphs (urt/graph.h, C16).
 *
 * graph_aggregate: scan (1,024 partitions, one task per morsel of 16,384
 * rows: keep value % 10 != 0, append (key, value) to the morsel's buffer of
 * partition p = ((key * 2654435761) >> 16) % GA_PARTS, then emit each
 * non-empty buffer into the shuffle) -> shuffle (blocking: GA_PARTS
 * partitions) -> aggregate (GA_PARTS partitions: every unit of its
 * partition into a dense array of GA_KEYS (count, sum), then one unit, its
 * array, into the second shuffle) -> shuffle (1 partition) -> final (the
 * checksum, t1, the futex wake). The transitions happen inside the graph's
 * controller (the task that finishes a step's last task runs the controller
 * and starts the next step). As the TBB peer, the scan computes `% GA_PARTS`
 * with the partition count as a compile-time constant for 4, 8, 16, 32 and
 * 64 partitions (a mask at 2 workers). Buffers (1,024 x GA_PARTS of
 * GA_MORSEL rows, the per-partition arrays) are allocated once per process;
 * the arrays are zeroed before each iteration (not timed). The graph object
 * is built and prepared (urt_graph_prepare) before t0, as the TBB peer
 * builds its flow graph once: t0 is taken right before urt_graph_start().
 *
 * graph_pipeline (3.15): source (one partition, the values 1..200,000
 * one unit each, the value in the data pointer) -> forward -> 8 transform
 * steps (4 xorshift64 steps per unit, P6 gives each one partition) ->
 * forward -> sink (a per-worker sum). It measures what the graph costs per
 * unit and step. t0 before urt_graph_start(), t1 in the completion
 * callback; the check: 200,000 units at the sink, their sum the serial one.
 *
 * graph_limit: scan (4,096 partitions, URT_STEP_SCAN, max_in_flight = 4 x
 * WORKERS: a finished scan task admits the next morsel) keeps the rows with
 * value % 1000 == 7 in the morsel's buffer and emits it, when its morsel is
 * done, into a forward exchange -> limit (one partition: the units arrive one
 * at a time, in arrival order) takes the first 100 rows and calls
 * urt_graph_complete(): the scan is stopped at once (no morsel task that has
 * not started starts; running ones finish). t0 before urt_graph_start(), t1
 * in the graph's completion callback (the job's teardown, after every
 * started task finished). The scan loop is scalar, as the TBB peer's
 * (push_back into a std::vector, not vectorized by g++): GCC does not
 * vectorize it either (its bound check; no vpmullq with -march=native), and
 * it is marked no-tree-vectorize so that it stays so. A simpler C loop (a
 * fixed array without the check) is vectorized with AVX-512 and ran about
 * 4.5x faster per morsel on the project's VM: that would measure the
 * compiler, not the runtime.
 *
 * Checks: graph_aggregate's checksum against a single-threaded reference
 * computed once per process; graph_limit: exactly 100 rows, each satisfying
 * the filter and equal to its row recomputed from its index; graph_pipeline:
 * the units counted at the sink and their sum against the serial sum. A
 * failed check prints `# ERROR ...` and the workload returns 1.
 *
 * Memory ordering: the futex event (measure.h) publishes the final task's
 * writes (checksum, t1) to the external thread; the graph's job end
 * (urt_graph_wait) orders every task's writes before the external thread's
 * reads of the limit's rows, the sink's sums and the counters. The source's
 * cursor and the sink's per-worker sums are plain: one partition runs one
 * task at a time, and the graph's hand-offs order its tasks; the external
 * thread resets them before urt_graph_start (which publishes them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "workloads.h"

#define GA_ROWS (1u << 24)
#define GA_MORSEL 16384u
#define GA_MORSELS (GA_ROWS / GA_MORSEL) /* 1,024 */
#define GA_KEYS 16384u
#define GL_ROWS (1u << 26)
#define GL_MORSELS (GL_ROWS / GA_MORSEL) /* 4,096 */
#define GL_LIMIT 100
#define GL_OUT_CAP 64 /* kept rows of one morsel: at most 37 in these 4,096 morsels */

/* splitmix64's finalizer of (i + 1): row i of both workloads (3.10). */
static inline uint64_t row_mix(uint64_t i)
{
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ==== 3.10 graph_aggregate =================================================== */

struct ga_row {
    uint32_t key, value;
};

struct ga_agg {
    uint64_t count, sum;
};

static struct {
    urt_runtime *rt;
    uint32_t parts;
    struct ga_row *buf; /* buffer (m, p) at (m * parts + p) * GA_MORSEL */
    struct ga_agg *agg; /* partition p at p * GA_KEYS */
    uint64_t reference, checksum;
    struct measure_done done;
} GA;

/* One morsel into its partition buffers (the TBB peer's loop). NP: the
 * partition count as a constant (0: any, with a division). */
#define GA_SCAN_IMPL(NP)                                                                                     \
    static void ga_scan_##NP(uint32_t m, uint32_t *len)                                                      \
    {                                                                                                        \
        const uint32_t np = (NP) ? (NP) : GA.parts;                                                          \
        struct ga_row *base = GA.buf + (size_t)m * np * GA_MORSEL;                                           \
        const uint64_t i0 = (uint64_t)m * GA_MORSEL;                                                         \
        for (uint32_t p = 0; p < np; p++)                                                                    \
            len[p] = 0;                                                                                      \
        for (uint32_t r = 0; r < GA_MORSEL; r++) {                                                           \
            const uint64_t z = row_mix(i0 + r);                                                              \
            const uint32_t key = (uint32_t)(z >> 32) & (GA_KEYS - 1);                                        \
            const uint32_t value = (uint32_t)z & 0xFFFF;                                                     \
            if (value % 10 == 0)                                                                             \
                continue;                                                                                    \
            const uint32_t p = ((key * 2654435761u) >> 16) % np;                                             \
            base[(size_t)p * GA_MORSEL + len[p]++] = (struct ga_row){key, value};                            \
        }                                                                                                    \
    }
GA_SCAN_IMPL(0)
GA_SCAN_IMPL(4)
GA_SCAN_IMPL(8)
GA_SCAN_IMPL(16)
GA_SCAN_IMPL(32)
GA_SCAN_IMPL(64)

static int ga_scan(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t m = urt_graph_partition(ctx), len[1024];
    switch (GA.parts) {
    case 4: ga_scan_4(m, len); break;
    case 8: ga_scan_8(m, len); break;
    case 16: ga_scan_16(m, len); break;
    case 32: ga_scan_32(m, len); break;
    case 64: ga_scan_64(m, len); break;
    default: ga_scan_0(m, len); break;
    }
    struct ga_row *base = GA.buf + (size_t)m * GA.parts * GA_MORSEL;
    for (uint32_t p = 0; p < GA.parts; p++) {
        if (!len[p])
            continue;
        int err = urt_graph_emit(ctx, 0, p, base + (size_t)p * GA_MORSEL, len[p]);
        if (err)
            return err; /* aborts the graph (the iteration fails) */
    }
    return URT_STEP_DONE;
}

static int ga_aggregate(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t p = urt_graph_partition(ctx);
    struct ga_agg *a = GA.agg + (size_t)p * GA_KEYS;
    struct urt_graph_unit u;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        const struct ga_row *rows = u.data;
        for (uint32_t k = 0; k < u.rows; k++) {
            struct ga_agg *e = &a[rows[k].key];
            e->count += 1;
            e->sum += rows[k].value;
        }
    }
    return urt_graph_emit(ctx, 0, 0, a, GA_KEYS);
}

static int ga_final(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint64_t cs = 0;
    struct urt_graph_unit u;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        const struct ga_agg *a = u.data;
        for (uint32_t k = 0; k < u.rows; k++)
            cs += a[k].count * 1000003ull + a[k].sum;
    }
    GA.checksum = cs;
    atomic_store_explicit(&GA.done.t1, urt_now_ns(), memory_order_relaxed);
    measure_event_set(&GA.done.event);
    return URT_STEP_DONE;
}

static uint64_t ga_reference(uint64_t *kept_out)
{
    struct ga_agg *a = calloc(GA_KEYS, sizeof(*a));
    uint64_t kept = 0, cs = 0;
    if (!a)
        return 0;
    for (uint64_t i = 0; i < GA_ROWS; i++) {
        const uint64_t z = row_mix(i);
        const uint32_t key = (uint32_t)(z >> 32) & (GA_KEYS - 1), value = (uint32_t)z & 0xFFFF;
        if (value % 10 == 0)
            continue;
        a[key].count++;
        a[key].sum += value;
        kept++;
    }
    for (uint32_t k = 0; k < GA_KEYS; k++)
        cs += a[k].count * 1000003ull + a[k].sum;
    free(a);
    *kept_out = kept;
    return cs;
}

static int ga_add(urt_graph *g, const char *name, urt_graph_step_fn *fn, uint32_t parts)
{
    struct urt_step_desc d = {.name = name, .fn = fn, .partitions = parts};
    return urt_graph_add_step(g, &d);
}

/* scan -> shuffle(GA_PARTS) -> aggregate -> shuffle(1) -> final, prepared. */
static urt_graph *ga_build(void)
{
    urt_graph *g = NULL;
    if (urt_graph_create(GA.rt, NULL, &g))
        return NULL;
    struct urt_exchange_desc sh = {.kind = URT_EXCHANGE_SHUFFLE};
    int scan = ga_add(g, "scan", ga_scan, GA_MORSELS), agg = ga_add(g, "aggregate", ga_aggregate, GA.parts);
    int fin = ga_add(g, "final", ga_final, 1);
    int x1 = urt_graph_add_exchange(g, &sh), x2 = urt_graph_add_exchange(g, &sh);
    if (scan < 0 || agg < 0 || fin < 0 || x1 < 0 || x2 < 0 || urt_graph_add_output(g, scan, x1) < 0 ||
        urt_graph_add_input(g, agg, x1) < 0 || urt_graph_add_output(g, agg, x2) < 0 || urt_graph_add_input(g, fin, x2) < 0 ||
        urt_graph_prepare(g)) {
        fprintf(stderr, "# ERROR %s graph_aggregate: building the graph: %s\n", MEASURE_PEER, urt_last_error());
        urt_graph_release(g);
        return NULL;
    }
    return g;
}

static uint64_t ga_iteration(void *arg)
{
    (void)arg;
    memset(GA.agg, 0, (size_t)GA.parts * GA_KEYS * sizeof(*GA.agg));
    GA.checksum = 0;
    measure_done_reset(&GA.done, 1);
    urt_graph *g = ga_build();
    if (!g)
        return 0;
    const uint64_t t0 = urt_now_ns();
    int err = urt_graph_start(g);
    if (!err)
        measure_event_wait(&GA.done.event); /* set by the final task */
    int st = err ? err : urt_graph_wait(g, URT_WAIT_FOREVER);
    urt_graph_release(g);
    if (st) {
        fprintf(stderr, "# ERROR %s graph_aggregate: the graph ended with %d (%s)\n", MEASURE_PEER, st, strerror(-st));
        return 0;
    }
    if (GA.checksum != GA.reference) {
        fprintf(stderr, "# ERROR %s graph_aggregate: checksum %016llx != reference %016llx\n", MEASURE_PEER,
                (unsigned long long)GA.checksum, (unsigned long long)GA.reference);
        return 0;
    }
    const uint64_t t1 = atomic_load_explicit(&GA.done.t1, memory_order_relaxed);
    return t1 > t0 ? t1 - t0 : 1;
}

static int run_graph_aggregate(urt_runtime *rt, const char *name)
{
    GA.rt = rt;
    GA.parts = 4 * urt_runtime_config(rt)->workers;
    if (GA.parts > 1024) {
        fprintf(stderr, "# ERROR %s %s: WORKERS too large (at most 256)\n", MEASURE_PEER, name);
        return 1;
    }
    const size_t nbuf = (size_t)GA_MORSELS * GA.parts;
    GA.buf = malloc(nbuf * GA_MORSEL * sizeof(*GA.buf)); /* untouched pages cost nothing until filled */
    GA.agg = malloc((size_t)GA.parts * GA_KEYS * sizeof(*GA.agg));
    if (!GA.buf || !GA.agg) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, name);
        free(GA.buf);
        free(GA.agg);
        return 1;
    }
    uint64_t t_ref = urt_now_ns(), kept = 0;
    GA.reference = ga_reference(&kept);
    t_ref = urt_now_ns() - t_ref;
    measure_note(name, "rows=%u morsels=%u keys=%u parts=%u kept=%llu reference checksum=%016llx (single thread, "
                       "%.0f ms); buffers %.0f MiB virtual",
                 GA_ROWS, GA_MORSELS, GA_KEYS, GA.parts, (unsigned long long)kept, (unsigned long long)GA.reference,
                 t_ref / 1e6, nbuf * GA_MORSEL * sizeof(*GA.buf) / 1048576.0);
    measure_note(name, "urt graph: scan (%u partitions) -> shuffle -> aggregate (%u partitions) -> shuffle -> final; "
                       "built and prepared before t0, t0 right before urt_graph_start",
                 GA_MORSELS, GA.parts);
    int rc = measure_throughput(name, "rows_per_s", "rows/s", (double)GA_ROWS, ga_iteration, NULL);
    free(GA.buf);
    free(GA.agg);
    return rc;
}

/* ==== 3.11 graph_limit ======================================================== */

struct gl_row {
    uint32_t index, key, value;
};

struct gl_morsel {
    uint32_t n;
    struct gl_row rows[GL_OUT_CAP];
};

static struct {
    struct gl_morsel *out; /* per morsel */
    struct gl_row taken[GL_LIMIT];
    int n_taken;           /* the limit step's (one partition: one task at a time) */
    _Atomic uint32_t ran;  /* morsel tasks that ran */
    _Atomic int overflow;
    struct measure_event ended;
    _Atomic uint64_t t1;
    _Atomic int status;
} GL;

/* Scalar: the same per-row work as the TBB peer's loop (file comment). */
__attribute__((optimize("no-tree-vectorize"))) static void gl_scan_morsel(uint32_t m, struct gl_morsel *o)
{
    const uint32_t i0 = m * GA_MORSEL;
    o->n = 0;
    for (uint32_t r = 0; r < GA_MORSEL; r++) {
        const uint64_t z = row_mix(i0 + r);
        const uint32_t value = (uint32_t)z & 0xFFFF;
        if (value % 1000 != 7)
            continue;
        if (o->n == GL_OUT_CAP) {
            atomic_store_explicit(&GL.overflow, 1, memory_order_relaxed);
            continue;
        }
        o->rows[o->n++] = (struct gl_row){i0 + r, (uint32_t)(z >> 32) & (GA_KEYS - 1), value};
    }
}

static int gl_scan(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t m = urt_graph_partition(ctx);
    atomic_fetch_add_explicit(&GL.ran, 1, memory_order_relaxed);
    struct gl_morsel *o = &GL.out[m];
    gl_scan_morsel(m, o);
    if (!o->n)
        return URT_STEP_DONE;
    int err = urt_graph_emit(ctx, 0, 0, o, o->n);
    if (err == -EAGAIN)
        return URT_STEP_YIELD; /* not with 4 x WORKERS morsels in flight and the default capacity */
    return err == -EPIPE ? URT_STEP_DONE : err; /* -EPIPE: the limit has its rows */
}

static int gl_limit(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    const struct gl_morsel *o = u.data;
    for (uint32_t k = 0; k < u.rows && GL.n_taken < GL_LIMIT; k++)
        GL.taken[GL.n_taken++] = o->rows[k];
    if (GL.n_taken == GL_LIMIT)
        urt_graph_complete(ctx); /* early completion: the scan stops */
    return URT_STEP_DONE;
}

static void gl_done(urt_graph *g, int status, void *arg)
{
    (void)g;
    (void)arg;
    atomic_store_explicit(&GL.t1, urt_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&GL.status, status, memory_order_relaxed);
    measure_event_set(&GL.ended);
}

static urt_graph *gl_build(uint32_t workers)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = gl_done;
    urt_graph *g = NULL;
    if (urt_graph_create(GA.rt, &o, &g))
        return NULL;
    struct urt_step_desc scan = {.name = "scan", .fn = gl_scan, .partitions = GL_MORSELS,
                                 .max_in_flight = 4 * workers, .flags = URT_STEP_SCAN};
    struct urt_step_desc limit = {.name = "limit", .fn = gl_limit, .partitions = 1};
    struct urt_exchange_desc fwd = {.kind = URT_EXCHANGE_FORWARD};
    int s = urt_graph_add_step(g, &scan), l = urt_graph_add_step(g, &limit), x = urt_graph_add_exchange(g, &fwd);
    if (s < 0 || l < 0 || x < 0 || urt_graph_add_output(g, s, x) < 0 || urt_graph_add_input(g, l, x) < 0 ||
        urt_graph_prepare(g)) {
        fprintf(stderr, "# ERROR %s graph_limit: building the graph: %s\n", MEASURE_PEER, urt_last_error());
        urt_graph_release(g);
        return NULL;
    }
    return g;
}

/* The 100 rows: each satisfies the filter and is the row of its index. */
static int gl_check(void)
{
    int wrong = 0;
    for (int k = 0; k < GL.n_taken; k++) {
        const struct gl_row *r = &GL.taken[k];
        const uint64_t z = row_mix(r->index);
        wrong += r->value % 1000 != 7 || r->value != ((uint32_t)z & 0xFFFF) ||
                 r->key != ((uint32_t)(z >> 32) & (GA_KEYS - 1));
    }
    if (GL.n_taken != GL_LIMIT || wrong || atomic_load(&GL.overflow)) {
        fprintf(stderr, "# ERROR %s graph_limit: %d rows taken (want %d), %d not satisfying the filter%s\n",
                MEASURE_PEER, GL.n_taken, GL_LIMIT, wrong, atomic_load(&GL.overflow) ? ", a morsel overflowed" : "");
        return 1;
    }
    return 0;
}

/* One iteration: latency (ns) and morsels run, or -1 when it failed. */
static int gl_iteration(uint32_t workers, uint64_t *lat, uint32_t *ran)
{
    GL.n_taken = 0;
    atomic_store(&GL.ran, 0);
    atomic_store(&GL.ended.word, 0);
    urt_graph *g = gl_build(workers);
    if (!g)
        return -1;
    const uint64_t t0 = urt_now_ns();
    int err = urt_graph_start(g);
    if (!err)
        measure_event_wait(&GL.ended);
    int st = err ? err : urt_graph_wait(g, URT_WAIT_FOREVER);
    urt_graph_release(g);
    if (st) {
        fprintf(stderr, "# ERROR %s graph_limit: the graph ended with %d (%s)\n", MEASURE_PEER, st, strerror(-st));
        return -1;
    }
    *lat = atomic_load_explicit(&GL.t1, memory_order_relaxed) - t0;
    *ran = atomic_load(&GL.ran);
    return gl_check() ? -1 : 0;
}

static int run_graph_limit(urt_runtime *rt, const char *name)
{
    GA.rt = rt;
    const uint32_t workers = urt_runtime_config(rt)->workers;
    GL.out = calloc(GL_MORSELS, sizeof(*GL.out));
    if (!GL.out) {
        fprintf(stderr, "# ERROR %s %s: out of memory\n", MEASURE_PEER, name);
        return 1;
    }
    measure_note(name, "early completion by urt_graph_complete() from the one-partition limit step at the %dth row; "
                       "scan = %u partitions, max_in_flight %u (a finished morsel task admits the next); t1 in "
                       "the graph's completion callback; scalar scan loop (as the TBB peer's)",
                 GL_LIMIT, GL_MORSELS, 4 * workers);
    double lat[ITERS], rows[ITERS];
    char list[ITERS * 12] = "";
    int rc = 0;
    for (int it = 0; it < WARMUP + ITERS && !rc; it++) {
        measure_sleep_us(IDLE_MS * 1000u);
        uint64_t ns = 0;
        uint32_t ran = 0;
        rc = gl_iteration(workers, &ns, &ran) ? 1 : 0;
        if (!rc && it >= WARMUP) {
            lat[it - WARMUP] = ns / 1000.0;
            rows[it - WARMUP] = (double)ran * GA_MORSEL;
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%u", it > WARMUP ? "," : "", ran);
        }
    }
    free(GL.out);
    if (rc)
        return 1;
    double lmin = lat[0], lmax = lat[0];
    for (int i = 1; i < ITERS; i++) {
        lmin = lat[i] < lmin ? lat[i] : lmin;
        lmax = lat[i] > lmax ? lat[i] : lmax;
    }
    const double mlat = measure_median(lat, ITERS), mrows = measure_median(rows, ITERS);
    printf("%s %s latency_us %.2f us\n", MEASURE_PEER, name, mlat);
    printf("%s %s rows_scanned %.0f rows\n", MEASURE_PEER, name, mrows);
    fflush(stdout);
    measure_note(name, "n=%d latency min=%.2fus median=%.2fus max=%.2fus; morsels scanned per timed iteration [%s] "
                       "(of %u); workers=%u",
                 ITERS, lmin, mlat, lmax, list, GL_MORSELS, workers);
    return 0;
}

/* ==== 3.15 graph_pipeline ===================================================== */

#define GP_UNITS 200000u
#define GP_STAGES 8
#define GP_MIX 4 /* xorshift64 steps per transform */
#define GP_SLOTS 256

/* One transform: GP_MIX xorshift64 steps. It maps 0 to 0 only (each step is
 * a bijection), so a unit's value (1..GP_UNITS, transformed) is never 0. */
static inline uint64_t gp_mix(uint64_t x)
{
    for (int k = 0; k < GP_MIX; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

struct gp_slot {
    _Alignas(64) uint64_t sum, n; /* one worker's share of the sink */
};

static struct {
    urt_runtime *rt;
    uint64_t want;            /* the serial sum of the 8-fold transform */
    uint64_t next;            /* the source's cursor (one partition: one task at a time) */
    struct gp_slot slot[GP_SLOTS];
    _Atomic int status;
    _Atomic uint64_t t1;
    struct measure_event ended;
} GP;

/* The source: one partition emitting 1..GP_UNITS, one unit each, the value in
 * the data pointer (a unit's data is the producer's; the graph never reads
 * it). A full exchange: yield and emit the same value when called again. */
static int gp_source(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    while (GP.next < GP_UNITS) {
        int err = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)(GP.next + 1), 1);
        if (err == -EAGAIN)
            return URT_STEP_YIELD;
        if (err)
            return err == -EPIPE ? URT_STEP_DONE : err;
        GP.next++;
    }
    return URT_STEP_DONE;
}

/* A transform: called once per arriving unit of its partition. A unit held
 * back by a full exchange waits in the task state (its value, never 0) for
 * the call after the yield, as urt_graph_next gives a unit to one call only. */
static int gp_stage(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    void **held = urt_graph_task_state(ctx);
    uint64_t x;
    struct urt_graph_unit u;
    if (*held) {
        x = (uint64_t)(uintptr_t)*held;
        *held = NULL;
    } else if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        x = gp_mix((uint64_t)(uintptr_t)u.data);
    } else {
        return URT_STEP_DONE;
    }
    int err = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)x, 1);
    if (err == -EAGAIN) {
        *held = (void *)(uintptr_t)x;
        return URT_STEP_YIELD;
    }
    return err == -EPIPE ? URT_STEP_DONE : err;
}

static int gp_sink(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    struct gp_slot *s = &GP.slot[(unsigned)urt_current_worker(GP.rt) % GP_SLOTS];
    s->sum += (uint64_t)(uintptr_t)u.data;
    s->n++;
    return URT_STEP_DONE;
}

static void gp_done(urt_graph *g, int status, void *arg)
{
    (void)g;
    (void)arg;
    atomic_store_explicit(&GP.t1, urt_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&GP.status, status, memory_order_relaxed);
    measure_event_set(&GP.ended);
}

/* source -> forward -> stage 1 -> forward -> ... -> stage 8 -> forward -> sink,
 * every count by the rules (P6: one partition each, the source's). */
static urt_graph *gp_build(int *ids)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = gp_done;
    urt_graph *g = NULL;
    if (urt_graph_create(GP.rt, &o, &g))
        return NULL;
    static const char *names[GP_STAGES] = {"stage1", "stage2", "stage3", "stage4",
                                           "stage5", "stage6", "stage7", "stage8"};
    struct urt_step_desc src = {.name = "source", .fn = gp_source, .partitions = 1};
    struct urt_step_desc sink = {.name = "sink", .fn = gp_sink};
    struct urt_exchange_desc fwd = {.kind = URT_EXCHANGE_FORWARD};
    int prev = ids[0] = urt_graph_add_step(g, &src), ok = prev >= 0;
    for (int k = 1; k <= GP_STAGES + 1 && ok; k++) {
        struct urt_step_desc st = {.name = names[(k - 1) % GP_STAGES], .fn = gp_stage};
        int s = ids[k] = urt_graph_add_step(g, k <= GP_STAGES ? &st : &sink), x = urt_graph_add_exchange(g, &fwd);
        ok = s >= 0 && x >= 0 && urt_graph_add_output(g, prev, x) >= 0 && urt_graph_add_input(g, s, x) >= 0;
        prev = s;
    }
    if (!ok || urt_graph_prepare(g)) {
        fprintf(stderr, "# ERROR %s graph_pipeline: building the graph: %s\n", MEASURE_PEER, urt_last_error());
        urt_graph_release(g);
        return NULL;
    }
    return g;
}

static uint64_t gp_iteration(void *arg)
{
    struct urt_graph_step_stats *st = arg; /* the steps' counters of the last iteration */
    int ids[GP_STAGES + 2];
    memset(GP.slot, 0, sizeof(GP.slot));
    GP.next = 0;
    atomic_store(&GP.ended.word, 0);
    urt_graph *g = gp_build(ids);
    if (!g)
        return 0;
    const uint64_t t0 = urt_now_ns();
    int err = urt_graph_start(g);
    if (!err)
        measure_event_wait(&GP.ended);
    int status = err ? err : urt_graph_wait(g, URT_WAIT_FOREVER);
    for (int k = 0; k < GP_STAGES + 2 && !err; k++)
        urt_graph_step_stats(g, ids[k], &st[k]);
    urt_graph_release(g);
    if (status) {
        fprintf(stderr, "# ERROR %s graph_pipeline: the graph ended with %d (%s)\n", MEASURE_PEER, status,
                strerror(-status));
        return 0;
    }
    uint64_t sum = 0, n = 0;
    for (int w = 0; w < GP_SLOTS; w++) {
        sum += GP.slot[w].sum;
        n += GP.slot[w].n;
    }
    if (n != GP_UNITS || sum != GP.want) {
        fprintf(stderr, "# ERROR %s graph_pipeline: %llu units reached the sink (want %u), sum %016llx (want %016llx)\n",
                MEASURE_PEER, (unsigned long long)n, GP_UNITS, (unsigned long long)sum, (unsigned long long)GP.want);
        return 0;
    }
    const uint64_t t1 = atomic_load_explicit(&GP.t1, memory_order_relaxed);
    return t1 > t0 ? t1 - t0 : 1;
}

static int run_graph_pipeline(urt_runtime *rt, const char *name)
{
    GP.rt = rt;
    GP.want = 0;
    for (uint64_t i = 1; i <= GP_UNITS; i++) {
        uint64_t x = i;
        for (int s = 0; s < GP_STAGES; s++)
            x = gp_mix(x);
        GP.want += x;
    }
    measure_note(name, "urt graph: source (1 partition) -> %d transform steps -> sink, forward exchanges (P6: one "
                       "partition each), %u units, %d xorshift64 steps per transform; built and prepared before t0, "
                       "t1 in the graph's completion callback",
                 GP_STAGES, GP_UNITS, GP_MIX);
    struct urt_graph_step_stats st[GP_STAGES + 2];
    memset(st, 0, sizeof(st));
    int rc = measure_throughput(name, "units_per_s", "units/s", (double)GP_UNITS, gp_iteration, st);
    if (!rc)
        measure_note(name, "last iteration: source yields %llu; stage1 yields %llu; sink units_in %llu",
                     (unsigned long long)st[0].yields, (unsigned long long)st[1].yields,
                     (unsigned long long)st[GP_STAGES + 1].units_in);
    return rc;
}

const struct workload WL_GRAPH[] = {
    {.name = "graph_aggregate",
     .summary = "scan -> shuffle -> aggregate -> final on a urt task graph, 2^24 rows (3.10)",
     .metrics = {"rows_per_s", NULL},
     .run = run_graph_aggregate},
    {.name = "graph_limit",
     .summary = "scan -> LIMIT 100 with early completion on a urt task graph (3.11)",
     .metrics = {"latency_us", "rows_scanned", NULL},
     .run = run_graph_limit},
    {.name = "graph_pipeline",
     .summary = "source -> 8 cheap transform steps -> sink, 200,000 units on a urt task graph (3.15)",
     .metrics = {"units_per_s", NULL},
     .run = run_graph_pipeline},
    {0},
};
