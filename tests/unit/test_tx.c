/*
 * tests/unit/test_tx.c — transactions (SPEC C11): the end-of-transaction
 * protocol of urt/tx.h.
 *
 * Deterministic cases: commit with nothing in flight; abort idempotent;
 * commit after abort (-ECANCELED) and abort after commit (-EALREADY); STORED
 * without a log (-EOPNOTSUPP, nothing changes); commit with a task in flight
 * (deferred: 0 at once, the last task in flight performs it when its fn
 * returned, the queued task is not run); a task committing its own
 * transaction; a task queued behind an abort is not run (cancel callback,
 * inactive); a failing
 * pre-commit hook aborts and reports its error; submission after the end;
 * records appended in order.
 *
 * Concurrent case: per transaction a feeder keeps submitting tasks while
 * several threads race commit and abort requests at random times. Checked:
 * the hooks run at most once each, never together and never while a task of
 * the transaction runs (a shared in-use flag); exactly one request "wins"
 * (one commit returning 0, or the abort performed), the callback runs once
 * iff a commit returned 0; every submitted task ran or was cancelled once; no
 * task started after the end.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"
#include "tx/commit_hook.h"

struct txs {
    urt_runtime *rt;
    _Atomic int pre_commits, aborts, callbacks, cb_status, hook_worker;
    _Atomic int in_use, overlaps;
    _Atomic int ran, cancelled, submitted, after_end;
    _Atomic bool ended;
    int pre_commit_result;
};

static int pre_commit_hook(urt_tx *tx, void *arg)
{
    struct txs *s = arg;
    (void)tx;
    if (atomic_exchange(&s->in_use, 1))
        atomic_fetch_add(&s->overlaps, 1);
    atomic_fetch_add(&s->pre_commits, 1);
    atomic_store(&s->ended, true);
    atomic_store(&s->in_use, 0);
    return s->pre_commit_result;
}

static void abort_hook(urt_tx *tx, void *arg)
{
    struct txs *s = arg;
    (void)tx;
    if (atomic_exchange(&s->in_use, 1))
        atomic_fetch_add(&s->overlaps, 1);
    atomic_fetch_add(&s->aborts, 1);
    atomic_store(&s->hook_worker, urt_current_worker(s->rt));
    atomic_store(&s->ended, true);
    atomic_store(&s->in_use, 0);
}

static void commit_cb(urt_tx *tx, int status, void *arg)
{
    struct txs *s = arg;
    (void)tx;
    atomic_store(&s->cb_status, status);
    atomic_fetch_add(&s->callbacks, 1);
}

static urt_tx *begin(struct txs *s)
{
    struct urt_tx_options o;
    urt_tx_options_init(&o);
    o.hooks.pre_commit = pre_commit_hook;
    o.hooks.abort = abort_hook;
    o.hooks.arg = s;
    urt_tx *tx = NULL;
    cr_assert_eq(urt_tx_begin(s->rt, &o, &tx), 0);
    return tx;
}

static urt_runtime *make_rt(uint32_t workers)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    return rt_create_or_skip(&cfg);
}

static enum urt_task_result work_fn(struct urt_task *t, void *arg)
{
    struct txs *s = arg;
    (void)t;
    if (atomic_load(&s->ended))
        atomic_fetch_add(&s->after_end, 1);
    if (atomic_exchange(&s->in_use, 1))
        atomic_fetch_add(&s->overlaps, 1);
    for (volatile int i = 0; i < 300; i++)
        ;
    atomic_store(&s->in_use, 0);
    atomic_fetch_add(&s->ran, 1);
    return URT_TASK_DONE;
}

static void work_cancel(struct urt_task *t, void *arg)
{
    struct txs *s = arg;
    if (!urt_task_tx(t))
        atomic_fetch_add(&s->overlaps, 1000); /* checked on the main thread */
    atomic_fetch_add(&s->cancelled, 1);
}

static void work_cancel_mt(struct urt_task *t, void *arg)
{
    struct txs *s = arg;
    (void)t;
    atomic_fetch_add(&s->cancelled, 1);
}

/* ---- deterministic ---------------------------------------------------------------- */

