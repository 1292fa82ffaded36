/*
 * tests/unit/test_graph_stream.c — forward exchanges and their consumer
 * streams (urt/graph.h, graph/exec.c's stream protocol, graph/emit.c's pool
 * and fast path), checked against a model:
 *
 *  - a chain source -> 3 forward steps -> sink over 1 and 3 partitions,
 *    capacities 3 and 64, on 1, 2 and 4 workers, the middle steps yielding
 *    now and then on their own and on every full exchange: every partition's
 *    units reach the sink once, in emit order, on their own partition (P6);
 *    each exchange never holds more than its capacity (plus the emits in
 *    progress), releases each unit once; the counters add up (run = units,
 *    nothing skipped or cut) and the source was held back (parked);
 *  - a producer that yields gives back the free nodes its fast path took:
 *    the exchange's other producer finds room while it waits its turn;
 *  - a step that emits runs of units to two forward outputs in turn (its
 *    resolved output changes between the runs): each sink gets exactly its
 *    units in order, each exchange releases each unit once and stays within
 *    its capacity (a free node of one exchange never goes to the other);
 *  - a scan whose slots move from partition to partition feeds partition
 *    p mod count (P6's exception) with each scan partition's units in order:
 *    a slot's emits follow it to its new partition;
 *  - two consumer steps on one forward both see every unit in order and each
 *    unit is released once, after both;
 *  - an emit after the graph's job was cancelled, or the graph cancelled, is
 *    refused (-EPIPE) at once, also when the emits before it took the fast
 *    path (a free node waiting, the output resolved);
 *  - a stream whose step cancels: after urt_graph_cancel its next unit is
 *    skipped, after urt_job_cancel the rest of its batch is still called
 *    (each call sees urt_graph_stopping() and cannot emit), then skipped;
 *    every unit released once;
 *  - a cleanup cannot emit (-EINVAL), also when its task's emits took the
 *    fast path;
 *  - a consumer that completes early while units wait for it: they are
 *    released unprocessed and counted skipped (run + skipped + cut =
 *    accepted = released).
 * Criterion asserts only on the test thread: tasks record what they saw.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "tests/unit/graph_helpers.h"

static int add_forward(urt_graph *g, uint32_t capacity, urt_graph_release_fn *release, void *arg)
{
    return add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD, .capacity = capacity,
                                                .release = release, .release_arg = arg});
}

/* A unit's value: its source partition and sequence, never 0. */
static inline uint64_t unit_val(uint32_t p, uint32_t seq)
{
    return (uint64_t)p << 32 | (seq + 1u);
}

static inline uint32_t val_part(uint64_t v)
{
    return (uint32_t)(v >> 32);
}

static inline uint32_t val_seq(uint64_t v)
{
    return (uint32_t)v - 1u;
}

/* The step's next unit's value into *v; false (counted in *missing) when
 * urt_graph_next gives none, which a called step must always get. */
static bool next_val(struct urt_graph_ctx *ctx, _Atomic int *missing, uint64_t *v)
{
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1) {
        atomic_fetch_add(missing, 1);
        return false;
    }
    *v = (uint64_t)(uintptr_t)u.data;
    return true;
}

/* ---- a chain against the model ------------------------------------------------------------------- */

#define CH_STAGES 3
#define CH_X (CH_STAGES + 1)
#define CH_MAXP 8

struct chain;

struct chain_x {              /* one exchange, as its release callback sees it */
    struct chain *c;
    _Atomic int64_t outstanding, max_out;
    _Atomic uint64_t released;
};

struct chain {
    uint32_t units;            /* per source partition */
    struct chain_x x[CH_X];
    _Atomic uint32_t cursor[CH_MAXP];
    _Atomic uint32_t next_seq[CH_MAXP];
    _Atomic int disorder, wrong_partition, bad_emit, missing;
    _Atomic uint64_t sunk;
};

static void chain_release(void *data, uint32_t rows, void *arg)
{
    struct chain_x *x = arg;
    (void)data;
    (void)rows;
    atomic_fetch_sub(&x->outstanding, 1);
    atomic_fetch_add(&x->released, 1);
}

/* Emit v on port into x, counted as outstanding before the call (and its
 * high mark kept): 0, or -EAGAIN (nothing taken); any other error is
 * counted in *bad. */
static int counted_emit(struct urt_graph_ctx *ctx, uint32_t port, struct chain_x *x, uint64_t v, _Atomic int *bad)
{
    int64_t o = atomic_fetch_add(&x->outstanding, 1) + 1;
    int r = urt_graph_emit(ctx, port, 0, (void *)(uintptr_t)v, 1);
    if (r) {
        atomic_fetch_sub(&x->outstanding, 1);
        if (r != -EAGAIN)
            atomic_fetch_add(bad, 1);
        return r;
    }
    int64_t m = atomic_load(&x->max_out);
    while (o > m && !atomic_compare_exchange_weak(&x->max_out, &m, o))
        ;
    return 0;
}

/* Emit v into exchange k of the chain (its steps have one output). */
static int chain_emit(struct urt_graph_ctx *ctx, struct chain_x *x, uint64_t v)
{
    return counted_emit(ctx, 0, x, v, &x->c->bad_emit);
}

