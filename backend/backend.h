/*
 * backend/backend.h — how a worker waits, is woken, arms its one kernel timer
 * and does I/O: the interface every layer above speaks (docs/design.md,
 * "The I/O path"). It is a set of OPERATIONS, not io_uring SQEs, so that a
 * backend without io_uring (futex/eventfd parking, one epoll per worker for
 * sockets, files and syncs on a thread pool) can implement the same header.
 * io_uring is the implementation today (backend/uring/): this header
 * includes its part (backend/uring/uring.h: the context's layout and the
 * inline hot path) at its end; nothing above backend/ includes it directly.
 *
 * Design:
 *  - struct be_ctx: one per thread that waits (each worker, the watcher),
 *    created in that thread, owned by it: only the owner submits, reaps and
 *    waits on it (single issuer).
 *  - struct be_op: an operation descriptor (kind, fd, buffer, length,
 *    offset, flags). be_submit(c, op, tag) queues it; its completion comes
 *    back through be_reap as tag->complete(tag, res, flags) on the owner's
 *    thread, with res = the operation's result or -errno and flags the
 *    backend-neutral BE_CF_* bits. tag NULL: no completion is delivered.
 *  - Chains: BE_F_LINK makes the next operation run only after this one
 *    succeeded (a failure or short transfer ends the rest with -ECANCELED).
 *    A chain of n is queued with be_reserve(c, n) then n be_submit calls, so
 *    that it reaches the kernel whole.
 *  - The full-queue policy (the only one of the runtime): be_submit never
 *    refuses an operation. What the kernel's queue cannot take now waits, in
 *    order, in the context's overflow list; the owner's next be_flush (the
 *    worker calls it after each task that submitted and in its idle loop)
 *    and be_wait move it on, whole chains only. Callers have no retry path.
 *  - Submission is batched: queued operations reach the kernel at be_flush,
 *    be_wait, or when the queue fills.
 *  - One wake sender for every thread: be_wake(). From a thread's own
 *    context it is a message from that context (a failure comes back later
 *    as BE_EV_WAKE_FAILED with the cookie); from any other thread a message
 *    without a context of its own (ring-less, or a small per-thread one), and
 *    if that cannot be had, through the runtime's shared fallback (under its
 *    lock). The target sees one BE_EV_WAKE event per message.
 *  - Timers: the timer facility (sched/core/timer.h) owns ONE kernel timeout
 *    per context: BE_TIMEOUT (absolute CLOCK_MONOTONIC deadline in off),
 *    moved by BE_TIMEOUT_UPDATE and removed by BE_TIMEOUT_REMOVE (target =
 *    the timeout's tag). BE_LINK_TIMEOUT after a BE_F_LINK operation bounds
 *    it with an absolute deadline.
 *
 * Memory ordering: none of its own on the owner's side (one thread). A wake
 * message is the only thing another thread sends; what it announces (a queue
 * push) is ordered by the caller's protocol (sched/core/sleeper.h: the push
 * is seq_cst before the wake is sent, and the sleeper re-checks its queues
 * after it reaped the message). be_submitted() is written by the owner and
 * read by anyone, relaxed (statistics).
 */
#ifndef URT_BACKEND_H
#define URT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct urt_features;

/* ---- completions --------------------------------------------------------------------------- */

/* An operation whose completion continues somewhere: embed it, set complete,
 * pass its address to be_submit (8-byte aligned). */
struct be_tag {
    void (*complete)(struct be_tag *tag, int32_t res, uint32_t flags);
};

/* Completion flags (tag->complete's flags). */
#define BE_CF_BUFFER (1u << 0)   /* a buffer of the selected group was used: its id in flags >> BE_CF_BUFFER_SHIFT */
#define BE_CF_MORE (1u << 1)     /* a multishot or zero-copy operation: more completions follow */
#define BE_CF_NOTIF (1u << 3)    /* a zero-copy send's notification: its buffer is the caller's again */
#define BE_CF_BUFFER_SHIFT 16

