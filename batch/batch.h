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
 * Node life (seed 001): created -> activated -> deactivated -> disposed, the
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
    bool begun;                     /* block_begin ran (block_done will) */
    bool committed;
    uint32_t nfields;               /* expected fields (0: any) */
    uint64_t limit;                 /* end of its range: min((index + 1) * block_bytes, size) */
    uint64_t cursor;                /* next record start */
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
    uint32_t blocks_active;
    uint32_t nfields;               /* published by block 0 (0: unknown or any) */
    bool frontier_valid;            /* the start of block frontier_index, for when it is created */
    uint64_t frontier_index, frontier_start;
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
    /* the tree (mu) */
    struct bfile *files;
    uint32_t next_file, files_active;
    bool tree_done;
    struct urt_batch_stats st;
    struct urt_task boot;
    struct bload *load;
};

/* batch.c */
bool batch_aborting(const struct urt_batch *b);
/* Records the batch's first error: message "<fmt...>"; returns true if it
 * was the first. Takes mu; then ends every block waiting for a start that
 * will not come. */
bool batch_fail(struct urt_batch *b, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Only records it (no blocks ended): for the tree's own callers, which end
 * the waiting blocks themselves (tree.c settle). Takes mu. */
bool batch_fail_record(struct urt_batch *b, int err, const char *msg);
/* batch_fail with the block's position prefixed ("file 'p' (#i), block k,
 * record r at byte o: ..."): record_index < 0 names no record (offset is then
 * the block's start). The one format of a position, for the executor's
 * blocks, the load's and the statements of either. */
bool batch_fail_at(const struct urt_batch_block *p, int err, int64_t record_index, uint64_t offset,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* batch_fail_at of the block's own position. */
bool block_fail(struct bblock *blk, int err, int64_t record_index, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int batch_submit_step(struct urt_batch *b, struct urt_task *t, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg);
void batch_tree_done(struct urt_batch *b); /* the last node is gone: close the batch's job */

/* tree.c */
void tree_bootstrap(struct urt_batch *b);
void tree_file_opened(struct bfile *f);    /* opened, size known (a failed open: tree_file_end) */
void tree_file_end(struct bfile *f);       /* a file that will get no (more) blocks */
void tree_block_end(struct bblock *blk);   /* deactivate, dispose, start what the limits allow */
/* Block k's scan found where block k + 1 starts (and the file's field count). */
void tree_publish(struct bblock *blk, uint64_t next_start, uint32_t nfields);
/* After an error: the blocks waiting for a start that will not come (a list
 * through act_next), no longer waiting. */
struct bblock *tree_take_waiting(struct urt_batch *b);
/* A block's read arrived: true when its start is known (go on scanning),
 * false when it now waits (or the batch is aborting: *abort). */
bool tree_block_read(struct bblock *blk, bool *abort);

/* block.c */
void block_start(struct bblock *blk);      /* submit its first step (tree.c, after the lock) */
void block_scan_submit(struct bblock *blk);
void block_end(struct bblock *blk, int status);
void block_free(struct bblock *blk);

/* load.c */
int load_start(struct urt_batch *b);       /* begins the transaction (0 or -errno with a message) */
void load_boot(struct urt_batch *b);       /* the bootstrap task: the loader's first step */
void load_stats(const struct bload *l, struct urt_batch_stats *out);
void load_free(struct bload *l);

#endif
