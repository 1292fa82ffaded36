/*
 * tools/urt-kv/resp.c — the RESP2 request parser and reply encoders
 * (design and limits: resp.h). The parser's states, kept between calls:
 *
 *   nargs == -1           before a request: the first byte decides multibulk
 *                         ('*') or inline; `scan` remembers how far the search
 *                         for the header's end got, so a header trickling in a
 *                         byte at a time is scanned once;
 *   nargs > 0, bulk == -1 before an argument's "$<len>\r\n" header;
 *   nargs > 0, bulk >= 0  inside an argument: waits until bulk + 2 bytes are
 *                         there (need says how many are missing).
 *
 * Offsets, never pointers, so the connection may grow or compact its buffer
 * between calls. Single-threaded (one connection's lane); no atomics.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

void resp_init(struct resp_parser *p, const struct resp_limits *lim)
{
    memset(p, 0, sizeof(*p));
    if (lim) {
        p->lim = *lim;
    } else {
        p->lim.max_bulk = RESP_MAX_BULK_DEFAULT;
        p->lim.max_args = RESP_MAX_ARGS_DEFAULT;
        p->lim.max_inline = RESP_MAX_INLINE_DEFAULT;
    }
    p->nargs = -1;
    p->bulk = -1;
}

void resp_free(struct resp_parser *p)
{
    free(p->argv);
    p->argv = NULL;
    p->argv_cap = 0;
}

void resp_next(struct resp_parser *p)
{
    p->start = p->pos;
    p->nargs = -1;
    p->bulk = -1;
    p->argc = 0;
    p->need = 0;
}

void resp_rebase(struct resp_parser *p, size_t by)
{
    p->start -= by;
    p->pos -= by;
    for (uint32_t i = 0; i < p->argc; i++)
        p->argv[i].off -= by;
}

int resp_to_i64(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 20)
        return -1;
    size_t i = 0;
    bool neg = false;
    if (s[0] == '-') {
        neg = true;
        i = 1;
        if (n == 1)
            return -1;
    }
    if (s[i] == '0' && n > i + 1)
        return -1; /* leading zero (Redis's string2ll refuses it) */
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v;
    }
    return 0;
}

/* ---- parser ------------------------------------------------------------------- */

static enum resp_status fail(struct resp_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static enum resp_status fail(struct resp_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof(p->error), fmt, ap);
    va_end(ap);
    return RESP_ERROR;
}

