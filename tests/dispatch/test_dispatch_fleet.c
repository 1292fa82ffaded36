/*
 * tests/dispatch/test_dispatch_fleet.c — fleets of urt-dispatch processes on
 * a private PostgreSQL cluster (SPEC C21; pg_harness.h), the scenarios of
 * issue 18:
 *
 *   exactly_once     3 partitioned processes, 10,000 strands (2,000 under
 *                    sanitizers): each runs exactly once to completion;
 *   kill9            3 processes, kill -9 of one holding leases: its strands
 *                    run elsewhere after the lease expired, none lost;
 *   middle_dies      partitions 1..3, 2 killed: 1 and 3 take its strands with
 *                    the takeover scan (old strands) after the takeover delay;
 *   highest_dies     partitions 1..3, 3 killed: 1 and 2 repartition into
 *                    halves once 3 went silent, and run its range as their own;
 *   pg_restart       the server restarts mid-run: the processes reconnect
 *                    and finish every strand;
 *   apoptosis        a handler that blocks its worker: the watchdog ends that
 *                    process (SIGABRT, "apoptosis" in its log), the strand is
 *                    retried elsewhere;
 *   tool_dead_letters_cancel_status  urt-dispatch enqueue --max-attempts /
 *                    --key --key-mode keep, failed, status (kinds x states),
 *                    cancel, requeue --failed: what each prints and what the
 *                    database holds after it.
 *
 * What is checked is in the database, not in the processes' memory: every
 * run of the demo kind `record` writes a row to urt_dispatch_runs (start,
 * the lease it holds, end) through the dispatcher's own connections, and
 *   - lost:      strands without an exit value after the fleet finished: 0;
 *   - overlap:   two runs of one strand whose intervals intersect, a run
 *                that never recorded its end counted to its lease's end
 *                (DEMO_OVERLAPS in tools/urt-dispatch/demo.h): 0;
 *   - per scenario: runs per strand, which processes ran what, old flags.
 * Each scenario bounds its time (short leases, heartbeats and delays);
 * failures print the processes' logs.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <urt/urt.h>

#include "../../tools/urt-dispatch/demo.h"
#include "pg_harness.h"
#include "tests/helpers.h"

#define MAXP 4

struct fleet {
    char ci[256];
    char dir[128];
    PGconn *pg;
    pid_t pid[MAXP];
    char log[MAXP][160];
    int n;
};

static void fleet_init(struct fleet *f, const char *name)
{
    memset(f, 0, sizeof(*f));
    pg_create_db(name, f->ci, sizeof(f->ci));
    /* the processes' logs: in the cluster's directory, removed with it
     * when the run ends, whatever the test's outcome */
    snprintf(f->dir, sizeof(f->dir), "%s/%s", pg_cluster_dir(), name);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", f->dir, f->dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(urt_dispatch_migrate(f->ci), 2, "migrate: %s", urt_last_error());
    f->pg = pg_open(f->ci);
    pg_ok(f->pg, "%s", DEMO_RUNS_DDL);
}

static void fleet_dump(struct fleet *f)
{
    for (int i = 0; i < f->n; i++)
        file_dump(f->log[i]);
}

/* Starts process i: urt-dispatch run with the test's short timings, plus extra. */
static void fleet_start(struct fleet *f, int i, unsigned partition, const char *const *extra)
{
    char part[8];
    snprintf(part, sizeof(part), "%u", partition);
    snprintf(f->log[i], sizeof(f->log[i]), "%s/p%d.log", f->dir, i);
    const char *base[] = {URT_DISPATCH_BIN, "--conninfo", f->ci, "run", "--partition", part, "--kinds",
                          "record,hang", "--pool", "8", "--connections", "2", "--workers", "2", "--quiet",
                          "--backoff-ms", "20", "--backoff-max-ms", "200", "--sleep-min-ms", "5",
                          "--sleep-max-ms", "50", "--heartbeat-ms", "100", "--old-scan-ms", "200",
                          "--metrics-every", "100"};
    const char *argv[64];
    int k = 0;
    for (size_t j = 0; j < sizeof(base) / sizeof(base[0]); j++)
        argv[k++] = base[j];
    for (int j = 0; extra && extra[j]; j++)
        argv[k++] = extra[j];
    argv[k] = NULL;
    f->pid[i] = proc_spawn((char *const *)argv, f->log[i]);
    if (i >= f->n)
        f->n = i + 1;
}

