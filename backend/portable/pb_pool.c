/*
 * backend/portable/pb_pool.c — the portable backend's file pool: threads
 * that run the operations a socket readiness cannot serve (reads and
 * writes of files, fsync/fdatasync, sync_file_range, fallocate, openat,
 * statx, connect) with ordinary blocking system calls, and post their
 * completions to the owner's context.
 *
 * A thread takes one operation and runs the pool-side members linked after
 * it while they succeed (a log write and its fdatasync run back to back on
 * one thread, with no trip through the owner between them); each member it
 * runs is marked PB_RAN so that the owner, finishing the one before,
 * does not start it again. Then it appends the run, in order, to the
 * context's remote list and rings the context's done_fd.
 *
 * Cancellation: an operation still queued is taken off the queue and
 * completed -ECANCELED by the owner; one a thread runs cannot be stopped (a
 * blocking system call): it is marked `cancelled` and completes with its own
 * result, and its chain does not go on.
 *
 * Memory ordering: the queue is under the pool's mutex (a thread that takes
 * an operation sees everything the owner wrote into it before queueing);
 * the remote list is under the context's rlock (the owner that takes it sees
 * the results), and done_fd is rung before rlock is released, so that an
 * owner that took the completions and closes its context (pb_exit takes
 * rlock first) never closes the descriptor under a pool thread's write; `cancelled` is a relaxed atomic flag read by the running
 * thread between members of a chain (late is harmless: the member then
 * completes with its own result).
 */
#include "backend/portable/portable.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

struct pb_pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct pb_op *head, *tail; /* queued */
    struct pb_op **running;    /* per thread: the operation it runs (for cancel) */
    unsigned threads;
    bool stop;
    pthread_t tid[];
};

/* ---- one operation ------------------------------------------------------------------------------ */

static int32_t ret(ssize_t n)
{
    return n < 0 ? -errno : (int32_t)n;
}

static int32_t do_connect(const struct be_op *op)
{
    if (connect(op->fd, op->caddr, (socklen_t)op->len) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EALREADY)
        return -errno;
    struct pollfd p = {.fd = op->fd, .events = POLLOUT}; /* a non-blocking socket: wait for the outcome */
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR)
            return -errno;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(op->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return -errno;
    return -err;
}

int32_t pb_run_file_op(struct pb_ctx *c, struct pb_op *o)
{
    (void)c;
    const struct be_op *op = &o->op;
    off_t off = (off_t)(int64_t)op->off; /* -1: the file position */
    struct iovec one = {op->addr, op->len};
    switch (op->kind) {
    case BE_READ:
    case BE_READ_FIXED:
        return ret(preadv2(op->fd, &one, 1, off, (int)op->arg));
    case BE_WRITE:
    case BE_WRITE_FIXED:
        return ret(pwritev2(op->fd, &one, 1, off, (int)op->arg));
    case BE_READV:
        return ret(preadv2(op->fd, op->addr, (int)op->len, off, 0));
    case BE_WRITEV:
        return ret(pwritev2(op->fd, op->caddr, (int)op->len, off, 0));
    case BE_FSYNC:
        return ret(fsync(op->fd));
    case BE_FDATASYNC:
        return ret(fdatasync(op->fd));
    case BE_SYNC_FILE_RANGE:
        return ret(sync_file_range(op->fd, off, op->len, op->arg));
    case BE_FALLOCATE:
        return ret(fallocate(op->fd, (int)op->arg, off, (off_t)op->len64));
    case BE_OPENAT:
        return ret(openat(op->fd, op->caddr, (int)op->arg, (mode_t)op->len));
    case BE_STATX:
        return ret(statx(op->fd, op->caddr, (int)op->arg, op->len, op->addr2));
    case BE_CONNECT:
        return do_connect(op);
    default:
        return -EINVAL;
    }
}

static bool pool_side(uint8_t kind)
{
    return kind != BE_LINK_TIMEOUT && !pb_is_net(kind) && kind != BE_CLOSE && kind != BE_CANCEL &&
           kind != BE_TIMEOUT && kind != BE_TIMEOUT_UPDATE && kind != BE_TIMEOUT_REMOVE && kind != BE_NOP;
}

/* ---- the threads ------------------------------------------------------------------------------ */

