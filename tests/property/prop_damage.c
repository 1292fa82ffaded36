/*
 * tests/property/prop_damage.c — random damage (prop_damage.h).
 */
#include "prop_damage.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tx/wal_dir.h"
#include "tx/wal_format.h"
#include "tx/wal_int.h" /* wal_header_block */

const char *const pd_names[PD_KINDS] = {"none",         "truncate", "zero_page", "flip_header", "flip_payload",
                                        "epochs",       "checkpoint", "missing",  "extra"};

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

struct recs {
    uint64_t off[4096];
    uint32_t len[4096];
    size_t n;
};

static int add_rec(void *arg, const struct wal_rec *r)
{
    struct recs *v = arg;
    if (v->n < 4096)
        v->off[v->n] = r->off, v->len[v->n++] = r->len;
    return 0;
}

/* The records of f's valid prefix, its header record first (when valid). */
static uint64_t records(const struct pi_file *f, struct recs *v)
{
    v->n = 0;
    struct wal_scan_result s;
    wal_scan(f->b, f->len, add_rec, v, &s);
    if (s.header_ok && v->n < 4096) {
        memmove(&v->off[1], &v->off[0], v->n * sizeof(v->off[0]));
        memmove(&v->len[1], &v->len[0], v->n * sizeof(v->len[0]));
        v->off[0] = 0, v->len[0] = sizeof(struct wal_header_payload);
        v->n++;
    }
    return s.valid_end;
}

/* A random channel file (with at least min_len bytes), or NULL. */
static struct pi_file *pick_channel(struct pi_dir *X, uint64_t *rng, size_t min_len)
{
    size_t cand[256], n = 0;
    for (size_t i = 0; i < X->n && n < 256; i++) {
        uint64_t g;
        uint32_t w, k;
        if (wal_parse_channel_name(X->f[i].name, &g, &w, &k) && X->f[i].len >= min_len)
            cand[n++] = i;
    }
    return n ? &X->f[cand[rnd(rng) % n]] : NULL;
}

static void flip(struct pi_file *f, uint64_t at, uint64_t *rng, char *desc, size_t len, const char *what)
{
    unsigned bit = (unsigned)(rnd(rng) % 8);
    f->b[at] ^= (uint8_t)(1u << bit);
    snprintf(desc, len, "%s: bit %u of byte %" PRIu64 " of %s flipped", what, bit, at, f->name);
}

static enum pd_kind truncate_chan(struct pi_dir *X, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pick_channel(X, rng, 1);
    if (!f)
        return PD_NONE;
    struct recs v;
    records(f, &v);
    uint64_t at = rnd(rng) % f->len;
    if (v.n && rnd(rng) % 2)
        at = v.off[rnd(rng) % v.n];
    snprintf(desc, len, "truncate: %s cut at %" PRIu64 " (of %zu bytes)", f->name, at, f->len);
    f->len = at;
    return PD_TRUNCATE;
}

static enum pd_kind zero_page(struct pi_dir *X, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pick_channel(X, rng, 1);
    if (!f)
        return PD_NONE;
    struct recs v;
    uint64_t end = records(f, &v);
    uint64_t at = (rnd(rng) % (end ? end : f->len)) & ~(uint64_t)4095;
    uint64_t to = at + 4096 < f->len ? at + 4096 : f->len;
    memset(f->b + at, 0, to - at);
    snprintf(desc, len, "zero_page: %s bytes %" PRIu64 "..%" PRIu64 " zeroed", f->name, at, to);
    return PD_ZERO_PAGE;
}

static enum pd_kind flip_record(struct pi_dir *X, bool header, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pick_channel(X, rng, WAL_HDR_SIZE);
    if (!f)
        return PD_NONE;
    struct recs v;
    records(f, &v);
    if (!v.n)
        return PD_NONE;
    size_t k = rnd(rng) % v.n;
    uint64_t at = header ? v.off[k] + rnd(rng) % WAL_HDR_SIZE
                         : v.off[k] + WAL_HDR_SIZE + rnd(rng) % (v.len[k] + WAL_CRC_SIZE);
    flip(f, at, rng, desc, len, header ? "flip_header" : "flip_payload");
    return header ? PD_FLIP_HEADER : PD_FLIP_PAYLOAD;
}

static enum pd_kind epochs(struct pi_dir *X, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pi_dir_find(X, "epochs");
    if (!f)
        return PD_NONE;
    size_t valid[EPOCH_SLOTS], n = 0;
    for (size_t off = 0; off + EPOCH_SLOT_SIZE <= f->len && n < EPOCH_SLOTS; off += EPOCH_SLOT_SIZE) {
        struct wal_epoch_slot s;
        if (wal_epoch_slot_valid(f->b + off, &s))
            valid[n++] = off;
    }
    switch (rnd(rng) % 5) {
    case 0:
        if (n) {
            flip(f, valid[rnd(rng) % n] + rnd(rng) % EPOCH_SLOT_SIZE, rng, desc, len, "epochs");
            return PD_EPOCHS;
        }
        /* fall through */
    case 1:
        if (n) {
            size_t at = valid[rnd(rng) % n];
            memset(f->b + at, 0, EPOCH_SLOT_SIZE);
            snprintf(desc, len, "epochs: the slot at %zu zeroed", at);
            return PD_EPOCHS;
        }
        /* fall through */
    case 2:
        memset(f->b, 0, f->len);
        snprintf(desc, len, "epochs: the whole file zeroed");
        return PD_EPOCHS;
    case 3: {
        size_t to = f->len ? (size_t)(rnd(rng) % f->len) : 0;
        snprintf(desc, len, "epochs: truncated to %zu bytes (of %zu)", to, f->len);
        f->len = to;
        return PD_EPOCHS;
    }
    default:
        pi_dir_remove(X, "epochs");
        snprintf(desc, len, "epochs: deleted");
        return PD_EPOCHS;
    }
}

