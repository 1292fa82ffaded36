/*
 * graph/build.c — building a task graph (SPEC C16, urt/graph.h): steps,
 * exchanges and their connections; urt_graph_prepare's checks and the
 * partition rules P1-P6 decided before the run; the allocation of the run's
 * objects; the handle's references; the read-only queries.
 *
 * Design. Building is owner only and single-threaded: plain fields, growing
 * arrays. urt_graph_prepare() runs, in order: structure (every exchange has a
 * producer and a consumer), a topological order (Kahn's algorithm; a cycle
 * is refused), the processor port edges, the partition counts in
 * topological order (the static part of P1-P6: a shuffle's count is its
 * consumers' agreed count, a forward consumer's the sum of its producers'
 * counts unless one is a scan, a limit-forward's producer has one
 * partition), then allocates every pool, partition list, port and task
 * context, so that urt_graph_start() allocates nothing but the job. The
 * dynamic part of the rules (P4: shuffle partitions without data are
 * dropped) is decided by the controller when the shuffle completes
 * (control.c).
 *
 * Memory ordering: nothing here is shared before urt_graph_start(), which
 * publishes the graph through the job's submission. After the start the
 * queries read the run's atomics relaxed (snapshots). refs: acq_rel
 * decrement, the last one frees (the standard reference count); the run's
 * reference is dropped at the end of the job's callback (control.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <urt/runtime.h>

#include "base/args.h"
#include "base/error.h"
#include "graph/graph_int.h"

/* ---- creating ------------------------------------------------------------------ */

URT_API void urt_graph_options_init(struct urt_graph_options *opt)
{
    if (opt)
        memset(opt, 0, sizeof(*opt));
}

static int check_options(const struct urt_graph_options *o)
{
    if (urt__check_flags("urt_graph_create", o->flags, 0)) /* none is defined */
        return -EINVAL;
    if (URT_CHECK_RESERVED("urt_graph_create", "opt", o))
        return -EINVAL;
    if (o->partitions > G_MAX_GRAPH_PARTITIONS)
        return urt__error(-EINVAL, "urt_graph_create: opt->partitions %u is above %u", o->partitions,
                          G_MAX_GRAPH_PARTITIONS);
    return 0;
}

URT_API int urt_graph_create(urt_runtime *rt, const struct urt_graph_options *opt, urt_graph **out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_graph_create: %s is NULL", rt ? "out" : "rt");
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    if (opt)
        o = *opt;
    int err = check_options(&o);
    if (err)
        return err;
    struct urt_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return urt__error(-ENOMEM, "urt_graph_create: no memory for the graph");
    g->rt = rt;
    g->opt = o;
    g->default_parts = o.partitions ? o.partitions : urt_runtime_config(rt)->workers;
    atomic_init(&g->refs, 1);
    g->news.step = -1;
    *out = g;
    return 0;
}

/* ---- growing arrays --------------------------------------------------------------- */

