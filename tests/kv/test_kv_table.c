/*
 * tests/kv/test_kv_table.c — urt-kv's striped table (tools/urt-kv/table.c)
 * and its log records (record.c):
 *  - single-threaded against a model (SET NX/XX/GET/KEEPTTL, DEL, INCR, its
 *    errors, EXPIRE, TTL, FLUSHALL, DBSIZE);
 *  - expiry: the heap and the arm hook (only an earlier expiry arms a timer;
 *    a timer removes exactly what is due and re-arms for the next);
 *  - concurrency (stress): threads write shared keys, each logging its
 *    operations as urt-kv does; the operations replayed in a random order
 *    (split into one record each, shuffled) rebuild exactly the live table —
 *    the versions make the log's replay order irrelevant;
 *  - the record decoder refuses malformed records without reading outside.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kv.h"

static struct kv_table *table_new(kv_arm_fn *arm, void *arg)
{
    struct kv_table *t = malloc(sizeof(*t));
    cr_assert_eq(kv_table_init(t, arm, arg), 0);
    return t;
}

static void table_free(struct kv_table *t)
{
    kv_table_destroy(t);
    free(t);
}

/* GET into a C string ("(nil)" for a missing key). */
static const char *get(struct kv_table *t, const char *key, int64_t now)
{
    static char out[256];
    struct kv_buf b = {0};
    cr_assert_eq(kv_get(t, key, strlen(key), now, &b), 0);
    if (b.len == 5 && !memcmp(b.p, "$-1\r\n", 5)) {
        strcpy(out, "(nil)");
    } else {
        char *nl = memchr(b.p, '\n', b.len);
        size_t n = b.len - (size_t)(nl + 1 - b.p) - 2;
        memcpy(out, nl + 1, n);
        out[n] = 0;
    }
    buf_free(&b);
    return out;
}

static int set(struct kv_table *t, const char *k, const char *v, int64_t exp, unsigned flags, int64_t now)
{
    struct kv_write w;
    cr_assert_eq(kv_set(t, k, strlen(k), v, strlen(v), exp, flags, now, NULL, &w), 0);
    return w.done;
}

/* INCR fills its new entry (allocated before the shard lock, with room for
 * the longest int64) with exactly the digits of the result: the value read
 * back, the reply digits and the table's memory count are those of a SET of
 * the same digits; a failed INCR changes nothing. */
