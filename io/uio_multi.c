/*
 * io/uio_multi.c — multishot operations of urt/io.h (rule 7): accept
 * with URT_IO_MULTISHOT and urt_io_recv_bufring, on the kernel's multishot
 * requests where the probe found them, else on their fallbacks:
 *
 *   kind            request in the kernel               a completion is
 *   UIO_K_MULTI     multishot accept / multishot recv   each CQE with F_MORE
 *                   selecting from a buffer ring
 *   UIO_K_REARM     one accept, or one receive          each CQE
 *                   selecting from the buffer ring,
 *                   re-armed after each
 *   UIO_K_POLLRECV  one POLLIN poll, re-armed           recv(2, MSG_DONTWAIT) into a
 *                   (a pool: no kernel buffer ring)     buffer taken from the pool
 *
 * Completions are queued in kernel order (uio_push, io/uio.c) and
 * delivered one at a time, each with BE_CF_MORE, and the last
 * without it. The kernel may end a multishot request on its own with a
 * result (a CQE with data but no F_MORE): that result is delivered as an
 * ordinary completion and the request is re-armed, so the caller sees one
 * stream until its own cancel, an error, end of file (receive: 0), or
 * destroy (-ECANCELED). An accept into the file table that finds no free
 * slot is such an error on every path: the kernel closes the connection and
 * ends its multishot accept with -ENFILE; without the kernel's help the
 * runtime closes it and ends the (single-shot, re-armed) accept the same way. A receive whose buffer ring ran dry (the kernel's
 * -ENOBUFS, or an empty pool) waits on the ring's list and is re-armed when
 * urt_bufring_put gives a buffer back: the data waits in the socket, no byte
 * is dropped. The backend's -ENOBUFS is older than its completion: a buffer
 * may have come back in between (a task that ran after the submission's
 * flush, before the worker reaped), with no receive waiting yet. So a
 * receive armed before the ring's last return (uio_more.armed_at, against
 * the ring's count of returns) is armed again at once instead of waiting for
 * a return that may never come (every buffer back in the ring, no traffic);
 * one armed after it waits (the ring was dry, and any later return re-arms
 * it). Each immediate re-arm needs a return since the previous arming, so
 * it cannot spin. A re-arm that finds the submission queue full ends the
 * operation with -EAGAIN.
 *
 * No memory ordering of its own: everything runs on the io's worker (the
 * continuation's hop back to it is io/uio.c's multi_after).
 */
#include "io/uio.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/error.h"

/* ---- state -------------------------------------------------------------------------------- */

static struct uio_more *more_new(uint32_t cap)
{
    struct uio_more *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->e = malloc(cap * sizeof(*m->e));
    if (!m->e) {
        free(m);
        return NULL;
    }
    m->cap = cap;
    return m;
}

void uio_more_free(struct uio *u)
{
    free(u->more->e);
    free(u->more);
    u->more = NULL;
}

/* ---- arming ------------------------------------------------------------------------------- */

/* The operation that (re-)arms u: a multishot receive selecting buffers of
 * its ring or accept (UIO_K_MULTI), one such receive or accept re-armed at
 * each completion (UIO_K_REARM), else a poll for input. */
static struct be_op describe(const struct uio *u)
{
    const struct uio_more *m = u->more;
    bool direct = (u->flags & UIO_F_FIXED) && !(u->flags & UIO_F_INSTALL);
    struct be_op op = {.kind = BE_POLL, .fd = m->fd, .arg = POLLIN};
    if (u->kind != UIO_K_MULTI && u->kind != UIO_K_REARM)
        return op;
    op.flags = u->kind == UIO_K_MULTI ? BE_F_MULTISHOT : 0;
    if (m->op == UIO_MOP_RECV) { /* len 0: the buffer's size */
        op.kind = BE_RECV;
        op.arg = (uint32_t)m->msg_flags;
        op.flags |= BE_F_BUF_SELECT;
        op.buf = uio_bufring_bgid(u->ext);
    } else {
        op.kind = BE_ACCEPT;
        op.arg = direct ? 0 : SOCK_CLOEXEC;
        op.flags |= direct ? BE_F_DIRECT : 0; /* into the file table: the kernel picks the slot */
    }
    return op;
}

