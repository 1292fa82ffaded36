/*
 * batch/block.c — one block of a file: its reads, the scan that hands the
 * next block its start, its statements one at a time, its transaction.
 *
 * Steps (each runs in a task; one step of a block at a time, so the block's
 * own fields need no lock — see batch/batch.h):
 *
 *   start   (task of the batch's job) read the window: block_bytes plus
 *           BATCH_READ_TAIL past its range (the last record usually ends
 *           there), at most its capacity (block_bytes + max_record_bytes);
 *   read    (continuation) tree_block_read: go on if the start is known,
 *           else wait for tree_publish (BP_WAIT);
 *   scan    (task of the batch's job) block 0: the binary magic, the CSV
 *           header, the file's field count; then the next block's start
 *           (parse_next_start), published at once so that the next block
 *           can run while this one does;
 *   run     statements in record order: parse one record in place, launch its
 *           statement (batch/stmt.c), and continue from the statement job's
 *           callback (in place, on the worker that ended it);
 *   more    (task of the batch's job) a record or the scan runs past the
 *           window: read the rest of the capacity, then resume where it was;
 *   hold    parsed to its end, the block waits (BP_HOLD, no task) until every
 *           earlier block of its file parsed all of its records: a start
 *           guessed by a scan is right only if the records before it are
 *           well formed, so no block commits records read from a wrong
 *           start (tree_block_parsed, block_resume);
 *   finish  commit the block's transaction (URT_BATCH_BLOCK_TX) with the
 *           batch's response; the commit callback ends the block;
 *   end     block_done hook, the transaction released (aborted if it did
 *           not commit), tree_block_end (the parent releases it).
 * Every step checks the error-aborting state first: a failed batch ends its
 * blocks without committing. When the batch's first error is about a record
 * of this block's file after the cursor (batch.c), the block first parses
 * its records before it without running statements (validation), so that a
 * malformed record earlier in the file — whose quotes may have misled the
 * scan that gave the failing block its start — is the error reported.
 * Lines: a block knows the line of its start (tree.c) and counts the LF
 * bytes of each record it parses (parse.h), so every statement and error
 * has its line (CSV).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch/batch.h"

int stmt_launch(struct urt_batch_stmt *s, urt_job_done_fn *done, void *arg);
int stmt_status(const struct urt_batch_stmt *s);

static void block_scan(struct bblock *blk);
static void block_next(struct bblock *blk);
static void block_validate(struct bblock *blk);
static void block_parsed(struct bblock *blk);

static inline uint64_t block_from(const struct bblock *blk)
{
    return blk->pub.index * blk->b->opt.block_bytes;
}

static void set_phase(struct bblock *blk, enum block_phase p)
{
    atomic_store_explicit(&blk->phase, p, memory_order_relaxed);
}

/* ---- end ----------------------------------------------------------------------------- */

void block_free(struct bblock *blk)
{
    free(blk->win.base);
    parse_fields_free(&blk->fv);
    free(blk);
}

void block_end(struct bblock *blk, int status)
{
    struct urt_batch *b = blk->b;
    if (blk->begun && b->opt.block_done)
        b->opt.block_done(&blk->pub, status, b->opt.arg);
    if (blk->pub.tx) {
        urt_tx_release(blk->pub.tx); /* aborts it unless it committed */
        blk->pub.tx = NULL;
    }
    tree_block_end(blk); /* blk is gone from here on */
}

/* Every step's first check: a failed batch ends the block (true) without
 * committing — after its records before the error were checked, when the
 * error is about a later record of its file (block_validate). */
static bool block_aborted(struct bblock *blk)
{
    if (!batch_aborting(blk->b))
        return false;
    if (blk->scanned && batch_validating(blk->b, blk->pub.file, blk->cursor))
        block_validate(blk);
    else
        block_end(blk, -ECANCELED);
    return true;
}

static void block_committed(urt_tx *tx, int status, void *arg)
{
    struct bblock *blk = arg;
    (void)tx;
    if (status)
        block_fail(blk, FAIL_OTHER, status, -1, blk->pub.start, 0, "the block's commit failed: %s", strerror(-status));
    else
        blk->committed = true;
    block_end(blk, status);
}

