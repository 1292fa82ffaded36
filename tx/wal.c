/*
 * tx/wal.c — log channels, epochs, group commit and commit responses
 * (SPEC C12–C13, ARCHITECTURE "A commit's path"). File format: wal_format.h.
 *
 * Objects
 *   struct wal   one per runtime: the log directory, the global epoch E (the
 *                open epoch), the durable marker, the epoch file, the heap of
 *                `stored` commits waiting for the marker.
 *   struct chan  one per worker: its own file, two buffers (one gathering
 *                records, one being written), its I/O on the worker's ring.
 *                Everything in it is owner-only except pending_min and the
 *                counters.
 *
 * A commit's path (all on the worker W the commit runs on):
 *   append: the record goes to W's gathering buffer, tagged with e = E; its
 *     marker is e. accepted/available: the callback is queued as a task on W.
 *     stored: the commit joins the buffer's waiter list and a flush is
 *     requested (a task that yields once, so everything runnable appends
 *     first: the batch).
 *   flush (at most one in flight per channel; the next batch gathers behind
 *     it): E is advanced past the buffer's largest epoch (the epochs it holds
 *     are now closed), the buffers swap, and W's ring gets
 *     write(buffer + a zero terminator) --IOSQE_IO_LINK--> fdatasync, or,
 *     when this write is what the durable marker waits for, the write linked
 *     with the epoch-file update in one chain (submit_write: with the
 *     channel preallocated and log_sync resolved to single_flush
 *     (wal_sync.c), write -> sync_file_range -> conditional epoch slot ->
 *     fdatasync(epochs): one device cache flush covers the log bytes and
 *     the marker, so a lone client waits about one fdatasync; in strict
 *     mode write -> fdatasync(log) -> slot -> fdatasync(epochs)).
 *     Triggers: a stored commit waits and no flush is in flight (at once);
 *     a flush completes and stored commits gathered behind it (pipelining);
 *     the epoch timer (epoch_duration_us, armed while records wait); the
 *     worker is about to suspend (an idle worker flushes first).
 *   completion: a short write (which cancels the linked fdatasync) is
 *     written again from where it stopped, with a new fdatasync; an error
 *     fails every stored commit of that flush with it (never acknowledged),
 *     the channel rewinds to the flush's offset and holds the durable marker
 *     below the failed epochs until a later write has overwritten them. On
 *     success the flushed waiters move into the heap, pending_min is raised,
 *     and the durable marker D is recomputed:
 *         D = min(E - 1, min over channels holding unflushed records of
 *                        (their lowest unflushed epoch - 1))
 *     If D passed every marker already sent to the epoch file, W writes D to
 *     the next epoch-file slot linked with fdatasync. When that completes,
 *     `persisted` = D: the engine's durability callback runs (serialized,
 *     increasing markers; then `announced` = D), every waiting commit with
 *     marker <= D is popped
 *     from the heap in marker order and released by one notification task
 *     (on W if W has nothing queued, else urgent placement on a suspended
 *     worker). Nobody waiting: no task.
 *   Preallocation (log_prealloc_kb): channel files are filled with zeros
 *     ahead of the data, so a flush overwrites allocated blocks and its
 *     fdatasync needs no metadata journal commit (about 85 µs here instead of
 *     about 180 µs for an appending fdatasync); extension runs on the ring
 *     ahead of the data, a flush never writes into a range being extended.
 *
 * Memory-ordering contract
 *   O1 Appending (owner of channel c):  if c.pending_min == NONE:
 *        store(c.pending_min, load(E)) seq_cst;  then e = load(E) seq_cst.
 *      Computing D (any worker):  Ec = load(E) seq_cst; then load every
 *        pending_min seq_cst.
 *      In the single total order either the computer sees the announcement
 *      (pending_min <= e, so D < e) or the owner's load of E follows the
 *      computer's (e >= Ec > D). Either way no record with epoch <= D can be
 *      unflushed. pending_min is raised only after the flush covering those
 *      records completed (seq_cst store, same pairing).
 *   O2 target (largest marker handed to the epoch file), persisted (largest
 *      marker whose slot is durable) and announced (largest marker the
 *      engine's on_durable was told of) only grow. announced is stored under
 *      cb_lock after on_durable returned, so the engine hears of a marker
 *      before any commit it covers is released. A waiter is inserted into
 *      the heap and the heap is popped (up to announced) under heap_lock;
 *      announced is raised before the releaser takes heap_lock, and an
 *      inserter re-reads announced under the lock: a commit inserted late is
 *      released by its inserter.
 *   O3 Counters are owner-written, relaxed (STAT-style); readers get a snapshot.
 *
 * Rules (lifecycle)
 *   1. wal_open runs before the workers start; wal_close after they stopped.
 *   2. A chan is touched only by its worker, except pending_min and counters.
 *   3. Every SQE of a chan carries its own sched_io; chan.inflight counts
 *      them; worker_stop waits for all of them before the ring goes away.
 *   4. A commit is in exactly one place: a hop task, a buffer's waiter list,
 *      the heap, or a release list; it leaves the runtime when its callback
 *      runs (once).
 */
#include "tx/wal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sched/io.h"
#include "tx/wal_format.h"
#include "tx/wal_sync.h"

/* Transactions (tx/tx.c) hand their commits to the log through
 * tx/commit_hook.h. Probes and latency histograms (bpf/probes.h): flush,
 * durable, commit_done; stamps only when wanted. */
#include "bpf/probes.h"
#include "tx/commit_hook.h"

static inline uint64_t log_stamp(void)
{
    return probe_log_timing_on() ? probe_now_ns() : 0;
}

/* priv.len of a commit whose records come from a transaction (struct wal_txc). */
#define WAL_TX_RECORDS UINT32_MAX

#define WAL_ALIGN 4096u
#define WAL_FLUSH_BYTES (1u << 20) /* a gathering buffer this full is written without waiting for the timer */
#define WAL_HOLD_BYTES (16u << 20) /* past this (a write in flight), accepted/available answers wait for it */
#define EPOCH_NONE UINT64_MAX
#define CH_OF(io, field) ((struct chan *)((char *)(io) - offsetof(struct chan, field)))

enum commit_state { CS_IDLE = 0, CS_HOP, CS_BATCH, CS_HEAP, CS_RELEASE };

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

struct chan {
    struct wal *wal;
    struct worker *w;
    uint32_t index;
    int fd;
    char name[64];

    alignas(64) _Atomic uint64_t pending_min; /* O1 */
    _Atomic uint64_t n_fsyncs, n_flushes, n_bytes, n_commits, n_errors, n_epoch_writes; /* O3 */

    alignas(64) struct wal_buf bufs[2];
    struct wal_buf *gather, *flight;
    uint64_t lsn;
    uint32_t inflight;          /* our SQEs whose CQE is still to come */
    bool stopping;
    bool repair;                /* a write failed: the next one overwrites its range */
    uint64_t dirty_end;         /* ... up to here at least (file offset; zeros past the records) */

    struct urt_task flush_task;
    bool flush_queued, flush_yielded;
    struct urt_commit *held_head, *held_tail; /* backpressure: answers held until the write in flight ends */

    struct sched_io io_w, io_s; /* log write + fdatasync */
    uint32_t cqes;
    int32_t res_w, res_s;
    size_t wr_from, wr_to, wr_len;
    bool wr_eio;
    bool wr_fake_short;         /* test hook: report a short write that cancelled the fdatasync */
    uint64_t flight_lsn, flush_start_ns; /* probes: the flush's last lsn and start stamp */

