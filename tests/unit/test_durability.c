/*
 * tests/unit/test_durability.c — an engine's own durability source
 * (urt_durability_source / urt_durability_notify, urt/log.h; issue 14 point 2).
 *
 * Model: the "engine" hands out markers from an open-marker counter; a
 * notifier thread closes markers and notifies them at random moments. Each
 * stored commit must be answered exactly once, with status 0, never before
 * a notify covering its marker began, never before on_durable heard of such
 * a marker; with one worker (or direct callbacks) answers come in marker
 * order. Shutdown answers waiting commits -ECANCELED once; bad use gets a
 * documented errno and a message. A release whose callbacks take long is
 * split over the workers (its rest stolen by an idle one), so busy clients
 * that commit again from their callbacks spread.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"

#define CLIENTS 8

static _Atomic uint64_t open_marker = 1;  /* assign hands this out */
static _Atomic uint64_t notified;         /* the largest marker a notify began for */
static _Atomic uint64_t heard;            /* the largest marker on_durable heard */
static _Atomic uint64_t early, order_bad, last_answered, assigned;
static _Atomic bool stop_notifier;

static uint64_t assign(void *arg, uint64_t tx_id, const void *rec, uint32_t len)
{
    (void)arg, (void)tx_id, (void)rec, (void)len;
    atomic_fetch_add(&assigned, 1);
    return atomic_load(&open_marker);
}

static void observe(uint64_t m, void *arg)
{
    (void)arg;
    atomic_store(&heard, m);
}

static void *notifier(void *arg)
{
    urt_runtime *rt = arg;
    unsigned seed = 7;
    while (!atomic_load(&stop_notifier)) {
        sleep_us(rand_r(&seed) % 300);
        uint64_t m = atomic_fetch_add(&open_marker, 1); /* close marker m */
        atomic_store(&notified, m);
        urt_durability_notify(rt, m);
    }
    uint64_t m = atomic_fetch_add(&open_marker, 1);
    atomic_store(&notified, m);
    urt_durability_notify(rt, m);
    return NULL;
}

struct client {
    struct urt_commit c;
    struct urt_task t;
    urt_runtime *rt;
    uint64_t next, end;
    uint8_t *answered; /* per id */
    _Atomic int *left;
    bool ordered;
};

static void client_issue(struct client *k);

static void client_cb(struct urt_commit *c, int status, void *arg)
{
    struct client *k = arg;
    uint64_t m = urt_commit_marker(c);
    if (status || m > atomic_load(&notified) || m > atomic_load(&heard))
        atomic_fetch_add(&early, 1);
    if (k->ordered) {
        uint64_t prev = atomic_exchange(&last_answered, m);
        if (m < prev)
            atomic_fetch_add(&order_bad, 1);
    }
    k->answered[k->next]++;
    if (++k->next == k->end) {
        atomic_fetch_sub(k->left, 1);
        return;
    }
    client_issue(k);
}

static void client_issue(struct client *k)
{
    uint64_t v = k->next;
    if (urt_log_commit(k->rt, &k->c, k->next, &v, sizeof(v), URT_COMMIT_STORED, client_cb, k))
        atomic_fetch_sub(k->left, 1);
}

static enum urt_task_result client_start(struct urt_task *t, void *arg)
{
    (void)t;
    client_issue(arg);
    return URT_TASK_DONE;
}

static void run_model(uint32_t workers, bool direct, bool ordered)
{
    atomic_store(&open_marker, 1);
    atomic_store(&notified, 0);
    atomic_store(&heard, 0);
    atomic_store(&early, 0);
    atomic_store(&order_bad, 0);
    atomic_store(&last_answered, 0);
    atomic_store(&stop_notifier, false);
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.direct_commit_callback = direct;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_durability_source src = {.assign = assign};
    cr_assert_eq(urt_durability_source(rt, &src), 0, "%s", urt_last_error());
    cr_assert_eq(urt_log_on_durable(rt, observe, NULL), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, notifier, rt), 0);
    const uint64_t per = SCALE(300, 60);
    static struct client k[CLIENTS];
    uint8_t *answered = calloc(CLIENTS * per, 1);
    _Atomic int left = CLIENTS;
    for (int i = 0; i < CLIENTS; i++) {
        k[i] = (struct client){.rt = rt, .next = i * per, .end = (i + 1) * per, .answered = answered,
                               .left = &left, .ordered = ordered};
        urt_task_init(&k[i].t, client_start, &k[i]);
        cr_assert_eq(urt_task_submit(rt, &k[i].t, 0), 0);
    }
    bool done = WAIT_UNTIL(atomic_load(&left) == 0, 60000);
    atomic_store(&stop_notifier, true);
    pthread_join(th, NULL);
    cr_assert(done, "clients did not finish (%d left)", atomic_load(&left));
    for (uint64_t i = 0; i < CLIENTS * per; i++)
        cr_assert_eq(answered[i], 1, "commit %llu answered %u times", (unsigned long long)i, answered[i]);
    cr_assert_eq(atomic_load(&early), 0, "%llu commits answered before a notify (and on_durable) covered them",
                 (unsigned long long)atomic_load(&early));
    if (ordered)
        cr_assert_eq(atomic_load(&order_bad), 0, "answers out of marker order");
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_eq(st.commits, CLIENTS * per);
    cr_assert_geq(st.durable, atomic_load(&notified) - 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(answered);
    leak_check();
}

