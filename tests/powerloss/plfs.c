/*
 * tests/powerloss/plfs.c — a power-loss-simulating FUSE pass-through file
 * system for urt's crash tests (issue 20, point 4).
 *
 *   plfs [--strict-meta] BACKING_DIR MOUNTPOINT
 *
 * Mounts BACKING_DIR's tree at MOUNTPOINT in the foreground, prints
 * "plfs: ready" on stdout (flushed) once the mount exists, and serves until
 * the file system is unmounted (umount / fusermount3 -u) or plfs gets
 * SIGTERM, SIGINT or SIGHUP. Then it exits with status 0 WITHOUT applying
 * any unsynced data (that is the power loss) and prints one line on stderr:
 *
 *   plfs: dropped <bytes> bytes in <n> files (<syncs> syncs applied)
 *
 * (with --strict-meta the line ends with ", removed <k> new files").
 * <bytes> is the sum of the sizes of the write requests not yet made durable,
 * <n> the number of files with volatile state (writes, truncates or
 * fallocates not yet made durable), <syncs> the number of fsync/fdatasync
 * requests served. Bad arguments: a message and exit status 2; a mount that
 * fails: a message and exit status 1.
 *
 * Data model (strict POSIX, as LazyFS): one volatile overlay per backing
 * inode (shared by every open file handle and hard link of the file):
 *   - a map of dirty 4 KiB pages (each holds the full volatile content of its
 *     page; bytes past the volatile size are zero),
 *   - the volatile size vsize, and vtrunc, the lowest size the file had since
 *     its last sync: backing bytes at or past vtrunc read as zeros.
 * write/pwrite, truncate/ftruncate, open(O_TRUNC) and fallocate (mode 0,
 * KEEP_SIZE, ZERO_RANGE, PUNCH_HOLE; other modes: -EOPNOTSUPP) change the
 * overlay only. read and getattr see the backing file through the overlay.
 * fsync and fdatasync of a file (the FUSE FSYNC op, datasync or not) apply
 * that file's overlay to the backing file (ftruncate to vtrunc, ftruncate to
 * vsize, pwrite of each dirty page) and clear it. The overlay outlives the
 * file's handles (a closed file keeps its unsynced data, like the page cache)
 * and dies with the inode (unlinked and closed) or with the mount. plfs does
 * not fsync the backing file itself: the host's durability is not modelled.
 *
 * Not modelled / caveats:
 *   - Metadata (create, mkdir, mknod, symlink, link, unlink, rmdir, rename,
 *     chmod, chown, utimens) goes to BACKING_DIR at once and survives the
 *     drop. With --strict-meta, a regular file created through the mount
 *     whose parent directory was not fsync'd (FSYNCDIR) after the creation is
 *     unlinked from BACKING_DIR at the drop (renames of such a file are
 *     followed; a rename or unlink does not itself become volatile; new
 *     directories, symlinks and links are not tracked).
 *   - sync_file_range(2) is not a FUSE request: the kernel returns success
 *     and nothing becomes durable. That is the point of the model (urt's
 *     SYNC_FILE_RANGE path must not be trusted as durability).
 *   - O_DIRECT opens work: the handle gets direct_io (every read and write
 *     goes to plfs unaligned and uncached); the data still lands in the
 *     overlay. The backing file is never opened with O_DIRECT.
 *   - mmap: reads work (no FOPEN_KEEP_CACHE, the page cache is dropped at
 *     open; attr/entry timeouts are 0). Shared writable mappings reach plfs
 *     only when the kernel writes the pages back (msync sends FSYNC); before
 *     that they are lost with the kernel's page cache, like a power loss. A
 *     direct_io (O_DIRECT) handle cannot be mmapped on older kernels.
 *   - flock(2) and POSIX locks are not implemented by plfs: the kernel then
 *     keeps them locally on the mount (correct between processes using the
 *     mount; not seen by users of BACKING_DIR).
 *   - O_APPEND: the kernel supplies the offset from the size plfs reports.
 *   - Extended attributes are not supported (-ENOTSUP from the kernel).
 *   - Changes made to BACKING_DIR behind plfs's back while mounted are not
 *     reconciled with the overlays.
 *
 * Driver contract: BACKING_DIR is final only once plfs has exited (a request
 * in flight, even an fsync, is still served until the kernel closes the
 * connection). umount(MOUNTPOINT) right after SIGKILLing a writer can fail
 * with EBUSY for some milliseconds while the dead process's io_uring still
 * holds its files: retry it. A writer holding gigabytes of unsynced data
 * costs plfs as much memory (the overlay is in RAM).
 *
 * Lifecycle: main parses the command line, opens BACKING_DIR (g_root; every
 * operation is an *at() call relative to it), fuse_new + fuse_mount, prints
 * "plfs: ready", runs the multi-threaded loop; when the loop ends it unmounts
 * (if still mounted), frees the overlays without applying them, applies the
 * --strict-meta removals and prints the drop line.
 *
 * Mount: -o fsname=plfs,subtype=plfs,default_permissions (and allow_other
 * as root); attr_timeout, entry_timeout and negative_timeout 0, no
 * kernel_cache, auto_cache or writeback cache, hard_remove (no .fuse_hidden
 * files in BACKING_DIR), use_ino (st_ino of the backing file).
 *
 * Concurrency contract (the multi-threaded loop serves requests in
 * parallel):
 *   - g_tab (mutex) protects the node list, every node's refs count and the
 *     list of open directory handles (g_dirs). A node lives while refs > 0
 *     (one ref per open handle, plus temporary refs taken by path-based
 *     operations) or while it holds volatile state for an inode that still
 *     has a link.
 *   - node->mu protects the node's overlay (active, vsize, vtrunc, pages,
 *     unsynced) and orders all data I/O on node->fd. Reads, writes, truncates
 *     and syncs of one file are serialized; different files run in parallel.
 *   - Lock order: g_tab before node->mu (node_put and the reaper take both);
 *     never g_tab while holding a node->mu.
 *   - g_meta (mutex) protects the --strict-meta list; taken alone.
 *   - g_syncs is atomic.
 */
