/*
 * tests/unit/test_io_echo.c — a TCP echo server on urt's I/O (urt/io.h)
 * against plain-thread clients that check every byte:
 *  - the server: one multishot accept; each connection handed to a worker
 *    (urt_spawn_to, round robin) where a multishot receive into that
 *    worker's buffer ring feeds a FIFO of received buffers, sent back in
 *    order one send at a time (short sends continued), each buffer given
 *    back once sent; the connection closes when its receive ended and its
 *    FIFO is empty (a failed send drops the FIFO);
 *  - the clients: several threads, many connections each, rounds of
 *    pipelined messages of random sizes written before the echo is read back
 *    and compared byte for byte, in order; some connections are closed in
 *    the middle of a round (half of them with a reset, SO_LINGER 0);
 *  - checked at the end: every byte of every completed round came back in
 *    order, every accepted connection was closed by the server exactly once,
 *    every buffer was given back (each ring destroyed with no receive using
 *    it), and destroy finds nothing left (LSan in the ASan build).
 * Runs with the probed features and with every I/O feature forbidden (the
 * fallbacks), small enough for the sanitizer builds.
 */
#include "helpers.h"
#include "io_helpers.h"

#include <pthread.h>
#include <sys/time.h>

#define MAX_WORKERS 4
#define RING_COUNT 16
#define RING_SIZE 2048
#define FIFO (RING_COUNT + 2)

struct server {
    urt_runtime *rt;
    uint32_t workers;
    int lfd;
    struct urt_io accept_io;
    struct urt_bufring *rings[MAX_WORKERS]; /* each touched by its worker only */
    _Atomic uint32_t next;
    _Atomic int accepted, closed, errors, accept_ended, accept_err, put_failed;
    _Atomic uint64_t delivered, given_back;
    bool on_lanes;          /* each connection on a lane of its own (it may move between workers) */
    urt_lane *lanes[512];   /* written by the accept's continuation only */
    _Atomic int n_lanes;
};

struct conn {
    struct server *sv;
    int fd;
    struct urt_bufring *br;
    struct urt_io rio, sio;
    struct { char *buf; uint16_t bid; uint32_t off, len; } q[FIFO];
    uint32_t head, n;
    bool sending, recv_ended, send_failed;
};

static void conn_put(struct conn *c, uint16_t bid)
{
    if (urt_bufring_put(c->br, bid) != 0) {
        atomic_fetch_add(&c->sv->errors, 1);
        atomic_fetch_add(&c->sv->put_failed, 1);
    }
    atomic_fetch_add(&c->sv->given_back, 1);
}

static void conn_pop(struct conn *c)
{
    conn_put(c, c->q[c->head].bid);
    c->head = (c->head + 1) % FIFO;
    c->n--;
}

static void conn_maybe_close(struct conn *c)
{
    if (!c->recv_ended || c->sending || c->n)
        return;
    close(c->fd);
    atomic_fetch_add(&c->sv->closed, 1);
    free(c);
}

static void on_send(struct urt_io *io, int32_t res, void *arg);

static void send_next(struct conn *c)
{
    if (c->sending || !c->n || c->send_failed)
        return;
    urt_io_init(&c->sio, on_send, c);
    uint32_t off = c->q[c->head].off;
    int err = urt_io_send(&c->sio, c->fd, c->q[c->head].buf + off, c->q[c->head].len - off, MSG_NOSIGNAL, 0);
    if (err) {
        atomic_fetch_add(&c->sv->errors, 1);
        c->send_failed = true;
        while (c->n)
            conn_pop(c);
        return;
    }
    c->sending = true;
}

static void on_send(struct urt_io *io, int32_t res, void *arg)
{
    struct conn *c = arg;
    (void)io;
    c->sending = false;
    if (res <= 0) {
        c->send_failed = true; /* the peer went away: what is queued will not be sent */
        while (c->n)
            conn_pop(c);
    } else {
        c->q[c->head].off += (uint32_t)res; /* a short send goes on from there */
        if (c->q[c->head].off == c->q[c->head].len)
            conn_pop(c);
        send_next(c);
    }
    conn_maybe_close(c);
}

