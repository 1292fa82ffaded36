/*
 * graph/exec.c — the tasks of a task graph (SPEC C16): its contexts' runners,
 * forward streams, spawning, parking and waking; the calls a step makes
 * inside its task (but emit: graph/emit.c).
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
 * submitted again only when no task of it exists any more (a stream taken
 * from S_IDLE, a parked producer's wake-up, a processor's scheduling word),
 * or keeps its task by URT_TASK_YIELD.
 *
 * Forward: a consumer step's partition is a stream, one word (`inbox`) says
 * who owns it and holds the units that arrived:
 *   S_IDLE   no task owns it, nothing queued;
 *   NULL     a task owns it (queued, running, parked), nothing new queued;
 *   S_SHUT   side inputs not prepared: units wait, nobody owns it;
 *   a unit   units queued (a stack through the unit's link of this
 *            consumer), on top of one of the three.
 * A producer pushes with one CAS (emit.c's stream_push; the word has a
 * cache line of its own); the push that finds S_IDLE (bottom link NULL)
 * owns the stream: it takes one count of the step's `live` for it and
 * spawns its task — units pushed on an owned stream need no task and no
 * count (the owner's covers them). The owner takes the stack whole (an
 * exchange with NULL), reverses it into arrival order and processes its
 * units one at a time, G_STREAM_BATCH per run; with nothing left it gives
 * the stream up (CAS NULL -> S_IDLE), then its count (its last touch). If a
 * push finds S_IDLE on a step that completed (only a stopped step completes
 * while a producer runs), the pusher runs the stream in place, releasing
 * its units unprocessed, without a count. The controller opens a shut
 * stream (gexec_open_streams) by taking the word (NULL: it owns it), then
 * starts a task for what waited or gives it up. A finished unit goes back
 * at once (its release callback, then its node: room); with two or more
 * consumer steps a unit is counted in `refs` and the last consumer gives it
 * back.
 *
 * Back-pressure: a producer whose emit found the pool full returns
 * URT_STEP_YIELD; its task is parked (gexec_park: the Dekker pairing with a
 * release is emit.c's) and resumed by the release that makes room.
 * Stopping and aborting wake the waiters the same way (stop stored before
 * the waiters are taken; the parker loads stop after its push).
 *
 * Memory ordering, besides the above:
 *  - live (per step): glive_get is a relaxed CAS that never moves it from 0
 *    (a completed step accepts nothing); glive_put is acq_rel, the put that
 *    reaches 0 posts N_TASKS_DONE, so the controller sees every task's
 *    writes (emitted units, shuffle stacks) through the news' release/acquire.
 *  - inbox: the push is an acq_rel CAS (release: the unit's fields; acquire:
 *    the previous owner's writes to the stream, when it finds S_IDLE); the
 *    take an acquire exchange; giving up a release CAS.
 *  - waiters: seq_cst CAS push, seq_cst exchange take (the pairing above).
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

_Thread_local struct gexec *gexec_cur URT_TLS_IE;

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
    gemit_forget(c); /* emit refuses in the cleanup: no fast path */
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
    if ((uint32_t)atomic_load_explicit(&x->pool.free_top, memory_order_seq_cst) ||
        atomic_load_explicit(&x->pool.bump, memory_order_relaxed) < x->pool.capacity || gctl_stopping(c->g, c->s) ||
        atomic_load_explicit(&x->limit_hit, memory_order_seq_cst))
        gexec_wake(c->g, x);
}

/* After a step function's return: URT_TASK_YIELD (keep the task), or park. */
static enum urt_task_result yielded(struct urt_graph_ctx *c)
{
    c->n_yield++;
    /* Its free nodes are room for the others: a step that yields may wait
     * for another producer of the same exchange, or be parked. */
    gemit_cache_return(c);
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
        gemit_forget(c);     /* its forward target may be another partition */
        c->partition = next; /* this task admits the next partition */
        c->started = false;
        return URT_TASK_YIELD;
    }
    gemit_cache_return(c);
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
    gemit_cache_return(c);
    gexec_flush_stats(c);
    if (c->kind == CTX_PREPARE && atomic_fetch_sub_explicit(&s->prep_live, 1, memory_order_acq_rel) == 1)
        gctl_step_news(s, g, N_PREPARED);
    glive_put(g, s, 1); /* last touch */
    return URT_TASK_DONE;
}