#define FUSE_USE_VERSION 31

#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

enum { PG = 4096 };

/* ---- plfs's own heap, counted: the exit checks that all of it was freed
 * (LeakSanitizer cannot: see __lsan_default_suppressions below) ---- */

static atomic_long g_live_allocs;

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p)
        atomic_fetch_add(&g_live_allocs, 1);
    return p;
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size);
    if (p)
        atomic_fetch_add(&g_live_allocs, 1);
    return p;
}

static char *xstrdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *p = xmalloc(len);
    return p ? memcpy(p, s, len) : NULL;
}

static void xfree(void *p)
{
    if (p)
        atomic_fetch_sub(&g_live_allocs, 1);
    free(p);
}

/* ---- dirty page map: open addressing, linear probing, grown at 1/2 load ---- */

struct page {
    uint64_t idx;
    uint8_t *data; /* NULL: empty slot */
};

struct pagemap {
    struct page *slots;
    size_t cap; /* 0 or a power of two */
    size_t count;
};

static size_t pm_slot(const struct pagemap *m, uint64_t idx)
{
    uint64_t h = idx * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (m->cap - 1);
}

static uint8_t *pm_find(const struct pagemap *m, uint64_t idx)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = pm_slot(m, idx);; i = (i + 1) & (m->cap - 1)) {
        if (!m->slots[i].data)
            return NULL;
        if (m->slots[i].idx == idx)
            return m->slots[i].data;
    }
}

static void pm_place(struct pagemap *m, uint64_t idx, uint8_t *data)
{
    size_t i = pm_slot(m, idx);
    while (m->slots[i].data)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = (struct page){.idx = idx, .data = data};
    m->count++;
}

/* Rebuilds the table with capacity cap, keeping pages with idx < keep_below
 * (freeing the others). */
