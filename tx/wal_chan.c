/*
 * tx/wal_chan.c — channel and flush: one per worker, its own file, two
 * buffers (one gathering records, one being written), its I/O on the
 * worker's own ring (SPEC C12; the commit's whole path: wal.c's header).
 *
 * Append: a commit's records go to the gathering buffer tagged with the
 * open epoch E (its marker). Stored commits join the buffer's waiter list
 * and ask for a flush (a task that yields once, so everything runnable
 * appends first: the batch); accepted/available are answered at once (or
 * held behind the write in flight past WAL_HOLD_BYTES: backpressure).
 *
 * Flush (at most one in flight; the next batch gathers behind it): E is
 * advanced past the buffer's largest epoch, the buffers swap (the partial
 * last block is carried over), and the write goes out in one of four forms
 * (enum flush_form). log_sync single_write: DSYNC, one O_DIRECT write with
 * RWF_DSYNC, ending with a claim record of the marker D will reach once it
 * is durable when that passes every marker claimed so far (wal_marker.c:
 * the marker rides in the log write, no epoch-file write). Otherwise PLAIN
 * write -> fdatasync; when D waits for this write, the marker's slot is
 * chained behind it: STRICT (write -> fdatasync -> slot -> fdatasync(epochs))
 * or, inside preallocated space with log_sync single_flush, SINGLE (write ->
 * sync_file_range -> conditional slot -> fdatasync(epochs): one device
 * flush; wal_sync.c says where each holds). Every write ends with a zero
 * terminator.
 *
 * Completion: a short write is written again from where it stopped (with a
 * sync of its own; a claim in it stays and counts once the rest is
 * durable); an error fails the flush's stored commits with it, rewinds the
 * channel to the flush's offset and, after a back-off (1 ms doubling to 128
 * ms), undoes the failed range with a repair of its own that needs no new
 * blocks (zeros, or a truncation), then writes what gathered meanwhile
 * (wal_fail.c; D stays below the failed epochs until the repair is
 * durable). On success the waiters go
 * to delivery (delivery.c), pending_min is raised (O1) and the marker may
 * advance (wal_marker.c); single_write: the next flush carries it, at once.
 *
 * The write path is in one state, ch->st (enum chan_state, wal_int.h):
 *
 *   IDLE ──flush──▶ FLIGHT ──durable──▶ IDLE
 *                   FLIGHT ──failed──▶ REPAIR_WAIT      (chan_flush_failed,
 *                          then chan_back_off arms the retry timer io_r)
 *   REPAIR_WAIT ──retry timer, the stop's loop, no memory for the timer──▶ REPAIR_DUE
 *   REPAIR_DUE ──flush: zeros──▶ REPAIR_FLIGHT ──durable──▶ IDLE
 *   REPAIR_DUE ──flush: a truncation, or nothing to undo──▶ IDLE
 *   REPAIR_DUE ──the truncation failed, no memory for the zeros──▶ REPAIR_WAIT
 *   REPAIR_FLIGHT ──failed──▶ REPAIR_WAIT  (what gathered behind it gets the
 *                  error; after -ENOSPC the next repair truncates)
 *
 * The way back to IDLE is chan_written (the failed claim write's answers go
 * out, pending_min is raised); from there the gathered records go. A flush
 * starts only in IDLE (records, or a claim wanted) and REPAIR_DUE
 * (chan_has_work); while wal_worker_stop runs a failure stays REPAIR_DUE
 * (its loop retries, bounded). ch->flight is the buffer being written in
 * the FLIGHT states. Beside the write path, and independent of it: the
 * flush task (flush_task_state), the flight's form and claim (form,
 * claim_p; single_write's want_claim), the epoch-file write (ew, eagain,
 * eretry, epending: wal_marker.c), the preallocation's zero fill (ext:
 * wal_file.c), the two timers (timer_armed, retry_armed) and the stop
 * (stopping).
 *
 * Polling (log_poll_us): a worker that would suspend while its channel's
 * write is in flight polls its ring instead, for about twice the channel's
 * recent write time (bounded; none when writes are slower than the bound),
 * yielding the CPU between polls: the completion is seen without waking a
 * halted vCPU (wal_poll.c, with single_write's choice between RWF_DSYNC and
 * write + fdatasync). Files and preallocation: wal_file.c.
 *
 * Everything here is owner-only (rule 2 of wal.c) except pending_min (O1)
 * and the counters (O3).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpf/probes.h"
#include "tx/wal_int.h"

static inline uint64_t log_stamp(void)
{
    return probe_log_timing_on() ? urt_clock_ns() : 0;
}

/* ---- buffers ------------------------------------------------------------------------ */

