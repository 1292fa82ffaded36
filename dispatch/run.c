/*
 * dispatch/run.c — one run of one strand: lease take, the run's job, its
 * result, urt_dispatch_run_sql, the lease release (SPEC C21; the path of a slot
 * and who owns it when: dispatch/dispatch_int.h).
 *
 *   control lane      run_take: the take statement to a run connection
 *   run connection    take_done: no row -> back to the control lane; a row ->
 *                     run_begin: a job with deadline run_budget_ns, the
 *                     handler as its first task, closed at once
 *   job's tasks       the handler; urt_dispatch_run_done/_nap/_fail (one CAS
 *                     decides), urt_dispatch_run_sql
 *   job's teardown    job_done: drops the job's share of the gate
 *   last gate holder  send_release: done / nap / release statement
 *   run connection    release_done: violated lease? -> back to the control lane
 *
 * Hand-overs (handoff): the take and the release to a run connection, the
 * slot back to the control lane. Each is a lane submission, which the
 * runtime's admission limit (max_pending_tasks, urt/admission.h) may refuse
 * with -EAGAIN: then it is tried again 1 ms later from the continuation of
 * a sleep on the slot's retry io (a continuation is the runtime's own task,
 * not counted), so no slot is ever lost to the limit. Any other refusal
 * (the runtime is being destroyed) is logged; a take or release that cannot
 * go out sends the slot back (its lease, if any, expires).
 *
 * The gate. The release may go out only when the job ended AND no statement
 * of urt_dispatch_run_sql is still at the database (the job ends early when its
 * deadline cancels the wait for one). gate = 1 for the job + 1 per statement
 * request in flight; each side drops its share with one fetch_sub (acq_rel:
 * the dropper's writes to the slot — the job's result, the statement's
 * result — happen before the release that the last dropper sends). A
 * statement adds its share from a task of the job, while the job's share is
 * still held, so the gate never rises from 0.
 *
 * urt_dispatch_run_sql's wait is job work: the calling task polls the slot's
 * eventfd (urt_io_poll, urt/io.h: a job's operation in flight keeps the job
 * alive; cancelling the job cancels it). The request's callback, on the run
 * connection's lane, stores the result in the slot, clears sql_req_busy and
 * writes the eventfd (write(2) orders the stores before the poll's
 * completion, which runs the continuation), then drops its gate share. A
 * wait cancelled by the deadline leaves the request to finish alone; the
 * eventfd is drained before the slot's next statement. A statement still
 * queued at its connection when the job ended is not sent at all (its
 * request's abandon flag, job_ended): a run's statements never execute
 * after the run is over.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/error.h"
#include "dispatch/dispatch_int.h"

static void send_release(struct urt_dispatch_run *run);

/* ---- hand-overs -------------------------------------------------------------- */

enum handoff { HO_TAKE, HO_RELEASE, HO_FINISH };

static void handoff(struct urt_dispatch_run *run, enum handoff what);

static void retry_handoff(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)res;
    struct urt_dispatch_run *run = arg;
    handoff(run, (enum handoff)run->retry_what);
}

static void handoff(struct urt_dispatch_run *run, enum handoff what)
{
    struct urt_dispatch *d = run->d;
    int err = what == HO_TAKE      ? dconn_submit(&d->conns[run->conn], &run->take)
              : what == HO_RELEASE ? dconn_submit(dispatch_pick_conn(d), &run->release)
                                   : control_run_finished(run);
    if (err == 0)
        return;
    if (err == -EAGAIN) {
        run->retry_what = (int)what;
        urt_io_init(&run->retry_io, retry_handoff, run);
        if (urt_io_sleep(&run->retry_io, 1000000) == 0)
            return;
    }
    static const char *const names[] = {"its lease take", "its release", "its slot's return"};
    dispatch_log(d, "strand %s: %s could not be handed over: %s", run->id, names[what], strerror(-err));
    if (what != HO_FINISH)
        handoff(run, HO_FINISH); /* a lease taken and not released expires */
}