static enum pd_kind checkpoint(struct pi_dir *X, bool no_bad, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pi_dir_find(X, "checkpoint");
    if (!f)
        return PD_NONE;
    unsigned how = no_bad ? 2 : (unsigned)(rnd(rng) % 3);
    if (how == 0 && f->len) {
        flip(f, rnd(rng) % f->len, rng, desc, len, "checkpoint");
    } else if (how == 1 && f->len) {
        size_t to = (size_t)(rnd(rng) % f->len);
        snprintf(desc, len, "checkpoint: truncated to %zu bytes", to);
        f->len = to;
    } else {
        pi_dir_remove(X, "checkpoint");
        snprintf(desc, len, "checkpoint: deleted");
    }
    return PD_CHECKPOINT;
}

static enum pd_kind missing(struct pi_dir *X, uint64_t *rng, char *desc, size_t len)
{
    struct pi_file *f = pick_channel(X, rng, 0);
    if (!f)
        return PD_NONE;
    snprintf(desc, len, "missing: %s deleted", f->name);
    pi_dir_remove(X, f->name);
    return PD_MISSING;
}

/* The name of the segment after the last one of f's channel in X. */
static void next_segment(const struct pi_dir *X, const struct pi_file *f, char *name, uint64_t *gen, uint32_t *worker,
                         const struct pi_file **last)
{
    uint32_t seg, top = 0;
    wal_parse_channel_name(f->name, gen, worker, &seg);
    *last = f;
    for (size_t i = 0; i < X->n; i++) {
        uint64_t g;
        uint32_t w, k;
        if (wal_parse_channel_name(X->f[i].name, &g, &w, &k) && g == *gen && w == *worker && k >= top)
            top = k, *last = &X->f[i];
    }
    wal_chan_file_name(name, PT_NAME, *gen, *worker, top + 1);
}

static enum pd_kind extra(struct pi_dir *X, const struct pi_dir *grave, uint64_t *rng, char *desc, size_t len)
{
    unsigned how = (unsigned)(rnd(rng) % 3);
    if (how == 0) {
        size_t cand[256], n = 0;
        for (size_t i = 0; i < grave->n && n < 256; i++)
            if (!strncmp(grave->f[i].name, "ch-", 3) && !pi_dir_find(X, grave->f[i].name))
                cand[n++] = i;
        if (n) {
            const struct pi_file *g = &grave->f[cand[rnd(rng) % n]];
            pi_dir_put(X, g->name, g->b, g->len);
            snprintf(desc, len, "extra: %s, deleted before, is back (%zu bytes)", g->name, g->len);
            return PD_EXTRA;
        }
        how = 1;
    }
    struct pi_file *f = pick_channel(X, rng, 0);
    if (!f)
        return PD_NONE;
    char name[PT_NAME];
    uint64_t gen;
    uint32_t worker;
    const struct pi_file *last;
    next_segment(X, f, name, &gen, &worker, &last);
    if (how == 2) {
        pi_dir_put(X, name, NULL, 0);
        snprintf(desc, len, "extra: %s, an empty file", name);
        return PD_EXTRA;
    }
    struct wal_scan_result s;
    wal_scan(last->b, last->len, NULL, NULL, &s);
    static uint8_t block[WAL_ALIGN] __attribute__((aligned(WAL_ALIGN)));
    wal_header_block(block, gen, worker, s.last_epoch, s.last_lsn);
    pi_dir_put(X, name, block, sizeof(block));
    snprintf(desc, len, "extra: %s, a new segment holding only its header block (start epoch %" PRIu64 ")", name,
             s.last_epoch);
    return PD_EXTRA;
}

enum pd_kind pd_damage(struct pi_dir *X, const struct pi_dir *grave, enum pd_kind k, bool no_bad_checkpoint,
                       uint64_t *rng, char *desc, size_t len)
{
    if (k == PD_NONE)
        k = (enum pd_kind)(1 + rnd(rng) % (PD_KINDS - 1));
    enum pd_kind done = PD_NONE;
    switch (k) {
    case PD_TRUNCATE: done = truncate_chan(X, rng, desc, len); break;
    case PD_ZERO_PAGE: done = zero_page(X, rng, desc, len); break;
    case PD_FLIP_HEADER: done = flip_record(X, true, rng, desc, len); break;
    case PD_FLIP_PAYLOAD: done = flip_record(X, false, rng, desc, len); break;
    case PD_EPOCHS: done = epochs(X, rng, desc, len); break;
    case PD_CHECKPOINT: done = checkpoint(X, no_bad_checkpoint, rng, desc, len); break;
    case PD_MISSING: done = missing(X, rng, desc, len); break;
    case PD_EXTRA: done = extra(X, grave, rng, desc, len); break;
    default: break;
    }
    if (done == PD_NONE)
        snprintf(desc, len, "%s: nothing to damage", pd_names[k]);
    pi_dir_sort(X);
    return done;
}
