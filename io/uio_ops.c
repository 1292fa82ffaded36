/*
 * io/uio_ops.c — the operations of urt/io.h: each checks its arguments
 * (a message naming the offending one), begins through uio_begin
 * (io/uio.c: context, room, counting), describes the operation as a struct
 * be_op (backend/backend.h) and hands it to uio_submit_op. Sleeps arm a timer of the
 * worker's one timer queue instead (sched/core/timer.h). Every refusal goes out
 * through uio_refused: the io's deadline goes with it (rule 8).
 *
 * No memory ordering of its own: it runs on the submitting worker, and the
 * io is the caller's until uio_submit_* publishes it (io/uio.h).
 */
#include "io/uio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "base/args.h"
#include "base/error.h"

/* ---- checks ---------------------------------------------------------------------------- */

static int check_buf(const char *fn, const void *buf, size_t len)
{
    if (!buf && len)
        return urt__error(-EINVAL, "%s: buf is NULL with len %zu", fn, len);
    if (len > UINT32_MAX)
        return urt__error(-EINVAL, "%s: len %zu is over 4 GiB - 1 (one operation's limit)", fn, len);
    return 0;
}

static int check_off(const char *fn, int64_t off)
{
    if (off < URT_IO_CURPOS)
        return urt__error(-EINVAL, "%s: off %lld is negative (URT_IO_CURPOS for the file position)", fn,
                          (long long)off);
    return 0;
}

static int check_iov(const char *fn, const struct iovec *iov, unsigned iovcnt)
{
    if (!iov || iovcnt == 0)
        return urt__error(-EINVAL, "%s: %s", fn, !iov ? "iov is NULL" : "iovcnt is 0");
    if (iovcnt > IOV_MAX)
        return urt__error(-EINVAL, "%s: iovcnt %u is over IOV_MAX (%d)", fn, iovcnt, IOV_MAX);
    return 0;
}

/* flags of an operation: unknown bits -EINVAL, known ones it does not take
 * -EOPNOTSUPP. */
#define URT_IO_OP_FLAGS_ALL (URT_IO_MULTISHOT | URT_IO_ZEROCOPY | URT_IO_FIXED_FILE | URT_IO_FIXED_BUF)

static int check_flags(const char *fn, unsigned flags, unsigned allowed)
{
    if (urt__check_flags(fn, flags, URT_IO_OP_FLAGS_ALL))
        return -EINVAL;
    if (flags & ~allowed)
        return urt__error(-EOPNOTSUPP, "%s: flags 0x%x are not for this operation", fn, flags & ~allowed);
    return 0;
}

/* One operation: begin, then the caller describes it and calls uio_submit_op. */
static int op_begin(struct urt_io *io, const char *fn, struct uio_ctx *cx)
{
    return uio_begin(io, fn, UIO_K_OP, 1, cx);
}

/* ---- files -------------------------------------------------------------------------------- */

