/*
 * tests/unit/test_batch.c — the batch executor (urt/batch.h, SPEC C15)
 * against a model.
 *
 * The model: every test file is generated here, so the test knows every
 * record (file, record number, the block that owns it — by start offset, as
 * urt/batch.h defines blocks — and its fields). Statements check their record
 * against it, mark it run (each exactly once), and count what is in flight:
 * statements per block (never 2), blocks per file with a statement running
 * and files with a statement running (never above the limits); the batch's
 * own counters (urt_batch_stats) are checked against the limits too, and the
 * buffer and node peaks against what the limits allow. Configurations run as
 * a matrix (block sizes, limits, formats, sync and async statements).
 *
 * Criterion assertions only on the main thread: statements record failures
 * in atomics.
 */
#include "../helpers.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>

#include <urt/batch.h>

/* ---- generated files ---------------------------------------------------------------- */

#define MAX_FILES 600
#define MAX_RECS 20000

struct rec_model {
    uint64_t offset;
    uint64_t line;  /* CSV: 1 + the LF bytes before it; binary: 0 */
    uint64_t block;
    uint32_t index_in_block;
};

struct file_model {
    char path[512];
    uint32_t n;                   /* records */
    struct rec_model *rec;
    _Atomic uint32_t *runs;       /* statement runs per record */
    _Atomic int32_t in_flight;    /* statements of this file running */
};

struct model {
    char *dir;
    uint32_t n_files;
    uint64_t block_bytes;
    bool binary, header, crlf;
    struct file_model f[MAX_FILES];
    const char *paths[MAX_FILES];
    /* in flight */
    _Atomic int32_t files_running;     /* files with a statement running */
    _Atomic int32_t max_files_running;
    _Atomic int32_t blocks_running[MAX_FILES];
    _Atomic int32_t max_blocks_running;
    _Atomic uint32_t bad;              /* model violations */
    _Atomic uint32_t statements;
    char first_bad[256];
    _Atomic uint32_t first_bad_set;
};

