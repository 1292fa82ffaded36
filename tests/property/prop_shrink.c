/*
 * tests/property/prop_shrink.c — shrinking a failing case, fixtures on disk
 * (prop_shrink.h).
 */
#include "prop_shrink.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crash/crash_check.h"
#include "tx/wal_dir.h"
#include "tx/wal_format.h"

void ps_free(struct ps_case *c)
{
    pi_dir_free(&c->U);
    pi_dir_free(&c->X);
    free(c->acks);
    memset(c, 0, sizeof(*c));
}

static void ps_copy(struct ps_case *dst, const struct ps_case *src)
{
    ps_free(dst);
    pi_dir_copy(&dst->U, &src->U);
    pi_dir_copy(&dst->X, &src->X);
    dst->acks = malloc((src->n_acks ? src->n_acks : 1) * sizeof(*dst->acks));
    if (src->n_acks)
        memcpy(dst->acks, src->acks, src->n_acks * sizeof(*dst->acks));
    dst->n_acks = src->n_acks;
    dst->seed = src->seed, dst->ck_min = src->ck_min, dst->promised = src->promised;
    snprintf(dst->damage, sizeof(dst->damage), "%s", src->damage);
}

bool ps_check(const struct ps_case *c, const char *scratch, struct pc_result *res)
{
    char dir[1200];
    snprintf(dir, sizeof(dir), "%s/urt-property-shrink-%" PRIu64, scratch, c->seed);
    crash_remove_tree(dir);
    struct pc_case pc = {.seed = c->seed, .U = &c->U, .X = &c->X, .damage = c->damage, .acks = c->acks,
                         .n_acks = c->n_acks, .ck_min = c->ck_min, .acks_promised = c->promised, .dir = dir};
    bool ok = pc_check(&pc, res);
    crash_remove_tree(dir);
    return ok;
}

/* The failure's check: its text up to the first digit or colon. */
static size_t failure_class(const char *why)
{
    size_t n = 3; /* "(a)" */
    while (why[n] && why[n] != ':' && !isdigit((unsigned char)why[n]))
        n++;
    return n;
}

/* Whether t still fails like why (then why becomes its failure). */
static bool still_fails(const struct ps_case *t, const char *scratch, char *why, size_t whylen)
{
    struct pc_result res;
    bool ok = ps_check(t, scratch, &res);
    size_t k = failure_class(why);
    bool same = !ok && strlen(res.why) >= k && !strncmp(res.why, why, k);
    if (same)
        snprintf(why, whylen, "%s", res.why);
    pc_result_free(&res);
    return same;
}

static bool is_channel(const char *name)
{
    uint64_t g;
    uint32_t w, k;
    return wal_parse_channel_name(name, &g, &w, &k);
}

/* Tries t = c with f applied; keeps it when it still fails. */
typedef bool shrink_step(struct ps_case *t, size_t arg);

static bool try_step(struct ps_case *c, shrink_step *f, size_t arg, const char *scratch, char *why, size_t whylen)
{
    struct ps_case t = {0};
    ps_copy(&t, c);
    bool kept = f(&t, arg) && still_fails(&t, scratch, why, whylen);
    if (kept) {
        ps_free(c);
        *c = t;
    } else {
        ps_free(&t);
    }
    return kept;
}

static bool drop_file(struct ps_case *t, size_t i)
{
    if (i >= t->X.n)
        return false;
    char name[PT_NAME];
    snprintf(name, sizeof(name), "%s", t->X.f[i].name);
    if (!strcmp(name, "checkpoint"))
        t->ck_min = 0; /* the checkpoint that returned lived in that file */
    pi_dir_remove(&t->U, name);
    pi_dir_remove(&t->X, name);
    pi_dir_sort(&t->U);
    pi_dir_sort(&t->X);
    return true;
}

static bool drop_acks(struct ps_case *t, size_t half)
{
    if (!t->n_acks)
        return false;
    size_t n = t->n_acks / 2 ? t->n_acks / 2 : 1;
    if (half)
        memmove(t->acks, t->acks + n, (t->n_acks - n) * sizeof(*t->acks));
    t->n_acks -= n;
    return true;
}

static bool zero_slot(struct ps_case *t, size_t off)
{
    struct pi_file *u = pi_dir_find(&t->U, "epochs"), *x = pi_dir_find(&t->X, "epochs");
    bool any = false;
    if (u && off + EPOCH_SLOT_SIZE <= u->len && u->b[off + 26])
        memset(u->b + off, 0, EPOCH_SLOT_SIZE), any = true;
    if (x && off + EPOCH_SLOT_SIZE <= x->len && x->b[off + 26])
        memset(x->b + off, 0, EPOCH_SLOT_SIZE), any = true;
    return any;
}