/* ---- slots ---------------------------------------------------------------- */

int run_slots_init(struct urt_dispatch *d)
{
    d->slots = calloc(d->n_slots, sizeof(*d->slots));
    if (!d->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct urt_dispatch_run *r = &d->slots[i];
        r->d = d;
        r->index = i;
        r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (r->efd < 0)
            return -errno;
    }
    return 0;
}

void run_slots_fini(struct urt_dispatch *d)
{
    if (!d->slots)
        return;
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct urt_dispatch_run *r = &d->slots[i];
        if (r->efd >= 0)
            close(r->efd);
        free(r->payload);
        free(r->last_error);
        free(r->exitval);
        free(r->fail_reason);
        free(r->sql_buf);
    }
    free(d->slots);
    d->slots = NULL;
}

struct urt_dispatch_run *run_of_job(struct urt_dispatch *d, const urt_job *job)
{
    if (!job || !d->slots)
        return NULL;
    for (uint32_t i = 0; i < d->n_slots; i++)
        if (atomic_load_explicit(&d->slots[i].watch_job, memory_order_acquire) == job) /* pairs with run_begin */
            return &d->slots[i];
    return NULL;
}

static void slot_reset(struct urt_dispatch_run *run)
{
    free(run->exitval);
    run->exitval = NULL;
    free(run->fail_reason);
    run->fail_reason = NULL;
    free(run->sql_buf);
    run->sql_buf = NULL;
    run->nap_ns = 0;
    run->job = NULL;
    run->job_status = 0;
    atomic_store_explicit(&run->result, RES_NONE, memory_order_relaxed);
    atomic_store_explicit(&run->gate, 1, memory_order_relaxed);
    atomic_store_explicit(&run->sql_busy, false, memory_order_relaxed);
    atomic_store_explicit(&run->sql_req_busy, false, memory_order_relaxed);
    atomic_store_explicit(&run->job_ended, false, memory_order_relaxed);
}

/* ---- the take ------------------------------------------------------------- */

static void take_done(struct dreq *r, PGresult *res, int err, const char *msg);

void run_take(struct urt_dispatch_run *run)
{
    struct urt_dispatch *d = run->d;
    slot_reset(run);
    run->take_params[0] = run->id;
    run->take_params[1] = d->lease_text;
    struct dreq *q = &run->take;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_PREPARED;
    q->stmt = DSQL_TAKE;
    q->nparams = 2;
    q->params = run->take_params;
    q->fn = take_done;
    q->arg = run;
    run->conn = (uint32_t)(dispatch_pick_conn(d) - d->conns);
    handoff(run, HO_TAKE);
}

/* Copies p into the slot's growing buffer *buf (the strand's strings live
 * as long as the slot); "" when there is no memory. */
static const char *keep_text(char **buf, size_t *cap, const char *p)
{
    size_t n = strlen(p) + 1;
    if (n > *cap) {
        char *b = realloc(*buf, n);
        if (!b)
            return "";
        *buf = b;
        *cap = n;
    }
    memcpy(*buf, p, n);
    return *buf;
}

static void run_begin(struct urt_dispatch_run *run);

