/*
 * tests/unit/test_batch_errors.c — the batch's first error (urt/batch.h,
 * docs/batch.md "Errors"), against a model of the input:
 *
 *  - a transactional load starts no statement after its first error: the
 *    statements run on the transaction's lane in record order, record K
 *    fails, and exactly records 0..K started (10,000 were in flight);
 *  - a malformed CSV record is reported where it is, whatever block finds a
 *    problem first: files whose records hold quoted line breaks (so that a
 *    stray quote makes the next block's start, guessed from quote parity, a
 *    wrong one that fails at once) get one malformed record — a stray quote
 *    in an unquoted field, an unterminated quote, text after a closing quote,
 *    a wrong field count (also with a statement failing at the next block's
 *    first record, which often comes first) — at many positions, read with
 *    many block sizes and 4 blocks in flight; the batch's status, message
 *    (file, line, block, record, byte) and urt_batch_error are the model's
 *    for that record;
 *  - the load reports a malformed record with its line too, and a refused
 *    default response (no write-ahead log) says how to fix it;
 *  - a statement's line (stmt->line) is the model's.
 */
#include "../helpers.h"

#include <fcntl.h>
#include <stdarg.h>

#include <urt/batch.h>

static void write_file(const char *path, const char *p, size_t n)
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

struct outcome {
    _Atomic uint32_t calls;
    _Atomic int32_t status;
    char message[600];
};

static void on_done(urt_batch *b, int status, const char *message, void *arg)
{
    struct outcome *o = arg;
    (void)b;
    snprintf(o->message, sizeof(o->message), "%s", message);
    atomic_store(&o->status, status);
    atomic_fetch_add(&o->calls, 1);
}

/* ---- 5: a transactional load starts no statement after its first error ---------------------- */

#define TL_RECORDS 20000
#define TL_FAIL 5000

struct tl {
    struct outcome out;
    _Atomic uint32_t starts, started_aborting, max_started, bad_line;
    _Atomic uint32_t started[TL_RECORDS / 32 + 1];
};

static int tl_statement(struct urt_batch_stmt *s, void *arg)
{
    struct tl *t = arg;
    uint32_t id = (uint32_t)strtoul(s->fields[0].data, NULL, 10);
    if (s->line != id + 1) /* one line per record */
        atomic_fetch_add(&t->bad_line, 1);
    if (urt_batch_aborting(s->batch))
        atomic_fetch_add(&t->started_aborting, 1); /* started after the error */
    atomic_fetch_add(&t->starts, 1);
    atomic_fetch_or(&t->started[id / 32], 1u << (id % 32));
    uint32_t m = atomic_load(&t->max_started);
    while (id > m && !atomic_compare_exchange_weak(&t->max_started, &m, id))
        ;
    if (id == TL_FAIL)
        return urt_batch_stmt_error(s, -EIO, "record %u fails", id);
    return 0;
}

Test(batch_errors, a_transactional_load_starts_no_statement_after_its_first_error, .timeout = 120)
{
    char *dir = test_tmpdir("urt-tl");
    char path[1024];
    snprintf(path, sizeof(path), "%s/load.csv", dir);
    char *buf = malloc((size_t)TL_RECORDS * 16);
    size_t len = 0;
    for (uint32_t i = 0; i < TL_RECORDS; i++)
        len += (size_t)sprintf(buf + len, "%u,v%u\n", i, i);
    write_file(path, buf, len);
    free(buf);
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    for (int round = 0; round < SCALE(5, 2); round++) {
        static struct tl t;
        memset(&t, 0, sizeof(t));
        const char *files[1] = {path};
        struct urt_batch_options o;
        urt_batch_options_init(&o);
        o.files = files;
        o.n_files = 1;
        o.flags = URT_BATCH_TRANSACTIONAL;
        o.response = URT_COMMIT_AVAILABLE; /* no write-ahead log here */
        o.block_bytes = 64 << 10;
        o.max_statements = 10000;
        o.statement = tl_statement;
        o.done = on_done;
        o.arg = &t;
        urt_batch *b;
        cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "%s", urt_last_error());
        int st = urt_batch_wait(b, 60ull * 1000000000ull);
        struct urt_batch_stats bs;
        urt_batch_stats(b, &bs);
        urt_batch_release(b);
        cr_assert_eq(st, -EIO, "%d %s", st, t.out.message);
        cr_assert_eq(atomic_load(&t.out.calls), 1);
        /* the model: the statements run in record order on the lane; K fails; nothing starts after it */
        cr_assert_eq(atomic_load(&t.started_aborting), 0, "round %d: %u statements started after the error",
                     round, atomic_load(&t.started_aborting));
        cr_assert_eq(atomic_load(&t.starts), TL_FAIL + 1, "round %d: %u statements started, want %u", round,
                     atomic_load(&t.starts), TL_FAIL + 1);
        cr_assert_eq(atomic_load(&t.max_started), TL_FAIL);
        for (uint32_t i = 0; i <= TL_FAIL; i++)
            cr_assert(atomic_load(&t.started[i / 32]) & (1u << (i % 32)), "record %u never started", i);
        cr_assert_gt(bs.max_statements_in_flight, 100, "statements were in flight when the error came");
        cr_assert_eq(atomic_load(&t.bad_line), 0, "stmt->line is the record's line");
        char want[1200];
        snprintf(want, sizeof(want), "file '%s' (#0), line %u, block 0, record %u at byte", path, TL_FAIL + 1, TL_FAIL);
        cr_assert(strstr(t.out.message, want) == t.out.message, "%s\nwant %s", t.out.message, want);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    unlink(path);
    test_remove_dir(dir);
}

