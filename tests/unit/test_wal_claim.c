/*
 * tests/unit/test_wal_claim.c — log_sync single_write: the durable marker
 * carried by the log writes themselves (claim records, tx/wal_format.h) and
 * recovery's rules for them (tx/wal_recover.c step 4), on forged
 * directories as wal::epoch_slot_conditions_are_cumulative does for slots:
 *
 *   - one channel at a time writes no epoch-file slot at all: every marker
 *     is a claim, and recovery finds it (the epoch file says less);
 *   - a claim inside the channel's valid prefix is believed (durable marker =
 *     the largest of the slots and the claims), recovery rewrites the epoch
 *     file to hold it, and a second recovery reports the same;
 *   - a claim behind a gap (a torn write: the bytes before it are missing)
 *     is not believed, and is cut with what follows;
 *   - claims obey the cumulative rule: a claim above a slot whose condition
 *     fails is not believed;
 *   - the durable marker is never below the checkpoint (a segment deleted by
 *     a checkpoint may have held the claim that established it);
 *   - a claim write that fails: its commits get the error only once the
 *     repair write over its range is durable — a copy of the directory taken
 *     when the error is delivered never replays them (fault injection);
 *   - where O_DIRECT or RWF_DSYNC is refused, single_write falls back to
 *     single_flush and says why (fault injection of the probes);
 *   - an idle runtime with a log uses no CPU (the polling of log_poll_us
 *     happens only while a log write is in flight).
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "runtime/runtime.h"
#include "tx/wal.h"
#include "tx/wal_format.h"

/* ---- helpers -------------------------------------------------------------------- */

static void payload_fill(uint8_t *p, uint32_t len, uint64_t id)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static urt_runtime *claim_rt(const char *dir, uint32_t workers, const char *log_sync)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.log_dir = dir;
    cr_assert_eq(urt_config_set(&cfg, "log_sync", log_sync), 0, "%s", urt_last_error());
    return rt_create_or_skip(&cfg); /* either backend: single_write is one write (tx/wal_sync.h) */
}

/* single_write needs O_DIRECT: where TMPDIR refuses it the runtime fell back. */
static void skip_unless_single_write(urt_runtime *rt)
{
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    if (st.sync_mode != URT_LOG_SYNC_SINGLE_WRITE) {
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        cr_skip_test("single_write fell back to %u on this TMPDIR (fs %s): no O_DIRECT", st.sync_mode, st.fs);
    }
}

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, status;
    void (*on_answer)(int status, void *arg); /* runs in the callback, before the waiter is told */
    void *arg;
};

static void waiter_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct waiter *w = arg;
    if (w->on_answer)
        w->on_answer(status, w->arg);
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->status = status;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int commit_wait_with(urt_runtime *rt, uint64_t id, void (*on_answer)(int, void *), void *arg)
{
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, on_answer, arg};
    struct urt_commit c;
    uint8_t rec[100];
    payload_fill(rec, sizeof(rec), id);
    cr_assert_eq(urt_log_commit(rt, &c, id, rec, sizeof(rec), URT_COMMIT_STORED, waiter_cb, &w), 0, "%s",
                 urt_last_error());
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    return w.status;
}

static int commit_wait(urt_runtime *rt, uint64_t id)
{
    return commit_wait_with(rt, id, NULL, NULL);
}

struct seen {
    uint64_t n, max_id;
    uint8_t ids[4096];
};

static int seen_rec(void *arg, const struct urt_log_record *r)
{
    struct seen *s = arg;
    s->n++;
    if (r->tx_id < sizeof(s->ids))
        s->ids[r->tx_id]++;
    if (r->tx_id > s->max_id)
        s->max_id = r->tx_id;
    return 0;
}

static int recover(const char *dir, unsigned flags, struct seen *s, struct urt_log_recovery *out)
{
    memset(s, 0, sizeof(*s));
    struct urt_log_recover_ops ops = {.record = seen_rec};
    return urt_log_recover(dir, flags, &ops, s, out);
}

/* The one channel file of dir with the highest generation. */
static void newest_channel(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ch-", 3) && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof(best), "%s", e->d_name);
    closedir(d);
    cr_assert(best[0], "no channel file in %s", dir);
    snprintf(path, len, "%s/%s", dir, best);
}

/* The scan of a channel file: its valid end and last lsn/epoch. */
static struct wal_scan_result scan_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    uint8_t *b = malloc((size_t)st.st_size + 1);
    cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    struct wal_scan_result r;
    wal_scan(b, (size_t)st.st_size, NULL, NULL, &r);
    free(b);
    return r;
}

