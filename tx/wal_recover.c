/*
 * tx/wal_recover.c — opening a log directory: lock, verify, cut, replay (SPEC C14).
 *
 * Recovery algorithm (format in wal_format.h; steps 4 and 5 are in
 * wal_recover_marker.c, the state both halves share in wal_recover_int.h):
 *   1. Lock: dir/LOCK is flock()ed (LOCK_EX|LOCK_NB) for as long as a runtime
 *      or a recovery uses the directory; another holder gets -EBUSY. A dry
 *      run (tools/urt-wal) takes no lock and changes nothing.
 *   2. Identify: every entry must be LOCK, epochs, epochs.tmp, cuts.log,
 *      sessions.log or ch-<gen>-<worker>.wal; anything else means this is
 *      not a urt log directory (-EMEDIUMTYPE).
 *   3. Map every channel and scan it (wal_scan): the valid prefix, and where
 *      and why it stopped.
 *   4. Durable marker D (rec_choose_durable): the valid epoch-file slots and
 *      the claims (WAL_REC_MARKER records of log_sync single_write, each
 *      inside its channel's valid prefix, so it holds: rec_add_claims) sorted by
 *      marker; D is the largest marker reached before the first slot whose
 *      condition fails (its channel's valid prefix does not reach the slot's
 *      `end`). Conditions are cumulative: a later slot builds on every
 *      earlier one, so once one is broken (its log bytes were lost) no later
 *      marker is believed either — a later unconditional slot or claim
 *      cannot vouch for an epoch whose records another channel lost. D is
 *      never below the checkpoint (written only at or below a durable
 *      marker, whose claim may have been deleted with its segment).
 *   5. Damage below D (rec_damage_windows): a channel that stopped on corrupt or
 *      zeroed data FOLLOWED by a valid record of an epoch <= D (damage in
 *      the middle of durable data, not a torn write) lost records of epochs
 *      >= g, g = the epoch of its last valid record (the damaged record's
 *      own header tells nothing: its checksum failed); without one the
 *      start epoch in its header; with its header damaged the generation's
 *      start epoch (in a first segment's header: a later segment of another
 *      channel starts later than this file may), else 0. Epochs g..M (M:
 *      the largest epoch on disk, or D) are then incomplete: a window of
 *      lost epochs, never replayed from any channel, so that a transaction
 *      (one epoch, one channel) is replayed whole or not at all and replay
 *      is a prefix of the epoch order up to the damage (a later
 *      transaction may depend on a lost one). Windows earlier recoveries
 *      found are read back from the epoch file (step 8) and merged; those
 *      entirely above D or at or below the checkpoint no longer matter.
 *      The replay limit R reported is D, or the start of the window D lies
 *      in. The largest epoch found includes the windows' ends (the files
 *      that held those epochs may be gone since), and a later session starts
 *      above it: its epochs are outside every window, and its commits are
 *      replayed up to its D (a window used to
 *      be a plain limit "replay no further than R", which cut every commit
 *      of the sessions after it that never rewrote the epoch file). Damage
 *      followed only by records of epochs above D (or by nothing) is a torn
 *      tail: what a crash leaves behind an unfinished write; it makes no
 *      window.
 *   6. Plan the cuts: each channel is cut at the earlier of its damage and
 *      its first record that is not replayable (above D, or in a window),
 *      with a reason that names the damage when damage is the cause. A file
 *      whose records left after its cut are all at or below the checkpoint
 *      (its header only: its start epoch) is cut, then deleted: judged after
 *      the cut, as the next recovery will judge it. So is a file with
 *      nothing readable, not even its header (blank: a segment file made
 *      ready for a roll that never came, or a crash inside a creation).
 *   7. Replay (before anything is cut, so that the mapped bytes are still
 *      there, URT_LOG_RECOVER_ALL included): the records above the
 *      checkpoint, at most D and in no window (or every valid record) of all
 *      channels, merged in epoch order (ties: generation, then worker; then
 *      lsn).
 *   8. Persist (not in a dry run), unless the epoch file already is what a
 *      recovery writes and nothing is cut or deleted: the kept channels are
 *      fsync'd, the epoch file is rewritten in place (wal_epochs.c: slot by
 *      slot in four fdatasync'd phases that each leave the same D and
 *      windows; no new block, so recovery works on a full disk; replaced by
 *      epochs.tmp + rename only when absent or short) as one unconditional
 *      slot holding D and, after damage, one limit slot per window of lost
 *      epochs, then the cuts are
 *      made (truncate + fsync) and noted in dir/cuts.log, one line each:
 *      "<unix time> <file> offset <n> bytes <n> <reason> (...)", then the
 *      files checkpointed away are deleted and the directory fsync'd. Marker
 *      and windows first, cuts second: a crash in between leaves D, the
 *      windows and records above or in them, which the next recovery cuts
 *      (the windows keep it from replaying what this one did not, even when
 *      the damage itself is cut already). A file is cut before it is
 *      deleted: should the deletion not last, what it holds is cut. Records
 *      of non-durable epochs are cut so that a later session's markers
 *      (which start above every epoch seen) can never make them replayable.
 *      Nothing here needs a new block: the cuts and deletions free space,
 *      the notes in cuts.log are best effort; a failure for want of space
 *      says what to do (free space; URT_LOG_RECOVER_DRY_RUN replays the same
 *      records changing nothing).
 * Idempotent: a second run (with or without runtimes started in between)
 * finds D unconditional and the same windows, nothing to cut, and replays
 * the same records; the marker it reports never goes down. Claims that
 * survive a recovery are replayable (a claim's epoch is never below its
 * marker, so one above D or in a window is cut with the records after it):
 * they cannot raise a later recovery's marker over records this one cut.
 * Checked by tests/unit/test_wal_property.c on generated directories
 * (crashes at any point, damage) and its shrunk fixtures.
 *
 * Threading: plain blocking file I/O on the calling thread; no shared state.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "tx/wal.h"
#include "tx/wal_dir.h"
#include "tx/wal_format.h"
#include "tx/wal_recover_int.h"

static int collect(void *arg, const struct wal_rec *r)
{
    struct rchan *c = arg;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct rrec *p = realloc(c->recs, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        c->recs = p;
        c->cap = cap;
    }
    c->recs[c->n++] = (struct rrec){r->off, r->epoch, r->tx_id, r->lsn, r->len, r->flags, r->type};
    return 0;
}

static int cmp_chan(const void *a, const void *b)
{
    const struct rchan *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->seg < y->seg ? -1 : x->seg > y->seg;
}

/* ---- steps 2-3: find and scan the channels ------------------------------------------- */