static void take_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    struct urt_dispatch_run *run = r->arg;
    struct urt_dispatch *d = run->d;
    run->sample.lease_delay_ns = urt_now_ns() - run->started_ns;
    atomic_fetch_add_explicit(&d->ctr.runs, 1, memory_order_relaxed);
    int row = err < 0 ? -1 : r->row; /* the batch's row of this strand (dispatch/conn.h) */
    bool spent = row >= 0 && PQgetvalue(res, row, 5)[0] == 'f';
    if (row < 0 || spent) {
        if (err < 0 && err != -ESHUTDOWN)
            dispatch_log(d, "lease take of strand %s failed: %s", run->id, msg);
        else if (spent)
            atomic_fetch_add_explicit(&d->ctr.dead, 1, memory_order_relaxed);
        else if (err == 0)
            atomic_fetch_add_explicit(&d->ctr.leases_missed, 1, memory_order_relaxed);
        if (spent)
            dispatch_log(d, "strand %s (%s) moved to the dead letters: its attempts are used up (the lease of its "
                            "last run expired)", run->id, d->handlers[run->handler].kind);
        run->sample.acquired = false;
        handoff(run, HO_FINISH);
        return;
    }
    run->sample.acquired = true;
    snprintf(run->lease_us, sizeof(run->lease_us), "%s", PQgetvalue(res, row, 1));
    snprintf(run->schedule_us, sizeof(run->schedule_us), "%s", PQgetvalue(res, row, 2));
    run->strand.id = run->id;
    run->strand.kind = d->handlers[run->handler].kind;
    run->strand.payload = keep_text(&run->payload, &run->payload_cap, PQgetvalue(res, row, 4));
    run->strand.max_attempts = (uint32_t)strtoul(PQgetvalue(res, row, 6), NULL, 10);
    run->strand.priority = (int32_t)strtol(PQgetvalue(res, row, 7), NULL, 10);
    run->strand.last_error = PQgetisnull(res, row, 8) ? NULL
                             : keep_text(&run->last_error, &run->last_error_cap, PQgetvalue(res, row, 8));
    run->strand.try_count = (uint32_t)strtoul(PQgetvalue(res, row, 3), NULL, 10);
    run->strand.old_strand = run->sample.old_strand;
    run->strand.lease_expired = run->sample.lease_expired;
    run_begin(run);
}

/* ---- the run's job -------------------------------------------------------- */

static void gate_drop(struct urt_dispatch_run *run)
{
    if (atomic_fetch_sub_explicit(&run->gate, 1, memory_order_acq_rel) == 1)
        send_release(run);
}

static void job_done(urt_job *job, int status, void *arg)
{
    struct urt_dispatch_run *run = arg;
    run->job_status = status;
    if (status == -ETIME)
        atomic_fetch_add_explicit(&run->d->ctr.budget_exceeded, 1, memory_order_relaxed);
    atomic_store_explicit(&run->watch_job, NULL, memory_order_relaxed);
    atomic_store_explicit(&run->job_ended, true, memory_order_release); /* pairs with send_next's acquire */
    urt_job_release(job);
    gate_drop(run);
}

static enum urt_task_result handler_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_dispatch_run *run = arg;
    const struct handler *h = &run->d->handlers[run->handler];
    h->fn(run, &run->strand, h->ctx);
    return URT_TASK_DONE;
}

static void run_begin(struct urt_dispatch_run *run)
{
    struct urt_dispatch *d = run->d;
    struct urt_job_options o;
    urt_job_options_init(&o);
    o.done = job_done;
    o.arg = run;
    o.deadline_ns = d->opt.run_budget_ns;
    urt_job *job = NULL;
    int err = urt_job_create(d->rt, &o, &job);
    if (err < 0) {
        dispatch_log(d, "strand %s: no job for its run: %s", run->id, urt_last_error());
        urt_dispatch_run_fail(run, "the run's job could not be created");
        gate_drop(run);
        return;
    }
    run->job = job;
    atomic_store_explicit(&run->watch_job, job, memory_order_release); /* pairs with run_of_job */
    urt_task_init(&run->handler_task, handler_task, run);
    err = urt_job_submit(job, &run->handler_task, 0);
    if (err < 0)
        urt_dispatch_run_fail(run, "the handler's task could not be submitted");
    urt_job_close(job); /* the job ends after its tasks: job_done */
}

/* ---- results ---------------------------------------------------------------- */

static int set_result(struct urt_dispatch_run *run, int what, const char *fn)
{
    if (!run)
        return urt__error(-EINVAL, "%s: run is NULL", fn);
    int none = RES_NONE;
    if (!atomic_compare_exchange_strong_explicit(&run->result, &none, what, memory_order_acq_rel,
                                                 memory_order_acquire))
        return urt__error(-EALREADY, "%s: run of strand %s has its result already", fn, run->id);
    return 0;
}

