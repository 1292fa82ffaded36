/*
 * tools/urt-load/wl_io.c — the task-I/O workload (docs/benchmarks.md 3.13):
 *
 * io_randread_4k: random 4 KiB O_DIRECT reads of a 1 GiB file, queue depth
 * 32 per worker, offsets uniform over the 262,144 aligned positions
 * (xorshift64 per worker); 300 ms of warm-up, then a 2 s window; iops =
 * reads completed in the window / its length. The file is IO_FILE (the
 * benchmark harness creates and fills it and gives it to fio in the same
 * round); without IO_FILE a 1 GiB file is made and filled under FIO_DIR
 * (default /tmp) first (not measured) and deleted after.
 *
 * On each worker one start task opens the file, registers its 32 buffers
 * (urt_io_register_buffers: the reads become fixed-buffer reads) and submits
 * 32 urt_io_read; every continuation checks its result (4096 bytes) and
 * submits the next read from the same io, until the stop flag; the
 * continuations run on the worker that submitted (urt/io.h), so each
 * worker's counters are its own (relaxed stores by the owner, relaxed loads
 * by the external thread, which only samples them).
 *
 * io_send, io_send_zc (docs/benchmarks.md 3.17, urt only): SEND_QD (default
 * 1) loopback TCP connections, each with one urt_io_send of SEND_SIZE bytes
 * (default 65536) in flight from worker 0, every continuation sending the
 * same buffer again; io_send_zc with URT_IO_ZEROCOPY (its continuation comes
 * after the kernel's notification: the buffer is the caller's again). A
 * plain thread per connection reads with recv(2) into 1 MiB. 300 ms of
 * warm-up, then a 2 s window; mib_per_s = bytes sent in the window / its
 * length. Check: after the stop the senders shut their side down and every
 * reader must have read exactly what was sent.
 *
 * Memory ordering: g_stop is a relaxed flag (a read that sees it late just
 * makes one more read); `left` (reads still in flight after the stop) is
 * decremented with release by the last continuation of each read and read
 * with acquire by the external thread before it frees anything. The send
 * workloads use the same pattern (their own stop flag and count); a
 * reader's byte count is read after pthread_join.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "measure.h"
#include "workloads.h"

#define IO_QD 32
#define IO_BLOCK 4096
#define IO_FILE_BYTES (1ull << 30)
#define IO_WARMUP_MS 300
#define IO_WINDOW_MS 2000

struct io_worker;

struct io_read {
    struct urt_io io;
    struct io_worker *w;
    char *buf;
};

struct io_worker {
    struct urt_task start;
    urt_runtime *rt;
    const char *path;
    int fd;
    uint64_t rng;
    char *mem;
    struct io_read rd[IO_QD];
    _Alignas(64) _Atomic uint64_t done; /* reads completed (the owner stores) */
    _Atomic int err;                   /* first failure (-errno, or -EIO for a short read) */
};

static _Atomic int g_stop;
static _Atomic int g_left; /* reads in flight */

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void read_done(struct urt_io *io, int32_t res, void *arg);

static int read_next(struct io_read *r)
{
    struct io_worker *w = r->w;
    int64_t off = (int64_t)(xorshift64(&w->rng) % (IO_FILE_BYTES / IO_BLOCK)) * IO_BLOCK;
    return urt_io_read(&r->io, w->fd, r->buf, IO_BLOCK, off);
}

static void read_end(struct io_worker *w, int err)
{
    if (err)
        atomic_store_explicit(&w->err, err, memory_order_relaxed);
    atomic_fetch_sub_explicit(&g_left, 1, memory_order_release);
}

