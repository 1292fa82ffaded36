/*
 * tx/wal_file.c — a channel's file: creating it (header block, zero-filled
 * preallocation, the O_DIRECT and RWF_DSYNC probes of log_sync single_write)
 * and extending the preallocation on the worker's ring ahead of the data
 * (SPEC C12; the commit path: wal.c's header, the flush: wal_chan.c).
 *
 * Preallocation (log_prealloc_kb): zeros are written ahead of the data, so a
 * flush overwrites allocated, written blocks and its sync needs no metadata
 * journal commit; single_write's claims are believed only in such space
 * (wal_marker.c). An extension writes zeros and fdatasyncs them on the
 * ring, one at a time; a flush never writes into a range being extended (it
 * waits: EXT_BUSY_FLUSH_WAITS). Extension state is owner-only (rule 2 of
 * wal.c).
 *
 * Its size: the file is created with log_prealloc_kb of zeros; from then on
 * each flush that leaves less than that minus a piece (WAL_EXT_PIECE, 256
 * KiB) ahead of the data extends by one piece, so log_prealloc_kb stays
 * ahead. Small steps because the device takes the log's writes in order: a
 * flush submitted while a zero fill is in flight completes after it, and a
 * 2 MB fill (the old step, half the preallocation) cost the flushes queued
 * behind it about a millisecond. Where the data reached the zeros (data
 * faster than the pieces) one chunk (half of log_prealloc_kb) goes at once,
 * as before; a later segment starts with two pieces of zeros, written by
 * the pool thread that made it (wal_seg.c). No file gets zeros past a piece
 * beyond log_segment_kb (wal_prealloc_cap): it rolls over there, and recovery
 * reads every byte of it (a 512 KiB segment with 4 MB of zeros made
 * recovery read eight times its data).
 *
 * Creation runs on the thread opening the log (wal_open), before the workers
 * start: plain blocking I/O.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/error.h"
#include "tx/wal_int.h"

/* ---- preallocation ------------------------------------------------------------------ */

static void extend_complete(struct chan *ch)
{
    bool waits = ch->ext == EXT_BUSY_FLUSH_WAITS;
    ch->ext = EXT_IDLE;
    if (ch->xwr.res == (int32_t)ch->x_len && ch->xsync.res == 0)
        ch->prealloc_end = ch->x_off + ch->x_len;
    /* else: the range stays unallocated; flushes simply append there. */
    if (waits)
        chan_flush_now(ch); /* (if it still has work) */
}

static void x_done(struct chan *ch, struct chan_io *x, int32_t res)
{
    ch->inflight--;
    x->res = res;
    if (--ch->xcqes == 0)
        extend_complete(ch);
}

static void xwr_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, xwr.io);
    x_done(ch, &ch->xwr, res);
}

static void xsync_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, xsync.io);
    x_done(ch, &ch->xsync, res);
}

void chan_maybe_extend(struct chan *ch, uint64_t end_off)
{
    struct wal *wal = ch->wal;
    /* kept ahead: 2 * chunk (log_prealloc_kb, aligned; never below 2 pieces) */
    if (!wal->chunk || ch->ext != EXT_IDLE || ch->stopping || end_off + (2 * wal->chunk - wal->piece) < ch->prealloc_end)
        return; /* enough zeros ahead */
    uint64_t x_off = ch->prealloc_end > end_off ? ch->prealloc_end : wal_align_up(end_off, WAL_ALIGN);
    uint64_t len = end_off + wal->piece > ch->prealloc_end ? wal->chunk : wal->piece; /* caught up: a chunk */
    uint64_t cap = wal_prealloc_cap(wal);
    if (x_off >= cap)
        return; /* the segment rolls over before it needs more */
    if (len > cap - x_off)
        len = cap - x_off;
    sched_io_reserve(ch->w, 2);
    ch->x_off = x_off;
    ch->x_len = (uint32_t)len;
    ch->ext = EXT_BUSY;
    struct be_op wr = {.kind = BE_WRITE, .fd = ch->fd, .caddr = wal->zeros, .len = ch->x_len,
                       .off = ch->x_off, .flags = BE_F_LINK};
    chan_submit(ch, &wr, &ch->xwr, xwr_done);
    struct be_op sync = {.kind = BE_FDATASYNC, .fd = ch->fd};
    chan_submit(ch, &sync, &ch->xsync, xsync_done);
    ch->xcqes = 2;
    sched_io_flush(ch->w);
}

/* ---- creating a channel file --------------------------------------------------------- */

void wal_header_block(uint8_t *block, uint64_t gen, uint32_t worker, uint64_t start_epoch, uint64_t lsn)
{
    struct wal_header_payload h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, WAL_MAGIC, 8);
    h.version = WAL_VERSION;
    h.worker = worker;
    h.gen = gen;
    h.start_epoch = start_epoch;
    memset(block, 0, WAL_ALIGN);
    wal_rec_encode(block, WAL_REC_HEADER, start_epoch, 0, lsn, &h, sizeof(h));
}

