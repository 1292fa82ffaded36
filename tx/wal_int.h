/*
 * tx/wal_int.h — the log's private objects, shared by its three parts:
 *
 *   wal_chan.c     channel and flush: a worker's buffers, appending records,
 *                  the write and its sync on the worker's ring, preallocation,
 *                  the epoch timer, the worker hooks; a failed write, its
 *                  repair and the retries in wal_fail.c;
 *   wal_marker.c   durable marker and epoch file: what D is, which slot says
 *                  so, the epoch-file writes and their completions;
 *   delivery.c     delivery: waiting stored commits in a heap, released in
 *                  marker order after the engine heard of the marker; the
 *                  answers of accepted/available commits (shared with an
 *                  engine's own durability source, tx/durability.c);
 *   wal.c          the whole: open and close, the commit entry (wal_commit,
 *                  the hop of a commit from a foreign thread), the
 *                  transaction seam, statistics.
 *
 * Ordering contract (O1–O3) and lifecycle rules: wal.c's header.
 */
#ifndef URT_TX_WAL_INT_H
#define URT_TX_WAL_INT_H

#include <errno.h>
#include <pthread.h>
#include <sys/types.h>
#include <stdalign.h>
#include <stdatomic.h>

#include <urt/blocking.h>

#include "base/clock.h"
#include "sched/core/io.h"
#include "tx/commit_hook.h"
#include "tx/delivery.h"
#include "tx/wal.h"
#include "tx/wal_format.h"
#include "tx/wal_sync.h"

#define WAL_ALIGN 4096u
#define WAL_FLUSH_BYTES (1u << 20) /* a gathering buffer this full is written without waiting for the timer */
#define WAL_HOLD_BYTES (16u << 20) /* past this (a write in flight), accepted/available answers wait for it */
/* The preallocation is extended ahead of the data in steps of this size
 * (wal_file.c): the device serves a flush queued behind a zero fill only
 * after it, so a step bounds what a flush waits for (a 2 MB step, half the
 * default preallocation, held 1-2 % of the durable commits of a busy
 * channel up by about a millisecond). */
#define WAL_EXT_PIECE (256u << 10)
/* A checkpointed segment is truncated in steps of this size before it is
 * unlinked (wal_seg.c, seg_unlink): what one journal commit frees. */
#define WAL_DELETE_STEP (4u << 20)
#define EPOCH_NONE UINT64_MAX
/* priv.len of a commit whose records come from a transaction (the commit
 * embedded in it: tx_of_log_commit). */
#define WAL_TX_RECORDS UINT32_MAX


/* The form of the flush in flight (submit_write). */
enum flush_form {
    FLUSH_NONE = 0,
    FLUSH_PLAIN,  /* write -> fdatasync(log)                                  */
    FLUSH_STRICT, /* write -> fdatasync(log) -> slot -> fdatasync(epochs): the
                     flush ends with the first two CQEs, the epoch write with
                     the last two                                              */
    FLUSH_SINGLE, /* write -> sync_file_range (not with O_DIRECT) -> slot ->
                     fdatasync(epochs): the flush ends with the last CQE       */
    FLUSH_DSYNC,  /* one O_DIRECT write with RWF_DSYNC (log_sync single_write),
                     ending with a claim when ch->claim_p != 0 (single_write
                     may also use PLAIN on its O_DIRECT file, with a claim:
                     wal_poll.c chan_dsync_form)                               */
};

/* The channel's epoch-file write. */
enum epoch_write {
    EW_IDLE = 0,
    EW_OWN,     /* slot -> fdatasync(epochs), after the data was durable      */
    EW_CHAINED, /* behind this channel's log write (FLUSH_STRICT or _SINGLE)  */
};

/* The channel's write path: one state, its transitions in wal_chan.c's
 * header. ch->flight is the buffer being written in the two FLIGHT states,
 * NULL in the others; a repair is due in the last three. */
enum chan_state {
    CH_IDLE = 0,      /* nothing in flight: the next flush writes the gathered records */
    CH_FLIGHT,        /* a write of records (or a claim) in flight */
    CH_REPAIR_WAIT,   /* a write failed: its range is undone after the retry timer (io_r) */
    CH_REPAIR_DUE,    /* the next flush is the repair (zeros, or a truncation) */
    CH_REPAIR_FLIGHT, /* the repair write in flight */
};

