/*
 * graph/control.c — the controller of a task graph (SPEC C16): jogasaki's
 * DAG controller (after jogasaki's, Tsurugi's SQL engine) on urt's public API.
 *
 * Events ("news", graph_int.h N_*) are posted by tasks and by the API:
 * upstream providing, task completed (a step's live count reached 0), side
 * inputs prepared, completion instructed, abort, start. The controller
 * processes them one at a time, on a strand of its own:
 *
 *   post(n, bits):  fetch_or bits into the object's news word; the poster
 *                   that moved it from 0 pushes the object onto the
 *                   controller's stack (a Treiber stack), then increments
 *                   `ctl_pending`; the increment that moved it from 0 owes
 *                   a drain.
 *   drain:          take the whole stack, reverse it (arrival order), for
 *                   each object take its bits (exchange 0) and run the step
 *                   state machine; subtract the count handled; stop at <= 0.
 *
 * A drain is owed by a graph task (it runs at the end of that task, after the
 * step function returned: gexec_leave), or, when the poster is not a task of
 * this graph, by a task spawned for it (urt_spawn; in place if the runtime
 * refuses tasks). So the controller never waits: a poster that finds it busy
 * leaves its news and goes on, like a lane (urt/lane.h) but placed where the
 * event happened and without a lane's lifetime (a lane cannot be destroyed
 * from the worker that runs its last task, and a graph may end there).
 * Counting after the push means a drainer never waits for a counted object;
 * an object handled before its count arrived makes the count go below zero
 * for a moment and the late increment then owes nothing (flat combining's
 * "whoever finds it idle runs it", Hendler et al., SPAA 2010; the counted
 * hand-off is the one of urt's lanes).
 *
 * The state machine (per step; urt/graph.h names the states):
 *   ACTIVATED   -> PREPARING  when its broadcasts completed (side_left 0):
 *                             one sub-task per side input (prepare)
 *   PREPARING   -> PREPARED   when those finished (N_PREPARED)
 *   PREPARED    -> RUNNING    source / processors: at once; shuffle: when
 *                             every shuffle input completed (P4 decided);
 *                             forward: when it handles the first providing.
 *                             The controller starts the tasks of sources,
 *                             shuffle consumers and processors at RUNNING;
 *                             a forward consumer's stream starts with its
 *                             first unit, from the emitter (after its side
 *                             inputs were prepared): the data path does not
 *                             wait for the controller.
 *   RUNNING     -> COMPLETING when no task will be created any more: the
 *                             open count of `live` is dropped
 *   COMPLETING  -> COMPLETED  when live reached 0 (N_TASKS_DONE, or the
 *                             drop itself): task state its tasks left set
 *                             goes to the step's cleanup (no task of it runs
 *                             any more); its outputs lose a producer
 *   COMPLETED   -> DEACTIVATED when every output exchange was released
 *                             (all its producers and consumers completed);
 *                             when all steps are deactivated the graph is
 *                             finished and its job is closed: the job's
 *                             teardown runs the completion callback.
 * Early completion (step_stop): stop := 1, wake its parked tasks, and go
 * upstream through forward and broadcast exchanges whose consumers are all
 * stopped or completed, never through a shuffle, never into a DELIVER step.
 * Abort stops every step.
 *
 * Memory ordering: news bits are acq_rel RMWs; the stack push is a release
 * CAS, the take an acquire exchange; ctl_pending is acq_rel. A poster's
 * writes before its post are therefore visible to the drain that handles
 * it. The controller's own fields (state transitions, side_left, main_left,
 * prod_left, cons_left, flags) are touched only inside drains, which are
 * ordered one after another by ctl_pending (the decrement of one drain, the
 * 0 -> 1 increment and hand-off to the next). `state` and `decided` are
 * atomics only because queries read them from any thread (relaxed).
 * stop is stored seq_cst before the parked producers are taken (exec.c's
 * Dekker pairing). abort: seq_cst CAS, first reason wins; the reason is
 * first made one a job's status can hold (-4095..-1, not -EINPROGRESS; else
 * -EINVAL), so the job never refuses it and a failed graph never ends with 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/graph_int.h"

/* ---- the strand --------------------------------------------------------------------- */

