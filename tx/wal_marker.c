/*
 * tx/wal_marker.c — the durable marker and the epoch file (SPEC C12, C14).
 *
 * D, the durable marker: every record of every epoch <= D is on stable
 * storage on every channel.
 *     D = min(E - 1, min over channels holding unflushed records of
 *                    (their lowest unflushed epoch - 1))
 * (marker_durable; O1 of wal.c). It is made durable in the epoch file
 * (format: wal_format.h) before anyone hears of it:
 *   - chained behind the log write that D waits for (marker_claim_for_write,
 *     then wal_chan.c builds the chain: FLUSH_STRICT, or FLUSH_SINGLE with a
 *     conditional slot), or
 *   - by the channel whose flush completed, in a slot write of its own
 *     (EW_OWN: slot -> fdatasync(epochs)) when D passed `target`.
 * When the slot is durable, persisted = D and delivery runs (delivery.c).
 *
 * log_sync single_write (wal_sync.c): every flush is one O_DIRECT write with
 * RWF_DSYNC, and the flush that D waits for carries the marker itself, as a
 * claim record after its records (format: wal_format.h; marker_claim_append):
 * p = D as it will be once this write is durable = D computed without this
 * channel (every other channel's records of epochs <= p are durable already,
 * O1, and E has passed this write's epochs, so no new record <= p appears).
 * When the write completes, persisted = p (marker_claim_durable): one device
 * write and one flush, no epoch-file write. When a completion moves D past
 * target and the channel's next flush can claim (preallocated room), that
 * flush carries it, at once, with what gathered or alone (marker_after_dsync,
 * want_claim); where it cannot, the epoch file takes it (EW_OWN). A claim
 * write that failed may still be on disk: its commits' errors are held until
 * the repair write over its range is durable (wal_chan.c), and its marker
 * (epending) is claimed again by the repair's successor.
 * A chained slot that failed or was cancelled with its log write is written
 * again once that log write is durable (epending, marker_after_flush); an own
 * slot write that failed is written again in the next slot after a back-off
 * (wal_chan.c chan_back_off, marker_retry).
 *
 * Ordering: target and persisted only grow (CAS max, seq_cst: O2); the
 * channel's epoch-write state is owner-only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "tx/wal_int.h"

/* ---- D -------------------------------------------------------------------------------- */

/* D, leaving out channel `skip` (NULL: none): what D will be once skip's
 * write in preparation is durable, if nothing else changes. */
static uint64_t durable_without(struct wal *wal, const struct chan *skip)
{
    uint64_t d = atomic_load_explicit(&wal->epoch, memory_order_seq_cst) - 1; /* O1: pairs with A2 */
    for (uint32_t i = 0; i < wal->n_chan; i++) {
        const struct chan *c = wal->chans[i];
        if (c == skip)
            continue;
        uint64_t pm = atomic_load_explicit(&c->pending_min, memory_order_seq_cst); /* O1: pairs with A1 */
        if (pm != EPOCH_NONE && pm - 1 < d)
            d = pm - 1;
    }
    return d;
}

uint64_t marker_durable(struct wal *wal)
{
    return durable_without(wal, NULL);
}

uint64_t marker_claim_for_write(struct wal *wal, const struct chan *ch)
{
    uint64_t p = durable_without(wal, ch);
    return wal_fetch_max(&wal->target, p) ? p : 0; /* O2 */
}

/* ---- slots ---------------------------------------------------------------------------- */

static void marker_encode_slot(struct chan *ch, uint64_t m, uint64_t end)
{
    struct wal_epoch_slot es = {.marker = m};
    if (end) {
        es.gen = ch->wal->gen | ((uint64_t)ch->seg << WAL_SLOT_SEG_SHIFT);
        es.worker = (uint16_t)ch->index;
        es.end = end;
    }
    wal_epoch_slot_encode(ch->eslot, &es);
}

static uint64_t marker_next_slot_offset(struct wal *wal)
{
    uint64_t slot = atomic_fetch_add_explicit(&wal->eslot_next, 1, memory_order_relaxed) % EPOCH_SLOTS;
    return slot * EPOCH_SLOT_SIZE;
}

static void ewr_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void esync_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);

/* slot(m; condition end) -> fdatasync(epochs) on ch's worker (room reserved):
 * the one way a marker goes to the epoch file, alone or chained. */