    struct sched_io io_t;       /* epoch timer */
    bool timer_armed;

    struct sched_io io_ew, io_es; /* epoch-file write + fdatasync */
    uint32_t ecqes;
    int32_t eres_w, eres_s;
    bool ebusy, eagain;
    bool echained;              /* the epoch write is linked behind a log write */
    bool single;                /* ... in a single-flush chain: its CQEs count in cqes (submit_write) */
    uint64_t emarker;
    uint64_t epending;          /* a chained epoch write was cancelled: write it after the log write */
    uint64_t flush_seq, done_seq, echain_seq;
    alignas(16) uint8_t eslot[EPOCH_SLOT_SIZE];

    struct sched_io io_xw, io_xs; /* preallocation extension */
    uint32_t xcqes;
    int32_t xres_w, xres_s;
    bool xbusy, xwait;
    uint64_t x_off, prealloc_end;
};

struct wal {
    struct sched *s;
    const struct urt_config *cfg;
    uint32_t n_chan;
    struct chan **chans;
    int dirfd, lockfd, epochfd;
    uint64_t gen;
    bool o_direct;
    size_t chunk;              /* preallocation extension size (0: none) */
    struct wal_sync_choice sync; /* strict or single_flush, and why (wal_sync.c) */
    bool single_ok;            /* single-flush chains allowed (sync.mode) */
    uint8_t *zeros;            /* chunk zero bytes, aligned */
    uint64_t epoch_ns;

    alignas(64) _Atomic uint64_t epoch;   /* E, the open epoch */
    alignas(64) _Atomic uint64_t target;  /* O2 */
    _Atomic uint64_t persisted;           /* O2 */
    _Atomic uint64_t eslot_next;
#if URT_FAULT_INJECTION
    _Atomic int inject_next;        /* test builds only (-Dfault_injection=true) */
#endif

    alignas(64) pthread_mutex_t heap_lock;
    struct urt_commit **heap;
    size_t heap_n, heap_cap;

    struct tx_log txlog;            /* registered with tx_log_register (runtime/log.c) */
    pthread_mutex_t txc_lock;
    struct wal_txc *txc_free;       /* reused carriers: no malloc per commit once warm */

    pthread_mutex_t cb_lock;
    _Atomic uint64_t announced;     /* O2: the largest marker on_durable was told of */
    urt_durable_fn *on_durable;
    void *on_durable_arg;
};

/* ---- small helpers ---------------------------------------------------------------- */

static void fetch_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_seq_cst, memory_order_relaxed))
        ;
}

static void cnt_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) & ~(a - 1);
}

static int buf_reserve(struct wal_buf *b, size_t need)
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

static void buf_reset_batch(struct wal_buf *b)
{
    b->min_epoch = b->max_epoch = 0;
    b->n_recs = 0;
    b->wait_head = b->wait_tail = NULL;
}

/* Two SQEs that must be linked: make sure both fit in the SQ now. */
static void need_sqes(struct worker *w, unsigned n)
{
    if (io_uring_sq_space_left(&w->ring.uring) < n)
        sched_io_flush(w);
}

static struct io_uring_sqe *prep(struct chan *ch, struct sched_io *io, sched_io_done_fn *done)
{
    struct io_uring_sqe *sqe;
    /* need_sqes() made room; a kernel that refuses to drain the SQ (CQ
     * overflow) gets a few more submissions before we give up loudly. */
    for (int tries = 0; !(sqe = sched_io_prep(ch->w, io, done)); tries++) {
        if (tries == 1000) {
            fprintf(stderr, "urt: log channel %u: no SQE available on the worker ring\n", ch->index);
            abort();
        }
        sched_io_flush(ch->w);
    }
    ch->inflight++;
    return sqe;
}

/* ---- heap of waiting stored commits (heap_lock held) -------------------------------- */

static bool heap_less(const struct urt_commit *a, const struct urt_commit *b)
{
    return a->priv.marker < b->priv.marker;
}

static int heap_push(struct wal *wal, struct urt_commit *c)
{
    if (wal->heap_n == wal->heap_cap) {
        size_t cap = wal->heap_cap ? wal->heap_cap * 2 : 1024;
        struct urt_commit **h = realloc(wal->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        wal->heap = h;
        wal->heap_cap = cap;
    }
    size_t i = wal->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(c, wal->heap[p]))
            break;
        wal->heap[i] = wal->heap[p];
        i = p;
    }
    wal->heap[i] = c;
    c->priv.state = CS_HEAP;
    return 0;
}

static struct urt_commit *heap_pop(struct wal *wal)
{
    struct urt_commit *top = wal->heap[0];
    struct urt_commit *last = wal->heap[--wal->heap_n];
    size_t i = 0, n = wal->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const struct urt_commit *best = last;
        if (l < n && heap_less(wal->heap[l], best)) {
            m = l;
            best = wal->heap[l];
        }
        if (l + 1 < n && heap_less(wal->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        wal->heap[i] = wal->heap[m];
        i = m;
    }
    if (n)
        wal->heap[i] = last;
    return top;
}

/* Pops every commit with marker <= announced, in marker order (heap_lock
 * held): a commit is released only after on_durable was told of a marker
 * covering it. */
static struct urt_commit *heap_take_covered(struct wal *wal)
{
    uint64_t p = atomic_load_explicit(&wal->announced, memory_order_seq_cst); /* O2 */
    struct urt_commit *head = NULL, **tail = &head;
    while (wal->heap_n && wal->heap[0]->priv.marker <= p) {
        struct urt_commit *c = heap_pop(wal);
        c->priv.state = CS_RELEASE;
        c->priv.status = 0;
        c->priv.next = NULL;
        *tail = c;
        tail = &c->priv.next;
    }
    return head;
}

/* ---- delivering callbacks ---------------------------------------------------------- */

static void run_list(struct urt_commit *c)
{
    struct worker *self = sched_self();
    while (c) {
        struct urt_commit *next = c->priv.next; /* the callback may reuse c */
        c->priv.state = CS_IDLE;
        if (self && c->priv.submit_ns && c->priv.status == 0)
            probe_commit_done(&self->hists, self->index,
                              (enum urt_latency_kind)(URT_LAT_COMMIT_ACCEPTED + (int)c->priv.response),
                              c->priv.submit_ns, probe_now_ns());
        c->priv.cb(c, c->priv.status, c->priv.arg);
        c = next;
    }
}

static enum urt_task_result notify_run(struct urt_task *t, void *arg)
{
    (void)t;
    run_list(arg);
    return URT_TASK_DONE;
}

static void notify_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    /* The runtime is going away: a released commit keeps its status (it was
     * durable or failed); the list still gets its callbacks exactly once. */
    run_list(arg);
}

/* One task for a whole release list (linked by priv.next, statuses set). */
static void notify_list(struct wal *wal, struct worker *w, struct urt_commit *list)
{
    if (!list)
        return;
    struct urt_task *t = &list->priv.task;
    urt_task_init(t, notify_run, list);
    t->cancel = notify_cancel;
    if (w && deque_size(&w->deque) == 0 && !w->yield_head) {
        /* W runs it next: as soon as urgent placement would, without a wake. */
        sched_local_push(w, t);
        return;
    }
    if (sched_submit(wal->s, t, URT_SUBMIT_URGENT))
        run_list(list); /* shutting down: deliver here rather than lose them */
}

