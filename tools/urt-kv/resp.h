/*
 * tools/urt-kv/resp.h — the RESP2 request parser and the reply buffer of
 * urt-kv (the Redis serialization protocol, version 2).
 *
 * Requests are what Redis accepts (src/networking.c, processMultibulkBuffer
 * and processInlineBuffer):
 *   multibulk  "*<n>\r\n" then n times "$<len>\r\n<len bytes>\r\n"
 *              (binary-safe: a bulk may hold any byte, CR and LF included);
 *   inline     a line "CMD arg arg\r\n" (or "\n"), split on spaces and tabs;
 *              only for requests that do not start with '*'.
 * The parser is incremental: it keeps its progress (the multibulk count, the
 * arguments read, the length of the bulk being read) between calls, so a
 * request split over any number of reads is scanned once, and a 512 MB bulk
 * is not re-parsed at every read. Arguments are offsets into the caller's
 * buffer (the buffer may move between calls: resp_rebase()).
 *
 * Limits (Redis's defaults; struct resp_limits): a bulk longer than
 * max_bulk (proto-max-bulk-len, 512 MB), more than max_args arguments
 * (1024 * 1024), a header or inline line longer than max_inline (64 KB) are
 * protocol errors: the parser stops in RESP_ERROR with Redis's message, and
 * the server answers it and closes that connection (as Redis does: the rest
 * of the stream cannot be framed).
 *
 * Single-threaded: a parser belongs to one connection, used on its lane.
 */
#ifndef URT_KV_RESP_H
#define URT_KV_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RESP_MAX_BULK_DEFAULT (512ull * 1024 * 1024)
#define RESP_MAX_ARGS_DEFAULT (1024u * 1024)
#define RESP_MAX_INLINE_DEFAULT (64u * 1024)

struct resp_limits {
    uint64_t max_bulk;    /* longest bulk argument, bytes */
    uint32_t max_args;    /* most arguments of one request */
    uint32_t max_inline;  /* longest inline request or header line, bytes */
};

struct resp_arg {
    size_t off;  /* offset of the first byte in the buffer */
    size_t len;
};

enum resp_status {
    RESP_NEED_MORE = 0,  /* the buffer ends inside a request: read more */
    RESP_COMMAND = 1,    /* a whole request: argc/argv; resp_next() before the next call */
    RESP_ERROR = 2,      /* protocol error: error names it; the parser stays here */
};

struct resp_parser {
    struct resp_limits lim;
    size_t start;        /* offset of the current request's first byte */
    size_t pos;          /* next byte not scanned yet */
    int64_t nargs;       /* multibulk count, -1 before the header; 0 inline */
    int64_t bulk;        /* length of the bulk being read, -1 before its header */
    uint32_t argc;
    uint32_t argv_cap;
    struct resp_arg *argv;
    uint64_t need;       /* NEED_MORE: bytes at least still missing (a hint for the reader) */
    char error[96];      /* RESP_ERROR: the message, without "-" and CRLF */
};

/* Sets up p with limits lim (NULL: the defaults). */
void resp_init(struct resp_parser *p, const struct resp_limits *lim);
void resp_free(struct resp_parser *p);

/* Scans buf[0..len) from where the last call stopped. RESP_COMMAND: the
 * request's arguments are p->argv[0..argc) (offsets into buf). */
enum resp_status resp_parse(struct resp_parser *p, const char *buf, size_t len);

/* After a RESP_COMMAND has been executed: the next request starts at p->pos. */
void resp_next(struct resp_parser *p);

/* The caller dropped the first `by` bytes of its buffer (all before
 * p->start): shift every offset. */
void resp_rebase(struct resp_parser *p, size_t by);

/* ---- the reply buffer --------------------------------------------------------- */

/* A growable byte buffer; every append reports -ENOMEM (nothing appended)
 * when it cannot grow, and the buffer stays valid. */
struct kv_buf {
    char *p;
    size_t len, cap;
};

int buf_reserve(struct kv_buf *b, size_t extra);
int buf_put(struct kv_buf *b, const void *data, size_t n);
void buf_free(struct kv_buf *b);

/* Reply encoders (RESP2). */
int reply_simple(struct kv_buf *b, const char *s);          /* "+s\r\n" */
int reply_error(struct kv_buf *b, const char *s);           /* "-s\r\n", CR/LF in s become spaces */
int reply_errorf(struct kv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int reply_int(struct kv_buf *b, int64_t v);                 /* ":v\r\n" */
int reply_bulk(struct kv_buf *b, const void *s, size_t n);  /* "$n\r\n...\r\n" */
int reply_nil(struct kv_buf *b);                            /* "$-1\r\n" */
int reply_array(struct kv_buf *b, int64_t n);               /* "*n\r\n" */
int reply_ok(struct kv_buf *b);

/* Parses a whole argument as a signed 64-bit decimal the way Redis's
 * string2ll does (no spaces, no '+', no leading zeros). 0 or -1. */
int resp_to_i64(const char *s, size_t n, int64_t *out);

#endif
