/*
 * tests/unit/test_io_multi.c — the kernel features of tasks' I/O and their
 * fallbacks (urt/io.h rule 7, docs/io.md "Feature probe"). Each test runs
 * with the features the probe found and again with them forbidden through
 * ring_disable, so every fallback is exercised on this kernel:
 *  - multishot accept (and its fallback: one accept re-armed), into the
 *    registered file table too (kernel slot pick, or install), and a full
 *    table: -ENFILE ends the accept on every path;
 *  - multishot receive into a buffer ring run dry on purpose (the receiver
 *    holds every buffer for a while): every byte arrives, in order, no
 *    -ENOBUFS reaches the continuation, end of file ends it; fallbacks: a
 *    receive by readiness into the pool, a pool without a kernel ring; a
 *    dry answer reaped after a buffer came back re-arms the receive;
 *  - zero-copy send (its notification flag) and its copy fallback;
 *  - registered files and buffers (fixed reads and writes, fixed-buffer
 *    zero-copy send), with their refusals; linked timeouts and their timer
 *    fallback;
 *  - the probe's report (urt_runtime_features) and ring_disable masking it.
 */
#include "helpers.h"
#include "io_helpers.h"

#include <poll.h>
#include <pthread.h>

#define NO_IO_FEATURES (URT_RING_MULTISHOT_ACCEPT | URT_RING_MULTISHOT_RECV | URT_RING_BUFRING | URT_RING_SEND_ZC | \
                        URT_RING_FIXED_ACCEPT | URT_RING_LINK_TIMEOUT)

static urt_runtime *rt_with(uint32_t workers, uint32_t disable, uint32_t fixed_files)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.ring_disable = disable;
    cfg.io_fixed_files = fixed_files;
    g_rt = rt_create_or_skip(&cfg);
    return g_rt;
}

static uint32_t io_features(urt_runtime *rt)
{
    struct urt_features f;
    urt_runtime_features(rt, &f);
    return f.io_features;
}

/* Runs fn(arg) in a task and waits for it. */
struct call {
    void (*fn)(void *);
    void *arg;
    _Atomic int done;
};

static enum urt_task_result call_task(struct urt_task *t, void *arg)
{
    struct call *c = arg;
    (void)t;
    c->fn(c->arg);
    atomic_store(&c->done, 1);
    return URT_TASK_DONE;
}

static void on_worker(urt_runtime *rt, uint32_t worker, void (*fn)(void *), void *arg)
{
    struct call c = {fn, arg, 0};
    cr_assert_eq(urt_spawn_to(rt, worker, call_task, NULL, &c, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&c.done), 10000));
}

Test(io_multi, probe_reports_and_ring_disable_masks)
{
    urt_runtime *rt = rt_with(1, 0, 1024);
    uint32_t f = io_features(rt);
    char line[512];
    struct urt_features all;
    urt_runtime_features(rt, &all);
    urt_features_describe(&all, line, sizeof(line));
    cr_log_info("probe: %s", line);
    cr_assert(strstr(line, "io="), "%s", line);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    rt = rt_with(1, NO_IO_FEATURES, 1024);
    cr_assert_eq(io_features(rt), 0u, "ring_disable leaves 0x%x", io_features(rt));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    rt = rt_with(1, URT_RING_SEND_ZC, 1024);
    cr_assert_eq(io_features(rt), f & ~URT_IO_FEAT_SEND_ZC);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- multishot accept -------------------------------------------------------------------------- */

struct acc {
    struct urt_io io;
    int lfd;
    unsigned flags;
    _Atomic int submit_err, calls, more_calls, last_res, ended, bad;
    int fds[64];
    _Atomic int n;
};

static void acc_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct acc *a = arg;
    atomic_fetch_add(&a->calls, 1);
    if (urt_io_flags(io) & URT_IO_F_MORE) {
        atomic_fetch_add(&a->more_calls, 1);
        if (res < 0)
            atomic_store(&a->bad, res);
        else { /* one delivery at a time (rule 7): publish the slot after writing it */
            int i = atomic_load(&a->n);
            a->fds[i % 64] = res;
            atomic_store(&a->n, i + 1);
        }
        return;
    }
    atomic_store(&a->last_res, res);
    atomic_store(&a->ended, 1);
}

static void acc_start(void *arg)
{
    struct acc *a = arg;
    urt_io_init(&a->io, acc_cont, a);
    atomic_store(&a->submit_err, urt_io_accept(&a->io, a->lfd, NULL, NULL, URT_IO_MULTISHOT | a->flags));
}

static void acc_cancel(void *arg)
{
    struct acc *a = arg;
    atomic_store(&a->submit_err, urt_io_cancel(&a->io));
}

struct sendfix {
    int index;
    _Atomic int res;
    struct req r;
};

static void send_fixed(void *arg)
{
    struct sendfix *s = arg;
    s->r = (struct req){.op = OP_SEND, .fd = s->index, .cbuf = "fixed", .len = 5, .uflags = URT_IO_FIXED_FILE};
    urt_io_init(&s->r.io, req_cont, &s->r);
    atomic_store(&s->r.submit_err, req_submit(&s->r));
    atomic_store(&s->r.submitted, 1);
}

static void unregister_slot(void *arg)
{
    struct sendfix *s = arg;
    atomic_store(&s->res, urt_io_unregister_file(s->index));
}

