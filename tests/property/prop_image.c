/*
 * tests/property/prop_image.c — directories in memory and the crash replay
 * (prop_image.h). Plain single-threaded code on the test's thread.
 */
#include "prop_image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const pi_model_names[3] = {"kill", "cut-after-sync", "drop-unsynced"};

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort(); /* a test helper: out of memory ends the test */
    return q;
}

/* ---- pi_dir ------------------------------------------------------------------------------ */

void pi_dir_free(struct pi_dir *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->f[i].b);
    free(d->f);
    memset(d, 0, sizeof(*d));
}

struct pi_file *pi_dir_find(const struct pi_dir *d, const char *name)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->f[i].name, name))
            return &d->f[i];
    return NULL;
}

struct pi_file *pi_dir_put(struct pi_dir *d, const char *name, const void *b, size_t len)
{
    struct pi_file *f = pi_dir_find(d, name);
    if (!f) {
        if (d->n == d->cap) {
            d->cap = d->cap ? d->cap * 2 : 16;
            d->f = xrealloc(d->f, d->cap * sizeof(*d->f));
        }
        f = &d->f[d->n++];
        memset(f, 0, sizeof(*f));
        snprintf(f->name, PT_NAME, "%s", name);
    }
    uint8_t *nb = xrealloc(NULL, len);
    if (len)
        memcpy(nb, b, len);
    free(f->b);
    f->b = nb;
    f->len = len;
    return f;
}

void pi_dir_remove(struct pi_dir *d, const char *name)
{
    struct pi_file *f = pi_dir_find(d, name);
    if (!f)
        return;
    free(f->b);
    *f = d->f[--d->n];
}

void pi_dir_copy(struct pi_dir *dst, const struct pi_dir *src)
{
    pi_dir_free(dst);
    for (size_t i = 0; i < src->n; i++)
        pi_dir_put(dst, src->f[i].name, src->f[i].b, src->f[i].len);
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct pi_file *)a)->name, ((const struct pi_file *)b)->name);
}

void pi_dir_sort(struct pi_dir *d)
{
    if (d->n)
        qsort(d->f, d->n, sizeof(*d->f), cmp_file);
}

static int write_file(int dfd, const char *name, const uint8_t *b, size_t len)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    for (size_t off = 0; off < len;) {
        ssize_t w = pwrite(fd, b + off, len - off, (off_t)off);
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return -e;
        }
        off += (size_t)w;
    }
    close(fd);
    return 0;
}

int pi_dir_write(const struct pi_dir *d, const char *path)
{
    if (mkdir(path, 0755))
        return -errno;
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int rc = write_file(dfd, "LOCK", NULL, 0);
    for (size_t i = 0; !rc && i < d->n; i++)
        rc = write_file(dfd, d->f[i].name, d->f[i].b, d->f[i].len);
    close(dfd);
    return rc;
}

static bool log_name(const char *n)
{
    return !strncmp(n, "ch-", 3) || !strcmp(n, "epochs") || !strcmp(n, "epochs.tmp") || !strcmp(n, "checkpoint") ||
           !strcmp(n, "checkpoint.tmp");
}

static int read_file(int dfd, const char *name, uint8_t **b, size_t *len)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return -e;
    }
    *len = (size_t)st.st_size;
    *b = xrealloc(NULL, *len);
    size_t off = 0;
    while (off < *len) {
        ssize_t r = pread(fd, *b + off, *len - off, (off_t)off);
        if (r <= 0)
            break;
        off += (size_t)r;
    }
    close(fd);
    *len = off;
    return 0;
}

int pi_dir_read(struct pi_dir *d, const char *path)
{
    pi_dir_free(d);
    DIR *dir = opendir(path);
    if (!dir)
        return -errno;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(dir))) {
        if (!log_name(e->d_name) || strlen(e->d_name) >= PT_NAME)
            continue;
        uint8_t *b = NULL;
        size_t len = 0;
        if (!(rc = read_file(dirfd(dir), e->d_name, &b, &len))) {
            pi_dir_put(d, e->d_name, b, len);
            free(b);
        }
    }
    closedir(dir);
    pi_dir_sort(d);
    return rc;
}