static int pm_rebuild(struct pagemap *m, size_t cap, uint64_t keep_below)
{
    struct page *old = m->slots;
    size_t oldcap = m->cap;
    struct page *slots = xcalloc(cap, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    m->slots = slots;
    m->cap = cap;
    m->count = 0;
    for (size_t i = 0; i < oldcap; i++) {
        if (!old[i].data)
            continue;
        if (old[i].idx < keep_below)
            pm_place(m, old[i].idx, old[i].data);
        else
            xfree(old[i].data);
    }
    xfree(old);
    return 0;
}

static int pm_insert(struct pagemap *m, uint64_t idx, uint8_t *data)
{
    if (2 * (m->count + 1) > m->cap) {
        int rc = pm_rebuild(m, m->cap ? 2 * m->cap : 16, UINT64_MAX);
        if (rc)
            return rc;
    }
    pm_place(m, idx, data);
    return 0;
}

/* Frees the pages at or past index limit. */
static int pm_cut(struct pagemap *m, uint64_t limit)
{
    return m->cap ? pm_rebuild(m, m->cap, limit) : 0;
}

static void pm_clear(struct pagemap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        xfree(m->slots[i].data);
    xfree(m->slots);
    *m = (struct pagemap){0};
}

/* ---- nodes: one per backing inode with open handles or volatile state ---- */

struct node {
    struct node *next; /* g_nodes list (g_tab) */
    dev_t dev;
    ino_t ino;
    int fd;        /* backing file, O_RDWR; keeps the inode alive */
    unsigned refs; /* g_tab */
    pthread_mutex_t mu;
    /* overlay (mu) */
    bool active;       /* false: the backing file is the whole truth */
    off_t vsize;       /* volatile size */
    off_t vtrunc;      /* backing bytes at or past it read as zeros */
    struct pagemap pages;
    uint64_t unsynced; /* bytes of write requests since the last sync */
};

static pthread_mutex_t g_tab = PTHREAD_MUTEX_INITIALIZER;
static struct node *g_nodes;
static int g_root = -1; /* BACKING_DIR */
static atomic_uint_fast64_t g_syncs;
static bool g_strict_meta;

static const char *rel(const char *path)
{
    return path[0] == '/' && path[1] ? path + 1 : (path[0] == '/' ? "." : path);
}

static struct node *fh_node(const struct fuse_file_info *fi)
{
    return (struct node *)(uintptr_t)fi->fh;
}

static void node_destroy(struct node *n)
{
    pm_clear(&n->pages);
    close(n->fd);
    pthread_mutex_destroy(&n->mu);
    xfree(n);
}

static struct node *node_find_locked(dev_t dev, ino_t ino)
{
    for (struct node *n = g_nodes; n; n = n->next)
        if (n->dev == dev && n->ino == ino)
            return n;
    return NULL;
}

/* Takes a ref on the node of fd's inode (creating it with fd) or, when it
 * exists, closes fd. Returns NULL (fd closed) on error, errno set. */
static struct node *node_attach(int fd)
{
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    pthread_mutex_lock(&g_tab);
    struct node *n = node_find_locked(st.st_dev, st.st_ino);
    if (n) {
        n->refs++;
        pthread_mutex_unlock(&g_tab);
        close(fd);
        return n;
    }
    n = xcalloc(1, sizeof *n);
    if (!n) {
        pthread_mutex_unlock(&g_tab);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    n->fd = fd;
    n->refs = 1;
    pthread_mutex_init(&n->mu, NULL);
    n->next = g_nodes;
    g_nodes = n;
    pthread_mutex_unlock(&g_tab);
    return n;
}

/* Ref on an existing node of (dev, ino), or NULL. */
static struct node *node_lookup(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&g_tab);
    struct node *n = node_find_locked(dev, ino);
    if (n)
        n->refs++;
    pthread_mutex_unlock(&g_tab);
    return n;
}

/* Whether an unreferenced node must stay: it has volatile state and its
 * inode still has a name. Caller holds g_tab. */
static bool node_keep_locked(struct node *n)
{
    struct stat st;
    pthread_mutex_lock(&n->mu);
    bool keep = n->active && fstat(n->fd, &st) == 0 && st.st_nlink > 0;
    pthread_mutex_unlock(&n->mu);
    return keep;
}

static void node_unlink_locked(struct node *n)
{
    for (struct node **p = &g_nodes; *p; p = &(*p)->next)
        if (*p == n) {
            *p = n->next;
            return;
        }
}

static void node_put(struct node *n)
{
    pthread_mutex_lock(&g_tab);
    bool gone = --n->refs == 0 && !node_keep_locked(n);
    if (gone)
        node_unlink_locked(n);
    pthread_mutex_unlock(&g_tab);
    if (gone)
        node_destroy(n);
}

/* After unlink/rename: frees unreferenced nodes whose inode lost its last
 * name (their volatile data can never be seen again). */
static void nodes_reap(void)
{
    struct node *dead = NULL;
    pthread_mutex_lock(&g_tab);
    for (struct node **p = &g_nodes; *p;) {
        struct node *n = *p;
        if (n->refs == 0 && !node_keep_locked(n)) {
            *p = n->next;
            n->next = dead;
            dead = n;
        } else {
            p = &n->next;
        }
    }
    pthread_mutex_unlock(&g_tab);
    while (dead) {
        struct node *n = dead;
        dead = n->next;
        node_destroy(n);
    }
}

/* Opens the backing file of path read-write and takes a ref on its node. */
static struct node *node_open(const char *path, int extra_flags, mode_t mode, int *err)
{
    int fd = openat(g_root, rel(path), O_RDWR | O_CLOEXEC | O_NOFOLLOW | extra_flags, mode);
    if (fd < 0) {
        *err = -errno;
        return NULL;
    }
    struct node *n = node_attach(fd);
    if (!n)
        *err = -errno;
    return n;
}

/* ---- overlay operations (caller holds n->mu) ---- */

static int ov_begin(struct node *n)
{
    if (n->active)
        return 0;
    struct stat st;
    if (fstat(n->fd, &st))
        return -errno;
    n->vsize = n->vtrunc = st.st_size;
    n->unsynced = 0;
    n->active = true;
    return 0;
}

/* Reads backing bytes [off, off+len) as the overlay sees them: data below
 * vtrunc, zeros past it or past the backing file's end. */
static int ov_backing_read(struct node *n, uint8_t *buf, size_t len, off_t off)
{
    memset(buf, 0, len);
    if (off >= n->vtrunc)
        return 0;
    size_t want = (size_t)(n->vtrunc - off) < len ? (size_t)(n->vtrunc - off) : len;
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(n->fd, buf + got, want - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return 0;
}

/* The dirty page idx, created from the backing data when absent. */
static int ov_page(struct node *n, uint64_t idx, uint8_t **out)
{
    uint8_t *p = pm_find(&n->pages, idx);
    if (p) {
        *out = p;
        return 0;
    }
    p = xmalloc(PG);
    if (!p)
        return -ENOMEM;
    int rc = ov_backing_read(n, p, PG, (off_t)(idx * PG));
    if (!rc)
        rc = pm_insert(&n->pages, idx, p);
    if (rc) {
        xfree(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Copies src (or zeros when src is NULL) into the pages covering
 * [off, off+len). Does not change vsize. */
static int ov_fill(struct node *n, const char *src, size_t len, off_t off)
{
    size_t done = 0;
    while (done < len) {
        uint64_t pos = (uint64_t)off + done;
        size_t in = (size_t)(pos % PG);
        size_t chunk = PG - in < len - done ? PG - in : len - done;
        uint8_t *p;
        int rc = ov_page(n, pos / PG, &p);
        if (rc)
            return rc;
        if (src)
            memcpy(p + in, src + done, chunk);
        else
            memset(p + in, 0, chunk);
        done += chunk;
    }
    return 0;
}

static int ov_write(struct node *n, const char *buf, size_t len, off_t off)
{
    int rc = ov_begin(n);
    if (!rc)
        rc = ov_fill(n, buf, len, off);
    if (rc)
        return rc;
    if (off + (off_t)len > n->vsize)
        n->vsize = off + (off_t)len;
    n->unsynced += len;
    return (int)len;
}

static int ov_read(struct node *n, char *buf, size_t len, off_t off)
{
    if (!n->active) {
        ssize_t r = pread(n->fd, buf, len, off);
        return r < 0 ? -errno : (int)r;
    }
    if (off >= n->vsize)
        return 0;
    if ((off_t)len > n->vsize - off)
        len = (size_t)(n->vsize - off);
    size_t done = 0;
    while (done < len) {
        uint64_t pos = (uint64_t)off + done;
        size_t in = (size_t)(pos % PG);
        size_t chunk = PG - in < len - done ? PG - in : len - done;
        const uint8_t *p = pm_find(&n->pages, pos / PG);
        if (p) {
            memcpy(buf + done, p + in, chunk);
        } else {
            int rc = ov_backing_read(n, (uint8_t *)buf + done, chunk, (off_t)pos);
            if (rc)
                return rc;
        }
        done += chunk;
    }
    return (int)len;
}

static int ov_truncate(struct node *n, off_t size)
{
    if (size < 0)
        return -EINVAL;
    struct stat st;
    if (!n->active && fstat(n->fd, &st) == 0 && st.st_size == size)
        return 0; /* nothing changes: no overlay (an O_TRUNC create, say) */
    int rc = ov_begin(n);
    if (rc)
        return rc;
    if (size < n->vsize) {
        if (size < n->vtrunc)
            n->vtrunc = size;
        rc = pm_cut(&n->pages, ((uint64_t)size + PG - 1) / PG);
        if (rc)
            return rc;
        uint8_t *tail = size % PG ? pm_find(&n->pages, (uint64_t)size / PG) : NULL;
        if (tail)
            memset(tail + size % PG, 0, PG - (size_t)(size % PG));
    }
    n->vsize = size; /* growing: the bytes past the old size are zeros already */
    return 0;
}

static int ov_fallocate(struct node *n, int mode, off_t off, off_t len)
{
    if (off < 0 || len <= 0)
        return -EINVAL;
    bool keep = mode & FALLOC_FL_KEEP_SIZE;
    int kind = mode & ~FALLOC_FL_KEEP_SIZE;
    if (kind != 0 && kind != FALLOC_FL_ZERO_RANGE && kind != FALLOC_FL_PUNCH_HOLE)
        return -EOPNOTSUPP;
    if (kind == FALLOC_FL_PUNCH_HOLE && !keep)
        return -EOPNOTSUPP;
    int rc = ov_begin(n);
    if (rc)
        return rc;
    off_t end = off + len;
    if (kind != 0 && off < n->vsize) { /* zero the part below vsize; past it is zero */
        off_t zend = end < n->vsize ? end : n->vsize;
        rc = ov_fill(n, NULL, (size_t)(zend - off), off);
        if (rc)
            return rc;
    }
    if (!keep && end > n->vsize)
        n->vsize = end;
    return 0;
}

static int full_pwrite(int fd, const uint8_t *buf, size_t len, off_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(fd, buf + done, len - done, off + (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

/* fsync/fdatasync: the overlay becomes the backing file's content. */
static int ov_sync(struct node *n)
{
    if (!n->active)
        return 0;
    struct stat st;
    if (fstat(n->fd, &st))
        return -errno;
    if (n->vtrunc < st.st_size && ftruncate(n->fd, n->vtrunc))
        return -errno;
    if (ftruncate(n->fd, n->vsize))
        return -errno;
    for (size_t i = 0; i < n->pages.cap; i++) {
        const struct page *pg = &n->pages.slots[i];
        if (!pg->data)
            continue;
        off_t base = (off_t)(pg->idx * PG);
        size_t len = n->vsize - base < PG ? (size_t)(n->vsize - base) : PG;
        int rc = full_pwrite(n->fd, pg->data, len, base);
        if (rc)
            return rc;
    }
    pm_clear(&n->pages);
    n->active = false;
    n->unsynced = 0;
    return 0;
}

/* ---- --strict-meta: files created since their directory's last fsync ---- */

struct newfile {
    struct newfile *next;
    char *path; /* relative to BACKING_DIR */
    dev_t dev;
    ino_t ino;
};

static pthread_mutex_t g_meta = PTHREAD_MUTEX_INITIALIZER;
static struct newfile *g_new;

static void meta_created(const char *path, const struct node *n)
{
    if (!g_strict_meta)
        return;
    struct newfile *f = xcalloc(1, sizeof *f);
    char *p = xstrdup(rel(path));
    if (!f || !p) { /* out of memory: the file is treated as durable */
        xfree(f);
        xfree(p);
        return;
    }
    *f = (struct newfile){.path = p, .dev = n->dev, .ino = n->ino};
    pthread_mutex_lock(&g_meta);
    f->next = g_new;
    g_new = f;
    pthread_mutex_unlock(&g_meta);
}

static bool parent_is(const char *path, const char *dir)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strcmp(dir, ".") == 0;
    size_t dl = strlen(dir);
    return (size_t)(slash - path) == dl && strncmp(path, dir, dl) == 0;
}

/* Removes the entries matching (parent dir, or exact path when exact). */
static void meta_forget(const char *path, bool exact)
{
    if (!g_strict_meta || !path)
        return;
    const char *r = rel(path);
    pthread_mutex_lock(&g_meta);
    for (struct newfile **p = &g_new; *p;) {
        struct newfile *f = *p;
        if (exact ? strcmp(f->path, r) == 0 : parent_is(f->path, r)) {
            *p = f->next;
            xfree(f->path);
            xfree(f);
        } else {
            p = &f->next;
        }
    }
    pthread_mutex_unlock(&g_meta);
}

/* Follows a rename: entries at from (or under it) move to to. */
static void meta_renamed(const char *from, const char *to)
{
    if (!g_strict_meta)
        return;
    const char *rf = rel(from), *rt = rel(to);
    size_t fl = strlen(rf);
    pthread_mutex_lock(&g_meta);
    for (struct newfile *f = g_new; f; f = f->next) {
        if (strncmp(f->path, rf, fl) != 0 || (f->path[fl] != '\0' && f->path[fl] != '/'))
            continue;
        size_t nl = strlen(rt) + strlen(f->path + fl) + 1;
        char *p = xmalloc(nl);
        if (!p)
            continue;
        snprintf(p, nl, "%s%s", rt, f->path + fl);
        xfree(f->path);
        f->path = p;
    }
    pthread_mutex_unlock(&g_meta);
}

/* At the drop: unlinks the still-volatile new files. Returns their count. */
static unsigned meta_drop(void)
{
    unsigned count = 0;
    while (g_new) {
        struct newfile *f = g_new;
        g_new = f->next;
        struct stat st;
        if (fstatat(g_root, f->path, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == f->dev &&
            st.st_ino == f->ino && unlinkat(g_root, f->path, 0) == 0)
            count++;
        xfree(f->path);
        xfree(f);
    }
    return count;
}

/* ---- FUSE operations ---- */

static void *plfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    cfg->use_ino = 1;
    cfg->nullpath_ok = 1;
    cfg->hard_remove = 1; /* no .fuse_hidden renames in BACKING_DIR */
    cfg->entry_timeout = 0;
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    cfg->kernel_cache = 0;
    cfg->auto_cache = 0;
    cfg->direct_io = 0;
    return NULL;
}

/* Reports the volatile size of a regular file with an overlay. */
static void apply_volatile_size(struct stat *st)
{
    if (!S_ISREG(st->st_mode))
        return;
    struct node *n = node_lookup(st->st_dev, st->st_ino);
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    if (n->active) {
        st->st_size = n->vsize;
        blkcnt_t blocks = (n->vsize + 511) / 512;
        if (st->st_blocks < blocks)
            st->st_blocks = blocks;
    }
    pthread_mutex_unlock(&n->mu);
    node_put(n);
}

static int plfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    int r = fi ? fstat(fh_node(fi)->fd, st)
               : (path ? fstatat(g_root, rel(path), st, AT_SYMLINK_NOFOLLOW) : (errno = ENOENT, -1));
    if (r)
        return -errno;
    apply_volatile_size(st);
    return 0;
}

static int plfs_access(const char *path, int mask)
{
    return faccessat(g_root, rel(path), mask, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

static int plfs_readlink(const char *path, char *buf, size_t size)
{
    if (size == 0)
        return -EINVAL;
    ssize_t r = readlinkat(g_root, rel(path), buf, size - 1);
    if (r < 0)
        return -errno;
    buf[r] = '\0';
    return 0;
}

/* A directory handle: the open directory and its path (--strict-meta's
 * FSYNCDIR needs the path; with nullpath_ok the operations get none). */
struct dirh {
    struct dirh *prev, *next; /* g_dirs (g_tab); the drop frees the handles
                                 whose RELEASEDIR the unmount overtook */
    DIR *d;
    char *path; /* relative to BACKING_DIR */
};

static struct dirh g_dirs = {.prev = &g_dirs, .next = &g_dirs};

static void dirh_link(struct dirh *h)
{
    pthread_mutex_lock(&g_tab);
    h->next = g_dirs.next;
    h->prev = &g_dirs;
    g_dirs.next->prev = h;
    g_dirs.next = h;
    pthread_mutex_unlock(&g_tab);
}

static void dirh_free(struct dirh *h)
{
    pthread_mutex_lock(&g_tab);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    pthread_mutex_unlock(&g_tab);
    closedir(h->d);
    xfree(h->path);
    xfree(h);
}

static struct dirh *fh_dir(const struct fuse_file_info *fi)
{
    return (struct dirh *)(uintptr_t)fi->fh;
}

static int plfs_opendir(const char *path, struct fuse_file_info *fi)
{
    struct dirh *h = xcalloc(1, sizeof *h);
    if (!h || !(h->path = xstrdup(rel(path)))) {
        xfree(h);
        return -ENOMEM;
    }
    int fd = openat(g_root, h->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(h->d = fdopendir(fd))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        xfree(h->path);
        xfree(h);
        return -e;
    }
    dirh_link(h);
    fi->fh = (uint64_t)(uintptr_t)h;
    return 0;
}

static int plfs_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off,
                        struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path, (void)flags;
    DIR *d = fh_dir(fi)->d;
    if (off == 0)
        rewinddir(d);
    else
        seekdir(d, off);
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)DTTOIF(de->d_type)};
        if (filler(buf, de->d_name, &st, de->d_off, 0))
            return 0;
    }
    return errno ? -errno : 0;
}

static int plfs_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    dirh_free(fh_dir(fi));
    return 0;
}

static int plfs_mknod(const char *path, mode_t mode, dev_t rdev)
{
    return mknodat(g_root, rel(path), mode, rdev) ? -errno : 0;
}

static int plfs_mkdir(const char *path, mode_t mode)
{
    return mkdirat(g_root, rel(path), mode) ? -errno : 0;
}

static int plfs_unlink(const char *path)
{
    if (unlinkat(g_root, rel(path), 0))
        return -errno;
    meta_forget(path, true);
    nodes_reap();
    return 0;
}

static int plfs_rmdir(const char *path)
{
    return unlinkat(g_root, rel(path), AT_REMOVEDIR) ? -errno : 0;
}

static int plfs_symlink(const char *target, const char *path)
{
    return symlinkat(target, g_root, rel(path)) ? -errno : 0;
}

static int plfs_rename(const char *from, const char *to, unsigned int flags)
{
    if (renameat2(g_root, rel(from), g_root, rel(to), flags))
        return -errno;
    if (!(flags & RENAME_EXCHANGE)) {
        meta_forget(to, true); /* a volatile file replaced at to is gone */
        meta_renamed(from, to);
    }
    nodes_reap();
    return 0;
}

static int plfs_link(const char *from, const char *to)
{
    return linkat(g_root, rel(from), g_root, rel(to), 0) ? -errno : 0;
}

static int plfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    int r = fi ? fchmod(fh_node(fi)->fd, mode) : fchmodat(g_root, rel(path), mode, 0);
    return r ? -errno : 0;
}

static int plfs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    int r = fi ? fchown(fh_node(fi)->fd, uid, gid)
               : fchownat(g_root, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
    return r ? -errno : 0;
}

static int plfs_utimens(const char *path, const struct timespec ts[2], struct fuse_file_info *fi)
{
    int r = fi ? futimens(fh_node(fi)->fd, ts) : utimensat(g_root, rel(path), ts, AT_SYMLINK_NOFOLLOW);
    return r ? -errno : 0;
}

static int plfs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    int err = 0;
    struct node *n = fi ? fh_node(fi) : (path ? node_open(path, 0, 0, &err) : NULL);
    if (!n)
        return err ? err : -ENOENT;
    pthread_mutex_lock(&n->mu);
    int rc = ov_truncate(n, size);
    pthread_mutex_unlock(&n->mu);
    if (!fi)
        node_put(n);
    return rc;
}

/* Shared tail of open and create: direct_io for O_DIRECT, O_TRUNC as a
 * volatile truncate. */
static int opened(struct node *n, struct fuse_file_info *fi)
{
    if (fi->flags & O_TRUNC) {
        pthread_mutex_lock(&n->mu);
        int rc = ov_truncate(n, 0);
        pthread_mutex_unlock(&n->mu);
        if (rc) {
            node_put(n);
            return rc;
        }
    }
    fi->direct_io = (fi->flags & O_DIRECT) != 0;
    fi->keep_cache = 0;
    fi->fh = (uint64_t)(uintptr_t)n;
    return 0;
}

static int plfs_open(const char *path, struct fuse_file_info *fi)
{
    int err = 0;
    struct node *n = node_open(path, 0, 0, &err);
    return n ? opened(n, fi) : err;
}

static int plfs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    struct stat st;
    bool existed = fstatat(g_root, rel(path), &st, AT_SYMLINK_NOFOLLOW) == 0;
    int err = 0;
    struct node *n = node_open(path, O_CREAT | (fi->flags & O_EXCL), mode, &err);
    if (!n)
        return err;
    if (!existed)
        meta_created(path, n);
    return opened(n, fi);
}

