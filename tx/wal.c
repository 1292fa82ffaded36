/*
 * tx/wal.c — the write-ahead log of a runtime: log channels, epochs, group
 * commit and commit responses (SPEC C12–C13). File format: wal_format.h.
 * The log is in three parts (tx/wal_int.h): channel and flush
 * (wal_chan.c, its files and preallocation in wal_file.c), durable marker,
 * claims and epoch file (wal_marker.c), delivery (delivery.c); this file
 * holds the whole together: open and close, the commit entry, the
 * transaction seam, statistics.
 *
 * Objects
 *   struct wal   one per runtime: the log directory, the global epoch E (the
 *                open epoch), the durable marker, the epoch file, the heap of
 *                `stored` commits waiting for the marker.
 *   struct chan  one per worker (or for the first log_channels workers
 *                only): its own file, two buffers (one gathering records,
 *                one being written), its I/O on the worker's ring.
 *                Everything in it is owner-only except pending_min and the
 *                counters.
 *
 * Routing: a commit on a worker that owns no channel (log_channels < workers)
 * hops, as a task, to the sticky queue of worker (index % n_chan) — never
 * stolen, FIFO per sender, so a worker's commits are appended in the order it
 * made them — and takes the path below there. Fewer channels, fewer writes
 * per stored commit: D is global, so with a channel per worker a commit waits
 * for the other channels' writes of its epoch (often the one after the write
 * in flight) and then for a write carrying D; with one channel the write
 * holding its records carries D (docs/durability.md).
 *
 * A commit's path (all on the worker W the commit runs on):
 *   append: the record goes to W's gathering buffer, tagged with e = E; its
 *     marker is e. accepted/available: the callback is queued as a task on W.
 *     stored: the commit joins the buffer's waiter list and a flush is
 *     requested (a task that yields once, so everything runnable appends
 *     first: the batch).
 *   flush (at most one in flight per channel; the next batch gathers behind
 *     it): E is advanced past the buffer's largest epoch (the epochs it holds
 *     are now closed), the buffers swap, and W's ring gets, with log_sync
 *     single_write, ONE O_DIRECT write with RWF_DSYNC (the write and its
 *     fdatasync in one request: one device write and one flush), ending,
 *     when it moves the durable marker past every marker claimed so far,
 *     with a claim record of that marker (wal_marker.c: no epoch-file write;
 *     a lone client waits one device round trip), else
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
 *     below the failed epochs until a repair (zeros over what the failed
 *     write may have left inside the preallocation, a truncation past it: no
 *     new blocks, it succeeds on a full disk) is durable; the next write
 *     waits for a back-off (wal_fail.c). On
 *     success the flushed waiters move into the heap, pending_min is raised,
 *     and the durable marker D is recomputed:
 *         D = min(E - 1, min over channels holding unflushed records of
 *                        (their lowest unflushed epoch - 1))
 *     If D passed every marker already sent (claimed), W's next write claims
 *     it at once (single_write; with what gathered, or alone), or W writes D
 *     to the next epoch-file slot linked with fdatasync. When that
 *     completes (or a claim's write did), `persisted` = D: the engine's
 *     durability callback runs (serialized, increasing markers; then
 *     `announced` = D), every waiting commit with marker <= D is popped from
 *     the heap in marker order and released by one notification task (on W
 *     if W has nothing queued, else urgent placement on a suspended worker),
 *     which leaves the later half of a list whose callbacks run long for
 *     idle workers to steal (delivery.c). Nobody waiting: no task. While W's write is in
 *     flight W polls its ring instead of suspending (log_poll_us).
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

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "bpf/probes.h"
#include "tx/wal_int.h"

int wal_write_all(int fd, const void *p, size_t n, uint64_t off)
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

/* ---- commits ------------------------------------------------------------------------- */

static enum urt_task_result hop_run(struct urt_task *t, void *arg);
static void hop_cancel(struct urt_task *t, void *arg);

