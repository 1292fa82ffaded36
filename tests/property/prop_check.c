/*
 * tests/property/prop_check.c — recoveries of a case, the model, the checks
 * (prop_check.h). Test thread only; no criterion here: a failed check is a
 * description in pc_result, the caller decides (assert, shrink, keep going).
 */
#include "prop_check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tx/wal_dir.h"
#include "tx/wal_format.h"

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static void push_rec(struct pc_rec **v, size_t *n, size_t *cap, const struct pc_rec *r)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        *v = xrealloc(*v, *cap * sizeof(**v));
    }
    (*v)[(*n)++] = *r;
}

static int cmp_rec(const void *a, const void *b)
{
    const struct pc_rec *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

static bool same_rec(const struct pc_rec *x, const struct pc_rec *y)
{
    return x->id == y->id && x->epoch == y->epoch && x->gen == y->gen && x->lsn == y->lsn &&
           x->worker == y->worker && x->index == y->index && x->count == y->count && x->len == y->len;
}

/* ---- running recovery ------------------------------------------------------------------------ */

void pc_run_free(struct pc_run *r)
{
    free(r->v);
    free(r->cuts);
    pi_dir_free(&r->after);
    memset(r, 0, sizeof(*r));
}

static int on_record(void *arg, const struct urt_log_record *x)
{
    struct pc_run *r = arg;
    struct pw_head h = {0};
    if (!pw_payload_check(x->payload, x->len, x->tx_id, &h) && !r->bad[0])
        snprintf(r->bad, sizeof(r->bad), "record tx %" PRIx64 " epoch %" PRIu64 " (gen %" PRIu64 " worker %u lsn %" PRIu64
                 ", %u bytes): its payload is not what the workload wrote", x->tx_id, x->epoch, x->gen, x->worker,
                 x->lsn, x->len);
    if (r->n && x->epoch < r->v[r->n - 1].epoch && !r->bad[0])
        snprintf(r->bad, sizeof(r->bad), "replay out of epoch order: epoch %" PRIu64 " after %" PRIu64, x->epoch,
                 r->v[r->n - 1].epoch);
    struct pc_rec rec = {.id = x->tx_id, .epoch = x->epoch, .gen = x->gen, .lsn = x->lsn, .worker = x->worker,
                         .index = h.index, .count = h.count, .len = x->len};
    push_rec(&r->v, &r->n, &r->cap, &rec);
    return 0;
}

static void on_cut(void *arg, const struct urt_log_cut *c)
{
    struct pc_run *r = arg;
    r->cuts = xrealloc(r->cuts, (r->n_cuts + 1) * sizeof(*r->cuts));
    struct pc_cut *k = &r->cuts[r->n_cuts++];
    snprintf(k->file, sizeof(k->file), "%s", c->file);
    snprintf(k->reason, sizeof(k->reason), "%s", c->reason ? c->reason : "");
    k->offset = c->offset;
    k->bytes = c->bytes;
    k->corrupt = c->corrupt;
    k->middle = c->middle;
}

void pc_recover(const char *dir, unsigned flags, struct pc_run *r)
{
    memset(r, 0, sizeof(*r));
    struct urt_log_recover_ops ops = {.record = on_record, .cut = on_cut};
    r->rc = urt_log_recover(dir, flags, &ops, r, &r->out);
    if (r->rc)
        snprintf(r->err, sizeof(r->err), "%s", urt_last_error());
    pi_dir_read(&r->after, dir);
}

/* ---- the model: channels as the reader sees them ---------------------------------------------- */

struct mrec {
    uint64_t off, size, epoch, lsn, tx_id;
    uint32_t len;
    uint16_t type, flags;
    struct pw_head h;
    bool payload_ok;
};

struct mchan {
    const struct pi_file *f;
    uint64_t gen;
    uint32_t worker, seg;
    struct wal_scan_result scan;
    struct mrec *r;
    size_t n, cap;
};

static int collect(void *arg, const struct wal_rec *x)
{
    struct mchan *c = arg;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->r = xrealloc(c->r, c->cap * sizeof(*c->r));
    }
    struct mrec *m = &c->r[c->n++];
    memset(m, 0, sizeof(*m));
    m->off = x->off;
    m->size = wal_rec_size(x->len);
    m->len = x->len;
    m->epoch = x->epoch;
    m->lsn = x->lsn;
    m->tx_id = x->tx_id;
    m->type = x->type;
    m->flags = x->flags;
    if (x->type == WAL_REC_COMMIT)
        m->payload_ok = pw_payload_check(x->payload, x->len, x->tx_id, &m->h);
    return 0;
}

