/*
 * tests/unit/test_wal.c — the write-ahead log (SPEC C12–C14): record format
 * and CRC32C, commits with each response, recovery (replay order,
 * idempotence, lock, foreign directories), fault injection (short write,
 * EIO), corruption (random flips and truncations never replay a corrupt
 * record, never crash, and are reported), the durability callback.
 *
 * Payloads are derived from the tx id (payload_fill), so every replayed
 * record can be checked byte for byte against what was committed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "tx/wal.h"
#include "tx/wal_format.h"
#include "tx/wal_sync.h"
#include "runtime/runtime.h"

/* ---- helpers -------------------------------------------------------------- */

static void payload_fill(uint8_t *p, uint32_t len, uint64_t id)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static bool payload_ok(const void *p, uint32_t len, uint64_t id)
{
    uint8_t buf[1024];
    if (len > sizeof(buf))
        return false;
    payload_fill(buf, len, id);
    return memcmp(buf, p, len) == 0;
}

static char *make_dir(void)
{
    return test_tmpdir("urt-wal-test");
}

#define remove_dir test_remove_dir

static void copy_dir(const char *from, const char *to)
{
    DIR *d = opendir(from);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char a[4200], b[4200];
        snprintf(a, sizeof(a), "%s/%s", from, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", to, e->d_name);
        int fi = open(a, O_RDONLY), fo = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
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

/* segment_kb 0: the default log_segment_kb */
static urt_runtime *log_rt_seg(const char *dir, uint32_t workers, uint32_t prealloc_kb, uint32_t segment_kb)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = prealloc_kb;
    if (segment_kb)
        cfg.log_segment_kb = segment_kb;
    return rt_create_or_skip(&cfg);
}

static urt_runtime *log_rt(const char *dir, uint32_t workers, uint32_t prealloc_kb)
{
    return log_rt_seg(dir, workers, prealloc_kb, 0);
}

/* Preallocated (a repair is a write of zeros, which an injected fault fails
 * too) and strict (no claims: a failed write's errors are answered at once,
 * not held until a repair lands, docs/durability.md). */
static urt_runtime *log_rt_strict_prealloc(const char *dir, uint32_t workers)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = 64;
    cr_assert_eq(urt_config_set(&cfg, "log_sync", "strict"), 0);
    return rt_create_or_skip(&cfg);
}

/* A waiter for commit callbacks from a thread that is not a worker. */
struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    int calls;
};
#define WAITER_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0}

static void waiter_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->status = status;
    w->calls++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int commit_wait(urt_runtime *rt, uint64_t id, uint32_t len, enum urt_commit_response resp)
{
    struct waiter w = WAITER_INIT;
    struct urt_commit c;
    uint8_t rec[1024];
    payload_fill(rec, len, id);
    int rc = urt_log_commit(rt, &c, id, rec, len, resp, waiter_cb, &w);
    cr_assert_eq(rc, 0, "urt_log_commit: %s", urt_last_error());
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    cr_assert_eq(w.calls, 1);
    return w.status;
}

struct replay {
    uint64_t n, last_epoch, bad, limit;
    uint64_t max_id;
    uint8_t *seen; /* count per id (ids < max_id) */
    uint64_t dups;
};

static int replay_rec(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    rp->n++;
    if (r->epoch < rp->last_epoch)
        rp->bad++; /* out of epoch order */
    rp->last_epoch = r->epoch;
    if (!payload_ok(r->payload, r->len, r->tx_id))
        rp->bad++;
    if (r->tx_id < rp->max_id) {
        if (rp->seen[r->tx_id]++)
            rp->dups++;
    }
    return 0;
}

struct cuts {
    int n;
    uint64_t bytes;
    char files[16][64];
    uint64_t offs[16];
};

static void on_cut(void *arg, const struct urt_log_cut *c)
{
    struct cuts *k = arg;
    if (k->n < 16) {
        snprintf(k->files[k->n], 64, "%.60s", c->file);
        k->offs[k->n] = c->offset;
    }
    k->n++;
    k->bytes += c->bytes;
}

struct rec_ctx {
    struct replay rp;
    struct cuts cuts;
};
static int ctx_rec(void *a, const struct urt_log_record *r)
{
    return replay_rec(&((struct rec_ctx *)a)->rp, r);
}
static void ctx_cut(void *a, const struct urt_log_cut *c)
{
    on_cut(&((struct rec_ctx *)a)->cuts, c);
}

static int recover(const char *dir, unsigned flags, struct rec_ctx *ctx, uint64_t max_id, struct urt_log_recovery *out)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->rp.max_id = max_id;
    ctx->rp.seen = calloc(max_id ? max_id : 1, 1);
    struct urt_log_recover_ops ops = {.record = ctx_rec, .cut = ctx_cut};
    return urt_log_recover(dir, flags, &ops, ctx, out);
}

/* ---- format ---------------------------------------------------------------- */

Test(wal, crc32c_check_value)
{
    cr_assert_eq(wal_crc32c("123456789", 9), 0xE3069283u);
    cr_assert_eq(wal_crc32c("", 0), 0u);
}

Test(wal, record_roundtrip_and_torn_tail)
{
    uint8_t buf[4096];
    memset(buf, 0, sizeof(buf));
    struct wal_header_payload h = {.version = WAL_VERSION};
    memcpy(h.magic, WAL_MAGIC, 8);
    size_t off = 0;
    wal_rec_encode(buf, WAL_REC_HEADER, 1, 0, 1, &h, sizeof(h));
    off += wal_rec_size(sizeof(h));
    uint8_t p[100];
    for (int i = 0; i < 5; i++) {
        payload_fill(p, 37 + i, (uint64_t)i);
        wal_rec_encode(buf + off, WAL_REC_COMMIT, 2 + (uint64_t)i / 2, (uint64_t)i, 2 + (uint64_t)i, p, 37 + i);
        off += wal_rec_size(37 + i);
    }
    struct wal_scan_result r;
    wal_scan(buf, sizeof(buf), NULL, NULL, &r);
    cr_assert_eq(r.end, WAL_SCAN_END_CLEAN);
    cr_assert_eq(r.n_records, 6);
    cr_assert_eq(r.valid_end, off);
    cr_assert_eq(r.last_epoch, 4);
    /* a torn last record */
    size_t last = off - wal_rec_size(41);
    buf[last + 40] ^= 0x40;
    wal_scan(buf, sizeof(buf), NULL, NULL, &r);
    cr_assert_eq(r.end, WAL_SCAN_END_CORRUPT);
    cr_assert_eq(r.valid_end, last);
    cr_assert_eq(r.n_records, 5);
    cr_assert_not(r.resync_found);
    buf[last + 40] ^= 0x40;
    /* a stale record (lsn not increasing) after the valid ones */
    payload_fill(p, 8, 99);
    wal_rec_encode(buf + off, WAL_REC_COMMIT, 9, 99, 3, p, 8);
    wal_scan(buf, sizeof(buf), NULL, NULL, &r);
    cr_assert_eq(r.end, WAL_SCAN_END_CORRUPT);
    cr_assert_eq(r.valid_end, off);
    /* damage in the middle: a later valid record is found */
    memset(buf + off, 0, 64);
    buf[wal_rec_size(sizeof(h)) + 35] ^= 1;
    wal_scan(buf, sizeof(buf), NULL, NULL, &r);
    cr_assert_eq(r.end, WAL_SCAN_END_CORRUPT);
    cr_assert(r.resync_found);
}

