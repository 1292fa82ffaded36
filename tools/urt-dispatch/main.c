/*
 * tools/urt-dispatch/main.c — urt-dispatch: run a dispatcher of urt/dispatch.h
 * with demo handlers, enqueue strands, show the metrics and the partition
 * map, check a fleet's run log (C21; man/urt-dispatch.1).
 *
 *   urt-dispatch [--conninfo STR] migrate
 *   urt-dispatch [--conninfo STR] enqueue KIND [COUNT] [--payload P] [--delay-ms N]
 *   urt-dispatch [--conninfo STR] run [options]      until SIGINT/SIGTERM or --duration-s
 *   urt-dispatch [--conninfo STR] status [--heartbeat-ms N] [--channel NAME] [--limit N]
 *   urt-dispatch [--conninfo STR] verify
 *   urt-dispatch [--conninfo STR] failed [--kind K] [--limit N]
 *   urt-dispatch [--conninfo STR] cancel ID...
 *   urt-dispatch [--conninfo STR] requeue ID... | --failed [--kind K]
 *
 * The connection string defaults to $URT_DISPATCH_CONNINFO, else libpq's PG*
 * variables. `run` prints one metrics line per window (metrics_every runs),
 * the dispatcher's log lines (repartitions, reconnects, violated leases,
 * apoptosis) and, when it stops, the counters and the partition map.
 * `status` and `verify` read the database with a blocking libpq connection
 * (this is a command-line tool, not a worker). Bad usage: one line on
 * stderr, exit 2; errors: exit 1; verify finding overlapping runs: exit 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <urt/urt.h>

#include "demo.h"
#include "opts.h"

/* ---- usage ----------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: urt-dispatch [--conninfo STR] COMMAND [options]\n"
            "commands:\n"
            "  migrate                 apply the dispatcher's schema; print its version\n"
            "  enqueue KIND [COUNT]    insert COUNT (default 1) strands [--payload P] [--delay-ms N]\n"
            "      --priority N (lower runs first)  --max-attempts N (0: 25)  --key K  --key-mode replace|\n"
            "      preserve_schedule|keep (a live strand holding K: replaced, or kept and this one dropped)\n"
            "  run                     run a dispatcher with the demo handlers until SIGINT/SIGTERM\n"
            "      --partition N (1..256, 0 none; or URT_DISPATCH_PARTITION)  --kinds K,K (default %s)\n"
            "      --pool N  --connections N  --pipeline N  --queue-ratio N  --metrics-every N  --workers N\n"
            "      --lease-ms N  --budget-ms N  --watchdog-ms N  --backoff-ms N  --backoff-max-ms N\n"
            "      --sleep-min-ms N  --sleep-max-ms N  --heartbeat-ms N  --old-delay-ms N  --old-scan-ms N\n"
            "      --duration-s N  --quiet (no per-window line)\n"
            "  status                  strands per kind and state, the oldest due one's age, the partitions\n"
            "                          heard on the channel, the latest failed strands\n"
            "      --heartbeat-ms N (listens 4 heartbeats)  --channel NAME  --limit N (failed shown, 10)\n"
            "  verify                  check urt_dispatch_runs: overlapping runs of one strand (exit 1)\n"
            "  failed                  the dead letters: strands whose tries are used up [--kind K] [--limit N]\n"
            "  cancel ID...            cancel strands that have not started\n"
            "  requeue ID...           bring failed or cancelled strands back, due now; --failed [--kind K]: all\n"
            "  --help | --version\n"
            "The connection string: --conninfo, else $URT_DISPATCH_CONNINFO, else libpq's PG* variables.\n",
            DEMO_KINDS);
}

int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("urt-dispatch: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (try --help)\n", stderr);
    va_end(ap);
    return 2;
}

static int fail(const char *what)
{
    fprintf(stderr, "urt-dispatch: %s: %s\n", what, urt_last_error());
    return 1;
}

/* ---- printing ------------------------------------------------------------------- */

static void print_dist(const char *name, const struct urt_dispatch_dist *d, double unit)
{
    printf("  %-12s %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n", name, d->avg / unit, d->p50 / unit,
           d->p75 / unit, d->p85 / unit, d->p95 / unit, d->p99 / unit, d->max / unit);
}

static void print_window_line(const struct urt_dispatch_metrics *m, void *arg)
{
    (void)arg;
    printf("window %" PRIu64 ": %.1f strands/s; total delay ms p50 %.2f p95 %.2f p99 %.2f max %.2f; "
           "lease acquired %.1f%% old %.1f%% expired %.1f%%; queue p50 %" PRIu64 "\n",
           m->windows, m->strands_per_second, m->total_delay_ns.p50 / 1e6, m->total_delay_ns.p95 / 1e6,
           m->total_delay_ns.p99 / 1e6, m->total_delay_ns.max / 1e6, m->lease_acquire_percent,
           m->old_strand_percent, m->lease_expired_percent, m->queue_size.p50);
    fflush(stdout);
}

