/*
 * tools/urt-load/wl_batch.c — batch_load (docs/benchmarks.md 3.12): a bulk
 * load through urt's batch executor, one durable transaction per block.
 *
 * Files (not timed, once per process): BL_FILES CSV files of BL_RECORDS lines
 * `key,value\n` in mkdtemp("$DB_DIR/urt-batch_load.XXXXXX")/csv, written and
 * fdatasync'd: file f, line j -> key = f * 2^32 + j (decimal), value = 4
 * successive xorshift64 (13,7,17) outputs from the state key + 1, 16 lower-case
 * hex digits each. The environment may change the counts (not the spec's
 * run): BL_FILES=n keeps the total at 2,097,152 records (BL_RECORDS = 2^21 / n)
 * unless BL_RECORDS is set too — `BL_FILES=64` is the memory comparison with
 * many files.
 *
 * Store: per iteration a fresh runtime (WORKERS workers) with a fresh log
 * directory (log_dir = .../log-<iteration>), created before t0, and a fresh
 * in-memory table (kvtable.h). The process's own runtime (urt-load's) idles.
 *
 * Execution: urt_batch_start over the files: CSV, 1 MiB blocks, 2 files and 2
 * blocks per file in flight, URT_BATCH_BLOCK_TX with URT_COMMIT_STORED. A
 * statement (one per line, a job of its own, run on its block's transaction's
 * lane) parses the key, logs the record (key as big-endian u64 + the 64 value
 * characters: 72 bytes, urt_tx_log) and adds (key, value) to its block's write
 * set; block_done applies a committed block's write set to the table (the
 * records are durable by then: like RocksDB, which inserts a write group into
 * its memtable after the WAL sync).
 *
 * Timing: t0 on the external thread right before urt_batch_start, t1 in the
 * batch's callback (every block durable and applied). records_per_s = records
 * / (t1 - t0); peak_rss_mib = VmHWM after t1 - VmRSS at t0 (malloc_trim(0)
 * and clear_refs 5 just before t0, so each iteration's peak is its own).
 * BL_WARMUP + BL_ITERS iterations, medians.
 *
 * Check: after the last iteration 1,024 keys (every 2,048th record) read back
 * from the table with their values; then its runtime is destroyed and the log
 * recovered (urt_log_recover, not timed): every record replayed once, with its
 * value, and nothing else.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtable.h"
#include "measure.h"
#include "workloads.h"

#define BL_FILES 8
#define BL_RECORDS 262144
#define BL_BLOCK_BYTES (1u << 20)
#define BL_MAX_FILES 2
#define BL_MAX_BLOCKS 2
#define BL_WARMUP 1
#define BL_ITERS 3
#define BL_CHECK_EVERY 2048
#define BL_REC 72 /* logged record: BE u64 key + 64 value characters */

static const struct wl_setting BL_FILES_S = {"BL_FILES", BL_FILES, 1, 100000};
static const struct wl_setting BL_RECORDS_S = {"BL_RECORDS", BL_RECORDS, 1, 1ull << 40};
static const struct wl_setting *const BL_SETTINGS[] = {&BL_FILES_S, &BL_RECORDS_S, NULL};

static const char *const WL = "batch_load";

/* A block's write set: (key, value in the block's buffer, alive until
 * block_done returns). */
struct write_set {
    struct kvt_item *v;
    size_t n, cap;
};

struct bl {
    unsigned workers;
    uint32_t files;
    uint64_t records; /* per file */
    char base[4096];
    char **paths;
    uint64_t csv_bytes;
    struct kvtable *table;
    _Atomic int failed;
    _Atomic uint64_t t1;
    _Atomic uint64_t applied;
    struct measure_event ev;
};

static struct bl BL;

/* ---- the files ------------------------------------------------------------------------ */

static inline uint64_t bl_key(uint32_t f, uint64_t j)
{
    return ((uint64_t)f << 32) + j;
}