/* Events that are not an operation's completion (be_reap's on_event). */
enum be_event {
    BE_EV_WAKE = 1,        /* a wake message arrived (arg 0) */
    BE_EV_WAKE_FAILED = 2, /* a wake this context sent did not arrive (arg = the cookie it was sent with) */
};
typedef void be_event_fn(void *ctx, enum be_event ev, uint32_t arg);

/* ---- operations ------------------------------------------------------------------------------ */

enum be_kind {
    BE_NOP = 0,
    BE_READ,            /* fd, addr, len, off, arg = RWF_* */
    BE_WRITE,           /* fd, addr, len, off, arg = RWF_* (RWF_DSYNC: the write and its fdatasync in one) */
    BE_READV,           /* fd, addr = iovec array, len = count, off */
    BE_WRITEV,          /* fd, addr = iovec array, len = count, off */
    BE_READ_FIXED,      /* fd, addr, len, off, buf = registered buffer index */
    BE_WRITE_FIXED,     /* fd, addr, len, off, buf = registered buffer index */
    BE_FSYNC,           /* fd */
    BE_FDATASYNC,       /* fd */
    BE_SYNC_FILE_RANGE, /* fd, len, off, arg = SYNC_FILE_RANGE_* */
    BE_FALLOCATE,       /* fd, arg = mode, off, len64 */
    BE_OPENAT,          /* fd = dirfd, addr = path, arg = flags, len = mode */
    BE_CLOSE,           /* fd */
    BE_STATX,           /* fd = dirfd, addr = path, arg = flags, len = mask, addr2 = struct statx * */
    BE_RECV,            /* fd, addr, len, arg = msg flags (BE_F_BUF_SELECT: buf = group; BE_F_MULTISHOT) */
    BE_SEND,            /* fd, addr, len, arg = msg flags */
    BE_SEND_ZC,         /* fd, addr, len, arg = msg flags (BE_F_FIXED_BUF: buf = registered buffer) */
    BE_RECVMSG,         /* fd, addr = msghdr, arg = msg flags */
    BE_SENDMSG,         /* fd, addr = msghdr, arg = msg flags */
    BE_ACCEPT,          /* fd, addr = sockaddr, addr2 = socklen_t *, arg = SOCK_* flags
                           (BE_F_DIRECT: into a slot of the registered file table; BE_F_MULTISHOT) */
    BE_CONNECT,         /* fd, addr = sockaddr, len = its length */
    BE_POLL,            /* fd, arg = poll events (BE_F_MULTISHOT) */
    BE_CANCEL,          /* target: the tag of the operation to cancel */
    BE_TIMEOUT,         /* off = absolute deadline (CLOCK_MONOTONIC ns): completes with -ETIME */
    BE_TIMEOUT_UPDATE,  /* target = a BE_TIMEOUT's tag, off = its new absolute deadline */
    BE_TIMEOUT_REMOVE,  /* target = a BE_TIMEOUT's tag (which then completes with -ECANCELED) */
    BE_LINK_TIMEOUT,    /* off = absolute deadline of the linked operation before it (BE_F_LINK) */
    BE_KIND_COUNT
};

/* be_op flags */
#define BE_F_LINK (1u << 0)          /* the next operation runs only after this one succeeded */
#define BE_F_MULTISHOT (1u << 1)     /* completions with BE_CF_MORE until its last */
#define BE_F_FIXED_FILE (1u << 2)    /* fd is an index in the registered file table */
#define BE_F_BUF_SELECT (1u << 3)    /* the buffer is picked from group buf at completion */
#define BE_F_DIRECT (1u << 4)        /* accept into a slot of the registered file table (allocated) */
#define BE_F_SKIP_SUCCESS (1u << 5)  /* no completion unless it fails (then tag NULL: ignored) */
#define BE_F_FIXED_BUF (1u << 6)     /* the buffer is registered buffer buf */

