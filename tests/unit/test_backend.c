/*
 * tests/unit/test_backend.c — the backend seam (backend/backend.h) on io_uring.
 *
 *  - translation: every struct be_op kind becomes the SQE it always was
 *    (opcode, fd, addr, len, off, the kind's flags, IOSQE_* flags, the tag
 *    as user_data), checked field by field on an SQE filled by ur_prep;
 *  - timeouts: the absolute deadline in off lands in the context's timespec
 *    of that SQ slot, with IORING_TIMEOUT_ABS;
 *  - the full-queue policy (fault injection: an SQ that takes none, then
 *    two entries): nothing is refused or lost, completions come back in
 *    submission order, a chain never splits (it waits until it fits whole);
 *  - the same on a worker: tasks' reads (some with a linked timeout, a chain
 *    of two) submitted while the worker's SQ takes none wait (none
 *    completes), then, through an SQ of two, all complete with the right
 *    bytes;
 *  - the one wake sender: a thread without a context wakes a context's owner
 *    (BE_EV_WAKE once per message), on io_uring and on the portable backend;
 *  - the dispatch to the portable backend: a context of BE_IMPL_PORTABLE
 *    runs a chain (write + fdatasync on its file pool), a NOP and a timeout
 *    through the same be_* calls, and its buffer rings (a tagged pointer)
 *    through be_bufring_*.
 */
#include "helpers.h"

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/clock.h"
#include "sched/core/io.h"

static struct be_ctx ctx;
static struct be_caps caps;
static struct be_shared shared;

static void ctx_up(uint32_t entries)
{
    int err = be_probe(0, false, 0, &caps);
    if (err == -EPERM || err == -ENOSYS)
        cr_skip_test("io_uring is refused here (%d): the io_uring cases do not apply", err);
    cr_assert_eq(err, 0);
    cr_assert_eq(be_impl_of(&caps), BE_IMPL_URING);
    cr_assert_eq(be_shared_init(&shared, &caps), 0);
    cr_assert_eq(be_init(&ctx, &caps, &shared, entries, 4 * entries), 0);
}

static void ctx_down(void)
{
    be_exit(&ctx);
    be_shared_exit(&shared);
}

static void no_event(void *c, enum be_event ev, uint32_t arg)
{
    (void)c, (void)ev, (void)arg;
}

static struct be_tag a_tag;

/* The SQE ur_prep makes of op (tag a_tag). */
static struct io_uring_sqe prep(const struct be_op *op)
{
    struct io_uring_sqe sqe;
    memset(&sqe, 0xa5, sizeof(sqe)); /* ur_prep must set every field it means */
    ur_prep(&ctx.ur, &sqe, op, &a_tag);
    cr_assert_eq(sqe.user_data, (uint64_t)(uintptr_t)&a_tag, "kind %u: the tag is the user_data", op->kind);
    return sqe;
}

static void expect(const struct io_uring_sqe *s, unsigned opcode, int fd, const void *addr, unsigned len, uint64_t off,
                   unsigned sqe_flags)
{
    cr_assert_eq(s->opcode, opcode, "opcode %u, want %u", s->opcode, opcode);
    cr_assert_eq(s->fd, fd, "opcode %u: fd %d, want %d", opcode, s->fd, fd);
    cr_assert_eq(s->addr, (uint64_t)(uintptr_t)addr, "opcode %u: addr", opcode);
    cr_assert_eq(s->len, len, "opcode %u: len %u, want %u", opcode, s->len, len);
    cr_assert_eq(s->off, off, "opcode %u: off %llu, want %llu", opcode, (unsigned long long)s->off,
                 (unsigned long long)off);
    cr_assert_eq(s->flags, sqe_flags, "opcode %u: flags 0x%x, want 0x%x", opcode, s->flags, sqe_flags);
}