static int plfs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    struct node *n = fh_node(fi);
    pthread_mutex_lock(&n->mu);
    int r = ov_read(n, buf, size, off);
    pthread_mutex_unlock(&n->mu);
    return r;
}

static int plfs_write(const char *path, const char *buf, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)path;
    struct node *n = fh_node(fi);
    pthread_mutex_lock(&n->mu);
    int r = ov_write(n, buf, size, off);
    pthread_mutex_unlock(&n->mu);
    return r;
}

static int plfs_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    return fstatvfs(g_root, st) ? -errno : 0;
}

static int plfs_flush(const char *path, struct fuse_file_info *fi)
{
    (void)path, (void)fi;
    return 0; /* close(2) makes nothing durable */
}

static int plfs_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    node_put(fh_node(fi));
    return 0;
}

static int plfs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path, (void)datasync; /* both apply data and size */
    struct node *n = fh_node(fi);
    pthread_mutex_lock(&n->mu);
    int rc = ov_sync(n);
    pthread_mutex_unlock(&n->mu);
    if (!rc)
        atomic_fetch_add(&g_syncs, 1);
    return rc;
}

static int plfs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path, (void)datasync;
    meta_forget(fh_dir(fi)->path, false); /* the directory's new entries are durable */
    return 0;
}

static int plfs_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)path;
    if (!fi)
        return -EOPNOTSUPP;
    struct node *n = fh_node(fi);
    pthread_mutex_lock(&n->mu);
    int rc = ov_fallocate(n, mode, off, len);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