/* ---- commits and recovery ----------------------------------------------------- */

#define TASK_CLIENTS 8
struct tclient {
    struct urt_commit c;
    struct urt_task t;
    urt_runtime *rt;
    uint64_t next, end;
    uint8_t rec[300];
    enum urt_commit_response resp;
    _Atomic int *left;
    _Atomic int *errors;
    _Atomic uint64_t *last_marker;
};

static void tclient_issue(struct tclient *k);
static _Atomic uint64_t dur_last, dur_calls, dur_bad, order_bad;
static _Atomic bool check_order; /* stored callbacks must come after on_durable told of their marker */

static void tclient_cb(struct urt_commit *c, int status, void *arg)
{
    struct tclient *k = arg;
    if (status)
        atomic_fetch_add(k->errors, 1);
    uint64_t m = urt_commit_marker(c);
    if (k->resp == URT_COMMIT_STORED && m == 0)
        atomic_fetch_add(k->errors, 1);
    if (k->resp == URT_COMMIT_STORED && atomic_load(&check_order) && m > atomic_load(&dur_last))
        atomic_fetch_add(&order_bad, 1);
    if (++k->next == k->end) {
        atomic_fetch_sub(k->left, 1);
        return;
    }
    tclient_issue(k);
}

static void tclient_issue(struct tclient *k)
{
    uint32_t len = 1 + (uint32_t)(k->next % 299);
    payload_fill(k->rec, len, k->next);
    if (urt_log_commit(k->rt, &k->c, k->next, k->rec, len, k->resp, tclient_cb, k))
        atomic_fetch_add(k->errors, 1), atomic_fetch_sub(k->left, 1);
}

static enum urt_task_result tclient_start(struct urt_task *t, void *arg)
{
    (void)t;
    tclient_issue(arg);
    return URT_TASK_DONE;
}

static void run_task_clients(urt_runtime *rt, enum urt_commit_response resp, uint64_t base, uint64_t per)
{
    static struct tclient k[TASK_CLIENTS];
    _Atomic int left = TASK_CLIENTS, errors = 0;
    for (int i = 0; i < TASK_CLIENTS; i++) {
        memset(&k[i], 0, sizeof(k[i]));
        k[i].rt = rt;
        k[i].next = base + (uint64_t)i * per;
        k[i].end = k[i].next + per;
        k[i].resp = resp;
        k[i].left = &left;
        k[i].errors = &errors;
        urt_task_init(&k[i].t, tclient_start, &k[i]);
        cr_assert_eq(urt_task_submit(rt, &k[i].t, 0), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&left) == 0, 20000), "clients did not finish");
    cr_assert_eq(atomic_load(&errors), 0);
}

Test(wal, commits_every_response_then_recovery, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 64);
    /* from a thread that is not a worker */
    for (uint64_t id = 0; id < 20; id++)
        cr_assert_eq(commit_wait(rt, id, 200, (enum urt_commit_response)(id % 3)), 0);
    /* from tasks: each response kind */
    run_task_clients(rt, URT_COMMIT_STORED, 100, 50);
    run_task_clients(rt, URT_COMMIT_AVAILABLE, 1000, 50);
    run_task_clients(rt, URT_COMMIT_ACCEPTED, 2000, 20);
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_geq(st.commits, 20 + 400 + 400 + 160);
    cr_assert_gt(st.fsyncs, 0);
    cr_assert_eq(st.io_errors, 0);
    /* a second runtime (or a recovery) on the same directory is refused */
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = dir;
    urt_runtime *rt2 = NULL;
    cr_assert_eq(urt_runtime_create(&cfg, &rt2), -EBUSY, "%s", urt_last_error());
    cr_assert_eq(urt_log_recover(dir, 0, NULL, NULL, NULL), -EBUSY);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    /* ... and so is one held by another process */
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct urt_config c2;
        test_config(&c2, 1);
        c2.log_dir = dir;
        c2.log_prealloc_kb = 0;
        urt_runtime *crt = NULL;
        char ok = urt_runtime_create(&c2, &crt) == 0 ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char ok = 0;
    cr_assert_eq(read(ready[0], &ok, 1), 1);
    cr_assert_eq(ok, 'y');
    cr_assert_eq(urt_log_recover(dir, 0, NULL, NULL, NULL), -EBUSY);
    cr_assert(strstr(urt_last_error(), "in use"), "%s", urt_last_error());
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(ready[0]);
    close(ready[1]);

    struct rec_ctx ctx;
    struct urt_log_recovery out;
    cr_assert_eq(recover(dir, 0, &ctx, 4000, &out), 0, "%s", urt_last_error());
    cr_assert_eq(ctx.rp.bad, 0);
    cr_assert_eq(ctx.rp.dups, 0);
    cr_assert_eq(ctx.cuts.n, 0);
    /* drain shutdown flushed everything: every record is there once */
    cr_assert_eq(ctx.rp.n, 20 + 400 + 400 + 160, "replayed %llu", (unsigned long long)ctx.rp.n);
    uint64_t n1 = ctx.rp.n;
    free(ctx.rp.seen);
    /* idempotent */
    cr_assert_eq(recover(dir, 0, &ctx, 4000, &out), 0);
    cr_assert_eq(ctx.rp.n, n1);
    cr_assert_eq(ctx.cuts.n, 0);
    free(ctx.rp.seen);
    /* a new session continues the log */
    rt = log_rt(dir, 2, 0);
    cr_assert_eq(commit_wait(rt, 3999, 64, URT_COMMIT_STORED), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(recover(dir, 0, &ctx, 4000, &out), 0);
    cr_assert_eq(ctx.rp.n, n1 + 1);
    cr_assert_eq(ctx.rp.bad, 0);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

Test(wal, o_direct_channels, .timeout = 60)
{
    char *dir = make_dir();
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.o_direct = true;
    cfg.log_prealloc_kb = 16;
    urt_runtime *rt = NULL;
    int rc = urt_runtime_create(&cfg, &rt);
    if (rc == -EINVAL && strstr(urt_last_error(), "channel")) {
        remove_dir(dir);
        cr_skip_test("O_DIRECT not supported here: %s", urt_last_error());
    }
    cr_assert_eq(rc, 0, "%s", urt_last_error());
    run_task_clients(rt, URT_COMMIT_STORED, 0, 100); /* crosses the 16 KiB preallocation */
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 1000, NULL), 0);
    cr_assert_eq(ctx.rp.n, 800);
    cr_assert_eq(ctx.rp.bad, 0);
    cr_assert_eq(ctx.rp.dups, 0);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