/* A stack of arrived units (through link), down to its end marker, in
 * arrival order. */
static struct gunit *stream_reverse(struct gunit *u, uint32_t link)
{
    struct gunit *rev = NULL;
    while (!gunit_end(u)) {
        struct gunit *next = u->links[link];
        u->links[link] = rev;
        rev = u;
        u = next;
    }
    return rev;
}

/* The stream's next unit: from its FIFO, else what arrived (the owner takes
 * the stack whole, leaving NULL: still its own). */
static struct gunit *stream_take(struct urt_graph_ctx *c)
{
    if (!c->fifo && atomic_load_explicit(&c->inbox, memory_order_relaxed))
        c->fifo = stream_reverse(atomic_exchange_explicit(&c->inbox, NULL, memory_order_acquire), c->link);
    struct gunit *u = c->fifo;
    if (u)
        c->fifo = u->links[c->link];
    return u;
}

/* Runs the current unit, or skips it when stopping; false: the step yielded.
 * The job's cancel (a call into the scheduler) was read for the batch
 * (run_stream: `stopping`); the step's stop and the graph's abort, two
 * loads, are read per unit. The step sees the job's cancel at once anyway
 * (urt_graph_stopping, emit's -EPIPE). */
static bool stream_unit(struct urt_graph_ctx *c, struct urt_graph *g, struct gstep *s, bool stopping)
{
    if (stopping || atomic_load_explicit(&s->stop, memory_order_acquire) ||
        atomic_load_explicit(&g->abort, memory_order_acquire)) {
        count_stopped(c);
        return true;
    }
    if (!c->started) {
        if (s->n_side)
            init_cursors(c); /* the side inputs from their start, for each unit */
        c->avail = c->unit;
        c->started = true;
        c->n_in++;
    }
    return call_step(c, s->d.fn) != URT_STEP_YIELD;
}

/* The unit is finished: this consumer's reference (the only one with one
 * consumer step) goes. The last reference's node joins the task's freed
 * chain (after its release callback): the batch gives the chain back with
 * one CAS (stream_give_back), so the free list's line does not cross to the
 * producer's CPU once per unit. */
static void stream_unit_done(struct urt_graph_ctx *c)
{
    struct gunit *u = c->unit;
    struct gx *x = c->in;
    c->unit = c->avail = NULL;
    if (x->n_cons > 1 && atomic_fetch_sub_explicit(&u->refs, 1, memory_order_acq_rel) != 1)
        return;
    gunit_release(x, u);
    /* relaxed: the chain is this task's until gpool_put_chain publishes it */
    atomic_store_explicit(&u->next_free, c->freed ? c->freed->index + 1 : 0, memory_order_relaxed);
    if (!c->freed)
        c->freed_last = u;
    c->freed = u;
}

/* The freed chain back on the input's free list, then its parked producers
 * woken (room). Before every return of run_stream: a unit the task holds is
 * room a parked producer waits for. */
static void stream_give_back(struct urt_graph_ctx *c)
{
    if (!c->freed)
        return;
    gpool_put_chain(&c->in->pool, c->freed, c->freed_last);
    c->freed = c->freed_last = NULL;
    gexec_room(c->g, c->in);
}

static bool stream_more(struct urt_graph_ctx *c)
{
    return c->fifo || atomic_load_explicit(&c->inbox, memory_order_relaxed);
}

/* Nothing left: give the stream up (NULL -> S_IDLE; release: its next owner
 * sees this task's writes), then the owner's live count — the task's last
 * touch. False: units arrived, the stream is still this task's. */
static bool stream_leave(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    bool unlive = c->unlive;
    struct gunit *none = NULL;
    c->unlive = false;
    if (!atomic_compare_exchange_strong_explicit(&c->inbox, &none, S_IDLE, memory_order_release,
                                                 memory_order_relaxed)) {
        c->unlive = unlive;
        return false;
    }
    if (!unlive)
        glive_put(g, s, 1); /* last touch */
    return true;
}

