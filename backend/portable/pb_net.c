/*
 * backend/portable/pb_net.c — sockets on the portable backend: each
 * operation is tried at once without blocking; one that would block waits
 * on its descriptor in the context's epoll instance and is tried again when
 * the descriptor is ready (the design is in portable.h).
 *
 * A descriptor with waiters has one struct pb_fd (indexed by fd): its
 * waiters in submission order and the events it is armed for. Arming is
 * EPOLLONESHOT with the union of the waiters' events: after an event the
 * descriptor is silent until re-armed, so a readiness is handled once, by
 * the owner, and no event can arrive for an operation already completed.
 * A descriptor closed behind the backend's back leaves epoll by itself: the
 * first waiter after that arms it again whatever was armed before (MOD,
 * ENOENT -> ADD), so a reused descriptor number is registered for its new
 * file; a listening socket's O_NONBLOCK is checked on every accept attempt.
 *
 * Multishot receive and accept stay armed and post one completion with
 * BE_CF_MORE per message or connection, until an error, the end of the
 * stream or a cancel (their last completion, without BE_CF_MORE). A receive
 * that selects its buffer takes the next buffer of its group's ring and
 * reports it in the completion's flags (BE_CF_BUFFER | bid << 16); with the
 * ring empty it completes -ENOBUFS (a multishot one ends), as on io_uring.
 * Only a receive that got bytes takes the buffer: the end of the stream
 * (0) completes without one and leaves it in the ring, as io_uring recycles
 * it (its owner puts back only the buffers completions name).
 *
 * Memory ordering: owner only; nothing here is shared.
 */
#include "backend/portable/portable.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct pb_fd {
    int fd;
    bool registered;    /* in the epoll instance (armed or silent) */
    uint32_t armed;     /* events it is armed for (0: silent) */
    struct pb_op *head, *tail;
    struct pb_fd *act_next, *act_prev; /* the context's descriptors with waiters */
};

bool pb_is_net(uint8_t kind)
{
    switch (kind) {
    case BE_RECV: case BE_SEND: case BE_SEND_ZC: case BE_RECVMSG: case BE_SENDMSG: case BE_ACCEPT: case BE_POLL:
        return true;
    default:
        return false;
    }
}

/* ---- the descriptor table ---------------------------------------------------------------------- */

static struct pb_fd *fd_get(struct pb_ctx *c, int fd)
{
    if ((uint32_t)fd >= c->fd_cap) {
        uint32_t cap = c->fd_cap ? c->fd_cap : 64;
        while (cap <= (uint32_t)fd)
            cap *= 2;
        struct pb_fd **n = realloc(c->fds, sizeof *n * cap);
        if (!n)
            return NULL;
        memset(n + c->fd_cap, 0, sizeof *n * (cap - c->fd_cap));
        c->fds = n;
        c->fd_cap = cap;
    }
    if (!c->fds[fd]) {
        struct pb_fd *d = calloc(1, sizeof *d);
        if (!d)
            return NULL;
        d->fd = fd;
        c->fds[fd] = d;
    }
    return c->fds[fd];
}

static void active_add(struct pb_ctx *c, struct pb_fd *d)
{
    if (d->head)
        return; /* already on the list */
    d->act_prev = NULL;
    d->act_next = c->active;
    if (c->active)
        c->active->act_prev = d;
    c->active = d;
}

static void active_del(struct pb_ctx *c, struct pb_fd *d)
{
    if (d->act_prev)
        d->act_prev->act_next = d->act_next;
    else if (c->active == d)
        c->active = d->act_next;
    if (d->act_next)
        d->act_next->act_prev = d->act_prev;
    d->act_next = d->act_prev = NULL;
}

static uint32_t wanted(const struct pb_fd *d)
{
    uint32_t w = 0;
    for (const struct pb_op *o = d->head; o; o = o->next)
        w |= o->want;
    return w;
}

/* Arms d for what its waiters want: 0, or -errno (epoll refused the descriptor). */
static int arm(struct pb_ctx *c, struct pb_fd *d)
{
    uint32_t w = wanted(d);
    if (!w || w == d->armed)
        return 0;
    struct epoll_event ev = {.events = w | EPOLLONESHOT, .data.u32 = (uint32_t)d->fd};
    int op = d->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    int r = epoll_ctl(c->epfd, op, d->fd, &ev);
    if (r < 0 && errno == ENOENT && op == EPOLL_CTL_MOD)
        r = epoll_ctl(c->epfd, EPOLL_CTL_ADD, d->fd, &ev); /* closed and reopened behind our back */
    else if (r < 0 && errno == EEXIST && op == EPOLL_CTL_ADD)
        r = epoll_ctl(c->epfd, EPOLL_CTL_MOD, d->fd, &ev);
    if (r < 0)
        return -errno;
    d->registered = true;
    d->armed = w;
    return 0;
}

