/*
 * tests/dispatch/test_dispatch.c — urt/dispatch.h inside one process, on the
 * private PostgreSQL cluster (pg_harness.h): the versioned migration
 * (repeated, concurrent, a newer schema refused), handler results (done,
 * fail with backoff retries, nap, a wake that beats a nap's
 * compare-and-set), the run budget (a statement still at the database holds
 * the release back), a violated lease detected and not applied, enqueue
 * and wake, metrics windows, heartbeats with garbage payloads and
 * repartitioning, connections killed under running strands, stop with runs
 * in flight, host names resolved on the blocking pool. The multi-process
 * scenarios are in test_dispatch_fleet.c.
 *
 * Handlers record what they saw in atomics; the test's main thread asserts
 * (criterion's assertions belong to the main thread) and checks the rows.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/io.h>
#include <urt/urt.h>

#include "pg_harness.h"
#include "tests/helpers.h"

#define MS 1000000ull

struct env {
    char ci[256];
    urt_runtime *rt;
    urt_dispatch *d;
    PGconn *pg;
    struct urt_dispatch_options opt;
};

static _Atomic int g_log_lines, g_garbage_logged, g_windows, g_unresolved_logged;
static void quiet_log(const char *line, void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_log_lines, 1);
    if (strstr(line, "ignored a notification"))
        atomic_fetch_add(&g_garbage_logged, 1);
    if (strstr(line, "could not resolve host \"no-such-host.invalid\""))
        atomic_fetch_add(&g_unresolved_logged, 1);
    fprintf(stderr, "[dispatch] %s\n", line);
}

static void on_window(const struct urt_dispatch_metrics *m, void *arg)
{
    (void)m;
    (void)arg;
    atomic_fetch_add(&g_windows, 1);
}

/* A database, a runtime with a watchdog, options with the test's short timings. */
static void env_init(struct env *e, const char *db)
{
    memset(e, 0, sizeof(*e));
    pg_create_db(db, e->ci, sizeof(e->ci));
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.task_runtime_limit_us = 2000000;
    e->rt = rt_create_or_skip(&cfg);
    urt_dispatch_options_init(&e->opt);
    e->opt.conninfo = e->ci;
    e->opt.pool = 4;
    e->opt.connections = 2;
    e->opt.lease_ns = 5000 * MS;
    e->opt.backoff_base_ns = 10 * MS;
    e->opt.backoff_max_ns = 100 * MS;
    e->opt.sleep_min_ns = 5 * MS;
    e->opt.sleep_max_ns = 50 * MS;
    e->opt.reconnect_min_ns = 20 * MS;
    e->opt.reconnect_max_ns = 200 * MS;
    e->opt.metrics_every = 10;
    e->opt.log = quiet_log;
    e->opt.on_metrics = on_window;
}

static void env_create(struct env *e)
{
    int err = urt_dispatch_create(e->rt, &e->opt, &e->d);
    cr_assert_eq(err, 0, "urt_dispatch_create: %d %s", err, urt_last_error());
    e->pg = pg_open(e->ci);
}

static void env_fini(struct env *e)
{
    cr_assert_eq(urt_dispatch_stop(e->d, 30000 * MS), 0, "stop: %s", urt_last_error());
    urt_dispatch_destroy(e->d);
    PQfinish(e->pg);
    rt_destroy_clean(e->rt, URT_SHUTDOWN_DRAIN, 0);
}

static struct urt_dispatch_metrics metrics(struct env *e)
{
    struct urt_dispatch_metrics m;
    cr_assert_eq(urt_dispatch_metrics(e->d, &m), 0);
    return m;
}

