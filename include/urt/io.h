/*
 * urt/io.h — asynchronous I/O for tasks on the workers' rings.
 *
 * A task that reads a file, accepts a connection, waits for a socket or
 * sleeps does it through the ring of the worker it runs on; the worker goes
 * on running other tasks, and when the kernel completes the operation a
 * continuation runs as a task on the SAME worker. Nothing blocks a worker.
 *
 * An operation is a struct urt_io the caller embeds in its own object (zero
 * allocation per operation): urt_io_init() once, then one urt_io_<op>() call
 * per operation. The continuation fn(io, res, arg) receives the result as
 * the system call would return it: a byte count, a new descriptor, 0, or
 * -errno (never through errno).
 *
 *     struct conn { struct urt_io io; int fd; char buf[4096]; };
 *
 *     static void on_read(struct urt_io *io, int32_t res, void *arg)
 *     {
 *         struct conn *c = arg;
 *         if (res <= 0) { close(c->fd); free(c); return; }    // EOF or -errno
 *         urt_io_write(io, c->fd, c->buf, (size_t)res, URT_IO_CURPOS);  // echo
 *     }
 *
 * Where the continuation runs (the submitting task's context is captured at
 * submission):
 *   - a plain task: as a new task on the same worker (its local queue; it may
 *     be stolen only if URT_IO_STEALABLE was set on the io);
 *   - a task of a lane (urt/lane.h) or of a transaction (urt/tx.h, which owns
 *     a lane): as a task of that lane, so the lane's one-at-a-time order holds
 *     (it is queued behind the lane's other tasks when the completion arrives);
 *     while the operation is in flight the transaction counts it as a task in
 *     flight (a commit waits for its continuation, an abort cancels it). A
 *     lane (urt_lane_create) must not be destroyed while I/O of its tasks is
 *     in flight; a multishot operation may not belong to a transaction
 *     (-EOPNOTSUPP: each of its completions would have to be counted);
 *   - a task of a job (urt/job.h): as a task of that job; the operation is
 *     live work of the job from submission until its continuation returned, so
 *     the teardown waits for it; cancelling the job or reaching its deadline
 *     cancels the job's operations in flight (their continuations see
 *     -ECANCELED), then the teardown runs once.
 *
 * Lifecycle of a struct urt_io (numbered rules):
 *  1. urt_io_init() prepares it; the caller owns it.
 *  2. A successful urt_io_<op>() makes it in flight: from then until its
 *     continuation is called, do not modify, resubmit or free it, nor the
 *     buffers, iovecs, paths, addresses and statx buffers the operation uses.
 *  3. The continuation is called exactly once per successful submission
 *     (multishot: once per completion, the last one without URT_IO_F_MORE,
 *     rule 7). After that call the io is the caller's again: the continuation
 *     may free it, or submit the next operation with it (the usual way to loop).
 *  4. A failed submission (-errno from urt_io_<op>()) leaves the io with the
 *     caller; the continuation will not be called for it.
 *  5. Submission is worker only: from a task running on a worker of the
 *     runtime (the ring is single-issuer). Another thread gets -EPERM with a
 *     message; it submits a task that submits the operation instead:
 *         urt_spawn(rt, start_read, c, 0);    // start_read calls urt_io_read
 *  6. Cancellation: urt_io_cancel() (worker only, any worker of the runtime
 *     that ran the io's submission may ask; it is forwarded to the io's
 *     worker) asks the kernel to stop the operation; the continuation still
 *     runs once, with -ECANCELED if the operation did not complete first (it
 *     may also see the operation's own result, when the completion won).
 *  7. Multishot (URT_IO_MULTISHOT on accept, recv): one submission, many
 *     completions, each a call of the continuation with URT_IO_F_MORE set in
 *     urt_io_flags(io) while more will come; the call without it is the last
 *     (the io is the caller's again). A multishot operation ends by
 *     urt_io_cancel() (-ECANCELED), an error, end of file (a receive: 0) or
 *     destroy (-ECANCELED); a caller that wants to go on submits again. A
 *     full submission queue refuses nothing: the operation waits for room
 *     in the worker's overflow list, in order. When the kernel ends a multishot request on its own with a
 *     result, or a buffer ring runs dry (-ENOBUFS), the runtime re-arms it:
 *     the continuation never sees -ENOBUFS. Completions of one multishot io
 *     are delivered in kernel order, one continuation at a time (never two
 *     concurrently, even on a plain task).
 *  8. Deadline: urt_io_set_timeout(io, ns) before the submission links a
 *     timeout to the next operation (IORING_OP_LINK_TIMEOUT): if it did not
 *     complete within ns nanoseconds of the submitting call it is cancelled
 *     and its continuation sees -ETIME (not -ECANCELED); it fires at or
 *     after that time, typically tens of microseconds after (docs/io.md,
 *     "How late a deadline fires"). Cleared by each submission of the io,
 *     a refused one too (set it again before trying again).
 *  9. Shutdown: urt_runtime_destroy() with operations in flight cancels them;
 *     every continuation still runs exactly once (with -ECANCELED where the
 *     operation did not complete), before destroy returns, on the worker —
 *     a lane's (or a serial job's) in its lane's order, never beside another
 *     of its tasks; the runtime never closes a descriptor the caller owns. A
 *     submission after destroy began fails with -ESHUTDOWN, in both modes:
 *     URT_SHUTDOWN_DRAIN runs the queued tasks and the tasks they submit, not
 *     I/O, which may wait for ever (a receive on an idle connection; a
 *     continuation that submits the next receive). (The exception
 *     to "on the worker": with URT_SHUTDOWN_CANCEL a continuation that is
 *     still queued as a task when the workers have stopped — a lane's among
 *     them — is cancelled with the other queued tasks and runs, with the
 *     operation's result, on the destroying thread; a receive's data is
 *     still in its buffer there, and urt_bufring_put from that continuation
 *     is accepted. Buffer rings live until every worker stopped: a task on
 *     one worker may hold another worker's buffers, and put them back, until
 *     it returns.)
 * 10. One descriptor may have several operations in flight (a read and a
 *     write on one socket is normal); two reads of one stream socket at once
 *     complete in an order the kernel chooses — serialize them (a lane) if
 *     the order of bytes matters. The runtime never retries a short read or
 *     write on its own: the continuation sees the count. -EAGAIN is handled
 *     by the kernel (io_uring waits for readiness), so the continuation does
 *     not see it; only a descriptor its owner made O_NONBLOCK may complete
 *     a one-shot read or receive with -EAGAIN, on kernels that honour the
 *     flag (Linux 6.x waits for a socket's readiness anyway). io_uring
 *     reports -EINTR only for an operation that was being cancelled, which
 *     the continuation sees as -ECANCELED (or -ETIME for an expired linked
 *     timeout).
 *
 * Kernel features are probed at runtime creation (urt_runtime_features(),
 * urt/runtime.h, field io_features, URT_IO_FEAT_*): multishot accept and
 * recv, provided buffer rings, zero-copy send, fixed-file accept, linked
 * timeouts. Where one is missing (or forbidden by urt_config.ring_disable)
 * the runtime falls back: multishot by re-arming a single-shot operation
 * after each completion, a buffer ring by a buffer taken from the same pool
 * at completion (readiness, then recv(2)), zero copy by a copy (no
 * URT_IO_F_NOTIF), accept into the file table by installing the accepted
 * descriptor there, a linked timeout by a timer of the worker that cancels
 * the operation. The observable behaviour is the same (docs/io.md, "Feature
 * probe").
 */