static void multishot_accept_run(uint32_t disable, unsigned flags)
{
    urt_runtime *rt = rt_with(2, disable, 64);
    uint16_t port;
    struct acc a = {.flags = flags};
    a.lfd = tcp_listener(&port);
    on_worker(rt, 0, acc_start, &a);
    cr_assert_eq(atomic_load(&a.submit_err), 0, "%s", urt_last_error());
    enum { K = 10 };
    int cl[K];
    for (int i = 0; i < K; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(cl[i], (struct sockaddr *)&to, sizeof(to)), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&a.n) == K, 5000), "accepted %d of %d", atomic_load(&a.n), K);
    cr_assert_eq(atomic_load(&a.bad), 0, "an accept failed: %d", atomic_load(&a.bad));
    cr_assert_eq(atomic_load(&a.ended), 0);
    if (flags & URT_IO_FIXED_FILE) {
        for (int i = 0; i < K; i++)
            cr_assert(a.fds[i] >= 32 && a.fds[i] < 64, "slot %d is not in the upper half", a.fds[i]);
        /* a connection by its slot: send through it, the client reads it */
        struct sendfix s = {.index = a.fds[0]};
        on_worker(rt, 0, send_fixed, &s);
        cr_assert_eq(wait_op(&s.r), 5, "send on slot %d: %d", s.index, atomic_load(&s.r.res));
        char buf[8];
        int got = -1;
        for (int i = 0; i < K && got != 5; i++) {
            struct pollfd p = {cl[i], POLLIN, 0};
            if (poll(&p, 1, 0) == 1)
                got = (int)read(cl[i], buf, sizeof(buf));
        }
        cr_assert_eq(got, 5, "no client got the bytes sent through the slot");
        for (int i = 0; i < K; i++) {
            s.index = a.fds[i];
            on_worker(rt, 0, unregister_slot, &s);
            cr_assert_eq(atomic_load(&s.res), 0);
        }
        on_worker(rt, 0, unregister_slot, &s);
        cr_assert_eq(atomic_load(&s.res), -EINVAL, "a slot unregistered twice");
    } else {
        for (int i = 0; i < K; i++) {
            cr_assert(fcntl(a.fds[i], F_GETFD) & FD_CLOEXEC);
            close(a.fds[i]);
        }
    }
    on_worker(rt, 0, acc_cancel, &a);
    cr_assert_eq(atomic_load(&a.submit_err), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&a.ended), 5000));
    cr_assert_eq(atomic_load(&a.last_res), -ECANCELED);
    cr_assert_eq(atomic_load(&a.calls), K + 1);
    for (int i = 0; i < K; i++)
        close(cl[i]);
    close(a.lfd);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_multi, multishot_accept)
{
    multishot_accept_run(0, 0);
}

Test(io_multi, multishot_accept_fallback_rearm)
{
    multishot_accept_run(URT_RING_MULTISHOT_ACCEPT, 0);
}

Test(io_multi, accept_into_the_file_table)
{
    multishot_accept_run(0, URT_IO_FIXED_FILE);
}

Test(io_multi, accept_into_the_file_table_fallback_install)
{
    multishot_accept_run(URT_RING_FIXED_ACCEPT | URT_RING_MULTISHOT_ACCEPT, URT_IO_FIXED_FILE);
}

/* A multishot accept into the file table when the table fills up (issue 27,
 * item 8): the same on the kernel's accept into the table and on every
 * fallback. io_fixed_files 8: 4 slots for accepts; 8 clients. The first 4
 * connections come with URT_IO_F_MORE and a slot; the 5th finds no slot: the
 * runtime closes it and the accept ends with -ENFILE (its last call, no
 * URT_IO_F_MORE) — the fallback used to deliver -ENFILE with more to come
 * and go on, closing every later connection too. The other 3 wait in the
 * listen backlog: once the slots were given back, a new accept gets them. */
static void accept_table_full_run(uint32_t disable)
{
    urt_runtime *rt = rt_with(1, disable, 8);
    uint16_t port;
    struct acc a = {.flags = URT_IO_FIXED_FILE};
    a.lfd = tcp_listener(&port);
    on_worker(rt, 0, acc_start, &a);
    cr_assert_eq(atomic_load(&a.submit_err), 0, "%s", urt_last_error());
    enum { K = 8, SLOTS = 4 };
    int cl[K];
    for (int i = 0; i < K; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(cl[i], (struct sockaddr *)&to, sizeof(to)), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&a.ended), 5000), "the accept did not end (%d calls, %d with more)",
              atomic_load(&a.calls), atomic_load(&a.more_calls));
    sleep_us(20000); /* nothing more may come */
    cr_assert_eq(atomic_load(&a.bad), 0, "an -errno with more to come: %d", atomic_load(&a.bad));
    cr_assert_eq(atomic_load(&a.n), SLOTS, "connections delivered: %d", atomic_load(&a.n));
    cr_assert_eq(atomic_load(&a.last_res), -ENFILE, "the last call: %d", atomic_load(&a.last_res));
    cr_assert_eq(atomic_load(&a.calls), SLOTS + 1);
    /* exactly one client was closed (the one with no slot); the others are open */
    int closed = 0;
    for (int i = 0; i < K; i++) {
        struct pollfd p = {cl[i], POLLIN, 0};
        char c;
        if (poll(&p, 1, 0) == 1 && recv(cl[i], &c, 1, MSG_DONTWAIT) <= 0)
            closed++;
    }
    cr_assert_eq(closed, 1, "%d clients closed by the server", closed);
    /* the slots given back, a new accept takes the 3 that waited */
    struct sendfix s;
    for (int i = 0; i < SLOTS; i++) {
        s.index = a.fds[i];
        on_worker(rt, 0, unregister_slot, &s);
        cr_assert_eq(atomic_load(&s.res), 0);
    }
    atomic_store(&a.n, 0);
    atomic_store(&a.ended, 0);
    atomic_store(&a.calls, 0);
    on_worker(rt, 0, acc_start, &a);
    cr_assert_eq(atomic_load(&a.submit_err), 0, "%s", urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&a.n) == K - SLOTS - 1, 5000), "then %d", atomic_load(&a.n));
    cr_assert_eq(atomic_load(&a.ended), 0);
    on_worker(rt, 0, acc_cancel, &a);
    cr_assert(WAIT_UNTIL(atomic_load(&a.ended), 5000));
    cr_assert_eq(atomic_load(&a.last_res), -ECANCELED);
    for (int i = 0; i < K; i++)
        close(cl[i]);
    close(a.lfd);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_multi, accept_into_a_full_table_ends_with_enfile)
{
    accept_table_full_run(0);
}

Test(io_multi, accept_into_a_full_table_ends_with_enfile_fallback_install)
{
    accept_table_full_run(URT_RING_FIXED_ACCEPT);
}

Test(io_multi, accept_into_a_full_table_ends_with_enfile_fallback_rearm)
{
    accept_table_full_run(URT_RING_FIXED_ACCEPT | URT_RING_MULTISHOT_ACCEPT);
}

/* ---- multishot receive into a buffer ring, run dry ------------------------------------------- */

enum { RB_COUNT = 4, RB_SIZE = 64, RB_TOTAL = 64 * 1024 };

struct rb {
    struct urt_io io;
    struct urt_io later;   /* gives the held buffers back after a while */
    struct urt_bufring *br;
    int fd;
    unsigned char got[RB_TOTAL];
    size_t n;
    uint16_t held[RB_COUNT];
    int n_held;
    _Atomic int submit_err, ended, last_res, bad_flags, dry_runs, more_calls, overflow;
    _Atomic int later_out; /* a give-back is pending (the ring must outlive it) */
};

