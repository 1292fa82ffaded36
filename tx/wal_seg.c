/*
 * tx/wal_seg.c — segments and checkpoints: the log that shrinks (SPEC C12).
 *
 * Segments. A channel writes ch-<gen>-<worker>.wal, then, each time the file
 * passes log_segment_kb after a flush completed, rolls over into
 * ch-<gen>-<worker>-<seg>.wal: the new file gets its header block (header
 * record, zeros), fdatasync, and a directory fsync before anything in it
 * counts; the records gathered since the flush move to it; the old file is
 * closed and becomes a "closed segment" with the largest epoch written to it.
 * The roll happens on the channel's worker between two flushes (no write in
 * flight on the old file, no extension running, no repair pending), so no
 * record is ever split between files, and epochs never decrease along a
 * channel's segments. The new file's header record takes the lsn just below
 * its first gathered record (lsns only have to grow within a file).
 * The roll blocks the worker for one small write and two syncs; preallocation
 * of the new segment continues on the ring (wal_chan.c maybe_extend).
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
 * Threading: rollover runs on the channel's worker; the closed-segment list
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

/* ---- rollover (the channel's worker) -------------------------------------------------- */

bool chan_roll_due(const struct chan *ch)
{
    const struct wal_buf *y = ch->gather;
    return ch->wal->seg_bytes && !ch->flight && !chan_repairing(ch) && ch->ext == EXT_IDLE && !ch->stopping &&
           y->base + y->len >= ch->wal->seg_bytes && ch->seg < 0xffffff;
}

/* The lsn of the first record gathered since the last flush, or 0. */
static uint64_t first_gathered_lsn(const struct wal_buf *y)
{
    uint64_t lsn = 0;
    if (y->len > y->start)
        memcpy(&lsn, y->data + y->start + 24, 8);
    return lsn;
}

/* Creates the next segment file with its header block, durable in the
 * directory. Returns the fd or -errno. */
static int open_segment(struct chan *ch, const char *name, uint64_t hdr_lsn, uint64_t start_epoch, uint8_t *block)
{
    struct wal *wal = ch->wal;
    int fd = openat(wal->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (wal->o_direct ? O_DIRECT : 0), 0644);
    if (fd < 0)
        return -errno;
    wal_sync_nocow(&wal->sync, fd);
    wal_header_block(block, wal->gen, ch->index, start_epoch, hdr_lsn);
    int rc = wal_write_all(fd, block, WAL_ALIGN, 0);
    if (!rc && fdatasync(fd))
        rc = -errno;
    if (!rc && fsync(wal->dirfd))
        rc = -errno;
    if (rc) {
        close(fd);
        unlinkat(wal->dirfd, name, 0);
        return rc;
    }
    return fd;
}

/* The gathering buffer starts the new file: header record, then the records
 * gathered since the last flush. */
static int rebase_gather(struct wal_buf *y, const uint8_t *block)
{
    size_t hdr = wal_rec_size(sizeof(struct wal_header_payload));
    size_t n = y->len - y->start;
    if (wal_buf_reserve(y, hdr + n + WAL_TERMINATOR + WAL_ALIGN))
        return -ENOMEM;
    memmove(y->data + hdr, y->data + y->start, n);
    memcpy(y->data, block, hdr);
    y->base = 0;
    y->start = hdr;
    y->len = hdr + n;
    return 0;
}

void chan_roll(struct chan *ch)
{
    struct wal *wal = ch->wal;
    struct wal_buf *y = ch->gather;
    char name[64];
    wal_chan_file_name(name, sizeof(name), wal->gen, ch->index, ch->seg + 1);
    uint64_t first = first_gathered_lsn(y);
    uint64_t start = y->n_recs ? y->min_epoch : atomic_load_explicit(&wal->epoch, memory_order_relaxed);
    uint8_t block[WAL_ALIGN] __attribute__((aligned(WAL_ALIGN))); /* O_DIRECT needs the alignment */
    int fd = open_segment(ch, name, first ? first - 1 : ch->lsn, start, block);
    if (fd < 0 || rebase_gather(y, block)) {
        if (fd >= 0) {
            close(fd);
            unlinkat(wal->dirfd, name, 0);
        }
        wal_cnt_add(&ch->n_errors, 1);
        return; /* the old file goes on; a later flush tries again */
    }
    wal_add_closed(wal, ch->name, ch->seg_max_epoch); /* no memory: it stays until a recovery removes it */
    close(ch->fd);
    ch->fd = fd;
    ch->seg++;
    snprintf(ch->name, sizeof(ch->name), "%s", name);
    ch->seg_max_epoch = start;
    ch->prealloc_end = wal->chunk ? WAL_ALIGN : 0; /* extension runs ahead on the ring from here */
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