static void model_bad(struct model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void model_bad(struct model *m, const char *fmt, ...)
{
    atomic_fetch_add(&m->bad, 1);
    if (atomic_exchange(&m->first_bad_set, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->first_bad, sizeof(m->first_bad), fmt, ap);
        va_end(ap);
    }
}

static void put_le32(char *p, uint32_t v)
{
    p[0] = (char)v, p[1] = (char)(v >> 8), p[2] = (char)(v >> 16), p[3] = (char)(v >> 24);
}

/* Record r of file fi: fields "fi", "r", and a payload of varying length
 * (some with commas, quotes and line breaks in CSV, quoted). Appends the
 * encoded record to buf; returns its length. */
static size_t encode_record(const struct model *m, uint32_t fi, uint32_t r, char *buf)
{
    char payload[128];
    int plen = snprintf(payload, sizeof(payload), "p%u-%u", fi, r);
    for (uint32_t k = 0; k < (r * 7 + fi) % 23; k++)
        payload[plen++] = (char)('a' + (k + r) % 26);
    bool fancy = (r % 5) == 3;
    if (fancy) /* commas, quotes and a line break inside a quoted CSV field */
        plen += snprintf(payload + plen, sizeof(payload) - (size_t)plen, ",\"x\"\ny");
    payload[plen] = 0;
    if (m->binary) {
        char f0[16], f1[16];
        int l0 = snprintf(f0, sizeof(f0), "%u", fi), l1 = snprintf(f1, sizeof(f1), "%u", r);
        const char *fs[3] = {f0, f1, payload};
        int ls[3] = {l0, l1, plen};
        size_t n = 4;
        for (int i = 0; i < 3; i++) {
            put_le32(buf + n, (uint32_t)ls[i]);
            memcpy(buf + n + 4, fs[i], (size_t)ls[i]);
            buf[n + 4 + ls[i]] = 0;
            n += 4 + (size_t)ls[i] + 1;
        }
        put_le32(buf, (uint32_t)(n - 4));
        return n;
    }
    size_t n = (size_t)sprintf(buf, "%u,%u,", fi, r);
    if (fancy) {
        buf[n++] = '"';
        for (int i = 0; i < plen; i++) {
            if (payload[i] == '"')
                buf[n++] = '"';
            buf[n++] = payload[i];
        }
        buf[n++] = '"';
    } else {
        memcpy(buf + n, payload, (size_t)plen);
        n += (size_t)plen;
    }
    if (m->crlf)
        buf[n++] = '\r';
    buf[n++] = '\n';
    return n;
}

static void write_all(const char *path, const char *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
    while (n) {
        ssize_t w = write(fd, p, n);
        cr_assert_gt(w, 0, "write %s: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* Builds the files: counts[i] records in file i. */
static void model_build(struct model *m, uint32_t n_files, const uint32_t *counts, uint64_t block_bytes)
{
    m->dir = test_tmpdir("urt-batch");
    m->n_files = n_files;
    m->block_bytes = block_bytes;
    char *buf = malloc((size_t)MAX_RECS * 200 + 64);
    cr_assert_not_null(buf);
    for (uint32_t i = 0; i < n_files; i++) {
        struct file_model *f = &m->f[i];
        snprintf(f->path, sizeof(f->path), "%s/f%04u.%s", m->dir, i, m->binary ? "bin" : "csv");
        m->paths[i] = f->path;
        f->n = counts[i];
        f->rec = calloc(f->n ? f->n : 1, sizeof(*f->rec));
        f->runs = calloc(f->n ? f->n : 1, sizeof(*f->runs));
        size_t len = 0;
        if (m->binary) {
            memcpy(buf, "URTBIN1\n", 8);
            len = 8;
        }
        if (m->header)
            len += (size_t)sprintf(buf + len, "file,record,payload%s\n", m->crlf ? "\r" : "");
        uint64_t prev_block = UINT64_MAX, line = 1;
        uint32_t in_block = 0;
        for (size_t k = 0; k < len; k++)
            line += buf[k] == '\n';
        for (uint32_t r = 0; r < f->n; r++) {
            f->rec[r].offset = len;
            f->rec[r].line = m->binary ? 0 : line;
            f->rec[r].block = len / block_bytes;
            in_block = f->rec[r].block == prev_block ? in_block + 1 : 0;
            prev_block = f->rec[r].block;
            f->rec[r].index_in_block = in_block;
            size_t n = encode_record(m, i, r, buf + len);
            for (size_t k = 0; k < n && !m->binary; k++)
                line += buf[len + k] == '\n';
            len += n;
        }
        write_all(f->path, buf, len);
    }
    free(buf);
}

static void model_free(struct model *m)
{
    for (uint32_t i = 0; i < m->n_files; i++) {
        unlink(m->f[i].path);
        free(m->f[i].rec);
        free(m->f[i].runs);
    }
    test_remove_dir(m->dir);
}

/* ---- statements -------------------------------------------------------------------------- */

struct run {
    struct model *m;
    urt_runtime *rt;
    bool async;                 /* complete from a second task of the statement's job */
    _Atomic int32_t stmt_busy[MAX_FILES][64]; /* by block index % 64: statements of a block running */
    _Atomic uint32_t done_calls;
    _Atomic int32_t done_status;
    char done_message[512];
    _Atomic uint32_t block_begins, block_dones;
};

static void check_fields(struct run *run, struct urt_batch_stmt *s)
{
    struct model *m = run->m;
    struct urt_batch_block *blk = s->block;
    uint32_t fi = blk->file;
    if (s->n_fields != 3)
        return model_bad(m, "file %u: %u fields", fi, s->n_fields);
    uint32_t f0 = (uint32_t)strtoul(s->fields[0].data, NULL, 10), r = (uint32_t)strtoul(s->fields[1].data, NULL, 10);
    if (f0 != fi || r >= m->f[fi].n)
        return model_bad(m, "file %u: record says file %u record %u", fi, f0, r);
    const struct rec_model *rm = &m->f[fi].rec[r];
    if (rm->offset != s->offset || rm->block != blk->index || rm->index_in_block != s->record ||
        rm->line != s->line)
        return model_bad(m, "file %u record %u: offset %llu line %llu block %llu index %llu, model %llu %llu %llu %u",
                         fi, r, (unsigned long long)s->offset, (unsigned long long)s->line,
                         (unsigned long long)blk->index, (unsigned long long)s->record,
                         (unsigned long long)rm->offset, (unsigned long long)rm->line, (unsigned long long)rm->block,
                         rm->index_in_block);
    char want[512];
    char payload[128]; /* the third field, unescaped: what encode_record wrote */
    int plen = snprintf(payload, sizeof(payload), "p%u-%u", fi, r);
    for (uint32_t k = 0; k < (r * 7 + fi) % 23; k++)
        payload[plen++] = (char)('a' + (k + r) % 26);
    if ((r % 5) == 3)
        plen += snprintf(payload + plen, sizeof(payload) - (size_t)plen, ",\"x\"\ny");
    payload[plen] = 0;
    snprintf(want, sizeof(want), "%s", payload);
    if (s->fields[2].len != strlen(want) || strcmp(s->fields[2].data, want) != 0)
        return model_bad(m, "file %u record %u: payload '%s' (%zu), want '%s'", fi, r, s->fields[2].data,
                         s->fields[2].len, want);
    if (atomic_fetch_add(&m->f[fi].runs[r], 1) != 0)
        model_bad(m, "file %u record %u ran twice", fi, r);
}

static pthread_mutex_t model_mu = PTHREAD_MUTEX_INITIALIZER;

static void enter(struct run *run, struct urt_batch_stmt *s)
{
    struct model *m = run->m;
    uint32_t fi = s->block->file;
    if (atomic_fetch_add(&run->stmt_busy[fi][s->block->index % 64], 1) != 0)
        model_bad(m, "file %u block %llu: two statements at once", fi, (unsigned long long)s->block->index);
    int32_t b = atomic_fetch_add(&m->blocks_running[fi], 1) + 1;
    int32_t mx = atomic_load(&m->max_blocks_running);
    while (b > mx && !atomic_compare_exchange_weak(&m->max_blocks_running, &mx, b))
        ;
    pthread_mutex_lock(&model_mu); /* a file's count and the files' count change together */
    if (atomic_fetch_add(&m->f[fi].in_flight, 1) == 0) {
        int32_t fr = atomic_fetch_add(&m->files_running, 1) + 1;
        if (fr > atomic_load(&m->max_files_running))
            atomic_store(&m->max_files_running, fr);
    }
    pthread_mutex_unlock(&model_mu);
}

static void leave(struct run *run, struct urt_batch_stmt *s)
{
    struct model *m = run->m;
    uint32_t fi = s->block->file;
    pthread_mutex_lock(&model_mu);
    if (atomic_fetch_sub(&m->f[fi].in_flight, 1) == 1)
        atomic_fetch_sub(&m->files_running, 1);
    pthread_mutex_unlock(&model_mu);
    atomic_fetch_sub(&m->blocks_running[fi], 1);
    atomic_fetch_sub(&run->stmt_busy[fi][s->block->index % 64], 1);
    atomic_fetch_add(&m->statements, 1);
}

struct async_ctx {
    struct urt_task t;
    struct urt_batch_stmt *s;
    struct run *run;
};

static enum urt_task_result async_finish(struct urt_task *t, void *arg)
{
    struct async_ctx *c = arg;
    (void)t;
    struct urt_batch_stmt *s = c->s;
    struct run *run = c->run;
    free(c);
    check_fields(run, s);
    leave(run, s);
    urt_batch_stmt_done(s, 0);
    return URT_TASK_DONE;
}

static int statement(struct urt_batch_stmt *s, void *arg)
{
    struct run *run = arg;
    enter(run, s);
    if (run->async) {
        struct async_ctx *c = malloc(sizeof(*c));
        c->s = s;
        c->run = run;
        urt_task_init(&c->t, async_finish, c);
        int rc = urt_job_submit(s->job, &c->t, 0);
        if (rc) {
            free(c);
            leave(run, s);
            return rc;
        }
        return URT_BATCH_PENDING;
    }
    check_fields(run, s);
    leave(run, s);
    return 0;
}

static void on_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct run *run = arg;
    (void)b;
    snprintf(run->done_message, sizeof(run->done_message), "%s", message);
    atomic_store(&run->done_status, status);
    atomic_fetch_add(&run->done_calls, 1);
}

static int on_block_begin(struct urt_batch_block *blk, void *arg)
{
    struct run *run = arg;
    atomic_fetch_add(&run->block_begins, 1);
    blk->user = (void *)(uintptr_t)(blk->index + 1);
    return 0;
}

static void on_block_done(struct urt_batch_block *blk, int status, void *arg)
{
    struct run *run = arg;
    if (blk->user != (void *)(uintptr_t)(blk->index + 1))
        model_bad(run->m, "block %llu: user slot changed", (unsigned long long)blk->index);
    (void)status;
    atomic_fetch_add(&run->block_dones, 1);
}

/* ---- running --------------------------------------------------------------------------- */

struct cfg {
    uint32_t workers;
    uint32_t files, recs;
    uint64_t block_bytes;
    uint32_t max_files, max_blocks;
    bool binary, header, crlf, async;
};

static void run_matrix_one(const struct cfg *c)
{
    static struct model m;
    static struct run run;
    memset(&m, 0, sizeof(m));
    memset(&run, 0, sizeof(run));
    m.binary = c->binary;
    m.header = c->header;
    m.crlf = c->crlf;
    uint32_t counts[MAX_FILES];
    for (uint32_t i = 0; i < c->files; i++)
        counts[i] = c->recs + (i * 37) % (c->recs / 2 + 1);
    model_build(&m, c->files, counts, c->block_bytes);
    run.m = &m;
    run.async = c->async;

    struct urt_config cfg;
    test_config(&cfg, c->workers);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    run.rt = rt;
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = m.paths;
    o.n_files = c->files;
    o.format = c->binary ? URT_BATCH_BINARY : URT_BATCH_CSV;
    o.flags = c->header ? URT_BATCH_CSV_HEADER : 0;
    o.block_bytes = c->block_bytes;
    o.max_concurrent_files = c->max_files;
    o.max_concurrent_blocks_per_file = c->max_blocks;
    o.statement = statement;
    o.done = on_done;
    o.arg = &run;
    o.block_begin = on_block_begin;
    o.block_done = on_block_done;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "urt_batch_start: %s", urt_last_error());
    int st = urt_batch_wait(b, 60ull * 1000 * 1000 * 1000);
    cr_assert_eq(st, 0, "batch: %d %s (model: %s)", st, urt_batch_error(b), m.first_bad);
    struct urt_batch_stats s;
    cr_assert_eq(urt_batch_stats(b, &s), 0);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);

    cr_assert_eq(atomic_load(&run.done_calls), 1, "callback ran %u times", atomic_load(&run.done_calls));
    cr_assert_eq(atomic_load(&m.bad), 0, "%u model violations, first: %s", atomic_load(&m.bad), m.first_bad);
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->files; i++)
        for (uint32_t r = 0; r < m.f[i].n; r++) {
            total++;
            cr_assert_eq(atomic_load(&m.f[i].runs[r]), 1, "file %u record %u ran %u times", i, r,
                         atomic_load(&m.f[i].runs[r]));
        }
    cr_assert_eq(s.statements, total, "stats: %llu statements, model %llu", (unsigned long long)s.statements,
                 (unsigned long long)total);
    cr_assert_eq(s.files_done, c->files);
    cr_assert_leq(s.max_files_in_flight, c->max_files);
    cr_assert_leq(s.max_blocks_per_file, c->max_blocks);
    cr_assert_leq(s.max_blocks_in_flight, c->max_files * c->max_blocks);
    cr_assert_leq((uint32_t)atomic_load(&m.max_files_running), c->max_files);
    cr_assert_leq((uint32_t)atomic_load(&m.max_blocks_running), c->max_blocks);
    cr_assert_leq(s.max_nodes, c->max_files * (1 + c->max_blocks));
    cr_assert_leq(s.max_buffer_bytes, (uint64_t)c->max_files * c->max_blocks * (2 * c->block_bytes + 1));
    cr_assert_eq(s.nodes, 0);
    cr_assert_eq(s.buffer_bytes, 0);
    cr_assert_eq(atomic_load(&run.block_begins), atomic_load(&run.block_dones));
    model_free(&m);
}

