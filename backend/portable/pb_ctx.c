/*
 * backend/portable/pb_ctx.c — the portable backend's context: queueing and
 * starting operations, chains and linked deadlines, the timer heap,
 * cancellation, waiting (epoll), reaping, waking. Sockets are in pb_net.c,
 * the file pool in pb_pool.c; the design is in portable.h.
 *
 * An operation's life: pb_submit copies it into a struct pb_op (QUEUED),
 * pb_flush starts each queued chain's head (pb_start: by kind, a descriptor
 * wait, the pool, the heap, or an immediate result), its result goes to
 * the context's completion ring (pb_complete: one entry per completion, so
 * a multishot operation posts many) and, with its last completion,
 * pb_finish decides the chain: the next member starts, or the rest is
 * cancelled. pb_reap delivers the ring's entries to their tags.
 *
 * Memory ordering: see portable.h (owner-only state; the remote list under
 * rlock; wake_fd and done_fd are eventfds).
 */
#include "backend/portable/portable.h"

#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NO_HEAP UINT32_MAX

/* ---- the completion ring (owner) ----------------------------------------------------------- */

static int cq_push(struct pb_ctx *c, struct be_tag *tag, int32_t res, uint32_t flags)
{
    if (c->cq_n == c->cq_cap) {
        uint32_t cap = c->cq_cap ? c->cq_cap * 2 : 256;
        struct pb_cqe *n = malloc(sizeof *n * cap);
        if (!n)
            return -ENOMEM;
        for (uint32_t i = 0; i < c->cq_n; i++)
            n[i] = c->cq[(c->cq_head + i) % c->cq_cap];
        free(c->cq);
        c->cq = n;
        c->cq_head = 0;
        c->cq_cap = cap;
    }
    c->cq[(c->cq_head + c->cq_n) % c->cq_cap] = (struct pb_cqe){tag, res, flags};
    c->cq_n++;
    return 0;
}

/* ---- operation records ------------------------------------------------------------------- */

/* Every record ever made is on c->all_ops (pb_exit frees them all: what is
 * still in the heap, queued or waiting when the owner closes the context is
 * abandoned, as io_uring abandons what is in flight in a ring it closes). */
static struct pb_op *op_new(struct pb_ctx *c)
{
    struct pb_op *o = c->free_ops;
    struct pb_op *all;
    if (o) {
        c->free_ops = o->next;
        all = o->all;
    } else if (!(o = malloc(sizeof *o))) {
        return NULL;
    } else {
        all = c->all_ops;
        c->all_ops = o;
    }
    memset(o, 0, sizeof *o);
    o->all = all;
    o->c = c;
    o->heap_ix = NO_HEAP;
    return o;
}

static void op_free(struct pb_ctx *c, struct pb_op *o)
{
    o->next = c->free_ops;
    c->free_ops = o;
}

/* ---- the timer heap (owner) ---------------------------------------------------------------- */

static void heap_set(struct pb_ctx *c, uint32_t i, struct pb_op *o)
{
    c->heap[i] = o;
    o->heap_ix = i;
}

static void heap_up(struct pb_ctx *c, uint32_t i)
{
    struct pb_op *o = c->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (c->heap[p]->deadline <= o->deadline)
            break;
        heap_set(c, i, c->heap[p]);
        i = p;
    }
    heap_set(c, i, o);
}

static void heap_down(struct pb_ctx *c, uint32_t i)
{
    struct pb_op *o = c->heap[i];
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        uint64_t best = o->deadline;
        if (l < c->heap_n && c->heap[l]->deadline < best)
            m = l, best = c->heap[l]->deadline;
        if (l + 1 < c->heap_n && c->heap[l + 1]->deadline < best)
            m = l + 1;
        if (m == i)
            break;
        heap_set(c, i, c->heap[m]);
        i = m;
    }
    heap_set(c, i, o);
}

void pb_heap_add(struct pb_ctx *c, struct pb_op *o)
{
    if (c->heap_n == c->heap_cap) {
        uint32_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
        struct pb_op **n = realloc(c->heap, sizeof *n * cap);
        if (!n) {
            pb_complete(c, o, -ENOMEM, 0);
            return;
        }
        c->heap = n;
        c->heap_cap = cap;
    }
    c->heap[c->heap_n] = o;
    o->heap_ix = c->heap_n++;
    heap_up(c, o->heap_ix);
}

