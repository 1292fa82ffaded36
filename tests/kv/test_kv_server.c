/*
 * tests/kv/test_kv_server.c — urt-kv as a client sees it (the binary,
 * started per test; tests/kv/kv_client.h is the client):
 *  - the commands and Redis's replies and error texts, over TCP and the Unix
 *    socket; what redis-benchmark and redis-cli send at start;
 *  - pipelining: a thousand requests in one write, answered in order;
 *  - 2000 connections at once against a model; 1200 that come and go, more
 *    than a worker has receive buffers;
 *  - expiry by the timers (DBSIZE drops without any read of the key);
 *  - bad input, each closing at most the offending connection while another
 *    client goes on: malformed RESP, a bulk above the limit, too many
 *    arguments, binary keys, a disconnect mid-request, a client that never
 *    reads (output limit), maxclients, a connection flood past the
 *    descriptor limit;
 *  - redis-cli (Debian redis-tools), skipped with the reason when missing.
 * The durability suite (kill -9, restarts, checkpoints) is test_kv_durable.c.
 */
#include <criterion/criterion.h>
#include <pthread.h>

#include "helpers.h"
#include "kv_client.h"

static struct kvs srv;

static void start_default(void)
{
    memset(&srv, 0, sizeof(srv));
    kvs_paths(&srv, "srv");
    kvs_start(&srv, NULL);
}

static void stop_default(void)
{
    kvs_stop(&srv, false);
    kvs_cleanup(&srv);
}


Test(kv_server, strings, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    cr_assert_str_eq(kvc_cmd(c, "ping hello"), "$hello");
    cr_assert_str_eq(kvc_cmd(c, "ECHO hi"), "$hi");
    cr_assert_str_eq(kvc_cmd(c, "GET a"), "$nil");
    cr_assert_str_eq(kvc_cmd(c, "SET a 1"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "GET a"), "$1");
    cr_assert_str_eq(kvc_cmd(c, "SET a 2 NX"), "$nil");
    cr_assert_str_eq(kvc_cmd(c, "SET b 2 XX"), "$nil");
    cr_assert_str_eq(kvc_cmd(c, "SET a 3 XX GET"), "$1");
    cr_assert_str_eq(kvc_cmd(c, "SET a 3 NX XX"), "-ERR syntax error");
    cr_assert_str_eq(kvc_cmd(c, "SET a 3 EX 0"), "-ERR invalid expire time in 'set' command");
    cr_assert_str_eq(kvc_cmd(c, "SET a 3 EX x"), "-ERR value is not an integer or out of range");
    cr_assert_str_eq(kvc_cmd(c, "INCR a"), ":4");
    cr_assert_str_eq(kvc_cmd(c, "INCRBY a 10"), ":14");
    cr_assert_str_eq(kvc_cmd(c, "DECR a"), ":13");
    cr_assert_str_eq(kvc_cmd(c, "DECRBY a 3"), ":10");
    cr_assert_str_eq(kvc_cmd(c, "SET s abc"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "INCR s"), "-ERR value is not an integer or out of range");
    cr_assert_str_eq(kvc_cmd(c, "SET m 9223372036854775807"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "INCR m"), "-ERR increment or decrement would overflow");
    cr_assert_str_eq(kvc_cmd(c, "MSET x 1 y 2"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "MSET x 1 y"), "-ERR wrong number of arguments for 'mset' command");
    cr_assert_str_eq(kvc_cmd(c, "MGET x nope y"), "*3[$1,$nil,$2]");
    cr_assert_str_eq(kvc_cmd(c, "EXISTS x y nope x"), ":3");
    cr_assert_str_eq(kvc_cmd(c, "DEL x nope"), ":1");
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), ":4");
    cr_assert_str_eq(kvc_cmd(c, "TTL y"), ":-1");
    cr_assert_str_eq(kvc_cmd(c, "TTL nope"), ":-2");
    cr_assert_str_eq(kvc_cmd(c, "EXPIRE y 100"), ":1");
    cr_assert_str_eq(kvc_cmd(c, "TTL y"), ":100");
    cr_assert_str_eq(kvc_cmd(c, "EXPIRE nope 100"), ":0");
    cr_assert_str_eq(kvc_cmd(c, "PERSIST y"), ":1");
    cr_assert_str_eq(kvc_cmd(c, "TTL y"), ":-1");
    cr_assert_str_eq(kvc_cmd(c, "EXPIRE y -1"), ":1"); /* in the past: deleted */
    cr_assert_str_eq(kvc_cmd(c, "EXISTS y"), ":0");
    cr_assert_str_eq(kvc_cmd(c, "FLUSHALL"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), ":0");
    kvc_close(c);
}