Test(backend, each_kind_translates_to_its_sqe)
{
    ctx_up(8);
    char buf[64];
    struct iovec iov[2];
    struct msghdr msg;
    struct sockaddr sa;
    socklen_t salen = sizeof(sa);
    struct statx stx;
    struct io_uring_sqe s;

    s = prep(&(struct be_op){.kind = BE_READ, .fd = 3, .addr = buf, .len = 64, .off = 4096});
    expect(&s, IORING_OP_READ, 3, buf, 64, 4096, 0);
    cr_assert_eq(s.rw_flags, 0);
    s = prep(&(struct be_op){.kind = BE_WRITE, .fd = 4, .addr = buf, .len = 32, .off = 8, .arg = RWF_DSYNC,
                             .flags = BE_F_LINK});
    expect(&s, IORING_OP_WRITE, 4, buf, 32, 8, IOSQE_IO_LINK);
    cr_assert_eq(s.rw_flags, RWF_DSYNC);
    s = prep(&(struct be_op){.kind = BE_READ_FIXED, .fd = 5, .addr = buf, .len = 16, .off = 1, .buf = 7});
    expect(&s, IORING_OP_READ_FIXED, 5, buf, 16, 1, 0);
    cr_assert_eq(s.buf_index, 7);
    s = prep(&(struct be_op){.kind = BE_WRITE_FIXED, .fd = 5, .addr = buf, .len = 16, .off = 2, .buf = 3});
    expect(&s, IORING_OP_WRITE_FIXED, 5, buf, 16, 2, 0);
    cr_assert_eq(s.buf_index, 3);
    s = prep(&(struct be_op){.kind = BE_READV, .fd = 6, .caddr = iov, .len = 2, .off = 10});
    expect(&s, IORING_OP_READV, 6, iov, 2, 10, 0);
    s = prep(&(struct be_op){.kind = BE_WRITEV, .fd = 6, .caddr = iov, .len = 2, .off = 11});
    expect(&s, IORING_OP_WRITEV, 6, iov, 2, 11, 0);
    s = prep(&(struct be_op){.kind = BE_FSYNC, .fd = 7});
    expect(&s, IORING_OP_FSYNC, 7, NULL, 0, 0, 0);
    cr_assert_eq(s.fsync_flags, 0);
    s = prep(&(struct be_op){.kind = BE_FDATASYNC, .fd = 7, .flags = BE_F_SKIP_SUCCESS});
    expect(&s, IORING_OP_FSYNC, 7, NULL, 0, 0, IOSQE_CQE_SKIP_SUCCESS);
    cr_assert_eq(s.fsync_flags, IORING_FSYNC_DATASYNC);
    s = prep(&(struct be_op){.kind = BE_SYNC_FILE_RANGE, .fd = 8, .len = 512, .off = 1024,
                             .arg = SYNC_FILE_RANGE_WRITE});
    expect(&s, IORING_OP_SYNC_FILE_RANGE, 8, NULL, 512, 1024, 0);
    cr_assert_eq(s.sync_range_flags, SYNC_FILE_RANGE_WRITE);
    s = prep(&(struct be_op){.kind = BE_FALLOCATE, .fd = 9, .arg = 1, .off = 100, .len64 = 1ull << 33});
    expect(&s, IORING_OP_FALLOCATE, 9, (void *)(uintptr_t)(1ull << 33), 1, 100, 0); /* liburing: mode in len */
    s = prep(&(struct be_op){.kind = BE_OPENAT, .fd = AT_FDCWD, .caddr = "p", .arg = O_RDONLY | O_CLOEXEC,
                             .len = 0644});
    cr_assert_eq(s.opcode, IORING_OP_OPENAT);
    cr_assert_eq(s.fd, AT_FDCWD);
    cr_assert_eq(s.len, 0644);
    cr_assert_eq(s.open_flags, (unsigned)(O_RDONLY | O_CLOEXEC));
    s = prep(&(struct be_op){.kind = BE_CLOSE, .fd = 11});
    expect(&s, IORING_OP_CLOSE, 11, NULL, 0, 0, 0);
    s = prep(&(struct be_op){.kind = BE_STATX, .fd = AT_FDCWD, .caddr = "q", .arg = AT_EMPTY_PATH,
                             .len = STATX_SIZE, .addr2 = &stx});
    cr_assert_eq(s.opcode, IORING_OP_STATX);
    cr_assert_eq(s.len, STATX_SIZE);
    cr_assert_eq(s.off, (uint64_t)(uintptr_t)&stx);
    cr_assert_eq(s.statx_flags, (unsigned)AT_EMPTY_PATH);
    s = prep(&(struct be_op){.kind = BE_RECV, .fd = 12, .addr = buf, .len = 64, .arg = MSG_WAITALL});
    expect(&s, IORING_OP_RECV, 12, buf, 64, 0, 0);
    cr_assert_eq(s.msg_flags, (unsigned)MSG_WAITALL);
    s = prep(&(struct be_op){.kind = BE_RECV, .fd = 12, .flags = BE_F_MULTISHOT | BE_F_BUF_SELECT, .buf = 9});
    expect(&s, IORING_OP_RECV, 12, NULL, 0, 0, IOSQE_BUFFER_SELECT);
    cr_assert_eq(s.buf_group, 9);
    cr_assert(s.ioprio & IORING_RECV_MULTISHOT);
    s = prep(&(struct be_op){.kind = BE_SEND, .fd = 13, .addr = buf, .len = 10, .arg = MSG_NOSIGNAL,
                             .flags = BE_F_FIXED_FILE});
    expect(&s, IORING_OP_SEND, 13, buf, 10, 0, IOSQE_FIXED_FILE);
    cr_assert_eq(s.msg_flags, (unsigned)MSG_NOSIGNAL);
    s = prep(&(struct be_op){.kind = BE_SEND_ZC, .fd = 13, .addr = buf, .len = 10, .flags = BE_F_FIXED_BUF,
                             .buf = 2});
    expect(&s, IORING_OP_SEND_ZC, 13, buf, 10, 0, 0);
    cr_assert_eq(s.buf_index, 2);
    cr_assert(s.ioprio & IORING_RECVSEND_FIXED_BUF);
    s = prep(&(struct be_op){.kind = BE_SENDMSG, .fd = 14, .caddr = &msg, .arg = MSG_MORE});
    expect(&s, IORING_OP_SENDMSG, 14, &msg, 1, 0, 0);
    cr_assert_eq(s.msg_flags, (unsigned)MSG_MORE);
    s = prep(&(struct be_op){.kind = BE_RECVMSG, .fd = 14, .addr = &msg});
    expect(&s, IORING_OP_RECVMSG, 14, &msg, 1, 0, 0);
    s = prep(&(struct be_op){.kind = BE_ACCEPT, .fd = 15, .addr = &sa, .addr2 = &salen, .arg = SOCK_CLOEXEC});
    expect(&s, IORING_OP_ACCEPT, 15, &sa, 0, (uint64_t)(uintptr_t)&salen, 0);
    cr_assert_eq(s.accept_flags, (unsigned)SOCK_CLOEXEC);
    cr_assert_eq(s.file_index, 0);
    s = prep(&(struct be_op){.kind = BE_ACCEPT, .fd = 15, .flags = BE_F_DIRECT});
    cr_assert_eq(s.file_index, IORING_FILE_INDEX_ALLOC, "direct accept: the kernel picks the slot");
    s = prep(&(struct be_op){.kind = BE_ACCEPT, .fd = 15, .flags = BE_F_MULTISHOT, .arg = SOCK_CLOEXEC});
    cr_assert(s.ioprio & IORING_ACCEPT_MULTISHOT);
    s = prep(&(struct be_op){.kind = BE_CONNECT, .fd = 16, .caddr = &sa, .len = sizeof(sa)});
    expect(&s, IORING_OP_CONNECT, 16, &sa, 0, sizeof(sa), 0);
    s = prep(&(struct be_op){.kind = BE_POLL, .fd = 17, .arg = POLLIN});
    cr_assert_eq(s.opcode, IORING_OP_POLL_ADD);
    cr_assert_eq(s.fd, 17);
    cr_assert_eq(s.poll32_events & POLLIN, POLLIN);
    cr_assert_eq(s.len, 0);
    s = prep(&(struct be_op){.kind = BE_POLL, .fd = 17, .arg = POLLIN, .flags = BE_F_MULTISHOT});
    cr_assert_eq(s.len, IORING_POLL_ADD_MULTI);
    struct be_tag other;
    s = prep(&(struct be_op){.kind = BE_CANCEL, .target = &other, .flags = BE_F_SKIP_SUCCESS});
    expect(&s, IORING_OP_ASYNC_CANCEL, -1, &other, 0, 0, IOSQE_CQE_SKIP_SUCCESS);
    s = prep(&(struct be_op){.kind = BE_NOP});
    cr_assert_eq(s.opcode, IORING_OP_NOP);
    ctx_down();
}

