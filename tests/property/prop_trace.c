/*
 * tests/property/prop_trace.c — the wrappers and the trace (prop_trace.h).
 *
 * Linked into the property test only, whose link line has
 * -Wl,--wrap=<symbol> for every function wrapped here: references from the
 * library's objects (and the test's) go to __wrap_<symbol>, which records
 * and calls __real_<symbol>. A file belongs to the traced directory when
 * /proc/self/fd/<fd> names a file directly inside it (an unlinked file,
 * " (deleted)", does not); only the log's own files are recorded (channel
 * files, epochs, epochs.tmp, checkpoint, checkpoint.tmp), not LOCK nor the
 * notes (cuts.log, sessions.log).
 *
 * The worker's I/O: __wrap_sched_io_submit records the operation (kind,
 * file, range, a copy of the bytes to write) and submits it with a
 * trampoline; the log's
 * own done callback is kept in a small table keyed by the sched_io and is
 * called by the trampoline after the end is recorded.
 */
#include "prop_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>


#include "sched/core/io.h"

static struct {
    pthread_mutex_t lock;
    struct pt_trace t;
    size_t cap;
    bool on;
    char dir[PATH_MAX];
    size_t dirlen;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- the trace ------------------------------------------------------------------------ */

void pt_free(void)
{
    for (size_t i = 0; i < g.t.n; i++)
        free(g.t.ops[i].data);
    free(g.t.ops);
    memset(&g.t, 0, sizeof(g.t));
    g.cap = 0;
}

void pt_start(const char *dir)
{
    pthread_mutex_lock(&g.lock);
    pt_free();
    if (!realpath(dir, g.dir))
        snprintf(g.dir, sizeof(g.dir), "%s", dir);
    g.dirlen = strlen(g.dir);
    g.on = true;
    pthread_mutex_unlock(&g.lock);
}

void pt_stop(void)
{
    pthread_mutex_lock(&g.lock);
    g.on = false;
    pthread_mutex_unlock(&g.lock);
}

const struct pt_trace *pt_get(void)
{
    return &g.t;
}

uint64_t pt_now(void)
{
    pthread_mutex_lock(&g.lock);
    uint64_t s = g.t.seq;
    pthread_mutex_unlock(&g.lock);
    return s;
}

/* Appends op (its start numbered now; end too when instant). Returns its
 * index, or SIZE_MAX without memory (the test then fails on a short trace). */
static size_t append(const struct pt_op *op0, bool instant)
{
    struct pt_op opc = *op0, *op = &opc;
    if (op->kind != PT_WRITE && op->kind != PT_SYNC && op->kind != PT_SFR)
        op->after = SIZE_MAX;
    pthread_mutex_lock(&g.lock);
    size_t k = SIZE_MAX;
    if (g.t.n == g.cap) {
        size_t cap = g.cap ? g.cap * 2 : 4096;
        struct pt_op *p = realloc(g.t.ops, cap * sizeof(*p));
        if (p)
            g.t.ops = p, g.cap = cap;
    }
    if (g.t.n < g.cap) {
        k = g.t.n++;
        g.t.ops[k] = *op;
        g.t.ops[k].start = g.t.seq++;
        g.t.ops[k].end = instant ? g.t.ops[k].start : PT_OPEN;
    } else {
        free(op->data);
        g.t.overflow = true;
    }
    pthread_mutex_unlock(&g.lock);
    return k;
}

static void finish(size_t k, int32_t res)
{
    if (k == SIZE_MAX)
        return;
    pthread_mutex_lock(&g.lock);
    g.t.ops[k].res = res;
    g.t.ops[k].end = g.t.seq++;
    pthread_mutex_unlock(&g.lock);
}

void pt_ack(uint64_t id, uint32_t count, uint64_t marker)
{
    append(&(struct pt_op){.kind = PT_ACK, .id = id, .count = count, .marker = marker}, true);
}

void pt_ckpt(uint64_t marker, int res)
{
    append(&(struct pt_op){.kind = PT_CKPT, .marker = marker, .res = res}, true);
}

/* ---- which files ------------------------------------------------------------------------ */

static bool log_file_name(const char *n)
{
    return !strncmp(n, "ch-", 3) || !strcmp(n, "epochs") || !strcmp(n, "epochs.tmp") || !strcmp(n, "checkpoint") ||
           !strcmp(n, "checkpoint.tmp");
}

static bool tracing(void)
{
    return __atomic_load_n(&g.on, __ATOMIC_RELAXED);
}

/* The name of fd's file when it lies directly in the traced directory. */
static bool fd_name(int fd, char name[PT_NAME])
{
    if (!tracing() || fd < 0)
        return false;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return false;
    path[n] = 0;
    if ((size_t)n <= g.dirlen + 1 || strncmp(path, g.dir, g.dirlen) || path[g.dirlen] != '/')
        return false;
    const char *base = path + g.dirlen + 1;
    if (strchr(base, '/') || strstr(base, " (deleted)") || strlen(base) >= PT_NAME || !log_file_name(base))
        return false;
    snprintf(name, PT_NAME, "%s", base);
    return true;
}

/* name relative to dirfd, when dirfd is the traced directory itself. */
static bool at_name(int dirfd, const char *rel, char name[PT_NAME])
{
    if (!tracing() || !rel || strchr(rel, '/') || strlen(rel) >= PT_NAME || !log_file_name(rel))
        return false;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return false;
    path[n] = 0;
    if ((size_t)n != g.dirlen || strcmp(path, g.dir))
        return false;
    snprintf(name, PT_NAME, "%s", rel);
    return true;
}

static bool fd_direct(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_DIRECT);
}

