/*
 * tests/unit/test_deprecated.c — the names renamed before urt 1.0
 * (include/urt/deprecated.h) still link against the shared library and
 * behave as the functions that replaced them, arguments in their old order.
 * Built with -Wno-deprecated-declarations (tests/meson.build): every other
 * file of the tree uses the new names, and the -Werror build keeps it so.
 * Model: each old call is made beside the new call on a twin object and the
 * results are compared (the struct an init fills, the port a graph
 * connection returns, the errno and the message a bad argument gives, the
 * rows a graph built with the old names delivers).
 */
#include "helpers.h"

static void io_cont(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)res;
    (void)arg;
}

/* urt_io_init2 fills the io exactly as urt_io_init_ex does, refuses what it
 * refuses, with the new name's message. */
Test(deprecated, io_init2_is_io_init_ex)
{
    struct urt_io a, b;
    int tag;
    memset(&a, 0xa5, sizeof a);
    memset(&b, 0xa5, sizeof b);
    cr_assert_eq(urt_io_init2(&a, io_cont, &tag, URT_IO_STEALABLE), 0);
    cr_assert_eq(urt_io_init_ex(&b, io_cont, &tag, URT_IO_STEALABLE), 0);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "urt_io_init2 and urt_io_init_ex fill the io differently");
    cr_assert_eq(a.fn, io_cont);
    cr_assert_eq(a.arg, &tag);
    cr_assert_eq(urt_io_init2(&a, io_cont, NULL, 0x80), -EINVAL);
    cr_assert(strncmp(urt_last_error(), "urt_io_init_ex: ", 16) == 0, "message: %s", urt_last_error());
    cr_assert_eq(urt_io_init2(NULL, io_cont, NULL, 0), -EINVAL);
}

#define SRC_PARTS 5

static atomic_uint_fast64_t g_rows, g_units;
static uint32_t g_data[SRC_PARTS];

static int src(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t p = urt_graph_partition(ctx);
    g_data[p] = p;
    return urt_graph_emit(ctx, 0, 0, &g_data[p], p + 1); /* partition p: p + 1 rows */
}

static int sink(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1) {
        atomic_fetch_add(&g_rows, u.rows);
        atomic_fetch_add(&g_units, 1);
    }
    return URT_STEP_DONE;
}

/* Steps pad (0), src (1), sink (2) and one shuffle exchange (0): the ids of
 * the reading step and the exchange differ, so a call that swapped them
 * would connect something else or fail. */
static urt_graph *build(urt_runtime *rt, int *s, int *k, int *x)
{
    urt_graph *g = NULL;
    cr_assert_eq(urt_graph_create(rt, NULL, &g), 0);
    struct urt_step_desc pad = {.name = "pad", .fn = sink, .partitions = 1};
    struct urt_step_desc ds = {.name = "src", .fn = src, .partitions = SRC_PARTS};
    struct urt_step_desc dk = {.name = "sink", .fn = sink, .partitions = 1};
    struct urt_exchange_desc dx = {.kind = URT_EXCHANGE_SHUFFLE};
    cr_assert_eq(urt_graph_add_step(g, &pad), 0);
    *s = urt_graph_add_step(g, &ds);
    *k = urt_graph_add_step(g, &dk);
    *x = urt_graph_add_exchange(g, &dx);
    cr_assert(*s == 1 && *k == 2 && *x == 0);
    return g;
}

/* urt_graph_output / urt_graph_input (old order: exchange, then step) wire
 * the same graph as urt_graph_add_output / urt_graph_add_input, which then
 * runs: the sink gets every unit the source emitted. */
Test(deprecated, graph_output_input_old_order)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    int s, k, x, s2, k2, x2;
    urt_graph *g = build(rt, &s, &k, &x), *h = build(rt, &s2, &k2, &x2);

    cr_assert_eq(urt_graph_output(g, s, x), urt_graph_add_output(h, s2, x2));
    cr_assert_eq(urt_graph_input(g, x, k), urt_graph_add_input(h, k2, x2));
    /* a bad id is named as the new function names it, for the same argument */
    cr_assert_eq(urt_graph_input(g, x, 9), -EINVAL);
    cr_assert_str_eq(urt_last_error(), "urt_graph_add_input: step 9 is not a step of the graph");
    cr_assert_eq(urt_graph_input(g, 9, k), -EINVAL);
    cr_assert_str_eq(urt_last_error(), "urt_graph_add_input: exchange 9 is not an exchange of the graph");
    cr_assert_eq(urt_graph_output(g, 9, x), -EINVAL);
    cr_assert_str_eq(urt_last_error(), "urt_graph_add_output: step 9 is not a step of the graph");
    /* wired the same: a second connection of the same pair is refused by both */
    cr_assert_eq(urt_graph_input(g, x, k), -EINVAL);
    cr_assert_eq(urt_graph_add_input(h, k2, x2), -EINVAL);

    urt_graph_release(h);
    /* pad reads the shuffle too (a second consumer): every step has a place */
    cr_assert_eq(urt_graph_input(g, x, 0), 0);
    atomic_store(&g_rows, 0);
    atomic_store(&g_units, 0);
    cr_assert_eq(urt_graph_start(g), 0, "%s", urt_last_error());
    cr_assert_eq(urt_graph_wait(g, URT_WAIT_FOREVER), 0, "%s", urt_last_error());
    /* two consumers (sink, pad) each read every unit of shuffle partition 0 */
    uint64_t rows = 0;
    for (uint32_t p = 0; p < SRC_PARTS; p++)
        rows += p + 1;
    cr_assert_eq(atomic_load(&g_units), 2u * SRC_PARTS);
    cr_assert_eq(atomic_load(&g_rows), 2u * rows);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

#if URT_HAVE_DISPATCH
/* The run functions under their old names: exported, and refusing a NULL run
 * as the new ones do, with the new name in the message. (A run needs a
 * PostgreSQL database: tests/dispatch run the new names against one; these
 * are calls of them.) */
Test(deprecated, dispatch_run_functions)
{
    cr_assert_eq(urt_dispatch_done(NULL, "x"), urt_dispatch_run_done(NULL, "x"));
    cr_assert_eq(urt_dispatch_done(NULL, "x"), -EINVAL);
    cr_assert(strncmp(urt_last_error(), "urt_dispatch_run_done: ", 23) == 0, "%s", urt_last_error());
    cr_assert_eq(urt_dispatch_nap(NULL, 5), -EINVAL);
    cr_assert(strncmp(urt_last_error(), "urt_dispatch_run_nap: ", 22) == 0, "%s", urt_last_error());
    cr_assert_eq(urt_dispatch_fail(NULL, "why"), -EINVAL);
    cr_assert(strncmp(urt_last_error(), "urt_dispatch_run_fail: ", 23) == 0, "%s", urt_last_error());
    cr_assert_eq(urt_dispatch_sql(NULL, "select 1", NULL, 0, NULL, NULL), -EINVAL);
    cr_assert(strncmp(urt_last_error(), "urt_dispatch_run_sql: ", 22) == 0, "%s", urt_last_error());
}
#endif

/* urt/limits.h still compiles and declares what it did. */
#include <urt/limits.h>
Test(deprecated, limits_h_still_declares)
{
    struct urt_admission_stats st;
    cr_assert_eq(urt_admission_stats(NULL, &st), -EINVAL);
    cr_assert_eq(urt_dump_state(NULL, 1), -EINVAL);
    cr_assert_eq(urt_watchdog_set_callback(NULL, NULL, NULL), -EINVAL);
}