/* The channel files of d, scanned. */
static size_t scan_dir(const struct pi_dir *d, struct mchan **out)
{
    struct mchan *v = xrealloc(NULL, (d->n + 1) * sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct mchan *c = &v[n];
        memset(c, 0, sizeof(*c));
        if (!wal_parse_channel_name(d->f[i].name, &c->gen, &c->worker, &c->seg))
            continue;
        c->f = &d->f[i];
        wal_scan(d->f[i].b, d->f[i].len, collect, c, &c->scan);
        n++;
    }
    *out = v;
    return n;
}

static void free_chans(struct mchan *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].r);
    free(v);
}

/* ---- the model: D ----------------------------------------------------------------------------- */

struct msrc {
    uint64_t marker;
    bool holds;
};

static int cmp_src(const void *a, const void *b)
{
    const struct msrc *x = a, *y = b;
    if (x->marker != y->marker)
        return x->marker < y->marker ? -1 : 1;
    return (int)y->holds - (int)x->holds;
}

/* A slot's condition: channel (gen, worker, seg) valid up to end (a missing
 * file holds when a later segment of its channel exists: a checkpoint
 * deleted it); slots of older generations and at or below the checkpoint
 * were judged by an earlier recovery. */
static bool cond_holds(const struct wal_epoch_slot *s, const struct mchan *xc, size_t nx, uint64_t max_gen,
                       uint64_t ck)
{
    uint64_t gen = s->gen & WAL_SLOT_GEN_MASK;
    uint32_t seg = (uint32_t)(s->gen >> WAL_SLOT_SEG_SHIFT);
    if (!s->end || gen < max_gen || s->marker <= ck)
        return true;
    bool later = false;
    for (size_t i = 0; i < nx; i++) {
        if (xc[i].gen != gen || xc[i].worker != s->worker)
            continue;
        if (xc[i].seg == seg)
            return xc[i].scan.valid_end >= s->end;
        later |= xc[i].seg > seg;
    }
    return later;
}

static void add_win(struct pm_expect *e, uint64_t lo, uint64_t hi)
{
    if (e->n_win < 16)
        e->win_lo[e->n_win] = lo, e->win_hi[e->n_win++] = hi;
}

/* D, and the windows the limit slots of X hold. */
static void model_durable(const struct pi_dir *X, const struct mchan *xc, size_t nx, struct pm_expect *e)
{
    uint64_t max_gen = 0;
    size_t nsrc = 0, cap = 16;
    for (size_t i = 0; i < nx; i++) {
        max_gen = xc[i].gen > max_gen ? xc[i].gen : max_gen;
        cap += xc[i].n;
    }
    const struct pi_file *ep = pi_dir_find(X, "epochs");
    if (ep)
        cap += ep->len / EPOCH_SLOT_SIZE;
    struct msrc *src = xrealloc(NULL, cap * sizeof(*src));
    uint64_t best = 0;
    int open_ended = e->n_win;
    for (size_t off = 0; ep && off + EPOCH_SLOT_SIZE <= ep->len && off / EPOCH_SLOT_SIZE < EPOCH_SLOTS;
         off += EPOCH_SLOT_SIZE) {
        struct wal_epoch_slot s;
        if (!wal_epoch_slot_valid(ep->b + off, &s))
            continue;
        if (s.gen == WAL_SLOT_LIMIT) {
            add_win(e, s.marker, s.end ? s.end : UINT64_MAX);
            continue;
        }
        src[nsrc++] = (struct msrc){s.marker, cond_holds(&s, xc, nx, max_gen, e->ck)};
        best = s.marker > best ? s.marker : best;
    }
    for (int i = open_ended; i < e->n_win; i++)
        if (e->win_hi[i] == UINT64_MAX)
            e->win_hi[i] = best; /* a limit slot written before windows had an end: that recovery's D */
    for (size_t i = 0; i < nx; i++)
        for (size_t k = 0; k < xc[i].n; k++)
            if (xc[i].r[k].type == WAL_REC_MARKER) {
                uint64_t m;
                memcpy(&m, xc[i].f->b + xc[i].r[k].off + WAL_HDR_SIZE, 8);
                src[nsrc++] = (struct msrc){m, true};
            }
    if (nsrc)
        qsort(src, nsrc, sizeof(*src), cmp_src);
    uint64_t d = 0;
    for (size_t i = 0; i < nsrc && src[i].holds; i++)
        d = src[i].marker;
    e->D = d > e->ck ? d : e->ck;
    free(src);
}