static const struct fuse_operations plfs_ops = {
    .init = plfs_init,
    .getattr = plfs_getattr,
    .access = plfs_access,
    .readlink = plfs_readlink,
    .opendir = plfs_opendir,
    .readdir = plfs_readdir,
    .releasedir = plfs_releasedir,
    .mknod = plfs_mknod,
    .mkdir = plfs_mkdir,
    .unlink = plfs_unlink,
    .rmdir = plfs_rmdir,
    .symlink = plfs_symlink,
    .rename = plfs_rename,
    .link = plfs_link,
    .chmod = plfs_chmod,
    .chown = plfs_chown,
    .utimens = plfs_utimens,
    .truncate = plfs_truncate,
    .open = plfs_open,
    .create = plfs_create,
    .read = plfs_read,
    .write = plfs_write,
    .statfs = plfs_statfs,
    .flush = plfs_flush,
    .release = plfs_release,
    .fsync = plfs_fsync,
    .fsyncdir = plfs_fsyncdir,
    .fallocate = plfs_fallocate,
    /* no .lock / .flock: the kernel keeps locks locally on the mount */
};

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer: libfuse 3.14 leaks the FUSE_INTERRUPT requests still queued
 * when the session ends (fuse_session_destroy does not free se->interrupts;
 * the kernel sends them when a writer blocked in a request is SIGKILLed).
 * A suppression matches a leak if ANY frame of its stack matches, so this one
 * would also hide plfs allocations made under libfuse callbacks: plfs counts
 * its own allocations instead (xcalloc/xfree) and its exit fails when any is
 * left (main). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libfuse3.so\n";
}
#endif