static uint8_t *copy_bytes(const void *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* ---- blocking calls ------------------------------------------------------------------------ */

ssize_t __real_pwrite64(int fd, const void *b, size_t n, off_t off);
ssize_t __real_pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags);
int __real_fdatasync(int fd);
int __real_fsync(int fd);
int __real_ftruncate64(int fd, off_t len);
int __real_openat64(int dirfd, const char *path, int flags, ...);
int __real_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __real_unlinkat(int dirfd, const char *path, int flags);

ssize_t __wrap_pwrite64(int fd, const void *b, size_t n, off_t off);
ssize_t __wrap_pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags);
int __wrap_fdatasync(int fd);
int __wrap_fsync(int fd);
int __wrap_ftruncate64(int fd, off_t len);
int __wrap_openat64(int dirfd, const char *path, int flags, ...);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_unlinkat(int dirfd, const char *path, int flags);

static size_t start_write(const char *name, int fd, uint64_t off, const void *b, size_t n, bool dsync)
{
    struct pt_op op = {.kind = PT_WRITE, .off = off, .len = n, .dsync = dsync, .direct = fd_direct(fd),
                       .data = copy_bytes(b, n), .after = SIZE_MAX};
    snprintf(op.name, PT_NAME, "%s", name);
    return append(&op, false);
}

ssize_t __wrap_pwrite64(int fd, const void *b, size_t n, off_t off)
{
    char name[PT_NAME];
    if (!fd_name(fd, name))
        return __real_pwrite64(fd, b, n, off);
    size_t k = start_write(name, fd, (uint64_t)off, b, n, false);
    ssize_t r = __real_pwrite64(fd, b, n, off);
    int e = errno;
    finish(k, r < 0 ? -e : (int32_t)r);
    errno = e;
    return r;
}

ssize_t __wrap_pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    char name[PT_NAME];
    if (cnt != 1 || !fd_name(fd, name))
        return __real_pwritev64v2(fd, iov, cnt, off, flags);
    size_t k = start_write(name, fd, (uint64_t)off, iov[0].iov_base, iov[0].iov_len, (flags & RWF_DSYNC) != 0);
    ssize_t r = __real_pwritev64v2(fd, iov, cnt, off, flags);
    int e = errno;
    finish(k, r < 0 ? -e : (int32_t)r);
    errno = e;
    return r;
}

static int traced_sync(int fd, int (*real)(int))
{
    char name[PT_NAME];
    if (!fd_name(fd, name))
        return real(fd);
    struct pt_op op = {.kind = PT_SYNC, .after = SIZE_MAX};
    snprintf(op.name, PT_NAME, "%s", name);
    size_t k = append(&op, false);
    int r = real(fd);
    int e = errno;
    finish(k, r ? -e : 0);
    errno = e;
    return r;
}

int __wrap_fdatasync(int fd)
{
    return traced_sync(fd, __real_fdatasync);
}

int __wrap_fsync(int fd)
{
    return traced_sync(fd, __real_fsync);
}

int __wrap_ftruncate64(int fd, off_t len)
{
    char name[PT_NAME];
    int r = __real_ftruncate64(fd, len);
    int e = errno;
    if (!r && fd_name(fd, name)) {
        struct pt_op op = {.kind = PT_TRUNC, .off = (uint64_t)len};
        snprintf(op.name, PT_NAME, "%s", name);
        append(&op, true);
    }
    errno = e;
    return r;
}

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | __O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    int fd = __real_openat64(dirfd, path, flags, mode);
    int e = errno;
    char name[PT_NAME];
    if (fd >= 0 && (flags & (O_CREAT | O_TRUNC)) && fd_name(fd, name)) {
        struct pt_op op = {.kind = PT_CREATE, .trunc = (flags & O_TRUNC) != 0};
        snprintf(op.name, PT_NAME, "%s", name);
        append(&op, true);
    }
    errno = e;
    return fd;
}

int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    char from[PT_NAME], to[PT_NAME];
    bool traced = at_name(olddirfd, oldpath, from) && at_name(newdirfd, newpath, to);
    int r = __real_renameat(olddirfd, oldpath, newdirfd, newpath);
    int e = errno;
    if (!r && traced) {
        struct pt_op op = {.kind = PT_RENAME};
        snprintf(op.name, PT_NAME, "%s", from);
        snprintf(op.name2, PT_NAME, "%s", to);
        append(&op, true);
    }
    errno = e;
    return r;
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
    char name[PT_NAME];
    bool traced = at_name(dirfd, path, name);
    int r = __real_unlinkat(dirfd, path, flags);
    int e = errno;
    if (!r && traced) {
        struct pt_op op = {.kind = PT_UNLINK};
        snprintf(op.name, PT_NAME, "%s", name);
        append(&op, true);
    }
    errno = e;
    return r;
}