Test(wal, missing_and_foreign_directories)
{
    cr_assert_eq(urt_log_recover("/nonexistent/urt-wal", 0, NULL, NULL, NULL), -ENOENT);
    cr_assert(strstr(urt_last_error(), "does not exist"));
    char *dir = make_dir();
    char p[4200];
    snprintf(p, sizeof(p), "%s/notes.txt", dir);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    close(fd);
    cr_assert_eq(urt_log_recover(dir, 0, NULL, NULL, NULL), -EMEDIUMTYPE);
    cr_assert(strstr(urt_last_error(), "not a urt log directory"));
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = dir;
    urt_runtime *rt = NULL;
    cr_assert_eq(urt_runtime_create(&cfg, &rt), -EMEDIUMTYPE);
    cr_assert_eq(urt_log_recover(dir, 0x80, NULL, NULL, NULL), -EINVAL);
    remove_dir(dir);
}

Test(wal, no_log_dir_means_enotsup)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_commit c;
    struct urt_log_stats st;
    cr_assert_eq(urt_log_commit(rt, &c, 1, "x", 1, URT_COMMIT_STORED, waiter_cb, NULL), -ENOTSUP);
    cr_assert_eq(urt_log_stats(rt, &st), -ENOTSUP);
    cr_assert_eq(urt_log_commit(rt, &c, 1, "x", 1, (enum urt_commit_response)7, waiter_cb, NULL), -EINVAL);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- durability callback ---------------------------------------------------- */

static void on_durable(uint64_t m, void *arg)
{
    uint64_t prev = atomic_exchange(&dur_last, m);
    if (m <= prev)
        atomic_fetch_add(&dur_bad, 1);
    atomic_fetch_add(&dur_calls, 1);
    if (arg)
        sleep_us(50); /* widen the window in which a covered commit could be released early */
}

/* Issue 10 point 4: the engine hears of a marker before any commit it covers
 * is answered (urt/log.h: on_durable runs "before the commits it covers are
 * released"). A slow observer widens the race that used to break it. */
Test(wal, durability_callback_before_covered_commits, .timeout = 120)
{
    for (uint32_t workers = 2; workers <= 4; workers += 2) {
        char *dir = make_dir();
        urt_runtime *rt = log_rt(dir, workers, workers == 2 ? 4096 : 0);
        atomic_store(&dur_last, 0);
        atomic_store(&order_bad, 0);
        atomic_store(&check_order, true);
        cr_assert_eq(urt_log_on_durable(rt, on_durable, (void *)1), 0);
        run_task_clients(rt, URT_COMMIT_STORED, 0, SCALE(200, 40));
        atomic_store(&check_order, false);
        cr_assert_eq(atomic_load(&order_bad), 0, "%llu stored callbacks ran before on_durable covered them (%u workers)",
                     (unsigned long long)atomic_load(&order_bad), workers);
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        remove_dir(dir);
    }
    leak_check();
}

Test(wal, durability_callback_increasing, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    cr_assert_eq(urt_log_on_durable(rt, on_durable, NULL), 0);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 30);
    cr_assert_gt(atomic_load(&dur_calls), 0);
    cr_assert_eq(atomic_load(&dur_bad), 0);
    struct urt_log_stats st;
    urt_log_stats(rt, &st);
    cr_assert_geq(atomic_load(&dur_last), 1);
    cr_assert_leq(atomic_load(&dur_last), st.durable);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    remove_dir(dir);
    leak_check();
}

/* ---- fault injection (builds with -Dfault_injection=true: test.sh) ------------- */

#if URT_FAULT_INJECTION
Test(wal, fault_short_write_and_eio, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 1, 0);
    struct wal *wal = ((struct urt_runtime *)rt)->wal;
    cr_assert_eq(commit_wait(rt, 1, 500, URT_COMMIT_STORED), 0);
    /* short write: retried, the commit succeeds */
    wal_inject_fault(wal, WAL_FAULT_SHORT);
    cr_assert_eq(commit_wait(rt, 2, 900, URT_COMMIT_STORED), 0);
    /* short write that cancelled the linked fdatasync: the rest is written, synced */
    wal_inject_fault(wal, WAL_FAULT_SHORT_CANCEL);
    cr_assert_eq(commit_wait(rt, 6, 800, URT_COMMIT_STORED), 0);
    /* EIO: the commit of that flush gets the error; the next one succeeds */
    wal_inject_fault(wal, WAL_FAULT_EIO);
    cr_assert_eq(commit_wait(rt, 3, 700, URT_COMMIT_STORED), -EIO);
    cr_assert_eq(commit_wait(rt, 4, 10, URT_COMMIT_STORED), 0);
    wal_inject_fault(wal, WAL_FAULT_EIO);
    cr_assert_eq(commit_wait(rt, 5, 300, URT_COMMIT_STORED), -EIO);
    /* nothing after it: the repair write alone must hide record 5 (writes:
     * 1, 2, 6, the repair after 3, 4, the repair after 5) */
    cr_assert(WAIT_UNTIL(({
        struct urt_log_stats s;
        urt_log_stats(rt, &s);
        s.fsyncs >= 6;
    }), 5000));
    struct urt_log_stats st;
    urt_log_stats(rt, &st);
    cr_assert_eq(st.io_errors, 2);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 10, NULL), 0);
    cr_assert_eq(ctx.rp.bad, 0);
    cr_assert_eq(ctx.rp.seen[1], 1);
    cr_assert_eq(ctx.rp.seen[2], 1);
    cr_assert_eq(ctx.rp.seen[3], 0, "a commit that got -EIO was replayed");
    cr_assert_eq(ctx.rp.seen[4], 1);
    cr_assert_eq(ctx.rp.seen[5], 0, "a commit that got -EIO was replayed");
    cr_assert_eq(ctx.rp.seen[6], 1);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

/* A device that fails every write: commits get -EIO, and a destroy (either
 * mode) still returns — its stop writes at most STOP_FLUSHES times a channel,
 * and every stored commit is answered exactly once. */
static void dead_device(enum urt_shutdown mode)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    struct wal *wal = ((struct urt_runtime *)rt)->wal;
    cr_assert_eq(commit_wait(rt, 1, 100, URT_COMMIT_STORED), 0);
    wal_inject_fault(wal, WAL_FAULT_EIO_ALWAYS);
    cr_assert_eq(commit_wait(rt, 2, 100, URT_COMMIT_STORED), -EIO);
    struct waiter w = WAITER_INIT;
    struct urt_commit c;
    uint8_t rec[64];
    payload_fill(rec, sizeof(rec), 3);
    cr_assert_eq(urt_log_commit(rt, &c, 3, rec, sizeof(rec), URT_COMMIT_AVAILABLE, waiter_cb, &w), 0);
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    struct urt_log_stats before;
    urt_log_stats(rt, &before);
    cr_assert_geq(urt_runtime_destroy(rt, mode), 0, "%s", urt_last_error());
    cr_assert_eq(w.calls, 1);
    cr_assert_gt(before.io_errors, 0);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 10, NULL), 0);
    cr_assert_eq(ctx.rp.seen[1], 1, "the commit made before the device died is kept");
    cr_assert_eq(ctx.rp.seen[2], 0, "a commit that got -EIO was replayed");
    free(ctx.rp.seen);
    remove_dir(dir);
}

Test(wal, dead_device_destroy_returns, .timeout = 60)
{
    dead_device(URT_SHUTDOWN_CANCEL);
    dead_device(URT_SHUTDOWN_DRAIN);
    leak_check();
}