/* Writes a claim record of marker m (epoch e, lsn) at off of path. */
static void put_claim(const char *path, uint64_t off, uint64_t m, uint64_t e, uint64_t lsn)
{
    uint8_t rec[64];
    memset(rec, 0, sizeof(rec));
    wal_rec_encode(rec, WAL_REC_MARKER, e, 0, lsn, &m, WAL_MARKER_PAYLOAD);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    size_t n = wal_rec_size(WAL_MARKER_PAYLOAD);
    cr_assert_eq(pwrite(fd, rec, n, (off_t)off), (ssize_t)n);
    close(fd);
}

/* A directory recovered once: n commits, one worker, log_sync single_flush
 * (no claims of its own), its durable marker in *d. */
static char *base_dir(uint32_t n, uint64_t *d)
{
    char *dir = test_tmpdir("urt-claim");
    urt_runtime *rt = claim_rt(dir, 1, "single_flush");
    for (uint32_t i = 1; i <= n; i++)
        cr_assert_eq(commit_wait(rt, i), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s;
    struct urt_log_recovery rec;
    cr_assert_eq(recover(dir, 0, &s, &rec), 0, "%s", urt_last_error());
    cr_assert_eq(s.n, n);
    cr_assert_eq(rec.claims, 0);
    *d = rec.durable_marker;
    return dir;
}

/* ---- the writer ------------------------------------------------------------------ */

Test(wal_claim, one_channel_writes_no_epoch_slot, .timeout = 60)
{
    char *dir = test_tmpdir("urt-claim");
    urt_runtime *rt = claim_rt(dir, 1, "single_write");
    skip_unless_single_write(rt);
    uint32_t n = SCALE(200, 50);
    for (uint32_t i = 1; i <= n; i++)
        cr_assert_eq(commit_wait(rt, i), 0);
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_eq(st.epoch_writes, 0, "%llu epoch-file writes with one channel", (unsigned long long)st.epoch_writes);
    cr_assert_geq(st.claims, n, "%llu claims for %u lone commits", (unsigned long long)st.claims, n);
    uint64_t durable = st.durable;
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s;
    struct urt_log_recovery rec;
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &s, &rec), 0, "%s", urt_last_error());
    cr_assert_eq(s.n, n, "%llu of %u commits replayed", (unsigned long long)s.n, n);
    cr_assert_geq(rec.claims, 1);
    cr_assert_geq(rec.durable_marker, durable, "recovery found marker %llu, the runtime had %llu",
                  (unsigned long long)rec.durable_marker, (unsigned long long)durable);
    test_remove_dir(dir);
    leak_check();
}

/* Several threads committing at once, each through its own preferred
 * worker: every channel is active, claims and (where a channel cannot
 * claim) epoch-file slots mix; every commit is answered 0 and replayed once. */
struct many_arg {
    urt_runtime *rt;
    uint64_t first, n;
    _Atomic uint64_t *bad;
};

static int commit_quiet(urt_runtime *rt, uint64_t id)
{
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL};
    struct urt_commit c;
    uint8_t rec[100];
    payload_fill(rec, sizeof(rec), id);
    int rc = urt_log_commit(rt, &c, id, rec, sizeof(rec), URT_COMMIT_STORED, waiter_cb, &w);
    if (rc)
        return rc;
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    return w.status;
}

static void *many_thread(void *p)
{
    struct many_arg *a = p;
    for (uint64_t i = a->first; i < a->first + a->n; i++)
        if (commit_quiet(a->rt, i))
            atomic_fetch_add(a->bad, 1);
    return NULL;
}

