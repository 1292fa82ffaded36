/*
 * batch/parse.c — CSV (RFC 4180) and the binary record format, parsed in a
 * block's window (contract and boundary rules: batch/parse.h).
 *
 * CSV is walked one field at a time: a quoted field runs to the next quote
 * that is not doubled, and must be followed by a comma, a line end (LF or
 * CRLF) or the end of the file; an unquoted field runs to the next comma or
 * LF and may not contain a quote (a CR right before the LF ends the line).
 * Parsing in place is two passes when the record has a quote: a counting
 * pass that only reads (so that PARSE_MORE leaves the window untouched, and
 * a block can read more and start again), then the writing pass that removes
 * the quotes, turns "" into " and writes each field's NUL over the byte that
 * ended it. A record without quotes (the common case) is split in one pass
 * with memchr.
 *
 * The binary format needs no writing: every field is followed by its 0x00
 * byte in the file.
 *
 * Single-threaded (the window's block); no memory ordering.
 */
#include "batch/parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct parse_err *e, int err, uint64_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(struct parse_err *e, int err, uint64_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what, sizeof(e->what), fmt, ap);
    va_end(ap);
    e->at = at;
    e->err = err;
    return PARSE_ERR;
}

static inline bool win_eof(const struct parse_win *w)
{
    return w->off + w->len >= w->size;
}

/* The window ends inside the record that starts at `at` (file offset): read
 * more, unless max_rec bytes are already there (the record is too long). */
static int need_more(const struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_err *e)
{
    if (w->off + w->len - at >= max_rec)
        return fail(e, -EMSGSIZE, at, "record longer than max_record_bytes (%llu)", (unsigned long long)max_rec);
    return PARSE_MORE;
}

static int fields_push(struct parse_fields *fv, const char *p, size_t len, uint64_t at, struct parse_err *e)
{
    if (fv->n == fv->cap) {
        uint32_t cap = fv->cap ? fv->cap * 2 : 16;
        struct urt_batch_field *v = realloc(fv->v, cap * sizeof(*v));
        if (!v)
            return fail(e, -ENOMEM, at, "out of memory for %u fields", cap);
        fv->v = v;
        fv->cap = cap;
    }
    fv->v[fv->n++] = (struct urt_batch_field){.data = p, .len = len};
    return PARSE_OK;
}

void parse_fields_free(struct parse_fields *fv)
{
    free(fv->v);
    fv->v = NULL;
    fv->n = fv->cap = 0;
}