/* A write that keeps failing is retried after a back-off that doubles up to
 * 128 ms, not at once (a worker about to suspend retried the repair write
 * in a loop: hundreds of thousands of io_errors a second); when the device
 * works again, the next commit is stored without a restart. Commits made
 * while it fails get its error, soon. (Past the
 * preallocation the repair is a truncation, which the injected fault does
 * not touch: wal_full covers that one.) */
Test(wal, failing_writes_are_retried_with_a_back_off, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt_strict_prealloc(dir, 1);
    struct wal *wal = ((struct urt_runtime *)rt)->wal;
    cr_assert_eq(commit_wait(rt, 1, 100, URT_COMMIT_STORED), 0);
    wal_inject_fault(wal, WAL_FAULT_EIO_ALWAYS);
    cr_assert_eq(commit_wait(rt, 2, 100, URT_COMMIT_STORED), -EIO);
    struct urt_log_stats s0, s1;
    urt_log_stats(rt, &s0);
    uint64_t t0 = now_ns();
    sleep_us(300000);
    urt_log_stats(rt, &s1);
    uint64_t ms = (now_ns() - t0) / 1000000;
    uint64_t retries = s1.io_errors - s0.io_errors;
    /* 1, 2, 4, ... 128 ms: about 8 in the first 255 ms, then one per 128 ms */
    cr_assert_leq(retries, 12 + ms / 64, "%llu failed writes in %llu ms", (unsigned long long)retries,
                  (unsigned long long)ms);
    cr_assert_geq(retries, 2, "the repair write is still retried (%llu in %llu ms)", (unsigned long long)retries,
                  (unsigned long long)ms);
    /* Commits made meanwhile wait for a repair that keeps failing: each
     * gets its error with the next failed repair (they waited for ever). */
    for (uint64_t id = 4; id < 7; id++)
        cr_assert_eq(commit_wait(rt, id, 100, URT_COMMIT_STORED), -EIO);
    wal_inject_fault(wal, 0); /* the device works again */
    cr_assert_eq(commit_wait(rt, 3, 100, URT_COMMIT_STORED), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 10, NULL), 0);
    cr_assert_eq(ctx.rp.seen[1], 1);
    cr_assert_eq(ctx.rp.seen[2], 0, "a commit that got -EIO was replayed");
    cr_assert_eq(ctx.rp.seen[3], 1);
    for (int id = 4; id < 7; id++)
        cr_assert_eq(ctx.rp.seen[id], 0, "commit %d got -EIO and was replayed", id);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

/* A stored commit written on channel 0 waits in the marker heap while
 * channel 1 (whose worker is held in a task) holds an unflushed record of an
 * earlier epoch, and then the device dies: nothing is held, failed or
 * unflushed anywhere when the runtime is destroyed but that commit. The
 * destroy answers it -ECANCELED, once (it lost it before: the heap's commits
 * were appended to a list the destroy never ran), and recovery replays
 * neither it nor the failed record. */
struct heap_hold {
    urt_runtime *rt;
    _Atomic int stage;
    struct urt_commit acc, stored;
    struct waiter w_acc, w_stored;
    uint8_t rec[64];
};

static enum urt_task_result hold_ch1(struct urt_task *t, void *arg)
{
    (void)t;
    struct heap_hold *h = arg;
    if (urt_log_commit(h->rt, &h->acc, 1, h->rec, sizeof(h->rec), URT_COMMIT_ACCEPTED, waiter_cb, &h->w_acc))
        atomic_store(&h->stage, -1);
    else
        atomic_store(&h->stage, 1);
    while (atomic_load(&h->stage) == 1)
        sleep_us(100); /* channel 1 keeps its record unflushed meanwhile */
    return URT_TASK_DONE;
}

static enum urt_task_result stored_on_ch0(struct urt_task *t, void *arg)
{
    (void)t;
    struct heap_hold *h = arg;
    if (urt_log_commit(h->rt, &h->stored, 2, h->rec, sizeof(h->rec), URT_COMMIT_STORED, waiter_cb, &h->w_stored))
        atomic_store(&h->stage, -1);
    return URT_TASK_DONE;
}

/* Two channels on a strict, preallocated log: channel 1's task holds an
 * accepted commit (stage 1) and channel 0 has written a stored one. */
static struct heap_hold *hold_start(char *dir)
{
    struct heap_hold *h = calloc(1, sizeof(*h));
    h->rt = log_rt_strict_prealloc(dir, 2);
    h->w_acc = (struct waiter)WAITER_INIT;
    h->w_stored = (struct waiter)WAITER_INIT;
    payload_fill(h->rec, sizeof(h->rec), 1);
    cr_assert_eq(urt_spawn_to(h->rt, 1, hold_ch1, NULL, h, 0), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&h->stage) != 0, 5000));
    cr_assert_eq(atomic_load(&h->stage), 1, "urt_log_commit (accepted): %s", urt_last_error());
    cr_assert_eq(urt_spawn_to(h->rt, 0, stored_on_ch0, NULL, h, 0), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(({
        struct urt_log_stats s;
        urt_log_stats(h->rt, &s);
        s.fsyncs >= 1;
    }), 5000), "channel 0 wrote the stored commit");
    return h;
}

/* A full disk where even an overwrite takes space (copy-on-write): the
 * repair's write of zeros fails too, and the repair after it truncates the
 * failed range instead, which frees space. Channel 1 (its worker held in a
 * task) has a record of an earlier epoch unflushed while channel 0's stored
 * commit waits for the durable marker; every log write then fails with
 * -ENOSPC: the commit on channel 0 is answered 0, while the fault lasts
 * (it waited for ever: the repair never landed), and recovery replays it. */
Test(wal, a_repair_that_finds_no_space_truncates, .timeout = 60)
{
    char *dir = make_dir();
    struct heap_hold *h = hold_start(dir);
    struct wal *wal = ((struct urt_runtime *)h->rt)->wal;
    wal_inject_fault(wal, WAL_FAULT_ENOSPC_ALWAYS);
    atomic_store(&h->stage, 2); /* channel 1 writes, fails, its repair write fails, it truncates */
    bool answered = WAIT_UNTIL(({
        pthread_mutex_lock(&h->w_stored.mu);
        int calls = h->w_stored.calls;
        pthread_mutex_unlock(&h->w_stored.mu);
        calls == 1;
    }), 10000);
    struct urt_log_stats st;
    urt_log_stats(h->rt, &st);
    wal_inject_fault(wal, 0);
    cr_assert(answered, "the stored commit on channel 0 still waits for the marker (io_errors %llu)",
              (unsigned long long)st.io_errors);
    cr_assert_eq(h->w_stored.status, 0);
    cr_assert_geq(st.io_errors, 2, "the record's write and the repair's write both failed");
    cr_assert_geq(urt_runtime_destroy(h->rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 10, NULL), 0);
    cr_assert_eq(ctx.rp.seen[1], 0, "the failed record was replayed");
    cr_assert_eq(ctx.rp.seen[2], 1, "the commit answered 0 is replayed");
    free(ctx.rp.seen);
    free(h);
    remove_dir(dir);
    leak_check();
}

