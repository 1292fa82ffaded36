/*
 * tx/wal_seg.c — segments and checkpoints: the log that shrinks (SPEC C12).
 *
 * Segments. A channel writes ch-<gen>-<worker>.wal, then, each time the file
 * passes log_segment_kb after a flush completed, rolls over into
 * ch-<gen>-<worker>-<seg>.wal. Phases:
 *   1. ready (a blocking pool thread, blocking_submit_own): once the file
 *      passes half of log_segment_kb, the next one is created, its first
 *      zeros (two extension pieces) written and fdatasync'd, and the
 *      directory fsync'd; the continuation hands the fd (or -errno) to the
 *      owner through nx_res. A failure is counted (io_errors) and asked
 *      again after a later flush; meanwhile the file grows past the size.
 *   2. roll (the channel's worker, between two flushes: no write in flight
 *      on the old file, no extension running, no repair pending; and the
 *      next file ready): the gathering buffer is rebased to offset 0 of the
 *      new file, its header record first and all of it the next batch, so
 *      the first flush into the file writes the header with the records and
 *      nothing in it counts before that write is durable; the old file is
 *      closed and becomes a "closed segment" with the largest epoch written
 *      to it. No system call but the close: the worker never waited for the
 *      syncs (it did, 0.35 ms a roll here, when it made the file itself).
 * No record is ever split between files, and epochs never decrease along a
 * channel's segments. The header record takes the lsn just below its first
 * gathered record (lsns only have to grow within a file). A crash can leave
 * the ready file blank (empty, zeros, or a torn first write): recovery
 * deletes it (wal_recover.c, blank); wal_close removes one never rolled into.
 *
 * Checkpoints. urt_log_checkpoint(rt, C), C <= the durable marker: the
 * engine's own state is persisted up to C. Phases:
 *   1. the checkpoint file ("checkpoint": C, magic, crc32c) is replaced
 *      atomically: checkpoint.tmp, fdatasync, rename, directory fsync;
 *   2. every closed segment whose records are all at or below C is deleted
 *      (any generation: the files found at open are registered too):
 *      truncated from its end in synced 4 MB steps down to its header block,
 *      then unlinked (seg_unlink: one commit freeing a whole segment held
 *      the log's writes for milliseconds); then the directory is fsync'd.
 * A crash between or inside the phases leaves a directory that recovers
 * every stored commit above C and none at or below it: recovery replays only
 * epochs above the checkpoint file's marker and deletes what phase 2 had not
 * reached (wal_recover.c). Active segments are never deleted.
 *
 * Threading: the roll runs on the channel's worker, the file's creation on
 * a pool thread, which reads only what the owner wrote before the
 * submission (published by the queue push) and the wal's fields fixed once
 * the workers run; nx_res is its one shared word (release store by the
 * continuation, on any worker; acquire loads by the owner, who alone resets
 * it, before the next submission). The closed-segment list
 * is shared (seg_lock); checkpoints are serialized (ckpt_lock) and run on
 * the caller's thread. wal->checkpoint is written only under ckpt_lock;
 * urt_log_stats reads it relaxed (a snapshot). The durable marker is read
 * with acquire: it only bounds the argument (a marker the epoch file already
 * holds), nothing else is read through it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "sched/blocking.h"
#include "tx/wal_int.h"

void wal_chan_file_name(char *buf, size_t len, uint64_t gen, uint32_t worker, uint32_t seg)
{
    if (seg == 0)
        snprintf(buf, len, "ch-%016" PRIx64 "-%04x.wal", gen, worker);
    else
        snprintf(buf, len, "ch-%016" PRIx64 "-%04x-%06x.wal", gen, worker, seg);
}

int wal_add_closed(struct wal *wal, const char *name, uint64_t max_epoch)
{
    pthread_mutex_lock(&wal->seg_lock);
    int rc = 0;
    if (wal->n_closed == wal->cap_closed) {
        size_t cap = wal->cap_closed ? wal->cap_closed * 2 : 16;
        struct closed_seg *p = realloc(wal->closed, cap * sizeof(*p));
        if (!p)
            rc = -ENOMEM;
        else
            wal->closed = p, wal->cap_closed = cap;
    }
    if (!rc) {
        struct closed_seg *c = &wal->closed[wal->n_closed++];
        snprintf(c->name, sizeof(c->name), "%s", name);
        c->max_epoch = max_epoch;
    }
    pthread_mutex_unlock(&wal->seg_lock);
    return rc;
}

/* ---- the next segment file (a blocking pool thread) ------------------------------------ */

/* Creates ch->nx_name with nx_zeros of zeros from offset 0, synced, and
 * durable in the directory; FS_NOCOW_FL where the sync choice needs it. No
 * header: the roll's first flush writes it. Returns the fd or -errno, and
 * leaves no file behind on failure. A blocking pool thread: it reads what
 * the owner wrote before the submission (published by the queue push) and
 * what no longer changes once the workers run (dirfd, zeros, o_direct,
 * sync, piece). */