Test(batch, tree_against_the_model, .timeout = 240)
{
    const struct cfg cfgs[] = {
        {.workers = 2, .files = 5, .recs = 400, .block_bytes = 1024, .max_files = 2, .max_blocks = 2},
        {.workers = 2, .files = 3, .recs = 300, .block_bytes = 64, .max_files = 1, .max_blocks = 1},
        {.workers = 4, .files = 7, .recs = 500, .block_bytes = 512, .max_files = 3, .max_blocks = 4, .crlf = true},
        {.workers = 2, .files = 4, .recs = 300, .block_bytes = 700, .max_files = 2, .max_blocks = 3, .header = true},
        {.workers = 2, .files = 5, .recs = 400, .block_bytes = 1024, .max_files = 2, .max_blocks = 2, .binary = true},
        {.workers = 3, .files = 4, .recs = 300, .block_bytes = 200, .max_files = 4, .max_blocks = 2, .binary = true,
         .async = true},
        {.workers = 2, .files = 6, .recs = 250, .block_bytes = 333, .max_files = 2, .max_blocks = 2, .async = true},
        {.workers = 1, .files = 3, .recs = 200, .block_bytes = 4096, .max_files = 2, .max_blocks = 2},
    };
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
        run_matrix_one(&cfgs[i]);
}

/* ---- errors at every level: the callback once, the message right -------------------- */

struct erun {
    _Atomic uint32_t done_calls;
    _Atomic int32_t status;
    char message[512];
    _Atomic uint32_t stmts, stmts_aborting, after_done;
    _Atomic int fail_file, fail_block, fail_record; /* the statement that fails (-1: none) */
    _Atomic int fail_mode;                          /* 0 return, 1 stmt_error, 2 async done, 3 positive */
    _Atomic uint32_t block_dones, block_done_errors;
    _Atomic int begin_block, begin_rc;              /* block_begin of file 0's block begin_block returns begin_rc */
    _Atomic uint32_t begin_block_stmts;             /* statements that ran in that block */
    _Atomic int hold_window;                        /* file 0: block 0's record 0 answers later
                                                       (URT_BATCH_PENDING, into held_stmt) */
    struct urt_batch_stmt *_Atomic held_stmt;
    _Atomic int block0_ended;
    struct urt_batch_stats stats;
};

static int e_statement(struct urt_batch_stmt *s, void *arg)
{
    struct erun *r = arg;
    if (atomic_load(&r->done_calls))
        atomic_fetch_add(&r->after_done, 1);
    atomic_fetch_add(&r->stmts, 1);
    if (urt_batch_aborting(s->batch))
        atomic_fetch_add(&r->stmts_aborting, 1);
    if (s->block->file == 0 && (int)s->block->index == atomic_load(&r->begin_block))
        atomic_fetch_add(&r->begin_block_stmts, 1);
    if (atomic_load(&r->hold_window) && s->block->file == 0 && s->block->index == 0 && s->record == 0) {
        atomic_store(&r->held_stmt, s); /* answered by the test's thread */
        return URT_BATCH_PENDING;
    }
    bool fail = (int)s->block->file == atomic_load(&r->fail_file) &&
                (int)s->block->index == atomic_load(&r->fail_block) &&
                (atomic_load(&r->fail_record) < 0 || (int)s->record == atomic_load(&r->fail_record));
    if (!fail)
        return 0;
    switch (atomic_load(&r->fail_mode)) {
    case 1:
        return urt_batch_stmt_error(s, -EDOM, "key '%s' is out of its domain", s->fields[0].data);
    case 2:
        cr_assert_eq(urt_batch_stmt_done(s, -EIO), 0);
        cr_assert_eq(urt_batch_stmt_done(s, 0), -EALREADY); /* alive: the function still runs */
        return URT_BATCH_PENDING;
    case 3:
        return 7;
    default:
        return -EPIPE;
    }
}

static void e_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct erun *r = arg;
    urt_batch_stats(b, &r->stats);
    snprintf(r->message, sizeof(r->message), "%s", message);
    atomic_store(&r->status, status);
    atomic_fetch_add(&r->done_calls, 1);
}

static int e_block_begin(struct urt_batch_block *blk, void *arg)
{
    struct erun *r = arg;
    return blk->file == 0 && (int)blk->index == atomic_load(&r->begin_block) ? atomic_load(&r->begin_rc) : 0;
}

static void e_block_done(struct urt_batch_block *blk, int status, void *arg)
{
    struct erun *r = arg;
    if (blk->file == 0 && blk->index == 0)
        atomic_store(&r->block0_ended, 1);
    atomic_fetch_add(&r->block_dones, 1);
    if (status)
        atomic_fetch_add(&r->block_done_errors, 1);
}