/* The worker owning the channel that worker `index`'s commits go to
 * (log_channels): itself when index < n_chan, else worker index % n_chan. */
static struct worker *chan_owner(const struct wal *wal, uint32_t index)
{
    return wal->s->workers[index % wal->n_chan];
}

/* c as a task that appends it on the worker it runs on (hop_run). */
static struct urt_task *hop_task(struct urt_commit *c)
{
    c->priv.state = CS_HOP;
    urt_task_init(&c->priv.task, hop_run, c);
    c->priv.task.cancel = hop_cancel;
    return &c->priv.task;
}

/* Routing to a channel's owner: its sticky queue (never stolen; FIFO per
 * sender, so a worker's commits are appended in the order it made them; it
 * wakes that worker if it sleeps). */
static enum urt_task_result hop_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    struct wal *wal = c->priv.wal;
    struct worker *self = sched_self(), *to = chan_owner(wal, self->index);
    if (to != self)
        sched_submit_to(wal->s, to, hop_task(c)); /* from a foreign thread to a worker without a channel */
    else
        chan_append_commit(wal, self, c, true);
    return URT_TASK_DONE;
}

static void hop_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    c->priv.status = -ECANCELED;
    c->priv.next = NULL;
    delivery_run_list(c);
}

int wal_commit(struct wal *wal, struct urt_commit *c)
{
    c->priv.wal = wal;
    c->priv.submit_ns = probe_log_timing_on() ? urt_clock_ns() : 0;
    struct worker *w = sched_current(wal->s);
    if (!w)
        return sched_submit(wal->s, hop_task(c), 0); /* placed as any task; hop_run appends or hops on */
    struct worker *to = chan_owner(wal, w->index);
    if (to != w)
        return sched_submit_to(wal->s, to, hop_task(c)); /* from a worker: 0 */
    chan_append_commit(wal, w, c, false);
    return 0;
}

/* ---- transactions (tx/commit_hook.h) -------------------------------------------------- */

/* log->commit: the transaction ended (pre-commit ran); its records go to the
 * channel of the committing worker, or of any worker when the committing
 * thread is not one (the commit hops there first). The commit is the one
 * embedded in the transaction. */
static int wal_tx_commit(struct tx_log *log, urt_tx *tx, enum urt_commit_response response)
{
    struct wal *wal = (struct wal *)((char *)log - offsetof(struct wal, txlog));
    struct urt_commit *c = tx_log_commit(tx, response);
    c->priv.len = WAL_TX_RECORDS; /* the records are read from the transaction */
    return wal_commit(wal, c);
}

struct tx_log *wal_tx_log(struct wal *wal)
{
    wal->txlog.commit = wal_tx_commit;
    return &wal->txlog;
}

int wal_set_on_durable(struct wal *wal, urt_durable_fn *fn, void *arg)
{
    return delivery_set_on_durable(&wal->dl, fn, arg);
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
        o->claims += RD(n_claims);
#undef RD
    }
    o->epoch = atomic_load_explicit(&((struct wal *)wal)->epoch, memory_order_relaxed);
    o->durable = atomic_load_explicit(&((struct wal *)wal)->dl.persisted, memory_order_relaxed);
    o->sync_mode = (uint32_t)wal->sync.mode;
    o->checkpoint = atomic_load_explicit(&((struct wal *)wal)->checkpoint, memory_order_relaxed);
    snprintf(o->fs, sizeof(o->fs), "%s", wal->sync.fs);
}

/* ---- open / close ----------------------------------------------------------------------- */

/* One line per session in dir/sessions.log: the generation, how its group
 * commits are made durable (also in urt_log_stats), and the backend the
 * runtime runs on, with why (urt_runtime_backend). Best effort. */
static void note_session(struct wal *wal)
{
    int fd = openat(wal->dirfd, "sessions.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[512];
    const struct be_caps *caps = &wal->s->caps;
    int n = snprintf(line, sizeof(line), "%lld gen %" PRIu64 " workers %u channels %u log_sync %s (%s) backend %s (%s)\n",
                     (long long)time(NULL), wal->gen, wal->cfg->workers, wal->n_chan, wal_sync_name(wal->sync.mode),
                     wal->sync.why, be_impl_name(be_impl_of(caps)), caps->why);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* a note only */
    }
    close(fd);
}