#ifndef URT_IO_H
#define URT_IO_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct statx;
struct msghdr;
struct urt_io;
struct urt_bufring;

/* The continuation (rule 3): res as the system call returns it, or -errno.
 * Runs as a task on the submitting worker (module comment: "Where the
 * continuation runs"). */
typedef void urt_io_fn(struct urt_io *io, int32_t res, void *arg);

/* Runtime-private part of an operation: do not touch. */
struct urt_io_private {
    uint64_t words[16]; /* 96 bytes used today; the rest is room to grow without an ABI break */
};

struct urt_io {
    urt_io_fn *fn;
    void *arg;
    struct urt_task task;       /* the continuation's task (the runtime fills it) */
    struct urt_io_private priv;
};

/* Offset argument for read/write/readv/writev: use and advance the file
 * position (as read(2)/write(2) rather than pread(2)/pwrite(2)). */
#define URT_IO_CURPOS (-1)

/* Per-io options (urt_io_init_ex). */
#define URT_IO_STEALABLE 0x1u   /* a plain task's continuation may run on another worker */
#define URT_IO_INIT_FLAGS_ALL 0x1u

/* Per-operation flags (the `flags` argument of the ops that take one). */
#define URT_IO_MULTISHOT 0x100u /* accept, recv: many completions (rule 7) */
#define URT_IO_ZEROCOPY 0x200u  /* send: IORING_OP_SEND_ZC where probed, else a copy */
#define URT_IO_FIXED_FILE 0x400u /* send: fd is an index into the worker's registered files;
                                    accept: the new connection goes into that table (res: its index) */