void pb_heap_del(struct pb_ctx *c, struct pb_op *o)
{
    uint32_t i = o->heap_ix;
    if (i == NO_HEAP)
        return;
    o->heap_ix = NO_HEAP;
    struct pb_op *last = c->heap[--c->heap_n];
    if (i == c->heap_n)
        return;
    heap_set(c, i, last);
    heap_up(c, i);
    heap_down(c, last->heap_ix);
}

/* ---- completion and chains ------------------------------------------------------------------- */

bool pb_link_breaks(const struct pb_op *o, int32_t res)
{
    if (res < 0)
        return true;
    switch (o->op.kind) { /* a short transfer breaks the chain, as on io_uring */
    case BE_READ:
    case BE_WRITE:
    case BE_READ_FIXED:
    case BE_WRITE_FIXED:
        return (uint32_t)res < o->op.len;
    default:
        return false;
    }
}

static void start(struct pb_ctx *c, struct pb_op *o);

/* One completion of o (more with BE_CF_MORE); the last one finishes it. */
void pb_complete(struct pb_ctx *c, struct pb_op *o, int32_t res, uint32_t cflags)
{
    bool skip = (o->op.flags & BE_F_SKIP_SUCCESS) && res >= 0 && !(cflags & BE_CF_MORE);
    if (o->tag && !skip && cq_push(c, o->tag, res, cflags) < 0)
        abort(); /* a completion that cannot be posted would be a lost wake-up; no way to go on */
    if (!(cflags & BE_CF_MORE))
        pb_finish(c, o, res, cflags);
}

static void cancel_rest(struct pb_ctx *c, struct pb_op *nx)
{
    while (nx) {
        struct pb_op *after = nx->link;
        if (nx->state == PB_RAN)
            return; /* the pool started it before the chain broke: its own completion comes */
        c->inflight--;
        if (nx->tag)
            cq_push(c, nx->tag, -ECANCELED, 0);
        op_free(c, nx);
        nx = after;
    }
}

/* o completed for the last time: its linked timeout, then the chain. */
void pb_finish(struct pb_ctx *c, struct pb_op *o, int32_t res, uint32_t cflags)
{
    (void)cflags;
    o->state = PB_DONE;
    c->inflight--;
    bool broken = pb_link_breaks(o, res) || atomic_load_explicit(&o->cancelled, memory_order_relaxed);
    struct pb_op *nx = o->link;
    pb_heap_del(c, o);
    if (o->lt) {
        struct pb_op *lt = o->lt;
        nx = lt->link;
        if (lt->state != PB_DONE) { /* the deadline did not pass */
            c->inflight--;
            if (lt->tag)
                cq_push(c, lt->tag, -ECANCELED, 0);
        } else {
            broken = true;
        }
        op_free(c, lt);
    }
    op_free(c, o);
    if (!nx)
        return;
    if (broken)
        cancel_rest(c, nx);
    else if (nx->state != PB_RAN)
        start(c, nx);
}

/* A linked deadline passed before its operation completed. */
static void deadline_passed(struct pb_ctx *c, struct pb_op *o)
{
    struct pb_op *lt = o->lt;
    lt->state = PB_DONE;
    if (lt->tag)
        cq_push(c, lt->tag, -ETIME, 0);
    if (o->state == PB_WAIT_FD && pb_net_cancel(c, o, NULL))
        return;
    if (o->state == PB_POOL)
        pb_pool_cancel(c, o, NULL); /* queued: cancelled now; running: completes with its result, the chain broken */
}

static void expire(struct pb_ctx *c)
{
    if (!c->heap_n)
        return;
    uint64_t now = urt_clock_ns();
    while (c->heap_n && c->heap[0]->deadline <= now) {
        struct pb_op *o = c->heap[0];
        pb_heap_del(c, o);
        if (o->op.kind == BE_TIMEOUT)
            pb_complete(c, o, -ETIME, 0);
        else
            deadline_passed(c, o);
    }
}

/* ---- starting operations --------------------------------------------------------------------- */

