/*
 * tx/tx.c — transactions (SPEC C11): a lane for the transaction's tasks, the
 * end-of-transaction protocol, commit responses and the log seam.
 *
 * The protocol (rules in urt/tx.h) lives in one 64-bit termination word:
 *
 *     bit 63 GOING_TO_ABORT | bit 62 GOING_TO_COMMIT | bit 61 ENDED |
 *     bit 60 COMMIT_READY | bit 59 APPENDER | count (low 32)
 *
 * Every change is one CAS, so the requests of all threads are totally ordered
 * on this word and exactly one of them sets ENDED — the one that performs the
 * end (abort hook, or pre-commit + commit). GOING_TO_ABORT and
 * GOING_TO_COMMIT are never both set. Transitions:
 *
 *   enter (lane runner, before a task's fn):  no GOING_* flag -> count + 1,
 *                                             else the task is not run
 *   leave (after the fn returned):            count - 1; at count 0 without
 *                                             ENDED: with GOING_TO_ABORT, or
 *                                             with GOING_TO_COMMIT|COMMIT_READY,
 *                                             set ENDED: this task performs
 *                                             the abort, or the commit
 *   abort:   GOING_TO_COMMIT -> -EALREADY; GOING_TO_ABORT -> 0 (idempotent);
 *            else set GOING_TO_ABORT (+ ENDED if count == 0: abort now)
 *   append (urt_tx_log) by the transaction's running task (its fn, on its
 *            lane's worker, count > 0): no change (it is counted already);
 *            by any other thread: count 0, no GOING_* flag -> count + 1 |
 *            APPENDER, append, then leave as a task does (clearing
 *            APPENDER); a GOING_* flag or ENDED -> URT_TX_EINACTIVE; count
 *            above 0 (a task runs, an I/O is in flight, another thread
 *            appends) -> -EBUSY. A running task that finds APPENDER set
 *            gets -EBUSY. So once a commit or abort is requested, only the
 *            task that runs may append, and an append by another thread
 *            either precedes the request (the commit waits for it) or is
 *            refused: the records the commit copies are never written
 *            concurrently.
 *   commit:  GOING_TO_ABORT -> -ECANCELED; GOING_TO_COMMIT -> -EALREADY;
 *            else set GOING_TO_COMMIT (+ ENDED if count == 0: commit now).
 *            With tasks in flight (a deferred commit) the committer then
 *            writes the commit's parameters and sets COMMIT_READY (+ ENDED
 *            if the count reached 0 meanwhile: it commits itself). So the
 *            commit is the transaction's last step, performed exactly once,
 *            by whichever of the committer and the last leaving task gets
 *            there last; no lock, one more CAS only for a deferred commit.
 *
 * The tasks that use the transaction are its lane's tasks, so count is 0 or
 * 1 in practice; the word does not rely on that.
 *
 * References (refs; freed at 0): the user's handle, one while the lane is
 * active (lane ops active/idle), one while a commit is in flight (until its
 * callback ran), one per I/O of its tasks in flight (until its continuation
 * was queued on the lane, T5). Records (urt_tx_log) are a growing buffer of
 * {u32 length, bytes} owned by the transaction.
 *
 * ---- Memory ordering (the contract, once) -----------------------------------
 *  (T1) term: every transition is an acq_rel CAS; the thread that sets ENDED
 *       (or performs the abort in leave) has acquired every earlier task's
 *       leave, hence the tasks' writes, before it calls a hook. The
 *       committer's COMMIT_READY CAS releases the commit's parameters (cb,
 *       arg, response, log, its reference); a leave that reads COMMIT_READY
 *       acquires them. Submitters' check of the flags is an acquire load
 *       (only a fast refusal: the authoritative check is enter).
 *  (T2) refs: relaxed increments by holders, acq_rel decrement; the last frees.
 *  (T3) final (ABORTED / COMMITTED) is stored with release after the hook /
 *       response and read with acquire by urt_tx_state.
 *  (T4) the log registration: release store / acquire load (commit_hook.h rule 1).
 *  (T5) I/O of the transaction's tasks (io/uio.c): an operation counts as
 *       a task in flight from its submission (tx_io_begin: the enter CAS)
 *       until its continuation leaves, so a commit waits for it. ios counts
 *       the operations whose completion has not arrived: tx_io_begin
 *       increments it (seq_cst) before its CAS on term, abort_request loads
 *       it (seq_cst) after its CAS; either the submission sees the abort
 *       (refused) or the abort sees the operation and asks
 *       sched_clients.io_sweep to cancel it.
 *  (T6) Records: written by the running task (the lane's tasks are
 *       serialized; the lane hands them over with acquire/release,
 *       sched/lane.c M2) or by an appender holding the count (its enter and
 *       leave are acq_rel CASes, as a task's): the thread that sets ENDED,
 *       and so copies the records, has acquired every append. A running
 *       task's check of APPENDER is an acquire load after its own enter CAS:
 *       either the appender's CAS came first (the task sees APPENDER, or
 *       its clearing leave, whose append then happened before) or the
 *       appender's CAS sees the task's count and refuses.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <urt/tx.h>

#include "sched/lane.h"
#include "sched/core/sched.h"
#include "tx/commit_hook.h"

#include "base/args.h"
#include "base/error.h"

#define TX_GOING_TO_ABORT (1ull << 63)
#define TX_GOING_TO_COMMIT (1ull << 62)
#define TX_ENDED (1ull << 61)
#define TX_COMMIT_READY (1ull << 60)
#define TX_APPENDER (1ull << 59)
#define TX_COUNT(v) ((uint32_t)(v))

#define TX_RECORD_MAX (16u << 20)

struct urt_tx {
    struct urt_lane lane;             /* the transaction's tasks */
    alignas(64) _Atomic uint64_t term;/* the termination word */
    _Atomic uint32_t refs;
    _Atomic uint32_t final;           /* 0, URT_TX_ABORTED or URT_TX_COMMITTED (T3) */
    _Atomic uint32_t ios;             /* its tasks' I/O in flight (T5) */
    struct sched *s;
    urt_runtime *rt;
    struct urt_tx_hooks hooks;
    uint64_t id;
    /* the commit (written by the committing thread before the callback task) */
    enum urt_commit_response response;
    struct tx_log *log;               /* the log the commit goes through, or NULL */
    urt_commit_fn *cb;
    void *cb_arg;
    int commit_status;
    struct urt_task commit_task;
    struct urt_commit log_commit;     /* the log's, from log->commit to tx_commit_complete */
    /* records */
    unsigned char *rec;
    size_t rec_len, rec_cap, rec_count, rec_bytes;
};