/* A drain for a poster that is not one of the graph's tasks (urt_graph_cancel
 * from anywhere, the completion callback included; an async completion).
 * It holds a reference to the graph: the graph may end, and its handle be
 * released, before it runs. */
static enum urt_task_result ctl_task(struct urt_task *t, void *arg)
{
    struct urt_graph *g = arg;
    struct gexec e;
    (void)t;
    gexec_enter(&e, g);
    e.drain = true; /* this task was spawned to drain */
    gexec_leave(&e);
    graph_unref(g);
    return URT_TASK_DONE;
}

static void ctl_task_cancel(struct urt_task *t, void *arg)
{
    ctl_task(t, arg); /* at runtime destroy: drain on the destroying thread */
}

static void ctl_kick(struct urt_graph *g)
{
    if (gexec_cur && gexec_cur->g == g) {
        gexec_cur->drain = true; /* the running task drains when its step returned */
        return;
    }
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed); /* the drain's */
    if (urt_spawn_ex(g->rt, ctl_task, ctl_task_cancel, g, 0) != 0)
        ctl_task(NULL, g); /* the runtime refuses tasks (it is being destroyed): here */
}

void gctl_post(struct urt_graph *g, struct gnews *n, uint32_t bits)
{
    if (atomic_fetch_or_explicit(&n->bits, bits, memory_order_acq_rel))
        return; /* queued already: the controller takes these bits with the others */
    struct gnews *head = atomic_load_explicit(&g->ctl_head, memory_order_relaxed);
    do {
        n->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&g->ctl_head, &head, n, memory_order_release,
                                                    memory_order_relaxed));
    if (atomic_fetch_add_explicit(&g->ctl_pending, 1, memory_order_acq_rel) == 0)
        ctl_kick(g);
}

void gctl_step_news(struct gstep *s, struct urt_graph *g, uint32_t bits)
{
    gctl_post(g, &s->news, bits);
}

/* A reason the graph can fail with: a -errno in -4095..-1 that is not
 * -EINPROGRESS (what a job's status can hold, urt/job.h); anything else a
 * step, processor or async completion gave is -EINVAL (urt/graph.h). */
static int abort_reason(int err)
{
    return err < 0 && err >= -4095 && err != -EINPROGRESS ? err : -EINVAL;
}

void gctl_abort(struct urt_graph *g, int err)
{
    err = abort_reason(err);
    int32_t none = 0;
    if (!atomic_compare_exchange_strong_explicit(&g->abort, &none, err, memory_order_seq_cst, memory_order_seq_cst))
        return; /* the first reason stands */
    /* 0, or -EALREADY: the job's own reason (deadline, cancel) came first and
     * is the graph's status. The job cannot be ending (the controller holds it
     * open) and err is in its range, so nothing else can refuse it. */
    int rc = urt_job_abort(g->job, err);
    if (rc && rc != -EALREADY)
        urt_job_cancel(g->job); /* never reached: still, never end a failed graph with 0 */
    gctl_post(g, &g->news, N_ABORT);
}

/* ---- early completion, eagerly -------------------------------------------------------------- */

/* True when no consumer of x wants its units any more: all stopped or completed. */
static bool unwanted(const struct urt_graph *g, const struct gx *x)
{
    for (uint32_t c = 0; c < x->n_cons; c++) {
        const struct gstep *cs = g->steps[x->cons[c]];
        if (!atomic_load_explicit(&cs->stop, memory_order_seq_cst) &&
            atomic_load_explicit(&cs->state, memory_order_relaxed) < URT_STEP_COMPLETED)
            return false;
    }
    return true;
}

/* s was told to complete (its stop is set): stop the steps upstream of it at
 * once, from the instructing task, so that none of their tasks starts after
 * the instruction returned; the controller does the rest when it handles
 * their N_STOP (wakes parked tasks, states). The rule of propagate_up. */