Test(tx, commit_with_nothing_in_flight, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(2);
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_state(tx), URT_TX_ACTIVE);
    cr_assert_neq(urt_tx_id(tx), 0);
    cr_assert_eq(urt_tx_spawn(tx, work_fn, work_cancel_mt, &s, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.ran) == 1, 5000));
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_AVAILABLE, commit_cb, &s), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1, 5000));
    cr_assert_eq(atomic_load(&s.cb_status), 0);
    cr_assert_eq(atomic_load(&s.pre_commits), 1);
    cr_assert_eq(atomic_load(&s.aborts), 0);
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTED);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_AVAILABLE, commit_cb, &s), -EALREADY);
    cr_assert_eq(urt_tx_abort(tx), -EALREADY);
    cr_assert_eq(urt_tx_spawn(tx, work_fn, NULL, &s, 0), URT_TX_EINACTIVE);
    urt_tx_release(tx);
    urt_tx_release(NULL);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    cr_assert_eq(atomic_load(&s.aborts), 0);
}

Test(tx, abort_is_idempotent, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(2);
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_abort(tx), 0);
    cr_assert_eq(atomic_load(&s.aborts), 1, "no task in flight: the abort is performed by the caller");
    cr_assert_eq(atomic_load(&s.hook_worker), -1);
    cr_assert_eq(urt_tx_abort(tx), 0);
    cr_assert_eq(urt_tx_state(tx), URT_TX_ABORTED);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_ACCEPTED, commit_cb, &s), -ECANCELED);
    urt_tx_release(tx); /* release aborts again: still idempotent */
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&s.aborts), 1);
    cr_assert_eq(atomic_load(&s.pre_commits), 0);
    cr_assert_eq(atomic_load(&s.callbacks), 0);
}

Test(tx, stored_without_log_is_refused, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(1);
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_log(tx, "abc", 3), 0);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_STORED, commit_cb, &s), -EOPNOTSUPP);
    cr_assert(strstr(urt_last_error(), "write-ahead log"), "%s", urt_last_error());
    cr_assert_eq(urt_tx_state(tx), URT_TX_ACTIVE, "a refused STORED commit changes nothing");
    cr_assert_eq(atomic_load(&s.pre_commits), 0);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_ACCEPTED, commit_cb, &s), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1, 5000));
    cr_assert_eq(urt_tx_commit(NULL, URT_COMMIT_ACCEPTED, commit_cb, &s), -EINVAL);
    cr_assert_eq(urt_tx_commit(tx, (enum urt_commit_response)7, commit_cb, &s), -EINVAL);
    urt_tx_release(tx);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
}

static _Atomic bool g_gate;

static enum urt_task_result gated_fn(struct urt_task *t, void *arg)
{
    struct txs *s = arg;
    (void)t;
    atomic_store(&s->in_use, 1);
    while (!atomic_load(&g_gate))
        sched_yield();
    atomic_store(&s->in_use, 0);
    atomic_fetch_add(&s->ran, 1);
    return URT_TASK_DONE;
}

/* A commit requested while a task of the transaction runs is deferred: it
 * returns 0 at once, no task starts after it (the queued one is cancelled),
 * and the last task in flight performs it when its fn returned — pre-commit
 * hook on that task's worker, the callback exactly once with 0. */
Test(tx, commit_with_task_in_flight_is_deferred, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(2);
    atomic_store(&s.hook_worker, -2);
    atomic_store(&g_gate, false);
    urt_tx *tx = begin(&s);
    static struct urt_task a, b;
    urt_task_init(&a, gated_fn, &s);
    urt_task_init(&b, work_fn, &s);
    b.cancel = work_cancel;
    cr_assert_eq(urt_tx_submit(tx, &a, 0), 0);
    cr_assert_eq(urt_tx_submit(tx, &b, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.in_use) == 1, 5000)); /* a is running */
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_AVAILABLE, commit_cb, &s), 0);
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTING);
    cr_assert_eq(atomic_load(&s.pre_commits), 0, "the task in flight performs the commit");
    cr_assert_eq(urt_tx_abort(tx), -EALREADY);
    cr_assert(strstr(urt_last_error(), "commit"), "%s", urt_last_error());
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_AVAILABLE, commit_cb, &s), -EALREADY);
    static struct urt_task c;
    urt_task_init(&c, work_fn, &s);
    cr_assert_eq(urt_tx_submit(tx, &c, 0), URT_TX_EINACTIVE);
    cr_assert(strstr(urt_last_error(), "urt_tx_submit"), "%s", urt_last_error());
    atomic_store(&g_gate, true);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1 && atomic_load(&s.cancelled) == 1, 5000));
    cr_assert_eq(atomic_load(&s.cb_status), 0);
    cr_assert_eq(atomic_load(&s.pre_commits), 1);
    cr_assert_eq(atomic_load(&s.ran), 1, "b was queued behind the commit: not run");
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTED);
    urt_tx_release(tx);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&s.aborts), 0);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    cr_assert_eq(atomic_load(&s.overlaps), 0);
}

