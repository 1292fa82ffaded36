/*
 * tests/property/prop_work.c — one random session (prop_work.h).
 *
 * Threading: the operations are issued from the test's thread; commits from
 * tasks and transactions' lane tasks run on the workers; callbacks run on
 * the workers and count down `outstanding` (seq_cst) after recording their
 * answer; failures are counted and the first is described under a mutex.
 * Nothing here uses criterion (callbacks run off the test's thread).
 */
#include "prop_work.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "prop_trace.h"

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint32_t pick(uint64_t *rng, uint32_t n)
{
    return (uint32_t)(rnd(rng) % n);
}

void pw_conf_random(struct pw_conf *c, uint64_t *rng)
{
    static const uint32_t workers[] = {1, 1, 2, 2, 2, 3, 4, 4};
    static const uint32_t segs[] = {64, 64, 64, 128, 65536, 65536};
    static const uint32_t pre[] = {0, 0, 16, 64, 64, 256};
    memset(c, 0, sizeof(*c));
    c->workers = workers[pick(rng, 8)];
    c->channels = pick(rng, 2) ? 0 : 1 + pick(rng, c->workers);
    c->segment_kb = segs[pick(rng, 6)];
    c->prealloc_kb = pre[pick(rng, 6)];
    c->sync = (enum urt_log_sync)pick(rng, c->prealloc_kb ? 4 : 2); /* auto, strict; single_* need preallocation */
    c->epoch_us = 50 + pick(rng, 2000);
    c->poll_us = pick(rng, 2) ? 1000 : 0;
    c->o_direct = pick(rng, 10) == 0;
    c->big = pick(rng, 3) == 0;
    c->ops = 10 + pick(rng, 240);
}

static const char *sync_name(enum urt_log_sync s)
{
    static const char *const n[] = {"auto", "strict", "single_flush", "single_write"};
    return (unsigned)s < 4 ? n[s] : "?";
}

int pw_conf_describe(const struct pw_conf *c, char *buf, size_t len)
{
    return snprintf(buf, len, "workers %u log_channels %u log_segment_kb %u log_prealloc_kb %u log_sync %s "
                              "epoch_duration_us %llu log_poll_us %u o_direct %d%s, %u operations",
                    c->workers, c->channels, c->segment_kb, c->prealloc_kb, sync_name(c->sync),
                    (unsigned long long)c->epoch_us, c->poll_us, c->o_direct, c->big ? ", large records" : "",
                    c->ops);
}

void pw_conf_apply(const struct pw_conf *c, const char *dir, struct urt_config *cfg)
{
    urt_config_init(cfg);
    cfg->workers = c->workers;
    cfg->placement = URT_PLACEMENT_NONE;
    cfg->worker_suspend_timeout_us = 60ull * 1000 * 1000;
    cfg->log_dir = dir;
    cfg->log_channels = c->channels;
    cfg->log_segment_kb = c->segment_kb;
    cfg->log_prealloc_kb = c->prealloc_kb;
    cfg->log_sync = c->sync;
    cfg->epoch_duration_us = c->epoch_us;
    cfg->log_poll_us = c->poll_us;
    cfg->o_direct = c->o_direct;
}

/* ---- the session's shared state ---------------------------------------------------------- */

static struct {
    urt_runtime *rt;
    _Atomic uint64_t outstanding, next_id, commits, acks, failures;
    pthread_mutex_t lock;
    char first_failure[256];
    bool big;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t aborts; /* the test's thread only */

static void failed(const char *what, int err)
{
    if (atomic_fetch_add(&S.failures, 1) == 0) {
        pthread_mutex_lock(&S.lock);
        snprintf(S.first_failure, sizeof(S.first_failure), "%s: %d (%s): %s", what, err,
                 strerror(err < 0 ? -err : err), urt_last_error());
        pthread_mutex_unlock(&S.lock);
    }
}

static uint32_t rec_len(uint64_t *rng)
{
    if (S.big && pick(rng, 3) == 0)
        return 500 + pick(rng, 5000);
    return PW_HEAD + pick(rng, 300);
}

static enum urt_commit_response response(uint64_t *rng)
{
    uint32_t r = pick(rng, 8);
    return r < 6 ? URT_COMMIT_STORED : r == 6 ? URT_COMMIT_AVAILABLE : URT_COMMIT_ACCEPTED;
}

/* ---- plain commits ------------------------------------------------------------------------- */

struct pcommit {
    struct urt_commit c;
    uint64_t id;
    enum urt_commit_response resp;
    uint32_t len;
    uint8_t rec[];
};

static void plain_done(struct urt_commit *c, int status, void *arg)
{
    struct pcommit *p = arg;
    (void)c;
    if (status)
        failed("a commit's answer", status);
    else if (p->resp == URT_COMMIT_STORED)
        pt_ack(p->id, 1, urt_commit_marker(&p->c)), atomic_fetch_add(&S.acks, 1);
    free(p);
    atomic_fetch_sub(&S.outstanding, 1);
}

static void plain_commit(uint32_t len, enum urt_commit_response resp)
{
    struct pcommit *p = malloc(sizeof(*p) + len);
    if (!p) {
        failed("malloc", -ENOMEM);
        return;
    }
    p->id = atomic_fetch_add(&S.next_id, 1);
    p->resp = resp;
    p->len = len;
    pw_payload_fill(p->rec, len, p->id, 0, 1);
    atomic_fetch_add(&S.outstanding, 1);
    atomic_fetch_add(&S.commits, 1);
    int rc = urt_log_commit(S.rt, &p->c, p->id, p->rec, len, resp, plain_done, p);
    if (rc) {
        failed("urt_log_commit", rc);
        atomic_fetch_sub(&S.outstanding, 1);
        free(p);
    }
}

/* A task on a worker that makes n commits there (lengths and responses from its own seed). */
struct task_commits {
    uint32_t n;
    uint64_t seed;
};

static enum urt_task_result commits_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct task_commits *k = arg;
    for (uint32_t i = 0; i < k->n; i++)
        plain_commit(rec_len(&k->seed), response(&k->seed));
    free(k);
    atomic_fetch_sub(&S.outstanding, 1);
    return URT_TASK_DONE;
}