int wal_buf_reserve(struct wal_buf *b, size_t need)
{
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64 * 1024;
    while (cap < need)
        cap *= 2;
    void *p;
    if (posix_memalign(&p, WAL_ALIGN, cap))
        return -ENOMEM;
    memset(p, 0, cap);
    if (b->data)
        memcpy(p, b->data, b->len);
    free(b->data);
    b->data = p;
    b->cap = cap;
    return 0;
}

bool chan_has_work(const struct chan *ch)
{
    return ch->st == CH_REPAIR_DUE || (ch->st == CH_IDLE && (ch->gather->n_recs || ch->want_claim));
}

/* ---- the epoch timer ------------------------------------------------------------------ */

static void write_again(struct chan *ch);

static void timer_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)res, (void)flags;
    struct chan *ch = CHAN_OF(io, io_t);
    ch->inflight--;
    ch->timer_armed = false;
    if (ch->stopping)
        return;
    /* The epoch timer: close the open epoch, flush what waits. */
    atomic_fetch_add_explicit(&ch->wal->epoch, 1, memory_order_seq_cst);
    if (chan_has_work(ch))
        chan_flush_now(ch);
}

void chan_arm_timer(struct chan *ch)
{
    if (ch->timer_armed || ch->stopping)
        return;
    if (sched_timer_arm(ch->w, &ch->io_t, ch->wal->epoch_ns, timer_done) == 0) {
        ch->timer_armed = true;
        ch->inflight++;
    }
}

/* ---- submitting a write ------------------------------------------------------------- */

static void wr_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void sync_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);

/* Offset in x after the last record of epoch <= p (records from x->start;
 * epochs never decrease); x->start if this write holds none. A slot's
 * condition names only records that a recovery with marker p keeps (never a
 * record of a later epoch that happens to precede this write), so a later
 * recovery still finds it true. */
static size_t records_end(const struct wal_buf *x, uint64_t p)
{
    size_t off = x->start, end = x->start;
    while (off + WAL_HDR_SIZE <= x->len) {
        uint32_t len;
        uint64_t epoch;
        memcpy(&len, x->data + off, 4);
        memcpy(&epoch, x->data + off + 8, 8);
        if (epoch > p)
            break;
        off += wal_rec_size(len);
        end = off;
    }
    return end;
}

/* Test builds: the next write is cut short or fails (wal_inject_fault). */
static int take_fault(struct chan *ch, size_t *n)
{
#if URT_FAULT_INJECTION
    int inject = atomic_load_explicit(&ch->wal->inject_next, memory_order_relaxed);
    if (inject != WAL_FAULT_EIO_ALWAYS && inject != WAL_FAULT_ENOSPC_ALWAYS)
        inject = atomic_exchange_explicit(&ch->wal->inject_next, 0, memory_order_relaxed);
    if (inject == WAL_FAULT_SHORT) {
        size_t half = ch->wal->o_direct ? (*n / 2) & ~(size_t)511 : *n / 2;
        if (half)
            *n = half;
    }
    ch->wr_err = inject == WAL_FAULT_EIO || inject == WAL_FAULT_EIO_ALWAYS ? -EIO
                 : inject == WAL_FAULT_ENOSPC_ALWAYS                      ? -ENOSPC
                                                                         : 0;
    ch->wr_fake_short = inject == WAL_FAULT_SHORT_CANCEL;
    return inject;
#else
    (void)ch, (void)n;
    return 0;
#endif
}

