/*
 * tx/wal_recover.c — opening a log directory: lock, verify, cut, replay (SPEC C14).
 *
 * Recovery algorithm (format in wal_format.h):
 *   1. Lock: dir/LOCK is flock()ed (LOCK_EX|LOCK_NB) for as long as a runtime
 *      or a recovery uses the directory; another holder gets -EBUSY. A dry
 *      run (tools/urt-wal) takes no lock and changes nothing.
 *   2. Identify: every entry must be LOCK, epochs or ch-<gen>-<worker>.wal;
 *      anything else means this is not a urt log directory (-EMEDIUMTYPE).
 *   3. Read every channel whole and scan it (wal_scan): the valid prefix, and
 *      where and why it stopped.
 *   4. Durable marker D: the largest marker of a valid epoch-file slot whose
 *      condition holds (its channel's valid prefix reaches the slot's `end`;
 *      wal_format.h).
 *   5. Damage below D: a channel that stopped on corrupt data FOLLOWED by
 *      valid records (larger lsn: damage in the middle, not a torn tail) lost
 *      records of epochs >= h, h = the epoch in the damaged record's header
 *      when it is readable and not below the last good record's epoch g, else
 *      g. If h <= D the epochs h..D are incomplete on that channel, so the
 *      replay limit becomes R = min(D, h - 1) (never replay part of an
 *      epoch). A torn tail (nothing valid after it) is what a crash leaves:
 *      it holds only records of epochs above D (a record is covered by D only
 *      after its write and fdatasync completed), whatever its torn header
 *      says, so it never lowers R — an acknowledged commit is never dropped
 *      because a crash tore the record behind it.
 *   6. Cut: each channel is truncated (then fsync'd) at the earlier of its
 *      corrupt point and its first record of an epoch above R; every cut is
 *      reported with its reason (ops->cut) and noted in dir/cuts.log, one
 *      line per cut: "<unix time> <file> offset <n> bytes <n> <reason>". Records of non-durable epochs are cut so that
 *      a later session's markers (which start above every epoch seen) can
 *      never make them replayable.
 *   7. Replay: the records of epochs <= R of all channels, merged in epoch
 *      order (ties: channel order = generation, then worker; then lsn).
 * Running it twice gives the same result: the second run finds nothing to cut.
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

#include "tx/wal.h"
#include "tx/wal_format.h"

struct rrec {
    uint64_t off, epoch, tx_id, lsn;
    uint32_t len;
};

struct rchan {
    char name[256];
    uint64_t gen;
    uint32_t worker;
    uint8_t *data;
    size_t size;
    struct wal_scan_result scan;
    struct rrec *recs;
    size_t n, cap;
    uint64_t cut_off;
    const char *cut_reason;
    bool cut_corrupt;
};

static int fail(char *err, size_t len, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t len, int rc, const char *fmt, ...)
{
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static bool parse_channel_name(const char *s, uint64_t *gen, uint32_t *worker)
{
    unsigned long long g;
    unsigned w;
    int used = 0;
    if (strlen(s) != 3 + 16 + 1 + 4 + 4 || sscanf(s, "ch-%16llx-%4x.wal%n", &g, &w, &used) != 2 || used != 28)
        return false;
    *gen = g;
    *worker = w;
    return true;
}

static int check_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st))
        return fail(err, errlen, -errno, "log directory %s: %s", dir,
                    errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return fail(err, errlen, -ENOTDIR, "log directory %s: not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return fail(err, errlen, -errno, "log directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        uint64_t g;
        uint32_t w;
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "LOCK") || !strcmp(n, "epochs") ||
            !strcmp(n, "cuts.log") ||
            parse_channel_name(n, &g, &w))
            continue;
        rc = fail(err, errlen, -EMEDIUMTYPE, "log directory %s: not a urt log directory (it holds \"%s\")", dir, n);
        break;
    }
    closedir(d);
    return rc;
}

int wal_check_dir(const char *dir, char *err, size_t errlen)
{
    return check_dir(dir, err, errlen);
}

int wal_lock_dir(const char *dir, bool create, char *err, size_t errlen)
{
    if (!dir || !*dir)
        return fail(err, errlen, -EINVAL, "log_dir: empty path");
    if (create && mkdir(dir, 0755) && errno != EEXIST)
        return fail(err, errlen, -errno, "log directory %s: cannot create it: %s", dir, strerror(errno));
    int rc = check_dir(dir, err, errlen);
    if (rc)
        return rc;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/LOCK", dir) >= (int)sizeof(path))
        return fail(err, errlen, -ENAMETOOLONG, "log directory %s: path too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail(err, errlen, -errno, "log directory %s: cannot open LOCK: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return fail(err, errlen, -EBUSY, "log directory %s: in use by another runtime or process (LOCK held)",
                        dir);
        return fail(err, errlen, -e, "log directory %s: cannot lock: %s", dir, strerror(e));
    }
    return fd;
}

/* Opens name read-only and stats it: the fd (>= 0) or -errno (-ENOENT: absent). */
static int open_stat(int dirfd, const char *name, struct stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, st)) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static int read_whole(int dirfd, const char *name, uint8_t **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    struct stat st;
    int fd = open_stat(dirfd, name, &st);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *out = b;
    *size = got;
    return 0;
}

