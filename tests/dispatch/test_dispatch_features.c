/*
 * tests/dispatch/test_dispatch_features.c — the job-queue features of
 * urt/dispatch.h on the private PostgreSQL cluster (pg_harness.h), each
 * checked in the database against what the header promises:
 *
 *   enqueue_wakes_an_idle_dispatcher   the enqueue's NOTIFY: an idle
 *                                      dispatcher with a 10 s sleep runs a
 *                                      new strand within 2 s;
 *   batch_enqueue_is_one_statement     urt_dispatch_enqueue_items: n items
 *                                      (payloads, delays) in one statement
 *                                      (pg_stat_user_tables: one insert
 *                                      batch), ids in item order; a delayed
 *                                      one waits for its time;
 *   single_enqueues_are_batched        concurrent urt_dispatch_enqueue calls
 *                                      coalesce at the control connection;
 *   priorities_run_lowest_first        pool 1, queue 1: the runs follow
 *                                      (priority, schedule);
 *   unique_keys_*                      replace, preserve_schedule, keep,
 *                                      duplicates in one batch, a running
 *                                      holder;
 *   attempts_end_in_the_dead_letters   max_attempts failures: halted =
 *                                      'failed', last_error kept, requeue
 *                                      runs it again; a spent strand whose
 *                                      lease expired is not run;
 *   cancel_before_start                pending: cancelled and never run;
 *                                      running: -EBUSY; finished: -EALREADY;
 *                                      unknown: -ENOENT; requeue of it;
 *   a_failing_batch_is_split           a trigger that refuses one strand's
 *                                      done fails its batch: the others are
 *                                      released one by one, nothing lost;
 *   upgrade_from_schema_1              a version 1 database with strands is
 *                                      migrated to 2 and they run;
 *   a_failure_moves_the_schedule_...   the take leaves the schedule (a HOT
 *                                      update), a failure's release backs it
 *                                      off within the cap;
 *   a_run_sees_its_attempts_...        struct urt_dispatch_strand's
 *                                      max_attempts, priority, last_error.
 *
 * Handlers record what they saw in atomics; the test's main thread asserts.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/io.h>
#include <urt/urt.h>

#include "dispatch/dispatch_sql.h"
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

static _Atomic int g_splits;

static void quiet_log(const char *line, void *arg)
{
    (void)arg;
    if (strstr(line, "its members go one by one"))
        atomic_fetch_add(&g_splits, 1);
    fprintf(stderr, "[dispatch] %s\n", line);
}

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
    e->opt.backoff_max_ns = 50 * MS;
    e->opt.sleep_min_ns = 5 * MS;
    e->opt.sleep_max_ns = 50 * MS;
    e->opt.metrics_every = 10;
    e->opt.log = quiet_log;
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

/* ---- callbacks the tests wait on ---------------------------------------------- */

#define MAXN 64

struct items_wait {
    _Atomic int done, status;
    uint32_t count;
    char ids[MAXN][37];
    uint8_t outcomes[MAXN];
};

static void on_items(void *arg, int status, uint32_t count, const char *const *ids, const uint8_t *outcomes)
{
    struct items_wait *w = arg;
    w->count = count;
    for (uint32_t i = 0; i < count && i < MAXN; i++) {
        snprintf(w->ids[i], sizeof(w->ids[i]), "%s", ids[i] ? ids[i] : "");
        w->outcomes[i] = outcomes[i];
    }
    atomic_store(&w->status, status);
    atomic_store_explicit(&w->done, 1, memory_order_release);
}

static void enqueue_items(struct env *e, const struct urt_dispatch_item *it, uint32_t n,
                          enum urt_dispatch_key_mode mode, struct items_wait *w)
{
    memset(w, 0, sizeof(*w));
    cr_assert_eq(urt_dispatch_enqueue_items(e->d, it, n, mode, on_items, w), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load_explicit(&w->done, memory_order_acquire), 10000), "no answer");
    cr_assert_eq(atomic_load(&w->status), 0);
    cr_assert_eq(w->count, n);
}

struct status_wait {
    _Atomic int done, status;
};

static void on_status(void *arg, int status)
{
    struct status_wait *w = arg;
    atomic_store(&w->status, status);
    atomic_store(&w->done, 1);
}