static int grow(void **arr, uint32_t *cap, uint32_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 4;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

static int check_building(const struct urt_graph *g, const char *fn)
{
    if (!g)
        return urt__error(-EINVAL, "%s: g is NULL", fn);
    if (g->phase != PH_BUILD)
        return urt__error(-EINVAL, "%s: the graph was %s already", fn, g->phase == PH_PREPARED ? "prepared" : "started");
    return 0;
}

/* ---- steps --------------------------------------------------------------------------- */

static int check_step_desc(const struct urt_step_desc *d)
{
    if (!d->fn == !d->processor)
        return urt__error(-EINVAL, "urt_graph_add_step: step '%s' needs exactly one of fn and processor",
                          d->name ? d->name : "");
    if (d->processor && !d->processor->event)
        return urt__error(-EINVAL, "urt_graph_add_step: step '%s': processor->event is NULL", d->name ? d->name : "");
    if (d->processor && (d->max_in_flight || d->prepare))
        return urt__error(-EINVAL, "urt_graph_add_step: step '%s': a processor takes no %s", d->name ? d->name : "",
                          d->max_in_flight ? "max_in_flight" : "prepare function");
    if (urt__check_flags("urt_graph_add_step", d->flags, URT_STEP_FLAGS_ALL))
        return -EINVAL;
    if (URT_CHECK_RESERVED("urt_graph_add_step", "d", d))
        return -EINVAL;
    if (d->partitions > G_MAX_STEP_PARTITIONS)
        return urt__error(-EINVAL, "urt_graph_add_step: partitions %u is above %u", d->partitions,
                          G_MAX_STEP_PARTITIONS);
    return 0;
}

URT_API int urt_graph_add_step(urt_graph *g, const struct urt_step_desc *d)
{
    int err = check_building(g, "urt_graph_add_step");
    if (err)
        return err;
    if (!d)
        return urt__error(-EINVAL, "urt_graph_add_step: d is NULL");
    if ((err = check_step_desc(d)))
        return err;
    if (g->n_steps >= G_MAX_STEPS)
        return urt__error(-EINVAL, "urt_graph_add_step: more than %d steps", G_MAX_STEPS);
    struct gstep *s = calloc(1, sizeof(*s));
    if (!s || grow((void **)&g->steps, &g->cap_steps, g->n_steps, sizeof(*g->steps))) {
        free(s);
        return urt__error(-ENOMEM, "urt_graph_add_step: no memory for step '%s'", d->name ? d->name : "");
    }
    s->d = *d;
    s->id = (int)g->n_steps;
    s->news.step = s->id;
    g->steps[g->n_steps++] = s;
    return s->id;
}

/* ---- exchanges ------------------------------------------------------------------------- */

static int check_exchange_desc(const struct urt_exchange_desc *d)
{
    if (d->kind != URT_EXCHANGE_FORWARD && d->kind != URT_EXCHANGE_SHUFFLE && d->kind != URT_EXCHANGE_BROADCAST)
        return urt__error(-EINVAL, "urt_graph_add_exchange: kind %d is unknown", (int)d->kind);
    if (d->capacity > G_MAX_CAPACITY)
        return urt__error(-EINVAL, "urt_graph_add_exchange: capacity %u is above %u", d->capacity, G_MAX_CAPACITY);
    if (d->limit_rows && d->kind != URT_EXCHANGE_FORWARD)
        return urt__error(-EINVAL, "urt_graph_add_exchange: limit_rows on a %s exchange (forward only)",
                          d->kind == URT_EXCHANGE_SHUFFLE ? "shuffle" : "broadcast");
    if (URT_CHECK_RESERVED("urt_graph_add_exchange", "d", d))
        return -EINVAL;
    return 0;
}

URT_API int urt_graph_add_exchange(urt_graph *g, const struct urt_exchange_desc *d)
{
    int err = check_building(g, "urt_graph_add_exchange");
    if (err)
        return err;
    if (!d)
        return urt__error(-EINVAL, "urt_graph_add_exchange: d is NULL");
    if ((err = check_exchange_desc(d)))
        return err;
    if (g->n_x >= G_MAX_STEPS)
        return urt__error(-EINVAL, "urt_graph_add_exchange: more than %d exchanges", G_MAX_STEPS);
    struct gx *x = gcalloc_lines(sizeof(*x));
    if (!x || grow((void **)&g->xs, &g->cap_x, g->n_x, sizeof(*g->xs))) {
        free(x);
        return urt__error(-ENOMEM, "urt_graph_add_exchange: no memory for the exchange");
    }
    x->d = *d;
    if (!x->d.capacity)
        x->d.capacity = d->kind == URT_EXCHANGE_FORWARD ? G_FORWARD_CAPACITY : G_BLOCKING_CAPACITY;
    x->id = (int)g->n_x;
    g->xs[g->n_x++] = x;
    return x->id;
}

/* ---- connections -------------------------------------------------------------------------- */

static int append_int(int **arr, uint32_t n, int v)
{
    int *p = realloc(*arr, ((size_t)n + 1) * sizeof(int));
    if (!p)
        return -ENOMEM;
    p[n] = v;
    *arr = p;
    return 0;
}

static int append_u32(uint32_t **arr, uint32_t n, uint32_t v)
{
    uint32_t *p = realloc(*arr, ((size_t)n + 1) * sizeof(uint32_t));
    if (!p)
        return -ENOMEM;
    p[n] = v;
    *arr = p;
    return 0;
}

static int check_ids(const struct urt_graph *g, int step, int exchange, const char *fn)
{
    int err = check_building(g, fn);
    if (err)
        return err;
    if (step < 0 || (uint32_t)step >= g->n_steps)
        return urt__error(-EINVAL, "%s: step %d is not a step of the graph", fn, step);
    if (exchange < 0 || (uint32_t)exchange >= g->n_x)
        return urt__error(-EINVAL, "%s: exchange %d is not an exchange of the graph", fn, exchange);
    return 0;
}

/* The processor step reading forward exchange x, if any. */
static const struct gstep *proc_reader(const struct urt_graph *g, const struct gx *x)
{
    for (uint32_t c = 0; x->d.kind == URT_EXCHANGE_FORWARD && c < x->n_cons; c++)
        if (g->steps[x->cons[c]]->d.processor)
            return g->steps[x->cons[c]];
    return NULL;
}

/* A forward exchange read by a processor is a port edge: one processor step
 * writes it, the processor alone reads it, no limit_rows (urt_graph_prepare
 * checks the whole graph again). Writer `w` and reader `r` of x. */
static int check_edge(const struct gstep *w, const struct gstep *r, const struct gx *x, const char *fn)
{
    if (!w->d.processor)
        return urt__error(-EINVAL, "%s: processor '%s' would read forward exchange %d written by '%s', a function "
                                   "step (processors read forward exchanges of processors only)",
                          fn, gstep_name(r), x->id, gstep_name(w));
    return 0;
}

/* Processor s would read forward exchange x. */
static int check_edge_reader(const struct urt_graph *g, const struct gstep *s, const struct gx *x)
{
    if (x->n_cons)
        return urt__error(-EINVAL, "urt_graph_add_input: processor '%s' would share forward exchange %d with '%s' (a "
                                   "processor's forward input has one reader)",
                          gstep_name(s), x->id, gstep_name(g->steps[x->cons[0]]));
    if (x->d.limit_rows)
        return urt__error(-EINVAL, "urt_graph_add_input: forward exchange %d has limit_rows: processor '%s' cannot read it",
                          x->id, gstep_name(s));
    if (x->n_prod > 1)
        return urt__error(-EINVAL, "urt_graph_add_input: forward exchange %d has %u producers: processor '%s' reads one",
                          x->id, x->n_prod, gstep_name(s));
    return x->n_prod ? check_edge(g->steps[x->prod[0]], s, x, "urt_graph_add_input") : 0;
}

URT_API int urt_graph_add_output(urt_graph *g, int step, int exchange)
{
    int err = check_ids(g, step, exchange, "urt_graph_add_output");
    if (err)
        return err;
    struct gstep *s = g->steps[step];
    struct gx *x = g->xs[exchange];
    for (uint32_t i = 0; i < x->n_prod; i++)
        if (x->prod[i] == step)
            return urt__error(-EINVAL, "urt_graph_add_output: step '%s' writes exchange %d already", gstep_name(s), exchange);
    const struct gstep *reader = proc_reader(g, x);
    if (reader && (err = check_edge(s, reader, x, "urt_graph_add_output")))
        return err;
    if (reader && x->n_prod)
        return urt__error(-EINVAL, "urt_graph_add_output: forward exchange %d is read by processor '%s': one producer "
                                   "step at most", exchange, gstep_name(reader));
    if (append_int(&s->out_x, s->n_out, exchange) || append_int(&x->prod, x->n_prod, step))
        return urt__error(-ENOMEM, "urt_graph_add_output: no memory");
    x->n_prod++;
    return (int)s->n_out++;
}

/* The rules of urt_graph_add_input about what one step may read. */
static int check_input(const struct urt_graph *g, const struct gstep *s, const struct gx *x)
{
    enum urt_exchange_kind k = x->d.kind;
    if (s->d.processor && k != URT_EXCHANGE_FORWARD)
        return urt__error(-EINVAL, "urt_graph_add_input: step '%s' is a processor: it reads forward exchanges of processors only",
                          gstep_name(s));
    for (uint32_t i = 0; i < s->n_in; i++)
        if (s->in_x[i] == x->id)
            return urt__error(-EINVAL, "urt_graph_add_input: step '%s' reads exchange %d already", gstep_name(s), x->id);
    int err = s->d.processor ? check_edge_reader(g, s, x) : 0;
    if (err)
        return err;
    if (!s->d.processor && proc_reader(g, x))
        return urt__error(-EINVAL, "urt_graph_add_input: step '%s' would share forward exchange %d with processor '%s' (a "
                                   "processor's forward input has one reader)",
                          gstep_name(s), x->id, gstep_name(proc_reader(g, x)));
    for (uint32_t i = 0; i < s->n_in; i++) {
        enum urt_exchange_kind o = g->xs[s->in_x[i]]->d.kind;
        if (k == URT_EXCHANGE_FORWARD && o == URT_EXCHANGE_FORWARD && !s->d.processor)
            return urt__error(-EINVAL, "urt_graph_add_input: step '%s' reads a forward exchange already (one at most)",
                              gstep_name(s));
        if ((k == URT_EXCHANGE_FORWARD && o == URT_EXCHANGE_SHUFFLE) ||
            (k == URT_EXCHANGE_SHUFFLE && o == URT_EXCHANGE_FORWARD))
            return urt__error(-EINVAL, "urt_graph_add_input: step '%s' cannot read a forward and a shuffle exchange",
                              gstep_name(s));
    }
    return 0;
}

URT_API int urt_graph_add_input(urt_graph *g, int step, int exchange)
{
    int err = check_ids(g, step, exchange, "urt_graph_add_input");
    if (err)
        return err;
    struct gstep *s = g->steps[step];
    struct gx *x = g->xs[exchange];
    if ((err = check_input(g, s, x)))
        return err;
    if (append_int(&s->in_x, s->n_in, exchange) || append_u32(&s->in_link, s->n_in, x->n_cons) ||
        append_int(&x->cons, x->n_cons, step) || append_u32(&x->cons_port, x->n_cons, s->n_in))
        return urt__error(-ENOMEM, "urt_graph_add_input: no memory");
    x->n_cons++;
    return (int)s->n_in++;
}

/* ---- prepare: structure and order ---------------------------------------------------------- */

static int check_structure(struct urt_graph *g)
{
    if (!g->n_steps)
        return urt__error(-EINVAL, "urt_graph_prepare: the graph has no step");
    for (uint32_t i = 0; i < g->n_x; i++) {
        struct gx *x = g->xs[i];
        if (!x->n_prod || !x->n_cons)
            return urt__error(-EINVAL, "urt_graph_prepare: exchange %u has no %s", i, x->n_prod ? "consumer" : "producer");
        if (x->d.limit_rows && x->n_prod != 1)
            return urt__error(-EINVAL, "urt_graph_prepare: exchange %u has limit_rows and %u producers (P3: one)", i,
                              x->n_prod);
    }
    return 0;
}

/* Kahn's algorithm over step -> exchange -> step. */
static int topo_order(struct urt_graph *g)
{
    uint32_t n = g->n_steps, *indeg = calloc(n, sizeof(uint32_t)), head = 0, tail = 0;
    g->topo = malloc(n * sizeof(int));
    if (!indeg || !g->topo) {
        free(indeg);
        return urt__error(-ENOMEM, "urt_graph_prepare: no memory");
    }
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < g->steps[i]->n_in; k++)
            indeg[i] += g->xs[g->steps[i]->in_x[k]]->n_prod;
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i])
            g->topo[tail++] = (int)i;
    while (head < tail) {
        struct gstep *s = g->steps[g->topo[head++]];
        for (uint32_t k = 0; k < s->n_out; k++) {
            struct gx *x = g->xs[s->out_x[k]];
            for (uint32_t c = 0; c < x->n_cons; c++)
                if (--indeg[x->cons[c]] == 0)
                    g->topo[tail++] = x->cons[c];
        }
    }
    free(indeg);
    if (tail != n)
        return urt__error(-EINVAL, "urt_graph_prepare: the graph has a cycle (%u of %u steps ordered)", tail, n);
    return 0;
}