static _Atomic uint64_t next_tx_id = 1;

/* ---- references --------------------------------------------------------------- */

static inline void tx_ref(struct urt_tx *tx)
{
    atomic_fetch_add_explicit(&tx->refs, 1, memory_order_relaxed); /* (T2) */
}

static void tx_unref(struct urt_tx *tx)
{
    if (atomic_fetch_sub_explicit(&tx->refs, 1, memory_order_acq_rel) == 1) { /* (T2) */
        free(tx->rec);
        free(tx);
    }
}

/* ---- ending ------------------------------------------------------------------- */

static void perform_abort(struct urt_tx *tx)
{
    if (tx->hooks.abort)
        tx->hooks.abort(tx, tx->hooks.arg);
    atomic_store_explicit(&tx->final, URT_TX_ABORTED, memory_order_release); /* (T3) */
}

static enum urt_task_result commit_task_fn(struct urt_task *t, void *arg)
{
    struct urt_tx *tx = arg;
    (void)t;
    tx->cb(tx, tx->commit_status, tx->cb_arg);
    tx_unref(tx); /* the commit's reference */
    return URT_TASK_DONE;
}

static void commit_task_cancel(struct urt_task *t, void *arg)
{
    commit_task_fn(t, arg); /* runtime destroy: the callback still runs once */
}