bool pi_dir_equal(const struct pi_dir *a, const struct pi_dir *b, char *why, size_t whylen)
{
    for (size_t i = 0; i < a->n; i++) {
        const struct pi_file *x = &a->f[i], *y = pi_dir_find(b, x->name);
        if (!y)
            return snprintf(why, whylen, "%s is gone", x->name), false;
        if (x->len != y->len)
            return snprintf(why, whylen, "%s: %zu bytes, then %zu", x->name, x->len, y->len), false;
        if (x->len && memcmp(x->b, y->b, x->len)) {
            size_t k = 0;
            while (x->b[k] == y->b[k])
                k++;
            return snprintf(why, whylen, "%s differs from offset %zu", x->name, k), false;
        }
    }
    for (size_t i = 0; i < b->n; i++)
        if (!pi_dir_find(a, b->f[i].name))
            return snprintf(why, whylen, "%s appeared", b->f[i].name), false;
    return true;
}

/* ---- the replay ----------------------------------------------------------------------------- */

struct vec {
    size_t *v;
    size_t n, cap;
};

static void vec_push(struct vec *x, size_t e)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
    }
    x->v[x->n++] = e;
}

static void vec_remove(struct vec *x, size_t e)
{
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i] == e) {
            memmove(&x->v[i], &x->v[i + 1], (x->n - i - 1) * sizeof(*x->v));
            x->n--;
            return;
        }
}

struct inode {
    char name[PT_NAME];  /* its current (or last) name */
    uint8_t *base;       /* content when the session started (durable) */
    size_t base_len;
    struct vec done;     /* completed PT_WRITE / PT_TRUNC / emptying PT_CREATE, in completion order */
    struct vec inflight; /* PT_WRITEs started, not completed */
    struct vec sfr;      /* completed PT_SFRs */
    uint64_t p_since;    /* writes that completed before this (a sync's start) are durable */
    bool linked;
};

struct pi_replay {
    const struct pt_trace *t;
    size_t *ev_op;      /* per sequence number: the op */
    uint8_t *ev_end;    /* ... and whether it is its end */
    uint64_t nev, pos;
    size_t *op_ino;     /* per op: its inode (resolved at its start) */
    uint8_t *linked_dur; /* per op: 1: made durable by a sync of its file it was linked before;
                            2: on the device (O_DIRECT, or a sync_file_range linked behind it) when a
                            device flush linked behind it started */
    uint64_t flush_since; /* the latest start of a completed device flush (any fsync/fdatasync, an
                             RWF_DSYNC write): data on the device before it is durable (PI_CUT) */
    struct inode *ino;
    size_t nino, capino;
};

static size_t new_inode(struct pi_replay *r, const char *name, const uint8_t *b, size_t len)
{
    if (r->nino == r->capino) {
        r->capino = r->capino ? r->capino * 2 : 32;
        r->ino = xrealloc(r->ino, r->capino * sizeof(*r->ino));
    }
    struct inode *n = &r->ino[r->nino];
    memset(n, 0, sizeof(*n));
    snprintf(n->name, PT_NAME, "%s", name);
    n->base = xrealloc(NULL, len);
    if (len)
        memcpy(n->base, b, len);
    n->base_len = len;
    n->linked = true;
    return r->nino++;
}

static size_t lookup(const struct pi_replay *r, const char *name)
{
    for (size_t i = 0; i < r->nino; i++)
        if (r->ino[i].linked && !strcmp(r->ino[i].name, name))
            return i;
    return SIZE_MAX;
}

struct pi_replay *pi_replay_new(const struct pi_dir *start, const struct pt_trace *t)
{
    struct pi_replay *r = xrealloc(NULL, sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->t = t;
    r->nev = t->seq;
    r->ev_op = xrealloc(NULL, r->nev * sizeof(*r->ev_op));
    r->ev_end = xrealloc(NULL, r->nev);
    for (uint64_t s = 0; s < r->nev; s++)
        r->ev_op[s] = SIZE_MAX;
    r->op_ino = xrealloc(NULL, t->n * sizeof(*r->op_ino));
    r->linked_dur = xrealloc(NULL, t->n);
    memset(r->linked_dur, 0, t->n);
    for (size_t i = 0; i < t->n; i++) {
        const struct pt_op *o = &t->ops[i];
        r->op_ino[i] = SIZE_MAX;
        r->ev_op[o->start] = i, r->ev_end[o->start] = 0;
        if (o->end != o->start && o->end != PT_OPEN)
            r->ev_op[o->end] = i, r->ev_end[o->end] = 1;
    }
    for (size_t i = 0; i < start->n; i++)
        new_inode(r, start->f[i].name, start->f[i].b, start->f[i].len);
    return r;
}

void pi_replay_free(struct pi_replay *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nino; i++) {
        free(r->ino[i].base);
        free(r->ino[i].done.v);
        free(r->ino[i].inflight.v);
        free(r->ino[i].sfr.v);
    }
    free(r->ino);
    free(r->ev_op);
    free(r->ev_end);
    free(r->op_ino);
    free(r->linked_dur);
    free(r);
}

