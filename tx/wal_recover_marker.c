/*
 * tx/wal_recover_marker.c — recovery steps 4 and 5 (the algorithm:
 * tx/wal_recover.c's header): what is durable (the checkpoint, the epoch
 * file's slots and their conditions, the claims in the channels; D) and what
 * damage lost (windows of lost epochs, found now or read back; R).
 *
 * Threading: plain blocking file I/O on the calling thread; no shared state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tx/wal_dir.h"
#include "tx/wal_recover_int.h"

/* ---- step 4: the durable marker ---------------------------------------------------------- */

static const struct rchan *find_chan(const struct recovery *r, uint64_t gen, uint32_t worker, uint32_t seg)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ch[i].gen == gen && r->ch[i].worker == worker && r->ch[i].seg == seg)
            return &r->ch[i];
    return NULL;
}

/* A later segment of (gen, worker) exists: an earlier one that is missing
 * was deleted by a checkpoint (only closed segments are), its records are
 * all at or below it. */
static bool later_segment(const struct recovery *r, uint64_t gen, uint32_t worker, uint32_t seg)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ch[i].gen == gen && r->ch[i].worker == worker && r->ch[i].seg > seg)
            return true;
    return false;
}

/* Does the slot's condition hold: channel (gen, worker) has valid records up
 * to `end`? Slots without a condition always hold, and so do slots of a
 * generation older than the newest: the recovery that ran before that newer
 * session started judged them already (and rewrote the epoch file). */
static bool slot_holds(const struct recovery *r, const struct wal_epoch_slot *e)
{
    uint64_t gen = e->gen & WAL_SLOT_GEN_MASK;
    uint32_t seg = (uint32_t)(e->gen >> WAL_SLOT_SEG_SHIFT);
    if (!e->end || gen < r->res.max_gen || e->marker <= r->res.checkpoint)
        return true;
    const struct rchan *c = find_chan(r, gen, e->worker, seg);
    if (!c)
        return later_segment(r, gen, e->worker, seg);
    return c->scan.valid_end >= e->end;
}

bool rec_slot_holds(const struct recovery *r, const struct wal_epoch_slot *e)
{
    return slot_holds(r, e);
}

static int cmp_slot(const void *a, const void *b)
{
    const struct rslot *x = a, *y = b;
    if (x->s.marker != y->s.marker)
        return x->s.marker < y->s.marker ? -1 : 1;
    return (int)y->holds - (int)x->holds; /* equal markers: holding slots first */
}

/* The checkpoint file (wal_format.h): res.checkpoint, 0 if absent. A file
 * that fails its checksum is refused: the engine's checkpoint is unknown. */
int rec_read_checkpoint(struct recovery *r)
{
    uint8_t *b;
    size_t n;
    int rc = wal_read_whole(r->dirfd, "checkpoint", &b, &n);
    if (rc || !b)
        return rc ? urt__error(rc, "log directory %s: cannot read the checkpoint file: %s", r->dir, strerror(-rc))
                  : 0;
    bool ok = wal_checkpoint_valid(b, n, &r->res.checkpoint);
    free(b);
    return ok ? 0 : urt__error(-EBADMSG, "log directory %s: the checkpoint file is damaged", r->dir);
}

static int add_window(struct recovery *r, uint64_t lo, uint64_t hi)
{
    if (r->n_win == r->cap_win) {
        size_t cap = r->cap_win ? r->cap_win * 2 : 8;
        struct rwin *p = realloc(r->win, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        r->win = p;
        r->cap_win = cap;
    }
    r->win[r->n_win++] = (struct rwin){lo, hi};
    return 0;
}

/* Every valid slot of the epoch file, and its limit slots: the windows of
 * lost epochs earlier recoveries persisted (a limit slot without its upper
 * end, as written before windows had one, ends at the file's largest marker:
 * that recovery's D, the sessions after it write above it). The file's bytes
 * are kept: persist() rewrites it only if it differs from what it should be. */
int rec_read_slots(struct recovery *r)
{
    int rc = wal_read_whole(r->dirfd, "epochs", &r->epochs, &r->epochs_len);
    if (rc)
        return urt__error(rc, "log directory %s: cannot read the epoch file: %s", r->dir, strerror(-rc));
    size_t n = r->epochs_len;
    r->slots = malloc((n / EPOCH_SLOT_SIZE + 1) * sizeof(*r->slots));
    if (!r->slots)
        return -ENOMEM;
    uint64_t best = 0;
    size_t open_ended = r->n_win;
    for (size_t i = 0; i + EPOCH_SLOT_SIZE <= n && i / EPOCH_SLOT_SIZE < EPOCH_SLOTS; i += EPOCH_SLOT_SIZE) {
        struct wal_epoch_slot e;
        if (!wal_epoch_slot_valid(r->epochs + i, &e))
            continue;
        if (e.gen == WAL_SLOT_LIMIT) {
            if ((rc = add_window(r, e.marker, e.end ? e.end : UINT64_MAX)))
                return rc;
            continue;
        }
        r->slots[r->n_slots++] = (struct rslot){e, slot_holds(r, &e)};
        best = e.marker > best ? e.marker : best;
    }
    for (size_t i = open_ended; i < r->n_win; i++)
        if (r->win[i].hi == UINT64_MAX)
            r->win[i].hi = best;
    return 0;
}

/* The claims (WAL_REC_MARKER, wal_format.h) in the channels' valid
 * prefixes join the slots: each holds (the scan reached it, so every byte
 * of its channel before it is there), and, being sorted with the slots, is
 * believed only below the first slot whose condition fails. */
int rec_add_claims(struct recovery *r)
{
    size_t claims = 0;
    for (size_t i = 0; i < r->n; i++)
        for (size_t k = 0; k < r->ch[i].n; k++)
            claims += r->ch[i].recs[k].type == WAL_REC_MARKER;
    if (!claims)
        return 0;
    struct rslot *p = realloc(r->slots, (r->n_slots + claims) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    r->slots = p;
    for (size_t i = 0; i < r->n; i++) {
        const struct rchan *c = &r->ch[i];
        for (size_t k = 0; k < c->n; k++) {
            if (c->recs[k].type != WAL_REC_MARKER)
                continue;
            struct wal_epoch_slot e = {0};
            memcpy(&e.marker, c->data + c->recs[k].off + WAL_HDR_SIZE, 8);
            r->slots[r->n_slots++] = (struct rslot){e, true};
        }
    }
    r->res.claims = (uint32_t)claims;
    return 0;
}

/* D: the largest marker reached before the first slot (or claim) whose
 * condition fails; never below the checkpoint, which urt_log_checkpoint
 * wrote only at or below a durable marker (a claim that established that
 * marker may have been deleted with its segment). */
void rec_choose_durable(struct recovery *r)
{
    if (r->n_slots)
        qsort(r->slots, r->n_slots, sizeof(*r->slots), cmp_slot);
    uint64_t d = 0;
    size_t k = 0;
    for (; k < r->n_slots && r->slots[k].holds; k++)
        d = r->slots[k].s.marker;
    r->res.broken_slots = (uint32_t)(r->n_slots - k);
    if (d < r->res.checkpoint)
        d = r->res.checkpoint;
    r->res.durable_marker = d;
}

/* ---- step 5: damage below the marker --------------------------------------------------- */

/* The start epoch of c's generation: the header of one of its first
 * segments (every channel of a session starts at the session's first epoch;
 * a later segment's header holds the epoch it rolled at), or 0. */
static uint64_t gen_start_epoch(const struct recovery *r, const struct rchan *c)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ch[i].gen == c->gen && r->ch[i].seg == 0 && r->ch[i].scan.header_ok)
            return r->ch[i].scan.header.start_epoch;
    return 0;
}