static void print_metrics(const struct urt_dispatch_metrics *m)
{
    printf("metrics (last window of %u runs, %" PRIu64 " windows): %.1f strands/s\n", m->window_runs, m->windows,
           m->strands_per_second);
    printf("  %-12s %10s %10s %10s %10s %10s %10s %10s\n", "ms", "avg", "p50", "p75", "p85", "p95", "p99", "max");
    print_dist("scan delay", &m->scan_delay_ns, 1e6);
    print_dist("queue delay", &m->queue_delay_ns, 1e6);
    print_dist("lease delay", &m->lease_delay_ns, 1e6);
    print_dist("total delay", &m->total_delay_ns, 1e6);
    print_dist("queue size", &m->queue_size, 1);
    print_dist("free slots", &m->free_slots, 1);
    printf("  lease acquired %.1f%%  old strands %.1f%%  lease expired %.1f%%  current strand delay %.3f ms\n",
           m->lease_acquire_percent, m->old_strand_percent, m->lease_expired_percent, m->current_strand_delay_ns / 1e6);
    printf("counters: scans %" PRIu64 " old_scans %" PRIu64 " scanned %" PRIu64 " runs %" PRIu64
           " leases_missed %" PRIu64 " done %" PRIu64 " naps %" PRIu64 " failed %" PRIu64 " budget_exceeded %" PRIu64
           " leases_violated %" PRIu64 " releases_uncertain %" PRIu64 " reconnects %" PRIu64 " notifications %" PRIu64
           " bad_notifications %" PRIu64 " repartitions %" PRIu64 "\n",
           m->scans, m->old_scans, m->scanned, m->runs, m->leases_missed, m->done, m->naps, m->failed,
           m->budget_exceeded, m->leases_violated, m->releases_uncertain, m->reconnects, m->notifications,
           m->bad_notifications, m->repartitions);
}

static void print_partitions(const struct urt_dispatch_partitions *p)
{
    if (!p->partition) {
        printf("partitions: none (this process scans every id)\n");
        return;
    }
    printf("partitions: this is %u of %u, ids %s .. %s; heard:", p->partition, p->partitions, p->first_id,
           p->last_id);
    for (uint32_t i = 0; i < p->n_live; i++)
        printf(" %u (%.0f ms ago)", p->live[i], p->age_ns[i] / 1e6);
    printf("\n");
}

static void log_line(const char *line, void *arg)
{
    (void)arg;
    fprintf(stderr, "urt-dispatch[%d]: %s\n", (int)getpid(), line);
}

/* ---- run ------------------------------------------------------------------------- */

static int run_create(const struct tool_opts *o, urt_runtime **rt, urt_dispatch **d)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    if (urt_config_from_env(&cfg) < 0)
        return fail("configuration");
    if (o->workers)
        cfg.workers = o->workers;
    cfg.task_runtime_limit_us = o->watchdog_ms * 1000;
    if (urt_runtime_create(&cfg, rt) < 0)
        return fail("runtime");
    struct urt_dispatch_options dopt = o->dopt;
    dopt.log = log_line;
    dopt.on_metrics = o->quiet ? NULL : print_window_line;
    if (urt_dispatch_create(*rt, &dopt, d) < 0) {
        int r = fail("dispatcher");
        urt_runtime_destroy(*rt, URT_SHUTDOWN_CANCEL);
        return r;
    }
    return 0;
}

static int run_register(const struct tool_opts *o, urt_dispatch *d)
{
    char kinds[256];
    snprintf(kinds, sizeof(kinds), "%s", o->kinds);
    for (char *save = NULL, *k = strtok_r(kinds, ",", &save); k; k = strtok_r(NULL, ",", &save))
        if (demo_register(d, k, o->dopt.partition) < 0)
            return fail("handler");
    return 0;
}

/* The run log's table, when it is missing (DEMO_RUNS_DDL); a fleet starting
 * at once creates it once: the advisory lock serializes the processes' checks. */
static int demo_table(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    PGresult *r = PQstatus(pg) == CONNECTION_OK
                      ? PQexec(pg, "BEGIN; SELECT pg_advisory_xact_lock(7526981253474304837); " DEMO_RUNS_DDL "; COMMIT")
                      : NULL;
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "urt-dispatch: creating urt_dispatch_runs: %s", PQerrorMessage(pg));
    PQclear(r);
    PQfinish(pg);
    return ok ? 0 : 1;
}

/* Until SIGINT/SIGTERM, or duration_s seconds (0: no limit). io_uring's
 * task work on this thread (the ring it wakes workers from) interrupts
 * sigtimedwait with EINTR: wait again for the rest. */