/* ---- durable marker and the epoch file ---------------------------------------------- */

static uint64_t compute_durable(struct wal *wal)
{
    uint64_t d = atomic_load_explicit(&wal->epoch, memory_order_seq_cst) - 1; /* O1: pairs with A2 */
    for (uint32_t i = 0; i < wal->n_chan; i++) {
        uint64_t pm = atomic_load_explicit(&wal->chans[i]->pending_min, memory_order_seq_cst); /* O1: pairs with A1 */
        if (pm != EPOCH_NONE && pm - 1 < d)
            d = pm - 1;
    }
    return d;
}

/* What D will be once ch's write in preparation is durable, if nothing else
 * changes: ch's own records are then all flushed (same O1 argument). */
static uint64_t durable_after(struct wal *wal, const struct chan *self)
{
    uint64_t d = atomic_load_explicit(&wal->epoch, memory_order_seq_cst) - 1; /* O1 */
    for (uint32_t i = 0; i < wal->n_chan; i++) {
        const struct chan *c = wal->chans[i];
        if (c == self)
            continue;
        uint64_t pm = atomic_load_explicit(&c->pending_min, memory_order_seq_cst); /* O1 */
        if (pm != EPOCH_NONE && pm - 1 < d)
            d = pm - 1;
    }
    return d;
}

static void ew_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void es_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void flush_complete(struct chan *ch);

static void submit_epoch_write(struct chan *ch, uint64_t m)
{
    struct wal *wal = ch->wal;
    ch->ebusy = true;
    ch->emarker = m;
    struct wal_epoch_slot es = {.marker = m};
    wal_epoch_slot_encode(ch->eslot, &es); /* written after the data's own fdatasync: no condition */
    uint64_t slot = atomic_fetch_add_explicit(&wal->eslot_next, 1, memory_order_relaxed) % EPOCH_SLOTS;
    need_sqes(ch->w, 2);
    struct io_uring_sqe *sqe = prep(ch, &ch->io_ew, ew_done);
    uint64_t ud = sqe->user_data;
    io_uring_prep_write(sqe, wal->epochfd, ch->eslot, EPOCH_SLOT_SIZE, slot * EPOCH_SLOT_SIZE);
    sqe->user_data = ud;
    sqe->flags |= IOSQE_IO_LINK;
    sqe = prep(ch, &ch->io_es, es_done);
    ud = sqe->user_data;
    io_uring_prep_fsync(sqe, wal->epochfd, IORING_FSYNC_DATASYNC);
    sqe->user_data = ud;
    ch->ecqes = 2;
    sched_io_flush(ch->w);
}

/* After a flush completed on ch: if the durable marker passed what the epoch
 * file was asked to hold, W writes it there. */
static void advance_durable(struct chan *ch)
{
    struct wal *wal = ch->wal;
    if (ch->ebusy) {
        ch->eagain = true;
        return;
    }
    uint64_t d = compute_durable(wal);
    uint64_t t = atomic_load_explicit(&wal->target, memory_order_relaxed);
    while (d > t) {
        if (atomic_compare_exchange_weak_explicit(&wal->target, &t, d, memory_order_seq_cst, memory_order_relaxed)) {
            submit_epoch_write(ch, d);
            return;
        }
    }
}

static void release_durable(struct wal *wal, struct worker *w)
{
    uint64_t p = atomic_load_explicit(&wal->persisted, memory_order_seq_cst);
    pthread_mutex_lock(&wal->cb_lock);
    if (p > atomic_load_explicit(&wal->announced, memory_order_relaxed)) {
        if (wal->on_durable)
            wal->on_durable(p, wal->on_durable_arg); /* the marker first ... */
        atomic_store_explicit(&wal->announced, p, memory_order_seq_cst); /* O2: ... then what it covers */
    }
    pthread_mutex_unlock(&wal->cb_lock);
    pthread_mutex_lock(&wal->heap_lock);
    struct urt_commit *list = heap_take_covered(wal);
    pthread_mutex_unlock(&wal->heap_lock);
    notify_list(wal, w, list);
}

static void epoch_write_complete(struct chan *ch)
{
    struct wal *wal = ch->wal;
    bool chained = ch->echained;
    ch->ebusy = false;
    ch->echained = false;
    if (ch->eres_w == (int32_t)EPOCH_SLOT_SIZE && ch->eres_s == 0) {
        cnt_add(&ch->n_epoch_writes, 1);
        fetch_max(&wal->persisted, ch->emarker); /* O2: before the releaser takes heap_lock */
        release_durable(wal, ch->w);
    } else if (chained && ch->done_seq < ch->echain_seq) {
        /* Cancelled with (or failed behind) its log write: the marker may
         * only be written once that log write is durable (flush_succeeded). */
        if (ch->emarker > ch->epending)
            ch->epending = ch->emarker;
    } else {
        /* Not durable: write the marker again (a later slot). */
        cnt_add(&ch->n_errors, 1);
        submit_epoch_write(ch, ch->emarker);
        return;
    }
    if (ch->eagain) {
        ch->eagain = false;
        advance_durable(ch);
    }
}

/* One CQE of the epoch-file write (ew) or its fdatasync (es) is in: the
 * flush completes with the last CQE of a single-flush chain, the epoch write
 * with the last of its own pair. */
static void epoch_cqe_in(struct chan *ch)
{
    ch->inflight--;
    if (ch->single) {
        if (--ch->cqes == 0)
            flush_complete(ch);
        return;
    }
    if (--ch->ecqes == 0)
        epoch_write_complete(ch);
}

static void ew_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_ew);
    ch->eres_w = res;
    epoch_cqe_in(ch);
}

static void es_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_es);
    ch->eres_s = res;
    epoch_cqe_in(ch);
}

/* ---- flushing a channel ---------------------------------------------------------------- */

static void flush_now(struct chan *ch);
static void w_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void s_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void xw_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);
static void xs_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags);

static void timer_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)res, (void)flags;
    struct chan *ch = CH_OF(io, io_t);
    ch->inflight--;
    ch->timer_armed = false;
    if (ch->stopping)
        return;
    /* The epoch timer: close the open epoch, flush what waits. */
    atomic_fetch_add_explicit(&ch->wal->epoch, 1, memory_order_seq_cst);
    if (!ch->flight && (ch->gather->n_recs || ch->repair))
        flush_now(ch);
}

static void arm_timer(struct chan *ch)
{
    if (ch->timer_armed || ch->stopping)
        return;
    if (sched_timer_arm(ch->w, &ch->io_t, ch->wal->epoch_ns, timer_done) == 0) {
        ch->timer_armed = true;
        ch->inflight++;
    }
}

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