/* ---- command line, drop report, main ---- */

struct cli {
    bool strict_meta;
    const char *backing;
    const char *mountpoint;
};

static _Noreturn void usage(const char *why, const char *arg)
{
    if (arg)
        fprintf(stderr, "plfs: %s: %s\n", why, arg);
    else
        fprintf(stderr, "plfs: %s\n", why);
    fprintf(stderr, "usage: plfs [--strict-meta] BACKING_DIR MOUNTPOINT\n");
    exit(2);
}

static _Noreturn void help(void)
{
    printf("usage: plfs [--strict-meta] BACKING_DIR MOUNTPOINT\n"
           "Mounts BACKING_DIR at MOUNTPOINT; writes stay volatile until fsync/fdatasync of their\n"
           "file; unmount or SIGTERM/SIGINT drops the rest (see the header of tests/powerloss/plfs.c).\n"
           "  --strict-meta  also remove, at the drop, files created since their directory's last fsync\n");
    exit(0);
}

static void require_dir(const char *what, const char *path)
{
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "plfs: %s %s: %s%s\n", what, path, strerror(errno),
                errno == ENOTCONN ? " (a stale FUSE mount: umount it first)" : "");
        usage("bad argument", what);
    }
    if (!S_ISDIR(st.st_mode))
        usage("not a directory", path);
}

