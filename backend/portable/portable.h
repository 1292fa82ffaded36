/*
 * backend/portable/portable.h — the portable backend: the operations of
 * backend/backend.h without io_uring, for hosts that refuse it (container
 * seccomp profiles, kernel.io_uring_disabled, gVisor, old kernels).
 *
 * Design (the shape Seastar's epoll backend and Dragonfly's epoll proactor
 * have, reduced to urt's operation set):
 *  - One struct pb_ctx per waiting thread (each worker, the watcher), owned
 *    by it: only the owner submits, reaps and waits (single issuer, as on
 *    io_uring). It holds one epoll instance and two eventfds: wake_fd, the
 *    address other threads wake the owner at (be_peer), and done_fd, which
 *    the file pool rings when it posts completions.
 *  - Operations are queued by pb_submit and started by pb_flush (batched,
 *    as the ring's submission is). Sockets (recv, send, their msg and
 *    zero-copy forms, accept, poll) are tried at once without blocking
 *    (MSG_DONTWAIT; a listening socket is made O_NONBLOCK at its first
 *    accept, a documented difference); an operation that would block waits
 *    on its descriptor in the epoll instance (one registration per
 *    descriptor, EPOLLONESHOT, re-armed with the union of what its waiters
 *    want) and is tried again when the descriptor is ready. Files, syncs,
 *    open/close/statx and connect run on the shared file pool (pb_pool.c):
 *    a thread runs an operation and the pool-side operations linked after
 *    it, then posts the completions, in order, to the owner's remote list.
 *  - Chains (BE_F_LINK): the next operation starts when this one completed
 *    with success (for reads and writes: the full length); otherwise the
 *    rest completes with -ECANCELED. BE_LINK_TIMEOUT bounds the operation
 *    before it with an absolute deadline: when it passes first the
 *    operation is cancelled (-ECANCELED) and the timeout completes -ETIME;
 *    otherwise the timeout completes -ECANCELED.
 *  - Timers: BE_TIMEOUT and linked deadlines sit in one binary heap per
 *    context; pb_wait sleeps at most until the earliest (epoll_pwait2, or
 *    epoll_wait in milliseconds rounded up where the kernel lacks it).
 *  - Multishot receive and accept, buffer rings (a user-space ring of the
 *    caller's buffers, picked at completion), registered files and buffers,
 *    zero-copy send (a send, then its notification) are emulated with the
 *    io_uring completion flags (BE_CF_MORE, BE_CF_BUFFER, BE_CF_NOTIF).
 *
 * Memory-ordering contract:
 *  - Owner-only state (queues, heap, descriptor table, registered
 *    resources) has no ordering of its own.
 *  - Remote completions: a pool thread appends to the context's remote
 *    list under rlock and then writes done_fd; the owner takes the list
 *    under rlock (the mutex orders the operation's result before its
 *    completion is seen). The owner reads done_fd only to empty it.
 *  - A wake is a write(2) of 1 to wake_fd by any thread; what it announces
 *    (a queue push) is ordered by the caller's protocol (sched/core/
 *    sleeper.h: the push is seq_cst before the wake is sent, the sleeper
 *    re-checks its queues after it reaped the wake). One BE_EV_WAKE event
 *    is delivered per message (the eventfd's count).
 *  - `submitted` is written by the owner, read relaxed by anyone.
 */
#ifndef URT_BACKEND_PORTABLE_H
#define URT_BACKEND_PORTABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/be_ops.h"

struct pb_op;
struct pb_fd;
struct pb_pool;

/* A buffer ring of the portable backend: the caller's buffers, given with
 * pb_bufring_add, picked in order by receives that select from its group. */
struct pb_bufring {
    uint32_t count, mask;
    uint32_t head, tail; /* owner only */
    struct pb_buf {
        void *addr;
        uint32_t len;
        uint16_t bid;
    } *bufs;
};

/* One completion, as the owner's tag will see it. */
struct pb_cqe {
    struct be_tag *tag;
    int32_t res;
    uint32_t flags;
};

/* What every context of a runtime shares: the file pool. */
struct pb_shared {
    struct pb_pool *pool;
};

struct pb_ctx {
    int epfd;
    int wake_fd; /* eventfd: wake messages (the context's be_peer) */
    int done_fd; /* eventfd: the pool posted completions */
    struct pb_shared *sh;

    /* submission (owner) */
    struct pb_op *sub_head, *sub_tail; /* queued, not started: chain heads in order */
    struct pb_op *chain_head, *chain_tail; /* a chain being queued (its last op has BE_F_LINK) */

    /* completions ready for pb_reap (owner): a ring that grows */
    struct pb_cqe *cq;
    uint32_t cq_head, cq_n, cq_cap;
    uint64_t wakes; /* wake messages not yet delivered */

    /* completions posted by the pool */
    pthread_mutex_t rlock;
    struct pb_op *r_head, *r_tail;
    /* Completions on the remote list: a hint, relaxed (the list itself is
     * under rlock). A pool thread adds to it and then writes done_fd, both
     * under rlock; an owner that read a stale 0 is not left asleep: done_fd
     * is readable, its epoll_wait returns, and handle_events takes the list
     * under rlock. The owner zeroes it under rlock when it takes the list. */
    _Atomic uint32_t r_count;

    /* descriptors with waiters, indexed by fd; the ones with waiters listed */
    struct pb_fd **fds;
    struct pb_fd *active;
    uint32_t fd_cap;
    uint32_t waiting; /* operations waiting on descriptors */