/* ---- 6: the first error in file order ---------------------------------------------------------- */

#define MF_RECORDS 600

/* MF_FIELDS_STMT: a wrong field count, and the first record of the next block
 * makes its statement fail (often before the bad record is reached). */
enum mf_kind { MF_STRAY_QUOTE, MF_UNTERMINATED, MF_AFTER_CLOSE, MF_FIELDS, MF_FIELDS_STMT, MF_KINDS };

struct mf_file {
    char *data;
    size_t len;
    uint64_t off[MF_RECORDS + 1]; /* record starts (the model's: as written) */
    uint64_t bad_byte;            /* the byte the error is about */
};

/* Record i, well formed: every third holds a quoted field with a line break,
 * a comma and doubled quotes, and every seventh a quoted field whose lines
 * look like records; or (trap) every third holds such lines — read with the
 * wrong quote parity, whole blocks of that file parse as other records.
 * Record `bad` is malformed as `kind` says. */
static void mf_build(struct mf_file *f, int bad, enum mf_kind kind, uint64_t bb, bool trap)
{
    f->data = malloc((size_t)MF_RECORDS * 48);
    size_t n = 0;
    bool stop_due = false;
    for (int i = 0; i < MF_RECORDS; i++) {
        f->off[i] = n;
        if (stop_due && i > bad && n / bb > f->off[bad] / bb) { /* the next block's first record */
            n += (size_t)sprintf(f->data + n, "%d,plain%d,STOP\n", i, i);
            stop_due = false;
            continue;
        }
        if (i == bad) {
            size_t at = n + (size_t)snprintf(NULL, 0, "%d,", i);
            switch (kind) {
            case MF_STRAY_QUOTE: /* a quote inside an unquoted field */
                n += (size_t)sprintf(f->data + n, "%d,ab\"cd,z\n", i);
                f->bad_byte = at + 2;
                break;
            case MF_UNTERMINATED: /* a quote opened, never closed in the record */
                n += (size_t)sprintf(f->data + n, "%d,\"abcd,z\n", i);
                f->bad_byte = at; /* the parser runs to the next quote: after it, text */
                break;
            case MF_AFTER_CLOSE: /* text after a closing quote */
                n += (size_t)sprintf(f->data + n, "%d,\"ab\"cd,z\n", i);
                f->bad_byte = at + 4;
                break;
            default: /* two fields, not three */
                n += (size_t)sprintf(f->data + n, "%d,z\n", i);
                f->bad_byte = f->off[i];
                stop_due = kind == MF_FIELDS_STMT;
                break;
            }
            continue;
        }
        if ((trap && i % 3 == 0) || (!trap && i % 7 == 5)) /* lines in quotes that read as records
                                                                when the quote parity is wrong */
            n += (size_t)sprintf(f->data + n, "%d,\",y,w\n%d,x,z\n%d,y,z\n\",z\n", i, 9000 + i, 9100 + i);
        else if (i % 3 == 0)
            n += (size_t)sprintf(f->data + n, "%d,\"line a\nline b, \"\"q\"\"\",z\n", i);
        else
            n += (size_t)sprintf(f->data + n, "%d,plain%d,z\n", i, i);
    }
    f->off[MF_RECORDS] = n;
    f->len = n;
}

static uint64_t mf_line(const struct mf_file *f, uint64_t at)
{
    uint64_t line = 1;
    for (uint64_t k = 0; k < at; k++)
        line += f->data[k] == '\n';
    return line;
}

struct mf_run {
    struct outcome out;
    const struct mf_file *f;
    _Atomic uint32_t statements, garbage, garbage_commits, commits;
};

/* A record the file does not hold as such (read from a wrong start)? */
static bool mf_garbage(const struct mf_run *r, const struct urt_batch_stmt *s)
{
    char *end;
    long id = strtol(s->fields[0].data, &end, 10);
    return *end || id < 0 || id >= MF_RECORDS || r->f->off[id] != s->offset;
}