Test(backend, timeouts_carry_an_absolute_deadline_in_the_slot_of_their_sqe)
{
    ctx_up(8);
    struct be_tag t;
    uint64_t due = 12ull * 1000000000ull + 345;
    for (int k = 0; k < 3; k++) {
        struct io_uring_sqe *sqe = ur_take_sqe(&ctx.ur);
        cr_assert_not_null(sqe);
        struct be_op op = {.kind = k == 0 ? BE_TIMEOUT : k == 1 ? BE_TIMEOUT_UPDATE : BE_LINK_TIMEOUT,
                           .off = due + (uint64_t)k, .target = k == 1 ? &t : NULL};
        ur_prep(&ctx.ur, sqe, &op, k == 1 ? NULL : &t);
        /* liburing: an update carries the timespec in off and its target in addr */
        const struct __kernel_timespec *ts = (const void *)(uintptr_t)(k == 1 ? sqe->off : sqe->addr);
        cr_assert_eq(ts, &ctx.ur.ts[sqe - ctx.ur.ring.uring.sq.sqes], "kind %d: the slot's own timespec", k);
        cr_assert_eq(ts->tv_sec, 12);
        cr_assert_eq(ts->tv_nsec, 345 + k);
        cr_assert(sqe->timeout_flags & IORING_TIMEOUT_ABS);
        if (k == 1) {
            cr_assert_eq(sqe->opcode, IORING_OP_TIMEOUT_REMOVE);
            cr_assert(sqe->timeout_flags & IORING_TIMEOUT_UPDATE);
            cr_assert_eq(sqe->addr, (uint64_t)(uintptr_t)&t);
        }
    }
    struct io_uring_sqe s = prep(&(struct be_op){.kind = BE_TIMEOUT_REMOVE, .target = &t});
    cr_assert_eq(s.opcode, IORING_OP_TIMEOUT_REMOVE);
    cr_assert_eq(s.addr, (uint64_t)(uintptr_t)&t);
    ctx_down(); /* never submitted */
}