static int chain_source(struct urt_graph_ctx *ctx, void *arg)
{
    struct chain *c = arg;
    uint32_t p = urt_graph_partition(ctx);
    for (uint32_t i = atomic_load(&c->cursor[p]); i < c->units; i = atomic_load(&c->cursor[p])) {
        if (chain_emit(ctx, &c->x[0], unit_val(p, i)))
            return URT_STEP_YIELD; /* -EAGAIN: called again when there is room */
        atomic_store(&c->cursor[p], i + 1);
    }
    return URT_STEP_DONE;
}

/* A middle step: passes its unit on. It yields on its own now and then (the
 * unit waits in the task state, since urt_graph_next gives it to one call
 * only) and on every full exchange. */
static int chain_stage(struct urt_graph_ctx *ctx, void *arg)
{
    struct chain *c = arg;
    int k = urt_graph_step_of(ctx); /* steps are added in chain order: source 0, stages 1.. */
    void **held = urt_graph_task_state(ctx);
    uint64_t v;
    if (*held) {
        v = (uint64_t)(uintptr_t)*held;
        *held = NULL;
    } else {
        if (!next_val(ctx, &c->missing, &v))
            return URT_STEP_DONE;
        if (val_part(v) != urt_graph_partition(ctx))
            atomic_fetch_add(&c->wrong_partition, 1);
        if (((v * 0x9E3779B97F4A7C15ull) >> 61) == (uint64_t)k) { /* about 1 in 8 */
            *held = (void *)(uintptr_t)v;
            return URT_STEP_YIELD;
        }
    }
    if (chain_emit(ctx, &c->x[k], v)) {
        *held = (void *)(uintptr_t)v;
        return URT_STEP_YIELD;
    }
    return URT_STEP_DONE;
}

static int chain_sink(struct urt_graph_ctx *ctx, void *arg)
{
    struct chain *c = arg;
    uint64_t v;
    if (!next_val(ctx, &c->missing, &v))
        return URT_STEP_DONE;
    uint32_t p = val_part(v);
    if (p != urt_graph_partition(ctx) || p >= CH_MAXP) {
        atomic_fetch_add(&c->wrong_partition, 1);
        return URT_STEP_DONE;
    }
    if (val_seq(v) != atomic_load(&c->next_seq[p]))
        atomic_fetch_add(&c->disorder, 1);
    atomic_store(&c->next_seq[p], val_seq(v) + 1);
    atomic_fetch_add(&c->sunk, 1);
    return URT_STEP_DONE;
}

static void chain_round(uint32_t workers, uint32_t parts, uint32_t capacity, uint32_t units)
{
    urt_runtime *rt = make_rt(workers);
    struct done_rec d = {0};
    struct chain *c = calloc(1, sizeof(*c));
    cr_assert_not_null(c);
    c->units = units;
    urt_graph *g = make_graph(rt, &d);
    struct urt_step_desc src = {.name = "source", .fn = chain_source, .arg = c, .partitions = parts};
    int prev = add(g, src);
    cr_assert_eq(prev, 0);
    for (int k = 1; k <= CH_X; k++) {
        struct urt_step_desc sd = {.name = k <= CH_STAGES ? "stage" : "sink",
                                   .fn = k <= CH_STAGES ? chain_stage : chain_sink, .arg = c};
        int s = add(g, sd);
        cr_assert_eq(s, k);
        c->x[k - 1].c = c;
        wire(g, prev, add_forward(g, capacity, chain_release, &c->x[k - 1]), s);
        prev = s;
    }
    cr_assert_eq(run_graph(g, &d), 0, "graph ended with %d: %s", atomic_load(&d.status), urt_last_error());
    const uint64_t total = (uint64_t)parts * units;
    cr_assert_eq(atomic_load(&c->sunk), total, "%llu units at the sink (want %llu; workers %u parts %u cap %u)",
                 (unsigned long long)atomic_load(&c->sunk), (unsigned long long)total, workers, parts, capacity);
    cr_assert_eq(atomic_load(&c->disorder), 0, "units of a partition arrive in emit order");
    cr_assert_eq(atomic_load(&c->wrong_partition), 0, "a unit stays on its partition (P6)");
    cr_assert_eq(atomic_load(&c->bad_emit) + atomic_load(&c->missing), 0);
    for (uint32_t p = 0; p < parts; p++)
        cr_assert_eq(atomic_load(&c->next_seq[p]), units);
    for (int k = 0; k < CH_X; k++) {
        cr_assert_eq(atomic_load(&c->x[k].released), total, "exchange %d released %llu of %llu", k,
                     (unsigned long long)atomic_load(&c->x[k].released), (unsigned long long)total);
        cr_assert_eq(atomic_load(&c->x[k].outstanding), 0);
        cr_assert_leq(atomic_load(&c->x[k].max_out), (int64_t)(capacity + parts),
                      "exchange %d held %lld units (capacity %u, %u emits in progress at most)", k,
                      (long long)atomic_load(&c->x[k].max_out), capacity, parts);
    }
    for (int s = 1; s <= CH_X; s++) {
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, s, &st), 0);
        cr_assert_eq(st.tasks_run, total, "step %d ran %llu units", s, (unsigned long long)st.tasks_run);
        cr_assert_eq(st.tasks_skipped + st.tasks_cut, 0);
        cr_assert_eq(st.units_in, total);
        cr_assert_eq(st.units_out, s < CH_X ? total : 0);
        cr_assert_eq(urt_graph_step_state(g, s), URT_STEP_DEACTIVATED);
    }
    struct urt_graph_step_stats st;
    cr_assert_eq(urt_graph_step_stats(g, 0, &st), 0);
    cr_assert_eq(st.units_out, total);
    if (capacity < units)
        cr_assert_gt(st.yields, 0, "the source was held back by its full exchange");
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(c);
}