static long long unfinished(struct env *e)
{
    return pg_ll(e->pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NULL");
}

/* ---- the migration ------------------------------------------------------------ */

static void *migrate_thread(void *ci)
{
    return (void *)(intptr_t)urt_dispatch_migrate(ci);
}

Test(dispatch, migration_is_versioned_and_idempotent, .timeout = 60)
{
    char ci[256];
    pg_create_db("dispatch_migrate", ci, sizeof(ci));
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, migrate_thread, ci);
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_eq((intptr_t)r, 2, "a concurrent migration returned %ld", (long)(intptr_t)r);
    }
    cr_assert_eq(urt_dispatch_migrate(ci), 2, "again: %s", urt_last_error());
    PGconn *pg = pg_open(ci);
    cr_assert_eq(pg_ll(pg, "SELECT count(*) FROM urt_dispatch_schema"), 2, "each migration recorded once");
    cr_assert_eq(pg_ll(pg, "SELECT count(*) FROM urt_strand"), 0);
    pg_ok(pg, "INSERT INTO urt_dispatch_schema (version, title) VALUES (99, 'from the future')");
    cr_assert_eq(urt_dispatch_migrate(ci), -EPROTO);
    cr_assert(strstr(urt_last_error(), "version 99"), "%s", urt_last_error());
    PQfinish(pg);
    cr_assert_eq(urt_dispatch_migrate("host=/nonexistent/urt port=5432"), -ECONNREFUSED);
    cr_assert(strstr(urt_last_error(), "urt_dispatch_migrate: cannot connect"), "%s", urt_last_error());
}

/* ---- results ------------------------------------------------------------------------ */

static _Atomic int g_nap_runs, g_flaky_tries, g_second_result = -1;

static void h_done(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    char exitval[96];
    snprintf(exitval, sizeof(exitval), "done:%s", s->payload);
    urt_dispatch_run_done(run, exitval);
    atomic_store(&g_second_result, urt_dispatch_run_fail(run, "too late")); /* checked on the main thread */
}

static void h_flaky(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    atomic_store(&g_flaky_tries, (int)s->try_count);
    if (s->try_count <= 2)
        urt_dispatch_run_fail(run, "flaky: not yet");
    else
        urt_dispatch_run_done(run, "flaky:ok");
}

static void h_napper(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    if (atomic_fetch_add(&g_nap_runs, 1) < 3)
        urt_dispatch_run_nap(run, 5 * MS);
    else
        urt_dispatch_run_done(run, "napper:ok");
}

static void h_silent(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)run;
    (void)ctx;
    (void)s; /* no result: a failure, retried after the backoff */
}

Test(dispatch, results_done_fail_nap, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_results");
    env_create(&e);
    cr_assert_eq(urt_dispatch_handle(e.d, "done", h_done, NULL), 0);
    cr_assert_eq(urt_dispatch_handle(e.d, "flaky", h_flaky, NULL), 0);
    cr_assert_eq(urt_dispatch_handle(e.d, "napper", h_napper, NULL), 0);
    cr_assert_eq(urt_dispatch_handle(e.d, "silent", h_silent, NULL), 0);
    pg_ok(e.pg, "INSERT INTO urt_strand (kind, payload) SELECT 'done', g::text FROM generate_series(1, 20) g");
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) VALUES ('flaky'), ('napper'), ('silent')");
    cr_assert_eq(urt_dispatch_start(e.d), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NULL AND kind <> 'silent'") == 0,
                         30000), "unfinished: %lld", unfinished(&e));
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE kind = 'silent'") >= 3, 30000),
              "a run without a result is retried");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'done' AND exitval = 'done:' || payload"), 20);
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE kind = 'flaky'"), 3, "two failures, then done");
    cr_assert_eq(atomic_load(&g_flaky_tries), 3);
    cr_assert_eq(atomic_load(&g_second_result), -EALREADY, "only the first result counts");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'napper' AND exitval = 'napper:ok'"), 1);
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE kind = 'napper'"), 1, "a nap resets the try count");
    cr_assert_eq(atomic_load(&g_nap_runs), 4);
    struct urt_dispatch_metrics m = metrics(&e);
    cr_assert_geq(m.done, 22);
    cr_assert_eq(m.naps, 3);
    cr_assert_geq(m.failed, 2 + 2);
    cr_assert_eq(m.leases_violated, 0);
    cr_assert_geq(m.windows, 2, "metrics every 10 runs");
    cr_assert_geq(atomic_load(&g_windows), 2);
    cr_assert_gt(m.strands_per_second, 0);
    cr_assert_leq(m.total_delay_ns.p50, m.total_delay_ns.max);
    cr_assert(fabs((m.old_strand_percent) - (0.0)) < 1e-9, "unpartitioned: no old strands");
    env_fini(&e);
}

/* ---- nap against wake, budget, violated lease ---------------------------------------------- */

