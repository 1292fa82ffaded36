/*
 * graph/proc.c — processors (after Databend's pipeline executor) in a
 * task graph (SPEC C16, urt/graph.h).
 *
 * A processor step's partitions are processor instances (CTX_PROC). Two
 * processor steps joined by a forward exchange are joined partition by
 * partition through ports: one struct gport per partition, whose state is
 * one atomic word (URT_PORT_HAS_DATA | URT_PORT_NEED_DATA |
 * URT_PORT_FINISHED | PORT_CLOSED) beside the one unit it may hold. The
 * producer writes data and rows, then sets HAS_DATA (release); the consumer
 * reads them after it saw HAS_DATA (acquire) and clears it with NEED_DATA
 * (acq_rel). FINISHED: the producer will push nothing more; CLOSED: the
 * consumer wants nothing more (a producer's push gets -EPIPE).
 *
 * Scheduling word (psched, P_* in graph_int.h) per instance, born SCHED|AGAIN
 * (a neighbour may notify it before its step started; the start submits its
 * first task after counting the instances in the step's live):
 *   notify:  DONE -> nothing; SCHED or ASYNC -> set AGAIN (the running task,
 *            or the continuation, calls event() once more); idle -> set
 *            SCHED and spawn a task (the only place a task is created for it,
 *            so at most one task runs an instance).
 *   task:    clear AGAIN, call event() and act on its answer; to wait it
 *            clears SCHED by a CAS that fails while AGAIN is set (a port
 *            changed after event() looked): no notification is lost.
 *   async:   SCHED -> ASYNC before async() is called (its completion may
 *            come at once, from any thread); urt_graph_async_done turns
 *            ASYNC -> SCHED and submits the continuation to the worker that
 *            called async() (urt_spawn_to; the step's lane if it has one).
 *            The task that called async() touches nothing after it returned
 *            0: the instance may already run elsewhere.
 * Every port change notifies the other side. A notify that reaches an idle
 * instance after it finished does nothing (DONE).
 *
 * Memory ordering: psched transitions are acq_rel CASes; the task that
 * clears SCHED releases the instance's fields to the task that sets SCHED
 * next (its spawn publishes them to the new task). async_res/async_back are
 * written before the CAS that ends ASYNC (release) and read by the
 * continuation. Ports: as above. An instance holds one count of its step's
 * live until it finished (the last touch, graph_int.h).
 */
#include <errno.h>

#include "base/error.h"
#include "graph/graph_int.h"

/* ---- scheduling ----------------------------------------------------------------- */

void gproc_notify(struct urt_graph_ctx *c)
{
    uint32_t w = atomic_load_explicit(&c->psched, memory_order_acquire);
    for (;;) {
        if (w & P_DONE)
            return;
        if (w & (P_SCHED | P_ASYNC)) {
            if ((w & P_AGAIN) || atomic_compare_exchange_weak_explicit(&c->psched, &w, w | P_AGAIN,
                                                                       memory_order_acq_rel, memory_order_acquire))
                return;
        } else if (atomic_compare_exchange_weak_explicit(&c->psched, &w, w | P_SCHED, memory_order_acq_rel,
                                                         memory_order_acquire)) {
            gexec_spawn(c);
            return;
        }
    }
}

/* Instances are born SCHED|AGAIN (gproc_init): a neighbour's notification
 * before the step runs only sets AGAIN, and the step's start submits the
 * first task of each, after it counted them in live. */
void gproc_init(struct urt_graph_ctx *c)
{
    atomic_init(&c->psched, P_SCHED | P_AGAIN);
}

void gproc_start_step(struct urt_graph *g, struct gstep *s)
{
    (void)g;
    atomic_fetch_add_explicit(&s->live, s->n_ctx, memory_order_relaxed);
    for (uint32_t i = 0; i < s->n_ctx; i++)
        gexec_spawn(s->ctx[i]); /* SCHED since birth: this is its task */
}

