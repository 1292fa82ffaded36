/*
 * graph/emit.c — the data path of a task graph (SPEC C16): the unit pool of
 * an exchange, urt_graph_emit (forward, shuffle, broadcast) and the release
 * of blocking exchanges' units.
 *
 * Units (struct gunit) come from the exchange's pool: a free list (a
 * Treiber stack of indexes with a 32-bit tag against ABA), else a new node
 * (bump, a CAS that never passes the capacity; nodes are made 256 at a time
 * on first use). A node is in flight from its pop (or creation) until it is
 * back on the free list, so the free list and bump are the capacity count:
 * no other counter. A forward unit goes back when its last consumer
 * finished it (its release callback, then its node: room); with two or
 * more consumer steps it is counted in `refs` and the last one gives it
 * back. A stream gathers the nodes it finished and gives them back with one
 * CAS at the end of its batch, before it yields, parks or leaves (exec.c's
 * stream_give_back): until then they count as in flight, so `capacity`
 * stays a bound, and the free list's line is written once per batch, not
 * once per unit. The other way round, emit's fast path takes the whole
 * free list with one CAS (gpool_grab) into the task's `fcache` and emits
 * from it; what is left goes back (gemit_cache_return) when the step
 * yields or is parked, when the task leaves a partition, ends or leaves
 * its stream, or resolves another output — never held by a task that is
 * not running or queued to run, and never carried to another exchange, so
 * it is room the exchange's other producers get. A processor pops one node
 * at a time: its task may wait for a port while others need room.
 *
 * Shuffle and broadcast: a push onto the partition's stack (through
 * links[0]), read by the consumers after the exchange completed (they start
 * later), released by the controller when the exchange is.
 *
 * Forward emit: the unit is pushed onto the consumer's stream with one CAS
 * (the stream protocol is exec.c's: the push that finds the stream idle
 * starts it). Fast path: a task's first emit into a forward output with one
 * consumer step and no limit_rows resolves it (the exchange and the
 * consumer's stream for the task's partition, P6) in the task's context;
 * later emits there check what can refuse them (abort, the job's cancel,
 * the consumer stopped, no free node) and push — anything else takes the
 * checked way (emit_checked). A source slot forgets it when it takes another
 * partition, a cleanup before it runs (emit refuses there).
 *
 * Back-pressure (Dekker pairing, seq_cst; the parking is exec.c's): a
 * producer whose emit found the pool full returns URT_STEP_YIELD and is
 * parked: it pushes its context on the exchange's waiters, then loads the
 * free list's top (and bump). A release pushes the node on the free list,
 * then loads `waiters` and wakes them all. Either the parker sees the room
 * or the releaser sees the parker.
 *
 * Memory ordering, besides the above:
 *  - free list: pop acquire (the node's next_free, written before the push),
 *    push seq_cst (the pairing above; a chain's links are written before its
 *    one push, gpool_put_chain); next_free is a relaxed atomic, read by a pop
 *    that may lose its CAS. A node's fields are written after its pop
 *    and published by the stream push (release).
 *  - shuffle stacks: CAS release on push, acquire read; they are read after
 *    the controller ordered the consumer's start after the producers'
 *    completion.
 *  - unit refs: acq_rel; the consumer that drops the last reference calls the
 *    release callback and gives the node back.
 *  - limit: rows is a relaxed counter (each unit's share is decided by its
 *    own fetch_add); limit_hit and the producer's stop are seq_cst exchanges
 *    (the parker loads them after its push). emit_forward's relaxed early
 *    read of limit_hit is a shortcut: a stale 0 only sends the unit on to
 *    forward_limit, whose fetch_add on rows gives it no share past the limit.
 *  - provided: a once-flag. The relaxed exchange elects the one emitter
 *    that posts N_PROVIDED to the consumers (forward_provided); the post
 *    (gctl_post) carries the ordering. The controller's relaxed read in
 *    start_running is a shortcut only: a stale 0 keeps the step waiting
 *    until that news arrives, and the news is posted after the flag is set.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/graph_int.h"

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

/* A new node, or NULL with *full (capacity nodes exist) or without (no memory:
 * the index is lost, and the graph is aborted). */