static _Atomic int g_woke_runs, g_wake_status = 1;

static void woke_nap(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *r, void *arg)
{
    (void)arg;
    atomic_store(&g_wake_status, r->status);
    urt_dispatch_run_nap(run, 3600ull * 1000 * MS); /* an hour: only the wake can bring it back */
}

/* First run: wake itself (the wake statement, as another process would),
 * then nap an hour; the nap's compare-and-set must keep the wake. */
static void h_self_wake(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (atomic_fetch_add(&g_woke_runs, 1) > 0) {
        urt_dispatch_run_done(run, "woken");
        return;
    }
    const char *p[1] = {s->id};
    urt_dispatch_run_sql(run, "UPDATE urt_strand SET schedule = least(schedule, now()) - interval '1 microsecond' "
                          "WHERE id = $1", p, 1, woke_nap, NULL);
}

static _Atomic int g_slow_status = 1;

static void slow_answered(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *r, void *arg)
{
    (void)run;
    (void)arg;
    atomic_store(&g_slow_status, r->status);
}

/* First run: a statement that outlives the run's budget. */
static void h_slow(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (s->try_count >= 2) {
        urt_dispatch_run_done(run, "slow:ok");
        return;
    }
    urt_dispatch_run_sql(run, "SELECT pg_sleep(1)", NULL, 0, slow_answered, NULL);
}

static _Atomic int g_held_running;

static void held_slept(struct urt_io *io, int32_t res, void *arg)
{
    (void)res;
    urt_dispatch_run_done(arg, "held:ok");
    free(io);
}

static void h_held(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    struct urt_io *io = malloc(sizeof(*io));
    urt_io_init(io, held_slept, run);
    atomic_store(&g_held_running, 1);
    urt_io_sleep(io, 600 * MS);
}

Test(dispatch, wake_budget_and_violated_lease, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_wake_budget");
    e.opt.run_budget_ns = 300 * MS;
    env_create(&e);
    urt_dispatch_handle(e.d, "selfwake", h_self_wake, NULL);
    urt_dispatch_handle(e.d, "slow", h_slow, NULL);
    urt_dispatch_handle(e.d, "held", h_held, NULL);
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) VALUES ('selfwake'), ('slow'), ('held')");
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    /* the held run: take its lease away while it runs */
    cr_assert(WAIT_UNTIL(atomic_load(&g_held_running), 10000));
    pg_ok(e.pg, "UPDATE urt_strand SET lease = now() + interval '1 hour' WHERE kind = 'held'");
    cr_assert(WAIT_UNTIL(metrics(&e).leases_violated == 1, 10000), "the violated lease was not detected");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'held' AND exitval IS NULL"), 1,
                 "a violated run's result must not be applied");
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NULL AND kind <> 'held'") == 0,
                         20000), "selfwake or slow did not finish");
    cr_assert_eq(atomic_load(&g_wake_status), 0, "the wake statement");
    cr_assert_eq(atomic_load(&g_woke_runs), 2, "the wake beat the nap");
    cr_assert_eq(atomic_load(&g_slow_status), -ECANCELED, "the budget cancelled the statement's wait");
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE kind = 'slow'"), 2);
    struct urt_dispatch_metrics m = metrics(&e);
    cr_assert_geq(m.budget_exceeded, 1);
    env_fini(&e);
}

/* ---- enqueue, wake, notifications, repartitioning --------------------------------------------- */

struct enq {
    _Atomic int status, done;
    _Atomic uint32_t count;
    char first[37];
};

static void on_enqueued(void *arg, int status, uint32_t count, const char *const *ids)
{
    struct enq *q = arg;
    if (count && ids)
        snprintf(q->first, sizeof(q->first), "%s", ids[0]);
    atomic_store(&q->status, status);
    atomic_store(&q->count, count);
    atomic_store(&q->done, 1);
}

static void h_noop(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    urt_dispatch_run_done(run, "ok");
}