static void note_existing(void *arg, const struct urt_log_channel_info *ch)
{
    wal_add_closed(arg, ch->file, ch->n_records ? ch->last_epoch : ch->first_epoch);
}

static struct wal *wal_alloc(struct sched *s, const struct urt_config *cfg)
{
    struct wal *wal = calloc(1, sizeof(*wal));
    if (!wal)
        return NULL;
    wal->s = s;
    wal->cfg = cfg;
    wal->dirfd = wal->lockfd = wal->epochfd = -1;
    wal->irq_cpu = -1;
    wal->o_direct = cfg->o_direct;
    wal->epoch_ns = cfg->epoch_duration_us * 1000ull;
    wal->poll_cap_ns = cfg->log_poll_us * 1000ull;
    delivery_init(&wal->dl, s, 0, cfg->direct_commit_callback);
    pthread_mutex_init(&wal->seg_lock, NULL);
    pthread_mutex_init(&wal->ckpt_lock, NULL);
    wal->seg_bytes = (uint64_t)cfg->log_segment_kb * 1024;
    return wal;
}

/* Lock, recover (cut what recovery cuts, replay nothing), open the directory,
 * choose the sync mode. Epochs and markers continue above what was found. */
static int open_dir(struct wal *wal, const char *dir, struct urt_log_recovery *rec)
{
    int rc = wal_lock_dir(dir, true);
    if (rc < 0)
        return rc;
    wal->lockfd = rc;
    /* Every file found is a closed segment for the checkpoints to come. */
    struct urt_log_recover_ops ops = {.channel = note_existing};
    if ((rc = wal_recover_locked(dir, 0, &ops, wal, rec)))
        return rc;
    atomic_init(&wal->checkpoint, rec->checkpoint);
    wal->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (wal->dirfd < 0)
        return -errno;
    if ((rc = wal_sync_choose(wal->dirfd, wal->cfg, &wal->sync)))
        return urt__error(rc, "log_dir %s: cannot stat the file system: %s", dir, strerror(-rc));
    if (be_impl_of(&wal->s->caps) == BE_IMPL_PORTABLE)
        wal_sync_portable(&wal->sync);
    if (wal->sync.mode == URT_LOG_SYNC_SINGLE_WRITE)
        wal->o_direct = true; /* confirmed (or withdrawn) by the first channel file (chan_create) */
    wal->gen = rec->max_gen + 1;
    atomic_init(&wal->target, rec->durable_marker);
    atomic_init(&wal->dl.persisted, rec->durable_marker);
    atomic_init(&wal->dl.announced, rec->durable_marker);
    wal->chunk = wal->cfg->log_prealloc_kb ? wal_align_up((size_t)wal->cfg->log_prealloc_kb * 1024 / 2, WAL_ALIGN) : 0;
    wal->piece = wal->chunk < WAL_EXT_PIECE ? wal->chunk : WAL_EXT_PIECE;
    size_t zlen = wal->chunk ? wal->chunk : WAL_ALIGN;
    if (posix_memalign((void **)&wal->zeros, WAL_ALIGN, zlen)) {
        wal->zeros = NULL;
        return -ENOMEM;
    }
    memset(wal->zeros, 0, zlen);
    return 0;
}

/* log_channels channels (0 or more than the workers: one per worker), owned
 * by workers 0 .. n_chan-1. */