void gctl_stop_eager(struct urt_graph *g, struct gstep *s)
{
    for (uint32_t k = 0; k < s->n_in; k++) {
        struct gx *x = g->xs[s->in_x[k]];
        if (x->d.kind == URT_EXCHANGE_SHUFFLE || !unwanted(g, x))
            continue;
        for (uint32_t p = 0; p < x->n_prod; p++) {
            struct gstep *ps = g->steps[x->prod[p]];
            if (ps->d.flags & URT_STEP_DELIVER || atomic_exchange_explicit(&ps->stop, 1, memory_order_seq_cst))
                continue;
            gctl_stop_eager(g, ps);
            gctl_step_news(ps, g, N_STOP);
        }
    }
}

/* ---- the state machine ---------------------------------------------------------------- */

static void advance(struct urt_graph *g, struct gstep *s);

static uint32_t state_of(const struct gstep *s)
{
    return atomic_load_explicit(&s->state, memory_order_relaxed);
}

static void set_state(struct gstep *s, enum urt_step_state st)
{
    atomic_store_explicit(&s->state, st, memory_order_relaxed);
}

static bool stopped(const struct urt_graph *g, const struct gstep *s)
{
    return gctl_stopping(g, s);
}

static void try_deactivate(struct urt_graph *g, struct gstep *s)
{
    if (state_of(s) != URT_STEP_COMPLETED)
        return;
    for (uint32_t k = 0; k < s->n_out; k++)
        if (!g->xs[s->out_x[k]]->released)
            return;
    set_state(s, URT_STEP_DEACTIVATED);
    if (++g->deactivated == g->n_steps)
        g->finished = true;
}

/* Every producer and consumer completed: units go back, producers deactivate. */
static void exchange_release(struct urt_graph *g, struct gx *x)
{
    if (x->released || x->prod_left || x->cons_left)
        return;
    x->released = true;
    if (x->port_edge)
        gproc_release_ports(g, x);
    else if (x->d.kind != URT_EXCHANGE_FORWARD)
        gexec_release_blocking(g, x);
    for (uint32_t k = 0; k < x->n_prod; k++)
        try_deactivate(g, g->steps[x->prod[k]]);
}

/* Every producer of x completed. */
static void exchange_complete(struct urt_graph *g, struct gx *x)
{
    for (uint32_t k = 0; k < x->n_cons; k++) {
        struct gstep *c = g->steps[x->cons[k]];
        if (x->d.kind == URT_EXCHANGE_BROADCAST)
            c->side_left--;
        else
            c->main_left--;
        advance(g, c);
    }
    exchange_release(g, x);
}

static void step_stop(struct urt_graph *g, struct gstep *s);

/* Early completion goes upstream through incremental exchanges whose
 * consumers are all stopped or completed (jogasaki's rule), never through a
 * shuffle, never into a step with side effects. */
static void propagate_up(struct urt_graph *g, struct gstep *s)
{
    for (uint32_t k = 0; k < s->n_in; k++) {
        struct gx *x = g->xs[s->in_x[k]];
        if (x->d.kind == URT_EXCHANGE_SHUFFLE)
            continue;
        bool wanted = !unwanted(g, x);
        for (uint32_t p = 0; p < x->n_prod && !wanted; p++) {
            struct gstep *ps = g->steps[x->prod[p]];
            if (!(ps->d.flags & URT_STEP_DELIVER) && !ps->stop_done) {
                step_stop(g, ps);
                advance(g, ps);
            }
        }
    }
}

static void step_stop(struct urt_graph *g, struct gstep *s)
{
    if (s->stop_done)
        return;
    s->stop_done = true;
    atomic_store_explicit(&s->stop, 1, memory_order_seq_cst); /* before the waiters are taken */
    for (uint32_t k = 0; k < s->n_out; k++)
        gexec_wake(g, g->xs[s->out_x[k]]);
    if (s->d.processor)
        for (uint32_t i = 0; i < s->n_ctx; i++)
            gproc_notify(s->ctx[i]);
    propagate_up(g, s);
}

/* Every task of s ended (its live count reached 0: their writes are ours):
 * task state left set goes to the step's cleanup. */