Test(kv_table, incr_values_and_memory)
{
    struct kv_table *t = table_new(NULL, NULL), *u = table_new(NULL, NULL);
    int64_t now = 1000000, r;
    char d[24];
    size_t nd;
    struct kv_write w;
    static const struct {
        const char *start;
        int64_t delta;
        const char *want;
    } cases[] = {
        {NULL, 1, "1"},
        {"41", 1, "42"},
        {"-9223372036854775807", -1, "-9223372036854775808"},
        {"9223372036854775806", 1, "9223372036854775807"},
        {"0", -12345, "-12345"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char key[8];
        snprintf(key, sizeof(key), "k%zu", i);
        if (cases[i].start)
            set(t, key, cases[i].start, 0, 0, now);
        cr_assert_eq(kv_incr(t, key, strlen(key), cases[i].delta, now, &r, d, &nd, &w), 0, "case %zu", i);
        cr_assert_eq(nd, strlen(cases[i].want));
        cr_assert_eq(memcmp(d, cases[i].want, nd), 0);
        cr_assert_str_eq(get(t, key, now), cases[i].want);
        cr_assert(w.done);
        set(u, key, cases[i].want, 0, 0, now);
    }
    cr_assert_eq(atomic_load(&t->mem), atomic_load(&u->mem), "INCR counts its entry as a SET of its digits would");
    set(t, "s", "abc", 0, 0, now);
    int64_t mem = atomic_load(&t->mem);
    cr_assert_eq(kv_incr(t, "s", 1, 1, now, &r, d, &nd, &w), -EINVAL);
    cr_assert_eq(kv_incr(t, "k2", 2, -1, now, &r, d, &nd, &w), -ERANGE);
    cr_assert_not(w.done);
    cr_assert_eq(atomic_load(&t->mem), mem, "a failed INCR changes nothing");
    cr_assert_str_eq(get(t, "k2", now), "-9223372036854775808");
    table_free(t);
    table_free(u);
}

Test(kv_table, commands_against_a_model)
{
    struct kv_table *t = table_new(NULL, NULL);
    int64_t now = 1000000;
    cr_assert_str_eq(get(t, "a", now), "(nil)");
    cr_assert(set(t, "a", "1", 0, 0, now));
    cr_assert_not(set(t, "a", "2", 0, KV_SET_NX, now));
    cr_assert_not(set(t, "b", "2", 0, KV_SET_XX, now));
    cr_assert(set(t, "a", "3", 0, KV_SET_XX, now));
    cr_assert_str_eq(get(t, "a", now), "3");
    cr_assert_eq(kv_count(t), 1);
    int64_t r;
    char d[24];
    size_t nd;
    struct kv_write w;
    cr_assert_eq(kv_incr(t, "a", 1, 5, now, &r, d, &nd, &w), 0);
    cr_assert_eq(r, 8);
    cr_assert_eq(kv_incr(t, "n", 1, -1, now, &r, d, &nd, &w), 0);
    cr_assert_eq(r, -1);
    set(t, "s", "abc", 0, 0, now);
    cr_assert_eq(kv_incr(t, "s", 1, 1, now, &r, d, &nd, &w), -EINVAL);
    set(t, "m", "9223372036854775807", 0, 0, now);
    cr_assert_eq(kv_incr(t, "m", 1, 1, now, &r, d, &nd, &w), -ERANGE);
    cr_assert_str_eq(get(t, "m", now), "9223372036854775807");
    cr_assert_eq(kv_del(t, "a", 1, now, &w), 1);
    cr_assert_eq(kv_del(t, "a", 1, now, &w), 0);
    cr_assert_eq(kv_exists(t, "n", 1, now), 1);
    cr_assert_eq(kv_ttl_ms(t, "n", 1, now), -1);
    cr_assert_eq(kv_ttl_ms(t, "zz", 2, now), -2);
    cr_assert_eq(kv_expire_at(t, "n", 1, now + 5000, now, NULL, &w), 1);
    cr_assert_eq(kv_ttl_ms(t, "n", 1, now), 5000);
    /* SET keeps no TTL unless KEEPTTL; INCR keeps it */
    cr_assert_eq(kv_incr(t, "n", 1, 1, now, &r, d, &nd, &w), 0);
    cr_assert_eq(kv_ttl_ms(t, "n", 1, now), 5000);
    set(t, "n", "x", 0, KV_SET_KEEPTTL, now);
    cr_assert_eq(kv_ttl_ms(t, "n", 1, now), 5000);
    set(t, "n", "y", 0, 0, now);
    cr_assert_eq(kv_ttl_ms(t, "n", 1, now), -1);
    /* an expiry in the past deletes */
    cr_assert_eq(kv_expire_at(t, "n", 1, now - 1, now, NULL, &w), 1);
    cr_assert(w.deleted);
    cr_assert_eq(kv_exists(t, "n", 1, now), 0);
    /* SET GET returns the old value */
    struct kv_buf old = {0};
    cr_assert_eq(kv_set(t, "s", 1, "new", 3, 0, KV_SET_GET, now, &old, &w), 0);
    cr_assert_eq(old.len, 9);
    cr_assert_eq(memcmp(old.p, "$3\r\nabc\r\n", 9), 0);
    buf_free(&old);
    uint64_t v[KV_SHARDS];
    kv_flush(t, v);
    cr_assert_eq(kv_count(t), 0);
    cr_assert_eq(atomic_load(&t->mem), 0);
    table_free(t);
}

Test(kv_table, binary_keys_and_values)
{
    struct kv_table *t = table_new(NULL, NULL);
    struct kv_write w;
    const char k1[] = "a\0b", k2[] = "a\0c";
    cr_assert_eq(kv_set(t, k1, 3, "\r\n\0", 3, 0, 0, 0, NULL, &w), 0);
    cr_assert_eq(kv_exists(t, k1, 3, 0), 1);
    cr_assert_eq(kv_exists(t, k2, 3, 0), 0);
    cr_assert_eq(kv_exists(t, k1, 1, 0), 0);
    struct kv_buf b = {0};
    kv_get(t, k1, 3, 0, &b);
    cr_assert_eq(b.len, 9);
    cr_assert_eq(memcmp(b.p, "$3\r\n\r\n\0\r\n", 9), 0);
    buf_free(&b);
    table_free(t);
}

/* ---- expiry ------------------------------------------------------------------------ */

struct arms {
    int n;
    uint32_t shard[16];
    int64_t due[16];
};

static void record_arm(void *arg, uint32_t shard, int64_t due)
{
    struct arms *a = arg;
    if (a->n < 16) {
        a->shard[a->n] = shard;
        a->due[a->n] = due;
    }
    a->n++;
}

/* n keys of one shard. */
static void keys_of_one_shard(struct kv_table *t, char keys[][16], int n, uint32_t *shard)
{
    int found = 0;
    *shard = UINT32_MAX;
    for (int i = 0; found < n; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        uint32_t s = kv_shard_of(k, strlen(k));
        (void)t;
        if (*shard == UINT32_MAX)
            *shard = s;
        if (s == *shard)
            strcpy(keys[found++], k);
    }
}

Test(kv_table, expiry_heap_and_timers)
{
    struct arms a = {0};
    struct kv_table *t = table_new(record_arm, &a);
    char k[4][16];
    uint32_t sh;
    keys_of_one_shard(t, k, 4, &sh);
    int64_t now = 1000;
    set(t, k[0], "v", 1500, 0, now);
    cr_assert_eq(a.n, 1);
    cr_assert_eq(a.due[0], 1500);
    cr_assert_eq(a.shard[0], sh);
    set(t, k[1], "v", 2000, 0, now); /* later: no new timer */
    cr_assert_eq(a.n, 1);
    set(t, k[2], "v", 1200, 0, now); /* earlier: a timer for it */
    cr_assert_eq(a.n, 2);
    cr_assert_eq(a.due[1], 1200);
    set(t, k[3], "v", 0, 0, now);
    /* the 1200 timer fires at 1300: only k2 goes; re-armed for 1500 */
    kv_expire_due(t, sh, 1200, 1300);
    cr_assert_eq(kv_exists(t, k[2], strlen(k[2]), 1300), 0);
    cr_assert_eq(kv_exists(t, k[0], strlen(k[0]), 1300), 1);
    cr_assert_eq(a.n, 3);
    cr_assert_eq(a.due[2], 1500);
    cr_assert_eq(atomic_load(&t->expired), 1);
    /* everything due at 5000 */
    kv_expire_due(t, sh, 1500, 5000);
    cr_assert_eq(kv_count(t), 1);
    cr_assert_eq(atomic_load(&t->expired), 3);
    cr_assert_eq(a.n, 3, "nothing left to arm for");
    /* lazy: an expired key read before its timer is gone */
    set(t, k[0], "v", 6000, 0, 5000);
    cr_assert_str_eq(get(t, k[0], 6000), "(nil)");
    cr_assert_eq(kv_count(t), 1);
    table_free(t);
}

Test(kv_table, many_expiries_leave_in_time_order)
{
    struct kv_table *t = table_new(NULL, NULL);
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        char k[16];
        snprintf(k, sizeof(k), "e%d", i);
        set(t, k, "v", 1000 + (i * 7919) % N, 0, 0);
    }
    for (int64_t now = 1000; now < 1000 + N; now += 100) {
        for (uint32_t s = 0; s < KV_SHARDS; s++)
            kv_expire_due(t, s, 0, now);
        cr_assert_eq(kv_count(t), (uint64_t)(N - (now - 1000 + 1)), "at %ld", (long)now);
    }
    table_free(t);
}

