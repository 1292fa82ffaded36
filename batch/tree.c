/*
 * batch/tree.c — the batch executor's tree (SPEC C15, after jogasaki's batch executor): which files
 * and blocks are in flight, and the hand-off of block boundaries.
 *
 * Shape. batch -> active files (at most max_concurrent_files) -> each file's
 * active blocks (at most max_concurrent_blocks_per_file, created in index
 * order) -> at most one statement per block (batch/block.c). A node is
 * created and activated in one step under the lock when a limit leaves room
 * (fill_files, fill_blocks), deactivated under the lock when its work is done
 * (a block: statements and commit; a file: its last block), and disposed right
 * after by the releasing thread: a child asks its parent to release it
 * (tree_block_end, tree_file_end), which also fills the room it left. The
 * batch's job is closed when the last file was released and no file is left
 * to start (or the batch is aborting): its end runs the callback.
 *
 * Boundaries. Block k's first record start S_k is found by block k - 1 (its
 * scan from S_(k-1) to the first record start at or after k * block_bytes;
 * batch/parse.h): tree_publish gives it to block k if that node exists (and
 * submits its scan if its bytes are already read and it waits), else keeps it
 * in the file's frontier for when block k is created. The line of S_k (CSV)
 * goes with it: block k - 1's line plus the LF bytes of [S_(k-1), S_k), so
 * every block knows the line of each of its records (a count of bytes, right
 * even when a malformed quote made S_k a wrong guess). Block 0 also publishes
 * the file's field count (its header's or first record's). A block whose
 * start will never come (the batch failed) is taken out of its wait by the
 * failure (tree_take_waiting) and ended.
 *
 * Actions. Work decided under the lock (open a file, start a block, end a
 * waiting block, close the batch's job) is collected in struct acts and done
 * after the lock is released (acts_run), since it submits tasks or re-enters
 * the tree.
 *
 * Memory ordering: everything here is under b->mu, except the error word
 * (batch_aborting: acquire, paired with the release store of batch_fail) and
 * a block's phase, which its own steps also write outside the lock (relaxed
 * atomic; the transitions into and out of BP_WAIT, the only phase others act
 * on, are made under the lock).
 */
#include "batch/batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct acts {
    struct bfile *open;      /* files to open */
    struct bblock *start;    /* blocks to start */
    struct bblock *end;      /* waiting blocks to end (the batch failed) */
    struct bfile *dispose;   /* a file released */
    bool tree_done;
    bool oom;                /* a node could not be allocated */
};

static void push_block(struct bblock **list, struct bblock *blk)
{
    blk->act_next = *list;
    *list = blk;
}

/* ---- filling (under mu) ------------------------------------------------------------ */

static uint64_t block_cap(const struct urt_batch *b, const struct bfile *f, uint64_t k)
{
    uint64_t from = k * b->opt.block_bytes, want = b->opt.block_bytes + b->max_rec;
    return f->size - from < want ? f->size - from : want;
}

static struct bblock *block_create(struct urt_batch *b, struct bfile *f, uint64_t k)
{
    struct bblock *blk = calloc(1, sizeof(*blk));
    uint64_t cap = block_cap(b, f, k);
    char *buf = blk ? malloc(cap + 1) : NULL; /* + the spare byte (parse.h) */
    if (!buf) {
        free(blk);
        return NULL;
    }
    blk->b = b;
    blk->f = f;
    blk->pub = (struct urt_batch_block){.batch = b, .file = f->index, .path = b->paths[f->index], .index = k};
    blk->cap = cap;
    blk->win = (struct parse_win){.base = buf, .off = k * b->opt.block_bytes, .len = 0, .size = f->size};
    uint64_t end = (k + 1) * b->opt.block_bytes;
    blk->limit = end < f->size ? end : f->size;
    blk->nfields = f->nfields;
    if (k == 0) {
        blk->start_known = true; /* the magic and the header are skipped by its scan */
    } else if (f->frontier_valid && f->frontier_index == k) {
        blk->start_known = true;
        blk->pub.start = f->frontier_start;
        blk->line = f->frontier_line;
        f->frontier_valid = false;
    }
    atomic_store_explicit(&blk->phase, BP_READ, memory_order_relaxed);
    return blk;
}