Test(dispatch, enqueue_wake_and_partitions, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_enqueue");
    e.opt.partition = 1;
    e.opt.heartbeat_ns = 50 * MS;
    env_create(&e);
    urt_dispatch_handle(e.d, "later", h_noop, NULL);
    cr_assert_eq(urt_dispatch_enqueue(e.d, "later", NULL, 0, 1, NULL, NULL), -ENOTCONN);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct enq q = {0};
    cr_assert_eq(urt_dispatch_enqueue(e.d, "later", "p", 3600ull * 1000 * MS, 5, on_enqueued, &q), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&q.done), 10000));
    cr_assert_eq(atomic_load(&q.status), 0);
    cr_assert_eq(atomic_load(&q.count), 5);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'later' AND schedule > now()"), 5);
    struct enq w = {0};
    cr_assert_eq(urt_dispatch_wake(e.d, q.first, on_enqueued, &w), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&w.done), 10000));
    cr_assert_eq(atomic_load(&w.count), 1);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'ok'") == 1, 10000),
              "the woken strand did not run");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NULL"), 4, "the others still wait");
    /* heartbeats: garbage is ignored with a log line; a higher number repartitions */
    pg_ok(e.pg, "NOTIFY urt_dispatch, 'abc'");
    pg_ok(e.pg, "NOTIFY urt_dispatch, '0'");
    pg_ok(e.pg, "NOTIFY urt_dispatch, '300'");
    pg_ok(e.pg, "NOTIFY urt_dispatch, '2'");
    struct urt_dispatch_partitions p;
    cr_assert(WAIT_UNTIL((urt_dispatch_partitions(e.d, &p), p.partitions == 2), 5000), "no repartition to 2");
    cr_assert_str_eq(p.first_id, "00000000-0000-0000-0000-000000000000");
    cr_assert_str_eq(p.last_id, "7fffffff-ffff-ffff-ffff-ffffffffffff");
    cr_assert_eq(metrics(&e).bad_notifications, 3);
    cr_assert_eq(atomic_load(&g_garbage_logged), 3);
    cr_assert(WAIT_UNTIL((urt_dispatch_partitions(e.d, &p), p.partitions == 1), 5000),
              "partition 2 went silent: back to 1");
    cr_assert_str_eq(p.last_id, "ffffffff-ffff-ffff-ffff-ffffffffffff");
    cr_assert_eq(p.n_live, 1);
    cr_assert_eq(p.live[0], 1, "its own heartbeats are heard");
    cr_assert_geq(metrics(&e).repartitions, 2);
    env_fini(&e);
}

/* ---- connections killed under running strands; stop with runs in flight ------------------------- */

static void h_sleepy_done(struct urt_io *io, int32_t res, void *arg)
{
    (void)res;
    urt_dispatch_run_done(arg, "sleepy:ok");
    free(io);
}

static void h_sleepy(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    struct urt_io *io = malloc(sizeof(*io));
    urt_io_init(io, h_sleepy_done, run);
    urt_io_sleep(io, 50 * MS);
}

Test(dispatch, reconnect_under_running_strands, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_reconnect");
    env_create(&e);
    urt_dispatch_handle(e.d, "sleepy", h_sleepy, NULL);
    int n = 200;
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) SELECT 'sleepy' FROM generate_series(1, %d)", n);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    for (int round = 0; round < 3; round++) {
        cr_assert(WAIT_UNTIL(metrics(&e).running > 0, 10000));
        pg_ok(e.pg, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'urt-dispatch' "
                    "AND pid <> pg_backend_pid()");
        sleep_us(100000);
    }
    /* every strand finishes: a take whose answer was lost with its
     * connection holds its lease until it expires (5 s), then runs again */
    cr_assert(WAIT_UNTIL(unfinished(&e) == 0, 60000), "%lld unfinished", unfinished(&e));
    cr_assert(WAIT_UNTIL(metrics(&e).reconnects >= 3, 10000), "reconnects: %llu",
              (unsigned long long)metrics(&e).reconnects);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'sleepy:ok'"), n);
    cr_assert_eq(metrics(&e).leases_violated, 0);
    env_fini(&e);
}

/* A take whose result arrived but whose commit never happened (the backend
 * was killed between the statement and its Sync, in pipeline mode) must not
 * run the strand: its lease was rolled back. A deferred trigger holds the
 * first take's commit for 3 s; the test kills that backend meanwhile. */
static _Atomic int commit_kill_runs;

