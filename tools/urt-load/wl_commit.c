/*
 * tools/urt-load/wl_commit.c — the commit workloads (docs/benchmarks.md 3.9) on
 * urt's write-ahead log: commit_stored_c1, commit_stored_c16,
 * commit_stored_c64 and commit_available_c64 (N in the name; env CLIENTS is
 * what run-peers.sh exports alongside and must agree when set).
 *
 * Clients are TASKS, not threads (the spec allows it for an asynchronous
 * commit): N client state machines on the WORKERS workers, each with one
 * commit outstanding. A client's commit is urt_log_commit() called from a
 * task on a worker (the record goes to that worker's log channel); the next
 * step runs in the commit's callback, on a worker: t_b := now, count it,
 * build the next record (untimed), t_a := now, commit again.
 *   commit_stored:    response URT_COMMIT_STORED: the callback runs once the
 *                     durable marker covers the record (written, covered by a
 *                     completed device flush, marker fdatasync'd into the
 *                     epoch file; tx/wal.c).
 *   commit_available: response URT_COMMIT_AVAILABLE: the callback is queued as
 *                     soon as the record is in the channel's buffer: it
 *                     acknowledges BEFORE the log write(2) (the write follows
 *                     within epoch_duration_us or when the worker goes idle).
 *
 * Record (256 bytes, built before t_a): key = BE u64 client id ‖ BE u64
 * sequence, value = 30 xorshift64 (13,7,17) outputs, native u64s, state
 * seeded (id + 1) * 0x9E3779B97F4A7C15 and carried across records. The tx id
 * is (id << 40) | sequence.
 *
 * Timing: the external thread builds the clients (ready), takes t_s, sets
 * t0 = t_s + 300 ms, t1 = t0 + DURATION_MS, releases the clients (one spawn
 * each). A commit is counted iff t0 <= t_b < t1; a client stops after its
 * first commit with t_b >= t1. fsyncs_per_s: the log's sync counter
 * (urt_log_stats().fsyncs: one per group commit — the channel's fdatasync,
 * or, in a single-flush chain, the epoch file's fdatasync that covers the
 * group; epoch-file writes are shown on stderr) read at t0 and t1 by the
 * external thread (clock_nanosleep TIMER_ABSTIME).
 *
 * Directory: mkdtemp("$DB_DIR/urt-commit.XXXXXX") (DB_DIR default FIO_DIR,
 * else /tmp) set as log_dir by the configure hook; removed at exit, after
 * the check: the log is recovered (urt_log_recover) after the runtime was
 * destroyed and each client's last acknowledged record must be replayed
 * with the same bytes (# ERROR and exit 1 otherwise).
 *
 * Shared state: struct client is written only by the task running its
 * step (one at a time: a step starts from the previous commit's callback);
 * the external thread reads the results after every client signalled the
 * completion counter (measure.h: its acq_rel count and the event order it).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"
#include "workloads.h"

#define COMMIT_MAX_CLIENTS 4096 /* commit_stored_c<N>: 1 <= N <= this */
#define SPREAD_WORKERS 16       /* answers counted per worker (workers beyond: in the last) */

static const struct wl_setting DURATION_S = {"DURATION_MS", 2000, 1, 3600000};
static const struct wl_setting CLIENTS_S = {"CLIENTS", 16, 1, COMMIT_MAX_CLIENTS};
static const struct wl_setting *const COMMIT_SETTINGS[] = {&DURATION_S, NULL};
static const struct wl_setting *const COMMIT_BARE_SETTINGS[] = {&DURATION_S, &CLIENTS_S, NULL}; /* N from CLIENTS */

#define COMMIT_WARMUP_MS 300
#define REC_SIZE 256