Test(kv_server, connection_and_server_commands, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, true); /* the Unix socket */
    cr_assert_str_eq(kvc_cmd(c, "CLIENT GETNAME"), "$nil");
    cr_assert_str_eq(kvc_cmd(c, "CLIENT SETNAME bench"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "CLIENT GETNAME"), "$bench");
    /* what redis-benchmark asks at start */
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET save"), "*2[$save,$]");
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET appendonly"), "*2[$appendonly,$no]");
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET nothing*"), "*0[]");
    cr_assert_str_eq(kvc_cmd(c, "SELECT 0"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "SELECT 1"), "-ERR DB index is out of range");
    cr_assert_str_eq(kvc_cmd(c, "COMMAND DOCS"), "*0[]");
    cr_assert_str_eq(kvc_cmd(c, "FOO bar baz"), "-ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' ");
    cr_assert_str_eq(kvc_cmd(c, "GET"), "-ERR wrong number of arguments for 'get' command");
    cr_assert_str_eq(kvc_cmd(c, "GET a b"), "-ERR wrong number of arguments for 'get' command");
    const char *info = kvc_cmd(c, "INFO");
    cr_assert(strstr(info, "# Server") && strstr(info, "redis_version:") && strstr(info, "# urt") &&
                  strstr(info, "workers:2") && strstr(info, "tasks_run:") && strstr(info, "\r\nurt_features:backend=") &&
                  !strstr(info, "\r\nio_uring:"),
              "INFO: %s", info);
    info = kvc_cmd(c, "INFO stats");
    cr_assert(strstr(info, "total_commands_processed:") && !strstr(info, "# Server"), "INFO stats: %s", info);
    unsigned long long before = strtoull(strstr(info, "total_commands_processed:") + 25, NULL, 10);
    /* one batch: INFO counts the commands before it in its batch, and itself */
    const char *four = "PING\r\nPING\r\nPING\r\nINFO stats\r\n";
    kvc_send(c, four, strlen(four));
    for (int i = 0; i < 3; i++)
        cr_assert_str_eq(kvc_reply(c), "+PONG");
    info = kvc_reply(c);
    cr_assert(strstr(info, "total_commands_processed:"), "INFO stats: %s", info);
    cr_assert_eq(strtoull(strstr(info, "total_commands_processed:") + 25, NULL, 10), before + 4, "INFO stats: %s",
                 info);
    cr_assert_str_eq(kvc_cmd(c, "QUIT"), "+OK");
    cr_assert_str_eq(kvc_reply(c), "(closed)");
    kvc_close(c);
}

Test(kv_server, inline_commands, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    const char *three = "PING\r\nSET k v\r\nGET k\n";
    kvc_send(c, three, strlen(three));
    cr_assert_str_eq(kvc_reply(c), "+PONG");
    cr_assert_str_eq(kvc_reply(c), "+OK");
    cr_assert_str_eq(kvc_reply(c), "$v");
    kvc_close(c);
}

Test(kv_server, pipelined_requests_are_answered_in_order, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    enum { N = 1000 };
    static char req[N * 80];
    size_t len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(req + len, "*3\r\n$3\r\nSET\r\n$%d\r\nk%d\r\n$%d\r\nv%d\r\n*2\r\n$4\r\nINCR\r\n$1\r\nc\r\n",
                               (int)snprintf(NULL, 0, "k%d", i), i, (int)snprintf(NULL, 0, "v%d", i), i);
    cr_assert_eq(kvc_send(c, req, len), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_str_eq(kvc_reply(c), "+OK", "reply %d", i);
        char want[32];
        snprintf(want, sizeof(want), ":%d", i + 1);
        cr_assert_str_eq(kvc_reply(c), want);
    }
    len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(req + len, "GET k%d\r\n", i);
    cr_assert_eq(kvc_send(c, req, len), 0);
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof(want), "$v%d", i);
        cr_assert_str_eq(kvc_reply(c), want);
    }
    kvc_close(c);
}