static void wait_signal(const sigset_t *set, uint64_t duration_s)
{
    uint64_t end = urt_now_ns() + (duration_s ? duration_s : 365ull * 86400) * 1000000000ull;
    for (uint64_t now = urt_now_ns(); now < end; now = urt_now_ns()) {
        struct timespec ts = {.tv_sec = (time_t)((end - now) / 1000000000ull),
                              .tv_nsec = (long)((end - now) % 1000000000ull)};
        if (sigtimedwait(set, NULL, &ts) >= 0 || errno != EINTR)
            return;
    }
}

static int cmd_run(const struct tool_opts *o)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread: the workers inherit it */
    urt_runtime *rt;
    urt_dispatch *d;
    int r = urt_dispatch_migrate(o->dopt.conninfo) < 0 ? fail("migrate")
            : (strstr(o->kinds, "record") || strstr(o->kinds, "nap")) ? demo_table(o->dopt.conninfo) : 0;
    if (r || (r = run_create(o, &rt, &d)))
        return r;
    if ((r = run_register(o, d)) == 0 && urt_dispatch_start(d) < 0)
        r = fail("start");
    if (r == 0) {
        printf("urt-dispatch: pid %d running kinds %s, partition %u, pool %u, %u connections\n", (int)getpid(),
               o->kinds, o->dopt.partition, o->dopt.pool, o->dopt.connections);
        fflush(stdout);
        wait_signal(&set, o->duration_s);
        if (urt_dispatch_stop(d, URT_WAIT_FOREVER) < 0)
            r = fail("stop");
        struct urt_dispatch_metrics m;
        struct urt_dispatch_partitions p;
        urt_dispatch_metrics(d, &m);
        urt_dispatch_partitions(d, &p);
        print_metrics(&m);
        print_partitions(&p);
    }
    urt_dispatch_destroy(d);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    return r;
}

/* ---- migrate, enqueue ---------------------------------------------------------------- */

static int cmd_migrate(const struct tool_opts *o)
{
    int v = urt_dispatch_migrate(o->dopt.conninfo);
    if (v < 0)
        return fail("migrate");
    printf("schema version %d\n", v);
    return 0;
}

struct enq_wait {
    _Atomic int status;
    _Atomic uint32_t count;
    _Atomic int done;
};

static void enqueued(void *arg, int status, uint32_t count, const char *const *ids)
{
    struct enq_wait *w = arg;
    if (count == 1 && ids)
        printf("%s\n", ids[0]);
    atomic_store(&w->status, status);
    atomic_store(&w->count, count);
    atomic_store(&w->done, 1);
}

static void items_enqueued(void *arg, int status, uint32_t count, const char *const *ids, const uint8_t *outcomes)
{
    struct enq_wait *w = arg;
    static const char *const what[] = {"inserted", "replaced", "kept"};
    if (count == 1 && ids)
        printf("%s %s\n", ids[0] ? ids[0] : "-", what[outcomes[0] < 3 ? outcomes[0] : 2]);
    atomic_store(&w->status, status);
    atomic_store(&w->count, count);
    atomic_store(&w->done, 1);
}

/* COUNT items of --priority, --key, --max-attempts (urt_dispatch_enqueue_items). */
static int enqueue_items(urt_dispatch *d, const struct tool_opts *o, struct enq_wait *w)
{
    struct urt_dispatch_item *it = calloc(o->count, sizeof(*it));
    if (!it) {
        fprintf(stderr, "urt-dispatch: no memory for %u items\n", o->count);
        return -1;
    }
    for (uint32_t i = 0; i < o->count; i++)
        it[i] = (struct urt_dispatch_item){.kind = o->kind, .payload = o->payload, .key = o->key,
                                           .delay_ns = o->delay_ms * 1000000ull, .priority = o->priority,
                                           .max_attempts = o->max_attempts};
    int r = urt_dispatch_enqueue_items(d, it, o->count, (enum urt_dispatch_key_mode)o->key_mode, items_enqueued, w);
    free(it);
    return r;
}

static int cmd_enqueue(const struct tool_opts *o)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 1;
    cfg.task_runtime_limit_us = 10 * 1000 * 1000;
    urt_runtime *rt;
    urt_dispatch *d;
    if (urt_runtime_create(&cfg, &rt) < 0)
        return fail("runtime");
    struct urt_dispatch_options dopt = o->dopt;
    dopt.log = log_line;
    int r = 0;
    if (urt_dispatch_create(rt, &dopt, &d) < 0) {
        r = fail("dispatcher");
    } else {
        struct enq_wait w = {0};
        if (urt_dispatch_start(d) < 0 ||
            (o->itemized ? enqueue_items(d, o, &w)
                         : urt_dispatch_enqueue(d, o->kind, o->payload, o->delay_ms * 1000000ull, o->count, enqueued,
                                                &w)) < 0)
            r = fail("enqueue");
        while (r == 0 && !atomic_load(&w.done))
            usleep(1000);
        if (r == 0 && atomic_load(&w.status) < 0)
            r = fail("enqueue");
        else if (r == 0)
            fprintf(stderr, "urt-dispatch: enqueued %u strands of kind %s\n", atomic_load(&w.count), o->kind);
        urt_dispatch_destroy(d);
    }
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    return r;
}