static void read_done(struct urt_io *io, int32_t res, void *arg)
{
    struct io_read *r = arg;
    struct io_worker *w = r->w;
    (void)io;
    if (res != IO_BLOCK) {
        read_end(w, res < 0 ? res : -EIO);
        return;
    }
    atomic_store_explicit(&w->done, atomic_load_explicit(&w->done, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        read_end(w, 0);
        return;
    }
    int err = read_next(r);
    if (err)
        read_end(w, err);
}

static enum urt_task_result start_task(struct urt_task *t, void *arg)
{
    struct io_worker *w = arg;
    (void)t;
    w->fd = open(w->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (w->fd < 0) {
        atomic_store(&w->err, -errno);
        atomic_fetch_sub(&g_left, IO_QD);
        return URT_TASK_DONE;
    }
    struct iovec iov = {w->mem, (size_t)IO_QD * IO_BLOCK};
    if (urt_io_register_buffers(&iov, 1) != 0) /* not fatal (RLIMIT_MEMLOCK): plain reads */
        fprintf(stderr, "# urt io_randread_4k: buffers not registered: %s\n", urt_last_error());
    for (int i = 0; i < IO_QD; i++) {
        struct io_read *r = &w->rd[i];
        r->w = w;
        r->buf = w->mem + (size_t)i * IO_BLOCK;
        urt_io_init(&r->io, read_done, r);
        int err = read_next(r);
        if (err)
            read_end(w, err);
    }
    return URT_TASK_DONE;
}

/* A 1 GiB file under FIO_DIR, filled with 1 MiB O_DIRECT writes (not measured). */
static char *make_file(void)
{
    const char *dir = getenv("FIO_DIR");
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/urt-load-randread.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "# ERROR urt io_randread_4k: cannot create %s: %s\n", path, strerror(errno));
        free(path);
        return NULL;
    }
    close(fd);
    fd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    char *blk = aligned_alloc(4096, 1 << 20);
    bool ok = fd >= 0 && blk;
    for (uint64_t off = 0; ok && off < IO_FILE_BYTES; off += 1 << 20) {
        for (size_t i = 0; i < (1 << 20); i += 8)
            memcpy(blk + i, &off, 8);
        ok = pwrite(fd, blk, 1 << 20, (off_t)off) == 1 << 20;
    }
    if (fd >= 0)
        close(fd);
    free(blk);
    if (!ok) {
        fprintf(stderr, "# ERROR urt io_randread_4k: cannot fill %s: %s\n", path, strerror(errno));
        unlink(path);
        free(path);
        return NULL;
    }
    return path;
}

static uint64_t total_done(struct io_worker *w, unsigned n)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < n; i++)
        sum += atomic_load_explicit(&w[i].done, memory_order_relaxed);
    return sum;
}

