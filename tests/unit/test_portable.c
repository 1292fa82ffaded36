/*
 * tests/unit/test_portable.c — the portable backend (backend/portable/) on
 * its own: each operation kind against what io_uring answers for it, chains
 * and their breaks, linked deadlines, cancellation, timeouts, multishot
 * receive and accept with buffer rings, registered files, wakes from other
 * threads, and a stress of wakes and pool completions checked against a
 * count of what was submitted (every completion exactly once).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/portable/portable.h"
#include "tests/helpers.h"

struct rec {
    struct be_tag tag;
    int n;
    int32_t res[64];
    uint32_t flags[64];
    uint64_t at[64];
};

static void rec_complete(struct be_tag *tag, int32_t res, uint32_t flags)
{
    struct rec *r = (struct rec *)tag;
    cr_assert_lt(r->n, 64, "too many completions");
    r->res[r->n] = res;
    r->flags[r->n] = flags;
    r->at[r->n] = now_ns();
    r->n++;
}

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    r->tag.complete = rec_complete;
}

static struct pb_shared sh;
static struct pb_ctx ctx;
static uint64_t wakes;

static void on_event(void *arg, enum be_event ev, uint32_t a)
{
    (void)arg;
    (void)a;
    if (ev == BE_EV_WAKE)
        wakes++;
}

static void setup(void)
{
    cr_assert_eq(pb_shared_init(&sh, 2), 0);
    cr_assert_eq(pb_init(&ctx, &sh), 0);
    wakes = 0;
}

static void teardown(void)
{
    pb_exit(&ctx);
    pb_shared_exit(&sh);
}

/* Waits and reaps until cond holds (at most 5 s). */
#define RUN_UNTIL(cond)                                                                                              \
    do {                                                                                                             \
        uint64_t until_ = now_ns() + 5000000000ull;                                                                  \
        while (!(cond)) {                                                                                            \
            cr_assert_lt(now_ns(), until_, "timed out waiting for " #cond);                                          \
            pb_wait(&ctx, 10000000);                                                                                 \
            pb_reap(&ctx, on_event, NULL);                                                                           \
        }                                                                                                            \
    } while (0)

static void submit(struct be_op op, struct rec *r)
{
    pb_submit(&ctx, &op, r ? &r->tag : NULL);
}

/* Every test gets a fresh pool and context. */
#define PTest(name, ...) Test(portable, name, .init = setup, .fini = teardown, .timeout = 60, ##__VA_ARGS__)

/* ---- files through the pool ---- */

static int temp_file(void)
{
    char path[] = "/tmp/urt-portable-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    return fd;
}

PTest(write_then_fdatasync_chain_and_read_back)
{
    int fd = temp_file();
    char data[4096], back[4096];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7);
    struct rec w, s, r;
    rec_init(&w), rec_init(&s), rec_init(&r);
    submit((struct be_op){.kind = BE_WRITE, .flags = BE_F_LINK, .fd = fd, .caddr = data, .len = sizeof data, .off = 8192}, &w);
    submit((struct be_op){.kind = BE_FDATASYNC, .fd = fd}, &s);
    cr_assert(pb_dirty(&ctx));
    pb_flush(&ctx);
    RUN_UNTIL(s.n == 1);
    cr_assert_eq(w.n, 1);
    cr_assert_eq(w.res[0], (int32_t)sizeof data);
    cr_assert_eq(s.res[0], 0);
    cr_assert_leq(w.at[0], s.at[0], "the write completes before its sync");
    submit((struct be_op){.kind = BE_READ, .fd = fd, .addr = back, .len = sizeof back, .off = 8192}, &r);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], (int32_t)sizeof back);
    cr_assert_eq(memcmp(data, back, sizeof data), 0);
    close(fd);
}