/* Which form this write takes, and the marker chained behind it (0: none). */
static enum flush_form choose_form(struct chan *ch, bool chain_ok, uint64_t *p)
{
    struct wal *wal = ch->wal;
    *p = 0;
    if (wal->dsync)
        return chan_dsync_form(ch); /* its claim, if any, is in the buffer already (chan_flush_now) */
    if (chain_ok && ch->ew == EW_IDLE && !chan_repairing(ch))
        *p = marker_claim_for_write(wal, ch);
    if (!*p)
        return FLUSH_PLAIN;
    if (wal->single_ok && ch->flight->base + ch->wr_to <= ch->prealloc_end)
        return FLUSH_SINGLE;
    return FLUSH_STRICT;
}

static void submit_sync(struct chan *ch, size_t n, bool link)
{
    struct be_op op = {.kind = BE_FDATASYNC, .fd = ch->fd, .flags = link ? BE_F_LINK : 0};
    if (ch->form == FLUSH_SINGLE) {
        op.kind = BE_SYNC_FILE_RANGE;
        op.len = (uint32_t)n;
        op.off = ch->flight->base + ch->wr_from;
        op.arg = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
    }
    chan_submit(ch, &op, &ch->sync, sync_done);
    ch->cqes++;
}

/* Submits the flight buffer's [wr_from, wr_to) in the chosen form: a chain
 * of up to four operations (write, sync, slot, sync), reserved whole. */
void chan_submit_write(struct chan *ch, bool chain_ok)
{
    struct wal_buf *x = ch->flight;
    sched_io_reserve(ch->w, 4);
    size_t n = ch->wr_to - ch->wr_from;
    bool injected = take_fault(ch, &n) != 0;
    ch->wr_len = n;
    uint64_t p;
    ch->form = choose_form(ch, chain_ok && !injected, &p);
    bool sfr = ch->form == FLUSH_SINGLE && !ch->wal->o_direct; /* O_DIRECT: the write itself reached the device */
    bool dsync = ch->form == FLUSH_DSYNC;
    struct be_op op = {.kind = BE_WRITE, .fd = ch->fd, .addr = x->data + ch->wr_from, .len = (uint32_t)n,
                       .off = x->base + ch->wr_from,
                       .arg = dsync ? RWF_DSYNC : 0, /* the write and the fdatasync of its range: one request */
                       .flags = dsync ? 0 : BE_F_LINK}; /* else a sync, or the slot, follows */
    chan_submit(ch, &op, &ch->wr, wr_done);
    ch->cqes = 1;
    ch->sync.res = 0;
    ch->io_start_ns = urt_clock_ns();
    if (!dsync && (ch->form != FLUSH_SINGLE || sfr))
        submit_sync(ch, n, p != 0);
    if (p) {
        size_t end = records_end(x, p); /* this write's records of epochs <= p */
        /* None: every record of epochs <= p on this channel was made durable
         * by an earlier flush; the slot needs no condition. */
        uint64_t cond = ch->form == FLUSH_SINGLE && end > x->start ? x->base + end : 0;
        marker_chain_slot(ch, p, cond);
        if (ch->form == FLUSH_SINGLE)
            ch->cqes += 2; /* the whole chain is this flush */
    }
    wal_cnt_add(&ch->n_flushes, 1);
    sched_io_flush(ch->w);
}

/* ---- starting a flush --------------------------------------------------------------- */

/* The byte range of the gathering buffer this flush writes (with its
 * terminator; O_DIRECT: whole blocks from the buffer's start). After a
 * failed write the repair write went first (wal_fail.c). */
static void flush_range(struct chan *ch, struct wal_buf *x, size_t *from, size_t *to)
{
    *from = x->start;
    *to = x->len + WAL_TERMINATOR;
    if (ch->wal->o_direct) {
        *from = 0;
        *to = wal_align_up(*to, WAL_ALIGN);
    }
    memset(x->data + x->len, 0, *to - x->len);
}