Test(kv_server, keys_expire_without_being_read, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    /* The first key lives 1 s: the 51 round trips before DBSIZE must finish
     * before it expires, which 100 ms did not guarantee on a loaded machine. */
    for (int i = 0; i < 50; i++) {
        char want[64];
        snprintf(want, sizeof(want), "SET e%d v PX %d", i, 1000 + i);
        cr_assert_str_eq(kvc_cmd(c, "%s", want), "+OK");
    }
    cr_assert_str_eq(kvc_cmd(c, "SET keep v"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), ":51");
    bool gone = WAIT_UNTIL(!strcmp(kvc_cmd(c, "DBSIZE"), ":1"), 5000);
    cr_assert(gone, "the timers did not remove the expired keys: DBSIZE %s", kvc_cmd(c, "DBSIZE"));
    const char *info = kvc_cmd(c, "INFO stats");
    cr_assert(strstr(info, "expired_keys:50"), "%s", info);
    cr_assert_str_eq(kvc_cmd(c, "GET keep"), "$v");
    kvc_close(c);
}

/* Many connections at once, each pipelining writes and reads against its own
 * model (its own keys) and a shared counter: every reply is the model's, in
 * order, and the counter ends at the number of INCRs sent. */
#define STRESS_PER SCALE(250, 40) /* connections per client thread: 2000 in all (320 sanitized) */
struct stress_client {
    int id, rounds;
    int fds[250];
    long incrs;
    char failure[200];
};

static void *stress_main(void *arg)
{
    struct stress_client *sc = arg;
    const int PER = STRESS_PER;
    struct kvc **c = calloc((size_t)PER, sizeof(*c));
    for (int i = 0; i < PER; i++) {
        c[i] = calloc(1, sizeof(**c));
        c[i]->fd = sc->fds[i];
    }
    for (int r = 0; r < sc->rounds && !sc->failure[0]; r++) {
        char req[256];
        for (int i = 0; i < PER; i++) { /* one pipelined batch per connection, all in flight at once */
            int n = snprintf(req, sizeof(req), "SET k%d.%d %d\r\nINCR shared\r\nGET k%d.%d\r\nINCR own%d.%d\r\n",
                             sc->id, i, r, sc->id, i, sc->id, i);
            if (kvc_send(c[i], req, (size_t)n))
                snprintf(sc->failure, sizeof(sc->failure), "send failed");
        }
        for (int i = 0; i < PER && !sc->failure[0]; i++) {
            char want_get[32], want_own[32];
            snprintf(want_get, sizeof(want_get), "$%d", r);
            snprintf(want_own, sizeof(want_own), ":%d", r + 1);
            const char *a = strcmp(kvc_reply(c[i]), "+OK") ? "SET" : NULL;
            const char *b = kvc_reply(c[i])[0] != ':' ? "INCR shared" : NULL;
            const char *g = strcmp(kvc_reply(c[i]), want_get) ? "GET" : NULL;
            const char *o = strcmp(kvc_reply(c[i]), want_own) ? "INCR own" : NULL;
            const char *bad = a ? a : b ? b : g ? g : o;
            if (bad)
                snprintf(sc->failure, sizeof(sc->failure), "client %d conn %d round %d: wrong %s reply", sc->id, i, r,
                         bad);
            sc->incrs++;
        }
    }
    for (int i = 0; i < PER; i++)
        kvc_close(c[i]);
    free(c);
    return NULL;
}