/* ---- concurrency: the live table equals any-order replay of the log ------------------- */

#define KEYS 64
struct writer {
    struct kv_table *t;
    unsigned seed;
    int ops;
    struct kv_buf rec;
    int failed;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    for (int i = 0; i < w->ops; i++) {
        char k[16], v[32];
        unsigned r = (unsigned)rand_r(&w->seed);
        snprintf(k, sizeof(k), "key%u", r % KEYS);
        struct kv_write kw;
        int64_t now = 1000;
        switch ((r >> 8) % 6) {
        case 0: case 1:
            snprintf(v, sizeof(v), "v%u", r);
            kv_set(w->t, k, strlen(k), v, strlen(v), (r >> 12) % 3 ? 0 : 900000, 0, now, NULL, &kw);
            if (kw.done)
                rec_set(&w->rec, k, strlen(k), v, strlen(v), kw.expire_ms, kw.version);
            break;
        case 2:
            if (kv_del(w->t, k, strlen(k), now, &kw) > 0)
                rec_del(&w->rec, k, strlen(k), kw.version);
            break;
        case 3: case 4: {
            int64_t res;
            char d[24];
            size_t nd;
            if (kv_incr(w->t, k, strlen(k), 1, now, &res, d, &nd, &kw) == 0)
                rec_set(&w->rec, k, strlen(k), d, nd, kw.expire_ms, kw.version);
            break;
        }
        default: {
            struct kv_buf val = {0};
            if (kv_expire_at(w->t, k, strlen(k), 500000 + r % 1000, now, &val, &kw) > 0)
                rec_set(&w->rec, k, strlen(k), val.p, val.len, kw.expire_ms, kw.version);
            buf_free(&val);
        }
        }
    }
    return NULL;
}