static void rb_give_back(struct urt_io *io, int32_t res, void *arg)
{
    struct rb *r = arg;
    (void)io, (void)res;
    for (int i = 0; i < r->n_held; i++)
        if (urt_bufring_put(r->br, r->held[i]) != 0)
            atomic_store(&r->bad_flags, -2000);
    r->n_held = 0;
    atomic_store(&r->later_out, 0);
}

static void rb_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct rb *r = arg;
    unsigned f = urt_io_flags(io);
    if (!(f & URT_IO_F_MORE)) {
        atomic_store(&r->last_res, res);
        atomic_store(&r->ended, 1);
        return;
    }
    atomic_fetch_add(&r->more_calls, 1);
    uint16_t bid;
    void *b = urt_io_buffer(io, &bid);
    if (res <= 0 || !(f & URT_IO_F_BUFFER) || !b) {
        atomic_store(&r->bad_flags, res <= 0 ? res : -1);
        return;
    }
    if (r->n + (size_t)res > RB_TOTAL) {
        atomic_store(&r->overflow, 1);
        return;
    }
    memcpy(r->got + r->n, b, (size_t)res);
    r->n += (size_t)res;
    r->held[r->n_held++] = bid;
    if (r->n_held == RB_COUNT) { /* the ring is dry now: hold everything 2 ms */
        atomic_fetch_add(&r->dry_runs, 1);
        atomic_store(&r->later_out, 1);
        urt_io_init(&r->later, rb_give_back, r);
        if (urt_io_sleep(&r->later, 2 * 1000 * 1000) != 0)
            rb_give_back(&r->later, 0, r);
    }
}

static void rb_start(void *arg)
{
    struct rb *r = arg;
    int err = urt_bufring_create(RB_COUNT, RB_SIZE, &r->br);
    if (err == 0) {
        urt_io_init(&r->io, rb_cont, r);
        err = urt_io_recv_bufring(&r->io, r->fd, r->br, 0);
    }
    atomic_store(&r->submit_err, err);
}

static void rb_destroy_busy(void *arg)
{
    struct rb *r = arg;
    atomic_store(&r->submit_err, urt_bufring_destroy(r->br));
}

static void rb_destroy(void *arg)
{
    struct rb *r = arg;
    atomic_store(&r->submit_err, urt_bufring_destroy(r->br));
}

static void recv_bufring_run(uint32_t disable)
{
    urt_runtime *rt = rt_with(2, disable, 64);
    int sv[2];
    tcp_pair(sv);
    struct rb *r = calloc(1, sizeof(*r));
    r->fd = sv[0];
    on_worker(rt, 1, rb_start, r);
    cr_assert_eq(atomic_load(&r->submit_err), 0, "%s", urt_last_error());
    on_worker(rt, 1, rb_destroy_busy, r);
    cr_assert_eq(atomic_load(&r->submit_err), -EBUSY, "destroy of a ring in use");
    unsigned char *sent = malloc(RB_TOTAL);
    uint64_t seed = 7;
    for (int i = 0; i < RB_TOTAL; i++)
        sent[i] = (unsigned char)rng_next(&seed);
    for (size_t off = 0; off < RB_TOTAL;) {
        size_t chunk = 1 + rng_next(&seed) % 3000;
        if (chunk > RB_TOTAL - off)
            chunk = RB_TOTAL - off;
        ssize_t w = write(sv[1], sent + off, chunk);
        cr_assert_gt(w, 0);
        off += (size_t)w;
        if (rng_next(&seed) % 8 == 0)
            sleep_us(200);
    }
    shutdown(sv[1], SHUT_WR);
    cr_assert(WAIT_UNTIL(atomic_load(&r->ended), 20000), "no end of file; %zu bytes so far", r->n);
    cr_assert_eq(atomic_load(&r->last_res), 0, "the last completion: %d", atomic_load(&r->last_res));
    cr_assert_eq(atomic_load(&r->bad_flags), 0, "a completion without data or buffer: %d", atomic_load(&r->bad_flags));
    cr_assert_eq(atomic_load(&r->overflow), 0);
    cr_assert_eq(r->n, (size_t)RB_TOTAL, "%zu bytes of %d arrived", r->n, RB_TOTAL);
    cr_assert_eq(memcmp(r->got, sent, RB_TOTAL), 0, "bytes out of order or changed");
    cr_assert_gt(atomic_load(&r->dry_runs), 0, "the ring never ran dry");
    /* the last give-back, before the ring goes (a loaded machine runs a 2 ms sleep late) */
    cr_assert(WAIT_UNTIL(!atomic_load(&r->later_out), 5000), "the last give-back did not run");
    on_worker(rt, 1, rb_destroy, r);
    cr_assert_eq(atomic_load(&r->submit_err), 0, "%s", urt_last_error());
    free(sent);
    free(r);
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_multi, recv_bufring_runs_dry_and_loses_nothing)
{
    recv_bufring_run(0);
}

Test(io_multi, recv_bufring_fallback_single_receives)
{
    recv_bufring_run(URT_RING_MULTISHOT_RECV);
}

Test(io_multi, recv_bufring_fallback_pool)
{
    recv_bufring_run(URT_RING_BUFRING | URT_RING_MULTISHOT_RECV);
}

/* The ring's dry answer and a buffer's return cross: receive B is armed
 * (from A's continuation, which holds the ring's only buffer) on a socket
 * with data, and the backend answers -ENOBUFS as the task's submissions
 * leave; the next task, before the worker reaps that answer, gives A's
 * buffer back, with no receive waiting yet. B must still get its bytes: a
 * receive that would wait for a buffer given back after it was armed is
 * armed again instead (else it waits for a return that never comes: every
 * buffer is in the ring). 8 rounds, each on a new ring and sockets: one may
 * reap between the two tasks (the worker looks for completions every 64
 * tasks), not all of them. */
struct cross {
    struct urt_io a, b;
    struct urt_bufring *br;
    int fa, fb;
    uint16_t bid_a;
    char b_data[8];
    _Atomic int err, a_got, b_got, a_end, b_end, b_bad;
};

static enum urt_task_result cross_put_a(struct urt_task *t, void *arg)
{
    struct cross *x = arg;
    (void)t;
    if (urt_bufring_put(x->br, x->bid_a) != 0)
        atomic_store(&x->err, -3000);
    return URT_TASK_DONE;
}

static void cross_b(struct urt_io *io, int32_t res, void *arg)
{
    struct cross *x = arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        atomic_store(&x->b_end, 1);
        return;
    }
    uint16_t bid;
    void *b = urt_io_buffer(io, &bid);
    if (res <= 0 || res > (int32_t)sizeof x->b_data || !b) {
        atomic_store(&x->b_bad, res <= 0 ? res - 1 : res);
        return;
    }
    memcpy(x->b_data, b, (size_t)res);
    if (urt_bufring_put(x->br, bid) != 0)
        atomic_store(&x->err, -4000);
    atomic_store(&x->b_got, res);
}