static void submit_write(struct chan *ch, bool chain_ok)
{
    struct wal *wal = ch->wal;
    struct wal_buf *x = ch->flight;
    size_t n = ch->wr_to - ch->wr_from;
#if URT_FAULT_INJECTION
    int inject = atomic_exchange_explicit(&wal->inject_next, 0, memory_order_relaxed);
#else
    const int inject = 0; /* fault injection is compiled in only with -Dfault_injection=true */
#endif
    if (inject == WAL_FAULT_SHORT) {
        size_t half = wal->o_direct ? (n / 2) & ~(size_t)511 : n / 2;
        if (half)
            n = half;
    }
    ch->wr_eio = inject == WAL_FAULT_EIO;
    ch->wr_fake_short = inject == WAL_FAULT_SHORT_CANCEL;
    ch->wr_len = n;
    /* Chain the epoch-file write behind the log write when this write is
     * what the durable marker waits for (p passes every marker sent so
     * far). Two forms, both run back to back in the kernel (one wake-up per
     * group commit), a failure or short write cancelling the rest:
     *  - single-flush chain, when the write stays inside the preallocated
     *    (zero-filled) range, so the log file's metadata does not change:
     *      write(log) -> sync_file_range(log, wait) [not with O_DIRECT]
     *      -> write(slot "p, if ch-<gen>-<me> is valid up to end")
     *      -> fdatasync(epochs)
     *    The epoch file's fdatasync ends with a device cache flush, which
     *    covers the log bytes written (and waited for) before it: one flush
     *    per group instead of two. The slot's condition lets recovery ignore
     *    it should the device have kept the slot and lost the log bytes.
     *  - otherwise write(log) -> fdatasync(log) -> write(slot p) ->
     *    fdatasync(epochs).
     * Without a marker to send: write(log) -> fdatasync(log). */
    uint64_t p = 0;
    bool chain = false;
    if (chain_ok && !inject && !ch->ebusy && !ch->repair) {
        p = durable_after(wal, ch);
        uint64_t t = atomic_load_explicit(&wal->target, memory_order_relaxed);
        while (p > t && !chain)
            chain = atomic_compare_exchange_weak_explicit(&wal->target, &t, p, memory_order_seq_cst,
                                                          memory_order_relaxed); /* O2 */
    }
    bool single = chain && wal->single_ok && x->base + ch->wr_to <= ch->prealloc_end;
    need_sqes(ch->w, chain ? 4 : 2);
    struct io_uring_sqe *sqe = prep(ch, &ch->io_w, w_done);
    uint64_t ud = sqe->user_data;
    io_uring_prep_write(sqe, ch->fd, x->data + ch->wr_from, (unsigned)n, x->base + ch->wr_from);
    sqe->user_data = ud;
    sqe->flags |= IOSQE_IO_LINK;
    ch->cqes = 1;
    ch->res_s = 0;
    if (!single || !wal->o_direct) {
        sqe = prep(ch, &ch->io_s, s_done);
        ud = sqe->user_data;
        if (single)
            io_uring_prep_sync_file_range(sqe, ch->fd, (unsigned)n, x->base + ch->wr_from,
                                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                              SYNC_FILE_RANGE_WAIT_AFTER);
        else
            io_uring_prep_fsync(sqe, ch->fd, IORING_FSYNC_DATASYNC);
        sqe->user_data = ud;
        ch->cqes++;
    }
    if (chain) {
        sqe->flags |= IOSQE_IO_LINK;
        ch->ebusy = true;
        ch->echained = true;
        ch->single = single;
        ch->echain_seq = ch->flush_seq;
        ch->emarker = p;
        struct wal_epoch_slot es = {.marker = p};
        if (single) {
            es.gen = wal->gen;
            es.worker = (uint16_t)ch->index;
            size_t end = records_end(x, p); /* this write's records of epochs <= p */
            /* None: every record of epochs <= p on this channel was made
             * durable by an earlier flush; the slot needs no condition. */
            es.end = end > x->start ? x->base + end : 0;
        }
        wal_epoch_slot_encode(ch->eslot, &es);
        uint64_t slot = atomic_fetch_add_explicit(&wal->eslot_next, 1, memory_order_relaxed) % EPOCH_SLOTS;
        sqe = prep(ch, &ch->io_ew, ew_done);
        ud = sqe->user_data;
        io_uring_prep_write(sqe, wal->epochfd, ch->eslot, EPOCH_SLOT_SIZE, slot * EPOCH_SLOT_SIZE);
        sqe->user_data = ud;
        sqe->flags |= IOSQE_IO_LINK;
        sqe = prep(ch, &ch->io_es, es_done);
        ud = sqe->user_data;
        io_uring_prep_fsync(sqe, wal->epochfd, IORING_FSYNC_DATASYNC);
        sqe->user_data = ud;
        if (single)
            ch->cqes += 2; /* the whole chain is this flush */
        else
            ch->ecqes = 2;
    }
    cnt_add(&ch->n_flushes, 1);
    sched_io_flush(ch->w);
}

static void maybe_extend(struct chan *ch, uint64_t end_off)
{
    struct wal *wal = ch->wal;
    if (!wal->chunk || ch->xbusy || ch->stopping || end_off + wal->chunk / 2 < ch->prealloc_end)
        return;
    ch->x_off = ch->prealloc_end > end_off ? ch->prealloc_end : align_up(end_off, WAL_ALIGN);
    ch->xbusy = true;
    need_sqes(ch->w, 2);
    struct io_uring_sqe *sqe = prep(ch, &ch->io_xw, xw_done);
    uint64_t ud = sqe->user_data;
    io_uring_prep_write(sqe, ch->fd, wal->zeros, (unsigned)wal->chunk, ch->x_off);
    sqe->user_data = ud;
    sqe->flags |= IOSQE_IO_LINK;
    sqe = prep(ch, &ch->io_xs, xs_done);
    ud = sqe->user_data;
    io_uring_prep_fsync(sqe, ch->fd, IORING_FSYNC_DATASYNC);
    sqe->user_data = ud;
    ch->xcqes = 2;
    sched_io_flush(ch->w);
}

static void extend_complete(struct chan *ch)
{
    ch->xbusy = false;
    if (ch->xres_w == (int32_t)ch->wal->chunk && ch->xres_s == 0)
        ch->prealloc_end = ch->x_off + ch->wal->chunk;
    /* else: the range stays unallocated; flushes simply append there. */
    if (ch->xwait) {
        ch->xwait = false;
        if (!ch->flight && (ch->gather->n_recs || ch->repair))
            flush_now(ch);
    }
}

static void xw_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_xw);
    ch->inflight--;
    ch->xres_w = res;
    if (--ch->xcqes == 0)
        extend_complete(ch);
}

static void xs_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_xs);
    ch->inflight--;
    ch->xres_s = res;
    if (--ch->xcqes == 0)
        extend_complete(ch);
}

/* Starts writing the gathering buffer (owner; no flush in flight). */
static void flush_now(struct chan *ch)
{
    assert(sched_self() == ch->w); /* rule 2: owner only */
    struct wal *wal = ch->wal;
    struct wal_buf *x = ch->gather;
    if (ch->flight || (!x->n_recs && !ch->repair))
        return;
    size_t from = x->start, to = x->len + WAL_TERMINATOR;
    if (wal->o_direct) {
        from = 0;
        to = align_up(to, WAL_ALIGN);
    }
    if (ch->repair && x->base + to < ch->dirty_end && buf_reserve(x, (size_t)(ch->dirty_end - x->base)) == 0)
        to = (size_t)(ch->dirty_end - x->base); /* zeros over what the failed write may have left */
    memset(x->data + x->len, 0, to - x->len); /* terminator (and O_DIRECT padding) */
    uint64_t end_off = x->base + to;
    if (ch->xbusy && end_off > ch->x_off) {
        ch->xwait = true; /* never write into a range being zero-filled */
        return;
    }
    if (x->n_recs)
        fetch_max(&wal->epoch, x->max_epoch + 1); /* the epochs this write holds are closed */

    /* Swap: the other buffer gathers from the block this one ends in. */
    struct wal_buf *y = x == &ch->bufs[0] ? &ch->bufs[1] : &ch->bufs[0];
    size_t blk = x->len & ~(size_t)(WAL_ALIGN - 1);
    y->base = x->base + blk;
    y->len = y->start = x->len - blk;
    memcpy(y->data, x->data + blk, y->len);
    buf_reset_batch(y);
    ch->gather = y;
    ch->flight = x;
    ch->wr_from = from;
    ch->wr_to = to;
    ch->flush_seq++;
    ch->flight_lsn = ch->lsn;
    ch->flush_start_ns = log_stamp();
    probe_flush((int)ch->index, ch->lsn, to - from);
    submit_write(ch, x->n_recs != 0);
    maybe_extend(ch, end_off);
}