/* ---- one attempt ------------------------------------------------------------------------------- */

static struct pb_bufring *ring_of(struct pb_ctx *c, const struct pb_op *o)
{
    return o->op.buf < sizeof c->rings / sizeof c->rings[0] ? c->rings[o->op.buf] : NULL;
}

/* A receive whose buffer ring is empty: as on io_uring, it fails -ENOBUFS
 * only when there is something to receive; with nothing pending it waits
 * (-EAGAIN), and the end of the stream or an error completes without a
 * buffer. */
static int32_t empty_ring(int fd)
{
    char one;
    ssize_t n = recv(fd, &one, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return -ENOBUFS;
    return n == 0 ? 0 : -errno;
}

static int32_t try_recv(struct pb_ctx *c, struct pb_op *o, int fd, uint32_t *cflags)
{
    void *addr = o->op.addr;
    size_t len = o->op.len;
    struct pb_bufring *r = NULL;
    if (o->op.flags & BE_F_BUF_SELECT) {
        r = ring_of(c, o);
        if (!r)
            return -ENOBUFS;
        if (r->head == r->tail)
            return empty_ring(fd);
        struct pb_buf *b = &r->bufs[r->head & r->mask];
        addr = b->addr;
        len = o->op.len && o->op.len < b->len ? o->op.len : b->len;
    }
    ssize_t n = recv(fd, addr, len, (int)o->op.arg | MSG_DONTWAIT);
    if (n < 0)
        return -errno;
    if (r && n > 0) { /* the end of the stream leaves the buffer in the ring, as io_uring recycles it */
        *cflags |= BE_CF_BUFFER | ((uint32_t)r->bufs[r->head & r->mask].bid << BE_CF_BUFFER_SHIFT);
        r->head++;
    }
    return (int32_t)n;
}

/* Looked at on every attempt, not remembered per descriptor number: the
 * number may name another socket since (closed and reused behind the
 * backend's back), and a blocking accept would stall the owner. */
static void listen_nonblock(struct pb_ctx *c, int fd)
{
    (void)c;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int32_t direct_slot(struct pb_ctx *c, int nfd)
{
    for (uint32_t i = c->alloc_off; i < c->alloc_off + c->alloc_len && i < c->nfiles; i++)
        if (c->files[i] < 0) {
            c->files[i] = nfd;
            return (int32_t)i;
        }
    close(nfd);
    return -ENFILE;
}

static int32_t try_accept(struct pb_ctx *c, struct pb_op *o, int fd)
{
    listen_nonblock(c, fd);
    int nfd = accept4(fd, o->op.addr, o->op.addr2, (int)o->op.arg);
    if (nfd < 0)
        return -errno;
    return (o->op.flags & BE_F_DIRECT) ? direct_slot(c, nfd) : nfd;
}

static int32_t try_poll(int fd, uint32_t events)
{
    struct pollfd p = {.fd = fd, .events = (short)events};
    int n = poll(&p, 1, 0);
    if (n < 0)
        return -errno;
    return n == 0 ? -EAGAIN : (int32_t)(uint16_t)p.revents;
}

static int32_t try_op(struct pb_ctx *c, struct pb_op *o, int fd, uint32_t *cflags)
{
    ssize_t n;
    switch (o->op.kind) {
    case BE_RECV:
        return try_recv(c, o, fd, cflags);
    case BE_SEND:
    case BE_SEND_ZC:
        n = send(fd, o->op.caddr, o->op.len, (int)o->op.arg | MSG_DONTWAIT);
        break;
    case BE_RECVMSG:
        n = recvmsg(fd, o->op.addr, (int)o->op.arg | MSG_DONTWAIT);
        break;
    case BE_SENDMSG:
        n = sendmsg(fd, o->op.caddr, (int)o->op.arg | MSG_DONTWAIT);
        break;
    case BE_ACCEPT:
        return try_accept(c, o, fd);
    case BE_POLL:
        return try_poll(fd, o->op.arg);
    default:
        return -EINVAL;
    }
    return n < 0 ? -errno : (int32_t)n;
}

static bool multishot(const struct pb_op *o)
{
    return (o->op.flags & BE_F_MULTISHOT) &&
           (o->op.kind == BE_RECV || o->op.kind == BE_ACCEPT || o->op.kind == BE_POLL);
}

/* Tries o until it would block: true when o completed for the last time. */
static bool attempt(struct pb_ctx *c, struct pb_op *o)
{
    int fd = pb_fd_of(c, &o->op);
    if (fd < 0) {
        pb_complete(c, o, fd, 0);
        return true;
    }
    for (;;) {
        uint32_t cflags = 0;
        int32_t res = try_op(c, o, fd, &cflags);
        if (res == -EAGAIN || res == -EWOULDBLOCK || res == -EINTR)
            return false;
        bool last = !multishot(o) || res < 0 || (o->op.kind == BE_RECV && res == 0);
        if (o->op.kind == BE_SEND_ZC && res >= 0) {
            pb_complete(c, o, res, BE_CF_MORE);      /* the send's result */
            pb_complete(c, o, 0, BE_CF_NOTIF);       /* its buffer is the caller's again */
            return true;
        }
        pb_complete(c, o, res, cflags | (last ? 0 : BE_CF_MORE));
        if (last)
            return true;
        if (o->op.kind == BE_POLL)
            return false; /* a multishot poll reports once per readiness */
    }
}

static uint32_t want_of(const struct pb_op *o)
{
    switch (o->op.kind) {
    case BE_SEND:
    case BE_SEND_ZC:
    case BE_SENDMSG:
        return EPOLLOUT;
    case BE_POLL:
        return o->op.arg & (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP);
    default:
        return EPOLLIN;
    }
}

/* ---- waiting ---------------------------------------------------------------------------------- */

static void waiter_add(struct pb_ctx *c, struct pb_fd *d, struct pb_op *o)
{
    active_add(c, d);
    o->next = NULL;
    if (d->tail)
        d->tail->next = o;
    else
        d->head = o;
    d->tail = o;
    o->state = PB_WAIT_FD;
    c->waiting++;
}

static void waiter_del(struct pb_ctx *c, struct pb_fd *d, struct pb_op *o, struct pb_op *prev)
{
    if (prev)
        prev->next = o->next;
    else
        d->head = o->next;
    if (d->tail == o)
        d->tail = prev;
    o->next = NULL;
    c->waiting--;
    if (!d->head)
        active_del(c, d);
}

/* A descriptor epoll does not take (a regular file): always ready. */
static void not_pollable(struct pb_ctx *c, struct pb_fd *d, int err)
{
    while (d->head) {
        struct pb_op *o = d->head;
        waiter_del(c, d, o, NULL);
        if (o->op.kind == BE_POLL && err == -EPERM)
            pb_complete(c, o, (int32_t)(o->op.arg & (POLLIN | POLLOUT)), 0);
        else if (!attempt(c, o))
            pb_complete(c, o, err, 0);
    }
}

void pb_net_start(struct pb_ctx *c, struct pb_op *o)
{
    o->want = want_of(o);
    if (attempt(c, o))
        return;
    int fd = pb_fd_of(c, &o->op);
    struct pb_fd *d = fd_get(c, fd);
    if (!d) {
        pb_complete(c, o, -ENOMEM, 0);
        return;
    }
    bool first = d->head == NULL;
    waiter_add(c, d, o);
    if (first)
        d->armed = 0; /* the number may name a new file since its last waiter (closed and reused behind the
                         backend's back, its registration gone with the old file): arm it again (MOD, else ADD) */
    int err = arm(c, d);
    if (err)
        not_pollable(c, d, err);
}

void pb_net_event(struct pb_ctx *c, int fd, uint32_t revents)
{
    if ((uint32_t)fd >= c->fd_cap || !c->fds[fd])
        return;
    struct pb_fd *d = c->fds[fd];
    d->armed = 0; /* one-shot: silent until armed again */
    struct pb_op *prev = NULL, *o = d->head;
    while (o) {
        struct pb_op *nx = o->next;
        if ((o->want | EPOLLERR | EPOLLHUP) & revents) {
            waiter_del(c, d, o, prev);
            if (!attempt(c, o)) {
                /* still waiting: back at its place */
                active_add(c, d); /* before relinking: it checks whether the list was empty */
                o->next = prev ? prev->next : d->head;
                if (prev)
                    prev->next = o;
                else
                    d->head = o;
                if (!o->next)
                    d->tail = o;
                c->waiting++;
                o->state = PB_WAIT_FD;
                prev = o;
            }
        } else {
            prev = o;
        }
        o = nx;
    }
    int err = arm(c, d);
    if (err)
        not_pollable(c, d, err);
}

bool pb_net_cancel(struct pb_ctx *c, struct pb_op *op, struct be_tag *tag)
{
    for (struct pb_fd *d = c->active; d; d = d->act_next) {
        struct pb_op *prev = NULL;
        for (struct pb_op *o = d->head; o; prev = o, o = o->next) {
            if (op ? o != op : o->tag != tag)
                continue;
            waiter_del(c, d, o, prev);
            pb_complete(c, o, -ECANCELED, 0);
            return true;
        }
    }
    return false;
}

void pb_net_exit(struct pb_ctx *c)
{
    for (uint32_t i = 0; i < c->fd_cap; i++)
        free(c->fds[i]);
    free(c->fds);
    c->fds = NULL;
    c->fd_cap = 0;
    c->active = NULL;
}
