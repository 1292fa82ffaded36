/*
 * urt/tx.h — transactions: tasks that use a transaction run on its
 * lane (one at a time, in submission order, never stolen), and the transaction
 * ends exactly once, by commit or by abort, whatever threads race to end it.
 *
 * End-of-transaction protocol (after jogasaki's concurrent_end_tx). Every
 * transaction has a termination word:
 *
 *     GOING_TO_ABORT | GOING_TO_COMMIT | ENDED | COMMIT_READY | count of tasks using it
 *
 * changed only by compare-and-swap, so every request sees one order:
 *  1. A task of the transaction "uses" it from the moment it starts (count + 1)
 *     until its fn returns (count - 1). A task that would start after either
 *     GOING_TO_* flag is set does not run: its cancel callback (if any) runs
 *     instead (urt_task_tx() names the transaction; the reason is always
 *     URT_TX_EINACTIVE, "inactive transaction").
 *  2. urt_tx_abort() is idempotent. With no task in flight it performs the
 *     abort at once (the abort hook runs on the calling thread); with tasks in
 *     flight it sets GOING_TO_ABORT and the last of those tasks performs the
 *     abort (the hook runs on that task's worker, after its fn returned).
 *  3. urt_tx_commit() after an abort request fails with -ECANCELED; after
 *     another commit request with -EALREADY. Otherwise it sets
 *     GOING_TO_COMMIT (from then on no task of the transaction starts, rule
 *     1) and returns 0; the commit is the transaction's last step:
 *      - with no task in flight it is performed at once: the pre-commit hook
 *        runs on the calling thread;
 *      - with tasks in flight it is deferred: the last of those tasks to
 *        leave (its fn returned) performs it, on its worker — so a client
 *        whose tasks signal "done" at the end of their fn may commit right
 *        away, and a task may commit its own transaction.
 *     Either way it happens exactly once (one CAS on the word decides who
 *     performs it, no lock) and the callback reports its end.
 *  4. The abort hook and the commit hook are each called at most once, and
 *     never at the same time: the one request that sets ENDED calls them. A
 *     commit whose pre-commit hook fails calls the abort hook right after it,
 *     on the same thread, and its callback receives the hook's error.
 *
 * Commit responses. The callback passed to urt_tx_commit() runs
 * exactly once (if the call returned 0), as a task on a worker:
 *   URT_COMMIT_ACCEPTED  — as soon as the commit was queued (right after the
 *                          pre-commit hook ran);
 *   URT_COMMIT_AVAILABLE — after pre-commit: the transaction's effects are
 *                          visible to others;
 *   URT_COMMIT_STORED    — when the write-ahead log has made the commit's
 *                          records durable. Needs a log (the durability layer
 *                          registers one, see tx/commit_hook.h); without one,
 *                          urt_tx_commit() fails with -EOPNOTSUPP and changes
 *                          nothing.
 * With a log registered, every response goes through it (ACCEPTED and
 * AVAILABLE still append the records, they only do not wait for durability).
 *
 * Lifecycle of a urt_tx (numbered rules):
 *  1. urt_tx_begin() creates it with one handle, owned by the caller.
 *  2. Tasks are submitted with urt_tx_submit()/urt_tx_spawn() (any thread)
 *     until a commit or abort is requested; later submissions fail with
 *     URT_TX_EINACTIVE and a message, from every thread, the transaction's
 *     own running task included (a task submitted then could not start,
 *     protocol rule 1). Records (urt_tx_log) follow the same rule, except
 *     that the task that is running when the request arrives may still
 *     append until its fn returns. While the handle is held, use of an
 *     ending or ended transaction is always detected.
 *  3. urt_tx_release() gives the handle back; if the transaction has not
 *     ended it is aborted first (rule 2). The memory lives on until the last
 *     queued task and the commit callback are done; it is freed by the runtime.
 *  4. The handle may not be used after urt_tx_release() (undefined
 *     behaviour: the memory may be gone, it cannot be detected). Releasing
 *     NULL is a no-op. Release every transaction before urt_runtime_destroy().
 */
#ifndef URT_TX_H
#define URT_TX_H

#include <errno.h>

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_tx urt_tx;

/* The "inactive transaction" error: the transaction is ending or has ended. */
#define URT_TX_EINACTIVE (-ESTALE)

enum urt_commit_response {
    URT_COMMIT_ACCEPTED = 0,  /* callback when the commit is queued */
    URT_COMMIT_AVAILABLE = 1, /* callback after pre-commit (visible to others) */
    URT_COMMIT_STORED = 2,    /* callback when durable (needs a write-ahead log) */
};

/* The commit callback: status is 0 (committed, with the requested response
 * reached) or -errno: the pre-commit hook's error; the write-ahead log's
 * error, which is the errno of the failed write or fdatasync exactly as the
 * kernel returned it (-EIO for an I/O error, -ENOSPC for a full disk,
 * -EDQUOT, ...) or -ENOMEM; or -ECANCELED when the runtime shut down before
 * the response was reached. */
typedef void urt_commit_fn(urt_tx *tx, int status, void *arg);

/* The user's hooks (each optional). pre_commit returns 0 or -errno; a
 * failure aborts the transaction. Rule 4 above: at most once each, never
 * concurrently. They may not call urt_tx_commit/urt_tx_abort on tx. */
