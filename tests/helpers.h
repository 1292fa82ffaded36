/*
 * tests/helpers.h — bits shared by the criterion suites.
 *
 *  - time: now_ns(), sleep_us(), WAIT_UNTIL(cond, ms) (polls cond with short
 *    sleeps, true if it held before the deadline);
 *  - a test configuration (test_config()) and a runtime factory
 *    (rt_create_or_skip()) that skips the test with a reason when the kernel
 *    has no io_uring (-ENOSYS) or forbids it (-EPERM), and fails on any other
 *    error;
 *  - rt_destroy_clean(): every test ends by destroying its runtime and
 *    checking the result (0 in drain mode, the cancel count in cancel mode);
 *  - stats helpers (count of sleeping workers, waiting until every worker
 *    sleeps);
 *  - leak_check(): in the ASan build, asks LeakSanitizer for a leak check
 *    now and fails the test if it finds one. Needed because criterion
 *    reports a test's result before the forked test process exits, so
 *    LSan's report at exit would not fail anything; rt_destroy_clean() calls
 *    it, tests that destroy otherwise call it at their end;
 *  - test_tmpdir(prefix) / test_remove_dir(dir): a fresh directory under
 *    TMPDIR (malloc'd path) and its removal (files, then the directory, then
 *    the path) — the log suites' scratch directories; test_remove_tree(dir)
 *    the same for a directory with subdirectories and links (nftw, depth
 *    first, links removed, not followed, mounts not entered), and
 *    test_remove_tree_at(dir) without the free (the crash suites' trees);
 *  - read_pipe(fd, buf, len): a child's output — up to len - 1 bytes into buf,
 *    NUL-terminated, the rest read and dropped so the writer never blocks;
 *  - test_commit_stored(rt, id, rec, len): one stored log commit, waited
 *    for (10 s) and asserted answered 0; its marker;
 *  - SCALE(full, sanitized): stress sizes; the sanitizer builds pass
 *    -DURT_TEST_SANITIZED (tests/meson.build) and run smaller sizes, the plain
 *    build the full ones.
 *
 * Criterion assertions may only be used on the test's main thread: helper
 * threads record what they saw in atomics and the main thread asserts.
 */
#ifndef URT_TESTS_HELPERS_H
#define URT_TESTS_HELPERS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urt/urt.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static inline void leak_check(void)
{
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (report above)");
}
#else
static inline void leak_check(void)
{
}
#endif

#ifdef URT_TEST_SANITIZED
#define SCALE(full, sanitized) (sanitized)
#else
#define SCALE(full, sanitized) (full)
#endif

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Entries of a /proc directory ("/proc/self/fd": open descriptors, the one
 * opendir uses included; "/proc/self/task": threads), "." and ".." not
 * counted; -1 if it cannot be read. Safe in a forked child (no assert). */
static inline int proc_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static inline void sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Reads fd to its end: up to len - 1 bytes into buf (NUL-terminated), the
 * rest dropped, so that a child writing more never blocks on the pipe. */
static inline void read_pipe(int fd, char *buf, size_t len)
{
    size_t off = 0;
    ssize_t n;
    while (off + 1 < len && (n = read(fd, buf + off, len - 1 - off)) > 0)
        off += (size_t)n;
    buf[off] = '\0';
    char drain[256];
    while (read(fd, drain, sizeof(drain)) > 0)
        ;
}

/* Polls cond every 100 µs until it holds (true) or ms milliseconds passed (false). */
#define WAIT_UNTIL(cond, ms)                                                                                 \
    ({                                                                                                       \
        uint64_t wu_deadline_ = now_ns() + (uint64_t)(ms) * 1000000ull;                                      \
        bool wu_ok_ = false;                                                                                 \
        for (;;) {                                                                                           \
            if (cond) {                                                                                      \
                wu_ok_ = true;                                                                               \
                break;                                                                                       \
            }                                                                                                \
            if (now_ns() > wu_deadline_)                                                                     \
                break;                                                                                       \
            sleep_us(100);                                                                                   \
        }                                                                                                    \
        wu_ok_;                                                                                              \
    })

struct test_commit_waiter {
    _Atomic int done, status;
};

static inline void test_commit_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct test_commit_waiter *w = arg;
    atomic_store(&w->status, status);
    atomic_store(&w->done, 1);
}

/* One URT_COMMIT_STORED commit of rec[0, len) for transaction id, waited for
 * (10 s); asserts it was taken and answered 0. Returns its marker. */
