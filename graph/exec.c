/*
 * graph/exec.c — the tasks of a task graph (SPEC C16) and its data path.
 *
 * Every task of a graph runs a context (struct urt_graph_ctx, graph_int.h):
 *   CTX_SOURCE   a slot of a step without main input: runs partition after
 *                partition (a finished partition admits the next one by
 *                URT_TASK_YIELD, so at most n_ctx = max_in_flight tasks are
 *                queued or running);
 *   CTX_PART     one partition of a shuffle consumer (P4: only partitions
 *                with data, unless TAKE_COGROUP);
 *   CTX_PREPARE  one side input's sub-task (P5);
 *   CTX_STREAM   one partition of a forward consumer: a strand of units
 *                (arrival order, one at a time) drained by one task at a time;
 *   CTX_PROC     a processor instance (proc.c).
 * Tasks are taken from the runtime's cache: urt_job_spawn (job tasks, run
 * anywhere, stolen), urt_lane_spawn for a step with a lane. A context is
 * submitted again only when no task of it exists any more (a strand's
 * 0 -> 1 edge, a parked producer's wake-up, a processor's scheduling word),
 * or keeps its task by URT_TASK_YIELD.
 *
 * Units (struct gunit) come from the exchange's pool: at most `capacity`
 * handed out (used, a CAS that never passes the capacity), a free list (a
 * Treiber stack of indexes with a 32-bit tag against ABA), nodes created 256
 * at a time on first use. Forward: a unit is pushed onto each consumer
 * stream's inbox (a stack, taken whole and reversed into arrival order) and
 * counted in the stream's `pending`; the push that moves pending 0 -> 1
 * spawns the stream's task (pending counts pushed units: push, then count,
 * so a drainer never waits for a counted unit; a unit taken before it was
 * counted makes pending go below zero for a moment, and the late count then
 * sees a non-zero value and spawns nothing). Shuffle and broadcast: a push
 * onto the partition's stack, read by the consumers after the exchange
 * completed (they start later).
 *
 * Back-pressure (Dekker pairing, seq_cst): a producer whose emit found the
 * pool full returns URT_STEP_YIELD; its task is parked: push the context on
 * the exchange's waiters, then load `used`. A release: free the node, then
 * decrement `used`, then load `waiters`, and wake them all (take the stack
 * whole, spawn each). Either the parker sees the room or the releaser sees
 * the parker. Stopping and aborting wake the waiters the same way (stop
 * stored before the waiters are taken; the parker loads stop after its
 * push).
 *
 * Memory ordering, besides the above:
 *  - live (per step): glive_get is a relaxed CAS that never moves it from 0
 *    (a completed step accepts nothing); glive_put is acq_rel, the put that
 *    reaches 0 posts N_TASKS_DONE, so the controller sees every task's
 *    writes (emitted units, shuffle stacks) through the news' release/acquire.
 *  - inbox / shuffle stacks: CAS release on push, acquire exchange/read on
 *    take; the blocking stacks are read after the controller ordered the
 *    consumer's start after the producers' completion.
 *  - unit refs: acq_rel; the consumer that drops the last reference calls the
 *    release callback and frees the node.
 * Last touch (graph_int.h): the final glive_put of a context is its last
 * access to graph memory.
 * A task that finds its step stopping ends without calling it (skipped, or
 * cut if it had started); task state left set goes to the step's cleanup
 * (gexec_cleanup): by a source slot before its next partition, else by the
 * controller when the step completed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/graph_int.h"

_Thread_local struct gexec *gexec_cur;

void gexec_enter(struct gexec *e, struct urt_graph *g)
{
    e->g = g;
    e->drain = false;
    e->prev = gexec_cur;
    gexec_cur = e;
}

void gexec_leave(struct gexec *e)
{
    gexec_cur = e->prev;
    if (e->drain)
        gctl_drain(e->g); /* this thread moved the controller's count 0 -> 1 */
}

/* ---- live counts ------------------------------------------------------------------- */

