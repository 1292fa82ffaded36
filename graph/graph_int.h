/*
 * graph/graph_int.h — the private objects of task graphs (SPEC C16,
 * urt/graph.h) and the seams between graph/'s files:
 *
 *   build.c    building, checking (partition rules P1-P6), allocation, the
 *              handle's lifecycle, the read-only queries;
 *   control.c  the controller: a strand of events (news), the step state
 *              machine, exchange completion and release, early completion,
 *              abort, the job's end;
 *   exec.c     the tasks: source slots, partition tasks, side-input
 *              sub-tasks, forward streams; next; parking of producers held
 *              back by a full exchange;
 *   emit.c     the unit pool, emit (its fast path into a forward), the
 *              release of blocking exchanges' units;
 *   proc.c     processors: their scheduling word, ports, async work.
 *
 * graph/ is written on urt's public API only (<urt/...>, base/): a graph's
 * tasks are urt tasks — job tasks (urt_job_spawn) where they may run
 * anywhere, lane tasks on a step's lane, urt_spawn_to for an async
 * processor's continuation — and its job is a urt_job kept open while the
 * graph runs (the controller closes it at the end, so the job's teardown,
 * callback and waiters are the graph's).
 *
 * Lifetime rule used everywhere ("last touch"): a task, an owned stream (a
 * forward consumer's partition while a task owns it, exec.c) or a processor
 * holds one count of its step's `live`. The decrement of that count (and the
 * news it may post) is the last access of the task to graph memory: once a
 * step completed the controller may finish the graph, close the job and the
 * graph may be freed (from the job's callback) while a task that is not a
 * job task (lanes, continuations) is still returning.
 */
#ifndef URT_GRAPH_INT_H
#define URT_GRAPH_INT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <urt/graph.h>

#include "base/tls.h"

#define G_MAX_STEPS 4096
#define G_MAX_GRAPH_PARTITIONS 65536u
#define G_MAX_STEP_PARTITIONS (1u << 20)
#define G_MAX_CAPACITY (1u << 24)
#define G_FORWARD_CAPACITY 256u
#define G_BLOCKING_CAPACITY (1u << 20)
#define G_CHUNK_SHIFT 8 /* unit nodes are allocated 256 at a time */
#define G_STREAM_BATCH 64 /* units one stream task processes before it yields */
#define G_PROC_BATCH 64   /* event() rounds of one processor task before it yields */

/* ---- news: what the controller is told (control.c) --------------------------- */

#define N_START 0x1u       /* graph: run the bootstrap */
#define N_ABORT 0x2u       /* graph: abort everything */
#define N_PROVIDED 0x4u    /* step: the first unit arrived (upstream providing) */
#define N_TASKS_DONE 0x8u  /* step: live reached 0 */
#define N_STOP 0x10u       /* step: completion instructed */
#define N_PREPARED 0x20u   /* step: its side inputs' sub-tasks finished */

struct gnews {
    struct gnews *next;     /* the controller's stack */
    _Atomic uint32_t bits;  /* N_*: set by posters, taken by the controller */
    int32_t step;           /* -1: the graph's own */
};

/* ---- units and their pool (emit.c) --------------------------------------------- */

struct gunit {
    void *data;
    uint32_t rows;               /* what the consumers see (a limit_rows forward may clip it) */
    uint32_t emitted;            /* what the producer emitted: its release callback gets this */
    _Atomic uint32_t refs;       /* forward with two or more consumer steps: those still holding it */
    _Atomic uint32_t next_free;  /* pool free list: index + 1 of the next, 0 = end */
    uint32_t index;              /* in the pool */
    struct gunit *links[];       /* forward: one link per consumer step (its stream's queue);
                                    blocking: links[0], its partition's stack */
};

/* At most `capacity` nodes exist (bump); a node is in flight unless it is on
 * the free list, so the free list and bump together are the capacity count. */
struct gpool {
    uint32_t capacity;
    uint32_t node_size;
    uint32_t n_chunks;
    _Atomic uint32_t bump;       /* nodes ever created (<= capacity) */
    void *_Atomic *chunks;       /* G_CHUNK nodes each, created on first use */
    alignas(64) _Atomic uint64_t free_top; /* tag << 32 | (index + 1): a line of its own */
};

/* A forward consumer's stream (its inbox word): units queued on top of one of
 * these ends (graph/exec.c). NULL: a task owns the stream. */
#define S_IDLE ((struct gunit *)1) /* no task owns it, nothing queued */
#define S_SHUT ((struct gunit *)2) /* its side inputs are not prepared: units wait */
static inline bool gunit_end(const struct gunit *u)
{
    return (uintptr_t)u <= (uintptr_t)S_SHUT;
}