/* Block 0: the header record, then zeros (written now, with the preallocation). */
static int write_header_and_zeros(struct wal *wal, struct chan *ch, uint64_t start_epoch)
{
    ch->seg_max_epoch = start_epoch;
    struct wal_buf *x = &ch->bufs[0];
    wal_header_block(x->data, wal->gen, ch->index, start_epoch, ++ch->lsn);
    x->base = 0;
    x->len = x->start = wal_rec_size(sizeof(struct wal_header_payload));
    wal_buf_reset_batch(x);
    wal_buf_reset_batch(&ch->bufs[1]);
    ch->gather = x;
    int rc = wal_write_all(ch->fd, x->data, WAL_ALIGN, 0);
    uint64_t pre = (uint64_t)wal->cfg->log_prealloc_kb * 1024;
    if (pre > wal_prealloc_cap(wal))
        pre = wal_prealloc_cap(wal);
    for (uint64_t off = WAL_ALIGN; !rc && off < pre; off += wal->chunk)
        rc = wal_write_all(ch->fd, wal->zeros,
                           pre - off < wal->chunk ? wal_align_up(pre - off, WAL_ALIGN) : wal->chunk, off);
    if (!rc && fdatasync(ch->fd))
        rc = -errno;
    /* log_prealloc_kb=0: nothing counts as preallocated, never a single-flush chain. */
    ch->prealloc_end = pre ? (pre > WAL_ALIGN ? wal_align_up(pre, WAL_ALIGN) : WAL_ALIGN) : 0;
    return rc;
}

/* Test builds: the probes of single_write can be made to fail (wal.h). */
#if URT_FAULT_INJECTION
_Atomic int wal_fault_refuse;
#define REFUSED(what) (atomic_load_explicit(&wal_fault_refuse, memory_order_relaxed) == (what))
#else
#define REFUSED(what) false
#endif

/* The file is created and preallocated through the page cache (the zeros
 * go out in one fdatasync), then switched to O_DIRECT when the log writes
 * it that way (o_direct, or single_write). The zero pages stay cached (an
 * O_DIRECT write drops those it overwrites): a recovery in the same boot
 * scans the preallocated space from memory.
 * single_write needs O_DIRECT: where the file system refuses it (only the
 * first channel file asks: every channel is then opened alike), the
 * directory falls back to single_flush (wal_sync.c). */
static int go_direct(struct wal *wal, struct chan *ch)
{
    if (!wal->o_direct)
        return 0;
    int fl = fcntl(ch->fd, F_GETFL);
    int rc = fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_DIRECT) ? -errno : 0;
    if (!rc && REFUSED(WAL_REFUSE_DIRECT)) {
        fcntl(ch->fd, F_SETFL, fl); /* test builds: as a file system without O_DIRECT */
        rc = -EINVAL;
    }
    if (rc == -EINVAL && !wal->cfg->o_direct && ch->index == 0) {
        wal_sync_no_direct(&wal->sync, "O_DIRECT", EINVAL);
        wal->o_direct = false;
        return 0;
    }
    return rc;
}

/* single_write: one O_DIRECT write of block 0 (the same bytes again) with
 * RWF_DSYNC, as every flush will do; refused: single_flush. */
static void probe_dsync(struct wal *wal, struct chan *ch)
{
    if (wal->sync.mode != URT_LOG_SYNC_SINGLE_WRITE || ch->index != 0)
        return;
    struct iovec iov = {.iov_base = ch->bufs[0].data, .iov_len = WAL_ALIGN};
    ssize_t r;
    while ((r = pwritev2(ch->fd, &iov, 1, 0, RWF_DSYNC)) < 0 && errno == EINTR)
        ;
    if (REFUSED(WAL_REFUSE_DSYNC))
        r = -1, errno = EOPNOTSUPP; /* test builds: as a kernel without RWF_DSYNC */
    if (r != (ssize_t)WAL_ALIGN)
        wal_sync_no_direct(&wal->sync, "RWF_DSYNC", r < 0 ? errno : EIO);
}

int chan_create(struct wal *wal, struct chan *ch, const char *dir, uint64_t start_epoch)
{
    wal_chan_file_name(ch->name, sizeof(ch->name), wal->gen, ch->index, 0);
    ch->fd = openat(wal->dirfd, ch->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (ch->fd < 0) {
        int e = errno;
        return urt__error(-e, "log_dir %s: cannot create a channel file: %s%s", dir, strerror(e), wal_full_hint(-e));
    }
    wal_sync_nocow(&wal->sync, ch->fd); /* btrfs: while the file is empty */
    for (int i = 0; i < 2; i++)
        if (wal_buf_reserve(&ch->bufs[i], 256 * 1024))
            return -ENOMEM;
    int rc = write_header_and_zeros(wal, ch, start_epoch);
    if (rc)
        return urt__error(rc, "log_dir %s: cannot write a channel file: %s%s", dir, strerror(-rc), wal_full_hint(rc));
    if ((rc = go_direct(wal, ch)))
        return urt__error(rc, "log_dir %s: cannot write a channel file with O_DIRECT: %s", dir, strerror(-rc));
    probe_dsync(wal, ch);
    atomic_init(&ch->pending_min, EPOCH_NONE);
    atomic_init(&ch->nx_res, NX_PENDING);
    return 0;
}
