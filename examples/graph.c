/*
 * examples/graph.c — a task graph (urt/graph.h, docs/graph.md).
 *
 * Graph 1:  scan (100 morsels) --forward--> filter --shuffle(4)--> sum --shuffle(1)--> total
 *   scan emits each morsel of 1,000 numbers as one unit; filter (one task per arriving
 *   unit) keeps the multiples of 3 and hands them to partition m % 4 of the shuffle; sum
 *   (one task per partition, after every filter task finished) adds its partition's
 *   units; total prints the sums.
 * Graph 2:  scan (at most 4 morsels in flight) --forward--> limit
 *   limit takes the first 10 numbers and completes the graph early: the scan stops.
 *
 * Build: cc examples/graph.c $(pkg-config --cflags --libs urt)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <urt/urt.h>

#define ROWS 100000
#define MORSEL 1000
#define MORSELS (ROWS / MORSEL)
#define PARTS 4

static uint32_t numbers[ROWS];
static uint32_t kept[MORSELS][MORSEL]; /* filter's output, per morsel */
static uint64_t sums[PARTS];

/* A source step: one call per partition (= morsel). */
static int scan(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t m = urt_graph_partition(ctx);
    int r = urt_graph_emit(ctx, 0, 0, &numbers[m * MORSEL], MORSEL);
    if (r == -EAGAIN)
        return URT_STEP_YIELD; /* the forward exchange is full: called again when it has room */
    return r == -EPIPE ? URT_STEP_DONE : r; /* -EPIPE: nobody wants more (graph 2's limit) */
}

/* A forward consumer: one call per arriving unit. */
static int filter(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    const uint32_t *in = u.data;
    uint32_t m = in[0] / MORSEL, n = 0;
    for (uint32_t i = 0; i < u.rows; i++)
        if (in[i] % 3 == 0)
            kept[m][n++] = in[i];
    return urt_graph_emit(ctx, 0, m % PARTS, kept[m], n); /* a shuffle: we choose the partition */
}

/* A shuffle consumer: one call per partition, once every filter task finished. */
static int sum(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    uint32_t p = urt_graph_partition(ctx);
    struct urt_graph_unit u;
    while (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) == 1)
        for (uint32_t i = 0; i < u.rows; i++)
            sums[p] += ((const uint32_t *)u.data)[i];
    return urt_graph_emit(ctx, 0, 0, &sums[p], 1);
}

static int total(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    (void)ctx;
    uint64_t t = 0;
    for (int p = 0; p < PARTS; p++) {
        printf("partition %d: %llu\n", p, (unsigned long long)sums[p]);
        t += sums[p];
    }
    printf("total: %llu\n", (unsigned long long)t);
    return URT_STEP_DONE;
}

static uint32_t taken[10];
static int n_taken;

/* One partition: its units come one at a time, in arrival order. */
static int limit(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    if (urt_graph_next(ctx, URT_GRAPH_ANY_PORT, &u) != 1)
        return URT_STEP_DONE;
    for (uint32_t i = 0; i < u.rows && n_taken < 10; i++)
        taken[n_taken++] = ((const uint32_t *)u.data)[i];
    if (n_taken == 10)
        urt_graph_complete(ctx); /* early completion: the scan's morsels not started never start */
    return URT_STEP_DONE;
}

static int add(urt_graph *g, const char *name, urt_graph_step_fn *fn, uint32_t parts, uint32_t in_flight,
               uint32_t flags)
{
    struct urt_step_desc d = {.name = name, .fn = fn, .partitions = parts, .max_in_flight = in_flight,
                              .flags = flags};
    return urt_graph_add_step(g, &d);
}

static int join(urt_graph *g, int from, enum urt_exchange_kind kind, int to)
{
    struct urt_exchange_desc d = {.kind = kind};
    int x = urt_graph_add_exchange(g, &d);
    if (x < 0 || urt_graph_add_output(g, from, x) < 0 || urt_graph_add_input(g, to, x) < 0)
        return -1;
    return 0;
}

static int run(urt_graph *g, const char *what)
{
    int st = urt_graph_start(g);
    if (!st)
        st = urt_graph_wait(g, URT_WAIT_FOREVER); /* the job's status: 0, or the first error */
    if (st)
        fprintf(stderr, "%s: %s (%s)\n", what, strerror(-st), urt_last_error());
    return st;
}

int main(void)
{
    for (uint32_t i = 0; i < ROWS; i++)
        numbers[i] = i;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(NULL, &rt)) {
        fprintf(stderr, "urt_runtime_create: %s\n", urt_last_error());
        return 1;
    }
    /* graph 1 */
    urt_graph *g = NULL;
    if (urt_graph_create(rt, NULL, &g))
        return 1;
    int s = add(g, "scan", scan, MORSELS, 0, URT_STEP_SCAN), f = add(g, "filter", filter, PARTS, 0, 0);
    int a = add(g, "sum", sum, PARTS, 0, 0), t = add(g, "total", total, 1, 0, 0);
    if (join(g, s, URT_EXCHANGE_FORWARD, f) || join(g, f, URT_EXCHANGE_SHUFFLE, a) ||
        join(g, a, URT_EXCHANGE_SHUFFLE, t) || run(g, "graph 1"))
        return 1;
    urt_graph_release(g);

    /* graph 2 */
    if (urt_graph_create(rt, NULL, &g))
        return 1;
    s = add(g, "scan", scan, MORSELS, 4, URT_STEP_SCAN);
    int l = add(g, "limit", limit, 1, 0, 0);
    if (join(g, s, URT_EXCHANGE_FORWARD, l) || run(g, "graph 2"))
        return 1;
    struct urt_graph_step_stats st;
    urt_graph_step_stats(g, s, &st);
    printf("limit: %d numbers taken; the scan stopped early: %s\n", n_taken,
           st.tasks_run < MORSELS && st.tasks_run + st.tasks_skipped + st.tasks_cut == MORSELS ? "yes" : "no");
    urt_graph_release(g);
    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) ? 1 : 0;
}