static int call_status(int (*fn)(urt_dispatch *, const char *, urt_dispatch_status_fn *, void *), struct env *e,
                       const char *id)
{
    struct status_wait w = {0};
    cr_assert_eq(fn(e->d, id, on_status, &w), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&w.done), 10000), "no answer");
    return atomic_load(&w.status);
}

/* ---- handlers --------------------------------------------------------------------- */

/* The runs' payloads in run order: g_order_n hands out the slots, g_order_done
 * (release, after the slot is written) says how many the main thread may
 * read (acquire). */
static _Atomic int g_order_n, g_order_done;
static char g_order[MAXN][16];

static void h_record(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    int i = atomic_fetch_add(&g_order_n, 1);
    if (i < MAXN)
        snprintf(g_order[i], sizeof(g_order[i]), "%s", s->payload);
    atomic_fetch_add_explicit(&g_order_done, 1, memory_order_release);
    urt_dispatch_run_done(run, s->payload);
}

static int order_done(void)
{
    return atomic_load_explicit(&g_order_done, memory_order_acquire);
}

static void h_fail(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    char why[64];
    snprintf(why, sizeof(why), "failure number %u", s->try_count);
    urt_dispatch_run_fail(run, why);
}

static _Atomic int g_fail_until;

static void h_fail_until(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    (void)s;
    if (atomic_load(&g_fail_until))
        urt_dispatch_run_fail(run, "not yet");
    else
        urt_dispatch_run_done(run, "ok");
}

static _Atomic int g_hold_running, g_hold_release;

/* Holds its run (its lease) until g_hold_release; a cancelled job (the run's
 * budget, or stop) ends it without a result. */
static void hold_step(struct urt_io *io, int32_t res, void *arg)
{
    if (res < 0 || atomic_load(&g_hold_release)) {
        if (res == 0)
            urt_dispatch_run_done(arg, "held");
        free(io);
        return;
    }
    if (urt_io_sleep(io, 5 * MS) < 0)
        free(io);
}

static void h_hold(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    struct urt_io *io = malloc(sizeof(*io));
    urt_io_init(io, hold_step, run);
    atomic_store(&g_hold_running, 1);
    urt_io_sleep(io, 5 * MS);
}

/* ---- wake-up, batches ------------------------------------------------------------- */

Test(dispatch_features, enqueue_wakes_an_idle_dispatcher, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_wake");
    e.opt.sleep_min_ns = 10000 * MS; /* only a wake-up can bring a scan within the test's bound */
    e.opt.sleep_max_ns = 10000 * MS;
    env_create(&e);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(metrics(&e).scans >= 1, 10000), "no first scan");
    sleep_us(200000); /* the first scan found nothing: asleep for 10 s */
    uint64_t t0 = urt_now_ns();
    cr_assert_eq(urt_dispatch_enqueue(e.d, "rec", "w", 0, 1, NULL, NULL), 0);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'w'") == 1, 5000),
              "the strand did not run: no wake-up");
    uint64_t took = urt_now_ns() - t0;
    cr_assert_lt(took, 2000 * MS, "the wake-up took %.3f s", took / 1e9);
    cr_assert_geq(metrics(&e).wakeups, 1);
    /* a kind this dispatcher does not handle wakes nothing */
    uint64_t w = metrics(&e).wakeups;
    pg_ok(e.pg, "NOTIFY urt_dispatch, '+other'");
    sleep_us(200000);
    cr_assert_eq(metrics(&e).wakeups, w);
    cr_assert_eq(metrics(&e).bad_notifications, 0, "a wake-up is not a bad heartbeat");
    env_fini(&e);
}