bool glive_get(struct gstep *s, int64_t n)
{
    int64_t v = atomic_load_explicit(&s->live, memory_order_relaxed);
    do {
        if (v <= 0)
            return false; /* completed: it takes nothing any more */
    } while (!atomic_compare_exchange_weak_explicit(&s->live, &v, v + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

void glive_put(struct urt_graph *g, struct gstep *s, int64_t n)
{
    if (n && atomic_fetch_sub_explicit(&s->live, n, memory_order_acq_rel) == n)
        gctl_step_news(s, g, N_TASKS_DONE);
}

/* ---- the unit pool ---------------------------------------------------------------------- */

#define G_CHUNK (1u << G_CHUNK_SHIFT)

int gpool_init(struct gpool *p, uint32_t capacity, uint32_t n_links)
{
    p->capacity = capacity;
    p->node_size = (uint32_t)(sizeof(struct gunit) + n_links * sizeof(struct gunit *));
    p->n_chunks = (capacity + G_CHUNK - 1) / G_CHUNK;
    p->chunks = calloc(p->n_chunks, sizeof(*p->chunks));
    return p->chunks ? 0 : -ENOMEM;
}

void gpool_free(struct gpool *p)
{
    for (uint32_t i = 0; p->chunks && i < p->n_chunks; i++)
        free(atomic_load_explicit(&p->chunks[i], memory_order_relaxed));
    free(p->chunks);
    p->chunks = NULL;
}

static inline struct gunit *gpool_node(struct gpool *p, uint32_t idx)
{
    char *chunk = atomic_load_explicit(&p->chunks[idx >> G_CHUNK_SHIFT], memory_order_acquire);
    return (struct gunit *)(chunk + (size_t)(idx & (G_CHUNK - 1)) * p->node_size);
}

static struct gunit *gpool_bump(struct gpool *p)
{
    uint32_t idx = atomic_fetch_add_explicit(&p->bump, 1, memory_order_relaxed);
    void *_Atomic *slot = &p->chunks[idx >> G_CHUNK_SHIFT];
    if (!atomic_load_explicit(slot, memory_order_acquire)) {
        void *fresh = calloc(G_CHUNK, p->node_size), *none = NULL;
        if (!fresh)
            return NULL;
        if (!atomic_compare_exchange_strong_explicit(slot, &none, fresh, memory_order_acq_rel, memory_order_acquire))
            free(fresh); /* another thread installed it */
    }
    struct gunit *u = gpool_node(p, idx);
    u->index = idx;
    return u;
}

/* A node, or NULL with *full (the capacity is reached) or without (no memory). */
static struct gunit *gpool_get(struct gpool *p, bool *full)
{
    uint32_t used = atomic_load_explicit(&p->used, memory_order_seq_cst);
    do {
        if (used >= p->capacity) {
            *full = true;
            return NULL;
        }
    } while (!atomic_compare_exchange_weak_explicit(&p->used, &used, used + 1, memory_order_seq_cst,
                                                    memory_order_seq_cst));
    uint64_t top = atomic_load_explicit(&p->free_top, memory_order_acquire);
    while ((uint32_t)top) {
        struct gunit *u = gpool_node(p, (uint32_t)top - 1);
        uint64_t next = ((top >> 32) + 1) << 32 | atomic_load_explicit(&u->next_free, memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&p->free_top, &top, next, memory_order_acquire,
                                                  memory_order_acquire))
            return u;
    }
    struct gunit *u = gpool_bump(p); /* the free list is empty: every node made is in use */
    if (!u) {
        atomic_fetch_sub_explicit(&p->used, 1, memory_order_seq_cst);
        *full = false;
    }
    return u;
}

/* Back on the free list, then `used` drops (in that order: see gpool_get). */
static void gpool_put(struct gpool *p, struct gunit *u)
{
    uint64_t top = atomic_load_explicit(&p->free_top, memory_order_relaxed), next;
    do {
        atomic_store_explicit(&u->next_free, (uint32_t)top, memory_order_relaxed);
        next = ((top >> 32) + 1) << 32 | (u->index + 1);
    } while (!atomic_compare_exchange_weak_explicit(&p->free_top, &top, next, memory_order_release,
                                                    memory_order_relaxed));
    atomic_fetch_sub_explicit(&p->used, 1, memory_order_seq_cst); /* pairs with park()'s load */
}

/* A forward unit's last reference is gone: back to its producer, then room. */
static void unit_done(struct urt_graph *g, struct gx *x, struct gunit *u)
{
    if (x->d.release)
        x->d.release(u->data, u->emitted, x->d.release_arg);
    gpool_put(&x->pool, u);
    if (atomic_load_explicit(&x->waiters, memory_order_seq_cst)) /* pairs with park() */
        gexec_wake(g, x);
}

/* ---- statistics ------------------------------------------------------------------------------- */

void gexec_flush_stats(struct urt_graph_ctx *c)
{
    struct gstep *s = c->s;
    uint64_t *v[] = {&c->n_run, &c->n_yield, &c->n_in, &c->n_out, &c->n_rows};
    _Atomic uint64_t *d[] = {&s->st_run, &s->st_yields, &s->st_in, &s->st_out, &s->st_rows};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (*v[i]) {
            atomic_fetch_add_explicit(d[i], *v[i], memory_order_relaxed);
            *v[i] = 0;
        }
}

/* A partition or unit the step will not be called for again: never started
 * (skipped), or started and cut short (it yielded, then the step stopped). */
static void count_stopped(struct urt_graph_ctx *c)
{
    atomic_fetch_add_explicit(c->started ? &c->s->st_cut : &c->s->st_skipped, 1, memory_order_relaxed);
}

/* The task will not call the step again for this state: hand it to the
 * step's cleanup (urt_graph_cleanup_fn), once; the slot is NULL after. */
void gexec_cleanup(struct urt_graph_ctx *c)
{
    if (!c->state)
        return;
    if (c->s->d.cleanup) {
        c->cleaning = true;
        c->s->d.cleanup(c, c->s->d.arg);
        c->cleaning = false;
    }
    c->state = NULL;
}

/* ---- spawning, parking, waking ------------------------------------------------------------------- */

static enum urt_task_result ctx_run(struct urt_graph_ctx *c);

int gexec_spawn(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    int err = s->d.lane ? urt_lane_spawn(s->d.lane, gexec_task, gexec_task_cancel, c, 0)
                        : urt_job_spawn(g->job, gexec_task, gexec_task_cancel, c, 0);
    if (err) {
        /* -ECANCELED: the job is stopping already; anything else aborts the graph */
        gctl_abort(g, err);
        ctx_run(c); /* stopping: finishes without calling the step */
    }
    return err;
}

static void resume(struct urt_graph_ctx *c)
{
    if (c->kind == CTX_PROC)
        gproc_notify(c);
    else
        gexec_spawn(c);
}

void gexec_wake(struct urt_graph *g, struct gx *x)
{
    (void)g;
    struct urt_graph_ctx *c = atomic_exchange_explicit(&x->waiters, NULL, memory_order_seq_cst);
    while (c) {
        struct urt_graph_ctx *next = c->wnext;
        resume(c);
        c = next;
    }
}

/* The producer's emit found x full and it yielded: wait for room without a
 * task (the context keeps its live count). */
void gexec_park(struct urt_graph_ctx *c)
{
    struct gx *x = c->blocked;
    struct urt_graph_ctx *head = atomic_load_explicit(&x->waiters, memory_order_relaxed);
    do {
        c->wnext = head;
    } while (!atomic_compare_exchange_weak_explicit(&x->waiters, &head, c, memory_order_seq_cst,
                                                    memory_order_relaxed));
    if (atomic_load_explicit(&x->pool.used, memory_order_seq_cst) < x->pool.capacity ||
        gctl_stopping(c->g, c->s) || atomic_load_explicit(&x->limit_hit, memory_order_seq_cst))
        gexec_wake(c->g, x);
}

/* After a step function's return: URT_TASK_YIELD (keep the task), or park. */
static enum urt_task_result yielded(struct urt_graph_ctx *c)
{
    c->n_yield++;
    if (!c->blocked)
        return URT_TASK_YIELD;
    gexec_flush_stats(c);
    gexec_park(c); /* from here on another task may run c */
    return URT_TASK_DONE;
}

/* DONE or YIELD; any other result fails the graph (gctl_abort). */
static int call_step(struct urt_graph_ctx *c, urt_graph_step_fn *fn)
{
    c->blocked = NULL;
    int r = fn(c, c->s->d.arg);
    if (r == URT_STEP_YIELD)
        return URT_STEP_YIELD;
    c->n_run++;
    if (r != URT_STEP_DONE) {
        if (r > 0)
            urt__error(-EINVAL, "step '%s' returned %d (not URT_STEP_DONE, URT_STEP_YIELD or a -errno)",
                       gstep_name(c->s), r);
        gctl_abort(c->g, r);
    }
    return URT_STEP_DONE;
}

static void init_cursors(struct urt_graph_ctx *c)
{
    const struct gstep *s = c->s;
    for (uint32_t k = 0; k < c->n_cur; k++) {
        struct gx *x = c->g->xs[s->in_x[k]];
        c->cur[k] = NULL;
        if (x->d.kind == URT_EXCHANGE_BROADCAST)
            c->cur[k] = atomic_load_explicit(&x->heads[0], memory_order_acquire);
        else if (x->d.kind == URT_EXCHANGE_SHUFFLE && c->kind == CTX_PART)
            c->cur[k] = atomic_load_explicit(&x->heads[c->partition], memory_order_acquire);
    }
}

/* ---- the runners ------------------------------------------------------------------------------- */

static enum urt_task_result run_source(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    for (;;) {
        if (gctl_stopping(g, s)) {
            count_stopped(c);
            break; /* its state, if any, goes to the cleanup when the step completes */
        }
        if (!c->started) {
            init_cursors(c);
            c->started = true;
        }
        if (call_step(c, s->d.fn) == URT_STEP_YIELD)
            return yielded(c);
        if (gctl_stopping(g, s))
            break;
        uint32_t next = atomic_fetch_add_explicit(&s->next_part, 1, memory_order_relaxed);
        if (next >= s->assumed)
            break;
        gexec_cleanup(c); /* the partition's last call returned */
        c->partition = next; /* this task admits the next partition */
        c->started = false;
        return URT_TASK_YIELD;
    }
    gexec_flush_stats(c);
    glive_put(g, s, 1); /* last touch */
    return URT_TASK_DONE;
}

static enum urt_task_result run_part(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    if (gctl_stopping(g, s)) {
        count_stopped(c);
    } else {
        if (!c->started) {
            init_cursors(c);
            c->started = true;
        }
        if (call_step(c, c->kind == CTX_PREPARE ? s->d.prepare : s->d.fn) == URT_STEP_YIELD)
            return yielded(c);
    }
    gexec_flush_stats(c);
    if (c->kind == CTX_PREPARE && atomic_fetch_sub_explicit(&s->prep_live, 1, memory_order_acq_rel) == 1)
        gctl_step_news(s, g, N_PREPARED);
    glive_put(g, s, 1); /* last touch */
    return URT_TASK_DONE;
}

/* The stream's next unit: from its FIFO, else the whole inbox reversed. */
static struct gunit *stream_take(struct urt_graph_ctx *c)
{
    uint32_t link = c->s->in_link[c->s->fwd_port];
    if (!c->fifo) {
        struct gunit *u = atomic_exchange_explicit(&c->inbox, NULL, memory_order_acquire), *rev = NULL;
        while (u) {
            struct gunit *next = u->links[link];
            u->links[link] = rev;
            rev = u;
            u = next;
        }
        c->fifo = rev;
    }
    struct gunit *u = c->fifo;
    if (u)
        c->fifo = u->links[link];
    return u;
}

/* Runs the current unit, or skips it when stopping; false: the step yielded. */
static bool stream_unit(struct urt_graph_ctx *c)
{
    struct gstep *s = c->s;
    if (gctl_stopping(c->g, s)) {
        count_stopped(c);
        return true;
    }
    if (!c->started) {
        init_cursors(c);
        c->unit_taken = false;
        c->started = true;
        c->n_in++;
    }
    return call_step(c, s->d.fn) != URT_STEP_YIELD;
}

static void stream_unit_done(struct urt_graph_ctx *c)
{
    struct gunit *u = c->unit;
    c->unit = NULL;
    if (atomic_fetch_sub_explicit(&u->refs, 1, memory_order_acq_rel) == 1)
        unit_done(c->g, c->g->xs[c->s->in_x[c->s->fwd_port]], u);
}

/* Gives back `done` finished units: their pending and live counts. Returns
 * the units still pending; at <= 0 the stream is idle and this was the
 * task's last touch. */
static int64_t stream_account(struct urt_graph_ctx *c, int64_t done)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    gexec_flush_stats(c);
    int64_t left = atomic_fetch_sub_explicit(&c->pending, done, memory_order_acq_rel) - done;
    glive_put(g, s, done);
    return left;
}

static enum urt_task_result run_stream(struct urt_graph_ctx *c)
{
    int64_t done = 0;
    for (;;) {
        bool stopping = gctl_stopping(c->g, c->s);
        while (done < G_STREAM_BATCH || stopping) {
            if (!c->unit && !(c->unit = stream_take(c)))
                break;
            if (!stream_unit(c)) {
                /* yielded mid-unit: it stays pending, so left > 0 here */
                stream_account(c, done);
                return yielded(c);
            }
            c->started = false;
            stream_unit_done(c);
            done++;
        }
        if (stream_account(c, done) <= 0)
            return URT_TASK_DONE;
        if (done >= G_STREAM_BATCH)
            return URT_TASK_YIELD; /* more units: let the worker's other tasks run */
        done = 0;
    }
}

static enum urt_task_result ctx_run(struct urt_graph_ctx *c)
{
    switch (c->kind) {
    case CTX_SOURCE:
        return run_source(c);
    case CTX_STREAM:
        return run_stream(c);
    case CTX_PROC:
        return gproc_run(c);
    default:
        return run_part(c);
    }
}

enum urt_task_result gexec_task(struct urt_task *t, void *arg)
{
    struct urt_graph_ctx *c = arg;
    struct gexec e;
    (void)t;
    gexec_enter(&e, c->g);
    enum urt_task_result r = ctx_run(c);
    gexec_leave(&e);
    return r;
}

/* The task was cancelled (its job was, or the runtime is being destroyed):
 * finish the context without the step. */
void gexec_task_cancel(struct urt_task *t, void *arg)
{
    struct urt_graph_ctx *c = arg;
    struct gexec e;
    (void)t;
    gexec_enter(&e, c->g);
    gctl_abort(c->g, -ECANCELED);
    ctx_run(c);
    gexec_leave(&e);
}

/* ---- started by the controller ------------------------------------------------------------------ */

static bool part_has_data(const struct urt_graph *g, const struct gstep *s, uint32_t p)
{
    for (uint32_t k = 0; k < s->n_in; k++) {
        struct gx *x = g->xs[s->in_x[k]];
        if (x->d.kind == URT_EXCHANGE_SHUFFLE && atomic_load_explicit(&x->heads[p], memory_order_relaxed))
            return true;
    }
    return false;
}

void gexec_start_step(struct urt_graph *g, struct gstep *s)
{
    if (s->d.processor) {
        gproc_start_step(g, s);
        return;
    }
    if (s->main == MAIN_NONE) {
        atomic_store_explicit(&s->next_part, s->n_ctx, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->live, s->n_ctx, memory_order_relaxed);
        for (uint32_t i = 0; i < s->n_ctx; i++)
            gexec_spawn(s->ctx[i]);
        return;
    }
    if (s->main != MAIN_SHUFFLE)
        return; /* forward consumers' streams start with their units */
    uint32_t ran = 0;
    for (uint32_t p = 0; p < s->n_ctx; p++)
        ran += (s->d.flags & URT_STEP_TAKE_COGROUP) || part_has_data(g, s, p);
    atomic_store_explicit(&s->decided, ran, memory_order_relaxed); /* P4 */
    atomic_fetch_add_explicit(&s->live, ran, memory_order_relaxed);
    for (uint32_t p = 0; p < s->n_ctx; p++)
        if ((s->d.flags & URT_STEP_TAKE_COGROUP) || part_has_data(g, s, p))
            gexec_spawn(s->ctx[p]);
}

void gexec_start_prepare(struct urt_graph *g, struct gstep *s)
{
    (void)g;
    uint32_t n = s->d.prepare ? s->n_side : 0;
    atomic_store_explicit(&s->prep_live, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->live, n, memory_order_relaxed);
    for (uint32_t i = 0, k = 0; k < s->n_in && i < n; k++)
        if (g->xs[s->in_x[k]]->d.kind == URT_EXCHANGE_BROADCAST) {
            s->prep[i]->partition = k; /* the side input port it prepares */
            gexec_spawn(s->prep[i++]);
        }
}

/* A forward consumer with side inputs keeps its streams shut (pending
 * starts at 1) until they are prepared (or it completes): units that arrive
 * earlier wait in the inbox. Without side inputs a stream starts with its
 * first unit, from the emitter: the data path never waits for the
 * controller (a preempted drainer would hold a LIMIT back while its scan
 * goes on). Controller only, once per step. */
void gexec_open_streams(struct urt_graph *g, struct gstep *s)
{
    (void)g;
    if (s->main != MAIN_FORWARD || !s->n_side)
        return;
    for (uint32_t i = 0; i < s->n_ctx; i++)
        if (atomic_fetch_sub_explicit(&s->ctx[i]->pending, 1, memory_order_acq_rel) > 1)
            gexec_spawn(s->ctx[i]);
}

void gexec_release_blocking(struct urt_graph *g, struct gx *x)
{
    (void)g;
    uint32_t n = x->d.kind == URT_EXCHANGE_SHUFFLE ? x->parts : 1;
    for (uint32_t p = 0; p < n && x->d.release; p++)
        for (struct gunit *u = atomic_load_explicit(&x->heads[p], memory_order_acquire); u; u = u->next)
            x->d.release(u->data, u->emitted, x->d.release_arg);
}

/* ---- inside a task: the public calls -------------------------------------------------------------- */

URT_API uint32_t urt_graph_partition(const struct urt_graph_ctx *ctx)
{
    return ctx ? ctx->partition : 0;
}

URT_API uint32_t urt_graph_partitions(const struct urt_graph_ctx *ctx)
{
    return ctx ? atomic_load_explicit(&ctx->s->decided, memory_order_relaxed) : 0;
}

URT_API urt_graph *urt_graph_of(const struct urt_graph_ctx *ctx)
{
    return ctx ? ctx->g : NULL;
}

URT_API int urt_graph_step_of(const struct urt_graph_ctx *ctx)
{
    return ctx ? ctx->s->id : -1;
}

URT_API void **urt_graph_task_state(struct urt_graph_ctx *ctx)
{
    return ctx ? &ctx->state : NULL;
}

URT_API bool urt_graph_stopping(const struct urt_graph_ctx *ctx)
{
    return ctx && gctl_stopping(ctx->g, ctx->s);
}

URT_API int urt_graph_complete(struct urt_graph_ctx *ctx)
{
    if (!ctx)
        return urt__error(-EINVAL, "urt_graph_complete: ctx is NULL");
    if (atomic_exchange_explicit(&ctx->s->stop, 1, memory_order_seq_cst))
        return urt__error(-EALREADY, "urt_graph_complete: step '%s' was stopped already", gstep_name(ctx->s));
    gctl_stop_eager(ctx->g, ctx->s);
    gctl_step_news(ctx->s, ctx->g, N_STOP);
    return 0;
}

static int next_of(struct urt_graph_ctx *c, uint32_t k, struct urt_graph_unit *u)
{
    struct gunit *n = c->cur[k];
    if (!n)
        return 0;
    c->cur[k] = n->next;
    u->data = n->data;
    u->rows = n->rows;
    u->port = k;
    c->n_in += c->kind == CTX_PART && c->g->xs[c->s->in_x[k]]->d.kind == URT_EXCHANGE_SHUFFLE;
    return 1;
}

URT_API int urt_graph_next(struct urt_graph_ctx *ctx, uint32_t port, struct urt_graph_unit *u)
{
    if (!ctx || !u)
        return urt__error(-EINVAL, "urt_graph_next: %s is NULL", ctx ? "u" : "ctx");
    if (ctx->kind == CTX_PROC)
        return urt__error(-EINVAL, "urt_graph_next: step '%s' is a processor (use urt_graph_pull)", gstep_name(ctx->s));
    if (port != URT_GRAPH_ANY_PORT && port >= ctx->s->n_in)
        return urt__error(-EINVAL, "urt_graph_next: port %u: step '%s' has %u input ports", port,
                          gstep_name(ctx->s), ctx->s->n_in);
    if (ctx->kind == CTX_STREAM) {
        uint32_t fport = ctx->s->fwd_port;
        if (!ctx->unit_taken && ctx->unit && (port == URT_GRAPH_ANY_PORT || port == fport)) {
            ctx->unit_taken = true;
            *u = (struct urt_graph_unit){.data = ctx->unit->data, .rows = ctx->unit->rows, .port = fport};
            return 1;
        }
        if (port == URT_GRAPH_ANY_PORT || port == fport)
            return 0;
        return next_of(ctx, port, u);
    }
    if (port != URT_GRAPH_ANY_PORT)
        return next_of(ctx, port, u);
    uint32_t main_port = ctx->kind == CTX_PREPARE ? ctx->partition : UINT32_MAX;
    for (uint32_t k = 0; k < ctx->n_cur; k++) {
        bool is_main = ctx->g->xs[ctx->s->in_x[k]]->d.kind == URT_EXCHANGE_SHUFFLE;
        if ((main_port == UINT32_MAX ? is_main : k == main_port) && next_of(ctx, k, u))
            return 1;
    }
    return 0;
}

/* ---- emit ------------------------------------------------------------------------------------------ */

static uint32_t forward_partition(const struct gx *x, const struct urt_graph_ctx *c)
{
    if (x->scan_src)
        return c->partition % x->parts;
    for (uint32_t k = 0; k < x->n_prod; k++)
        if (x->prod[k] == c->s->id)
            return x->prod_offset[k] + c->partition;
    return 0;
}

/* The limit's share of rows for this unit (0: the limit was reached before). */
static uint32_t forward_limit(struct urt_graph_ctx *c, struct gx *x, uint32_t rows)
{
    uint64_t limit = x->d.limit_rows, prev = atomic_fetch_add_explicit(&x->rows, rows, memory_order_relaxed);
    if (prev >= limit)
        return 0;
    if (prev + rows < limit)
        return rows;
    /* the producer completes early, unless it has side effects (DELIVER) */
    if (!atomic_exchange_explicit(&x->limit_hit, 1, memory_order_seq_cst) && !(c->s->d.flags & URT_STEP_DELIVER) &&
        !atomic_exchange_explicit(&c->s->stop, 1, memory_order_seq_cst)) {
        gctl_stop_eager(c->g, c->s);
        gctl_step_news(c->s, c->g, N_STOP);
    }
    return (uint32_t)(limit - prev);
}

/* Pushes u to every consumer that still takes units; the count that took it. */
static uint32_t forward_deliver(struct urt_graph_ctx *c, struct gx *x, struct gunit *u)
{
    uint32_t took = 0;
    for (uint32_t k = 0; k < x->n_cons; k++) {
        struct gstep *cs = c->g->steps[x->cons[k]];
        if (atomic_load_explicit(&cs->stop, memory_order_acquire) || !glive_get(cs, 1))
            continue;
        struct urt_graph_ctx *stream = cs->ctx[u->partition];
        struct gunit *head = atomic_load_explicit(&stream->inbox, memory_order_relaxed);
        do {
            u->links[k] = head;
        } while (!atomic_compare_exchange_weak_explicit(&stream->inbox, &head, u, memory_order_release,
                                                        memory_order_relaxed));
        took++;
        if (atomic_fetch_add_explicit(&stream->pending, 1, memory_order_acq_rel) == 0)
            gexec_spawn(stream); /* the 0 -> 1 edge: this stream had no task */
    }
    return took;
}

static void forward_provided(struct urt_graph_ctx *c, struct gx *x)
{
    if (atomic_load_explicit(&x->provided, memory_order_relaxed) ||
        atomic_exchange_explicit(&x->provided, 1, memory_order_relaxed))
        return;
    for (uint32_t k = 0; k < x->n_cons; k++)
        gctl_step_news(c->g->steps[x->cons[k]], c->g, N_PROVIDED);
}

static int emit_forward(struct urt_graph_ctx *c, struct gx *x, void *data, uint32_t rows)
{
    if (atomic_load_explicit(&x->limit_hit, memory_order_relaxed))
        return urt__error(-EPIPE, "urt_graph_emit: exchange %d reached its limit", x->id);
    bool full = false;
    struct gunit *u = gpool_get(&x->pool, &full);
    if (!u && full) {
        c->blocked = x; /* the step yields: park it (yielded) */
        return urt__error(-EAGAIN, "urt_graph_emit: exchange %d holds its capacity of %u units (yield)", x->id,
                          x->pool.capacity);
    }
    if (!u) {
        gctl_abort(c->g, -ENOMEM);
        return urt__error(-ENOMEM, "urt_graph_emit: no memory for exchange %d's units (the graph is aborted)", x->id);
    }
    uint32_t n = x->d.limit_rows ? forward_limit(c, x, rows) : rows;
    u->data = data;
    u->rows = n;
    u->emitted = rows;
    u->partition = forward_partition(x, c);
    atomic_store_explicit(&u->refs, x->n_cons + 1, memory_order_relaxed); /* +1: ours while delivering */
    uint32_t took = n || !rows ? forward_deliver(c, x, u) : 0;
    uint32_t drop = x->n_cons + 1 - took;
    if (!took) {
        gpool_put(&x->pool, u);
        return urt__error(-EPIPE, "urt_graph_emit: no consumer of exchange %d takes units", x->id);
    }
    c->n_out++;
    c->n_rows += n;
    forward_provided(c, x);
    if (atomic_fetch_sub_explicit(&u->refs, drop, memory_order_acq_rel) == drop)
        unit_done(c->g, x, u); /* every consumer is done with it already */
    return 0;
}

static int emit_blocking(struct urt_graph_ctx *c, struct gx *x, uint32_t partition, void *data, uint32_t rows)
{
    bool full = false;
    struct gunit *u = gpool_get(&x->pool, &full);
    if (!u) { /* lost to the consumers: the graph fails, whatever the step does next */
        gctl_abort(c->g, full ? -ENOBUFS : -ENOMEM);
        return urt__error(full ? -ENOBUFS : -ENOMEM, "urt_graph_emit: exchange %d %s (the graph is aborted)", x->id,
                          full ? "holds its capacity" : "has no memory for a unit");
    }
    u->data = data;
    u->rows = u->emitted = rows;
    u->partition = partition;
    struct gunit *_Atomic *head = &x->heads[x->d.kind == URT_EXCHANGE_SHUFFLE ? partition : 0];
    struct gunit *h = atomic_load_explicit(head, memory_order_relaxed);
    do {
        u->next = h;
    } while (!atomic_compare_exchange_weak_explicit(head, &h, u, memory_order_release, memory_order_relaxed));
    c->n_out++;
    c->n_rows += rows;
    return 0;
}

URT_API int urt_graph_emit(struct urt_graph_ctx *ctx, uint32_t port, uint32_t partition, void *data, uint32_t rows)
{
    if (!ctx)
        return urt__error(-EINVAL, "urt_graph_emit: ctx is NULL");
    if (ctx->cleaning)
        return urt__error(-EINVAL, "urt_graph_emit: called from step '%s''s cleanup", gstep_name(ctx->s));
    if (port >= ctx->s->n_out)
        return urt__error(-EINVAL, "urt_graph_emit: port %u: step '%s' has %u output ports", port, gstep_name(ctx->s),
                          ctx->s->n_out);
    struct gx *x = ctx->g->xs[ctx->s->out_x[port]];
    if (x->port_edge)
        return urt__error(-EINVAL, "urt_graph_emit: port %u of step '%s' joins two processors (use urt_graph_push)",
                          port, gstep_name(ctx->s));
    if (x->d.kind == URT_EXCHANGE_SHUFFLE && partition >= x->parts)
        return urt__error(-EINVAL, "urt_graph_emit: partition %u: the shuffle of port %u has %u", partition, port,
                          x->parts);
    if (atomic_load_explicit(&ctx->g->abort, memory_order_acquire) || urt_job_cancelled(ctx->g->job))
        return urt__error(-EPIPE, "urt_graph_emit: the graph is being aborted");
    if (x->d.kind == URT_EXCHANGE_FORWARD)
        return emit_forward(ctx, x, data, rows);
    return emit_blocking(ctx, x, partition, data, rows);
}