static long long unfinished(struct fleet *f)
{
    return pg_ll(f->pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NULL");
}

static void wait_finished(struct fleet *f, int seconds)
{
    bool ok = WAIT_UNTIL(unfinished(f) == 0, seconds * 1000);
    if (!ok) {
        fleet_dump(f);
        cr_assert_fail("%lld strands unfinished after %d s", unfinished(f), seconds);
    }
}

static void wait_log(struct fleet *f, int i, const char *needle, int seconds)
{
    if (!WAIT_UNTIL(file_contains(f->log[i], needle), seconds * 1000)) {
        fleet_dump(f);
        cr_assert_fail("process %d never logged \"%s\"", i, needle);
    }
}

static void kill9(struct fleet *f, int i)
{
    kill(f->pid[i], SIGKILL);
    int st;
    cr_assert(proc_wait(f->pid[i], 10000, &st), "process %d did not die", i);
    f->pid[i] = 0;
}

/* SIGTERM to every live process: each stops (its runs released) and exits 0. */
static void fleet_stop(struct fleet *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->pid[i] > 0)
            kill(f->pid[i], SIGTERM);
    for (int i = 0; i < f->n; i++) {
        if (f->pid[i] <= 0)
            continue;
        int st = 0;
        bool exited = proc_wait(f->pid[i], 60000, &st);
        if (!exited || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fleet_dump(f);
            cr_assert_fail("process %d did not stop cleanly (exited %d, status 0x%x)", i, exited, st);
        }
        cr_assert_not(file_contains(f->log[i], "lease violated"), "process %d saw a violated lease", i);
    }
}

static void fleet_fini(struct fleet *f)
{
    PQfinish(f->pg);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
}

/* The invariants every scenario ends with. */
static void check_no_loss_no_overlap(struct fleet *f)
{
    long long lost = unfinished(f), overlap = pg_ll(f->pg, DEMO_OVERLAPS);
    long long norun = pg_ll(f->pg, "SELECT count(*) FROM urt_strand s WHERE kind = 'record' AND NOT EXISTS "
                                   "(SELECT 1 FROM urt_dispatch_runs r WHERE r.strand = s.id AND r.ended IS NOT NULL)");
    if (lost || overlap || norun)
        fleet_dump(f);
    cr_assert_eq(lost, 0, "%lld strands were lost", lost);
    cr_assert_eq(overlap, 0, "%lld pairs of runs of one strand overlapped", overlap);
    cr_assert_eq(norun, 0, "%lld finished strands have no completed run in the run log", norun);
}

static void enqueue(struct fleet *f, const char *kind, const char *payload, int n)
{
    pg_ok(f->pg, "INSERT INTO urt_strand (kind, payload) SELECT '%s', '%s' FROM generate_series(1, %d)", kind,
          payload, n);
}

static long long ended_runs(struct fleet *f)
{
    return pg_ll(f->pg, "SELECT count(*) FROM urt_dispatch_runs WHERE ended IS NOT NULL");
}