PTest(a_failed_member_cancels_the_rest_of_its_chain)
{
    struct rec w, s, n;
    rec_init(&w), rec_init(&s), rec_init(&n);
    char b[16] = {0};
    submit((struct be_op){.kind = BE_WRITE, .flags = BE_F_LINK, .fd = -1, .caddr = b, .len = sizeof b}, &w);
    submit((struct be_op){.kind = BE_FDATASYNC, .flags = BE_F_LINK, .fd = -1}, &s);
    submit((struct be_op){.kind = BE_NOP}, &n);
    RUN_UNTIL(n.n == 1);
    cr_assert_eq(w.res[0], -EBADF);
    cr_assert_eq(s.res[0], -ECANCELED);
    cr_assert_eq(n.res[0], -ECANCELED);
    cr_assert_eq(w.n + s.n + n.n, 3, "each exactly once");
}

PTest(a_short_read_breaks_the_chain)
{
    int fd = temp_file();
    char b[100];
    cr_assert_eq(pwrite(fd, "0123456789", 10, 0), 10);
    struct rec r, n;
    rec_init(&r), rec_init(&n);
    submit((struct be_op){.kind = BE_READ, .flags = BE_F_LINK, .fd = fd, .addr = b, .len = sizeof b, .off = 0}, &r);
    submit((struct be_op){.kind = BE_NOP}, &n);
    RUN_UNTIL(n.n == 1);
    cr_assert_eq(r.res[0], 10);
    cr_assert_eq(n.res[0], -ECANCELED);
    close(fd);
}

PTest(skip_success_posts_only_failures)
{
    struct rec a, b;
    rec_init(&a), rec_init(&b);
    submit((struct be_op){.kind = BE_NOP, .flags = BE_F_SKIP_SUCCESS}, &a);
    submit((struct be_op){.kind = BE_FSYNC, .flags = BE_F_SKIP_SUCCESS, .fd = -1}, &b);
    RUN_UNTIL(b.n == 1);
    cr_assert_eq(b.res[0], -EBADF);
    pb_wait(&ctx, 1000000);
    pb_reap(&ctx, on_event, NULL);
    cr_assert_eq(a.n, 0, "a success is not posted");
}

/* ---- sockets ---- */

PTest(recv_waits_for_data_then_completes)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char b[32] = {0};
    struct rec r;
    rec_init(&r);
    submit((struct be_op){.kind = BE_RECV, .fd = sv[0], .addr = b, .len = sizeof b}, &r);
    pb_wait(&ctx, 20000000);
    pb_reap(&ctx, on_event, NULL);
    cr_assert_eq(r.n, 0, "nothing to read yet");
    cr_assert_eq(write(sv[1], "hello", 5), 5);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], 5);
    cr_assert_eq(memcmp(b, "hello", 5), 0);
    int fl = fcntl(sv[0], F_GETFL);
    cr_assert_eq(fl & O_NONBLOCK, 0, "a connected socket's mode is left as it was");
    close(sv[0]), close(sv[1]);
}

PTest(send_and_recv_on_both_directions_of_one_socket)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char in[8] = {0};
    struct rec r, s;
    rec_init(&r), rec_init(&s);
    submit((struct be_op){.kind = BE_RECV, .fd = sv[0], .addr = in, .len = sizeof in}, &r);
    submit((struct be_op){.kind = BE_SEND, .fd = sv[0], .caddr = "ping", .len = 4}, &s);
    RUN_UNTIL(s.n == 1);
    cr_assert_eq(s.res[0], 4);
    char peer[8];
    cr_assert_eq(read(sv[1], peer, sizeof peer), 4);
    cr_assert_eq(write(sv[1], "pong", 4), 4);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], 4);
    cr_assert_eq(memcmp(in, "pong", 4), 0);
    close(sv[0]), close(sv[1]);
}

/* A connected pair (sv) and an empty buffer ring of n slots for group bgid. */
static struct pb_bufring *ring_pair(int sv[2], uint16_t bgid, uint32_t n)
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct pb_bufring *ring;
    cr_assert_eq(pb_bufring_create(&ctx, bgid, n, &ring), 0);
    return ring;
}