static void block_finish(struct bblock *blk)
{
    struct urt_batch *b = blk->b;
    blk->pub.end = blk->cursor;
    if (!blk->pub.tx) {
        block_end(blk, 0);
        return;
    }
    set_phase(blk, BP_COMMIT);
    int rc = urt_tx_commit(blk->pub.tx, b->opt.response, block_committed, blk);
    if (rc) {
        block_fail(blk, FAIL_OTHER, rc, -1, blk->pub.start, 0, "cannot commit the block: %s", urt_last_error());
        block_end(blk, rc);
    }
}

/* ---- reading ------------------------------------------------------------------------- */

static enum urt_task_result block_read_step(struct urt_task *t, void *arg);
static enum urt_task_result block_more_step(struct urt_task *t, void *arg);
static enum urt_task_result block_scan_step(struct urt_task *t, void *arg);

static void step_cancel(struct urt_task *t, void *arg)
{
    struct bblock *blk = arg;
    (void)t;
    block_fail(blk, FAIL_OTHER, -ECANCELED, -1, block_from(blk), 0, "a step of the block was cancelled (the batch's job was "
                                                      "cancelled)");
    block_end(blk, -ECANCELED);
}

static void submit_step(struct bblock *blk, urt_task_fn *fn)
{
    int rc = batch_submit_step(blk->b, &blk->step, fn, step_cancel, blk);
    if (rc) {
        block_fail(blk, FAIL_OTHER, rc, -1, block_from(blk), 0, "cannot submit a step of the block: %s", urt_last_error());
        block_end(blk, rc);
    }
}

void block_start(struct bblock *blk)
{
    submit_step(blk, block_read_step);
}

void block_scan_submit(struct bblock *blk)
{
    submit_step(blk, block_scan_step);
}

/* A read came back short or failed: the block's error. */
static bool read_failed(struct bblock *blk, int64_t res, uint64_t off, uint64_t len)
{
    if (res >= 0 && (uint64_t)res == len)
        return false;
    int err = res < 0 ? (int)res : -EIO;
    if (res < 0)
        block_fail(blk, FAIL_OTHER, err, -1, off, 0, "cannot read bytes %llu..%llu: %s", (unsigned long long)off,
                   (unsigned long long)(off + len), strerror(-err));
    else
        block_fail(blk, FAIL_OTHER, err, -1, off, 0, "the file shrank while it was read (%lld of %llu bytes at %llu)",
                   (long long)res, (unsigned long long)len, (unsigned long long)off);
    block_end(blk, err);
    return true;
}

static void block_read_done(struct bio *io, int64_t res, void *arg)
{
    struct bblock *blk = arg;
    uint64_t len = io->len;
    if (read_failed(blk, res, blk->win.off, len))
        return;
    blk->win.len = len;
    bool abort;
    if (tree_block_read(blk, &abort))
        block_scan(blk);
    else if (abort)
        block_end(blk, -ECANCELED);
    /* else: BP_WAIT, tree_publish submits the scan */
}

static enum urt_task_result block_read_step(struct urt_task *t, void *arg)
{
    struct bblock *blk = arg;
    struct urt_batch *b = blk->b;
    (void)t;
    if (block_aborted(blk))
        return URT_TASK_DONE;
    uint64_t len = b->opt.block_bytes + BATCH_READ_TAIL;
    if (len > blk->cap)
        len = blk->cap;
    bio_init(&blk->io, b->job);
    int rc = bio_read(&blk->io, blk->f->fd, blk->win.base, len, blk->win.off, block_read_done, blk);
    if (rc) {
        block_fail(blk, FAIL_OTHER, rc, -1, blk->win.off, 0, "cannot submit a read: %s", strerror(-rc));
        block_end(blk, rc);
    }
    return URT_TASK_DONE;
}

static void block_more_done(struct bio *io, int64_t res, void *arg)
{
    struct bblock *blk = arg;
    if (read_failed(blk, res, blk->win.off + blk->win.len, io->len))
        return;
    blk->win.len += io->len;
    if (atomic_load_explicit(&blk->phase, memory_order_relaxed) == BP_SCAN)
        block_scan(blk);
    else
        block_next(blk);
}