static void bl_value(uint64_t key, char *out)
{
    static const char HEX[] = "0123456789abcdef";
    uint64_t s = key + 1;
    for (int k = 0; k < 4; k++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        for (int d = 0; d < 16; d++)
            out[k * 16 + d] = HEX[(s >> (60 - 4 * d)) & 15];
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_csv(const char *path, uint32_t f, uint64_t records, uint64_t *size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    size_t cap = 4u << 20, n = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -ENOMEM;
    *size = 0;
    for (uint64_t j = 0; j < records && !rc; j++) {
        if (n + 128 > cap) {
            rc = write_all(fd, buf, n);
            *size += n;
            n = 0;
        }
        uint64_t key = bl_key(f, j);
        n += (size_t)sprintf(buf + n, "%llu,", (unsigned long long)key);
        bl_value(key, buf + n);
        n += KVT_VALUE;
        buf[n++] = '\n';
    }
    if (!rc) {
        rc = write_all(fd, buf, n);
        *size += n;
    }
    if (!rc && fdatasync(fd) != 0)
        rc = -errno;
    close(fd);
    free(buf);
    return rc;
}

static int make_files(struct bl *bl)
{
    char csv[4200];
    snprintf(csv, sizeof(csv), "%s/csv", bl->base);
    if (mkdir(csv, 0755) != 0)
        return -errno;
    bl->paths = calloc(bl->files, sizeof(*bl->paths));
    if (!bl->paths)
        return -ENOMEM;
    for (uint32_t f = 0; f < bl->files; f++) {
        uint64_t size = 0;
        if (asprintf(&bl->paths[f], "%s/%u.csv", csv, f) < 0)
            return -ENOMEM;
        int rc = write_csv(bl->paths[f], f, bl->records, &size);
        if (rc)
            return rc;
        bl->csv_bytes += size;
    }
    return 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[8192];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno == EISDIR)
            remove_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- the statement and the blocks ------------------------------------------------------ */

static int parse_key(const struct urt_batch_field *f, uint64_t *key)
{
    if (f->len == 0 || f->len > 20)
        return -1;
    uint64_t k = 0;
    for (size_t i = 0; i < f->len; i++) {
        unsigned d = (unsigned)(f->data[i] - '0');
        if (d > 9)
            return -1;
        k = k * 10 + d;
    }
    *key = k;
    return 0;
}

static int statement(struct urt_batch_stmt *s, void *arg)
{
    (void)arg;
    uint64_t key;
    if (parse_key(&s->fields[0], &key) != 0 || s->fields[1].len != KVT_VALUE)
        return urt_batch_stmt_error(s, -EBADMSG, "not a key,value line of batch_load");
    unsigned char rec[BL_REC];
    for (int i = 0; i < 8; i++)
        rec[i] = (unsigned char)(key >> (56 - 8 * i));
    memcpy(rec + 8, s->fields[1].data, KVT_VALUE);
    int rc = urt_tx_log(s->tx, rec, BL_REC);
    if (rc)
        return urt_batch_stmt_error(s, rc, "urt_tx_log: %s", urt_last_error());
    struct write_set *ws = s->block->user;
    if (ws->n == ws->cap) {
        size_t cap = ws->cap * 2;
        struct kvt_item *v = realloc(ws->v, cap * sizeof(*v));
        if (!v)
            return urt_batch_stmt_error(s, -ENOMEM, "out of memory for the write set");
        ws->v = v;
        ws->cap = cap;
    }
    ws->v[ws->n++] = (struct kvt_item){key, s->fields[1].data};
    return 0;
}

static int block_begin(struct urt_batch_block *blk, void *arg)
{
    (void)arg;
    struct write_set *ws = malloc(sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    ws->cap = 16384;
    ws->n = 0;
    ws->v = malloc(ws->cap * sizeof(*ws->v));
    if (!ws->v) {
        free(ws);
        return -ENOMEM;
    }
    blk->user = ws;
    return 0;
}

/* A committed block's records are durable: into the table. */
static void block_done(struct urt_batch_block *blk, int status, void *arg)
{
    struct bl *bl = arg;
    struct write_set *ws = blk->user;
    if (!ws)
        return;
    if (status == 0 && kvt_put_many(bl->table, ws->v, ws->n) != 0)
        atomic_store(&bl->failed, 1);
    else if (status == 0)
        atomic_fetch_add_explicit(&bl->applied, ws->n, memory_order_relaxed);
    free(ws->v);
    free(ws);
    blk->user = NULL;
}

static void batch_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct bl *bl = arg;
    (void)b;
    atomic_store_explicit(&bl->t1, urt_now_ns(), memory_order_relaxed);
    if (status) {
        fprintf(stderr, "# ERROR %s %s: the batch failed: %s\n", MEASURE_PEER, WL, message);
        atomic_store(&bl->failed, 1);
    }
    measure_event_set(&bl->ev);
}

/* ---- memory --------------------------------------------------------------------------- */

static long status_kb(const char *field)
{
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp)
        return -1;
    char line[256];
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), fp))
        if (!strncmp(line, field, fl) && line[fl] == ':') {
            v = atol(line + fl + 1);
            break;
        }
    fclose(fp);
    return v;
}