/* ---- the model: R ------------------------------------------------------------------------------ */

/* Whether U's record r lies in f with the same bytes. */
static bool intact(const struct pi_file *uf, const struct mrec *r, const struct pi_file *xf)
{
    return xf && r->off + r->size <= xf->len && !memcmp(uf->b + r->off, xf->b + r->off, r->size);
}

/* The first byte of U's valid prefix of channel u that X changed (or cut),
 * or UINT64_MAX. */
static uint64_t first_change(const struct mchan *u, const struct pi_file *xf)
{
    uint64_t end = u->scan.valid_end;
    uint64_t n = xf->len < end ? xf->len : end;
    for (uint64_t i = 0; i < n; i++)
        if (u->f->b[i] != xf->b[i])
            return i;
    return xf->len < end ? xf->len : UINT64_MAX;
}

/* The start epoch of generation gen: the header of one of its first
 * segments in X (every channel of a session starts at the session's first
 * epoch; a later segment starts later), else 0. */
static uint64_t gen_start(const struct mchan *xc, size_t nx, uint64_t gen)
{
    for (size_t i = 0; i < nx; i++)
        if (xc[i].gen == gen && xc[i].seg == 0 && xc[i].scan.header_ok)
            return xc[i].scan.header.start_epoch;
    return 0;
}

/* Damage in the middle of channel c of X, as the rule reads it: the valid
 * prefix ends on corrupt or zeroed bytes and a valid record of an epoch <= D
 * lies after them (a torn tail holds only records above D). The channel lost
 * records of epochs >= g, g = its last valid record's epoch; without one the
 * start epoch in its header; with its header damaged the generation's start
 * epoch (a first segment's header), or 0. Returns whether c is such a channel. */
static bool middle_damage(const struct mchan *c, const struct mchan *xc, size_t nx, uint64_t D, uint64_t *g)
{
    *g = 0;
    if (c->scan.end != WAL_SCAN_END_CORRUPT || !c->scan.resync_found || c->scan.resync_epoch > D)
        return false;
    *g = c->scan.n_records > 1 ? c->scan.last_epoch
         : c->scan.header_ok   ? c->scan.header.start_epoch
                               : gen_start(xc, nx, c->gen);
    return true;
}

/* The same from the bytes alone, for damage done to U (X - U): the first
 * changed byte a of U's valid prefix, a record of U after a still intact
 * with an epoch <= D, g = the epoch of U's last record before a. Whether the
 * damage is in the middle; -1 if X did not change u's valid prefix. */
static int middle_by_bytes(const struct mchan *u, const struct pi_file *xf, const struct mchan *xc, size_t nx,
                           uint64_t D, uint64_t *g, uint64_t *at)
{
    uint64_t a = xf ? first_change(u, xf) : UINT64_MAX;
    if (a == UINT64_MAX)
        return -1;
    bool before = false, middle = false;
    *g = 0;
    *at = a;
    for (size_t k = 0; k < u->n; k++) {
        const struct mrec *r = &u->r[k];
        if (r->off + r->size <= a)
            *g = r->epoch, before = true;
        else if (r->off >= a && !middle && intact(u->f, r, xf))
            middle = r->epoch <= D; /* the first intact record after the change: epochs never decrease */
    }
    if (!before)
        *g = a >= wal_rec_size(sizeof(struct wal_header_payload)) && u->scan.header_ok ? u->scan.header.start_epoch
                                                                                     : gen_start(xc, nx, u->gen);
    return middle;
}

/* The largest epoch X holds (headers, valid records, the first record after
 * damage), or D: where the next session starts. */