/* Which input is main, port edges, scans. */
static int classify(struct urt_graph *g)
{
    for (uint32_t i = 0; i < g->n_x; i++) {
        struct gx *x = g->xs[i];
        bool proc_cons = false;
        for (uint32_t c = 0; c < x->n_cons; c++)
            proc_cons |= g->steps[x->cons[c]]->d.processor != NULL;
        for (uint32_t k = 0; k < x->n_prod; k++)
            x->scan_src |= (g->steps[x->prod[k]]->d.flags & URT_STEP_SCAN) != 0;
        if (!proc_cons)
            continue;
        if (x->n_cons != 1 || x->n_prod != 1 || !g->steps[x->prod[0]]->d.processor || x->d.limit_rows)
            return urt__error(-EINVAL, "urt_graph_prepare: exchange %d is read by processor '%s': it must join one "
                                       "processor to it, without limit_rows", x->id, gstep_name(g->steps[x->cons[0]]));
        x->port_edge = true;
    }
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        for (uint32_t k = 0; k < s->n_in; k++) {
            enum urt_exchange_kind kind = g->xs[s->in_x[k]]->d.kind;
            if (kind == URT_EXCHANGE_BROADCAST) {
                s->n_side++;
                continue;
            }
            s->n_main++;
            s->main = s->d.processor ? MAIN_PORTS : kind == URT_EXCHANGE_FORWARD ? MAIN_FORWARD : MAIN_SHUFFLE;
            if (kind == URT_EXCHANGE_FORWARD)
                s->fwd_port = k;
        }
    }
    return 0;
}