static char *e_file(const char *dir, const char *name, const char *content, size_t len)
{
    char *p = malloc(1024);
    snprintf(p, 1024, "%s/%s", dir, name);
    write_all(p, content, len);
    return p;
}

/* n records "i,payload\n" of about 20 bytes */
static char *e_csv(const char *dir, const char *name, uint32_t n)
{
    char *buf = malloc((size_t)n * 32 + 1);
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        len += (size_t)sprintf(buf + len, "%u,payload-%08u\n", i, i);
    char *p = e_file(dir, name, buf, len);
    free(buf);
    return p;
}

struct eopts {
    uint32_t workers;
    uint64_t block_bytes;
    uint32_t flags, fields;
    enum urt_batch_format format;
    const char *log_dir;
};

/* Runs a batch to its end, waiting at most wait_ns; returns its status. */
static int e_run_for(struct erun *r, const char *const *files, uint32_t n, const struct eopts *eo, uint64_t wait_ns)
{
    struct urt_config cfg;
    test_config(&cfg, eo->workers ? eo->workers : 2);
    cfg.log_dir = eo->log_dir;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = n;
    o.block_bytes = eo->block_bytes ? eo->block_bytes : 256;
    o.flags = eo->flags;
    o.fields = eo->fields;
    o.format = eo->format;
    o.statement = e_statement;
    o.done = e_done;
    o.block_begin = e_block_begin;
    o.block_done = e_block_done;
    o.arg = r;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "urt_batch_start: %s", urt_last_error());
    int st = urt_batch_wait(b, wait_ns);
    cr_assert_neq(st, -ETIMEDOUT, "the batch did not end within %llu ms: %s", (unsigned long long)(wait_ns / 1000000),
                  urt_last_error());
    cr_assert_eq(urt_batch_poll(b), st);
    if (st)
        cr_assert_str_eq(urt_batch_error(b), r->message);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&r->done_calls), 1, "the callback ran %u times", atomic_load(&r->done_calls));
    cr_assert_eq(atomic_load(&r->after_done), 0, "%u statements ran after the callback", atomic_load(&r->after_done));
    cr_assert_eq(r->stats.nodes, 0, "%llu nodes alive at the callback", (unsigned long long)r->stats.nodes);
    return st;
}

static int e_run(struct erun *r, const char *const *files, uint32_t n, const struct eopts *eo)
{
    return e_run_for(r, files, n, eo, 60ull * 1000 * 1000 * 1000);
}

static void e_init(struct erun *r)
{
    memset(r, 0, sizeof(*r));
    atomic_store(&r->fail_file, -1);
    atomic_store(&r->fail_block, -1);
    atomic_store(&r->fail_record, -1);
    atomic_store(&r->begin_block, -1);
}

static void want_message(const struct erun *r, const char *needle)
{
    cr_assert(strstr(r->message, needle), "message '%s' lacks '%s'", r->message, needle);
}