static uint64_t max_epoch(const struct mchan *xc, size_t nx, uint64_t D)
{
    uint64_t m = D;
    for (size_t i = 0; i < nx; i++) {
        const struct wal_scan_result *r = &xc[i].scan;
        if (r->header_ok && r->header.start_epoch > m)
            m = r->header.start_epoch;
        if (r->last_epoch > m)
            m = r->last_epoch;
        if (r->resync_found && r->resync_epoch > m)
            m = r->resync_epoch;
    }
    return m;
}

/* Windows g-1..M for each channel damaged in the middle; where X damaged
 * U, the rule read from the scan and the rule read from the bytes must
 * agree (else the model itself is wrong: e->why says so, rc -EPROTO). */
static void model_limit(const struct mchan *uc, size_t nu, const struct mchan *xc, size_t nx, const struct pi_dir *X,
                        struct pm_expect *e)
{
    for (size_t i = 0; i < nx; i++) {
        const struct mchan *c = &xc[i];
        uint64_t g, g2, at;
        bool mid = middle_damage(c, xc, nx, e->D, &g);
        const struct mchan *u = NULL;
        for (size_t k = 0; k < nu && !u; k++)
            if (!strcmp(uc[k].f->name, c->f->name))
                u = &uc[k];
        /* the cross-check holds where U's own prefix ends clean (no damage inherited from an earlier session) */
        bool u_clean = u && !(u->scan.end == WAL_SCAN_END_CORRUPT && u->scan.resync_found);
        int by_bytes = u_clean ? middle_by_bytes(u, pi_dir_find(X, c->f->name), xc, nx, e->D, &g2, &at) : -1;
        if (by_bytes >= 0 && (by_bytes != mid || (mid && g != g2))) {
            e->rc = -EPROTO;
            snprintf(e->why, sizeof(e->why), "model: %s changed at %" PRIu64 ": the scan says %s (g %" PRIu64
                     "), the bytes %s (g %" PRIu64 ")", c->f->name, at, mid ? "middle" : "no middle damage", g,
                     by_bytes ? "middle" : "not", g2);
            return;
        }
        if (!mid)
            continue;
        add_win(e, g ? g - 1 : 0, max_epoch(xc, nx, e->D));
        snprintf(e->why, sizeof(e->why), "damage in the middle of %s at offset %" PRIu64 " (last valid epoch %" PRIu64
                 ")", c->f->name, c->scan.bad_off, g);
        if (e->n_middle < 4)
            snprintf(e->middle[e->n_middle++], PT_NAME, "%s", c->f->name);
    }
}

/* Windows that matter (not above D, not at or below the checkpoint),
 * merged; R: D, or the start of the window D lies in. */
static void model_windows(struct pm_expect *e)
{
    uint64_t lo[16], hi[16];
    int n = 0;
    for (int i = 0; i < e->n_win; i++)
        if (e->win_lo[i] < e->D && e->win_hi[i] > e->ck && e->win_lo[i] < e->win_hi[i])
            lo[n] = e->win_lo[i], hi[n++] = e->win_hi[i];
    for (int i = 1; i < n; i++) /* insertion sort by lo */
        for (int k = i; k > 0 && lo[k] < lo[k - 1]; k--) {
            uint64_t a = lo[k], b = hi[k];
            lo[k] = lo[k - 1], hi[k] = hi[k - 1], lo[k - 1] = a, hi[k - 1] = b;
        }
    e->n_win = 0;
    for (int i = 0; i < n; i++) {
        if (e->n_win && lo[i] <= e->win_hi[e->n_win - 1]) {
            if (hi[i] > e->win_hi[e->n_win - 1])
                e->win_hi[e->n_win - 1] = hi[i];
        } else {
            e->win_lo[e->n_win] = lo[i], e->win_hi[e->n_win++] = hi[i];
        }
    }
    e->R = e->D;
    for (int i = e->n_win; i-- > 0;)
        if (e->R > e->win_lo[i] && e->R <= e->win_hi[i])
            e->R = e->win_lo[i];
}

static bool in_window(const struct pm_expect *e, uint64_t epoch)
{
    for (int i = 0; i < e->n_win; i++)
        if (epoch > e->win_lo[i] && epoch <= e->win_hi[i])
            return true;
    return false;
}

/* ---- the model: the replay --------------------------------------------------------------------- */