/* Backpressure release: the write in flight ended, the held answers go out. */
static void release_held(struct chan *ch)
{
    struct urt_commit *list = ch->held_head;
    ch->held_head = ch->held_tail = NULL;
    notify_list(ch->wal, ch->w, list);
}

static void flush_failed(struct chan *ch, int err)
{
    struct wal *wal = ch->wal;
    struct wal_buf *x = ch->flight, *y = ch->gather;
    cnt_add(&ch->n_errors, 1);
    if (x->base + ch->wr_to > ch->dirty_end)
        ch->dirty_end = x->base + ch->wr_to; /* the next write zeroes up to here: no stale record survives */
    struct urt_commit *failed = x->wait_head;
    for (struct urt_commit *c = failed; c; c = c->priv.next) {
        c->priv.status = err;
        c->priv.state = CS_RELEASE;
    }
    /* Rewind: the gathered records move to where the failed write began; the
     * next write overwrites the failed range (and ends with a terminator). */
    x->len = x->start;
    buf_reset_batch(x);
    size_t n = y->len - y->start;
    if (buf_reserve(x, x->len + n + WAL_TERMINATOR + WAL_ALIGN) == 0) {
        memcpy(x->data + x->len, y->data + y->start, n);
        x->len += n;
        x->min_epoch = y->min_epoch;
        x->max_epoch = y->max_epoch;
        x->n_recs = y->n_recs;
        x->wait_head = y->wait_head;
        x->wait_tail = y->wait_tail;
    } else {
        /* No memory to keep them: the gathered stored commits fail too. */
        for (struct urt_commit *c = y->wait_head; c; c = c->priv.next)
            c->priv.status = -ENOMEM, c->priv.state = CS_RELEASE;
        if (y->wait_head) {
            y->wait_tail->priv.next = failed;
            failed = y->wait_head;
        }
    }
    y->len = y->start;
    buf_reset_batch(y);
    ch->gather = x;
    ch->flight = NULL;
    /* pending_min stays where it is (at or below the failed epochs) until a
     * write over the failed range is durable: D cannot cover those records. */
    ch->repair = true;
    notify_list(wal, ch->w, failed);
    release_held(ch);
    arm_timer(ch); /* retry after an epoch, not in a tight loop */
}

static void flush_succeeded(struct chan *ch)
{
    struct wal *wal = ch->wal;
    struct wal_buf *x = ch->flight, *y = ch->gather;
    cnt_add(&ch->n_fsyncs, 1);
    cnt_add(&ch->n_bytes, ch->wr_to - ch->wr_from);
    probe_durable((int)ch->index, ch->flight_lsn, ch->flush_start_ns, ch->flush_start_ns ? probe_now_ns() : 0);
    struct urt_commit *waiters = x->wait_head;
    buf_reset_batch(x);
    ch->flight = NULL;
    ch->repair = false;
    ch->dirty_end = 0;
    release_held(ch);
    atomic_store_explicit(&ch->pending_min, y->n_recs ? y->min_epoch : EPOCH_NONE,
                          memory_order_seq_cst); /* O1: pairs with the loads in compute_durable */
    if (waiters) {
        pthread_mutex_lock(&wal->heap_lock);
        for (struct urt_commit *c = waiters, *next; c; c = next) {
            next = c->priv.next;
            if (heap_push(wal, c)) {
                c->priv.status = -ENOMEM; /* cannot wait: tell it rather than lose it */
                c->priv.next = NULL;
                c->priv.state = CS_RELEASE;
                notify_list(wal, ch->w, c);
            }
        }
        struct urt_commit *list = heap_take_covered(wal); /* O2: a marker persisted meanwhile */
        pthread_mutex_unlock(&wal->heap_lock);
        notify_list(wal, ch->w, list);
    }
    ch->done_seq = ch->flush_seq;
    if (ch->epending && !ch->ebusy) {
        uint64_t m = compute_durable(wal);
        if (m < ch->epending)
            m = ch->epending;
        ch->epending = 0;
        fetch_max(&wal->target, m);
        submit_epoch_write(ch, m);
    } else {
        advance_durable(ch);
    }
    if (y->wait_head || y->len - y->start >= WAL_FLUSH_BYTES)
        flush_now(ch); /* pipelining: the batch that gathered behind this write */
    else if (y->n_recs)
        arm_timer(ch);
}

/* The single-flush chain completed (all its CQEs are in). */
static void single_complete(struct chan *ch)
{
    struct wal *wal = ch->wal;
    size_t want = ch->wr_to - ch->wr_from;
    ch->single = false;
    ch->ebusy = false;
    ch->echained = false;
    ch->eagain = false;
    if (ch->res_w == (int32_t)want && ch->res_s == 0 && ch->eres_w == (int32_t)EPOCH_SLOT_SIZE && ch->eres_s == 0) {
        cnt_add(&ch->n_epoch_writes, 1);
        fetch_max(&wal->persisted, ch->emarker); /* O2 */
        release_durable(wal, ch->w);             /* the durability callback first, then earlier waiters */
        flush_succeeded(ch);                     /* this write's waiters: covered now */
        return;
    }
    /* Something failed or was cancelled: the marker is written again once
     * the data is durable (flush_succeeded, epending). */
    if (ch->emarker > ch->epending)
        ch->epending = ch->emarker;
    if (ch->res_w < 0) {
        flush_failed(ch, ch->res_w);
    } else if ((size_t)ch->res_w < want) {
        size_t done = (size_t)ch->res_w;
        if (wal->o_direct)
            done &= ~(size_t)511;
        ch->wr_from += done;
        submit_write(ch, false);
    } else {
        submit_write(ch, false); /* data written, durability unknown: again, with its own fdatasync */
    }
}

static void flush_complete(struct chan *ch)
{
    if (ch->single) {
        single_complete(ch);
        return;
    }
    size_t want = ch->wr_to - ch->wr_from;
    if (ch->res_w < 0)
        flush_failed(ch, ch->res_w);
    else if (ch->res_s < 0 && ch->res_s != -ECANCELED)
        flush_failed(ch, ch->res_s);
    else if ((size_t)ch->res_w < want) {
        /* Short write (it cancelled the linked fdatasync): write the rest. */
        size_t done = (size_t)ch->res_w;
        if (ch->wal->o_direct)
            done &= ~(size_t)511;
        ch->wr_from += done;
        submit_write(ch, false);
    } else if (ch->res_s == -ECANCELED) {
        submit_write(ch, false); /* full write but no sync: write it again, with its sync */
    } else if (ch->wr_eio) {
        flush_failed(ch, -EIO);
    } else {
        flush_succeeded(ch);
    }
}