static void prep_slot_pair(struct chan *ch, uint64_t m, uint64_t end)
{
    struct wal *wal = ch->wal;
    ch->emarker = m;
    marker_encode_slot(ch, m, end);
    struct be_op wr = {.kind = BE_WRITE, .fd = wal->epochfd, .addr = ch->eslot, .len = EPOCH_SLOT_SIZE,
                       .off = marker_next_slot_offset(wal), .flags = BE_F_LINK};
    chan_submit(ch, &wr, &ch->ewr, ewr_done);
    struct be_op sync = {.kind = BE_FDATASYNC, .fd = wal->epochfd};
    chan_submit(ch, &sync, &ch->esync, esync_done);
}

/* slot -> fdatasync(epochs), after the data it covers is durable (no condition). */
static void write_own(struct chan *ch, uint64_t m)
{
    sched_io_reserve(ch->w, 2);
    ch->ew = EW_OWN;
    prep_slot_pair(ch, m, 0);
    ch->ecqes = 2;
    sched_io_flush(ch->w);
}

void marker_advance(struct chan *ch)
{
    struct wal *wal = ch->wal;
    if (ch->ew != EW_IDLE) {
        ch->eagain = true;
        return;
    }
    uint64_t d = marker_durable(wal);
    if (wal_fetch_max(&wal->target, d)) /* O2 */
        write_own(ch, d);
}

void marker_after_flush(struct chan *ch)
{
    if (!ch->epending || ch->ew != EW_IDLE) {
        marker_advance(ch);
        return;
    }
    uint64_t m = marker_durable(ch->wal);
    if (m < ch->epending)
        m = ch->epending;
    ch->epending = 0;
    wal_fetch_max(&ch->wal->target, m);
    write_own(ch, m);
}

void marker_persisted(struct chan *ch)
{
    wal_cnt_add(&ch->n_epoch_writes, 1);
    wal_fetch_max(&ch->wal->dl.persisted, ch->emarker); /* O2: before the releaser takes heap_lock */
    delivery_durable(&ch->wal->dl, ch->w);
}

/* ---- completions ---------------------------------------------------------------------- */

static void own_complete(struct chan *ch)
{
    bool chained = ch->ew == EW_CHAINED;
    ch->ew = EW_IDLE;
    if (ch->ewr.res == (int32_t)EPOCH_SLOT_SIZE && ch->esync.res == 0) {
        marker_persisted(ch);
    } else if (chained && ch->done_seq < ch->echain_seq) {
        /* Cancelled with (or failed behind) its log write: the marker may
         * only be written once that log write is durable (marker_after_flush). */
        if (ch->emarker > ch->epending)
            ch->epending = ch->emarker;
    } else {
        wal_cnt_add(&ch->n_errors, 1); /* not durable: written again after a back-off (a later slot) */
        chan_back_off(ch, true);
        return;
    }
    if (ch->eagain) {
        ch->eagain = false;
        marker_advance(ch);
    }
}

void marker_retry(struct chan *ch)
{
    uint64_t m = ch->emarker;
    if (ch->ew != EW_IDLE) {
        /* A chained slot is on its way (a later marker); should it fail, m
         * goes after the next durable log write (marker_after_flush). */
        if (m > ch->epending)
            ch->epending = m;
        return;
    }
    if (atomic_load_explicit(&ch->wal->dl.persisted, memory_order_relaxed) >= m) {
        /* Covered: another slot or claim made a later marker durable. */
        if (ch->eagain) {
            ch->eagain = false;
            marker_advance(ch);
        }
        return;
    }
    write_own(ch, m);
}

void marker_epoch_cqe(struct chan *ch)
{
    ch->inflight--;
    if (ch->form == FLUSH_SINGLE && ch->ew == EW_CHAINED) {
        if (--ch->cqes == 0)
            chan_flush_complete(ch); /* the whole chain is the flush */
        return;
    }
    if (--ch->ecqes == 0)
        own_complete(ch);
}

static void ewr_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, ewr.io);
    ch->ewr.res = res;
    marker_epoch_cqe(ch);
}

static void esync_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CHAN_OF(io, esync.io);
    ch->esync.res = res;
    marker_epoch_cqe(ch);
}

void marker_chain_slot(struct chan *ch, uint64_t m, uint64_t end)
{
    ch->ew = EW_CHAINED;
    ch->echain_seq = ch->flush_seq;
    prep_slot_pair(ch, m, end);
    if (ch->form != FLUSH_SINGLE)
        ch->ecqes = 2; /* FLUSH_STRICT: its own completion; FLUSH_SINGLE: counted in the flush's cqes */
}

/* ---- claims (log_sync single_write) ---------------------------------------------------- */