/* Swap: the other buffer gathers from the block x ends in. */
static void swap_buffers(struct chan *ch, struct wal_buf *x)
{
    struct wal_buf *y = x == &ch->bufs[0] ? &ch->bufs[1] : &ch->bufs[0];
    size_t blk = x->len & ~(size_t)(WAL_ALIGN - 1);
    y->base = x->base + blk;
    y->len = y->start = x->len - blk;
    memcpy(y->data, x->data + blk, y->len);
    wal_buf_reset_batch(y);
    ch->gather = y;
    ch->flight = x;
    ch->st = CH_FLIGHT;
}

/* Puts the flight buffer back as the gathering one, the records gathered
 * since appended to it. Returns the stored commits it could not keep (no
 * memory: their records are dropped), statuses set to -ENOMEM. */
struct urt_commit *chan_unswap_buffers(struct chan *ch)
{
    struct wal_buf *x = ch->flight, *y = ch->gather;
    struct urt_commit *lost = NULL;
    size_t n = y->len - y->start;
    if (n && wal_buf_reserve(x, x->len + n + WAL_TERMINATOR + WAL_ALIGN)) {
        lost = y->wait_head;
        for (struct urt_commit *c = lost; c; c = c->priv.next)
            c->priv.status = -ENOMEM, c->priv.state = CS_RELEASE;
    } else if (n) {
        memcpy(x->data + x->len, y->data + y->start, n);
        x->len += n;
        x->max_epoch = y->n_recs ? y->max_epoch : x->max_epoch;
        if (!x->n_recs)
            x->min_epoch = y->min_epoch;
        x->n_recs += y->n_recs;
        if (y->wait_head) {
            if (x->wait_tail)
                x->wait_tail->priv.next = y->wait_head;
            else
                x->wait_head = y->wait_head;
            x->wait_tail = y->wait_tail;
        }
    }
    y->len = y->start;
    wal_buf_reset_batch(y);
    ch->gather = x;
    ch->flight = NULL;
    return lost;
}

/* The batch x goes now unless something holds it, and each holder starts
 * it later itself: a repair goes first (chan_repair_write; the records follow
 * at chan_written), a zero fill in flight over its range flushes when it
 * ends (EXT_BUSY_FLUSH_WAITS, wal_file.c), and a claim alone that another
 * channel's write took needs no write. Returns whether it goes, with the
 * range to write. */
static bool flush_goes(struct chan *ch, struct wal_buf *x, size_t *from, size_t *to)
{
    struct wal *wal = ch->wal;
    if (ch->st == CH_REPAIR_DUE) {
        chan_repair_write(ch); /* alone: the records gathered since go with the next write */
        return false;
    }
    flush_range(ch, x, from, to);
    uint64_t end_off = x->base + *to + (wal->dsync ? WAL_ALIGN : 0); /* room for a claim's block */
    if (ch->ext != EXT_IDLE && end_off > ch->x_off) {
        ch->ext = EXT_BUSY_FLUSH_WAITS; /* never write into a range being zero-filled */
        return false;
    }
    if (x->n_recs) {
        wal_fetch_max(&wal->epoch, x->max_epoch + 1); /* the epochs this write holds are closed */
        if (x->max_epoch > ch->seg_max_epoch)
            ch->seg_max_epoch = x->max_epoch;
    }
    ch->claim_p = marker_claim_append(ch, x); /* single_write: the marker this write makes true */
    if (!x->n_recs && !ch->claim_p)
        return false; /* a claim was wanted, another channel's took it */
    if (ch->claim_p)
        flush_range(ch, x, from, to);
    return true;
}

void chan_flush_now(struct chan *ch)
{
    assert(sched_self() == ch->w); /* rule 2: owner only */
    struct wal_buf *x = ch->gather;
    size_t from, to;
    if (!chan_has_work(ch) || !flush_goes(ch, x, &from, &to))
        return; /* the one exit: whoever holds the batch starts it (flush_goes) */
    uint64_t end_off = x->base + to;
    swap_buffers(ch, x);
    ch->wr_from = from;
    ch->wr_to = to;
    ch->flush_seq++;
    ch->flight_lsn = ch->lsn;
    ch->flush_start_ns = log_stamp();
    probe_flush((int)ch->index, ch->lsn, to - from);
    chan_submit_write(ch, x->n_recs != 0);
    chan_maybe_extend(ch, end_off);
}