/* The receive is being armed: the returns of its ring so far are before it. */
static void mark_armed(struct uio *u)
{
    if (u->ext)
        u->more->armed_at = uio_bufring_returns(u->ext);
}

/* Ends the operation: its last completion (no F_MORE). */
static void end(struct worker *w, struct uio *u, int32_t res)
{
    if (u->ext)
        uio_bufring_use(u->ext, -1);
    uio_push(w, u, res, 0);
}

/* The kernel has no request of u's now: arm it again, unless a cancel or
 * destroy came first. Called from a CQE (outside a task: flushed here) or a
 * buffer's return (inside a task: it goes with the task's SQEs). */
static void go_on(struct worker *w, struct uio *u, bool in_task)
{
    struct uio_worker *uw = w->uio;
    if ((u->flags & UIO_F_CANCEL_SENT) || uw->stopped) {
        end(w, u, -ECANCELED);
        return;
    }
    struct be_op op = describe(u);
    mark_armed(u);
    uio_resubmit(w, &op, u);
    if (!in_task)
        sched_io_flush(w);
}

static void wait_buffer(struct worker *w, struct uio *u)
{
    if ((u->flags & UIO_F_CANCEL_SENT) || ((struct uio_worker *)w->uio)->stopped) {
        end(w, u, -ECANCELED);
        return;
    }
    u->flags |= UIO_F_WAIT_BUF;
    uio_bufring_wait(u->ext, u);
}

void uio_multi_resume(struct worker *w, struct uio *u)
{
    u->flags &= ~UIO_F_WAIT_BUF;
    go_on(w, u, true);
}

void uio_multi_end(struct worker *w, struct uio *u, int32_t res)
{
    if (u->flags & UIO_F_WAIT_BUF) {
        u->flags &= ~UIO_F_WAIT_BUF;
        uio_bufring_unwait(u->ext, u);
    }
    end(w, u, res);
}

/* ---- completions -------------------------------------------------------------------------- */

/* The fallback receive: the socket is readable; one recv(2) into a pool buffer. */
static void poll_recv(struct worker *w, struct uio *u)
{
    struct uio_more *m = u->more;
    void *buf;
    uint32_t size;
    int bid = uio_bufring_take(u->ext, &buf, &size);
    if (bid < 0) {
        wait_buffer(w, u);
        return;
    }
    ssize_t n = recv(m->fd, buf, size, MSG_DONTWAIT | m->msg_flags);
    if (n > 0) {
        uio_push(w, u, (int32_t)n, BE_CF_MORE | BE_CF_BUFFER | ((uint32_t)bid << BE_CF_BUFFER_SHIFT));
        go_on(w, u, false);
        return;
    }
    int err = n == 0 ? 0 : -errno;
    uio_bufring_return(u->ext, (uint16_t)bid);
    if (err == -EAGAIN || err == -EWOULDBLOCK || err == -EINTR)
        go_on(w, u, false); /* a spurious wake-up */
    else
        end(w, u, err); /* 0: end of file */
}