/* The deferred flush task of a stored commit. */
enum flush_task_state { FT_IDLE = 0, FT_QUEUED, FT_YIELDED };

/* Preallocation extension (zero fill ahead of the data). */
enum extend_state { EXT_IDLE = 0, EXT_BUSY, EXT_BUSY_FLUSH_WAITS };

struct wal_buf {
    uint8_t *data;
    size_t cap;
    uint64_t base;   /* file offset of data[0] (multiple of WAL_ALIGN) */
    size_t start;    /* first byte of this batch (before: carried partial block) */
    size_t len;      /* end of the records */
    uint64_t min_epoch, max_epoch;
    uint32_t n_recs;
    struct urt_commit *wait_head, *wait_tail; /* stored commits of this batch */
};

/* An I/O pair or chain's results, counted down as the CQEs come in. */
struct chan_io {
    struct sched_io io;
    int32_t res;
};

struct chan {
    struct wal *wal;
    struct worker *w;
    uint32_t index;
    int fd;
    char name[64];
    uint32_t seg;               /* segment number of the file being written (0: the first) */
    uint64_t seg_max_epoch;     /* largest epoch written to it (owner only) */

    alignas(64) _Atomic uint64_t pending_min; /* O1 */
    _Atomic uint64_t n_fsyncs, n_flushes, n_bytes, n_commits, n_errors, n_epoch_writes, n_claims; /* O3 */

    alignas(64) struct wal_buf bufs[2];
    struct wal_buf *gather, *flight;
    uint64_t lsn;
    uint32_t inflight;          /* our operations whose completion is still to come (rule 3) */
    enum chan_state st;         /* the write path (wal_chan.c's header) */
    bool stopping;              /* wal_worker_stop runs: the epoch timer, preallocation
                                   and rollover start nothing (its loop does the writes) */
    uint64_t dirty_end;         /* a repair undoes up to here at least (file offset) */
    bool repair_truncate;       /* a repair write failed for want of space: the next truncates */
    bool eretry;                /* an own epoch-slot write failed: written again at the retry */
    bool retry_armed;           /* io_r is armed */
    uint32_t fails;             /* failed writes (log or slot) since the last records were written */
    struct sched_io io_r;       /* the retry timer (chan_back_off) */

    struct urt_task flush_task;
    enum flush_task_state flush_task_state;
    struct urt_commit *held_head, *held_tail; /* backpressure: answers held until the write in flight ends */

    /* the flush in flight */
    enum flush_form form;
    uint64_t claim_p;           /* the marker claimed by the flight's claim record (0: none) */
    bool want_claim;            /* single_write: the marker passed target; the next flush claims it */
    struct urt_commit *failed_head, *failed_tail; /* -errno answers of a failed claim write, held
                                   until the repair write over its range is durable */
    uint64_t io_start_ns;       /* polling (wal_poll): when the log I/O in flight was submitted */
    uint64_t io_ewma_ns;        /* ... and how long this channel's recent log I/O took */
    uint32_t poll_skip;         /* writes left without polling (the CPU was contended) */
    uint64_t form_ewma_ns[2];   /* single_write: recent time of RWF_DSYNC writes, of write+fdatasync */
    uint32_t form_writes;       /* ... writes so far (every 32nd tries the other form) */
    struct chan_io wr, sync;    /* log write + its fdatasync / sync_file_range */
    uint32_t cqes;              /* CQEs still to come for the flush */
    size_t wr_from, wr_to, wr_len;
#if URT_FAULT_INJECTION
    int32_t wr_err;             /* report this -errno at completion */
    bool wr_fake_short;         /* a short write that cancelled the sync */
#endif
    uint64_t flight_lsn, flush_start_ns; /* probes: the flush's last lsn and start stamp */
    uint64_t flush_seq, done_seq;

    struct sched_io io_t;       /* epoch timer */
    bool timer_armed;

