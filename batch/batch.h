/*
 * batch/batch.h — the batch executor's private objects (design: batch/tree.c;
 * public API: urt/batch.h).
 *
 * Objects and who owns them:
 *   struct urt_batch  the root: options, the batch's job, the lock, the first
 *                     error, the active files; references: the caller's handle
 *                     and the job's (dropped after the callback)
 *   struct bfile      one file in flight: descriptor, size, block cursor, the
 *                     boundary frontier, its active blocks; owned by the batch
 *   struct bblock     one block in flight: its window (buffer), parse cursor,
 *                     the statement in flight, its transaction; owned by its file
 *   struct bload      the transactional load (batch/load.c)
 * Node life (jogasaki's batch executor): created -> activated -> deactivated -> disposed, the
 * steps of tree.c (no field records it: each step is one place in the code).
 *
 * Locking: b->mu protects the tree's shape and counters (lists, counts,
 * frontiers, a block's phase and start while it waits, the stats). A block's
 * own fields (window, cursor, statement) belong to whichever task runs its
 * current step: its steps follow one another (a read's continuation, a
 * statement's completion), and the runtime orders each hand-off (task
 * submission before its run; a job's last decrement before its teardown).
 * The error word is read without the lock (urt_batch_aborting).
 */
#ifndef URT_BATCH_BATCH_H
#define URT_BATCH_BATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/batch.h>

#include "batch/bio.h"
#include "batch/parse.h"

/* Where an active block is. */
enum block_phase {
    BP_READ,   /* its first read is in flight */
    BP_WAIT,   /* read; waiting for its start from the block before it */
    BP_SCAN,   /* finding the next block's start (maybe reading more) */
    BP_RUN,    /* running its statements, one at a time */
    BP_HOLD,   /* parsed to its end; waits until every earlier block of its file was (under mu) */
    BP_COMMIT, /* its transaction's commit is in flight */
};

#define BATCH_READ_TAIL (64u << 10) /* read past a block's range at once (more only if a record needs it) */

struct bfile;

struct bblock {
    struct urt_batch_block pub;     /* the hooks' and statements' view */
    struct urt_batch *b;
    struct bfile *f;
    struct bblock *next;            /* the file's active blocks, in index order */
    struct bblock *act_next;        /* pending actions (tree.c) */
    _Atomic int phase;              /* enum block_phase (tree.c: relaxed; BP_WAIT under mu) */
    bool start_known;
    bool parsed;                    /* every record of it was parsed (mu: BP_HOLD) */
    bool scanned;                   /* cursor and line are its own (its scan ran) */
    bool begun;                     /* block_begin ran (block_done will) */
    bool committed;
    uint32_t nfields;               /* expected fields (0: any) */
    uint64_t limit;                 /* end of its range: min((index + 1) * block_bytes, size) */
    uint64_t cursor;                /* next record start */
    uint64_t line;                  /* CSV: the line of `cursor` (of pub.start until the scan); binary: 0 */
    uint64_t checked;               /* records parsed after the batch's error, no statement run (validation) */
    uint64_t cap;                   /* buffer capacity (the window may grow up to it) */
    struct parse_win win;
    struct parse_fields fv;
    struct urt_batch_stmt stmt;
    struct bio io;
    struct urt_task step;           /* start / scan / more: one at a time */
};

struct bfile {
    struct urt_batch *b;
    struct bfile *next;             /* the batch's active files */
    struct bfile *act_next;
    struct bblock *blocks;          /* active blocks, index order */
    uint32_t index;
    int fd;
    uint64_t size, n_blocks, next_block;
    uint64_t parsed_upto;           /* blocks [0, parsed_upto) parsed all their records */
    uint32_t blocks_active;
    uint32_t nfields;               /* published by block 0 (0: unknown or any) */
    bool frontier_valid;            /* the start of block frontier_index, for when it is created */
    uint64_t frontier_index, frontier_start, frontier_line;
    struct bio io;
    struct urt_task step;           /* open */
};

struct bload;

struct urt_batch {
    urt_runtime *rt;
    struct urt_batch_options opt;   /* copy; opt.files points to paths */
    char **paths;
    uint64_t max_rec;
    urt_job *job;
    _Atomic uint32_t refs;
    _Atomic int32_t error;          /* first error; non-zero = error-aborting */
    _Atomic uint32_t ended;         /* the callback returned */
    int32_t final_status;
    pthread_mutex_t mu;
    char message[512];              /* written once, under mu, before error */
    /* An input error (a statement's, a malformed record: FAIL_INPUT, FAIL_MALFORMED) of an
     * executor file: where it is, so that the file's earlier blocks check their records for an
     * earlier malformed one (validation), which then is the batch's error (mu). */
    bool err_input;
    uint32_t err_file;
    uint64_t err_key;               /* byte offset of the record (or byte) the error is about */
    int32_t earlier_err;            /* such an earlier malformed record's error, and its message */
    char earlier[512];
    _Atomic uint32_t final_set;     /* final_msg is the batch's message (set at its end) */
    const char *final_msg;
    /* the tree (mu) */
    struct bfile *files;
    uint32_t next_file, files_active;
    bool tree_done;
    struct urt_batch_stats st;
    struct urt_task boot;
    struct bload *load;
};