void uio_multi_cqe(struct worker *w, struct uio *u, int32_t res, uint32_t cqe_flags)
{
    struct uio_more *m = u->more;
    bool more = cqe_flags & BE_CF_MORE;
    if (u->kind == UIO_K_POLLRECV) {
        if (res < 0)
            end(w, u, res);
        else
            poll_recv(w, u);
        return;
    }
    if (m->op == UIO_MOP_ACCEPT) {
        if (res >= 0 && (u->flags & UIO_F_FIXED))
            res = uio_accepted_fixed(w, u, res); /* its slot, or -ENFILE: the connection was closed */
        if (res < 0) {
            /* An error ends it, as the kernel's multishot accept ends (its
             * accept into the table too: -ENFILE). Never with a request
             * left in the kernel: the kernel ends on errors, and an accept
             * we install (UIO_F_INSTALL) is a single-shot one. */
            end(w, u, res);
            return;
        }
        uio_push(w, u, res, BE_CF_MORE);
        if (!more) /* the kernel ended it (or it is the single-shot fallback) */
            go_on(w, u, false);
        return;
    }
    /* multishot receive into the buffer ring */
    if (res > 0) {
        uio_bufring_mark(u->ext, (uint16_t)(cqe_flags >> BE_CF_BUFFER_SHIFT)); /* the caller's now */
        uio_push(w, u, res, cqe_flags | BE_CF_MORE);
        if (!more)
            go_on(w, u, false);
    } else if (res == -ENOBUFS) { /* the request ended; the data waits in the socket */
        if (uio_bufring_returns(u->ext) != m->armed_at)
            go_on(w, u, false); /* a buffer came back since it was armed: maybe after the dry answer */
        else
            wait_buffer(w, u);
    } else {
        end(w, u, res); /* 0: end of file, or an error (-ECANCELED ...) */
    }
}

/* ---- submission --------------------------------------------------------------------------- */

static int multi_submit(struct urt_io *io, const char *fn, enum uio_kind kind, struct uio_more *m,
                        struct urt_bufring *br, unsigned fixed)
{
    struct uio_ctx cx;
    int err = uio_begin(io, fn, kind, 1, &cx);
    if (err) {
        free(m->e);
        free(m);
        return err;
    }
    struct uio *u = uio_of(io);
    u->more = m;
    u->ext = br;
    u->flags |= (uint8_t)fixed;
    if (br)
        uio_bufring_use(br, 1);
    struct be_op op = describe(u);
    mark_armed(u);
    uio_submit_op(&cx, io, &op);
    return 0;
}

int uio_multi_accept(struct urt_io *io, int fd, unsigned flags)
{
    struct worker *w = sched_self();
    unsigned fixed = 0;
    int err = (flags & URT_IO_FIXED_FILE) ? uio_accept_fixed("urt_io_accept", &fixed) : 0;
    if (err)
        return uio_refused(io, err);
    struct uio_more *m = more_new(16);
    if (!m)
        return uio_refused(io, urt__error(-ENOMEM, "urt_io_accept: out of memory for a multishot operation"));
    m->fd = fd;
    m->op = UIO_MOP_ACCEPT;
    /* An accept into the table by the kernel (no UIO_F_INSTALL) implies
     * BE_IO_FIXED_ACCEPT. One we install is re-armed after each
     * connection (never the kernel's multishot): when the table is full it
     * must end there, as the kernel's does, with the connections that come
     * after still waiting in the backlog. */
    bool kernel = w && (uio_features(w) & BE_IO_MULTISHOT_ACCEPT) && !(fixed & UIO_F_INSTALL);
    return multi_submit(io, "urt_io_accept", kernel ? UIO_K_MULTI : UIO_K_REARM, m, NULL, fixed);
}

URT_API int urt_io_recv_bufring(struct urt_io *io, int fd, struct urt_bufring *br, int msg_flags)
{
    if (!br)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_recv_bufring: br is NULL"));
    struct worker *w = sched_self();
    if (w && w != uio_bufring_worker(br))
        return uio_refused(io, urt__error(-EINVAL, "urt_io_recv_bufring: br belongs to worker %u, not to the "
                                                   "calling worker %u", uio_bufring_worker(br)->index, w->index));
    struct uio_more *m = more_new(uio_bufring_count(br) + 2); /* never grows: a completion holds a buffer */
    if (!m)
        return uio_refused(io, urt__error(-ENOMEM, "urt_io_recv_bufring: out of memory for a multishot operation"));
    m->fd = fd;
    m->msg_flags = msg_flags;
    m->op = UIO_MOP_RECV;
    enum uio_kind kind = UIO_K_POLLRECV; /* the pool: readiness, then recv(2) into a buffer taken here */
    if (uio_bufring_kernel(br))
        kind = w && (uio_features(w) & BE_IO_MULTISHOT_RECV) ? UIO_K_MULTI : UIO_K_REARM;
    return multi_submit(io, "urt_io_recv_bufring", kind, m, br, 0);
}