static void cleanup_states(struct gstep *s)
{
    for (uint32_t i = 0; i < s->n_ctx; i++)
        gexec_cleanup(s->ctx[i]);
    for (uint32_t i = 0; s->d.prepare && i < s->n_side; i++)
        gexec_cleanup(s->prep[i]);
}

static void step_completed(struct urt_graph *g, struct gstep *s)
{
    cleanup_states(s);
    set_state(s, URT_STEP_COMPLETED);
    if (s->main == MAIN_NONE && !s->d.processor) {
        uint32_t admitted = atomic_load_explicit(&s->next_part, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->st_skipped, s->assumed - (admitted < s->assumed ? admitted : s->assumed),
                                  memory_order_relaxed);
    } else if (!s->ran && s->main == MAIN_SHUFFLE) {
        atomic_fetch_add_explicit(&s->st_skipped, s->assumed, memory_order_relaxed);
    } else if (!s->ran && s->d.processor) {
        gproc_close_unstarted(g, s); /* stopped before it started */
    }
    for (uint32_t k = 0; k < s->n_out; k++) {
        struct gx *x = g->xs[s->out_x[k]];
        if (--x->prod_left == 0)
            exchange_complete(g, x);
    }
    for (uint32_t k = 0; k < s->n_in; k++) {
        struct gx *x = g->xs[s->in_x[k]];
        x->cons_left--;
        exchange_release(g, x);
    }
    propagate_up(g, s);
    try_deactivate(g, s);
}

/* P6 as the graph runs: a forward consumer has the sum of its producers' counts. */
static void decide_forward(struct urt_graph *g, struct gstep *s)
{
    if (s->main != MAIN_FORWARD)
        return;
    struct gx *x = g->xs[s->in_x[s->fwd_port]];
    if (x->scan_src)
        return;
    uint32_t sum = 0;
    for (uint32_t k = 0; k < x->n_prod; k++)
        sum += atomic_load_explicit(&g->steps[x->prod[k]]->decided, memory_order_relaxed);
    atomic_store_explicit(&s->decided, sum, memory_order_relaxed);
}

/* A forward consumer's streams wait for its side inputs (if any): they
 * open when those are prepared (or at COMPLETING, to release what waits). */
static void open_streams(struct urt_graph *g, struct gstep *s)
{
    if (s->streams_open)
        return;
    s->streams_open = true;
    gexec_open_streams(g, s);
}

static void enter_prepared(struct urt_graph *g, struct gstep *s)
{
    set_state(s, URT_STEP_PREPARED);
    open_streams(g, s);
}

/* PREPARED -> RUNNING when its main input allows; false: not yet. */
static bool start_running(struct urt_graph *g, struct gstep *s)
{
    if (s->main == MAIN_SHUFFLE && s->main_left)
        return false;
    if (s->main == MAIN_FORWARD && s->main_left &&
        !atomic_load_explicit(&g->xs[s->in_x[s->fwd_port]]->provided, memory_order_relaxed))
        return false;
    set_state(s, URT_STEP_RUNNING);
    s->ran = true;
    decide_forward(g, s);
    gexec_start_step(g, s);
    return true;
}

static void enter_completing(struct urt_graph *g, struct gstep *s)
{
    set_state(s, URT_STEP_COMPLETING);
    decide_forward(g, s);
    open_streams(g, s);
    s->open_dropped = true;
    if (atomic_fetch_sub_explicit(&s->live, 1, memory_order_acq_rel) == 1)
        s->tasks_done = true; /* no task was left: this drop completes it */
}

/* One step of the machine; false: wait for news. */
static bool advance_one(struct urt_graph *g, struct gstep *s)
{
    switch (state_of(s)) {
    case URT_STEP_ACTIVATED:
        if (s->side_left && !stopped(g, s))
            return false;
        if (s->d.prepare && s->n_side && !stopped(g, s)) {
            set_state(s, URT_STEP_PREPARING);
            gexec_start_prepare(g, s);
        } else {
            enter_prepared(g, s);
        }
        return true;
    case URT_STEP_PREPARING:
        if (atomic_load_explicit(&s->prep_live, memory_order_acquire))
            return false;
        enter_prepared(g, s);
        return true;
    case URT_STEP_PREPARED:
        if (stopped(g, s)) {
            enter_completing(g, s);
            return true;
        }
        return start_running(g, s);
    case URT_STEP_RUNNING:
        if (s->main == MAIN_FORWARD && s->main_left && !stopped(g, s))
            return false;
        enter_completing(g, s);
        return true;
    case URT_STEP_COMPLETING:
        if (!s->tasks_done)
            return false;
        step_completed(g, s);
        return true;
    default:
        return false;
    }
}

