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
 *    retried in a loop); recovery, on the disk the log filled, replays
 *    exactly the commits answered 0.
 *  - freed_half_way: 20 commits, the disk filled to the last byte, 80
 *    commits (answered 0 or -ENOSPC), the file removed, 100 more: every one
 *    of those answered 0 without a restart; recovery replays exactly the
 *    commits answered 0.
 *  - recovery_on_a_full_disk: a log (its epoch file full of a session's
 *    slots, a torn tail to cut) on a disk filled to the last byte: recovery
 *    rewrites the epoch file in place, cuts, replays every commit answered
 *    0, and a second recovery finds the same with nothing to do; a runtime
 *    cannot start there (it needs new channel files): -ENOSPC, a message
 *    that says what to do, the directory as it was; once space is back it
 *    starts, and everything is replayed.
 *  - in_place_rewrite_survives_a_power_loss: the in-place rewrite of an
 *    epoch file holding every kind of slot (failing, holding with the
 *    marker, holding above a failing one, junk, a window), cut by a power
 *    loss in each of its phases (any subset of the phase's slot writes kept,
 *    some torn; fault injection, no tmpfs needed): every recovery after it
 *    reports the marker, the replay limit and the records of the recovery
 *    before it.
 * The model per commit: its answer (exactly one, status 0 or -ENOSPC; 0
 * while the disk had room), and "replayed by recovery" == "answered 0".
 */
#include <dirent.h>
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
#include "tx/wal_dir.h"
#include "tx/wal_format.h"

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
static struct urt_log_recovery check_replay(const char *dir, const struct answers *a, int n)
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
    return res;
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
    check_replay(t.dir, a, N); /* on the disk the log filled */
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

/* ---- recovery and start-up on a full disk ------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, sorted, joined with spaces. */
static void dir_listing(const char *dir, char *out, size_t len)
{
    char *names[64];
    size_t n = 0;
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 64)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_str);
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        strncat(out, names[i], len - strlen(out) - 2);
        strcat(out, " ");
        free(names[i]);
    }
}

struct chan_end {
    char file[64];
    uint64_t valid_end;
};

static void note_channel(void *arg, const struct urt_log_channel_info *ch)
{
    struct chan_end *c = arg;
    if (ch->worker == 0 && ch->valid_end > c->valid_end) {
        snprintf(c->file, sizeof(c->file), "%s", ch->file);
        c->valid_end = ch->valid_end;
    }
}

/* A torn write after worker 0's last record: 64 bytes of a record header
 * that does not fit (recovery cuts it). Before the disk is filled. */