uint64_t parse_count_lf(const struct parse_win *w, uint64_t from, uint64_t to)
{
    uint64_t end = w->off + w->len, n = 0;
    if (from < w->off)
        from = w->off;
    if (to > end)
        to = end;
    const char *p = w->base + (from - w->off), *stop = w->base + (to > from ? to - w->off : from - w->off);
    while (p < stop && (p = memchr(p, '\n', (size_t)(stop - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

/* ---- CSV ------------------------------------------------------------------------ */

enum csv_term { TERM_COMMA, TERM_LF, TERM_CRLF, TERM_EOF };

/* One quoted field whose opening quote is at base[*i]. Counting pass (!write)
 * or writing pass (write: the content is compacted; *flen is its length). On
 * PARSE_OK *i is past the closing quote and *term says what followed. */
static int csv_quoted(struct parse_win *w, uint64_t at, uint64_t max_rec, bool write, size_t *i, size_t *flen,
                      enum csv_term *term, struct parse_err *e)
{
    char *b = w->base;
    size_t end = w->len, open = *i, j = open + 1, out = j;
    bool eof = win_eof(w);
    for (;;) {
        char *q = memchr(b + j, '"', end - j);
        if (!q) {
            if (eof)
                return fail(e, -EBADMSG, w->off + open, "unterminated quoted field");
            return need_more(w, at, max_rec, e);
        }
        size_t qi = (size_t)(q - b);
        if (write && out != j)
            memmove(b + out, b + j, qi - j);
        out += qi - j;
        if (qi + 1 == end && !eof)
            return need_more(w, at, max_rec, e); /* "" or the closing quote? */
        if (qi + 1 < end && b[qi + 1] == '"') {
            if (write)
                b[out] = '"';
            out++;
            j = qi + 2;
            continue;
        }
        j = qi + 1; /* past the closing quote */
        break;
    }
    *flen = out - (open + 1);
    *i = j;
    if (j == end) { /* end of file (not eof was handled above) */
        *term = TERM_EOF;
        return PARSE_OK;
    }
    if (b[j] == ',' || b[j] == '\n') {
        *term = b[j] == ',' ? TERM_COMMA : TERM_LF;
        return PARSE_OK;
    }
    if (b[j] == '\r') {
        if (j + 1 == end && !eof)
            return need_more(w, at, max_rec, e);
        if (j + 1 < end && b[j + 1] == '\n') {
            *term = TERM_CRLF;
            return PARSE_OK;
        }
    }
    return fail(e, -EBADMSG, w->off + j, "text after the closing quote of a field");
}

/* One unquoted field starting at base[*i]. */
static int csv_plain(struct parse_win *w, uint64_t at, uint64_t max_rec, size_t *i, size_t *flen, enum csv_term *term,
                     struct parse_err *e)
{
    char *b = w->base;
    size_t end = w->len, j = *i;
    while (j < end && b[j] != ',' && b[j] != '\n') {
        if (b[j] == '"')
            return fail(e, -EBADMSG, w->off + j, "quote inside an unquoted field");
        j++;
    }
    if (j == end && !win_eof(w))
        return need_more(w, at, max_rec, e);
    *flen = j - *i;
    if (j == end) {
        *term = TERM_EOF;
    } else if (b[j] == ',') {
        *term = TERM_COMMA;
    } else {
        *term = TERM_LF;
        if (*flen && b[j - 1] == '\r')
            (*flen)--; /* CRLF */
    }
    *i = j;
    return PARSE_OK;
}

/* Walks the record at `at`: counts its fields (n) and finds the next start;
 * with write, also splits it in place into fv. */
static int csv_walk(struct parse_win *w, uint64_t at, uint64_t max_rec, bool write, struct parse_fields *fv,
                    uint32_t *n, uint64_t *next, struct parse_err *e)
{
    char *b = w->base;
    size_t i = (size_t)(at - w->off);
    *n = 0;
    if (write)
        fv->n = 0;
    for (;;) {
        size_t fstart = i + (i < w->len && b[i] == '"'), flen = 0;
        enum csv_term term = TERM_EOF;
        int rc = (i < w->len && b[i] == '"') ? csv_quoted(w, at, max_rec, write, &i, &flen, &term, e)
                                              : csv_plain(w, at, max_rec, &i, &flen, &term, e);
        if (rc != PARSE_OK)
            return rc;
        (*n)++;
        if (write) {
            if (fields_push(fv, b + fstart, flen, at, e) != PARSE_OK)
                return PARSE_ERR;
            b[fstart + flen] = '\0';
        }
        if (term == TERM_COMMA) {
            i++;
            continue;
        }
        i += term == TERM_LF ? 1 : term == TERM_CRLF ? 2 : 0;
        break;
    }
    *next = w->off + i;
    if (*next - at > max_rec)
        return fail(e, -EMSGSIZE, at, "record of %llu bytes is longer than max_record_bytes (%llu)",
                    (unsigned long long)(*next - at), (unsigned long long)max_rec);
    return PARSE_OK;
}

/* The record at `at` has no quote up to its LF (or the end of the file): split
 * on commas. Returns PARSE_MORE (as "not applicable") when it has a quote or
 * its end is not in the window. */
static int csv_fast(struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_fields *fv, uint64_t *next,
                    struct parse_err *e)
{
    char *b = w->base;
    size_t i = (size_t)(at - w->off);
    char *nl = memchr(b + i, '\n', w->len - i);
    if (!nl && !win_eof(w))
        return PARSE_MORE;
    size_t lend = nl ? (size_t)(nl - b) : w->len;
    if (memchr(b + i, '"', lend - i))
        return PARSE_MORE;
    uint64_t nx = w->off + (nl ? lend + 1 : lend);
    fv->lf = nl != NULL; /* no quote: its only line break is its end */
    if (nx - at > max_rec)
        return fail(e, -EMSGSIZE, at, "record of %llu bytes is longer than max_record_bytes (%llu)",
                    (unsigned long long)(nx - at), (unsigned long long)max_rec);
    size_t stop = (nl && lend > i && b[lend - 1] == '\r') ? lend - 1 : lend;
    fv->n = 0;
    for (;;) {
        char *c = memchr(b + i, ',', stop - i);
        size_t fend = c ? (size_t)(c - b) : stop;
        if (fields_push(fv, b + i, fend - i, at, e) != PARSE_OK)
            return PARSE_ERR;
        b[fend] = '\0';
        if (!c)
            break;
        i = fend + 1;
    }
    *next = nx;
    return PARSE_OK;
}

static int csv_record(struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_fields *fv, uint64_t *next,
                      struct parse_err *e)
{
    int rc = csv_fast(w, at, max_rec, fv, next, e);
    if (rc != PARSE_MORE)
        return rc;
    uint32_t n;
    rc = csv_walk(w, at, max_rec, false, NULL, &n, next, e); /* reads only */
    if (rc != PARSE_OK)
        return rc;
    fv->lf = (uint32_t)parse_count_lf(w, at, *next); /* before the writing pass touches the bytes */
    return csv_walk(w, at, max_rec, true, fv, &n, next, e);
}

/* Quote parity from a record start: the first unquoted LF at or after limit - 1. */
static int csv_next_start(const struct parse_win *w, uint64_t from, uint64_t limit, uint64_t max_rec, uint64_t *out,
                          struct parse_err *e)
{
    const char *b = w->base;
    size_t i = (size_t)(from - w->off), target = (size_t)(limit - 1 - w->off), end = w->len;
    bool inq = false;
    while (i < target) { /* phase 1: parity at limit - 1 */
        const char *q = memchr(b + i, '"', target - i);
        if (!q)
            break;
        inq = !inq;
        i = (size_t)(q - b) + 1;
    }
    for (i = target; i < end; i++) { /* phase 2: the first unquoted LF */
        if (b[i] == '"')
            inq = !inq;
        else if (b[i] == '\n' && !inq) {
            *out = w->off + i + 1;
            return PARSE_OK;
        }
    }
    if (win_eof(w)) {
        if (inq)
            return fail(e, -EBADMSG, limit - 1, "unterminated quoted field (it holds byte %llu)",
                        (unsigned long long)(limit - 1));
        *out = w->size;
        return PARSE_OK;
    }
    if (w->off + end - (limit - 1) >= max_rec)
        return fail(e, -EMSGSIZE, limit - 1, "the record holding byte %llu is longer than max_record_bytes (%llu)",
                    (unsigned long long)(limit - 1), (unsigned long long)max_rec);
    return PARSE_MORE;
}

/* ---- binary ------------------------------------------------------------------------ */

static inline uint32_t le32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

/* The header of the record at r: its end (r + 4 + body_len). */
static int bin_header(const struct parse_win *w, uint64_t r, uint64_t max_rec, uint64_t *rend, struct parse_err *e)
{
    if (r + 4 > w->off + w->len) {
        if (r + 4 > w->size)
            return fail(e, -EBADMSG, r, "truncated record header (%llu bytes before the end of the file)",
                        (unsigned long long)(w->size - r));
        return PARSE_MORE;
    }
    uint64_t body = le32(w->base + (r - w->off));
    if (4 + body > max_rec)
        return fail(e, -EMSGSIZE, r, "record of %llu bytes is longer than max_record_bytes (%llu)",
                    (unsigned long long)(4 + body), (unsigned long long)max_rec);
    if (r + 4 + body > w->size)
        return fail(e, -EBADMSG, r, "record of %llu bytes runs past the end of the file",
                    (unsigned long long)(4 + body));
    *rend = r + 4 + body;
    return PARSE_OK;
}

static int bin_walk(const struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_fields *fv, uint32_t *n,
                    uint64_t *next, struct parse_err *e)
{
    uint64_t rend;
    int rc = bin_header(w, at, max_rec, &rend, e);
    if (rc != PARSE_OK)
        return rc;
    if (rend > w->off + w->len)
        return PARSE_MORE; /* bin_header checked the size against max_rec already */
    if (rend == at + 4)
        return fail(e, -EBADMSG, at, "empty record (no fields)");
    *n = 0;
    if (fv)
        fv->n = 0;
    for (uint64_t p = at + 4; p < rend;) {
        const char *q = w->base + (p - w->off);
        if (p + 4 > rend)
            return fail(e, -EBADMSG, p, "field header runs past the end of its record");
        uint64_t len = le32(q);
        if (p + 4 + len + 1 > rend)
            return fail(e, -EBADMSG, p, "field of %llu bytes runs past the end of its record",
                        (unsigned long long)len);
        if (q[4 + len] != '\0')
            return fail(e, -EBADMSG, p + 4 + len, "field not followed by its 0x00 byte");
        if (fv && fields_push(fv, q + 4, len, at, e) != PARSE_OK)
            return PARSE_ERR;
        (*n)++;
        p += 4 + len + 1;
    }
    *next = rend;
    return PARSE_OK;
}

static int bin_next_start(const struct parse_win *w, uint64_t from, uint64_t limit, uint64_t max_rec, uint64_t *out,
                          struct parse_err *e)
{
    uint64_t r = from;
    while (r < limit && r < w->size) {
        int rc = bin_header(w, r, max_rec, &r, e);
        if (rc != PARSE_OK)
            return rc;
    }
    *out = r;
    return PARSE_OK;
}

int parse_bin_magic(const struct parse_win *w, struct parse_err *e)
{
    if (w->size < PARSE_BIN_MAGIC_LEN)
        return fail(e, -EBADMSG, 0, "not a urt binary batch file (%llu bytes, shorter than the magic)",
                    (unsigned long long)w->size);
    if (w->len < PARSE_BIN_MAGIC_LEN)
        return PARSE_MORE;
    if (memcmp(w->base, PARSE_BIN_MAGIC, PARSE_BIN_MAGIC_LEN) != 0)
        return fail(e, -EBADMSG, 0, "not a urt binary batch file (bad magic, want \"URTBIN1\\n\")");
    return PARSE_OK;
}

/* ---- entry points --------------------------------------------------------------------- */

int parse_next_start(enum urt_batch_format f, const struct parse_win *w, uint64_t from, uint64_t limit,
                     uint64_t max_rec, uint64_t *out, struct parse_err *e)
{
    if (from >= limit || limit >= w->size) {
        *out = from >= limit ? from : w->size;
        return PARSE_OK;
    }
    return f == URT_BATCH_CSV ? csv_next_start(w, from, limit, max_rec, out, e)
                              : bin_next_start(w, from, limit, max_rec, out, e);
}

int parse_peek(enum urt_batch_format f, const struct parse_win *w, uint64_t at, uint64_t max_rec, uint32_t *n_fields,
               uint64_t *next, struct parse_err *e)
{
    if (f == URT_BATCH_CSV)
        return csv_walk((struct parse_win *)w, at, max_rec, false, NULL, n_fields, next, e); /* reads only */
    return bin_walk(w, at, max_rec, NULL, n_fields, next, e);
}

int parse_record(enum urt_batch_format f, struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_fields *fv,
                 uint64_t *next, struct parse_err *e)
{
    if (f == URT_BATCH_CSV)
        return csv_record(w, at, max_rec, fv, next, e);
    uint32_t n;
    fv->lf = 0;
    return bin_walk(w, at, max_rec, fv, &n, next, e);
}