static void account_block(struct urt_batch *b, struct bfile *f, struct bblock *blk)
{
    struct urt_batch_stats *st = &b->st;
    st->blocks_in_flight++;
    if (st->blocks_in_flight > st->max_blocks_in_flight)
        st->max_blocks_in_flight = st->blocks_in_flight;
    if (f->blocks_active > st->max_blocks_per_file)
        st->max_blocks_per_file = f->blocks_active;
    st->nodes++;
    if (st->nodes > st->max_nodes)
        st->max_nodes = st->nodes;
    st->buffer_bytes += blk->cap + 1;
    if (st->buffer_bytes > st->max_buffer_bytes)
        st->max_buffer_bytes = st->buffer_bytes;
}

static void fill_blocks(struct urt_batch *b, struct bfile *f, struct acts *a)
{
    while (!batch_aborting(b) && f->blocks_active < b->opt.max_concurrent_blocks_per_file &&
           f->next_block < f->n_blocks) {
        struct bblock *blk = block_create(b, f, f->next_block);
        if (!blk) {
            a->oom = true;
            return;
        }
        struct bblock **tail = &f->blocks;
        while (*tail)
            tail = &(*tail)->next;
        *tail = blk; /* index order */
        f->blocks_active++;
        f->next_block++;
        account_block(b, f, blk);
        push_block(&a->start, blk);
    }
}

static void fill_files(struct urt_batch *b, struct acts *a)
{
    while (!batch_aborting(b) && b->files_active < b->opt.max_concurrent_files && b->next_file < b->opt.n_files) {
        struct bfile *f = calloc(1, sizeof(*f));
        if (!f) {
            a->oom = true;
            return;
        }
        f->b = b;
        f->index = b->next_file++;
        f->fd = -1;
        f->next = b->files;
        b->files = f;
        b->files_active++;
        struct urt_batch_stats *st = &b->st;
        st->files_in_flight = b->files_active;
        if (st->files_in_flight > st->max_files_in_flight)
            st->max_files_in_flight = st->files_in_flight;
        if (++st->nodes > st->max_nodes)
            st->max_nodes = st->nodes;
        f->act_next = a->open;
        a->open = f;
    }
}

/* ---- releasing (under mu) ---------------------------------------------------------- */