Test(graph_stream, a_chain_keeps_order_capacity_and_counts_against_the_model, .timeout = 240)
{
    const uint32_t units = SCALE(3000, 600);
    const uint32_t workers[] = {1, 2, 4}, parts[] = {1, 3}, caps[] = {3, 64};
    for (size_t w = 0; w < 3; w++)
        for (size_t p = 0; p < 2; p++)
            for (size_t k = 0; k < 2; k++)
                chain_round(workers[w], parts[p], caps[k], units);
}

/* ---- a yielding producer's cached free nodes ------------------------------------------------- */

/* Emit's fast path takes the exchange's whole free list into the task; a
 * step that yields must give it back (yielded()), or another producer of
 * the same exchange finds no room while the first waits its turn. One
 * worker, a source of two partitions (tasks) into one forward exchange of
 * capacity YC, a sink. The first source task to run (A) fills the exchange
 * (YC new nodes), waits until the sink released all of them (they are on
 * the free list once A runs again: one worker), emits one unit — the fast
 * path takes the YC nodes, uses one, caches the rest — and yields on its
 * own, and keeps yielding until B finished or was refused. The other task
 * (B), waiting for that, then emits YC - 2 units: each must find room, none
 * refused (-EAGAIN), and the exchange holds at most YC. Without the give-back at the yield, B's first emit is
 * refused (A holds YC - 1 nodes, the other is in flight). */
#define YC 16u

struct ycache {
    struct chain_x x;            /* the exchange's accounting (chain_release, counted_emit) */
    _Atomic int a_claimed;       /* 0, then 1: the first task to run is A */
    _Atomic int phase;           /* 0; 1: A filled the exchange; 2: A took the list and yielded */
    _Atomic uint32_t b_emitted;  /* B's accepted emits */
    _Atomic uint32_t b_refused;  /* B's -EAGAIN: A waits for B, so all come while A holds its turn */
    _Atomic int b_done, bad_emit;
    _Atomic uint64_t sunk;
};

static int ycache_a(struct urt_graph_ctx *ctx, struct ycache *y)
{
    switch (atomic_load(&y->phase)) {
    case 0: /* fill: YC new nodes */
        for (uint32_t i = 0; i < YC; i++)
            if (counted_emit(ctx, 0, &y->x, 1, &y->bad_emit))
                return URT_STEP_DONE; /* -EAGAIN here: B's emits fail the test below */
        atomic_store(&y->phase, 1);
        return URT_STEP_YIELD;
    case 1: /* the sink released them all: they are on the free list */
        if (atomic_load(&y->x.released) < YC)
            return URT_STEP_YIELD;
        if (counted_emit(ctx, 0, &y->x, 1, &y->bad_emit)) /* takes the whole list, keeps YC - 1 */
            return URT_STEP_DONE;
        atomic_store(&y->phase, 2);
        return URT_STEP_YIELD; /* on its own: the cached nodes must go back */
    default: /* goes on once B finished or was refused: it must not give the nodes back by ending */
        return atomic_load(&y->b_done) || atomic_load(&y->b_refused) ? URT_STEP_DONE : URT_STEP_YIELD;
    }
}

static int ycache_b(struct urt_graph_ctx *ctx, struct ycache *y)
{
    if (atomic_load(&y->phase) < 2)
        return URT_STEP_YIELD; /* wait for A's list */
    for (; atomic_load(&y->b_emitted) < YC - 2; atomic_fetch_add(&y->b_emitted, 1))
        if (counted_emit(ctx, 0, &y->x, 1, &y->bad_emit)) {
            atomic_fetch_add(&y->b_refused, 1);
            return URT_STEP_YIELD; /* -EAGAIN: parked until there is room */
        }
    atomic_store(&y->b_done, 1);
    return URT_STEP_DONE;
}

static int ycache_source(struct urt_graph_ctx *ctx, void *arg)
{
    struct ycache *y = arg;
    void **role = urt_graph_task_state(ctx); /* NULL: not decided; (void *)1: A; (void *)2: B */
    if (!*role) {
        int none = 0;
        *role = atomic_compare_exchange_strong(&y->a_claimed, &none, 1) ? (void *)1 : (void *)2;
    }
    int r = *role == (void *)1 ? ycache_a(ctx, y) : ycache_b(ctx, y);
    if (r == URT_STEP_DONE)
        *role = NULL;
    return r;
}