struct be_op {
    uint8_t kind;   /* enum be_kind */
    uint8_t flags;  /* BE_F_* */
    uint16_t buf;   /* registered buffer index (BE_F_FIXED_BUF, *_FIXED) or buffer group (BE_F_BUF_SELECT) */
    int32_t fd;
    uint32_t len;
    uint32_t arg;   /* the kind's flags, mode or events (see enum be_kind) */
    uint64_t off;   /* file offset, or an absolute deadline (timeouts) */
    union {
        void *addr;
        const void *caddr;
        struct be_tag *target; /* BE_CANCEL, BE_TIMEOUT_UPDATE, BE_TIMEOUT_REMOVE */
    };
    union {
        void *addr2;
        uint64_t len64; /* BE_FALLOCATE */
    };
};

/* ---- capabilities (what the probe found) ------------------------------------------------------- */

/* I/O features tasks' I/O may use (same values as URT_IO_FEAT_* of urt/io.h). */
#define BE_IO_MULTISHOT_ACCEPT (1u << 0) /* multishot accept */
#define BE_IO_MULTISHOT_RECV (1u << 1)   /* multishot receive into a buffer ring */
#define BE_IO_BUFRING (1u << 2)          /* buffer rings the kernel picks from */
#define BE_IO_SEND_ZC (1u << 3)          /* zero-copy send */
#define BE_IO_FIXED_ACCEPT (1u << 4)     /* accept into the registered file table, slot allocated */
#define BE_IO_LINK_TIMEOUT (1u << 5)     /* BE_LINK_TIMEOUT */
#define BE_IO_ALL ((1u << 6) - 1)

/* Features a caller can forbid (same values as enum urt_ring_feature); bits
 * 6..11 are BE_IO_* << 6. */
#define BE_NO_DEFER_TASKRUN (1u << 0)
#define BE_NO_COOP_TASKRUN (1u << 1)
#define BE_NO_SINGLE_ISSUER (1u << 2)
#define BE_NO_REGISTERED_FD (1u << 3)
#define BE_NO_RINGLESS_MSG (1u << 4)
#define BE_NO_EXT_ARG (1u << 5)
#define BE_IO_DISABLE_SHIFT 6

/* The implementation's types: struct be_ctx (a thread's context), struct
 * be_caps (what the probe found), struct be_shared (the wake fallback),
 * struct be_peer (where a wake is sent: a value, copied freely), struct
 * be_bufring (a kernel buffer ring). */
struct be_ctx;
struct be_caps;
struct be_shared;
struct be_bufring;

/* Probes the kernel from the calling thread: 0, or -errno (-ENOSYS without
 * the backend's kernel interface, -EPERM when it is disabled). */
int be_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct be_caps *out);
/* BE_IO_* found by be_probe (minus those disabled). */
static inline uint32_t be_io_features(const struct be_caps *caps);
/* Fills the public report (urt_runtime_features) from caps. */
void be_features(const struct be_caps *caps, struct urt_features *f);
/* A text for the setup flags of urt_features (snprintf semantics). */
int be_describe_setup(uint32_t setup_flags, char *buf, size_t len);

/* ---- a thread's context ---------------------------------------------------------------------- */

/* Creates the context in the calling thread (its only owner): room for
 * `entries` queued operations and `cq_entries` completions. 0 or -errno. */
int be_init(struct be_ctx *c, const struct be_caps *caps, uint32_t entries, uint32_t cq_entries);
/* Closes it (what is in flight is abandoned: drain first, be_drain). */
void be_exit(struct be_ctx *c);

/* Owner: the next n be_submit calls reach the kernel together (a chain). */
static inline void be_reserve(struct be_ctx *c, unsigned n);
/* Owner: queues op; tag->complete runs from be_reap (NULL: nothing runs).
 * Never refuses (the full-queue policy above). */
static inline void be_submit(struct be_ctx *c, const struct be_op *op, struct be_tag *tag);
/* Owner: hands what is queued (and what waits in the overflow list) to the
 * kernel. The number handed over, or -errno. */
int be_flush(struct be_ctx *c);
/* Owner: something is queued that be_flush would hand over. */
static inline bool be_dirty(const struct be_ctx *c);
/* Owner: operations wait in the overflow list (the owner's idle loop calls
 * be_flush then, so that they move on without a wait). */
static inline bool be_backlog(const struct be_ctx *c);