static void post(struct pb_ctx *c, struct pb_op *first, struct pb_op *last, uint32_t n)
{
    pthread_mutex_lock(&c->rlock);
    last->next = NULL;
    if (c->r_tail)
        c->r_tail->next = first;
    else
        c->r_head = first;
    c->r_tail = last;
    atomic_fetch_add_explicit(&c->r_count, n, memory_order_relaxed);
    pb_wake(c->done_fd); /* under rlock: the owner cannot see these completions, finish and close done_fd first */
    pthread_mutex_unlock(&c->rlock);
}

/* Runs o and the pool-side members linked after it while they succeed. */
static void run_chain(struct pb_pool *p, unsigned me, struct pb_op *o)
{
    struct pb_ctx *c = o->c;
    struct pb_op *first = o, *last;
    uint32_t n = 0;
    for (;;) {
        o->res = pb_run_file_op(c, o);
        o->cflags = 0;
        last = o;
        n++;
        struct pb_op *nx = o->link;
        bool cancelled = atomic_load_explicit(&o->cancelled, memory_order_relaxed);
        if (!nx || cancelled || pb_link_breaks(o, o->res) || !pool_side(nx->op.kind) || nx->lt)
            break;
        nx->state = PB_RAN;
        pthread_mutex_lock(&p->lock);
        p->running[me] = nx;
        pthread_mutex_unlock(&p->lock);
        o->next = nx;
        o = nx;
    }
    pthread_mutex_lock(&p->lock);
    p->running[me] = NULL;
    pthread_mutex_unlock(&p->lock);
    post(c, first, last, n);
}

struct pool_arg {
    struct pb_pool *p;
    unsigned me;
};

static void *pool_main(void *arg)
{
    struct pool_arg a = *(struct pool_arg *)arg;
    free(arg);
    struct pb_pool *p = a.p;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->cond, &p->lock);
        if (!p->head)
            break;
        struct pb_op *o = p->head;
        p->head = o->next;
        if (!p->head)
            p->tail = NULL;
        o->next = NULL;
        p->running[a.me] = o;
        pthread_mutex_unlock(&p->lock);
        run_chain(p, a.me, o);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- the owner's side --------------------------------------------------------------------------- */

void pb_pool_start(struct pb_ctx *c, struct pb_op *o)
{
    struct pb_pool *p = c->sh->pool;
    o->state = PB_POOL;
    o->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = o;
    else
        p->head = o;
    p->tail = o;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

int pb_pool_cancel(struct pb_ctx *c, struct pb_op *op, struct be_tag *tag)
{
    struct pb_pool *p = c->sh->pool;
    pthread_mutex_lock(&p->lock);
    struct pb_op *prev = NULL, *o = p->head;
    for (; o; prev = o, o = o->next)
        if (o->c == c && (op ? o == op : o->tag == tag))
            break;
    if (o) {
        if (prev)
            prev->next = o->next;
        else
            p->head = o->next;
        if (p->tail == o)
            p->tail = prev;
        pthread_mutex_unlock(&p->lock);
        o->next = NULL;
        pb_complete(c, o, -ECANCELED, 0);
        return 0;
    }
    for (unsigned i = 0; i < p->threads; i++) {
        struct pb_op *r = p->running[i];
        if (r && r->c == c && (op ? r == op : r->tag == tag)) {
            atomic_store_explicit(&r->cancelled, true, memory_order_relaxed);
            pthread_mutex_unlock(&p->lock);
            return -EALREADY;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return -ENOENT;
}

int pb_shared_init(struct pb_shared *sh, unsigned threads)
{
    if (threads == 0)
        threads = 1;
    struct pb_pool *p = calloc(1, sizeof *p + sizeof(pthread_t) * threads);
    if (!p || !(p->running = calloc(threads, sizeof *p->running))) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    for (; p->threads < threads; p->threads++) {
        struct pool_arg *a = malloc(sizeof *a);
        if (a)
            *a = (struct pool_arg){p, p->threads};
        int err = a ? pthread_create(&p->tid[p->threads], NULL, pool_main, a) : ENOMEM;
        if (err) {
            free(a);
            sh->pool = p;
            pb_shared_exit(sh);
            return -err;
        }
    }
    sh->pool = p;
    return 0;
}

void pb_shared_exit(struct pb_shared *sh)
{
    struct pb_pool *p = sh->pool;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->threads; i++)
        pthread_join(p->tid[i], NULL);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p->running);
    free(p);
    sh->pool = NULL;
}
