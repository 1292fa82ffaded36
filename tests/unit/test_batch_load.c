/*
 * tests/unit/test_batch_load.c — the transactional load (URT_BATCH_TRANSACTIONAL,
 * urt/batch.h): one transaction for every record of every file, at most
 * max_statements statements in flight, a loader task that yields while the
 * slots are full.
 *
 * Statements here are asynchronous on purpose: each returns
 * URT_BATCH_PENDING and completes from a task of its job that yields a few
 * times first, so statements stay in flight and the slots fill up. The test
 * counts statements in flight itself (never above the limit, and the limit
 * is reached), checks the loader yielded, and recovers the log: the whole
 * load is one transaction — every record there, or (after an error) none.
 */
#include "../helpers.h"

#include <fcntl.h>

#include <urt/batch.h>

struct lrun {
    _Atomic int32_t in_flight, max_in_flight;
    _Atomic uint32_t stmts, bad, done_calls;
    _Atomic int32_t status;
    _Atomic int fail_at; /* record number (field 0) that fails, -1: none */
    int yields;          /* per statement before it completes */
    char message[512];
};

struct ltail {
    struct urt_task t;
    struct urt_batch_stmt *s;
    struct lrun *r;
    int left;
};

static void l_complete(struct ltail *c, int status)
{
    atomic_fetch_sub(&c->r->in_flight, 1);
    urt_batch_stmt_done(c->s, status);
    free(c);
}

static enum urt_task_result l_tail(struct urt_task *t, void *arg)
{
    struct ltail *c = arg;
    (void)t;
    if (c->left-- > 0)
        return URT_TASK_YIELD;
    l_complete(c, 0);
    return URT_TASK_DONE;
}

static void l_tail_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    l_complete(arg, -ECANCELED);
}

static int l_statement(struct urt_batch_stmt *s, void *arg)
{
    struct lrun *r = arg;
    atomic_fetch_add(&r->stmts, 1);
    if (!s->tx || urt_task_tx(NULL) != NULL)
        atomic_fetch_add(&r->bad, 1);
    int32_t n = atomic_fetch_add(&r->in_flight, 1) + 1;
    int32_t m = atomic_load(&r->max_in_flight);
    while (n > m && !atomic_compare_exchange_weak(&r->max_in_flight, &m, n))
        ;
    uint32_t id = (uint32_t)strtoul(s->fields[0].data, NULL, 10);
    uint32_t rec[2] = {s->block->file, id};
    int rc = urt_tx_log(s->tx, rec, sizeof(rec)); /* on the transaction's lane */
    if (rc == 0 && (int)id == atomic_load(&r->fail_at) && s->block->file == 1)
        rc = urt_batch_stmt_error(s, -ERANGE, "record %u is out of range", id);
    if (rc) {
        atomic_fetch_sub(&r->in_flight, 1);
        return rc;
    }
    struct ltail *c = malloc(sizeof(*c));
    c->s = s;
    c->r = r;
    c->left = r->yields;
    urt_task_init(&c->t, l_tail, c);
    c->t.cancel = l_tail_cancel;
    if ((rc = urt_job_submit(s->job, &c->t, 0)) != 0) {
        free(c);
        atomic_fetch_sub(&r->in_flight, 1);
        return rc;
    }
    return URT_BATCH_PENDING;
}

static void l_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct lrun *r = arg;
    (void)b;
    snprintf(r->message, sizeof(r->message), "%s", message);
    atomic_store(&r->status, status);
    atomic_fetch_add(&r->done_calls, 1);
}

static void put_field(FILE *fp, const char *f)
{
    uint32_t len = (uint32_t)strlen(f);
    fwrite(&len, 4, 1, fp);
    fwrite(f, 1, len + 1, fp); /* with its 0x00 */
}

/* n records (i, "value, i"): CSV (with a header line if asked) or binary */
static char *l_file(const char *dir, const char *name, uint32_t n, bool binary, bool header)
{
    char *p = malloc(1024);
    snprintf(p, 1024, "%s/%s", dir, name);
    FILE *fp = fopen(p, "w");
    cr_assert_not_null(fp);
    if (binary)
        fwrite("URTBIN1\n", 1, 8, fp);
    if (header)
        fprintf(fp, "id,value\n");
    for (uint32_t i = 0; i < n; i++) {
        if (!binary) {
            fprintf(fp, "%u,\"value, %u\"\n", i, i);
            continue;
        }
        char a[16], v[32];
        snprintf(a, sizeof(a), "%u", i);
        snprintf(v, sizeof(v), "value, %u", i);
        uint32_t body = (uint32_t)(4 + strlen(a) + 1 + 4 + strlen(v) + 1);
        fwrite(&body, 4, 1, fp);
        put_field(fp, a);
        put_field(fp, v);
    }
    fclose(fp);
    return p;
}

struct lcount {
    uint64_t records, bad;
    uint64_t tx_id;
    uint32_t txs;
};

static int l_replay(void *arg, const struct urt_log_record *lr)
{
    struct lcount *c = arg;
    if (lr->len != 8) {
        c->bad++;
        return 0;
    }
    if (!c->txs || lr->tx_id != c->tx_id) {
        c->txs++;
        c->tx_id = lr->tx_id;
    }
    c->records++;
    return 0;
}

struct lcfg {
    uint32_t files, recs, slots, yields;
    uint64_t block_bytes;
    int fail_at;
    bool missing_second, binary, header;
};