/* ---- the full-queue policy ------------------------------------------------------------------ */

#if URT_FAULT_INJECTION
#define NOPS 200

struct seen {
    struct be_tag tag;
    int id;
};

static struct seen seen[NOPS];
static int order[NOPS], n_done, res_bad;

static void seen_done(struct be_tag *tag, int32_t res, uint32_t flags)
{
    (void)flags;
    struct seen *s = (struct seen *)tag;
    if (res != 0)
        res_bad++;
    order[n_done++] = s->id;
}

static void reap_until(int n)
{
    for (int i = 0; i < 2000 && n_done < n; i++) {
        be_wait(&ctx, 1000 * 1000);
        be_reap(&ctx, no_event, NULL);
    }
}

Test(backend, a_full_queue_keeps_every_operation_in_order_and_chains_whole, .timeout = 30)
{
    ctx_up(64);
    n_done = res_bad = 0;
    be_fault_sq_room(&ctx, 0); /* the kernel takes nothing */
    int id = 0;
    for (; id < 100; id++) {
        seen[id] = (struct seen){.tag.complete = seen_done, .id = id};
        be_submit(&ctx, &(struct be_op){.kind = BE_NOP}, &seen[id].tag);
    }
    /* A chain of three, reserved whole, then more single ones behind it. */
    be_reserve(&ctx, 3);
    for (int k = 0; k < 3; k++, id++) {
        seen[id] = (struct seen){.tag.complete = seen_done, .id = id};
        be_submit(&ctx, &(struct be_op){.kind = BE_NOP, .flags = k < 2 ? BE_F_LINK : 0}, &seen[id].tag);
    }
    for (; id < NOPS; id++) {
        seen[id] = (struct seen){.tag.complete = seen_done, .id = id};
        be_submit(&ctx, &(struct be_op){.kind = BE_NOP}, &seen[id].tag);
    }
    cr_assert(be_backlog(&ctx));
    cr_assert_eq(ctx.ur.ovf_n, NOPS, "every operation waits in the overflow list");
    be_flush(&ctx);
    be_wait(&ctx, 0);
    be_reap(&ctx, no_event, NULL);
    cr_assert_eq(n_done, 0, "nothing reached the kernel");

    /* An SQ of two: the singles go two at a time; the chain of three cannot
     * go until the queue holds three (it never splits). */
    be_fault_sq_room(&ctx, 2);
    reap_until(100);
    cr_assert_eq(n_done, 100);
    for (int i = 0; i < 20; i++) {
        be_flush(&ctx);
        be_wait(&ctx, 1000 * 1000);
        be_reap(&ctx, no_event, NULL);
    }
    cr_assert_eq(n_done, 100, "the chain of three waits whole (and what is behind it)");
    cr_assert_eq(ctx.ur.ovf_n, NOPS - 100);
    be_fault_sq_room(&ctx, 3);
    reap_until(NOPS);
    cr_assert_eq(n_done, NOPS, "nothing lost: %d of %d", n_done, NOPS);
    cr_assert_eq(res_bad, 0);
    /* Submission order: the singles complete in it (a NOP completes when the
     * kernel takes it); the chain's members in theirs (each runs after the
     * one before, so the kernel may post them after later singles). */
    int last = -1, last_chain = 99;
    for (int i = 0; i < NOPS; i++) {
        if (order[i] >= 100 && order[i] < 103) {
            cr_assert_eq(order[i], last_chain + 1, "chain member %d after %d", order[i], last_chain);
            last_chain = order[i];
            continue;
        }
        cr_assert_gt(order[i], last, "completion %d is operation %d after %d: submission order kept", i, order[i],
                     last);
        last = order[i];
    }
    cr_assert(!be_backlog(&ctx));
    cr_assert_eq(ctx.ur.ovf_total, NOPS);
    be_fault_sq_room(&ctx, UINT32_MAX);
    ctx_down();
}