Test(dispatch_features, batch_enqueue_is_one_statement, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_batch");
    env_create(&e);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    enum { N = 40 };
    struct urt_dispatch_item it[N];
    char pay[N][16];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < N; i++) {
        snprintf(pay[i], sizeof(pay[i]), "b%d\"\\,{}", i); /* quotes, backslashes, array syntax */
        it[i].kind = "rec";
        it[i].payload = pay[i];
    }
    it[N - 1].delay_ns = 1500 * MS;
    struct items_wait w;
    uint64_t t0 = urt_now_ns();
    enqueue_items(&e, it, N, URT_DISPATCH_KEY_REPLACE, &w);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(w.outcomes[i], URT_DISPATCH_INSERTED);
        cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND payload = 'b%d\"\\,{}'",
                           w.ids[i], i), 1, "item %d: its id and payload", i);
    }
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NOT NULL") == N - 1, 10000));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND exitval IS NULL", w.ids[N - 1]),
                 1, "the delayed item ran before its time");
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval IS NOT NULL") == N, 10000));
    cr_assert_geq(urt_now_ns() - t0, 1500 * MS);
    env_fini(&e);
    /* one INSERT statement for the batch: the table's counters (flushed at
     * the backends' exit) count the rows, the function's calls count 1 */
    PGconn *pg = pg_open(e.ci);
    cr_assert(WAIT_UNTIL(pg_ll(pg, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND pid <> pg_backend_pid()") == 0, 10000));
    cr_assert_eq(pg_ll(pg, "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'urt_strand'"), N);
    PQfinish(pg);
}

struct enq_wait {
    _Atomic int done, bad;
};

static void on_one(void *arg, int status, uint32_t count, const char *const *ids)
{
    struct enq_wait *w = arg;
    if (status != 0 || count != 1 || !ids || strlen(ids[0]) != 36)
        atomic_fetch_add(&w->bad, 1); /* asserted on the main thread */
    atomic_fetch_add(&w->done, 1);
}

/* 4 threads enqueue 200 single strands each as fast as they can: they are
 * coalesced at the control connection (one enqueue_one statement for all
 * that wait), so the statements are far fewer than the strands. */
static urt_dispatch *g_enq_d;
static struct enq_wait g_enq_w;

static void *enqueuer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++)
        while (urt_dispatch_enqueue(g_enq_d, "rec", "s", 0, 1, on_one, &g_enq_w) == -EAGAIN)
            ;
    return NULL;
}

Test(dispatch_features, single_enqueues_are_batched, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_single");
    env_create(&e);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    pg_ok(e.pg, "CREATE TABLE stmts (n bigint)");
    pg_ok(e.pg, "INSERT INTO stmts VALUES (0)");
    pg_ok(e.pg, "CREATE FUNCTION count_stmt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "UPDATE stmts SET n = n + 1; RETURN NULL; END $$");
    pg_ok(e.pg, "CREATE TRIGGER count_stmt AFTER INSERT ON urt_strand FOR EACH STATEMENT "
                "EXECUTE FUNCTION count_stmt()");
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    g_enq_d = e.d;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, enqueuer, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    cr_assert(WAIT_UNTIL(atomic_load(&g_enq_w.done) == 800, 30000), "%d answered", atomic_load(&g_enq_w.done));
    cr_assert_eq(atomic_load(&g_enq_w.bad), 0, "an enqueue was answered without its one id");
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 's'") == 800, 30000));
    long long stmts = pg_ll(e.pg, "SELECT n FROM stmts");
    fprintf(stderr, "single enqueues: 800 strands in %lld statements\n", stmts);
    cr_assert_lt(stmts, 800, "no two enqueues shared a statement");
    env_fini(&e);
}

/* ---- priorities -------------------------------------------------------------------- */

Test(dispatch_features, priorities_run_lowest_first, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_prio");
    e.opt.pool = 1;
    e.opt.queue_ratio = 1; /* one strand scanned at a time: the order is the scans' */
    env_create(&e);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    atomic_store(&g_order_n, 0);
    atomic_store(&g_order_done, 0);
    /* due in schedule order a0 (prio 5), b0 (prio -1), c0 (prio 5), d0 (prio 0), e0 (prio -1) */
    const char *names[] = {"a", "b", "c", "d", "e"};
    int prio[] = {5, -1, 5, 0, -1};
    for (int i = 0; i < 5; i++)
        pg_ok(e.pg, "INSERT INTO urt_strand (kind, payload, priority, schedule) VALUES ('rec', '%s', %d, "
                    "now() - interval '1 minute' + %d * interval '1 second')", names[i], prio[i], i);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(order_done() == 5, 10000));
    const char *want[] = {"b", "e", "d", "a", "c"};
    for (int i = 0; i < 5; i++)
        cr_assert_str_eq(g_order[i], want[i], "run %d: %s, expected %s", i, g_order[i], want[i]);
    env_fini(&e);
}