static int64_t next_make(void *arg)
{
    struct chan *ch = arg;
    struct wal *wal = ch->wal;
    int fd = openat(wal->dirfd, ch->nx_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (wal->o_direct ? O_DIRECT : 0),
                    0644);
    if (fd < 0)
        return -errno;
    int rc = wal_sync_set_nocow(&wal->sync, fd) ? 0 : -EOPNOTSUPP;
    for (uint64_t off = 0; !rc && off < ch->nx_zeros; off += wal->piece) /* in pieces, as the extension */
        rc = wal_write_all(fd, wal->zeros, ch->nx_zeros - off < wal->piece ? ch->nx_zeros - off : wal->piece, off);
    if (!rc && ch->nx_zeros && fdatasync(fd))
        rc = -errno;
    if (!rc && fsync(wal->dirfd))
        rc = -errno;
    if (rc) {
        close(fd);
        unlinkat(wal->dirfd, ch->nx_name, 0);
        return rc;
    }
    return fd;
}

/* The continuation, on whichever worker takes it (blocking_submit_own): the
 * result goes to the owner through nx_res (release; chan_prepare_next and
 * chan_roll load it with acquire), nothing else is touched. */
static void next_made(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    struct chan *ch = arg;
    atomic_store_explicit(&ch->nx_res, res, memory_order_release);
}

void chan_prepare_next(struct chan *ch)
{
    struct wal *wal = ch->wal;
    const struct wal_buf *y = ch->gather;
    if (ch->nx_busy) {
        int64_t res = atomic_load_explicit(&ch->nx_res, memory_order_acquire);
        if (res == NX_PENDING || res >= 0)
            return; /* being made, or ready for the roll */
        ch->nx_busy = false; /* failed (no space, no descriptor): asked again now */
        wal_cnt_add(&ch->n_errors, 1);
    }
    if (!wal->seg_bytes || ch->stopping || ch->seg >= 0xffffff || y->base + y->len < wal->seg_bytes / 2)
        return;
    wal_chan_file_name(ch->nx_name, sizeof(ch->nx_name), wal->gen, ch->index, ch->seg + 1);
    ch->nx_zeros = wal->chunk ? 2 * (uint64_t)wal->piece : 0; /* the extension then goes on in pieces */
    if (ch->nx_zeros > wal_prealloc_cap(wal))
        ch->nx_zeros = wal_prealloc_cap(wal);
    atomic_store_explicit(&ch->nx_res, NX_PENDING, memory_order_relaxed); /* published by the queue push */
    urt_blocking_init(&ch->nx_b, next_make, next_made, ch);
    if (blocking_submit_own(wal->s, &ch->nx_b, ch->w) == 0)
        ch->nx_busy = true;
    else
        wal_cnt_add(&ch->n_errors, 1); /* the pool's queue is full: a later flush asks again */
}

void chan_drop_next(struct chan *ch)
{
    if (!ch->nx_busy)
        return;
    int64_t fd = atomic_load_explicit(&ch->nx_res, memory_order_acquire);
    if (fd < 0)
        return; /* failed, or never ran (destroy cancelled it): no file */
    close((int)fd);
    unlinkat(ch->wal->dirfd, ch->nx_name, 0); /* not synced: a blank file a recovery deletes */
    ch->nx_busy = false;
}

/* ---- rollover (the channel's worker) -------------------------------------------------- */

bool chan_roll_due(const struct chan *ch)
{
    const struct wal_buf *y = ch->gather;
    return ch->wal->seg_bytes && !ch->flight && !chan_repairing(ch) && ch->ext == EXT_IDLE && !ch->stopping &&
           y->base + y->len >= ch->wal->seg_bytes && ch->nx_busy &&
           atomic_load_explicit(&ch->nx_res, memory_order_acquire) >= 0;
}

/* The lsn of the first record gathered since the last flush, or 0. */
static uint64_t first_gathered_lsn(const struct wal_buf *y)
{
    uint64_t lsn = 0;
    if (y->len > y->start)
        memcpy(&lsn, y->data + y->start + 24, 8);
    return lsn;
}

/* The gathering buffer starts the new file: its header record, then the
 * records gathered since the last flush, all of it the next batch (start
 * 0: the first flush writes the header with them). */
static int rebase_gather(struct wal_buf *y, const uint8_t *block)
{
    size_t hdr = wal_rec_size(sizeof(struct wal_header_payload));
    size_t n = y->len - y->start;
    if (wal_buf_reserve(y, hdr + n + WAL_TERMINATOR + WAL_ALIGN))
        return -ENOMEM;
    memmove(y->data + hdr, y->data + y->start, n);
    memcpy(y->data, block, hdr);
    y->base = 0;
    y->start = 0;
    y->len = hdr + n;
    return 0;
}

