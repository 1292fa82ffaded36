/*
 * batch/load.c — the transactional load (URT_BATCH_TRANSACTIONAL; after jogasaki's,
 * "トランザクショナルロード"): every record of every file in ONE transaction,
 * at most max_statements statements in flight, driven by one loader task.
 *
 * The loader task (a task of the batch's job) runs steps until it has to
 * wait:
 *   - the input is read in file order, one block at a time (the same blocks
 *     and formats as the executor: batch/parse.h), each read through the
 *     worker's ring; while a read (or an open) is in flight the loader is not
 *     queued: the read's continuation runs the next step;
 *   - it parses records and launches their statements (batch/stmt.c: a job
 *     each, the function on the transaction's lane) while a slot is free;
 *   - when the slots are full, or the input is done and statements are still
 *     in flight, it returns URT_TASK_YIELD: it is queued again behind the
 *     worker's other work (the statements among it) and looks again — the
 *     jogasaki's "busy loop": no worker ever blocks;
 *   - when every statement completed it commits the transaction with the
 *     batch's response (or aborts it after an error) and the commit's
 *     callback ends the batch's tree.
 * Slots: a statement completes on any worker; its job's callback pushes its
 * slot on the `done` stack (a Treiber push; only the loader takes, all at
 * once, so no ABA) and decrements in_flight. The loader takes the stack
 * back into its private free list at the start of each run. Slots are
 * allocated as needed, at most max_statements.
 * Blocks: statements point into their block's buffer, so a block lives until
 * its last statement's slot came back (refs, counted by the loader alone). At
 * most two blocks are alive: the one being parsed and the previous one while
 * its last statements finish (the loader waits by yielding before it reads a
 * third).
 *
 * The flight word: the count of statements in flight and, in its top bit,
 * LOADER_GONE (the loader task will not run again: it was cancelled). A
 * statement's completion pushes its slot, then decrements the count with one
 * acq_rel RMW — its last access to the load, which may be freed right after
 * (the loader sees 0, commits, the batch ends) — and only the RMW that leaves
 * "gone, 0 in flight" ends the load itself; the cancel sets the bit with one
 * RMW and ends it if it saw 0. One word, so exactly one of them sees the
 * other (no Dekker pair of two words to get wrong).
 *
 * Memory ordering: `done` push (release CAS) / take (acquire exchange): the
 * loader sees a slot's status and its statement's writes; the flight word:
 * acq_rel decrement after the push / acquire load by the loader. Everything
 * else belongs to the loader (one step at a time: the task, or the
 * continuation that replaces it while it is not queued).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "batch/batch.h"

int stmt_launch(struct urt_batch_stmt *s, urt_job_done_fn *done, void *arg);
int stmt_status(const struct urt_batch_stmt *s);

struct lblock {
    struct urt_batch_block pub;
    struct parse_win win;
    uint64_t cap, limit;
    uint32_t refs;                 /* the loader's while current, one per statement (loader only) */
};

struct lslot {
    struct urt_batch_stmt stmt;
    struct parse_fields fv;
    struct lblock *blk;
    struct bload *l;
    struct lslot *next;
};

/* What a step asks for: go on, be queued again (yield), nothing (an open, a
 * read or the commit is in flight: its callback goes on), or the end. */
enum { L_GO = 0, L_YIELD, L_WAIT, L_END };

#define LOADER_GONE (1u << 31)
#define IN_FLIGHT(v) ((v) & ~LOADER_GONE)

struct bload {
    struct urt_batch *b;
    urt_tx *tx;
    struct urt_task task;
    struct bio io;
    /* input */
    uint32_t file;
    int fd;
    uint64_t size, block, cursor;
    uint64_t line;                /* CSV: the line of the cursor; binary: 0 */
    uint32_t nfields;
    bool file_open, prologue_done, input_done;
    _Atomic uint32_t ending;      /* the end ran (once) */

