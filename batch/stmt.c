/*
 * batch/stmt.c — one statement: a job of its own whose first task runs the
 * user's statement function (urt/batch.h "Statements and jobs").
 *
 * A statement's life: stmt_launch creates its job (open, with the node's
 * completion callback) and submits the runner task — to the transaction's
 * lane when the statement has a transaction, else to the job. The job is
 * closed once two holds are gone:
 *   - the run hold: dropped by the runner when the function returned (or by
 *     its cancel callback), so a statement whose completion is reported from
 *     the function itself (urt_batch_stmt_done inside it) still never ends
 *     under a running function;
 *   - the completion hold: dropped by the completion — the function's return
 *     of 0 / -errno, or urt_batch_stmt_done after URT_BATCH_PENDING.
 * Then the job ends when its own tasks (stmt->job's, I/O continuations of
 * them) are done, and its callback — the node's — continues the block or the
 * load. The runner, the statement struct and the fields belong to the node
 * and are reused by its next statement after that callback.
 *
 * Memory ordering: priv.done holds the two holds and the COMPLETED bit; every
 * change is an acq_rel RMW, so the one that drops the last hold has seen the
 * status (written before the completion's CAS) and everything the function
 * and the completer wrote; urt_job_close then hands that to the job's
 * teardown (J1 in sched/job.c). priv.status is a CAS from 0: the first error
 * of the statement.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "batch/batch.h"

#define STMT_COMPLETED (1u << 16)
#define STMT_HOLDS(v) ((v)&0xffffu)

/* The batch's error with this statement's position. */
static void stmt_fail(struct urt_batch_stmt *s, enum fail_kind kind, int err, const char *what)
{
    batch_fail_at(s->block, kind, err, (int64_t)s->record, s->offset, s->line, "%s", what);
}

static void stmt_set_status(struct urt_batch_stmt *s, int status)
{
    int32_t zero = 0;
    atomic_compare_exchange_strong_explicit(&s->priv.status, &zero, status, memory_order_relaxed,
                                            memory_order_relaxed);
}

static void hold_release(struct urt_batch_stmt *s)
{
    uint32_t n = atomic_fetch_sub_explicit(&s->priv.done, 1, memory_order_acq_rel) - 1;
    if (STMT_HOLDS(n) == 0)
        urt_job_close(s->job); /* s may be gone from here on */
}

/* The completion (once): -EALREADY if it happened before. */
static int complete(struct urt_batch_stmt *s, int status)
{
    if (status) {
        stmt_set_status(s, status);
        char what[96];
        snprintf(what, sizeof(what), "statement failed: %s", strerror(-status));
        stmt_fail(s, FAIL_INPUT, status, what); /* a no-op if the batch failed before (urt_batch_stmt_error) */
    }
    uint32_t v = atomic_load_explicit(&s->priv.done, memory_order_relaxed), n;
    do {
        if (v & STMT_COMPLETED)
            return -EALREADY;
        n = (v | STMT_COMPLETED) - 1;
    } while (!atomic_compare_exchange_weak_explicit(&s->priv.done, &v, n, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (STMT_HOLDS(n) == 0)
        urt_job_close(s->job);
    return 0;
}

static enum urt_task_result stmt_run(struct urt_task *t, void *arg)
{
    struct urt_batch_stmt *s = arg;
    struct urt_batch *b = s->batch;
    (void)t;
    if (batch_aborting(b)) { /* no statement starts after the batch's first error */
        stmt_set_status(s, -ECANCELED);
        complete(s, -ECANCELED); /* the batch's error stands (it came first) */
        hold_release(s);
        return URT_TASK_DONE;
    }
    int rc = b->opt.statement(s, b->opt.arg);
    if (rc != URT_BATCH_PENDING) {
        if (rc > 0)
            rc = urt_batch_stmt_error(s, -EINVAL, "the statement function returned %d (not 0, URT_BATCH_PENDING "
                                                  "or a -errno)", rc);
        complete(s, rc); /* -EALREADY: it called urt_batch_stmt_done itself */
    }
    hold_release(s);
    return URT_TASK_DONE;
}

static void stmt_run_cancel(struct urt_task *t, void *arg)
{
    struct urt_batch_stmt *s = arg;
    (void)t;
    stmt_set_status(s, -ECANCELED);
    stmt_fail(s, FAIL_OTHER, -ECANCELED, "the statement's task was cancelled before it ran");
    complete(s, -ECANCELED);
    hold_release(s);
}

int stmt_launch(struct urt_batch_stmt *s, urt_job_done_fn *done, void *arg)
{
    struct urt_job_options jo;
    urt_job_options_init(&jo);
    jo.done = done;
    jo.arg = arg;
    int rc = urt_job_create(s->batch->rt, &jo, &s->job);
    if (rc)
        return rc;
    atomic_store_explicit(&s->priv.status, 0, memory_order_relaxed);
    atomic_store_explicit(&s->priv.done, 2, memory_order_relaxed); /* published by the submission */
    urt_task_init(&s->priv.runner, stmt_run, s);
    s->priv.runner.cancel = stmt_run_cancel;
    rc = s->tx ? urt_tx_submit(s->tx, &s->priv.runner, 0) : urt_job_submit(s->job, &s->priv.runner, 0);
    if (rc) {
        char what[200];
        snprintf(what, sizeof(what), "cannot submit the statement's task: %s", urt_last_error());
        stmt_set_status(s, rc);
        stmt_fail(s, FAIL_OTHER, rc, what);
        complete(s, rc);
        hold_release(s); /* the job ends: done(arg) runs with the error */
    }
    return 0;
}

int stmt_status(const struct urt_batch_stmt *s)
{
    return atomic_load_explicit(&s->priv.status, memory_order_acquire);
}

/* ---- public ---------------------------------------------------------------------------- */

URT_API int urt_batch_stmt_done(struct urt_batch_stmt *stmt, int status)
{
    if (!stmt)
        return urt__error(-EINVAL, "urt_batch_stmt_done: stmt is NULL");
    if (status > 0)
        return urt__error(-EINVAL, "urt_batch_stmt_done: status %d is positive (0 or a -errno)", status);
    if (complete(stmt, status))
        return urt__error(-EALREADY, "urt_batch_stmt_done: statement %p was completed before", (void *)stmt);
    return 0;
}

URT_API int urt_batch_stmt_error(struct urt_batch_stmt *stmt, int err, const char *fmt, ...)
{
    if (!stmt)
        return urt__error(-EINVAL, "urt_batch_stmt_error: stmt is NULL");
    if (err >= 0)
        err = -EINVAL;
    char what[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
    }
    stmt_set_status(stmt, err);
    stmt_fail(stmt, FAIL_INPUT, err, what[0] ? what : strerror(-err));
    return urt__error(err, "urt_batch_stmt_error: %s", what[0] ? what : strerror(-err));
}
