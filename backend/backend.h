/*
 * backend/backend.h — how a worker waits, is woken, arms its one kernel timer
 * and does I/O: the interface every layer above speaks (docs/design.md,
 * "The I/O path"). It is a set of OPERATIONS, not io_uring SQEs, so that a
 * backend without io_uring (futex/eventfd parking, one epoll per worker for
 * sockets, files and syncs on a thread pool) can implement the same header.
 * Two implementations live in one library, chosen at run time by the
 * probe (struct be_caps: impl): io_uring (backend/uring/: its part,
 * backend/uring/uring.h, holds the context's layout and the inline hot path)
 * and the portable backend (backend/portable/: epoll, eventfds and a file
 * pool, for hosts that refuse io_uring). This header includes both parts at
 * its end and defines the dispatch: a context holds the io_uring one inline
 * and a pointer to a portable one (NULL on io_uring), so every inline call
 * tests one pointer that is NULL on io_uring (predicted so) and goes on
 * inline; the cold calls dispatch in backend/backend.c. Nothing above
 * backend/ includes an implementation's header directly.
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

#include "backend/be_ops.h"

struct urt_features;

/* The types (defined at the end): struct be_ctx (a thread's context), struct
 * be_caps (what the probe found: which implementation, its features), struct
 * be_shared (what a runtime's contexts share: io_uring's wake fallback, the
 * portable backend's file pool), struct be_peer (where a wake is sent: a
 * value, copied freely), struct be_bufring (a buffer ring). */
struct be_ctx;
struct be_caps;
struct be_shared;
struct be_bufring;

/* The implementations. */
enum be_impl {
    BE_IMPL_URING = 0,    /* io_uring (backend/uring/) */
    BE_IMPL_PORTABLE = 1, /* epoll, eventfds, a file pool (backend/portable/) */
};

/* Probes io_uring from the calling thread: 0 with out->impl = BE_IMPL_URING,
 * or -errno (-ENOSYS without io_uring, -EPERM when it is disabled). */
int be_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct be_caps *out);
/* The portable backend's capabilities (out->impl = BE_IMPL_PORTABLE): every
 * BE_IO_* (emulated) minus the disabled ones (disable bits 6..11), and
 * pool_threads threads for its file pool (at least 1). Always 0. */
int be_probe_portable(uint32_t disable, unsigned pool_threads, struct be_caps *out);
/* The implementation caps describe. */
static inline enum be_impl be_impl_of(const struct be_caps *caps);
/* Its name: "io_uring" or "portable". */
const char *be_impl_name(enum be_impl impl);
/* BE_IO_* found by be_probe (minus those disabled). */
static inline uint32_t be_io_features(const struct be_caps *caps);
/* Fills the public report (urt_runtime_features) from caps. */
void be_features(const struct be_caps *caps, struct urt_features *f);
/* A text for the setup flags of urt_features (snprintf semantics). */
int be_describe_setup(uint32_t setup_flags, char *buf, size_t len);

/* ---- a thread's context ---------------------------------------------------------------------- */

/* Creates the context in the calling thread (its only owner), of caps's
 * implementation, sharing sh (be_shared_init'ed with the same caps): room
 * for `entries` queued operations and `cq_entries` completions on io_uring
 * (the portable backend's queues grow). 0 or -errno. */
int be_init(struct be_ctx *c, const struct be_caps *caps, struct be_shared *sh, uint32_t entries,
            uint32_t cq_entries);
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

/* What a runtime's contexts share, made by the runtime's creator before any
 * context: on io_uring the wake fallback (best effort: should it fail, 0 is
 * returned and sends through it fail, be_wake reports their failure); on
 * the portable backend the file pool (0 or -errno). */
int be_shared_init(struct be_shared *sh, const struct be_caps *caps);
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
 * takes none; UINT32_MAX: off), so that the overflow list is used
 * (io_uring; the portable backend's queue is a list that never fills:
 * nothing to do). */
