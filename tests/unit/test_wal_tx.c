/*
 * tests/unit/test_wal_tx.c — transactions commit through the write-ahead log
 * (urt_tx_commit -> tx/commit_hook.h -> tx/wal.c): every response, records in
 * append order in one epoch, recovery replays them. Skipped (one test that
 * says why) when the transaction layer (urt/tx.h) is not in the tree.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#if defined(__has_include) && __has_include(<urt/tx.h>)
#include <urt/tx.h>

struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, errors;
};

static void on_commit(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    struct done *d = arg;
    pthread_mutex_lock(&d->mu);
    d->n++;
    if (status)
        d->errors++;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

struct seen {
    uint64_t n, last_epoch, bad;
    uint64_t ids[64];
    uint32_t idx[64];
};

static int on_rec(void *arg, const struct urt_log_record *r)
{
    struct seen *s = arg;
    uint64_t v;
    if (r->len != 8)
        return 0; /* an empty commit's marker record */
    memcpy(&v, r->payload, 8);
    if (v >> 32 != r->tx_id || r->epoch < s->last_epoch)
        s->bad++;
    if (r->tx_id < 64) {
        if ((uint32_t)v != s->idx[r->tx_id])
            s->bad++; /* records of a transaction in append order */
        s->idx[r->tx_id]++;
    }
    s->last_epoch = r->epoch;
    s->n++;
    return 0;
}

Test(wal_tx, commit_responses_through_the_log, .timeout = 60)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "/tmp/urt-wal-tx.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = 0;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct done d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    int total = 0;
    for (uint64_t id = 1; id <= 30; id++) {
        struct urt_tx_options opt;
        urt_tx_options_init(&opt);
        opt.id = id;
        urt_tx *tx;
        cr_assert_eq(urt_tx_begin(rt, &opt, &tx), 0);
        for (uint32_t k = 0; k < id % 4; k++) {
            uint64_t v = id << 32 | k;
            cr_assert_eq(urt_tx_log(tx, &v, 8), 0);
        }
        total += (int)(id % 4);
        cr_assert_eq(urt_tx_commit(tx, (enum urt_commit_response)(id % 3), on_commit, &d), 0, "%s",
                     urt_last_error());
        urt_tx_release(tx);
    }
    pthread_mutex_lock(&d.mu);
    while (d.n < 30)
        pthread_cond_wait(&d.cv, &d.mu);
    pthread_mutex_unlock(&d.mu);
    cr_assert_eq(d.errors, 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s = {0};
    struct urt_log_recover_ops ops = {.record = on_rec};
    cr_assert_eq(urt_log_recover(dir, 0, &ops, &s, NULL), 0, "%s", urt_last_error());
    cr_assert_eq(s.bad, 0);
    cr_assert_eq(s.n, (uint64_t)total);
    DIR *dd = opendir(dir);
    struct dirent *e;
    while ((e = readdir(dd)))
        if (e->d_name[0] != '.')
            unlinkat(dirfd(dd), e->d_name, 0);
    closedir(dd);
    rmdir(dir);
}

#else

Test(wal_tx, commit_responses_through_the_log)
{
    cr_skip_test("the transaction layer (urt/tx.h, issue 3) is not in this tree yet");
}

#endif