static void on_recv(struct urt_io *io, int32_t res, void *arg)
{
    struct conn *c = arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        if (res < 0 && res != -ECONNRESET)
            atomic_fetch_add(&c->sv->errors, 1);
        c->recv_ended = true;
        conn_maybe_close(c);
        return;
    }
    uint16_t bid;
    char *buf = urt_io_buffer(io, &bid);
    atomic_fetch_add(&c->sv->delivered, 1);
    if (!buf || res <= 0 || c->n == FIFO) {
        atomic_fetch_add(&c->sv->errors, 1);
        if (buf)
            conn_put(c, bid);
        return;
    }
    if (c->send_failed) {
        conn_put(c, bid);
        return;
    }
    uint32_t tail = (c->head + c->n) % FIFO;
    c->q[tail].buf = buf;
    c->q[tail].bid = bid;
    c->q[tail].off = 0;
    c->q[tail].len = (uint32_t)res;
    c->n++;
    send_next(c);
}

/* On the connection's worker: its ring (made on first use), its receive. */
static enum urt_task_result conn_start(struct urt_task *t, void *arg)
{
    struct conn *c = arg;
    struct server *sv = c->sv;
    int w = urt_current_worker(sv->rt);
    (void)t;
    if (!sv->rings[w] && urt_bufring_create(RING_COUNT, RING_SIZE, &sv->rings[w]) != 0)
        sv->rings[w] = NULL;
    c->br = sv->rings[w];
    urt_io_init(&c->rio, on_recv, c);
    if (!c->br || urt_io_recv_bufring(&c->rio, c->fd, c->br, 0) != 0) {
        atomic_fetch_add(&sv->errors, 1);
        close(c->fd);
        atomic_fetch_add(&sv->closed, 1);
        free(c);
    }
    return URT_TASK_DONE;
}

/* A connection whose start was cancelled by destroy: closed all the same. */
static void conn_start_cancelled(struct urt_task *t, void *arg)
{
    struct conn *c = arg;
    (void)t;
    close(c->fd);
    atomic_fetch_add(&c->sv->closed, 1);
    free(c);
}

/* The connection on a lane of its own: its receive is armed wherever the
 * lane runs first, its continuations run wherever the lane runs then, so
 * buffers are put back from other workers than their ring's. */
static int conn_on_lane(struct server *sv, struct conn *c)
{
    int i = atomic_load(&sv->n_lanes);
    if (i == (int)(sizeof(sv->lanes) / sizeof(sv->lanes[0])) || urt_lane_create(sv->rt, &sv->lanes[i]) != 0)
        return -1;
    atomic_store(&sv->n_lanes, i + 1);
    return urt_lane_spawn(sv->lanes[i], conn_start, conn_start_cancelled, c, 0);
}

static void on_accept(struct urt_io *io, int32_t res, void *arg)
{
    struct server *sv = arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        atomic_store(&sv->accept_err, res);
        atomic_store(&sv->accept_ended, 1);
        return;
    }
    if (res < 0) {
        atomic_fetch_add(&sv->errors, 1);
        return;
    }
    atomic_fetch_add(&sv->accepted, 1);
    int one = 1;
    setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* echo pieces go out at once */
    struct conn *c = calloc(1, sizeof(*c));
    c->sv = sv;
    c->fd = res;
    uint32_t w = atomic_fetch_add(&sv->next, 1) % sv->workers;
    if (sv->on_lanes ? conn_on_lane(sv, c) != 0 : urt_spawn_to(sv->rt, w, conn_start, conn_start_cancelled, c, 0) != 0) {
        atomic_fetch_add(&sv->errors, 1);
        close(res);
        atomic_fetch_add(&sv->closed, 1);
        free(c);
    }
}

static enum urt_task_result accept_start(struct urt_task *t, void *arg)
{
    struct server *sv = arg;
    (void)t;
    urt_io_init(&sv->accept_io, on_accept, sv);
    if (urt_io_accept(&sv->accept_io, sv->lfd, NULL, NULL, URT_IO_MULTISHOT) != 0) {
        atomic_store(&sv->accept_err, -1);
        atomic_store(&sv->accept_ended, 1);
    }
    return URT_TASK_DONE;
}

static enum urt_task_result accept_stop(struct urt_task *t, void *arg)
{
    struct server *sv = arg;
    (void)t;
    urt_io_cancel(&sv->accept_io);
    return URT_TASK_DONE;
}

static _Atomic int g_ring_destroy_err;

static enum urt_task_result ring_destroy(struct urt_task *t, void *arg)
{
    struct server *sv = arg;
    int w = urt_current_worker(sv->rt);
    (void)t;
    if (sv->rings[w]) {
        int err = urt_bufring_destroy(sv->rings[w]);
        if (err)
            atomic_store(&g_ring_destroy_err, err);
        sv->rings[w] = NULL;
    }
    return URT_TASK_DONE;
}

/* ---- clients ---------------------------------------------------------------------------------- */