/* A task in flight may commit its own transaction: the commit starts once
 * the task's fn returned. */
static enum urt_task_result self_committing_fn(struct urt_task *t, void *arg)
{
    struct txs *s = arg;
    urt_tx *tx = urt_task_tx(t);
    urt_tx_log(tx, "self", 4);
    atomic_store(&s->hook_worker, urt_tx_commit(tx, URT_COMMIT_ACCEPTED, commit_cb, s));
    atomic_fetch_add(&s->ran, 1);
    return URT_TASK_DONE;
}

Test(tx, task_commits_its_own_transaction, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(1);
    atomic_store(&s.hook_worker, 1);
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_spawn(tx, self_committing_fn, work_cancel_mt, &s, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1, 5000));
    cr_assert_eq(atomic_load(&s.hook_worker), 0, "urt_tx_commit from the task returned %d",
                 atomic_load(&s.hook_worker));
    cr_assert_eq(atomic_load(&s.cb_status), 0);
    cr_assert_eq(atomic_load(&s.pre_commits), 1);
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTED);
    urt_tx_release(tx);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&s.aborts), 0);
}

Test(tx, failing_pre_commit_aborts, .timeout = 30)
{
    static struct txs s;
    s.rt = make_rt(1);
    s.pre_commit_result = -EDEADLK;
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_AVAILABLE, commit_cb, &s), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1, 5000));
    cr_assert_eq(atomic_load(&s.cb_status), -EDEADLK);
    cr_assert_eq(atomic_load(&s.pre_commits), 1);
    cr_assert_eq(atomic_load(&s.aborts), 1);
    cr_assert_eq(urt_tx_state(tx), URT_TX_ABORTED);
    urt_tx_release(tx);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A stand-in log: records what it got and completes STORED from a thread. */
struct fake_log {
    struct tx_log base;
    urt_tx *tx;
    size_t n_records;
    char first[8];
};

static int fake_commit(struct tx_log *log, urt_tx *tx, enum urt_commit_response r)
{
    struct fake_log *f = (struct fake_log *)log;
    (void)r;
    f->tx = tx;
    size_t cur = 0;
    uint32_t len;
    const void *p = tx_record_next(tx, &cur, &len);
    if (p && len < sizeof(f->first))
        memcpy(f->first, p, len);
    f->n_records = tx_record_count(tx);
    return 0; /* completes later */
}

Test(tx, stored_goes_through_the_log_seam, .timeout = 30)
{
    static struct txs s;
    static struct fake_log log = {.base = {.commit = fake_commit}};
    s.rt = make_rt(1);
    tx_log_register(s.rt, &log.base);
    urt_tx *tx = begin(&s);
    cr_assert_eq(urt_tx_log(tx, "first", 5), 0);
    cr_assert_eq(urt_tx_log(tx, "second", 6), 0);
    cr_assert_eq(urt_tx_log(tx, "x", 0), -EINVAL);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_STORED, commit_cb, &s), 0);
    cr_assert_eq(log.tx, tx);
    cr_assert_eq(log.n_records, 2);
    cr_assert_str_eq(log.first, "first");
    cr_assert_eq(urt_tx_log(tx, "late", 4), URT_TX_EINACTIVE);
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTING);
    sleep_us(2000);
    cr_assert_eq(atomic_load(&s.callbacks), 0, "STORED waits for the log");
    tx_commit_complete(tx, 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.callbacks) == 1, 5000));
    cr_assert_eq(atomic_load(&s.cb_status), 0);
    cr_assert_eq(urt_tx_state(tx), URT_TX_COMMITTED);
    urt_tx_release(tx);
    tx_log_register(s.rt, NULL);
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- concurrent end requests --------------------------------------------------------- */

#define N_TX SCALE(300, 60)
#define ENDERS 3

struct race {
    struct txs s;
    urt_tx *tx;
    _Atomic int commit_ok, commit_odd, abort_ok, go;
    _Atomic int done_enders;
};