/* MOUNTPOINT inside BACKING_DIR (or the same directory) would make plfs
 * serve its own mount point through itself. */
static void require_outside(const char *mountpoint, const char *backing)
{
    char m[PATH_MAX], b[PATH_MAX];
    if (!realpath(mountpoint, m) || !realpath(backing, b))
        usage("cannot resolve BACKING_DIR or MOUNTPOINT", strerror(errno));
    size_t bl = strlen(b);
    if (strncmp(m, b, bl) == 0 && (m[bl] == '\0' || m[bl] == '/' || bl == 1))
        usage("MOUNTPOINT must not be BACKING_DIR or inside it", mountpoint);
}

static struct cli parse_cli(int argc, char **argv)
{
    struct cli c = {0};
    const char *pos[2];
    int npos = 0;
    bool opts_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && strcmp(a, "--") == 0)
            opts_done = true;
        else if (!opts_done && strcmp(a, "--strict-meta") == 0)
            c.strict_meta = true;
        else if (!opts_done && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0))
            help();
        else if (!opts_done && a[0] == '-' && a[1] != '\0')
            usage("unknown option", a);
        else if (npos == 2)
            usage("too many arguments", a);
        else
            pos[npos++] = a;
    }
    if (npos != 2)
        usage("BACKING_DIR and MOUNTPOINT are required", NULL);
    c.backing = pos[0];
    c.mountpoint = pos[1];
    require_dir("BACKING_DIR", c.backing);
    require_dir("MOUNTPOINT", c.mountpoint);
    require_outside(c.mountpoint, c.backing);
    return c;
}