#define URT_IO_FIXED_BUF 0x800u  /* send: buf lies in a buffer registered with urt_io_register_buffers
                                    (-EINVAL if not); a read or write whose buffer lies in one uses
                                    it without a flag */

/* Completion flags, read with urt_io_flags() inside the continuation. */
#define URT_IO_F_MORE 0x1u      /* multishot: more completions will come (rule 7) */
#define URT_IO_F_BUFFER 0x2u    /* a buffer of a buffer ring holds the data (urt_io_buffer) */
#define URT_IO_F_NOTIF 0x4u     /* zero-copy send: the kernel released the buffer */

/* Sets fn and arg and clears the rest (rule 1). Any thread. */
URT_API void urt_io_init(struct urt_io *io, urt_io_fn *fn, void *arg);
/* The same with options (URT_IO_STEALABLE): the extended form, named _ex as
 * every extended form of urt (urt_spawn_ex). Returns 0, or -EINVAL (NULL io,
 * unknown flag). Any thread. */
URT_API int urt_io_init_ex(struct urt_io *io, urt_io_fn *fn, void *arg, unsigned flags);

/* Common returns of every urt_io_<op>() below (worker only, rule 5):
 *   0           submitted: the continuation will run (rule 3);
 *   -EINVAL     NULL io or io->fn, a bad argument (named in the message);
 *   -EBUSY      io is in flight already (rule 2);
 *   -EPERM      the calling thread is not a worker of any runtime (rule 5);
 *   -EOPNOTSUPP a flag the operation does not take (never for a missing
 *               kernel feature: those fall back);
 *   -ENOMEM     no room for the operation's state (fixed, registered tables
 *               full);
 *   -ESHUTDOWN  the runtime is being destroyed (rule 9);
 *   -ECANCELED  the calling task's job was cancelled or the transaction ended.
 * Errors of the operation itself (-EBADF, -ECONNRESET, -ENOENT ...) arrive in
 * the continuation, never from the submitting call. A continuation is not
 * counted by max_pending_tasks (urt/admission.h): it is the rest of a task that
 * was. */

/* Files. off: a byte offset, or URT_IO_CURPOS. */
URT_API int urt_io_read(struct urt_io *io, int fd, void *buf, size_t len, int64_t off);
URT_API int urt_io_write(struct urt_io *io, int fd, const void *buf, size_t len, int64_t off);
URT_API int urt_io_readv(struct urt_io *io, int fd, const struct iovec *iov, unsigned iovcnt, int64_t off);
URT_API int urt_io_writev(struct urt_io *io, int fd, const struct iovec *iov, unsigned iovcnt, int64_t off);
#define URT_IO_FSYNC_DATA 0x1u /* fdatasync instead of fsync */
URT_API int urt_io_fsync(struct urt_io *io, int fd, unsigned flags);
/* res: the new descriptor (O_CLOEXEC is always added). */
URT_API int urt_io_openat(struct urt_io *io, int dirfd, const char *path, int flags, mode_t mode);
URT_API int urt_io_close(struct urt_io *io, int fd);
URT_API int urt_io_statx(struct urt_io *io, int dirfd, const char *path, int flags, unsigned mask,
                         struct statx *out);