static struct race *g_races;

static void *ender(void *arg)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 3);
    for (int i = 0; i < N_TX; i++) {
        struct race *r = &g_races[i];
        while (atomic_load(&r->go) == 0)
            sched_yield();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sleep_us(x % 200);
        if (x & 0x100) {
            int e = urt_tx_commit(r->tx, URT_COMMIT_ACCEPTED, commit_cb, &r->s);
            if (e == 0)
                atomic_fetch_add(&r->commit_ok, 1);
            else if (e != -EALREADY && e != -ECANCELED)
                atomic_fetch_add(&r->commit_odd, 1); /* asserted on the main thread */
        } else {
            if (urt_tx_abort(r->tx) == 0)
                atomic_fetch_add(&r->abort_ok, 1);
        }
        atomic_fetch_add(&r->done_enders, 1);
    }
    return NULL;
}

Test(tx, concurrent_commit_and_abort, .timeout = 300)
{
    urt_runtime *rt = make_rt(2);
    g_races = calloc(N_TX, sizeof(*g_races));
    cr_assert_not_null(g_races);
    pthread_t th[ENDERS];
    for (uintptr_t i = 0; i < ENDERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, ender, (void *)i), 0);
    for (int i = 0; i < N_TX; i++) {
        struct race *r = &g_races[i];
        r->s.rt = rt;
        r->tx = begin(&r->s);
        atomic_store(&r->go, 1);
        /* feed tasks until every ender made its request, and a little beyond */
        int extra = 0;
        while (extra < 20) {
            if (atomic_load(&r->done_enders) == ENDERS)
                extra++;
            int e = urt_tx_spawn(r->tx, work_fn, work_cancel_mt, &r->s, 0);
            if (e == 0)
                atomic_fetch_add(&r->s.submitted, 1);
            else
                cr_assert_eq(e, URT_TX_EINACTIVE);
            if (extra == 0 && (i & 1))
                sched_yield();
        }
        urt_tx_release(r->tx);
    }
    for (int i = 0; i < ENDERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N_TX; i++) {
        struct txs *s = &g_races[i].s;
        cr_assert(WAIT_UNTIL(atomic_load(&s->ran) + atomic_load(&s->cancelled) == atomic_load(&s->submitted), 10000),
                  "tx %d: %d submitted, %d ran, %d cancelled", i, atomic_load(&s->submitted), atomic_load(&s->ran),
                  atomic_load(&s->cancelled));
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    int commits = 0, aborts = 0;
    for (int i = 0; i < N_TX; i++) {
        struct race *r = &g_races[i];
        struct txs *s = &r->s;
        cr_assert_eq(atomic_load(&s->overlaps), 0, "tx %d: a hook or task overlapped another", i);
        cr_assert_eq(atomic_load(&s->after_end), 0, "tx %d: a task started after the end", i);
        cr_assert_leq(atomic_load(&r->commit_ok), 1);
        int c = atomic_load(&r->commit_ok);
        cr_assert_eq(atomic_load(&s->pre_commits), c, "tx %d: pre-commit ran %d times, %d commits won", i,
                     atomic_load(&s->pre_commits), c);
        cr_assert_eq(atomic_load(&s->callbacks), c);
        cr_assert_eq(atomic_load(&s->aborts), 1 - c, "tx %d: abort hook ran %d times (commit won: %d)", i,
                     atomic_load(&s->aborts), c);
        if (c)
            cr_assert_eq(atomic_load(&r->abort_ok), 0, "tx %d: an abort succeeded after the commit won", i);
        commits += c;
        aborts += 1 - c;
        cr_assert_eq(atomic_load(&r->commit_odd), 0, "tx %d: a commit returned an undocumented code", i);
    }
    cr_log_info("%d transactions: %d committed, %d aborted", N_TX, commits, aborts);
    free(g_races);
}

/* ---- commit right after the tasks said "done" (issue 10, point 6) ------------------------- */

/* Each transaction's tasks append a record and signal "done" as the last
 * thing of their fn; the client commits as soon as it saw every signal, so
 * the last task is usually still in flight. Every commit must succeed, its
 * callback run once with 0, and its pre-commit hook see every record. */
#define DS_TX SCALE(400, 100)
#define DS_TASKS 4

struct dstx {
    urt_tx *tx;
    _Atomic int done_signals, pre_commits, callbacks, cb_status, aborts, cancelled;
    _Atomic int records_seen;
};