/* A receive on fd that selects its buffer from group bgid, into r. */
static void recv_select(struct rec *r, int fd, uint16_t bgid, bool multishot)
{
    rec_init(r);
    submit((struct be_op){.kind = BE_RECV, .flags = BE_F_BUF_SELECT | (multishot ? BE_F_MULTISHOT : 0), .buf = bgid,
                          .fd = fd},
           r);
}

/* Unregisters and frees the ring of group bgid; closes fd. */
static void ring_done(struct pb_bufring *ring, uint16_t bgid, int fd)
{
    pb_bufring_unregister(&ctx, ring, bgid);
    pb_bufring_free(ring);
    close(fd);
}

PTest(multishot_recv_picks_buffers_in_ring_order_and_ends_at_eof)
{
    int sv[2];
    struct pb_bufring *ring = ring_pair(sv, 3, 4);
    static char bufs[4][16];
    for (uint16_t i = 0; i < 4; i++)
        pb_bufring_add(ring, bufs[i], sizeof bufs[i], (uint16_t)(10 + i));
    struct rec r;
    recv_select(&r, sv[0], 3, true);
    pb_flush(&ctx);
    for (int m = 0; m < 3; m++) {
        char msg[8];
        int len = snprintf(msg, sizeof msg, "m%d", m);
        cr_assert_eq(write(sv[1], msg, (size_t)len), len);
        RUN_UNTIL(r.n == m + 1);
        cr_assert_eq(r.res[m], len);
        cr_assert(r.flags[m] & BE_CF_MORE, "still armed");
        cr_assert(r.flags[m] & BE_CF_BUFFER);
        uint16_t bid = (uint16_t)(r.flags[m] >> BE_CF_BUFFER_SHIFT);
        cr_assert_eq(bid, 10 + m, "buffers in ring order");
        cr_assert_eq(memcmp(bufs[bid - 10], msg, (size_t)len), 0);
    }
    close(sv[1]);
    RUN_UNTIL(r.n == 4);
    cr_assert_eq(r.res[3], 0, "end of stream");
    cr_assert_eq(r.flags[3] & BE_CF_MORE, 0, "its last completion");
    ring_done(ring, 3, sv[0]);
}

PTest(a_receive_with_its_ring_empty_completes_enobufs)
{
    int sv[2];
    struct pb_bufring *ring = ring_pair(sv, 1, 2);
    cr_assert_eq(write(sv[1], "x", 1), 1);
    struct rec r;
    recv_select(&r, sv[0], 1, true);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], -ENOBUFS);
    cr_assert_eq(r.flags[0] & BE_CF_MORE, 0, "a multishot receive ends");
    ring_done(ring, 1, sv[0]);
    close(sv[1]);
}

/* Its ring empty and nothing to receive, a multishot receive waits (as on
 * io_uring, -ENOBUFS comes only when data arrives with no buffer): a buffer
 * given back before the next message is used for it. */
PTest(an_empty_ring_without_data_waits_instead_of_ending)
{
    int sv[2];
    struct pb_bufring *ring = ring_pair(sv, 2, 1);
    static char b0[16];
    pb_bufring_add(ring, b0, sizeof b0, 7);
    struct rec r;
    recv_select(&r, sv[0], 2, true);
    cr_assert_eq(write(sv[1], "one", 3), 3);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], 3);
    cr_assert(r.flags[0] & BE_CF_MORE);
    /* the only buffer is in use: the receive must wait, not end */
    pb_wait(&ctx, 20000000);
    pb_reap(&ctx, on_event, NULL);
    cr_assert_eq(r.n, 1, "no completion while nothing is pending (got res %d)", r.n > 1 ? r.res[1] : 0);
    pb_bufring_add(ring, b0, sizeof b0, 7); /* given back */
    cr_assert_eq(write(sv[1], "two", 3), 3);
    RUN_UNTIL(r.n == 2);
    cr_assert_eq(r.res[1], 3);
    cr_assert(r.flags[1] & BE_CF_MORE, "still armed");
    cr_assert_eq(memcmp(b0, "two", 3), 0);
    close(sv[1]);
    RUN_UNTIL(r.n == 3);
    cr_assert_eq(r.res[2], 0, "the end of the stream, without a buffer");
    cr_assert_eq(r.flags[2] & BE_CF_MORE, 0);
    ring_done(ring, 2, sv[0]);
}

