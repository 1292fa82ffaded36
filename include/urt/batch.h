/*
 * urt/batch.h — the batch executor and the transactional load:
 * one statement run many times, once per record of a list of parameter files.
 *
 * Inputs. A list of files in one format:
 *   URT_BATCH_CSV     RFC 4180: records end with LF or CRLF (the last one may
 *                     end at the end of the file); fields are separated by
 *                     commas; a field may be quoted ("..."), and then holds
 *                     commas, line breaks and doubled quotes ("" is one ").
 *                     With URT_BATCH_CSV_HEADER the first record of every file
 *                     is a header: it runs no statement (its field count is
 *                     the file's when `fields` is 0).
 *   URT_BATCH_BINARY  the length-prefixed format of docs/batch.md:
 *                         file   := "URTBIN1\n" record*
 *                         record := u32le body_len, body   (fields fill the body)
 *                         field  := u32le len, len bytes, one 0x00 byte
 * Either way a statement sees its record's fields as (data, len) pairs, each
 * NUL-terminated in place (CSV quotes removed, "" turned into "), valid until
 * the statement completed.
 *
 * Blocks. A file is split into blocks of block_bytes: block k owns the records
 * that START in bytes [k * block_bytes, (k + 1) * block_bytes) (its last record
 * may run past that range; a record is never longer than max_record_bytes <=
 * block_bytes). So blocks of a file run in parallel. A block learns where its
 * first record starts from the block before it (a cheap scan of that block's
 * bytes: quote parity for CSV, the length chain for the binary format); its
 * statements start once its bytes are read and that start is known.
 *
 * The tree (after jogasaki's batch executor). batch → file → block →
 * statement, each node created when work reaches it and released when its
 * work is done, so memory depends on the limits, not on the number of files:
 *   - at most max_concurrent_files files are in flight (a file from the
 *     opening of the file until its last block ended);
 *   - at most max_concurrent_blocks_per_file blocks per file are in flight (a
 *     block from its read until its commit answered), started in file order;
 *   - a block runs one statement at a time, in record order: the next record's
 *     statement starts from the previous one's completion;
 *   - a node asks its parent to release it when it is done; the root (the
 *     urt_batch) belongs to the caller; the tree is gone only after every
 *     statement's completion ran.
 * Nodes go created → activated → deactivated → disposed (docs/batch.md).
 * Files are read through the workers' rings (urt/io.h): no worker blocks on a
 * read.
 *
 * Statements and jobs. The batch runs as a job (urt_batch_job): its tasks open
 * and read the files and hold the tree together; it ends after the last
 * statement's completion, and its completion calls the batch callback.
 * Every statement is a job of its own, nested in the batch's (created while
 * the batch's job is open, which cannot end before it): the statement function
 * runs once per record as a task — of the block's transaction when there is
 * one (on the transaction's lane: urt_tx_log works from it), else as the first
 * task of the statement's job — and the statement completes when
 *   (a) the function returned 0 or -errno, or it returned URT_BATCH_PENDING and
 *       urt_batch_stmt_done() was called later (from any thread), and
 *   (b) every task of the statement's job (stmt->job: urt_job_submit, I/O
 *       continuations of tasks of that job) has finished.
 * An async statement is one that returns URT_BATCH_PENDING, submits its work
 * (tasks of stmt->job, or of stmt->tx for work that logs to the transaction)
 * and calls urt_batch_stmt_done() at its end. After urt_batch_stmt_done() (or
 * the function's return of 0 / -errno) the statement may be gone: do not touch
 * stmt again.
 *
 * Transactions. With URT_BATCH_BLOCK_TX every block runs in its own
 * transaction (urt/tx.h), begun before its first statement and committed after
 * its last with `response` (URT_COMMIT_STORED: the block counts as done once
 * its records are durable), once every earlier block of its file parsed all
 * of its records (so a block never commits records read from a start that a
 * malformed record earlier in the file made wrong); a block without records
 * begins none. With
 * URT_BATCH_TRANSACTIONAL the whole load is ONE transaction (jogasaki's
 * transactional load): files are read in order, one block at a time, by one
 * loader task that keeps at most max_statements statements in flight (all on
 * the transaction's lane) and yields itself (URT_TASK_YIELD: no worker ever
 * waits) while the slots are full or the last statements are finishing; the
 * transaction commits when every statement completed.
 *
 * Errors. The first error — a statement's (its -errno, or
 * urt_batch_stmt_error), a file that cannot be opened or read, a parse error,
 * a failed commit, urt_batch_cancel — is the batch's: it sets the
 * error-aborting state (urt_batch_aborting() turns true: statements in flight
 * should stop quickly), no statement and no block or file starts after it (a
 * statement launched before it whose function has not started is completed
 * with -ECANCELED without being called), blocks in flight end without
 * committing (their transactions are aborted), and once every node is
 * released the callback runs with that error and a message naming the file,
 * the line (CSV), the block and the record (its index in the block and byte
 * offset in the file), e.g. "file 'f.csv' (#0), line 5717, block 3, record 17
 * at byte 3145800: quote inside an unquoted field (byte 3145811)" — the line
 * of the malformed byte for a malformed record, of the record's first byte
 * otherwise. First in file order: when the first error is about a record (a
 * statement's, a malformed record), the blocks of that file before it parse
 * their remaining records before it (no statement runs), and a malformed one
 * they find is the batch's error instead — its quotes may have misled the
 * scan that gave the failing block its start — so the error reported is the
 * first malformed record of the file, wherever a block found a problem first
 * (across files: the first error found). urt_batch_error() says the first
 * error's message until the callback; from then on (and the callback's
 * status and message) the batch's final one. Blocks that committed before the error stay
 * committed (with URT_BATCH_BLOCK_TX each block is its own transaction; use
 * URT_BATCH_TRANSACTIONAL for all or nothing). Bad input is an error of this
 * kind, never a crash, a hang or a silent partial load: a missing or
 * unreadable file (-ENOENT, -EACCES, ... as openat/read return them), an
 * empty file or one without records (-ENODATA), a malformed record (-EBADMSG:
 * an unterminated quote, a quote inside an unquoted field, text after a
 * closing quote, a truncated binary record, a field without its 0x00), a
 * record with the wrong number of fields (-EBADMSG), a record longer than
 * max_record_bytes (-EMSGSIZE).
 *
 * Lifecycle of a urt_batch (numbered rules):
 *  1. urt_batch_start() validates the options, copies them (the paths too)
 *     and starts the batch's job; on success the callback `done` will run
 *     exactly once (on success or at the first error, after every node was
 *     released), on a worker; on failure nothing ran and nothing will.
 *  2. The handle is the caller's until urt_batch_release(); urt_batch_wait(),
 *     urt_batch_poll(), urt_batch_error(), urt_batch_stats() and
 *     urt_batch_cancel() may be used until then, also from the callback.
 *  3. urt_batch_release() gives the handle back; the memory is freed once the
 *     callback returned and the handle was released (either order). Releasing
 *     NULL is a no-op. Release every batch before urt_runtime_destroy().
 *  4. urt_runtime_destroy() in drain mode runs a batch to its end; in cancel
 *     mode its queued tasks are cancelled and the batch fails — with
 *     -ECANCELED, or -ESHUTDOWN when a step of it could no longer be submitted
 *     — and its callback still runs once (on a worker or the destroying
 *     thread). A statement's own tasks must complete it from their cancel
 *     callbacks too (urt_batch_stmt_done), or the batch never ends.
 */
