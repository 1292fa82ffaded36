/*
 * tests/unit/test_batch_parse.c — the record formats of the batch executor
 * (batch/parse.h): RFC 4180 CSV edge cases, the binary format, and the
 * boundary rule every block relies on — parse_next_start from any record
 * start must find the same record start as a sequential walk of the file
 * (checked for every limit of random files full of quotes, commas, CR and
 * LF). PARSE_MORE must leave the window untouched.
 */
#include "../helpers.h"

#include "batch/parse.h"

#define MAXREC 1024

struct pw {
    char buf[8192];
    struct parse_win w;
    struct parse_fields fv;
};

/* A window over all of s (eof), or its first `avail` bytes of a longer file. */
static void pw_init(struct pw *p, const char *s, size_t len, size_t avail)
{
    memset(p->buf, 0x7f, sizeof(p->buf));
    memcpy(p->buf, s, len);
    p->w = (struct parse_win){.base = p->buf, .off = 0, .len = avail, .size = len};
    p->fv = (struct parse_fields){0};
}

static int rec(struct pw *p, uint64_t at, uint64_t *next, struct parse_err *e)
{
    return parse_record(URT_BATCH_CSV, &p->w, at, MAXREC, &p->fv, next, e);
}

static void want_fields(struct pw *p, uint32_t n, const char *const *want)
{
    cr_assert_eq(p->fv.n, n, "%u fields, want %u", p->fv.n, n);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(p->fv.v[i].len, strlen(want[i]), "field %u: len %zu, want %zu ('%s')", i, p->fv.v[i].len,
                     strlen(want[i]), want[i]);
        cr_assert(memcmp(p->fv.v[i].data, want[i], p->fv.v[i].len) == 0, "field %u: '%.*s', want '%s'", i,
                  (int)p->fv.v[i].len, p->fv.v[i].data, want[i]);
        cr_assert_eq(p->fv.v[i].data[p->fv.v[i].len], '\0', "field %u is not NUL-terminated", i);
    }
}

#define CSV_OK(input, next_want, ...)                                                                         \
    do {                                                                                                      \
        static struct pw p_;                                                                                  \
        const char *w_[] = {__VA_ARGS__};                                                                     \
        pw_init(&p_, input, sizeof(input) - 1, sizeof(input) - 1);                                            \
        uint64_t n_;                                                                                          \
        struct parse_err e_;                                                                                  \
        int rc_ = rec(&p_, 0, &n_, &e_);                                                                      \
        cr_assert_eq(rc_, PARSE_OK, "'%s': rc %d (%s)", input, rc_, rc_ == PARSE_ERR ? e_.what : "");         \
        cr_assert_eq(n_, (uint64_t)(next_want), "'%s': next %llu, want %d", input, (unsigned long long)n_,    \
                     (int)(next_want));                                                                       \
        want_fields(&p_, sizeof(w_) / sizeof(w_[0]), w_);                                                     \
        parse_fields_free(&p_.fv);                                                                            \
    } while (0)

#define CSV_ERR(input, err_want, at_want, needle)                                                             \
    do {                                                                                                      \
        static struct pw p_;                                                                                  \
        pw_init(&p_, input, sizeof(input) - 1, sizeof(input) - 1);                                            \
        uint64_t n_;                                                                                          \
        struct parse_err e_;                                                                                  \
        int rc_ = rec(&p_, 0, &n_, &e_);                                                                      \
        cr_assert_eq(rc_, PARSE_ERR, "'%s': rc %d, want an error", input, rc_);                               \
        cr_assert_eq(e_.err, err_want, "'%s': err %d, want %d (%s)", input, e_.err, err_want, e_.what);       \
        cr_assert_eq(e_.at, (uint64_t)(at_want), "'%s': at %llu, want %d (%s)", input,                        \
                     (unsigned long long)e_.at, (int)(at_want), e_.what);                                     \
        cr_assert(strstr(e_.what, needle), "'%s': message '%s' lacks '%s'", input, e_.what, needle);          \
        parse_fields_free(&p_.fv);                                                                            \
    } while (0)