/* The response was reached (status 0) or the commit failed: run the callback
 * as a task on a worker (inline when the runtime is being destroyed). */
static void commit_finish(struct urt_tx *tx, int status)
{
    tx->commit_status = status;
    atomic_store_explicit(&tx->final, status == 0 ? URT_TX_COMMITTED : URT_TX_ABORTED,
                          memory_order_release); /* (T3) */
    if (sched_submit(tx->s, &tx->commit_task, 0) != 0)
        commit_task_fn(&tx->commit_task, tx);
}

/* The log answers from a task on a worker (its release task) or on the
 * destroying thread: the user's callback runs right here, so a stored
 * commit's callback is one task hop away from the durable marker. */
void tx_commit_complete(urt_tx *tx, int status)
{
    tx->commit_status = status;
    atomic_store_explicit(&tx->final, status == 0 ? URT_TX_COMMITTED : URT_TX_ABORTED,
                          memory_order_release); /* (T3) */
    commit_task_fn(&tx->commit_task, tx);
}

/* ---- the lane's gate -------------------------------------------------------------- */

static bool tx_count_in(struct urt_tx *tx)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed);
    do {
        if (v & (TX_GOING_TO_ABORT | TX_GOING_TO_COMMIT))
            return false; /* rule 1: inactive transaction */
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, v + 1, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (T1) */
    return true;
}

static bool tx_enter(void *ctx, struct urt_task *t)
{
    if (t->priv.flags & TASK_IO_CONT)
        return true; /* an I/O continuation: counted at the I/O's submission (T5) */
    return tx_count_in(ctx);
}

static bool tx_io_begin(void *ctx)
{
    struct urt_tx *tx = ctx;
    atomic_fetch_add_explicit(&tx->ios, 1, memory_order_seq_cst); /* (T5) before the CAS */
    if (tx_count_in(tx)) {
        tx_ref(tx); /* the operation's: its continuation is queued on our lane before io_end */
        return true;
    }
    atomic_fetch_sub_explicit(&tx->ios, 1, memory_order_relaxed);
    return false;
}

static void tx_io_end(void *ctx)
{
    struct urt_tx *tx = ctx;
    atomic_fetch_sub_explicit(&tx->ios, 1, memory_order_relaxed);
    tx_unref(tx);
}

static bool tx_io_cancel(void *ctx)
{
    return atomic_load_explicit(&((struct urt_tx *)ctx)->term, memory_order_acquire) & TX_GOING_TO_ABORT;
}

/* True when a word with count 0 and no ENDED must be ended by its writer. */
static inline bool tx_end_due(uint64_t n)
{
    if (TX_COUNT(n) != 0 || (n & TX_ENDED))
        return false;
    return (n & TX_GOING_TO_ABORT) || (n & (TX_GOING_TO_COMMIT | TX_COMMIT_READY)) ==
                                          (TX_GOING_TO_COMMIT | TX_COMMIT_READY);
}

static void perform_commit(struct urt_tx *tx);

/* count - 1 (and clear): a task or an appender leaves; the last one out of
 * a requested end performs it. */
static void tx_leave_clearing(struct urt_tx *tx, uint64_t clear)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed), n;
    bool end_now;
    do {
        n = (v - 1) & ~clear;
        end_now = tx_end_due(n);
        if (end_now)
            n |= TX_ENDED;
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, n, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (T1) */
    if (!end_now)
        return;
    if (n & TX_GOING_TO_ABORT)
        perform_abort(tx); /* rule 2: the last task in flight performs it */
    else
        perform_commit(tx); /* rule 3: a deferred commit */
}

static void tx_leave(void *ctx, struct urt_task *t)
{
    (void)t; /* may be freed already */
    tx_leave_clearing(ctx, 0);
}

static void tx_lane_active(void *ctx)
{
    tx_ref(ctx);
}

static void tx_lane_idle(void *ctx)
{
    tx_unref(ctx);
}