static enum urt_task_result run_stream(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    struct gstep *s = c->s;
    for (;;) {
        bool stopping = c->unlive || gctl_stopping(g, s);
        uint32_t done = 0;
        while (done < G_STREAM_BATCH || stopping) {
            if (!c->unit && !(c->unit = stream_take(c)))
                break;
            if (!stream_unit(c, g, s, stopping)) {
                stream_give_back(c);
                return yielded(c); /* yielded mid-unit: the stream stays this task's */
            }
            c->started = false;
            stream_unit_done(c);
            done++;
        }
        stream_give_back(c);
        gexec_flush_stats(c);
        if (!stopping && done >= G_STREAM_BATCH && stream_more(c))
            return URT_TASK_YIELD; /* more units: let the worker's other tasks run */
        gemit_cache_return(c);
        if (stream_leave(c))
            return URT_TASK_DONE;
    }
}

/* A unit was pushed on a stream that no task owned (emit.c): the pusher owns
 * it now. */
__attribute__((noinline)) void gexec_stream_start(struct urt_graph_ctx *c)
{
    if (glive_get(c->s, 1)) {
        gexec_spawn(c);
        return;
    }
    /* The step completed (it was stopped while this producer ran): the units
     * go back unprocessed, here, without a live count. */
    c->unlive = true;
    run_stream(c);
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

/* A forward consumer with side inputs keeps its streams shut (their inbox
 * starts S_SHUT) until they are prepared (or it completes): units that
 * arrive earlier wait in the inbox. Without side inputs a stream starts with its
 * first unit, from the emitter: the data path never waits for the
 * controller (a preempted drainer would hold a LIMIT back while its scan
 * goes on). Controller only, once per step. */
void gexec_open_streams(struct urt_graph *g, struct gstep *s)
{
    (void)g;
    if (s->main != MAIN_FORWARD || !s->n_side)
        return;
    uint32_t link = s->in_link[s->fwd_port];
    for (uint32_t i = 0; i < s->n_ctx; i++) {
        struct urt_graph_ctx *c = s->ctx[i];
        struct gunit *none = NULL;
        /* own it (S_SHUT, or units on it -> NULL), take what waited */
        c->fifo = stream_reverse(atomic_exchange_explicit(&c->inbox, NULL, memory_order_acq_rel), link);
        if (!c->fifo && atomic_compare_exchange_strong_explicit(&c->inbox, &none, S_IDLE, memory_order_release,
                                                                memory_order_relaxed))
            continue; /* nothing waited: idle */
        glive_get(s, 1); /* cannot fail: the open count is held until COMPLETING, after this */
        gexec_spawn(c);
    }
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
    c->cur[k] = n->links[0];
    u->data = n->data;
    u->rows = n->rows;
    u->port = k;
    c->n_in += c->kind == CTX_PART && c->g->xs[c->s->in_x[k]]->d.kind == URT_EXCHANGE_SHUFFLE;
    return 1;
}

URT_API int urt_graph_next(struct urt_graph_ctx *ctx, uint32_t port, struct urt_graph_unit *u)
{
    struct gunit *n;
    if (ctx && u && port == URT_GRAPH_ANY_PORT && (n = ctx->avail)) {
        ctx->avail = NULL; /* a stream's unit, the common case: as below */
        *u = (struct urt_graph_unit){.data = n->data, .rows = n->rows, .port = ctx->main_port};
        return 1;
    }
    if (!ctx || !u)
        return urt__error(-EINVAL, "urt_graph_next: %s is NULL", ctx ? "u" : "ctx");
    if (ctx->kind == CTX_PROC)
        return urt__error(-EINVAL, "urt_graph_next: step '%s' is a processor (use urt_graph_pull)", gstep_name(ctx->s));
    if (port != URT_GRAPH_ANY_PORT && port >= ctx->s->n_in)
        return urt__error(-EINVAL, "urt_graph_next: port %u: step '%s' has %u input ports", port,
                          gstep_name(ctx->s), ctx->s->n_in);
    if (ctx->kind == CTX_STREAM) {
        uint32_t fport = ctx->s->fwd_port;
        if ((n = ctx->avail) && (port == URT_GRAPH_ANY_PORT || port == fport)) {
            ctx->avail = NULL;
            *u = (struct urt_graph_unit){.data = n->data, .rows = n->rows, .port = fport};
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