/* The end of the stream takes no buffer: the receive completes 0 without
 * BE_CF_BUFFER and the buffer stays in the ring, as on io_uring (which
 * recycles a selected buffer a receive of 0 bytes did not fill). A buffer
 * taken there would be lost to its owner, who puts back only the buffers
 * completions name: one per closed connection, until the ring ran dry for
 * every receive of the worker. */
PTest(the_end_of_the_stream_leaves_the_buffer_in_the_ring)
{
    int sv[2];
    struct pb_bufring *ring = ring_pair(sv, 3, 2);
    static char b0[16], b1[16];
    pb_bufring_add(ring, b0, sizeof b0, 4);
    pb_bufring_add(ring, b1, sizeof b1, 5);
    cr_assert_eq(write(sv[1], "last", 4), 4);
    close(sv[1]);
    struct rec r;
    recv_select(&r, sv[0], 3, true);
    RUN_UNTIL(r.n == 2);
    cr_assert_eq(r.res[0], 4);
    cr_assert_eq(r.flags[0], BE_CF_MORE | BE_CF_BUFFER | (4u << BE_CF_BUFFER_SHIFT), "flags %#x", r.flags[0]);
    cr_assert_eq(r.res[1], 0, "the end of the stream");
    cr_assert_eq(r.flags[1], 0, "no buffer, no more: flags %#x", r.flags[1]);
    cr_assert_eq(ring->tail - ring->head, 1, "buffer 5 is still in the ring (head %u, tail %u)", ring->head,
                 ring->tail);
    /* a single-shot receive at the end of the stream: the same */
    struct rec one;
    recv_select(&one, sv[0], 3, false);
    RUN_UNTIL(one.n == 1);
    cr_assert_eq(one.res[0], 0);
    cr_assert_eq(one.flags[0], 0, "flags %#x", one.flags[0]);
    cr_assert_eq(ring->tail - ring->head, 1);
    ring_done(ring, 3, sv[0]);
}

static int listen_loopback(struct sockaddr_in *a)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(l, 0);
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(l, (struct sockaddr *)a, sizeof *a), 0);
    socklen_t len = sizeof *a;
    cr_assert_eq(getsockname(l, (struct sockaddr *)a, &len), 0);
    cr_assert_eq(listen(l, 16), 0);
    return l;
}

PTest(multishot_accept_posts_each_connection_until_cancelled)
{
    struct sockaddr_in a;
    int l = listen_loopback(&a);
    struct rec r, cancel;
    rec_init(&r), rec_init(&cancel);
    submit((struct be_op){.kind = BE_ACCEPT, .flags = BE_F_MULTISHOT, .fd = l}, &r);
    pb_flush(&ctx);
    int cl[3];
    for (int i = 0; i < 3; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert_eq(connect(cl[i], (struct sockaddr *)&a, sizeof a), 0);
        RUN_UNTIL(r.n == i + 1);
        cr_assert_geq(r.res[i], 0, "a descriptor: %d", r.res[i]);
        cr_assert(r.flags[i] & BE_CF_MORE);
        close(r.res[i]);
    }
    submit((struct be_op){.kind = BE_CANCEL, .target = &r.tag}, &cancel);
    RUN_UNTIL(cancel.n == 1 && r.n == 4);
    cr_assert_eq(cancel.res[0], 0);
    cr_assert_eq(r.res[3], -ECANCELED);
    cr_assert_eq(r.flags[3] & BE_CF_MORE, 0);
    for (int i = 0; i < 3; i++)
        close(cl[i]);
    close(l);
}