/* Tasks' reads on a worker whose SQ seems to hold two operations. */
#define NREAD 64
#define BLK 512

static int rfd;
static char rbuf[NREAD][BLK];
static struct urt_io rio[NREAD];
static _Atomic int r_done, r_bad, r_short, r_refused, r_no_backlog;

static void read_done(struct urt_io *io, int32_t res, void *arg)
{
    int i = (int)(intptr_t)arg;
    (void)io;
    bool ok = res == BLK;
    for (int k = 0; ok && k < BLK; k++)
        ok = rbuf[i][k] == (char)(i * 7 + k);
    if (res != BLK)
        atomic_store(&r_short, res == 0 ? -9999 : res);
    if (!ok)
        atomic_fetch_add(&r_bad, 1);
    atomic_fetch_add(&r_done, 1);
}

static enum urt_task_result reads_fn(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    struct worker *w = sched_self();
    be_fault_sq_room(&w->be, 0); /* the kernel takes none: every read waits in the overflow list */
    for (int i = 0; i < NREAD; i++) {
        urt_io_init(&rio[i], read_done, (void *)(intptr_t)i);
        if (i % 2)
            urt_io_set_timeout(&rio[i], 10ull * 1000000000ull); /* a chain of two: read + linked timeout */
        if (urt_io_read(&rio[i], rfd, rbuf[i], BLK, (int64_t)i * BLK) != 0)
            atomic_fetch_add(&r_refused, 1);
    }
    if (!be_backlog(&w->be))
        atomic_fetch_add(&r_no_backlog, 1); /* the overflow list must have been used */
    return URT_TASK_DONE;
}

static enum urt_task_result room_fn(struct urt_task *t, void *arg)
{
    (void)t;
    be_fault_sq_room(&sched_self()->be, (uint32_t)(uintptr_t)arg);
    return URT_TASK_DONE;
}