Test(wal_claim, many_channels_every_commit_replayed, .timeout = 120)
{
    char *dir = test_tmpdir("urt-claim");
    urt_runtime *rt = claim_rt(dir, 3, "single_write");
    skip_unless_single_write(rt);
    enum { THREADS = 6 };
    uint64_t per = SCALE(150, 30);
    _Atomic uint64_t bad = 0;
    pthread_t th[THREADS];
    struct many_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (struct many_arg){rt, 1 + (uint64_t)t * per, per, &bad};
        cr_assert_eq(pthread_create(&th[t], NULL, many_thread, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    cr_assert_eq(atomic_load(&bad), 0, "%llu commits failed", (unsigned long long)atomic_load(&bad));
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_gt(st.claims, 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s;
    struct urt_log_recovery rec;
    cr_assert_eq(recover(dir, 0, &s, &rec), 0, "%s", urt_last_error());
    cr_assert_eq(s.n, (uint64_t)THREADS * per);
    for (uint64_t i = 1; i <= (uint64_t)THREADS * per; i++)
        cr_assert_eq(s.ids[i], 1, "commit %llu replayed %u times", (unsigned long long)i, s.ids[i]);
    test_remove_dir(dir);
    leak_check();
}

/* ---- recovery's rules, on forged directories ----------------------------------- */

/* A claim in the valid prefix is believed; recovery makes it the epoch
 * file's marker; a second recovery reports the same, replays the same. */
Test(wal_claim, claim_in_the_valid_prefix_is_believed, .timeout = 60)
{
    uint64_t d;
    char *dir = base_dir(20, &d);
    char path[4300];
    newest_channel(dir, path, sizeof(path));
    struct wal_scan_result r = scan_file(path);
    put_claim(path, r.valid_end, d + 5, d + 5, r.last_lsn + 1);
    struct seen s;
    struct urt_log_recovery a, b;
    cr_assert_eq(recover(dir, 0, &s, &a), 0, "%s", urt_last_error());
    cr_assert_eq(a.claims, 1);
    cr_assert_eq(a.durable_marker, d + 5, "marker %llu, the claim says %llu", (unsigned long long)a.durable_marker,
                 (unsigned long long)(d + 5));
    cr_assert_eq(s.n, 20);
    cr_assert_eq(a.cuts, 0, "a believed claim was cut");
    cr_assert_eq(recover(dir, 0, &s, &b), 0, "%s", urt_last_error());
    cr_assert_eq(b.durable_marker, d + 5, "the second recovery reports %llu", (unsigned long long)b.durable_marker);
    cr_assert_eq(s.n, 20);
    cr_assert_eq(b.cuts, 0);
    test_remove_dir(dir);
    leak_check();
}

/* A claim behind missing bytes (a torn write: zeros where its records were)
 * vouches for nothing: not believed, cut with what follows it. */
Test(wal_claim, claim_behind_a_gap_is_not_believed, .timeout = 60)
{
    uint64_t d;
    char *dir = base_dir(20, &d);
    char path[4300];
    newest_channel(dir, path, sizeof(path));
    struct wal_scan_result r = scan_file(path);
    put_claim(path, r.valid_end + 512, d + 5, d + 5, r.last_lsn + 9);
    struct seen s;
    struct urt_log_recovery a;
    cr_assert_eq(recover(dir, 0, &s, &a), 0, "%s", urt_last_error());
    cr_assert_eq(a.claims, 0, "a claim outside the valid prefix was counted");
    cr_assert_eq(a.durable_marker, d, "marker %llu: the claim behind the gap was believed",
                 (unsigned long long)a.durable_marker);
    cr_assert_eq(s.n, 20);
    cr_assert_eq(a.cuts, 1, "the torn claim was not cut");
    struct wal_scan_result after = scan_file(path);
    cr_assert_eq(after.valid_end, r.valid_end);
    cr_assert_eq(after.nonzero_after, false, "the claim is still in the file after the cut");
    test_remove_dir(dir);
    leak_check();
}

/* Claims are sorted with the slots: one above a slot whose condition fails
 * is not believed (the failed condition means log bytes were lost). */
Test(wal_claim, claims_obey_the_cumulative_rule, .timeout = 60)
{
    uint64_t d;
    char *dir = base_dir(20, &d);
    cr_assert_geq(d, 2);
    struct seen s;
    struct urt_log_recovery before;
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &s, &before), 0);
    uint64_t base = d - 1;
    uint8_t slots[2 * EPOCH_SLOT_SIZE];
    struct wal_epoch_slot s0 = {.marker = base};
    struct wal_epoch_slot broken = {.marker = base + 1, .gen = before.max_gen, .worker = 0, .end = 1ull << 40};
    wal_epoch_slot_encode(slots, &s0);
    wal_epoch_slot_encode(slots + EPOCH_SLOT_SIZE, &broken);
    char epochs[4300];
    snprintf(epochs, sizeof(epochs), "%s/epochs", dir);
    int fd = open(epochs, O_WRONLY);
    cr_assert_geq(fd, 0);
    uint8_t zero[EPOCH_SLOT_SIZE] = {0};
    for (uint32_t i = 0; i < EPOCH_SLOTS; i++)
        cr_assert_eq(pwrite(fd, zero, sizeof(zero), (off_t)i * EPOCH_SLOT_SIZE), (ssize_t)sizeof(zero));
    cr_assert_eq(pwrite(fd, slots, sizeof(slots), 0), (ssize_t)sizeof(slots));
    close(fd);
    char path[4300];
    newest_channel(dir, path, sizeof(path));
    struct wal_scan_result r = scan_file(path);
    put_claim(path, r.valid_end, d + 3, d + 3, r.last_lsn + 1);
    struct urt_log_recovery a;
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &s, &a), 0, "%s", urt_last_error());
    cr_assert_eq(a.claims, 1);
    cr_assert_eq(a.durable_marker, base, "marker %llu: a claim after a broken condition was believed",
                 (unsigned long long)a.durable_marker);
    cr_assert_eq(a.broken_slots, 2, "%u slots and claims not believed", a.broken_slots);
    test_remove_dir(dir);
    leak_check();
}