/* batch.c */
/* What an error is about (the first error in file order, docs/batch.md):
 *   FAIL_OTHER      not a place in the input (I/O, a commit, a hook, cancel);
 *   FAIL_INPUT      a record, by its statement: the file's earlier blocks are
 *                   checked for an earlier malformed record;
 *   FAIL_MALFORMED  a malformed record (or a wrong field count): the same, and
 *                   it replaces an input error of the same file that lies
 *                   after it (its block may have started from a wrong guess). */
enum fail_kind { FAIL_OTHER = 0, FAIL_INPUT, FAIL_MALFORMED };
bool batch_aborting(const struct urt_batch *b);
/* After an input error of file `file`: true while a record starting before
 * it is to be checked (cursor < its offset). Takes mu. */
bool batch_validating(struct urt_batch *b, uint32_t file, uint64_t cursor);
/* Records the batch's first error: message "<fmt...>"; returns true if it
 * was the first. Takes mu; then ends every block waiting for a start that
 * will not come. */
bool batch_fail(struct urt_batch *b, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Only records it (no blocks ended): for the tree's own callers, which end
 * the waiting blocks themselves (tree.c settle). Takes mu. */
bool batch_fail_record(struct urt_batch *b, int err, const char *msg);
/* batch_fail with the block's position prefixed ("file 'p' (#i), line l,
 * block k, record r at byte o: ..."): record_index < 0 names no record;
 * line 0 names none (the binary format, a read). offset: the record's (or
 * the byte's) file offset, the error's place in file order. The one format
 * of a position, for the executor's blocks, the load's and the statements of
 * either. */
bool batch_fail_at(const struct urt_batch_block *p, enum fail_kind kind, int err, int64_t record_index,
                   uint64_t offset, uint64_t line, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* batch_fail_at of the block's own position. */
bool block_fail(struct bblock *blk, enum fail_kind kind, int err, int64_t record_index, uint64_t offset,
                uint64_t line, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
int batch_submit_step(struct urt_batch *b, struct urt_task *t, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg);
void batch_tree_done(struct urt_batch *b); /* the last node is gone: close the batch's job */

/* tree.c */
void tree_bootstrap(struct urt_batch *b);
void tree_file_opened(struct bfile *f);    /* opened, size known (a failed open: tree_file_end) */
void tree_file_end(struct bfile *f);       /* a file that will get no (more) blocks */
void tree_block_end(struct bblock *blk);   /* deactivate, dispose, start what the limits allow */
/* Block k's scan found where block k + 1 starts, its line (CSV; 0: binary),
 * and the file's field count. */
void tree_publish(struct bblock *blk, uint64_t next_start, uint64_t next_line, uint32_t nfields);
/* After an error: the blocks waiting for a start that will not come, or for
 * earlier blocks to be parsed (a list through act_next), no longer waiting. */
struct bblock *tree_take_waiting(struct urt_batch *b);
/* The block parsed every record of its range: true when every earlier block
 * of its file did too (go on to its commit); else it waits (BP_HOLD) and
 * block_resume is called for it when they did, or false with *abort when the
 * batch is aborting and it would wait (it ends itself: nothing resumes it). */
bool tree_block_parsed(struct bblock *blk, bool *abort);

#if URT_FAULT_INJECTION
/* Test builds (-Dfault_injection=true): called on the block's step when a
 * block has parsed to its end, just before tree_block_parsed (block.c
 * block_parsed); NULL: nothing. When it returns true it has taken the block,
 * which then sits in no step and no task, and batch_fault_parsed_go(blk)
 * (from any thread, once) goes on from there. The hook must hand blk to that
 * thread by a release store that thread loads with acquire: the go then
 * reads the block's own fields, written by its last step without a lock
 * (one step of a block at a time). The hook pointer itself is loaded with
 * acquire, paired with the test's store of it, so the hook sees what the
 * test set up before. tests/unit/test_batch.c parks a block so to hold open
 * the window that tree_block_parsed's aborting check closes, without
 * holding a worker. */
typedef bool batch_fault_fn(struct urt_batch_block *blk);
extern batch_fault_fn *_Atomic batch_fault_parsed;
void batch_fault_parsed_go(struct urt_batch_block *blk);
#endif
/* A block's read arrived: true when its start is known (go on scanning),
 * false when it now waits (or the batch is aborting: *abort). */
bool tree_block_read(struct bblock *blk, bool *abort);

/* block.c */
void block_start(struct bblock *blk);      /* submit its first step (tree.c, after the lock) */
void block_scan_submit(struct bblock *blk);
void block_end(struct bblock *blk, int status);
void block_resume(struct bblock *blk);     /* a held block's earlier blocks were parsed: commit */
void block_free(struct bblock *blk);

/* load.c */
int load_start(struct urt_batch *b);       /* begins the transaction (0 or -errno with a message) */
void load_boot(struct urt_batch *b);       /* the bootstrap task: the loader's first step */
void load_stats(const struct bload *l, struct urt_batch_stats *out);
void load_free(struct bload *l);

#endif
