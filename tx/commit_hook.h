/*
 * tx/commit_hook.h — the seam between transactions (tx/tx.c) and the
 * write-ahead log (the durability layer, tx/wal*.c).
 *
 * The log registers one struct tx_log per runtime with tx_log_register().
 * From then on urt_tx_commit() hands every commit whose pre-commit hook
 * succeeded to log->commit(log, tx, response), on the thread that performs
 * the commit: the caller of urt_tx_commit(), or, for a commit deferred by
 * tasks in flight, the worker of the last of them (after its fn returned).
 * The log reads the transaction's records (tx_record_next), appends them to
 * its channel and, when the response is reached (ACCEPTED: queued;
 * AVAILABLE: appended; STORED: the durable marker covers the commit), calls
 * tx_commit_complete(tx, status) exactly once, from the task that answers
 * it; tx/tx.c then runs the user's commit callback right there (one task hop
 * from the durable marker to the callback) and drops the transaction's
 * commit reference.
 *
 * Without a log, URT_COMMIT_STORED is refused by urt_tx_commit()
 * (-EOPNOTSUPP, nothing changes) and ACCEPTED/AVAILABLE complete right after
 * the pre-commit hook.
 *
 * Rules:
 *  1. Register before the first commit and unregister (NULL) only when no
 *     commit is in flight; the registration is read with acquire and written
 *     with release (pairs with each other), nothing else is ordered by it.
 *  2. log->commit returns 0 (it owns the completion: tx_commit_complete will
 *     be called once, from any thread) or -errno (no completion will come:
 *     the commit fails with that status, the abort hook runs, the user's
 *     callback receives the status).
 *  3. The records stay valid and unchanged from log->commit until
 *     tx_commit_complete (the transaction has ended: no task appends).
 *  4. tx_commit_complete with a status != 0 (e.g. -EIO, or -ECANCELED at
 *     shutdown) reports a failed commit to the user; the transaction has
 *     already ended, so no abort hook runs then.
 */
#ifndef URT_TX_COMMIT_HOOK_H
#define URT_TX_COMMIT_HOOK_H

#include <stddef.h>
#include <stdint.h>

#include <urt/log.h>
#include <urt/tx.h>

struct tx_log {
    int (*commit)(struct tx_log *log, urt_tx *tx, enum urt_commit_response response);
};

/* Registers log for rt (NULL unregisters). Any thread (rule 1). */
void tx_log_register(urt_runtime *rt, struct tx_log *log);

/* The registered log, or NULL. Any thread. */
struct tx_log *tx_log_of(urt_runtime *rt);

/* Reports that the commit's response was reached (status 0) or failed.
 * Exactly once per successful log->commit, from a task on a worker (the
 * log's answer) or the destroying thread: the user's commit callback runs
 * right there, before it returns. */
void tx_commit_complete(urt_tx *tx, int status);

/* Walks the records in append order: *cursor starts at 0; returns the next
 * record and its length, or NULL at the end. Rule 3 says when. */
const void *tx_record_next(const urt_tx *tx, size_t *cursor, uint32_t *len);

/* Number of records and their total payload bytes. */
size_t tx_record_count(const urt_tx *tx);
size_t tx_record_bytes(const urt_tx *tx);

/* The commit the log uses for this transaction (embedded in it: no
 * allocation per commit), from log->commit until tx_commit_complete: made
 * ready (tx id, response; its callback calls tx_commit_complete) for the log
 * to fill its own fields and submit. And back from it to the transaction. */
struct urt_commit *tx_log_commit(urt_tx *tx, enum urt_commit_response response);
urt_tx *tx_of_log_commit(const struct urt_commit *c);

#endif