Test(batch, statement_errors_first_block_and_last_record, .timeout = 60)
{
    char *dir = test_tmpdir("urt-batch-err");
    char *f[3] = {e_csv(dir, "a.csv", 200), e_csv(dir, "b.csv", 200), e_csv(dir, "c.csv", 200)};
    const char *files[3] = {f[0], f[1], f[2]};
    struct eopts eo = {.block_bytes = 256};
    static struct erun r;
    char want[2048];
    /* the first statement of the first block: its own message */
    e_init(&r);
    atomic_store(&r.fail_file, 0), atomic_store(&r.fail_block, 0), atomic_store(&r.fail_record, 0);
    atomic_store(&r.fail_mode, 1);
    cr_assert_eq(e_run(&r, files, 3, &eo), -EDOM);
    snprintf(want, sizeof(want), "file '%s' (#0), line 1, block 0, record 0 at byte 0: key '0' is out of its domain",
             f[0]);
    cr_assert_str_eq(r.message, want);
    cr_assert_leq(atomic_load(&r.stmts_aborting), 4);
    /* the last record of the last file: returned -errno */
    e_init(&r);
    uint64_t last_off = 0, size = 0; /* 200 records: 0..9 are 19 bytes, 10..99 20, 100..199 21 */
    size = 10 * 19 + 90 * 20 + 100 * 21;
    last_off = size - 21;
    atomic_store(&r.fail_file, 2), atomic_store(&r.fail_block, (int)(last_off / 256));
    atomic_store(&r.fail_record, -1);
    atomic_store(&r.fail_mode, 0);
    cr_assert_eq(e_run(&r, files, 3, &eo), -EPIPE);
    /* block 15's first record (the one that fails) starts at byte 3859: record 189, line 190 */
    snprintf(want, sizeof(want), "file '%s' (#2), line 190, block %llu, record 0 at byte 3859", f[2],
             (unsigned long long)(last_off / 256));
    want_message(&r, want);
    want_message(&r, "statement failed: Broken pipe");
    /* async: urt_batch_stmt_done(-EIO); a second call is -EALREADY */
    e_init(&r);
    atomic_store(&r.fail_file, 1), atomic_store(&r.fail_block, 2), atomic_store(&r.fail_record, 3);
    atomic_store(&r.fail_mode, 2);
    cr_assert_eq(e_run(&r, files, 3, &eo), -EIO);
    /* records 0..9 are 19 bytes, then 20: block 2's first record (at byte >= 512) is record 27 (byte 530),
     * its record 3 is record 30, on line 31 */
    snprintf(want, sizeof(want), "file '%s' (#1), line 31, block 2, record 3 at byte 590", f[1]);
    want_message(&r, want);
    want_message(&r, "Input/output error");
    /* a positive return is a bad statement function: -EINVAL */
    e_init(&r);
    atomic_store(&r.fail_file, 0), atomic_store(&r.fail_block, 1), atomic_store(&r.fail_record, 0);
    atomic_store(&r.fail_mode, 3);
    cr_assert_eq(e_run(&r, files, 3, &eo), -EINVAL);
    want_message(&r, "returned 7");
    /* block_begin's non-zero return fails the batch before the block's first
     * statement; block_done still runs for it, with the error (-errno as is,
     * a positive value as -EINVAL) */
    for (int rc = -EDQUOT; rc; rc = rc < 0 ? 3 : 0) {
        e_init(&r);
        atomic_store(&r.begin_block, 1);
        atomic_store(&r.begin_rc, rc);
        cr_assert_eq(e_run(&r, files, 1, &eo), rc < 0 ? rc : -EINVAL, "%s", r.message);
        snprintf(want, sizeof(want), "file '%s' (#0), block 1, at byte", f[0]);
        want_message(&r, want);
        snprintf(want, sizeof(want), "block_begin returned %d", rc);
        want_message(&r, want);
        cr_assert_eq(atomic_load(&r.begin_block_stmts), 0, "%u statements ran in the refused block",
                     atomic_load(&r.begin_block_stmts));
        cr_assert_geq(atomic_load(&r.block_done_errors), 1, "block_done did not see the refused block's error");
    }
    for (int i = 0; i < 3; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
}

/* A statement error while other files' blocks are still parsing, many times
 * over: every run must end (tree.c tree_block_parsed). A block that finished
 * parsing just after the failure had taken the holding blocks out used to
 * enter BP_HOLD anyway; the earlier block that would resume it had ended by
 * the failure, so the batch never ended (urt_batch_wait hung). Seen about
 * once in 25 runs of this suite under TSan on a loaded machine; here each
 * failing run ends its wait at 10 s and fails. The window itself is held
 * open, every time, by a_block_parsed_after_the_failure_ends_itself (test
 * builds); this one keeps the mix of files, blocks and failure modes. */
Test(batch, a_failure_ends_every_block_that_would_hold, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-hold");
    char *f[3] = {e_csv(dir, "a.csv", 400), e_csv(dir, "b.csv", 400), e_csv(dir, "c.csv", 400)};
    const char *files[3] = {f[0], f[1], f[2]};
    static struct erun r;
    const int runs = SCALE(300, 60);
    for (int i = 0; i < runs; i++) {
        struct eopts eo = {.block_bytes = 128 + 64 * (i % 4), .workers = 2};
        e_init(&r);
        atomic_store(&r.fail_file, i % 2), atomic_store(&r.fail_block, i % 3);
        atomic_store(&r.fail_record, i % 5);
        atomic_store(&r.fail_mode, i % 2 ? 1 : 0);
        int st = e_run_for(&r, files, 3, &eo, 10ull * 1000 * 1000 * 1000);
        cr_assert(st == -EDOM || st == -EPIPE, "run %d: status %d (%s)", i, st, r.message);
    }
    for (int i = 0; i < 3; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
}

/* Bad input: each a clear error with its position. */
Test(batch, bad_input, .timeout = 60)
{
    char *dir = test_tmpdir("urt-batch-bad");
    static struct erun r;
    struct eopts eo = {.block_bytes = 64};
    char *good = e_csv(dir, "good.csv", 50);
    char want[2048];
    struct {
        const char *name, *content;
        size_t len;
        struct eopts eo;
        int err;
        const char *needle;
        bool alone; /* without good.csv (its field count would fail first) */
    } cases[] = {
        {"empty.csv", "", 0, eo, -ENODATA, "the file is empty", false},
        {"header-only.csv", "a,b\n", 4, {.block_bytes = 64, .flags = URT_BATCH_CSV_HEADER}, -ENODATA,
         "the file has no records", false},
        {"unterminated.csv", "1,2\n3,\"4\n", 9, eo, -EBADMSG, "unterminated quoted field", false},
        {"quote.csv", "1,2\n3,4\"5\n", 10, eo, -EBADMSG,
         "record 1 at byte 4: quote inside an unquoted field (byte 7)", false},
        {"count.csv", "1,2\n3,4\n5,6,7\n8,9\n", 18, eo, -EBADMSG, "record 2 at byte 8: the record has 3 fields, "
                                                                   "expected 2", false},
        {"count-given.csv", "1,2\n3,4\n", 8, {.block_bytes = 64, .fields = 3}, -EBADMSG, "expected 3", true},
        {"header-count.csv", "a,b,c\n1,2\n", 10, {.block_bytes = 64, .flags = URT_BATCH_CSV_HEADER}, -EBADMSG,
         "the record has 2 fields, expected 3", false},
        {"header-given.csv", "a,b\n1,2\n", 8, {.block_bytes = 64, .fields = 3, .flags = URT_BATCH_CSV_HEADER},
         -EBADMSG, "at byte 0: the header has 2 fields, expected 3", true},
        {"long.csv", "1,2\n3,0123456789012345678901234567890123456789012345678901234567890123456789\n5,6\n", 80, eo,
         -EMSGSIZE, "longer than max_record_bytes (64)", false},
        {"magic.bin", "URTBIN2\n\1\0\0\0x", 13, {.block_bytes = 64, .format = URT_BATCH_BINARY}, -EBADMSG,
         "bad magic", true},
        {"only-magic.bin", "URTBIN1\n", 8, {.block_bytes = 64, .format = URT_BATCH_BINARY}, -ENODATA,
         "the file has no records", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *p = e_file(dir, cases[i].name, cases[i].content, cases[i].len);
        const char *files[2] = {good, p};
        e_init(&r);
        bool alone = cases[i].alone;
        int st = e_run(&r, alone ? files + 1 : files, alone ? 1 : 2, &cases[i].eo);
        cr_assert_eq(st, cases[i].err, "%s: status %d (%s), want %d", cases[i].name, st, r.message, cases[i].err);
        snprintf(want, sizeof(want), "file '%s' (#%d)", p, alone ? 0 : 1);
        want_message(&r, want);
        want_message(&r, cases[i].needle);
        unlink(p);
        free(p);
    }
    /* a missing file, a directory (open works, read fails) */
    char missing[1024], *sub = malloc(1024);
    snprintf(missing, sizeof(missing), "%s/no-such.csv", dir);
    snprintf(sub, 1024, "%s/subdir", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    const char *m_files[2] = {missing, sub};
    for (int i = 0; i < 2; i++) {
        const char *files[1] = {m_files[i]};
        e_init(&r);
        int st = e_run(&r, files, 1, &eo);
        cr_assert_eq(st, i == 0 ? -ENOENT : -EISDIR, "%s: %d %s", m_files[i], st, r.message);
        snprintf(want, sizeof(want), "file '%s' (#0)", m_files[i]);
        want_message(&r, want);
        want_message(&r, i == 0 ? "cannot open: No such file or directory" : "Is a directory");
    }
    rmdir(sub);
    free(sub);
    unlink(good);
    free(good);
    test_remove_dir(dir);
}

Test(batch, bad_options, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    const char *files[1] = {"/nonexistent"};
    struct urt_batch_options o;
    urt_batch *b = NULL;
#define BAD(stmt, errno_, needle)                                                                             \
    do {                                                                                                      \
        urt_batch_options_init(&o);                                                                           \
        o.files = files;                                                                                      \
        o.n_files = 1;                                                                                        \
        o.statement = e_statement;                                                                            \
        stmt;                                                                                                 \
        int rc_ = urt_batch_start(rt, &o, &b);                                                                \
        cr_assert_eq(rc_, errno_, #stmt ": %d (%s)", rc_, urt_last_error());                                  \
        cr_assert(strstr(urt_last_error(), needle), #stmt ": message '%s' lacks '%s'", urt_last_error(),      \
                  needle);                                                                                    \
    } while (0)
    BAD(o.n_files = 0, -EINVAL, "no files");
    BAD(o.files = NULL, -EINVAL, "files is NULL");
    BAD(o.statement = NULL, -EINVAL, "statement is NULL");
    BAD(o.format = 7, -EINVAL, "format 7");
    BAD(o.flags = 0x100, -EINVAL, "unknown flags");
    BAD((o.flags = URT_BATCH_CSV_HEADER, o.format = URT_BATCH_BINARY), -EINVAL, "needs the CSV format");
    BAD(o.flags = URT_BATCH_BLOCK_TX | URT_BATCH_TRANSACTIONAL, -EINVAL, "exclude each other");
    BAD(o.block_bytes = 8, -EINVAL, "block_bytes 8");
    BAD(o.max_record_bytes = 2u << 20, -EINVAL, "above block_bytes");
    BAD(o.max_concurrent_files = 0, -EINVAL, "max_concurrent_files 0");
    BAD(o.max_concurrent_blocks_per_file = 5000, -EINVAL, "max_concurrent_blocks_per_file 5000");
    BAD(o.max_statements = 0, -EINVAL, "max_statements 0");
    BAD(o.response = 9, -EINVAL, "response 9");
    BAD(o.reserved[2] = 1, -EINVAL, "reserved[2]");
    BAD(o.flags = URT_BATCH_BLOCK_TX, -EOPNOTSUPP, "need a write-ahead log");
    BAD(o.flags = URT_BATCH_TRANSACTIONAL, -EOPNOTSUPP, "need a write-ahead log");
    const char *nullpath[2] = {"/x", NULL};
    BAD((o.files = nullpath, o.n_files = 2), -EINVAL, "files[1] is NULL");
    const char *empty[1] = {""};
    BAD(o.files = empty, -EINVAL, "files[0] is empty");
    cr_assert_eq(urt_batch_start(NULL, &o, &b), -EINVAL);
    cr_assert_eq(urt_batch_start(rt, NULL, &b), -EINVAL);
    cr_assert_eq(urt_batch_start(rt, &o, NULL), -EINVAL);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- per-block transactions: committed durably, each block whole ------------------------ */

struct txrun {
    _Atomic uint32_t blocks_ok, blocks_err, bad;
    _Atomic uint64_t records_ok;
    struct { uint64_t tx_id, records; } blocks[4096];
    _Atomic uint32_t n_blocks;
};

static int tx_statement(struct urt_batch_stmt *s, void *arg)
{
    struct txrun *r = arg;
    if (!s->tx || s->tx != s->block->tx)
        atomic_fetch_add(&r->bad, 1);
    uint32_t rec[3] = {s->block->file, (uint32_t)strtoul(s->fields[0].data, NULL, 10), (uint32_t)s->block->index};
    int rc = urt_tx_log(s->tx, rec, sizeof(rec));
    return rc ? urt_batch_stmt_error(s, rc, "urt_tx_log: %s", urt_last_error()) : 0;
}

static int tx_block_begin(struct urt_batch_block *blk, void *arg)
{
    (void)arg;
    blk->tx_id = ((uint64_t)(blk->file + 1) << 32) | (blk->index + 1);
    return 0;
}

static void tx_block_done(struct urt_batch_block *blk, int status, void *arg)
{
    struct txrun *r = arg;
    if (blk->tx_id != (((uint64_t)(blk->file + 1) << 32) | (blk->index + 1)))
        atomic_fetch_add(&r->bad, 1);
    if (status) {
        atomic_fetch_add(&r->blocks_err, 1);
        return;
    }
    uint32_t i = atomic_fetch_add(&r->n_blocks, 1);
    r->blocks[i].tx_id = blk->tx_id;
    r->blocks[i].records = blk->records;
    atomic_fetch_add(&r->blocks_ok, 1);
    atomic_fetch_add(&r->records_ok, blk->records);
}

struct replayed {
    uint64_t tx[4096], count[4096];
    uint32_t n_tx;
    uint64_t records, bad;
};

static int on_replay(void *arg, const struct urt_log_record *lr)
{
    struct replayed *rp = arg;
    uint32_t rec[3];
    if (lr->len != sizeof(rec) || lr->tx_id != (((uint64_t)(((const uint32_t *)lr->payload)[0] + 1) << 32) |
                                                (((const uint32_t *)lr->payload)[2] + 1))) {
        rp->bad++;
        return 0;
    }
    memcpy(rec, lr->payload, sizeof(rec));
    uint32_t i = 0;
    while (i < rp->n_tx && rp->tx[i] != lr->tx_id)
        i++;
    if (i == rp->n_tx)
        rp->tx[rp->n_tx++] = lr->tx_id;
    rp->count[i]++;
    rp->records++;
    return 0;
}

static urt_batch *tx_start(urt_runtime *rt, const char *const *files, uint32_t n, struct txrun *r)
{
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = n;
    o.block_bytes = 512;
    o.max_concurrent_files = 1;
    o.max_concurrent_blocks_per_file = 1;
    o.flags = URT_BATCH_BLOCK_TX;
    o.statement = tx_statement;
    o.block_begin = tx_block_begin;
    o.block_done = tx_block_done;
    o.arg = r;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "urt_batch_start: %s", urt_last_error());
    return b;
}

Test(batch, block_transactions_commit_durably, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-tx"), *logdir = test_tmpdir("urt-batch-txlog");
    char *f[3] = {e_csv(dir, "a.csv", 300), e_csv(dir, "b.csv", 250), e_csv(dir, "c.csv", 100)};
    const char *files[3] = {f[0], f[1], f[2]};
    static struct txrun r;
    memset(&r, 0, sizeof(r));
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = logdir;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    urt_batch *b = tx_start(rt, files, 3, &r);
    int st = urt_batch_wait(b, 60ull * 1000 * 1000 * 1000);
    cr_assert_eq(st, 0, "%s", urt_batch_error(b));
    struct urt_batch_stats s;
    urt_batch_stats(b, &s);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&r.bad), 0);
    cr_assert_eq(atomic_load(&r.blocks_err), 0);
    cr_assert_eq(atomic_load(&r.records_ok), 650);
    cr_assert_eq(s.blocks_committed, atomic_load(&r.blocks_ok));
    cr_assert_eq(s.statements, 650);
    /* every committed block is in the log, whole */
    static struct replayed rp;
    memset(&rp, 0, sizeof(rp));
    struct urt_log_recover_ops ops = {.record = on_replay};
    cr_assert_eq(urt_log_recover(logdir, 0, &ops, &rp, NULL), 0, "%s", urt_last_error());
    cr_assert_eq(rp.bad, 0);
    cr_assert_eq(rp.records, 650);
    cr_assert_eq(rp.n_tx, atomic_load(&r.blocks_ok));
    for (uint32_t i = 0; i < atomic_load(&r.n_blocks); i++) {
        uint32_t k = 0;
        while (k < rp.n_tx && rp.tx[k] != r.blocks[i].tx_id)
            k++;
        cr_assert_lt(k, rp.n_tx, "block tx %llx not replayed", (unsigned long long)r.blocks[i].tx_id);
        cr_assert_eq(rp.count[k], r.blocks[i].records, "block tx %llx: %llu records replayed, %llu committed",
                     (unsigned long long)r.blocks[i].tx_id, (unsigned long long)rp.count[k],
                     (unsigned long long)r.blocks[i].records);
    }
    for (int i = 0; i < 3; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
    test_remove_dir(logdir);
}

#if URT_FAULT_INJECTION
#include "runtime/runtime.h"
#include "tx/wal.h"

/* A failed commit is the batch's error; the block's transaction is not replayed. */
Test(batch, commit_failure, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-cf"), *logdir = test_tmpdir("urt-batch-cflog");
    char *f = e_csv(dir, "a.csv", 300);
    const char *files[1] = {f};
    static struct txrun r;
    memset(&r, 0, sizeof(r));
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = logdir;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    wal_inject_fault(((struct urt_runtime *)rt)->wal, WAL_FAULT_EIO); /* the next log write: block 0's */
    urt_batch *b = tx_start(rt, files, 1, &r);
    int st = urt_batch_wait(b, 60ull * 1000 * 1000 * 1000);
    cr_assert_eq(st, -EIO, "%d %s", st, urt_batch_error(b));
    char want[1200];
    snprintf(want, sizeof(want), "file '%s' (#0), block 0, at byte 0: the block's commit failed: Input/output error",
             f);
    cr_assert_str_eq(urt_batch_error(b), want);
    struct urt_batch_stats s;
    urt_batch_stats(b, &s);
    cr_assert_eq(s.blocks_committed, 0);
    cr_assert_eq(s.blocks_done, 1, "no block may start after the error (%llu ended)",
                 (unsigned long long)s.blocks_done);
    cr_assert_eq(atomic_load(&r.blocks_err), 1);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    static struct replayed rp;
    memset(&rp, 0, sizeof(rp));
    struct urt_log_recover_ops ops = {.record = on_replay};
    cr_assert_eq(urt_log_recover(logdir, 0, &ops, &rp, NULL), 0, "%s", urt_last_error());
    cr_assert_eq(rp.records, 0, "%llu records of the failed block replayed", (unsigned long long)rp.records);
    unlink(f);
    free(f);
    test_remove_dir(dir);
    test_remove_dir(logdir);
}
#endif

#if URT_FAULT_INJECTION
#include "batch/batch.h"

/* The window of a_failure_ends_every_block_that_would_hold, held open with no
 * worker held: file 0's block 0 waits for its first statement, which answers
 * later (URT_BATCH_PENDING); block 1 parses all of its records and is parked
 * just before tree_block_parsed (batch_fault_parsed, test builds). The
 * test's own thread then fails the statement, so block 0 fails the batch and
 * ends without parsing on; only then does it let block 1 go on, into a check
 * that finds block 0 unparsed. Block 1 must end itself (the failure took the
 * holding blocks out before it held): without the aborting check under the
 * tree's lock it held forever and urt_batch_wait hung. */
struct window {
    struct erun *r;
    struct urt_batch_block *_Atomic parked;
    _Atomic int parks;
    const char *failed; /* what the driver found wrong, or NULL */
};
static struct window window;

static bool park_block1(struct urt_batch_block *blk)
{
    if (blk->file != 0 || blk->index != 1)
        return false;
    atomic_fetch_add(&window.parks, 1);
    atomic_store(&window.parked, blk); /* seq_cst: the release that hands the block to the driver (batch.h) */
    return true;
}

static void *window_driver(void *arg)
{
    struct window *w = arg;
    struct erun *r = w->r;
    if (!WAIT_UNTIL(atomic_load(&r->held_stmt), 10000) || !WAIT_UNTIL(atomic_load(&w->parked), 10000)) {
        w->failed = "block 0's first statement or block 1's end was never reached";
        return NULL; /* the batch then waits for nothing: urt_batch_wait times out */
    }
    if (atomic_load(&r->block0_ended)) {
        w->failed = "block 0 ended before its statement answered";
        return NULL;
    }
    if (urt_batch_stmt_done(atomic_load(&r->held_stmt), -EPIPE) != 0) {
        w->failed = "urt_batch_stmt_done refused the answer";
        return NULL;
    }
    if (!WAIT_UNTIL(atomic_load(&r->block0_ended), 10000)) {
        w->failed = "block 0 did not end after its statement failed";
        return NULL;
    }
    batch_fault_parsed_go(atomic_load(&w->parked));
    return NULL;
}

Test(batch, a_block_parsed_after_the_failure_ends_itself, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-window");
    char *f = e_csv(dir, "a.csv", 40); /* about 790 bytes: blocks 0..3 of 256 */
    const char *files[1] = {f};
    static struct erun r;
    e_init(&r);
    atomic_store(&r.hold_window, 1);
    memset(&window, 0, sizeof(window));
    window.r = &r;
    atomic_store(&batch_fault_parsed, park_block1);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, window_driver, &window), 0);
    struct eopts eo = {.block_bytes = 256, .workers = 2};
    int st = e_run_for(&r, files, 1, &eo, 10ull * 1000 * 1000 * 1000);
    pthread_join(th, NULL);
    atomic_store(&batch_fault_parsed, NULL);
    cr_assert_null(window.failed, "%s", window.failed);
    cr_assert_eq(atomic_load(&window.parks), 1, "block 1 was parked %d times", atomic_load(&window.parks));
    cr_assert_eq(st, -EPIPE, "status %d (%s)", st, r.message);
    cr_assert_eq(r.stats.blocks_committed, 0);
    cr_assert_geq(r.stats.blocks_done, 2u, "%llu blocks ended", (unsigned long long)r.stats.blocks_done);
    unlink(f);
    free(f);
    test_remove_dir(dir);
}
#endif

/* ---- cancel, destroy, memory ---------------------------------------------------------- */

struct crun {
    _Atomic uint64_t stmts;
    _Atomic uint32_t done_calls;
    _Atomic int32_t status;
    bool async;
};

struct ctask {
    struct urt_task t;
    struct urt_batch_stmt *s;
};

static enum urt_task_result c_finish(struct urt_task *t, void *arg)
{
    struct ctask *c = arg;
    (void)t;
    urt_batch_stmt_done(c->s, 0);
    free(c);
    return URT_TASK_DONE;
}

static void c_finish_cancelled(struct urt_task *t, void *arg)
{
    struct ctask *c = arg;
    (void)t;
    urt_batch_stmt_done(c->s, -ECANCELED); /* a statement's own tasks complete it when cancelled too */
    free(c);
}

static int c_statement(struct urt_batch_stmt *s, void *arg)
{
    struct crun *r = arg;
    atomic_fetch_add(&r->stmts, 1);
    if (!r->async)
        return 0;
    struct ctask *c = malloc(sizeof(*c));
    c->s = s;
    urt_task_init(&c->t, c_finish, c);
    c->t.cancel = c_finish_cancelled;
    int rc = urt_job_submit(s->job, &c->t, 0);
    if (rc) {
        free(c);
        return rc;
    }
    return URT_BATCH_PENDING;
}

static void c_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct crun *r = arg;
    (void)b;
    (void)message;
    atomic_store(&r->status, status);
    atomic_fetch_add(&r->done_calls, 1);
}

static urt_batch *c_start(urt_runtime *rt, const char *const *files, uint32_t n, struct crun *r)
{
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = n;
    o.block_bytes = 4096;
    o.statement = c_statement;
    o.done = c_done;
    o.arg = r;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "urt_batch_start: %s", urt_last_error());
    return b;
}