Test(batch_parse, csv_fields)
{
    CSV_OK("a,b,c\n", 6, "a", "b", "c");
    CSV_OK("a,b,c", 5, "a", "b", "c");                 /* no final LF: the record ends at EOF */
    CSV_OK("a,b\r\nx", 5, "a", "b");                  /* CRLF */
    CSV_OK("\"a,b\",c\n", 8, "a,b", "c");              /* comma in quotes */
    CSV_OK("\"a\"\"b\"\n", 7, "a\"b");                 /* doubled quote */
    CSV_OK("\"a\nb\",c\n", 8, "a\nb", "c");            /* LF in quotes */
    CSV_OK("\"a\r\nb\"\r\n", 8, "a\r\nb");             /* CRLF in quotes, CRLF after */
    CSV_OK(",,\n", 3, "", "", "");                     /* empty fields */
    CSV_OK("\"\",x\n", 5, "", "x");                    /* empty quoted field */
    CSV_OK("\n", 1, "");                               /* an empty line is one empty field */
    CSV_OK("\"\"\"\"\n", 5, "\"");                     /* a field that is one quote */
    CSV_OK("a\rb,c\n", 6, "a\rb", "c");                /* a lone CR is data */
    CSV_OK("\"x\"", 3, "x");                           /* quoted at EOF */
    CSV_OK("a,\"\"", 4, "a", "");
    CSV_OK("x,y\n\"q\"\n", 4, "x", "y");               /* only the first record */
}

Test(batch_parse, csv_errors)
{
    CSV_ERR("\"abc", -EBADMSG, 0, "unterminated");
    CSV_ERR("a,\"b\nc", -EBADMSG, 2, "unterminated");
    CSV_ERR("ab\"c\n", -EBADMSG, 2, "quote inside an unquoted field");
    CSV_ERR("\"ab\"c,d\n", -EBADMSG, 4, "after the closing quote");
    CSV_ERR("\"ab\" ,d\n", -EBADMSG, 4, "after the closing quote");
    CSV_ERR("\"ab\"\rx\n", -EBADMSG, 4, "after the closing quote");
}

Test(batch_parse, csv_record_longer_than_the_limit)
{
    static struct pw p;
    const char *s = "0123456789abcdef,x\nshort\n";
    pw_init(&p, s, strlen(s), strlen(s));
    uint64_t next;
    struct parse_err e;
    cr_assert_eq(parse_record(URT_BATCH_CSV, &p.w, 0, 10, &p.fv, &next, &e), PARSE_ERR);
    cr_assert_eq(e.err, -EMSGSIZE, "%s", e.what);
    cr_assert_eq(parse_record(URT_BATCH_CSV, &p.w, 19, 10, &p.fv, &next, &e), PARSE_OK, "%s", e.what);
    cr_assert_eq(next, strlen(s));
    /* exactly the limit (terminator included) is fine */
    cr_assert_eq(parse_record(URT_BATCH_CSV, &p.w, 19, 6, &p.fv, &next, &e), PARSE_OK, "%s", e.what);
    parse_fields_free(&p.fv);
}

/* A window that ends inside the record: PARSE_MORE, window unchanged, then OK
 * once the bytes are there. */
Test(batch_parse, csv_more_leaves_the_window_untouched)
{
    const char *cases[] = {"\"a\"\"b\",\"c,d\"\n", "abc,def\n", "\"x\"\r\n", "\"q\"\"\",z\n", "a,\"\"\n"};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *s = cases[c];
        size_t len = strlen(s);
        for (size_t avail = 0; avail < len; avail++) {
            static struct pw p;
            pw_init(&p, s, len, avail);
            memcpy(p.buf + len, "zzzz\n", 5); /* the file goes on after s */
            p.w.size = len + 5;
            char before[64];
            memcpy(before, p.buf, len);
            uint64_t next;
            struct parse_err e;
            int rc = parse_record(URT_BATCH_CSV, &p.w, 0, MAXREC, &p.fv, &next, &e);
            bool complete_at_lf = avail >= len; /* never here */
            cr_assert(!complete_at_lf);
            cr_assert_eq(rc, PARSE_MORE, "'%s' with %zu bytes: rc %d (%s)", s, avail, rc,
                         rc == PARSE_ERR ? e.what : "");
            cr_assert(memcmp(before, p.buf, len) == 0, "'%s' with %zu bytes: the window changed", s, avail);
            p.w.len = len + 5;
            cr_assert_eq(parse_record(URT_BATCH_CSV, &p.w, 0, MAXREC, &p.fv, &next, &e), PARSE_OK, "%s", e.what);
            cr_assert_eq(next, len);
            parse_fields_free(&p.fv);
        }
    }
}

