/*
 * tests/unit/test_graph_abort.c — task graphs (urt/graph.h) keep their
 * promises about how a graph fails and what it gives back:
 *
 *  - a step's result: 0 and URT_STEP_YIELD are the only non-negative ones; a
 *    -errno in -4095..-1 (not -EINPROGRESS) fails the graph with that value,
 *    anything else (-EINPROGRESS, -5000, INT_MIN, 2, 7) with -EINVAL — for a
 *    step function, a processor's event() and process(), and the result
 *    given to urt_graph_async_done; status, callback and job agree;
 *  - a blocking exchange over its capacity fails the graph with -ENOBUFS even
 *    when the step ignores the emit's answer; every accepted unit is
 *    released once;
 *  - a step's task state (urt_graph_task_state) is handed to the step's
 *    cleanup callback when the task will not be called again — producers
 *    parked on a full forward when the graph is cancelled or completes early,
 *    streams of a forward consumer, source partitions that return with state
 *    set — exactly once each (the model: allocations = frees, LSan quiet),
 *    and tasks_skipped counts only partitions that never started;
 *  - urt_graph_add_input and urt_graph_add_output refuse a processor reading a forward
 *    exchange written by a function step (either order), as graph.h says;
 *  - limit_rows: consumers see the clipped rows, the release callback gets
 *    the rows the producer emitted;
 *  - urt_graph_start on a graph that cannot be prepared answers with a
 *    message that begins with "urt_graph_start:".
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>

#include "tests/unit/graph_helpers.h"

static int nop(struct urt_graph_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return URT_STEP_DONE;
}

/* ---- 1: a step's result decides the graph's status ------------------------------------------ */

static _Atomic int g_ret; /* what the failing call returns */

/* The value a graph fails with when a step returns r (urt/graph.h). */
static int expected_status(int r)
{
    return r < 0 && r >= -4095 && r != -EINPROGRESS ? r : -EINVAL;
}

static const int RESULTS[] = {-EINPROGRESS, -5000, INT_MIN, -4096, 2, 7, INT_MAX, -4095, -EIO, -1};

static int ret_at_7(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    return urt_graph_partition(ctx) == 7 ? atomic_load(&g_ret) : URT_STEP_DONE;
}