static bool reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

/* ---- checks ------------------------------------------------------------------------------ */

static int check_table(struct bl *bl)
{
    uint64_t total = (uint64_t)bl->files * bl->records;
    int bad = 0, checked = 0;
    for (uint64_t r = 0; r < total; r += BL_CHECK_EVERY, checked++) {
        uint64_t key = bl_key((uint32_t)(r / bl->records), r % bl->records);
        char want[KVT_VALUE], got[KVT_VALUE];
        bl_value(key, want);
        if (!kvt_get(bl->table, key, got) || memcmp(got, want, KVT_VALUE))
            if (bad++ < 5)
                fprintf(stderr, "# ERROR %s %s: key %llu does not read back\n", MEASURE_PEER, WL,
                        (unsigned long long)key);
    }
    if (kvt_count(bl->table) != total) {
        fprintf(stderr, "# ERROR %s %s: the table holds %llu keys, want %llu\n", MEASURE_PEER, WL,
                (unsigned long long)kvt_count(bl->table), (unsigned long long)total);
        bad++;
    }
    if (!bad)
        measure_note(WL, "check: %d keys (every %dth record) read back from the table", checked, BL_CHECK_EVERY);
    return bad ? 1 : 0;
}

struct replay {
    struct bl *bl;
    uint8_t *seen; /* one bit per record */
    uint64_t n, bad, dup;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    const unsigned char *p = r->payload;
    uint64_t key = 0;
    for (int i = 0; i < 8 && r->len == BL_REC; i++)
        key = key << 8 | p[i];
    uint64_t f = key >> 32, j = key & 0xffffffffu;
    char want[KVT_VALUE];
    bl_value(key, want);
    if (r->len != BL_REC || f >= rp->bl->files || j >= rp->bl->records || memcmp(p + 8, want, KVT_VALUE)) {
        rp->bad++;
        return 0;
    }
    uint64_t bit = f * rp->bl->records + j;
    if (rp->seen[bit / 8] & (1u << (bit % 8)))
        rp->dup++;
    rp->seen[bit / 8] |= (uint8_t)(1u << (bit % 8));
    rp->n++;
    return 0;
}

static int check_log(struct bl *bl, const char *dir)
{
    uint64_t total = (uint64_t)bl->files * bl->records;
    struct replay rp = {.bl = bl, .seen = calloc(total / 8 + 1, 1)};
    if (!rp.seen)
        return 1;
    struct urt_log_recover_ops ops = {.record = on_record};
    struct urt_log_recovery out;
    uint64_t t = urt_now_ns();
    int rc = urt_log_recover(dir, 0, &ops, &rp, &out);
    free(rp.seen);
    if (rc || rp.n != total || rp.bad || rp.dup) {
        fprintf(stderr, "# ERROR %s %s: recovery (%d: %s) replayed %llu records (%llu bad, %llu twice), want %llu\n",
                MEASURE_PEER, WL, rc, rc ? urt_last_error() : "ok", (unsigned long long)rp.n,
                (unsigned long long)rp.bad, (unsigned long long)rp.dup, (unsigned long long)total);
        return 1;
    }
    measure_note(WL, "check: recovery replayed %llu records (every one once, with its value) in %.0f ms",
                 (unsigned long long)rp.n, (double)(urt_now_ns() - t) / 1e6);
    return 0;
}

/* ---- one iteration ------------------------------------------------------------------------ */

struct it_result {
    double secs, rate, grow_mib, rss0_mib, cpu_pct;
    uint64_t tasks_w0, tasks_w1;
    struct urt_batch_stats st;
    struct urt_log_stats log;
};

static urt_runtime *iteration_runtime(struct bl *bl, const char *dir)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    if (urt_config_from_env(&cfg) < 0)
        return NULL;
    cfg.workers = bl->workers;
    cfg.log_dir = dir;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "# ERROR %s %s: urt_runtime_create(%s): %s\n", MEASURE_PEER, WL, dir, urt_last_error());
        return NULL;
    }
    return rt;
}