static int add_channel(struct recovery *r, const char *name, uint64_t g, uint32_t w, uint32_t k)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct rchan *p = realloc(r->ch, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        r->ch = p;
        r->cap = cap;
    }
    struct rchan *c = &r->ch[r->n++];
    memset(c, 0, sizeof(*c));
    size_t len = strnlen(name, sizeof(c->name) - 1); /* 28 or 35: wal_parse_channel_name checked it */
    memcpy(c->name, name, len);
    c->name[len] = 0;
    c->gen = g;
    c->worker = w;
    c->seg = k;
    if (g > r->res.max_gen)
        r->res.max_gen = g;
    return 0;
}

static int list_channels(struct recovery *r)
{
    int fd = dup(r->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return urt__error(-e, "log directory %s: %s", r->dir, strerror(e));
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        uint64_t g;
        uint32_t w, k;
        if (wal_parse_channel_name(e->d_name, &g, &w, &k))
            rc = add_channel(r, e->d_name, g, w, k);
    }
    closedir(d);
    if (r->n)
        qsort(r->ch, r->n, sizeof(*r->ch), cmp_chan);
    return rc;
}

static int scan_channels(struct recovery *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct rchan *c = &r->ch[i];
        int rc = wal_map_whole(r->dirfd, c->name, &c->data, &c->size);
        if (rc)
            return urt__error(rc, "log directory %s: cannot map %s: %s", r->dir, c->name, strerror(-rc));
        if ((rc = wal_scan(c->data, c->size, collect, c, &c->scan)))
            return urt__error(rc, "log directory %s: cannot scan %s: %s", r->dir, c->name, strerror(-rc));
        if (c->scan.header_ok && c->scan.header.start_epoch > r->res.max_epoch)
            r->res.max_epoch = c->scan.header.start_epoch;
        if (c->scan.last_epoch > r->res.max_epoch)
            r->res.max_epoch = c->scan.last_epoch;
        if (c->scan.resync_found && c->scan.resync_epoch > r->res.max_epoch)
            r->res.max_epoch = c->scan.resync_epoch; /* never reuse an epoch found on disk */
    }
    r->res.channels = (uint32_t)r->n;
    return 0;
}