struct urt_tx_hooks {
    int (*pre_commit)(urt_tx *tx, void *arg);
    void (*abort)(urt_tx *tx, void *arg);
    void *arg;
};

struct urt_tx_options {
    struct urt_tx_hooks hooks;
    uint64_t id;         /* the transaction id carried by its log records (0: urt assigns one) */
    uint32_t reserved[4];/* must be zero */
};

/* Sets every option to its default (no hooks, id assigned). Any thread. */
URT_API void urt_tx_options_init(struct urt_tx_options *opt);

/* Begins a transaction with its own lane. opt may be NULL. Returns 0 and *out,
 * or -EINVAL (NULL rt or out, reserved not zero), -ENOMEM, -ESHUTDOWN. Any
 * thread. */
URT_API int urt_tx_begin(urt_runtime *rt, const struct urt_tx_options *opt, urt_tx **out);

/* Submits a task that uses the transaction to its lane (flags as
 * urt_task_submit; URT_SUBMIT_URGENT only matters when the lane is idle).
 * Returns 0, -EINVAL (NULL tx, task or task->fn, unknown flags),
 * -ESHUTDOWN, or URT_TX_EINACTIVE (-ESTALE) once a commit or abort was
 * requested. Any thread. */
URT_API int urt_tx_submit(urt_tx *tx, struct urt_task *task, unsigned flags);
/* The same with a task from the runtime's cache (NULL fn instead of task;
 * plus -ENOMEM). Any thread. */
URT_API int urt_tx_spawn(urt_tx *tx, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags);

/* Requests the abort (rule 2). Returns 0 (aborted now, or going to abort when
 * the tasks in flight end, or already aborting: idempotent), or -EALREADY
 * when a commit was requested first (the commit goes on), -EINVAL (NULL tx).
 * Any thread. */
URT_API int urt_tx_abort(urt_tx *tx);

/* Requests the commit (rule 3). Returns 0 (cb will run exactly once: the
 * commit is performed now, or, with tasks of the transaction in flight, once
 * the last of them has left), or -ECANCELED (an abort was requested first),
 * -EALREADY (a commit was requested first), -EOPNOTSUPP (URT_COMMIT_STORED
 * without a write-ahead log; nothing changed), -EINVAL (NULL tx or cb,
 * unknown response). Never -EBUSY: tasks in flight defer the commit. Any
 * thread, including the transaction's own tasks; the pre-commit hook runs on
 * the calling thread, or for a deferred commit on the worker of the last task
 * in flight, after its fn returned. */
URT_API int urt_tx_commit(urt_tx *tx, enum urt_commit_response response, urt_commit_fn *cb, void *arg);

/* Appends a log record (copied) to the transaction; the write-ahead log
 * writes the records at commit, in the order they were appended. Who may
 * append:
 *  - a task of the transaction, from its fn (or its I/O continuation), at
 *    any time until its fn returns — also after a commit or abort was
 *    requested while it runs (a deferred commit includes its records);
 *  - any other thread (or a task of something else) while the transaction
 *    is active and none of its tasks is running or has I/O in flight; the
 *    append then counts as a use of the transaction, as a task does: a
 *    commit requested meanwhile waits for it and is performed by that
 *    thread when the append returns.
 * Returns 0, -EINVAL (NULL tx or record, len 0 or above 16 MiB), -ENOMEM,
 * URT_TX_EINACTIVE (-ESTALE) once a commit or abort was requested — to
 * everyone but the task that is running — or after the end, -EBUSY (from a
 * thread that is not the running task: a task of the transaction is running
 * or has I/O in flight, or another thread is appending; from the running
 * task: another thread is appending). Any thread, by the rules above; the
 * library detects each breach of them and appends nothing. */
URT_API int urt_tx_log(urt_tx *tx, const void *record, size_t len);

/* Where the transaction is. Any thread. */
enum urt_tx_state {
    URT_TX_ACTIVE = 0,    /* accepts tasks */
    URT_TX_ABORTING = 1,  /* going to abort: waits for the tasks in flight */
    URT_TX_ABORTED = 2,   /* the abort was performed */
    URT_TX_COMMITTING = 3,/* commit requested, response not reached yet */
    URT_TX_COMMITTED = 4, /* the commit's response was reached */
};
/* The transaction's state now (it may change as soon as this returns,
 * unless it is ABORTED or COMMITTED, which are final): ACTIVE until a
 * commit or abort is requested, COMMITTING or ABORTING while the request
 * waits for the tasks in flight or for the log, then COMMITTED (the
 * callback's status was 0) or ABORTED (aborted, or the commit failed: the
 * callback got its error). URT_TX_ABORTED for a NULL tx. Any thread, while
 * the handle is held. */
URT_API enum urt_tx_state urt_tx_state(const urt_tx *tx);

/* The transaction id (for log records). Any thread. */
URT_API uint64_t urt_tx_id(const urt_tx *tx);

/* In a task's fn or cancel callback: the transaction the task belongs to, or
 * NULL. Any thread (reads the task). */
URT_API urt_tx *urt_task_tx(const struct urt_task *task);

/* Gives the handle back (lifecycle rule 3). NULL is a no-op. Any thread. */
URT_API void urt_tx_release(urt_tx *tx);

#ifdef __cplusplus
}
#endif

#endif