Test(kv_server, many_connections_against_a_model, .init = start_default, .fini = stop_default, .timeout = 120)
{
    enum { THREADS = 8 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max; /* 2000 client sockets: raise the soft limit as far as allowed */
    setrlimit(RLIMIT_NOFILE, &rl);
    cr_assert_geq(rl.rlim_cur, (rlim_t)(THREADS * STRESS_PER + 64), "RLIMIT_NOFILE %lu is too low for the test",
                  (unsigned long)rl.rlim_cur);
    const int PER = STRESS_PER;
    static struct stress_client sc[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        sc[t] = (struct stress_client){.id = t, .rounds = SCALE(20, 10)};
        for (int i = 0; i < PER; i++) {
            sc[t].fds[i] = kvc_connect_fd(&srv, i % 2);
            cr_assert_geq(sc[t].fds[i], 0, "connection %d.%d: %s", t, i, strerror(errno));
        }
    }
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, stress_main, &sc[t]);
    long incrs = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        cr_assert_str_eq(sc[t].failure, "");
        incrs += sc[t].incrs;
    }
    struct kvc *c = kvc_open(&srv, false);
    char want[32];
    snprintf(want, sizeof(want), "$%ld", incrs);
    cr_assert_str_eq(kvc_cmd(c, "GET shared"), want);
    snprintf(want, sizeof(want), ":%d", 1 + THREADS * PER * 2);
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), want);
    kvc_close(c);
}

/* Connections that come and go, one after another, far more of them than a
 * worker has receive buffers (256): each must be answered, and so must a
 * connection that stayed open all along. (The end of a stream once took a
 * buffer on the portable backend that was never given back: after some 256
 * closes on a worker its ring was empty for good, and none of its
 * connections was answered any more.) */
Test(kv_server, connections_that_close_leave_the_receive_buffers, .init = start_default, .fini = stop_default,
     .timeout = 120)
{
    struct kvc *stay = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(stay, "SET stay 1"), "+OK");
    for (int i = 0; i < 1200; i++) {
        struct kvc *c = kvc_open(&srv, i % 2);
        char want[32];
        snprintf(want, sizeof(want), ":%d", i + 1);
        cr_assert_str_eq(kvc_cmd(c, "INCR n"), want, "connection %d", i);
        kvc_close(c);
    }
    cr_assert_str_eq(kvc_cmd(stay, "GET n"), "$1200");
    cr_assert_str_eq(kvc_cmd(stay, "GET stay"), "$1");
    kvc_close(stay);
}

/* ---- placement ------------------------------------------------------------------------ */

/* INFO's connected_clients_per_worker of a 3-worker server into n[3]. */
static void per_worker(struct kvc *c, uint32_t n[3])
{
    const char *info = kvc_cmd(c, "INFO clients");
    const char *p = strstr(info, "connected_clients_per_worker:");
    cr_assert_not_null(p, "INFO clients: %s", info);
    cr_assert_eq(sscanf(p, "connected_clients_per_worker:%u,%u,%u", &n[0], &n[1], &n[2]), 3, "%s", p);
}

static uint32_t spread(const uint32_t n[3])
{
    uint32_t lo = n[0], hi = n[0];
    for (int i = 1; i < 3; i++) {
        lo = n[i] < lo ? n[i] : lo;
        hi = n[i] > hi ? n[i] : hi;
    }
    return hi - lo;
}

/* A new connection goes to a worker with the fewest live connections,
 * whatever the order in which earlier ones closed (checked against that
 * model after every connect, through rounds of random closes). Taking any
 * recycled lane, as urt-kv once did, follows the close order instead. */