static int randread(urt_runtime *rt, const char *name)
{
    const char *file = getenv("IO_FILE");
    char *made = NULL;
    if (!file || !*file) {
        if (!(made = make_file()))
            return 1;
        file = made;
    }
    struct stat st;
    if (stat(file, &st) != 0 || (uint64_t)st.st_size < IO_FILE_BYTES) {
        fprintf(stderr, "# ERROR urt %s: %s is not a 1 GiB file\n", name, file);
        free(made);
        return 1;
    }
    unsigned n = urt_runtime_config(rt)->workers;
    struct io_worker *w = calloc(n, sizeof(*w));
    atomic_store(&g_left, (int)(n * IO_QD));
    for (unsigned i = 0; i < n; i++) {
        w[i].rt = rt;
        w[i].path = file;
        w[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
        w[i].mem = aligned_alloc(4096, (size_t)IO_QD * IO_BLOCK);
        urt_task_init(&w[i].start, start_task, &w[i]);
        urt_task_submit_to(rt, i, &w[i].start, 0);
    }
    measure_sleep_us(IO_WARMUP_MS * 1000ull);
    uint64_t c0 = total_done(w, n), t0 = urt_now_ns(), cpu0 = measure_cpu_ns();
    measure_sleep_us(IO_WINDOW_MS * 1000ull);
    uint64_t c1 = total_done(w, n), t1 = urt_now_ns(), cpu1 = measure_cpu_ns();
    atomic_store_explicit(&g_stop, 1, memory_order_relaxed);
    while (atomic_load_explicit(&g_left, memory_order_acquire) > 0)
        measure_sleep_us(1000);
    int rc = 0;
    for (unsigned i = 0; i < n; i++) {
        int err = atomic_load(&w[i].err);
        if (err && !rc) {
            fprintf(stderr, "# ERROR urt %s: worker %u: %s\n", name, i, strerror(-err));
            rc = 1;
        }
        if (w[i].fd >= 0)
            close(w[i].fd);
        free(w[i].mem);
    }
    double secs = (double)(t1 - t0) / 1e9;
    if (!rc) {
        printf("%s %s iops %.0f ops/s\n", MEASURE_PEER, name, (double)(c1 - c0) / secs);
        measure_note(name, "%llu reads in %.3f s, queue depth %d per worker, %u workers, cpu %.1f%%, file %s",
                     (unsigned long long)(c1 - c0), secs, IO_QD, n, 100.0 * (double)(cpu1 - cpu0) / (double)(t1 - t0),
                     file);
    }
    free(w);
    if (made) {
        unlink(made);
        free(made);
    }
    return rc;
}

/* ---- io_send, io_send_zc ------------------------------------------------------------------------ */

#define SEND_MAX_QD 64

struct send_conn {
    struct urt_io io;
    int fd, rfd;
    char *buf;
    uint64_t sent;  /* the owner (worker 0) writes; read after the stop */
    uint64_t got;   /* the reader thread writes; read after its join */
    pthread_t reader;
    _Atomic int err;
};

static struct send_ctx {
    size_t size;
    unsigned flags;
    _Atomic uint64_t window; /* bytes sent, all connections (relaxed: sampled) */
    _Atomic int stop, left, notif_missing;
} g_send;

static void send_done(struct urt_io *io, int32_t res, void *arg)
{
    struct send_conn *c = arg;
    if (res <= 0) {
        atomic_store(&c->err, res < 0 ? res : -EIO);
        atomic_fetch_sub_explicit(&g_send.left, 1, memory_order_release);
        return;
    }
    if ((g_send.flags & URT_IO_ZEROCOPY) && !(urt_io_flags(io) & URT_IO_F_NOTIF))
        atomic_store_explicit(&g_send.notif_missing, 1, memory_order_relaxed); /* copied (or no feature) */
    c->sent += (uint64_t)res;
    atomic_fetch_add_explicit(&g_send.window, (uint64_t)res, memory_order_relaxed);
    if (atomic_load_explicit(&g_send.stop, memory_order_relaxed)) {
        atomic_fetch_sub_explicit(&g_send.left, 1, memory_order_release);
        return;
    }
    int err = urt_io_send(io, c->fd, c->buf, g_send.size, MSG_NOSIGNAL, g_send.flags);
    if (err) {
        atomic_store(&c->err, err);
        atomic_fetch_sub_explicit(&g_send.left, 1, memory_order_release);
    }
}

struct send_start {
    struct urt_task task;
    struct send_conn *c;
    unsigned n;
};

static enum urt_task_result send_start_fn(struct urt_task *t, void *arg)
{
    struct send_start *st = arg;
    (void)t;
    for (unsigned i = 0; i < st->n; i++) {
        struct send_conn *c = &st->c[i];
        urt_io_init(&c->io, send_done, c);
        int err = urt_io_send(&c->io, c->fd, c->buf, g_send.size, MSG_NOSIGNAL, g_send.flags);
        if (err) {
            atomic_store(&c->err, err);
            atomic_fetch_sub_explicit(&g_send.left, 1, memory_order_release);
        }
    }
    return URT_TASK_DONE;
}

static void *send_reader(void *arg)
{
    struct send_conn *c = arg;
    char *b = malloc(1 << 20);
    ssize_t n;
    while (b && (n = recv(c->rfd, b, 1 << 20, 0)) > 0)
        c->got += (uint64_t)n;
    free(b);
    return NULL;
}

/* n connected loopback pairs (c[i].fd: the sender's, c[i].rfd: the reader's). */
static int send_connect(struct send_conn *c, unsigned n)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, SEND_MAX_QD) ||
        getsockname(l, (struct sockaddr *)&a, &al)) {
        if (l >= 0)
            close(l);
        return -1;
    }
    int rc = 0;
    for (unsigned i = 0; i < n && !rc; i++) {
        c[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c[i].fd < 0 || connect(c[i].fd, (struct sockaddr *)&a, sizeof(a)) ||
            (c[i].rfd = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0)
            rc = -1;
    }
    close(l);
    return rc;
}

static const struct wl_setting SEND_SIZE_S = {"SEND_SIZE", 65536, 1, 64u << 20};
static const struct wl_setting SEND_QD_S = {"SEND_QD", 1, 1, SEND_MAX_QD};
static const struct wl_setting *const SEND_SETTINGS[] = {&SEND_SIZE_S, &SEND_QD_S, NULL};