static int ds_pre_commit(urt_tx *tx, void *arg)
{
    struct dstx *d = arg;
    atomic_store(&d->records_seen, (int)tx_record_count(tx));
    atomic_fetch_add(&d->pre_commits, 1);
    return 0;
}

static void ds_abort(urt_tx *tx, void *arg)
{
    struct dstx *d = arg;
    (void)tx;
    atomic_fetch_add(&d->aborts, 1);
}

static void ds_commit_cb(urt_tx *tx, int status, void *arg)
{
    struct dstx *d = arg;
    (void)tx;
    atomic_store(&d->cb_status, status);
    atomic_fetch_add(&d->callbacks, 1);
}

static enum urt_task_result ds_task(struct urt_task *t, void *arg)
{
    struct dstx *d = arg;
    int e = urt_tx_log(urt_task_tx(t), "rec", 3);
    if (e != 0)
        atomic_fetch_add(&d->cancelled, 1000); /* asserted on the main thread */
    atomic_fetch_add(&d->done_signals, 1); /* "done": the last thing the task does */
    return URT_TASK_DONE;
}

static void ds_cancel(struct urt_task *t, void *arg)
{
    struct dstx *d = arg;
    (void)t;
    atomic_fetch_add(&d->cancelled, 1);
}

Test(tx, commit_right_after_tasks_signal_done, .timeout = 300)
{
    urt_runtime *rt = make_rt(2);
    struct dstx *ds = calloc(DS_TX, sizeof(*ds));
    cr_assert_not_null(ds);
    for (int i = 0; i < DS_TX; i++) {
        struct dstx *d = &ds[i];
        struct urt_tx_options o;
        urt_tx_options_init(&o);
        o.hooks.pre_commit = ds_pre_commit;
        o.hooks.abort = ds_abort;
        o.hooks.arg = d;
        cr_assert_eq(urt_tx_begin(rt, &o, &d->tx), 0);
        for (int k = 0; k < DS_TASKS; k++)
            cr_assert_eq(urt_tx_spawn(d->tx, ds_task, ds_cancel, d, 0), 0);
        while (atomic_load(&d->done_signals) < DS_TASKS)
            sched_yield();
        int e = urt_tx_commit(d->tx, URT_COMMIT_AVAILABLE, ds_commit_cb, d);
        cr_assert_eq(e, 0, "tx %d: urt_tx_commit returned %d (%s)", i, e, urt_last_error());
        urt_tx_release(d->tx);
    }
    for (int i = 0; i < DS_TX; i++)
        cr_assert(WAIT_UNTIL(atomic_load(&ds[i].callbacks) >= 1, 10000), "tx %d: no commit callback", i);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    for (int i = 0; i < DS_TX; i++) {
        struct dstx *d = &ds[i];
        cr_assert_eq(atomic_load(&d->callbacks), 1, "tx %d: callback ran %d times", i, atomic_load(&d->callbacks));
        cr_assert_eq(atomic_load(&d->cb_status), 0, "tx %d: status %d", i, atomic_load(&d->cb_status));
        cr_assert_eq(atomic_load(&d->pre_commits), 1);
        cr_assert_eq(atomic_load(&d->aborts), 0);
        cr_assert_eq(atomic_load(&d->cancelled), 0, "tx %d: a task was cancelled or could not log", i);
        cr_assert_eq(atomic_load(&d->records_seen), DS_TASKS, "tx %d: the commit saw %d records", i,
                     atomic_load(&d->records_seen));
    }
    free(ds);
}

/* ---- who may append (tx.h urt_tx_log, protocol "append" in tx/tx.c) ---------------------- */

struct apx {
    urt_tx *tx;
    _Atomic int started, go, left, records_seen, pre_commits, callbacks, cb_status;
    _Atomic int in_task_rc[3];   /* the running task's appends: before, after the request, after go */
    _Atomic int cancel_rc;       /* a refused task's cancel callback appending */
    _Atomic int cancels;
};

static int ap_pre_commit(urt_tx *tx, void *arg)
{
    struct apx *a = arg;
    atomic_store(&a->records_seen, (int)tx_record_count(tx));
    atomic_fetch_add(&a->pre_commits, 1);
    return 0;
}

