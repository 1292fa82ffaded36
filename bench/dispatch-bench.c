/*
 * bench/dispatch-bench.c — urt's side of bench/dispatch-vs-graphile.sh: one
 * process, one dispatcher (urt/dispatch.h), the two measurements the script
 * also makes with graphile-worker (bench/dispatch-vs-graphile/graphile.js)
 * against the same private cluster:
 *
 *   dispatch-bench [options] CONNINFO throughput N
 *       N no-op strands enqueued with one batch enqueue (one statement), the
 *       dispatcher already running (idle); the time from the enqueue call to
 *       the release of the last run (its `done` committed). Then, in the
 *       database: every strand finished, every strand taken exactly once
 *       (try = 1), and the handler ran N times.
 *   dispatch-bench [options] CONNINFO latency RATE N
 *       N strands enqueued one at a time (one enqueue call each, not waiting
 *       for the previous one) at RATE per second; for each, the time from
 *       just before its enqueue call to the start of its handler.
 *
 * Options: --connections N (run connections; the dispatcher opens N + 1 with
 * its control connection), --pool N, --workers N (the runtime's workers),
 * --pipeline N. Prints one line "key value ..." the script parses; exit 1 on
 * an error or a failed check (the line says which).
 *
 * Timestamps are CLOCK_MONOTONIC (urt_now_ns) on both sides of a latency
 * sample, in one process. The handler's per-strand slot is the payload (the
 * sample's index), written once by the handler and read by the main thread
 * after the `done` counter reached N (the release of each run happens after
 * its handler returned, and the metrics counters are read with the
 * dispatcher's own ordering: relaxed — so the main thread also waits for the
 * handler's own release-ordered counter).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include <urt/urt.h>

#define KIND "bench_noop"

static uint64_t *g_t0, *g_lat;
static uint32_t g_n;
static _Atomic uint64_t g_runs;

static void h_noop(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (g_lat) {
        uint64_t now = urt_now_ns();
        unsigned long i = strtoul(s->payload, NULL, 10);
        if (i < g_n && g_lat[i] == 0)
            g_lat[i] = now - g_t0[i];
    }
    atomic_fetch_add_explicit(&g_runs, 1, memory_order_release);
    urt_dispatch_run_done(run, "");
}

struct enq {
    _Atomic int done, status;
    _Atomic uint64_t at;
};

static void enqueued(void *arg, int status, uint32_t count, const char *const *ids)
{
    (void)count;
    (void)ids;
    struct enq *e = arg;
    atomic_store(&e->at, urt_now_ns());
    atomic_store(&e->status, status);
    atomic_store(&e->done, 1);
}

static void sleep_until(uint64_t due)
{
    for (uint64_t now = urt_now_ns(); now < due; now = urt_now_ns()) {
        uint64_t left = due - now;
        if (left > 200000) {
            struct timespec ts = {0, (long)(left - 100000)};
            nanosleep(&ts, NULL);
        }
    }
}

static uint64_t done_count(urt_dispatch *d)
{
    struct urt_dispatch_metrics m;
    urt_dispatch_metrics(d, &m);
    return m.done;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The database's view after a throughput run. */
static int check_db(const char *conninfo, uint32_t n)
{
    PGconn *pg = PQconnectdb(conninfo);
    PGresult *r = PQexec(pg, "SELECT count(*) FILTER (WHERE exitval IS NOT NULL), count(*) FILTER (WHERE try <> 1), "
                             "count(*) FROM urt_strand WHERE kind = '" KIND "'");
    int rc = 1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        long long fin = atoll(PQgetvalue(r, 0, 0)), other = atoll(PQgetvalue(r, 0, 1)), all = atoll(PQgetvalue(r, 0, 2));
        printf(" db_finished %lld db_try_not_1 %lld db_rows %lld", fin, other, all);
        rc = fin == n && other == 0 && all == n ? 0 : 1;
    } else {
        printf(" db_error \"%s\"", PQresultErrorMessage(r));
    }
    PQclear(r);
    PQfinish(pg);
    return rc;
}

