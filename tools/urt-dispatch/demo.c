/*
 * tools/urt-dispatch/demo.c — the demo handlers (list in demo.h). Public API
 * only. A handler that needs more than one step keeps a small state block
 * (struct step) per run, allocated by the handler and freed by its last
 * step; each step is a continuation that runs as a task of the run's job
 * (urt_dispatch_run_sql's callback, urt_io_sleep's continuation), so the run
 * ends only when its last step returned, and a run cancelled by its budget
 * sees -ECANCELED / -ETIME in the step that was waiting.
 */
#include "demo.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct step {
    struct urt_io io;
    struct urt_dispatch_run *run;
    uint64_t sleep_ms;
    char run_id[24];
};

static uint32_t g_partition;

static uint64_t payload_u64(const struct urt_dispatch_strand *s)
{
    return strtoull(s->payload, NULL, 10);
}

static char *pid_text(char *buf, size_t n)
{
    snprintf(buf, n, "%d", (int)getpid());
    return buf;
}

/* ---- noop, sleep, fail, hang ---------------------------------------------- */

static void h_noop(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    urt_dispatch_run_done(run, "ok");
}

static void sleep_done(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct step *st = arg;
    if (res == 0)
        urt_dispatch_run_done(st->run, "slept");
    free(st);
}

static void h_sleep(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    struct step *st = calloc(1, sizeof(*st));
    if (!st) {
        urt_dispatch_run_fail(run, "sleep: no memory");
        return;
    }
    st->run = run;
    urt_io_init(&st->io, sleep_done, st);
    if (urt_io_sleep(&st->io, payload_u64(s) * 1000000ull) < 0) {
        urt_dispatch_run_fail(run, urt_last_error());
        free(st);
    }
}

static void h_fail(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (s->try_count <= payload_u64(s))
        urt_dispatch_run_fail(run, "fail: as asked by its payload");
    else
        urt_dispatch_run_done(run, "ok after failures");
}

static void h_hang(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (s->try_count <= payload_u64(s)) {
        for (;;)
            sleep(60); /* blocks the worker on purpose: the watchdog ends the process */
    }
    urt_dispatch_run_done(run, "ok after hanging");
}

/* ---- record: start row, sleep, end row, done -------------------------------- */

static void rec_ended(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *r, void *arg)
{
    struct step *st = arg;
    char pid[16];
    if (r->status == 0)
        urt_dispatch_run_done(run, pid_text(pid, sizeof(pid)));
    else if (r->status != -ECANCELED)
        urt_dispatch_run_fail(run, r->message);
    free(st);
}

static void rec_end(struct step *st)
{
    const char *p[1] = {st->run_id};
    if (urt_dispatch_run_sql(st->run, "UPDATE urt_dispatch_runs SET ended = clock_timestamp() WHERE run = $1", p, 1,
                         rec_ended, st) < 0) {
        urt_dispatch_run_fail(st->run, urt_last_error());
        free(st);
    }
}

static void rec_slept(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct step *st = arg;
    if (res < 0) {
        free(st); /* the run's job was cancelled: no result, a failure */
        return;
    }
    rec_end(st);
}

static void rec_started(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *r, void *arg)
{
    struct step *st = arg;
    if (r->status < 0 || !r->value) {
        if (r->status != -ECANCELED)
            urt_dispatch_run_fail(run, r->message);
        free(st);
        return;
    }
    snprintf(st->run_id, sizeof(st->run_id), "%s", r->value);
    if (st->sleep_ms == 0) {
        rec_end(st);
        return;
    }
    urt_io_init(&st->io, rec_slept, st);
    if (urt_io_sleep(&st->io, st->sleep_ms * 1000000ull) < 0) {
        urt_dispatch_run_fail(run, urt_last_error());
        free(st);
    }
}

static void h_record(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    struct step *st = calloc(1, sizeof(*st));
    if (!st) {
        urt_dispatch_run_fail(run, "record: no memory");
        return;
    }
    st->run = run;
    st->sleep_ms = payload_u64(s);
    char pid[16], part[16], try[16];
    pid_text(pid, sizeof(pid));
    snprintf(part, sizeof(part), "%u", g_partition);
    snprintf(try, sizeof(try), "%u", s->try_count);
    const char *p[5] = {s->id, pid, part, try, s->old_strand ? "true" : "false"};
    if (urt_dispatch_run_sql(run,
                         "INSERT INTO urt_dispatch_runs (strand, pid, partition, try, old, lease_until) "
                         "SELECT $1, $2, $3, $4, $5, lease FROM urt_strand WHERE id = $1 RETURNING run",
                         p, 5, rec_started, st) < 0) {
        urt_dispatch_run_fail(run, urt_last_error());
        free(st);
    }
}

/* ---- nap: one run row per run; nap until N rows -------------------------------- */

static void nap_counted(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *r, void *arg)
{
    (void)arg;
    const struct urt_dispatch_strand *s = urt_dispatch_run_strand(run);
    if (r->status < 0 || !r->value) {
        if (r->status != -ECANCELED)
            urt_dispatch_run_fail(run, r->message);
        return;
    }
    unsigned long n = 0, ms = 0;
    sscanf(s->payload, "%lu:%lu", &n, &ms);
    if (strtoul(r->value, NULL, 10) < n)
        urt_dispatch_run_nap(run, (uint64_t)ms * 1000000ull);
    else
        urt_dispatch_run_done(run, "ok after naps");
}

static void h_nap(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    char pid[16], part[16], try[16];
    pid_text(pid, sizeof(pid));
    snprintf(part, sizeof(part), "%u", g_partition);
    snprintf(try, sizeof(try), "%u", s->try_count);
    const char *p[5] = {s->id, pid, part, try, s->old_strand ? "true" : "false"};
    if (urt_dispatch_run_sql(run,
                         "WITH r AS (INSERT INTO urt_dispatch_runs (strand, pid, partition, try, old, ended, "
                         "lease_until) SELECT $1, $2, $3, $4, $5, clock_timestamp(), lease FROM urt_strand "
                         "WHERE id = $1 RETURNING 1) "
                         "SELECT count(*) + 1 FROM urt_dispatch_runs WHERE strand = $1",
                         p, 5, nap_counted, NULL) < 0)
        urt_dispatch_run_fail(run, urt_last_error());
}

/* ---- registration ----------------------------------------------------------------- */

int demo_register(urt_dispatch *d, const char *kind, uint32_t partition)
{
    static const struct {
        const char *kind;
        urt_dispatch_handler_fn *fn;
    } demos[] = {{"noop", h_noop}, {"sleep", h_sleep}, {"fail", h_fail},
                 {"nap", h_nap},   {"record", h_record}, {"hang", h_hang}};
    g_partition = partition;
    for (size_t i = 0; i < sizeof(demos) / sizeof(demos[0]); i++)
        if (!strcmp(demos[i].kind, kind))
            return urt_dispatch_handle(d, kind, demos[i].fn, NULL);
    return -EINVAL;
}