/* ---- boundaries: parse_next_start against a sequential walk ---------------------------- */

static size_t random_csv(uint64_t *rng, char *out, size_t cap, bool crlf)
{
    static const char alphabet[] = "ab,\"\n\r x";
    size_t n = 0;
    while (n + 64 < cap) {
        uint32_t fields = 1 + (uint32_t)(rng_next(rng) % 4);
        for (uint32_t f = 0; f < fields; f++) {
            bool quoted = rng_next(rng) % 2;
            uint32_t len = (uint32_t)(rng_next(rng) % 7);
            if (quoted)
                out[n++] = '"';
            for (uint32_t i = 0; i < len; i++) {
                char c = alphabet[rng_next(rng) % (sizeof(alphabet) - 1)];
                if (!quoted && (c == ',' || c == '"' || c == '\n' || c == '\r'))
                    c = 'y';
                if (quoted && c == '"')
                    out[n++] = '"';
                out[n++] = c;
            }
            if (quoted)
                out[n++] = '"';
            if (f + 1 < fields)
                out[n++] = ',';
        }
        if (crlf)
            out[n++] = '\r';
        out[n++] = '\n';
    }
    if (rng_next(rng) % 2 && n > 1 && out[n - 1] == '\n' && out[n - 2] != '\r')
        n--; /* sometimes no final LF */
    return n;
}

static void boundaries_against_walk(enum urt_batch_format fmt, char *data, size_t len, uint64_t first)
{
    static uint64_t starts[8192];
    size_t n_starts = 0;
    struct parse_win w = {.base = data, .off = 0, .len = len, .size = len};
    uint64_t at = first;
    while (at < len) { /* the reference: one record after the other */
        starts[n_starts++] = at;
        uint32_t nf;
        struct parse_err e;
        cr_assert_eq(parse_peek(fmt, &w, at, MAXREC, &nf, &at, &e), PARSE_OK, "peek at %llu: %s",
                     (unsigned long long)at, e.what);
    }
    size_t k = 0;
    for (uint64_t limit = first + 1; limit <= len; limit++) {
        while (k < n_starts && starts[k] < limit)
            k++;
        uint64_t want = k < n_starts ? starts[k] : len;
        uint64_t froms[2] = {starts[k ? k - 1 : 0], starts[0]};
        for (int i = 0; i < (limit % 7 == 0 ? 2 : 1); i++) { /* from the file's start now and then */
            uint64_t got;
            struct parse_err e;
            int rc = parse_next_start(fmt, &w, froms[i], limit, MAXREC, &got, &e);
            cr_assert_eq(rc, PARSE_OK, "limit %llu from %llu: rc %d (%s)", (unsigned long long)limit,
                         (unsigned long long)froms[i], rc, rc == PARSE_ERR ? e.what : "");
            cr_assert_eq(got, want, "limit %llu from %llu: next start %llu, want %llu", (unsigned long long)limit,
                         (unsigned long long)froms[i], (unsigned long long)got, (unsigned long long)want);
        }
    }
}

Test(batch_parse, csv_next_start_matches_a_sequential_walk, .timeout = 60)
{
    static char data[4000];
    uint64_t rng = 0x1234567;
    for (int round = 0; round < SCALE(40, 10); round++) {
        size_t len = random_csv(&rng, data, sizeof(data), round % 3 == 0);
        boundaries_against_walk(URT_BATCH_CSV, data, len, 0);
    }
}

/* ---- binary ------------------------------------------------------------------------------ */

static size_t bin_record(char *out, const char *const *fields, uint32_t n)
{
    size_t len = 4;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t fl = (uint32_t)strlen(fields[i]);
        memcpy(out + len, &fl, 4);
        memcpy(out + len + 4, fields[i], fl);
        out[len + 4 + fl] = 0;
        len += 4 + fl + 1;
    }
    uint32_t body = (uint32_t)(len - 4);
    memcpy(out, &body, 4);
    return len;
}