/* ---- unique keys --------------------------------------------------------------------- */

static struct urt_dispatch_item keyed(const char *key, const char *payload, uint64_t delay_ns)
{
    return (struct urt_dispatch_item){.kind = "rec", .payload = payload, .key = key, .delay_ns = delay_ns};
}

Test(dispatch_features, unique_keys_replace_preserve_keep, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_keys");
    env_create(&e);
    urt_dispatch_handle(e.d, "other", h_record, NULL); /* nothing of kind rec runs: the strands stay pending */
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct items_wait w;
    struct urt_dispatch_item it = keyed("k1", "first", 3600 * 1000 * MS);
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_INSERTED);
    char id[37];
    snprintf(id, sizeof(id), "%s", w.ids[0]);
    long long sched = pg_ll(e.pg, "SELECT extract(epoch FROM schedule)::bigint FROM urt_strand WHERE id = '%s'", id);
    /* replace: the pending strand takes the new payload and schedule */
    it = keyed("k1", "second", 7200 * 1000 * MS);
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_REPLACED);
    cr_assert_str_eq(w.ids[0], id);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand"), 1);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE payload = 'second' AND "
                             "extract(epoch FROM schedule)::bigint > %lld + 3000", sched), 1);
    /* preserve_schedule: the payload changes, the schedule stays */
    sched = pg_ll(e.pg, "SELECT extract(epoch FROM schedule)::bigint FROM urt_strand WHERE id = '%s'", id);
    it = keyed("k1", "third", 0);
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_PRESERVE_SCHEDULE, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_REPLACED);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE payload = 'third' AND "
                             "extract(epoch FROM schedule)::bigint = %lld", sched), 1);
    /* keep: refused, the live strand stays as it is */
    it = keyed("k1", "fourth", 0);
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_KEEP, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_KEPT);
    cr_assert_str_eq(w.ids[0], id);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE payload = 'third'"), 1);
    /* one batch with k2 twice and an unkeyed item: replace -> the last k2 wins */
    struct urt_dispatch_item b[3] = {keyed("k2", "x", 0), keyed(NULL, "free", 0), keyed("k2", "y", 0)};
    enqueue_items(&e, b, 3, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_REPLACED);
    cr_assert_eq(w.outcomes[1], URT_DISPATCH_INSERTED);
    cr_assert_eq(w.outcomes[2], URT_DISPATCH_INSERTED);
    cr_assert_str_eq(w.ids[0], w.ids[2]);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE key = 'k2' AND payload = 'y'"), 1);
    /* keep -> the first of a batch wins */
    struct urt_dispatch_item c[2] = {keyed("k3", "p", 0), keyed("k3", "q", 0)};
    enqueue_items(&e, c, 2, URT_DISPATCH_KEY_KEEP, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_INSERTED);
    cr_assert_eq(w.outcomes[1], URT_DISPATCH_KEPT);
    cr_assert_str_eq(w.ids[0], w.ids[1]);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE key = 'k3' AND payload = 'p'"), 1);
    /* a finished holder holds no key: the key is free again */
    pg_ok(e.pg, "UPDATE urt_strand SET exitval = 'x' WHERE key = 'k3'");
    struct urt_dispatch_item d1 = keyed("k3", "again", 0);
    enqueue_items(&e, &d1, 1, URT_DISPATCH_KEY_KEEP, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_INSERTED);
    env_fini(&e);
}

Test(dispatch_features, unique_keys_running_holder, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_keys_running");
    e.opt.lease_ns = 30000 * MS; /* the held run stays within its budget (a quarter of the lease) */
    env_create(&e);
    urt_dispatch_handle(e.d, "hold", h_hold, NULL);
    atomic_store(&g_hold_running, 0);
    atomic_store(&g_hold_release, 0);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct items_wait w;
    struct urt_dispatch_item it = {.kind = "hold", .payload = "1", .key = "r"};
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_REPLACE, &w);
    char first[37];
    snprintf(first, sizeof(first), "%s", w.ids[0]);
    cr_assert(WAIT_UNTIL(atomic_load(&g_hold_running), 10000));
    /* keep: the running holder stays, the item is refused */
    it.payload = "2";
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_KEEP, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_KEPT);
    cr_assert_str_eq(w.ids[0], first);
    /* replace: the running holder keeps running without its key; a new strand takes it */
    it.payload = "3";
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert_eq(w.outcomes[0], URT_DISPATCH_INSERTED);
    cr_assert_str_neq(w.ids[0], first);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND key IS NULL AND payload = '1'",
                       first), 1);
    atomic_store(&g_hold_release, 1);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'held'") == 2, 10000));
    env_fini(&e);
}