static int throughput(urt_dispatch *d, uint32_t n)
{
    struct enq e = {0};
    uint64_t t0 = urt_now_ns();
    if (urt_dispatch_enqueue(d, KIND, "", 0, n, enqueued, &e) < 0) {
        fprintf(stderr, "dispatch-bench: enqueue: %s\n", urt_last_error());
        return 1;
    }
    while (done_count(d) < n) {
        if (atomic_load(&e.done) && atomic_load(&e.status) < 0) {
            fprintf(stderr, "dispatch-bench: the batch enqueue failed: %d\n", atomic_load(&e.status));
            return 1;
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    uint64_t t1 = urt_now_ns();
    double s = (double)(t1 - t0) / 1e9;
    printf("throughput jobs %u enqueue_ms %.1f total_s %.3f jobs_per_s %.0f runs %" PRIu64, n,
           (double)(atomic_load(&e.at) - t0) / 1e6, s, n / s, atomic_load(&g_runs));
    return atomic_load(&g_runs) == n ? 0 : 1;
}

static int latency(urt_dispatch *d, double rate, uint32_t n)
{
    g_n = n;
    g_t0 = calloc(n, sizeof(*g_t0));
    uint64_t *lat = calloc(n, sizeof(*lat));
    if (!g_t0 || !lat)
        return 1;
    g_lat = lat;
    uint64_t start = urt_now_ns() + 1000000, step = (uint64_t)(1e9 / rate);
    char payload[16];
    for (uint32_t i = 0; i < n; i++) {
        sleep_until(start + i * step);
        snprintf(payload, sizeof(payload), "%u", i);
        g_t0[i] = urt_now_ns();
        if (urt_dispatch_enqueue(d, KIND, payload, 0, 1, NULL, NULL) < 0) {
            fprintf(stderr, "dispatch-bench: enqueue %u: %s\n", i, urt_last_error());
            return 1;
        }
    }
    uint64_t end = urt_now_ns() + 300ull * 1000000000;
    while (atomic_load_explicit(&g_runs, memory_order_acquire) < n && urt_now_ns() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&g_runs) < n) {
        printf("latency error only %" PRIu64 " of %u ran within 300 s\n", atomic_load(&g_runs), n);
        return 1;
    }
    qsort(lat, n, sizeof(*lat), cmp_u64);
    printf("latency n %u rate %.0f p50_ms %.3f p99_ms %.3f max_ms %.3f", n, rate, lat[n / 2] / 1e6,
           lat[(size_t)(n * 0.99)] / 1e6, lat[n - 1] / 1e6);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: dispatch-bench [--connections N] [--pool N] [--workers N] [--pipeline N] CONNINFO "
                    "throughput N | latency RATE N\n");
    return 2;
}

int main(int argc, char **argv)
{
    uint32_t conns = 4, pool = 32, workers = 1, pipeline = 16;
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        uint32_t v = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--connections"))
            conns = v;
        else if (!strcmp(argv[i], "--pool"))
            pool = v;
        else if (!strcmp(argv[i], "--workers"))
            workers = v;
        else if (!strcmp(argv[i], "--pipeline"))
            pipeline = v;
        else
            return usage();
    }
    if (argc - i < 3)
        return usage();
    const char *conninfo = argv[i], *mode = argv[i + 1];
    bool tput = !strcmp(mode, "throughput");
    if (!tput && (strcmp(mode, "latency") || argc - i < 4))
        return usage();

    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = workers;
    cfg.task_runtime_limit_us = 10 * 1000 * 1000;
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt) < 0) {
        fprintf(stderr, "dispatch-bench: runtime: %s\n", urt_last_error());
        return 1;
    }
    struct urt_dispatch_options opt;
    urt_dispatch_options_init(&opt);
    opt.conninfo = conninfo;
    opt.connections = conns;
    opt.pool = pool;
    opt.pipeline = pipeline;
    opt.metrics_every = 1000;
    urt_dispatch *d;
    if (urt_dispatch_create(rt, &opt, &d) < 0 || urt_dispatch_handle(d, KIND, h_noop, NULL) < 0 ||
        urt_dispatch_start(d) < 0) {
        fprintf(stderr, "dispatch-bench: dispatcher: %s\n", urt_last_error());
        return 1;
    }
    struct timespec settle = {1, 0}; /* connected and idle, as graphile.js waits */
    nanosleep(&settle, NULL);
    int rc = tput ? throughput(d, (uint32_t)strtoul(argv[i + 2], NULL, 10))
                  : latency(d, strtod(argv[i + 2], NULL), (uint32_t)strtoul(argv[i + 3], NULL, 10));
    urt_dispatch_stop(d, URT_WAIT_FOREVER);
    urt_dispatch_destroy(d);
    if (tput && rc == 0)
        rc = check_db(conninfo, (uint32_t)strtoul(argv[i + 2], NULL, 10));
    printf(" result %s\n", rc ? "FAILED" : "ok");
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    return rc;
}