URT_API int urt_io_fallocate(struct urt_io *io, int fd, int mode, int64_t off, int64_t len);

/* Sockets. accept: res is the new descriptor (SOCK_CLOEXEC added); with
 * URT_IO_MULTISHOT one per incoming connection (rule 7); with
 * URT_IO_FIXED_FILE the connection is installed in the calling worker's
 * registered file table instead (upper half of io_fixed_files) and res is
 * its index, for URT_IO_FIXED_FILE sends; urt_io_unregister_file(index)
 * closes it (-ENOMEM: no table, io_fixed_files 0). A connection that finds
 * that half full is closed and the accept ends with -ENFILE (a multishot
 * one too: its last call; the connections after it wait in the listen
 * backlog for the next accept, once slots were given back) — the same with
 * the kernel's accept into the table and without it. addr/addrlen may be
 * NULL (and must be with URT_IO_MULTISHOT). */
URT_API int urt_io_accept(struct urt_io *io, int fd, struct sockaddr *addr, socklen_t *addrlen, unsigned flags);
URT_API int urt_io_connect(struct urt_io *io, int fd, const struct sockaddr *addr, socklen_t addrlen);
/* recv into buf; msg_flags as recv(2) (MSG_WAITALL ...). res 0: the peer
 * closed. */
URT_API int urt_io_recv(struct urt_io *io, int fd, void *buf, size_t len, int msg_flags);
/* Multishot receive into buffers of a buffer ring (URT_IO_MULTISHOT is
 * implied): each completion's data is in urt_io_buffer(); the continuation
 * gives the buffer back with urt_bufring_put() when done with it (now or
 * later, from a task on any worker). A ring that runs dry (the
 * kernel's -ENOBUFS) is re-armed by the runtime once a buffer was returned;
 * no byte is dropped: the data waits in the socket. Worker only, on the
 * ring's worker (-EINVAL from another worker). The last call: 0 at end of
 * file, or -errno. */
URT_API int urt_io_recv_bufring(struct urt_io *io, int fd, struct urt_bufring *br, int msg_flags);
/* send: URT_IO_ZEROCOPY sends without copying where the kernel can: the
 * continuation is called once, after the kernel released the buffer, with
 * the send's result and URT_IO_F_NOTIF in urt_io_flags() (no flag: it was
 * copied; the buffer is the caller's again either way). It pays only for
 * large sends to a network card: over loopback it moved 4-9 times less data
 * than a copy at 4 KiB and below (docs/io.md, "When zero-copy sends pay"). */
URT_API int urt_io_send(struct urt_io *io, int fd, const void *buf, size_t len, int msg_flags, unsigned flags);
URT_API int urt_io_sendmsg(struct urt_io *io, int fd, const struct msghdr *msg, int msg_flags);
URT_API int urt_io_recvmsg(struct urt_io *io, int fd, struct msghdr *msg, int msg_flags);

/* Readiness of a descriptor whose I/O the task does not do itself (a
 * database client library's socket): res is the poll(2) revents (POLLIN,
 * POLLOUT, POLLERR, POLLHUP ...) once one of `events` is ready. One-shot. */
URT_API int urt_io_poll(struct urt_io *io, int fd, unsigned events);

/* A sleep: the continuation runs (res 0) ns nanoseconds from now
 * (urt_io_sleep) or once urt_now_ns() >= due_ns (urt_io_sleep_until), on the
 * worker's one timer facility; urt_io_cancel() ends it early (-ECANCELED). */
URT_API int urt_io_sleep(struct urt_io *io, uint64_t ns);
URT_API int urt_io_sleep_until(struct urt_io *io, uint64_t due_ns);

/* Rule 8: the next submission of io gets a linked timeout of ns (> 0)
 * nanoseconds; that submission clears it, whether it succeeds or is refused.
 * -EINVAL for 0, -EBUSY while io is in flight. Not for sleeps and multishot
 * operations (-EOPNOTSUPP at their submission, which clears it too). */