PTest(direct_accept_fills_a_registered_slot)
{
    struct sockaddr_in a;
    int l = listen_loopback(&a);
    cr_assert_eq(pb_files_register(&ctx, 8), 0);
    cr_assert_eq(pb_files_alloc_range(&ctx, 4, 4), 0);
    struct rec r, rd;
    rec_init(&r), rec_init(&rd);
    submit((struct be_op){.kind = BE_ACCEPT, .flags = BE_F_DIRECT, .fd = l}, &r);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    RUN_UNTIL(r.n == 1);
    cr_assert_eq(r.res[0], 4, "the first slot of the range");
    cr_assert_eq(write(c, "abc", 3), 3);
    char b[8];
    submit((struct be_op){.kind = BE_RECV, .flags = BE_F_FIXED_FILE, .fd = 4, .addr = b, .len = sizeof b}, &rd);
    RUN_UNTIL(rd.n == 1);
    cr_assert_eq(rd.res[0], 3);
    struct rec cl;
    rec_init(&cl);
    submit((struct be_op){.kind = BE_CLOSE, .flags = BE_F_FIXED_FILE, .fd = 4}, &cl);
    RUN_UNTIL(cl.n == 1);
    cr_assert_eq(cl.res[0], 0);
    close(c);
    close(l);
}

PTest(registered_file_reads_through_its_own_reference)
{
    int fd = temp_file();
    cr_assert_eq(pwrite(fd, "registered", 10, 0), 10);
    cr_assert_eq(pb_files_register(&ctx, 4), 0);
    cr_assert_eq(pb_files_update(&ctx, 2, fd), 0);
    close(fd); /* the slot keeps the file, as a registered file does on io_uring */
    char b[16] = {0};
    struct rec r, bad;
    rec_init(&r), rec_init(&bad);
    submit((struct be_op){.kind = BE_READ, .flags = BE_F_FIXED_FILE, .fd = 2, .addr = b, .len = 10, .off = 0}, &r);
    submit((struct be_op){.kind = BE_READ, .flags = BE_F_FIXED_FILE, .fd = 3, .addr = b, .len = 10, .off = 0}, &bad);
    RUN_UNTIL(r.n == 1 && bad.n == 1);
    cr_assert_eq(r.res[0], 10);
    cr_assert_eq(memcmp(b, "registered", 10), 0);
    cr_assert_eq(bad.res[0], -EBADF, "an empty slot");
}

PTest(send_zc_posts_its_result_then_its_notification)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct rec r;
    rec_init(&r);
    submit((struct be_op){.kind = BE_SEND_ZC, .fd = sv[0], .caddr = "zc", .len = 2}, &r);
    RUN_UNTIL(r.n == 2);
    cr_assert_eq(r.res[0], 2);
    cr_assert(r.flags[0] & BE_CF_MORE);
    cr_assert(r.flags[1] & BE_CF_NOTIF);
    cr_assert_eq(r.flags[1] & BE_CF_MORE, 0);
    close(sv[0]), close(sv[1]);
}

PTest(poll_reports_readiness)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    struct rec r;
    rec_init(&r);
    submit((struct be_op){.kind = BE_POLL, .fd = p[0], .arg = POLLIN}, &r);
    pb_wait(&ctx, 10000000);
    pb_reap(&ctx, on_event, NULL);
    cr_assert_eq(r.n, 0);
    cr_assert_eq(write(p[1], "x", 1), 1);
    RUN_UNTIL(r.n == 1);
    cr_assert(r.res[0] & POLLIN);
    close(p[0]), close(p[1]);
}

/* ---- timers, deadlines, cancel ---- */