static struct pb_op *find_timer(struct pb_ctx *c, struct be_tag *tag)
{
    for (uint32_t i = 0; i < c->heap_n; i++)
        if (c->heap[i]->tag == tag && c->heap[i]->op.kind == BE_TIMEOUT)
            return c->heap[i];
    return NULL;
}

static struct pb_op *find_queued(struct pb_ctx *c, struct be_tag *tag, struct pb_op **prev)
{
    *prev = NULL;
    for (struct pb_op *o = c->sub_head; o; *prev = o, o = o->next)
        if (o->tag == tag)
            return o;
    return NULL;
}

/* BE_CANCEL: 0 cancelled, -EALREADY running (it completes on its own), -ENOENT not found. */
static int cancel_target(struct pb_ctx *c, struct be_tag *tag)
{
    struct pb_op *prev, *o = find_timer(c, tag);
    if (o) {
        pb_heap_del(c, o);
        pb_complete(c, o, -ECANCELED, 0);
        return 0;
    }
    if ((o = find_queued(c, tag, &prev))) {
        if (prev)
            prev->next = o->next;
        else
            c->sub_head = o->next;
        if (c->sub_tail == o)
            c->sub_tail = prev;
        pb_complete(c, o, -ECANCELED, 0);
        return 0;
    }
    int r = pb_pool_cancel(c, NULL, tag);
    if (r != -ENOENT)
        return r;
    return pb_net_cancel(c, NULL, tag) ? 0 : -ENOENT;
}

static void start_timeout_ctl(struct pb_ctx *c, struct pb_op *o)
{
    struct pb_op *t = find_timer(c, o->op.target);
    if (!t) {
        pb_complete(c, o, -ENOENT, 0);
        return;
    }
    pb_heap_del(c, t);
    if (o->op.kind == BE_TIMEOUT_UPDATE) {
        t->deadline = o->op.off;
        pb_heap_add(c, t);
    } else {
        pb_complete(c, t, -ECANCELED, 0);
    }
    pb_complete(c, o, 0, 0);
}

int pb_fd_of(struct pb_ctx *c, const struct be_op *op)
{
    if (!(op->flags & BE_F_FIXED_FILE))
        return op->fd;
    if (op->fd < 0 || (uint32_t)op->fd >= c->nfiles || c->files[op->fd] < 0)
        return -EBADF;
    return c->files[op->fd];
}

/* Resolves registered files and buffers of a pool-side chain on the owner
 * (the table is the owner's), so that pool threads never read it. */
static int resolve(struct pb_ctx *c, struct pb_op *o)
{
    if ((o->op.flags & BE_F_FIXED_FILE) && o->op.kind != BE_CLOSE) {
        int fd = pb_fd_of(c, &o->op);
        if (fd < 0)
            return fd;
        o->op.fd = fd;
        o->op.flags &= (uint8_t)~BE_F_FIXED_FILE;
    }
    if (o->op.kind == BE_READ_FIXED || o->op.kind == BE_WRITE_FIXED) {
        if (o->op.buf >= c->nbufs)
            return -EFAULT;
        const struct iovec *b = &c->bufs[o->op.buf];
        char *a = o->op.addr, *base = b->iov_base;
        if (a < base || a + o->op.len > base + b->iov_len)
            return -EFAULT;
    }
    return 0;
}

static bool is_pool(uint8_t kind)
{
    switch (kind) {
    case BE_READ: case BE_WRITE: case BE_READV: case BE_WRITEV: case BE_READ_FIXED: case BE_WRITE_FIXED:
    case BE_FSYNC: case BE_FDATASYNC: case BE_SYNC_FILE_RANGE: case BE_FALLOCATE: case BE_OPENAT:
    case BE_STATX: case BE_CONNECT:
        return true;
    default:
        return false;
    }
}

static void start_close(struct pb_ctx *c, struct pb_op *o)
{
    if (o->op.flags & BE_F_FIXED_FILE) {
        int slot = o->op.fd;
        if (slot < 0 || (uint32_t)slot >= c->nfiles || c->files[slot] < 0) {
            pb_complete(c, o, -EBADF, 0);
            return;
        }
        int fd = c->files[slot];
        c->files[slot] = -1;
        pb_complete(c, o, close(fd) < 0 ? -errno : 0, 0);
        return;
    }
    pb_complete(c, o, close(o->op.fd) < 0 ? -errno : 0, 0);
}