/* ---- attempts, dead letters, requeue ---------------------------------------------------- */

Test(dispatch_features, attempts_end_in_the_dead_letters, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_attempts");
    env_create(&e);
    urt_dispatch_handle(e.d, "fail", h_fail, NULL);
    urt_dispatch_handle(e.d, "later", h_fail_until, NULL);
    atomic_store(&g_fail_until, 1);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct items_wait w;
    struct urt_dispatch_item it[2] = {{.kind = "fail", .max_attempts = 3}, {.kind = "later", .max_attempts = 2}};
    enqueue_items(&e, it, 2, URT_DISPATCH_KEY_REPLACE, &w);
    char fail_id[37], later_id[37];
    snprintf(fail_id, sizeof(fail_id), "%s", w.ids[0]);
    snprintf(later_id, sizeof(later_id), "%s", w.ids[1]);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE halted = 'failed'") == 2, 20000),
              "the strands did not reach the dead letters");
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE id = '%s'", fail_id), 3, "exactly 3 tries");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND last_error = 'failure number 3' "
                             "AND exitval IS NULL AND halted_at IS NOT NULL AND lease < now()", fail_id), 1,
                 "the last error is kept");
    sleep_us(300000);
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE id = '%s'", fail_id), 3, "a dead letter ran again");
    cr_assert_geq(metrics(&e).dead, 2);
    /* requeue: due now with its tries reset; it succeeds this time */
    atomic_store(&g_fail_until, 0);
    cr_assert_eq(call_status(urt_dispatch_requeue, &e, later_id), 0);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND exitval = 'ok'",
                               later_id) == 1, 10000));
    cr_assert_eq(pg_ll(e.pg, "SELECT try FROM urt_strand WHERE id = '%s'", later_id), 1);
    cr_assert_eq(call_status(urt_dispatch_requeue, &e, later_id), -ENOENT, "not halted any more");
    /* a strand whose tries are used up and whose last lease expired (its
     * process died) is not run again: the take moves it to the dead letters */
    pg_ok(e.pg, "INSERT INTO urt_strand (kind, try, max_attempts, lease) VALUES ('later', 2, 2, now() - "
                "interval '1 second')");
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE halted = 'failed' AND last_error LIKE "
                                     "'attempts used up%%'") == 1, 10000));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'later' AND exitval IS NOT NULL"), 1,
                 "the spent strand ran");
    env_fini(&e);
}

/* ---- cancel ------------------------------------------------------------------------------- */

Test(dispatch_features, cancel_before_start, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_cancel");
    e.opt.lease_ns = 30000 * MS; /* the held run stays within its budget (a quarter of the lease) */
    env_create(&e);
    urt_dispatch_handle(e.d, "hold", h_hold, NULL);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    atomic_store(&g_hold_running, 0);
    atomic_store(&g_hold_release, 0);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct items_wait w;
    struct urt_dispatch_item it[3] = {{.kind = "rec", .payload = "later", .delay_ns = 1000 * MS},
                                      {.kind = "hold"},
                                      {.kind = "rec", .payload = "now"}};
    enqueue_items(&e, it, 3, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert_eq(call_status(urt_dispatch_cancel, &e, w.ids[0]), 0, "a pending strand is cancelled");
    cr_assert(WAIT_UNTIL(atomic_load(&g_hold_running), 10000));
    cr_assert_eq(call_status(urt_dispatch_cancel, &e, w.ids[1]), -EBUSY, "a running strand is not");
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'now'") == 1, 10000));
    cr_assert_eq(call_status(urt_dispatch_cancel, &e, w.ids[2]), -EALREADY, "a finished one is not");
    cr_assert_eq(call_status(urt_dispatch_cancel, &e, w.ids[0]), -EALREADY, "cancelled before");
    cr_assert_eq(call_status(urt_dispatch_cancel, &e, "00000000-0000-4000-8000-000000000000"), -ENOENT);
    sleep_us(1500000); /* past its time: still not run */
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE id = '%s' AND halted = 'cancelled' AND "
                             "exitval IS NULL AND try = 0", w.ids[0]), 1, "the cancelled strand ran");
    atomic_store(&g_hold_release, 1);
    /* requeue brings it back */
    cr_assert_eq(call_status(urt_dispatch_requeue, &e, w.ids[0]), 0);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'later'") == 1, 10000));
    env_fini(&e);
}