static int open_channels(struct wal *wal, const char *dir, uint32_t n_workers, uint64_t e0)
{
    uint32_t n = wal->cfg->log_channels;
    wal->n_chan = n && n < n_workers ? n : n_workers;
    if (wal->n_chan == 1 && wal->cfg->log_irq_affinity)
        wal->irq_cpu = wal_irq_cpu(wal->dirfd); /* one channel, one CPU to be near (wal_irq.c) */
    wal->chans = calloc(wal->n_chan, sizeof(*wal->chans));
    if (!wal->chans)
        return -ENOMEM;
    for (uint32_t i = 0; i < wal->n_chan; i++) {
        struct chan *ch;
        if (posix_memalign((void **)&ch, 64, sizeof(*ch)))
            return -ENOMEM;
        memset(ch, 0, sizeof(*ch));
        ch->wal = wal;
        ch->index = i;
        ch->fd = -1;
        wal->chans[i] = ch;
        int rc = chan_create(wal, ch, dir, e0);
        if (rc)
            return rc;
    }
    return 0;
}

/* A start that failed leaves the directory as it found it: the channel
 * files this session created hold no record and nothing names them (best
 * effort; a full disk gets its blocks back). */
static void unlink_session(struct wal *wal)
{
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++)
        if (wal->chans[i] && wal->chans[i]->fd >= 0)
            unlinkat(wal->dirfd, wal->chans[i]->name, 0);
}

int wal_open(struct sched *s, const struct urt_config *cfg, uint32_t n_workers, struct wal **out)
{
    const char *dir = cfg->log_dir;
    *out = NULL;
    struct wal *wal = wal_alloc(s, cfg);
    if (!wal)
        return -ENOMEM;
    struct urt_log_recovery rec;
    int rc = open_dir(wal, dir, &rec);
    uint64_t e0 = (rec.max_epoch > rec.durable_marker ? rec.max_epoch : rec.durable_marker) + 1;
    if (!rc) {
        atomic_init(&wal->epoch, e0);
        rc = marker_open_epoch_file(wal, dir, rec.epoch_slot_next);
    }
    if (!rc)
        rc = open_channels(wal, dir, n_workers, e0);
    if (!rc && fsync(wal->dirfd)) /* the new files' names are durable before anything in them counts */
        rc = -errno;
    if (rc) {
        unlink_session(wal);
        wal_close(wal);
        return rc;
    }
    wal->single_ok = wal->sync.mode == URT_LOG_SYNC_SINGLE_FLUSH || wal->sync.mode == URT_LOG_SYNC_SINGLE_WRITE;
    wal->dsync = wal->sync.mode == URT_LOG_SYNC_SINGLE_WRITE;
    note_session(wal);
    *out = wal;
    return 0;
}

/* Cancel-mode destroy, or a channel that stopped with unflushed records:
 * held answers go out as they were, unflushed stored commits are cancelled,
 * waiting ones succeed if the persisted marker covers them. */
static void close_deliveries(struct wal *wal)
{
    struct urt_commit *list = NULL, **tail = &list;
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
        if (!ch)
            continue;
        delivery_append(&tail, ch->held_head, 0, false);
        ch->held_head = ch->held_tail = NULL;
        delivery_append(&tail, ch->failed_head, 0, false); /* a failed claim write's errors, as they are */
        ch->failed_head = ch->failed_tail = NULL;
        for (int b = 0; b < 2; b++)
            delivery_append(&tail, ch->bufs[b].wait_head, -ECANCELED, true);
    }
    delivery_close(&wal->dl, list);
}

void wal_close(struct wal *wal)
{
    if (!wal)
        return;
    close_deliveries(wal);
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
        if (!ch)
            continue;
        chan_drop_next(ch);
        if (ch->fd >= 0)
            close(ch->fd);
        free(ch->bufs[0].data);
        free(ch->bufs[1].data);
        free(ch);
    }
    free(wal->chans);
    free(wal->zeros);
    if (wal->epochfd >= 0)
        close(wal->epochfd);
    if (wal->dirfd >= 0)
        close(wal->dirfd);
    if (wal->lockfd >= 0)
        close(wal->lockfd); /* releases the flock */
    delivery_destroy(&wal->dl);
    free(wal->closed);
    pthread_mutex_destroy(&wal->seg_lock);
    pthread_mutex_destroy(&wal->ckpt_lock);
    free(wal);
}