static const struct lane_ops tx_lane_ops = {
    .active = tx_lane_active,
    .idle = tx_lane_idle,
    .enter = tx_enter,
    .leave = tx_leave,
    .io_begin = tx_io_begin,
    .io_end = tx_io_end,
    .io_cancel = tx_io_cancel,
};

/* ---- public API ---------------------------------------------------------------------- */

URT_API void urt_tx_options_init(struct urt_tx_options *opt)
{
    memset(opt, 0, sizeof(*opt));
}

URT_API int urt_tx_begin(urt_runtime *rt, const struct urt_tx_options *opt, urt_tx **out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_tx_begin: NULL %s", rt ? "out" : "runtime");
    struct urt_tx_options defaults;
    if (!opt) {
        urt_tx_options_init(&defaults);
        opt = &defaults;
    }
    if (URT_CHECK_RESERVED("urt_tx_begin", "opt", opt))
        return -EINVAL;
    struct sched *s = (struct sched *)rt;
    if (atomic_load_explicit(&s->phase, memory_order_acquire) != PHASE_RUNNING)
        return urt__error(-ESHUTDOWN, "urt_tx_begin: the runtime is being destroyed");
    struct urt_tx *tx = aligned_alloc(64, (sizeof(*tx) + 63) & ~(size_t)63);
    if (!tx)
        return urt__error(-ENOMEM, "urt_tx_begin: out of memory");
    memset(tx, 0, sizeof(*tx));
    lane_init(&tx->lane, s, LANE_TX, &tx_lane_ops, tx);
    atomic_init(&tx->term, 0);
    atomic_init(&tx->refs, 1);
    atomic_init(&tx->final, 0);
    tx->s = s;
    tx->rt = rt;
    tx->hooks = opt->hooks;
    tx->id = opt->id ? opt->id : atomic_fetch_add_explicit(&next_tx_id, 1, memory_order_relaxed);
    urt_task_init(&tx->commit_task, commit_task_fn, tx);
    tx->commit_task.cancel = commit_task_cancel;
    *out = tx;
    return 0;
}

/* The argument and state checks of urt_tx_submit / urt_tx_spawn. */
static int tx_submit_check(const struct urt_tx *tx, bool has_fn, unsigned flags, const char *fn, const char *what)
{
    if (!tx || !has_fn)
        return urt__error(-EINVAL, "%s: %s is NULL", fn, !tx ? "tx" : what);
    if (urt__check_flags(fn, flags, URT_SUBMIT_FLAGS_ALL))
        return -EINVAL;
    /* (T1) a fast refusal only: enter decides */
    if (atomic_load_explicit(&tx->term, memory_order_acquire) & (TX_GOING_TO_ABORT | TX_GOING_TO_COMMIT))
        return urt__error(URT_TX_EINACTIVE, "%s: transaction %p is inactive (committing, committed, aborting or "
                                            "aborted)", fn, (const void *)tx);
    return 0;
}

URT_API int urt_tx_submit(urt_tx *tx, struct urt_task *task, unsigned flags)
{
    int err = tx_submit_check(tx, task && task->fn, flags, "urt_tx_submit", task ? "task->fn" : "task");
    if (err)
        return err;
    task->priv.job = NULL;
    task->priv.flags &= ~(TASK_POOLED | TASK_ADMITTED);
    task->priv.submit_flags = flags;
    bool gone;
    err = lane_submit_counted(&tx->lane, task, flags, &gone); /* max_pending_tasks counts it */
    return err ? lane_submit_error("urt_tx_submit", err) : 0;
}

URT_API int urt_tx_spawn(urt_tx *tx, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags)
{
    int err = tx_submit_check(tx, fn != NULL, flags, "urt_tx_spawn", "fn");
    if (err)
        return err;
    struct urt_task *t = sched_task_alloc(tx->s);
    if (!t)
        return urt__error(-ENOMEM, "urt_tx_spawn: out of memory for a pooled task");
    t->fn = fn;
    t->arg = arg;
    t->cancel = cancel;
    t->priv.job = NULL;
    t->priv.flags = TASK_POOLED;
    t->priv.submit_flags = flags;
    bool gone;
    err = lane_submit_counted(&tx->lane, t, flags, &gone); /* max_pending_tasks counts it */
    if (err && !gone)
        sched_task_free(tx->s, t);
    return err ? lane_submit_error("urt_tx_spawn", err) : 0;
}

