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
 * Memory ordering: g_stop is a relaxed flag (a read that sees it late just
 * makes one more read); `left` (reads still in flight after the stop) is
 * decremented with release by the last continuation of each read and read
 * with acquire by the external thread before it frees anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        urt_task_submit_to(rt, &w[i].start, i, 0);
    }
    measure_sleep_us(IO_WARMUP_MS * 1000ull);
    uint64_t c0 = total_done(w, n), t0 = measure_now_ns(), cpu0 = measure_cpu_ns();
    measure_sleep_us(IO_WINDOW_MS * 1000ull);
    uint64_t c1 = total_done(w, n), t1 = measure_now_ns(), cpu1 = measure_cpu_ns();
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

const struct workload WL_IO[] = {
    {.name = "io_randread_4k",
     .summary = "random 4 KiB O_DIRECT reads of IO_FILE (1 GiB), queue depth 32 per worker (urt/io.h)",
     .metrics = {"iops", NULL},
     .run = randread},
    {0},
};