Test(durability, model_several_workers, .timeout = 120)
{
    run_model(4, false, false);
}

Test(durability, model_one_worker_in_marker_order, .timeout = 120)
{
    run_model(1, false, true);
}

Test(durability, model_direct_callbacks_in_marker_order, .timeout = 120)
{
    run_model(2, true, true);
}

/* ---- responses, transactions, shutdown ---------------------------------------------- */

static _Atomic int calls, cancelled, ok;
static void count_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c, (void)arg;
    atomic_fetch_add(&calls, 1);
    if (status == -ECANCELED)
        atomic_fetch_add(&cancelled, 1);
    else if (status == 0)
        atomic_fetch_add(&ok, 1);
}

static uint64_t fixed_marker(void *arg, uint64_t tx_id, const void *rec, uint32_t len)
{
    (void)rec, (void)len;
    return arg ? *(uint64_t *)arg : tx_id;
}

static _Atomic int tx_status = 1;
static void tx_done(urt_tx *t, int status, void *arg)
{
    (void)t, (void)arg;
    atomic_store(&tx_status, status);
}

Test(durability, responses_and_shutdown_with_commits_waiting, .timeout = 60)
{
    atomic_store(&calls, 0), atomic_store(&cancelled, 0), atomic_store(&ok, 0);
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_durability_source src = {.assign = fixed_marker};
    cr_assert_eq(urt_durability_source(rt, &src), 0);
    static struct urt_commit c[6];
    uint64_t v = 1;
    /* accepted / available: at once, whatever the marker */
    cr_assert_eq(urt_log_commit(rt, &c[0], 10, &v, 8, URT_COMMIT_ACCEPTED, count_cb, NULL), 0);
    cr_assert_eq(urt_log_commit(rt, &c[1], 11, &v, 8, URT_COMMIT_AVAILABLE, count_cb, NULL), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&calls) == 2, 5000));
    /* stored: markers 3, 5, 7 (tx id); notify 5 answers two of them */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(urt_log_commit(rt, &c[2 + i], 3 + 2 * (uint64_t)i, &v, 8, URT_COMMIT_STORED, count_cb, NULL), 0);
    sleep_us(20000);
    cr_assert_eq(atomic_load(&calls), 2, "a stored commit was answered before any notify");
    cr_assert_eq(urt_durability_notify(rt, 5), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&calls) == 4, 5000));
    cr_assert_eq(urt_durability_notify(rt, 4), 0); /* lower: nothing */
    cr_assert_eq(urt_durability_notify(rt, 5), 0); /* repeated: nothing */
    sleep_us(20000);
    cr_assert_eq(atomic_load(&calls), 4);
    /* a transaction committed stored through the source */
    struct urt_tx_options opt;
    urt_tx_options_init(&opt);
    opt.id = 6;
    urt_tx *tx;
    cr_assert_eq(urt_tx_begin(rt, &opt, &tx), 0);
    cr_assert_eq(urt_tx_log(tx, &v, 8), 0);
    atomic_store(&tx_status, 1);
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_STORED, tx_done, NULL), 0, "%s", urt_last_error());
    urt_tx_release(tx);
    cr_assert_eq(urt_durability_notify(rt, 6), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&tx_status) == 0, 5000), "the transaction's stored commit was not answered");
    /* the commit of marker 7 still waits: destroy answers it -ECANCELED, once */
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&calls), 5);
    cr_assert_eq(atomic_load(&cancelled), 1);
    cr_assert_eq(atomic_load(&ok), 4);
    leak_check();
}