/* A channel file mapped read-only (a log can be far larger than memory we
 * want to copy it into). Only bytes before the cut point are touched after
 * a cut, so truncating the file while it is mapped is safe. */
static int map_whole(int dirfd, const char *name, uint8_t **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    struct stat st;
    int fd = open_stat(dirfd, name, &st);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return -e;
        }
        *out = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

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
    c->recs[c->n++] = (struct rrec){r->off, r->epoch, r->tx_id, r->lsn, r->len};
    return 0;
}

static int cmp_chan(const void *a, const void *b)
{
    const struct rchan *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    return x->worker < y->worker ? -1 : x->worker > y->worker;
}

/* Every valid slot of the epoch file (step 3); *next_slot follows the slot
 * with the largest marker. Returns the count (slots in *out, to free). */
static size_t read_epochs(int dirfd, struct wal_epoch_slot **out, uint32_t *next_slot)
{
    uint8_t *b;
    size_t n, count = 0;
    uint64_t best = 0;
    *out = NULL;
    *next_slot = 0;
    if (read_whole(dirfd, "epochs", &b, &n) || !b)
        return 0;
    struct wal_epoch_slot *v = malloc((n / EPOCH_SLOT_SIZE + 1) * sizeof(*v));
    for (size_t i = 0; v && i + EPOCH_SLOT_SIZE <= n && i / EPOCH_SLOT_SIZE < EPOCH_SLOTS; i += EPOCH_SLOT_SIZE) {
        struct wal_epoch_slot e;
        if (!wal_epoch_slot_valid(b + i, &e))
            continue;
        v[count++] = e;
        if (e.marker >= best) {
            best = e.marker;
            *next_slot = (uint32_t)((i / EPOCH_SLOT_SIZE + 1) % EPOCH_SLOTS);
        }
    }
    free(b);
    *out = v;
    return count;
}

/* Does the slot's condition hold: channel (gen, worker) has valid records up
 * to `end` (step 3)? Slots without a condition always hold. */
static bool slot_holds(const struct wal_epoch_slot *e, const struct rchan *ch, size_t n)
{
    if (!e->end)
        return true;
    for (size_t i = 0; i < n; i++)
        if (ch[i].gen == e->gen && ch[i].worker == e->worker)
            return ch[i].scan.valid_end >= e->end;
    return false;
}

/* The epoch from which a corrupt channel lost records (step 5). */
static uint64_t lost_from(const struct rchan *c)
{
    uint64_t g = c->scan.n_records ? c->scan.last_epoch : 0;
    if (c->scan.bad_off + WAL_HDR_SIZE <= c->size) {
        uint64_t h;
        memcpy(&h, c->data + c->scan.bad_off + 8, 8);
        if (h >= g)
            return h;
    }
    return g;
}

static void note_cut(int dirfd, const struct rchan *c, uint64_t durable, uint64_t limit)
{
    int fd = openat(dirfd, "cuts.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* a note only: the cut itself is done and reported */
    char line[512];
    int n = snprintf(line, sizeof(line),
                     "%lld %s offset %" PRIu64 " bytes %" PRIu64 " %s (durable marker %" PRIu64 ", replay up to %" PRIu64
                     ")\n",
                     (long long)time(NULL), c->name, c->cut_off, (uint64_t)c->size - c->cut_off, c->cut_reason, durable,
                     limit);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* nothing to do: the note is best effort */
    }
    close(fd);
}

static int replay(struct rchan *ch, size_t n, uint64_t limit, bool all, const struct urt_log_recover_ops *ops,
                  void *arg, uint64_t *replayed)
{
    size_t *pos = calloc(n ? n : 1, sizeof(*pos));
    if (!pos)
        return -ENOMEM;
    int rc = 0;
    for (;;) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            if (pos[i] >= ch[i].n)
                continue;
            const struct rrec *r = &ch[i].recs[pos[i]];
            if (!all && (r->epoch > limit || r->off >= ch[i].cut_off))
                continue;
            if (best == n || r->epoch < ch[best].recs[pos[best]].epoch)
                best = i;
        }
        if (best == n)
            break;
        const struct rrec *r = &ch[best].recs[pos[best]++];
        struct urt_log_record out = {.epoch = r->epoch, .tx_id = r->tx_id, .lsn = r->lsn, .gen = ch[best].gen,
                                     .worker = ch[best].worker, .len = r->len,
                                     .payload = ch[best].data + r->off + WAL_HDR_SIZE};
        (*replayed)++;
        if ((rc = ops->record(arg, &out)))
            break;
    }
    free(pos);
    return rc;
}