/* Instant events: names and truncations. */
static void apply_instant(struct pi_replay *r, size_t k)
{
    const struct pt_op *o = &r->t->ops[k];
    size_t i = o->kind == PT_ACK || o->kind == PT_CKPT ? SIZE_MAX : lookup(r, o->name);
    switch (o->kind) {
    case PT_CREATE:
        if (i == SIZE_MAX)
            i = new_inode(r, o->name, NULL, 0);
        else if (o->trunc)
            vec_push(&r->ino[i].done, k);
        break;
    case PT_TRUNC:
        if (i != SIZE_MAX)
            vec_push(&r->ino[i].done, k);
        break;
    case PT_RENAME:
        if (i != SIZE_MAX) {
            size_t old = lookup(r, o->name2);
            if (old != SIZE_MAX)
                r->ino[old].linked = false;
            snprintf(r->ino[i].name, PT_NAME, "%s", o->name2);
        }
        break;
    case PT_UNLINK:
        if (i != SIZE_MAX)
            r->ino[i].linked = false;
        break;
    default:
        break;
    }
    r->op_ino[k] = i;
}

/* Sync k of inode i completed: the ops it was linked behind (IOSQE_IO_LINK)
 * had completed when it started: the writes of i (write -> fdatasync, slot
 * -> fdatasync) are durable; and, the sync being a device flush, so is what
 * had reached the device: O_DIRECT writes, writes a sync_file_range linked
 * behind them pushed (write -> sync_file_range -> slot -> fdatasync). */
static void mark_chain(struct pi_replay *r, size_t k, size_t i)
{
    bool device = false; /* the op after p is a completed sync_file_range of p's range */
    for (size_t p = r->t->ops[k].after; p != SIZE_MAX && p < r->t->n; p = r->t->ops[p].after) {
        const struct pt_op *o = &r->t->ops[p];
        if (o->kind == PT_WRITE && r->op_ino[p] == i)
            r->linked_dur[p] = 1;
        else if (o->kind == PT_WRITE && (o->direct || device) && !r->linked_dur[p])
            r->linked_dur[p] = 2;
        device = o->kind == PT_SFR && o->res == 0;
    }
}

static void apply_event(struct pi_replay *r, size_t k, bool end)
{
    const struct pt_op *o = &r->t->ops[k];
    if (o->end == o->start) {
        apply_instant(r, k);
        return;
    }
    if (!end) {
        r->op_ino[k] = lookup(r, o->name);
        if (o->kind == PT_WRITE && r->op_ino[k] != SIZE_MAX)
            vec_push(&r->ino[r->op_ino[k]].inflight, k);
        return;
    }
    size_t i = r->op_ino[k];
    if (i == SIZE_MAX)
        return;
    struct inode *n = &r->ino[i];
    if (o->kind == PT_WRITE) {
        vec_remove(&n->inflight, k);
        if (o->res > 0)
            vec_push(&n->done, k);
        if (o->res > 0 && o->dsync && o->start > r->flush_since)
            r->flush_since = o->start; /* RWF_DSYNC: the write's own fdatasync flushed the device */
    } else if (o->kind == PT_SYNC && o->res == 0) {
        if (o->start > n->p_since)
            n->p_since = o->start;
        if (o->start > r->flush_since)
            r->flush_since = o->start;
        mark_chain(r, k, i);
    } else if (o->kind == PT_SFR && o->res == 0) {
        vec_push(&n->sfr, k);
    }
}