static void h_count_done(struct urt_io *io, int32_t res, void *arg)
{
    (void)res;
    urt_dispatch_run_done(arg, "counted:ok");
    free(io);
}

static void h_count(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s, (void)ctx;
    atomic_fetch_add(&commit_kill_runs, 1);
    struct urt_io *io = malloc(sizeof(*io));
    urt_io_init(io, h_count_done, run);
    urt_io_sleep(io, 10 * MS);
}

static void take_killed_before_commit(const char *db, uint32_t pipeline)
{
    struct env e;
    env_init(&e, db);
    e.opt.pipeline = pipeline;
    env_create(&e);
    atomic_store(&commit_kill_runs, 0);
    urt_dispatch_handle(e.d, "counted", h_count, NULL);
    pg_ok(e.pg, "CREATE SEQUENCE take_seq");
    pg_ok(e.pg, "CREATE FUNCTION slow_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF nextval('take_seq') = 1 THEN PERFORM pg_sleep(3); END IF; RETURN NULL; END $$");
    pg_ok(e.pg, "CREATE CONSTRAINT TRIGGER slow_first_commit AFTER UPDATE ON urt_strand DEFERRABLE INITIALLY "
                "DEFERRED FOR EACH ROW WHEN (NEW.try > OLD.try) EXECUTE FUNCTION slow_first_commit()");
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) VALUES ('counted')");
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    /* the first take sits in its commit (the deferred trigger's sleep): kill it there */
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                     "'urt-dispatch' AND wait_event = 'PgSleep'") == 1,
                         20000),
              "the first take never reached its commit");
    pg_ok(e.pg, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'urt-dispatch' "
                "AND wait_event = 'PgSleep'");
    cr_assert(WAIT_UNTIL(unfinished(&e) == 0, 30000), "%lld unfinished", unfinished(&e));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'counted:ok'"), 1);
    cr_assert_eq(atomic_load(&commit_kill_runs), 1, "the strand ran %d times (a take that was rolled back ran it)",
                 atomic_load(&commit_kill_runs));
    cr_assert_eq(metrics(&e).leases_violated, 0);
    env_fini(&e);
}

/* pipeline mode (the result comes before the Sync that commits) and one
 * statement at a time (the result comes after the commit) */
Test(dispatch, take_killed_before_its_commit_does_not_run, .timeout = 120)
{
    take_killed_before_commit("dispatch_commit_kill_p16", 16);
    take_killed_before_commit("dispatch_commit_kill_p1", 1);
}

Test(dispatch, stop_with_runs_in_flight, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_stop");
    env_create(&e);
    urt_dispatch_handle(e.d, "sleepy", h_sleepy, NULL);
    int n = 200;
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) SELECT 'sleepy' FROM generate_series(1, %d)", n);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(metrics(&e).running > 0, 10000));
    /* stop with runs in flight: they finish and are released before stop
     * returns; queued strands are dropped (they hold no lease) */
    cr_assert_eq(urt_dispatch_stop(e.d, 30000 * MS), 0, "%s", urt_last_error());
    cr_assert_eq(metrics(&e).running, 0);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE lease > now()"), 0, "a lease left held");
    long long done = pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'sleepy:ok'");
    cr_assert_gt(done, 0);
    cr_assert_eq(done + unfinished(&e), n);
    cr_assert_eq(metrics(&e).leases_violated, 0);
    env_fini(&e);
}

/* ---- the admission limit: hand-overs refused with -EAGAIN are retried ----------------------------- */

Test(dispatch, admission_limit_loses_nothing, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_admission");
    /* a runtime of its own, with a tiny pending-task limit */
    rt_destroy_clean(e.rt, URT_SHUTDOWN_DRAIN, 0);
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.task_runtime_limit_us = 2000000;
    cfg.max_pending_tasks = 3;
    e.rt = rt_create_or_skip(&cfg);
    e.opt.pool = 8;
    e.opt.connections = 3;
    env_create(&e);
    urt_dispatch_handle(e.d, "sleepy", h_sleepy, NULL);
    int n = 60;
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) SELECT 'sleepy' FROM generate_series(1, %d)", n);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(unfinished(&e) == 0, 60000), "%lld strands unfinished", unfinished(&e));
    struct urt_admission_stats a;
    urt_admission_stats(e.rt, &a);
    cr_assert_gt(a.rejected, 0, "the limit never refused anything: the test tests nothing");
    env_fini(&e);
    cr_assert_eq(pg_ll(e.pg = pg_open(e.ci), "SELECT count(*) FROM urt_strand WHERE lease > now()"), 0);
    PQfinish(e.pg);
}