/* Splits a record into its operations (offset, length). */
static int split_ops(const struct kv_buf *rec, size_t (*ops)[2], int max)
{
    int n = 0;
    for (size_t off = 0; off < rec->len && n < max; n++) {
        uint32_t klen;
        uint64_t vlen;
        memcpy(&klen, rec->p + off + 4, 4);
        memcpy(&vlen, rec->p + off + 24, 8);
        size_t len = KV_OP_HDR + klen + vlen;
        ops[n][0] = off;
        ops[n][1] = len;
        off += len;
    }
    return n;
}

static void dump_state(struct kv_table *t, char *out, size_t cap)
{
    out[0] = 0;
    for (int i = 0; i < KEYS; i++) {
        char k[16];
        snprintf(k, sizeof(k), "key%d", i);
        char line[128];
        snprintf(line, sizeof(line), "%s=%s/%ld;", k, get(t, k, 1000), (long)kv_ttl_ms(t, k, strlen(k), 1000));
        strncat(out, line, cap - strlen(out) - 1);
    }
}

Test(kv_table, replay_in_any_order_rebuilds_the_live_table, .timeout = 120)
{
    enum { THREADS = 4 };
    int ops = SCALE(20000, 4000);
    struct kv_table *live = table_new(NULL, NULL);
    struct writer w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct writer){.t = live, .seed = 17u + (unsigned)i, .ops = ops};
        pthread_create(&th[i], NULL, writer_main, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    /* every operation of every writer, one record each, in a random order */
    size_t (*all)[3] = malloc(sizeof(*all) * (size_t)ops * THREADS);
    int n = 0;
    for (int i = 0; i < THREADS; i++) {
        size_t (*o)[2] = malloc(sizeof(*o) * (size_t)ops);
        int k = split_ops(&w[i].rec, o, ops);
        for (int j = 0; j < k; j++) {
            all[n][0] = (size_t)i;
            all[n][1] = o[j][0];
            all[n][2] = o[j][1];
            n++;
        }
        free(o);
    }
    unsigned seed = 99;
    for (int i = n - 1; i > 0; i--) {
        int j = rand_r(&seed) % (i + 1);
        size_t tmp[3];
        memcpy(tmp, all[i], sizeof(tmp));
        memcpy(all[i], all[j], sizeof(tmp));
        memcpy(all[j], tmp, sizeof(tmp));
    }
    struct kv_table *re = table_new(NULL, NULL);
    re->recovering = true;
    for (int i = 0; i < n; i++)
        cr_assert_eq(rec_replay(re, w[all[i][0]].rec.p + all[i][1], all[i][2]), 0);
    kv_recovery_end(re, 1000);
    static char a[KEYS * 128], b[KEYS * 128];
    dump_state(live, a, sizeof(a));
    dump_state(re, b, sizeof(b));
    cr_assert_str_eq(b, a);
    cr_assert_eq(kv_count(re), kv_count(live));
    /* new versions after recovery are above every replayed one */
    struct kv_write kw;
    kv_set(re, "key1", 4, "z", 1, 0, 0, 1000, NULL, &kw);
    for (int i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, w[all[i][0]].rec.p + all[i][1] + 8, 8);
        cr_assert_gt(kw.version, v);
    }
    for (int i = 0; i < THREADS; i++)
        buf_free(&w[i].rec);
    free(all);
    table_free(live);
    table_free(re);
}