static void file_deactivate(struct urt_batch *b, struct bfile *f, struct acts *a)
{
    for (struct bfile **p = &b->files; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    b->files_active--;
    b->st.files_in_flight = b->files_active;
    b->st.files_done++;
    b->st.nodes--;
    a->dispose = f;
    fill_files(b, a);
}

/* A file is done when no block is active and none is left to start. */
static void file_maybe_done(struct urt_batch *b, struct bfile *f, struct acts *a)
{
    if (f->blocks_active == 0 && (f->next_block == f->n_blocks || batch_aborting(b)))
        file_deactivate(b, f, a);
}

/* Moves the waiting blocks onto *list (they no longer wait). */
static void take_waiting_locked(struct urt_batch *b, struct bblock **list)
{
    for (struct bfile *f = b->files; f; f = f->next)
        for (struct bblock *blk = f->blocks; blk; blk = blk->next)
            if (atomic_load_explicit(&blk->phase, memory_order_relaxed) == BP_WAIT ||
                atomic_load_explicit(&blk->phase, memory_order_relaxed) == BP_HOLD) {
                atomic_store_explicit(&blk->phase, BP_SCAN, memory_order_relaxed); /* no longer waits */
                push_block(list, blk);
            }
}

/* After any change: waiting blocks of a failed batch, and the end of the tree. */
static void settle(struct urt_batch *b, struct acts *a)
{
    if (batch_aborting(b))
        take_waiting_locked(b, &a->end);
    if (!b->tree_done && b->files_active == 0 && (b->next_file == b->opt.n_files || batch_aborting(b))) {
        b->tree_done = true;
        a->tree_done = true;
    }
}

/* ---- after the lock ---------------------------------------------------------------- */

static enum urt_task_result file_open_step(struct urt_task *t, void *arg);
static void file_open_cancel(struct urt_task *t, void *arg);

static void acts_run(struct urt_batch *b, struct acts *a)
{
    if (a->oom) { /* the failure may have left blocks waiting, or nothing in flight */
        batch_fail_record(b, -ENOMEM, "out of memory for a file or block of the batch");
        pthread_mutex_lock(&b->mu);
        settle(b, a);
        pthread_mutex_unlock(&b->mu);
    }
    if (a->dispose) {
        bio_close(a->dispose->fd);
        free(a->dispose);
    }
    for (struct bfile *f = a->open, *n; f; f = n) {
        n = f->act_next;
        int rc = batch_submit_step(b, &f->step, file_open_step, file_open_cancel, f);
        if (rc) {
            batch_fail(b, rc, "file '%s' (#%u): cannot submit its open: %s", b->paths[f->index], f->index,
                       urt_last_error());
            tree_file_end(f);
        }
    }
    for (struct bblock *blk = a->start, *n; blk; blk = n) {
        n = blk->act_next;
        block_start(blk);
    }
    for (struct bblock *blk = a->end, *n; blk; blk = n) {
        n = blk->act_next;
        block_end(blk, -ECANCELED);
    }
    if (a->tree_done)
        batch_tree_done(b); /* last: b may be gone after it */
}

/* ---- entry points ----------------------------------------------------------------- */

void tree_bootstrap(struct urt_batch *b)
{
    struct acts a = {0};
    pthread_mutex_lock(&b->mu);
    fill_files(b, &a);
    settle(b, &a);
    pthread_mutex_unlock(&b->mu);
    acts_run(b, &a);
}

void tree_file_end(struct bfile *f)
{
    struct urt_batch *b = f->b;
    struct acts a = {0};
    pthread_mutex_lock(&b->mu);
    file_deactivate(b, f, &a);
    settle(b, &a);
    pthread_mutex_unlock(&b->mu);
    acts_run(b, &a);
}

void tree_file_opened(struct bfile *f)
{
    struct urt_batch *b = f->b;
    struct acts a = {0};
    pthread_mutex_lock(&b->mu);
    fill_blocks(b, f, &a);
    file_maybe_done(b, f, &a);
    settle(b, &a);
    pthread_mutex_unlock(&b->mu);
    acts_run(b, &a);
}

void tree_block_end(struct bblock *blk)
{
    struct urt_batch *b = blk->b;
    struct bfile *f = blk->f;
    struct acts a = {0};
    pthread_mutex_lock(&b->mu);
    for (struct bblock **p = &f->blocks; *p; p = &(*p)->next)
        if (*p == blk) {
            *p = blk->next;
            break;
        }
    f->blocks_active--;
    struct urt_batch_stats *st = &b->st;
    st->blocks_in_flight--;
    st->blocks_done++;
    st->blocks_committed += blk->committed;
    st->statements += blk->pub.records;
    st->bytes_read += blk->win.len;
    st->nodes--;
    st->buffer_bytes -= blk->cap + 1;
    fill_blocks(b, f, &a);
    file_maybe_done(b, f, &a);
    settle(b, &a);
    pthread_mutex_unlock(&b->mu);
    block_free(blk);
    acts_run(b, &a);
}

bool tree_block_read(struct bblock *blk, bool *abort)
{
    struct urt_batch *b = blk->b;
    bool go;
    pthread_mutex_lock(&b->mu);
    *abort = batch_aborting(b);
    go = !*abort && blk->start_known;
    if (!*abort)
        atomic_store_explicit(&blk->phase, go ? BP_SCAN : BP_WAIT, memory_order_relaxed);
    pthread_mutex_unlock(&b->mu);
    return go;
}

void tree_publish(struct bblock *blk, uint64_t next_start, uint64_t next_line, uint32_t nfields)
{
    struct urt_batch *b = blk->b;
    struct bfile *f = blk->f;
    uint64_t k = blk->pub.index + 1;
    struct bblock *scan = NULL;
    pthread_mutex_lock(&b->mu);
    if (nfields)
        f->nfields = nfields;
    struct bblock *nb = f->blocks;
    while (nb && nb->pub.index != k)
        nb = nb->next;
    if (nb) {
        nb->pub.start = next_start;
        nb->line = next_line;
        nb->start_known = true;
        nb->nfields = f->nfields;
        if (atomic_load_explicit(&nb->phase, memory_order_relaxed) == BP_WAIT) {
            atomic_store_explicit(&nb->phase, BP_SCAN, memory_order_relaxed);
            scan = nb;
        }
    } else if (k < f->n_blocks) {
        f->frontier_valid = true;
        f->frontier_index = k;
        f->frontier_start = next_start;
        f->frontier_line = next_line;
    }
    pthread_mutex_unlock(&b->mu);
    if (scan)
        block_scan_submit(scan);
}

bool tree_block_parsed(struct bblock *blk, bool *abort)
{
    struct urt_batch *b = blk->b;
    struct bfile *f = blk->f;
    struct bblock *go = NULL, **tail = &go;
    pthread_mutex_lock(&b->mu);
    *abort = false;
    if (blk->pub.index != f->parsed_upto) {
        /* It would hold. A failure takes the holding blocks out under mu
         * (end_waiting), and the earlier blocks that would resume this one
         * end without parsing on: one that came to hold after it would hold
         * forever, so it ends itself instead. The check is here, under mu,
         * and not only the caller's before: the failure may fall between
         * the two. The error word is stored under mu (fail_record_at), so
         * mu orders it against this load; its acquire is batch_aborting's
         * own (the message). */
        *abort = batch_aborting(b);
        if (!*abort) {
            blk->parsed = true;
            atomic_store_explicit(&blk->phase, BP_HOLD, memory_order_relaxed);
        }
        pthread_mutex_unlock(&b->mu);
        return false;
    }
    f->parsed_upto++;
    for (struct bblock *nb = blk->next; nb && nb->pub.index == f->parsed_upto && nb->parsed; nb = nb->next) {
        if (atomic_load_explicit(&nb->phase, memory_order_relaxed) != BP_HOLD)
            break; /* taken by a failure meanwhile: it ends itself */
        atomic_store_explicit(&nb->phase, BP_RUN, memory_order_relaxed);
        nb->act_next = NULL;
        *tail = nb; /* in index order */
        tail = &nb->act_next;
        f->parsed_upto++;
    }
    pthread_mutex_unlock(&b->mu);
    for (struct bblock *nb = go, *n; nb; nb = n) {
        n = nb->act_next;
        block_resume(nb);
    }
    return true;
}

struct bblock *tree_take_waiting(struct urt_batch *b)
{
    struct bblock *list = NULL;
    pthread_mutex_lock(&b->mu);
    take_waiting_locked(b, &list);
    pthread_mutex_unlock(&b->mu);
    return list;
}

/* ---- opening a file (a task of the batch's job) ------------------------------------- */

static void file_opened_io(struct bio *io, int64_t res, void *arg)
{
    struct bfile *f = arg;
    struct urt_batch *b = f->b;
    const char *path = b->paths[f->index];
    if (res < 0) {
        batch_fail(b, (int)res, "file '%s' (#%u): cannot open: %s", path, f->index, strerror((int)-res));
        tree_file_end(f);
        return;
    }
    f->fd = (int)res;
    f->size = io->size;
    if (f->size == 0) {
        batch_fail(b, -ENODATA, "file '%s' (#%u): the file is empty", path, f->index);
        tree_file_end(f);
        return;
    }
    f->n_blocks = (f->size + b->opt.block_bytes - 1) / b->opt.block_bytes;
    tree_file_opened(f);
}

static enum urt_task_result file_open_step(struct urt_task *t, void *arg)
{
    struct bfile *f = arg;
    struct urt_batch *b = f->b;
    (void)t;
    if (batch_aborting(b)) {
        tree_file_end(f);
        return URT_TASK_DONE;
    }
    bio_init(&f->io, b->job);
    int rc = bio_open(&f->io, b->paths[f->index], file_opened_io, f);
    if (rc) {
        batch_fail(b, rc, "file '%s' (#%u): cannot submit its open: %s", b->paths[f->index], f->index,
                   strerror(-rc));
        tree_file_end(f);
    }
    return URT_TASK_DONE;
}

static void file_open_cancel(struct urt_task *t, void *arg)
{
    struct bfile *f = arg;
    (void)t;
    batch_fail(f->b, -ECANCELED, "file '%s' (#%u): its open was cancelled (the batch's job was cancelled)",
               f->b->paths[f->index], f->index);
    tree_file_end(f);
}