Test(graph_abort, a_step_result_fails_the_graph_with_it_or_einval, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    for (size_t i = 0; i < sizeof(RESULTS) / sizeof(RESULTS[0]); i++) {
        atomic_store(&g_ret, RESULTS[i]);
        struct done_rec d = {0};
        urt_graph *g = make_graph(rt, &d);
        int s = add(g, (struct urt_step_desc){.name = "src", .fn = ret_at_7, .partitions = 1000, .max_in_flight = 4});
        int st = run_graph(g, &d);
        cr_assert_eq(st, expected_status(RESULTS[i]), "a step returned %d: the graph says %d, want %d", RESULTS[i],
                     st, expected_status(RESULTS[i]));
        struct urt_graph_step_stats ss;
        cr_assert_eq(urt_graph_step_stats(g, s, &ss), 0);
        cr_assert_leq(ss.tasks_run + ss.tasks_skipped, 1000);
        cr_assert_eq(urt_graph_step_state(g, s), URT_STEP_DEACTIVATED);
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Processors: event() returns g_ret (how 0), process() does (how 1), or the
 * async work ends with it (how 2). */
static _Atomic int g_proc_how;

static int pe_event(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    bool *seen = (bool *)urt_graph_task_state(ctx);
    int how = atomic_load(&g_proc_how);
    if (*seen)
        return URT_PROC_FINISHED; /* after the async work */
    *seen = true;
    if (how == 0)
        return atomic_load(&g_ret);
    return how == 1 ? URT_PROC_SYNC : URT_PROC_ASYNC;
}

static int pe_process(struct urt_graph_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return atomic_load(&g_ret);
}

static int pe_async(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    int r = urt_graph_async_done(ctx, atomic_load(&g_ret)); /* completes at once */
    return r == 0 ? 0 : r;
}

static const struct urt_processor PE = {.event = pe_event, .process = pe_process, .async = pe_async};

Test(graph_abort, a_processor_result_fails_the_graph_with_it_or_einval, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    for (int how = 0; how < 3; how++)
        for (size_t i = 0; i < sizeof(RESULTS) / sizeof(RESULTS[0]); i++) {
            int r = RESULTS[i];
            if (how == 0 && r >= 0 && r <= URT_PROC_FINISHED)
                continue; /* a valid answer of event() */
            atomic_store(&g_ret, r);
            atomic_store(&g_proc_how, how);
            struct done_rec d = {0};
            urt_graph *g = make_graph(rt, &d);
            add(g, (struct urt_step_desc){.name = "proc", .processor = &PE, .partitions = 1});
            int st = run_graph(g, &d);
            /* async(): what urt_graph_async_done was given; 0 and 1..: refused as a result */
            cr_assert_eq(st, expected_status(r), "how %d: %d gave the graph %d, want %d", how, r, st,
                         expected_status(r));
            urt_graph_release(g);
        }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- 2: a blocking exchange over its capacity fails the graph -------------------------------- */

struct nb {
    _Atomic int accepted, refused, released;
};

static void nb_release(void *data, uint32_t rows, void *arg)
{
    struct nb *n = arg;
    (void)data;
    (void)rows;
    atomic_fetch_add(&n->released, 1);
}

static int nb_producer(struct urt_graph_ctx *ctx, void *arg)
{
    struct nb *n = arg;
    static char unit;
    for (int i = 0; i < 100; i++) {
        int r = urt_graph_emit(ctx, 0, 0, &unit, 1); /* the answer is ignored: nothing goes wrong */
        atomic_fetch_add(r == 0 ? &n->accepted : &n->refused, 1);
    }
    return URT_STEP_DONE;
}

Test(graph_abort, a_full_shuffle_fails_the_graph_even_when_the_step_ignores_it, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct nb n = {0};
    struct done_rec d = {0};
    urt_graph *g = make_graph(rt, &d);
    int p = add(g, (struct urt_step_desc){.name = "producer", .fn = nb_producer, .arg = &n, .partitions = 1});
    int x = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE, .capacity = 10, .release = nb_release,
                                                .release_arg = &n});
    int c = add(g, (struct urt_step_desc){.name = "consumer", .fn = nop, .partitions = 1});
    wire(g, p, x, c);
    cr_assert_eq(run_graph(g, &d), -ENOBUFS);
    cr_assert_eq(atomic_load(&n.accepted), 10);
    cr_assert_eq(atomic_load(&n.refused), 90);
    cr_assert_eq(atomic_load(&n.released), 10, "every accepted unit is released once");
    struct urt_graph_step_stats ss;
    cr_assert_eq(urt_graph_step_stats(g, c, &ss), 0);
    cr_assert_eq(ss.tasks_run, 0, "the consumer behind the failed shuffle never ran");
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- 4: a processor reads forward exchanges of processors only -------------------------------- */

static int pe_finished(struct urt_graph_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return URT_PROC_FINISHED;
}

static const struct urt_processor PF = {.event = pe_finished};

Test(graph_abort, a_processor_reading_a_function_steps_forward_is_refused_when_built, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    for (int order = 0; order < 2; order++) {
        urt_graph *g = make_graph(rt, &d);
        int f = add(g, (struct urt_step_desc){.name = "fn", .fn = nop});
        int p = add(g, (struct urt_step_desc){.name = "proc", .processor = &PF});
        int x = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
        if (order == 0) {
            cr_assert_eq(urt_graph_add_output(g, f, x), 0);
            cr_assert_eq(urt_graph_add_input(g, p, x), -EINVAL, "urt_graph_add_input accepted it");
            cr_assert(strstr(urt_last_error(), "urt_graph_add_input:") == urt_last_error(), "%s", urt_last_error());
            cr_assert(strstr(urt_last_error(), "'proc'") && strstr(urt_last_error(), "'fn'"), "%s",
                      urt_last_error());
        } else {
            cr_assert_eq(urt_graph_add_input(g, p, x), 0);
            cr_assert_eq(urt_graph_add_output(g, f, x), -EINVAL, "urt_graph_add_output accepted it");
            cr_assert(strstr(urt_last_error(), "urt_graph_add_output:") == urt_last_error(), "%s", urt_last_error());
        }
        /* the refusal left the graph as it was: the other side may still be joined */
        int q = add(g, (struct urt_step_desc){.name = "proc2", .processor = &PF});
        if (order == 0)
            cr_assert_eq(urt_graph_add_input(g, q, x), -EINVAL, "a processor reads no function step's forward");
        else
            cr_assert_eq(urt_graph_add_output(g, q, x), 0, "%s", urt_last_error());
        urt_graph_release(g);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- friction: limit_rows gives the producer back what it emitted ------------------------------ */

#define LR_UNITS 20
#define LR_ROWS 7
struct lr {
    _Atomic int bad_release, released, freed_rows;
    _Atomic uint64_t seen_rows;
};

static void lr_release(void *data, uint32_t rows, void *arg)
{
    struct lr *l = arg;
    uint32_t *v = data;
    if (v[0] != rows) /* the producer wrote the row count it emitted into the unit */
        atomic_fetch_add(&l->bad_release, 1);
    atomic_fetch_add(&l->freed_rows, (int)rows);
    atomic_fetch_add(&l->released, 1);
    free(v);
}

static int lr_scan(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    intptr_t *i = (intptr_t *)urt_graph_task_state(ctx);
    for (; *i < LR_UNITS; (*i)++) {
        uint32_t *v = malloc(LR_ROWS * sizeof(uint32_t));
        v[0] = LR_ROWS;
        int r = urt_graph_emit(ctx, 0, 0, v, LR_ROWS);
        if (r) {
            free(v); /* refused: still ours */
            if (r == -EAGAIN)
                return URT_STEP_YIELD;
            return r == -EPIPE ? URT_STEP_DONE : r;
        }
    }
    return URT_STEP_DONE;
}

static int lr_sink(struct urt_graph_ctx *ctx, void *arg)
{
    struct lr *l = arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        atomic_fetch_add(&l->seen_rows, u.rows);
    return URT_STEP_DONE;
}

Test(graph_abort, limit_rows_releases_the_rows_that_were_emitted, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct lr l = {0};
    struct done_rec d = {0};
    urt_graph *g = make_graph(rt, &d);
    int s = add(g, (struct urt_step_desc){.name = "scan", .fn = lr_scan, .partitions = 1});
    int x = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD, .capacity = 2, .limit_rows = 10,
                                                .release = lr_release, .release_arg = &l});
    int c = add(g, (struct urt_step_desc){.name = "sink", .fn = lr_sink, .arg = &l, .partitions = 1});
    wire(g, s, x, c);
    cr_assert_eq(run_graph(g, &d), 0);
    cr_assert_eq(atomic_load(&l.seen_rows), 10, "the consumers see the limit's rows");
    cr_assert_eq(atomic_load(&l.bad_release), 0, "the release callback got the rows of another unit");
    struct urt_graph_step_stats ss;
    cr_assert_eq(urt_graph_step_stats(g, s, &ss), 0);
    cr_assert_eq((uint64_t)atomic_load(&l.released), ss.units_out);
    cr_assert_eq(atomic_load(&l.freed_rows), atomic_load(&l.released) * LR_ROWS);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- friction: messages begin with the called function's name ---------------------------------- */

Test(graph_abort, start_names_itself_when_the_graph_cannot_be_prepared, .timeout = 30)
{
    urt_runtime *rt = make_rt(2);
    struct done_rec d = {0};
    urt_graph *g = make_graph(rt, &d);
    int a = add(g, (struct urt_step_desc){.name = "a", .fn = nop});
    int b = add(g, (struct urt_step_desc){.name = "b", .fn = nop});
    int x = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    int y = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    wire(g, a, x, b);
    wire(g, b, y, a);
    cr_assert_eq(urt_graph_start(g), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_graph_start:") == urt_last_error(), "%s", urt_last_error());
    cr_assert(strstr(urt_last_error(), "cycle"), "%s", urt_last_error());
    cr_assert_eq(urt_graph_prepare(g), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_graph_prepare:") == urt_last_error(), "%s", urt_last_error());
    cr_assert_eq(atomic_load(&d.calls), 0);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- 3: task state is given back when a task will not be called again -------------------------- */

#define PK_PARTS 64
enum { PK_CANCEL, PK_COMPLETE, PK_ERROR, PK_LEFT_SET, PK_MODES };

struct pk {
    int mode, producer, consumer;
    _Atomic int allocs, frees, cleanups, bad_cleanup, stopping_cleanups, parked_n, go;
    _Atomic int parked[PK_PARTS];
};

struct pkst {
    int step, part, emitted;
};

static struct pkst *pk_state(struct urt_graph_ctx *ctx, struct pk *k)
{
    struct pkst **st = (struct pkst **)urt_graph_task_state(ctx);
    if (!*st) {
        *st = malloc(sizeof(**st));
        **st = (struct pkst){.step = urt_graph_step_of(ctx), .part = (int)urt_graph_partition(ctx)};
        atomic_fetch_add(&k->allocs, 1);
    }
    return *st;
}

static void pk_free(struct urt_graph_ctx *ctx, struct pk *k)
{
    struct pkst **st = (struct pkst **)urt_graph_task_state(ctx);
    free(*st);
    *st = NULL;
    atomic_fetch_add(&k->frees, 1);
}

static int pk_producer(struct urt_graph_ctx *ctx, void *arg)
{
    struct pk *k = arg;
    struct pkst *st = pk_state(ctx, k);
    static char unit;
    while (st->emitted < 3) {
        int r = urt_graph_emit(ctx, 0, 0, &unit, 1);
        if (r == -EAGAIN) {
            if (!atomic_exchange(&k->parked[st->part], 1))
                atomic_fetch_add(&k->parked_n, 1);
            return URT_STEP_YIELD; /* parked until the exchange has room */
        }
        if (r)
            break;
        st->emitted++;
    }
    if (k->mode != PK_LEFT_SET)
        pk_free(ctx, k);
    return URT_STEP_DONE; /* PK_LEFT_SET: the state stays for the cleanup */
}

/* Holds its one unit (the exchange stays full) until the test says go. */
static int pk_consumer(struct urt_graph_ctx *ctx, void *arg)
{
    struct pk *k = arg;
    pk_state(ctx, k); /* the stream's state: freed by the cleanup */
    if (urt_graph_stopping(ctx))
        return URT_STEP_DONE;
    if (k->mode == PK_LEFT_SET)
        return URT_STEP_DONE;
    if (!atomic_load(&k->go))
        return URT_STEP_YIELD;
    if (k->mode == PK_COMPLETE) {
        urt_graph_complete(ctx);
        return URT_STEP_DONE;
    }
    return -EIO; /* PK_ERROR */
}

static void pk_cleanup(struct urt_graph_ctx *ctx, void *arg)
{
    struct pk *k = arg;
    struct pkst *st = *(struct pkst **)urt_graph_task_state(ctx);
    static char unit;
    if (!st || st->step != urt_graph_step_of(ctx) || st->part != (int)urt_graph_partition(ctx) ||
        urt_graph_emit(ctx, 0, 0, &unit, 1) != -EINVAL)
        atomic_fetch_add(&k->bad_cleanup, 1);
    atomic_fetch_add(&k->stopping_cleanups, urt_graph_stopping(ctx));
    atomic_fetch_add(&k->cleanups, 1);
    pk_free(ctx, k);
}

Test(graph_abort, task_state_goes_to_the_cleanup_and_started_tasks_are_not_skipped, .timeout = 120)
{
    urt_runtime *rt = make_rt(2);
    static const char *names[] = {"cancel", "complete", "error", "left set"};
    for (int mode = 0; mode < PK_MODES; mode++) {
        static struct pk k;
        memset(&k, 0, sizeof(k));
        k.mode = mode;
        struct done_rec d = {0};
        urt_graph *g = make_graph(rt, &d);
        k.producer = add(g, (struct urt_step_desc){.name = "producer", .fn = pk_producer, .cleanup = pk_cleanup,
                                                   .arg = &k, .partitions = PK_PARTS,
                                                   .max_in_flight = mode == PK_LEFT_SET ? 4 : 0});
        int x = add_x(g, (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD,
                                                    .capacity = mode == PK_LEFT_SET ? 0 : 1});
        k.consumer = add(g, (struct urt_step_desc){.name = "consumer", .fn = pk_consumer, .cleanup = pk_cleanup,
                                                   .arg = &k});
        wire(g, k.producer, x, k.consumer);
        cr_assert_eq(urt_graph_start(g), 0);
        if (mode != PK_LEFT_SET) {
            /* one unit in flight, held: every producer partition is parked on the full exchange */
            cr_assert(WAIT_UNTIL(atomic_load(&k.parked_n) == PK_PARTS, 20000), "%s: %d parked", names[mode],
                      atomic_load(&k.parked_n));
            if (mode == PK_CANCEL)
                cr_assert_eq(urt_graph_cancel(g), 0);
            atomic_store(&k.go, 1);
        }
        int st = urt_graph_wait(g, 30ull * 1000000000ull);
        int want = mode == PK_CANCEL ? -ECANCELED : mode == PK_ERROR ? -EIO : 0;
        cr_assert_eq(st, want, "%s: status %d", names[mode], st);
        cr_assert_eq(atomic_load(&d.calls), 1);
        cr_assert_eq(atomic_load(&k.bad_cleanup), 0, "%s: a cleanup got a wrong context", names[mode]);
        cr_assert_eq(atomic_load(&k.frees), atomic_load(&k.allocs), "%s: %d states made, %d given back",
                     names[mode], atomic_load(&k.allocs), atomic_load(&k.frees));
        struct urt_graph_step_stats ps, cs;
        cr_assert_eq(urt_graph_step_stats(g, k.producer, &ps), 0);
        cr_assert_eq(urt_graph_step_stats(g, k.consumer, &cs), 0);
        if (mode == PK_LEFT_SET) {
            /* every partition returned DONE with its state set, and every consumer stream kept one */
            cr_assert_eq(atomic_load(&k.allocs), 2 * PK_PARTS);
            cr_assert_eq(atomic_load(&k.cleanups), 2 * PK_PARTS);
            cr_assert_eq(ps.tasks_run, PK_PARTS);
            cr_assert_eq(ps.tasks_skipped, 0);
            cr_assert_eq(ps.tasks_cut, 0);
            cr_assert_eq(atomic_load(&k.stopping_cleanups), 0, "nothing was cut short");
        } else {
            /* all 64 producer partitions started and were cut short while parked */
            cr_assert_eq(atomic_load(&k.allocs), PK_PARTS + 1, "%s: 64 producers and one consumer stream",
                         names[mode]);
            cr_assert_eq(atomic_load(&k.cleanups), PK_PARTS + 1, "%s: cleanups %d", names[mode],
                         atomic_load(&k.cleanups));
            cr_assert_eq(ps.tasks_skipped, 0, "%s: %llu started partitions counted as never started", names[mode],
                         (unsigned long long)ps.tasks_skipped);
            cr_assert_eq(ps.tasks_run, 0, "%s: no producer partition finished", names[mode]);
            cr_assert_eq(ps.tasks_cut, PK_PARTS, "%s: every producer partition was cut short", names[mode]);
            cr_assert_eq(atomic_load(&k.stopping_cleanups), PK_PARTS + 1);
        }
        urt_graph_release(g);
        leak_check();
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