#ifndef URT_BATCH_H
#define URT_BATCH_H

#include <urt/common.h>
#include <urt/job.h>
#include <urt/tx.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_batch urt_batch;

enum urt_batch_format {
    URT_BATCH_CSV = 0,    /* RFC 4180 (default) */
    URT_BATCH_BINARY = 1, /* length-prefixed records (docs/batch.md) */
};

#define URT_BATCH_CSV_HEADER 0x1u    /* CSV: the first record of each file is a header */
/* Both transaction flags commit with `response`, URT_COMMIT_STORED by default:
 * a runtime without a write-ahead log (log_dir) or durability source refuses
 * that (urt_batch_start: -EOPNOTSUPP); set response = URT_COMMIT_AVAILABLE
 * there. */
#define URT_BATCH_BLOCK_TX 0x2u      /* one transaction per block, committed with `response` */
#define URT_BATCH_TRANSACTIONAL 0x4u /* one transaction for everything (the transactional load) */
#define URT_BATCH_FLAGS_ALL 0x7u

/* A statement function returns this when it completes later, with
 * urt_batch_stmt_done(). */
#define URT_BATCH_PENDING 1

/* One field of a record: len bytes at data, followed by a NUL. */
struct urt_batch_field {
    const char *data;
    size_t len;
};

/* A block as the hooks and statements see it. */
struct urt_batch_block {
    urt_batch *batch;
    uint32_t file;       /* index into the options' files */
    const char *path;    /* that file's path (the batch's copy) */
    uint64_t index;      /* block index within the file */
    uint64_t start, end; /* byte range of the records it owns: start is known when its first
                            statement runs, end when its last ended (block_done) */
    uint64_t records;    /* statements run so far (at block_done: all of them) */
    urt_tx *tx;          /* its transaction (URT_BATCH_BLOCK_TX; the load's with
                            URT_BATCH_TRANSACTIONAL), or NULL */
    uint64_t tx_id;      /* block_begin may choose the transaction id (0: urt assigns one);
                            the transaction's id from then on */
    void *user;          /* the caller's: NULL at block_begin, kept until block_done */
};