/* The records of U's channel u that a recovery of X replays: whole commits,
 * intact in X, epochs above the checkpoint, before the first record of the
 * file that is not replayable (above D or in a window: the channel is cut
 * there, step 6). */
static void model_replay_chan(const struct mchan *u, const struct pi_file *xf, struct pm_expect *e, size_t *cap,
                              size_t *cap_all)
{
    bool cut = false;
    for (size_t k = 0; k < u->n;) {
        const struct mrec *r = &u->r[k];
        cut |= r->epoch > e->D || in_window(e, r->epoch);
        if (r->type != WAL_REC_COMMIT) {
            k++;
            continue;
        }
        size_t j = k;
        bool whole = true;
        while (j < u->n && u->r[j].type == WAL_REC_COMMIT && u->r[j].tx_id == r->tx_id) {
            const struct mrec *q = &u->r[j];
            whole &= q->payload_ok && q->h.index == j - k && q->h.count == r->h.count && intact(u->f, q, xf);
            j++;
        }
        whole &= j - k == r->h.count && (u->r[j - 1].flags & WAL_REC_F_END);
        bool replayed = whole && !cut && r->epoch > e->ck;
        for (size_t q = k; q < j && whole; q++) {
            struct pc_rec x = {.id = u->r[q].tx_id, .epoch = u->r[q].epoch, .gen = u->gen, .lsn = u->r[q].lsn,
                               .worker = u->worker, .index = u->r[q].h.index, .count = u->r[q].h.count,
                               .len = u->r[q].len};
            push_rec(&e->all, &e->n_all, cap_all, &x);
            if (replayed)
                push_rec(&e->v, &e->n, cap, &x);
        }
        k = j;
    }
}

void pm_expect_free(struct pm_expect *e)
{
    free(e->v);
    free(e->all);
    memset(e, 0, sizeof(*e));
}

void pm_expect(const struct pi_dir *X, const struct pi_dir *U, struct pm_expect *e)
{
    memset(e, 0, sizeof(*e));
    const struct pi_file *ck = pi_dir_find(X, "checkpoint");
    if (ck && !wal_checkpoint_valid(ck->b, ck->len, &e->ck)) {
        e->rc = -EBADMSG;
        return;
    }
    struct mchan *xc, *uc;
    size_t nx = scan_dir(X, &xc), nu = scan_dir(U, &uc);
    model_durable(X, xc, nx, e);
    if (e->n_win)
        snprintf(e->why, sizeof(e->why), "epochs %" PRIu64 "..%" PRIu64 " lost to damage an earlier recovery found",
                 e->win_lo[0] + 1, e->win_hi[0]);
    model_limit(uc, nu, xc, nx, X, e);
    model_windows(e);
    if (e->rc) {
        free_chans(xc, nx);
        free_chans(uc, nu);
        return;
    }
    size_t cap = 0, cap_all = 0;
    for (size_t i = 0; i < nu; i++) {
        const struct pi_file *xf = pi_dir_find(X, uc[i].f->name);
        if (xf)
            model_replay_chan(&uc[i], xf, e, &cap, &cap_all);
    }
    if (e->n)
        qsort(e->v, e->n, sizeof(*e->v), cmp_rec);
    free_chans(xc, nx);
    free_chans(uc, nu);
}

/* ---- the checks ------------------------------------------------------------------------------- */

static bool fail(struct pc_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(struct pc_result *res, const char *fmt, ...)
{
    if (res->ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->why, sizeof(res->why), fmt, ap);
        va_end(ap);
        res->ok = false;
    }
    return false;
}

static void describe_rec(const struct pc_rec *r, char *buf, size_t len)
{
    if (!r) {
        snprintf(buf, len, "(none)");
        return;
    }
    snprintf(buf, len, "tx %" PRIx64 " record %u/%u epoch %" PRIu64 " gen %" PRIu64 " worker %u lsn %" PRIu64, r->id,
             r->index, r->count, r->epoch, r->gen, r->worker, r->lsn);
}

/* Two replays as sequences: the first difference, described. */
static bool same_replay(const struct pc_rec *a, size_t na, const struct pc_rec *b, size_t nb, char *why, size_t len)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && same_rec(&a[i], &b[i]))
        i++;
    if (i == na && i == nb)
        return true;
    char x[160], y[160];
    describe_rec(i < na ? &a[i] : NULL, x, sizeof(x));
    describe_rec(i < nb ? &b[i] : NULL, y, sizeof(y));
    snprintf(why, len, "%zu records against %zu, first difference at record %zu: %s against %s", na, nb, i, x, y);
    return false;
}