/* ---- step 6: where each channel is cut -------------------------------------------------- */

static const struct rchan *first_middle(const struct recovery *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ch[i].middle)
            return &r->ch[i];
    return NULL;
}

/* Format 2: a commit's last record carries WAL_REC_F_END. Records after the
 * last such record belong to a commit whose end is missing (a torn write,
 * or damage at the tail): never replayed, cut. */
static void cut_incomplete_commit(struct rchan *c)
{
    if (!c->scan.header_ok || c->scan.header.version < 2 || c->n == 0)
        return;
    size_t k = c->n;
    while (k > 0 && !(c->recs[k - 1].flags & WAL_REC_F_END))
        k--;
    if (k == c->n || c->recs[k].off >= c->cut_off)
        return;
    c->cut_off = c->recs[k].off;
    snprintf(c->cut_reason, sizeof(c->cut_reason), "incomplete commit at the end (tx %" PRIu64 ": its last record is missing)%s",
             c->recs[k].tx_id, c->scan.end == WAL_SCAN_END_CORRUPT ? "; then damage" : "");
}

/* Why c is cut at its first record k that is not replayable. */
static void cut_reason(struct recovery *r, struct rchan *c, size_t k)
{
    uint64_t e = c->recs[k].epoch;
    const struct rwin *w = e <= r->res.durable_marker ? rec_window_of(r, e) : NULL;
    const struct rchan *m = first_middle(r);
    uint64_t from = w ? w->lo + 1 : e;
    if (c->middle)
        snprintf(c->cut_reason, sizeof(c->cut_reason),
                 "damage: %s at offset %" PRIu64 "; epochs from %" PRIu64 " are incomplete", c->scan.reason,
                 c->scan.bad_off, from);
    else if (w && m)
        snprintf(c->cut_reason, sizeof(c->cut_reason),
                 "epoch above the replay limit %" PRIu64 " (damage in %s: epochs from %" PRIu64 " are incomplete)",
                 w->lo, m->name, from);
    else if (w)
        snprintf(c->cut_reason, sizeof(c->cut_reason),
                 "epoch in %" PRIu64 "..%" PRIu64 ", incomplete: damage an earlier recovery found", from, w->hi);
    else
        snprintf(c->cut_reason, sizeof(c->cut_reason), "not durable (epoch above the durable marker)");
    if (!c->middle)
        c->cut_corrupt = false;
}

static void plan_cut(struct recovery *r, struct rchan *c)
{
    c->cut_off = c->size;
    if (c->scan.end == WAL_SCAN_END_CORRUPT) {
        c->cut_off = c->scan.valid_end;
        c->cut_corrupt = true;
        snprintf(c->cut_reason, sizeof(c->cut_reason), "%s%s", c->scan.reason,
                 c->middle ? " (damage: valid records follow)" : "");
    }
    for (size_t k = 0; k < c->n; k++) {
        if (rec_replayable(r, c->recs[k].epoch))
            continue; /* epochs never decrease along a file: all after it are cut too */
        if (c->recs[k].off < c->cut_off) {
            c->cut_off = c->recs[k].off;
            cut_reason(r, c, k);
        }
        break;
    }
    cut_incomplete_commit(c);
}