static void cross_a(struct urt_io *io, int32_t res, void *arg)
{
    struct cross *x = arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        atomic_store(&x->a_end, 1);
        return;
    }
    if (res <= 0 || !urt_io_buffer(io, &x->bid_a)) {
        atomic_store(&x->err, -2000);
        return;
    }
    atomic_store(&x->a_got, res);
    /* hold the ring's only buffer; arm B on its data; give the buffer back from the next task */
    urt_io_init(&x->b, cross_b, x);
    int err = urt_io_recv_bufring(&x->b, x->fb, x->br, 0);
    if (!err)
        err = urt_spawn_to(g_rt, 0, cross_put_a, NULL, x, 0);
    if (err)
        atomic_store(&x->err, err);
}

static void cross_start(void *arg)
{
    struct cross *x = arg;
    int err = urt_bufring_create(1, 64, &x->br);
    if (!err) {
        urt_io_init(&x->a, cross_a, x);
        err = urt_io_recv_bufring(&x->a, x->fa, x->br, 0);
    }
    atomic_store(&x->err, err);
}

static void cross_destroy(void *arg)
{
    struct cross *x = arg;
    atomic_store(&x->err, urt_bufring_destroy(x->br));
}

static void dry_answer_crosses_a_return_run(uint32_t disable)
{
    urt_runtime *rt = rt_with(1, disable, 64);
    for (int round = 0; round < 8; round++) {
        int pa[2], pb[2];
        tcp_pair(pa);
        tcp_pair(pb);
        cr_assert_eq(write(pb[1], "bee", 3), 3); /* B's data waits before B is armed */
        struct cross *x = calloc(1, sizeof(*x));
        x->fa = pa[0];
        x->fb = pb[0];
        on_worker(rt, 0, cross_start, x);
        cr_assert_eq(atomic_load(&x->err), 0, "%s", urt_last_error());
        cr_assert_eq(write(pa[1], "a", 1), 1);
        cr_assert(WAIT_UNTIL(atomic_load(&x->a_got) == 1, 5000), "round %d: A got nothing", round);
        cr_assert(WAIT_UNTIL(atomic_load(&x->b_got) != 0 || atomic_load(&x->b_bad) != 0, 5000),
                  "round %d: receive B waits for a buffer that is in the ring", round);
        cr_assert_eq(atomic_load(&x->b_bad), 0, "round %d: B's completion %d", round, atomic_load(&x->b_bad));
        cr_assert_eq(atomic_load(&x->b_got), 3);
        cr_assert_eq(memcmp(x->b_data, "bee", 3), 0);
        cr_assert_eq(atomic_load(&x->err), 0, "round %d: %d", round, atomic_load(&x->err));
        shutdown(pa[1], SHUT_WR);
        shutdown(pb[1], SHUT_WR);
        cr_assert(WAIT_UNTIL(atomic_load(&x->a_end) && atomic_load(&x->b_end), 5000), "round %d: no end of file",
                  round);
        on_worker(rt, 0, cross_destroy, x);
        cr_assert_eq(atomic_load(&x->err), 0, "round %d: urt_bufring_destroy: %s", round, urt_last_error());
        free(x);
        close(pa[0]), close(pa[1]), close(pb[0]), close(pb[1]);
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_multi, recv_bufring_dry_answer_crossing_a_return_is_armed_again)
{
    dry_answer_crosses_a_return_run(0);
}

Test(io_multi, recv_bufring_dry_answer_crossing_a_return_is_armed_again_single_receives)
{
    dry_answer_crosses_a_return_run(URT_RING_MULTISHOT_RECV);
}

static void rb_leave_armed(void *arg)
{
    rb_start(arg);
}

Test(io_multi, destroy_with_a_multishot_receive_and_its_ring)
{
    /* a receive in flight and a ring nobody destroyed: cancelled, freed (LSan) */
    urt_runtime *rt = rt_with(1, 0, 64);
    int sv[2];
    tcp_pair(sv);
    struct rb *r = calloc(1, sizeof(*r));
    r->fd = sv[0];
    on_worker(rt, 0, rb_leave_armed, r);
    cr_assert_eq(atomic_load(&r->submit_err), 0);
    cr_assert_eq(write(sv[1], "abc", 3), 3);
    cr_assert(WAIT_UNTIL(atomic_load(&r->more_calls) >= 1, 5000));
    rt_destroy_clean(rt, URT_SHUTDOWN_CANCEL, -1);
    cr_assert_eq(atomic_load(&r->ended), 1);
    cr_assert_eq(atomic_load(&r->last_res), -ECANCELED);
    free(r);
    close(sv[0]);
    close(sv[1]);
}

/* ---- zero-copy send, registered files and buffers ------------------------------------------- */

static void zc_run(uint32_t disable, bool expect_notif)
{
    urt_runtime *rt = rt_with(1, disable, 64);
    int sv[2];
    tcp_pair(sv);
    enum { N = 32 * 1024 };
    char *buf = malloc(N), *got = malloc(N);
    for (int i = 0; i < N; i++)
        buf[i] = (char)(i * 7);
    struct req s = {.op = OP_SEND, .fd = sv[0], .cbuf = buf, .len = N, .uflags = URT_IO_ZEROCOPY};
    start_op(rt, &s);
    size_t have = 0;
    while (have < N) {
        ssize_t r = read(sv[1], got + have, N - have);
        cr_assert_gt(r, 0);
        have += (size_t)r;
    }
    int32_t res = wait_op(&s);
    cr_assert_eq(res, N);
    cr_assert_eq(memcmp(buf, got, N), 0);
    cr_assert_eq(atomic_load(&s.calls), 1, "one continuation call for the send and its notification");
    cr_assert_eq((urt_io_flags(&s.io) & URT_IO_F_NOTIF) != 0, expect_notif, "flags 0x%x", urt_io_flags(&s.io));
    free(buf);
    free(got);
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(io_multi, zero_copy_send)
{
    urt_runtime *probe = rt_with(1, 0, 0);
    bool zc = io_features(probe) & URT_IO_FEAT_SEND_ZC;
    rt_destroy_clean(probe, URT_SHUTDOWN_DRAIN, 0);
    zc_run(0, zc);
}

Test(io_multi, zero_copy_send_fallback_copy)
{
    zc_run(URT_RING_SEND_ZC, false);
}

struct fixed {
    char *dir;
    int fd, sock;
    char *mem;
    _Atomic int r[16];
    struct req q;
};

static void fixed_refusals(void *arg)
{
    struct fixed *f = arg;
    int i = 0;
    struct iovec iov = {f->mem, 8192};
    f->r[i++] = urt_io_register_buffers(&iov, 1);
    f->r[i++] = urt_io_register_buffers(&iov, 1);      /* -EBUSY */
    f->r[i++] = urt_io_register_buffers(NULL, 1);      /* -EINVAL */
    f->r[i++] = urt_io_register_file(f->sock);         /* slot 0 */
    f->r[i++] = urt_io_register_file(f->sock);         /* slot 1 */
    f->r[i++] = urt_io_register_file(f->sock);         /* -ENFILE (io_fixed_files 4: 2 of ours) */
    f->r[i++] = urt_io_register_file(-3);              /* -EBADF */
    f->r[i++] = urt_io_unregister_file(1);
    f->r[i++] = urt_io_unregister_file(1);             /* -EINVAL */
    f->r[i++] = urt_io_unregister_file(3);             /* -EINVAL: the upper half, never used */
    static char outside[8];
    static struct urt_io io;
    urt_io_init(&io, req_cont_discard, NULL);
    f->r[i++] = urt_io_send(&io, f->sock, outside, 8, 0, URT_IO_FIXED_BUF); /* -EINVAL */
    f->r[15] = i;
}

static void fixed_write(void *arg)
{
    struct fixed *f = arg;
    urt_io_init(&f->q.io, req_cont, &f->q);
    atomic_store(&f->q.submit_err, req_submit(&f->q));
    atomic_store(&f->q.submitted, 1);
}

Test(io_multi, registered_files_and_buffers)
{
    urt_runtime *rt = rt_with(1, 0, 4);
    struct fixed f = {0};
    f.dir = test_tmpdir("urt-io-fixed");
    char path[4200];
    snprintf(path, sizeof(path), "%s/f", f.dir);
    f.fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    int sv[2];
    tcp_pair(sv);
    f.sock = sv[0];
    f.mem = aligned_alloc(4096, 8192);
    on_worker(rt, 0, fixed_refusals, &f);
    int expect[] = {0, -EBUSY, -EINVAL, 0, 1, -ENFILE, -EBADF, 0, -EINVAL, -EINVAL, -EINVAL};
    int n = (int)(sizeof(expect) / sizeof(expect[0]));
    cr_assert_eq(atomic_load(&f.r[15]), n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&f.r[i]), expect[i], "case %d: %d, expected %d", i, atomic_load(&f.r[i]),
                     expect[i]);
    /* a write and a read through the registered buffer (fixed-buffer operations) */
    memcpy(f.mem + 100, "registered", 10);
    f.q = (struct req){.op = OP_WRITE, .fd = f.fd, .cbuf = f.mem + 100, .len = 10, .off = 0};
    on_worker(rt, 0, fixed_write, &f);
    cr_assert_eq(wait_op(&f.q), 10);
    char chk[10];
    cr_assert_eq(pread(f.fd, chk, 10, 0), 10);
    cr_assert_eq(memcmp(chk, "registered", 10), 0);
    memset(f.mem, 0, 64);
    f.q = (struct req){.op = OP_READ, .fd = f.fd, .buf = f.mem + 4, .len = 10, .off = 0};
    on_worker(rt, 0, fixed_write, &f);
    cr_assert_eq(wait_op(&f.q), 10);
    cr_assert_eq(memcmp(f.mem + 4, "registered", 10), 0);
    /* a zero-copy send from the registered buffer */
    f.q = (struct req){.op = OP_SEND, .fd = sv[0], .cbuf = f.mem + 4, .len = 10,
                       .uflags = URT_IO_FIXED_BUF | URT_IO_ZEROCOPY};
    on_worker(rt, 0, fixed_write, &f);
    cr_assert_eq(wait_op(&f.q), 10);
    cr_assert_eq(read(sv[1], chk, 10), 10);
    cr_assert_eq(memcmp(chk, "registered", 10), 0);
    /* a send through the slot registered first (0) */
    f.q = (struct req){.op = OP_SEND, .fd = 0, .cbuf = "slot", .len = 4, .uflags = URT_IO_FIXED_FILE};
    on_worker(rt, 0, fixed_write, &f);
    cr_assert_eq(wait_op(&f.q), 4);
    cr_assert_eq(read(sv[1], chk, 4), 4);
    cr_assert_eq(memcmp(chk, "slot", 4), 0);
    close(f.fd);
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(f.mem);
    test_remove_dir(f.dir);
}

Test(io_multi, linked_timeout_fallback_timer)
{
    urt_runtime *rt = rt_with(1, URT_RING_LINK_TIMEOUT, 0);
    int sv[2];
    tcp_pair(sv);
    char buf[8];
    uint64_t t0 = urt_now_ns();
    struct req r = {.op = OP_RECV, .fd = sv[0], .buf = buf, .len = sizeof(buf), .timeout_ns = 30 * 1000 * 1000};
    cr_assert_eq(run_op(rt, &r), -ETIME);
    cr_assert_geq(urt_now_ns() - t0, 30 * 1000 * 1000ull);
    cr_assert_eq(write(sv[1], "ok", 2), 2);
    struct req r2 = {.op = OP_RECV, .fd = sv[0], .buf = buf, .len = sizeof(buf), .timeout_ns = 5000000000ull};
    uint64_t t1 = urt_now_ns();
    cr_assert_eq(run_op(rt, &r2), 2);
    cr_assert_lt(urt_now_ns() - t1, 4000000000ull, "the timer was not removed with the completion");
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

struct mref {
    _Atomic int r[12];
    urt_tx *tx;
};

static enum urt_task_result tx_multishot(struct urt_task *t, void *arg)
{
    struct mref *m = arg;
    static struct urt_io io;
    (void)t;
    urt_io_init(&io, req_cont_discard, NULL);
    m->r[0] = urt_io_accept(&io, 0, NULL, NULL, URT_IO_MULTISHOT);
    m->r[7] = 1;
    return URT_TASK_DONE;
}

static void bufring_refusals(void *arg)
{
    struct mref *m = arg;
    struct urt_bufring *br = NULL;
    static struct urt_io io;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    m->r[1] = urt_bufring_create(3, 64, &br);
    m->r[2] = urt_bufring_create(4, 0, &br);
    m->r[3] = urt_bufring_create(4, 64, NULL);
    urt_io_init(&io, req_cont_discard, NULL);
    m->r[4] = urt_io_recv_bufring(&io, 0, NULL, 0);
    m->r[5] = urt_io_accept(&io, 0, (struct sockaddr *)&ss, &sl, URT_IO_MULTISHOT);
    m->r[6] = urt_bufring_create(4, 64, &br);
    m->r[8] = urt_bufring_put(br, 9);  /* out of range */
    m->r[9] = urt_bufring_put(br, 0);  /* not held: refused, the ring stays whole */
    m->r[10] = urt_bufring_put(NULL, 0);
    if (urt_bufring_destroy(br))
        m->r[6] = -1000;
}

Test(io_multi, refusals)
{
    urt_runtime *rt = rt_with(1, 0, 64);
    struct mref m = {0};
    cr_assert_eq(urt_tx_begin(rt, NULL, &m.tx), 0);
    cr_assert_eq(urt_tx_spawn(m.tx, tx_multishot, NULL, &m, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&m.r[7]), 5000));
    cr_assert_eq(atomic_load(&m.r[0]), -EOPNOTSUPP, "multishot in a transaction");
    urt_tx_release(m.tx);
    on_worker(rt, 0, bufring_refusals, &m);
    cr_assert_eq(atomic_load(&m.r[1]), -EINVAL, "count not a power of two");
    cr_assert_eq(atomic_load(&m.r[2]), -EINVAL, "size 0");
    cr_assert_eq(atomic_load(&m.r[3]), -EINVAL, "out NULL");
    cr_assert_eq(atomic_load(&m.r[4]), -EINVAL, "br NULL");
    cr_assert_eq(atomic_load(&m.r[5]), -EINVAL, "multishot accept with addr");
    cr_assert_eq(atomic_load(&m.r[6]), 0);
    cr_assert_eq(atomic_load(&m.r[8]), -EINVAL, "put of a buffer out of range");
    cr_assert_eq(atomic_load(&m.r[9]), -EINVAL, "put of a buffer not held");
    cr_assert_eq(atomic_load(&m.r[10]), -EINVAL, "put with br NULL");
    struct urt_bufring *br;
    cr_assert_eq(urt_bufring_create(4, 64, &br), -EPERM, "not from a thread that is not a worker");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* io_fixed_files 0: no file table, so an accept into it is refused with
 * -ENOMEM (urt/io.h), single and multishot alike, and nothing is submitted. */
struct notable {
    _Atomic int r[4];
    _Atomic int worker_after;
};

static void no_table_refusals(void *arg)
{
    struct notable *n = arg;
    static struct urt_io io;
    urt_io_init(&io, req_cont_discard, NULL);
    n->r[0] = urt_io_accept(&io, 0, NULL, NULL, URT_IO_FIXED_FILE);
    n->r[1] = urt_io_accept(&io, 0, NULL, NULL, URT_IO_FIXED_FILE | URT_IO_MULTISHOT);
    n->r[2] = urt_io_register_file(1);
    n->worker_after = urt_io_worker(&io);
    n->r[3] = 1;
}

Test(io_multi, accept_into_the_file_table_without_a_table)
{
    urt_runtime *rt = rt_with(1, 0, 0);
    struct notable n = {0};
    on_worker(rt, 0, no_table_refusals, &n);
    cr_assert_eq(atomic_load(&n.r[3]), 1);
    cr_assert_eq(atomic_load(&n.r[0]), -ENOMEM, "single accept: %d", atomic_load(&n.r[0]));
    cr_assert_eq(atomic_load(&n.r[1]), -ENOMEM, "multishot accept: %d", atomic_load(&n.r[1]));
    cr_assert_eq(atomic_load(&n.r[2]), -ENOMEM, "register_file: %d", atomic_load(&n.r[2]));
    cr_assert_eq(atomic_load(&n.worker_after), -1, "a refused accept was submitted");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- a lane's multishot receive: continuations on another worker --------------------------- */

struct lanerx {
    struct urt_io io;
    struct urt_bufring *br;
    int fd;
    _Atomic int io_worker, ended, last_res, bad, inside;
    _Atomic uint32_t workers_seen; /* bit per worker a continuation ran on */
    unsigned char next;
    _Atomic uint64_t got;
    _Atomic int busy_stop[2];
};

static void lanerx_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct lanerx *x = arg;
    if (atomic_exchange(&x->inside, 1))
        atomic_store(&x->bad, 1);
    atomic_fetch_or(&x->workers_seen, 1u << urt_current_worker(g_rt));
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        atomic_store(&x->last_res, res);
        atomic_store(&x->ended, 1);
        atomic_store(&x->inside, 0);
        return;
    }
    uint16_t bid;
    const unsigned char *b = urt_io_buffer(io, &bid);
    for (int32_t i = 0; b && i < res; i++)
        if (b[i] != x->next++)
            atomic_store(&x->bad, 2);
    atomic_fetch_add(&x->got, (uint64_t)res);
    if (urt_bufring_put(x->br, bid) != 0) /* from whichever worker the lane runs on */
        atomic_store(&x->bad, 5);
    atomic_store(&x->inside, 0);
}

static enum urt_task_result lanerx_start(struct urt_task *t, void *arg)
{
    struct lanerx *x = arg;
    (void)t;
    atomic_store(&x->io_worker, urt_current_worker(g_rt));
    urt_io_init(&x->io, lanerx_cont, x);
    if (urt_bufring_create(2, 256, &x->br) || urt_io_recv_bufring(&x->io, x->fd, x->br, 0))
        atomic_store(&x->bad, 3);
    return URT_TASK_DONE;
}

static enum urt_task_result busy_task(struct urt_task *t, void *arg)
{
    (void)t;
    if (atomic_load((_Atomic int *)arg))
        return URT_TASK_DONE;
    sleep_us(50);
    return URT_TASK_YIELD; /* stays the head of its pinned lane: the worker has an active lane */
}

static enum urt_task_result lanerx_ring_destroy(struct urt_task *t, void *arg)
{
    struct lanerx *x = arg;
    (void)t;
    if (urt_bufring_destroy(x->br))
        atomic_store(&x->bad, 4);
    return URT_TASK_DONE;
}

/* Activates the receive's lane from worker 1: a worker's activation is
 * balanced, and worker 0 owns an active lane, so the lane starts on worker 1
 * (an activation from a thread that is not a worker would go to that
 * thread's preferred worker instead). */
struct lanerx_go {
    urt_lane *l;
    struct lanerx *x;
};

static enum urt_task_result lanerx_activate(struct urt_task *t, void *arg)
{
    struct lanerx_go *g = arg;
    (void)t;
    if (urt_lane_spawn(g->l, lanerx_start, NULL, g->x, 0))
        atomic_store(&g->x->bad, 6);
    return URT_TASK_DONE;
}

Test(io_multi, lane_multishot_hops_workers_and_puts_from_afar)
{
    urt_runtime *rt = rt_with(2, 0, 64);
    int sv[2];
    tcp_pair(sv);
    struct lanerx *x = calloc(1, sizeof(*x));
    x->fd = sv[0];
    urt_lane *busy0, *busy1, *l;
    /* worker 0 owns an active lane, so the receive's lane starts on worker 1 */
    cr_assert_eq(urt_lane_create_on(rt, 0, &busy0), 0);
    cr_assert_eq(urt_lane_spawn(busy0, busy_task, NULL, &x->busy_stop[0], 0), 0);
    sleep_us(2000);
    cr_assert_eq(urt_lane_create(rt, &l), 0);
    struct lanerx_go go = {l, x};
    cr_assert_eq(urt_spawn_to(rt, 1, lanerx_activate, NULL, &go, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&x->io_worker) == 1 || atomic_load(&x->bad), 5000));
    cr_assert_eq(atomic_load(&x->bad), 0);
    cr_assert_eq(atomic_load(&x->io_worker), 1, "the lane started on worker %d", atomic_load(&x->io_worker));
    /* now worker 1 is the loaded one: the lane's continuations go to worker 0 */
    atomic_store(&x->busy_stop[0], 1);
    cr_assert_eq(urt_lane_create_on(rt, 1, &busy1), 0);
    cr_assert_eq(urt_lane_spawn(busy1, busy_task, NULL, &x->busy_stop[1], 0), 0);
    sleep_us(2000);
    unsigned char next = 0, chunk[300];
    uint64_t sent = 0;
    for (int i = 0; i < 200; i++) {
        size_t n = 1 + (size_t)(i * 37) % sizeof(chunk);
        for (size_t j = 0; j < n; j++)
            chunk[j] = next++;
        cr_assert_eq(write(sv[1], chunk, n), (ssize_t)n);
        sent += n;
        if (i % 10 == 0)
            sleep_us(500);
    }
    shutdown(sv[1], SHUT_WR);
    cr_assert(WAIT_UNTIL(atomic_load(&x->ended), 10000), "got %llu of %llu", (unsigned long long)atomic_load(&x->got),
              (unsigned long long)sent);
    atomic_store(&x->busy_stop[1], 1);
    cr_assert_eq(atomic_load(&x->bad), 0, "bad %d", atomic_load(&x->bad));
    cr_assert_eq(atomic_load(&x->last_res), 0);
    cr_assert_eq(atomic_load(&x->got), sent);
    cr_assert(atomic_load(&x->workers_seen) & 1u, "no continuation ran on worker 0 (mask 0x%x)",
              atomic_load(&x->workers_seen));
    cr_assert(WAIT_UNTIL(urt_lane_pending(l) == 0 && urt_lane_pending(busy0) == 0 && urt_lane_pending(busy1) == 0,
                         5000));
    cr_assert_eq(urt_spawn_to(rt, 1, lanerx_ring_destroy, NULL, x, 0), 0);
    sleep_us(5000);
    cr_assert_eq(atomic_load(&x->bad), 0, "the ring's destroy failed");
    cr_assert_eq(urt_lane_destroy(l), 0);
    cr_assert_eq(urt_lane_destroy(busy0), 0);
    cr_assert_eq(urt_lane_destroy(busy1), 0);
    close(sv[0]);
    close(sv[1]);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(x);
}