/* SCHED -> idle unless a port changed meanwhile (then: run event() again). */
static bool proc_idle(struct urt_graph_ctx *c)
{
    uint32_t w = atomic_load_explicit(&c->psched, memory_order_acquire);
    while (!(w & P_AGAIN))
        if (atomic_compare_exchange_weak_explicit(&c->psched, &w, w & ~P_SCHED, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    return false;
}

/* ---- ports ------------------------------------------------------------------------ */

static struct gport *port_edge(const struct urt_graph_ctx *c, uint32_t port, bool out)
{
    if (!c || c->kind != CTX_PROC || port >= (out ? c->s->n_out : c->s->n_in))
        return NULL;
    struct gx *x = c->g->xs[out ? c->s->out_x[port] : c->s->in_x[port]];
    return x->port_edge ? &x->ports[c->partition] : NULL;
}

/* Outputs finished, inputs closed, neighbours told. */
static void proc_close_ports(struct urt_graph_ctx *c)
{
    struct gstep *s = c->s;
    for (uint32_t k = 0; k < s->n_out; k++) {
        struct gport *p = port_edge(c, k, true);
        if (p && !(atomic_fetch_or_explicit(&p->word, URT_PORT_FINISHED, memory_order_acq_rel) & URT_PORT_FINISHED))
            gproc_notify(p->cons);
    }
    for (uint32_t k = 0; k < s->n_in; k++) {
        struct gport *p = port_edge(c, k, false);
        if (p && !(atomic_fetch_or_explicit(&p->word, PORT_CLOSED, memory_order_acq_rel) & PORT_CLOSED))
            gproc_notify(p->prod);
    }
}

/* The end: ports closed, DONE, live given back. */
static enum urt_task_result proc_finish(struct urt_graph_ctx *c)
{
    proc_close_ports(c);
    atomic_fetch_or_explicit(&c->psched, P_DONE, memory_order_acq_rel);
    gexec_flush_stats(c);
    glive_put(c->g, c->s, 1); /* last touch */
    return URT_TASK_DONE;
}

/* A processor step that completes without having run (stopped before its
 * start): its instances never run, but their neighbours must see their
 * ports finished and closed. Controller only. */
void gproc_close_unstarted(struct urt_graph *g, struct gstep *s)
{
    (void)g;
    for (uint32_t i = 0; i < s->n_ctx; i++) {
        atomic_fetch_or_explicit(&s->ctx[i]->psched, P_DONE, memory_order_acq_rel);
        proc_close_ports(s->ctx[i]);
    }
}

/* SCHED -> ASYNC, then async(); 0: started (c is not ours any more). */
static int proc_async(struct urt_graph_ctx *c)
{
    const struct urt_processor *p = c->s->d.processor;
    if (!p->async)
        return urt__error(-EINVAL, "processor '%s': event() said URT_PROC_ASYNC and it has no async()",
                          gstep_name(c->s));
    c->async_worker = urt_current_worker(c->g->rt);
    uint32_t w = atomic_load_explicit(&c->psched, memory_order_acquire);
    while (!atomic_compare_exchange_weak_explicit(&c->psched, &w, (w & ~P_SCHED) | P_ASYNC, memory_order_acq_rel,
                                                  memory_order_acquire))
        ;
    int r = p->async(c, c->s->d.arg);
    if (r >= 0)
        return 0;
    /* not started: no urt_graph_async_done will come, the instance is ours again */
    w = atomic_load_explicit(&c->psched, memory_order_acquire);
    while (!atomic_compare_exchange_weak_explicit(&c->psched, &w, (w & ~P_ASYNC) | P_SCHED, memory_order_acq_rel,
                                                  memory_order_acquire))
        ;
    return r;
}

/* One answer of event(); 1: go on, 0: the task ends (idle or async), -1: finish. */
static int proc_step(struct urt_graph_ctx *c, int r)
{
    const struct urt_processor *p = c->s->d.processor;
    switch (r) {
    case URT_PROC_SYNC:
        r = p->process ? p->process(c, c->s->d.arg)
                       : urt__error(-EINVAL, "processor '%s': event() said URT_PROC_SYNC and it has no process()",
                                    gstep_name(c->s));
        if (r > 0)
            r = urt__error(-EINVAL, "processor '%s': process() returned %d (0 or a -errno)", gstep_name(c->s), r);
        break;
    case URT_PROC_ASYNC:
        r = proc_async(c);
        if (!r)
            return 0;
        break;
    case URT_PROC_NEED_DATA:
    case URT_PROC_NEED_CONSUME:
        if (c->blocked)
            gexec_park(c); /* its emit found a forward exchange full */
        return proc_idle(c) ? 0 : 1;
    case URT_PROC_FINISHED:
        return -1;
    default:
        if (r >= 0)
            r = urt__error(-EINVAL, "processor '%s': event() returned %d", gstep_name(c->s), r);
        break;
    }
    if (r < 0) {
        gctl_abort(c->g, r);
        return -1;
    }
    return 1;
}

enum urt_task_result gproc_run(struct urt_graph_ctx *c)
{
    struct urt_graph *g = c->g;
    if (c->async_back) {
        c->async_back = false;
        if (c->async_res != 0)
            gctl_abort(g, c->async_res); /* a positive result is not one: -EINVAL */
    }
    for (int i = 0; i < G_PROC_BATCH; i++) {
        atomic_fetch_and_explicit(&c->psched, ~P_AGAIN, memory_order_acq_rel);
        if (gctl_stopping(g, c->s))
            return proc_finish(c);
        c->blocked = NULL;
        c->n_run++;
        int r = proc_step(c, c->s->d.processor->event(c, c->s->d.arg));
        if (r < 0)
            return proc_finish(c);
        if (r == 0)
            return URT_TASK_DONE; /* idle, or async work in flight: do not touch c */
    }
    c->n_yield++;
    return URT_TASK_YIELD; /* still SCHED: the worker's other tasks first */
}

/* ---- the public calls ------------------------------------------------------------------ */

URT_API unsigned urt_graph_in_port(const struct urt_graph_ctx *ctx, uint32_t port)
{
    struct gport *p = port_edge(ctx, port, false);
    if (!p)
        return 0;
    return atomic_load_explicit(&p->word, memory_order_acquire) &
           (URT_PORT_HAS_DATA | URT_PORT_NEED_DATA | URT_PORT_FINISHED);
}

URT_API unsigned urt_graph_out_port(const struct urt_graph_ctx *ctx, uint32_t port)
{
    struct gport *p = port_edge(ctx, port, true);
    if (!p)
        return 0;
    uint32_t w = atomic_load_explicit(&p->word, memory_order_acquire);
    return (w & (URT_PORT_HAS_DATA | URT_PORT_NEED_DATA)) | (w & PORT_CLOSED ? URT_PORT_FINISHED : 0);
}

URT_API int urt_graph_pull(struct urt_graph_ctx *ctx, uint32_t port, struct urt_graph_unit *u)
{
    struct gport *p = port_edge(ctx, port, false);
    if (!p || !u)
        return urt__error(-EINVAL, "urt_graph_pull: %s", !u ? "u is NULL" : "port is not a processor's input port edge");
    uint32_t w = atomic_load_explicit(&p->word, memory_order_acquire);
    for (;;) {
        if (w & URT_PORT_HAS_DATA) {
            void *data = p->data;
            uint32_t rows = p->rows;
            if (!atomic_compare_exchange_weak_explicit(&p->word, &w, (w & ~URT_PORT_HAS_DATA) | URT_PORT_NEED_DATA,
                                                       memory_order_acq_rel, memory_order_acquire))
                continue;
            *u = (struct urt_graph_unit){.data = data, .rows = rows, .port = port};
            ctx->n_in++;
            gproc_notify(p->prod); /* it may push the next one */
            return 1;
        }
        if (w & URT_PORT_FINISHED)
            return urt__error(-EPIPE, "urt_graph_pull: input port %u is finished", port);
        if (w & URT_PORT_NEED_DATA)
            return 0;
        if (atomic_compare_exchange_weak_explicit(&p->word, &w, w | URT_PORT_NEED_DATA, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            gproc_notify(p->prod);
            return 0;
        }
    }
}

URT_API int urt_graph_push(struct urt_graph_ctx *ctx, uint32_t port, void *data, uint32_t rows)
{
    struct gport *p = port_edge(ctx, port, true);
    if (!p)
        return urt__error(-EINVAL, "urt_graph_push: port %u is not a processor's output port edge", port);
    if (ctx->cleaning)
        return urt__error(-EINVAL, "urt_graph_push: called from step '%s''s cleanup", gstep_name(ctx->s));
    uint32_t w = atomic_load_explicit(&p->word, memory_order_acquire);
    if (w & PORT_CLOSED)
        return urt__error(-EPIPE, "urt_graph_push: the consumer of port %u finished", port);
    if (w & URT_PORT_HAS_DATA)
        return urt__error(-EAGAIN, "urt_graph_push: output port %u still holds a unit", port);
    if (w & URT_PORT_FINISHED)
        return urt__error(-EINVAL, "urt_graph_push: port %u was finished", port);
    p->data = data;
    p->rows = rows;
    while (!atomic_compare_exchange_weak_explicit(&p->word, &w, (w | URT_PORT_HAS_DATA) & ~URT_PORT_NEED_DATA,
                                                  memory_order_acq_rel, memory_order_acquire))
        if (w & PORT_CLOSED)
            return urt__error(-EPIPE, "urt_graph_push: the consumer of port %u finished", port);
    ctx->n_out++;
    ctx->n_rows += rows;
    gproc_notify(p->cons);
    return 0;
}

URT_API int urt_graph_finish(struct urt_graph_ctx *ctx, uint32_t port)
{
    struct gport *p = port_edge(ctx, port, true);
    if (!p)
        return urt__error(-EINVAL, "urt_graph_finish: port %u is not a processor's output port edge", port);
    if (!(atomic_fetch_or_explicit(&p->word, URT_PORT_FINISHED, memory_order_acq_rel) & URT_PORT_FINISHED))
        gproc_notify(p->cons);
    return 0;
}

URT_API int urt_graph_unit_release(struct urt_graph_ctx *ctx, uint32_t port, void *data, uint32_t rows)
{
    if (!port_edge(ctx, port, false))
        return urt__error(-EINVAL, "urt_graph_unit_release: port %u is not a processor's input port edge", port);
    struct gx *x = ctx->g->xs[ctx->s->in_x[port]];
    if (x->d.release)
        x->d.release(data, rows, x->d.release_arg);
    return 0;
}

void gproc_release_ports(struct urt_graph *g, struct gx *x)
{
    (void)g;
    for (uint32_t i = 0; i < x->parts && x->d.release; i++) {
        struct gport *p = &x->ports[i];
        if (atomic_load_explicit(&p->word, memory_order_acquire) & URT_PORT_HAS_DATA)
            x->d.release(p->data, p->rows, x->d.release_arg);
    }
}

URT_API int urt_graph_async_done(struct urt_graph_ctx *ctx, int res)
{
    if (!ctx || ctx->kind != CTX_PROC)
        return urt__error(-EINVAL, "urt_graph_async_done: %s", ctx ? "ctx is not a processor's" : "ctx is NULL");
    uint32_t w = atomic_load_explicit(&ctx->psched, memory_order_acquire);
    do {
        if (!(w & P_ASYNC))
            return urt__error(-EINVAL, "urt_graph_async_done: processor '%s' has no async work in flight",
                              gstep_name(ctx->s));
        ctx->async_res = res;
        ctx->async_back = true;
    } while (!atomic_compare_exchange_weak_explicit(&ctx->psched, &w, (w & ~P_ASYNC) | P_SCHED, memory_order_acq_rel,
                                                    memory_order_acquire));
    struct urt_graph *g = ctx->g;
    struct gstep *s = ctx->s;
    int err = s->d.lane ? urt_lane_spawn(s->d.lane, gexec_task, gexec_task_cancel, ctx, 0)
              : ctx->async_worker >= 0
                  ? urt_spawn_to(g->rt, (uint32_t)ctx->async_worker, gexec_task, gexec_task_cancel, ctx, 0)
                  : urt_spawn_ex(g->rt, gexec_task, gexec_task_cancel, ctx, 0);
    if (!err)
        return 0;
    /* the runtime refuses tasks: finish the instance here, stopping */
    gctl_abort(g, err);
    struct gexec e;
    gexec_enter(&e, g);
    gproc_run(ctx);
    gexec_leave(&e);
    return urt__error(err, "urt_graph_async_done: the continuation could not be submitted (%d)", err);
}
