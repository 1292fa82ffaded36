/*
 * tests/fuzz/fuzz_kv.c — libFuzzer target for what urt-kv reads from the
 * outside: the RESP2 request parser (tools/urt-kv/resp.c), fed by any
 * client, and the log record decoder (tools/urt-kv/record.c), fed by the
 * disk. Two modes, chosen by the first input byte:
 *
 *   parser  — the rest is a client's byte stream. It is parsed whole, and
 *             again delivered in pieces whose sizes come from the input (as
 *             reads would cut it), compacting the buffer between requests as
 *             the server does. Both must give the same requests and the same
 *             final status (and error text); every argument must lie inside
 *             the bytes received; small limits make the limit paths reachable.
 *   records — the rest is a log record: rec_replay must accept or refuse it
 *             without reading outside it (ASan), and a refused record must
 *             leave the table usable.
 * Violations call __builtin_trap() (libFuzzer reports a crash).
 *
 * Built with clang -fsanitize=fuzzer,address where clang can (tests/meson.build)
 * and run for a bounded time as the test fuzz_kv (suite 'fuzz').
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

#define CHECK(c)                                                                                                   \
    do {                                                                                                           \
        if (!(c))                                                                                                  \
            __builtin_trap();                                                                                      \
    } while (0)

struct trace {
    uint64_t hash;      /* of every request's arguments, in order */
    uint32_t requests;
    enum resp_status last;
    char error[96];
};

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return (h ^ n) * 0x100000001b3ull;
}

static const struct resp_limits limits = {.max_bulk = 300, .max_args = 20, .max_inline = 200};

static void note_request(struct trace *t, const struct resp_parser *p, const char *buf, size_t len)
{
    for (uint32_t i = 0; i < p->argc; i++) {
        CHECK(p->argv[i].off <= len && p->argv[i].len <= len - p->argv[i].off);
        t->hash = mix(t->hash, buf + p->argv[i].off, p->argv[i].len);
    }
    t->hash = mix(t->hash, "|", 1);
    t->requests++;
}

/* The server's loop: append a piece, parse what is complete, compact. */
static void run_chunked(const uint8_t *cuts, size_t ncuts, const char *in, size_t n, struct trace *t)
{
    struct resp_parser p;
    resp_init(&p, &limits);
    char *buf = malloc(n ? n : 1);
    size_t len = 0, fed = 0, c = 0;
    enum resp_status st = RESP_NEED_MORE;
    while (fed < n || st == RESP_COMMAND) {
        if (st == RESP_NEED_MORE) {
            size_t k = ncuts ? 1 + cuts[c++ % ncuts] % 64 : n;
            k = k < n - fed ? k : n - fed;
            memcpy(buf + len, in + fed, k); /* the exact bytes received: ASan sees overreads */
            len += k;
            fed += k;
        }
        st = resp_parse(&p, buf, len);
        CHECK(p.pos <= len && p.start <= p.pos);
        if (st == RESP_ERROR)
            break;
        if (st == RESP_COMMAND) {
            note_request(t, &p, buf, len);
            resp_next(&p);
            size_t by = p.start;
            memmove(buf, buf + by, len - by);
            len -= by;
            resp_rebase(&p, by);
        }
    }
    t->last = st;
    memcpy(t->error, p.error, sizeof(t->error));
    resp_free(&p);
    free(buf);
}

static void run_whole(const char *in, size_t n, struct trace *t)
{
    struct resp_parser p;
    resp_init(&p, &limits);
    enum resp_status st;
    while ((st = resp_parse(&p, in, n)) == RESP_COMMAND) {
        note_request(t, &p, in, n);
        resp_next(&p);
    }
    t->last = st;
    memcpy(t->error, p.error, sizeof(t->error));
    resp_free(&p);
}

static struct kv_table *table;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if ((data[0] & 1) == 0) {
        size_t ncuts = data[1] % 16;
        if (size < 2 + ncuts)
            return 0;
        const char *in = (const char *)data + 2 + ncuts;
        size_t n = size - 2 - ncuts;
        char *copy = malloc(n ? n : 1); /* exact size: ASan sees overreads */
        memcpy(copy, in, n);
        struct trace a = {0}, b = {0};
        run_whole(copy, n, &a);
        run_chunked(data + 2, ncuts, copy, n, &b);
        CHECK(a.requests == b.requests && a.hash == b.hash && a.last == b.last);
        CHECK(strcmp(a.error, b.error) == 0);
        free(copy);
        return 0;
    }
    if (!table) {
        table = malloc(sizeof(*table));
        if (kv_table_init(table, NULL, NULL))
            abort();
        table->recovering = true;
    }
    char *rec = malloc(size - 1);
    memcpy(rec, data + 1, size - 1);
    (void)rec_replay(table, rec, size - 1);
    free(rec);
    struct kv_write w;
    CHECK(kv_set(table, "probe", 5, "x", 1, 0, 0, 0, NULL, &w) == 0);
    return 0;
}