/* Cuts channel file `name` in U and X at length len (arg packs both). */
static struct {
    char name[PT_NAME];
    uint64_t len;
} cut_arg;

static bool cut_file(struct ps_case *t, size_t unused)
{
    (void)unused;
    bool any = false;
    struct pi_file *f = pi_dir_find(&t->U, cut_arg.name);
    if (f && f->len > cut_arg.len)
        f->len = cut_arg.len, any = true;
    f = pi_dir_find(&t->X, cut_arg.name);
    if (f && f->len > cut_arg.len)
        f->len = cut_arg.len, any = true;
    return any;
}

struct bounds {
    uint64_t v[8192];
    size_t n;
};

/* The end of every record that ends a commit (or is no commit's: a claim):
 * cutting or dropping records there never leaves part of a commit. */
static int add_bound(void *arg, const struct wal_rec *r)
{
    struct bounds *b = arg;
    if (b->n < 8192 && (r->flags & WAL_REC_F_END))
        b->v[b->n++] = r->off + wal_rec_size(r->len);
    return 0;
}

/* The shortest record boundary (binary search) at which file i still fails. */
static size_t shrink_cut(struct ps_case *c, size_t i, const char *scratch, char *why, size_t whylen)
{
    static struct bounds b;
    const struct pi_file *f = &c->X.f[i];
    const struct pi_file *u = pi_dir_find(&c->U, f->name);
    b.n = 0;
    b.v[b.n++] = 0;
    struct wal_scan_result s;
    wal_scan(u ? u->b : f->b, u ? u->len : f->len, add_bound, &b, &s);
    if (s.header_ok && b.n < 8192)
        b.v[b.n++] = wal_rec_size(sizeof(struct wal_header_payload));
    b.v[b.n++] = s.valid_end + WAL_TERMINATOR;
    char name[sizeof(cut_arg.name)]; /* f is freed when a step is kept (try_step replaces c) */
    snprintf(name, sizeof(name), "%s", f->name);
    size_t kept = 0;
    for (size_t lo = 0, hi = b.n; lo < hi;) {
        size_t mid = lo + (hi - lo) / 2;
        snprintf(cut_arg.name, sizeof(cut_arg.name), "%s", name);
        cut_arg.len = b.v[mid];
        if (try_step(c, cut_file, 0, scratch, why, whylen))
            hi = mid, kept++;
        else
            lo = mid + 1;
        if (i >= c->X.n || strcmp(c->X.f[i].name, cut_arg.name))
            break;
    }
    return kept;
}

/* Removes records [a, b) of U's valid prefix of file `name` from U and X
 * (X only where its bytes up to there are U's): the later bytes move up. */
static struct {
    char name[PT_NAME];
    uint64_t from, to; /* byte range */
} drop_arg;

static bool splice(struct pi_file *f, uint64_t from, uint64_t to)
{
    if (!f || f->len < to)
        return false;
    memmove(f->b + from, f->b + to, f->len - to);
    f->len -= to - from;
    return true;
}

static bool drop_records(struct ps_case *t, size_t unused)
{
    (void)unused;
    struct pi_file *u = pi_dir_find(&t->U, drop_arg.name), *x = pi_dir_find(&t->X, drop_arg.name);
    if (!u || (x && (x->len < drop_arg.to || memcmp(x->b, u->b, drop_arg.to))))
        return false;
    return splice(u, drop_arg.from, drop_arg.to) && (!x || splice(x, drop_arg.from, drop_arg.to));
}

/* ddmin over the commits of file i: drop halves, quarters, ... that keep the failure. */
static size_t shrink_records(struct ps_case *c, size_t i, const char *scratch, char *why, size_t whylen)
{
    static struct bounds b;
    size_t kept = 0;
    snprintf(drop_arg.name, sizeof(drop_arg.name), "%s", c->X.f[i].name);
    for (size_t chunk = 0, tries = 0; tries < 400;) {
        const struct pi_file *u = pi_dir_find(&c->U, drop_arg.name);
        if (!u)
            break;
        b.n = 0;
        struct wal_scan_result s;
        wal_scan(u->b, u->len, add_bound, &b, &s);
        size_t n = b.n; /* commits after the header: b.v[k] is the end of commit k+1 */
        if (n < 2)
            break;
        if (!chunk || chunk > n / 2)
            chunk = n / 2;
        bool any = false;
        for (size_t k = 0; k + chunk <= n && tries < 400; k += chunk, tries++) {
            uint64_t first = k ? b.v[k - 1] : wal_rec_size(sizeof(struct wal_header_payload));
            drop_arg.from = first;
            drop_arg.to = b.v[k + chunk - 1];
            if (try_step(c, drop_records, 0, scratch, why, whylen)) {
                kept++, any = true;
                break; /* the boundaries moved: scan again */
            }
        }
        if (!any) {
            if (chunk == 1)
                break;
            chunk /= 2;
        }
    }
    return kept;
}