/* ---- a failing batch ------------------------------------------------------------------------- */

static void h_named(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    urt_dispatch_run_done(run, s->payload);
}

Test(dispatch_features, a_failing_batch_is_split, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_split");
    e.opt.pool = 32;
    e.opt.connections = 1; /* every release at one connection: batches of many */
    e.opt.lease_ns = 6000 * MS;
    env_create(&e);
    urt_dispatch_handle(e.d, "named", h_named, NULL);
    /* the database refuses the exit value 'bad' (a trigger of the user's) */
    pg_ok(e.pg, "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.exitval = 'bad' THEN RAISE EXCEPTION 'no bad exit values'; END IF; RETURN NEW; END $$");
    pg_ok(e.pg, "CREATE TRIGGER refuse_bad BEFORE UPDATE ON urt_strand FOR EACH ROW EXECUTE FUNCTION refuse_bad()");
    pg_ok(e.pg, "INSERT INTO urt_strand (kind, payload) SELECT 'named', CASE WHEN g %% 30 = 0 THEN 'bad' ELSE 'good' "
                "END FROM generate_series(1, 300) g");
    atomic_store(&g_splits, 0);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'good'") == 290, 30000),
              "%lld good ones released", pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'good'"));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE payload = 'bad' AND exitval IS NULL"), 10);
    cr_assert_gt(atomic_load(&g_splits), 0, "no batch held a bad one with others: the test tests nothing");
    cr_assert_eq(metrics(&e).leases_violated, 0);
    env_fini(&e);
}

/* ---- upgrade --------------------------------------------------------------------------------- */

Test(dispatch_features, upgrade_from_schema_1, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_upgrade");
    /* a database at version 1, with strands of that schema, pending and finished */
    PGconn *pg = pg_open(e.ci);
    pg_ok(pg, "CREATE TABLE urt_dispatch_schema (version integer PRIMARY KEY, title text NOT NULL, applied "
              "timestamptz NOT NULL DEFAULT now())");
    PGresult *r = PQexec(pg, dsql_migrations[0]);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    pg_ok(pg, "INSERT INTO urt_dispatch_schema (version, title) VALUES (1, '%s')", dsql_migration_titles[0]);
    pg_ok(pg, "INSERT INTO urt_strand (kind, payload) SELECT 'rec', 'old' FROM generate_series(1, 20)");
    pg_ok(pg, "INSERT INTO urt_strand (kind, payload, exitval) VALUES ('rec', 'finished', 'before')");
    PQfinish(pg);
    cr_assert_eq(urt_dispatch_migrate(e.ci), DSQL_N_MIGRATIONS, "%s", urt_last_error());
    env_create(&e);
    cr_assert_eq(pg_ll(e.pg, "SELECT max(version) FROM urt_dispatch_schema"), DSQL_N_MIGRATIONS);
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE priority = 0 AND max_attempts = 25 AND "
                             "halted IS NULL AND key IS NULL"), 21, "the old rows got the new columns' defaults");
    atomic_store(&g_order_n, 0);
    atomic_store(&g_order_done, 0);
    urt_dispatch_handle(e.d, "rec", h_record, NULL);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'old'") == 20, 20000));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'before'"), 1);
    cr_assert_eq(order_done(), 20, "the finished strand ran again");
    env_fini(&e);
}

/* ---- the failure's backoff ------------------------------------------------------------------ */

static _Atomic int g_failed_once;

static void h_fail_once(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s;
    (void)ctx;
    urt_dispatch_run_fail(run, "once");
    atomic_store(&g_failed_once, 1);
}

/* The take leaves the schedule alone (a HOT update: a running strand due an
 * hour ago still says so); the failure's release moves it to a random point
 * within min(base x 2^(try-1), max) from now: a strand due an hour ago is,
 * after one failed run, due within 2 s — not before the run, not later than
 * the cap. */