URT_API int urt_io_read(struct urt_io *io, int fd, void *buf, size_t len, int64_t off)
{
    struct uio_ctx cx;
    int err = check_buf("urt_io_read", buf, len);
    if (err || (err = check_off("urt_io_read", off)) || (err = op_begin(io, "urt_io_read", &cx)))
        return uio_refused(io, err);
    int bi = uio_fixed_buf(cx.w, buf, len); /* in a registered buffer: the fixed-buffer read */
    struct be_op op = {.kind = bi >= 0 ? BE_READ_FIXED : BE_READ, .fd = fd, .addr = buf, .len = (uint32_t)len,
                       .off = (uint64_t)off, .buf = (uint16_t)(bi >= 0 ? bi : 0)};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_write(struct urt_io *io, int fd, const void *buf, size_t len, int64_t off)
{
    struct uio_ctx cx;
    int err = check_buf("urt_io_write", buf, len);
    if (err || (err = check_off("urt_io_write", off)) || (err = op_begin(io, "urt_io_write", &cx)))
        return uio_refused(io, err);
    int bi = uio_fixed_buf(cx.w, buf, len);
    struct be_op op = {.kind = bi >= 0 ? BE_WRITE_FIXED : BE_WRITE, .fd = fd, .caddr = buf, .len = (uint32_t)len,
                       .off = (uint64_t)off, .buf = (uint16_t)(bi >= 0 ? bi : 0)};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_readv(struct urt_io *io, int fd, const struct iovec *iov, unsigned iovcnt, int64_t off)
{
    struct uio_ctx cx;
    int err = check_iov("urt_io_readv", iov, iovcnt);
    if (err || (err = check_off("urt_io_readv", off)) || (err = op_begin(io, "urt_io_readv", &cx)))
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_READV, .fd = fd, .caddr = iov, .len = iovcnt, .off = (uint64_t)off};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_writev(struct urt_io *io, int fd, const struct iovec *iov, unsigned iovcnt, int64_t off)
{
    struct uio_ctx cx;
    int err = check_iov("urt_io_writev", iov, iovcnt);
    if (err || (err = check_off("urt_io_writev", off)) || (err = op_begin(io, "urt_io_writev", &cx)))
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_WRITEV, .fd = fd, .caddr = iov, .len = iovcnt, .off = (uint64_t)off};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_fsync(struct urt_io *io, int fd, unsigned flags)
{
    struct uio_ctx cx;
    if (urt__check_flags("urt_io_fsync", flags, URT_IO_FSYNC_DATA))
        return uio_refused(io, -EINVAL);
    int err = op_begin(io, "urt_io_fsync", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = (flags & URT_IO_FSYNC_DATA) ? BE_FDATASYNC : BE_FSYNC, .fd = fd};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_openat(struct urt_io *io, int dirfd, const char *path, int flags, mode_t mode)
{
    struct uio_ctx cx;
    if (!path)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_openat: path is NULL"));
    int err = op_begin(io, "urt_io_openat", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_OPENAT, .fd = dirfd, .caddr = path, .arg = (uint32_t)(flags | O_CLOEXEC), .len = mode};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_close(struct urt_io *io, int fd)
{
    struct uio_ctx cx;
    int err = op_begin(io, "urt_io_close", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_CLOSE, .fd = fd};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_statx(struct urt_io *io, int dirfd, const char *path, int flags, unsigned mask,
                         struct statx *out)
{
    struct uio_ctx cx;
    if (!path || !out)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_statx: %s is NULL", path ? "out" : "path"));
    int err = op_begin(io, "urt_io_statx", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_STATX, .fd = dirfd, .caddr = path, .arg = (uint32_t)flags, .len = mask, .addr2 = out};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_fallocate(struct urt_io *io, int fd, int mode, int64_t off, int64_t len)
{
    struct uio_ctx cx;
    if (off < 0 || len <= 0)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_fallocate: %s %lld is out of range",
                                          off < 0 ? "off" : "len", (long long)(off < 0 ? off : len)));
    int err = op_begin(io, "urt_io_fallocate", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_FALLOCATE, .fd = fd, .arg = (uint32_t)mode, .off = (uint64_t)off, .len64 = (uint64_t)len};
    uio_submit_op(&cx, io, &op);
    return 0;
}

/* ---- sockets ------------------------------------------------------------------------------ */

int uio_accept_fixed(const char *fn, unsigned *uflags)
{
    struct worker *w = sched_self();
    if (!w)
        return 0; /* uio_begin says -EPERM */
    struct uio_worker *uw = uio_worker(w);
    int err = uw ? uio_files_ready(w, uw) : -ENOMEM;
    if (err)
        return urt__error(-ENOMEM, "%s: no registered file table on this worker (io_fixed_files %u): %s", fn,
                          w->s->cfg->io_fixed_files, strerror(-err));
    *uflags = UIO_F_FIXED | (uw->kernel_alloc ? 0 : UIO_F_INSTALL); /* kernel_alloc implies BE_IO_FIXED_ACCEPT */
    return 0;
}

URT_API int urt_io_accept(struct urt_io *io, int fd, struct sockaddr *addr, socklen_t *addrlen, unsigned flags)
{
    struct uio_ctx cx;
    unsigned fixed = 0;
    int err = check_flags("urt_io_accept", flags, URT_IO_FIXED_FILE | URT_IO_MULTISHOT);
    if (err)
        return uio_refused(io, err);
    if (!addr != !addrlen)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_accept: %s is NULL but not %s",
                                          addr ? "addrlen" : "addr", addr ? "addr" : "addrlen"));
    if (flags & URT_IO_MULTISHOT) {
        if (addr)
            return uio_refused(io, urt__error(-EINVAL, "urt_io_accept: addr must be NULL with URT_IO_MULTISHOT"));
        return uio_multi_accept(io, fd, flags);
    }
    if ((flags & URT_IO_FIXED_FILE) && (err = uio_accept_fixed("urt_io_accept", &fixed)))
        return uio_refused(io, err);
    if ((err = op_begin(io, "urt_io_accept", &cx)))
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_ACCEPT, .fd = fd, .addr = addr, .addr2 = addrlen, .arg = SOCK_CLOEXEC};
    if (fixed && !(fixed & UIO_F_INSTALL)) { /* into the file table: the kernel picks the slot */
        op.flags = BE_F_DIRECT;
        op.arg = 0;
    }
    uio_of(io)->flags |= (uint8_t)fixed;
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_connect(struct urt_io *io, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    struct uio_ctx cx;
    if (!addr || addrlen == 0)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_connect: %s", addr ? "addrlen is 0" : "addr is NULL"));
    int err = op_begin(io, "urt_io_connect", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_CONNECT, .fd = fd, .caddr = addr, .len = addrlen};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_recv(struct urt_io *io, int fd, void *buf, size_t len, int msg_flags)
{
    struct uio_ctx cx;
    int err = check_buf("urt_io_recv", buf, len);
    if (err || (err = op_begin(io, "urt_io_recv", &cx)))
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_RECV, .fd = fd, .addr = buf, .len = (uint32_t)len, .arg = (uint32_t)msg_flags};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_send(struct urt_io *io, int fd, const void *buf, size_t len, int msg_flags, unsigned flags)
{
    struct uio_ctx cx;
    int err = check_buf("urt_io_send", buf, len);
    if (err || (err = check_flags("urt_io_send", flags, URT_IO_FIXED_FILE | URT_IO_ZEROCOPY | URT_IO_FIXED_BUF)))
        return uio_refused(io, err);
    struct worker *self = sched_self();
    int bi = self ? uio_fixed_buf(self, buf, len) : -1;
    if ((flags & URT_IO_FIXED_BUF) && self && bi < 0)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_send: URT_IO_FIXED_BUF but buf is not in a buffer "
                                                   "registered on this worker (urt_io_register_buffers)"));
    if ((err = op_begin(io, "urt_io_send", &cx)))
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_SEND, .fd = fd, .caddr = buf, .len = (uint32_t)len, .arg = (uint32_t)msg_flags};
    if ((flags & URT_IO_ZEROCOPY) && (uio_features(cx.w) & BE_IO_SEND_ZC)) {
        op.kind = BE_SEND_ZC;
        if (bi >= 0) {
            op.flags = BE_F_FIXED_BUF;
            op.buf = (uint16_t)bi;
        }
    } /* else URT_IO_ZEROCOPY without the feature: a copy */
    if (flags & URT_IO_FIXED_FILE)
        op.flags |= BE_F_FIXED_FILE;
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_sendmsg(struct urt_io *io, int fd, const struct msghdr *msg, int msg_flags)
{
    struct uio_ctx cx;
    if (!msg)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_sendmsg: msg is NULL"));
    int err = op_begin(io, "urt_io_sendmsg", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_SENDMSG, .fd = fd, .caddr = msg, .arg = (uint32_t)msg_flags};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_recvmsg(struct urt_io *io, int fd, struct msghdr *msg, int msg_flags)
{
    struct uio_ctx cx;
    if (!msg)
        return uio_refused(io, urt__error(-EINVAL, "urt_io_recvmsg: msg is NULL"));
    int err = op_begin(io, "urt_io_recvmsg", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_RECVMSG, .fd = fd, .addr = msg, .arg = (uint32_t)msg_flags};
    uio_submit_op(&cx, io, &op);
    return 0;
}

URT_API int urt_io_poll(struct urt_io *io, int fd, unsigned events)
{
    struct uio_ctx cx;
    if (events == 0 || (events & ~0xffffu))
        return uio_refused(io, urt__error(-EINVAL, "urt_io_poll: events 0x%x is not a set of poll(2) events", events));
    int err = op_begin(io, "urt_io_poll", &cx);
    if (err)
        return uio_refused(io, err);
    struct be_op op = {.kind = BE_POLL, .fd = fd, .arg = events};
    uio_submit_op(&cx, io, &op);
    return 0;
}

/* ---- sleeps -------------------------------------------------------------------------------- */

static int sleep_at(struct urt_io *io, const char *fn, uint64_t due_ns)
{
    struct uio_ctx cx;
    int err = uio_begin(io, fn, UIO_K_SLEEP, 0, &cx);
    if (err)
        return err;
    err = sched_timer_arm_at(cx.w, &uio_of(io)->sio, due_ns, uio_timer_done); /* room reserved: cannot fail */
    (void)err;
    uio_submit_done(&cx, io);
    return 0;
}

URT_API int urt_io_sleep(struct urt_io *io, uint64_t ns)
{
    uint64_t now = urt_now_ns();
    return sleep_at(io, "urt_io_sleep", ns > UINT64_MAX - now ? UINT64_MAX - 1 : now + ns);
}

URT_API int urt_io_sleep_until(struct urt_io *io, uint64_t due_ns)
{
    return sleep_at(io, "urt_io_sleep_until", due_ns == UINT64_MAX ? UINT64_MAX - 1 : due_ns);
}
