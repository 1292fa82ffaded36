/*
 * tx/wal_fail.c — a failed log write: its answers, the repair, the retries
 * (SPEC C12; the flush it failed: wal_chan.c, the commit path: wal.c).
 *
 * A write (or its sync) that fails answers the stored commits it carried
 * with its error at once (chan_flush_failed), except after a claim write
 * (log_sync single_write): its claim and records may be on disk, so their
 * errors wait until the repair is durable. The records gathered behind it
 * move to where it began; the channel's pending_min stays where it was, at
 * or below the failed epochs, so the durable marker cannot cover whatever
 * the failed write left in the file. Then, after a back-off:
 *
 *   repair   one write of zeros over that range (chan_repair_write), alone:
 *            no records, not past the file's size, so it overwrites blocks
 *            the file has and succeeds on a full disk; once durable the
 *            channel goes on (wal_chan.c chan_written: pending_min raised,
 *            the marker may advance, the next batch goes);
 *   records  the batch gathered meanwhile, an ordinary flush; if it fails
 *            too, the same again.
 *
 * Retries: the retry timer (io_r) waits 1 ms after the first failure in a
 * row, doubling up to 128 ms; records written again reset it (a repair
 * alone does not: on a full disk it succeeds while the records still fail).
 * While it waits (CH_REPAIR_WAIT) the channel starts no write (chan_has_work is
 * false), and the answers of accepted commits are held past WAL_HOLD_BYTES
 * as behind a write in flight. An own slot write of the epoch file that
 * failed (wal_marker.c) waits for the same timer (eretry, marker_retry).
 * The timer is armed only while the runtime runs: a drain waits for the
 * workers' timers, so from the drain on, a failed write waits for
 * wal_worker_stop, which clears the back-off and tries at most STOP_FLUSHES
 * more writes (and as many slot writes).
 *
 * Everything here is owner-only (rule 2 of wal.c); the error counter is O3.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tx/wal_int.h"

/* ---- the failed write ------------------------------------------------------------------ */

static void hold_failed(struct chan *ch, struct urt_commit *failed)
{
    while (failed) {
        struct urt_commit *next = failed->priv.next;
        failed->priv.next = NULL;
        if (ch->failed_tail)
            ch->failed_tail->priv.next = failed;
        else
            ch->failed_head = failed;
        ch->failed_tail = failed;
        failed = next;
    }
}

/* A repair failed: what gathered behind it could be written only after a
 * repair that may fail for as long as the disk is full. Its stored commits
 * get err now, its records are dropped (accepted and available commits
 * were answered at append: theirs are lost, as with any failed write).
 * Returns the stored commits. */
static struct urt_commit *drop_gathered(struct chan *ch, int err)
{
    struct wal_buf *g = ch->gather;
    struct urt_commit *list = g->wait_head;
    for (struct urt_commit *c = list; c; c = c->priv.next) {
        c->priv.status = err;
        c->priv.state = CS_RELEASE;
    }
    g->len = g->start;
    wal_buf_reset_batch(g);
    return list;
}

/* The failed write's stored commits get err; the gathered records move to
 * where it began (or, behind a failed repair, get err too); the repair,
 * after the back-off, undoes the failed range. */
void chan_flush_failed(struct chan *ch, int err)
{
    struct wal_buf *x = ch->flight;
    bool was_repair = ch->st == CH_REPAIR_FLIGHT;
    wal_cnt_add(&ch->n_errors, 1);
    if (x->base + ch->wr_to > ch->dirty_end)
        ch->dirty_end = x->base + ch->wr_to; /* the repair undoes up to here: no stale record survives */
    struct urt_commit *failed = x->wait_head;
    for (struct urt_commit *c = failed; c; c = c->priv.next) {
        c->priv.status = err;
        c->priv.state = CS_RELEASE;
    }
    x->len = x->start;
    wal_buf_reset_batch(x);
    struct urt_commit *lost = chan_unswap_buffers(ch);
    ch->form = FLUSH_NONE;
    /* pending_min stays where it is (at or below the failed epochs) until a
     * repair of the failed range is durable: D cannot cover those records. */
    ch->st = CH_REPAIR_DUE; /* CH_REPAIR_WAIT at chan_back_off below */
    if (was_repair) {
        failed = drop_gathered(ch, err); /* (a repair carries no commit of its own) */
        ch->repair_truncate |= err == -ENOSPC || err == -EDQUOT; /* the next one frees blocks instead */
    }
    if (ch->claim_p) {
        /* Its claim may be on disk with its records, and would make a
         * recovery replay them: their errors wait until the repair has
         * undone them durably (chan_written); its marker is claimed again
         * after that (epending). */
        if (ch->claim_p > ch->epending)
            ch->epending = ch->claim_p;
        ch->claim_p = 0;
        hold_failed(ch, failed);
        failed = NULL;
    }
    delivery_list(&ch->wal->dl, ch->w, failed);
    delivery_list(&ch->wal->dl, ch->w, lost);
    chan_release_held(ch);
    chan_back_off(ch, false); /* the repair, and whatever gathers, after the retry timer */
}

/* ---- the repair ------------------------------------------------------------------------ */

/* The repair as a truncation at the failed batch's start: it frees blocks
 * instead of overwriting them, so it needs no space on any file system,
 * copy-on-write ones included. Used where the failed write appended (at or
 * past the end of the preallocation: nothing to keep there), and after a
 * repair write failed for want of space (the preallocation then ends
 * where the file does; the extension zero-fills ahead again). Blocking,
 * ftruncate and fdatasync on the worker, like a segment's roll: only ever
 * after a failed write. */