/* Runs one load; returns its status, fills stats and what recovery found. */
static int l_run(const struct lcfg *c, struct lrun *r, struct urt_batch_stats *st, struct lcount *rec)
{
    char *dir = test_tmpdir("urt-load"), *logdir = test_tmpdir("urt-loadlog");
    char *f[8];
    const char *files[8];
    for (uint32_t i = 0; i < c->files; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%u.csv", i);
        files[i] = f[i] = l_file(dir, name, c->recs + i * 13, c->binary, c->header);
    }
    if (c->missing_second)
        unlink(f[1]);
    memset(r, 0, sizeof(*r));
    atomic_store(&r->fail_at, c->fail_at);
    r->yields = (int)c->yields;
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = logdir;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = c->files;
    o.block_bytes = c->block_bytes;
    o.flags = URT_BATCH_TRANSACTIONAL | (c->header ? URT_BATCH_CSV_HEADER : 0);
    o.format = c->binary ? URT_BATCH_BINARY : URT_BATCH_CSV;
    o.fields = 2;
    o.max_statements = c->slots;
    o.statement = l_statement;
    o.done = l_done;
    o.arg = r;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "urt_batch_start: %s", urt_last_error());
    int status = urt_batch_wait(b, 120ull * 1000 * 1000 * 1000);
    urt_batch_stats(b, st);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&r->done_calls), 1);
    cr_assert_eq(atomic_load(&r->bad), 0);
    memset(rec, 0, sizeof(*rec));
    struct urt_log_recover_ops ops = {.record = l_replay};
    cr_assert_eq(urt_log_recover(logdir, 0, &ops, rec, NULL), 0, "%s", urt_last_error());
    for (uint32_t i = 0; i < c->files; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
    test_remove_dir(logdir);
    return status;
}

Test(batch_load, slot_limit_and_yielding, .timeout = 120)
{
    const struct lcfg cfgs[] = {
        {.files = 3, .recs = SCALE(400, 150), .slots = 8, .yields = 3, .block_bytes = 1024, .fail_at = -1},
        {.files = 2, .recs = SCALE(300, 100), .slots = 1, .yields = 1, .block_bytes = 256, .fail_at = -1},
        {.files = 4, .recs = SCALE(500, 150), .slots = 64, .yields = 2, .block_bytes = 4096, .fail_at = -1},
        {.files = 1, .recs = SCALE(2000, 500), .slots = 10000, .yields = 0, .block_bytes = 1u << 20, .fail_at = -1},
        {.files = 3, .recs = SCALE(300, 100), .slots = 5, .yields = 2, .block_bytes = 300, .fail_at = -1,
         .binary = true},
        {.files = 2, .recs = SCALE(300, 100), .slots = 7, .yields = 1, .block_bytes = 200, .fail_at = -1,
         .header = true},
    };
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        const struct lcfg *c = &cfgs[i];
        static struct lrun r;
        struct urt_batch_stats st;
        struct lcount rec;
        int status = l_run(c, &r, &st, &rec);
        cr_assert_eq(status, 0, "config %zu: %s", i, r.message);
        uint64_t total = 0;
        for (uint32_t k = 0; k < c->files; k++)
            total += c->recs + k * 13;
        cr_assert_eq(atomic_load(&r.stmts), total);
        cr_assert_eq(st.statements, total, "config %zu: stats %llu statements", i, (unsigned long long)st.statements);
        cr_assert_leq((uint32_t)atomic_load(&r.max_in_flight), c->slots);
        cr_assert_leq(st.max_statements_in_flight, c->slots);
        if (c->slots < total && c->yields)
            cr_assert_eq(st.max_statements_in_flight, c->slots, "config %zu: the slots never filled (peak %u)", i,
                         st.max_statements_in_flight);
        if (c->slots < total)
            cr_assert_gt(st.loader_yields, 0, "config %zu: the loader never yielded", i);
        cr_assert_leq(st.max_blocks_in_flight, 2);
        cr_assert_eq(st.nodes, 0);
        /* one transaction, all of it */
        cr_assert_eq(rec.bad, 0);
        cr_assert_eq(rec.records, total, "config %zu: %llu records replayed, want %llu", i,
                     (unsigned long long)rec.records, (unsigned long long)total);
        cr_assert_eq(rec.txs, 1, "config %zu: %u transactions replayed", i, rec.txs);
    }
}

Test(batch_load, an_error_commits_nothing, .timeout = 120)
{
    static struct lrun r;
    struct urt_batch_stats st;
    struct lcount rec;
    const struct lcfg c = {.files = 3, .recs = 300, .slots = 16, .yields = 2, .block_bytes = 512, .fail_at = 250};
    int status = l_run(&c, &r, &st, &rec);
    cr_assert_eq(status, -ERANGE, "%d %s", status, r.message);
    cr_assert(strstr(r.message, "(#1), line 251, block") && strstr(r.message, "record 250 is out of range"), "%s", r.message);
    cr_assert_eq(rec.records, 0, "%llu records of a failed load replayed", (unsigned long long)rec.records);
    const struct lcfg m = {.files = 3, .recs = 100, .slots = 16, .yields = 1, .block_bytes = 512, .fail_at = -1,
                           .missing_second = true};
    status = l_run(&m, &r, &st, &rec);
    cr_assert_eq(status, -ENOENT, "%d %s", status, r.message);
    cr_assert(strstr(r.message, "f1.csv' (#1)"), "%s", r.message);
    cr_assert_eq(rec.records, 0);
    cr_assert_eq(atomic_load(&r.stmts), 100, "the first file's statements ran (%u)", atomic_load(&r.stmts));
}