/* Owner: flushes and waits until a completion or event is ready or
 * timeout_ns passed (0: don't wait; UINT64_MAX: no timeout; while the
 * overflow list holds operations the wait is at most a millisecond, so they
 * move on). 0, -ETIME, -EINTR or -errno. */
int be_wait(struct be_ctx *c, uint64_t timeout_ns);
/* Owner: lets completions the kernel deferred be posted without waiting. */
void be_poll(struct be_ctx *c);
/* Owner: completions are ready to reap (cheap). */
static inline bool be_ready(struct be_ctx *c);
/* Owner: delivers every ready completion (tag->complete) and event
 * (on_event). Returns how many it saw. */
unsigned be_reap(struct be_ctx *c, be_event_fn *on_event, void *ctx);
/* Owner: the one shutdown drain (a worker's tasks' I/O, a log channel's
 * last writes, the watcher's timeout): calls step(arg) (may be NULL; it may
 * cancel, retry, submit), returns once more(arg) is false, else flushes,
 * waits at most step_ns, reaps (events to on_event) and starts again. */
void be_drain(struct be_ctx *c, uint64_t step_ns, void (*step)(void *arg), bool (*more)(void *arg), void *arg,
              be_event_fn *on_event, void *ctx);
/* Operations handed to the kernel over the context's life (any thread, relaxed). */
static inline uint64_t be_submitted(const struct be_ctx *c);

/* ---- wake ---------------------------------------------------------------------------------- */

/* The address other threads wake c's owner at (valid once be_init returned 0). */
static inline struct be_peer be_peer_of(const struct be_ctx *c);
static inline struct be_peer be_peer_none(void);

/* The shared wake fallback, made by the runtime's creator: 0 or -errno
 * (then sends through it fail and be_wake reports their failure). */
int be_shared_init(struct be_shared *sh);
void be_shared_exit(struct be_shared *sh);

/* The one send-wake of the runtime, for every thread. self: the calling
 * thread's own context, or NULL. A failure of a message sent from self comes
 * back to self as BE_EV_WAKE_FAILED with cookie. Returns 0 (the message is
 * on its way) or -errno (nothing is in flight). */
int be_wake(const struct be_caps *caps, struct be_shared *fallback, struct be_ctx *self, struct be_peer target,
            uint32_t cookie);

/* ---- registered resources (owner only) ------------------------------------------------------- */

/* A buffer ring of count entries (a power of two) for group bgid: 0 with
 * *out, or -errno. Its buffers are added with be_bufring_add. */
int be_bufring_create(struct be_ctx *c, uint16_t bgid, uint32_t count, struct be_bufring **out);
/* Gives buffer bid (addr, len) to the kernel's ring (count: the ring's size). */
static inline void be_bufring_add(struct be_bufring *r, void *addr, uint32_t len, uint16_t bid, uint32_t count);
/* Unregisters the group (owner); its memory stays until be_bufring_free. */
void be_bufring_unregister(struct be_ctx *c, struct be_bufring *r, uint16_t bgid);
/* Frees the ring's memory (any thread, once unregistered). */
void be_bufring_free(struct be_bufring *r, uint32_t count);
/* A sparse registered file table of n slots; the kernel allocates accept
 * slots in [off, off + len) (be_files_alloc_range). 0 or -errno. */
int be_files_register(struct be_ctx *c, uint32_t n);
int be_files_alloc_range(struct be_ctx *c, uint32_t off, uint32_t len);
/* Installs fd in slot (-1: empties it). 0 or -errno. */
int be_files_update(struct be_ctx *c, uint32_t slot, int fd);
/* Registers buffers for BE_READ_FIXED / BE_WRITE_FIXED / BE_F_FIXED_BUF. */
int be_buffers_register(struct be_ctx *c, const struct iovec *iov, unsigned n);

#if URT_FAULT_INJECTION
/* Tests: the kernel's queue seems to hold `entries` operations (0: it
 * takes none; UINT32_MAX: off), so that the overflow list is used. */
void be_fault_sq_room(struct be_ctx *c, uint32_t entries);
#endif

/* The implementation (io_uring). */
#include "backend/uring/uring.h"

#endif