Test(kv_server, a_new_connection_goes_to_the_least_loaded_worker, .timeout = 120)
{
    memset(&srv, 0, sizeof(srv));
    kvs_paths(&srv, "place");
    const char *const extra[] = {"--workers", "3", NULL};
    kvs_start(&srv, extra);
    enum { MAX = 24 };
    struct kvc *conns[MAX] = {0};
    struct kvc *ctl = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(ctl, "PING"), "+PONG");
    unsigned seed = 12345;
    int live = 1;
    for (int round = 0; round < 12; round++) {
        /* close a random subset, and wait until the server has seen it */
        for (int i = 0; i < MAX; i++)
            if (conns[i] && rand_r(&seed) % 2) {
                kvc_close(conns[i]);
                conns[i] = NULL;
                live--;
            }
        char want[64];
        snprintf(want, sizeof(want), "connected_clients:%d\r", live);
        cr_assert(WAIT_UNTIL(strstr(kvc_cmd(ctl, "INFO clients"), want), 5000), "%s", kvc_cmd(ctl, "INFO clients"));
        /* refill, one connection at a time, each checked against the model */
        for (int i = 0; i < MAX; i++) {
            if (conns[i])
                continue;
            uint32_t before[3], after[3];
            per_worker(ctl, before);
            conns[i] = kvc_open(&srv, false);
            cr_assert_str_eq(kvc_cmd(conns[i], "PING"), "+PONG"); /* placed by now */
            live++;
            per_worker(ctl, after);
            uint32_t lo = before[0] < before[1] ? before[0] : before[1];
            lo = before[2] < lo ? before[2] : lo;
            int grew = -1;
            for (int w = 0; w < 3; w++)
                if (after[w] == before[w] + 1)
                    grew = w;
            cr_assert_geq(grew, 0, "round %d: no worker gained the connection", round);
            cr_assert_eq(before[grew], lo,
                         "round %d: the connection went to worker %d with %u connections, not to one with %u "
                         "(before %u,%u,%u, after %u,%u,%u)",
                         round, grew, before[grew], lo, before[0], before[1], before[2], after[0], after[1], after[2]);
        }
        uint32_t n[3];
        per_worker(ctl, n);
        cr_assert_leq(spread(n), 1, "round %d: %u,%u,%u", round, n[0], n[1], n[2]);
    }
    for (int i = 0; i < MAX; i++)
        kvc_close(conns[i]);
    kvc_close(ctl);
    kvs_stop(&srv, false);
    kvs_cleanup(&srv);
}

/* ---- bad input ------------------------------------------------------------------------ */

/* Sends raw bytes on a new connection; expects `reply` and then a close. */
static void expect_error_then_close(const void *bytes, size_t n, const char *reply)
{
    struct kvc *c = kvc_open(&srv, false);
    kvc_send(c, bytes, n);
    cr_assert_str_eq(kvc_reply(c), reply);
    cr_assert_str_eq(kvc_reply(c), "(closed)");
    kvc_close(c);
}

Test(kv_server, malformed_input_closes_only_that_client, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *other = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(other, "SET k v"), "+OK");
    expect_error_then_close("*1\r\n+PING\r\n", 11, "-ERR Protocol error: expected '$', got '+'");
    expect_error_then_close("*x\r\n", 4, "-ERR Protocol error: invalid multibulk length");
    expect_error_then_close("*1\r\n$536870913\r\n", 16, "-ERR Protocol error: invalid bulk length"); /* 512 MB + 1 */
    expect_error_then_close("*2000000\r\n", 10, "-ERR Protocol error: invalid multibulk length"); /* too many args */
    /* a good request before the bad one is answered first */
    struct kvc *c = kvc_open(&srv, false);
    const char *good_bad = "*1\r\n$4\r\nPING\r\n*1\r\n:1\r\n";
    kvc_send(c, good_bad, strlen(good_bad));
    cr_assert_str_eq(kvc_reply(c), "+PONG");
    cr_assert_str_eq(kvc_reply(c), "-ERR Protocol error: expected '$', got ':'");
    cr_assert_str_eq(kvc_reply(c), "(closed)");
    kvc_close(c);
    cr_assert_str_eq(kvc_cmd(other, "GET k"), "$v");
    const char *info = kvc_cmd(other, "INFO stats");
    cr_assert(strstr(info, "protocol_errors:5"), "%s", info);
    kvc_close(other);
}

Test(kv_server, binary_keys_and_values, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    const char key[] = "k\r\n\0\xff", val[] = "\0\r\n$-1\r\n*";
    const char *set[] = {"SET", key, val};
    size_t lens[] = {3, sizeof(key) - 1, sizeof(val) - 1};
    kvc_cmdv(c, 3, set, lens);
    cr_assert_str_eq(kvc_reply(c), "+OK");
    const char *get[] = {"GET", key};
    size_t glens[] = {3, sizeof(key) - 1};
    kvc_cmdv(c, 2, get, glens);
    char out[64];
    int n = kvc_reply_into(c, out, sizeof(out));
    cr_assert_eq(n, 1 + (int)sizeof(val) - 1);
    cr_assert_eq(memcmp(out + 1, val, sizeof(val) - 1), 0);
    kvc_close(c);
}