static void w_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_w);
    ch->inflight--;
    if (ch->wr_fake_short && res > 1)
        res = ch->wal->o_direct ? (res / 2) & ~511 : res / 2; /* as if the kernel wrote less */
    ch->res_w = res;
    if (--ch->cqes == 0)
        flush_complete(ch);
}

static void s_done(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    (void)w, (void)flags;
    struct chan *ch = CH_OF(io, io_s);
    ch->inflight--;
    if (ch->wr_fake_short) {
        ch->wr_fake_short = false;
        res = -ECANCELED; /* what a short write does to the linked fdatasync */
    }
    ch->res_s = res;
    if (--ch->cqes == 0)
        flush_complete(ch);
}

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
    if (!ch->flush_yielded) {
        ch->flush_yielded = true;
        return URT_TASK_YIELD;
    }
    ch->flush_queued = false;
    flush_now(ch);
    return URT_TASK_DONE;
}

static void flush_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    ((struct chan *)arg)->flush_queued = false;
}

static void request_flush(struct chan *ch)
{
    if (ch->flight || ch->flush_queued)
        return; /* the running write's completion flushes this batch */
    ch->flush_queued = true;
    ch->flush_yielded = false;
    urt_task_init(&ch->flush_task, flush_task_run, ch);
    ch->flush_task.cancel = flush_task_cancel;
    sched_local_push(ch->w, &ch->flush_task);
}

/* ---- commits ------------------------------------------------------------------------- */

static enum urt_task_result deliver_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    c->priv.next = NULL;
    run_list(c);
    return URT_TASK_DONE;
}

static void deliver_cancel(struct urt_task *t, void *arg)
{
    deliver_run(t, arg);
}

static void append_one(struct chan *ch, struct wal_buf *x, uint64_t e, uint64_t tx_id, const void *rec, uint32_t len)
{
    uint8_t *d = x->data + x->len;
    wal_rec_encode_header(d, WAL_REC_COMMIT, e, tx_id, ++ch->lsn, len);
    if (len)
        memcpy(d + WAL_HDR_SIZE, rec, len);
    wal_rec_seal(d, len);
    x->len += wal_rec_size(len);
}

struct wal_txc {
    struct urt_commit c;
    urt_tx *tx;
    struct wal *wal;
    struct wal_txc *next_free;
};
#define TXC_OF(c) ((struct wal_txc *)((char *)(c) - offsetof(struct wal_txc, c)))

static size_t commit_bytes(const struct urt_commit *c)
{
    if (c->priv.len == WAL_TX_RECORDS) {
        const urt_tx *tx = TXC_OF(c)->tx;
        size_t n = tx_record_count(tx);
        return tx_record_bytes(tx) + (n ? n : 1) * (WAL_HDR_SIZE + WAL_CRC_SIZE + 7);
    }
    return wal_rec_size(c->priv.len);
}

static void append_records(struct chan *ch, struct wal_buf *x, const struct urt_commit *c, uint64_t e)
{
    if (c->priv.len == WAL_TX_RECORDS) {
        const urt_tx *tx = TXC_OF(c)->tx;
        size_t cursor = 0;
        uint32_t len;
        const void *rec;
        bool any = false;
        while ((rec = tx_record_next(tx, &cursor, &len))) {
            append_one(ch, x, e, c->priv.tx_id, rec, len);
            any = true;
        }
        if (!any)
            append_one(ch, x, e, c->priv.tx_id, NULL, 0); /* a commit without records still has a marker */
        return;
    }
    append_one(ch, x, e, c->priv.tx_id, c->priv.rec, c->priv.len);
}

/* Appends c's record(s) to w's channel. Worker only (w is the caller). */
static size_t commit_bytes(const struct urt_commit *c);
static void append_records(struct chan *ch, struct wal_buf *x, const struct urt_commit *c, uint64_t e);

static void append_commit(struct wal *wal, struct worker *w, struct urt_commit *c, bool in_own_task)
{
    struct chan *ch = wal->chans[w->index];
    assert(ch->w == w && sched_self() == w); /* rule 2: owner only */
    struct wal_buf *x = ch->gather;
    int err = buf_reserve(x, x->len + commit_bytes(c) + WAL_TERMINATOR + WAL_ALIGN);
    if (err) {
        c->priv.status = err;
        goto deliver;
    }
    if (atomic_load_explicit(&ch->pending_min, memory_order_relaxed) == EPOCH_NONE)
        atomic_store_explicit(&ch->pending_min, atomic_load_explicit(&wal->epoch, memory_order_seq_cst),
                              memory_order_seq_cst); /* A1: pairs with compute_durable (O1) */
    uint64_t e = atomic_load_explicit(&wal->epoch, memory_order_seq_cst); /* A2 */
    append_records(ch, x, c, e); /* all records of a commit: one epoch, one channel */
    if (!x->n_recs)
        x->min_epoch = e;
    x->max_epoch = e;
    x->n_recs++;
    c->priv.marker = e;
    c->priv.status = 0;
    cnt_add(&ch->n_commits, 1);
    if (c->priv.response == URT_COMMIT_STORED) {
        c->priv.state = CS_BATCH;
        c->priv.next = NULL;
        if (x->wait_tail)
            x->wait_tail->priv.next = c;
        else
            x->wait_head = c;
        x->wait_tail = c;
        request_flush(ch);
        return;
    }
    if (!ch->flight && x->len - x->start >= WAL_FLUSH_BYTES)
        request_flush(ch); /* bounded buffers without stored commits too */
    else if (!ch->flight)
        arm_timer(ch);
    if (ch->flight && x->len - x->start >= WAL_HOLD_BYTES) {
        /* Backpressure: the disk is behind; answer when the write in flight
         * ends instead of letting the buffer grow without bound. */
        c->priv.state = CS_RELEASE;
        c->priv.next = NULL;
        if (ch->held_tail)
            ch->held_tail->priv.next = c;
        else
            ch->held_head = c;
        ch->held_tail = c;
        return;
    }
deliver:
    c->priv.state = CS_RELEASE;
    c->priv.next = NULL;
    if (in_own_task) {
        run_list(c); /* we run in c's hop task, not inside the caller's urt_log_commit */
        return;
    }
    urt_task_init(&c->priv.task, deliver_run, c);
    c->priv.task.cancel = deliver_cancel;
    sched_local_push(w, &c->priv.task);
}

static enum urt_task_result hop_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    struct worker *w = sched_self();
    append_commit(c->priv.wal, w, c, true);
    return URT_TASK_DONE;
}

static void hop_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    c->priv.status = -ECANCELED;
    c->priv.next = NULL;
    run_list(c);
}

int wal_commit(struct wal *wal, struct urt_commit *c)
{
    c->priv.wal = wal;
    c->priv.submit_ns = log_stamp();
    struct worker *w = sched_current(wal->s);
    if (w) {
        append_commit(wal, w, c, false);
        return 0;
    }
    c->priv.state = CS_HOP;
    urt_task_init(&c->priv.task, hop_run, c);
    c->priv.task.cancel = hop_cancel;
    return sched_submit(wal->s, &c->priv.task, 0);
}

/* ---- transactions (tx/commit_hook.h) -------------------------------------------------- */

static void txc_done(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct wal_txc *t = arg;
    struct wal *wal = t->wal;
    urt_tx *tx = t->tx;
    pthread_mutex_lock(&wal->txc_lock);
    t->next_free = wal->txc_free;
    wal->txc_free = t;
    pthread_mutex_unlock(&wal->txc_lock);
    tx_commit_complete(tx, status);
}