static void advance(struct urt_graph *g, struct gstep *s)
{
    while (advance_one(g, s))
        ;
}

/* ---- graph-wide events ------------------------------------------------------------------ */

static void start(struct urt_graph *g)
{
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        s->side_left = s->n_side;
        s->main_left = s->n_main;
        set_state(s, URT_STEP_ACTIVATED);
    }
    for (uint32_t i = 0; i < g->n_steps; i++)
        advance(g, g->steps[g->topo[i]]);
}

static void abort_all(struct urt_graph *g)
{
    if (g->aborting)
        return;
    g->aborting = true;
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        s->stop_done = true; /* every step, DELIVER too */
        atomic_store_explicit(&s->stop, 1, memory_order_seq_cst);
    }
    for (uint32_t i = 0; i < g->n_x; i++)
        gexec_wake(g, g->xs[i]);
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[i];
        for (uint32_t k = 0; s->d.processor && k < s->n_ctx; k++)
            gproc_notify(s->ctx[k]);
    }
    for (uint32_t i = 0; i < g->n_steps; i++) {
        struct gstep *s = g->steps[g->topo[i]];
        if (state_of(s) != URT_STEP_CREATED) /* before the start: start() advances them */
            advance(g, s);
    }
}

static void handle(struct urt_graph *g, struct gnews *n, uint32_t bits)
{
    if (n->step < 0) {
        if (bits & N_START)
            start(g);
    } else {
        struct gstep *s = g->steps[n->step];
        if (bits & N_TASKS_DONE)
            s->tasks_done = true;
        if (bits & N_STOP)
            step_stop(g, s);
        if (state_of(s) != URT_STEP_CREATED)
            advance(g, s);
    }
    if (!g->aborting && (atomic_load_explicit(&g->abort, memory_order_acquire) || urt_job_cancelled(g->job)))
        abort_all(g);
}

void gctl_drain(struct urt_graph *g)
{
    bool close = false;
    for (;;) {
        struct gnews *n = atomic_exchange_explicit(&g->ctl_head, NULL, memory_order_acquire), *rev = NULL;
        while (n) { /* reverse: arrival order (no object is pushed again before its bits are taken) */
            struct gnews *next = n->next;
            n->next = rev;
            rev = n;
            n = next;
        }
        int64_t k = 0;
        for (n = rev; n; k++) {
            struct gnews *next = n->next;
            handle(g, n, atomic_exchange_explicit(&n->bits, 0, memory_order_acq_rel));
            n = next;
        }
        if (g->finished && !g->closed)
            close = g->closed = true;
        if (atomic_fetch_sub_explicit(&g->ctl_pending, k, memory_order_acq_rel) - k <= 0)
            break;
    }
    if (close)
        urt_job_close(g->job); /* last touch: the job's teardown may free the graph */
}

/* ---- start, end, cancel ---------------------------------------------------------------------- */

enum urt_task_result gctl_bootstrap(struct urt_task *t, void *arg)
{
    struct urt_graph *g = arg;
    struct gexec e;
    (void)t;
    gexec_enter(&e, g);
    gctl_post(g, &g->news, N_START);
    gexec_leave(&e);
    return URT_TASK_DONE;
}

void gctl_bootstrap_cancel(struct urt_task *t, void *arg)
{
    gctl_bootstrap(t, arg); /* the graph starts stopped and ends at once */
}