int wal_recover_locked(const char *dir, unsigned flags, const struct urt_log_recover_ops *ops, void *arg,
                       struct urt_log_recovery *out, char *err, size_t errlen)
{
    struct urt_log_recovery res;
    memset(&res, 0, sizeof(res));
    bool dry = flags & URT_LOG_RECOVER_DRY_RUN;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return fail(err, errlen, -errno, "log directory %s: %s", dir, strerror(errno));
    struct rchan *ch = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    DIR *d = fdopendir(dup(dirfd));
    if (!d) {
        rc = -errno;
        goto out;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t g;
        uint32_t w;
        if (!parse_channel_name(e->d_name, &g, &w))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct rchan *p = realloc(ch, cap * sizeof(*p));
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            ch = p;
        }
        memset(&ch[n], 0, sizeof(ch[n]));
        memcpy(ch[n].name, e->d_name, 28);
        ch[n].name[28] = 0;
        ch[n].gen = g;
        ch[n].worker = w;
        n++;
        if (g > res.max_gen)
            res.max_gen = g;
    }
    closedir(d);
    if (rc)
        goto out;
    if (n)
        qsort(ch, n, sizeof(*ch), cmp_chan);

    for (size_t i = 0; i < n; i++) {
        struct rchan *c = &ch[i];
        if ((rc = map_whole(dirfd, c->name, &c->data, &c->size)))
            goto out;
        if ((rc = wal_scan(c->data, c->size, collect, c, &c->scan)))
            goto out;
        if (c->scan.header_ok && c->scan.header.start_epoch > res.max_epoch)
            res.max_epoch = c->scan.header.start_epoch;
        if (c->scan.last_epoch > res.max_epoch)
            res.max_epoch = c->scan.last_epoch;
    }
    struct wal_epoch_slot *slots;
    size_t n_slots = read_epochs(dirfd, &slots, &res.epoch_slot_next);
    for (size_t k = 0; k < n_slots; k++)
        if (slots[k].marker > res.durable_marker && slot_holds(&slots[k], ch, n))
            res.durable_marker = slots[k].marker;
    free(slots);
    uint64_t limit = res.durable_marker;
    for (size_t i = 0; i < n; i++) {
        struct rchan *c = &ch[i];
        if (c->scan.end == WAL_SCAN_END_CORRUPT && c->scan.resync_found) {
            uint64_t h = lost_from(c);
            if (h <= limit)
                limit = h ? h - 1 : 0;
        }
    }
    res.replay_marker = limit;
    res.channels = (uint32_t)n;

    for (size_t i = 0; i < n; i++) {
        struct rchan *c = &ch[i];
        c->cut_off = c->size;
        if (c->scan.end == WAL_SCAN_END_CORRUPT) {
            c->cut_off = c->scan.valid_end;
            c->cut_reason = c->scan.reason;
            c->cut_corrupt = true;
        }
        for (size_t k = 0; k < c->n; k++) {
            if (c->recs[k].epoch > limit) {
                if (c->recs[k].off < c->cut_off) {
                    c->cut_off = c->recs[k].off;
                    c->cut_reason = "not durable (epoch above the durable marker)";
                    c->cut_corrupt = false;
                }
                break;
            }
        }
        if (ops && ops->channel) {
            struct urt_log_channel_info info = {.file = c->name, .gen = c->gen, .worker = c->worker,
                                                .header_ok = c->scan.header_ok, .size = c->size,
                                                .valid_end = c->scan.valid_end, .n_records = c->n,
                                                .first_epoch = c->n ? c->recs[0].epoch : 0,
                                                .last_epoch = c->n ? c->recs[c->n - 1].epoch : 0};
            ops->channel(arg, &info);
        }
        if (c->cut_off < c->size) {
            res.cuts++;
            res.cut_bytes += c->size - c->cut_off;
            if (ops && ops->cut) {
                struct urt_log_cut cut = {.file = c->name, .offset = c->cut_off, .bytes = c->size - c->cut_off,
                                          .reason = c->cut_reason, .corrupt = c->cut_corrupt,
                                          .middle = c->cut_corrupt && c->scan.resync_found};
                ops->cut(arg, &cut);
            }
            if (!dry) {
                int fd = openat(dirfd, c->name, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || ftruncate(fd, (off_t)c->cut_off) || fsync(fd)) {
                    rc = fail(err, errlen, -errno, "log directory %s: cannot cut %s: %s", dir, c->name,
                              strerror(errno));
                    if (fd >= 0)
                        close(fd);
                    goto out;
                }
                close(fd);
                note_cut(dirfd, c, res.durable_marker, limit);
            }
        }
    }
    if (ops && ops->record)
        rc = replay(ch, n, limit, flags & URT_LOG_RECOVER_ALL, ops, arg, &res.replayed);
out:
    for (size_t i = 0; i < n; i++) {
        if (ch[i].data && ch[i].size)
            munmap(ch[i].data, ch[i].size);
        free(ch[i].recs);
    }
    free(ch);
    close(dirfd);
    if (out)
        *out = res;
    return rc;
}