static void report_channel(const struct rchan *c, const struct urt_log_recover_ops *ops, void *arg)
{
    if (!ops || !ops->channel)
        return;
    struct urt_log_channel_info info = {.file = c->name, .gen = c->gen, .worker = c->worker,
                                        .header_ok = c->scan.header_ok, .size = c->size,
                                        .valid_end = c->scan.valid_end, .n_records = c->n,
                                        .first_epoch = c->n ? c->recs[0].epoch : 0,
                                        .last_epoch = c->n ? c->recs[c->n - 1].epoch : 0};
    ops->channel(arg, &info);
}

/* Every record c keeps (those before its cut) is at or below the checkpoint
 * (none: its generation started at or below it): the file is no longer
 * needed. Judged on what the cut leaves, not on what the file held: the
 * next recovery finds the file cut and must decide the same (a file cut down
 * to checkpointed records and kept would be deleted by the next one). What
 * lies after a cut (damage, epochs above the limit) is gone either way. */
static bool all_checkpointed(const struct recovery *r, const struct rchan *c)
{
    uint64_t ck = r->res.checkpoint;
    if (!ck || !c->scan.header_ok)
        return false;
    size_t kept = 0;
    while (kept < c->n && c->recs[kept].off < c->cut_off)
        kept++;
    return kept ? c->recs[kept - 1].epoch <= ck : c->scan.header.start_epoch <= ck;
}

/* The file holds nothing readable, not even its header: empty, zeros (a
 * segment file made ready for a roll that never came, wal_seg.c), or a first
 * write torn by a crash (then cut to nothing first, like every file that is
 * deleted). Whatever it held is lost either way; the windows and the marker
 * it implies are persisted before anything is deleted (step 8), and the next
 * recovery, finding it empty or gone, judges the same. */
static bool blank(const struct rchan *c)
{
    return c->scan.valid_end == 0;
}

static void plan_cuts(struct recovery *r, const struct urt_log_recover_ops *ops, void *arg)
{
    for (size_t i = 0; i < r->n; i++) {
        struct rchan *c = &r->ch[i];
        plan_cut(r, c);
        report_channel(c, ops, arg);
        c->drop = all_checkpointed(r, c) || blank(c); /* cut first (reported: damage stays reported), then deleted */
        r->res.deleted += c->drop;
        if (c->cut_off >= c->size)
            continue;
        r->res.cuts++;
        r->res.cut_bytes += c->size - c->cut_off;
        if (ops && ops->cut) {
            struct urt_log_cut cut = {.file = c->name, .offset = c->cut_off, .bytes = c->size - c->cut_off,
                                      .reason = c->cut_reason, .corrupt = c->cut_corrupt,
                                      .middle = c->cut_corrupt && c->middle};
            ops->cut(arg, &cut);
        }
    }
}

/* ---- step 7: replay ---------------------------------------------------------------------- */

/* The records of c to replay: [*from, *to) (epochs above the checkpoint,
 * durable and in no window of lost epochs, before the cut; epochs never
 * decrease). */
static void replay_range(const struct recovery *r, const struct rchan *c, size_t *from, size_t *to)
{
    size_t a = 0, b = c->n;
    if (!(r->flags & URT_LOG_RECOVER_ALL)) {
        while (a < c->n && c->recs[a].epoch <= r->res.checkpoint)
            a++;
        b = a;
        while (b < c->n && rec_replayable(r, c->recs[b].epoch) && c->recs[b].off < c->cut_off)
            b++;
    }
    *from = a;
    *to = b;
}