static int sendbench(urt_runtime *rt, const char *name, unsigned flags)
{
    g_send.size = (size_t)measure_setting(name, &SEND_SIZE_S);
    unsigned n = (unsigned)measure_setting(name, &SEND_QD_S);
    g_send.flags = flags;
    struct send_conn *c = calloc(n, sizeof(*c));
    for (unsigned i = 0; c && i < n; i++)
        c[i].fd = c[i].rfd = -1;
    if (!c || send_connect(c, n)) {
        fprintf(stderr, "# ERROR urt %s: loopback connections: %s\n", name, strerror(errno));
        free(c);
        return 1;
    }
    for (unsigned i = 0; i < n; i++) {
        c[i].buf = aligned_alloc(4096, (g_send.size + 4095) & ~(size_t)4095);
        memset(c[i].buf, 'a' + (int)(i % 26), g_send.size);
        pthread_create(&c[i].reader, NULL, send_reader, &c[i]);
    }
    atomic_store(&g_send.left, (int)n);
    struct send_start st = {.c = c, .n = n};
    urt_task_init(&st.task, send_start_fn, &st);
    urt_task_submit_to(rt, 0, &st.task, 0);
    measure_sleep_us(IO_WARMUP_MS * 1000ull);
    uint64_t b0 = atomic_load(&g_send.window), t0 = urt_now_ns(), cpu0 = measure_cpu_ns();
    measure_sleep_us(IO_WINDOW_MS * 1000ull);
    uint64_t b1 = atomic_load(&g_send.window), t1 = urt_now_ns(), cpu1 = measure_cpu_ns();
    atomic_store_explicit(&g_send.stop, 1, memory_order_relaxed);
    while (atomic_load_explicit(&g_send.left, memory_order_acquire) > 0)
        measure_sleep_us(1000);
    int rc = 0;
    uint64_t sent = 0, got = 0;
    for (unsigned i = 0; i < n; i++) {
        shutdown(c[i].fd, SHUT_WR); /* the reader reads to the end */
        pthread_join(c[i].reader, NULL);
        int err = atomic_load(&c[i].err);
        if (err && !rc) {
            fprintf(stderr, "# ERROR urt %s: connection %u: %s\n", name, i, strerror(-err));
            rc = 1;
        }
        sent += c[i].sent;
        got += c[i].got;
        close(c[i].fd);
        close(c[i].rfd);
        free(c[i].buf);
    }
    if (!rc && got != sent) {
        fprintf(stderr, "# ERROR urt %s: sent %llu bytes, the readers got %llu\n", name, (unsigned long long)sent,
                (unsigned long long)got);
        rc = 1;
    }
    double secs = (double)(t1 - t0) / 1e9;
    if (!rc) {
        printf("%s %s mib_per_s %.0f MiB/s\n", MEASURE_PEER, name, (double)(b1 - b0) / secs / 1048576.0);
        measure_note(name, "%zu bytes a send, %u connection(s), %s, cpu %.1f%%", g_send.size, n,
                     !(flags & URT_IO_ZEROCOPY)           ? "copying sends"
                     : atomic_load(&g_send.notif_missing) ? "zero copy asked, some sends copied"
                                                          : "zero-copy sends (every one notified)",
                     100.0 * (double)(cpu1 - cpu0) / (double)(t1 - t0));
    }
    free(c);
    return rc;
}

static int run_send(urt_runtime *rt, const char *name)
{
    return sendbench(rt, name, 0);
}

static int run_send_zc(urt_runtime *rt, const char *name)
{
    return sendbench(rt, name, URT_IO_ZEROCOPY);
}

const struct workload WL_IO[] = {
    {.name = "io_randread_4k",
     .summary = "random 4 KiB O_DIRECT reads of IO_FILE (1 GiB), queue depth 32 per worker (urt/io.h)",
     .metrics = {"iops", NULL},
     .run = randread},
    {.name = "io_send",
     .summary = "loopback TCP sends of SEND_SIZE bytes, SEND_QD connections, from a worker (3.17, urt only)",
     .metrics = {"mib_per_s", NULL},
     .run = run_send,
     .settings = SEND_SETTINGS},
    {.name = "io_send_zc",
     .summary = "the same with URT_IO_ZEROCOPY (3.17, urt only)",
     .metrics = {"mib_per_s", NULL},
     .run = run_send_zc,
     .settings = SEND_SETTINGS},
    {0},
};