/* destroy(CANCEL) with multishot completions queued behind a busy task: the
 * continuations that run after the workers stopped (on the destroying thread)
 * never get a pointer into a freed buffer ring (ASan reads every byte they
 * are handed): the rings live until destroy cancelled the queues, so such a
 * completion comes with its data in its buffer, in order, and the buffer may
 * be put back there (urt/io.h rule 9). On the probed ring and on the pool
 * fallback. */
struct uaf {
    struct urt_io io;
    struct urt_bufring *br;
    int fd, peer;
    _Atomic int armed, busy, go, calls, ended, bad;
    _Atomic uint64_t off_worker_bytes;
    uint64_t pos;
};

static void uaf_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct uaf *u = arg;
    unsigned f = urt_io_flags(io);
    atomic_fetch_add(&u->calls, 1);
    uint16_t bid;
    unsigned char *b = urt_io_buffer(io, &bid);
    if (b) {
        if (res <= 0 || !(f & URT_IO_F_BUFFER))
            atomic_store(&u->bad, 1);
        for (int32_t i = 0; i < res; i++, u->pos++) /* a freed buffer is a use-after-free here */
            if (b[i] != (unsigned char)"0123456789abcdef"[u->pos % 16])
                atomic_store(&u->bad, 3);
        if (urt_current_worker(g_rt) < 0)
            atomic_fetch_add(&u->off_worker_bytes, (uint64_t)res);
        if (urt_bufring_put(u->br, bid) != 0)
            atomic_store(&u->bad, 4);
    } else if (res > 0 && (f & URT_IO_F_BUFFER)) {
        atomic_store(&u->bad, 2); /* data said to be in a buffer, and no buffer */
    } else if (f & URT_IO_F_MORE) {
        atomic_store(&u->bad, 5); /* more to come, and no data */
    }
    if (!(f & URT_IO_F_MORE))
        atomic_store(&u->ended, 1);
}