/* The durable marker is never below the checkpoint: a checkpoint is written
 * only at or below a durable marker, whose claim may have been deleted with
 * its segment. */
Test(wal_claim, durable_marker_never_below_the_checkpoint, .timeout = 60)
{
    uint64_t d;
    char *dir = base_dir(20, &d);
    uint64_t c = d + 4;
    uint8_t b[WAL_CHECKPOINT_SIZE];
    wal_checkpoint_encode(b, c);
    char path[4300];
    snprintf(path, sizeof(path), "%s/checkpoint", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
    close(fd);
    struct seen s;
    struct urt_log_recovery a, again;
    cr_assert_eq(recover(dir, 0, &s, &a), 0, "%s", urt_last_error());
    cr_assert_eq(a.checkpoint, c);
    cr_assert_eq(a.durable_marker, c, "marker %llu below the checkpoint %llu", (unsigned long long)a.durable_marker,
                 (unsigned long long)c);
    cr_assert_eq(s.n, 0, "records at or below the checkpoint replayed");
    cr_assert_eq(recover(dir, 0, &s, &again), 0);
    cr_assert_eq(again.durable_marker, c);
    /* a runtime starts above it, and its commits count */
    urt_runtime *rt = claim_rt(dir, 1, "auto");
    cr_assert_eq(commit_wait(rt, 100), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(recover(dir, 0, &s, &again), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.ids[100], 1);
    cr_assert_gt(again.durable_marker, c);
    /* a checkpoint file that fails its check is refused: the engine's checkpoint is unknown */
    b[0] ^= 1;
    fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
    close(fd);
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &s, &again), -EBADMSG);
    cr_assert_not_null(strstr(urt_last_error(), "checkpoint file is damaged"), "%s", urt_last_error());
    test_remove_dir(dir);
    leak_check();
}

/* ---- a failed claim write (fault injection) ------------------------------------- */

#if URT_FAULT_INJECTION
struct snap {
    const char *dir;
    char *copy;
    int status;
};

static void copy_file(const char *from, const char *to)
{
    int fi = open(from, O_RDONLY), fo = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fi < 0 || fo < 0)
        abort();
    char buf[65536];
    ssize_t n;
    while ((n = read(fi, buf, sizeof(buf))) > 0)
        if (write(fo, buf, (size_t)n) != n)
            abort();
    close(fi);
    close(fo);
}

/* In the error's callback, on a worker, while the runtime runs: the
 * directory as it is now (a crash now leaves this). */
static void snapshot(int status, void *arg)
{
    struct snap *sn = arg;
    sn->status = status;
    if (status == 0)
        return;
    DIR *d = opendir(sn->dir);
    if (!d)
        abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "LOCK"))
            continue;
        char a[4300], b[4300];
        snprintf(a, sizeof(a), "%s/%s", sn->dir, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", sn->copy, e->d_name);
        copy_file(a, b);
    }
    closedir(d);
}

Test(wal_claim, failed_claim_write_answered_after_its_repair, .timeout = 60)
{
    char *dir = test_tmpdir("urt-claim");
    urt_runtime *rt = claim_rt(dir, 1, "single_write");
    skip_unless_single_write(rt);
    struct wal *wal = ((struct urt_runtime *)rt)->wal;
    for (uint64_t i = 1; i <= 5; i++)
        cr_assert_eq(commit_wait(rt, i), 0);
    for (uint64_t round = 0; round < 3; round++) {
        struct snap sn = {.dir = dir, .copy = test_tmpdir("urt-claim-copy")};
        uint64_t id = 10 + round;
        /* The write completes on disk, claim included, and reports -EIO. */
        wal_inject_fault(wal, WAL_FAULT_EIO);
        cr_assert_eq(commit_wait_with(rt, id, snapshot, &sn), -EIO);
        cr_assert_eq(commit_wait(rt, id + 100), 0, "the next commit after the repair");
        struct seen s;
        struct urt_log_recovery rec;
        cr_assert_eq(recover(sn.copy, 0, &s, &rec), 0, "%s", urt_last_error());
        cr_assert_eq(s.ids[id], 0, "commit %llu was answered -EIO, and the directory at that moment replays it",
                     (unsigned long long)id);
        for (uint64_t i = 1; i <= 5; i++)
            cr_assert_eq(s.ids[i], 1, "acknowledged commit %llu lost in the copy", (unsigned long long)i);
        test_remove_dir(sn.copy);
    }
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_eq(st.io_errors, 3);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s;
    struct urt_log_recovery rec;
    cr_assert_eq(recover(dir, 0, &s, &rec), 0, "%s", urt_last_error());
    for (uint64_t round = 0; round < 3; round++) {
        cr_assert_eq(s.ids[10 + round], 0, "a commit that got -EIO was replayed");
        cr_assert_eq(s.ids[110 + round], 1);
    }
    test_remove_dir(dir);
    leak_check();
}