Test(wal, destroy_answers_a_commit_waiting_for_the_marker, .timeout = 60)
{
    char *dir = make_dir();
    struct heap_hold *h = hold_start(dir); /* channel 1's repair is a write: it fails too */
    struct wal *wal = ((struct urt_runtime *)h->rt)->wal;
    sleep_us(20000);
    cr_assert_eq(atomic_load(&h->stage), 1);
    pthread_mutex_lock(&h->w_stored.mu);
    int early = h->w_stored.calls;
    pthread_mutex_unlock(&h->w_stored.mu);
    cr_assert_eq(early, 0, "answered before channel 1 flushed its earlier epoch");
    wal_inject_fault(wal, WAL_FAULT_EIO_ALWAYS);
    atomic_store(&h->stage, 2); /* channel 1 writes, fails, and never repairs */
    cr_assert(WAIT_UNTIL(({
        struct urt_log_stats s;
        urt_log_stats(h->rt, &s);
        s.io_errors >= 1;
    }), 5000));
    cr_assert_geq(urt_runtime_destroy(h->rt, URT_SHUTDOWN_DRAIN), 0, "%s", urt_last_error());
    cr_assert_eq(h->w_acc.calls, 1);
    cr_assert_eq(h->w_acc.status, 0, "accepted: answered at append");
    cr_assert_eq(h->w_stored.calls, 1, "the stored commit waiting for the marker was answered %d times",
                 h->w_stored.calls);
    cr_assert_eq(h->w_stored.status, -ECANCELED);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 10, NULL), 0);
    cr_assert_eq(ctx.rp.seen[1], 0, "the failed record was replayed");
    cr_assert_eq(ctx.rp.seen[2], 0, "a commit answered -ECANCELED was replayed");
    free(ctx.rp.seen);
    free(h);
    remove_dir(dir);
    leak_check();
}
#else
Test(wal, fault_short_write_and_eio)
{
    cr_skip_test("built without -Dfault_injection=true (test.sh sets it): the log's fault hooks are compiled out");
}
#endif

/* ---- preallocation ------------------------------------------------------------- */

static uint64_t file_size(const char *path);


/* Recovery of dir replays the n records of ids 0..n-1, each once, intact. */
static void recovers_every_record(const char *dir, uint64_t n)
{
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, n, NULL), 0);
    cr_assert_eq(ctx.rp.n, n);
    cr_assert_eq(ctx.rp.bad, 0);
    cr_assert_eq(ctx.rp.dups, 0);
    free(ctx.rp.seen);
}

/* The path of the channel file of dir (a directory with one). */
static void chan_file_path(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    struct dirent *e;
    path[0] = 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ch-", 3))
            snprintf(path, len, "%s/%.60s", dir, e->d_name);
    closedir(d);
    cr_assert(path[0], "no channel file in %s", dir);
}

/* The one channel file of dir (one worker): its size, and where its data ends
 * (the last byte that is not zero, the zeros beyond it are the preallocation). */
static void chan_file_extent(const char *dir, uint64_t *size, uint64_t *data_end)
{
    char path[4300];
    chan_file_path(dir, path, sizeof(path));
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0);
    uint8_t buf[65536];
    uint64_t off = 0, last = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i])
                last = off + (uint64_t)i + 1;
        off += (uint64_t)n;
    }
    close(fd);
    *size = off;
    *data_end = last;
}

/* log_prealloc_kb of zeros stay ahead of the data, grown in 256 KiB steps
 * (wal_file.c): with 4 MB and about 2.6 MB written, the file is 4 MB plus
 * whole steps, and at least 3.5 MB of it is ahead of the data. (The step
 * used to be 2 MB when only 1 MB was left: 1.4 MB ahead here, and a 2 MB
 * fill that the flushes behind it waited for.) */
Test(wal, the_preallocation_stays_ahead_in_small_steps, .timeout = 120)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 1, 4096);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 14000 / TASK_CLIENTS);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    uint64_t size, end;
    chan_file_extent(dir, &size, &end);
    const uint64_t pre = 4096u << 10, step = 256u << 10;
    cr_assert_geq(end, 2500u << 10, "only %" PRIu64 " bytes of data", end);
    cr_assert_gt(size, pre, "the file was never extended: %" PRIu64 " bytes", size);
    cr_assert_eq((size - pre) % step, 0, "the file (%" PRIu64 " bytes) grew by more than 256 KiB steps", size);
    cr_assert_geq(size - end, pre - 2 * step, "%" PRIu64 " bytes of zeros ahead of the data", size - end);
    cr_assert_leq(size - end, pre, "%" PRIu64 " bytes of zeros ahead of the data", size - end);
    recovers_every_record(dir, 14000);
    remove_dir(dir);
}

/* No file gets zeros past a piece beyond log_segment_kb, where it rolls over
 * (wal_file.c, prealloc_cap): with 512 KiB segments and log_prealloc_kb
 * 4096, a closed segment is at most 512 + 256 KiB plus the one flush that
 * passed the segment's end. (Recovery reads every byte of every file: a
 * 512 KiB segment with 4 MB of zeros made it read eight times the data.) */
Test(wal, a_segment_carries_no_zeros_it_cannot_use, .timeout = 120)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt_seg(dir, 1, 4096, 512);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 14000 / TASK_CLIENTS);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    DIR *d = opendir(dir);
    cr_assert(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ch-", 3))
            continue;
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        files++;
        cr_assert_leq(file_size(p), (768u + 64u) << 10, "%s: %" PRIu64 " bytes", e->d_name, file_size(p));
    }
    closedir(d);
    cr_assert_geq(files, 4, "2.6 MB of records in 512 KiB segments made %d files", files);
    recovers_every_record(dir, 14000);
    remove_dir(dir);
}

/* ---- corruption ----------------------------------------------------------------- */

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) ? 0 : (uint64_t)st.st_size;
}