static uint64_t zero_marker(void *arg, uint64_t tx_id, const void *rec, uint32_t len)
{
    (void)arg, (void)tx_id, (void)rec, (void)len;
    return 0;
}

Test(durability, bad_use_is_refused_with_a_message, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_durability_source src = {.assign = zero_marker}, none = {0};
    struct urt_commit c;
    uint64_t v = 0;
    cr_assert_eq(urt_durability_notify(rt, 1), -ENOTSUP);
    cr_assert_not_null(strstr(urt_last_error(), "urt_durability_notify"));
    cr_assert_eq(urt_durability_source(NULL, &src), -EINVAL);
    cr_assert_eq(urt_durability_source(rt, NULL), -EINVAL);
    cr_assert_eq(urt_durability_source(rt, &none), -EINVAL);
    cr_assert_not_null(strstr(urt_last_error(), "assign"));
    cr_assert_eq(urt_durability_source(rt, &src), 0);
    cr_assert_eq(urt_durability_source(rt, &src), -EBUSY);
    cr_assert_not_null(strstr(urt_last_error(), "registered already"));
    cr_assert_eq(urt_log_commit(rt, &c, 1, &v, 8, URT_COMMIT_STORED, count_cb, NULL), -ERANGE);
    cr_assert_not_null(strstr(urt_last_error(), "marker 0"));
    cr_assert_eq(urt_durability_notify(NULL, 1), -EINVAL);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);

    /* a runtime with a log_dir has urt's own log as its source */
    char dir[] = "/tmp/urt-dur-test.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    test_config(&cfg, 1);
    cfg.log_dir = dir;
    rt = rt_create_or_skip(&cfg);
    cr_assert_eq(urt_durability_source(rt, &src), -EEXIST);
    cr_assert_not_null(strstr(urt_last_error(), "log_dir"));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    leak_check();
}

/* ---- a large release spreads over the workers (issue 12 point 3) -------------------- */

/* Clients that commit again from their callback live where their callbacks
 * run. All start on worker 0; each callback does some work (about 20 µs), as
 * an engine's would, so a release (all commits of one marker) takes long and
 * its rest is left for an idle worker to steal: the callbacks of a large
 * release run on both workers — with one task per release they would all
 * run on one, and the clients would never spread. */
#define SPREAD_CLIENTS 32
#define SPREAD_MARKERS 4096

static _Atomic uint32_t spread_mask[SPREAD_MARKERS]; /* per marker: bit w = a callback ran on worker w */
static _Atomic uint32_t spread_count[SPREAD_MARKERS];

struct spread_client {
    struct urt_commit c;
    struct urt_task t;
    urt_runtime *rt;
    uint32_t left;
    _Atomic int *running;
};

static void spread_issue(struct spread_client *k);

/* The first client that stopped early: how (a callback's status or
 * urt_log_commit's return), at which marker, with how many rounds left. */
static _Atomic int spread_fail_rc;
static _Atomic uint64_t spread_fail_marker;
static _Atomic uint32_t spread_fail_left;

static void spread_failure(int rc, uint64_t marker, uint32_t left)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&spread_fail_rc, &none, rc)) {
        atomic_store(&spread_fail_marker, marker);
        atomic_store(&spread_fail_left, left);
    }
}

static void spread_cb(struct urt_commit *c, int status, void *arg)
{
    struct spread_client *k = arg;
    uint64_t m = urt_commit_marker(c);
    int w = urt_current_worker(k->rt);
    if (status == 0 && m < SPREAD_MARKERS && w >= 0 && w < 32) {
        atomic_fetch_or(&spread_mask[m], 1u << w);
        atomic_fetch_add(&spread_count[m], 1);
    }
    uint64_t t0 = urt_now_ns();
    while (urt_now_ns() - t0 < 20000)
        ; /* the client's own work */
    if (status)
        spread_failure(status, m, k->left);
    if (status || --k->left == 0) {
        atomic_fetch_sub(k->running, 1);
        return;
    }
    spread_issue(k);
}

static void spread_issue(struct spread_client *k)
{
    uint64_t v = k->left;
    int rc = urt_log_commit(k->rt, &k->c, v, &v, sizeof(v), URT_COMMIT_STORED, spread_cb, k);
    if (rc) {
        spread_failure(rc, atomic_load(&open_marker), k->left);
        atomic_fetch_sub(k->running, 1);
    }
}