/* ---- exchanges ---------------------------------------------------------------- */

struct gport; /* proc.c */

struct gx {
    struct urt_exchange_desc d;
    int id;
    uint32_t n_prod, n_cons;
    int *prod, *cons;            /* step ids */
    uint32_t *cons_port;         /* the input port index of each consumer */
    uint32_t *prod_offset;       /* P6: producer k's first consumer partition */
    bool scan_src;               /* P6's exception: a producer is a scan */
    bool port_edge;              /* forward between processor steps: ports (proc.c) */
    uint32_t parts;              /* consumer partitions (assumed) */
    /* run */
    struct gpool pool;
    _Atomic uint64_t rows;       /* forward with limit_rows: rows accepted */
    _Atomic uint32_t limit_hit;
    _Atomic uint32_t provided;   /* the first unit was emitted */
    struct gunit *_Atomic *heads;/* shuffle: per partition; broadcast: [0] */
    struct urt_graph_ctx *_Atomic waiters; /* parked producers (exec.c) */
    struct gport *ports;         /* port edges: one per partition */
    uint32_t prod_left, cons_left; /* controller: producer / consumer steps not completed */
    bool released;               /* controller */
};

/* ---- task contexts (exec.c, proc.c) -------------------------------------------------- */

enum gctx_kind {
    CTX_SOURCE = 1,  /* a slot of a source step: runs partitions one after another */
    CTX_PART,        /* a partition of a shuffle consumer */
    CTX_PREPARE,     /* a side input's sub-task */
    CTX_STREAM,      /* a partition of a forward consumer: its units, one at a time */
    CTX_PROC,        /* a processor instance */
};

/* processor scheduling word (proc.c) */
#define P_SCHED 0x1u /* a task is queued or running for it */
#define P_AGAIN 0x2u /* a port changed while it was scheduled */
#define P_ASYNC 0x4u /* async work in flight */
#define P_DONE 0x8u  /* finished */

struct urt_graph_ctx {
    struct urt_graph *g;
    struct gstep *s;
    uint32_t kind;               /* enum gctx_kind */
    uint32_t partition;
    void *state;                 /* urt_graph_task_state */
    struct gx *blocked;          /* urt_graph_emit said -EAGAIN on it */
    struct urt_graph_ctx *wnext; /* waiters' stack */
    bool started;                /* the step function ran once for this partition/unit */
    bool cleaning;               /* in the step's cleanup callback (emit and push refuse) */

    /* CTX_STREAM (the owner's: the task that took the inbox from S_IDLE or S_SHUT) */
    bool unlive;                 /* run in place by the pusher that found the step completed */
    uint32_t link;               /* this step's index among its forward input's consumers */
    struct gx *in;               /* its forward input */
    struct gunit *unit;          /* the unit being processed */
    struct gunit *avail;         /* that unit while urt_graph_next has not returned it */
    uint32_t main_port;          /* the forward input's port (s->fwd_port), for urt_graph_next */
    struct gunit *fifo;          /* taken from the inbox, in arrival order */
    struct gunit *freed, *freed_last; /* finished units of `in` not yet back on its free list
                                    (linked by next_free; run_stream gives them back at once) */
    /* the forward output it emits into, resolved by its first emit there
     * (emit.c's fast path): one consumer step, no limit_rows */
    struct gx *fw_x;
    uint32_t fw_port;
    struct urt_graph_ctx *fw_to; /* the consumer's stream for this task's partition */
    struct gunit *fcache;        /* free nodes of fw_x's pool this task took at once (emit.c;
                                    not a processor's), linked by next_free; given back when
                                    the step yields or parks, when the task ends, leaves its
                                    partition or stream, or resolves another output */
    /* CTX_PROC */
    _Atomic uint32_t psched;     /* P_* */
    int async_res;               /* published by the psched CAS of urt_graph_async_done */
    bool async_back;             /* the next run continues after async work */
    int async_worker;
    /* per-task counters, added to the step's at the end */
    uint64_t n_run, n_yield, n_in, n_out, n_rows;
    /* CTX_PART, CTX_PREPARE: a cursor per input port */
    uint32_t n_cur;
    /* CTX_STREAM: arriving units (a stack on S_IDLE, S_SHUT or NULL: exec.c),
     * on a line of its own: producers push, the owner takes */
    alignas(64) struct gunit *_Atomic inbox;
    alignas(64) struct gunit *cur[];
};

/* ---- steps ------------------------------------------------------------------- */