Test(kv_server, a_client_that_disconnects_mid_request, .init = start_default, .fini = stop_default, .timeout = 120)
{
    for (int i = 0; i < 20; i++) {
        struct kvc *c = kvc_open(&srv, false);
        kvc_send(c, "*3\r\n$3\r\nSET\r\n$1\r\nz\r\n$100\r\nabc", 29);
        kvc_close(c);
    }
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "EXISTS z"), ":0");
    cr_assert(WAIT_UNTIL(strstr(kvc_cmd(c, "INFO clients"), "connected_clients:1\r"), 5000));
    kvc_close(c);
}

Test(kv_server, a_large_value_arrives_in_pieces, .init = start_default, .fini = stop_default, .timeout = 120)
{
    struct kvc *c = kvc_open(&srv, false);
    size_t n = 8u << 20;
    char *v = malloc(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (char)(i * 31 + 7);
    const char *set[] = {"SET", "big", v};
    size_t lens[] = {3, 3, n};
    kvc_cmdv(c, 3, set, lens);
    cr_assert_str_eq(kvc_reply(c), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "EXISTS big"), ":1");
    kvc_cmd(c, "GET big");
    free(v);
    kvc_close(c);
}

static void restart_with(const char *const *extra)
{
    kvs_stop(&srv, false);
    kvs_start(&srv, extra);
}

Test(kv_server, a_client_that_never_reads_is_dropped, .init = start_default, .fini = stop_default, .timeout = 120)
{
    const char *const extra[] = {"--client-output-limit", "64k", "--send-timeout-ms", "2000", NULL};
    restart_with(extra);
    struct kvc *c = kvc_open(&srv, false);
    static char v[4000];
    memset(v, 'x', sizeof(v));
    const char *set[] = {"SET", "v", v};
    size_t lens[] = {3, 1, sizeof(v)};
    kvc_cmdv(c, 3, set, lens);
    cr_assert_str_eq(kvc_reply(c), "+OK");
    /* 2000 GETs = 8 MB of replies that are never read */
    static char req[2000 * 20];
    size_t len = 0;
    for (int i = 0; i < 2000; i++)
        len += (size_t)sprintf(req + len, "GET v\r\n");
    int sndbuf = 4096;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
    for (int i = 0; i < 20; i++)
        if (kvc_send(c, req, len))
            break;
    struct kvc *other = kvc_open(&srv, false);
    cr_assert_eq(strncmp(kvc_cmd(other, "GET v"), "$xxxx", 5), 0);
    cr_assert(WAIT_UNTIL(strstr(kvc_cmd(other, "INFO stats"), "client_output_limit_disconnections:1"), 10000),
              "%s", kvc_cmd(other, "INFO stats"));
    cr_assert_str_eq(kvc_cmd(other, "PING"), "+PONG");
    kvc_close(c);
    kvc_close(other);
}

Test(kv_server, a_client_that_never_takes_its_replies_times_out, .init = start_default, .fini = stop_default, .timeout = 120)
{
    const char *const extra[] = {"--send-timeout-ms", "300", NULL};
    restart_with(extra);
    struct kvc *c = kvc_open(&srv, false);
    int small = 4096;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    static char v[60000];
    memset(v, 'y', sizeof(v));
    const char *set[] = {"SET", "v", v};
    size_t lens[] = {3, 1, sizeof(v)};
    kvc_cmdv(c, 3, set, lens);
    cr_assert_str_eq(kvc_reply(c), "+OK");
    /* 400 GETs of 60 KB: 24 MB of replies, more than the socket buffers hold */
    static char req[400 * 8];
    size_t len = 0;
    for (int i = 0; i < 400; i++)
        len += (size_t)sprintf(req + len, "GET v\r\n");
    kvc_send(c, req, len);
    struct kvc *other = kvc_open(&srv, false);
    cr_assert(WAIT_UNTIL(strstr(kvc_cmd(other, "INFO stats"), "client_output_limit_disconnections:1"), 10000),
              "%s", kvc_cmd(other, "INFO stats"));
    cr_assert(WAIT_UNTIL(strstr(kvc_cmd(other, "INFO clients"), "connected_clients:1\r"), 5000));
    kvc_close(c);
    kvc_close(other);
}