static int replay(struct recovery *r, const struct urt_log_recover_ops *ops, void *arg)
{
    size_t n = r->n;
    struct rchan *ch = r->ch;
    size_t *pos = calloc(n ? 2 * n : 1, sizeof(*pos)), *end = pos + n;
    if (!pos)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        replay_range(r, &ch[i], &pos[i], &end[i]);
    int rc = 0;
    for (;;) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (pos[i] < end[i] && (best == n || ch[i].recs[pos[i]].epoch < ch[best].recs[pos[best]].epoch))
                best = i;
        if (best == n)
            break;
        const struct rrec *x = &ch[best].recs[pos[best]++];
        if (x->type == WAL_REC_MARKER)
            continue; /* a claim: read in step 4, never replayed */
        struct urt_log_record out = {.epoch = x->epoch, .tx_id = x->tx_id, .lsn = x->lsn, .gen = ch[best].gen,
                                     .worker = ch[best].worker, .len = x->len,
                                     .payload = ch[best].data + x->off + WAL_HDR_SIZE};
        r->res.replayed++;
        if ((rc = ops->record(arg, &out)))
            break;
    }
    free(pos);
    return rc;
}

/* ---- step 8: make it so on disk ------------------------------------------------------- */

static void note_cut(struct recovery *r, const struct rchan *c)
{
    int fd = openat(r->dirfd, "cuts.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* a note only: the cut itself is done and reported */
    char line[640];
    int n = snprintf(line, sizeof(line),
                     "%lld %s offset %" PRIu64 " bytes %" PRIu64 " %s (durable marker %" PRIu64 ", replay up to %" PRIu64
                     ")\n",
                     (long long)time(NULL), c->name, c->cut_off, (uint64_t)c->size - c->cut_off, c->cut_reason,
                     r->res.durable_marker, r->res.replay_marker);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* nothing to do: the note is best effort */
    }
    close(fd);
}

/* What to do when persisting failed for want of space. */
static const char *space_hint(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT
               ? " (free space and recover again; URT_LOG_RECOVER_DRY_RUN replays without writing)"
               : "";
}

static int sync_name(struct recovery *r, const char *name)
{
    int fd = openat(r->dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return urt__error(-e, "log directory %s: cannot sync %s: %s%s", r->dir, name, strerror(e), space_hint(-e));
    }
    close(fd);
    return 0;
}

/* What recovery read of the kept channels is on stable storage before the
 * marker that relies on it is rewritten without conditions. */
static int sync_kept(struct recovery *r)
{
    for (size_t i = 0; i < r->n; i++) {
        int rc = sync_name(r, r->ch[i].name);
        if (rc)
            return rc;
    }
    return 0;
}

/* What the epoch file holds after a recovery: slot 0, D without a
 * condition; slots 1.., the windows of lost epochs (limit slots: marker lo,
 * end hi); zeros. */
static void epochs_image(const struct recovery *r, uint8_t *b)
{
    if (!r->res.durable_marker)
        return; /* nothing durable: no window matters either (merge_windows) */
    struct wal_epoch_slot s = {.marker = r->res.durable_marker};
    wal_epoch_slot_encode(b, &s);
    for (size_t i = 0; i < r->n_win && i + 1 < EPOCH_SLOTS; i++) {
        struct wal_epoch_slot lim = {.marker = r->win[i].lo, .gen = WAL_SLOT_LIMIT, .end = r->win[i].hi};
        wal_epoch_slot_encode(b + (i + 1) * EPOCH_SLOT_SIZE, &lim);
    }
}

/* Whether the epoch file already holds the image (only a recovery writes
 * exactly that, after an fdatasync: it is durable), or there is neither a
 * file nor anything to make durable. */
static bool epochs_current(const struct recovery *r, const uint8_t *img, size_t size)
{
    if (!r->epochs)
        return r->n == 0 && !r->res.durable_marker;
    return r->epochs_len == size && !memcmp(r->epochs, img, size);
}

static bool holds_cb(void *arg, const struct wal_epoch_slot *e)
{
    return rec_slot_holds(arg, e);
}

/* The epoch file becomes img, in place: no new block (wal_epochs.c); absent
 * or short, it is replaced (epochs.tmp, fdatasync, rename, directory fsync). */