#define CLAIM_BYTES wal_rec_size(WAL_MARKER_PAYLOAD)

/* A claim after x's records, and the whole blocks an O_DIRECT write of them
 * covers, lie in preallocated, zero-filled space. */
static bool claim_room(const struct chan *ch, const struct wal_buf *x)
{
    size_t to = wal_align_up(x->len + CLAIM_BYTES + WAL_TERMINATOR, WAL_ALIGN);
    return x->base + to <= ch->prealloc_end;
}

/* The marker ch may claim for its write in preparation: D once that write is
 * durable (every other channel's records of epochs <= it are durable already:
 * their pending_min passed it, O1), if it passes target (then target := it,
 * O2), or if it covers a marker a failed write of ch claimed (epending: target
 * passed that marker already, nobody else writes it). 0: no claim. */
static uint64_t claim_marker(struct chan *ch)
{
    struct wal *wal = ch->wal;
    uint64_t p = durable_without(wal, ch);
    bool owed = ch->epending && p >= ch->epending;
    bool raised = wal_fetch_max(&wal->target, p); /* O2 */
    return raised || owed ? p : 0;
}

uint64_t marker_claim_append(struct chan *ch, struct wal_buf *x)
{
    ch->want_claim = false;
    if (!ch->wal->dsync || chan_repairing(ch) || !claim_room(ch, x) ||
        wal_buf_reserve(x, x->len + CLAIM_BYTES + WAL_TERMINATOR + WAL_ALIGN))
        return 0;
    uint64_t p = claim_marker(ch);
    if (!p)
        return 0;
    /* Its epoch is never below p (a recovery that does not reach p cuts it)
     * nor below any record before it (epochs never decrease along a file). */
    uint64_t e = p > ch->seg_max_epoch ? p : ch->seg_max_epoch;
    wal_rec_encode(x->data + x->len, WAL_REC_MARKER, e, 0, ++ch->lsn, &p, WAL_MARKER_PAYLOAD);
    x->len += CLAIM_BYTES;
    ch->seg_max_epoch = e;
    if (p >= ch->epending)
        ch->epending = 0;
    return p;
}

void marker_after_dsync(struct chan *ch)
{
    struct wal *wal = ch->wal;
    if (!claim_room(ch, ch->gather)) {
        marker_after_flush(ch); /* appending past the preallocation: the epoch file takes it */
        return;
    }
    /* Relaxed: a hint only. target only grows, so an old value is lower and
     * never hides a marker to claim; it may ask for a flush whose claim then
     * finds nothing (claim_marker's CAS decides, O2). */
    if (ch->epending || marker_durable(wal) > atomic_load_explicit(&wal->target, memory_order_relaxed))
        ch->want_claim = true; /* the next flush (at once: wal_chan.c) carries it */
}

void marker_claim_durable(struct chan *ch)
{
    wal_cnt_add(&ch->n_claims, 1);
    wal_fetch_max(&ch->wal->dl.persisted, ch->claim_p); /* O2: before the releaser takes heap_lock */
    delivery_durable(&ch->wal->dl, ch->w);
}

/* ---- the file ------------------------------------------------------------------------- */

int marker_open_epoch_file(struct wal *wal, const char *dir, uint32_t next_slot)
{
    wal->epochfd = openat(wal->dirfd, "epochs", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (wal->epochfd < 0) {
        int e = errno;
        return urt__error(-e, "log_dir %s: cannot open the epoch file: %s%s", dir, strerror(e), wal_full_hint(-e));
    }
    struct stat st;
    if (fstat(wal->epochfd, &st))
        return -errno;
    if (st.st_size == 0)
        wal_sync_nocow_epochs(&wal->sync, wal->epochfd); /* btrfs: rewritten in place by recovery */
    size_t want = (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE;
    if ((size_t)st.st_size < want) {
        /* Preallocate with real zeros: slot writes then overwrite allocated blocks. */
        void *z = calloc(1, want - (size_t)st.st_size);
        if (!z)
            return -ENOMEM;
        int rc = wal_write_all(wal->epochfd, z, want - (size_t)st.st_size, (uint64_t)st.st_size);
        free(z);
        if (!rc && fdatasync(wal->epochfd))
            rc = -errno;
        if (rc)
            return urt__error(rc, "log_dir %s: cannot prepare the epoch file: %s%s", dir, strerror(-rc),
                              wal_full_hint(rc));
    }
    atomic_init(&wal->eslot_next, next_slot);
    return 0;
}