    /* the epoch-file write (wal_marker.c) */
    enum epoch_write ew;
    struct chan_io ewr, esync;  /* slot write + fdatasync(epochs) */
    uint32_t ecqes;             /* CQEs still to come (EW_OWN, or EW_CHAINED in FLUSH_STRICT) */
    bool eagain;                /* the marker advanced while a write was busy: look again after it */
    uint64_t emarker;
    uint64_t epending;          /* a chained epoch write failed: write it after the log write is durable */
    uint64_t echain_seq;        /* flush_seq of the log write it was chained behind */
    alignas(16) uint8_t eslot[EPOCH_SLOT_SIZE];

    /* preallocation extension */
    enum extend_state ext;
    struct chan_io xwr, xsync;
    uint32_t xcqes;
    uint64_t x_off, prealloc_end;
    uint32_t x_len; /* the zero fill in flight: [x_off, x_off + x_len) */

    /* the next segment file, made ready on a blocking pool thread (wal_seg.c) */
    bool nx_busy;               /* an offload is out, or its file waits for the roll (owner only) */
    struct urt_blocking nx_b;
    _Atomic int64_t nx_res;     /* NX_PENDING until the continuation stores the fd or -errno */
    uint64_t nx_zeros;          /* zeros the file holds from offset 0 (its preallocation) */
    char nx_name[64];
};

struct wal {
    struct sched *s;
    const struct urt_config *cfg;
    uint32_t n_chan;
    struct chan **chans;
    int dirfd, lockfd, epochfd;
    uint64_t gen;
    bool o_direct;
    size_t chunk;              /* log_prealloc_kb / 2: the creation's and a catch-up's zero fill (0: none) */
    size_t piece;              /* a step of the extension ahead of the data (WAL_EXT_PIECE, at most chunk) */
    uint8_t *zeros;            /* chunk zero bytes, aligned */
    uint64_t epoch_ns;
    struct wal_sync_choice sync; /* strict, single_flush or single_write, and why (wal_sync.c) */
    bool single_ok;            /* single-flush chains allowed (sync.mode) */
    bool dsync;                /* single_write: every flush is one O_DIRECT|RWF_DSYNC write */
    uint64_t poll_cap_ns;      /* log_poll_us */
    int irq_cpu;               /* log_irq_affinity, one channel only: the CPU of the device's
                                  interrupts, or -1 (wal_irq.c) */

    alignas(64) _Atomic uint64_t epoch;   /* E, the open epoch */
    alignas(64) _Atomic uint64_t target;  /* O2 */
    _Atomic uint64_t eslot_next;
#if URT_FAULT_INJECTION
    _Atomic int inject_next;        /* test builds only (-Dfault_injection=true) */
#endif

    struct delivery dl;             /* persisted, announced, the heap, on_durable (delivery.c) */

    struct tx_log txlog;            /* registered with tx_log_register (runtime/log.c) */
    uint64_t seg_bytes;             /* log_segment_kb in bytes */

    /* closed segment files (a worker adds at rollover, urt_log_checkpoint removes) */
    pthread_mutex_t seg_lock;
    struct closed_seg *closed;
    size_t n_closed, cap_closed;
    pthread_mutex_t ckpt_lock;      /* one checkpoint at a time */
    _Atomic uint64_t checkpoint;

};

/* ---- small shared helpers ------------------------------------------------------------ */

/* The end of a start-up error message for want of space: what to do
 * (short: urt_last_error() keeps 255 bytes, the path comes first). */
static inline const char *wal_full_hint(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT
               ? " (free space on the device or lower log_prealloc_kb; the log is intact, urt_log_recover replays it)"
               : "";
}

/* *a := max(*a, v) (seq_cst CAS: O2's target and persisted, E); whether
 * this call raised it (a marker raised into target is this caller's to write). */
static inline bool wal_fetch_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_seq_cst, memory_order_relaxed))
        ;
    return cur < v;
}

static inline void wal_cnt_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static inline size_t wal_align_up(size_t v, size_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* One operation of ch's (a chain's member after sched_io_reserve): done
 * runs at its completion; counted in ch->inflight (rule 3). */