static bool check_same_run(struct pc_result *res, const struct pc_run *a, const char *an, const struct pc_run *b,
                           const char *bn)
{
    char why[400];
    if (b->rc != a->rc)
        return fail(res, "(a) the %s recovery returned %d (%s), the %s %d (%s)", bn, b->rc, b->err, an, a->rc, a->err);
    if (a->rc)
        return true;
    if (b->out.durable_marker != a->out.durable_marker || b->out.replay_marker != a->out.replay_marker)
        return fail(res, "(a) the %s recovery reports durable marker %" PRIu64 " and replay limit %" PRIu64
                    ", the %s %" PRIu64 " and %" PRIu64,
                    bn, b->out.durable_marker, b->out.replay_marker, an, a->out.durable_marker, a->out.replay_marker);
    if (b->out.checkpoint != a->out.checkpoint)
        return fail(res, "(a) the %s recovery reports checkpoint %" PRIu64 ", the %s %" PRIu64, bn, b->out.checkpoint,
                    an, a->out.checkpoint);
    if (!same_replay(a->v, a->n, b->v, b->n, why, sizeof(why)))
        return fail(res, "(a) the %s recovery replays other records than the %s: %s", bn, an, why);
    return true;
}

/* (a): a dry run, then two recoveries in a row, agree; the second cuts nothing. */
static bool check_fixpoint(struct pc_result *res, const struct pc_run *dry, const struct pc_run *first,
                           const struct pc_run *second)
{
    char why[300];
    if (!check_same_run(res, first, "first", dry, "dry-run"))
        return false;
    if (!first->rc && dry->n_cuts != first->n_cuts)
        return fail(res, "(a) the dry run reports %zu cuts, the first recovery made %zu", dry->n_cuts, first->n_cuts);
    if (!check_same_run(res, first, "first", second, "second"))
        return false;
    if (second->n_cuts)
        return fail(res, "(a) the second recovery cut again: %s offset %" PRIu64 " (%" PRIu64 " bytes: %s)",
                    second->cuts[0].file, second->cuts[0].offset, second->cuts[0].bytes, second->cuts[0].reason);
    if (!pi_dir_equal(&first->after, &second->after, why, sizeof(why)))
        return fail(res, "(a) the second recovery changed the directory: %s", why);
    return true;
}

/* (b): the first recovery against the model of X. */
static bool check_model(struct pc_result *res, const struct pc_run *first, const struct pm_expect *e)
{
    char why[400];
    if (e->rc == -EPROTO)
        return fail(res, "(model) %s", e->why);
    if (first->rc != e->rc)
        return fail(res, "(b) recovery returned %d (%s), the model %d", first->rc, first->err, e->rc);
    if (e->rc)
        return first->err[0] ? true : fail(res, "(b) recovery failed with %d and no message", first->rc);
    if (first->bad[0])
        return fail(res, "(b) %s", first->bad);
    const struct urt_log_recovery *o = &first->out;
    if (o->checkpoint != e->ck || o->durable_marker != e->D || o->replay_marker != e->R)
        return fail(res, "(b) recovery reports checkpoint %" PRIu64 ", durable marker %" PRIu64 ", replay limit %" PRIu64
                    "; the model %" PRIu64 ", %" PRIu64 ", %" PRIu64 "%s%s",
                    o->checkpoint, o->durable_marker, o->replay_marker, e->ck, e->D, e->R, e->why[0] ? ": " : "",
                    e->why);
    if (!same_replay(e->v, e->n, first->v, first->n, why, sizeof(why)))
        return fail(res, "(b) the replay is not the model's consistent prefix (model first): %s", why);
    for (int i = 0; i < e->n_middle; i++) {
        bool seen = false;
        for (size_t k = 0; k < first->n_cuts; k++)
            seen |= !strcmp(first->cuts[k].file, e->middle[i]) && first->cuts[k].corrupt && first->cuts[k].middle;
        if (!seen)
            return fail(res, "(b) damage in the middle of %s is not reported as a corrupt, middle cut", e->middle[i]);
    }
    return true;
}