Test(dispatch_features, a_failure_moves_the_schedule_by_its_backoff, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_backoff");
    e.opt.backoff_base_ns = 2000 * MS;
    e.opt.backoff_max_ns = 2000 * MS;
    e.opt.lease_ns = 30000 * MS;
    env_create(&e);
    urt_dispatch_handle(e.d, "once", h_fail_once, NULL);
    urt_dispatch_handle(e.d, "hold", h_hold, NULL);
    atomic_store(&g_hold_running, 0);
    atomic_store(&g_hold_release, 0);
    /* a running strand's schedule is the one it had: the take did not touch it */
    pg_ok(e.pg, "INSERT INTO urt_strand (kind, schedule) VALUES ('hold', now() - interval '1 hour')");
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_hold_running), 10000));
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'hold' AND lease > now() AND try = 1 "
                             "AND schedule < now() - interval '59 minutes'"), 1, "the take moved the schedule");
    atomic_store(&g_hold_release, 1);
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE exitval = 'held'") == 1, 10000));
    pg_ok(e.pg, "INSERT INTO urt_strand (kind, schedule) VALUES ('once', now() - interval '1 hour')");
    long long before = pg_ll(e.pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint");
    cr_assert(WAIT_UNTIL(atomic_load(&g_failed_once), 10000));
    cr_assert_eq(urt_dispatch_stop(e.d, 30000 * MS), 0); /* the release is applied before stop returns */
    long long sched = pg_ll(e.pg, "SELECT (extract(epoch FROM schedule) * 1000000)::bigint FROM urt_strand "
                                  "WHERE kind = 'once'");
    long long now = pg_ll(e.pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint");
    cr_assert_eq(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE last_error = 'once' AND lease < now()"), 1);
    if (pg_ll(e.pg, "SELECT try FROM urt_strand WHERE kind = 'once'") == 1) { /* not retried before the stop */
        cr_assert_geq(sched, before, "the failure did not move the schedule (%lld < %lld)", sched, before);
        cr_assert_leq(sched, now + 2000000, "the backoff passed its cap");
    }
    cr_assert(WAIT_UNTIL(pg_ll(e.pg, "SELECT count(*) FROM urt_strand WHERE kind = 'once' AND schedule < now()") == 1,
                         5000),
              "the retry is not due within the 2 s cap");
    env_fini(&e);
}

/* ---- what a run sees of its strand ------------------------------------------------------------ */

static _Atomic int g_fields_seen;
static uint32_t g_seen_max, g_seen_try;
static int32_t g_seen_prio;
static char g_seen_error[64];

static void h_fields(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)ctx;
    if (s->try_count == 1) {
        if (s->last_error)
            snprintf(g_seen_error, sizeof(g_seen_error), "unexpected: %s", s->last_error);
        urt_dispatch_run_fail(run, "the first reason");
        return;
    }
    g_seen_max = s->max_attempts;
    g_seen_try = s->try_count;
    g_seen_prio = s->priority;
    snprintf(g_seen_error, sizeof(g_seen_error), "%s", s->last_error ? s->last_error : "(null)");
    atomic_store_explicit(&g_fields_seen, 1, memory_order_release); /* after the fields */
    urt_dispatch_run_done(run, "seen");
}

Test(dispatch_features, a_run_sees_its_attempts_priority_and_last_error, .timeout = 120)
{
    struct env e;
    env_init(&e, "feat_fields");
    env_create(&e);
    urt_dispatch_handle(e.d, "fields", h_fields, NULL);
    cr_assert_eq(urt_dispatch_start(e.d), 0);
    struct items_wait w;
    struct urt_dispatch_item it = {.kind = "fields", .priority = -7, .max_attempts = 5};
    enqueue_items(&e, &it, 1, URT_DISPATCH_KEY_REPLACE, &w);
    cr_assert(WAIT_UNTIL(atomic_load_explicit(&g_fields_seen, memory_order_acquire), 10000));
    cr_assert_eq(g_seen_try, 2);
    cr_assert_eq(g_seen_max, 5);
    cr_assert_eq(g_seen_prio, -7);
    cr_assert_str_eq(g_seen_error, "the first reason", "the second run sees the first one's failure");
    env_fini(&e);
}