static enum urt_task_result block_more_step(struct urt_task *t, void *arg)
{
    struct bblock *blk = arg;
    struct urt_batch *b = blk->b;
    (void)t;
    if (batch_aborting(b) && !(blk->scanned && batch_validating(b, blk->pub.file, blk->cursor))) {
        block_end(blk, -ECANCELED); /* no record of it is to be checked */
        return URT_TASK_DONE;
    }
    uint64_t off = blk->win.off + blk->win.len, len = blk->cap - blk->win.len;
    if (len == 0) { /* parse.c never asks for more past the capacity: a bug if it did */
        block_fail(blk, FAIL_OTHER, -EMSGSIZE, -1, off, 0, "a record does not fit the block's buffer");
        block_end(blk, -EMSGSIZE);
        return URT_TASK_DONE;
    }
    bio_init(&blk->io, b->job);
    int rc = bio_read(&blk->io, blk->f->fd, blk->win.base + blk->win.len, len, off, block_more_done, blk);
    if (rc) {
        block_fail(blk, FAIL_OTHER, rc, -1, off, 0, "cannot submit a read: %s", strerror(-rc));
        block_end(blk, rc);
    }
    return URT_TASK_DONE;
}

/* ---- scan ------------------------------------------------------------------------------ */

static enum urt_task_result block_scan_step(struct urt_task *t, void *arg)
{
    (void)t;
    block_scan(arg);
    return URT_TASK_DONE;
}

static inline bool is_csv(const struct bblock *blk)
{
    return blk->b->opt.format == URT_BATCH_CSV;
}

/* CSV: the line of file byte `at` (at >= cursor, in the window, untouched by
 * the writing pass); 0 for the binary format. */
static uint64_t line_of(const struct bblock *blk, uint64_t at)
{
    return is_csv(blk) ? blk->line + parse_count_lf(&blk->win, blk->cursor, at) : 0;
}

/* parse rc other than PARSE_OK: read more, or fail. True when handled.
 * record: the index of the record being parsed, at rec_offset (-1: none:
 * the magic, the header). */
static bool parse_stalled(struct bblock *blk, int rc, const struct parse_err *e, int64_t record, uint64_t rec_offset)
{
    if (rc == PARSE_OK)
        return false;
    if (rc == PARSE_MORE) {
        submit_step(blk, block_more_step);
        return true;
    }
    uint64_t line = line_of(blk, e->at);
    enum fail_kind kind = e->err == -ENOMEM ? FAIL_OTHER : FAIL_MALFORMED;
    if (record >= 0 && e->at != rec_offset)
        block_fail(blk, kind, e->err, record, rec_offset, line, "%s (byte %llu)", e->what, (unsigned long long)e->at);
    else
        block_fail(blk, kind, e->err, record, record >= 0 ? rec_offset : e->at, line, "%s", e->what);
    block_end(blk, e->err);
    return true;
}

/* Block 0: magic, header, the file's field count. False when it ended the
 * block (or reads more). */
static bool block_first(struct bblock *blk, uint64_t *start, uint32_t *nfields)
{
    struct urt_batch *b = blk->b;
    struct parse_err e;
    uint64_t next;
    uint32_t n;
    *start = 0;
    if (b->opt.format == URT_BATCH_BINARY) {
        if (parse_stalled(blk, parse_bin_magic(&blk->win, &e), &e, -1, 0))
            return false;
        *start = PARSE_BIN_MAGIC_LEN;
    }
    if (b->opt.flags & URT_BATCH_CSV_HEADER) {
        if (parse_stalled(blk, parse_peek(b->opt.format, &blk->win, 0, b->max_rec, &n, &next, &e), &e, -1, 0))
            return false;
        if (b->opt.fields && n != b->opt.fields) {
            block_fail(blk, FAIL_MALFORMED, -EBADMSG, -1, 0, blk->line, "the header has %u fields, expected %u", n,
                       b->opt.fields);
            block_end(blk, -EBADMSG);
            return false;
        }
        *nfields = n;
        *start = next;
    }
    if (*start >= blk->win.size) {
        block_fail(blk, FAIL_OTHER, -ENODATA, -1, *start, 0, "the file has no records");
        block_end(blk, -ENODATA);
        return false;
    }
    if (!*nfields) {
        if (parse_stalled(blk, parse_peek(b->opt.format, &blk->win, *start, b->max_rec, &n, &next, &e), &e, 0,
                          *start))
            return false;
        *nfields = n;
    }
    return true;
}