/* Rule 2: 0 (aborted now, going to abort, or already aborting) or -EALREADY
 * (a commit was requested first). Records no message. */
static int abort_request(struct urt_tx *tx)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed), n;
    do {
        if (v & TX_GOING_TO_ABORT)
            return 0; /* idempotent */
        if (v & TX_GOING_TO_COMMIT)
            return -EALREADY;
        n = v | TX_GOING_TO_ABORT;
        if (TX_COUNT(v) == 0)
            n |= TX_ENDED;
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, n, memory_order_seq_cst,
                                                    memory_order_relaxed)); /* (T1), (T5) */
    if (n & TX_ENDED)
        perform_abort(tx); /* no task in flight: now, on this thread */
    else if (atomic_load_explicit(&tx->ios, memory_order_seq_cst)) /* (T5) */
        sched_clients.io_sweep(tx->s);
    return 0;
}

URT_API int urt_tx_abort(urt_tx *tx)
{
    if (!tx)
        return urt__error(-EINVAL, "urt_tx_abort: tx is NULL");
    if (abort_request(tx))
        return urt__error(-EALREADY, "urt_tx_abort: transaction %p: a commit was requested first (it goes on)",
                          (void *)tx);
    return 0;
}

/* The end of a commit, by the thread that set ENDED: pre-commit hook, then
 * the log or the callback. The parameters were written before (T1). */
static void perform_commit(struct urt_tx *tx)
{
    int st = tx->hooks.pre_commit ? tx->hooks.pre_commit(tx, tx->hooks.arg) : 0;
    if (st == 0 && tx->log) {
        st = tx->log->commit(tx->log, tx, tx->response);
        if (st == 0)
            return; /* the log calls tx_commit_complete */
    }
    if (st != 0 && tx->hooks.abort)
        tx->hooks.abort(tx, tx->hooks.arg); /* rule 4: same thread, right after */
    commit_finish(tx, st);
}

/* Step 1 of a commit: GOING_TO_COMMIT (+ ENDED with no task in flight).
 * Returns 0 and the new word, or the refusal. */
static int commit_claim(struct urt_tx *tx, uint64_t *out)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed), n;
    do {
        if (v & TX_GOING_TO_ABORT)
            return urt__error(-ECANCELED, "urt_tx_commit: transaction %p is aborting or aborted (abort requested "
                                          "first)", (void *)tx);
        if (v & TX_GOING_TO_COMMIT)
            return urt__error(-EALREADY, "urt_tx_commit: transaction %p: a commit was requested first", (void *)tx);
        n = v | TX_GOING_TO_COMMIT;
        if (TX_COUNT(v) == 0)
            n |= TX_ENDED;
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, n, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (T1) */
    *out = n;
    return 0;
}

/* Step 2 of a deferred commit: COMMIT_READY (+ ENDED if the last task left
 * meanwhile). True when the caller must perform the commit. */
static bool commit_ready(struct urt_tx *tx)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed), n;
    do {
        n = v | TX_COMMIT_READY;
        if (tx_end_due(n))
            n |= TX_ENDED;
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, n, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (T1) release the parameters */
    return n & TX_ENDED;
}