Test(backend, tasks_io_through_a_full_queue_loses_nothing, .timeout = 60)
{
    char *dir = test_tmpdir("urt-backend");
    char path[512];
    snprintf(path, sizeof(path), "%s/data", dir);
    rfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(rfd, 0);
    for (int i = 0; i < NREAD; i++) {
        char b[BLK];
        for (int k = 0; k < BLK; k++)
            b[k] = (char)(i * 7 + k);
        cr_assert_eq(pwrite(rfd, b, BLK, (off_t)i * BLK), BLK);
    }
    struct urt_config cfg;
    test_config(&cfg, 1);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    if (urt_runtime_backend(rt, NULL) != URT_BACKEND_IO_URING) {
        urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
        close(rfd);
        unlink(path);
        test_remove_dir(dir);
        cr_skip_test("the portable backend's queue is a list that never fills: io_uring's case");
    }
    cr_assert_eq(urt_spawn(rt, reads_fn, NULL, 0), 0);
    sleep_us(20000);
    cr_assert_eq(atomic_load(&r_done), 0, "nothing completes while the kernel takes nothing");
    cr_assert_eq(urt_spawn(rt, room_fn, (void *)(uintptr_t)2, 0), 0); /* an SQ of two from now on */
    cr_assert(WAIT_UNTIL(atomic_load(&r_done) == NREAD, 20000), "%d of %d reads completed", atomic_load(&r_done),
              NREAD);
    cr_assert_eq(atomic_load(&r_refused), 0, "no read refused");
    cr_assert_eq(atomic_load(&r_no_backlog), 0, "the overflow list was used");
    cr_assert_eq(atomic_load(&r_bad), 0, "every read returned its block (%d bad, last short result %d)",
                 atomic_load(&r_bad), atomic_load(&r_short));
    cr_assert_eq(urt_spawn(rt, room_fn, (void *)(uintptr_t)UINT32_MAX, 0), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    close(rfd);
    unlink(path);
    test_remove_dir(dir);
}
#endif

/* ---- the one wake sender ------------------------------------------------------------------- */

static _Atomic int wakes;

static void count_wake(void *c, enum be_event ev, uint32_t arg)
{
    (void)c, (void)arg;
    if (ev == BE_EV_WAKE)
        atomic_fetch_add(&wakes, 1);
}

static void *waker(void *arg)
{
    struct be_shared *sh = arg;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(be_wake(&caps, sh, NULL, be_peer_of(&ctx), 0), 0);
    return NULL;
}

static void wakes_once_per_message(void)
{
    atomic_store(&wakes, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, waker, &shared), 0);
    pthread_join(th, NULL);
    for (int i = 0; i < 100 && atomic_load(&wakes) < 3; i++) {
        be_wait(&ctx, 10 * 1000 * 1000);
        be_reap(&ctx, count_wake, NULL);
    }
    cr_assert_eq(atomic_load(&wakes), 3);
    be_wait(&ctx, 1000 * 1000);
    be_reap(&ctx, count_wake, NULL);
    cr_assert_eq(atomic_load(&wakes), 3, "no more than one event per message");
}

Test(backend, a_thread_without_a_context_wakes_the_owner_once_per_message, .timeout = 30)
{
    ctx_up(8);
    wakes_once_per_message();
    ctx_down();
}

/* ---- the portable implementation behind the same calls --------------------------------------------- */

static void portable_up(void)
{
    cr_assert_eq(be_probe_portable(0, 2, &caps), 0);
    cr_assert_eq(be_impl_of(&caps), BE_IMPL_PORTABLE);
    cr_assert_str_eq(be_impl_name(be_impl_of(&caps)), "portable");
    cr_assert_eq(be_io_features(&caps), BE_IO_ALL, "every feature is emulated");
    cr_assert_eq(be_shared_init(&shared, &caps), 0);
    cr_assert_eq(be_init(&ctx, &caps, &shared, 8, 32), 0);
    cr_assert_neq(ctx.pb, NULL);
}

Test(backend, portable_a_thread_without_a_context_wakes_the_owner_once_per_message, .timeout = 30)
{
    portable_up();
    cr_assert_eq(be_peer_of(&ctx).fd, ctx.pb->wake_fd, "the peer is the context's wake eventfd");
    wakes_once_per_message();
    ctx_down();
}

