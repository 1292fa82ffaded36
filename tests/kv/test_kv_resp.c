/*
 * tests/kv/test_kv_resp.c — urt-kv's RESP2 parser and reply encoders
 * (tools/urt-kv/resp.c): requests whole, pipelined and split at every byte;
 * inline requests; binary-safe bulks; every protocol error Redis gives, with
 * its text; the limits (bulk length, argument count, inline length); and the
 * reply encoding.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "resp.h"

/* Parses all of in[0..n) fed in pieces of `step` bytes into a growing
 * buffer; appends each request as "arg|arg|...;" to out. Returns the last
 * status. */
static enum resp_status parse_all(const char *in, size_t n, size_t step, const struct resp_limits *lim, char *out,
                                  size_t out_cap, char *err)
{
    struct resp_parser p;
    resp_init(&p, lim);
    char *buf = malloc(n + 1);
    size_t len = 0;
    enum resp_status st = RESP_NEED_MORE;
    out[0] = 0;
    while (len < n || st == RESP_COMMAND) {
        if (st != RESP_COMMAND) {
            size_t k = n - len < step ? n - len : step;
            memcpy(buf + len, in + len, k);
            len += k;
        }
        st = resp_parse(&p, buf, len);
        if (st == RESP_ERROR)
            break;
        if (st == RESP_COMMAND) {
            for (uint32_t i = 0; i < p.argc; i++) {
                cr_assert_leq(p.argv[i].off + p.argv[i].len, len);
                strncat(out, buf + p.argv[i].off, p.argv[i].len);
                strncat(out, i + 1 < p.argc ? "|" : ";", out_cap - strlen(out) - 1);
            }
            resp_next(&p);
        }
    }
    if (err)
        strcpy(err, p.error);
    resp_free(&p);
    free(buf);
    return st;
}

static void expect_cmds(const char *in, const char *want)
{
    size_t n = strlen(in);
    for (size_t step = 1; step <= n; step++) {
        char got[4096];
        enum resp_status st = parse_all(in, n, step, NULL, got, sizeof(got), NULL);
        cr_assert_neq(st, RESP_ERROR, "step %zu", step);
        cr_assert_str_eq(got, want, "step %zu: got '%s'", step, got);
    }
}

Test(kv_resp, multibulk_whole_and_split_at_every_byte)
{
    expect_cmds("*1\r\n$4\r\nPING\r\n", "PING;");
    expect_cmds("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", "SET|k|hello;");
}

Test(kv_resp, pipelined_requests_come_out_in_order)
{
    expect_cmds("*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n*1\r\n$4\r\nPING\r\nECHO c\r\n",
                "GET|a;GET|b;PING;ECHO|c;");
}

Test(kv_resp, inline_requests)
{
    expect_cmds("PING\r\n", "PING;");
    expect_cmds("SET  key \t value\n", "SET|key|value;");
    expect_cmds("\r\n\r\nPING\r\n", "PING;"); /* empty lines are skipped */
}

Test(kv_resp, empty_multibulk_is_skipped)
{
    expect_cmds("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", "PING;");
}

Test(kv_resp, bulks_are_binary_safe)
{
    const char in[] = "*2\r\n$4\r\na\r\nb\r\n$3\r\n\0\xff*\r\n";
    struct resp_parser p;
    resp_init(&p, NULL);
    cr_assert_eq(resp_parse(&p, in, sizeof(in) - 1), RESP_COMMAND);
    cr_assert_eq(p.argc, 2);
    cr_assert_eq(p.argv[0].len, 4);
    cr_assert_eq(memcmp(in + p.argv[0].off, "a\r\nb", 4), 0);
    cr_assert_eq(p.argv[1].len, 3);
    cr_assert_eq(memcmp(in + p.argv[1].off, "\0\xff*", 3), 0);
    resp_next(&p);
    cr_assert_eq(resp_parse(&p, in, sizeof(in) - 1), RESP_NEED_MORE);
    resp_free(&p);
}

Test(kv_resp, zero_length_bulk)
{
    expect_cmds("*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", "ECHO|;");
}

static void expect_error(const char *in, const struct resp_limits *lim, const char *msg)
{
    char got[256], err[128];
    enum resp_status st = parse_all(in, strlen(in), strlen(in), lim, got, sizeof(got), err);
    cr_assert_eq(st, RESP_ERROR, "'%s' parsed", in);
    cr_assert_str_eq(err, msg);
}

Test(kv_resp, protocol_errors_have_redis_texts)
{
    expect_error("*1\r\n+PING\r\n", NULL, "ERR Protocol error: expected '$', got '+'");
    expect_error("*x\r\n", NULL, "ERR Protocol error: invalid multibulk length");
    expect_error("*1\r\n$-3\r\n", NULL, "ERR Protocol error: invalid bulk length");
    expect_error("*1\r\n$abc\r\n", NULL, "ERR Protocol error: invalid bulk length");
    expect_error("*1\r\n$536870913\r\n", NULL, "ERR Protocol error: invalid bulk length"); /* 512 MB + 1 */
}

Test(kv_resp, limits)
{
    struct resp_limits lim = {.max_bulk = 10, .max_args = 3, .max_inline = 32};
    expect_error("*4\r\n", &lim, "ERR Protocol error: invalid multibulk length");
    expect_error("*1\r\n$11\r\n", &lim, "ERR Protocol error: invalid bulk length");
    expect_error("a b c d\r\n", &lim, "ERR Protocol error: too many arguments");
    char big[100];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    expect_error(big, &lim, "ERR Protocol error: too big inline request");
    big[0] = '*';
    expect_error(big, &lim, "ERR Protocol error: too big mbulk count string");
    char hdr[120] = "*1\r\n$";
    memset(hdr + 5, '1', 60);
    expect_error(hdr, &lim, "ERR Protocol error: too big bulk count string");
    /* at the limits: accepted */
    char got[256];
    const char *ok = "*3\r\n$10\r\n0123456789\r\n$0\r\n\r\n$1\r\nx\r\n";
    cr_assert_eq(parse_all(ok, strlen(ok), strlen(ok), &lim, got, sizeof(got), NULL),
                 RESP_NEED_MORE);
    cr_assert_str_eq(got, "0123456789||x;");
}