void be_fault_sq_room(struct be_ctx *c, uint32_t entries);
#endif

/* ---- the implementations and the dispatch ----------------------------------------------------- */

#include "backend/portable/portable.h"
#include "backend/uring/uring.h"

struct be_caps {
    uint8_t impl;             /* enum be_impl */
    char why[160];            /* why this implementation (set by the runtime; urt_runtime_backend) */
    uint32_t io_features;     /* BE_IO_*: what tasks' I/O may use */
    struct ur_caps ur;        /* io_uring: what ring_probe found */
    unsigned pool_threads;    /* portable: the file pool's threads */
};

/* pb is NULL on io_uring; ur is unused on the portable backend. pb comes
 * first: the one test of every inline call reads it beside ur's hot fields. */
struct be_ctx {
    struct pb_ctx *pb;
    struct ur_ctx ur;
};

struct be_shared {
    uint8_t impl;          /* enum be_impl */
    struct ur_shared ur;   /* io_uring: the wake fallback */
    struct pb_shared pb;   /* portable: the file pool */
};

struct be_peer {
    int fd; /* io_uring: the ring's fd (target of MSG_RING); portable: the context's wake eventfd */
};

/* A portable buffer ring travels as its struct pb_bufring * with bit 0 set
 * (io_uring's are page-aligned mappings: bit 0 clear). */
static inline bool be_bufring_portable(const struct be_bufring *r)
{
    return ((uintptr_t)r & 1u) != 0;
}

static inline struct pb_bufring *be_bufring_pb(struct be_bufring *r)
{
    return (struct pb_bufring *)((uintptr_t)r & ~(uintptr_t)1);
}

static inline enum be_impl be_impl_of(const struct be_caps *caps)
{
    return (enum be_impl)caps->impl;
}

static inline uint32_t be_io_features(const struct be_caps *caps)
{
    return caps->io_features;
}

static inline void be_reserve(struct be_ctx *c, unsigned n)
{
    if (__builtin_expect(c->pb != NULL, 0)) {
        pb_reserve(c->pb, n);
        return;
    }
    ur_reserve(&c->ur, n);
}

static inline void be_submit(struct be_ctx *c, const struct be_op *op, struct be_tag *tag)
{
    if (__builtin_expect(c->pb != NULL, 0)) {
        pb_submit(c->pb, op, tag);
        return;
    }
    ur_submit(&c->ur, op, tag);
}

static inline bool be_dirty(const struct be_ctx *c)
{
    if (__builtin_expect(c->pb != NULL, 0))
        return pb_dirty(c->pb);
    return ur_dirty(&c->ur);
}

static inline bool be_backlog(const struct be_ctx *c)
{
    if (__builtin_expect(c->pb != NULL, 0))
        return false; /* its queue is a list: nothing waits for room */
    return ur_backlog(&c->ur);
}

static inline bool be_ready(struct be_ctx *c)
{
    if (__builtin_expect(c->pb != NULL, 0))
        return pb_ready(c->pb);
    return ur_ready(&c->ur);
}

static inline uint64_t be_submitted(const struct be_ctx *c)
{
    if (__builtin_expect(c->pb != NULL, 0))
        return pb_submitted(c->pb);
    return ur_submitted(&c->ur);
}

static inline struct be_peer be_peer_of(const struct be_ctx *c)
{
    if (__builtin_expect(c->pb != NULL, 0))
        return (struct be_peer){c->pb->wake_fd};
    return (struct be_peer){ur_peer_fd(&c->ur)};
}

static inline struct be_peer be_peer_none(void)
{
    return (struct be_peer){-1};
}

static inline void be_bufring_add(struct be_bufring *r, void *addr, uint32_t len, uint16_t bid, uint32_t count)
{
    if (__builtin_expect(be_bufring_portable(r), 0)) {
        pb_bufring_add(be_bufring_pb(r), addr, len, bid);
        return;
    }
    ur_bufring_add(r, addr, len, bid, count);
}

#endif