    struct lblock *cur, *prev;
    /* slots */
    struct lslot *free;
    _Atomic(struct lslot *) done;
    _Atomic uint32_t in_flight;   /* statements in flight | LOADER_GONE */
    uint32_t slots;
    _Atomic uint32_t max_in_flight;
    _Atomic uint64_t runs, yields;
};

static int loader_step(struct bload *l);
static void loader_commit_or_abort(struct bload *l);

/* ---- blocks ---------------------------------------------------------------------------- */

static void account(struct urt_batch *b, int64_t bytes, int nodes, uint64_t read, uint64_t statements, int blocks_done)
{
    pthread_mutex_lock(&b->mu);
    struct urt_batch_stats *st = &b->st;
    st->buffer_bytes += (uint64_t)bytes;
    if (st->buffer_bytes > st->max_buffer_bytes)
        st->max_buffer_bytes = st->buffer_bytes;
    st->nodes += (uint64_t)nodes;
    if (st->nodes > st->max_nodes)
        st->max_nodes = st->nodes;
    st->blocks_in_flight += (uint32_t)nodes;
    if (st->blocks_in_flight > st->max_blocks_in_flight)
        st->max_blocks_in_flight = st->blocks_in_flight;
    st->max_blocks_per_file = st->max_blocks_in_flight;
    st->bytes_read += read;
    st->statements += statements;
    st->blocks_done += (uint64_t)blocks_done;
    pthread_mutex_unlock(&b->mu);
}

static void lblock_unref(struct bload *l, struct lblock *blk)
{
    if (--blk->refs)
        return;
    if (l->prev == blk)
        l->prev = NULL;
    account(l->b, -(int64_t)(blk->cap + 1), -1, 0, blk->pub.records, 1);
    free(blk->win.base);
    free(blk);
}

static struct lblock *lblock_new(struct bload *l)
{
    struct urt_batch *b = l->b;
    uint64_t from = l->block * b->opt.block_bytes, want = b->opt.block_bytes + b->max_rec;
    uint64_t cap = l->size - from < want ? l->size - from : want;
    struct lblock *blk = calloc(1, sizeof(*blk));
    char *buf = blk ? malloc(cap + 1) : NULL;
    if (!buf) {
        free(blk);
        return NULL;
    }
    blk->pub = (struct urt_batch_block){.batch = b, .file = l->file, .path = b->paths[l->file], .index = l->block,
                                        .start = l->cursor, .tx = l->tx, .tx_id = urt_tx_id(l->tx)};
    blk->win = (struct parse_win){.base = buf, .off = from, .len = 0, .size = l->size};
    blk->cap = cap;
    uint64_t end = from + b->opt.block_bytes;
    blk->limit = end < l->size ? end : l->size;
    blk->refs = 1;
    account(b, (int64_t)(cap + 1), 1, 0, 0, 0);
    return blk;
}

/* ---- failures ----------------------------------------------------------------------------- */

/* The line of file byte `at` of the current block (at >= the cursor). */
static uint64_t load_line(const struct bload *l, uint64_t at)
{
    if (l->b->opt.format != URT_BATCH_CSV || !l->cur)
        return 0;
    return l->line + parse_count_lf(&l->cur->win, l->cursor, at);
}

static void load_fail(struct bload *l, enum fail_kind kind, int err, uint64_t at, const char *what)
{
    struct urt_batch *b = l->b;
    if (l->cur) /* l->block is its index */
        batch_fail_at(&l->cur->pub, kind, err, (int64_t)l->cur->pub.records, at,
                      kind == FAIL_OTHER ? 0 : load_line(l, at), "%s", what);
    else
        batch_fail(b, err, "file '%s' (#%u), at byte %llu: %s", b->paths[l->file], l->file, (unsigned long long)at,
                   what);
}

/* A parse error at the cursor's record: named as the executor names one (the
 * record's start, the malformed byte and its line). */