/* Runs the block's statements from its first record (block_begin, its
 * transaction). */
static void block_begin(struct bblock *blk)
{
    struct urt_batch *b = blk->b;
    set_phase(blk, BP_RUN);
    blk->begun = true; /* block_done follows, whatever block_begin answers */
    if (b->opt.block_begin) {
        int rc = b->opt.block_begin(&blk->pub, b->opt.arg);
        if (rc) {
            block_fail(blk, FAIL_OTHER, rc < 0 ? rc : -EINVAL, -1, blk->pub.start, 0, "block_begin returned %d", rc);
            block_end(blk, rc < 0 ? rc : -EINVAL);
            return;
        }
    }
    if (b->opt.flags & URT_BATCH_BLOCK_TX) {
        struct urt_tx_options to;
        urt_tx_options_init(&to);
        to.hooks = b->opt.tx_hooks;
        to.id = blk->pub.tx_id;
        int rc = urt_tx_begin(b->rt, &to, &blk->pub.tx);
        if (rc) {
            block_fail(blk, FAIL_OTHER, rc, -1, blk->pub.start, 0, "cannot begin the block's transaction: %s",
                       urt_last_error());
            block_end(blk, rc);
            return;
        }
        blk->pub.tx_id = urt_tx_id(blk->pub.tx);
    }
    blk->stmt.block = &blk->pub;
    blk->stmt.batch = b;
    blk->stmt.tx = blk->pub.tx;
    blk->stmt.priv.node = blk;
    block_next(blk);
}

/* The block's first record start (block 0: after the magic and header), its
 * cursor and line from there. False when it ended the block (or reads more). */
static bool block_place(struct bblock *blk, uint32_t *nfields)
{
    uint64_t start = blk->pub.start;
    if (blk->pub.index == 0) {
        blk->line = is_csv(blk) ? 1 : 0; /* of byte 0, for the header's errors */
        if (!block_first(blk, &start, nfields))
            return false;
        blk->line = is_csv(blk) ? 1 + parse_count_lf(&blk->win, 0, start) : 0;
        blk->nfields = *nfields;
    }
    blk->pub.start = start;
    blk->cursor = start;
    blk->scanned = true;
    return true;
}

/* The scan could not find the next block's start (an unterminated quote at
 * the end of the file, a record longer than max_record_bytes): the batch's
 * error at that byte, unless a record of this block before it is malformed
 * (its quotes may be what misled the scan): they are checked first. */
static void scan_failed(struct bblock *blk, const struct parse_err *e)
{
    block_fail(blk, e->err == -ENOMEM ? FAIL_OTHER : FAIL_MALFORMED, e->err, -1, e->at, line_of(blk, e->at), "%s",
               e->what);
    block_validate(blk);
}

static void block_scan(struct bblock *blk)
{
    struct urt_batch *b = blk->b;
    if (block_aborted(blk))
        return;
    uint32_t nfields = 0;
    if (!blk->scanned && !block_place(blk, &nfields))
        return;
    struct parse_err e;
    uint64_t next;
    int rc = parse_next_start(b->opt.format, &blk->win, blk->cursor, blk->limit, b->max_rec, &next, &e);
    if (rc == PARSE_MORE) {
        submit_step(blk, block_more_step); /* comes back here (BP_SCAN) */
        return;
    }
    if (rc == PARSE_ERR) {
        scan_failed(blk, &e);
        return;
    }
    tree_publish(blk, next, line_of(blk, next), blk->pub.index == 0 ? blk->nfields : 0); /* the next block may run */
    if (blk->cursor >= blk->limit) {
        block_parsed(blk); /* no record starts in its range: nothing to commit */
        return;
    }
    block_begin(blk);
}

/* ---- statements ------------------------------------------------------------------------ */