struct client {
    struct urt_commit commit;
    struct urt_task start;
    uint64_t id, seq, xs;
    uint64_t t_a;
    uint64_t *lat;
    size_t n_lat, cap_lat;
    uint64_t last_acked_seq; /* seq + 1 of the last acknowledged record (0: none) */
    uint8_t last_rec[REC_SIZE];
    uint8_t rec[REC_SIZE];
    int error;
    uint64_t on_worker[SPREAD_WORKERS]; /* counted commits whose callback ran on each worker */
};

struct commit_run {
    urt_runtime *rt;
    const char *name;
    enum urt_commit_response response;
    unsigned n;
    uint64_t t0, t1;
    struct client *clients;
    struct measure_done done;
};

static struct commit_run RUN;
static char DIR_PATH[4096];

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static void build_record(struct client *c)
{
    put_be64(c->rec, c->id);
    put_be64(c->rec + 8, c->seq);
    for (int i = 0; i < 30; i++) {
        uint64_t x = c->xs;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c->xs = x;
        memcpy(c->rec + 16 + 8 * i, &x, 8);
    }
}

static void commit_done(struct urt_commit *cm, int status, void *arg);

static void issue(struct client *c)
{
    c->t_a = urt_now_ns();
    int rc = urt_log_commit(RUN.rt, &c->commit, (c->id << 40) | c->seq, c->rec, REC_SIZE, RUN.response,
                            commit_done, c);
    if (rc) {
        c->error = rc;
        measure_done_fail(&RUN.done, RUN.name, "client %llu: urt_log_commit: %s", (unsigned long long)c->id,
                          strerror(-rc));
    }
}

static void commit_done(struct urt_commit *cm, int status, void *arg)
{
    (void)cm;
    struct client *c = arg;
    uint64_t t_b = urt_now_ns();
    if (status) {
        c->error = status;
        measure_done_fail(&RUN.done, RUN.name, "client %llu: commit failed: %s", (unsigned long long)c->id,
                          strerror(-status));
        return;
    }
    memcpy(c->last_rec, c->rec, REC_SIZE);
    c->last_acked_seq = c->seq + 1;
    if (t_b >= RUN.t0 && t_b < RUN.t1) {
        if (c->n_lat == c->cap_lat) {
            size_t cap = c->cap_lat ? c->cap_lat * 2 : 4096;
            uint64_t *p = realloc(c->lat, cap * sizeof(*p));
            if (!p) {
                measure_done_fail(&RUN.done, RUN.name, "out of memory");
                return;
            }
            c->lat = p;
            c->cap_lat = cap;
        }
        c->lat[c->n_lat++] = t_b - c->t_a;
        int w = urt_current_worker(RUN.rt);
        c->on_worker[w < 0 ? 0 : w >= SPREAD_WORKERS ? SPREAD_WORKERS - 1 : w]++;
    }
    if (t_b >= RUN.t1) {
        measure_done_count(&RUN.done);
        return;
    }
    c->seq++;
    build_record(c);
    issue(c);
}

static enum urt_task_result client_start(struct urt_task *t, void *arg)
{
    (void)t;
    issue(arg);
    return URT_TASK_DONE;
}

