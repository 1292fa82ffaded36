/*
 * backend/uring/ring.h — one io_uring ring, its set-up, probe and wake messages:
 * the lower half of the io_uring backend (backend/uring/uring.h and
 * backend.c build backend/backend.h's interface on it).
 *
 * This layer knows nothing about tasks. A ring is owned by one thread (single
 * issuer): only that thread submits to it or reaps its completions. Other
 * threads reach it only by sending it a message (IORING_OP_MSG_RING) from their
 * own ring, or, where the kernel has it, without a ring of their own
 * (IORING_REGISTER_SEND_MSG_RING, Linux 6.13).
 *
 * user_data convention of every SQE urt submits:
 *   0                      — nothing to do on completion (ignored)
 *   RING_UD_WAKE           — a wake message (CQE posted by MSG_RING)
 *   RING_UD_MSG_FAILED     — a MSG_RING we sent failed (res = -errno); low 32 bits of
 *                            the CQE's user_data above the tag carry the target cookie
 *   LIBURING_UDATA_TIMEOUT — liburing's internal wait timeout (ignored)
 *   anything else          — a pointer to a struct be_tag, whose complete() is called
 *                            (backend/uring/backend.c, ur_reap)
 */
#ifndef URT_URING_RING_H
#define URT_URING_RING_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define RING_UD_WAKE 1ull
#define RING_UD_MSG_FAILED 2ull /* | (cookie << 8) */
#define RING_UD_TAG_MASK 0xffull

/* What the start-up probe decided (see ring_probe()). */
struct ur_caps {
    uint32_t setup_flags;     /* IORING_SETUP_* for worker rings */
    uint32_t kernel_features; /* IORING_FEAT_* reported by the kernel */
    bool registered_fd;       /* io_uring_register_ring_fd() allowed */
    bool ringless_msg;        /* IORING_REGISTER_SEND_MSG_RING works */
    bool ext_arg;             /* wait timeouts through io_uring_enter's extended argument */
    bool sqpoll;
    uint32_t sqpoll_idle_ms;
    uint32_t io_features;     /* RING_IO_*: what tasks' I/O may use (ring_probe_io) */
};

/* I/O features found by the probe (same values as URT_IO_FEAT_* of urt/io.h). */
#define RING_IO_MULTISHOT_ACCEPT (1u << 0) /* IORING_ACCEPT_MULTISHOT (5.19) */
#define RING_IO_MULTISHOT_RECV (1u << 1)   /* IORING_RECV_MULTISHOT with a buffer ring (6.0) */
#define RING_IO_BUFRING (1u << 2)          /* IORING_REGISTER_PBUF_RING (5.19) */
#define RING_IO_SEND_ZC (1u << 3)          /* IORING_OP_SEND_ZC (6.0) */
#define RING_IO_FIXED_ACCEPT (1u << 4)     /* accept into the registered file table, IORING_FILE_INDEX_ALLOC (5.19) */
#define RING_IO_LINK_TIMEOUT (1u << 5)     /* IORING_OP_LINK_TIMEOUT (5.5) */
#define RING_IO_ALL ((1u << 6) - 1)
#define RING_IO_DISABLE_SHIFT 6            /* ring_disable bit of an I/O feature: its bit << 6 */

/* Ring feature bits a caller can forbid (same values as enum urt_ring_feature). */
#define RING_NO_DEFER_TASKRUN (1u << 0)
#define RING_NO_COOP_TASKRUN (1u << 1)
#define RING_NO_SINGLE_ISSUER (1u << 2)
#define RING_NO_REGISTERED_FD (1u << 3)
#define RING_NO_RINGLESS_MSG (1u << 4)
#define RING_NO_EXT_ARG (1u << 5)
/* bits 6..11: RING_IO_* << RING_IO_DISABLE_SHIFT */

/* Probes the running kernel from the calling thread: tries DEFER_TASKRUN +
 * SINGLE_ISSUER, then COOP_TASKRUN + TASKRUN_FLAG, then no flags (each
 * forbidden one skipped), whether ring-less messages work, and the I/O
 * features (backend/uring/probe_io.c). Returns 0 or -errno (e.g. -ENOSYS without
 * io_uring). */
int ring_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct ur_caps *out);
/* The RING_IO_* features that work on ring r (an idle ring of the calling
 * thread; each tried for real where a flag cannot be probed), minus those
 * disabled (ring_disable bits 6..11). backend/uring/probe_io.c. */
uint32_t ring_probe_io(struct io_uring *r, uint32_t disable);

struct ring {
    struct io_uring uring;
    int fd;                 /* the real ring fd: target of other threads' messages */
    bool registered;        /* ring fd registered (io_uring_register_ring_fd) */
    bool ext_arg;
    uint32_t unsubmitted;   /* SQEs prepared but not yet submitted */
    _Atomic uint64_t submitted; /* SQEs submitted over the ring's life (owner stores, anyone reads) */
};

/* Creates the ring in the calling thread (which becomes its only issuer). */
int ring_init(struct ring *r, const struct ur_caps *caps, uint32_t entries, uint32_t cq_entries);
void ring_exit(struct ring *r);

/* An SQE of r, submitting what is queued if the SQ is full; NULL only if the
 * kernel refuses to take any. Owner only. */
struct io_uring_sqe *ring_get_sqe(struct ring *r);

/* A wake ring for threads that are not workers and could not get a ring of
 * their own (no free fd, no memory): created in advance by the runtime's
 * creator, shared by those threads under a mutex. Only the failure path of
 * ring_send_wake_foreign() uses it, so the mutex is never on a hot path.
 * Without it such a wake was lost and only the sleeper's suspend timeout got
 * the task going (tests/unit/test_shutdown.c wake_from_thread_without_free_fds). */
struct ring_shared {
    pthread_mutex_t lock;
    struct io_uring uring;
    bool ready;
};

/* 0 or -errno (then ready stays false and sending through it fails). */
int ring_shared_init(struct ring_shared *r);
void ring_shared_exit(struct ring_shared *r);
/* Sends a wake message like ring_send_wake_foreign(). Any thread. */
int ring_shared_send_wake(struct ring_shared *r, int target_fd, int32_t value);

/* Submits queued SQEs. Returns the number submitted or -errno. Owner only. */
int ring_submit(struct ring *r);

/* Queues and submits a wake message to the ring whose fd is target_fd: the
 * target gets a CQE with user_data RING_UD_WAKE and res = value. On failure a
 * CQE tagged RING_UD_MSG_FAILED | cookie << 8 comes back to r. Owner only. */
int ring_send_wake(struct ring *r, int target_fd, int32_t value, uint32_t cookie);

/* Sends a wake message from a thread that owns no ring of urt's: ring-less
 * registration when available, else a small ring of this thread's, created on
 * first use and destroyed at thread exit. Returns 0 or -errno. Any thread. */
int ring_send_wake_foreign(int target_fd, int32_t value, bool ringless);

/* Submits what is queued and waits until at least one CQE is ready or
 * timeout_ns passed (0 = don't wait, UINT64_MAX = no timeout). Returns 0,
 * -ETIME on timeout, -EINTR, or -errno. Owner only. */
int ring_wait(struct ring *r, uint64_t timeout_ns);

/* Lets the kernel post deferred completions without waiting. Owner only. */
int ring_get_events(struct ring *r);

/* "SINGLE_ISSUER|DEFER_TASKRUN" etc. snprintf semantics. */
int ring_describe_setup(uint32_t setup_flags, char *buf, size_t len);

#endif