static void load_parse_failed(struct bload *l, const struct parse_err *e)
{
    enum fail_kind kind = e->err == -ENOMEM ? FAIL_OTHER : FAIL_MALFORMED;
    if (!l->cur || e->at == l->cursor) {
        load_fail(l, kind, e->err, e->at, e->what);
        return;
    }
    batch_fail_at(&l->cur->pub, kind, e->err, (int64_t)l->cur->pub.records, l->cursor, load_line(l, e->at),
                  "%s (byte %llu)", e->what, (unsigned long long)e->at);
}

/* ---- the loader task ---------------------------------------------------------------------- */

static enum urt_task_result loader_run(struct urt_task *t, void *arg);

/* The loader task will not run again: the last statement to come back ends
 * the load (the flight word, above). */
static void loader_gone(struct bload *l)
{
    if (IN_FLIGHT(atomic_fetch_or_explicit(&l->in_flight, LOADER_GONE, memory_order_acq_rel)) == 0)
        loader_commit_or_abort(l);
}

static inline uint32_t in_flight(struct bload *l)
{
    return IN_FLIGHT(atomic_load_explicit(&l->in_flight, memory_order_acquire));
}

static void loader_cancel(struct urt_task *t, void *arg)
{
    struct bload *l = arg;
    (void)t;
    batch_fail(l->b, -ECANCELED, "the loader task was cancelled (the batch's job was cancelled)");
    loader_gone(l);
}

/* Queues the loader again (from a continuation or the commit path). */
static void loader_submit(struct bload *l)
{
    int rc = batch_submit_step(l->b, &l->task, loader_run, loader_cancel, l);
    if (rc) {
        batch_fail(l->b, rc, "cannot submit the loader task: %s", urt_last_error());
        loader_gone(l);
    }
}

static void loader_continue(struct bload *l)
{
    if (loader_step(l) == L_YIELD)
        loader_submit(l);
}

static void reclaim(struct bload *l)
{
    struct lslot *s = atomic_exchange_explicit(&l->done, NULL, memory_order_acquire);
    while (s) {
        struct lslot *n = s->next;
        lblock_unref(l, s->blk);
        s->blk = NULL;
        s->next = l->free;
        l->free = s;
        s = n;
    }
}

static enum urt_task_result loader_run(struct urt_task *t, void *arg)
{
    struct bload *l = arg;
    (void)t;
    atomic_fetch_add_explicit(&l->runs, 1, memory_order_relaxed);
    if (loader_step(l) == L_YIELD) {
        atomic_fetch_add_explicit(&l->yields, 1, memory_order_relaxed);
        return URT_TASK_YIELD;
    }
    return URT_TASK_DONE;
}

/* ---- statements ------------------------------------------------------------------------- */

static void slot_done(urt_job *job, int status, void *arg)
{
    struct lslot *s = arg;
    struct bload *l = s->l;
    if (!stmt_status(&s->stmt) && status)
        batch_fail_at(&s->blk->pub, FAIL_INPUT, status, (int64_t)s->stmt.record, s->stmt.offset, s->stmt.line,
                      "the statement's job ended with %s", strerror(-status));
    urt_job_release(job);
    struct lslot *head = atomic_load_explicit(&l->done, memory_order_relaxed);
    do
        s->next = head;
    while (!atomic_compare_exchange_weak_explicit(&l->done, &head, s, memory_order_release, memory_order_relaxed));
    /* s is the loader's from here, and l may be gone right after (the flight word) */
    if (atomic_fetch_sub_explicit(&l->in_flight, 1, memory_order_acq_rel) == (LOADER_GONE | 1))
        loader_commit_or_abort(l);
}

static struct lslot *slot_take(struct bload *l)
{
    struct lslot *s = l->free;
    if (s) {
        l->free = s->next;
        return s;
    }
    s = calloc(1, sizeof(*s));
    if (s) {
        s->l = l;
        l->slots++;
    }
    return s;
}