Test(kv_table, flush_in_the_log_orders_by_version)
{
    struct kv_table *live = table_new(NULL, NULL);
    struct kv_buf rec = {0};
    struct kv_write kw;
    kv_set(live, "a", 1, "1", 1, 0, 0, 0, NULL, &kw);
    rec_set(&rec, "a", 1, "1", 1, 0, kw.version);
    size_t before_flush = rec.len;
    uint64_t v[KV_SHARDS];
    kv_flush(live, v);
    rec_flush(&rec, v);
    size_t flush_end = rec.len;
    kv_set(live, "b", 1, "2", 1, 0, 0, 0, NULL, &kw);
    rec_set(&rec, "b", 1, "2", 1, 0, kw.version);
    /* replay: b, then the flush, then a (the worst order) */
    struct kv_table *re = table_new(NULL, NULL);
    re->recovering = true;
    cr_assert_eq(rec_replay(re, rec.p + flush_end, rec.len - flush_end), 0);
    cr_assert_eq(rec_replay(re, rec.p + before_flush, flush_end - before_flush), 0);
    cr_assert_eq(rec_replay(re, rec.p, before_flush), 0);
    kv_recovery_end(re, 0);
    cr_assert_str_eq(get(re, "a", 0), "(nil)");
    cr_assert_str_eq(get(re, "b", 0), "2");
    buf_free(&rec);
    table_free(live);
    table_free(re);
}

Test(kv_table, malformed_records_are_refused)
{
    struct kv_table *t = table_new(NULL, NULL);
    t->recovering = true;
    struct kv_buf rec = {0};
    rec_set(&rec, "key", 3, "value", 5, 0, 7);
    for (size_t cut = 1; cut < rec.len; cut++) {
        char *copy = malloc(cut);
        memcpy(copy, rec.p, cut);
        cr_assert_eq(rec_replay(t, copy, cut), -EINVAL, "cut at %zu", cut);
        free(copy);
    }
    rec.p[0] = 9; /* unknown op */
    cr_assert_eq(rec_replay(t, rec.p, rec.len), -EINVAL);
    rec.p[0] = 1;
    uint64_t huge = UINT64_MAX - 2;
    memcpy(rec.p + 24, &huge, 8); /* vlen past the end, overflowing */
    cr_assert_eq(rec_replay(t, rec.p, rec.len), -EINVAL);
    buf_free(&rec);
    table_free(t);
}

/* urt-kv no longer writes NOP operations (op 5: a shutdown barrier of earlier
 * versions), but logs that hold them still recover. */
Test(kv_table, a_nop_from_an_earlier_version_replays_as_nothing)
{
    struct kv_table *t = table_new(NULL, NULL);
    t->recovering = true;
    unsigned char nop[32] = {5}; /* op 5, klen 0, version 0, expire 0, vlen 0 */
    struct kv_buf rec = {0};
    rec_set(&rec, "a", 1, "1", 1, 0, 1);
    buf_put(&rec, nop, sizeof(nop));
    rec_set(&rec, "b", 1, "2", 1, 0, 1);
    cr_assert_eq(rec_replay(t, rec.p, rec.len), 0);
    cr_assert_eq(kv_count(t), 2);
    rec.len = 0;
    nop[4] = 1; /* a NOP with a key is not one */
    buf_put(&rec, nop, sizeof(nop));
    buf_put(&rec, "k", 1);
    cr_assert_eq(rec_replay(t, rec.p, rec.len), -EINVAL);
    buf_free(&rec);
    table_free(t);
}

/* ---- the command layer's log: random commands, their records replayed in a
 * random order, give the table the commands built ------------------------------------ */

static int exec_words(struct kv_ctx *ctx, const char *line)
{
    char buf[256];
    struct resp_arg argv[16];
    uint32_t argc = 0;
    snprintf(buf, sizeof(buf), "%s", line);
    for (size_t i = 0; buf[i] && argc < 16;) {
        while (buf[i] == ' ')
            i++;
        size_t s = i;
        while (buf[i] && buf[i] != ' ')
            i++;
        if (i > s)
            argv[argc++] = (struct resp_arg){s, i - s};
    }
    return kv_exec(ctx, buf, argv, argc);
}