/* ---- completing a flush ------------------------------------------------------------- */

/* Backpressure release: the write in flight ended, the held answers go out. */
void chan_release_held(struct chan *ch)
{
    struct urt_commit *list = ch->held_head;
    ch->held_head = ch->held_tail = NULL;
    delivery_list(&ch->wal->dl, ch->w, list);
}

static void flush_succeeded(struct chan *ch)
{
    struct wal_buf *x = ch->flight;
    wal_cnt_add(&ch->n_fsyncs, 1);
    wal_cnt_add(&ch->n_bytes, ch->wr_to - ch->wr_from);
    probe_durable((int)ch->index, ch->flight_lsn, ch->flush_start_ns, ch->flush_start_ns ? urt_clock_ns() : 0);
    struct urt_commit *waiters = x->wait_head;
    wal_buf_reset_batch(x);
    ch->flight = NULL;
    ch->form = FLUSH_NONE;
    ch->claim_p = 0;
    if (ch->st == CH_FLIGHT)
        ch->fails = 0; /* records were written: the next failure retries soon again */
    ch->st = ch->st == CH_REPAIR_FLIGHT ? CH_REPAIR_DUE : CH_IDLE; /* chan_written ends the repair */
    chan_written(ch, waiters, true);
}

/* What a durable write (flushed) or a repair that needed none leaves: the
 * failed range is harmless, the waiters go to delivery, pending_min is
 * raised (O1), the marker may advance, the next batch may go. */
void chan_written(struct chan *ch, struct urt_commit *waiters, bool flushed)
{
    struct wal *wal = ch->wal;
    struct wal_buf *y = ch->gather;
    if (ch->st == CH_REPAIR_DUE && ch->failed_head) {
        /* The failed claim write is overwritten, durably: its errors go out. */
        delivery_list(&wal->dl, ch->w, ch->failed_head);
        ch->failed_head = ch->failed_tail = NULL;
    }
    ch->st = CH_IDLE;
    ch->dirty_end = 0;
    chan_release_held(ch);
    atomic_store_explicit(&ch->pending_min, y->n_recs ? y->min_epoch : EPOCH_NONE,
                          memory_order_seq_cst); /* O1: pairs with the loads in marker_durable */
    delivery_waiters(&wal->dl, ch->w, waiters);
    if (flushed)
        ch->done_seq = ch->flush_seq;
    if (!wal->dsync)
        marker_after_flush(ch);
    chan_prepare_next(ch); /* past half the segment: the next file is made off the worker */
    if (chan_roll_due(ch))
        chan_roll(ch); /* the gathered records go to the next file */
    if (wal->dsync)
        marker_after_dsync(ch); /* the next flush claims the marker, or the epoch file takes it */
    y = ch->gather;
    if (y->wait_head || y->len - y->start >= WAL_FLUSH_BYTES || ch->want_claim)
        chan_flush_now(ch); /* pipelining: the batch that gathered behind this write (and the marker) */
    else if (y->n_recs)
        chan_arm_timer(ch);
}

/* Data written in part (or not synced): write the rest, with a sync of its own. */
static void write_again(struct chan *ch)
{
    size_t done = (size_t)(ch->wr.res > 0 ? ch->wr.res : 0);
    if (ch->wal->o_direct)
        done &= ~(size_t)511;
    if (done < ch->wr_to - ch->wr_from)
        ch->wr_from += done;
    chan_submit_write(ch, false);
}