/* A batch's replies go out first in one send(2) that does not wait; what a
 * full socket did not take (-EAGAIN, a short count) goes on the ring,
 * waiting for room. A client that asks for 24 MB and reads late and slowly
 * makes later batches (about 1 MB each) find the socket full: every reply
 * still arrives, whole and in order, and the connection stays. */
Test(kv_server, replies_that_find_the_socket_full_arrive_in_order, .init = start_default, .fini = stop_default,
     .timeout = 120)
{
    enum { KEYS = 200, VLEN = 20000, GETS = 6 * KEYS };
    struct kvc *c = kvc_open(&srv, false);
    static char v[VLEN];
    for (int i = 0; i < KEYS; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        memset(v, 'a' + i % 26, sizeof(v));
        char d[8];
        snprintf(d, sizeof(d), "%05d", i);
        memcpy(v, d, 5);
        const char *set[] = {"SET", k, v};
        size_t lens[] = {3, strlen(k), sizeof(v)};
        kvc_cmdv(c, 3, set, lens);
        cr_assert_str_eq(kvc_reply(c), "+OK");
    }
    /* each key 6 times: 24 MB of replies, more than the socket buffers hold */
    static char req[GETS * 16];
    size_t len = 0;
    for (int i = 0; i < GETS; i++)
        len += (size_t)sprintf(req + len, "GET k%d\r\n", i % KEYS);
    cr_assert_eq(kvc_send(c, req, len), 0);
    usleep(200 * 1000); /* the first batches fill the socket */
    for (int g = 0; g < GETS; g++) {
        int i = g % KEYS;
        const char *r = kvc_reply(c);
        cr_assert_eq(strlen(r), (size_t)VLEN + 1, "reply %d: %.40s", i, r);
        char want[16];
        snprintf(want, sizeof(want), "$%05d", i);
        cr_assert_eq(strncmp(r, want, 6), 0, "reply %d starts %.10s", i, r);
        cr_assert_eq(r[VLEN], 'a' + i % 26, "reply %d", i);
        if (g % 64 == 0)
            usleep(1000); /* a slow reader: the socket stays full */
    }
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    kvc_close(c);
}

Test(kv_server, maxmemory_refuses_growing_writes, .init = start_default, .fini = stop_default, .timeout = 120)
{
    const char *const extra[] = {"--maxmemory", "1m", NULL};
    restart_with(extra);
    struct kvc *c = kvc_open(&srv, false);
    static char v[100000];
    memset(v, 'm', sizeof(v));
    int ok = 0;
    const char *last = "";
    for (int i = 0; i < 30; i++) {
        char k[16];
        snprintf(k, sizeof(k), "big%d", i);
        const char *set[] = {"SET", k, v};
        size_t lens[] = {3, strlen(k), sizeof(v)};
        kvc_cmdv(c, 3, set, lens);
        last = kvc_reply(c);
        if (strcmp(last, "+OK"))
            break;
        ok++;
    }
    cr_assert(ok >= 10 && ok < 30, "%d SETs of 100 KB under maxmemory 1m", ok);
    cr_assert_str_eq(last, "-OOM command not allowed when used memory > 'maxmemory'.");
    cr_assert_str_eq(kvc_cmd(c, "GET nope"), "$nil"); /* reads go on */
    cr_assert_str_eq(kvc_cmd(c, "DEL big0 big1 big2"), ":3"); /* deletes too, and free room */
    cr_assert_str_eq(kvc_cmd(c, "SET small v"), "+OK");
    kvc_close(c);
}