static void spawn_commits(uint64_t *rng)
{
    struct task_commits *k = malloc(sizeof(*k));
    if (!k)
        return failed("malloc", -ENOMEM);
    k->n = 1 + pick(rng, 4);
    k->seed = rnd(rng) | 1;
    atomic_fetch_add(&S.outstanding, 1);
    int rc = urt_spawn(S.rt, commits_task, k, 0);
    if (rc) {
        failed("urt_spawn", rc);
        atomic_fetch_sub(&S.outstanding, 1);
        free(k);
    }
}

/* ---- transactions ------------------------------------------------------------------------------ */

struct ptx {
    uint64_t id;
    uint32_t count;
    enum urt_commit_response resp;
};

static void tx_done(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    struct ptx *p = arg;
    if (status)
        failed("a transaction's answer", status);
    else if (p->resp == URT_COMMIT_STORED)
        pt_ack(p->id, p->count, 0), atomic_fetch_add(&S.acks, 1);
    free(p);
    atomic_fetch_sub(&S.outstanding, 1);
}

static void tx_log(urt_tx *tx, uint64_t id, uint32_t index, uint32_t count, uint32_t len)
{
    uint8_t rec[8192];
    pw_payload_fill(rec, len, id, index, count);
    int rc = urt_tx_log(tx, rec, len);
    if (rc)
        failed("urt_tx_log", rc);
}

/* A task of a transaction's lane that logs one record, then counts down
 * the steps the committing thread waits for. */
struct tx_step {
    uint64_t id;
    uint32_t index, count, len;
    _Atomic uint32_t *left;
};

static enum urt_task_result tx_step_task(struct urt_task *t, void *arg)
{
    struct tx_step *k = arg;
    tx_log(urt_task_tx(t), k->id, k->index, k->count, k->len);
    atomic_fetch_sub(k->left, 1);
    free(k);
    return URT_TASK_DONE;
}

static void tx_step_cancelled(struct urt_task *t, void *arg)
{
    (void)t;
    struct tx_step *k = arg;
    failed("a transaction's task was cancelled", URT_TX_EINACTIVE);
    atomic_fetch_sub(k->left, 1);
    free(k);
}

static int tx_spawn_step(urt_tx *tx, uint64_t id, uint32_t index, uint32_t count, uint32_t len,
                         _Atomic uint32_t *left)
{
    struct tx_step *k = malloc(sizeof(*k));
    if (!k)
        return -ENOMEM;
    *k = (struct tx_step){id, index, count, len, left};
    atomic_fetch_add(left, 1);
    int rc = urt_tx_spawn(tx, tx_step_task, tx_step_cancelled, k, 0);
    if (rc) {
        atomic_fetch_sub(left, 1);
        free(k);
    }
    return rc;
}

static void wait_steps(_Atomic uint32_t *left)
{
    struct timespec d = {0, 20000};
    for (int i = 0; i < 1000000 && atomic_load(left); i++)
        nanosleep(&d, NULL);
    if (atomic_load(left))
        failed("a transaction's tasks did not run within 20 s", -ETIMEDOUT);
}

/* A transaction: records logged by this thread, then `steps` by tasks on
 * its lane (this thread waits for them: urt_tx_log is only for one thread at
 * a time), then committed from this thread, or (without steps, 1 in 20)
 * aborted: its records are never written. */