static int mf_block_begin(struct urt_batch_block *blk, void *arg)
{
    (void)arg;
    blk->user = calloc(1, sizeof(uint32_t)); /* the block's garbage statements */
    return blk->user ? 0 : -ENOMEM;
}

static void mf_block_done(struct urt_batch_block *blk, int status, void *arg)
{
    struct mf_run *r = arg;
    if (status == 0) {
        atomic_fetch_add(&r->commits, 1);
        if (blk->user && *(uint32_t *)blk->user)
            atomic_fetch_add(&r->garbage_commits, 1);
    }
    free(blk->user);
}

static int mf_statement(struct urt_batch_stmt *s, void *arg)
{
    struct mf_run *r = arg;
    atomic_fetch_add(&r->statements, 1);
    if (mf_garbage(r, s)) {
        atomic_fetch_add(&r->garbage, 1);
        (*(uint32_t *)s->block->user)++; /* one statement of a block at a time */
    }
    if (!strcmp(s->fields[2].data, "STOP"))
        return urt_batch_stmt_error(s, -EDOM, "this record stops the load");
    uint64_t spin = now_ns() + 20000; /* 20 µs a record: the failing block takes a while to reach it */
    while (now_ns() < spin)
        ;
    return 0;
}

/* The message the model expects for record `bad` of f, read in blocks of bb. */
static void mf_expect(const struct mf_file *f, const char *path, int bad, enum mf_kind kind, uint64_t bb, char *out,
                      size_t cap)
{
    uint64_t rec = f->off[bad], block = rec / bb;
    int index = 0;
    for (int i = bad - 1; i >= 0 && f->off[i] / bb == block; i--)
        index++;
    static const char *what[] = {"quote inside an unquoted field", "", "text after the closing quote of a field",
                                 "the record has 2 fields, expected 3", "the record has 2 fields, expected 3"};
    if (kind == MF_UNTERMINATED) /* its detail (and line) depend on where the next quote is: the place counts */
        snprintf(out, cap, ", block %llu, record %d at byte %llu: ", (unsigned long long)block, index,
                 (unsigned long long)rec);
    else
        snprintf(out, cap, "file '%s' (#0), line %llu, block %llu, record %d at byte %llu: %s", path,
                 (unsigned long long)mf_line(f, f->bad_byte), (unsigned long long)block, index,
                 (unsigned long long)rec, what[kind]);
}

Test(batch_errors, a_malformed_record_is_reported_first_in_file_order, .timeout = 300)
{
    char *dir = test_tmpdir("urt-mf");
    char path[1024];
    snprintf(path, sizeof(path), "%s/data.csv", dir);
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    static const uint64_t sizes[] = {48, 64, 100, 257, 1000, 4096};
    static const int positions[] = {1, 7, 100, 299, 301, 450, 597};
    int runs = 0, wrong = 0, garbage = 0, garbage_commits = 0, commits = 0;
    char first_wrong[2400] = "";
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (size_t pi = 0; pi < sizeof(positions) / sizeof(positions[0]); pi++)
            for (int kind = 0; kind < MF_KINDS; kind++) {
                if (SCALE(0, 1) && (pi + (size_t)kind) % 3)
                    continue; /* sanitizer builds: a third of the matrix */
                static struct mf_file f;
                mf_build(&f, positions[pi], (enum mf_kind)kind, sizes[si], pi % 2 == 1);
                write_file(path, f.data, f.len);
                static struct mf_run r;
                memset(&r, 0, sizeof(r));
                r.f = &f;
                const char *files[1] = {path};
                struct urt_batch_options o;
                urt_batch_options_init(&o);
                o.files = files;
                o.n_files = 1;
                o.fields = 3;
                o.block_bytes = sizes[si];
                o.max_concurrent_blocks_per_file = 4;
                o.statement = mf_statement;
                o.block_begin = mf_block_begin;
                o.block_done = mf_block_done;
                o.flags = URT_BATCH_BLOCK_TX; /* blocks commit on their own: none may commit garbage */
                o.response = URT_COMMIT_AVAILABLE;
                o.done = on_done;
                o.arg = &r;
                urt_batch *b;
                cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "%s", urt_last_error());
                int st = urt_batch_wait(b, 60ull * 1000000000ull);
                char err[600];
                snprintf(err, sizeof(err), "%s", urt_batch_error(b));
                urt_batch_release(b);
                cr_assert_eq(atomic_load(&r.out.calls), 1);
                cr_assert_str_eq(err, r.out.message, "urt_batch_error and the callback agree");
                char want[1200];
                mf_expect(&f, path, positions[pi], (enum mf_kind)kind, sizes[si], want, sizeof(want));
                runs++;
                char head[1100];
                snprintf(head, sizeof(head), "file '%s' (#0), line ", path);
                bool ok = kind == MF_UNTERMINATED
                              ? (st == -EBADMSG || st == -EMSGSIZE) && strncmp(r.out.message, head, strlen(head)) == 0 &&
                                    strstr(r.out.message, want)
                              : st == -EBADMSG && strncmp(r.out.message, want, strlen(want)) == 0;
                garbage += atomic_load(&r.garbage);
                garbage_commits += atomic_load(&r.garbage_commits);
                commits += atomic_load(&r.commits);
                if (!ok) {
                    if (!wrong++)
                        snprintf(first_wrong, sizeof(first_wrong),
                                 "block_bytes %llu, record %d, kind %d: status %d\n got  '%s'\n want '%s...'",
                                 (unsigned long long)sizes[si], positions[pi], kind, st, r.out.message, want);
                }
                free(f.data);
            }
    cr_assert_eq(wrong, 0, "%d of %d loads named the wrong place; the first:\n%s", wrong, runs, first_wrong);
    /* statements may run on records read from a wrong start before the error is found, but such a block
     * never commits: it waits for every earlier block to be parsed */
    cr_assert_eq(garbage_commits, 0, "%d blocks with misread records committed (%d misread statements, %d commits)",
                 garbage_commits, garbage, commits);
    cr_log_info("%d loads: %d blocks committed before the error, %d statements ran on misread records", runs,
                commits, garbage);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    unlink(path);
    test_remove_dir(dir);
}