/* Launches the statement of the record at the cursor. */
static int dispatch(struct bload *l, struct lslot *s, const struct parse_fields *fv, uint64_t next)
{
    struct lblock *blk = l->cur;
    struct urt_batch_stmt *st = &s->stmt;
    st->fields = fv->v;
    st->n_fields = fv->n;
    st->record = blk->pub.records++;
    st->offset = l->cursor;
    st->line = l->line;
    st->block = &blk->pub;
    st->batch = l->b;
    st->tx = l->tx;
    st->priv.node = s;
    s->blk = blk;
    blk->refs++;
    l->cursor = next;
    l->line += fv->lf;
    uint32_t n = IN_FLIGHT(atomic_fetch_add_explicit(&l->in_flight, 1, memory_order_relaxed)) + 1;
    if (n > atomic_load_explicit(&l->max_in_flight, memory_order_relaxed))
        atomic_store_explicit(&l->max_in_flight, n, memory_order_relaxed); /* the loader's only */
    int rc = stmt_launch(st, slot_done, s);
    if (rc) { /* no job: slot_done will not run */
        atomic_fetch_sub_explicit(&l->in_flight, 1, memory_order_relaxed);
        lblock_unref(l, blk);
        s->next = l->free;
        l->free = s;
        load_fail(l, FAIL_OTHER, rc, st->offset, "cannot create the statement's job");
    }
    return rc;
}

/* ---- input ---------------------------------------------------------------------------- */

static void io_done(struct bio *io, int64_t res, void *arg);

static int read_block(struct bload *l, struct lblock *blk, uint64_t have)
{
    struct urt_batch *b = l->b;
    uint64_t len = have ? blk->cap - have : b->opt.block_bytes + BATCH_READ_TAIL;
    if (len > blk->cap - have)
        len = blk->cap - have;
    bio_init(&l->io, b->job);
    int rc = bio_read(&l->io, l->fd, blk->win.base + have, len, blk->win.off + have, io_done, l);
    if (rc)
        load_fail(l, FAIL_OTHER, rc, blk->win.off + have, "cannot submit a read");
    return rc;
}

static int open_file(struct bload *l)
{
    struct urt_batch *b = l->b;
    bio_init(&l->io, b->job);
    int rc = bio_open(&l->io, b->paths[l->file], io_done, l);
    if (rc)
        load_fail(l, FAIL_OTHER, rc, 0, "cannot submit its open");
    return rc;
}

/* The continuation of an open or a read. */
static void io_done(struct bio *io, int64_t res, void *arg)
{
    struct bload *l = arg;
    if (!l->file_open) {
        if (res < 0) {
            load_fail(l, FAIL_OTHER, (int)res, 0, strerror((int)-res));
        } else if (io->size == 0) {
            bio_close((int)res);
            load_fail(l, FAIL_OTHER, -ENODATA, 0, "the file is empty");
        } else {
            l->fd = (int)res;
            l->size = io->size;
            l->file_open = true;
            l->prologue_done = false;
            l->block = 0;
            l->cursor = 0;
            l->line = l->b->opt.format == URT_BATCH_CSV ? 1 : 0;
            l->nfields = l->b->opt.fields;
            pthread_mutex_lock(&l->b->mu);
            l->b->st.files_in_flight = l->b->st.max_files_in_flight = 1;
            pthread_mutex_unlock(&l->b->mu);
        }
    } else if (res < 0 || (uint64_t)res != io->len) {
        load_fail(l, FAIL_OTHER, res < 0 ? (int)res : -EIO, io->off,
                  res < 0 ? strerror((int)-res) : "the file shrank while it was read");
    } else {
        l->cur->win.len += io->len;
        account(l->b, 0, 0, io->len, 0, 0);
    }
    loader_continue(l);
}