static void transaction(uint64_t *rng, uint32_t steps)
{
    struct ptx *p = malloc(sizeof(*p));
    if (!p)
        return failed("malloc", -ENOMEM);
    p->id = atomic_fetch_add(&S.next_id, 1);
    uint32_t direct = 1 + pick(rng, 4);
    p->count = direct + steps;
    p->resp = pick(rng, 5) ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE;
    struct urt_tx_options opt;
    urt_tx_options_init(&opt);
    opt.id = p->id;
    urt_tx *tx;
    int rc = urt_tx_begin(S.rt, &opt, &tx);
    if (rc) {
        free(p);
        return failed("urt_tx_begin", rc);
    }
    for (uint32_t i = 0; i < direct; i++)
        tx_log(tx, p->id, i, p->count, rec_len(rng));
    _Atomic uint32_t left = 0;
    for (uint32_t i = 0; i < steps; i++)
        if ((rc = tx_spawn_step(tx, p->id, direct + i, p->count, rec_len(rng), &left)))
            failed("urt_tx_spawn", rc);
    wait_steps(&left);
    if (!steps && pick(rng, 20) == 0) {
        if ((rc = urt_tx_abort(tx)))
            failed("urt_tx_abort", rc);
        free(p);
        aborts++;
    } else {
        atomic_fetch_add(&S.outstanding, 1);
        atomic_fetch_add(&S.commits, 1);
        if ((rc = urt_tx_commit(tx, p->resp, tx_done, p))) {
            failed("urt_tx_commit", rc);
            atomic_fetch_sub(&S.outstanding, 1);
            free(p);
        }
    }
    urt_tx_release(tx);
}

/* ---- the rest ---------------------------------------------------------------------------------- */

static void checkpoint(uint64_t *rng, struct pw_stats *st)
{
    struct urt_log_stats ls;
    if (urt_log_stats(S.rt, &ls))
        return failed("urt_log_stats", -1);
    uint64_t span = ls.durable > ls.checkpoint ? ls.durable - ls.checkpoint : 0;
    uint64_t m = ls.checkpoint + (span ? rnd(rng) % (span + 1) : 0);
    if (pick(rng, 4) == 0)
        m = ls.durable; /* as far as it may go */
    int rc = urt_log_checkpoint(S.rt, m);
    pt_ckpt(m, rc);
    if (rc < 0)
        failed("urt_log_checkpoint", rc);
    st->checkpoints++;
}

static bool wait_all(uint64_t ms)
{
    struct timespec d = {0, 100000};
    for (uint64_t i = 0; i < ms * 10; i++) {
        if (!atomic_load(&S.outstanding))
            return true;
        nanosleep(&d, NULL);
    }
    return false;
}

static void one_op(uint64_t *rng, struct pw_stats *st)
{
    uint32_t r = pick(rng, 100);
    if (r < 35) {
        for (uint32_t n = 1 + pick(rng, 6); n; n--)
            plain_commit(rec_len(rng), response(rng));
    } else if (r < 50) {
        for (uint32_t n = 1 + pick(rng, 3); n; n--)
            spawn_commits(rng);
    } else if (r < 75) {
        transaction(rng, 0), st->txs++;
    } else if (r < 85) {
        transaction(rng, 1 + pick(rng, 3)), st->txs++;
    } else if (r < 90) {
        checkpoint(rng, st);
    } else if (r < 95) {
        if (!wait_all(20000))
            failed("commits not answered within 20 s", -ETIMEDOUT);
    } else {
        struct timespec d = {0, (long)pick(rng, 1500) * 1000};
        nanosleep(&d, NULL);
    }
}

int pw_session(const char *dir, const struct pw_conf *c, uint64_t *rng, uint64_t id_base, struct pw_stats *st,
               char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    struct urt_config cfg;
    pw_conf_apply(c, dir, &cfg);
    S.big = c->big;
    atomic_store(&S.outstanding, 0);
    atomic_store(&S.next_id, id_base + 1);
    atomic_store(&S.commits, 0);
    atomic_store(&S.acks, 0);
    atomic_store(&S.failures, 0);
    aborts = 0;
    S.first_failure[0] = 0;
    int rc = urt_runtime_create(&cfg, &S.rt);
    if (rc) {
        snprintf(err, errlen, "urt_runtime_create: %d (%s): %s", rc, strerror(-rc), urt_last_error());
        return rc;
    }
    struct urt_log_stats ls;
    if (!urt_log_stats(S.rt, &ls)) {
        st->sync_mode = ls.sync_mode;
        snprintf(st->fs, sizeof(st->fs), "%s", ls.fs);
    }
    for (uint32_t i = 0; i < c->ops; i++)
        one_op(rng, st);
    if (!wait_all(30000))
        failed("commits not answered within 30 s", -ETIMEDOUT);
    rc = urt_runtime_destroy(S.rt, URT_SHUTDOWN_DRAIN);
    if (rc)
        failed("urt_runtime_destroy", rc);
    S.rt = NULL;
    st->commits = atomic_load(&S.commits);
    st->stored_acks = atomic_load(&S.acks);
    st->failures = atomic_load(&S.failures);
    st->aborts = aborts;
    snprintf(st->first_failure, sizeof(st->first_failure), "%s", S.first_failure);
    return 0;
}
