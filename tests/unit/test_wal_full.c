/*
 * tests/unit/test_wal_full.c — the log on a full disk: a tiny tmpfs (mounted
 * in a mount namespace of the test's own process, so it goes away with it)
 * that fills during the load or is filled to the last byte by a file.
 *
 *  - fills_mid_load: 2 workers, log_prealloc_kb 0, a 256 KiB tmpfs, 200
 *    stored commits of 4 KiB from one thread with a 3 ms pause after every
 *    tenth (the load of the report): every commit gets exactly one callback
 *    within the deadline (a hang detector), 0 or -ENOSPC; failed writes are
 *    retried with a back-off (io_errors at most the commits answered
 *    -ENOSPC: no write fails without a stored commit to answer, none is
 *    retried in a loop); after the disk is given more room, recovery
 *    replays exactly the commits answered 0.
 *  - freed_half_way: 20 commits, the disk filled to the last byte, 80
 *    commits (answered 0 or -ENOSPC), the file removed, 100 more: every one
 *    of those answered 0 without a restart; recovery replays exactly the
 *    commits answered 0.
 * The model per commit: its answer (exactly one, status 0 or -ENOSPC; 0
 * while the disk had room), and "replayed by recovery" == "answered 0".
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "helpers.h"
#include "runtime/runtime.h"

/* ---- a tiny tmpfs ------------------------------------------------------------------------ */

struct tfs {
    char *mnt;
    char dir[4200], fill[4200];
};

/* Mounts a tmpfs of `bytes` in a fresh directory, in a private mount
 * namespace of this process (criterion runs each test in a process of its
 * own: the mount dies with it, whatever the test's end). Skips the test when
 * the namespace or the mount is refused. */
static void tfs_mount(struct tfs *t, size_t bytes)
{
    memset(t, 0, sizeof(*t));
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        cr_skip_test("no mount namespace of our own (%s): the full-disk tests mount a tmpfs (root or "
                     "CAP_SYS_ADMIN)", strerror(errno));
    t->mnt = test_tmpdir("urt-full");
    char opt[64];
    snprintf(opt, sizeof(opt), "size=%zu", bytes);
    if (mount("tmpfs", t->mnt, "tmpfs", 0, opt)) {
        int e = errno;
        rmdir(t->mnt);
        cr_skip_test("cannot mount a tmpfs of %zu bytes (%s)", bytes, strerror(e));
    }
    snprintf(t->dir, sizeof(t->dir), "%s/log", t->mnt);
    snprintf(t->fill, sizeof(t->fill), "%s/fill", t->mnt);
}

static void tfs_resize(struct tfs *t, size_t bytes)
{
    char opt[64];
    snprintf(opt, sizeof(opt), "size=%zu", bytes);
    cr_assert_eq(mount("tmpfs", t->mnt, "tmpfs", MS_REMOUNT, opt), 0, "remount %s: %s", opt, strerror(errno));
}

static void tfs_umount(struct tfs *t)
{
    umount2(t->mnt, MNT_DETACH);
    rmdir(t->mnt);
    free(t->mnt);
}

/* Writes t->fill until the file system refuses a single byte more: every
 * block is taken, the last partial one included. Returns the bytes written. */
static uint64_t tfs_fill(struct tfs *t)
{
    static const char zeros[65536];
    int fd = open(t->fill, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "%s: %s", t->fill, strerror(errno));
    uint64_t total = 0;
    for (size_t chunk = sizeof(zeros); chunk;) {
        ssize_t n = write(fd, zeros, chunk);
        if (n > 0)
            total += (uint64_t)n;
        else if (n < 0 && errno == ENOSPC)
            chunk /= 2;
        else
            cr_assert(n < 0 && errno == EINTR, "fill %s: %s", t->fill, n < 0 ? strerror(errno) : "wrote 0");
    }
    close(fd);
    struct statvfs v;
    cr_assert_eq(statvfs(t->mnt, &v), 0);
    cr_assert_eq(v.f_bavail, 0, "%llu blocks still free", (unsigned long long)v.f_bavail);
    return total;
}

/* ---- commits and their answers ------------------------------------------------------------- */

#define REC 4096u
#define MAX_COMMITS 256

struct answers {
    _Atomic int calls[MAX_COMMITS];
    _Atomic int status[MAX_COMMITS];
    _Atomic int n;
    struct urt_commit c[MAX_COMMITS];
    uint8_t rec[MAX_COMMITS][REC];
};

static void on_answer(struct urt_commit *c, int status, void *arg)
{
    struct answers *a = arg;
    long i = c - a->c;
    atomic_store(&a->status[i], status);
    atomic_fetch_add(&a->calls[i], 1);
    atomic_fetch_add(&a->n, 1);
}

static void payload(uint8_t *p, uint64_t id)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t i = 0; i < REC; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static void commit(urt_runtime *rt, struct answers *a, int i)
{
    payload(a->rec[i], (uint64_t)i + 1);
    int rc = urt_log_commit(rt, &a->c[i], (uint64_t)i + 1, a->rec[i], REC, URT_COMMIT_STORED, on_answer, a);
    cr_assert_eq(rc, 0, "urt_log_commit %d: %s", i, urt_last_error());
}

/* Every commit in [0, n) answered (hang detector: 10 s), exactly once. */
static void wait_answers(struct answers *a, int n)
{
    bool all = WAIT_UNTIL(atomic_load(&a->n) >= n, 10000);
    for (int i = 0; i < n; i++)
        cr_assert(atomic_load(&a->calls[i]) == 1 || (!all && atomic_load(&a->calls[i]) == 0),
                  "commit %d: %d callbacks", i, atomic_load(&a->calls[i]));
    for (int i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&a->calls[i]), 1, "commit %d was never answered (10 s)", i);
}