size_t ps_shrink(struct ps_case *c, const char *scratch, char *why, size_t whylen)
{
    size_t kept = 0, before = SIZE_MAX;
    for (int pass = 0; pass < 4 && kept != before; pass++) {
        before = kept;
        for (size_t i = c->X.n; i-- > 0;)
            if (i < c->X.n && (is_channel(c->X.f[i].name) || !strcmp(c->X.f[i].name, "checkpoint") ||
                               !strcmp(c->X.f[i].name, "epochs")))
                kept += try_step(c, drop_file, i, scratch, why, whylen);
        const char *z = getenv("URT_PROPERTY_SHRINK_SLOTS"); /* 0: keep the epoch file's slots */
        for (size_t off = 0; (!z || strcmp(z, "0")) && off < (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE;
             off += EPOCH_SLOT_SIZE) {
            const struct pi_file *e = pi_dir_find(&c->X, "epochs");
            const struct pi_file *u = pi_dir_find(&c->U, "epochs");
            bool set = (e && off + EPOCH_SLOT_SIZE <= e->len && e->b[off + 26]) ||
                       (u && off + EPOCH_SLOT_SIZE <= u->len && u->b[off + 26]);
            if (set)
                kept += try_step(c, zero_slot, off, scratch, why, whylen);
        }
        for (size_t i = 0; i < c->X.n; i++)
            if (is_channel(c->X.f[i].name))
                kept += shrink_cut(c, i, scratch, why, whylen);
        for (size_t i = 0; i < c->X.n; i++)
            if (is_channel(c->X.f[i].name))
                kept += shrink_records(c, i, scratch, why, whylen);
        while (c->n_acks && (try_step(c, drop_acks, 0, scratch, why, whylen) ||
                             try_step(c, drop_acks, 1, scratch, why, whylen)))
            kept++;
    }
    return kept;
}

/* ---- on disk ------------------------------------------------------------------------------ */

int ps_save(const struct ps_case *c, const char *dir)
{
    char p[1200];
    crash_remove_tree(dir);
    if (mkdir(dir, 0755))
        return -errno;
    snprintf(p, sizeof(p), "%s/u", dir);
    int rc = pi_dir_write(&c->U, p);
    snprintf(p, sizeof(p), "%s/x", dir);
    if (!rc)
        rc = pi_dir_write(&c->X, p);
    snprintf(p, sizeof(p), "%s/case.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "w");
    if (!f)
        return rc ? rc : -errno;
    fprintf(f, "seed %" PRIu64 "\nck_min %" PRIu64 "\npromised %d\ndamage %s\n", c->seed, c->ck_min, c->promised,
            c->damage);
    for (size_t i = 0; i < c->n_acks; i++)
        fprintf(f, "ack %" PRIx64 " %u %" PRIu64 " %u\n", c->acks[i].id, c->acks[i].count, c->acks[i].epoch,
                c->acks[i].session);
    return fclose(f) ? -errno : 0;
}

int ps_load(struct ps_case *c, const char *dir)
{
    memset(c, 0, sizeof(*c));
    char p[1200], line[590];
    snprintf(p, sizeof(p), "%s/u", dir);
    int rc = pi_dir_read(&c->U, p);
    snprintf(p, sizeof(p), "%s/x", dir);
    if (!rc)
        rc = pi_dir_read(&c->X, p);
    snprintf(p, sizeof(p), "%s/case.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "r");
    if (!f)
        return rc ? rc : -errno;
    size_t cap = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        struct pc_ack a = {0};
        int promised;
        if (sscanf(line, "seed %" SCNu64, &c->seed) == 1 || sscanf(line, "ck_min %" SCNu64, &c->ck_min) == 1)
            continue;
        if (sscanf(line, "promised %d", &promised) == 1) {
            c->promised = promised != 0;
        } else if (!strncmp(line, "damage ", 7)) {
            snprintf(c->damage, sizeof(c->damage), "%s", line + 7);
        } else if (sscanf(line, "ack %" SCNx64 " %u %" SCNu64 " %u", &a.id, &a.count, &a.epoch, &a.session) == 4) {
            if (c->n_acks == cap) {
                cap = cap ? cap * 2 : 64;
                c->acks = realloc(c->acks, cap * sizeof(*c->acks));
            }
            c->acks[c->n_acks++] = a;
        }
    }
    fclose(f);
    return 0;
}