void pi_replay_to(struct pi_replay *r, uint64_t T)
{
    if (T > r->nev)
        T = r->nev;
    for (; r->pos < T; r->pos++) {
        size_t k = r->ev_op[r->pos];
        if (k != SIZE_MAX)
            apply_event(r, k, r->ev_end[r->pos]);
    }
}

/* ---- images --------------------------------------------------------------------------------- */

struct bytes {
    uint8_t *b;
    size_t len;
};

static void put_bytes(struct bytes *x, uint64_t off, const uint8_t *src, size_t n)
{
    if (off + n > x->len) {
        x->b = xrealloc(x->b, off + n);
        memset(x->b + x->len, 0, off + n - x->len);
        x->len = off + n;
    }
    memcpy(x->b + off, src, n);
}

/* Applies completed op k (bytes: the first n of a write; SIZE_MAX: all it wrote). */
static void apply_op(const struct pt_op *o, struct bytes *x, size_t n)
{
    if (o->kind == PT_WRITE) {
        size_t w = (size_t)o->res > 0 ? (size_t)o->res : 0;
        if (o->end == PT_OPEN)
            w = (size_t)o->len;
        put_bytes(x, o->off, o->data, n < w ? n : w);
    } else if (o->kind == PT_TRUNC || o->kind == PT_CREATE) {
        size_t to = o->kind == PT_TRUNC ? (size_t)o->off : 0;
        if (to > x->len) {
            x->b = xrealloc(x->b, to);
            memset(x->b + x->len, 0, to - x->len);
        }
        x->len = to;
    }
}

/* Sound, not complete: a write is durable when it completed (was reaped)
 * before a sync of its file was even prepared, or a sync was linked behind
 * it; a truncation when a sync was prepared after it. */
static bool durable_p(const struct pi_replay *r, const struct inode *n, size_t k)
{
    const struct pt_op *o = &r->t->ops[k];
    if (o->kind == PT_WRITE && (o->dsync || r->linked_dur[k] == 1))
        return true; /* completed: the write and its fdatasync were one */
    return (o->kind == PT_WRITE ? o->end : o->start) < n->p_since;
}

/* PI_CUT (the device's view): durable as above, or on the device (an
 * O_DIRECT write that completed; a buffered one a sync_file_range of its
 * range pushed, started after it completed) before a device flush (any
 * fsync or fdatasync, an RWF_DSYNC write) started that completed since. */
static bool durable_c(const struct pi_replay *r, const struct inode *n, size_t k)
{
    const struct pt_op *o = &r->t->ops[k];
    if (durable_p(r, n, k) || r->linked_dur[k])
        return true;
    if (o->kind != PT_WRITE)
        return false;
    if (o->direct && o->end < r->flush_since)
        return true;
    for (size_t i = 0; i < n->sfr.n; i++) {
        const struct pt_op *s = &r->t->ops[n->sfr.v[i]];
        bool covers = !s->len || (s->off < o->off + o->len && o->off < s->off + s->len);
        if (s->start > o->end && covers && s->end < r->flush_since)
            return true;
    }
    return false;
}

/* A torn write: a random prefix of 512-byte sectors (none, some, all). */
static size_t torn_len(const struct pt_op *o, uint64_t *rng)
{
    uint64_t sectors = (o->len + 511) / 512;
    uint64_t k = rnd(rng) % (sectors + 2);
    return k > sectors ? SIZE_MAX : (size_t)(k * 512);
}

/* A write torn by a power loss on the device: O_DIRECT writes reach the
 * device sector by sector in no promised order, so any subset of their
 * sectors may be there; a buffered write is torn at a sector boundary. */
static void apply_torn(const struct pt_op *o, struct bytes *x, uint64_t *rng)
{
    if (!o->direct || rnd(rng) % 2) {
        apply_op(o, x, torn_len(o, rng));
        return;
    }
    size_t w = o->end == PT_OPEN || o->res <= 0 ? (size_t)o->len : (size_t)o->res;
    for (size_t at = 0; at < w; at += 512)
        if (rnd(rng) % 2)
            put_bytes(x, o->off + at, o->data + at, w - at < 512 ? w - at : 512);
}

/* Whether the kernel may have started write o (in flight at the current
 * point): an SQE linked behind another starts only once that one completed
 * (its CQE comes first). Applying a linked write whose predecessor had not
 * completed would make, say, the epoch slot of a strict chain land while the
 * log write and fdatasync it follows had not: a state no crash leaves. */