static int count_sink(struct urt_graph_ctx *ctx, void *arg)
{
    _Atomic uint64_t *n = arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        atomic_fetch_add(n, 1);
    return URT_STEP_DONE;
}

Test(graph_stream, a_step_that_yields_gives_its_cached_free_nodes_to_the_other_producers, .timeout = 60)
{
    urt_runtime *rt = make_rt(1);
    struct done_rec d = {0};
    struct ycache *y = calloc(1, sizeof(*y));
    cr_assert_not_null(y);
    urt_graph *g = make_graph(rt, &d);
    int src = add(g, (struct urt_step_desc){.name = "source", .fn = ycache_source, .arg = y, .partitions = 2});
    int sink = add(g, (struct urt_step_desc){.name = "sink", .fn = count_sink, .arg = &y->sunk});
    wire(g, src, add_forward(g, YC, chain_release, &y->x), sink);
    cr_assert_eq(run_graph(g, &d), 0, "graph ended with %d: %s", atomic_load(&d.status), urt_last_error());
    cr_assert_eq(atomic_load(&y->bad_emit), 0);
    cr_assert_eq(atomic_load(&y->phase), 2, "A took the free list and yielded");
    cr_assert_eq(atomic_load(&y->b_refused), 0,
                 "B found no room %u time(s) while A, yielded, held the exchange's free nodes",
                 atomic_load(&y->b_refused));
    const uint64_t total = YC + 1 + (YC - 2);
    cr_assert_eq(atomic_load(&y->sunk), total);
    cr_assert_eq(atomic_load(&y->x.released), total);
    cr_assert_eq(atomic_load(&y->x.outstanding), 0);
    cr_assert_leq(atomic_load(&y->x.max_out), (int64_t)YC, "the exchange held %lld units (capacity %u)",
                  (long long)atomic_load(&y->x.max_out), YC);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(y);
}

/* ---- one step, two forward outputs ---------------------------------------------------------- */

/* A source emits runs of units to its two forward outputs (7 to port 0, then
 * 5 to port 1, ...), so each output's emits take the fast path in turn and
 * the task's resolved output changes between them. Each output's sink must
 * see exactly its units, in order, and each exchange must release each of
 * its units once and hold no more than its capacity: a free node of one
 * exchange must never travel to the other. */
#define TO_UNITS 24000u

struct two_out {
    _Atomic uint32_t cursor;
    _Atomic uint32_t next_seq[2];
    _Atomic int disorder, bad_emit, missing, wrong_port;
    _Atomic uint64_t sunk[2];
    struct chain_x x[2];
};

static uint32_t two_out_port(uint32_t i)
{
    return i % 12 < 7 ? 0 : 1;
}

static int two_out_source(struct urt_graph_ctx *ctx, void *arg)
{
    struct two_out *t = arg;
    for (uint32_t i = atomic_load(&t->cursor); i < TO_UNITS; i = atomic_load(&t->cursor)) {
        uint32_t port = two_out_port(i);
        int r = counted_emit(ctx, port, &t->x[port], unit_val(port, i), &t->bad_emit);
        if (r)
            return r == -EAGAIN ? URT_STEP_YIELD : URT_STEP_DONE;
        atomic_store(&t->cursor, i + 1);
    }
    return URT_STEP_DONE;
}

static int two_out_sink(struct urt_graph_ctx *ctx, struct two_out *t, uint32_t port)
{
    uint64_t v;
    if (!next_val(ctx, &t->missing, &v))
        return URT_STEP_DONE;
    uint32_t seq = val_seq(v);
    if (val_part(v) != port || two_out_port(seq) != port) {
        atomic_fetch_add(&t->wrong_port, 1);
        return URT_STEP_DONE;
    }
    uint32_t want = atomic_load(&t->next_seq[port]);
    while (two_out_port(want) != port)
        want++;
    if (seq != want)
        atomic_fetch_add(&t->disorder, 1);
    atomic_store(&t->next_seq[port], seq + 1);
    atomic_fetch_add(&t->sunk[port], 1);
    return URT_STEP_DONE;
}

static int two_out_sink0(struct urt_graph_ctx *ctx, void *arg)
{
    return two_out_sink(ctx, arg, 0);
}

static int two_out_sink1(struct urt_graph_ctx *ctx, void *arg)
{
    return two_out_sink(ctx, arg, 1);
}