static int run_batch(struct bl *bl, urt_runtime *rt, struct it_result *res)
{
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = (const char *const *)bl->paths;
    o.n_files = bl->files;
    o.fields = 2;
    o.block_bytes = BL_BLOCK_BYTES;
    o.max_concurrent_files = BL_MAX_FILES;
    o.max_concurrent_blocks_per_file = BL_MAX_BLOCKS;
    o.flags = URT_BATCH_BLOCK_TX;
    o.response = URT_COMMIT_STORED;
    o.statement = statement;
    o.block_begin = block_begin;
    o.block_done = block_done;
    o.done = batch_done;
    o.arg = bl;
    struct urt_stats *s0 = urt_stats_snapshot(rt); /* per-worker counters (stderr), before the RSS baseline */
    malloc_trim(0);
    bool hwm_ok = reset_hwm();
    long rss0 = status_kb("VmRSS");
    uint64_t cpu0 = measure_cpu_ns();
    uint64_t t0 = urt_now_ns();
    urt_batch *b;
    if (urt_batch_start(rt, &o, &b) != 0) {
        fprintf(stderr, "# ERROR %s %s: urt_batch_start: %s\n", MEASURE_PEER, WL, urt_last_error());
        return 1;
    }
    measure_event_wait(&bl->ev);
    long hwm1 = status_kb("VmHWM");
    uint64_t cpu1 = measure_cpu_ns();
    uint64_t t1 = atomic_load_explicit(&bl->t1, memory_order_relaxed);
    struct urt_stats *s1 = urt_stats_snapshot(rt); /* after the VmHWM read */
    if (s0 && s1 && s1->n_workers >= 2) {
        res->tasks_w0 = s1->workers[0].tasks_run - s0->workers[0].tasks_run;
        res->tasks_w1 = s1->workers[1].tasks_run - s0->workers[1].tasks_run;
    }
    urt_stats_free(s0);
    urt_stats_free(s1);
    urt_batch_stats(b, &res->st);
    urt_batch_release(b);
    urt_log_stats(rt, &res->log);
    res->secs = (double)(t1 - t0) * 1e-9;
    res->rate = (double)bl->files * (double)bl->records / res->secs;
    res->grow_mib = (double)(hwm1 - rss0) / 1024.0;
    res->rss0_mib = (double)rss0 / 1024.0;
    res->cpu_pct = 100.0 * (double)(cpu1 - cpu0) / (double)(t1 - t0);
    if (!hwm_ok)
        measure_note(WL, "WARNING: /proc/self/clear_refs failed: VmHWM not reset per iteration");
    return atomic_load(&bl->failed) ? 1 : 0;
}

static void note_iteration(int it, const struct it_result *r)
{
    measure_note(WL,
                 "iteration %d%s: %.3f s, %.0f records/s, peak RSS growth %.1f MiB (VmRSS at t0 %.1f MiB), "
                 "blocks %llu (committed %llu), statements %llu, peak blocks in flight %u, peak block buffers "
                 "%.1f MiB, log: %llu fsyncs, %.1f MiB written, cpu_pct %.1f, tasks run per worker %llu %llu",
                 it, it < BL_WARMUP ? " (warm-up)" : "", r->secs, r->rate, r->grow_mib, r->rss0_mib,
                 (unsigned long long)r->st.blocks_done, (unsigned long long)r->st.blocks_committed,
                 (unsigned long long)r->st.statements, r->st.max_blocks_in_flight,
                 (double)r->st.max_buffer_bytes / 1048576.0, (unsigned long long)r->log.fsyncs,
                 (double)r->log.bytes / 1048576.0, r->cpu_pct, (unsigned long long)r->tasks_w0,
                 (unsigned long long)r->tasks_w1);
}