/* The single-flush chain completed (all its CQEs are in). */
static void single_complete(struct chan *ch)
{
    size_t want = ch->wr_to - ch->wr_from;
    bool ok = ch->wr.res == (int32_t)want && ch->sync.res == 0 && ch->ewr.res == (int32_t)EPOCH_SLOT_SIZE &&
              ch->esync.res == 0;
    ch->ew = EW_IDLE;
    ch->eagain = false;
    if (ok) {
        marker_persisted(ch); /* the durability callback first, then earlier waiters */
        flush_succeeded(ch);  /* this write's waiters: covered now */
        return;
    }
    /* Something failed or was cancelled: the marker is written again once
     * the data is durable (marker_after_flush, epending). */
    if (ch->emarker > ch->epending)
        ch->epending = ch->emarker;
    if (ch->wr.res < 0)
        chan_flush_failed(ch, ch->wr.res);
    else
        write_again(ch); /* short, or written but durability unknown */
}

void chan_flush_complete(struct chan *ch)
{
    enum flush_form form = ch->form;
    ch->form = FLUSH_NONE;
    wal_poll_done(ch, form);
    if (form == FLUSH_SINGLE) {
        single_complete(ch);
        return;
    }
    size_t want = ch->wr_to - ch->wr_from;
    if (ch->wr.res < 0)
        chan_flush_failed(ch, ch->wr.res);
    else if (ch->sync.res < 0 && ch->sync.res != -ECANCELED)
        chan_flush_failed(ch, ch->sync.res);
    else if ((size_t)ch->wr.res < want || ch->sync.res == -ECANCELED)
        write_again(ch); /* a short write cancelled the linked sync: write the rest, synced */
#if URT_FAULT_INJECTION
    else if (ch->wr_err)
        chan_flush_failed(ch, ch->wr_err);
#endif
    else {
        if (ch->claim_p)
            marker_claim_durable(ch); /* the durability callback first, then earlier waiters */
        flush_succeeded(ch);
    }
}

static void wr_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, wr.io);
    ch->inflight--;
#if URT_FAULT_INJECTION
    if (ch->wr_fake_short && res > 1)
        res = ch->wal->o_direct ? (res / 2) & ~511 : res / 2; /* as if the kernel wrote less */
    if (ch->form == FLUSH_DSYNC)
        ch->wr_fake_short = false; /* no sync to cancel: the short write alone */
#endif
    ch->wr.res = res;
    if (--ch->cqes == 0)
        chan_flush_complete(ch);
}

static void sync_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, sync.io);
    ch->inflight--;
#if URT_FAULT_INJECTION
    if (ch->wr_fake_short) {
        ch->wr_fake_short = false;
        res = -ECANCELED; /* what a short write does to the linked sync */
    }
#endif
    ch->sync.res = res;
    if (--ch->cqes == 0)
        chan_flush_complete(ch);
}

/* ---- the flush task ---------------------------------------------------------------- */

/* The deferred flush of a stored commit: yields once, so that whatever is
 * runnable on this worker appends first and joins the same write. */
static enum urt_task_result flush_task_run(struct urt_task *t, void *arg)
{
    struct chan *ch = arg;
    if (sched_self() != ch->w) {
        /* Stolen (the deque is open to thieves): back to the owner, on its
         * sticky queue, which is never stolen. */
        sched_push_sticky(ch->w->s, ch->w, t);
        return URT_TASK_DONE;
    }
    if (ch->flush_task_state == FT_QUEUED) {
        ch->flush_task_state = FT_YIELDED;
        return URT_TASK_YIELD;
    }
    ch->flush_task_state = FT_IDLE;
    chan_flush_now(ch);
    return URT_TASK_DONE;
}

static void flush_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    ((struct chan *)arg)->flush_task_state = FT_IDLE;
}

static void request_flush(struct chan *ch)
{
    if (ch->flight || ch->flush_task_state != FT_IDLE)
        return; /* the running write's completion flushes this batch */
    ch->flush_task_state = FT_QUEUED;
    urt_task_init(&ch->flush_task, flush_task_run, ch);
    ch->flush_task.cancel = flush_task_cancel;
    sched_local_push(ch->w, &ch->flush_task);
}

/* ---- appending ------------------------------------------------------------------------ */