struct client {
    uint16_t port;
    int conns, rounds;
    _Atomic int *stop;      /* when set: end the rounds (the server is being destroyed) */
    uint64_t seed;
    _Atomic uint64_t verified;
    _Atomic int failures, aborted;
    char why[160];
};

static bool read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool write_full(int fd, const char *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t w = send(fd, buf + put, n - put, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        put += (size_t)w;
    }
    return true;
}

static int client_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        close(fd);
        fd = -1;
    }
    int one = 1;
    struct timeval tv = {.tv_sec = 10}; /* a test that goes wrong fails instead of hanging */
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    return fd;
}

/* One round on fd: pipelined messages (all written, then all read back). */
static bool client_round(struct client *cl, int fd, char *out, char *in, bool abort_mid)
{
    size_t total = 0;
    int msgs = 1 + (int)(rng_next(&cl->seed) % 8);
    for (int m = 0; m < msgs; m++) {
        size_t len = 1 + rng_next(&cl->seed) % 4000;
        for (size_t i = 0; i < len; i++)
            out[total + i] = (char)rng_next(&cl->seed);
        if (!write_full(fd, out + total, len))
            return false;
        total += len;
        if (abort_mid && m == msgs / 2)
            return true; /* closed mid-stream by the caller */
    }
    if (!read_full(fd, in, total))
        return false;
    if (memcmp(out, in, total) != 0) {
        snprintf(cl->why, sizeof(cl->why), "echo differs within %zu bytes", total);
        atomic_fetch_add(&cl->failures, 1);
        return false;
    }
    atomic_fetch_add(&cl->verified, total);
    return true;
}

static void *client_main(void *arg)
{
    struct client *cl = arg;
    char *out = malloc(8 * 4000), *in = malloc(8 * 4000);
    int *fds = calloc((size_t)cl->conns, sizeof(int));
    for (int i = 0; i < cl->conns; i++)
        fds[i] = client_connect(cl->port);
    for (int r = 0; r < cl->rounds && !(cl->stop && atomic_load(cl->stop)); r++) {
        for (int i = 0; i < cl->conns; i++) {
            if (fds[i] < 0)
                continue;
            if (cl->stop) { /* the server goes away mid-round: never block for long */
                if (atomic_load(cl->stop))
                    break;
                if (!client_round(cl, fds[i], out, in, false)) {
                    close(fds[i]);
                    fds[i] = -1;
                }
                continue;
            }
            bool abort_mid = rng_next(&cl->seed) % 29 == 0;
            if (!client_round(cl, fds[i], out, in, abort_mid) && !cl->why[0]) {
                snprintf(cl->why, sizeof(cl->why), "connection %d round %d: %s", i, r, strerror(errno));
                atomic_fetch_add(&cl->failures, 1);
            }
            if (abort_mid) {
                if (rng_next(&cl->seed) & 1) {
                    struct linger lg = {.l_onoff = 1, .l_linger = 0};
                    setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)); /* a reset */
                }
                close(fds[i]);
                fds[i] = -1;
                atomic_fetch_add(&cl->aborted, 1);
            }
        }
    }
    for (int i = 0; i < cl->conns; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(out);
    free(in);
    return NULL;
}

static void echo_run(uint32_t disable)
{
    enum { THREADS = 3 };
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.ring_disable = disable;
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    struct server *sv = calloc(1, sizeof(*sv));
    sv->rt = rt;
    sv->workers = 2;
    uint16_t port;
    sv->lfd = tcp_listener(&port);
    cr_assert_eq(urt_spawn_to(rt, 0, accept_start, NULL, sv, 0), 0);
    sleep_us(2000);
    cr_assert_eq(atomic_load(&sv->accept_ended), 0, "the accept did not start");
    struct client cl[THREADS];
    pthread_t th[THREADS];
    int conns = SCALE(16, 8), rounds = SCALE(40, 12);
    for (int i = 0; i < THREADS; i++) {
        memset(&cl[i], 0, sizeof(cl[i]));
        cl[i].port = port;
        cl[i].conns = conns;
        cl[i].rounds = rounds;
        cl[i].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + disable;
        pthread_create(&th[i], NULL, client_main, &cl[i]);
    }
    uint64_t verified = 0;
    int aborted = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(atomic_load(&cl[i].failures), 0, "client %d: %s", i, cl[i].why);
        verified += atomic_load(&cl[i].verified);
        aborted += atomic_load(&cl[i].aborted);
    }
    int expect = THREADS * conns;
    cr_assert(WAIT_UNTIL(atomic_load(&sv->closed) == expect, 10000), "server closed %d of %d connections",
              atomic_load(&sv->closed), expect);
    cr_assert_eq(atomic_load(&sv->accepted), expect);
    cr_assert_eq(atomic_load(&sv->errors), 0);
    cr_assert_eq(atomic_load(&sv->delivered), atomic_load(&sv->given_back), "buffers not given back");
    cr_assert_gt(verified, 0);
    cr_log_info("echo (ring_disable 0x%x): %llu bytes checked, %d connections closed mid-stream", disable,
                (unsigned long long)verified, aborted);
    cr_assert_eq(urt_spawn_to(rt, 0, accept_stop, NULL, sv, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&sv->accept_ended), 5000));
    cr_assert_eq(atomic_load(&sv->accept_err), -ECANCELED);
    for (uint32_t w = 0; w < sv->workers; w++)
        cr_assert_eq(urt_spawn_to(rt, w, ring_destroy, NULL, sv, 0), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&g_ring_destroy_err), 0, "a ring was still in use");
    close(sv->lfd);
    free(sv);
}