/* The epoch from which a damaged channel lost records: its last valid
 * record's; without one, its header's start epoch (no record of the file is
 * older); with its header damaged too, its generation's start epoch. Never
 * above the first epoch the file may have lost: a later segment of another
 * channel starts later than this one may. */
static uint64_t lost_from(const struct recovery *r, const struct rchan *c)
{
    if (c->scan.n_records > 1)
        return c->scan.last_epoch;
    if (c->scan.header_ok)
        return c->scan.header.start_epoch;
    return gen_start_epoch(r, c);
}

static int cmp_win(const void *a, const void *b)
{
    const struct rwin *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether epoch e lies in a window of lost epochs. */
static bool lost_epoch(const struct recovery *r, uint64_t e)
{
    for (size_t i = 0; i < r->n_win; i++)
        if (e > r->win[i].lo && e <= r->win[i].hi)
            return true;
    return false;
}

/* The windows that matter, sorted and merged: none entirely above D (those
 * epochs are not durable anyway) or at or below the checkpoint. */
static void merge_windows(struct recovery *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_win; i++)
        if (r->win[i].lo < r->res.durable_marker && r->win[i].hi > r->res.checkpoint && r->win[i].lo < r->win[i].hi)
            r->win[k++] = r->win[i];
    r->n_win = k;
    if (k)
        qsort(r->win, k, sizeof(*r->win), cmp_win);
    k = 0;
    for (size_t i = 0; i < r->n_win; i++) {
        if (k && r->win[i].lo <= r->win[k - 1].hi) {
            if (r->win[i].hi > r->win[k - 1].hi)
                r->win[k - 1].hi = r->win[i].hi;
        } else {
            r->win[k++] = r->win[i];
        }
    }
    r->n_win = k;
}

/* Step 5: a window g-1 .. M for each channel damaged in the middle (M: the
 * largest epoch on disk, or D; the next session's epochs start above it),
 * merged with the persisted ones; R, the replay limit reported: D, or the
 * start of the window D lies in. */
int rec_damage_windows(struct recovery *r)
{
    uint64_t d = r->res.durable_marker, m = r->res.max_epoch > d ? r->res.max_epoch : d;
    for (size_t i = 0; i < r->n; i++) {
        struct rchan *c = &r->ch[i];
        if (c->scan.end != WAL_SCAN_END_CORRUPT || !c->scan.resync_found || c->scan.resync_epoch > d)
            continue; /* clean, or a torn tail (step 5) */
        c->middle = true;
        uint64_t g = lost_from(r, c);
        int rc = add_window(r, g ? g - 1 : 0, m);
        if (rc)
            return rc;
    }
    merge_windows(r);
    for (size_t i = 0; i < r->n_win; i++)
        if (r->win[i].hi > r->res.max_epoch)
            r->res.max_epoch = r->win[i].hi; /* never reuse an epoch a window holds (its files may be gone) */
    uint64_t limit = d;
    for (size_t i = r->n_win; i-- > 0;)
        if (limit > r->win[i].lo && limit <= r->win[i].hi)
            limit = r->win[i].lo;
    r->res.replay_marker = limit;
    return 0;
}

/* The window of lost epochs holding e, or NULL. */
const struct rwin *rec_window_of(const struct recovery *r, uint64_t e)
{
    for (size_t i = 0; i < r->n_win; i++)
        if (e > r->win[i].lo && e <= r->win[i].hi)
            return &r->win[i];
    return NULL;
}

/* Replayed (when above the checkpoint): durable, in no window of lost epochs. */
bool rec_replayable(const struct recovery *r, uint64_t e)
{
    return e <= r->res.durable_marker && !lost_epoch(r, e);
}