/* Private part of a statement: do not touch. */
struct urt_batch_stmt_private {
    struct urt_task runner;   /* runs the statement function */
    void *node;               /* the block node, or the load's slot */
    _Atomic int32_t status;   /* the statement's first error */
    _Atomic uint32_t done;    /* urt_batch_stmt_done was called, or the function returned */
};

/* One statement: one record. The caller may read every field; all of them stay
 * valid until the statement completed. */
struct urt_batch_stmt {
    const struct urt_batch_field *fields; /* fields[0 .. n_fields) */
    uint32_t n_fields;
    uint64_t record;                      /* index of the record within its block (0-based; a
                                             CSV header is not counted) */
    uint64_t offset;                      /* byte offset of the record in its file */
    uint64_t line;                        /* CSV: the line (1-based: 1 + the LF bytes before it) of
                                             the record's first byte; binary format: 0 */
    struct urt_batch_block *block;
    urt_batch *batch;
    urt_job *job;                         /* the statement's job */
    urt_tx *tx;                           /* the block's or the load's transaction, or NULL */
    struct urt_batch_stmt_private priv;
};

/* The statement function: runs once per record, as a task on a worker (see
 * "Statements and jobs" above). Returns 0 (done), URT_BATCH_PENDING (done
 * later, urt_batch_stmt_done) or -errno (the statement failed: the batch's
 * error, with urt_batch_stmt_error's message if it recorded one). */
typedef int urt_batch_stmt_fn(struct urt_batch_stmt *stmt, void *arg);

/* The batch callback (lifecycle rule 1): status 0, or the first error;
 * message "" on success, else the one-line message (also urt_batch_error()). */
typedef void urt_batch_done_fn(urt_batch *batch, int status, const char *message, void *arg);

struct urt_batch_options {
    const char *const *files;        /* paths (copied by urt_batch_start) */
    uint32_t n_files;                /* >= 1 */
    enum urt_batch_format format;    /* default URT_BATCH_CSV */
    uint32_t flags;                  /* URT_BATCH_* (default 0) */
    uint32_t fields;                 /* fields per record; 0 (default): each file's first record
                                        (or header) sets the count for the file */
    uint64_t block_bytes;            /* block size, 16 B .. 1 GiB (default 1 MiB) */
    uint64_t max_record_bytes;       /* longest record (terminator or header included);
                                        0 (default): block_bytes; at most block_bytes */
    uint32_t max_concurrent_files;   /* files in flight, 1..1024 (default 2) */
    uint32_t max_concurrent_blocks_per_file; /* blocks in flight per file, 1..1024 (default 2) */
    uint32_t max_statements;         /* URT_BATCH_TRANSACTIONAL: statements in flight,
                                        1..1,000,000 (default 10,000) */
    enum urt_commit_response response; /* commits of the batch's transactions (default
                                        URT_COMMIT_STORED: durable, needs a write-ahead log or a
                                        durability source, else urt_batch_start says -EOPNOTSUPP;
                                        without one use URT_COMMIT_AVAILABLE) */
    struct urt_tx_hooks tx_hooks;    /* hooks of every transaction the batch begins (optional) */
    urt_batch_stmt_fn *statement;    /* required */
    urt_batch_done_fn *done;         /* optional (urt_batch_wait also tells) */
    void *arg;                       /* passed to statement, done and the hooks */
    /* Block hooks (optional; not called with URT_BATCH_TRANSACTIONAL). block_begin runs
     * before the block's first statement (and before its transaction begins: it may set
     * blk->tx_id and blk->user); a non-zero return fails the batch. block_done runs once
     * per begun block after it ended, with 0 (its statements succeeded and its transaction,
     * if any, reached `response`) or the error that ended it; free blk->user there. Both
     * run on a worker, one block's calls in order, different blocks' concurrently. */
    int (*block_begin)(struct urt_batch_block *blk, void *arg);
    void (*block_done)(struct urt_batch_block *blk, int status, void *arg);
    uint32_t reserved[4];            /* must be zero */
};

/* Sets the defaults (above). Any thread. */
URT_API void urt_batch_options_init(struct urt_batch_options *opt);