static bool started(const struct pi_replay *r, const struct pt_op *o)
{
    if (o->after == SIZE_MAX || o->after >= r->t->n)
        return true;
    const struct pt_op *p = &r->t->ops[o->after];
    return p->end != PT_OPEN && p->end < r->pos && p->res >= 0;
}

static void image_inode(const struct pi_replay *r, const struct inode *n, enum pi_model m, uint64_t *rng,
                        struct bytes *x)
{
    x->b = xrealloc(NULL, n->base_len);
    x->len = n->base_len;
    if (n->base_len)
        memcpy(x->b, n->base, n->base_len);
    size_t undurable = 0;
    for (size_t i = 0; i < n->done.n; i++)
        undurable += !(m == PI_CUT ? durable_c(r, n, n->done.v[i]) : durable_p(r, n, n->done.v[i]));
    size_t keep = m == PI_KILL ? undurable : m == PI_DROP ? 0 : (size_t)(rnd(rng) % (undurable + 2));
    bool torn_next = m == PI_CUT && keep == undurable + 1; /* all kept, then the writes in flight torn */
    if (keep > undurable)
        keep = undurable;
    size_t seen = 0;
    for (size_t i = 0; i < n->done.n; i++) {
        const struct pt_op *o = &r->t->ops[n->done.v[i]];
        bool dur = m == PI_CUT ? durable_c(r, n, n->done.v[i]) : durable_p(r, n, n->done.v[i]);
        if (dur || m == PI_KILL) {
            apply_op(o, x, SIZE_MAX);
        } else if (seen < keep) {
            seen++;
            apply_op(o, x, SIZE_MAX);
        } else if (seen++ == keep && o->kind == PT_WRITE && m == PI_CUT) {
            apply_torn(o, x, rng); /* the first write not kept: torn */
        }
    }
    for (size_t i = 0; (m == PI_KILL || torn_next) && i < n->inflight.n; i++) {
        const struct pt_op *o = &r->t->ops[n->inflight.v[i]];
        if (!started(r, o))
            continue;
        if (m == PI_KILL)
            apply_op(o, x, torn_len(o, rng)); /* the kernel copies a write in order */
        else
            apply_torn(o, x, rng);
    }
}

void pi_replay_image(const struct pi_replay *r, enum pi_model m, uint64_t *rng, struct pi_dir *out)
{
    pi_dir_free(out);
    for (size_t i = 0; i < r->nino; i++) {
        if (!r->ino[i].linked)
            continue;
        struct bytes x;
        image_inode(r, &r->ino[i], m, rng, &x);
        pi_dir_put(out, r->ino[i].name, x.b, x.len);
        free(x.b);
    }
    pi_dir_sort(out);
}

/* An unlinked file as it was when its deletion began: a checkpoint
 * truncates a segment in steps before it unlinks it (tx/wal_seg.c,
 * seg_unlink), so the truncations after its last write are left out
 * (recovery's cut before it deletes a file, too). */
static void image_before_deletion(const struct pi_replay *r, const struct inode *n, struct bytes *x)
{
    x->b = xrealloc(NULL, n->base_len);
    x->len = n->base_len;
    if (n->base_len)
        memcpy(x->b, n->base, n->base_len);
    size_t end = n->done.n;
    while (end && r->t->ops[n->done.v[end - 1]].kind == PT_TRUNC)
        end--;
    for (size_t i = 0; i < end; i++)
        apply_op(&r->t->ops[n->done.v[i]], x, SIZE_MAX);
    for (size_t i = 0; i < n->inflight.n; i++)
        apply_op(&r->t->ops[n->inflight.v[i]], x, SIZE_MAX);
}

void pi_replay_graveyard(const struct pi_replay *r, bool before_deletion, struct pi_dir *out)
{
    pi_dir_free(out);
    uint64_t none = 1;
    for (size_t i = 0; i < r->nino; i++) {
        if (r->ino[i].linked)
            continue;
        struct bytes x;
        if (before_deletion)
            image_before_deletion(r, &r->ino[i], &x);
        else
            image_inode(r, &r->ino[i], PI_KILL, &none, &x);
        pi_dir_put(out, r->ino[i].name, x.b, x.len);
        free(x.b);
    }
    pi_dir_sort(out);
}