/* Block 0 of a file: magic, header, field count; false after a failure or a read. */
static bool file_prologue(struct bload *l, int *wait)
{
    struct urt_batch *b = l->b;
    struct lblock *blk = l->cur;
    struct parse_err e;
    uint64_t next;
    uint32_t n;
    int rc = PARSE_OK;
    if (b->opt.format == URT_BATCH_BINARY && l->cursor == 0 && (rc = parse_bin_magic(&blk->win, &e)) == PARSE_OK)
        l->cursor = PARSE_BIN_MAGIC_LEN;
    if (rc == PARSE_OK && (b->opt.flags & URT_BATCH_CSV_HEADER) && l->cursor == 0 &&
        (rc = parse_peek(b->opt.format, &blk->win, 0, b->max_rec, &n, &next, &e)) == PARSE_OK) {
        if (b->opt.fields && n != b->opt.fields) {
            load_fail(l, FAIL_MALFORMED, -EBADMSG, 0, "the header's field count differs from `fields`");
            return false;
        }
        l->nfields = n;
        l->cursor = next;
        l->line = 1 + parse_count_lf(&blk->win, 0, next);
    }
    if (rc == PARSE_OK && l->cursor >= l->size) {
        load_fail(l, FAIL_OTHER, -ENODATA, l->cursor, "the file has no records");
        return false;
    }
    if (rc == PARSE_OK && !l->nfields &&
        (rc = parse_peek(b->opt.format, &blk->win, l->cursor, b->max_rec, &n, &next, &e)) == PARSE_OK)
        l->nfields = n;
    if (rc == PARSE_MORE) {
        *wait = read_block(l, blk, blk->win.len) == 0;
        return false;
    }
    if (rc == PARSE_ERR) {
        load_parse_failed(l, &e);
        return false;
    }
    blk->pub.start = l->cursor;
    l->prologue_done = true;
    return true;
}

/* The current block is used up: keep it for its statements, move on. */
static void retire(struct bload *l)
{
    struct lblock *blk = l->cur;
    blk->pub.end = l->cursor;
    l->cur = NULL;
    l->prev = blk;
    lblock_unref(l, blk); /* the loader's reference */
    l->block++;
    if (l->block * l->b->opt.block_bytes >= l->size) {
        bio_close(l->fd);
        l->fd = -1;
        l->file_open = false;
        pthread_mutex_lock(&l->b->mu);
        l->b->st.files_done++;
        l->b->st.files_in_flight = 0;
        pthread_mutex_unlock(&l->b->mu);
        if (++l->file == l->b->opt.n_files)
            l->input_done = true;
    }
}

/* Needs the next block (or file): L_WAIT when an open or read is in flight;
 * L_YIELD to wait for the previous block's statements; L_END after a failure. */
static int next_input(struct bload *l)
{
    if (!l->file_open)
        return open_file(l) == 0 ? L_WAIT : L_END;
    if (l->prev)
        return L_YIELD; /* two blocks alive at most */
    struct lblock *blk = lblock_new(l);
    if (!blk) {
        load_fail(l, FAIL_OTHER, -ENOMEM, l->block * l->b->opt.block_bytes, "out of memory for a block");
        return L_END;
    }
    l->cur = blk;
    return read_block(l, blk, 0) == 0 ? L_WAIT : L_END;
}

/* ---- one step ---------------------------------------------------------------------------- */

/* Parses and launches while slots are free: L_YIELD, L_WAIT, or L_END (the
 * input is done, or the batch failed). */
static int run_records(struct bload *l)
{
    struct urt_batch *b = l->b;
    for (;;) {
        if (batch_aborting(b) || l->input_done)
            return L_END;
        if (!l->cur) {
            int r = next_input(l);
            if (r != L_GO)
                return r;
        }
        struct lblock *blk = l->cur;
        int wait = 0;
        if (!l->prologue_done && !file_prologue(l, &wait))
            return wait ? L_WAIT : L_END;
        if (l->cursor >= blk->limit) {
            retire(l);
            continue;
        }
        if (in_flight(l) >= b->opt.max_statements)
            return L_YIELD;
        struct lslot *s = slot_take(l);
        if (!s) {
            load_fail(l, FAIL_OTHER, -ENOMEM, l->cursor, "out of memory for a statement slot");
            return L_END;
        }
        struct parse_err e;
        uint64_t next;
        int rc = parse_record(b->opt.format, &blk->win, l->cursor, b->max_rec, &s->fv, &next, &e);
        if (rc == PARSE_OK && l->nfields && s->fv.n != l->nfields) {
            rc = PARSE_ERR;
            e = (struct parse_err){.at = l->cursor, .err = -EBADMSG};
            snprintf(e.what, sizeof(e.what), "the record has %u fields, expected %u", s->fv.n, l->nfields);
        }
        if (rc != PARSE_OK) {
            s->next = l->free;
            l->free = s;
            if (rc == PARSE_MORE)
                return read_block(l, blk, blk->win.len) == 0 ? L_WAIT : L_END;
            load_parse_failed(l, &e);
            return L_END;
        }
        dispatch(l, s, &s->fv, next);
    }
}