URT_API int urt_tx_commit(urt_tx *tx, enum urt_commit_response response, urt_commit_fn *cb, void *arg)
{
    if (!tx || !cb)
        return urt__error(-EINVAL, "urt_tx_commit: %s is NULL", tx ? "cb" : "tx");
    if ((unsigned)response > URT_COMMIT_STORED)
        return urt__error(-EINVAL, "urt_tx_commit: response %d is not URT_COMMIT_ACCEPTED, _AVAILABLE or _STORED",
                          (int)response);
    struct tx_log *log = tx_log_of(tx->rt);
    if (response == URT_COMMIT_STORED && !log)
        return urt__error(-EOPNOTSUPP, "urt_tx_commit: URT_COMMIT_STORED needs a write-ahead log, and none is "
                                       "configured for this runtime");
    uint64_t n = 0;
    int err = commit_claim(tx, &n);
    if (err)
        return err;
    /* Ours from here: no other request gets past commit_claim. */
    tx_ref(tx); /* the commit's reference, dropped after the callback */
    tx->response = response;
    tx->log = log;
    tx->cb = cb;
    tx->cb_arg = arg;
    if ((n & TX_ENDED) || commit_ready(tx))
        perform_commit(tx); /* nothing in flight (any more): on this thread */
    return 0;
}

/* True on the worker whose lane runner is running a task of tx (its fn, or
 * the cancel callback of a task the transaction refused: count tells). */
static bool tx_on_own_lane(const struct urt_tx *tx)
{
    struct worker *w = sched_current(tx->s);
    return w && w->running_lane == &tx->lane;
}

/* The copy itself; the caller has the right to write the records (T6). */
static int tx_append(struct urt_tx *tx, const void *record, size_t len)
{
    size_t need = tx->rec_len + sizeof(uint32_t) + len;
    if (need > tx->rec_cap) {
        size_t cap = tx->rec_cap ? tx->rec_cap : 256;
        while (cap < need)
            cap *= 2;
        unsigned char *p = realloc(tx->rec, cap);
        if (!p)
            return urt__error(-ENOMEM, "urt_tx_log: out of memory for %zu bytes of records", cap);
        tx->rec = p;
        tx->rec_cap = cap;
    }
    uint32_t l32 = (uint32_t)len;
    memcpy(tx->rec + tx->rec_len, &l32, sizeof(l32));
    memcpy(tx->rec + tx->rec_len + sizeof(l32), record, len);
    tx->rec_len = need;
    tx->rec_count++;
    tx->rec_bytes += len;
    return 0;
}

static int tx_log_refused(const struct urt_tx *tx, uint64_t v)
{
    if (v & TX_ENDED)
        return urt__error(URT_TX_EINACTIVE, "urt_tx_log: transaction %p has ended (committed or aborted)",
                          (const void *)tx);
    if (v & (TX_GOING_TO_ABORT | TX_GOING_TO_COMMIT))
        return urt__error(URT_TX_EINACTIVE, "urt_tx_log: transaction %p is %s: from the request on, only its "
                                            "task that is running may append", (const void *)tx,
                          (v & TX_GOING_TO_ABORT) ? "aborting" : "committing");
    return urt__error(-EBUSY, "urt_tx_log: transaction %p is in use (a task of it runs or has I/O in flight, or "
                              "another thread appends): append from its tasks, or from one thread while none "
                              "of them is queued or running", (const void *)tx);
}

/* The transaction's running task (T6): counted already; refused only when
 * another thread holds the appender's count. Count 0 on our own lane means
 * a cancel callback of a task the transaction did not run: it appends as any
 * other thread. */
static int tx_log_by_task(struct urt_tx *tx, const void *record, size_t len)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_acquire); /* (T6) after our enter */
    if (TX_COUNT(v) == 0)
        return -EAGAIN;
    if (v & TX_APPENDER)
        return tx_log_refused(tx, TX_APPENDER);
    return tx_append(tx, record, len);
}

/* Any other thread: enter as an appender (count + 1 | APPENDER), append,
 * leave as a task does. */