URT_API int urt_dispatch_run_done(struct urt_dispatch_run *run, const char *exitval)
{
    char *copy = strdup(exitval ? exitval : "");
    if (!copy)
        return urt__error(-ENOMEM, "urt_dispatch_run_done: no memory for the exit value");
    int err = set_result(run, RES_DONE, "urt_dispatch_run_done");
    if (err < 0) {
        free(copy);
        return err;
    }
    run->exitval = copy; /* read by send_release after the gate (acq_rel) */
    return 0;
}

URT_API int urt_dispatch_run_nap(struct urt_dispatch_run *run, uint64_t ns)
{
    int err = set_result(run, RES_NAP, "urt_dispatch_run_nap");
    if (err < 0)
        return err;
    run->nap_ns = ns;
    return 0;
}

URT_API int urt_dispatch_run_fail(struct urt_dispatch_run *run, const char *reason)
{
    char *copy = reason ? strdup(reason) : NULL;
    int err = set_result(run, RES_FAIL, "urt_dispatch_run_fail");
    if (err < 0) {
        free(copy);
        return err;
    }
    run->fail_reason = copy;
    return 0;
}

URT_API const struct urt_dispatch_strand *urt_dispatch_run_strand(const struct urt_dispatch_run *run)
{
    return run ? &run->strand : NULL;
}

URT_API urt_job *urt_dispatch_run_job(const struct urt_dispatch_run *run)
{
    return run ? run->job : NULL;
}

/* ---- the release ------------------------------------------------------------ */

static void release_done(struct dreq *r, PGresult *res, int err, const char *msg);

/* The gate is open: the result is final (none given = a failure). */
static void send_release(struct urt_dispatch_run *run)
{
    struct urt_dispatch *d = run->d;
    int what = RES_NONE; /* the result given, or RES_FAIL put in its place */
    if (atomic_compare_exchange_strong_explicit(&run->result, &what, RES_FAIL, memory_order_acq_rel,
                                                memory_order_acquire))
        what = RES_FAIL;
    struct dreq *q = &run->release;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_PREPARED;
    q->params = run->rel_params;
    q->fn = release_done;
    q->arg = run;
    q->resend = true;
    run->rel_params[0] = run->id;
    run->rel_params[1] = run->lease_us;
    if (what == RES_DONE) {
        q->stmt = DSQL_DONE;
        q->nparams = 3;
        run->rel_params[2] = run->exitval;
    } else if (what == RES_NAP) {
        q->stmt = DSQL_NAP;
        q->nparams = 4;
        snprintf(run->nap_us, sizeof(run->nap_us), "%" PRIu64, run->nap_ns / 1000);
        run->rel_params[2] = run->schedule_us;
        run->rel_params[3] = run->nap_us;
    } else {
        q->stmt = DSQL_RELEASE;
        q->nparams = 5;
        run->rel_params[3] = d->backoff_base_text; /* the retry's backoff (dispatch.sql: release) */
        run->rel_params[4] = d->backoff_max_text;
        const char *why = run->fail_reason ? run->fail_reason
                          : run->job_status == -ETIME ? "its run passed run_budget_ns"
                          : run->job_status == -ECANCELED ? "its run's job was cancelled"
                                                            : "the handler gave no result";
        run->rel_params[2] = why; /* kept as the strand's last_error */
        dispatch_log(d, "strand %s (%s, try %u) failed: %s", run->id, run->strand.kind, run->strand.try_count,
                     why);
    }
    handoff(run, HO_RELEASE);
}