Test(graph_stream, a_step_with_two_forward_outputs_keeps_each_exchange_s_units, .timeout = 120)
{
    const uint32_t workers[] = {1, 2};
    for (size_t w = 0; w < 2; w++) {
        urt_runtime *rt = make_rt(workers[w]);
        struct done_rec d = {0};
        struct two_out *t = calloc(1, sizeof(*t));
        cr_assert_not_null(t);
        urt_graph *g = make_graph(rt, &d);
        int src = add(g, (struct urt_step_desc){.name = "source", .fn = two_out_source, .arg = t, .partitions = 1});
        int s0 = add(g, (struct urt_step_desc){.name = "sink0", .fn = two_out_sink0, .arg = t});
        int s1 = add(g, (struct urt_step_desc){.name = "sink1", .fn = two_out_sink1, .arg = t});
        const uint32_t cap[2] = {3, 16};
        for (int k = 0; k < 2; k++) {
            wire(g, src, add_forward(g, cap[k], chain_release, &t->x[k]), k ? s1 : s0);
        }
        cr_assert_eq(run_graph(g, &d), 0, "graph ended with %d: %s", atomic_load(&d.status), urt_last_error());
        uint64_t want[2] = {0, 0};
        for (uint32_t i = 0; i < TO_UNITS; i++)
            want[two_out_port(i)]++;
        cr_assert_eq(atomic_load(&t->bad_emit) + atomic_load(&t->missing) + atomic_load(&t->wrong_port), 0);
        cr_assert_eq(atomic_load(&t->disorder), 0, "each output's units arrive in emit order");
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(atomic_load(&t->sunk[k]), want[k], "sink %d got %llu of %llu units (%u workers)", k,
                         (unsigned long long)atomic_load(&t->sunk[k]), (unsigned long long)want[k], workers[w]);
            cr_assert_eq(atomic_load(&t->x[k].released), want[k], "exchange %d released %llu of %llu", k,
                         (unsigned long long)atomic_load(&t->x[k].released), (unsigned long long)want[k]);
            cr_assert_eq(atomic_load(&t->x[k].outstanding), 0);
            cr_assert_leq(atomic_load(&t->x[k].max_out), (int64_t)cap[k] + 1,
                          "exchange %d held %lld units (capacity %u, one emit in progress)", k,
                          (long long)atomic_load(&t->x[k].max_out), cap[k]);
        }
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        free(t);
    }
}

/* ---- a scan's slots move between partitions --------------------------------------------------------- */

#define SC_PARTS 24
#define SC_UNITS 40
#define SC_CONS 3

struct scan_rec {
    _Atomic uint32_t next_seq[SC_PARTS];
    _Atomic int disorder, wrong_partition, bad;
    _Atomic uint64_t got;
};

static int scan_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct scan_rec *r = arg;
    uint32_t p = urt_graph_partition(ctx);
    intptr_t *i = (intptr_t *)urt_graph_task_state(ctx);
    for (; *i < SC_UNITS; (*i)++) {
        int e = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(p, (uint32_t)*i), 1);
        if (e == -EAGAIN)
            return URT_STEP_YIELD;
        if (e)
            atomic_fetch_add(&r->bad, 1);
    }
    *i = 0; /* the slot's next partition starts from 0 (no cleanup: nothing to free) */
    return URT_STEP_DONE;
}

static int scan_cons(struct urt_graph_ctx *ctx, void *arg)
{
    struct scan_rec *r = arg;
    uint64_t v;
    if (!next_val(ctx, &r->bad, &v))
        return URT_STEP_DONE;
    uint32_t p = val_part(v);
    if (p >= SC_PARTS || p % SC_CONS != urt_graph_partition(ctx)) {
        atomic_fetch_add(&r->wrong_partition, 1);
        return URT_STEP_DONE;
    }
    if (val_seq(v) != atomic_load(&r->next_seq[p]))
        atomic_fetch_add(&r->disorder, 1);
    atomic_store(&r->next_seq[p], val_seq(v) + 1);
    atomic_fetch_add(&r->got, 1);
    return URT_STEP_DONE;
}

Test(graph_stream, a_scan_slot_emits_to_the_partition_of_its_current_scan_partition, .timeout = 60)
{
    for (uint32_t workers = 1; workers <= 4; workers *= 2) {
        urt_runtime *rt = make_rt(workers);
        struct done_rec d = {0};
        struct scan_rec r = {0};
        urt_graph *g = make_graph(rt, &d);
        struct urt_step_desc sd = {.name = "scan", .fn = scan_src, .arg = &r, .partitions = SC_PARTS,
                                   .max_in_flight = 2, .flags = URT_STEP_SCAN};
        struct urt_step_desc cd = {.name = "cons", .fn = scan_cons, .arg = &r, .partitions = SC_CONS};
        int s = add(g, sd), c = add(g, cd);
        wire(g, s, add_forward(g, 8, NULL, NULL), c);
        cr_assert_eq(run_graph(g, &d), 0);
        cr_assert_eq(atomic_load(&r.wrong_partition), 0, "scan partition p feeds partition p mod %d", SC_CONS);
        cr_assert_eq(atomic_load(&r.disorder) + atomic_load(&r.bad), 0);
        cr_assert_eq(atomic_load(&r.got), (uint64_t)SC_PARTS * SC_UNITS);
        for (uint32_t p = 0; p < SC_PARTS; p++)
            cr_assert_eq(atomic_load(&r.next_seq[p]), SC_UNITS);
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
}

/* ---- two consumer steps on one forward ------------------------------------------------------------- */

#define TC_UNITS 2000

struct two {
    _Atomic uint32_t next[2];
    _Atomic int disorder, bad;
    _Atomic uint64_t released, early; /* early: released before both consumers had it */
    _Atomic uint32_t seen[TC_UNITS];  /* consumers that had unit i */
};

static int two_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct two *t = arg;
    intptr_t *i = (intptr_t *)urt_graph_task_state(ctx);
    for (; *i < TC_UNITS; (*i)++) {
        int e = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, (uint32_t)*i), 1);
        if (e == -EAGAIN)
            return URT_STEP_YIELD;
        if (e)
            atomic_fetch_add(&t->bad, 1);
    }
    *i = 0;
    return URT_STEP_DONE;
}