/* ---- cancel, requeue ------------------------------------------------------------------- */

struct id_wait {
    _Atomic int done, status;
};

static void id_answered(void *arg, int status)
{
    struct id_wait *w = arg;
    atomic_store(&w->status, status);
    atomic_store(&w->done, 1);
}

static const char *id_outcome(bool cancel, int status)
{
    switch (status) {
    case 0: return cancel ? "cancelled" : "requeued";
    case -EBUSY: return "running: not cancelled";
    case -EALREADY: return "finished, failed or cancelled already: not cancelled";
    case -ENOENT: return cancel ? "no such strand" : "not failed or cancelled: not requeued";
    default: return strerror(-status);
    }
}

/* One call per id through the dispatcher's own statements (urt/dispatch.h). */
static int for_ids(urt_dispatch *d, bool cancel, char *const *ids, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        struct id_wait w = {0};
        int r = cancel ? urt_dispatch_cancel(d, ids[i], id_answered, &w) : urt_dispatch_requeue(d, ids[i], id_answered, &w);
        if (r < 0)
            return fail(cancel ? "cancel" : "requeue");
        while (!atomic_load(&w.done))
            usleep(500);
        printf("%s %s\n", ids[i], id_outcome(cancel, atomic_load(&w.status)));
        bad += atomic_load(&w.status) != 0;
    }
    return bad ? 1 : 0;
}

/* requeue --failed [--kind K]: the ids of the dead letters, from the database. */
static int failed_ids(const struct tool_opts *o, char ***out, int *n)
{
    PGconn *pg = PQconnectdb(o->dopt.conninfo);
    const char *p[1] = {o->filter_kind};
    PGresult *r = PQstatus(pg) == CONNECTION_OK
                      ? PQexecParams(pg, "SELECT id::text FROM urt_strand WHERE halted = 'failed' AND ($1::text IS NULL "
                                         "OR kind = $1) ORDER BY halted_at", 1, NULL, p, NULL, NULL, 0)
                      : NULL;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "urt-dispatch: listing the failed strands: %s", PQerrorMessage(pg));
        PQclear(r);
        PQfinish(pg);
        return 1;
    }
    *n = PQntuples(r);
    *out = calloc((size_t)*n + 1, sizeof(char *));
    for (int i = 0; *out && i < *n; i++)
        (*out)[i] = strdup(PQgetvalue(r, i, 0));
    PQclear(r);
    PQfinish(pg);
    return *out ? 0 : 1;
}

static int cmd_ids(const struct tool_opts *o)
{
    bool cancel = !strcmp(o->cmd, "cancel");
    char **ids = o->ids;
    int n = o->n_ids, r;
    char **owned = NULL;
    if (o->all_failed && (r = failed_ids(o, &owned, &n)) != 0)
        return r;
    if (owned)
        ids = owned;
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 1;
    cfg.task_runtime_limit_us = 10 * 1000 * 1000;
    urt_runtime *rt;
    urt_dispatch *d;
    if (urt_runtime_create(&cfg, &rt) < 0)
        return fail("runtime");
    struct urt_dispatch_options dopt = o->dopt;
    dopt.log = log_line;
    if (urt_dispatch_create(rt, &dopt, &d) < 0) {
        r = fail("dispatcher");
    } else {
        r = urt_dispatch_start(d) < 0 ? fail("start") : for_ids(d, cancel, ids, n);
        urt_dispatch_destroy(d);
    }
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    if (o->all_failed)
        fprintf(stderr, "urt-dispatch: %d failed strands%s%s\n", n, o->filter_kind ? " of kind " : "",
                o->filter_kind ? o->filter_kind : "");
    for (int i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    return r;
}

/* ---- main ----------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    struct tool_opts o;
    int r = tool_parse(argc, argv, &o);
    if (r >= 0)
        return r; /* --help, --version, or bad usage */
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(o.cmd, "migrate"))
        return cmd_migrate(&o);
    if (!strcmp(o.cmd, "enqueue"))
        return cmd_enqueue(&o);
    if (!strcmp(o.cmd, "run"))
        return cmd_run(&o);
    if (!strcmp(o.cmd, "status"))
        return cmd_status(&o);
    if (!strcmp(o.cmd, "failed"))
        return cmd_failed(&o);
    if (!strcmp(o.cmd, "cancel") || !strcmp(o.cmd, "requeue"))
        return cmd_ids(&o);
    return cmd_verify(&o);
}
