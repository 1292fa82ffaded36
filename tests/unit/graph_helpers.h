/*
 * tests/unit/graph_helpers.h — the set-up the graph suites share: a
 * completion record and its callback, a runtime and a graph made or the
 * test fails (or is skipped without io_uring or a portable backend), steps
 * and exchanges added with the error named, wiring, and a run that checks
 * the graph's promises on the way out (the completion callback ran once, its
 * status is urt_graph_wait's, and the graph's job agrees).
 *
 * No memory ordering of its own: the record's fields are seq_cst atomics
 * written by the callback (on a worker) and read by the test thread after
 * urt_graph_wait returned.
 */
#ifndef URT_TESTS_GRAPH_HELPERS_H
#define URT_TESTS_GRAPH_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>

#include "tests/helpers.h"

struct done_rec {
    _Atomic int calls;
    _Atomic int status;
};

static inline void on_done(urt_graph *g, int status, void *arg)
{
    struct done_rec *d = arg;
    (void)g;
    atomic_store(&d->status, status);
    atomic_fetch_add(&d->calls, 1);
}

static inline urt_runtime *make_rt(uint32_t workers)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    return rt_create_or_skip(&cfg);
}

/* A graph with the default options whose completion goes to d. */
static inline urt_graph *make_graph(urt_runtime *rt, struct done_rec *d)
{
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    o.done = on_done;
    o.arg = d;
    urt_graph *g = NULL;
    cr_assert_eq(urt_graph_create(rt, &o, &g), 0, "%s", urt_last_error());
    return g;
}

static inline int add(urt_graph *g, struct urt_step_desc d)
{
    int id = urt_graph_add_step(g, &d);
    cr_assert_geq(id, 0, "add_step %s: %s", d.name, urt_last_error());
    return id;
}

static inline int add_x(urt_graph *g, struct urt_exchange_desc d)
{
    int id = urt_graph_add_exchange(g, &d);
    cr_assert_geq(id, 0, "add_exchange: %s", urt_last_error());
    return id;
}

static inline void wire(urt_graph *g, int from, int x, int to)
{
    cr_assert_geq(urt_graph_add_output(g, from, x), 0, "output: %s", urt_last_error());
    cr_assert_geq(urt_graph_add_input(g, to, x), 0, "input: %s", urt_last_error());
}

/* Starts g, waits (at most 60 s), checks that the callback ran once with the
 * status urt_graph_wait returned and that the graph's job agrees; returns it. */
static inline int run_graph(urt_graph *g, struct done_rec *d)
{
    cr_assert_eq(urt_graph_start(g), 0, "start: %s", urt_last_error());
    int st = urt_graph_wait(g, 60ull * 1000000000ull);
    cr_assert_neq(st, -ETIMEDOUT, "the graph did not end within 60 s");
    cr_assert_eq(atomic_load(&d->calls), 1, "completion callback ran %d times", atomic_load(&d->calls));
    cr_assert_eq(atomic_load(&d->status), st, "callback status %d, wait %d", atomic_load(&d->status), st);
    cr_assert_eq(urt_job_poll(urt_graph_job(g)), st);
    return st;
}

#endif