static void stmt_done(urt_job *job, int status, void *arg)
{
    struct bblock *blk = arg;
    int st = stmt_status(&blk->stmt);
    if (!st && status) {
        block_fail(blk, FAIL_INPUT, status, (int64_t)blk->stmt.record, blk->stmt.offset, blk->stmt.line,
                   "the statement's job ended with %s", strerror(-status));
    }
    urt_job_release(job);
    blk->stmt.job = NULL;
    blk->pub.records++;
    block_next(blk);
}

/* Parses the record at the cursor (record index `index`) into blk->fv and
 * checks its field count: true and *next, or false when it read more or
 * failed (the block is ended). */
static bool block_parse(struct bblock *blk, uint64_t index, uint64_t *next)
{
    struct urt_batch *b = blk->b;
    struct parse_err e;
    int rc = parse_record(b->opt.format, &blk->win, blk->cursor, b->max_rec, &blk->fv, next, &e);
    if (parse_stalled(blk, rc, &e, (int64_t)index, blk->cursor))
        return false;
    uint32_t want = b->opt.fields ? b->opt.fields : blk->nfields;
    if (want && blk->fv.n != want) {
        block_fail(blk, FAIL_MALFORMED, -EBADMSG, (int64_t)index, blk->cursor, blk->line,
                   "the record has %u fields, expected %u", blk->fv.n, want);
        block_end(blk, -EBADMSG);
        return false;
    }
    return true;
}

/* After the batch's first error, about a record of this file after the
 * cursor: this block's records before it are parsed, no statement runs, so
 * that a malformed one (the first error in file order) is found; then the
 * block ends. Reads more as it needs (block_more_step comes back to
 * block_next, and so here). */
static void block_validate(struct bblock *blk)
{
    struct urt_batch *b = blk->b;
    for (;;) {
        if (blk->cursor >= blk->limit || !batch_validating(b, blk->pub.file, blk->cursor)) {
            block_end(blk, -ECANCELED);
            return;
        }
        uint64_t next;
        if (!block_parse(blk, blk->pub.records + blk->checked, &next))
            return;
        blk->cursor = next;
        blk->line += is_csv(blk) ? blk->fv.lf : 0;
        blk->checked++;
    }
}

/* Parsed to its end: commit, once every earlier block of the file was parsed
 * too (its start, found by their scans, is then known to be right). */
static void block_parsed_go(struct bblock *blk)
{
    bool abort;
    if (tree_block_parsed(blk, &abort))
        block_finish(blk);
    else if (abort)
        block_aborted(blk); /* the batch failed: it ends (validating first, if it must) */
    /* else BP_HOLD: block_resume, or ended by a failure */
}

#if URT_FAULT_INJECTION
batch_fault_fn *_Atomic batch_fault_parsed;

void batch_fault_parsed_go(struct urt_batch_block *blk)
{
    block_parsed_go((struct bblock *)blk); /* pub is its first member */
}
#endif

static void block_parsed(struct bblock *blk)
{
#if URT_FAULT_INJECTION
    batch_fault_fn *hook = atomic_load_explicit(&batch_fault_parsed, memory_order_acquire);
    if (hook && hook(&blk->pub))
        return; /* parked: the test calls batch_fault_parsed_go */
#endif
    block_parsed_go(blk);
}

void block_resume(struct bblock *blk)
{
    if (block_aborted(blk))
        return;
    block_finish(blk);
}

static void block_next(struct bblock *blk)
{
    if (block_aborted(blk))
        return;
    if (blk->cursor >= blk->limit) {
        block_parsed(blk);
        return;
    }
    uint64_t next;
    if (!block_parse(blk, blk->pub.records, &next))
        return;
    struct urt_batch_stmt *s = &blk->stmt;
    s->fields = blk->fv.v;
    s->n_fields = blk->fv.n;
    s->record = blk->pub.records;
    s->offset = blk->cursor;
    s->line = blk->line;
    blk->cursor = next;
    blk->line += is_csv(blk) ? blk->fv.lf : 0;
    int rc = stmt_launch(s, stmt_done, blk); /* 0: stmt_done will run (also after a failed submission) */
    if (rc) {
        block_fail(blk, FAIL_OTHER, rc, (int64_t)s->record, s->offset, 0, "cannot create the statement's job: %s",
                   urt_last_error());
        block_end(blk, rc);
    }
}