Test(wal, corruption_never_replayed_and_reported, .timeout = 120)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 40);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    /* the files to damage */
    char names[8][64];
    uint64_t valid_end[8];
    int n_names = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "ch-", 3) == 0 || strcmp(e->d_name, "epochs") == 0)
            snprintf(names[n_names++], 64, "%.60s", e->d_name);
    closedir(d);
    for (int i = 0; i < n_names; i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        int fd = open(path, O_RDONLY);
        uint64_t size = file_size(path);
        uint8_t *b = malloc(size + 1);
        cr_assert_eq(pread(fd, b, size, 0), (ssize_t)size);
        close(fd);
        struct wal_scan_result r;
        wal_scan(b, size, NULL, NULL, &r);
        valid_end[i] = r.valid_end;
        free(b);
    }
    cr_assert_geq(n_names, 3);
    struct rec_ctx ctx;
    cr_assert_eq(recover(dir, 0, &ctx, 400, NULL), 0);
    cr_assert_eq(ctx.rp.n, 320);
    free(ctx.rp.seen);

    unsigned seed = 12345;
    int rounds = SCALE(300, 60);
    for (int round = 0; round < rounds; round++) {
        char *scratch = make_dir();
        copy_dir(dir, scratch);
        int vi = rand_r(&seed) % n_names;
        const char *victim = names[vi];
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", scratch, victim);
        uint64_t size = file_size(path);
        bool is_chan = victim[0] == 'c';
        int kind = rand_r(&seed) % 3; /* 0 flip, 1 truncate, 2 flip several */
        uint64_t first_off = size;
        int fd = open(path, O_RDWR);
        cr_assert(fd >= 0);
        if (kind == 1 && size) {
            first_off = (uint64_t)rand_r(&seed) % size;
            cr_assert_eq(ftruncate(fd, (off_t)first_off), 0);
        } else if (size) {
            int flips = kind == 0 ? 1 : 1 + rand_r(&seed) % 8;
            for (int i = 0; i < flips; i++) {
                uint64_t off = (uint64_t)rand_r(&seed) % size;
                uint8_t b;
                cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
                b ^= (uint8_t)(1u << (rand_r(&seed) % 8));
                cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
                if (off < first_off)
                    first_off = off;
            }
        }
        close(fd);
        struct urt_log_recovery out;
        int rc = recover(scratch, 0, &ctx, 400, &out);
        cr_assert_eq(rc, 0, "round %d: recovery failed: %s", round, urt_last_error());
        cr_assert_eq(ctx.rp.bad, 0, "round %d: a corrupt or misordered record was replayed", round);
        cr_assert_eq(ctx.rp.dups, 0);
        cr_assert_leq(ctx.rp.n, 320);
        if (is_chan && kind != 1) {
            /* a flip inside the data (or its terminator) is cut and reported */
            bool reported = false;
            for (int i = 0; i < ctx.cuts.n && i < 16; i++)
                if (!strcmp(ctx.cuts.files[i], victim) && ctx.cuts.offs[i] <= first_off)
                    reported = true;
            if (first_off < valid_end[vi] + WAL_TERMINATOR)
                cr_assert(reported, "round %d: damage at %llu of %s not reported", round,
                          (unsigned long long)first_off, victim);
        }
        if (is_chan && kind == 1)
            cr_assert_lt(ctx.rp.n, 320 + 1);
        uint64_t n1 = ctx.rp.n;
        free(ctx.rp.seen);
        /* idempotent: nothing more to cut, the same replay */
        cr_assert_eq(recover(scratch, 0, &ctx, 400, &out), 0);
        cr_assert_eq(ctx.cuts.n, 0, "round %d: second recovery cut again", round);
        cr_assert_eq(ctx.rp.n, n1);
        free(ctx.rp.seen);
        remove_dir(scratch);
    }
    remove_dir(dir);
    leak_check();
}

/* ---- tools/urt-wal ------------------------------------------------------------------ */

static int run_tool(const char *args, char *out, size_t len)
{
    const char *bin = getenv("URT_WAL_BIN");
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", bin, args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(wal, urt_wal_tool, .timeout = 60)
{
    if (!getenv("URT_WAL_BIN"))
        cr_skip_test("URT_WAL_BIN not set (run through meson test)");
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 10);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    static char out[1 << 16];
    char args[4300];
    snprintf(args, sizeof(args), "list %s", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "channel ch-") && strstr(out, "durable marker"), "%s", out);
    snprintf(args, sizeof(args), "verify %s", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 0, "%s", out);
    snprintf(args, sizeof(args), "dump %s --hex 4", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "# 80 records"), "%s", out);
    /* damage a channel: verify reports the cut (exit 1) without cutting */
    DIR *d = opendir(dir);
    struct dirent *e;
    char victim[4300] = "";
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ch-", 3) && !victim[0])
            snprintf(victim, sizeof(victim), "%s/%.60s", dir, e->d_name);
    closedir(d);
    int fd = open(victim, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, 80), 1);
    b ^= 0x10;
    cr_assert_eq(pwrite(fd, &b, 1, 80), 1);
    close(fd);
    snprintf(args, sizeof(args), "cuts %s", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 1, "%s", out);
    cr_assert(strstr(out, "cut ch-") && strstr(out, "[corrupt]"), "%s", out);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 1, "dry run must not cut: %s", out);
    snprintf(args, sizeof(args), "recover %s", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 1, "%s", out);
    snprintf(args, sizeof(args), "verify %s", dir);
    cr_assert_eq(run_tool(args, out, sizeof(out)), 0, "after recovery: %s", out);
    char note[4300];
    snprintf(note, sizeof(note), "%s/cuts.log", dir);
    cr_assert_gt(file_size(note), 0, "recovery left no note of its cut");
    cr_assert_eq(run_tool("list /nonexistent/dir", out, sizeof(out)), 2);
    cr_assert(strstr(out, "does not exist"), "%s", out);
    remove_dir(dir);
    leak_check();
}

/* A crash can tear the record written after durable ones, header included
 * (its epoch field still zero): that tail is cut, and the durable records
 * before it are all replayed (the torn header must not lower the marker). */
Test(wal, torn_header_after_durable_records_keeps_them, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 1, 0);
    for (uint64_t id = 0; id < 10; id++)
        cr_assert_eq(commit_wait(rt, id, 100, URT_COMMIT_STORED), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    char path[4300];
    chan_file_path(dir, path, sizeof(path));
    uint64_t size = file_size(path);
    uint8_t *b = malloc(size);
    int fd = open(path, O_RDWR);
    cr_assert_eq(pread(fd, b, size, 0), (ssize_t)size);
    struct wal_scan_result r;
    wal_scan(b, size, NULL, NULL, &r);
    /* a torn record: length and type written, the rest (epoch, crc) not */
    uint8_t torn[64];
    memset(torn, 0, sizeof(torn));
    uint32_t len = 20;
    uint16_t type = WAL_REC_COMMIT;
    memcpy(torn, &len, 4);
    memcpy(torn + 4, &type, 2);
    cr_assert_eq(pwrite(fd, torn, sizeof(torn), (off_t)r.valid_end), (ssize_t)sizeof(torn));
    close(fd);
    free(b);
    struct rec_ctx ctx;
    struct urt_log_recovery out;
    cr_assert_eq(recover(dir, 0, &ctx, 20, &out), 0);
    cr_assert_eq(ctx.cuts.n, 1);
    cr_assert_eq(ctx.cuts.offs[0], r.valid_end);
    cr_assert_eq(ctx.rp.n, 10, "durable records lost behind a torn header: %llu", (unsigned long long)ctx.rp.n);
    cr_assert_eq(out.replay_marker, out.durable_marker);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

/* Single-flush chains write slots with a condition ("valid while channel X
 * holds records up to offset E"). If the device kept the slot but lost the
 * log bytes (simulated: the last record cut off at a record boundary), the
 * slot is ignored and the marker falls back to the previous one; the lost
 * commit's epoch is not replayed, the others are; twice the same result. */
Test(wal, epoch_slot_condition_guards_lost_log_bytes, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 1, 64); /* preallocated: single-flush chains */
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    if (st.sync_mode == URT_LOG_SYNC_STRICT) { /* a file system the chained modes are not trusted on */
        rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        remove_dir(dir);
        cr_skip_test("the log is strict here (%s): the slot condition guards the chained modes only", st.fs);
    }
    for (uint64_t id = 0; id < 10; id++)
        cr_assert_eq(commit_wait(rt, id, 100, URT_COMMIT_STORED), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct rec_ctx ctx;
    struct urt_log_recovery before, after, again;
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &ctx, 20, &before), 0);
    cr_assert_eq(ctx.rp.n, 10);
    free(ctx.rp.seen);
    char path[4300];
    chan_file_path(dir, path, sizeof(path));
    uint64_t size = file_size(path);
    uint8_t *b = malloc(size);
    int fd = open(path, O_RDWR);
    cr_assert_eq(pread(fd, b, size, 0), (ssize_t)size);
    struct wal_scan_result r;
    wal_scan(b, size, NULL, NULL, &r);
    /* the offset of the last record: walk again */
    uint64_t off = 0, last = 0;
    while (off < r.valid_end) {
        uint32_t len;
        memcpy(&len, b + off, 4);
        last = off;
        off += wal_rec_size(len);
    }
    cr_assert_eq(ftruncate(fd, (off_t)last), 0);
    close(fd);
    free(b);
    cr_assert_eq(recover(dir, 0, &ctx, 20, &after), 0);
    cr_assert_lt(after.durable_marker, before.durable_marker, "the slot of the lost write still counted");
    cr_assert_eq(ctx.rp.n, 9);
    cr_assert_eq(ctx.rp.seen[9], 0);
    cr_assert_eq(ctx.rp.bad, 0);
    free(ctx.rp.seen);
    cr_assert_eq(recover(dir, 0, &ctx, 20, &again), 0);
    cr_assert_eq(again.durable_marker, after.durable_marker);
    cr_assert_eq(ctx.rp.n, 9);
    cr_assert_eq(ctx.cuts.n, 0);
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