Test(batch, cancel_and_destroy_in_cancel_mode, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-cancel");
    enum { NF = 8 };
    char *f[NF];
    const char *files[NF];
    for (int i = 0; i < NF; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%d.csv", i);
        files[i] = f[i] = e_csv(dir, name, SCALE(20000, 5000));
    }
    for (int round = 0; round < 4; round++) {
        static struct crun r;
        memset(&r, 0, sizeof(r));
        r.async = round % 2;
        struct urt_config cfg;
        test_config(&cfg, 2);
        urt_runtime *rt = rt_create_or_skip(&cfg);
        urt_batch *b = c_start(rt, files, NF, &r);
        cr_assert(WAIT_UNTIL(atomic_load(&r.stmts) >= 200, 30000));
        if (round < 2) { /* urt_batch_cancel */
            cr_assert_eq(urt_batch_cancel(b), 0, "%s", urt_last_error());
            cr_assert_eq(urt_batch_wait(b, 30ull * 1000 * 1000 * 1000), -ECANCELED);
            cr_assert_str_eq(urt_batch_error(b), "cancelled by urt_batch_cancel");
            cr_assert_eq(urt_batch_cancel(b), -EALREADY);
            struct urt_batch_stats s;
            urt_batch_stats(b, &s);
            cr_assert_lt(s.statements, (uint64_t)NF * SCALE(20000, 5000));
            cr_assert_eq(s.nodes, 0);
            urt_batch_release(b);
            rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
        } else { /* the runtime goes away under it */
            urt_batch_release(b);
            cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
            leak_check();
            int st = atomic_load(&r.status);
            cr_assert(st == -ECANCELED || st == -ESHUTDOWN, "status %d", st);
        }
        cr_assert_eq(atomic_load(&r.done_calls), 1, "round %d: the callback ran %u times", round,
                     atomic_load(&r.done_calls));
    }
    for (int i = 0; i < NF; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
}

/* Many files: the tree holds what the limits allow, never more. */
Test(batch, memory_bounded_with_many_files, .timeout = 120)
{
    char *dir = test_tmpdir("urt-batch-many");
    enum { NF = 400 };
    static char *f[NF];
    static const char *files[NF];
    for (int i = 0; i < NF; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%03d.csv", i);
        files[i] = f[i] = e_csv(dir, name, 40 + i % 60);
    }
    static struct crun r;
    memset(&r, 0, sizeof(r));
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = NF;
    o.block_bytes = 256;
    o.max_concurrent_files = 3;
    o.max_concurrent_blocks_per_file = 2;
    o.statement = c_statement;
    o.done = c_done;
    o.arg = &r;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "%s", urt_last_error());
    cr_assert_eq(urt_batch_wait(b, 60ull * 1000 * 1000 * 1000), 0, "%s", urt_batch_error(b));
    struct urt_batch_stats s;
    urt_batch_stats(b, &s);
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    uint64_t total = 0;
    for (int i = 0; i < NF; i++)
        total += 40 + i % 60;
    cr_assert_eq(s.statements, total);
    cr_assert_eq(s.files_done, NF);
    cr_assert_leq(s.max_files_in_flight, 3);
    cr_assert_leq(s.max_nodes, 3 * (1 + 2), "peak %llu nodes", (unsigned long long)s.max_nodes);
    cr_assert_leq(s.max_buffer_bytes, 3 * 2 * (256 + 256 + 1), "peak %llu buffer bytes",
                  (unsigned long long)s.max_buffer_bytes);
    cr_assert_eq(s.nodes, 0);
    cr_assert_eq(s.buffer_bytes, 0);
    for (int i = 0; i < NF; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
}

/* A statement's job: tasks it adds to stmt->job finish before the statement
 * completes, so before the next statement of its block starts. */
struct nest {
    _Atomic uint32_t tails[MAX_FILES][64];
    _Atomic uint32_t stmts_seen[MAX_FILES][64];
    _Atomic uint32_t bad;
};

struct ntail {
    struct urt_task t;
    _Atomic uint32_t *counter;
};

static enum urt_task_result n_tail(struct urt_task *t, void *arg)
{
    struct ntail *n = arg;
    (void)t;
    for (volatile int i = 0; i < 2000; i++)
        ;
    atomic_fetch_add(n->counter, 1);
    free(n);
    return URT_TASK_DONE;
}

static int n_statement(struct urt_batch_stmt *s, void *arg)
{
    struct nest *n = arg;
    uint32_t fi = s->block->file, bi = (uint32_t)(s->block->index % 64);
    uint32_t before = atomic_fetch_add(&n->stmts_seen[fi][bi], 1);
    if (atomic_load(&n->tails[fi][bi]) != 2 * before)
        atomic_fetch_add(&n->bad, 1); /* the previous statement's tasks had not finished */
    for (int k = 0; k < 2; k++) {
        struct ntail *t = malloc(sizeof(*t));
        t->counter = &n->tails[fi][bi];
        urt_task_init(&t->t, n_tail, t);
        if (urt_job_submit(s->job, &t->t, 0) != 0) {
            free(t);
            atomic_fetch_add(&n->bad, 1);
        }
    }
    return 0;
}

Test(batch, a_statement_is_its_jobs_tasks, .timeout = 60)
{
    char *dir = test_tmpdir("urt-batch-nest");
    char *f[2] = {e_csv(dir, "a.csv", 300), e_csv(dir, "b.csv", 300)};
    const char *files[2] = {f[0], f[1]};
    static struct nest n;
    memset(&n, 0, sizeof(n));
    struct urt_config cfg;
    test_config(&cfg, 3);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = 2;
    o.block_bytes = 512;
    o.statement = n_statement;
    o.arg = &n;
    urt_batch *b;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "%s", urt_last_error());
    cr_assert_eq(urt_job_wait(urt_batch_job(b), 60ull * 1000 * 1000 * 1000), 0); /* the batch's job ends with it */
    cr_assert_eq(urt_batch_poll(b), 0, "%s", urt_batch_error(b));
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&n.bad), 0, "%u statements started before their predecessor's tasks finished",
                 atomic_load(&n.bad));
    uint32_t tails = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 64; k++)
            tails += atomic_load(&n.tails[i][k]);
    cr_assert_eq(tails, 2 * 600);
    for (int i = 0; i < 2; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    test_remove_dir(dir);
}

/* Random configurations against the same model (seed printed). */
Test(batch, random_configurations_against_the_model, .timeout = 300)
{
    uint64_t seed = now_ns() | 1, rng = seed;
    cr_log_info("seed %llu", (unsigned long long)seed);
    for (int i = 0; i < SCALE(24, 6); i++) {
        struct cfg c = {
            .workers = 1 + (uint32_t)(rng_next(&rng) % 4),
            .files = 1 + (uint32_t)(rng_next(&rng) % 10),
            .recs = 20 + (uint32_t)(rng_next(&rng) % 300),
            .block_bytes = 64 + rng_next(&rng) % 2000,
            .max_files = 1 + (uint32_t)(rng_next(&rng) % 4),
            .max_blocks = 1 + (uint32_t)(rng_next(&rng) % 4),
            .binary = rng_next(&rng) % 3 == 0,
            .crlf = rng_next(&rng) % 4 == 0,
            .async = rng_next(&rng) % 2,
        };
        c.header = !c.binary && rng_next(&rng) % 3 == 0;
        run_matrix_one(&c);
    }
}