static inline void chan_submit(struct chan *ch, const struct be_op *op, struct chan_io *x, sched_io_done_fn *done)
{
    sched_io_submit(ch->w, op, &x->io, done);
    ch->inflight++;
}

/* A write failed and its range is not undone yet (the durable marker stays
 * below the failed epochs). */
static inline bool chan_repairing(const struct chan *ch)
{
    return ch->st >= CH_REPAIR_WAIT;
}

#define CHAN_OF(p, field) ((struct chan *)((char *)(p) - offsetof(struct chan, field)))

static inline void wal_buf_reset_batch(struct wal_buf *b)
{
    b->min_epoch = b->max_epoch = 0;
    b->n_recs = 0;
    b->wait_head = b->wait_tail = NULL;
}

/* ---- wal_poll.c ---------------------------------------------------------------------- */
/* A flush's I/O ended: its time feeds the polling budget and the form choice. */
void wal_poll_done(struct chan *ch, enum flush_form form);
/* The worker would suspend: poll instead (true) while ch's write is in flight. */
/* wal_irq.c: the one CPU that takes the interrupts of the device under dirfd
 * (or of dev, below the given sysfs root and /proc/interrupts file), or -1. */
int wal_irq_cpu(int dirfd);
int wal_irq_cpu_at(const char *sys, const char *proc_interrupts, dev_t dev);
bool chan_poll_own_write(struct chan *ch, struct worker *w);
/* single_write: the form of the next write (FLUSH_DSYNC or FLUSH_PLAIN). */
enum flush_form chan_dsync_form(struct chan *ch);

/* ---- wal_chan.c ---------------------------------------------------------------------- */
int wal_buf_reserve(struct wal_buf *b, size_t need);
/* Block 0 of a channel file (WAL_ALIGN bytes): its header record, then zeros. */
void wal_header_block(uint8_t *block, uint64_t gen, uint32_t worker, uint64_t start_epoch, uint64_t lsn);
void chan_append_commit(struct wal *wal, struct worker *w, struct urt_commit *c, bool in_own_task);
void chan_flush_now(struct chan *ch);
void chan_flush_complete(struct chan *ch);
/* Something to write and nothing stops it (no write in flight, no back-off). */
bool chan_has_work(const struct chan *ch);
/* The epoch timer (epoch_duration_us), if not armed yet. */
void chan_arm_timer(struct chan *ch);
/* Submits the flight buffer's [wr_from, wr_to) (never refused: the
 * backend's full-queue policy, sched/core/io.h rule 7). */
void chan_submit_write(struct chan *ch, bool chain_ok);
/* The flight buffer back as the gathering one (the records gathered since
 * appended); returns the stored commits it could not keep (-ENOMEM). */
struct urt_commit *chan_unswap_buffers(struct chan *ch);
/* The answers held by backpressure go out. */
void chan_release_held(struct chan *ch);
/* A write of ch is durable (flushed), or a repair needed none: waiters to
 * delivery, pending_min raised, the marker, the next batch. */
void chan_written(struct chan *ch, struct urt_commit *waiters, bool flushed);

/* ---- wal_fail.c ---------------------------------------------------------------------- */
/* The flush in flight failed with err (its stored commits get it). */
void chan_flush_failed(struct chan *ch, int err);
/* After a failed write: what it may have left undone (zeros over it inside
 * the preallocation, else a truncation), no new blocks. */
void chan_repair_write(struct chan *ch);
/* A write of ch failed (its log write, or with epoch an own slot write):
 * the next attempt waits for the retry timer, 1 ms doubling to 128 ms per
 * failure in a row. */
void chan_back_off(struct chan *ch, bool epoch);

/* Where a file's zeros end at most: a piece past log_segment_kb, where the
 * file rolls over (after the flush that passes it), so a small segment
 * carries no more zeros than it can use (recovery reads them all). Used by
 * the extension (wal_file.c) and by the next segment's first zeros
 * (wal_seg.c). */
static inline uint64_t wal_prealloc_cap(const struct wal *wal)
{
    return wal->seg_bytes ? wal_align_up(wal->seg_bytes + wal->piece, WAL_ALIGN) : UINT64_MAX;
}

