/*
 * tests/unit/io_helpers.h — shared by the I/O suites (test_io*.c): one
 * operation described by a struct req, submitted from a task on a worker
 * (start_op), its continuation recorded (calls, result, worker, time) and
 * awaited from the test's thread (wait_op, run_op = both); loopback TCP
 * sockets; whether a worker's thread is still there (thread_named).
 */
#ifndef URT_TESTS_IO_HELPERS_H
#define URT_TESTS_IO_HELPERS_H

#include "helpers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdio.h>
#include <sys/stat.h>

static urt_runtime *g_rt; /* the runtime of the running test (urt_current_worker in continuations) */

enum op_kind {
    OP_READ, OP_WRITE, OP_READV, OP_WRITEV, OP_FSYNC, OP_OPENAT, OP_CLOSE, OP_STATX, OP_FALLOCATE,
    OP_ACCEPT, OP_CONNECT, OP_RECV, OP_SEND, OP_SENDMSG, OP_RECVMSG, OP_POLL, OP_SLEEP, OP_SLEEP_UNTIL,
};

struct req {
    struct urt_io io;
    enum op_kind op;
    int fd;
    void *buf;
    const void *cbuf;
    size_t len;
    int64_t off;
    const struct iovec *iov;
    unsigned iovcnt;
    const char *path;
    int flags;
    mode_t mode;
    unsigned uflags, mask;
    int msg_flags;
    struct statx *stx;
    struct sockaddr *addr;
    socklen_t *addrlen;
    socklen_t addrlen_v;
    struct msghdr *msg;
    uint64_t ns;
    uint64_t timeout_ns;
    /* what happened */
    _Atomic int submit_err, submitted, calls, sub_worker, cont_worker;
    _Atomic int32_t res;
    _Atomic uint64_t done_ns;
    _Atomic int cancel_err, cancel_worker, cancel_done;
};

static void req_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct req *r = arg;
    (void)io;
    atomic_store(&r->res, res);
    atomic_store(&r->cont_worker, urt_current_worker(g_rt));
    atomic_store(&r->done_ns, urt_now_ns());
    atomic_fetch_add(&r->calls, 1);
}

static inline void req_cont_discard(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)res;
    (void)arg;
}

/* Submits r's operation; on the calling worker. */
static inline int req_submit(struct req *r)
{
    struct urt_io *io = &r->io;
    if (r->timeout_ns && urt_io_set_timeout(io, r->timeout_ns))
        return -1000;
    switch (r->op) {
    case OP_READ: return urt_io_read(io, r->fd, r->buf, r->len, r->off);
    case OP_WRITE: return urt_io_write(io, r->fd, r->cbuf, r->len, r->off);
    case OP_READV: return urt_io_readv(io, r->fd, r->iov, r->iovcnt, r->off);
    case OP_WRITEV: return urt_io_writev(io, r->fd, r->iov, r->iovcnt, r->off);
    case OP_FSYNC: return urt_io_fsync(io, r->fd, r->uflags);
    case OP_OPENAT: return urt_io_openat(io, r->fd, r->path, r->flags, r->mode);
    case OP_CLOSE: return urt_io_close(io, r->fd);
    case OP_STATX: return urt_io_statx(io, r->fd, r->path, r->flags, r->mask, r->stx);
    case OP_FALLOCATE: return urt_io_fallocate(io, r->fd, 0, r->off, (int64_t)r->len);
    case OP_ACCEPT: return urt_io_accept(io, r->fd, r->addr, r->addrlen, r->uflags);
    case OP_CONNECT: return urt_io_connect(io, r->fd, r->addr, r->addrlen_v);
    case OP_RECV: return urt_io_recv(io, r->fd, r->buf, r->len, r->msg_flags);
    case OP_SEND: return urt_io_send(io, r->fd, r->cbuf, r->len, r->msg_flags, r->uflags);
    case OP_SENDMSG: return urt_io_sendmsg(io, r->fd, r->msg, r->msg_flags);
    case OP_RECVMSG: return urt_io_recvmsg(io, r->fd, r->msg, r->msg_flags);
    case OP_POLL: return urt_io_poll(io, r->fd, r->uflags);
    case OP_SLEEP: return urt_io_sleep(io, r->ns);
    case OP_SLEEP_UNTIL: return urt_io_sleep_until(io, r->ns);
    }
    return -1001;
}

static enum urt_task_result req_task(struct urt_task *t, void *arg)
{
    struct req *r = arg;
    (void)t;
    atomic_store(&r->sub_worker, urt_current_worker(g_rt));
    atomic_store(&r->submit_err, req_submit(r));
    atomic_store(&r->submitted, 1);
    return URT_TASK_DONE;
}

/* Submits r from a task (the continuation records into r). */
static inline void start_op(urt_runtime *rt, struct req *r)
{
    urt_io_init(&r->io, req_cont, r);
    atomic_store(&r->calls, 0);
    atomic_store(&r->submitted, 0);
    atomic_store(&r->sub_worker, -1);
    atomic_store(&r->cont_worker, -2);
    cr_assert_eq(urt_spawn(rt, req_task, r, 0), 0);
}

/* Waits for r's continuation; returns its result (fails the test if the
 * submission failed or nothing came within 10 s). */
static inline int32_t wait_op(struct req *r)
{
    cr_assert(WAIT_UNTIL(atomic_load(&r->submitted), 10000), "the submitting task did not run");
    cr_assert_eq(atomic_load(&r->submit_err), 0, "op %d: submission failed: %d (%s)", r->op,
                 atomic_load(&r->submit_err), urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&r->calls) >= 1, 10000), "op %d: no continuation", r->op);
    return atomic_load(&r->res);
}

static inline int32_t run_op(urt_runtime *rt, struct req *r)
{
    start_op(rt, r);
    return wait_op(r);
}

static inline urt_runtime *io_rt(uint32_t workers)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    g_rt = rt_create_or_skip(&cfg);
    return g_rt;
}

/* A listening loopback TCP socket; *port gets its port. */
static inline int tcp_listener(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 1024), 0);
    socklen_t l = sizeof(a);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* A connected loopback TCP pair (blocking sockets, made without urt). */
static inline void tcp_pair(int sv[2])
{
    uint16_t port;
    int l = tcp_listener(&port);
    sv[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(sv[1], (struct sockaddr *)&a, sizeof(a)), 0);
    sv[0] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(sv[0], 0);
    close(l);
    int one = 1;
    setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(sv[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Whether a thread of this process has that name (a worker: "urt-w<i>"):
 * a test waits for a worker to have left, its thread gone. */
static inline bool thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    bool found = false;
    struct dirent *e;
    while (d && !found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[288], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        found = strcmp(comm, name) == 0;
    }
    if (d)
        closedir(d);
    return found;
}

#endif