static int tx_log_by_thread(struct urt_tx *tx, const void *record, size_t len)
{
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_relaxed);
    do {
        if ((v & (TX_ENDED | TX_GOING_TO_ABORT | TX_GOING_TO_COMMIT)) || TX_COUNT(v) != 0)
            return tx_log_refused(tx, v);
    } while (!atomic_compare_exchange_weak_explicit(&tx->term, &v, (v + 1) | TX_APPENDER, memory_order_acq_rel,
                                                    memory_order_relaxed)); /* (T1), (T6) */
    int err = tx_append(tx, record, len);
    tx_leave_clearing(tx, TX_APPENDER); /* a request made meanwhile is performed here */
    return err;
}

URT_API int urt_tx_log(urt_tx *tx, const void *record, size_t len)
{
    if (!tx || !record)
        return urt__error(-EINVAL, "urt_tx_log: %s is NULL", tx ? "record" : "tx");
    if (urt__check_range("urt_tx_log", "len", len, 1, TX_RECORD_MAX))
        return -EINVAL;
    if (tx_on_own_lane(tx)) {
        int err = tx_log_by_task(tx, record, len);
        if (err != -EAGAIN)
            return err;
    }
    return tx_log_by_thread(tx, record, len);
}

URT_API enum urt_tx_state urt_tx_state(const urt_tx *tx)
{
    if (!tx)
        return URT_TX_ABORTED;
    uint32_t f = atomic_load_explicit(&tx->final, memory_order_acquire); /* (T3) */
    if (f)
        return (enum urt_tx_state)f;
    uint64_t v = atomic_load_explicit(&tx->term, memory_order_acquire);
    if (v & TX_GOING_TO_ABORT)
        return URT_TX_ABORTING;
    if (v & TX_GOING_TO_COMMIT)
        return URT_TX_COMMITTING;
    return URT_TX_ACTIVE;
}

URT_API uint64_t urt_tx_id(const urt_tx *tx)
{
    return tx ? tx->id : 0;
}

URT_API urt_tx *urt_task_tx(const struct urt_task *task)
{
    if (!task || !task->priv.lane || task->priv.lane->kind != LANE_TX)
        return NULL;
    return task->priv.lane->ctx;
}

URT_API void urt_tx_release(urt_tx *tx)
{
    if (!tx)
        return;
    abort_request(tx); /* no-op if it is ending or ended (-EALREADY: a commit goes on) */
    tx_unref(tx);
}

/* ---- the log seam (tx/commit_hook.h) --------------------------------------------------- */

void tx_log_register(urt_runtime *rt, struct tx_log *log)
{
    atomic_store_explicit(&((struct sched *)rt)->tx_log, log, memory_order_release); /* (T4) */
}

struct tx_log *tx_log_of(urt_runtime *rt)
{
    return atomic_load_explicit(&((struct sched *)rt)->tx_log, memory_order_acquire); /* (T4) */
}

const void *tx_record_next(const urt_tx *tx, size_t *cursor, uint32_t *len)
{
    if (*cursor + sizeof(uint32_t) > tx->rec_len)
        return NULL;
    uint32_t l32;
    memcpy(&l32, tx->rec + *cursor, sizeof(l32));
    const void *p = tx->rec + *cursor + sizeof(l32);
    *cursor += sizeof(l32) + l32;
    *len = l32;
    return p;
}

size_t tx_record_count(const urt_tx *tx)
{
    return tx->rec_count;
}

size_t tx_record_bytes(const urt_tx *tx)
{
    return tx->rec_bytes;
}

/* The log's answer: the user's callback runs here (tx_commit_complete). */
static void log_commit_done(struct urt_commit *c, int status, void *arg)
{
    (void)arg;
    tx_commit_complete(tx_of_log_commit(c), status);
}

struct urt_commit *tx_log_commit(urt_tx *tx, enum urt_commit_response response)
{
    struct urt_commit *c = &tx->log_commit;
    memset(&c->priv, 0, sizeof(c->priv));
    c->priv.tx_id = tx->id;
    c->priv.response = (uint32_t)response;
    c->priv.cb = log_commit_done;
    return c;
}

urt_tx *tx_of_log_commit(const struct urt_commit *c)
{
    return (urt_tx *)((const char *)c - offsetof(struct urt_tx, log_commit));
}