static struct gunit *gpool_bump(struct gpool *p, bool *full)
{
    uint32_t idx = atomic_load_explicit(&p->bump, memory_order_relaxed);
    do {
        if (idx >= p->capacity) {
            *full = true;
            return NULL;
        }
    } while (!atomic_compare_exchange_weak_explicit(&p->bump, &idx, idx + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    void *_Atomic *slot = &p->chunks[idx >> G_CHUNK_SHIFT];
    if (!atomic_load_explicit(slot, memory_order_acquire)) {
        void *fresh = calloc(G_CHUNK, p->node_size), *none = NULL;
        if (!fresh) {
            *full = false;
            return NULL;
        }
        if (!atomic_compare_exchange_strong_explicit(slot, &none, fresh, memory_order_acq_rel, memory_order_acquire))
            free(fresh); /* another thread installed it */
    }
    struct gunit *u = gpool_node(p, idx);
    u->index = idx;
    return u;
}

/* A node from the free list, or NULL when it is empty. */
static inline struct gunit *gpool_pop(struct gpool *p)
{
    uint64_t top = atomic_load_explicit(&p->free_top, memory_order_acquire);
    while ((uint32_t)top) {
        struct gunit *u = gpool_node(p, (uint32_t)top - 1);
        uint64_t next = ((top >> 32) + 1) << 32 | atomic_load_explicit(&u->next_free, memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&p->free_top, &top, next, memory_order_acquire,
                                                  memory_order_acquire))
            return u;
    }
    return NULL;
}

/* The whole free list at once (one CAS): its first node, the rest in *rest;
 * NULL when it is empty. The pushes that built it (seq_cst RMWs on
 * free_top, one release sequence) are read by this acquire: their links
 * are visible. */
static inline struct gunit *gpool_grab(struct gpool *p, struct gunit **rest)
{
    uint64_t top = atomic_load_explicit(&p->free_top, memory_order_acquire);
    do {
        if (!(uint32_t)top)
            return NULL;
    } while (!atomic_compare_exchange_weak_explicit(&p->free_top, &top, ((top >> 32) + 1) << 32,
                                                    memory_order_acquire, memory_order_acquire));
    struct gunit *u = gpool_node(p, (uint32_t)top - 1);
    uint32_t next = atomic_load_explicit(&u->next_free, memory_order_relaxed);
    *rest = next ? gpool_node(p, next - 1) : NULL;
    return u;
}

void gemit_cache_return(struct urt_graph_ctx *c)
{
    struct gunit *first = c->fcache, *last = first;
    if (!first)
        return;
    struct gpool *p = &c->fw_x->pool;
    for (uint32_t next; (next = atomic_load_explicit(&last->next_free, memory_order_relaxed));)
        last = gpool_node(p, next - 1);
    c->fcache = NULL;
    gpool_put_chain(p, first, last);
    gexec_room(c->g, c->fw_x);
}

void gemit_forget(struct urt_graph_ctx *c)
{
    gemit_cache_return(c); /* they are fw_x's free nodes */
    c->fw_x = NULL;
}

/* A node from the free list, else a new one; NULL as gpool_bump. */
static struct gunit *gpool_get(struct gpool *p, bool *full)
{
    struct gunit *u = gpool_pop(p);
    return u ? u : gpool_bump(p, full);
}


void gexec_release_blocking(struct urt_graph *g, struct gx *x)
{
    (void)g;
    uint32_t n = x->d.kind == URT_EXCHANGE_SHUFFLE ? x->parts : 1;
    for (uint32_t p = 0; p < n && x->d.release; p++)
        for (struct gunit *u = atomic_load_explicit(&x->heads[p], memory_order_acquire); u; u = u->links[0])
            x->d.release(u->data, u->emitted, x->d.release_arg);
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

/* Queues u on a stream (consumer k of its exchange): one CAS. The push that
 * finds the stream idle owns it and starts it (exec.c's stream protocol). */
static void stream_push(struct urt_graph_ctx *stream, uint32_t k, struct gunit *u)
{
    struct gunit *head = atomic_load_explicit(&stream->inbox, memory_order_relaxed);
    do {
        u->links[k] = head == S_IDLE ? NULL : head;
    } while (!atomic_compare_exchange_weak_explicit(&stream->inbox, &head, u, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (head == S_IDLE)
        gexec_stream_start(stream);
}

/* Pushes u to partition p of every consumer that still takes units; the
 * count that took it. With one consumer step u is the consumer's once
 * pushed: not touched after. */
static uint32_t forward_deliver(struct urt_graph_ctx *c, struct gx *x, uint32_t p, struct gunit *u)
{
    uint32_t took = 0;
    for (uint32_t k = 0; k < x->n_cons; k++) {
        struct gstep *cs = c->g->steps[x->cons[k]];
        if (atomic_load_explicit(&cs->stop, memory_order_acquire))
            continue;
        stream_push(cs->ctx[p], k, u);
        took++;
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
    uint32_t p = forward_partition(x, c);
    if (x->n_cons > 1) /* +1: ours while delivering */
        atomic_store_explicit(&u->refs, x->n_cons + 1, memory_order_relaxed);
    uint32_t took = n || !rows ? forward_deliver(c, x, p, u) : 0;
    if (!took) {
        gpool_put(&x->pool, u);
        gexec_room(c->g, x);
        return urt__error(-EPIPE, "urt_graph_emit: no consumer of exchange %d takes units", x->id);
    }
    c->n_out++;
    c->n_rows += n;
    forward_provided(c, x);
    uint32_t drop = x->n_cons + 1 - took;
    if (x->n_cons > 1 && atomic_fetch_sub_explicit(&u->refs, drop, memory_order_acq_rel) == drop)
        gunit_done(c->g, x, u); /* every consumer is done with it already */
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
    struct gunit *_Atomic *head = &x->heads[x->d.kind == URT_EXCHANGE_SHUFFLE ? partition : 0];
    struct gunit *h = atomic_load_explicit(head, memory_order_relaxed);
    do {
        u->links[0] = h;
    } while (!atomic_compare_exchange_weak_explicit(head, &h, u, memory_order_release, memory_order_relaxed));
    c->n_out++;
    c->n_rows += rows;
    return 0;
}

/* The emit of a task into the forward output it resolved (fw_*: one
 * consumer step, no limit_rows): what emit_checked does there when nothing
 * stands in the way — a node from the free list, the push. 1: something
 * might (the graph aborting or cancelled, the consumer stopped, no free
 * node: create one, or -EAGAIN): emit_checked decides. */
static inline int emit_fast(struct urt_graph_ctx *c, void *data, uint32_t rows)
{
    struct gx *x = c->fw_x;
    struct urt_graph_ctx *to = c->fw_to;
    if (atomic_load_explicit(&c->g->abort, memory_order_acquire) || urt_job_cancelled(c->g->job) ||
        atomic_load_explicit(&to->s->stop, memory_order_acquire))
        return 1;
    struct gunit *u = c->fcache;
    if (u) { /* ours alone since the grab (whose acquire made its links visible): relaxed */
        uint32_t next = atomic_load_explicit(&u->next_free, memory_order_relaxed);
        c->fcache = next ? gpool_node(&x->pool, next - 1) : NULL;
    } else if (!(u = c->kind == CTX_PROC ? gpool_pop(&x->pool) : gpool_grab(&x->pool, &c->fcache))) {
        return 1;
    }
    u->data = data;
    u->rows = u->emitted = rows;
    stream_push(to, 0, u);
    c->n_out++;
    c->n_rows += rows; /* `provided` is set: the fast path follows an accepted emit (emit_checked) */
    return 0;
}

/* Later emits of ctx into forward x (port) take emit_fast when x has one
 * consumer step and no limit. */
static void emit_resolve(struct urt_graph_ctx *ctx, uint32_t port, struct gx *x)
{
    if (x->n_cons != 1 || x->d.limit_rows)
        return;
    if (ctx->fw_x != x)
        gemit_cache_return(ctx); /* the free nodes it holds are the old output's */
    ctx->fw_x = x;
    ctx->fw_port = port;
    ctx->fw_to = ctx->g->steps[x->cons[0]]->ctx[forward_partition(x, ctx)];
}

static __attribute__((noinline)) int emit_checked(struct urt_graph_ctx *ctx, uint32_t port, uint32_t partition,
                                                   void *data, uint32_t rows);

URT_API int urt_graph_emit(struct urt_graph_ctx *ctx, uint32_t port, uint32_t partition, void *data, uint32_t rows)
{
    if (ctx && ctx->fw_x && port == ctx->fw_port) /* partition is not used for a forward */
        return emit_fast(ctx, data, rows) ? emit_checked(ctx, ctx->fw_port, 0, data, rows) : 0;
    return emit_checked(ctx, port, partition, data, rows);
}

static __attribute__((noinline)) int emit_checked(struct urt_graph_ctx *ctx, uint32_t port, uint32_t partition,
                                                   void *data, uint32_t rows)
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
    if (x->d.kind == URT_EXCHANGE_FORWARD) {
        int err = emit_forward(ctx, x, data, rows);
        if (!err)
            emit_resolve(ctx, port, x); /* after an accepted emit: `provided` is set */
        return err;
    }
    return emit_blocking(ctx, x, partition, data, rows);
}