void gctl_job_done(urt_job *job, int status, void *arg)
{
    struct urt_graph *g = arg;
    if (g->start_failed) {
        urt_job_release(job);
    } else {
        if (g->opt.done)
            g->opt.done(g, status, g->opt.arg);
    }
    graph_unref(g); /* the run's reference */
}

static int start_job(struct urt_graph *g)
{
    struct urt_job_options o;
    urt_job_options_init(&o);
    o.done = gctl_job_done;
    o.arg = g;
    o.deadline_ns = g->opt.deadline_ns;
    urt_job *job = NULL;
    int err = urt_job_create(g->rt, &o, &job);
    if (err)
        return err;
    g->job = job;
    g->phase = PH_STARTED; /* before the bootstrap: the graph may end, and be released, before spawn returns */
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed); /* the run's */
    /* A plain task, not a job task: the deadline may pass before it is
     * submitted, and a cancelled job takes no task; the job is open until the
     * controller closes it, so it cannot end before the bootstrap ran. */
    err = urt_spawn_ex(g->rt, gctl_bootstrap, gctl_bootstrap_cancel, g, 0);
    if (!err)
        return 0;
    /* nothing ran: end the job quietly (gctl_job_done drops the run's reference) */
    char why[160];
    snprintf(why, sizeof(why), "%s", urt_last_error());
    g->start_failed = true; /* final: the failed job's teardown may still read it */
    g->job = NULL;
    g->phase = PH_FAILED;
    urt_job_cancel(job);
    urt_job_close(job);
    return urt__error(err, "urt_graph_start: the bootstrap task: %s", why);
}

URT_API int urt_graph_start(urt_graph *g)
{
    if (!g)
        return urt__error(-EINVAL, "urt_graph_start: g is NULL");
    if (g->phase == PH_STARTED)
        return urt__error(-EALREADY, "urt_graph_start: the graph was started already");
    if (g->phase == PH_FAILED)
        return urt__error(-EINVAL, "urt_graph_start: an earlier start of the graph failed (release it)");
    if (g->phase == PH_BUILD) {
        int err = urt_graph_prepare(g);
        if (err) { /* its message, named after this call */
            char why[256];
            const char *m = urt_last_error(), *p = "urt_graph_prepare: ";
            snprintf(why, sizeof(why), "%s", strncmp(m, p, strlen(p)) ? m : m + strlen(p));
            return urt__error(err, "urt_graph_start: the graph cannot be prepared: %s", why);
        }
    }
    return start_job(g); /* touches nothing of g after the bootstrap was submitted */
}

URT_API int urt_graph_cancel(urt_graph *g)
{
    if (!g)
        return urt__error(-EINVAL, "urt_graph_cancel: g is NULL");
    if (!g->job)
        return urt__error(-EINVAL, "urt_graph_cancel: the graph was not started");
    /* The job's cancel decides: it fails once the job was cancelled, aborted,
     * timed out, or its teardown (the graph's end) began. */
    if (atomic_load_explicit(&g->abort, memory_order_acquire) || urt_job_abort(g->job, -ECANCELED))
        return urt__error(-EALREADY, "urt_graph_cancel: the graph was aborted already or ended");
    int32_t none = 0;
    if (atomic_compare_exchange_strong_explicit(&g->abort, &none, -ECANCELED, memory_order_seq_cst,
                                                memory_order_seq_cst))
        gctl_post(g, &g->news, N_ABORT);
    return 0;
}

URT_API int urt_graph_wait(urt_graph *g, uint64_t timeout_ns)
{
    if (!g)
        return urt__error(-EINVAL, "urt_graph_wait: g is NULL");
    if (!g->job)
        return urt__error(-EINVAL, "urt_graph_wait: the graph was not started");
    if (urt_current_worker(g->rt) >= 0)
        return urt__error(-EDEADLK, "urt_graph_wait: called on a worker (workers never block: use urt_graph_job "
                                    "and urt_job_poll)");
    int st = urt_job_wait(g->job, timeout_ns);
    if (st == -ETIMEDOUT)
        return urt__error(-ETIMEDOUT, "urt_graph_wait: the graph did not end within timeout_ns %llu",
                          (unsigned long long)timeout_ns);
    return st;
}