Test(kv_table, command_records_replay_to_the_same_table)
{
    static struct kv_server srv;
    cr_assert_eq(kv_table_init(&srv.table, NULL, NULL), 0);
    srv.opt.durability = KV_DUR_STORED;
    struct kv_buf out = {0}, rec = {0};
    char *name = NULL;
    struct kv_ctx ctx = {.srv = &srv, .out = &out, .rec = &rec, .name = &name};
    enum { N = 4000, KEYS_N = 12 };
    static struct kv_buf records[N];
    int n_rec = 0;
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        char line[128];
        int k = rand_r(&seed) % KEYS_N, k2 = rand_r(&seed) % KEYS_N, v = rand_r(&seed) % 100;
        switch (rand_r(&seed) % 14) {
        case 0: snprintf(line, sizeof(line), "SET key%d v%d", k, v); break;
        case 1: snprintf(line, sizeof(line), "SET key%d %d EX 1000", k, v); break;
        case 2: snprintf(line, sizeof(line), "SET key%d v%d NX", k, v); break;
        case 3: snprintf(line, sizeof(line), "SET key%d v%d XX KEEPTTL GET", k, v); break;
        case 4: snprintf(line, sizeof(line), "MSET key%d %d key%d x%d", k, v, k2, v); break;
        case 5: snprintf(line, sizeof(line), "DEL key%d key%d", k, k2); break;
        case 6: snprintf(line, sizeof(line), "INCR key%d", k); break;
        case 7: snprintf(line, sizeof(line), "DECRBY key%d %d", k, v); break;
        case 8: snprintf(line, sizeof(line), "EXPIRE key%d %d", k, 100 + v); break;
        case 9: snprintf(line, sizeof(line), "PEXPIRE key%d -5", k); break;
        case 10: snprintf(line, sizeof(line), "PERSIST key%d", k); break;
        case 11: snprintf(line, sizeof(line), "%s", v < 3 ? "FLUSHALL" : "GET key0"); break;
        case 12: snprintf(line, sizeof(line), "EXPIREAT key%d 1", k); break; /* in the past: a delete */
        default: snprintf(line, sizeof(line), "PEXPIREAT key%d %lld", k, (long long)kv_now_ms() + 500000); break;
        }
        cr_assert_eq(exec_words(&ctx, line), 0, "%s", line);
        if (out.p[0] == '-') /* only INCR/DECRBY of a value that is not a number may fail */
            cr_assert(strstr(out.p, "not an integer") && (line[0] == 'I' || line[0] == 'D'), "%s: %.*s", line,
                      (int)out.len, out.p);
        out.len = 0;
        if (rec.len) { /* one record per command, as a connection's batch of one */
            records[n_rec] = (struct kv_buf){0};
            buf_put(&records[n_rec++], rec.p, rec.len);
            rec.len = 0;
        }
    }
    for (int i = n_rec - 1; i > 0; i--) { /* any order: the channels of two workers */
        int j = rand_r(&seed) % (i + 1);
        struct kv_buf t = records[i];
        records[i] = records[j];
        records[j] = t;
    }
    struct kv_table *re = table_new(NULL, NULL);
    re->recovering = true;
    for (int i = 0; i < n_rec; i++)
        cr_assert_eq(rec_replay(re, records[i].p, records[i].len), 0);
    int64_t now = kv_now_ms();
    kv_recovery_end(re, now);
    for (int k = 0; k < KEYS_N; k++) {
        char key[16], a[64], b[64];
        snprintf(key, sizeof(key), "key%d", k);
        snprintf(a, sizeof(a), "%s", get(&srv.table, key, now));
        snprintf(b, sizeof(b), "%s", get(re, key, now));
        cr_assert_str_eq(b, a, "%s after replay", key);
        cr_assert_eq(kv_ttl_ms(re, key, strlen(key), now), kv_ttl_ms(&srv.table, key, strlen(key), now), "%s's TTL",
                     key);
    }
    cr_assert_eq(kv_count(re), kv_count(&srv.table));
    for (int i = 0; i < n_rec; i++)
        buf_free(&records[i]);
    buf_free(&out);
    buf_free(&rec);
    free(name);
    table_free(re);
    kv_table_destroy(&srv.table);
}

/* tools/urt-kv/auth.c rule 3: the comparison is exact (its timing is by construction). */
Test(kv_table, password_comparison_is_exact, .timeout = 30)
{
    struct kv_server s = {0};
    s.opt.requirepass = "abcdef";
    s.opt.requirepass_len = 6;
    cr_assert(kv_password_matches(&s, "abcdef", 6));
    cr_assert(!kv_password_matches(&s, "abcdeg", 6));
    cr_assert(!kv_password_matches(&s, "abcde", 5));
    cr_assert(!kv_password_matches(&s, "abcdef\0", 7));
    cr_assert(!kv_password_matches(&s, "abcdefg", 7));
    cr_assert(!kv_password_matches(&s, "", 0));
    cr_assert(!kv_password_matches(&s, "Abcdef", 6));
}