/* One iteration: a fresh runtime on a fresh log directory, a fresh table. */
static int iteration(struct bl *bl, int it, struct it_result *res, bool last)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/log-%d", bl->base, it);
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "# ERROR %s %s: mkdir %s: %s\n", MEASURE_PEER, WL, dir, strerror(errno));
        return 1;
    }
    bl->table = kvt_new();
    urt_runtime *rt = bl->table ? iteration_runtime(bl, dir) : NULL;
    if (!rt)
        return 1;
    measure_sleep_us(IDLE_MS * 1000u);
    int rc = run_batch(bl, rt, res);
    if (!rc && atomic_load(&bl->applied) != (uint64_t)bl->files * bl->records) {
        fprintf(stderr, "# ERROR %s %s: %llu records applied, want %llu\n", MEASURE_PEER, WL,
                (unsigned long long)atomic_load(&bl->applied), (unsigned long long)bl->files * bl->records);
        rc = 1;
    }
    if (!rc)
        note_iteration(it, res);
    if (!rc && last)
        rc = check_table(bl);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    if (!rc && last)
        rc = check_log(bl, dir);
    kvt_free(bl->table);
    bl->table = NULL;
    atomic_store(&bl->applied, 0);
    remove_tree(dir);
    return rc;
}

/* ---- the workload -------------------------------------------------------------------------- */

static int setup(struct bl *bl)
{
    bl->files = (uint32_t)measure_setting(WL, &BL_FILES_S);
    /* lines per file: the records spread over the files unless set */
    bl->records = measure_env_u64(WL, BL_RECORDS_S.name, (uint64_t)BL_FILES * BL_RECORDS / bl->files, BL_RECORDS_S.lo,
                                  BL_RECORDS_S.hi);
    const char *parent = getenv("DB_DIR");
    if (!parent || !*parent)
        parent = "/tmp";
    snprintf(bl->base, sizeof(bl->base), "%s/urt-batch_load.XXXXXX", parent);
    if (!mkdtemp(bl->base)) {
        fprintf(stderr, "# ERROR %s %s: mkdtemp(%s): %s\n", MEASURE_PEER, WL, bl->base, strerror(errno));
        bl->base[0] = 0;
        return 1;
    }
    uint64_t t = urt_now_ns();
    int rc = make_files(bl);
    if (rc) {
        fprintf(stderr, "# ERROR %s %s: writing the CSV files: %s\n", MEASURE_PEER, WL, strerror(-rc));
        return 1;
    }
    measure_note(WL, "%u CSV files of %llu lines, %.1f MiB, written and fdatasync'd in %.0f ms (not timed) under %s",
                 bl->files, (unsigned long long)bl->records, (double)bl->csv_bytes / 1048576.0,
                 (double)(urt_now_ns() - t) / 1e6, bl->base);
    return 0;
}

static int run(urt_runtime *rt, const char *name)
{
    struct bl *bl = &BL;
    (void)name;
    bl->workers = urt_runtime_config(rt)->workers;
    int rc = setup(bl);
    double rates[BL_ITERS], rss[BL_ITERS];
    for (int it = 0; it < BL_WARMUP + BL_ITERS && !rc; it++) {
        struct it_result r = {0};
        rc = iteration(bl, it, &r, it == BL_WARMUP + BL_ITERS - 1);
        if (!rc && it >= BL_WARMUP) {
            rates[it - BL_WARMUP] = r.rate;
            rss[it - BL_WARMUP] = r.grow_mib;
        }
    }
    for (uint32_t f = 0; bl->paths && f < bl->files; f++)
        free(bl->paths[f]);
    free(bl->paths);
    if (bl->base[0])
        remove_tree(bl->base);
    if (rc)
        return 1;
    double mrate = measure_median(rates, BL_ITERS), mrss = measure_median(rss, BL_ITERS);
    printf("%s %s records_per_s %.0f records/s\n", MEASURE_PEER, WL, mrate);
    printf("%s %s peak_rss_mib %.1f MiB\n", MEASURE_PEER, WL, mrss);
    fflush(stdout);
    measure_note(WL, "n=%d records_per_s min=%.0f median=%.0f max=%.0f; peak_rss_mib min=%.1f max=%.1f; %u files x "
                     "%llu records, blocks of %u B, files in flight <= %d, blocks per file in flight <= %d, one "
                     "URT_COMMIT_STORED transaction per block",
                 BL_ITERS, rates[0], mrate, rates[BL_ITERS - 1], rss[0], rss[BL_ITERS - 1], bl->files,
                 (unsigned long long)bl->records, BL_BLOCK_BYTES, BL_MAX_FILES, BL_MAX_BLOCKS);
    return 0;
}

const struct workload WL_BATCH[] = {
    {.name = "batch_load", .summary = "bulk CSV load: batch executor, one durable transaction per 1 MiB block",
     .metrics = {"records_per_s", "peak_rss_mib", NULL}, .run = run, .settings = BL_SETTINGS},
    {0},
};