    /* timers: a binary heap of operations by deadline */
    struct pb_op **heap;
    uint32_t heap_n, heap_cap;

    /* registered resources */
    int *files;
    uint32_t nfiles, alloc_off, alloc_len;
    struct iovec *bufs;
    uint32_t nbufs;
    struct pb_bufring *rings[64]; /* by buffer group id (< 64) */

    struct pb_op *free_ops; /* a free list of operation records */
    struct pb_op *all_ops;  /* every record made, free or not (linked by all; freed by pb_exit) */
    uint32_t inflight;      /* operations not yet completed */
    _Atomic uint64_t submitted;
    bool have_pwait2;
    bool just_polled; /* pb_wait read epoll and expired timers since the last pb_reap */
};

/* ---- the shared file pool ---- */

/* Starts the pool's threads (at least 1): 0 or -errno. */
int pb_shared_init(struct pb_shared *sh, unsigned threads);
/* Stops and joins them (every context using it is closed). */
void pb_shared_exit(struct pb_shared *sh);

/* ---- a context (owner only, but pb_wake) ---- */

int pb_init(struct pb_ctx *c, struct pb_shared *sh);
void pb_exit(struct pb_ctx *c);

void pb_reserve(struct pb_ctx *c, unsigned n);
void pb_submit(struct pb_ctx *c, const struct be_op *op, struct be_tag *tag);
int pb_flush(struct pb_ctx *c);
bool pb_dirty(const struct pb_ctx *c);
bool pb_ready(struct pb_ctx *c);
int pb_wait(struct pb_ctx *c, uint64_t timeout_ns);
void pb_poll(struct pb_ctx *c);
unsigned pb_reap(struct pb_ctx *c, be_event_fn *on_event, void *ctx);
static inline uint64_t pb_submitted(const struct pb_ctx *c)
{
    return atomic_load_explicit(&c->submitted, memory_order_relaxed);
}

/* Any thread: one wake message to the context whose wake_fd is target. */
int pb_wake(int target_wake_fd);

/* Registered resources (owner). */
int pb_bufring_create(struct pb_ctx *c, uint16_t bgid, uint32_t count, struct pb_bufring **out);
void pb_bufring_add(struct pb_bufring *r, void *addr, uint32_t len, uint16_t bid);
void pb_bufring_unregister(struct pb_ctx *c, struct pb_bufring *r, uint16_t bgid);
void pb_bufring_free(struct pb_bufring *r);
int pb_files_register(struct pb_ctx *c, uint32_t n);
int pb_files_alloc_range(struct pb_ctx *c, uint32_t off, uint32_t len);
int pb_files_update(struct pb_ctx *c, uint32_t slot, int fd);
int pb_buffers_register(struct pb_ctx *c, const struct iovec *iov, unsigned n);

/* ---- shared between the backend's files (not for callers) ---- */

enum pb_state {
    PB_QUEUED = 0,  /* submitted, not started */
    PB_WAIT_FD,     /* waits on its descriptor */
    PB_POOL,        /* queued on the pool or running there */
    PB_TIMER,       /* a BE_TIMEOUT in the heap */
    PB_RAN,         /* the pool ran it as part of a chain: its completion is on its way */
    PB_DONE,        /* completed (on the done list or delivered) */
};

struct pb_op {
    struct be_op op;
    struct be_tag *tag;
    struct pb_ctx *c;
    struct pb_op *next;  /* the list it is on (submitted, done, remote, waiters, pool queue) */
    struct pb_op *link;  /* the next operation of its chain */
    struct pb_op *lt;    /* its BE_LINK_TIMEOUT, when one bounds it */
    struct pb_op *all;   /* the context's list of every record (pb_ctx.all_ops) */
    uint64_t deadline;   /* in the heap when heap_ix != UINT32_MAX */
    uint32_t heap_ix;
    uint32_t want;       /* epoll events it waits for */
    int32_t res;
    uint32_t cflags;
    uint8_t state;       /* enum pb_state */
    _Atomic bool cancelled; /* a cancel or its deadline came while the pool ran it (relaxed) */
};

void pb_complete(struct pb_ctx *c, struct pb_op *o, int32_t res, uint32_t cflags);
void pb_finish(struct pb_ctx *c, struct pb_op *o, int32_t res, uint32_t cflags);
void pb_heap_add(struct pb_ctx *c, struct pb_op *o);
void pb_heap_del(struct pb_ctx *c, struct pb_op *o);
/* pb_net.c */
bool pb_is_net(uint8_t kind);
void pb_net_start(struct pb_ctx *c, struct pb_op *o);
void pb_net_event(struct pb_ctx *c, int fd, uint32_t revents);
/* Cancels the waiting operation o (or, o NULL, the one tagged tag): true if found. */
bool pb_net_cancel(struct pb_ctx *c, struct pb_op *o, struct be_tag *tag);
void pb_net_exit(struct pb_ctx *c);
/* pb_pool.c */
void pb_pool_start(struct pb_ctx *c, struct pb_op *o);
/* Cancels o (or, o NULL, the one tagged tag) on the pool: 0 (it was queued:
 * completed -ECANCELED), -EALREADY (it runs: marked, completes on its own),
 * -ENOENT (not on the pool). */
int pb_pool_cancel(struct pb_ctx *c, struct pb_op *o, struct be_tag *tag);
int32_t pb_run_file_op(struct pb_ctx *c, struct pb_op *o);
bool pb_link_breaks(const struct pb_op *o, int32_t res);
int pb_fd_of(struct pb_ctx *c, const struct be_op *op);

#endif