/* ---- prepare: side inputs that would wait for their own step's forward input ---------------- */

/* True when step `from` reaches step `to` (from == to counts), through any
 * exchange or, with fwd_only, through forward exchanges only. */
static bool reaches(const struct urt_graph *g, int from, int to, bool fwd_only, uint8_t *seen)
{
    if (from == to)
        return true;
    if (seen[from])
        return false;
    seen[from] = 1;
    const struct gstep *s = g->steps[from];
    for (uint32_t k = 0; k < s->n_out; k++) {
        const struct gx *x = g->xs[s->out_x[k]];
        if (fwd_only && x->d.kind != URT_EXCHANGE_FORWARD)
            continue;
        for (uint32_t c = 0; c < x->n_cons; c++)
            if (reaches(g, x->cons[c], to, fwd_only, seen))
                return true;
    }
    return false;
}

/* A forward consumer's units wait (bounded by the capacity) until its side
 * inputs are prepared, i.e. until their producers completed. If a producer of
 * the forward feeds a side input's producer, or a side input's producer feeds
 * the forward's producer through forward exchanges (whose back-pressure
 * reaches it), the two wait for each other: refused. */
static int check_side_waits(struct urt_graph *g, uint8_t *seen)
{
    for (uint32_t i = 0; i < g->n_steps; i++) {
        const struct gstep *c = g->steps[i];
        if (c->main != MAIN_FORWARD || !c->n_side)
            continue;
        const struct gx *fx = g->xs[c->in_x[c->fwd_port]];
        for (uint32_t k = 0; k < c->n_in; k++) {
            const struct gx *bx = g->xs[c->in_x[k]];
            for (uint32_t b = 0; bx->d.kind == URT_EXCHANGE_BROADCAST && b < bx->n_prod; b++)
                for (uint32_t f = 0; f < fx->n_prod; f++) {
                    bool bad = (memset(seen, 0, g->n_steps), reaches(g, fx->prod[f], bx->prod[b], false, seen)) ||
                               (memset(seen, 0, g->n_steps), reaches(g, bx->prod[b], fx->prod[f], true, seen));
                    if (bad)
                        return urt__error(-EINVAL, "urt_graph_prepare: step '%s' reads a forward from '%s' and a "
                                                   "broadcast from '%s', which depend on each other: its units would "
                                                   "wait for the side input that waits for them (use a shuffle)",
                                          gstep_name(c), gstep_name(g->steps[fx->prod[f]]),
                                          gstep_name(g->steps[bx->prod[b]]));
                }
        }
    }
    return 0;
}