static void tear_tail(const char *dir)
{
    struct chan_end c = {{0}, 0};
    struct urt_log_recover_ops ops = {.channel = note_channel};
    cr_assert_eq(urt_log_recover(dir, URT_LOG_RECOVER_DRY_RUN, &ops, &c, NULL), 0, "%s", urt_last_error());
    cr_assert(c.file[0]);
    char path[4300];
    snprintf(path, sizeof(path), "%s/%s", dir, c.file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    uint8_t junk[64];
    memset(junk, 0xab, sizeof(junk));
    cr_assert_eq(pwrite(fd, junk, sizeof(junk), (off_t)c.valid_end), (ssize_t)sizeof(junk));
    close(fd);
}

Test(wal_full, recovery_on_a_full_disk, .timeout = 120)
{
    enum { FIRST = 40, LATER = 20, N = FIRST + LATER };
    struct tfs t;
    tfs_mount(&t, 1024 * 1024);
    struct answers *a = calloc(1, sizeof(*a));
    urt_runtime *rt = full_rt(t.dir);
    for (int i = 0; i < FIRST; i++) {
        commit(rt, a, i);
        wait_answers(a, i + 1); /* one epoch-file slot each */
        cr_assert_eq(atomic_load(&a->status[i]), 0);
    }
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    tear_tail(t.dir);
    tfs_fill(&t);

    /* Recovery needs no new block: the epoch file in place, the cut frees. */
    struct urt_log_recovery r1 = check_replay(t.dir, a, FIRST);
    cr_assert_eq(r1.cuts, 1, "the torn tail is cut");
    cr_assert_geq(r1.durable_marker, FIRST);
    struct urt_log_recovery r2 = check_replay(t.dir, a, FIRST);
    cr_assert_eq(r2.cuts, 0);
    cr_assert_eq(r2.durable_marker, r1.durable_marker);
    cr_assert_eq(r2.replay_marker, r1.replay_marker);
    cr_assert_eq(r2.replayed, r1.replayed);
    tfs_fill(&t); /* what the cut gave back */
    char before[4096], after[4096];
    dir_listing(t.dir, before, sizeof(before));

    /* A runtime needs new channel files: it does not start, says why and
     * what to do, and leaves the directory as it was. */
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = t.dir;
    cfg.log_prealloc_kb = 0;
    urt_runtime *none = NULL;
    int rc = urt_runtime_create(&cfg, &none);
    if (rc == -ENOSYS || rc == -EPERM)
        cr_skip_test("io_uring unavailable (%s)", strerror(-rc));
    cr_assert_eq(rc, -ENOSPC, "urt_runtime_create on a full disk: %d (%s)", rc, urt_last_error());
    cr_assert_null(none);
    cr_assert_not_null(strstr(urt_last_error(), "free space"), "the message says what to do: %s", urt_last_error());
    dir_listing(t.dir, after, sizeof(after));
    cr_assert_str_eq(after, before, "a failed start changed the directory: %s -> %s", before, after);
    struct urt_log_recovery r3 = check_replay(t.dir, a, FIRST);
    cr_assert_eq(r3.durable_marker, r1.durable_marker);
    cr_assert_eq(r3.cuts, 0);

    /* Space again: it starts, and every commit answered 0 is replayed. */
    cr_assert_eq(unlink(t.fill), 0);
    rt = full_rt(t.dir);
    for (int i = FIRST; i < N; i++)
        commit(rt, a, i);
    wait_answers(a, N);
    for (int i = FIRST; i < N; i++)
        cr_assert_eq(atomic_load(&a->status[i]), 0);
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    check_replay(t.dir, a, N);
    free(a);
    tfs_umount(&t);
    leak_check();
}

/* ---- the in-place rewrite under a power loss (fault injection) --------------------------------- */

#if URT_FAULT_INJECTION
static void copy_flat(const char *from, const char *to)
{
    DIR *d = opendir(from);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char x[4300], y[4300];
        snprintf(x, sizeof(x), "%s/%s", from, e->d_name);
        snprintf(y, sizeof(y), "%s/%s", to, e->d_name);
        int fi = open(x, O_RDONLY), fo = open(y, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert(fi >= 0 && fo >= 0);
        char buf[65536];
        ssize_t n;
        while ((n = read(fi, buf, sizeof(buf))) > 0)
            cr_assert_eq(write(fo, buf, (size_t)n), n);
        close(fi);
        close(fo);
    }
    closedir(d);
}

struct tally {
    struct urt_log_recovery res;
    struct replayed p;
};

static struct tally tally_of(const char *dir, unsigned flags)
{
    struct tally t;
    memset(&t, 0, sizeof(t));
    struct urt_log_recover_ops ops = {.record = on_record};
    int rc = urt_log_recover(dir, flags, &ops, &t.p, &t.res);
    cr_assert_eq(rc, 0, "urt_log_recover: %d: %s", rc, urt_last_error());
    cr_assert_eq(t.p.bad, 0);
    return t;
}

static void same_tally(const struct tally *x, const struct tally *base, const char *what, int phase, int seed)
{
    cr_assert_eq(x->res.durable_marker, base->res.durable_marker, "%s (phase %d, seed %d): marker %llu, was %llu",
                 what, phase, seed, (unsigned long long)x->res.durable_marker,
                 (unsigned long long)base->res.durable_marker);
    cr_assert_eq(x->res.replay_marker, base->res.replay_marker, "%s (phase %d, seed %d): replay limit", what, phase,
                 seed);
    cr_assert_eq(memcmp(x->p.seen, base->p.seen, sizeof(x->p.seen)), 0, "%s (phase %d, seed %d): other records",
                 what, phase, seed);
}

/* The epoch file forged with every kind of slot (wal_epochs.c): the image
 * recovery wants (D at 0, the window at 1) is not what slots 0 and 1 hold,
 * and neither may be lost before its content is durable elsewhere. */
static void forge_epochs(const char *dir, uint64_t base, uint64_t gen)
{
    uint8_t *b = calloc(1, (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE);
    struct wal_epoch_slot failing = {.marker = base + 5, .gen = gen, .worker = 0, .end = 1ull << 40};
    struct wal_epoch_slot with_d = {.marker = base, .gen = gen, .worker = 0, .end = 64}; /* holds: D */
    struct wal_epoch_slot window = {.marker = base - 4, .gen = WAL_SLOT_LIMIT, .end = base - 2};
    struct wal_epoch_slot below = {.marker = base - 1};
    struct wal_epoch_slot above = {.marker = base + 7}; /* holds, after a failing one: not believed */
    wal_epoch_slot_encode(b + 0 * EPOCH_SLOT_SIZE, &failing);
    wal_epoch_slot_encode(b + 1 * EPOCH_SLOT_SIZE, &with_d);
    memset(b + 2 * EPOCH_SLOT_SIZE, 0xab, EPOCH_SLOT_SIZE); /* junk */
    wal_epoch_slot_encode(b + 3 * EPOCH_SLOT_SIZE, &window);
    wal_epoch_slot_encode(b + 4 * EPOCH_SLOT_SIZE, &below);
    wal_epoch_slot_encode(b + 7 * EPOCH_SLOT_SIZE, &above);
    char path[4300];
    snprintf(path, sizeof(path), "%s/epochs", dir);
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b, (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE), (ssize_t)((size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE));
    close(fd);
    free(b);
}

Test(wal_full, in_place_rewrite_survives_a_power_loss, .timeout = 300)
{
    enum { N = 30 };
    char *dir = test_tmpdir("urt-epochs");
    struct answers *a = calloc(1, sizeof(*a));
    urt_runtime *rt = full_rt(dir);
    for (int i = 0; i < N; i++) {
        commit(rt, a, i);
        wait_answers(a, i + 1);
    }
    cr_assert_eq(urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    struct tally first = tally_of(dir, URT_LOG_RECOVER_DRY_RUN);
    uint64_t base = first.res.durable_marker;
    cr_assert_geq(base, 8);
    forge_epochs(dir, base, first.res.max_gen);
    struct tally base_t = tally_of(dir, URT_LOG_RECOVER_DRY_RUN);
    cr_assert_eq(base_t.res.durable_marker, base, "the forged file's marker");
    cr_assert_eq(base_t.res.broken_slots, 2, "the failing slot and the one above it");
    int seeds = SCALE(40, 12);
    for (int phase = 1; phase <= 5; phase++) {
        for (int seed = 1; seed <= seeds; seed++) {
            char *work = test_tmpdir("urt-epochs-crash");
            copy_flat(dir, work);
            atomic_store(&wal_epochs_crash, (uint64_t)phase << 32 | (uint64_t)seed);
            int rc = urt_log_recover(work, 0, NULL, NULL, NULL);
            atomic_store(&wal_epochs_crash, 0);
            cr_assert_eq(rc, -EIO, "the power loss (phase %d): %d %s", phase, rc, urt_last_error());
            struct tally dry = tally_of(work, URT_LOG_RECOVER_DRY_RUN);
            same_tally(&dry, &base_t, "after the power loss", phase, seed);
            struct tally real = tally_of(work, 0);
            same_tally(&real, &base_t, "the recovery after it", phase, seed);
            struct tally again = tally_of(work, 0);
            same_tally(&again, &base_t, "the one after that", phase, seed);
            cr_assert_eq(again.res.cuts, 0, "phase %d, seed %d: a second recovery cut again", phase, seed);
            test_remove_dir(work);
        }
    }
    free(a);
    test_remove_dir(dir);
    leak_check();
}
#else
Test(wal_full, in_place_rewrite_survives_a_power_loss)
{
    cr_skip_test("built without -Dfault_injection=true (test.sh sets it): the power-loss hook is compiled out");
}
#endif