static size_t count_id(const struct pc_rec *v, size_t n, uint64_t id)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += v[i].id == id;
    return k;
}

/* (c): the acknowledged commits, against the model of U. */
static bool check_acks(struct pc_result *res, const struct pc_case *c, const struct pm_expect *u,
                       const struct pm_expect *x)
{
    if (u->rc)
        return fail(res, "(c) the undamaged directory's checkpoint file is damaged");
    if (u->ck < c->ck_min)
        return fail(res, "(c) the checkpoint is %" PRIu64 ", but a checkpoint at %" PRIu64 " returned before the stop",
                    u->ck, c->ck_min);
    for (size_t i = 0; i < c->n_acks; i++) {
        const struct pc_ack *a = &c->acks[i];
        if (a->epoch <= u->ck)
            continue;
        res->acks_checked++;
        size_t k = count_id(u->v, u->n, a->id);
        if (k != a->count && c->acks_promised) {
            size_t present = count_id(u->all, u->n_all, a->id);
            const char *how = present != a->count      ? (present ? "in part in the directory" : "not whole in the directory")
                              : a->epoch > u->D        ? "above the durable marker"
                              : in_window(u, a->epoch) ? "in a window of lost epochs"
                                                       : "not replayed";
            return fail(res, "(c) acknowledged commit %s: %" PRIx64 " (session %u, epoch %" PRIu64 ", %u records, "
                        "acknowledged at %" PRIu64 ") is not replayed from the directory the crash left: %zu of its "
                        "records (checkpoint %" PRIu64 ", durable marker %" PRIu64 ", replay limit %" PRIu64 ")",
                        how, a->id, a->session, a->epoch, a->count, a->seq, k, u->ck, u->D, u->R);
        }
        if (k == a->count && x->rc == 0 && count_id(x->v, x->n, a->id) != a->count)
            res->acks_lost_to_damage++;
    }
    return true;
}

/* A runtime started and destroyed on the recovered directory, then a third
 * recovery: the same replay, nothing cut. */
static bool check_restart(struct pc_result *res, const struct pc_case *c, const struct pc_run *first)
{
    struct urt_config cfg;
    pw_conf_apply(c->restart, c->dir, &cfg);
    urt_runtime *rt;
    int rc = urt_runtime_create(&cfg, &rt);
    if (rc)
        return fail(res, "(a) a runtime cannot start on the recovered directory: %d: %s", rc, urt_last_error());
    if ((rc = urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN)))
        return fail(res, "(a) urt_runtime_destroy: %d", rc);
    struct pc_run third;
    pc_recover(c->dir, 0, &third);
    bool ok = check_same_run(res, first, "first", &third, "third (a runtime started and destroyed in between)");
    if (ok && third.n_cuts)
        ok = fail(res, "(a) after a runtime started and stopped, recovery cut %s offset %" PRIu64 ": %s",
                  third.cuts[0].file, third.cuts[0].offset, third.cuts[0].reason);
    pc_run_free(&third);
    return ok;
}

bool pc_check(const struct pc_case *c, struct pc_result *res)
{
    memset(res, 0, sizeof(*res));
    res->ok = true;
    struct pm_expect eu, ex;
    pm_expect(c->U, c->U, &eu);
    pm_expect(c->X, c->U, &ex);
    int rc = pi_dir_write(c->X, c->dir);
    if (rc) {
        fail(res, "cannot write %s: %s", c->dir, strerror(-rc));
    } else {
        struct pc_run dry, second;
        pc_recover(c->dir, URT_LOG_RECOVER_DRY_RUN, &dry);
        pc_recover(c->dir, 0, &res->first);
        pc_recover(c->dir, 0, &second);
        if (check_fixpoint(res, &dry, &res->first, &second) && check_model(res, &res->first, &ex) &&
            check_acks(res, c, &eu, &ex) && c->restart && !res->first.rc)
            check_restart(res, c, &res->first);
        pc_run_free(&dry);
        pc_run_free(&second);
    }
    pm_expect_free(&eu);
    pm_expect_free(&ex);
    return res->ok;
}

void pc_result_free(struct pc_result *res)
{
    pc_run_free(&res->first);
}