static int check_waits(struct urt_graph *g)
{
    uint8_t *seen = malloc(g->n_steps);
    if (!seen)
        return urt__error(-ENOMEM, "urt_graph_prepare: no memory");
    int err = check_side_waits(g, seen);
    free(seen);
    return err;
}

/* ---- prepare: partition counts (P1-P6, the static part) -------------------------------------- */

/* P2: the consumers of x agree on a count: their explicit ones, else dflt. */
static int agreed_count(struct urt_graph *g, struct gx *x, uint32_t dflt, uint32_t *out)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < x->n_cons; c++) {
        const struct gstep *s = g->steps[x->cons[c]];
        if (!s->d.partitions)
            continue;
        if (n && n != s->d.partitions)
            return urt__error(-EINVAL, "urt_graph_prepare: the consumers of exchange %d differ in partitions (%u and %u: P2)",
                              x->id, n, s->d.partitions);
        n = s->d.partitions;
    }
    *out = n ? n : dflt;
    return 0;
}

static int forward_count(struct urt_graph *g, struct gstep *s, struct gx *x, uint32_t *out)
{
    if (x->scan_src)
        return agreed_count(g, x, g->default_parts, out);
    uint32_t sum = 0;
    for (uint32_t k = 0; k < x->n_prod; k++) {
        if (!x->prod_offset && !(x->prod_offset = calloc(x->n_prod, sizeof(uint32_t))))
            return urt__error(-ENOMEM, "urt_graph_prepare: no memory");
        x->prod_offset[k] = sum;
        sum += g->steps[x->prod[k]]->assumed;
    }
    if (sum > G_MAX_STEP_PARTITIONS)
        return urt__error(-EINVAL, "urt_graph_prepare: step '%s' would have %u partitions (P6 sum)", gstep_name(s), sum);
    if (s->d.partitions && s->d.partitions != sum)
        return urt__error(-EINVAL, "urt_graph_prepare: step '%s' asks %u partitions, its forward producers have %u (P6)",
                          gstep_name(s), s->d.partitions, sum);
    *out = sum;
    return 0;
}