static void uaf_arm(void *arg)
{
    struct uaf *u = arg;
    int err = urt_bufring_create(8, 64, &u->br);
    if (!err) {
        urt_io_init(&u->io, uaf_cont, u);
        err = urt_io_recv_bufring(&u->io, u->fd, u->br, 0);
    }
    atomic_store(&u->armed, err ? err : 1);
}

/* A lane task that yields until the runtime is destroyed: it stays the
 * lane's head, so the receive's continuations (tasks of the same lane) queue
 * up behind it while the worker reaps their completions between its runs;
 * destroy(CANCEL) then cancels them off the workers, after the rings were
 * freed. */
static enum urt_task_result uaf_hold(struct urt_task *t, void *arg)
{
    struct uaf *u = arg;
    (void)t;
    atomic_store(&u->busy, 1);
    return URT_TASK_YIELD;
}

static enum urt_task_result uaf_arm_task(struct urt_task *t, void *arg)
{
    (void)t;
    uaf_arm(arg);
    return URT_TASK_DONE;
}

static void destroy_with_queued_buffers(uint32_t disable)
{
    for (int round = 0; round < 4; round++) {
        urt_runtime *rt = rt_with(1, disable, 64);
        g_rt = rt;
        int sv[2];
        tcp_pair(sv);
        struct uaf *u = calloc(1, sizeof(*u));
        cr_assert_not_null(u);
        u->fd = sv[0];
        u->peer = sv[1];
        urt_lane *lane;
        cr_assert_eq(urt_lane_create(rt, &lane), 0);
        struct urt_task arm, hold;
        urt_task_init(&arm, uaf_arm_task, u);
        urt_task_init(&hold, uaf_hold, u);
        cr_assert_eq(urt_lane_submit(lane, &arm, 0), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&u->armed) != 0, 10000));
        cr_assert_eq(atomic_load(&u->armed), 1, "arming: %d", atomic_load(&u->armed));
        cr_assert_eq(urt_lane_submit(lane, &hold, 0), 0);
        cr_assert(WAIT_UNTIL(atomic_load(&u->busy), 10000));
        for (int i = 0; i < 6; i++) {
            cr_assert_eq(write(sv[1], "0123456789abcdef", 16), 16);
            sleep_us(1000);
        }
        sleep_us(5000); /* the completions are reaped and queued behind the holder */
        cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
        cr_assert_eq(atomic_load(&u->ended), 1, "round %d: the receive never ended", round);
        cr_assert_eq(atomic_load(&u->bad), 0, "round %d: bad completion (%d)", round, atomic_load(&u->bad));
        cr_log_info("round %d: %llu bytes delivered on the destroying thread", round,
                    (unsigned long long)atomic_load(&u->off_worker_bytes));
        cr_assert_eq(urt_lane_destroy(lane), 0);
        close(sv[0]);
        close(sv[1]);
        free(u);
    }
}