/* ---- the load names the line of a malformed record; refusals name their fix ----------------------- */

static int ok_statement(struct urt_batch_stmt *s, void *arg)
{
    (void)s;
    (void)arg;
    return 0;
}

Test(batch_errors, the_load_names_the_line_and_a_refused_response_its_fix, .timeout = 60)
{
    char *dir = test_tmpdir("urt-ll");
    char path[1024];
    snprintf(path, sizeof(path), "%s/load.csv", dir);
    /* a header, records with quoted line breaks, then a quote inside an unquoted field */
    char *buf = malloc(64 << 10);
    size_t len = (size_t)sprintf(buf, "id,text\n");
    uint32_t line = 2, bad = 700, bad_line = 0;
    uint64_t bad_off = 0, bad_byte = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        if (i == bad) {
            bad_off = len;
            bad_line = line;
            len += (size_t)sprintf(buf + len, "%u,ab\"c\n", i);
            bad_byte = bad_off + (uint64_t)snprintf(NULL, 0, "%u,ab", i);
        } else if (i % 4 == 1) {
            len += (size_t)sprintf(buf + len, "%u,\"two\nlines\"\n", i);
        } else {
            len += (size_t)sprintf(buf + len, "%u,one\n", i);
        }
        line += 1 + (i % 4 == 1 && i != bad);
    }
    write_file(path, buf, len);
    free(buf);
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    const char *files[1] = {path};
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = 1;
    o.flags = URT_BATCH_TRANSACTIONAL | URT_BATCH_CSV_HEADER;
    o.block_bytes = 1000;
    o.statement = ok_statement;
    urt_batch *b = NULL;
    /* no write-ahead log: the default response is refused, and the message says what to do */
    cr_assert_eq(urt_batch_start(rt, &o, &b), -EOPNOTSUPP);
    cr_assert(strstr(urt_last_error(), "urt_batch_start:") == urt_last_error(), "%s", urt_last_error());
    cr_assert(strstr(urt_last_error(), "log_dir") && strstr(urt_last_error(), "URT_COMMIT_AVAILABLE"), "%s",
              urt_last_error());
    o.response = URT_COMMIT_AVAILABLE;
    static struct outcome out;
    o.done = on_done;
    o.arg = &out;
    cr_assert_eq(urt_batch_start(rt, &o, &b), 0, "%s", urt_last_error());
    cr_assert_eq(urt_batch_wait(b, 60ull * 1000000000ull), -EBADMSG);
    char want[1200];
    snprintf(want, sizeof(want), "file '%s' (#0), line %u, block %llu, record", path, bad_line,
             (unsigned long long)(bad_off / 1000));
    cr_assert(strstr(urt_batch_error(b), want) == urt_batch_error(b), "%s\nwant %s", urt_batch_error(b), want);
    snprintf(want, sizeof(want), "quote inside an unquoted field (byte %llu)", (unsigned long long)bad_byte);
    cr_assert(strstr(urt_batch_error(b), want), "%s", urt_batch_error(b));
    urt_batch_release(b);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    unlink(path);
    test_remove_dir(dir);
}