/* Lifecycle rule 3: a commit still waiting when the runtime is destroyed in
 * cancel mode gets its callback exactly once (0 if it became durable,
 * -ECANCELED otherwise); none is lost, none runs twice. */
static _Atomic int cancel_calls, cancel_ok, cancel_cancelled, cancel_other;
static void cancel_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c, (void)arg;
    atomic_fetch_add(&cancel_calls, 1);
    if (status == 0)
        atomic_fetch_add(&cancel_ok, 1);
    else if (status == -ECANCELED)
        atomic_fetch_add(&cancel_cancelled, 1);
    else
        atomic_fetch_add(&cancel_other, 1);
}

Test(wal, destroy_cancel_answers_every_commit_once, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    enum { N = 400 };
    static struct urt_commit c[N];
    static uint8_t rec[64];
    int accepted = 0;
    for (int i = 0; i < N; i++)
        if (urt_log_commit(rt, &c[i], (uint64_t)i, rec, sizeof(rec),
                           i % 4 ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE, cancel_cb, NULL) == 0)
            accepted++;
    cr_assert_eq(accepted, N);
    int r = urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
    cr_assert_geq(r, 0, "%s", urt_last_error());
    cr_assert_eq(atomic_load(&cancel_calls), N, "%d callbacks for %d commits", atomic_load(&cancel_calls), N);
    cr_assert_eq(atomic_load(&cancel_other), 0);
    remove_dir(dir);
    leak_check();
}

/* Issue 20 point 3: a later unconditional slot must not vouch for an epoch
 * whose log bytes an earlier conditional slot relied on and that are gone.
 * Forged epoch file: slot A (marker a, condition: channel 0 valid beyond its
 * end: fails), slot B (marker a + 1, no condition). Recovery believes
 * neither, reports both as broken, and replays nothing above the marker it
 * keeps (the previous, unconditional one). */
Test(wal, epoch_slot_conditions_are_cumulative, .timeout = 60)
{
    char *dir = make_dir();
    urt_runtime *rt = log_rt(dir, 2, 0);
    run_task_clients(rt, URT_COMMIT_STORED, 0, 20);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct rec_ctx ctx;
    struct urt_log_recovery before, after;
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &ctx, 1000, &before), 0);
    free(ctx.rp.seen);
    cr_assert_geq(before.durable_marker, 2);
    uint64_t base = before.durable_marker - 1;
    uint8_t slots[3 * EPOCH_SLOT_SIZE];
    struct wal_epoch_slot s0 = {.marker = base};                                 /* holds: no condition */
    struct wal_epoch_slot a = {.marker = base + 1, .gen = before.max_gen, .worker = 0, .end = 1ull << 40};
    struct wal_epoch_slot b = {.marker = base + 2};                              /* no condition */
    wal_epoch_slot_encode(slots, &s0);
    wal_epoch_slot_encode(slots + EPOCH_SLOT_SIZE, &a);
    wal_epoch_slot_encode(slots + 2 * EPOCH_SLOT_SIZE, &b);
    char path[4200];
    snprintf(path, sizeof(path), "%s/epochs", dir);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    uint8_t zero[EPOCH_SLOT_SIZE] = {0};
    for (uint32_t i = 0; i < EPOCH_SLOTS; i++)
        cr_assert_eq(pwrite(fd, zero, sizeof(zero), (off_t)i * EPOCH_SLOT_SIZE), (ssize_t)sizeof(zero));
    cr_assert_eq(pwrite(fd, slots, sizeof(slots), 0), (ssize_t)sizeof(slots));
    close(fd);
    cr_assert_eq(recover(dir, URT_LOG_RECOVER_DRY_RUN, &ctx, 1000, &after), 0);
    cr_assert_eq(after.durable_marker, base, "marker %llu: a slot after a broken condition was believed",
                 (unsigned long long)after.durable_marker);
    cr_assert_eq(after.broken_slots, 2);
    cr_assert_leq(ctx.rp.last_epoch, base, "a record above the believed marker was replayed");
    free(ctx.rp.seen);
    remove_dir(dir);
    leak_check();
}

/* log_sync: what auto chooses where, what is forced, and that
 * log_prealloc_kb=0 never chains (docs/durability.md); on the portable
 * backend (no io_uring) every choice is strict. */
static bool on_portable; /* set by sync_mode_of */
/* the portable backend: single_flush becomes strict, single_write and strict stay */
#define CHOSEN(mode) (on_portable && (mode) == URT_LOG_SYNC_SINGLE_FLUSH ? URT_LOG_SYNC_STRICT : (mode))

static uint32_t sync_mode_of(const char *dir, uint32_t prealloc_kb, const char *log_sync)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = prealloc_kb;
    if (log_sync)
        cr_assert_eq(urt_config_set(&cfg, "log_sync", log_sync), 0);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    on_portable = urt_runtime_backend(rt, NULL) == URT_BACKEND_PORTABLE;
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_eq(commit_wait(rt, 1, 10, URT_COMMIT_STORED), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    return st.sync_mode;
}