static enum urt_task_result spread_start(struct urt_task *t, void *arg)
{
    (void)t;
    spread_issue(arg);
    return URT_TASK_DONE;
}

/* A commit's count and its marker are taken together, under the lock the
 * notifier closes a marker under: a client counted for round m always gets
 * marker m. (Counted, then the marker read outside the lock, the round's
 * last client could read m + 1 after the notifier closed m on its count: it
 * then waited on m + 1 one round behind the others, and m + 1 never filled;
 * about once in 70 runs with two other tests beside it.) */
static pthread_mutex_t spread_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t spread_assign(void *arg, uint64_t tx_id, const void *rec, uint32_t len)
{
    (void)arg, (void)tx_id, (void)rec, (void)len;
    pthread_mutex_lock(&spread_lock);
    atomic_fetch_add(&assigned, 1);
    uint64_t m = atomic_load(&open_marker);
    pthread_mutex_unlock(&spread_lock);
    return m;
}

/* Closes the open marker once every client waits on it (a release of all of them). */
static void *spread_notifier(void *arg)
{
    urt_runtime *rt = arg;
    while (!atomic_load(&stop_notifier)) {
        pthread_mutex_lock(&spread_lock);
        uint64_t m = atomic_load(&open_marker);
        bool full = atomic_load(&assigned) >= m * SPREAD_CLIENTS;
        if (full && m + 1 < SPREAD_MARKERS)
            atomic_fetch_add(&open_marker, 1);
        pthread_mutex_unlock(&spread_lock);
        if (m + 1 >= SPREAD_MARKERS)
            break;
        if (full)
            urt_durability_notify(rt, m);
        else
            sleep_us(20);
    }
    atomic_fetch_add(&open_marker, 1);
    urt_durability_notify(rt, UINT64_MAX - 1);
    return NULL;
}

Test(durability, a_large_release_spreads_over_the_workers, .timeout = 120)
{
    memset(spread_mask, 0, sizeof(spread_mask));
    memset(spread_count, 0, sizeof(spread_count));
    atomic_store(&spread_fail_rc, 0);
    atomic_store(&open_marker, 1);
    atomic_store(&assigned, 0);
    atomic_store(&stop_notifier, false);
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_durability_source src = {.assign = spread_assign};
    cr_assert_eq(urt_durability_source(rt, &src), 0, "%s", urt_last_error());
    static struct spread_client k[SPREAD_CLIENTS];
    _Atomic int running = SPREAD_CLIENTS;
    uint32_t rounds = SCALE(60, 20);
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        k[i] = (struct spread_client){.rt = rt, .left = rounds, .running = &running};
        urt_task_init(&k[i].t, spread_start, &k[i]);
        cr_assert_eq(urt_task_submit_to(rt, 0, &k[i].t, 0), 0); /* every client starts on worker 0 */
    }
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, spread_notifier, rt), 0);
    bool done = WAIT_UNTIL(atomic_load(&running) == 0, 60000);
    int left_at_end = atomic_load(&running); /* before the notifier's last notify releases them */
    uint64_t open_at_end = atomic_load(&open_marker), assigned_at_end = atomic_load(&assigned);
    atomic_store(&stop_notifier, true);
    pthread_join(th, NULL);
    cr_assert(done,
              "clients did not finish (%d left; open marker %" PRIu64 ", %" PRIu64 " assigned; "
              "first early stop: %d at marker %" PRIu64 " with %u rounds left)",
              left_at_end, open_at_end, assigned_at_end, atomic_load(&spread_fail_rc),
              atomic_load(&spread_fail_marker), atomic_load(&spread_fail_left));
    uint32_t large = 0, both = 0;
    for (uint32_t m = 1; m < SPREAD_MARKERS; m++) {
        if (atomic_load(&spread_count[m]) < SPREAD_CLIENTS / 2)
            continue;
        large++;
        both += atomic_load(&spread_mask[m]) == 3u;
    }
    cr_log_info("%u of %u large releases ran on both workers", both, large);
    cr_assert_geq(large, rounds / 2, "only %u releases of %d or more commits", large, SPREAD_CLIENTS / 2);
    /* without the split none does; with it most do (the peer must wake in
     * time: a quarter at least; under a sanitizer, whose slowed wake-ups let
     * the owner finish most releases alone, one at least) */
    cr_assert_geq(both * SCALE(4, large), large, "%u of %u large releases ran on both workers", both, large);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    leak_check();
}