static void start(struct pb_ctx *c, struct pb_op *o)
{
    if (o->lt) { /* the linked deadline runs from the operation's start */
        o->deadline = o->lt->op.off;
        pb_heap_add(c, o);
    }
    if (is_pool(o->op.kind)) {
        int err = resolve(c, o);
        for (struct pb_op *n = o->link; !err && n && is_pool(n->op.kind); n = n->link)
            err = resolve(c, n);
        if (err)
            pb_complete(c, o, err, 0);
        else
            pb_pool_start(c, o);
        return;
    }
    if (pb_is_net(o->op.kind)) {
        pb_net_start(c, o);
        return;
    }
    switch (o->op.kind) {
    case BE_NOP:
        pb_complete(c, o, 0, 0);
        break;
    case BE_CLOSE:
        start_close(c, o);
        break;
    case BE_TIMEOUT:
        o->state = PB_TIMER;
        o->deadline = o->op.off;
        pb_heap_add(c, o);
        break;
    case BE_TIMEOUT_UPDATE:
    case BE_TIMEOUT_REMOVE:
        start_timeout_ctl(c, o);
        break;
    case BE_CANCEL:
        pb_complete(c, o, cancel_target(c, o->op.target), 0);
        break;
    default: /* a BE_LINK_TIMEOUT that follows no linked operation, or an unknown kind */
        pb_complete(c, o, -EINVAL, 0);
        break;
    }
}

/* ---- submission (owner) ---------------------------------------------------------------------- */

void pb_reserve(struct pb_ctx *c, unsigned n)
{
    (void)c; /* the queue is a list: room for any chain */
    (void)n;
}