/* log->commit: the transaction ended (pre-commit ran); its records go to the
 * channel of the committing worker, or of any worker when the committing
 * thread is not one (the commit hops there first). */
static int wal_tx_commit(struct tx_log *log, urt_tx *tx, enum urt_commit_response response)
{
    struct wal *wal = (struct wal *)((char *)log - offsetof(struct wal, txlog));
    pthread_mutex_lock(&wal->txc_lock);
    struct wal_txc *t = wal->txc_free;
    if (t)
        wal->txc_free = t->next_free;
    pthread_mutex_unlock(&wal->txc_lock);
    if (!t && !(t = malloc(sizeof(*t))))
        return -ENOMEM;
    memset(&t->c.priv, 0, sizeof(t->c.priv));
    t->tx = tx;
    t->wal = wal;
    t->c.priv.len = WAL_TX_RECORDS;
    t->c.priv.tx_id = urt_tx_id(tx);
    t->c.priv.response = (uint32_t)response;
    t->c.priv.cb = txc_done;
    t->c.priv.arg = t;
    int rc = wal_commit(wal, &t->c);
    if (rc) {
        pthread_mutex_lock(&wal->txc_lock);
        t->next_free = wal->txc_free;
        wal->txc_free = t;
        pthread_mutex_unlock(&wal->txc_lock);
    }
    return rc;
}

struct tx_log *wal_tx_log(struct wal *wal)
{
    wal->txlog.commit = wal_tx_commit;
    return &wal->txlog;
}

int wal_set_on_durable(struct wal *wal, urt_durable_fn *fn, void *arg)
{
    pthread_mutex_lock(&wal->cb_lock);
    wal->on_durable = fn;
    wal->on_durable_arg = arg;
    pthread_mutex_unlock(&wal->cb_lock);
    return 0;
}

#if URT_FAULT_INJECTION
void wal_inject_fault(struct wal *wal, int kind)
{
    atomic_store_explicit(&wal->inject_next, kind, memory_order_relaxed);
}
#endif

void wal_read_stats(const struct wal *wal, struct urt_log_stats *o)
{
    memset(o, 0, sizeof(*o));
    for (uint32_t i = 0; i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
#define RD(f) atomic_load_explicit(&ch->f, memory_order_relaxed)
        o->fsyncs += RD(n_fsyncs);
        o->flushes += RD(n_flushes);
        o->bytes += RD(n_bytes);
        o->commits += RD(n_commits);
        o->io_errors += RD(n_errors);
        o->epoch_writes += RD(n_epoch_writes);
#undef RD
    }
    o->epoch = atomic_load_explicit(&((struct wal *)wal)->epoch, memory_order_relaxed);
    o->durable = atomic_load_explicit(&((struct wal *)wal)->persisted, memory_order_relaxed);
    o->sync_mode = (uint32_t)wal->sync.mode;
    snprintf(o->fs, sizeof(o->fs), "%s", wal->sync.fs);
}

/* ---- worker hooks ----------------------------------------------------------------------- */

void wal_worker_start(struct wal *wal, struct worker *w)
{
    struct chan *ch = wal->chans[w->index];
    ch->w = w;
}

bool wal_before_suspend(struct wal *wal, struct worker *w)
{
    struct chan *ch = wal->chans[w->index];
    if (!ch->flight && (ch->gather->n_recs || ch->repair))
        flush_now(ch); /* an idle worker flushes before it suspends */
    return false;       /* its suspension ends at the completion */
}

static void ignore_tag(void *ctx, uint64_t ud, int32_t res)
{
    (void)ctx, (void)ud, (void)res;
}

void wal_worker_stop(struct wal *wal, struct worker *w)
{
    struct chan *ch = wal->chans[w->index];
    /* Write what this channel still holds, and wait for every SQE of ours:
     * the buffers must outlive the kernel's use of them (rule 3). */
    if (!ch->flight && (ch->gather->n_recs || ch->repair))
        flush_now(ch);
    if (ch->timer_armed)
        sched_timer_cancel(w, &ch->io_t);
    sched_io_flush(w);
    int rounds = 0;
    while (ch->inflight && rounds++ < 100000) {
        if (!ch->flight && !ch->ebusy && !ch->xbusy)
            ch->stopping = true; /* only the timer is left: no new work from it */
        ring_wait(&w->ring, 10 * 1000 * 1000);
        ring_reap(&w->ring, ignore_tag, NULL);
    }
    ch->stopping = true;
}

/* ---- open / close ----------------------------------------------------------------------- */

static int set_err(char *err, size_t len, int rc, const char *fmt, const char *a, const char *b)
{
    if (err && len)
        snprintf(err, len, fmt, a, b);
    return rc;
}