static void sleep_until(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- the check after the run (at exit, the runtime destroyed) --------------- */

static int check_record(void *arg, const struct urt_log_record *r)
{
    (void)arg;
    uint64_t id = r->tx_id >> 40, seq = r->tx_id & ((1ull << 40) - 1);
    if (id < RUN.n && r->len == REC_SIZE && RUN.clients[id].last_acked_seq == seq + 1 &&
        !memcmp(r->payload, RUN.clients[id].last_rec, REC_SIZE))
        RUN.clients[id].last_acked_seq |= 1ull << 63; /* found */
    return 0;
}

static void remove_dir(void)
{
    DIR *d = opendir(DIR_PATH);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(DIR_PATH);
}

static unsigned long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "RssAnon: %lu", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static void at_exit(void)
{
    if (!DIR_PATH[0])
        return;
    if (RUN.name)
        measure_note(RUN.name, "anonymous memory at exit (runtime destroyed, before the check): %lu KiB",
                     rss_anon_kb());
    int bad = 0;
    if (RUN.clients) {
        struct urt_log_recover_ops ops = {.record = check_record};
        struct urt_log_recovery rec;
        int rc = urt_log_recover(DIR_PATH, 0, &ops, NULL, &rec);
        if (rc) {
            fprintf(stderr, "# ERROR %s %s: recovery: %s\n", MEASURE_PEER, RUN.name, urt_last_error());
            bad = 1;
        }
        for (unsigned i = 0; !rc && i < RUN.n; i++) {
            uint64_t s = RUN.clients[i].last_acked_seq;
            if (s && !(s >> 63)) {
                fprintf(stderr, "# ERROR %s %s: client %u: last acknowledged record (seq %llu) not recovered\n",
                        MEASURE_PEER, RUN.name, i, (unsigned long long)(s - 1));
                bad = 1;
            }
        }
        if (!bad)
            measure_note(RUN.name, "check: recovery replayed %llu records (marker %llu); every client's last "
                                   "acknowledged record is there, byte for byte",
                         (unsigned long long)rec.replayed, (unsigned long long)rec.replay_marker);
    }
    remove_dir();
    if (bad)
        _exit(1);
}

static int configure(struct urt_config *cfg)
{
    const char *base = getenv("DB_DIR");
    if (!base || !*base)
        base = getenv("FIO_DIR");
    if (!base || !*base)
        base = "/tmp";
    if (snprintf(DIR_PATH, sizeof(DIR_PATH), "%s/urt-commit.XXXXXX", base) >= (int)sizeof(DIR_PATH) ||
        !mkdtemp(DIR_PATH)) {
        fprintf(stderr, "urt-load: cannot create a directory under DB_DIR=%s: %s\n", base, strerror(errno));
        DIR_PATH[0] = 0;
        return 1;
    }
    atexit(at_exit);
    cfg->log_dir = DIR_PATH;
    return 0;
}

/* How many clients: the name's _c<N>, else CLIENTS (bare name: a whole
 * number from 1 to COMMIT_MAX_CLIENTS, else exit 2), else 16. With a name
 * that says N, CLIENTS is the harness's list ("1 16 64", passed to every
 * process) or a single number that disagrees, noted and ignored. */
static unsigned client_count(const char *name)
{
    const char *c = strstr(name, "_c");
    if (!c)
        return (unsigned)measure_setting(name, &CLIENTS_S);
    unsigned n = (unsigned)strtoul(c + 2, NULL, 10);
    const char *env = getenv("CLIENTS");
    if (env && *env && !strchr(env, ' ') && strtoull(env, NULL, 10) != n)
        measure_note(name, "CLIENTS=%s ignored: the workload name says %u", env, n);
    return n;
}

static int clients_create(struct commit_run *r)
{
    r->clients = calloc(r->n, sizeof(*r->clients));
    if (!r->clients)
        return 1;
    for (unsigned i = 0; i < r->n; i++) {
        struct client *cl = &r->clients[i];
        cl->id = i;
        cl->xs = (i + 1) * 0x9E3779B97F4A7C15ull;
        build_record(cl);
        urt_task_init(&cl->start, client_start, cl);
    }
    measure_done_reset(&r->done, r->n);
    return 0;
}

/* Every client's latencies in one sorted array (*total of them); NULL: no memory. */
static uint64_t *merged_latencies(const struct commit_run *r, size_t *total)
{
    *total = 0;
    for (unsigned i = 0; i < r->n; i++)
        *total += r->clients[i].n_lat;
    uint64_t *all = malloc((*total ? *total : 1) * sizeof(*all));
    if (!all)
        return NULL;
    size_t k = 0;
    for (unsigned i = 0; i < r->n; i++) {
        if (!r->clients[i].n_lat)
            continue; /* none in the window: lat is still NULL, and memcpy's source must not be */
        memcpy(all + k, r->clients[i].lat, r->clients[i].n_lat * sizeof(*all));
        k += r->clients[i].n_lat;
    }
    qsort(all, *total, sizeof(*all), cmp_u64);
    return all;
}

struct window {
    struct urt_log_stats s0, s1;
    uint64_t cpu0, cpu1;
    double secs;
};

static void report(const struct commit_run *r, const uint64_t *all, size_t total, const struct window *win)
{
    const char *name = r->name;
    uint64_t syncs = win->s1.fsyncs - win->s0.fsyncs;
    bool stored = r->response == URT_COMMIT_STORED;
    printf("%s %s commits_per_s %.0f commits/s\n", MEASURE_PEER, name, (double)total / win->secs);
    if (total) {
        printf("%s %s p50_us %.2f us\n", MEASURE_PEER, name, measure_percentile(all, total, 500) / 1e3);
        printf("%s %s p99_us %.2f us\n", MEASURE_PEER, name, measure_percentile(all, total, 990) / 1e3);
        printf("%s %s p999_us %.2f us\n", MEASURE_PEER, name, measure_percentile(all, total, 999) / 1e3);
    }
    printf("%s %s fsyncs_per_s %.0f fsyncs/s\n", MEASURE_PEER, name, stored ? (double)syncs / win->secs : 0.0);
    if (stored)
        printf("%s %s commits_per_sync %.2f commits\n", MEASURE_PEER, name,
               syncs ? (double)total / (double)syncs : 0.0);
    fflush(stdout);
    unsigned idle = 0;
    for (unsigned i = 0; i < r->n; i++)
        idle += r->clients[i].n_lat == 0;
    if (idle) /* their waits are in no percentile: say so */
        measure_note(name, "%u of %u clients had no commit answered in the window (starved, or one commit "
                     "longer than it)", idle, r->n);
    measure_note(name,
                 "%u client tasks on the workers; window: %zu commits, %llu log fdatasyncs, %llu epoch-file "
                 "writes (each fdatasync'd), %llu log writes, %.1f KiB/sync, cpu_pct %.1f; log_dir %s",
                 r->n, total, (unsigned long long)syncs,
                 (unsigned long long)(win->s1.epoch_writes - win->s0.epoch_writes),
                 (unsigned long long)(win->s1.flushes - win->s0.flushes),
                 syncs ? (double)(win->s1.bytes - win->s0.bytes) / 1024.0 / (double)syncs : 0.0,
                 100.0 * (double)(win->cpu1 - win->cpu0) / (double)(r->t1 - r->t0), DIR_PATH);
}

/* Where the clients' callbacks ran (they commit again from there): the
 * counted commits per worker (issue 12 point 3). */
static void report_spread(const struct commit_run *r)
{
    uint64_t per[SPREAD_WORKERS] = {0};
    for (unsigned i = 0; i < r->n; i++)
        for (int w = 0; w < SPREAD_WORKERS; w++)
            per[w] += r->clients[i].on_worker[w];
    measure_note_spread(r->name, "commits answered per worker", per, SPREAD_WORKERS, true);
}

static int run(urt_runtime *rt, const char *name)
{
    struct commit_run *r = &RUN;
    r->rt = rt;
    r->name = name;
    r->response = strncmp(name, "commit_stored", 13) == 0 ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE;
    r->n = client_count(name);
    uint64_t duration_ms = measure_setting(name, &DURATION_S);
    if (clients_create(r))
        return 1;
    r->t0 = urt_now_ns() + COMMIT_WARMUP_MS * 1000000ull;
    r->t1 = r->t0 + duration_ms * 1000000ull;
    for (unsigned i = 0; i < r->n; i++) {
        int rc = urt_task_submit(rt, &r->clients[i].start, 0);
        if (rc) {
            fprintf(stderr, "# ERROR %s %s: urt_task_submit: %s\n", MEASURE_PEER, name, strerror(-rc));
            return 1;
        }
    }
    struct window win = {.secs = (double)duration_ms / 1000.0};
    sleep_until(r->t0);
    urt_log_stats(rt, &win.s0);
    win.cpu0 = measure_cpu_ns();
    sleep_until(r->t1);
    urt_log_stats(rt, &win.s1);
    win.cpu1 = measure_cpu_ns();
    measure_event_wait(&r->done.event);
    if (atomic_load_explicit(&r->done.failed, memory_order_relaxed))
        return 1;
    size_t total;
    uint64_t *all = merged_latencies(r, &total);
    if (!all)
        return 1;
    report(r, all, total, &win);
    report_spread(r);
    free(all);
    for (unsigned i = 0; i < r->n; i++)
        free(r->clients[i].lat);
    return 0;
}

#define COMMIT_METRICS_STORED {"commits_per_s", "p50_us", "p99_us", "p999_us", "fsyncs_per_s", "commits_per_sync", NULL}
#define COMMIT_METRICS_AVAIL {"commits_per_s", "p50_us", "p99_us", "p999_us", "fsyncs_per_s", NULL}

/* Any N: commit_stored_c<N> / commit_available_c<N>, 1 <= N <= COMMIT_MAX_CLIENTS,
 * and the bare names with N from CLIENTS (default 16). */
const struct workload *commit_workload_for(const char *name)
{
    static const struct workload any[] = {
        {.name = "commit_stored", .summary = "N = CLIENTS (default 16) client tasks, stored commits",
         .metrics = COMMIT_METRICS_STORED, .configure = configure, .run = run,
         .settings = COMMIT_BARE_SETTINGS},
        {.name = "commit_available", .summary = "N = CLIENTS (default 16) client tasks, available commits",
         .metrics = COMMIT_METRICS_AVAIL, .configure = configure, .run = run,
         .settings = COMMIT_BARE_SETTINGS},
    };
    /* with N in the name: CLIENTS is not read (client_count) */
    static const struct workload any_n[] = {
        {.name = "commit_stored_c<N>", .summary = "N client tasks, stored commits",
         .metrics = COMMIT_METRICS_STORED, .configure = configure, .run = run, .settings = COMMIT_SETTINGS},
        {.name = "commit_available_c<N>", .summary = "N client tasks, available commits",
         .metrics = COMMIT_METRICS_AVAIL, .configure = configure, .run = run, .settings = COMMIT_SETTINGS},
    };
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(any[k].name);
        if (strncmp(name, any[k].name, len))
            continue;
        const char *p = name + len;
        if (!*p)
            return &any[k];
        if (p[0] != '_' || p[1] != 'c' || !p[2] || strlen(p + 2) > 5)
            return NULL;
        for (const char *d = p + 2; *d; d++)
            if (*d < '0' || *d > '9')
                return NULL;
        unsigned long n = strtoul(p + 2, NULL, 10);
        return n >= 1 && n <= COMMIT_MAX_CLIENTS && p[2] != '0' ? &any_n[k] : NULL;
    }
    return NULL;
}

const struct workload WL_COMMIT[] = {
    {.name = "commit_stored_c1", .summary = "1 client task, durable (stored) commits of 256-byte records",
     .metrics = COMMIT_METRICS_STORED, .configure = configure, .run = run,
     .settings = COMMIT_SETTINGS},
    {.name = "commit_stored_c16", .summary = "16 client tasks, stored commits (group commit)",
     .metrics = COMMIT_METRICS_STORED, .configure = configure, .run = run,
     .settings = COMMIT_SETTINGS},
    {.name = "commit_stored_c64", .summary = "64 client tasks, stored commits (group commit)",
     .metrics = COMMIT_METRICS_STORED, .configure = configure, .run = run,
     .settings = COMMIT_SETTINGS},
    {.name = "commit_available_c64", .summary = "64 client tasks, available commits (acknowledged before the write)",
     .metrics = COMMIT_METRICS_AVAIL, .configure = configure, .run = run,
     .settings = COMMIT_SETTINGS},
    {0},
};
