/*
 * backend/be_ops.h — the backend-neutral part of backend/backend.h: completion
 * tags and flags, events, operation descriptors (struct be_op) and the
 * capability bits. Both implementations (backend/uring/, backend/portable/)
 * build on it; callers include backend/backend.h, which includes it.
 *
 * Memory ordering: plain types, none of their own.
 */
#ifndef URT_BACKEND_BE_OPS_H
#define URT_BACKEND_BE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

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

#endif