/* ---- the worker's I/O ---------------------------------------------------------------------------- */

#define PT_BOUND 256 /* operations on traced files in flight at once (a few per channel) */

static struct {
    pthread_mutex_t lock;
    struct {
        struct sched_io *io;
        sched_io_done_fn *done;
        size_t op;
    } v[PT_BOUND];
} bound = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool bind_remember(struct sched_io *io, sched_io_done_fn *done, size_t op)
{
    pthread_mutex_lock(&bound.lock);
    bool ok = false;
    for (int i = 0; i < PT_BOUND && !ok; i++)
        if (!bound.v[i].io) {
            bound.v[i].io = io, bound.v[i].done = done, bound.v[i].op = op;
            ok = true;
        }
    pthread_mutex_unlock(&bound.lock);
    return ok;
}

static sched_io_done_fn *bind_take(struct sched_io *io, size_t *op)
{
    pthread_mutex_lock(&bound.lock);
    sched_io_done_fn *done = NULL;
    for (int i = 0; i < PT_BOUND && !done; i++)
        if (bound.v[i].io == io) {
            done = bound.v[i].done, *op = bound.v[i].op;
            bound.v[i].io = NULL;
        }
    pthread_mutex_unlock(&bound.lock);
    return done;
}

static void trampoline(struct sched_io *io, struct worker *w, int32_t res, uint32_t flags)
{
    size_t op = SIZE_MAX;
    sched_io_done_fn *done = bind_take(io, &op);
    finish(op, res);
    done(io, w, res, flags);
}

void __real_sched_io_submit(struct worker *w, const struct be_op *op, struct sched_io *io, sched_io_done_fn *done);
void __wrap_sched_io_submit(struct worker *w, const struct be_op *op, struct sched_io *io, sched_io_done_fn *done);

/* The file operation a backend operation describes, when it is one the trace keeps. */
static bool be_file_op(const struct be_op *b, struct pt_op *op)
{
    if (b->flags & BE_F_FIXED_FILE)
        return false;
    switch (b->kind) {
    case BE_WRITE:
        *op = (struct pt_op){.kind = PT_WRITE, .off = b->off, .len = b->len,
                             .dsync = (b->arg & RWF_DSYNC) != 0, .direct = fd_direct(b->fd)};
        op->data = copy_bytes(b->caddr, b->len);
        return true;
    case BE_FSYNC:
    case BE_FDATASYNC:
        *op = (struct pt_op){.kind = PT_SYNC};
        return true;
    case BE_SYNC_FILE_RANGE:
        *op = (struct pt_op){.kind = PT_SFR, .off = b->off, .len = b->len};
        return true;
    default:
        return false;
    }
}

/* The previous operation this thread submitted, and whether the next one is linked behind it. */
static __thread size_t chain_prev = SIZE_MAX;
static __thread bool chain_link;

void __wrap_sched_io_submit(struct worker *w, const struct be_op *b, struct sched_io *io, sched_io_done_fn *done)
{
    char name[PT_NAME];
    struct pt_op op;
    bool link = b->flags & BE_F_LINK;
    if (!io || !tracing() || !fd_name(b->fd, name) || !be_file_op(b, &op)) {
        chain_prev = SIZE_MAX;
        chain_link = link;
        __real_sched_io_submit(w, b, io, done);
        return;
    }
    snprintf(op.name, PT_NAME, "%s", name);
    op.after = chain_link ? chain_prev : SIZE_MAX;
    size_t k = append(&op, false);
    chain_prev = k;
    chain_link = link;
    if (k == SIZE_MAX || !bind_remember(io, done, k)) {
        pthread_mutex_lock(&g.lock);
        g.t.overflow = true;
        pthread_mutex_unlock(&g.lock);
        finish(k, -ENOMEM);
        __real_sched_io_submit(w, b, io, done);
        return;
    }
    __real_sched_io_submit(w, b, io, trampoline);
}

void pt_dump(FILE *out, uint64_t from, uint64_t to)
{
    static const char *const kinds[] = {"?", "write", "sync", "sfr", "trunc", "create", "rename", "unlink", "ack", "ckpt"};
    for (size_t i = 0; i < g.t.n; i++) {
        const struct pt_op *o = &g.t.ops[i];
        if (o->start < from || o->start >= to)
            continue;
        fprintf(out, "  %6llu..%-6lld %-6s %-30s off %llu len %llu res %d%s%s%s id %llx marker %llu\n",
                (unsigned long long)o->start, o->end == PT_OPEN ? -1ll : (long long)o->end, kinds[o->kind], o->name,
                (unsigned long long)o->off, (unsigned long long)o->len, o->res, o->dsync ? " dsync" : "",
                o->direct ? " direct" : "", o->trunc ? " trunc" : "", (unsigned long long)o->id,
                (unsigned long long)o->marker);
    }
}