Test(dispatch_fleet, exactly_once, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_exactly_once");
    int n = SCALE(10000, 2000);
    enqueue(&f, "record", "0", n);
    /* exactly once: no run may fail, even on a starved machine (a run past
     * its budget fails and runs again): a long lease and budget */
    const char *extra[] = {"--lease-ms", "600000", "--budget-ms", "500000", NULL};
    for (int i = 0; i < 3; i++)
        fleet_start(&f, i, (unsigned)i + 1, extra);
    wait_finished(&f, 240);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    long long runs = pg_ll(f.pg, "SELECT count(*) FROM urt_dispatch_runs");
    long long twice = pg_ll(f.pg, "SELECT count(*) FROM (SELECT strand FROM urt_dispatch_runs GROUP BY strand "
                                  "HAVING count(*) <> 1) x");
    long long pids = pg_ll(f.pg, "SELECT count(DISTINCT pid) FROM urt_dispatch_runs");
    if (runs != n || twice)
        fleet_dump(&f);
    cr_assert_eq(runs, n, "%lld runs for %d strands", runs, n);
    cr_assert_eq(twice, 0, "%lld strands ran other than once", twice);
    cr_assert_eq(pids, 3, "only %lld of 3 processes ran strands", pids);
    cr_assert_eq(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE try <> 1"), 0, "a strand was taken twice");
    fleet_fini(&f);
}

Test(dispatch_fleet, kill9, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_kill9");
    int n = SCALE(300, 120);
    enqueue(&f, "record", "300", n);
    const char *extra[] = {"--lease-ms", "2500", "--watchdog-ms", "1000", "--budget-ms", "2000", NULL};
    for (int i = 0; i < 3; i++)
        fleet_start(&f, i, 0, extra);
    cr_assert(WAIT_UNTIL(ended_runs(&f) >= n / 4, 120000), "no progress");
    /* the victim: a process with runs in flight (they hold leases) that
     * started within the last 100 ms: each lasts 300 ms, so they are still
     * in flight when it is killed */
    long long victim = 0;
    cr_assert(WAIT_UNTIL((victim = pg_ll(f.pg, "SELECT coalesce(min(pid), 0) FROM urt_dispatch_runs WHERE ended IS NULL "
                                               "AND started > clock_timestamp() - interval '100 ms'")) != 0, 30000),
              "no process had a run just started");
    int vi = -1;
    for (int i = 0; i < 3; i++)
        if (f.pid[i] == (pid_t)victim)
            vi = i;
    cr_assert_geq(vi, 0, "no process of the fleet had a run in flight");
    kill9(&f, vi);
    /* its runs in flight at the kill: open, and not retried by itself later
     * (a run that failed earlier, e.g. past its budget, also stays open) */
#define HELD "k.pid = %lld AND k.ended IS NULL AND NOT EXISTS (SELECT 1 FROM urt_dispatch_runs s " \
             "WHERE s.strand = k.strand AND s.pid = k.pid AND s.run > k.run)"
    wait_finished(&f, 120);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    /* counted at the end: a statement the victim had sent may still commit
     * after the kill (its backend finds the client gone only afterwards) */
    long long held = pg_ll(f.pg, "SELECT count(*) FROM urt_dispatch_runs k WHERE " HELD, victim);
    cr_assert_gt(held, 0);
    long long redone = pg_ll(f.pg,
        "SELECT count(*) FROM urt_dispatch_runs k WHERE " HELD " AND EXISTS "
        "(SELECT 1 FROM urt_dispatch_runs r WHERE r.strand = k.strand AND r.pid <> k.pid AND r.ended IS NOT NULL "
        " AND r.started >= k.lease_until)", victim);
#undef HELD
    cr_assert_eq(redone, held, "%lld of the %lld strands the killed process held ran elsewhere after its lease",
                 redone, held);
    fleet_fini(&f);
}

static void start_three_partitions(struct fleet *f, const char *old_delay_ms)
{
    const char *extra[] = {"--old-delay-ms", old_delay_ms, "--lease-ms", "3000", "--watchdog-ms", "1000", NULL};
    for (int i = 0; i < 3; i++)
        fleet_start(f, i, (unsigned)i + 1, extra);
    wait_log(f, 0, "partition 1 of 3", 30);
    wait_log(f, 1, "partition 2 of 3", 30);
}

Test(dispatch_fleet, middle_dies, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_middle_dies");
    start_three_partitions(&f, "300");
    pid_t dead = f.pid[1];
    kill9(&f, 1);
    int n = SCALE(300, 120);
    enqueue(&f, "record", "0", n);
    wait_finished(&f, 120);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    char lo[37], hi[37];
    urt_dispatch_partition_range(2, 3, lo, hi);
    long long in2 = pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE id BETWEEN '%s' AND '%s'", lo, hi);
    long long in2_own = pg_ll(f.pg, "SELECT count(*) FROM urt_dispatch_runs r JOIN urt_strand s ON s.id = r.strand "
                                    "WHERE s.id BETWEEN '%s' AND '%s' AND NOT r.old", lo, hi);
    cr_assert_gt(in2, 0, "no strand fell in partition 2's range");
    cr_assert_eq(in2_own, 0, "%lld strands of the dead partition ran as their runner's own (not taken over)", in2_own);
    cr_assert_eq(pg_ll(f.pg, "SELECT count(*) FROM urt_dispatch_runs WHERE pid = %d", (int)dead), 0);
    fleet_fini(&f);
}

Test(dispatch_fleet, highest_dies, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_highest_dies");
    start_three_partitions(&f, "600000"); /* no takeover within the test */
    kill9(&f, 2);
    wait_log(&f, 0, "partition 1 of 2", 30);
    wait_log(&f, 1, "partition 2 of 2", 30);
    int n = SCALE(300, 120);
    enqueue(&f, "record", "0", n);
    wait_finished(&f, 120);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    char lo[37], hi[37];
    urt_dispatch_partition_range(3, 3, lo, hi);
    cr_assert_gt(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE id BETWEEN '%s' AND '%s'", lo, hi), 0);
    cr_assert_eq(pg_ll(f.pg, "SELECT count(*) FROM urt_dispatch_runs WHERE old"), 0,
                 "the dead partition's range was taken over instead of repartitioned");
    fleet_fini(&f);
}

Test(dispatch_fleet, pg_restart, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_pg_restart");
    int n = SCALE(400, 150);
    enqueue(&f, "record", "50", n);
    const char *extra[] = {"--lease-ms", "3000", "--watchdog-ms", "1000", NULL};
    for (int i = 0; i < 2; i++)
        fleet_start(&f, i, 0, extra);
    cr_assert(WAIT_UNTIL(ended_runs(&f) >= n / 4, 120000), "no progress");
    PQfinish(f.pg);
    cr_assert_eq(pg_restart(), 0, "pg_ctl restart failed");
    f.pg = pg_open(f.ci);
    wait_finished(&f, 120);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    for (int i = 0; i < 2; i++)
        cr_assert(file_contains(f.log[i], "lost"), "process %d did not see its connections break", i);
    fleet_fini(&f);
}

Test(dispatch_fleet, apoptosis, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_apoptosis");
    enqueue(&f, "hang", "1", 1);
    enqueue(&f, "record", "20", SCALE(100, 50));
    const char *extra[] = {"--lease-ms", "2500", "--watchdog-ms", "1000", NULL};
    for (int i = 0; i < 3; i++)
        fleet_start(&f, i, 0, extra);
    int died = -1, st = 0;
    cr_assert(WAIT_UNTIL(({
                  for (int i = 0; i < 3 && died < 0; i++)
                      if (f.pid[i] > 0 && proc_wait(f.pid[i], 0, &st))
                          died = i;
                  died >= 0;
              }), 60000), "no process ended by apoptosis");
    f.pid[died] = 0;
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "process %d ended with status 0x%x, not SIGABRT", died, st);
    cr_assert(file_contains(f.log[died], "apoptosis: the run of strand"), "no apoptosis line in its log");
    wait_finished(&f, 120);
    fleet_stop(&f);
    check_no_loss_no_overlap(&f);
    cr_assert_eq(pg_ll(f.pg, "SELECT try FROM urt_strand WHERE kind = 'hang'"), 2, "the hung strand's retry");
    fleet_fini(&f);
}

/* ---- the tool's dead letters, cancel and status ---------------------------------------- */

/* Runs urt-dispatch with argv (after --conninfo) to completion; its output
 * in f->dir/<name>.out; returns its exit status. */
static int tool(struct fleet *f, const char *name, const char *const *args)
{
    char out[200];
    snprintf(out, sizeof(out), "%s/%s.out", f->dir, name);
    unlink(out);
    const char *argv[24] = {URT_DISPATCH_BIN, "--conninfo", f->ci};
    int k = 3;
    for (int i = 0; args[i] && k < 23; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    pid_t pid = proc_spawn((char *const *)argv, out);
    int st = 0;
    cr_assert(proc_wait(pid, 60000, &st), "urt-dispatch %s did not end", name);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool out_has(struct fleet *f, const char *name, const char *needle)
{
    char out[200];
    snprintf(out, sizeof(out), "%s/%s.out", f->dir, name);
    bool has = file_contains(out, needle);
    if (!has)
        file_dump(out);
    return has;
}

Test(dispatch_fleet, tool_dead_letters_cancel_status, .timeout = 300)
{
    struct fleet f;
    fleet_init(&f, "fleet_tool");
    const char *enq[] = {"enqueue", "fail", "3", "--payload", "100", "--max-attempts", "2", NULL};
    cr_assert_eq(tool(&f, "enqueue", enq), 0);
    const char *later[] = {"enqueue", "noop", "--key", "later", "--delay-ms", "600000", "--priority", "-5", NULL};
    cr_assert_eq(tool(&f, "later", later), 0);
    cr_assert(out_has(&f, "later", " inserted"));
    const char *keep[] = {"enqueue", "noop", "--key", "later", "--key-mode", "keep", NULL};
    cr_assert_eq(tool(&f, "keep", keep), 0);
    cr_assert(out_has(&f, "keep", " kept"), "a second strand with the key was not refused");
    const char *extra[] = {"--kinds", "fail,noop", NULL};
    fleet_start(&f, 0, 0, extra);
    if (!WAIT_UNTIL(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE halted = 'failed'") == 3, 60000)) {
        fleet_dump(&f);
        cr_assert_fail("the failing strands did not reach the dead letters");
    }
    const char *failed[] = {"failed", "--kind", "fail", NULL};
    cr_assert_eq(tool(&f, "failed", failed), 0);
    cr_assert(out_has(&f, "failed", "failed strands (the dead letters"));
    cr_assert(out_has(&f, "failed", "): 3"), "the count of failed strands");
    cr_assert(out_has(&f, "failed", "2/2"), "tries shown as used/max");
    cr_assert(out_has(&f, "failed", "fail: as asked by its payload"), "the last error shown");
    const char *status[] = {"status", "--heartbeat-ms", "50", NULL};
    cr_assert_eq(tool(&f, "status", status), 0);
    cr_assert(out_has(&f, "status", "oldest due s"));
    /* kind fail: 0 due, 0 scheduled, 0 running, 0 done, 3 failed, 0 cancelled */
    char want[160];
    snprintf(want, sizeof(want), "%-20s %10d %10d %10d %10d %10d %10d", "fail", 0, 0, 0, 0, 3, 0);
    cr_assert(out_has(&f, "status", want), "no line \"%s\"", want);
    snprintf(want, sizeof(want), "%-20s %10d %10d %10d %10d %10d %10d", "noop", 0, 1, 0, 0, 0, 0);
    cr_assert(out_has(&f, "status", want), "no line \"%s\"", want);
    /* cancel the pending one; an unknown id fails */
    char id[40];
    PGresult *r = PQexec(f.pg, "SELECT id::text FROM urt_strand WHERE key = 'later'");
    cr_assert_eq(PQntuples(r), 1);
    snprintf(id, sizeof(id), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    const char *cancel[] = {"cancel", id, "00000000-0000-4000-8000-000000000000", NULL};
    cr_assert_eq(tool(&f, "cancel", cancel), 1, "an id that was not cancelled makes it exit 1");
    cr_assert(out_has(&f, "cancel", " cancelled"));
    cr_assert(out_has(&f, "cancel", "no such strand"));
    cr_assert_eq(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND halted = 'cancelled'", id), 1);
    /* requeue every failed one: each runs (and fails) twice more */
    long long t0 = pg_ll(f.pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    const char *requeue[] = {"requeue", "--failed", "--kind", "fail", NULL};
    cr_assert_eq(tool(&f, "requeue", requeue), 0);
    cr_assert(out_has(&f, "requeue", " requeued"));
    if (!WAIT_UNTIL(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE halted = 'failed' AND "
                                "(extract(epoch FROM halted_at) * 1000)::bigint > %lld", t0) == 3, 60000)) {
        fleet_dump(&f);
        cr_assert_fail("the requeued strands did not run and fail again");
    }
    cr_assert_eq(pg_ll(f.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'fail' AND try = 2"), 3);
    fleet_stop(&f);
    fleet_fini(&f);
}