/* ---- wal_file.c ---------------------------------------------------------------------- */
int chan_create(struct wal *wal, struct chan *ch, const char *dir, uint64_t start_epoch);
/* After a flush to end_off was submitted: zero-fill the next piece on the
 * ring when less than log_prealloc_kb minus a piece is left ahead of the
 * data (a chunk at once when the data is within a piece of the end). */
void chan_maybe_extend(struct chan *ch, uint64_t end_off);

/* A segment ready for checkpoint deletion: all its records are at or below max_epoch. */
struct closed_seg {
    char name[64]; /* as chan.name: ch-<gen:16>-<worker:4>[-<seg:6>].wal */
    uint64_t max_epoch;
};

/* ---- wal_seg.c ----------------------------------------------------------------------- */
/* The continuation has not stored the next segment's result yet. */
#define NX_PENDING INT64_MIN

/* After a flush completed: the file passed log_segment_kb and can roll now. */
bool chan_roll_due(const struct chan *ch);
/* After a flush completed: the file passed half of log_segment_kb and the
 * next one is not being made yet: a pool thread makes it now (a failed
 * attempt is made again after a later flush). */
void chan_prepare_next(struct chan *ch);
/* wal_close: the next segment file nobody rolled into is closed and removed. */
void chan_drop_next(struct chan *ch);
/* Opens the next segment and moves the gathered records to it (blocking:
 * open, one block, fdatasync, directory fsync). On failure the channel
 * keeps its file (counted in n_errors) and tries again after a later flush. */
void chan_roll(struct chan *ch);

/* ---- wal.c --------------------------------------------------------------------------- */
int wal_write_all(int fd, const void *p, size_t n, uint64_t off);
/* Adds a closed segment file (any thread; seg_lock). 0 or -ENOMEM. */
int wal_add_closed(struct wal *wal, const char *name, uint64_t max_epoch);
/* The file name of (gen, worker, seg) into buf (>= 40 bytes). */
void wal_chan_file_name(char *buf, size_t len, uint64_t gen, uint32_t worker, uint32_t seg);

/* ---- wal_marker.c -------------------------------------------------------------------- */
uint64_t marker_durable(struct wal *wal);
/* single_write: a claim record for the flush being prepared from x, if
 * there is room for it in preallocated space and D, once this write is
 * durable, passes target (or equals a marker a failed write claimed,
 * epending): appended to x, claimed (target raised, O2), and its marker
 * returned; 0 if none. */
uint64_t marker_claim_append(struct chan *ch, struct wal_buf *x);
/* single_write, after a flush of ch succeeded: whether the next flush must
 * carry a claim (the marker passed target, or a failed claim waits); when
 * ch cannot claim (no preallocated room), the epoch file takes the marker
 * (marker_after_flush). */
void marker_after_dsync(struct chan *ch);
/* The claim of ch's completed flush is durable: D = its marker. */
void marker_claim_durable(struct chan *ch);
/* Claims the marker D will reach once ch's write in preparation is durable,
 * if it passes every marker sent so far: that marker, else 0 (O2). */
uint64_t marker_claim_for_write(struct wal *wal, const struct chan *ch);
/* Writes D to the epoch file if it passed target (or notes to look again
 * when ch's epoch write is busy). */
void marker_advance(struct chan *ch);
/* After a flush of ch completed: the marker of a chained slot that failed
 * with its write (epending), else marker_advance. */
void marker_after_flush(struct chan *ch);
/* Appends slot(m; condition: ch valid up to end, none if 0) -> fdatasync(epochs)
 * to the chain being built on ch's ring (room reserved by the caller). */
void marker_chain_slot(struct chan *ch, uint64_t m, uint64_t end);
/* One CQE of ch's epoch-file write or its fdatasync is in. */
void marker_epoch_cqe(struct chan *ch);
/* The single-flush chain's slot is durable: D = emarker. */
void marker_persisted(struct chan *ch);
/* The retry of an own slot write that failed (chan_back_off): written again
 * unless a later marker covering it is durable or on its way. */
void marker_retry(struct chan *ch);
int marker_open_epoch_file(struct wal *wal, const char *dir, uint32_t next_slot);

#endif