Test(batch_parse, binary_records)
{
    static char d[256];
    memcpy(d, PARSE_BIN_MAGIC, 8);
    const char *r1[] = {"key", "", "value with, \"anything\"\n"};
    size_t n1 = bin_record(d + 8, r1, 3);
    const char *r2[] = {"x"};
    size_t n2 = bin_record(d + 8 + n1, r2, 1);
    size_t len = 8 + n1 + n2;
    struct parse_win w = {.base = d, .off = 0, .len = len, .size = len};
    struct parse_err e;
    cr_assert_eq(parse_bin_magic(&w, &e), PARSE_OK, "%s", e.what);
    struct parse_fields fv = {0};
    uint64_t next;
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8, MAXREC, &fv, &next, &e), PARSE_OK, "%s", e.what);
    cr_assert_eq(next, 8 + n1);
    cr_assert_eq(fv.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(fv.v[i].len, strlen(r1[i]));
        cr_assert_str_eq(fv.v[i].data, r1[i]);
    }
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, next, MAXREC, &fv, &next, &e), PARSE_OK, "%s", e.what);
    cr_assert_eq(next, len);
    cr_assert_str_eq(fv.v[0].data, "x");
    /* truncated: the window is the whole file but shorter than the record says */
    w.len = w.size = len - 1;
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8 + n1, MAXREC, &fv, &next, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "past the end of the file"), "%s", e.what);
    /* more: the file goes on */
    w.size = len;
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8 + n1, MAXREC, &fv, &next, &e), PARSE_MORE);
    /* a truncated header */
    w.len = w.size = 8 + n1 + 2;
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8 + n1, MAXREC, &fv, &next, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "truncated record header"), "%s", e.what);
    /* a field without its 0x00 */
    w.len = w.size = len;
    d[8 + n1 - 1] = 'z';
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8, MAXREC, &fv, &next, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "0x00"), "%s", e.what);
    cr_assert_eq(e.at, 8 + n1 - 1);
    /* too long */
    d[8 + n1 - 1] = 0;
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8, 8, &fv, &next, &e), PARSE_ERR);
    cr_assert_eq(e.err, -EMSGSIZE);
    /* an empty record, a field running past its record */
    uint32_t zero = 0, big = 100;
    memcpy(d + 8, &zero, 4);
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8, MAXREC, &fv, &next, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "empty record"), "%s", e.what);
    uint32_t body = (uint32_t)(n1 - 4);
    memcpy(d + 8, &body, 4);
    memcpy(d + 12, &big, 4);
    cr_assert_eq(parse_record(URT_BATCH_BINARY, &w, 8, MAXREC, &fv, &next, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "runs past the end of its record"), "%s", e.what);
    /* the magic */
    d[0] = 'X';
    cr_assert_eq(parse_bin_magic(&w, &e), PARSE_ERR);
    cr_assert(strstr(e.what, "magic"), "%s", e.what);
    w.len = w.size = 5;
    cr_assert_eq(parse_bin_magic(&w, &e), PARSE_ERR);
    parse_fields_free(&fv);
}

Test(batch_parse, binary_next_start_matches_a_sequential_walk)
{
    static char d[8192];
    uint64_t rng = 99;
    for (int round = 0; round < SCALE(20, 5); round++) {
        memcpy(d, PARSE_BIN_MAGIC, 8);
        size_t len = 8;
        while (len < 3000) {
            char f[3][16];
            const char *fs[3] = {f[0], f[1], f[2]};
            uint32_t n = 1 + (uint32_t)(rng_next(&rng) % 3);
            for (uint32_t i = 0; i < n; i++) {
                uint32_t l = (uint32_t)(rng_next(&rng) % 15);
                for (uint32_t j = 0; j < l; j++)
                    f[i][j] = (char)('a' + rng_next(&rng) % 26);
                f[i][l] = 0;
            }
            len += bin_record(d + len, fs, n);
        }
        boundaries_against_walk(URT_BATCH_BINARY, d, len, 8);
    }
}