Test(kv_server, a_client_past_the_query_buffer_limit_is_dropped, .init = start_default, .fini = stop_default,
     .timeout = 120)
{
    const char *const extra[] = {"--client-query-buffer-limit", "1m", NULL};
    restart_with(extra);
    struct kvc *c = kvc_open(&srv, false);
    const char *head = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n";
    kvc_send(c, head, strlen(head));
    static char chunk[64 * 1024];
    memset(chunk, 'q', sizeof(chunk));
    for (int i = 0; i < 64; i++) /* 4 MB of a 100 MB argument */
        if (kvc_send(c, chunk, sizeof(chunk)))
            break;
    cr_assert_str_eq(kvc_reply(c), "(closed)");
    struct kvc *other = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(other, "EXISTS k"), ":0");
    kvc_close(other);
    kvc_close(c);
}

Test(kv_server, maxclients, .init = start_default, .fini = stop_default, .timeout = 120)
{
    const char *const extra[] = {"--maxclients", "4", NULL};
    restart_with(extra);
    struct kvc *c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = kvc_open(&srv, false);
        cr_assert_str_eq(kvc_cmd(c[i], "PING"), "+PONG");
    }
    struct kvc *x = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_reply(x), "-ERR max number of clients reached");
    cr_assert_str_eq(kvc_reply(x), "(closed)");
    kvc_close(x);
    cr_assert_str_eq(kvc_cmd(c[0], "PING"), "+PONG");
    for (int i = 0; i < 4; i++)
        kvc_close(c[i]);
}

Test(kv_server, a_connection_flood_past_the_descriptor_limit, .init = start_default, .fini = stop_default, .timeout = 120)
{
    kvs_stop(&srv, false);
    kvs_start_limited(&srv, 64, NULL); /* RLIMIT_NOFILE 64: about 40 connections fit */
    struct kvc *first = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(first, "SET k v"), "+OK");
    enum { FLOOD = 200 };
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        fds[i] = kvc_connect_fd(&srv, false); /* the backlog takes what accept cannot */
    cr_assert_str_eq(kvc_cmd(first, "GET k"), "$v");
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* once descriptors are free again, new clients are served */
    cr_assert(WAIT_UNTIL(({
                             int fd = kvc_connect_fd(&srv, false);
                             bool ok = false;
                             if (fd >= 0) {
                                 struct timeval tv = {.tv_sec = 1};
                                 setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                                 char r[8] = "";
                                 ok = send(fd, "PING\r\n", 6, 0) == 6 && recv(fd, r, 7, 0) == 7 &&
                                      !memcmp(r, "+PONG\r\n", 7);
                                 close(fd);
                             }
                             ok;
                         }),
                         20000));
    kvc_close(first);
    FILE *log = fopen(srv.log, "r");
    char line[512];
    bool said = false;
    while (log && fgets(line, sizeof(line), log))
        said |= strstr(line, "accept: Too many open files") != NULL;
    if (log)
        fclose(log);
    cr_assert(said, "urt-kv did not report the descriptor limit on stderr");
}

/* ---- redis-cli ------------------------------------------------------------------------ */

static bool have_redis_cli(void)
{
    return system("command -v redis-cli >/dev/null 2>&1") == 0;
}

static void cli(const char *args, const char *want)
{
    char cmd[512], out[512] = "";
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d %s 2>&1", srv.port, args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert_str_eq(out, want, "redis-cli %s", args);
}

Test(kv_server, redis_cli, .init = start_default, .fini = stop_default, .timeout = 120)
{
    if (!have_redis_cli())
        cr_skip_test("redis-cli not installed (Debian redis-tools; scripts/deps.sh installs it)");
    cli("PING", "PONG\n");
    cli("SET greeting 'hello world'", "OK\n");
    cli("GET greeting", "hello world\n");
    cli("INCR n", "1\n");
    cli("--no-raw MGET greeting none", "1) \"hello world\"\n2) (nil)\n");
    cli("NOSUCH x", "ERR unknown command 'NOSUCH', with args beginning with: 'x' \n\n");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "printf 'SET p1 a\\nSET p2 b\\nGET p2\\n' | redis-cli -s %s >/dev/null 2>&1", srv.sock);
    cr_assert_eq(system(cmd), 0);
    cli("MGET p1 p2", "a\nb\n");
}