static int step_count(struct urt_graph *g, struct gstep *s)
{
    uint32_t n = s->d.partitions ? s->d.partitions : g->default_parts;
    int err = 0;
    bool shuffled = false;
    for (uint32_t k = 0; k < s->n_in && !err; k++) {
        struct gx *x = g->xs[s->in_x[k]];
        if (x->d.kind == URT_EXCHANGE_SHUFFLE) {
            if (shuffled && n != x->parts)
                err = urt__error(-EINVAL, "urt_graph_prepare: step '%s' cogroups shuffles of %u and %u partitions",
                                 gstep_name(s), n, x->parts);
            n = x->parts;
            shuffled = true;
        } else if (x->d.kind == URT_EXCHANGE_FORWARD) {
            if (!x->parts && !(err = forward_count(g, s, x, &x->parts)) && x->d.limit_rows &&
                g->steps[x->prod[0]]->assumed != 1)
                err = urt__error(-EINVAL, "urt_graph_prepare: exchange %d has limit_rows; its producer '%s' has %u "
                                          "partitions (P3: one)", x->id, gstep_name(g->steps[x->prod[0]]),
                                 g->steps[x->prod[0]]->assumed);
            if (!err && x->port_edge && x->parts != g->steps[x->prod[0]]->assumed)
                err = urt__error(-EINVAL, "urt_graph_prepare: processors '%s' and '%s' differ in partitions (%u and %u)",
                                 gstep_name(g->steps[x->prod[0]]), gstep_name(s), g->steps[x->prod[0]]->assumed, x->parts);
            n = x->parts;
        }
    }
    s->assumed = n;
    atomic_init(&s->decided, n);
    return err;
}

static int decide_counts(struct urt_graph *g)
{
    int err = 0;
    for (uint32_t i = 0; i < g->n_x && !err; i++)
        if (g->xs[i]->d.kind == URT_EXCHANGE_SHUFFLE)
            err = agreed_count(g, g->xs[i], g->default_parts, &g->xs[i]->parts);
    for (uint32_t i = 0; i < g->n_steps && !err; i++)
        err = step_count(g, g->steps[g->topo[i]]);
    return err;
}

/* ---- prepare: allocation ------------------------------------------------------------------------ */

struct urt_graph_ctx *gctx_new(struct urt_graph *g, struct gstep *s, uint32_t kind, uint32_t partition)
{
    uint32_t n_cur = kind == CTX_PROC ? 0 : s->n_in;
    struct urt_graph_ctx *c = gcalloc_lines(sizeof(*c) + n_cur * sizeof(c->cur[0]));
    if (!c)
        return NULL;
    c->g = g;
    c->s = s;
    c->kind = kind;
    c->partition = partition;
    c->n_cur = n_cur;
    return c;
}