Test(wal, log_sync_choice, .timeout = 60)
{
    char *dir = make_dir();
    struct statfs sf;
    cr_assert_eq(statfs(dir, &sf), 0);
    bool ext4_or_xfs = sf.f_type == 0xEF53 || sf.f_type == 0x58465342;
    cr_assert_eq(sync_mode_of(dir, 0, NULL), URT_LOG_SYNC_STRICT, "prealloc 0 must never chain");
    cr_assert_eq(sync_mode_of(dir, 64, "strict"), URT_LOG_SYNC_STRICT);
    cr_assert_eq(sync_mode_of(dir, 64, "single_flush"), CHOSEN(URT_LOG_SYNC_SINGLE_FLUSH));
    if (ext4_or_xfs) {
        cr_assert_eq(sync_mode_of(dir, 64, NULL), CHOSEN(URT_LOG_SYNC_SINGLE_WRITE), "auto on ext4/xfs");
        cr_assert_eq(sync_mode_of(dir, 64, "single_write"), CHOSEN(URT_LOG_SYNC_SINGLE_WRITE));
    }
    char note[4200], buf[4096] = "";
    snprintf(note, sizeof(note), "%s/sessions.log", dir);
    FILE *f = fopen(note, "r");
    cr_assert_not_null(f, "no sessions.log");
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    if (on_portable) {
        cr_assert_not_null(strstr(buf, "log_sync strict (the portable backend (no io_uring): strict, not "
                                       "single_flush) backend portable"),
                           "sessions.log: %s", buf);
    } else {
        cr_assert_not_null(strstr(buf, "log_sync strict (log_prealloc_kb=0"), "sessions.log: %s", buf);
        cr_assert_not_null(strstr(buf, "log_sync single_flush (log_sync=single_flush"), "sessions.log: %s", buf);
        cr_assert_not_null(strstr(buf, "backend io_uring (backend=auto: io_uring is available)"), "sessions.log: %s",
                           buf);
    }
    remove_dir(dir);
    /* tmpfs (or any file system not known to keep the chain's promise): strict */
    if (statfs("/dev/shm", &sf) == 0 && sf.f_type == 0x01021994) {
        char shm[] = "/dev/shm/urt-wal-test.XXXXXX";
        cr_assert_not_null(mkdtemp(shm));
        cr_assert_eq(sync_mode_of(shm, 64, NULL), URT_LOG_SYNC_STRICT, "auto on tmpfs");
        char *p = strdup(shm);
        remove_dir(p);
    }
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.log_sync = URT_LOG_SYNC_SINGLE_FLUSH;
    cfg.log_prealloc_kb = 0;
    cr_assert_eq(urt_config_validate(&cfg, NULL, 0), -EINVAL);
    cr_assert_not_null(strstr(urt_last_error(), "log_sync"));
    cfg.log_sync = URT_LOG_SYNC_SINGLE_WRITE;
    cr_assert_eq(urt_config_validate(&cfg, NULL, 0), -EINVAL);
    cr_assert_not_null(strstr(urt_last_error(), "single_write"));
    leak_check();
}

/* A forced single_flush or single_write is taken as asked and says so; it
 * asks for FS_NOCOW_FL on btrfs only (wal_sync.c). Where it asks and the
 * flag does not take (here: a pipe, whose ioctl fails), the log is strict
 * and says why; elsewhere the channel file is never touched. */
Test(wal, forced_sync_asks_nocow_only_on_btrfs, .timeout = 30)
{
    char *dir = make_dir();
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(dirfd, 0);
    struct statfs sf;
    cr_assert_eq(fstatfs(dirfd, &sf), 0);
    bool btrfs = sf.f_type == 0x9123683E;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    static const enum urt_log_sync modes[] = {URT_LOG_SYNC_SINGLE_FLUSH, URT_LOG_SYNC_SINGLE_WRITE};
    for (int m = 0; m < 2; m++) {
        struct urt_config cfg;
        urt_config_init(&cfg);
        cfg.log_sync = modes[m];
        cfg.log_prealloc_kb = 64;
        struct wal_sync_choice c;
        cr_assert_eq(wal_sync_choose(dirfd, &cfg, &c), 0);
        cr_assert_eq(c.mode, modes[m]);
        cr_assert_eq(c.need_nocow, btrfs, "fs %s: need_nocow %d", c.fs, c.need_nocow);
        char want[128];
        snprintf(want, sizeof(want), "log_sync=%s (forced, on %s)", wal_sync_name(modes[m]), c.fs);
        cr_assert_str_eq(c.why, want);
        wal_sync_nocow(&c, p[1]);
        if (!btrfs) {
            cr_assert_eq(c.mode, modes[m], "FS_NOCOW_FL was tried on %s: %s", c.fs, c.why);
            cr_assert_str_eq(c.why, want);
            c.need_nocow = true; /* as on btrfs */
            wal_sync_nocow(&c, p[1]);
        }
        cr_assert_eq(c.mode, URT_LOG_SYNC_STRICT, "a file without FS_NOCOW_FL kept %s", wal_sync_name(c.mode));
        cr_assert_not_null(strstr(c.why, "FS_NOCOW_FL could not be set"), "why: %s", c.why);
    }
    close(p[0]);
    close(p[1]);
    close(dirfd);
    remove_dir(dir);
}

/* A clean destroy makes what was acknowledged before it durable, whatever its
 * response: an AVAILABLE or ACCEPTED commit answered just before
 * urt_runtime_destroy (DRAIN or CANCEL) is replayed by the next recovery
 * (urt/log.h, "Destroy"). Every mode of log_sync, with and without
 * preallocation. */
static void destroy_right_after(const char *sync, uint32_t prealloc_kb, enum urt_commit_response resp)
{
    for (int round = 0; round < 4; round++) {
        char *dir = make_dir();
        struct urt_config cfg;
        test_config(&cfg, 2);
        cfg.log_dir = dir;
        cfg.log_prealloc_kb = prealloc_kb;
        cfg.epoch_duration_us = 100000; /* no epoch timer flush helps (a DRAIN waits for it once) */
        cr_assert_eq(urt_config_set(&cfg, "log_sync", sync), 0, "%s", urt_last_error());
        urt_runtime *rt = rt_create_or_skip(&cfg);
        for (uint64_t id = 0; id < 8; id++)
            cr_assert_eq(commit_wait(rt, id, 100, resp), 0);
        rt_destroy_clean(rt, round & 1 ? URT_SHUTDOWN_CANCEL : URT_SHUTDOWN_DRAIN, round & 1 ? -1 : 0);
        struct rec_ctx ctx;
        struct urt_log_recovery out;
        cr_assert_eq(recover(dir, 0, &ctx, 16, &out), 0, "%s", urt_last_error());
        cr_assert_eq(ctx.rp.n, 8, "log_sync %s, prealloc %u, response %d, round %d: %llu of 8 commits replayed after a clean destroy, durable marker %llu",
                     sync, prealloc_kb, (int)resp, round, (unsigned long long)ctx.rp.n, (unsigned long long)out.durable_marker);
        free(ctx.rp.seen);
        remove_dir(dir);
    }
}

Test(wal, clean_destroy_keeps_available_and_accepted_commits, .timeout = 120)
{
    static const char *modes[] = {"strict", "single_flush", "single_write", "auto"};
    for (int m = 0; m < 4; m++)
        for (int p = 0; p < 2; p++) {
            if (p == 0 && strcmp(modes[m], "strict") && strcmp(modes[m], "auto"))
                continue; /* the preallocated modes refuse log_prealloc_kb = 0 */
            destroy_right_after(modes[m], p ? 64 : 0, URT_COMMIT_AVAILABLE);
            destroy_right_after(modes[m], p ? 64 : 0, URT_COMMIT_ACCEPTED);
        }
}