PTest(timeout_fires_at_its_absolute_deadline_and_can_move_or_go)
{
    struct rec t1, t2, upd, rm;
    rec_init(&t1), rec_init(&t2), rec_init(&upd), rec_init(&rm);
    uint64_t t0 = now_ns();
    submit((struct be_op){.kind = BE_TIMEOUT, .off = t0 + 20000000}, &t1);
    submit((struct be_op){.kind = BE_TIMEOUT, .off = t0 + 10000000}, &t2);
    submit((struct be_op){.kind = BE_TIMEOUT_UPDATE, .target = &t1.tag, .off = t0 + 40000000}, &upd);
    RUN_UNTIL(t2.n == 1);
    cr_assert_eq(t2.res[0], -ETIME);
    cr_assert_geq(t2.at[0], t0 + 10000000, "not before its deadline");
    cr_assert_eq(upd.res[0], 0);
    RUN_UNTIL(t1.n == 1);
    cr_assert_eq(t1.res[0], -ETIME);
    cr_assert_geq(t1.at[0], t0 + 40000000, "at its moved deadline");
    struct rec t3;
    rec_init(&t3);
    submit((struct be_op){.kind = BE_TIMEOUT, .off = now_ns() + 1000000000ull}, &t3);
    submit((struct be_op){.kind = BE_TIMEOUT_REMOVE, .target = &t3.tag}, &rm);
    RUN_UNTIL(rm.n == 1 && t3.n == 1);
    cr_assert_eq(rm.res[0], 0);
    cr_assert_eq(t3.res[0], -ECANCELED);
    struct rec gone;
    rec_init(&gone);
    submit((struct be_op){.kind = BE_TIMEOUT_REMOVE, .target = &t3.tag}, &gone);
    RUN_UNTIL(gone.n == 1);
    cr_assert_eq(gone.res[0], -ENOENT);
}

PTest(a_linked_deadline_cancels_a_receive_that_waits_too_long)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char b[8];
    struct rec r, lt;
    rec_init(&r), rec_init(&lt);
    uint64_t t0 = now_ns();
    submit((struct be_op){.kind = BE_RECV, .flags = BE_F_LINK, .fd = sv[0], .addr = b, .len = sizeof b}, &r);
    submit((struct be_op){.kind = BE_LINK_TIMEOUT, .off = t0 + 20000000}, &lt);
    RUN_UNTIL(r.n == 1 && lt.n == 1);
    cr_assert_eq(r.res[0], -ECANCELED);
    cr_assert_eq(lt.res[0], -ETIME);
    cr_assert_geq(r.at[0], t0 + 20000000);
    /* data in time: the receive completes, the deadline is cancelled */
    struct rec r2, lt2;
    rec_init(&r2), rec_init(&lt2);
    cr_assert_eq(write(sv[1], "ok", 2), 2);
    submit((struct be_op){.kind = BE_RECV, .flags = BE_F_LINK, .fd = sv[0], .addr = b, .len = sizeof b}, &r2);
    submit((struct be_op){.kind = BE_LINK_TIMEOUT, .off = now_ns() + 1000000000ull}, &lt2);
    RUN_UNTIL(r2.n == 1 && lt2.n == 1);
    cr_assert_eq(r2.res[0], 2);
    cr_assert_eq(lt2.res[0], -ECANCELED);
    close(sv[0]), close(sv[1]);
}