Test(io_echo, tcp_echo_every_byte_in_order, .timeout = 120)
{
    echo_run(0);
}

Test(io_echo, tcp_echo_on_the_fallbacks, .timeout = 120)
{
    echo_run(URT_RING_MULTISHOT_ACCEPT | URT_RING_MULTISHOT_RECV | URT_RING_BUFRING | URT_RING_SEND_ZC |
             URT_RING_FIXED_ACCEPT | URT_RING_LINK_TIMEOUT);
}

/* destroy(CANCEL) under load, the connections on lanes (issue 27, item 7):
 * clients keep echoing over connections whose receive is armed on one
 * worker's buffer ring while their lane (and with it the sends and the puts
 * of the buffers) may run on the other; the runtime is destroyed in the
 * middle. Every accepted connection is closed by the server exactly once
 * (by its last continuation, or by the cancel of its start), every buffer
 * delivered is given back and no put is refused (a put on the destroying
 * thread or from a worker whose peer already left is accepted), and ASan /
 * LSan see no use after free and nothing left. The plain build crashed here
 * when each worker freed its rings on its way out. */
static void echo_destroy_under_load(int round)
{
    enum { THREADS = 2 };
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    struct server *sv = calloc(1, sizeof(*sv));
    sv->rt = rt;
    sv->workers = 2;
    sv->on_lanes = true;
    uint16_t port;
    sv->lfd = tcp_listener(&port);
    cr_assert_eq(urt_spawn_to(rt, 0, accept_start, NULL, sv, 0), 0);
    _Atomic int stop = 0;
    struct client cl[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&cl[i], 0, sizeof(cl[i]));
        cl[i].port = port;
        cl[i].conns = SCALE(24, 12);
        cl[i].rounds = 1 << 30;
        cl[i].stop = &stop;
        cl[i].seed = 0x2545f4914f6cdd1dull * (uint64_t)(i + 1) + (uint64_t)round;
        pthread_create(&th[i], NULL, client_main, &cl[i]);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&sv->delivered) >= 200 || atomic_load(&sv->accept_ended), 20000),
              "no load: %llu deliveries", (unsigned long long)atomic_load(&sv->delivered));
    sleep_us(2000 + 7000 * (uint64_t)round); /* under load, a little longer each round */
    uint64_t before = atomic_load(&sv->delivered);
    cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
    atomic_store(&stop, 1);
    close(sv->lfd); /* connections still in the backlog are reset */
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(atomic_load(&cl[i].failures), 0, "client %d: %s", i, cl[i].why); /* a wrong byte */
    }
    int accepted = atomic_load(&sv->accepted);
    cr_log_info("round %d: %d connections, %llu deliveries (%llu before destroy), %d lanes", round, accepted,
                (unsigned long long)atomic_load(&sv->delivered), (unsigned long long)before,
                atomic_load(&sv->n_lanes));
    cr_assert_eq(atomic_load(&sv->closed), accepted, "server closed %d of %d connections", atomic_load(&sv->closed),
                 accepted);
    cr_assert_eq(atomic_load(&sv->put_failed), 0, "%d puts refused", atomic_load(&sv->put_failed));
    cr_assert_eq(atomic_load(&sv->delivered), atomic_load(&sv->given_back), "buffers not given back");
    cr_assert(atomic_load(&sv->accept_ended));
    for (int i = 0; i < atomic_load(&sv->n_lanes); i++)
        cr_assert_eq(urt_lane_destroy(sv->lanes[i]), 0);
    free(sv);
}

Test(io_echo, destroy_cancel_under_load_with_connections_on_lanes, .timeout = 120)
{
    for (int round = 0; round < 4; round++)
        echo_destroy_under_load(round);
}