static int two_cons(struct urt_graph_ctx *ctx, struct two *t, int which)
{
    uint64_t v;
    if (!next_val(ctx, &t->bad, &v))
        return URT_STEP_DONE;
    uint32_t seq = val_seq(v);
    if (seq >= TC_UNITS || seq != atomic_load(&t->next[which]))
        atomic_fetch_add(&t->disorder, 1);
    else
        atomic_fetch_add(&t->seen[seq], 1);
    atomic_store(&t->next[which], seq + 1);
    return URT_STEP_DONE;
}

static int two_a(struct urt_graph_ctx *ctx, void *arg)
{
    return two_cons(ctx, arg, 0);
}

static int two_b(struct urt_graph_ctx *ctx, void *arg)
{
    return two_cons(ctx, arg, 1);
}

static void two_release(void *data, uint32_t rows, void *arg)
{
    struct two *t = arg;
    uint32_t seq = val_seq((uint64_t)(uintptr_t)data);
    (void)rows;
    if (seq >= TC_UNITS || atomic_load(&t->seen[seq]) != 2)
        atomic_fetch_add(&t->early, 1);
    atomic_fetch_add(&t->released, 1);
}

Test(graph_stream, two_consumer_steps_see_every_unit_and_it_is_released_once_after_both, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    struct two *t = calloc(1, sizeof(*t));
    cr_assert_not_null(t);
    urt_graph *g = make_graph(rt, &d);
    struct urt_step_desc sd = {.name = "src", .fn = two_src, .arg = t, .partitions = 1};
    struct urt_step_desc ad = {.name = "a", .fn = two_a, .arg = t};
    struct urt_step_desc bd = {.name = "b", .fn = two_b, .arg = t};
    int s = add(g, sd), a = add(g, ad), b = add(g, bd);
    int x = add_forward(g, 16, two_release, t);
    wire(g, s, x, a);
    cr_assert_geq(urt_graph_add_input(g, b, x), 0, "%s", urt_last_error());
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&t->next[0]), TC_UNITS);
    cr_assert_eq(atomic_load(&t->next[1]), TC_UNITS);
    cr_assert_eq(atomic_load(&t->disorder) + atomic_load(&t->bad), 0);
    cr_assert_eq(atomic_load(&t->released), TC_UNITS, "every unit released once");
    cr_assert_eq(atomic_load(&t->early), 0, "a unit is released after both consumers had it");
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(t);
}

/* ---- emit refused once the graph is cancelled ------------------------------------------------------ */

/* One worker: the source emits, yields, and the sink (spawned on the same
 * worker) runs first, so the free list holds the nodes it gave back when the
 * source goes on — its later emits take the fast path. */
struct cancel_rec {
    bool by_job;                 /* urt_job_cancel on the graph's job, else urt_graph_cancel */
    int calls;                   /* the source's (one task at a time) */
    _Atomic int first_ok, after;  /* emits accepted before the cancel; the emit right after it */
    _Atomic uint64_t accepted, released, sunk;
};

static void cancel_release(void *data, uint32_t rows, void *arg)
{
    struct cancel_rec *r = arg;
    (void)data;
    (void)rows;
    atomic_fetch_add(&r->released, 1);
}

static int cancel_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct cancel_rec *r = arg;
    if (r->calls++ == 0) {
        for (int i = 0; i < 100; i++)
            if (urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, (uint32_t)i), 1) == 0) {
                atomic_fetch_add(&r->first_ok, 1);
                atomic_fetch_add(&r->accepted, 1);
            }
        return URT_STEP_YIELD; /* the sink runs them (same worker) */
    }
    urt_graph *g = urt_graph_of(ctx);
    if (r->by_job)
        urt_job_cancel(urt_graph_job(g));
    else
        urt_graph_cancel(g);
    int e = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, 100), 1);
    atomic_store(&r->after, e);
    if (e == 0)
        atomic_fetch_add(&r->accepted, 1);
    return URT_STEP_DONE;
}