Test(io_multi, destroy_cancel_hands_out_no_freed_buffer)
{
    destroy_with_queued_buffers(0);
}

Test(io_multi, destroy_cancel_hands_out_no_freed_buffer_fallback_pool)
{
    destroy_with_queued_buffers(URT_RING_MULTISHOT_RECV | URT_RING_BUFRING);
}

/* destroy(CANCEL) while a task on another worker holds a buffer of worker
 * 0's ring (issue 27, item 7): worker 0 receives into its ring and hands the
 * buffer to a task on worker 1, which gives it back only once worker 0 has
 * left (its thread, "urt-w0", is gone from /proc/self/task). The ring, its
 * buffers and worker 0's I/O state must still be there: the holder reads
 * the bytes (ASan checks each) and the put is accepted (0); the runtime
 * frees them once every worker stopped (LSan: nothing left). On the probed
 * ring and on the pool fallback. */
struct held {
    struct urt_io io;
    struct urt_bufring *br;
    urt_runtime *rt;
    int fd;
    _Atomic int armed, holding, destroying, ended, last_res, put_res, bad;
    unsigned char *buf;
    uint16_t bid;
    int32_t len;
    struct urt_task hold;
};

static enum urt_task_result held_hold(struct urt_task *t, void *arg)
{
    struct held *h = arg;
    (void)t;
    atomic_store(&h->holding, 1);
    while (!atomic_load(&h->destroying))
        sleep_us(200);
    if (!WAIT_UNTIL(!thread_named("urt-w0"), 10000))
        atomic_store(&h->bad, 1); /* worker 0 never left */
    for (int32_t i = 0; i < h->len; i++)
        if (h->buf[i] != (unsigned char)('a' + i % 26)) /* a freed buffer is a use-after-free here */
            atomic_store(&h->bad, 2);
    atomic_store(&h->put_res, urt_bufring_put(h->br, h->bid));
    return URT_TASK_DONE;
}