void chan_roll(struct chan *ch)
{
    struct wal *wal = ch->wal;
    struct wal_buf *y = ch->gather;
    uint64_t first = first_gathered_lsn(y);
    uint64_t start = y->n_recs ? y->min_epoch : atomic_load_explicit(&wal->epoch, memory_order_relaxed);
    uint8_t block[WAL_ALIGN];
    wal_header_block(block, wal->gen, ch->index, start, first ? first - 1 : ch->lsn);
    if (rebase_gather(y, block)) {
        wal_cnt_add(&ch->n_errors, 1);
        return; /* the old file goes on; a later flush rolls (the next file stays ready) */
    }
    wal_add_closed(wal, ch->name, ch->seg_max_epoch); /* no memory: it stays until a recovery removes it */
    close(ch->fd);
    ch->fd = (int)atomic_load_explicit(&ch->nx_res, memory_order_relaxed); /* chan_roll_due loaded it */
    ch->nx_busy = false;
    ch->seg++;
    snprintf(ch->name, sizeof(ch->name), "%s", ch->nx_name);
    ch->seg_max_epoch = start;
    ch->prealloc_end = ch->nx_zeros; /* extension runs ahead on the ring from here */
}

/* ---- checkpoints (the caller's thread) ------------------------------------------------- */

static int write_checkpoint_file(struct wal *wal, uint64_t marker)
{
    uint8_t b[WAL_CHECKPOINT_SIZE];
    wal_checkpoint_encode(b, marker);
    int fd = openat(wal->dirfd, "checkpoint.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = wal_write_all(fd, b, sizeof(b), 0);
    if (!rc && fdatasync(fd))
        rc = -errno;
    close(fd);
    if (!rc && renameat(wal->dirfd, "checkpoint.tmp", wal->dirfd, "checkpoint"))
        rc = -errno;
    if (!rc && fsync(wal->dirfd))
        rc = -errno;
    return rc;
}

/* Deletes a checkpointed segment a step at a time: truncated from its end
 * in WAL_DELETE_STEP steps, each synced, down to its header block, then
 * unlinked. A file's blocks are freed (and, on a file system mounted with
 * `discard`, discarded) when the journal commits; freed in one piece, a 64
 * MB segment held the log's own writes, queued behind that commit and its
 * discard on the same device, for 10-12 ms (ext4 with discard on a virtio
 * disk), in steps at most about 3 ms, for the same total time (the way
 * RocksDB's DeleteScheduler truncates large files, bytes_max_delete_chunk).
 * Runs on the caller of urt_log_checkpoint, never on a worker. A crash
 * between steps leaves the header and a prefix of records, all at or below
 * the checkpoint: recovery cuts the torn tail and deletes the file
 * (wal_recover.c, all_checkpointed). Returns unlinkat's result. */
static int seg_unlink(struct wal *wal, const char *name)
{
    int fd = openat(wal->dirfd, name, O_WRONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        uint64_t size = (uint64_t)st.st_size;
        while (size > WAL_ALIGN) {
            size = size - WAL_ALIGN > WAL_DELETE_STEP ? size - WAL_DELETE_STEP : WAL_ALIGN;
            if (ftruncate(fd, (off_t)size) || fdatasync(fd))
                break; /* the unlink frees the rest at once */
        }
    }
    if (fd >= 0)
        close(fd);
    return unlinkat(wal->dirfd, name, 0);
}

/* Takes every closed segment at or below marker out of the list. */
static size_t take_covered(struct wal *wal, uint64_t marker, struct closed_seg **out)
{
    pthread_mutex_lock(&wal->seg_lock);
    size_t n = 0;
    struct closed_seg *v = malloc((wal->n_closed ? wal->n_closed : 1) * sizeof(*v));
    if (v) {
        size_t keep = 0;
        for (size_t i = 0; i < wal->n_closed; i++) {
            if (wal->closed[i].max_epoch <= marker)
                v[n++] = wal->closed[i];
            else
                wal->closed[keep++] = wal->closed[i];
        }
        wal->n_closed = keep;
    }
    pthread_mutex_unlock(&wal->seg_lock);
    *out = v;
    return n;
}

int wal_checkpoint(struct wal *wal, uint64_t marker)
{
    uint64_t d = atomic_load_explicit(&wal->dl.persisted, memory_order_acquire);
    if (marker > d)
        return urt__error(-EINVAL, "urt_log_checkpoint: marker %" PRIu64 " is above the durable marker %" PRIu64,
                          marker, d);
    pthread_mutex_lock(&wal->ckpt_lock);
    int rc = 0;
    if (marker > atomic_load_explicit(&wal->checkpoint, memory_order_relaxed)) {
        if ((rc = write_checkpoint_file(wal, marker)))
            urt__error(rc, "urt_log_checkpoint: cannot write the checkpoint file: %s", strerror(-rc));
        else
            atomic_store_explicit(&wal->checkpoint, marker, memory_order_relaxed); /* ckpt_lock held */
    }
    int deleted = 0;
    struct closed_seg *v = NULL;
    size_t n = rc ? 0 : take_covered(wal, atomic_load_explicit(&wal->checkpoint, memory_order_relaxed), &v);
    for (size_t i = 0; i < n; i++)
        if (seg_unlink(wal, v[i].name) == 0)
            deleted++;
    free(v);
    if (deleted && fsync(wal->dirfd) && !rc)
        rc = urt__error(-errno, "urt_log_checkpoint: cannot sync the log directory: %s", strerror(errno));
    pthread_mutex_unlock(&wal->ckpt_lock);
    return rc ? rc : deleted;
}