static int write_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t r = pwrite(fd, b, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* One line per session in dir/sessions.log: the generation and how its
 * group commits are made durable (also in urt_log_stats). Best effort. */
static void note_session(struct wal *wal)
{
    int fd = openat(wal->dirfd, "sessions.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[256];
    int n = snprintf(line, sizeof(line), "%lld gen %" PRIu64 " workers %u log_sync %s (%s)\n", (long long)time(NULL),
                     wal->gen, wal->n_chan, wal->sync.mode == URT_LOG_SYNC_SINGLE_FLUSH ? "single_flush" : "strict",
                     wal->sync.why);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* a note only */
    }
    close(fd);
}

static int open_epoch_file(struct wal *wal, const char *dir, uint32_t next_slot, char *err, size_t errlen)
{
    wal->epochfd = openat(wal->dirfd, "epochs", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (wal->epochfd < 0)
        return set_err(err, errlen, -errno, "log_dir %s: cannot open the epoch file: %s", dir, strerror(errno));
    struct stat st;
    if (fstat(wal->epochfd, &st))
        return -errno;
    size_t want = (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE;
    if ((size_t)st.st_size < want) {
        /* Preallocate with real zeros: slot writes then overwrite allocated blocks. */
        void *z = calloc(1, want - (size_t)st.st_size);
        if (!z)
            return -ENOMEM;
        int rc = write_all(wal->epochfd, z, want - (size_t)st.st_size, (uint64_t)st.st_size);
        free(z);
        if (rc || fdatasync(wal->epochfd))
            return set_err(err, errlen, rc ? rc : -errno, "log_dir %s: cannot prepare the epoch file: %s", dir,
                           strerror(rc ? -rc : errno));
    }
    atomic_init(&wal->eslot_next, next_slot);
    return 0;
}

static int create_channel(struct wal *wal, struct chan *ch, const char *dir, uint64_t start_epoch, char *err,
                          size_t errlen)
{
    snprintf(ch->name, sizeof(ch->name), "ch-%016" PRIx64 "-%04x.wal", wal->gen, ch->index);
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (wal->o_direct ? O_DIRECT : 0);
    ch->fd = openat(wal->dirfd, ch->name, flags, 0644);
    if (ch->fd < 0)
        return set_err(err, errlen, -errno, "log_dir %s: cannot create a channel file: %s", dir, strerror(errno));
    wal_sync_nocow(&wal->sync, ch->fd); /* btrfs: while the file is empty */
    for (int i = 0; i < 2; i++)
        if (buf_reserve(&ch->bufs[i], 256 * 1024))
            return -ENOMEM;
    /* Block 0: the header record, then zeros (written now, with the preallocation). */
    struct wal_header_payload h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, WAL_MAGIC, 8);
    h.version = WAL_VERSION;
    h.worker = ch->index;
    h.gen = wal->gen;
    h.start_epoch = start_epoch;
    struct wal_buf *x = &ch->bufs[0];
    memset(x->data, 0, WAL_ALIGN);
    wal_rec_encode(x->data, WAL_REC_HEADER, start_epoch, 0, ++ch->lsn, &h, sizeof(h));
    x->base = 0;
    x->len = x->start = wal_rec_size(sizeof(h));
    buf_reset_batch(x);
    buf_reset_batch(&ch->bufs[1]);
    ch->gather = x;
    int rc = write_all(ch->fd, x->data, WAL_ALIGN, 0);
    uint64_t pre = (uint64_t)wal->cfg->log_prealloc_kb * 1024;
    for (uint64_t off = WAL_ALIGN; !rc && off < pre; off += wal->chunk)
        rc = write_all(ch->fd, wal->zeros, pre - off < wal->chunk ? align_up(pre - off, WAL_ALIGN) : wal->chunk, off);
    if (!rc && fdatasync(ch->fd))
        rc = -errno;
    if (rc)
        return set_err(err, errlen, rc, "log_dir %s: cannot write a channel file: %s", dir, strerror(-rc));
    /* log_prealloc_kb=0: nothing counts as preallocated, never a single-flush chain. */
    ch->prealloc_end = pre ? (pre > WAL_ALIGN ? align_up(pre, WAL_ALIGN) : WAL_ALIGN) : 0;
    atomic_init(&ch->pending_min, EPOCH_NONE);
    return 0;
}

int wal_open(struct sched *s, const struct urt_config *cfg, uint32_t n_workers, struct wal **out, char *err,
             size_t errlen)
{
    const char *dir = cfg->log_dir;
    *out = NULL;
    struct wal *wal = calloc(1, sizeof(*wal));
    if (!wal)
        return -ENOMEM;
    wal->s = s;
    wal->cfg = cfg;
    wal->dirfd = wal->lockfd = wal->epochfd = -1;
    wal->o_direct = cfg->o_direct;
    wal->epoch_ns = cfg->epoch_duration_us * 1000ull;
    pthread_mutex_init(&wal->heap_lock, NULL);
    pthread_mutex_init(&wal->cb_lock, NULL);
    pthread_mutex_init(&wal->txc_lock, NULL);
    int rc = wal_lock_dir(dir, true, err, errlen);
    if (rc < 0)
        goto fail;
    wal->lockfd = rc;
    struct urt_log_recovery rec;
    rc = wal_recover_locked(dir, 0, NULL, NULL, &rec, err, errlen);
    if (rc)
        goto fail;
    wal->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (wal->dirfd < 0) {
        rc = -errno;
        goto fail;
    }
    wal->gen = rec.max_gen + 1;
    if ((rc = wal_sync_choose(wal->dirfd, cfg, &wal->sync))) {
        set_err(err, errlen, rc, "log_dir %s: cannot stat the file system: %s", dir, strerror(-rc));
        goto fail;
    }
    uint64_t e0 = (rec.max_epoch > rec.durable_marker ? rec.max_epoch : rec.durable_marker) + 1;
    atomic_init(&wal->epoch, e0);
    atomic_init(&wal->target, rec.durable_marker);
    atomic_init(&wal->persisted, rec.durable_marker);
    atomic_init(&wal->announced, rec.durable_marker);
    wal->chunk = cfg->log_prealloc_kb ? align_up((size_t)cfg->log_prealloc_kb * 1024 / 2, WAL_ALIGN) : 0;
    size_t zlen = wal->chunk ? wal->chunk : WAL_ALIGN;
    if (posix_memalign((void **)&wal->zeros, WAL_ALIGN, zlen)) {
        wal->zeros = NULL;
        rc = -ENOMEM;
        goto fail;
    }
    memset(wal->zeros, 0, zlen);
    rc = open_epoch_file(wal, dir, rec.epoch_slot_next, err, errlen);
    if (rc)
        goto fail;
    wal->n_chan = n_workers;
    wal->chans = calloc(n_workers, sizeof(*wal->chans));
    if (!wal->chans) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < n_workers; i++) {
        struct chan *ch;
        if (posix_memalign((void **)&ch, 64, sizeof(*ch))) {
            rc = -ENOMEM;
            goto fail;
        }
        memset(ch, 0, sizeof(*ch));
        ch->wal = wal;
        ch->index = i;
        ch->fd = -1;
        wal->chans[i] = ch;
        rc = create_channel(wal, ch, dir, e0, err, errlen);
        if (rc)
            goto fail;
    }
    if (fsync(wal->dirfd)) { /* the new files' names are durable before anything in them counts */
        rc = -errno;
        goto fail;
    }
    wal->single_ok = wal->sync.mode == URT_LOG_SYNC_SINGLE_FLUSH;
    note_session(wal);
    *out = wal;
    return 0;
fail:
    wal_close(wal);
    return rc;
}

void wal_close(struct wal *wal)
{
    if (!wal)
        return;
    /* Whatever still waits (cancel-mode destroy, or a channel that stopped
     * with unflushed records): covered commits succeed, the rest are cancelled. */
    struct urt_commit *list = NULL, **tail = &list;
    uint64_t p = atomic_load_explicit(&wal->persisted, memory_order_relaxed);
    if (p > atomic_load_explicit(&wal->announced, memory_order_relaxed) && wal->on_durable)
        wal->on_durable(p, wal->on_durable_arg); /* the marker before the commits it covers */
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
        if (!ch)
            continue;
        for (struct urt_commit *c = ch->held_head, *n; c; c = n) {
            n = c->priv.next; /* accepted/available: the answer was only held back */
            c->priv.next = NULL;
            *tail = c;
            tail = &c->priv.next;
        }
        ch->held_head = ch->held_tail = NULL;
        for (int b = 0; b < 2; b++) {
            for (struct urt_commit *c = ch->bufs[b].wait_head, *n; c; c = n) {
                n = c->priv.next;
                c->priv.status = -ECANCELED;
                c->priv.next = NULL;
                *tail = c;
                tail = &c->priv.next;
            }
        }
    }
    while (wal->heap_n) {
        struct urt_commit *c = heap_pop(wal);
        c->priv.status = c->priv.marker <= p ? 0 : -ECANCELED;
        c->priv.next = NULL;
        *tail = c;
        tail = &c->priv.next;
    }
    run_list(list);
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
        if (!ch)
            continue;
        if (ch->fd >= 0)
            close(ch->fd);
        free(ch->bufs[0].data);
        free(ch->bufs[1].data);
        free(ch);
    }
    free(wal->chans);
    free(wal->heap);
    free(wal->zeros);
    if (wal->epochfd >= 0)
        close(wal->epochfd);
    if (wal->dirfd >= 0)
        close(wal->dirfd);
    if (wal->lockfd >= 0)
        close(wal->lockfd); /* releases the flock */
    pthread_mutex_destroy(&wal->heap_lock);
    pthread_mutex_destroy(&wal->cb_lock);
    for (struct wal_txc *t = wal->txc_free, *n; t; t = n) {
        n = t->next_free;
        free(t);
    }
    pthread_mutex_destroy(&wal->txc_lock);
    free(wal);
}