static void held_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct held *h = arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) {
        atomic_store(&h->last_res, res);
        atomic_store(&h->ended, 1);
        return;
    }
    uint16_t bid;
    unsigned char *b = urt_io_buffer(io, &bid);
    if (!b || res <= 0 || h->buf) {
        atomic_store(&h->bad, 3);
        if (b)
            urt_bufring_put(h->br, bid);
        return;
    }
    h->buf = b;
    h->bid = bid;
    h->len = res;
    urt_task_init(&h->hold, held_hold, h);
    if (urt_task_submit_to(h->rt, 1, &h->hold, 0) != 0) /* worker 1 holds it */
        atomic_store(&h->bad, 4);
}

static void held_arm(void *arg)
{
    struct held *h = arg;
    int err = urt_bufring_create(4, 64, &h->br);
    if (!err) {
        urt_io_init(&h->io, held_cont, h);
        err = urt_io_recv_bufring(&h->io, h->fd, h->br, 0);
    }
    atomic_store(&h->armed, err ? err : 1);
}

static void destroy_with_a_buffer_held_elsewhere(uint32_t disable)
{
    urt_runtime *rt = rt_with(2, disable, 64);
    int sv[2];
    tcp_pair(sv);
    struct held *h = calloc(1, sizeof(*h));
    cr_assert_not_null(h);
    h->rt = rt;
    h->fd = sv[0];
    atomic_store(&h->put_res, 1);
    on_worker(rt, 0, held_arm, h);
    cr_assert_eq(atomic_load(&h->armed), 1, "arming: %d (%s)", atomic_load(&h->armed), urt_last_error());
    char msg[40];
    for (int i = 0; i < (int)sizeof(msg); i++)
        msg[i] = (char)('a' + i % 26);
    cr_assert_eq(write(sv[1], msg, sizeof(msg)), (ssize_t)sizeof(msg));
    cr_assert(WAIT_UNTIL(atomic_load(&h->holding) || atomic_load(&h->bad), 10000));
    cr_assert_eq(atomic_load(&h->bad), 0, "bad %d", atomic_load(&h->bad));
    atomic_store(&h->destroying, 1);
    cr_assert_geq(urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL), 0);
    cr_assert_eq(atomic_load(&h->bad), 0, "bad %d", atomic_load(&h->bad));
    cr_assert_eq(atomic_load(&h->ended), 1, "the receive never ended");
    cr_assert_eq(atomic_load(&h->last_res), -ECANCELED);
    cr_assert_eq(atomic_load(&h->put_res), 0, "the late put: %d", atomic_load(&h->put_res));
    close(sv[0]);
    close(sv[1]);
    free(h);
}

Test(io_multi, destroy_cancel_with_a_buffer_held_on_another_worker)
{
    destroy_with_a_buffer_held_elsewhere(0);
}

Test(io_multi, destroy_cancel_with_a_buffer_held_on_another_worker_fallback_pool)
{
    destroy_with_a_buffer_held_elsewhere(URT_RING_MULTISHOT_RECV | URT_RING_BUFRING);
}