Test(graph_stream, an_emit_after_the_cancel_is_refused_at_once, .timeout = 60)
{
    for (int by_job = 0; by_job < 2; by_job++) {
        urt_runtime *rt = make_rt(1);
        struct done_rec d = {0};
        struct cancel_rec r = {.by_job = by_job};
        urt_graph *g = make_graph(rt, &d);
        struct urt_step_desc sd = {.name = "src", .fn = cancel_src, .arg = &r, .partitions = 1};
        struct urt_step_desc cd = {.name = "sink", .fn = count_sink, .arg = &r.sunk};
        int s = add(g, sd), c = add(g, cd);
        wire(g, s, add_forward(g, 1024, cancel_release, &r), c);
        cr_assert_eq(run_graph(g, &d), -ECANCELED);
        cr_assert_eq(atomic_load(&r.first_ok), 100);
        cr_assert_eq(atomic_load(&r.sunk), 100, "the sink ran the first 100 before the source went on");
        cr_assert_eq(atomic_load(&r.after), -EPIPE, "%s: the emit after the cancel returned %d",
                     by_job ? "urt_job_cancel" : "urt_graph_cancel", atomic_load(&r.after));
        cr_assert_eq(atomic_load(&r.released), atomic_load(&r.accepted), "every accepted unit released once");
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
}

/* ---- a stream after a cancel: its next unit, or its next batch ---------------------------------------- */

/* One worker: the source emits QC_UNITS units (the exchange holds them all)
 * and ends; then the stage's stream runs them, 64 a run. Its call for the
 * unit QC_AT cancels: urt_graph_cancel is seen from the stream's next unit
 * on, urt_job_cancel (a read of the job's state) from its next batch on; the
 * calls in between see urt_graph_stopping() and their emits are refused. */
#define QC_UNITS 300
#define QC_AT 10
#define QC_BATCH 64 /* G_STREAM_BATCH */
struct qcancel_rec {
    bool by_job;
    int calls, calls_after;       /* the stage's (one task at a time) */
    int not_stopping, emitted_after; /* calls after the cancel that saw no stop, or could emit */
    _Atomic uint64_t accepted, released;
};

static void qc_release(void *data, uint32_t rows, void *arg)
{
    struct qcancel_rec *r = arg;
    (void)data;
    (void)rows;
    atomic_fetch_add(&r->released, 1);
}

static int qc_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct qcancel_rec *r = arg;
    for (uint32_t i = 0; i < QC_UNITS; i++)
        if (urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, i), 1) == 0)
            atomic_fetch_add(&r->accepted, 1);
    return URT_STEP_DONE;
}

static int qc_stage(struct urt_graph_ctx *ctx, void *arg)
{
    struct qcancel_rec *r = arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    if (r->calls++ == QC_AT) {
        urt_graph *g = urt_graph_of(ctx);
        if (r->by_job)
            urt_job_cancel(urt_graph_job(g));
        else
            urt_graph_cancel(g);
    } else if (r->calls > QC_AT + 1) {
        r->calls_after++;
        r->not_stopping += !urt_graph_stopping(ctx);
        r->emitted_after += urt_graph_emit(ctx, 0, 0, u.data, u.rows) == 0;
    }
    return URT_STEP_DONE;
}

Test(graph_stream, a_stream_sees_a_cancel_from_its_next_unit_or_batch, .timeout = 60)
{
    for (int by_job = 0; by_job < 2; by_job++) {
        urt_runtime *rt = make_rt(1);
        struct done_rec d = {0};
        struct qcancel_rec r = {.by_job = by_job};
        _Atomic uint64_t sunk = 0;
        urt_graph *g = make_graph(rt, &d);
        struct urt_step_desc sd = {.name = "src", .fn = qc_src, .arg = &r, .partitions = 1};
        struct urt_step_desc md = {.name = "stage", .fn = qc_stage, .arg = &r};
        struct urt_step_desc kd = {.name = "sink", .fn = count_sink, .arg = &sunk};
        int s = add(g, sd), m = add(g, md), k = add(g, kd);
        wire(g, s, add_forward(g, 1024, qc_release, &r), m);
        wire(g, m, add_forward(g, 1024, NULL, NULL), k);
        cr_assert_eq(run_graph(g, &d), -ECANCELED);
        cr_assert_eq(atomic_load(&r.accepted), QC_UNITS, "the source's units were all queued");
        if (by_job) /* the rest of the batch that holds unit QC_AT */
            cr_assert_eq(r.calls_after, QC_BATCH - QC_AT - 1, "urt_job_cancel: %d calls after it", r.calls_after);
        else
            cr_assert_eq(r.calls_after, 0, "urt_graph_cancel: %d calls after it", r.calls_after);
        cr_assert_eq(r.not_stopping, 0, "every call after the cancel sees urt_graph_stopping()");
        cr_assert_eq(r.emitted_after, 0, "no call after the cancel can emit");
        cr_assert_eq(atomic_load(&r.released), QC_UNITS, "every unit released once");
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, m, &st), 0);
        cr_assert_eq(st.tasks_run + st.tasks_skipped + st.tasks_cut, QC_UNITS, "run %llu + skipped %llu + cut %llu",
                     (unsigned long long)st.tasks_run, (unsigned long long)st.tasks_skipped,
                     (unsigned long long)st.tasks_cut);
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
}

/* ---- a cleanup cannot emit ---------------------------------------------------------------------------- */

/* One worker, as above: when the cleanup runs, the free list holds nodes
 * and the task had resolved its forward output. */
struct clean_rec {
    int calls;
    _Atomic int emitted, cleanups, in_cleanup;
    _Atomic uint64_t sunk;
};