static enum gctx_kind ctx_kind(const struct gstep *s)
{
    switch (s->main) {
    case MAIN_FORWARD:
        return CTX_STREAM;
    case MAIN_SHUFFLE:
        return CTX_PART;
    case MAIN_PORTS:
        return CTX_PROC;
    default:
        return s->d.processor ? CTX_PROC : CTX_SOURCE;
    }
}

static int alloc_step(struct urt_graph *g, struct gstep *s)
{
    enum gctx_kind kind = ctx_kind(s);
    uint32_t n = s->assumed;
    if (kind == CTX_SOURCE) {
        uint32_t cap = s->d.max_in_flight ? s->d.max_in_flight : 4096;
        n = n < cap ? n : cap;
    }
    s->ctx = calloc(n ? n : 1, sizeof(*s->ctx));
    s->prep = calloc(s->n_side ? s->n_side : 1, sizeof(*s->prep));
    if (!s->ctx || !s->prep)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++, s->n_ctx++) {
        if (!(s->ctx[i] = gctx_new(g, s, kind, i)))
            return -ENOMEM;
        if (kind == CTX_STREAM) { /* shut until the side inputs are prepared (exec.c) */
            atomic_init(&s->ctx[i]->inbox, s->n_side ? S_SHUT : S_IDLE);
            s->ctx[i]->in = g->xs[s->in_x[s->fwd_port]];
            s->ctx[i]->link = s->in_link[s->fwd_port];
            s->ctx[i]->main_port = s->fwd_port;
        }
        if (kind == CTX_PROC)
            gproc_init(s->ctx[i]);
    }
    for (uint32_t i = 0; i < s->n_side && s->d.prepare; i++)
        if (!(s->prep[i] = gctx_new(g, s, CTX_PREPARE, i)))
            return -ENOMEM;
    atomic_init(&s->live, 1); /* the open count, dropped at COMPLETING */
    return 0;
}

static int alloc_exchange(struct gx *x)
{
    int err = gpool_init(&x->pool, x->d.capacity, x->d.kind == URT_EXCHANGE_FORWARD ? x->n_cons : 1);
    if (err)
        return err;
    if (x->d.kind != URT_EXCHANGE_FORWARD) {
        uint32_t n = x->d.kind == URT_EXCHANGE_SHUFFLE ? x->parts : 1;
        if (!(x->heads = calloc(n, sizeof(*x->heads))))
            return -ENOMEM;
    }
    if (x->port_edge && !(x->ports = calloc(x->parts, sizeof(*x->ports))))
        return -ENOMEM;
    x->prod_left = x->n_prod;
    x->cons_left = x->n_cons;
    return 0;
}

static void link_ports(struct urt_graph *g, struct gx *x)
{
    struct gstep *p = g->steps[x->prod[0]], *c = g->steps[x->cons[0]];
    for (uint32_t i = 0; i < x->parts; i++) {
        x->ports[i].prod = p->ctx[i];
        x->ports[i].cons = c->ctx[i];
    }
}

static int allocate(struct urt_graph *g)
{
    for (uint32_t i = 0; i < g->n_steps; i++)
        if (alloc_step(g, g->steps[i]))
            return urt__error(-ENOMEM, "urt_graph_prepare: no memory for step '%s'", gstep_name(g->steps[i]));
    for (uint32_t i = 0; i < g->n_x; i++) {
        if (alloc_exchange(g->xs[i]))
            return urt__error(-ENOMEM, "urt_graph_prepare: no memory for exchange %u", i);
        if (g->xs[i]->port_edge)
            link_ports(g, g->xs[i]);
    }
    return 0;
}