static void append_one(struct chan *ch, struct wal_buf *x, uint64_t e, uint64_t tx_id, const void *rec, uint32_t len,
                       bool last)
{
    uint8_t *d = x->data + x->len;
    wal_rec_encode_header(d, WAL_REC_COMMIT, e, tx_id, ++ch->lsn, len);
    if (last)
        wal_rec_set_flags(d, WAL_REC_F_END); /* recovery replays a commit only with its last record */
    if (len)
        memcpy(d + WAL_HDR_SIZE, rec, len);
    wal_rec_seal(d, len);
    x->len += wal_rec_size(len);
}

static size_t commit_bytes(const struct urt_commit *c)
{
    if (c->priv.len == WAL_TX_RECORDS) {
        const urt_tx *tx = tx_of_log_commit(c);
        size_t n = tx_record_count(tx);
        return tx_record_bytes(tx) + (n ? n : 1) * (WAL_HDR_SIZE + WAL_CRC_SIZE + 7);
    }
    return wal_rec_size(c->priv.len);
}

/* All records of a commit: one epoch, one channel, contiguous. */
static void append_records(struct chan *ch, struct wal_buf *x, const struct urt_commit *c, uint64_t e)
{
    if (c->priv.len != WAL_TX_RECORDS) {
        append_one(ch, x, e, c->priv.tx_id, c->priv.rec, c->priv.len, true);
        return;
    }
    const urt_tx *tx = tx_of_log_commit(c);
    size_t cursor = 0;
    uint32_t len, next_len = 0;
    const void *rec = tx_record_next(tx, &cursor, &len);
    if (!rec) {
        append_one(ch, x, e, c->priv.tx_id, NULL, 0, true); /* a commit without records still has a marker */
        return;
    }
    while (rec) {
        const void *next = tx_record_next(tx, &cursor, &next_len);
        append_one(ch, x, e, c->priv.tx_id, rec, len, next == NULL);
        rec = next;
        len = next_len;
    }
}

/* A1/A2 (O1): announce pending records, then read the epoch they belong to. */
static uint64_t open_epoch_for_append(struct wal *wal, struct chan *ch)
{
    if (atomic_load_explicit(&ch->pending_min, memory_order_relaxed) == EPOCH_NONE)
        atomic_store_explicit(&ch->pending_min, atomic_load_explicit(&wal->epoch, memory_order_seq_cst),
                              memory_order_seq_cst); /* A1: pairs with marker_durable (O1) */
    return atomic_load_explicit(&wal->epoch, memory_order_seq_cst); /* A2 */
}

static void link_commit(struct urt_commit **head, struct urt_commit **tail, struct urt_commit *c)
{
    c->priv.next = NULL;
    if (*tail)
        (*tail)->priv.next = c;
    else
        *head = c;
    *tail = c;
}

void chan_append_commit(struct wal *wal, struct worker *w, struct urt_commit *c, bool in_own_task)
{
    assert(w->index < wal->n_chan); /* wal.c routes commits to channel owners */
    struct chan *ch = wal->chans[w->index];
    assert(ch->w == w && sched_self() == w); /* rule 2: owner only */
    struct wal_buf *x = ch->gather;
    int err = wal_buf_reserve(x, x->len + commit_bytes(c) + WAL_TERMINATOR + WAL_ALIGN);
    if (err) {
        c->priv.status = err;
        delivery_one(w, c, in_own_task);
        return;
    }
    uint64_t e = open_epoch_for_append(wal, ch);
    append_records(ch, x, c, e);
    if (!x->n_recs)
        x->min_epoch = e;
    x->max_epoch = e;
    x->n_recs++;
    c->priv.marker = e;
    c->priv.status = 0;
    wal_cnt_add(&ch->n_commits, 1);
    if (c->priv.response == URT_COMMIT_STORED) {
        c->priv.state = CS_BATCH;
        link_commit(&x->wait_head, &x->wait_tail, c);
        request_flush(ch);
        return;
    }
    if (!ch->flight && x->len - x->start >= WAL_FLUSH_BYTES)
        request_flush(ch); /* bounded buffers without stored commits too */
    else if (!ch->flight)
        chan_arm_timer(ch);
    if ((ch->flight || ch->st == CH_REPAIR_WAIT) && x->len - x->start >= WAL_HOLD_BYTES) {
        /* Backpressure: the disk is behind (or failing); answer when the
         * next write ends instead of letting the buffer grow without bound. */
        c->priv.state = CS_RELEASE;
        link_commit(&ch->held_head, &ch->held_tail, c);
        return;
    }
    delivery_one(w, c, in_own_task);
}