static void ap_commit_cb(urt_tx *tx, int status, void *arg)
{
    struct apx *a = arg;
    (void)tx;
    atomic_store(&a->cb_status, status);
    atomic_fetch_add(&a->callbacks, 1);
}

/* Appends, says it started, waits for the test's go (so a commit requested
 * meanwhile is deferred), appends again and leaves. */
static enum urt_task_result ap_task(struct urt_task *t, void *arg)
{
    struct apx *a = arg;
    urt_tx *tx = urt_task_tx(t);
    atomic_store(&a->in_task_rc[0], urt_tx_log(tx, "t0", 2));
    atomic_store(&a->started, 1);
    while (atomic_load(&a->go) == 0)
        sched_yield();
    atomic_store(&a->in_task_rc[1], urt_tx_log(tx, "t1", 2));
    atomic_store(&a->in_task_rc[2], urt_tx_log(tx, "t2", 2));
    atomic_store(&a->left, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result ap_never(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    cr_log_error("a task queued behind a commit request ran");
    return URT_TASK_DONE;
}

static void ap_cancel(struct urt_task *t, void *arg)
{
    struct apx *a = arg;
    atomic_store(&a->cancel_rc, urt_tx_log(urt_task_tx(t), "cancel", 6));
    atomic_fetch_add(&a->cancels, 1);
}

static void ap_begin(urt_runtime *rt, struct apx *a)
{
    struct urt_tx_options o;
    urt_tx_options_init(&o);
    o.hooks.pre_commit = ap_pre_commit;
    o.hooks.arg = a;
    cr_assert_eq(urt_tx_begin(rt, &o, &a->tx), 0);
    atomic_store(&a->cancel_rc, 1);
}

/* Issue: a thread that requested a deferred commit could append while the
 * last task left, racing with its appends and with the commit's copy. Now
 * every append by that thread is refused (URT_TX_EINACTIVE), before the
 * task's go and while it leaves, the running task's appends are taken, the
 * queued task's cancel callback is refused, and the commit holds exactly the
 * task's three records. Deterministic: the task holds the transaction until
 * the test says go. Many rounds, so that TSan sees the leave race too. */
Test(tx, committing_thread_cannot_append_while_the_last_task_leaves, .timeout = 300)
{
    enum { ROUNDS = SCALE(300, 60) };
    urt_runtime *rt = make_rt(2);
    for (int r = 0; r < ROUNDS; r++) {
        struct apx a = {0};
        ap_begin(rt, &a);
        cr_assert_eq(urt_tx_spawn(a.tx, ap_task, NULL, &a, 0), 0);
        cr_assert_eq(urt_tx_spawn(a.tx, ap_never, ap_cancel, &a, 0), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&a.started), 10000));
        cr_assert_eq(urt_tx_commit(a.tx, URT_COMMIT_AVAILABLE, ap_commit_cb, &a), 0);
        cr_assert_eq(urt_tx_log(a.tx, "late", 4), URT_TX_EINACTIVE, "round %d: %s", r, urt_last_error());
        cr_assert(strstr(urt_last_error(), "committing") != NULL, "%s", urt_last_error());
        atomic_store(&a.go, 1);
        int refused = 0, tries = 0;
        while (atomic_load(&a.callbacks) == 0 && tries < 1000000) { /* races the task's leave */
            int e = urt_tx_log(a.tx, "racing", 6);
            cr_assert_eq(e, URT_TX_EINACTIVE, "round %d: append %d returned %d", r, tries, e);
            refused++;
            tries++;
        }
        cr_assert(WAIT_UNTIL(atomic_load(&a.callbacks) == 1, 10000));
        cr_assert_eq(urt_tx_log(a.tx, "ended", 5), URT_TX_EINACTIVE);
        cr_assert(WAIT_UNTIL(atomic_load(&a.cancels) == 1, 10000));
        urt_tx_release(a.tx);
        cr_assert_eq(atomic_load(&a.cb_status), 0);
        cr_assert_eq(atomic_load(&a.pre_commits), 1);
        for (int k = 0; k < 3; k++)
            cr_assert_eq(atomic_load(&a.in_task_rc[k]), 0, "round %d: the running task's append %d: %d", r, k,
                         atomic_load(&a.in_task_rc[k]));
        cr_assert_eq(atomic_load(&a.cancel_rc), URT_TX_EINACTIVE, "round %d: cancel callback's append: %d", r,
                     atomic_load(&a.cancel_rc));
        cr_assert_eq(atomic_load(&a.records_seen), 3, "round %d: the commit copied %d records", r,
                     atomic_load(&a.records_seen));
        (void)refused;
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* The same rule for an abort: once requested, only the running task appends. */
Test(tx, no_append_after_an_abort_request_but_the_running_tasks, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    struct apx a = {0};
    ap_begin(rt, &a);
    cr_assert_eq(urt_tx_spawn(a.tx, ap_task, NULL, &a, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&a.started), 10000));
    cr_assert_eq(urt_tx_abort(a.tx), 0);
    cr_assert_eq(urt_tx_log(a.tx, "late", 4), URT_TX_EINACTIVE);
    cr_assert(strstr(urt_last_error(), "aborting") != NULL, "%s", urt_last_error());
    cr_assert_eq(urt_tx_spawn(a.tx, ap_never, NULL, &a, 0), URT_TX_EINACTIVE);
    atomic_store(&a.go, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&a.left), 10000));
    cr_assert(WAIT_UNTIL(urt_tx_state(a.tx) == URT_TX_ABORTED, 10000));
    for (int k = 0; k < 3; k++)
        cr_assert_eq(atomic_load(&a.in_task_rc[k]), 0);
    urt_tx_release(a.tx);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Another thread may not append while a task of the transaction runs (they
 * would write the records at once): -EBUSY, nothing appended; once the
 * task left, the thread may append again, and the commit holds every record
 * taken. */
