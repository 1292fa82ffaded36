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
 * When the slot is durable, persisted = D and delivery runs (wal_deliver.c).
 * A chained slot that failed or was cancelled with its log write is written
 * again once that log write is durable (epending, marker_after_flush); an own
 * slot write that failed is written again at once, in the next slot.
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
    uint64_t t = atomic_load_explicit(&wal->target, memory_order_relaxed);
    while (p > t)
        if (atomic_compare_exchange_weak_explicit(&wal->target, &t, p, memory_order_seq_cst,
                                                  memory_order_relaxed)) /* O2 */
            return p;
    return 0;
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

/* slot(m; condition end) -> fdatasync(epochs) on ch's ring (room reserved):
 * the one way a marker goes to the epoch file, alone or chained. */
static void prep_slot_pair(struct chan *ch, uint64_t m, uint64_t end)
{
    struct wal *wal = ch->wal;
    ch->emarker = m;
    marker_encode_slot(ch, m, end);
    struct io_uring_sqe *sqe = sched_io_sqe(ch->w);
    io_uring_prep_write(sqe, wal->epochfd, ch->eslot, EPOCH_SLOT_SIZE, marker_next_slot_offset(wal));
    chan_bind(ch, sqe, &ch->ewr, ewr_done, true);
    sqe = sched_io_sqe(ch->w);
    io_uring_prep_fsync(sqe, wal->epochfd, IORING_FSYNC_DATASYNC);
    chan_bind(ch, sqe, &ch->esync, esync_done, false);
}

/* slot -> fdatasync(epochs), after the data it covers is durable (no condition). */
static void write_own(struct chan *ch, uint64_t m)
{
    if (sched_io_reserve(ch->w, 2)) {
        ch->eagain = true; /* the ring is full: look again at the next completion */
        return;
    }
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
    uint64_t t = atomic_load_explicit(&wal->target, memory_order_relaxed);
    while (d > t) {
        if (atomic_compare_exchange_weak_explicit(&wal->target, &t, d, memory_order_seq_cst, memory_order_relaxed)) {
            write_own(ch, d);
            return;
        }
    }
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
        wal_cnt_add(&ch->n_errors, 1); /* not durable: write the marker again (a later slot) */
        write_own(ch, ch->emarker);
        return;
    }
    if (ch->eagain) {
        ch->eagain = false;
        marker_advance(ch);
    }
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

/* ---- the file ------------------------------------------------------------------------- */

int marker_open_epoch_file(struct wal *wal, const char *dir, uint32_t next_slot, char *err, size_t errlen)
{
    wal->epochfd = openat(wal->dirfd, "epochs", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (wal->epochfd < 0) {
        snprintf(err, errlen, "log_dir %s: cannot open the epoch file: %s", dir, strerror(errno));
        return -errno;
    }
    struct stat st;
    if (fstat(wal->epochfd, &st))
        return -errno;
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
        if (rc) {
            snprintf(err, errlen, "log_dir %s: cannot prepare the epoch file: %s", dir, strerror(-rc));
            return rc;
        }
    }
    atomic_init(&wal->eslot_next, next_slot);
    return 0;
}