/* The power loss: reports and frees every overlay without applying it
 * (and the handles whose RELEASE the unmount overtook). Single-threaded:
 * the session loop has ended. */
static void drop_all(void)
{
    while (g_dirs.next != &g_dirs)
        dirh_free(g_dirs.next);
    uint64_t bytes = 0;
    unsigned files = 0;
    while (g_nodes) {
        struct node *n = g_nodes;
        g_nodes = n->next;
        if (n->active) {
            files++;
            bytes += n->unsynced;
        }
        node_destroy(n);
    }
    char meta[64] = "";
    if (g_strict_meta)
        snprintf(meta, sizeof meta, ", removed %u new files", meta_drop());
    fprintf(stderr, "plfs: dropped %llu bytes in %u files (%llu syncs applied)%s\n", (unsigned long long)bytes,
            files, (unsigned long long)atomic_load(&g_syncs), meta);
}

static struct fuse *mount_fs(const struct cli *c)
{
    char opts[256];
    snprintf(opts, sizeof opts, "fsname=plfs,subtype=plfs,default_permissions%s",
             geteuid() == 0 ? ",allow_other" : "");
    char *argv[] = {"plfs", "-o", opts, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    struct fuse *f = fuse_new(&args, &plfs_ops, sizeof plfs_ops, NULL);
    fuse_opt_free_args(&args);
    if (!f) {
        fprintf(stderr, "plfs: fuse_new failed\n");
        return NULL;
    }
    if (fuse_mount(f, c->mountpoint)) {
        fprintf(stderr, "plfs: cannot mount on %s (needs /dev/fuse and mount permission)\n", c->mountpoint);
        fuse_destroy(f);
        return NULL;
    }
    return f;
}

int main(int argc, char **argv)
{
    struct cli c = parse_cli(argc, argv);
    g_strict_meta = c.strict_meta;
    g_root = open(c.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (g_root < 0) {
        fprintf(stderr, "plfs: BACKING_DIR %s: %s\n", c.backing, strerror(errno));
        usage("bad argument", "BACKING_DIR");
    }
    struct fuse *f = mount_fs(&c);
    if (!f)
        return 1;
    struct fuse_session *se = fuse_get_session(f);
    if (fuse_set_signal_handlers(se)) {
        fprintf(stderr, "plfs: cannot install signal handlers\n");
        fuse_unmount(f);
        fuse_destroy(f);
        return 1;
    }
    printf("plfs: ready\n");
    fflush(stdout);

    int rc = fuse_loop_mt(f, 0); /* 0: unmounted, > 0: signal, < 0: error */

    fuse_remove_signal_handlers(se);
    fuse_unmount(f);
    fuse_destroy(f);
    drop_all();
    close(g_root);
    long live = atomic_load(&g_live_allocs);
    if (live != 0) {
        fprintf(stderr, "plfs: internal error: %ld allocations not freed\n", live);
        return 1;
    }
    /* An unmount while requests were pending aborts the connection: the
     * loop then ends with ECONNABORTED (or ENODEV); that is the power cut
     * asked for, not a failure. */
    if (rc < 0 && rc != -ECONNABORTED && rc != -ENODEV) {
        fprintf(stderr, "plfs: session loop failed: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}