/* ---- the scans' plan: the due index in schedule order, whatever the statistics ----------------- */

/* A strands table filled in one go and never analyzed: the planner thinks it
 * empty, and without the control session's scan_plan (no sorts) it read every
 * due strand through a bitmap and sorted them for each scan's LIMIT — O(backlog)
 * per scan, 45 % of pgbench's rate. The index's own counter tells the plans
 * apart: the ordered scan reads about the LIMIT plus the held strands it skips
 * per scan (measured: 16 entries per strand); the bitmap reads the whole
 * backlog per scan (491 per strand at 3,000 strands, ~160 at 1,000). */
Test(dispatch, scans_walk_the_due_index_on_a_never_analyzed_table, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_scan_plan");
    env_create(&e);
    urt_dispatch_handle(e.d, "ok", h_noop, NULL);
    long long n = SCALE(3000, 1000);
    pg_ok(e.pg, "INSERT INTO urt_strand (kind) SELECT 'ok' FROM generate_series(1, %lld)", n);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    /* polled without the due index (an index-only count would read it too) */
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NOT NULL") == n, 60000),
              "%lld strands unfinished", unfinished(&e));
    long long scans = (long long)metrics(&e).scans;
    env_fini(&e);
    /* the backends' counters reach the shared statistics when they exit */
    PGconn *pg = pg_open(e.ci);
    cr_assert(WAIT_UNTIL(pg_ll(pg, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND pid <> pg_backend_pid()") == 0, 10000));
    long long read = pg_ll(pg, "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'urt_strand_due'");
    fprintf(stderr, "scan plan: %lld strands, %lld scans, %lld due-index entries read\n", n, scans, read);
    cr_assert_gt(scans, 10, "too few scans to tell the plans apart");
    cr_assert_lt(read, 50 * n, "the scans read %lld index entries for %lld strands: a sort of the backlog per scan?",
                 read, n);
    PQfinish(pg);
}

/* ---- host names (urt/blocking.h) ---------------------------------------------------- */

static _Atomic int g_resolved_runs;
static void h_resolved(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    atomic_fetch_add(&g_resolved_runs, 1);
    urt_dispatch_run_done(run, "resolved:ok");
}

/* A conninfo that names hosts (after the cluster's socket directory, which
 * libpq tries first): every connection resolves the names on the blocking
 * pool, never with getaddrinfo on a worker, while its lane holds, leaves out
 * the one that does not resolve (logged), then connects (to the socket
 * directory) and runs strands. */
Test(dispatch, host_names_resolved_on_the_blocking_pool, .timeout = 120)
{
    struct env e;
    env_init(&e, "dispatch_resolve");
    char ci[320];
    const char *h = strstr(e.ci, "host=");
    cr_assert_not_null(h);
    size_t hlen = strcspn(h, " ");
    snprintf(ci, sizeof(ci), "%.*s,no-such-host.invalid,localhost%s", (int)(h - e.ci + hlen), e.ci, h + hlen);
    e.opt.conninfo = ci;
    env_create(&e);
    urt_dispatch_handle(e.d, "resolved", h_resolved, NULL);
    for (int i = 0; i < 5; i++)
        pg_ok(e.pg, "INSERT INTO urt_strand (kind) VALUES ('resolved')");
    cr_assert_eq(urt_dispatch_start(e.d), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(unfinished(&e) == 0, 30000), "%lld unfinished", unfinished(&e));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'resolved:ok'"), 5);
    struct urt_blocking_stats st;
    cr_assert_eq(urt_blocking_stats(e.rt, &st), 0);
    cr_assert_geq(st.done, 1 + e.opt.connections, "%llu resolutions on the pool for %u connections",
                  (unsigned long long)st.done, 1 + e.opt.connections);
    cr_assert_geq((uint32_t)atomic_load(&g_unresolved_logged), 1 + e.opt.connections,
                  "the unresolvable name was not logged");
    env_fini(&e);
}