static int loader_step(struct bload *l)
{
    reclaim(l);
    if (atomic_load_explicit(&l->ending, memory_order_relaxed))
        return L_WAIT;
    int r = run_records(l);
    if (r == L_WAIT || r == L_YIELD)
        return r;
    /* the input is done or the batch failed: wait for the statements */
    if (in_flight(l) != 0)
        return L_YIELD;
    reclaim(l);
    loader_commit_or_abort(l);
    return L_WAIT;
}

/* ---- the end -------------------------------------------------------------------------- */

static void load_committed(urt_tx *tx, int status, void *arg)
{
    struct bload *l = arg;
    (void)tx;
    struct urt_batch *b = l->b;
    if (status)
        batch_fail(b, status, "the load's commit failed: %s", strerror(-status));
    else {
        pthread_mutex_lock(&b->mu);
        b->st.blocks_committed = b->st.blocks_done;
        pthread_mutex_unlock(&b->mu);
    }
    batch_tree_done(b);
}

static void loader_commit_or_abort(struct bload *l)
{
    struct urt_batch *b = l->b;
    if (atomic_exchange_explicit(&l->ending, 1, memory_order_acq_rel))
        return;
    reclaim(l); /* every statement is back */
    if (l->cur) { /* statements are back: nothing points into it */
        struct lblock *c = l->cur;
        l->cur = NULL;
        lblock_unref(l, c);
    }
    if (l->fd >= 0) {
        bio_close(l->fd);
        l->fd = -1;
    }
    if (!batch_aborting(b)) {
        int rc = urt_tx_commit(l->tx, b->opt.response, load_committed, l);
        if (rc == 0)
            return;
        batch_fail(b, rc, "cannot commit the load: %s", urt_last_error());
    }
    urt_tx_abort(l->tx);
    batch_tree_done(b);
}

/* ---- entry points (batch.c) ------------------------------------------------------------- */

int load_start(struct urt_batch *b)
{
    struct bload *l = calloc(1, sizeof(*l));
    if (!l)
        return urt__error(-ENOMEM, "urt_batch_start: out of memory for the load");
    l->b = b;
    l->fd = -1;
    struct urt_tx_options to;
    urt_tx_options_init(&to);
    to.hooks = b->opt.tx_hooks;
    int rc = urt_tx_begin(b->rt, &to, &l->tx);
    if (rc) {
        char why[256];
        snprintf(why, sizeof(why), "%s", urt_last_error());
        free(l);
        return urt__error(rc, "urt_batch_start: cannot begin the load's transaction: %s", why);
    }
    b->load = l;
    return 0;
}

void load_boot(struct urt_batch *b)
{
    loader_continue(b->load);
}

void load_stats(const struct bload *l, struct urt_batch_stats *out)
{
    out->loader_runs = atomic_load_explicit(&l->runs, memory_order_relaxed);
    out->loader_yields = atomic_load_explicit(&l->yields, memory_order_relaxed);
    out->max_statements_in_flight = atomic_load_explicit(&l->max_in_flight, memory_order_relaxed);
}

void load_free(struct bload *l)
{
    reclaim(l);
    while (l->free) {
        struct lslot *s = l->free;
        l->free = s->next;
        parse_fields_free(&s->fv);
        free(s);
    }
    if (l->prev) {
        free(l->prev->win.base);
        free(l->prev);
    }
    if (l->tx)
        urt_tx_release(l->tx);
    free(l);
}