/* Starts a batch (lifecycle rule 1). Returns 0 and *out, or
 *   -EINVAL     NULL rt, opt, out or statement; no files (n_files 0, files NULL or a
 *               NULL path); an unknown format or flag; URT_BATCH_CSV_HEADER with the
 *               binary format; both URT_BATCH_BLOCK_TX and URT_BATCH_TRANSACTIONAL; a
 *               size, limit or response out of range; reserved not zero (the message
 *               names the field);
 *   -EOPNOTSUPP a transaction is asked for with URT_COMMIT_STORED and the runtime has
 *               neither a write-ahead log nor a durability source;
 *   -ENOMEM, -ESHUTDOWN (the runtime is being destroyed).
 * Any thread. */
URT_API int urt_batch_start(urt_runtime *rt, const struct urt_batch_options *opt, urt_batch **out);

/* Completes a statement whose function returned URT_BATCH_PENDING, with
 * status 0 or -errno (a failure: the batch's error). Returns 0, -EINVAL (NULL
 * stmt, a positive status), -EALREADY (already completed: the function returned
 * 0 / -errno, or urt_batch_stmt_done was called before). Any thread. */
URT_API int urt_batch_stmt_done(struct urt_batch_stmt *stmt, int status);

/* Fails the batch with err and a message about this statement (the batch adds
 * the file, block and record), unless it failed before (the first error wins);
 * returns err, so that `return urt_batch_stmt_error(stmt, -EINVAL, "bad key %s",
 * f[0].data);` ends a statement function. err must be negative (-EINVAL is
 * used instead otherwise). From the statement's function or its tasks. */
URT_API int urt_batch_stmt_error(struct urt_batch_stmt *stmt, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True once the batch has an error (error-aborting): statements in flight
 * should stop. Any thread. */
URT_API bool urt_batch_aborting(const urt_batch *batch);

/* Fails the batch with -ECANCELED ("cancelled by urt_batch_cancel") unless it
 * failed or ended before. Returns 0, -EALREADY (it had an error already, or it
 * ended), -EINVAL (NULL batch). Any thread. */
URT_API int urt_batch_cancel(urt_batch *batch);

/* The batch's status once its callback ran (0 or the error), else
 * -EINPROGRESS; -EINVAL for NULL. Any thread. */
URT_API int urt_batch_poll(const urt_batch *batch);

/* Blocks until the callback returned or timeout_ns passed (URT_WAIT_FOREVER).
 * Returns the status (as urt_batch_poll), -ETIMEDOUT, -EINVAL (NULL batch),
 * -EDEADLK on a worker. Threads that are not workers only. */
URT_API int urt_batch_wait(urt_batch *batch, uint64_t timeout_ns);

/* The batch's error message ("" without an error). Valid while the handle is
 * held. Any thread. Until the batch's callback it is the first error's (set
 * once urt_batch_aborting() is true); from the callback on the batch's final
 * one, which a malformed record earlier in the same file may have replaced
 * ("Errors" above). */
URT_API const char *urt_batch_error(const urt_batch *batch);

/* The batch's job (to wait on it with urt_job_wait, or to know it in a task);
 * valid while the handle is held. Any thread. */
URT_API urt_job *urt_batch_job(const urt_batch *batch);

struct urt_batch_stats {
    uint64_t files_done;             /* files released */
    uint64_t blocks_done;            /* blocks released (committed, without records, or failed) */
    uint64_t blocks_committed;       /* blocks whose transaction reached its response */
    uint64_t statements;             /* statements completed (of released blocks; the load: all) */
    uint64_t bytes_read;             /* file bytes read */
    uint32_t files_in_flight, blocks_in_flight;         /* now */
    uint32_t max_files_in_flight;    /* peak: never above max_concurrent_files */
    uint32_t max_blocks_in_flight;   /* peak over the whole batch */
    uint32_t max_blocks_per_file;    /* peak of any one file: never above max_concurrent_blocks_per_file */
    uint32_t max_statements_in_flight; /* URT_BATCH_TRANSACTIONAL: peak, never above max_statements;
                                        otherwise 0 (one per block in flight at most) */
    uint64_t loader_runs, loader_yields; /* URT_BATCH_TRANSACTIONAL: runs of the loader task, and
                                        how many ended in a yield */
    uint64_t buffer_bytes, max_buffer_bytes; /* block buffers allocated now / at the peak */
    uint64_t nodes, max_nodes;       /* file and block nodes alive now / at the peak */
};

/* Reads the counters: a consistent snapshot of the tree's (taken under the
 * batch's lock); the loader's counters of a transactional load are read
 * beside it, relaxed. Returns 0 or -EINVAL (NULL batch or out). Any thread. */
URT_API int urt_batch_stats(const urt_batch *batch, struct urt_batch_stats *out);

/* Lifecycle rule 3. Any thread. */
URT_API void urt_batch_release(urt_batch *batch);

#ifdef __cplusplus
}
#endif

#endif