/* Undoes what a failed prepare allocated, so the graph is as it was (rule 2). */
static void unprepare(struct urt_graph *g)
{
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        for (uint32_t k = 0; k < s->n_ctx; k++)
            free(s->ctx[k]);
        for (uint32_t k = 0; k < s->n_side && s->prep; k++)
            free(s->prep[k]);
        free(s->ctx);
        free(s->prep);
        s->ctx = s->prep = NULL;
        s->n_ctx = s->n_side = s->n_main = 0;
        s->main = MAIN_NONE;
    }
    for (uint32_t i = 0; i < g->n_x; i++) {
        struct gx *x = g->xs[i];
        gpool_free(&x->pool);
        free(x->heads);
        free(x->ports);
        free(x->prod_offset);
        x->heads = NULL;
        x->ports = NULL;
        x->prod_offset = NULL;
        x->parts = 0;
        x->port_edge = x->scan_src = false;
    }
    free(g->topo);
    g->topo = NULL;
}

URT_API int urt_graph_prepare(urt_graph *g)
{
    if (!g)
        return urt__error(-EINVAL, "urt_graph_prepare: g is NULL");
    if (g->phase != PH_BUILD)
        return urt__error(-EALREADY, "urt_graph_prepare: the graph was %s already",
                          g->phase == PH_PREPARED ? "prepared" : "started");
    int err = check_structure(g);
    if (!err)
        err = topo_order(g);
    if (!err)
        err = classify(g);
    if (!err)
        err = check_waits(g);
    if (!err)
        err = decide_counts(g);
    if (!err)
        err = allocate(g);
    if (err) {
        unprepare(g);
        return err;
    }
    g->phase = PH_PREPARED;
    return 0;
}

/* ---- references and freeing ---------------------------------------------------------------------- */

static void graph_free(struct urt_graph *g)
{
    unprepare(g);
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        free(s->in_x);
        free(s->out_x);
        free(s->in_link);
        free(s);
    }
    for (uint32_t i = 0; i < g->n_x; i++) {
        struct gx *x = g->xs[i];
        free(x->prod);
        free(x->cons);
        free(x->cons_port);
        free(x);
    }
    free(g->steps);
    free(g->xs);
    urt_job_release(g->job);
    free(g);
}

void graph_unref(struct urt_graph *g)
{
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        graph_free(g);
}

URT_API void urt_graph_release(urt_graph *g)
{
    if (g)
        graph_unref(g);
}

/* ---- queries ------------------------------------------------------------------------------------------ */

URT_API urt_job *urt_graph_job(const urt_graph *g)
{
    return g ? g->job : NULL;
}

static int check_step_query(const urt_graph *g, int step, const char *fn)
{
    if (!g)
        return urt__error(-EINVAL, "%s: g is NULL", fn);
    if (step < 0 || (uint32_t)step >= g->n_steps)
        return urt__error(-EINVAL, "%s: step %d is not a step of the graph", fn, step);
    return 0;
}

URT_API int urt_graph_step_state(const urt_graph *g, int step)
{
    int err = check_step_query(g, step, "urt_graph_step_state");
    return err ? err : (int)atomic_load_explicit(&g->steps[step]->state, memory_order_relaxed);
}

URT_API int urt_graph_step_partitions(const urt_graph *g, int step)
{
    int err = check_step_query(g, step, "urt_graph_step_partitions");
    if (err)
        return err;
    if (g->phase == PH_BUILD)
        return urt__error(-EINVAL, "urt_graph_step_partitions: the graph is not prepared");
    return (int)atomic_load_explicit(&g->steps[step]->decided, memory_order_relaxed);
}

URT_API int urt_graph_step_stats(const urt_graph *g, int step, struct urt_graph_step_stats *out)
{
    int err = check_step_query(g, step, "urt_graph_step_stats");
    if (err)
        return err;
    if (!out)
        return urt__error(-EINVAL, "urt_graph_step_stats: out is NULL");
    const struct gstep *s = g->steps[step];
    out->tasks_run = atomic_load_explicit(&s->st_run, memory_order_relaxed);
    out->tasks_skipped = atomic_load_explicit(&s->st_skipped, memory_order_relaxed);
    out->tasks_cut = atomic_load_explicit(&s->st_cut, memory_order_relaxed);
    out->yields = atomic_load_explicit(&s->st_yields, memory_order_relaxed);
    out->units_in = atomic_load_explicit(&s->st_in, memory_order_relaxed);
    out->units_out = atomic_load_explicit(&s->st_out, memory_order_relaxed);
    out->rows_out = atomic_load_explicit(&s->st_rows, memory_order_relaxed);
    return 0;
}