static void release_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    struct urt_dispatch_run *run = r->arg;
    struct urt_dispatch *d = run->d;
    int what = atomic_load_explicit(&run->result, memory_order_relaxed);
    bool applied = err == 0 && (r->stmt == DSQL_DONE      ? r->row >= 0 /* a batch's row (dispatch/conn.h) */
                                : r->stmt == DSQL_RELEASE ? PQntuples(res) == 1
                                                          : dconn_affected(res) == 1);
    if (err < 0) {
        dispatch_log(d, "release of strand %s failed: %s; its lease will expire", run->id, msg);
    } else if (!applied) {
        if (r->resent) {
            atomic_fetch_add_explicit(&d->ctr.releases_uncertain, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&d->ctr.leases_violated, 1, memory_order_relaxed);
            dispatch_log(d, "lease violated: strand %s (%s, try %u): its lease changed during the run; result "
                            "not applied", run->id, run->strand.kind, run->strand.try_count);
        }
    } else {
        _Atomic uint64_t *c = what == RES_DONE ? &d->ctr.done : what == RES_NAP ? &d->ctr.naps : &d->ctr.failed;
        atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
        if (r->stmt == DSQL_RELEASE && PQgetvalue(res, 0, 0)[0] == 't') {
            atomic_fetch_add_explicit(&d->ctr.dead, 1, memory_order_relaxed);
            dispatch_log(d, "strand %s (%s) moved to the dead letters after try %u: %s", run->id, run->strand.kind,
                         run->strand.try_count, run->rel_params[2]);
        }
    }
    handoff(run, HO_FINISH);
}

/* ---- urt_dispatch_run_sql ----------------------------------------------------- */

static void sql_req_done(struct dreq *r, PGresult *res, int err, const char *msg);
static void sql_wait_done(struct urt_io *io, int32_t res, void *arg);

/* One block: the statement, its parameters, room for the result's value and
 * message (filled by sql_req_done). */
static int sql_copy(struct urt_dispatch_run *run, const char *sql, const char *const *params, uint32_t n)
{
    size_t len = strlen(sql) + 1;
    for (uint32_t i = 0; i < n; i++)
        len += params[i] ? strlen(params[i]) + 1 : 0;
    free(run->sql_buf);
    run->sql_buf = malloc(len);
    if (!run->sql_buf)
        return -ENOMEM;
    char *p = run->sql_buf;
    size_t k = strlen(sql) + 1;
    memcpy(p, sql, k);
    run->sql.sql = p;
    p += k;
    for (uint32_t i = 0; i < n; i++) {
        run->sql_params[i] = NULL;
        if (!params[i])
            continue;
        k = strlen(params[i]) + 1;
        memcpy(p, params[i], k);
        run->sql_params[i] = p;
        p += k;
    }
    return 0;
}

static int sql_check(struct urt_dispatch_run *run, const char *sql, uint32_t n, urt_dispatch_sql_fn *fn)
{
    if (!run || !sql || !fn)
        return urt__error(-EINVAL, "urt_dispatch_run_sql: %s is NULL", !run ? "run" : !sql ? "sql" : "fn");
    if (n > DISPATCH_MAX_SQL_PARAMS)
        return urt__error(-EINVAL, "urt_dispatch_run_sql: n_params %u is over %d", n, DISPATCH_MAX_SQL_PARAMS);
    if (urt_current_worker(run->d->rt) < 0)
        return urt__error(-EPERM, "urt_dispatch_run_sql: not on a worker of the dispatcher's runtime");
    if (atomic_load_explicit(&run->result, memory_order_acquire) != RES_NONE || !run->job)
        return urt__error(-EALREADY, "urt_dispatch_run_sql: run of strand %s has its result already", run->id);
    if (urt_job_cancelled(run->job))
        return urt__error(-ECANCELED, "urt_dispatch_run_sql: run of strand %s was cancelled (budget)", run->id);
    return 0;
}