static int rewrite_epochs(struct recovery *r, const uint8_t *img)
{
    int rc = wal_epochs_rewrite(r->dirfd, img, r->res.durable_marker, holds_cb, r);
    if (rc == -EFBIG)
        rc = wal_epochs_replace(r->dirfd, img);
    if (rc)
        return urt__error(rc, "log directory %s: cannot rewrite the epoch file: %s%s", r->dir,
                          strerror(-rc), space_hint(rc));
    return 0;
}

static int apply_cuts(struct recovery *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct rchan *c = &r->ch[i];
        if (c->cut_off >= c->size)
            continue; /* a file to delete is cut first: should its deletion not last, what it holds is cut */
        int fd = openat(r->dirfd, c->name, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)c->cut_off) || fsync(fd)) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return urt__error(-e, "log directory %s: cannot cut %s: %s", r->dir, c->name, strerror(e));
        }
        close(fd);
        note_cut(r, c);
    }
    return 0;
}

/* Files wholly at or below the checkpoint (once cut) go: their records are
 * never replayed again; so do blank ones; the directory is fsync'd after. */
static int delete_checkpointed(struct recovery *r)
{
    if (!r->res.deleted)
        return 0;
    for (size_t i = 0; i < r->n; i++) {
        struct rchan *c = &r->ch[i];
        if (!c->drop)
            continue;
        if (unlinkat(r->dirfd, c->name, 0) && errno != ENOENT)
            return urt__error(-errno, "log directory %s: cannot delete %s: %s", r->dir, c->name, strerror(errno));
    }
    if (fsync(r->dirfd))
        return urt__error(-errno, "log directory %s: cannot sync it: %s", r->dir, strerror(errno));
    return 0;
}

static int persist(struct recovery *r)
{
    size_t size = (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE;
    uint8_t *img = calloc(1, size);
    if (!img)
        return -ENOMEM;
    epochs_image(r, img);
    /* The session that opens the log next writes its slots after the windows. */
    r->res.epoch_slot_next = r->res.durable_marker ? (uint32_t)(1 + (r->n_win < EPOCH_SLOTS - 2 ? r->n_win : 0)) : 0;
    int rc = 0;
    if (!epochs_current(r, img, size) || r->res.cuts || r->res.deleted) {
        rc = sync_kept(r);
        if (!rc)
            rc = rewrite_epochs(r, img);
        if (!rc)
            rc = apply_cuts(r);
        if (!rc)
            rc = delete_checkpointed(r);
    }
    free(img);
    return rc;
}

static void recovery_free(struct recovery *r)
{
    for (size_t i = 0; i < r->n; i++) {
        if (r->ch[i].data && r->ch[i].size)
            munmap(r->ch[i].data, r->ch[i].size);
        free(r->ch[i].recs);
    }
    free(r->ch);
    free(r->slots);
    free(r->epochs);
    free(r->win);
    if (r->dirfd >= 0)
        close(r->dirfd);
}

int wal_recover_locked(const char *dir, unsigned flags, const struct urt_log_recover_ops *ops, void *arg,
                       struct urt_log_recovery *out)
{
    struct recovery r = {.dir = dir, .flags = flags};
    r.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = r.dirfd < 0 ? urt__error(-errno, "log directory %s: %s", dir, strerror(errno)) : 0;
    if (!rc)
        rc = list_channels(&r);
    if (!rc)
        rc = scan_channels(&r);
    if (!rc)
        rc = rec_read_checkpoint(&r);
    if (!rc)
        rc = rec_read_slots(&r);
    if (!rc)
        rc = rec_add_claims(&r);
    if (!rc) {
        rec_choose_durable(&r);
        rc = rec_damage_windows(&r);
    }
    if (!rc)
        plan_cuts(&r, ops, arg);
    int rc_replay = 0;
    if (!rc && ops && ops->record)
        rc_replay = replay(&r, ops, arg);
    if (!rc && !(flags & URT_LOG_RECOVER_DRY_RUN))
        rc = persist(&r);
    recovery_free(&r);
    if (out)
        *out = r.res;
    return rc ? rc : rc_replay;
}