static int add_arg(struct resp_parser *p, size_t off, size_t len)
{
    if (p->argc == p->argv_cap) {
        uint32_t cap = p->argv_cap ? p->argv_cap * 2 : 8;
        struct resp_arg *a = realloc(p->argv, cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        p->argv = a;
        p->argv_cap = cap;
    }
    p->argv[p->argc++] = (struct resp_arg){off, len};
    return 0;
}

/* The end of a header line starting at `from`: the offset of its '\r' when
 * the "\r\n" is there, -1 when more bytes are needed. */
static int64_t header_end(struct resp_parser *p, const char *buf, size_t len, size_t from)
{
    size_t i = p->pos > from ? p->pos : from;
    const char *cr = i < len ? memchr(buf + i, '\r', len - i) : NULL;
    if (!cr) {
        p->pos = len;
        return -1;
    }
    size_t at = (size_t)(cr - buf);
    p->pos = at; /* rescan from the '\r' once its '\n' arrives */
    if (at + 1 >= len)
        return -1;
    return (int64_t)at;
}

static enum resp_status parse_inline(struct resp_parser *p, const char *buf, size_t len)
{
    size_t from = p->pos > p->start ? p->pos : p->start;
    const char *nl = from < len ? memchr(buf + from, '\n', len - from) : NULL;
    if (!nl) { /* + 1: room for the '\r' that does not count (the same verdict however the bytes arrive) */
        if (len - p->start > (size_t)p->lim.max_inline + 1)
            return fail(p, "ERR Protocol error: too big inline request");
        p->pos = len;
        p->need = 1;
        return RESP_NEED_MORE;
    }
    size_t end = (size_t)(nl - buf);
    size_t line_end = end > p->start && buf[end - 1] == '\r' ? end - 1 : end;
    if (line_end - p->start > p->lim.max_inline)
        return fail(p, "ERR Protocol error: too big inline request");
    p->nargs = 0;
    for (size_t i = p->start; i < line_end;) {
        while (i < line_end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        size_t s = i;
        while (i < line_end && buf[i] != ' ' && buf[i] != '\t')
            i++;
        if (i > s) {
            if (p->argc >= p->lim.max_args)
                return fail(p, "ERR Protocol error: too many arguments");
            if (add_arg(p, s, i - s))
                return fail(p, "ERR out of memory");
        }
    }
    p->pos = end + 1;
    if (p->argc == 0) { /* an empty line: nothing to run (Redis skips it) */
        resp_next(p);
        return RESP_NEED_MORE;
    }
    return RESP_COMMAND;
}

static enum resp_status parse_count(struct resp_parser *p, const char *buf, size_t len)
{
    int64_t cr = header_end(p, buf, len, p->start);
    if (cr < 0) {
        if (p->pos - p->start > p->lim.max_inline)
            return fail(p, "ERR Protocol error: too big mbulk count string");
        p->need = 1;
        return RESP_NEED_MORE;
    }
    if ((size_t)cr - p->start > p->lim.max_inline) /* the same verdict however the bytes arrived */
        return fail(p, "ERR Protocol error: too big mbulk count string");
    int64_t n;
    if (resp_to_i64(buf + p->start + 1, (size_t)cr - p->start - 1, &n) || n > (int64_t)p->lim.max_args)
        return fail(p, "ERR Protocol error: invalid multibulk length");
    p->pos = (size_t)cr + 2;
    if (n <= 0) { /* "*0" and "*-1": an empty request, skipped as Redis does */
        resp_next(p);
        return RESP_NEED_MORE;
    }
    p->nargs = n;
    return RESP_COMMAND; /* "continue": the caller loops */
}

static enum resp_status parse_bulk_header(struct resp_parser *p, const char *buf, size_t len)
{
    size_t hdr = p->pos;
    if (hdr >= len) {
        p->need = 1;
        return RESP_NEED_MORE;
    }
    if (buf[hdr] != '$')
        return fail(p, "ERR Protocol error: expected '$', got '%c'", buf[hdr]);
    const char *cr = memchr(buf + hdr, '\r', len - hdr);
    size_t at = cr ? (size_t)(cr - buf) : len;
    if (at - hdr > p->lim.max_inline) /* measured to the '\r': the same verdict however the bytes arrived */
        return fail(p, "ERR Protocol error: too big bulk count string");
    if (!cr || at + 1 >= len) {
        p->need = 1;
        return RESP_NEED_MORE;
    }
    int64_t n;
    if (resp_to_i64(buf + hdr + 1, at - hdr - 1, &n) || n < 0 || (uint64_t)n > p->lim.max_bulk)
        return fail(p, "ERR Protocol error: invalid bulk length");
    p->bulk = n;
    p->pos = at + 2;
    return RESP_COMMAND;
}

enum resp_status resp_parse(struct resp_parser *p, const char *buf, size_t len)
{
    if (p->error[0])
        return RESP_ERROR;
    for (;;) {
        if (p->nargs < 0) {
            if (p->start >= len) {
                p->need = 1;
                return RESP_NEED_MORE;
            }
            enum resp_status st = buf[p->start] == '*' ? parse_count(p, buf, len) : parse_inline(p, buf, len);
            if (st == RESP_ERROR || (st == RESP_COMMAND && p->nargs == 0))
                return st; /* an inline request is whole, or an error */
            if (st == RESP_NEED_MORE && p->nargs < 0 && p->start == p->pos && p->start < len)
                continue; /* an empty request was skipped: go on with the next one */
            if (st == RESP_NEED_MORE)
                return st;
        }
        while (p->argc < (uint64_t)p->nargs) {
            if (p->bulk < 0) {
                enum resp_status st = parse_bulk_header(p, buf, len);
                if (st != RESP_COMMAND)
                    return st;
            }
            uint64_t have = len - p->pos, want = (uint64_t)p->bulk + 2;
            if (have < want) {
                p->need = want - have;
                return RESP_NEED_MORE;
            }
            if (add_arg(p, p->pos, (size_t)p->bulk))
                return fail(p, "ERR out of memory");
            p->pos += (size_t)want;
            p->bulk = -1;
        }
        p->need = 0;
        return RESP_COMMAND;
    }
}

/* ---- reply buffer ------------------------------------------------------------- */

int buf_reserve(struct kv_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int buf_put(struct kv_buf *b, const void *data, size_t n)
{
    if (buf_reserve(b, n))
        return -ENOMEM;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

void buf_free(struct kv_buf *b)
{
    free(b->p);
    *b = (struct kv_buf){0};
}

static int put_line(struct kv_buf *b, char type, const char *s, size_t n)
{
    if (buf_reserve(b, n + 3))
        return -ENOMEM;
    b->p[b->len++] = type;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len++] = '\r';
    b->p[b->len++] = '\n';
    return 0;
}

int reply_simple(struct kv_buf *b, const char *s)
{
    return put_line(b, '+', s, strlen(s));
}

int reply_ok(struct kv_buf *b)
{
    return buf_put(b, "+OK\r\n", 5);
}

int reply_error(struct kv_buf *b, const char *s)
{
    size_t n = strlen(s), at = b->len + 1;
    if (put_line(b, '-', s, n))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) /* an error is one line (Redis's addReplyErrorLength) */
        if (b->p[at + i] == '\r' || b->p[at + i] == '\n')
            b->p[at + i] = ' ';
    return 0;
}

int reply_errorf(struct kv_buf *b, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return reply_error(b, msg);
}

/* The decimal digits of v at the end of tmp[24]; returns where they start
 * (snprintf's "%lld" showed in the profile of every GET and INCR). */
static char *fmt_i64(char tmp[24], int64_t v)
{
    char *p = tmp + 24;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return p;
}

static int put_number(struct kv_buf *b, char type, int64_t v)
{
    char tmp[24];
    char *d = fmt_i64(tmp, v);
    return put_line(b, type, d, (size_t)(tmp + 24 - d));
}

int reply_int(struct kv_buf *b, int64_t v)
{
    return put_number(b, ':', v);
}

int reply_array(struct kv_buf *b, int64_t n)
{
    return put_number(b, '*', n);
}

int reply_nil(struct kv_buf *b)
{
    return buf_put(b, "$-1\r\n", 5);
}

int reply_bulk(struct kv_buf *b, const void *s, size_t n)
{
    char tmp[24];
    char *d = fmt_i64(tmp, (int64_t)n);
    size_t dl = (size_t)(tmp + 24 - d);
    if (buf_reserve(b, dl + 3 + n + 2))
        return -ENOMEM;
    char *w = b->p + b->len;
    *w++ = '$';
    memcpy(w, d, dl);
    w += dl;
    *w++ = '\r';
    *w++ = '\n';
    if (n)
        memcpy(w, s, n);
    w += n;
    *w++ = '\r';
    *w++ = '\n';
    b->len = (size_t)(w - b->p);
    return 0;
}