/* ---- worker hooks --------------------------------------------------------------------- */

/* w's channel, or NULL: the worker hooks do nothing on a worker without one
 * (log_channels: its commits hop to one, wal.c). */
static struct chan *own_chan(const struct wal *wal, const struct worker *w)
{
    return w->index < wal->n_chan ? wal->chans[w->index] : NULL;
}

void wal_worker_start(struct wal *wal, struct worker *w)
{
    struct chan *ch = own_chan(wal, w);
    if (ch)
        ch->w = w;
    if (ch && wal->irq_cpu >= 0)
        sched_worker_bind_cpu(w, wal->irq_cpu); /* log_irq_affinity: set only with one channel (wal.c) */
}

bool wal_before_suspend(struct wal *wal, struct worker *w)
{
    struct chan *ch = own_chan(wal, w);
    if (!ch)
        return false;
    if (chan_has_work(ch))
        chan_flush_now(ch); /* an idle worker flushes before it suspends */
    return chan_poll_own_write(ch, w); /* else its suspension ends at the completion */
}

static void ignore_event(void *ctx, enum be_event ev, uint32_t arg)
{
    (void)ctx, (void)ev, (void)arg;
}

/* At most this many writes start in wal_worker_stop (a device that keeps
 * failing must not hold the destroy): what is still unflushed after them is
 * answered -ECANCELED by wal_close. */
#define STOP_FLUSHES 16

struct stop_drain {
    struct chan *ch;
    int flushes, rounds, eretries;
};

/* One round of the stop's drain: retry a failed own slot write, start what
 * the epoch timer would have started (bounded by STOP_FLUSHES). */
static void stop_step(void *arg)
{
    struct stop_drain *d = arg;
    struct chan *ch = d->ch;
    if (ch->eretry && ch->ew == EW_IDLE && d->eretries < STOP_FLUSHES) {
        ch->eretry = false;
        d->eretries++;
        marker_retry(ch); /* an own slot write that failed */
    }
    if (chan_has_work(ch) && d->flushes < STOP_FLUSHES) {
        chan_flush_now(ch); /* may start nothing: an extension in flight flushes at its end */
        d->flushes += ch->flight != NULL; /* count writes, not attempts */
    }
}

static bool stop_more(void *arg)
{
    struct stop_drain *d = arg;
    struct chan *ch = d->ch;
    bool more = (chan_has_work(ch) && d->flushes < STOP_FLUSHES) || (ch->eretry && d->eretries < STOP_FLUSHES);
    return (ch->inflight || more) && d->rounds++ < 100000;
}

void wal_worker_stop(struct wal *wal, struct worker *w)
{
    struct chan *ch = own_chan(wal, w);
    if (!ch)
        return;
    /* Write what this channel holds, also what gathers behind a write in
     * flight, and wait for every operation of ours: the buffers must outlive the
     * kernel's use of them (rule 3). From here the epoch timer, extension
     * and rollover start nothing (stopping): every write starts in this loop,
     * so STOP_FLUSHES bounds them all (a cancelled timer that flushed would
     * escape the count). The marker follows as usual: the last flush to
     * complete over all channels finds D past target and writes it. */
    ch->stopping = true;
    if (ch->timer_armed)
        sched_timer_cancel(w, &ch->io_t); /* timer_done: nothing while stopping */
    if (ch->retry_armed)
        sched_timer_cancel(w, &ch->io_r); /* retry_done: nothing while stopping */
    if (ch->st == CH_REPAIR_WAIT)
        ch->st = CH_REPAIR_DUE; /* this loop retries, bounded */
    struct stop_drain d = {.ch = ch};
    be_drain(&w->be, 10 * 1000 * 1000, stop_step, stop_more, &d, ignore_event, NULL); /* the backend's one drain */
}