static int clean_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct clean_rec *r = arg;
    if (r->calls++ == 0) {
        for (int i = 0; i < 10; i++)
            if (urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, (uint32_t)i), 1) == 0)
                atomic_fetch_add(&r->emitted, 1);
        return URT_STEP_YIELD;
    }
    *urt_graph_task_state(ctx) = malloc(16); /* handed to the cleanup when the step completes */
    return URT_STEP_DONE;
}

static void clean_cleanup(struct urt_graph_ctx *ctx, void *arg)
{
    struct clean_rec *r = arg;
    atomic_store(&r->in_cleanup, urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, 10), 1));
    atomic_fetch_add(&r->cleanups, 1);
    free(*urt_graph_task_state(ctx));
}

Test(graph_stream, a_cleanup_cannot_emit_after_its_task_did, .timeout = 30)
{
    urt_runtime *rt = make_rt(1);
    struct done_rec d = {0};
    struct clean_rec r = {0};
    urt_graph *g = make_graph(rt, &d);
    struct urt_step_desc sd = {.name = "src", .fn = clean_src, .arg = &r, .cleanup = clean_cleanup,
                               .partitions = 1};
    struct urt_step_desc cd = {.name = "sink", .fn = count_sink, .arg = &r.sunk};
    int s = add(g, sd), c = add(g, cd);
    wire(g, s, add_forward(g, 64, NULL, NULL), c);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&r.emitted), 10);
    cr_assert_eq(atomic_load(&r.cleanups), 1);
    cr_assert_eq(atomic_load(&r.in_cleanup), -EINVAL, "emit from a cleanup returned %d", atomic_load(&r.in_cleanup));
    cr_assert_eq(atomic_load(&r.sunk), 10, "the sink got the task's 10 units and no other");
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- a consumer that completes early while units wait ------------------------------------------------- */

struct early {
    _Atomic uint64_t accepted, released;
    _Atomic int bad;
};

static void early_release(void *data, uint32_t rows, void *arg)
{
    struct early *e = arg;
    (void)data;
    (void)rows;
    atomic_fetch_add(&e->released, 1);
}

/* DELIVER: not cut by the consumer's completion; it emits until refused. */
static int early_src(struct urt_graph_ctx *ctx, void *arg)
{
    struct early *e = arg;
    for (uint32_t i = 0; i < 100000; i++) {
        int r = urt_graph_emit(ctx, 0, 0, (void *)(uintptr_t)unit_val(0, i), 1);
        if (r == -EAGAIN)
            return URT_STEP_YIELD;
        if (r == -EPIPE)
            return URT_STEP_DONE;
        if (r)
            atomic_fetch_add(&e->bad, 1);
        else
            atomic_fetch_add(&e->accepted, 1);
    }
    return URT_STEP_DONE;
}

static int early_cons(struct urt_graph_ctx *ctx, void *arg)
{
    struct early *e = arg;
    struct urt_graph_unit u;
    urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u);
    /* let units pile up behind this one, then complete */
    (void)WAIT_UNTIL(atomic_load(&e->accepted) >= 200, 5000);
    urt_graph_complete(ctx);
    return URT_STEP_DONE;
}

Test(graph_stream, units_waiting_for_a_consumer_that_completes_are_released_unprocessed, .timeout = 60)
{
    for (uint32_t workers = 1; workers <= 2; workers++) {
        urt_runtime *rt = make_rt(workers);
        struct done_rec d = {0};
        struct early e = {0};
        urt_graph *g = make_graph(rt, &d);
        struct urt_step_desc sd = {.name = "src", .fn = early_src, .arg = &e, .partitions = 1,
                                   .flags = URT_STEP_DELIVER};
        struct urt_step_desc cd = {.name = "cons", .fn = early_cons, .arg = &e};
        int s = add(g, sd), c = add(g, cd);
        wire(g, s, add_forward(g, 4096, early_release, &e), c);
        cr_assert_eq(run_graph(g, &d), 0);
        cr_assert_eq(atomic_load(&e.bad), 0);
        struct urt_graph_step_stats st;
        cr_assert_eq(urt_graph_step_stats(g, c, &st), 0);
        uint64_t accepted = atomic_load(&e.accepted);
        if (workers == 1)
            cr_assert_eq(st.tasks_run, 1, "one worker: the consumer's first unit is its only one");
        cr_assert_geq(accepted, 2, "units piled up behind the first (%llu)", (unsigned long long)accepted);
        cr_assert_eq(st.tasks_run + st.tasks_skipped + st.tasks_cut, accepted,
                     "run %llu + skipped %llu + cut %llu = accepted %llu", (unsigned long long)st.tasks_run,
                     (unsigned long long)st.tasks_skipped, (unsigned long long)st.tasks_cut,
                     (unsigned long long)accepted);
        cr_assert_gt(st.tasks_skipped, 0, "units that waited were released unprocessed");
        cr_assert_eq(atomic_load(&e.released), accepted, "every accepted unit released once");
        urt_graph_release(g);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    }
}