/* Where O_DIRECT or RWF_DSYNC is refused (probed on the first channel
 * file), single_write falls back to single_flush (on the portable backend,
 * which has no single_flush, to strict), says why, and works. */
Test(wal_claim, single_write_falls_back_without_o_direct_or_dsync, .timeout = 60)
{
    static const struct {
        int refuse;
        const char *why;
    } cases[] = {{WAL_REFUSE_DIRECT, "O_DIRECT refused"}, {WAL_REFUSE_DSYNC, "RWF_DSYNC refused"}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *dir = test_tmpdir("urt-claim");
        atomic_store(&wal_fault_refuse, cases[k].refuse);
        urt_runtime *rt = claim_rt(dir, 2, "single_write");
        atomic_store(&wal_fault_refuse, 0);
        for (uint64_t i = 1; i <= 30; i++)
            cr_assert_eq(commit_wait(rt, i), 0);
        bool portable = urt_runtime_backend(rt, NULL) == URT_BACKEND_PORTABLE;
        struct urt_log_stats st;
        cr_assert_eq(urt_log_stats(rt, &st), 0);
        cr_assert_eq(st.sync_mode, portable ? URT_LOG_SYNC_STRICT : URT_LOG_SYNC_SINGLE_FLUSH, "%s: mode %u",
                     cases[k].why, st.sync_mode);
        cr_assert_eq(st.claims, 0);
        cr_assert_gt(st.epoch_writes, 0);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        char path[4300], buf[2048] = "";
        snprintf(path, sizeof(path), "%s/sessions.log", dir);
        int fd = open(path, O_RDONLY);
        cr_assert_geq(fd, 0);
        cr_assert_gt(read(fd, buf, sizeof(buf) - 1), 0);
        close(fd);
        cr_assert_not_null(strstr(buf, cases[k].why), "sessions.log: %s", buf);
        cr_assert_not_null(strstr(buf, portable ? "log_sync strict" : "log_sync single_flush"), "sessions.log: %s", buf);
        struct seen s;
        struct urt_log_recovery rec;
        cr_assert_eq(recover(dir, 0, &s, &rec), 0, "%s", urt_last_error());
        cr_assert_eq(s.n, 30);
        test_remove_dir(dir);
    }
    leak_check();
}
#else
Test(wal_claim, single_write_falls_back_without_o_direct_or_dsync)
{
    cr_skip_test("built without -Dfault_injection=true (test.sh sets it): the log's fault hooks are compiled out");
}

Test(wal_claim, failed_claim_write_answered_after_its_repair)
{
    cr_skip_test("built without -Dfault_injection=true (test.sh sets it): the log's fault hooks are compiled out");
}
#endif

/* ---- polling costs nothing when idle -------------------------------------------- */

static uint64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull +
           (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000ull;
}

Test(wal_claim, idle_runtime_with_a_log_uses_no_cpu, .timeout = 60)
{
    char *dir = test_tmpdir("urt-claim");
    urt_runtime *rt = claim_rt(dir, 2, "auto");
    for (uint64_t i = 1; i <= 20; i++)
        cr_assert_eq(commit_wait(rt, i), 0);
    sleep_us(100000); /* the workers go idle (and the epoch timer stops: nothing waits) */
    uint64_t c0 = cpu_ns();
    sleep_us(500000);
    uint64_t used = cpu_ns() - c0;
    /* a spinning worker would use about 500 ms here; an idle one nothing */
    cr_assert_lt(used, 50000000ull, "an idle runtime used %llu ms of CPU in 500 ms",
                 (unsigned long long)(used / 1000000));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    test_remove_dir(dir);
    leak_check();
}