Test(tx, another_thread_may_not_append_while_a_task_runs, .timeout = 60)
{
    urt_runtime *rt = make_rt(2);
    struct apx a = {0};
    ap_begin(rt, &a);
    cr_assert_eq(urt_tx_log(a.tx, "before", 6), 0); /* no task yet: the thread's append is taken */
    cr_assert_eq(urt_tx_spawn(a.tx, ap_task, NULL, &a, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&a.started), 10000));
    cr_assert_eq(urt_tx_log(a.tx, "during", 6), -EBUSY);
    cr_assert(strstr(urt_last_error(), "in use") != NULL, "%s", urt_last_error());
    atomic_store(&a.go, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&a.left), 10000));
    cr_assert(WAIT_UNTIL(urt_tx_log(a.tx, "after", 5) == 0, 10000)); /* the leave CAS follows 'left' */
    cr_assert_eq(urt_tx_commit(a.tx, URT_COMMIT_AVAILABLE, ap_commit_cb, &a), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&a.callbacks) == 1, 10000));
    cr_assert_eq(atomic_load(&a.records_seen), 5, "the commit copied %d records", atomic_load(&a.records_seen));
    urt_tx_release(a.tx);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Threads appending from outside race a commit from a third: each append
 * either precedes the commit (in its records, and the commit waited for it)
 * or is refused; the commit's record count equals the appends that returned
 * 0. */
struct apr {
    urt_tx *tx;
    _Atomic int ok, stop;
};

static void *ap_appender(void *arg)
{
    struct apr *p = arg;
    while (!atomic_load(&p->stop)) {
        int e = urt_tx_log(p->tx, "x", 1);
        if (e == 0)
            atomic_fetch_add(&p->ok, 1);
        else if (e == URT_TX_EINACTIVE)
            break;
        else
            cr_assert_eq(e, -EBUSY, "append: %d (%s)", e, urt_last_error()); /* the other appender */
    }
    return NULL;
}

Test(tx, appenders_from_threads_race_a_commit, .timeout = 120)
{
    enum { ROUNDS = SCALE(200, 40) };
    urt_runtime *rt = make_rt(2);
    for (int r = 0; r < ROUNDS; r++) {
        struct apx a = {0};
        ap_begin(rt, &a);
        struct apr p = {.tx = a.tx};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&th[i], NULL, ap_appender, &p), 0);
        while (atomic_load(&p.ok) < 20)
            sched_yield();
        cr_assert_eq(urt_tx_commit(a.tx, URT_COMMIT_AVAILABLE, ap_commit_cb, &a), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&a.callbacks) == 1, 10000));
        atomic_store(&p.stop, 1);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        cr_assert_eq(atomic_load(&a.records_seen), atomic_load(&p.ok), "round %d: committed %d records, %d appends "
                     "returned 0", r, atomic_load(&a.records_seen), atomic_load(&p.ok));
        urt_tx_release(a.tx);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