enum gmain { MAIN_NONE = 0, MAIN_FORWARD, MAIN_SHUFFLE, MAIN_PORTS };

struct gstep {
    struct urt_step_desc d;
    int id;
    uint32_t n_in, n_out, cap_in, cap_out;
    int *in_x, *out_x;           /* exchange ids, in port order */
    uint32_t *in_link;           /* forward inputs: this step's index among the exchange's consumers */
    enum gmain main;
    uint32_t n_side, n_main;     /* broadcast inputs; main input exchanges */
    uint32_t fwd_port;           /* MAIN_FORWARD: the forward input's port */
    uint32_t assumed;            /* partition count decided at prepare */
    /* run */
    _Atomic uint32_t state;      /* enum urt_step_state (controller writes) */
    _Atomic uint32_t decided;    /* the count as decided so far */
    _Atomic int64_t live;        /* tasks, owned streams, processors, plus one until COMPLETING */
    _Atomic uint32_t stop;       /* completion instructed or aborted */
    _Atomic uint32_t next_part;  /* sources: partitions admitted */
    _Atomic uint32_t prep_live;  /* side-input sub-tasks running */
    struct gnews news;
    uint32_t side_left, main_left; /* controller: input exchanges not complete */
    bool open_dropped, stop_done, tasks_done, ran, streams_open; /* controller */
    uint32_t n_ctx;
    struct urt_graph_ctx **ctx;  /* slots / partitions / streams / instances */
    struct urt_graph_ctx **prep; /* CTX_PREPARE, one per side input */
    _Atomic uint64_t st_run, st_skipped, st_cut, st_yields, st_in, st_out, st_rows;
};

/* ---- the graph --------------------------------------------------------------- */

enum gphase { PH_BUILD = 0, PH_PREPARED, PH_STARTED, PH_FAILED };

struct urt_graph {
    urt_runtime *rt;
    struct urt_graph_options opt;
    uint32_t default_parts;
    uint32_t phase;              /* owner only */
    _Atomic int refs;            /* the handle, and the run until the job's callback returned */
    urt_job *job;
    _Atomic int32_t abort;       /* first abort reason (0: none) */
    uint32_t n_steps, cap_steps, n_x, cap_x;
    struct gstep **steps;
    struct gx **xs;
    int *topo;                   /* steps in topological order */
    /* controller strand */
    struct gnews *_Atomic ctl_head;
    _Atomic int64_t ctl_pending;
    struct gnews news;           /* the graph's own */
    uint32_t deactivated;        /* controller */
    bool finished, closed, aborting, start_failed; /* controller (start_failed: urt_graph_start) */
};

/* ---- seams ------------------------------------------------------------------------ */

/* control.c */
void gctl_post(struct urt_graph *g, struct gnews *n, uint32_t bits);
void gctl_step_news(struct gstep *s, struct urt_graph *g, uint32_t bits);
void gctl_abort(struct urt_graph *g, int err); /* first reason wins; any thread */
void gctl_stop_eager(struct urt_graph *g, struct gstep *s); /* any thread: s->stop is set */
void gctl_job_done(urt_job *job, int status, void *arg);
enum urt_task_result gctl_bootstrap(struct urt_task *t, void *arg);
void gctl_bootstrap_cancel(struct urt_task *t, void *arg);
/* The step was told to complete, or the graph is being aborted (its abort
 * word: urt_graph_cancel, a failed step; or the job cancelled: urt_job_cancel,
 * the deadline). A stream reads the job's part once per batch of units
 * (exec.c), the rest per unit. */
static inline bool gctl_stopping(const struct urt_graph *g, const struct gstep *s)
{
    return atomic_load_explicit(&s->stop, memory_order_acquire) ||
           atomic_load_explicit(&g->abort, memory_order_acquire) || urt_job_cancelled(g->job);
}

/* exec.c */
struct gexec {
    struct urt_graph *g;
    bool drain; /* this thread owes the controller a drain */
    struct gexec *prev;
};
extern _Thread_local struct gexec *gexec_cur URT_TLS_IE;
void gexec_enter(struct gexec *e, struct urt_graph *g);
void gexec_leave(struct gexec *e); /* drains if owed: the caller's last touch */
void glive_put(struct urt_graph *g, struct gstep *s, int64_t n); /* last touch */
bool glive_get(struct gstep *s, int64_t n); /* false: the step completed */
int gexec_spawn(struct urt_graph_ctx *c);   /* 0, or the ctx was finished in place */
enum urt_task_result gexec_task(struct urt_task *t, void *arg);  /* runs a ctx (arg) */
void gexec_task_cancel(struct urt_task *t, void *arg);
void gctl_drain(struct urt_graph *g);
void gexec_start_step(struct urt_graph *g, struct gstep *s); /* controller: RUNNING's tasks */
void gexec_start_prepare(struct urt_graph *g, struct gstep *s);
void gexec_open_streams(struct urt_graph *g, struct gstep *s); /* side inputs prepared, or COMPLETING */
void gexec_wake(struct urt_graph *g, struct gx *x);
void gexec_park(struct urt_graph_ctx *c); /* c->blocked is full: wait for room */
void gexec_stream_start(struct urt_graph_ctx *c); /* a push found the stream idle */