static inline uint64_t test_commit_stored(urt_runtime *rt, uint64_t id, const void *rec, uint32_t len)
{
    struct urt_commit c;
    struct test_commit_waiter w = {0};
    cr_assert_eq(urt_log_commit(rt, &c, id, rec, len, URT_COMMIT_STORED, test_commit_cb, &w), 0, "%s",
                 urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&w.done), 10000), "commit %llu: no answer in 10 s", (unsigned long long)id);
    cr_assert_eq(atomic_load(&w.status), 0, "commit %llu answered %d", (unsigned long long)id, atomic_load(&w.status));
    return urt_commit_marker(&c);
}

/* Defaults for tests: few workers, no binding, a suspend timeout long enough
 * that it never rescues a lost wakeup within a test. */
static inline void test_config(struct urt_config *cfg, uint32_t workers)
{
    urt_config_init(cfg);
    cfg->workers = workers;
    cfg->placement = URT_PLACEMENT_NONE;
    cfg->worker_suspend_timeout_us = 60ull * 1000 * 1000;
}

/* Creates a runtime from cfg, or skips the test when io_uring is missing. */
static inline urt_runtime *rt_create_or_skip(const struct urt_config *cfg)
{
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(cfg, &rt);
    if (err == -ENOSYS || err == -EPERM)
        cr_skip_test("io_uring unavailable (%s): %s", strerror(-err), urt_last_error());
    cr_assert_eq(err, 0, "urt_runtime_create: %d (%s): %s", err, strerror(-err), urt_last_error());
    cr_assert_not_null(rt);
    return rt;
}

/* Whether a runtime made here with the default backend (auto) runs on the
 * portable backend (io_uring refused, e.g. under urt-nouring): what a test
 * of an io_uring-only behaviour (the log's chained sync modes, ring fds)
 * expects instead. */
static inline bool rt_auto_is_portable(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 1;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&cfg, &rt))
        return false;
    bool portable = urt_runtime_backend(rt, NULL) == URT_BACKEND_PORTABLE;
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    return portable;
}

/* Destroys rt and checks it shut down cleanly: drain returns 0, cancel the
 * number of cancelled tasks (expect_cancelled < 0: don't check the count). */
static inline int rt_destroy_clean(urt_runtime *rt, enum urt_shutdown mode, int expect_cancelled)
{
    int r = urt_runtime_destroy(rt, mode);
    cr_assert_geq(r, 0, "urt_runtime_destroy: %d (%s)", r, urt_last_error());
    if (mode == URT_SHUTDOWN_DRAIN)
        cr_assert_eq(r, 0, "drain must cancel nothing, returned %d", r);
    else if (expect_cancelled >= 0)
        cr_assert_eq(r, expect_cancelled, "cancel returned %d, expected %d", r, expect_cancelled);
    leak_check();
    return r;
}

static inline uint32_t rt_sleeping_count(const urt_runtime *rt, uint32_t *mask_out)
{
    struct urt_stats *st = urt_stats_snapshot(rt);
    cr_assert_not_null(st);
    uint32_t n = 0, mask = 0;
    for (uint32_t i = 0; i < st->n_workers; i++) {
        if (st->workers[i].sleeping) {
            n++;
            if (i < 32)
                mask |= 1u << i;
        }
    }
    urt_stats_free(st);
    if (mask_out)
        *mask_out = mask;
    return n;
}

/* True once every worker of rt reports sleeping (within ms). */
static inline bool rt_wait_all_sleeping(const urt_runtime *rt, uint32_t n_workers, unsigned ms)
{
    return WAIT_UNTIL(rt_sleeping_count(rt, NULL) == n_workers, ms);
}

/* Sum of wake messages sent (by workers and by other threads) and received. */
static inline void rt_wake_counts(const urt_runtime *rt, uint64_t *sent, uint64_t *received)
{
    struct urt_stats *st = urt_stats_snapshot(rt);
    cr_assert_not_null(st);
    *sent = st->total.wakes_sent + st->foreign_wakes_sent;
    *received = st->total.wakes_received;
    urt_stats_free(st);
}

/* xorshift64*: deterministic per-thread random numbers. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A fresh directory $TMPDIR/<prefix>.XXXXXX (default /tmp); free with test_remove_dir(). */
static inline char *test_tmpdir(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    char *p = malloc(4096);
    cr_assert_not_null(p);
    snprintf(p, 4096, "%s/%s.XXXXXX", base && *base ? base : "/tmp", prefix);
    cr_assert_not_null(mkdtemp(p), "mkdtemp %s", p);
    return p;
}

/* Removes a flat directory made by test_tmpdir() and frees its path. */
static inline void test_remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static inline int test_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Removes dir with everything under it: links are removed, never followed,
 * and a file system mounted below is not entered (its mount point stays). */
static inline void test_remove_tree_at(const char *dir)
{
    nftw(dir, test_remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* test_remove_tree_at() for a directory made by test_tmpdir(), and frees its
 * path. */
static inline void test_remove_tree(char *dir)
{
    test_remove_tree_at(dir);
    free(dir);
}

#endif