Test(kv_resp, an_error_is_sticky)
{
    struct resp_parser p;
    resp_init(&p, NULL);
    cr_assert_eq(resp_parse(&p, "*1\r\n:1\r\n", 8), RESP_ERROR);
    cr_assert_eq(resp_parse(&p, "*1\r\n$4\r\nPING\r\n", 14), RESP_ERROR);
    resp_free(&p);
}

Test(kv_resp, need_tells_how_much_of_a_bulk_is_missing)
{
    struct resp_parser p;
    resp_init(&p, NULL);
    const char in[] = "*1\r\n$1000\r\nabc";
    cr_assert_eq(resp_parse(&p, in, sizeof(in) - 1), RESP_NEED_MORE);
    cr_assert_eq(p.need, 1000 + 2 - 3);
    resp_free(&p);
}

Test(kv_resp, rebase_keeps_a_partial_request)
{
    /* one whole request, then half of the next; drop the first, finish the second */
    char buf[64] = "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nh";
    size_t len = strlen(buf);
    struct resp_parser p;
    resp_init(&p, NULL);
    cr_assert_eq(resp_parse(&p, buf, len), RESP_COMMAND);
    resp_next(&p);
    cr_assert_eq(resp_parse(&p, buf, len), RESP_NEED_MORE);
    size_t by = p.start;
    memmove(buf, buf + by, len - by);
    len -= by;
    resp_rebase(&p, by);
    memcpy(buf + len, "i\r\n", 3);
    len += 3;
    cr_assert_eq(resp_parse(&p, buf, len), RESP_COMMAND);
    cr_assert_eq(p.argc, 2);
    cr_assert_eq(memcmp(buf + p.argv[1].off, "hi", 2), 0);
    resp_free(&p);
}

Test(kv_resp, integers_as_redis_reads_them)
{
    int64_t v;
    cr_assert_eq(resp_to_i64("123", 3, &v), 0);
    cr_assert_eq(v, 123);
    cr_assert_eq(resp_to_i64("-9223372036854775808", 20, &v), 0);
    cr_assert_eq(v, INT64_MIN);
    cr_assert_eq(resp_to_i64("9223372036854775807", 19, &v), 0);
    cr_assert_eq(v, INT64_MAX);
    cr_assert_neq(resp_to_i64("9223372036854775808", 19, &v), 0);
    cr_assert_neq(resp_to_i64("012", 3, &v), 0);
    cr_assert_neq(resp_to_i64("+1", 2, &v), 0);
    cr_assert_neq(resp_to_i64(" 1", 2, &v), 0);
    cr_assert_neq(resp_to_i64("-", 1, &v), 0);
    cr_assert_neq(resp_to_i64("", 0, &v), 0);
    cr_assert_eq(resp_to_i64("0", 1, &v), 0);
}

Test(kv_resp, replies)
{
    struct kv_buf b = {0};
    reply_ok(&b);
    reply_simple(&b, "PONG");
    reply_error(&b, "ERR a\r\nb");
    reply_int(&b, -42);
    reply_bulk(&b, "x\0y", 3);
    reply_nil(&b);
    reply_array(&b, 2);
    const char want[] = "+OK\r\n+PONG\r\n-ERR a  b\r\n:-42\r\n$3\r\nx\0y\r\n$-1\r\n*2\r\n";
    cr_assert_eq(b.len, sizeof(want) - 1);
    cr_assert_eq(memcmp(b.p, want, b.len), 0);
    buf_free(&b);
}

/* The integer encoders write digits by hand: every width, both signs, the
 * ends of int64, against snprintf. */
Test(kv_resp, integer_replies_match_snprintf)
{
    int64_t vals[] = {0, 1, -1, 9, 10, -10, 99, 100, 12345, -987654321, INT32_MAX, INT32_MIN,
                      INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 1000000000000000000ll};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        struct kv_buf b = {0};
        char want[64];
        int n = snprintf(want, sizeof(want), ":%lld\r\n*%lld\r\n", (long long)vals[i], (long long)vals[i]);
        reply_int(&b, vals[i]);
        reply_array(&b, vals[i]);
        cr_assert_eq(b.len, (size_t)n, "value %lld", (long long)vals[i]);
        cr_assert_eq(memcmp(b.p, want, b.len), 0, "value %lld", (long long)vals[i]);
        buf_free(&b);
    }
    size_t lens[] = {0, 1, 9, 10, 11, 99, 100, 4096, 100000};
    static char val[100000];
    memset(val, 'v', sizeof(val));
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        struct kv_buf b = {0};
        char head[32];
        int h = snprintf(head, sizeof(head), "$%zu\r\n", lens[i]);
        cr_assert_eq(reply_bulk(&b, val, lens[i]), 0);
        cr_assert_eq(b.len, (size_t)h + lens[i] + 2);
        cr_assert_eq(memcmp(b.p, head, (size_t)h), 0, "length %zu", lens[i]);
        cr_assert_eq(memcmp(b.p + h, val, lens[i]), 0);
        cr_assert_eq(memcmp(b.p + h + lens[i], "\r\n", 2), 0);
        buf_free(&b);
    }
}