/* emit.c */
int gpool_init(struct gpool *p, uint32_t capacity, uint32_t n_links);
void gpool_free(struct gpool *p);
void gexec_release_blocking(struct urt_graph *g, struct gx *x);
void gemit_cache_return(struct urt_graph_ctx *c); /* fcache back on fw_x's free list (room) */
void gemit_forget(struct urt_graph_ctx *c);       /* that, then no resolved output (fw_x) */

/* A chain first..last, linked by next_free, back on the free list with one
 * CAS. seq_cst: pairs with gexec_park's load (emit.c's file comment); the
 * chain's links are written before it. */
static inline void gpool_put_chain(struct gpool *p, struct gunit *first, struct gunit *last)
{
    uint64_t top = atomic_load_explicit(&p->free_top, memory_order_relaxed), next;
    do {
        atomic_store_explicit(&last->next_free, (uint32_t)top, memory_order_relaxed);
        next = ((top >> 32) + 1) << 32 | (first->index + 1);
    } while (!atomic_compare_exchange_weak_explicit(&p->free_top, &top, next, memory_order_seq_cst,
                                                    memory_order_relaxed));
}

/* One node back on the free list (emit's: a unit no consumer took, or one
 * whose consumers all finished before its emit returned). */
static inline void gpool_put(struct gpool *p, struct gunit *u)
{
    gpool_put_chain(p, u, u);
}

/* Room was made in x: wake its parked producers, if any (after gpool_put). */
static inline void gexec_room(struct urt_graph *g, struct gx *x)
{
    if (atomic_load_explicit(&x->waiters, memory_order_seq_cst)) /* pairs with gexec_park */
        gexec_wake(g, x);
}

/* A forward unit's last reference is gone: back to its producer (the
 * release callback, if the exchange has one). */
static inline void gunit_release(const struct gx *x, const struct gunit *u)
{
    if (x->d.release)
        x->d.release(u->data, u->emitted, x->d.release_arg);
}

/* ... then its node back to the pool: room. A stream gathers its nodes
 * instead and gives them back per batch (exec.c, stream_give_back). */
static inline void gunit_done(struct urt_graph *g, struct gx *x, struct gunit *u)
{
    gunit_release(x, u);
    gpool_put(&x->pool, u);
    gexec_room(g, x);
}
void gexec_flush_stats(struct urt_graph_ctx *c);
void gexec_cleanup(struct urt_graph_ctx *c); /* the step's cleanup, if c's state is set */

/* proc.c */
struct gport {
    _Atomic uint32_t word;       /* URT_PORT_* | PORT_CLOSED */
    uint32_t rows;
    void *data;                  /* published by the word's release */
    struct urt_graph_ctx *prod, *cons;
};
#define PORT_CLOSED 0x8u
void gproc_init(struct urt_graph_ctx *c);
void gproc_notify(struct urt_graph_ctx *c);
void gproc_start_step(struct urt_graph *g, struct gstep *s);
void gproc_close_unstarted(struct urt_graph *g, struct gstep *s);
void gproc_release_ports(struct urt_graph *g, struct gx *x);
enum urt_task_result gproc_run(struct urt_graph_ctx *c); /* in gexec_task */

/* build.c */
/* Zeroed memory on whole cache lines, for the objects with a line of their
 * own (a stream's inbox, a pool's free list); free() frees it. */
static inline void *gcalloc_lines(size_t size)
{
    size = (size + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, size);
    if (p)
        memset(p, 0, size);
    return p;
}
struct urt_graph_ctx *gctx_new(struct urt_graph *g, struct gstep *s, uint32_t kind, uint32_t partition);
void graph_unref(struct urt_graph *g);
static inline struct gstep *gstep_at(const struct urt_graph *g, int id)
{
    return g->steps[id];
}
static inline struct gx *gx_at(const struct urt_graph *g, int id)
{
    return g->xs[id];
}
static inline const char *gstep_name(const struct gstep *s)
{
    return s->d.name ? s->d.name : "(unnamed)";
}

#endif