static void repair_truncate(struct chan *ch, uint64_t at)
{
    if (ch->ext != EXT_IDLE) {
        ch->ext = EXT_BUSY_FLUSH_WAITS; /* the zero fill in flight writes past `at`: after it */
        return;
    }
    int rc = ftruncate(ch->fd, (off_t)at) ? -errno : 0;
    if (!rc && fdatasync(ch->fd))
        rc = -errno;
    if (rc) {
        wal_cnt_add(&ch->n_errors, 1);
        delivery_list(&ch->wal->dl, ch->w, drop_gathered(ch, rc));
        chan_back_off(ch, false);
        return;
    }
    uint64_t blk = at & ~(uint64_t)(WAL_ALIGN - 1);
    if (ch->prealloc_end > blk)
        ch->prealloc_end = blk; /* zero-filled space ends there now */
    ch->repair_truncate = false;
    wal_cnt_add(&ch->n_fsyncs, 1);
    chan_written(ch, NULL, false);
}

/* The repair after a failed write: whatever the failed writes may have left
 * in the file, from where the failed batch began up to dirty_end, undone
 * durably before the durable marker may pass the failed epochs. Inside the
 * preallocation, one write of zeros over it, not past the file's size
 * (fstat: bytes past it were never written, and zeroing them would take new
 * blocks), with no records (those gathered since go with the next write): it
 * overwrites blocks the file already has, so it succeeds on a full disk
 * (tmpfs, ext4, xfs, btrfs's no-CoW channel files) and keeps the
 * preallocation; with O_DIRECT it rewrites whole blocks from the buffer's
 * start, the earlier records of the first block included (the other buffer
 * holds the copy: the gathering one keeps the new records). Past the
 * preallocation, or after such a write failed for want of space, a
 * truncation (repair_truncate). Nothing of the failed writes in the file
 * (it ends before them): nothing to undo, the repair is done without I/O.
 * Once durable the channel goes on (chan_written: pending_min raised, the
 * marker may advance, the next batch goes). */
void chan_repair_write(struct chan *ch)
{
    struct wal_buf *x = ch->gather, *r = x == &ch->bufs[0] ? &ch->bufs[1] : &ch->bufs[0];
    uint64_t at = x->base + x->start, end = ch->dirty_end;
    struct stat st;
    if (fstat(ch->fd, &st) == 0 && (uint64_t)st.st_size < end)
        end = (uint64_t)st.st_size;
    if (end <= at) {
        chan_written(ch, NULL, false);
        return;
    }
    if (ch->repair_truncate || at >= ch->prealloc_end) {
        repair_truncate(ch, at);
        return;
    }
    size_t to = (size_t)(end - x->base);
    if (ch->wal->o_direct)
        to = wal_align_up(to, WAL_ALIGN);
    if (ch->ext != EXT_IDLE && x->base + to > ch->x_off) {
        ch->ext = EXT_BUSY_FLUSH_WAITS; /* never write into a range being zero-filled */
        return;
    }
    r->len = 0;
    if (wal_buf_reserve(r, to)) {
        chan_back_off(ch, false); /* no memory now: later */
        return;
    }
    memcpy(r->data, x->data, x->start);
    memset(r->data + x->start, 0, to - x->start);
    r->base = x->base;
    r->start = r->len = x->start;
    wal_buf_reset_batch(r);
    ch->flight = r;
    ch->st = CH_REPAIR_FLIGHT;
    ch->claim_p = 0;
    ch->wr_from = ch->wal->o_direct ? 0 : x->start;
    ch->wr_to = to;
    ch->flush_seq++;
    ch->flight_lsn = ch->lsn;
    ch->flush_start_ns = 0; /* not timed (no probe_flush either) */
    chan_submit_write(ch, false);
}

/* ---- retries --------------------------------------------------------------------------- */

/* The retry timer (header): a full disk or a dead device costs a few writes
 * a second per channel, never a worker retrying in a loop (an idle worker's
 * wal_before_suspend once flushed at once whenever a repair was due: 300,000
 * failed writes a second on a full tmpfs). */
#define RETRY_FIRST_NS 1000000ull /* 1 ms */
#define RETRY_MAX_SHIFT 7u        /* 128 ms */

static void retry_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)res, (void)flags;
    struct chan *ch = CHAN_OF(io, io_r);
    ch->inflight--;
    ch->retry_armed = false;
    if (ch->st == CH_REPAIR_WAIT)
        ch->st = CH_REPAIR_DUE;
    if (ch->stopping)
        return; /* wal_worker_stop retries itself */
    if (ch->eretry) {
        ch->eretry = false;
        marker_retry(ch);
    }
    if (chan_has_work(ch))
        chan_flush_now(ch);
}

void chan_back_off(struct chan *ch, bool epoch)
{
    if (ch->fails < UINT32_MAX)
        ch->fails++;
    ch->eretry |= epoch;
    if (ch->stopping)
        return; /* its loop retries, at most STOP_FLUSHES times */
    if (!epoch)
        ch->st = CH_REPAIR_WAIT; /* from CH_REPAIR_DUE: no write starts before the timer */
    if (ch->retry_armed || atomic_load_explicit(&ch->w->s->phase, memory_order_relaxed) != PHASE_RUNNING)
        return;
    uint32_t k = ch->fails - 1 < RETRY_MAX_SHIFT ? ch->fails - 1 : RETRY_MAX_SHIFT;
    if (sched_timer_arm(ch->w, &ch->io_r, RETRY_FIRST_NS << k, retry_done) == 0) {
        ch->retry_armed = true;
        ch->inflight++;
        return;
    }
    /* No memory for the timer: the epoch timer retries the log write, the
     * slot is written again at once. */
    if (ch->st == CH_REPAIR_WAIT)
        ch->st = CH_REPAIR_DUE;
    chan_arm_timer(ch);
    if (ch->eretry) {
        ch->eretry = false;
        marker_retry(ch);
    }
}