struct done {
    struct be_tag tag;
    int32_t res;
    uint32_t flags;
    int n;
};

static void done_fn(struct be_tag *tag, int32_t res, uint32_t flags)
{
    struct done *d = (struct done *)tag;
    d->res = res;
    d->flags = flags;
    d->n++;
}

static void reap_until_done(struct done *d, int n)
{
    for (int i = 0; i < 500; i++) {
        int left = 0;
        for (int k = 0; k < n; k++)
            left += d[k].n == 0;
        if (!left)
            return;
        be_wait(&ctx, 10 * 1000 * 1000);
        be_reap(&ctx, no_event, NULL);
    }
}

Test(backend, portable_operations_complete_through_the_dispatch, .timeout = 30)
{
    portable_up();
    char path[] = "/tmp/urt-backend-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    uint64_t before = be_submitted(&ctx);
    struct done d[4] = {{.tag.complete = done_fn}, {.tag.complete = done_fn}, {.tag.complete = done_fn},
                        {.tag.complete = done_fn}};
    /* A write and its fdatasync as a chain, a NOP, a timeout 5 ms ahead. */
    be_reserve(&ctx, 2);
    be_submit(&ctx, &(struct be_op){.kind = BE_WRITE, .fd = fd, .caddr = "portable", .len = 8, .flags = BE_F_LINK},
              &d[0].tag);
    be_submit(&ctx, &(struct be_op){.kind = BE_FDATASYNC, .fd = fd}, &d[1].tag);
    be_submit(&ctx, &(struct be_op){.kind = BE_NOP}, &d[2].tag);
    be_submit(&ctx, &(struct be_op){.kind = BE_TIMEOUT, .off = urt_clock_ns() + 5 * 1000 * 1000}, &d[3].tag);
    cr_assert(be_dirty(&ctx), "queued until flushed");
    cr_assert(!be_backlog(&ctx), "the portable queue never overflows");
    cr_assert_geq(be_flush(&ctx), 0);
    reap_until_done(d, 4);
    cr_assert_eq(d[0].res, 8);
    cr_assert_eq(d[1].res, 0);
    cr_assert_eq(d[2].res, 0);
    cr_assert_eq(d[3].res, -ETIME);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(d[k].n, 1, "operation %d completed once", k);
    cr_assert_eq(be_submitted(&ctx) - before, 4);
    char back[8];
    cr_assert_eq(pread(fd, back, 8, 0), 8);
    cr_assert_eq(memcmp(back, "portable", 8), 0);
    close(fd);
    ctx_down();
}

/* A busy owner never waits: it polls (the worker, every 64 tasks while I/O
 * is in flight). A timeout whose deadline passed must complete from be_poll
 * alone, as io_uring posts it without a wait (a job's deadline on a worker
 * running tasks that never end waited for ever before). */
Test(backend, portable_a_due_timeout_completes_from_a_poll_without_a_wait, .timeout = 30)
{
    portable_up();
    struct done d = {.tag.complete = done_fn};
    be_submit(&ctx, &(struct be_op){.kind = BE_TIMEOUT, .off = urt_clock_ns() + 2 * 1000 * 1000}, &d.tag);
    be_flush(&ctx);
    uint64_t t0 = urt_clock_ns();
    while (d.n == 0 && urt_clock_ns() - t0 < 5ull * 1000 * 1000 * 1000) {
        be_poll(&ctx);
        if (be_ready(&ctx))
            be_reap(&ctx, no_event, NULL);
    }
    cr_assert_eq(d.n, 1, "the due timeout completed from polls");
    cr_assert_eq(d.res, -ETIME);
    ctx_down();
}

/* Closing a context abandons what is still in it (as closing a ring does):
 * a timeout in the heap, a receive waiting on its socket — and frees their
 * records (the ASan build's leak check; the timer's timeout is always in
 * the heap when a worker exits). */