void pb_submit(struct pb_ctx *c, const struct be_op *op, struct be_tag *tag)
{
    struct pb_op *o = op_new(c);
    if (!o)
        abort(); /* the interface never refuses an operation; an allocation failure here cannot be answered */
    o->op = *op;
    o->tag = tag;
    c->inflight++;
    atomic_store_explicit(&c->submitted, atomic_load_explicit(&c->submitted, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (c->chain_tail) { /* a member of the chain being queued */
        if (op->kind == BE_LINK_TIMEOUT && !c->chain_tail->lt && c->chain_tail->op.kind != BE_LINK_TIMEOUT)
            c->chain_tail->lt = o;
        c->chain_tail->link = o;
        c->chain_tail = o;
    } else {
        o->next = NULL;
        if (c->sub_tail)
            c->sub_tail->next = o;
        else
            c->sub_head = o;
        c->sub_tail = o;
        c->chain_head = o;
        c->chain_tail = o;
    }
    if (!(op->flags & BE_F_LINK))
        c->chain_head = c->chain_tail = NULL;
}

int pb_flush(struct pb_ctx *c)
{
    int n = 0;
    while (c->sub_head && c->sub_head != c->chain_head) { /* a chain still being queued waits for its end */
        struct pb_op *o = c->sub_head;
        c->sub_head = o->next;
        if (!c->sub_head)
            c->sub_tail = NULL;
        o->next = NULL;
        start(c, o);
        n++;
    }
    return n;
}

bool pb_dirty(const struct pb_ctx *c)
{
    return c->sub_head != NULL && c->sub_head != c->chain_head;
}

/* ---- the pool's completions (owner) ------------------------------------------------------------ */

static void take_remote(struct pb_ctx *c)
{
    if (!atomic_load_explicit(&c->r_count, memory_order_relaxed))
        return;
    pthread_mutex_lock(&c->rlock);
    struct pb_op *o = c->r_head;
    c->r_head = c->r_tail = NULL;
    atomic_store_explicit(&c->r_count, 0, memory_order_relaxed);
    pthread_mutex_unlock(&c->rlock);
    while (o) {
        struct pb_op *n = o->next;
        o->next = NULL;
        pb_complete(c, o, o->res, o->cflags);
        o = n;
    }
}

bool pb_ready(struct pb_ctx *c)
{
    return c->cq_n || c->wakes || atomic_load_explicit(&c->r_count, memory_order_relaxed);
}

/* ---- waiting ---------------------------------------------------------------------------------- */

static void drain_eventfd(int fd, uint64_t *sum)
{
    uint64_t v;
    if (read(fd, &v, sizeof v) == (ssize_t)sizeof v && sum)
        *sum += v;
}

static int epoll_wait_ns(struct pb_ctx *c, struct epoll_event *ev, int max, uint64_t timeout_ns)
{
#ifdef SYS_epoll_pwait2
    if (c->have_pwait2) {
        struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
        int n = (int)syscall(SYS_epoll_pwait2, c->epfd, ev, max, timeout_ns == UINT64_MAX ? NULL : &ts, NULL, 0);
        if (n >= 0 || errno != ENOSYS)
            return n < 0 ? -errno : n;
        c->have_pwait2 = false;
    }
#endif
    int ms = timeout_ns == UINT64_MAX ? -1
             : timeout_ns > (uint64_t)INT32_MAX * 1000000ull ? INT32_MAX
                                                             : (int)((timeout_ns + 999999) / 1000000);
    int n = epoll_wait(c->epfd, ev, max, ms);
    return n < 0 ? -errno : n;
}

static void handle_events(struct pb_ctx *c, struct epoll_event *ev, int n)
{
    for (int i = 0; i < n; i++) {
        int fd = (int)ev[i].data.u32;
        if (fd == c->wake_fd)
            drain_eventfd(fd, &c->wakes);
        else if (fd == c->done_fd)
            drain_eventfd(fd, NULL);
        else
            pb_net_event(c, fd, ev[i].events);
    }
    take_remote(c);
}

int pb_wait(struct pb_ctx *c, uint64_t timeout_ns)
{
    pb_flush(c);
    take_remote(c);
    expire(c);
    if (pb_ready(c))
        return 0;
    uint64_t t = timeout_ns;
    if (c->heap_n) {
        uint64_t now = urt_clock_ns(), due = c->heap[0]->deadline;
        uint64_t left = due > now ? due - now : 0;
        if (left < t)
            t = left;
    }
    struct epoll_event ev[64];
    int n = epoll_wait_ns(c, ev, 64, t);
    if (n < 0)
        return n == -EINTR ? -EINTR : n;
    handle_events(c, ev, n);
    expire(c);
    c->just_polled = true; /* the pb_reap that follows need not poll again */
    return pb_ready(c) ? 0 : -ETIME;
}

/* Without waiting: ready descriptors, the pool's completions and the
 * deadlines that passed (a busy owner polls instead of waiting: its timers
 * must fire too, as io_uring's do without a wait). */
void pb_poll(struct pb_ctx *c)
{
    struct epoll_event ev[64];
    int n = epoll_wait_ns(c, ev, 64, 0);
    if (n > 0)
        handle_events(c, ev, n);
    take_remote(c);
    expire(c);
}

unsigned pb_reap(struct pb_ctx *c, be_event_fn *on_event, void *ctx)
{
    /* Right after a pb_wait that waited, epoll and the clock were just read:
     * only what the pool posted since. Otherwise sockets' readiness (when
     * an operation waits on one), the pool's completions and the deadlines. */
    if (c->just_polled)
        take_remote(c);
    else if (c->waiting)
        pb_poll(c);
    else {
        take_remote(c);
        expire(c);
    }
    c->just_polled = false;
    uint32_t n = c->cq_n, seen = 0;
    for (; seen < n; seen++) {
        struct pb_cqe e = c->cq[c->cq_head];
        c->cq_head = (c->cq_head + 1) % c->cq_cap;
        c->cq_n--;
        e.tag->complete(e.tag, e.res, e.flags);
    }
    for (; c->wakes; c->wakes--, seen++)
        if (on_event)
            on_event(ctx, BE_EV_WAKE, 0);
    return seen;
}

int pb_wake(int target_wake_fd)
{
    uint64_t one = 1;
    if (target_wake_fd < 0)
        return -EBADF;
    return write(target_wake_fd, &one, sizeof one) == (ssize_t)sizeof one ? 0 : -errno;
}

/* ---- life ------------------------------------------------------------------------------------ */

static int watch(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)fd};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int pb_init(struct pb_ctx *c, struct pb_shared *sh)
{
    memset(c, 0, sizeof *c);
    c->sh = sh;
    c->have_pwait2 = true;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int err = 0;
    if (c->epfd < 0 || c->wake_fd < 0 || c->done_fd < 0)
        err = -errno;
    if (!err)
        err = watch(c->epfd, c->wake_fd);
    if (!err)
        err = watch(c->epfd, c->done_fd);
    if (!err)
        err = -pthread_mutex_init(&c->rlock, NULL);
    if (err) {
        if (c->epfd >= 0)
            close(c->epfd);
        if (c->wake_fd >= 0)
            close(c->wake_fd);
        if (c->done_fd >= 0)
            close(c->done_fd);
        return err;
    }
    return 0;
}

void pb_exit(struct pb_ctx *c)
{
    pb_net_exit(c);
    for (uint32_t i = 0; i < c->nfiles; i++)
        if (c->files[i] >= 0)
            close(c->files[i]);
    free(c->files);
    free(c->bufs);
    free(c->heap);
    while (c->all_ops) { /* free or abandoned (op_new) */
        struct pb_op *o = c->all_ops;
        c->all_ops = o->all;
        free(o);
    }
    c->free_ops = NULL;
    free(c->cq);
    pthread_mutex_lock(&c->rlock); /* a pool thread that posted has rung done_fd and let go */
    pthread_mutex_unlock(&c->rlock);
    pthread_mutex_destroy(&c->rlock);
    close(c->epfd);
    close(c->wake_fd);
    close(c->done_fd);
}

/* ---- registered resources (owner) ------------------------------------------------------------ */

int pb_files_register(struct pb_ctx *c, uint32_t n)
{
    int *f = malloc(sizeof *f * (n ? n : 1));
    if (!f)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        f[i] = -1;
    free(c->files);
    c->files = f;
    c->nfiles = n;
    c->alloc_off = 0;
    c->alloc_len = n;
    return 0;
}

int pb_files_alloc_range(struct pb_ctx *c, uint32_t off, uint32_t len)
{
    if ((uint64_t)off + len > c->nfiles)
        return -EINVAL;
    c->alloc_off = off;
    c->alloc_len = len;
    return 0;
}

int pb_files_update(struct pb_ctx *c, uint32_t slot, int fd)
{
    if (slot >= c->nfiles)
        return -EINVAL;
    int copy = -1;
    if (fd >= 0 && (copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) /* the slot holds its own reference, as on io_uring */
        return -errno;
    if (c->files[slot] >= 0)
        close(c->files[slot]);
    c->files[slot] = copy;
    return 0;
}

int pb_buffers_register(struct pb_ctx *c, const struct iovec *iov, unsigned n)
{
    struct iovec *b = malloc(sizeof *b * (n ? n : 1));
    if (!b)
        return -ENOMEM;
    memcpy(b, iov, sizeof *b * n);
    free(c->bufs);
    c->bufs = b;
    c->nbufs = n;
    return 0;
}

int pb_bufring_create(struct pb_ctx *c, uint16_t bgid, uint32_t count, struct pb_bufring **out)
{
    if (bgid >= sizeof c->rings / sizeof c->rings[0] || c->rings[bgid])
        return bgid >= sizeof c->rings / sizeof c->rings[0] ? -EINVAL : -EEXIST;
    if (!count || (count & (count - 1)))
        return -EINVAL;
    struct pb_bufring *r = calloc(1, sizeof *r);
    if (!r || !(r->bufs = calloc(count, sizeof *r->bufs))) {
        free(r);
        return -ENOMEM;
    }
    r->count = count;
    r->mask = count - 1;
    c->rings[bgid] = r;
    *out = r;
    return 0;
}

void pb_bufring_add(struct pb_bufring *r, void *addr, uint32_t len, uint16_t bid)
{
    r->bufs[r->tail & r->mask] = (struct pb_buf){addr, len, bid};
    r->tail++;
}

void pb_bufring_unregister(struct pb_ctx *c, struct pb_bufring *r, uint16_t bgid)
{
    if (bgid < sizeof c->rings / sizeof c->rings[0] && c->rings[bgid] == r)
        c->rings[bgid] = NULL;
}

void pb_bufring_free(struct pb_bufring *r)
{
    if (r)
        free(r->bufs);
    free(r);
}