static urt_runtime *full_rt(const char *dir)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = 0;
    return rt_create_or_skip(&cfg);
}

static uint64_t io_errors(urt_runtime *rt)
{
    struct urt_log_stats s;
    cr_assert_eq(urt_log_stats(rt, &s), 0);
    return s.io_errors;
}

/* ---- recovery against the model ------------------------------------------------------------ */

struct replayed {
    int seen[MAX_COMMITS];
    int bad;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replayed *p = arg;
    uint8_t want[REC];
    if (r->tx_id < 1 || r->tx_id > MAX_COMMITS || r->len != REC) {
        p->bad++;
        return 0;
    }
    payload(want, r->tx_id);
    if (memcmp(want, r->payload, REC))
        p->bad++;
    p->seen[r->tx_id - 1]++;
    return 0;
}

/* Recovery replays exactly the commits answered 0, each once, intact. */
static void check_replay(const char *dir, const struct answers *a, int n)
{
    struct replayed p = {0};
    struct urt_log_recover_ops ops = {.record = on_record};
    struct urt_log_recovery res;
    int rc = urt_log_recover(dir, 0, &ops, &p, &res);
    cr_assert_eq(rc, 0, "urt_log_recover: %d: %s", rc, urt_last_error());
    cr_assert_eq(p.bad, 0);
    for (int i = 0; i < n; i++) {
        int st = atomic_load(&a->status[i]);
        cr_assert_eq(p.seen[i], st == 0 ? 1 : 0, "commit %d answered %d but replayed %d times", i, st, p.seen[i]);
    }
}

/* ---- the tests -------------------------------------------------------------------------------- */

Test(wal_full, fills_mid_load, .timeout = 120)
{
    enum { N = 200 };
    struct tfs t;
    tfs_mount(&t, 256 * 1024);
    struct answers *a = calloc(1, sizeof(*a));
    urt_runtime *rt = full_rt(t.dir);
    for (int i = 0; i < N; i++) {
        commit(rt, a, i);
        if (i % 10 == 9)
            sleep_us(3000);
    }
    wait_answers(a, N);
    int ok = 0, nospc = 0;
    for (int i = 0; i < N; i++) {
        int st = atomic_load(&a->status[i]);
        cr_assert(st == 0 || st == -ENOSPC, "commit %d answered %d (%s)", i, st, strerror(-st));
        ok += st == 0;
        nospc += st == -ENOSPC;
    }
    /* 256 KiB: the epoch file (128 KiB), two channel headers, sessions.log:
     * fewer than 29 records of 4 KiB fit, the first one surely. */
    cr_assert_eq(atomic_load(&a->status[0]), 0);
    cr_assert_leq(ok, 29);
    uint64_t errors = io_errors(rt);
    cr_assert_leq(errors, (uint64_t)nospc, "io_errors %llu for %d commits answered -ENOSPC: a failed write retried "
                  "in a loop", (unsigned long long)errors, nospc);
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    tfs_resize(&t, 1024 * 1024);
    check_replay(t.dir, a, N);
    free(a);
    tfs_umount(&t);
    leak_check();
}

Test(wal_full, freed_half_way, .timeout = 120)
{
    enum { BEFORE = 20, FULL = 80, AFTER = 100, N = BEFORE + FULL + AFTER };
    struct tfs t;
    tfs_mount(&t, 1024 * 1024);
    struct answers *a = calloc(1, sizeof(*a));
    urt_runtime *rt = full_rt(t.dir);
    for (int i = 0; i < BEFORE; i++)
        commit(rt, a, i);
    wait_answers(a, BEFORE);
    for (int i = 0; i < BEFORE; i++)
        cr_assert_eq(atomic_load(&a->status[i]), 0, "commit %d failed while the disk had room", i);
    tfs_fill(&t);
    for (int i = BEFORE; i < BEFORE + FULL; i++) {
        commit(rt, a, i);
        if (i % 10 == 9)
            sleep_us(3000);
    }
    wait_answers(a, BEFORE + FULL);
    int nospc = 0;
    for (int i = BEFORE; i < BEFORE + FULL; i++) {
        int st = atomic_load(&a->status[i]);
        cr_assert(st == 0 || st == -ENOSPC, "commit %d answered %d (%s)", i, st, strerror(-st));
        nospc += st == -ENOSPC;
    }
    cr_assert_gt(nospc, 0, "80 records of 4 KiB on a full disk, none failed");
    uint64_t errors = io_errors(rt);
    cr_assert_leq(errors, (uint64_t)nospc, "io_errors %llu for %d commits answered -ENOSPC",
                  (unsigned long long)errors, nospc);
    /* Room again: no restart, every later commit is stored. */
    cr_assert_eq(unlink(t.fill), 0);
    for (int i = BEFORE + FULL; i < N; i++) {
        commit(rt, a, i);
        if (i % 10 == 9)
            sleep_us(3000);
    }
    wait_answers(a, N);
    for (int i = BEFORE + FULL; i < N; i++)
        cr_assert_eq(atomic_load(&a->status[i]), 0, "commit %d after the disk was freed: %d (%s)", i,
                     atomic_load(&a->status[i]), strerror(-atomic_load(&a->status[i])));
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    check_replay(t.dir, a, N);
    free(a);
    tfs_umount(&t);
    leak_check();
}