Test(backend, portable_exit_frees_what_is_still_in_flight, .timeout = 30)
{
    portable_up();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    static char b[8];
    struct done d[2] = {{.tag.complete = done_fn}, {.tag.complete = done_fn}};
    be_submit(&ctx, &(struct be_op){.kind = BE_TIMEOUT, .off = urt_clock_ns() + 3600ull * 1000 * 1000 * 1000},
              &d[0].tag);
    be_submit(&ctx, &(struct be_op){.kind = BE_RECV, .fd = sv[0], .addr = b, .len = sizeof b}, &d[1].tag);
    be_flush(&ctx);
    be_wait(&ctx, 1000 * 1000);
    be_reap(&ctx, no_event, NULL);
    cr_assert_eq(d[0].n + d[1].n, 0, "both still in flight");
    ctx_down();
    close(sv[0]);
    close(sv[1]);
    leak_check();
}

/* A descriptor number closed behind the backend's back and reused for a new
 * socket: the new socket's receive must be registered for readiness (the old
 * file's registration went with it). The backend remembered the number as
 * armed and never registered the new file: the receive waited for ever. */
Test(backend, portable_a_reused_descriptor_number_is_armed_again, .timeout = 30)
{
    portable_up();
    int a[2], b[2];
    static char buf[8];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
    struct done d = {.tag.complete = done_fn}, k = {.tag.complete = done_fn};
    be_submit(&ctx, &(struct be_op){.kind = BE_RECV, .fd = a[0], .addr = buf, .len = sizeof buf}, &d.tag);
    be_flush(&ctx); /* waits: armed for a[0] */
    be_submit(&ctx, &(struct be_op){.kind = BE_CANCEL, .target = &d.tag}, &k.tag);
    be_flush(&ctx);
    reap_until_done(&d, 1);
    cr_assert_eq(d.res, -ECANCELED);
    int num = a[0];
    close(a[0]); /* behind the backend's back */
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
    cr_assert(b[0] == num || b[1] == num, "the number is reused (%d: %d %d)", num, b[0], b[1]);
    int mine = b[0] == num ? b[0] : b[1], peer = b[0] == num ? b[1] : b[0];
    struct done r = {.tag.complete = done_fn};
    be_submit(&ctx, &(struct be_op){.kind = BE_RECV, .fd = mine, .addr = buf, .len = sizeof buf}, &r.tag);
    be_flush(&ctx); /* nothing to read yet: waits */
    be_wait(&ctx, 1000 * 1000);
    be_reap(&ctx, no_event, NULL);
    cr_assert_eq(r.n, 0);
    cr_assert_eq(write(peer, "new", 3), 3);
    reap_until_done(&r, 1);
    cr_assert_eq(r.n, 1, "the receive on the reused number completed");
    cr_assert_eq(r.res, 3);
    close(a[1]);
    close(b[0]);
    close(b[1]);
    ctx_down();
}

Test(backend, portable_buffer_rings_travel_through_the_same_calls, .timeout = 30)
{
    portable_up();
    static char bufs[4][16];
    struct be_bufring *r;
    cr_assert_eq(be_bufring_create(&ctx, 3, 4, &r), 0);
    cr_assert(be_bufring_portable(r));
    for (uint16_t i = 0; i < 4; i++)
        be_bufring_add(r, bufs[i], sizeof(bufs[i]), i, 4);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(write(sv[1], "abc", 3), 3);
    struct done d = {.tag.complete = done_fn};
    be_submit(&ctx, &(struct be_op){.kind = BE_RECV, .fd = sv[0], .flags = BE_F_BUF_SELECT, .buf = 3}, &d.tag);
    be_flush(&ctx);
    reap_until_done(&d, 1);
    cr_assert_eq(d.res, 3);
    cr_assert(d.flags & BE_CF_BUFFER);
    uint16_t bid = (uint16_t)(d.flags >> BE_CF_BUFFER_SHIFT);
    cr_assert_eq(bid, 0, "the first buffer given, picked in ring order");
    cr_assert_eq(memcmp(bufs[bid], "abc", 3), 0);
    be_bufring_unregister(&ctx, r, 3);
    be_bufring_free(r, 4);
    close(sv[0]);
    close(sv[1]);
    ctx_down();
}