URT_API int urt_dispatch_run_sql(struct urt_dispatch_run *run, const char *sql, const char *const *params,
                             uint32_t n_params, urt_dispatch_sql_fn *fn, void *arg)
{
    int err = sql_check(run, sql, n_params, fn);
    if (err < 0)
        return err;
    if (atomic_exchange_explicit(&run->sql_busy, true, memory_order_acq_rel))
        return urt__error(-EBUSY, "urt_dispatch_run_sql: run of strand %s has a statement in flight", run->id);
    if (sql_copy(run, sql, params, n_params) < 0) {
        atomic_store_explicit(&run->sql_busy, false, memory_order_release);
        return urt__error(-ENOMEM, "urt_dispatch_run_sql: no memory for the statement");
    }
    uint64_t drain;
    while (read(run->efd, &drain, sizeof(drain)) > 0) /* a cancelled wait's late wake-up */
        ;
    run->sql_fn = fn;
    run->sql_arg = arg;
    urt_io_init(&run->sql_io, sql_wait_done, run);
    err = urt_io_poll(&run->sql_io, run->efd, POLLIN);
    if (err < 0) {
        atomic_store_explicit(&run->sql_busy, false, memory_order_release);
        return err; /* urt_io_poll recorded the message */
    }
    atomic_fetch_add_explicit(&run->gate, 1, memory_order_relaxed); /* the job's share is held: never from 0 */
    atomic_store_explicit(&run->sql_req_busy, true, memory_order_relaxed);
    struct dreq *q = &run->sql;
    const char *text = q->sql;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_PARAMS;
    q->sql = text;
    q->nparams = (int)n_params;
    q->params = run->sql_params;
    q->fn = sql_req_done;
    q->arg = run;
    q->abandon = &run->job_ended; /* a statement still queued when the run ended is dropped */
    if (dconn_submit(dispatch_pick_conn(run->d), q) < 0)
        sql_req_done(q, NULL, -ECONNRESET, "the run connection refused the statement");
    return 0;
}

/* The run connection's lane: keep the result in the slot, wake the wait. */
static void sql_req_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    struct urt_dispatch_run *run = r->arg;
    struct urt_dispatch_sql_result *out = &run->sql_res;
    const char *value = err == 0 && PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0)
                            ? PQgetvalue(res, 0, 0) : NULL;
    size_t vlen = value ? strlen(value) + 1 : 0, mlen = strlen(msg) + 1;
    char *b = malloc(vlen + mlen);
    out->status = err;
    out->rows = err < 0 ? 0 : PQresultStatus(res) == PGRES_TUPLES_OK ? (uint64_t)PQntuples(res) : dconn_affected(res);
    out->value = NULL;
    out->message = "";
    if (b) {
        if (value)
            memcpy(b, value, vlen);
        memcpy(b + vlen, msg, mlen);
        out->value = value ? b : NULL;
        out->message = b + vlen;
    }
    free(run->sql_buf); /* the statement text is sent: its block becomes the result's */
    run->sql_buf = b;
    atomic_store_explicit(&run->sql_req_busy, false, memory_order_release);
    uint64_t one = 1;
    ssize_t w = write(run->efd, &one, sizeof(one));
    (void)w;
    gate_drop(run);
}

/* A task of the run's job: the statement answered, or the job was cancelled. */
static void sql_wait_done(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct urt_dispatch_run *run = arg;
    struct urt_dispatch_sql_result cancelled = {.status = -ECANCELED, .message = "the run's job was cancelled"};
    const struct urt_dispatch_sql_result *out = &run->sql_res;
    if (res < 0 || atomic_load_explicit(&run->sql_req_busy, memory_order_acquire))
        out = &cancelled; /* pairs with sql_req_done's release store */
    uint64_t drain;
    while (read(run->efd, &drain, sizeof(drain)) > 0)
        ;
    urt_dispatch_sql_fn *fn = run->sql_fn;
    if (out == &cancelled) {
        fn(run, out, run->sql_arg); /* sql_busy stays: the request is still out */
        return;
    }
    atomic_store_explicit(&run->sql_busy, false, memory_order_release);
    fn(run, out, run->sql_arg);
}