URT_API int urt_io_set_timeout(struct urt_io *io, uint64_t ns);

/* Rule 6. Returns 0 (asked; the continuation will tell), -EALREADY (not in
 * flight, or its last completion is being delivered), -EPERM (not on a
 * worker of the io's runtime), -EINVAL (NULL io). From another worker than
 * the io's, the cancel is carried out by the io's worker when it next runs
 * its queues; the caller must make sure the io is not freed meanwhile (its
 * continuation has not run yet). */
URT_API int urt_io_cancel(struct urt_io *io);

/* In the continuation: the URT_IO_F_* flags of this completion. */
URT_API unsigned urt_io_flags(const struct urt_io *io);
/* In the continuation of urt_io_recv_bufring() with URT_IO_F_BUFFER: the
 * buffer holding the res bytes, and its id for urt_bufring_put(). */
URT_API void *urt_io_buffer(const struct urt_io *io, uint16_t *bid);
/* The worker the io's continuation runs on (0..workers-1), -1 if never
 * submitted. Any thread. */
URT_API int urt_io_worker(const struct urt_io *io);

/* Buffer rings (provided buffers) of one worker, for multishot receives.
 * count (a power of two, 1..32768) buffers of size bytes each (count x size
 * at most 4 GiB), allocated by the runtime. Worker only: the ring belongs to
 * the calling worker; receives using it must be submitted there. Falls back
 * to the same pool handed out at completion where the kernel has no buffer
 * rings. 0, -EINVAL (NULL out, count or size out of range), -EPERM (not a
 * worker), -ENOMEM. A ring not destroyed is freed with the runtime. */
URT_API int urt_bufring_create(unsigned count, unsigned size, struct urt_bufring **out);
/* Gives a buffer back for the kernel to fill again. From any worker of the
 * ring's runtime (a lane's continuation may run on another worker than the
 * ring's: the buffer is then handed to the ring's worker, which re-arms a
 * receive that waited for it), or from a continuation that destroy runs on
 * its own thread (rule 9). Returns 0 (given back), -EINVAL (NULL br, or
 * a buffer the caller does not hold: out of range, or put already), -EPERM
 * (the calling thread is not a worker of the ring's runtime); a refusal
 * changes nothing and leaves a message for urt_last_error(). */
URT_API int urt_bufring_put(struct urt_bufring *br, uint16_t bid);
/* Frees the ring (its buffers too: put back or not): 0, -EBUSY while a
 * receive uses it, -EINVAL (NULL), -EPERM (not its worker). */
URT_API int urt_bufring_destroy(struct urt_bufring *br);

/* Registered files and buffers of the calling worker (worker only: -EPERM
 * elsewhere). Files: returns the index (>= 0) to use with
 * URT_IO_FIXED_FILE, or -ENFILE when the worker's half of its table
 * (urt_config.io_fixed_files / 2) is full, -EBADF (negative fd), -ENOMEM (no
 * table) or the kernel's error; unregister gives an index back (a registered
 * file's, or an accepted connection's: that closes it), -EINVAL for an
 * index not in use. Buffers: registers iov[0..n) (n 1..16384) once per
 * worker: -EBUSY if registered already, -EINVAL, or the kernel's error (e.g.
 * -ENOMEM past RLIMIT_MEMLOCK). */
URT_API int urt_io_register_file(int fd);
URT_API int urt_io_unregister_file(int index);
URT_API int urt_io_register_buffers(const struct iovec *iov, unsigned n);

#define URT_IO_FEAT_MULTISHOT_ACCEPT 0x1u
#define URT_IO_FEAT_MULTISHOT_RECV 0x2u
#define URT_IO_FEAT_BUFRING 0x4u
#define URT_IO_FEAT_SEND_ZC 0x8u
#define URT_IO_FEAT_FIXED_ACCEPT 0x10u
#define URT_IO_FEAT_LINK_TIMEOUT 0x20u

#ifdef __cplusplus
}
#endif

/* The old names of this header's functions, kept for one release. */
#include <urt/deprecated.h>

#endif