PTest(cancel_finds_a_waiting_receive_and_answers_enoent_otherwise)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char b[8];
    struct rec r, c1, c2;
    rec_init(&r), rec_init(&c1), rec_init(&c2);
    submit((struct be_op){.kind = BE_RECV, .fd = sv[0], .addr = b, .len = sizeof b}, &r);
    pb_flush(&ctx);
    submit((struct be_op){.kind = BE_CANCEL, .target = &r.tag}, &c1);
    RUN_UNTIL(c1.n == 1 && r.n == 1);
    cr_assert_eq(c1.res[0], 0);
    cr_assert_eq(r.res[0], -ECANCELED);
    submit((struct be_op){.kind = BE_CANCEL, .target = &r.tag}, &c2);
    RUN_UNTIL(c2.n == 1);
    cr_assert_eq(c2.res[0], -ENOENT);
    /* the descriptor can be waited on again after the cancel */
    struct rec r2;
    rec_init(&r2);
    submit((struct be_op){.kind = BE_RECV, .fd = sv[0], .addr = b, .len = sizeof b}, &r2);
    cr_assert_eq(write(sv[1], "again", 5), 5);
    RUN_UNTIL(r2.n == 1);
    cr_assert_eq(r2.res[0], 5);
    close(sv[0]), close(sv[1]);
}

/* ---- wakes and a stress against a count ---- */

struct waker {
    int fd;
    int count;
};

static void *wake_many(void *arg)
{
    struct waker *w = arg;
    for (int i = 0; i < w->count; i++)
        cr_assert_eq(pb_wake(w->fd), 0);
    return NULL;
}

PTest(wait_returns_when_another_thread_wakes)
{
    struct waker w = {ctx.wake_fd, 1};
    uint64_t t0 = now_ns();
    pthread_t t;
    pthread_create(&t, NULL, wake_many, &w);
    while (wakes == 0) {
        cr_assert_lt(now_ns() - t0, 5000000000ull);
        pb_wait(&ctx, UINT64_MAX); /* no timeout: only the wake ends it */
        pb_reap(&ctx, on_event, NULL);
    }
    pthread_join(t, NULL);
    cr_assert_eq(wakes, 1);
    cr_assert_eq(pb_wake(-1), -EBADF);
}

/* Four threads send 5,000 wakes each while the owner keeps 16 file
 * operations in flight through the pool: every wake is seen once (the
 * eventfd's count), every operation completes exactly once with its result. */
Test(portable, stress_wakes_and_pool_completions_are_each_seen_once, .init = setup, .fini = teardown, .timeout = 120)
{
    int fd = temp_file();
    enum { THREADS = 4, WAKES = 5000, OPS = 4000, INFLIGHT = 16 };
    struct waker w = {ctx.wake_fd, WAKES};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, wake_many, &w);
    static struct rec recs[INFLIGHT];
    static char buf[INFLIGHT][64];
    int submitted = 0, done = 0;
    int active[INFLIGHT] = {0};
    for (int i = 0; i < INFLIGHT; i++)
        rec_init(&recs[i]);
    uint64_t until = now_ns() + 60000000000ull;
    while (done < OPS || wakes < (uint64_t)THREADS * WAKES) {
        cr_assert_lt(now_ns(), until, "stuck: done %d wakes %llu", done, (unsigned long long)wakes);
        for (int i = 0; i < INFLIGHT && submitted < OPS; i++) {
            if (active[i])
                continue;
            rec_init(&recs[i]);
            memset(buf[i], 'a' + i, sizeof buf[i]);
            submit((struct be_op){.kind = BE_WRITE, .fd = fd, .caddr = buf[i], .len = sizeof buf[i],
                                  .off = (uint64_t)i * 64},
                   &recs[i]);
            active[i] = 1;
            submitted++;
        }
        pb_wait(&ctx, 1000000);
        pb_reap(&ctx, on_event, NULL);
        for (int i = 0; i < INFLIGHT; i++)
            if (active[i] && recs[i].n) {
                cr_assert_eq(recs[i].n, 1, "exactly once");
                cr_assert_eq(recs[i].res[0], 64);
                active[i] = 0;
                done++;
            }
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pb_wait(&ctx, 1000000);
    pb_reap(&ctx, on_event, NULL);
    cr_assert_eq(done, OPS);
    cr_assert_eq(wakes, (uint64_t)THREADS * WAKES, "every wake seen once");
    close(fd);
}
