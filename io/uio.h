/*
 * io/uio.h — I/O for tasks (urt/io.h, SPEC C20), the private part shared
 * by io/uio.c (submission, completion, the continuation, cancel,
 * shutdown), io/uio_ops.c (the operations), io/uio_buf.c (buffer
 * rings, registered files and buffers, the feature probe's use) and
 * io/uio_timed.c (timed submission).
 *
 * An operation's private state (struct uio) lives in the caller's struct
 * urt_io (its priv words): no allocation per operation. It is built on the
 * one I/O path of sched/core/io.h (a struct be_op submitted with a struct sched_io, completed
 * on the worker that prepared it) and the one timer facility of
 * sched/core/timer.h (sleeps); the continuation is the io's embedded urt_task,
 * run by the one run path (sched/core/run.h) like any task.
 *
 * State of an io (tag, and the owner's fields):
 *   idle      tag has no UIO_T_INFLIGHT; the caller's.
 *   in flight UIO_T_INFLIGHT: operation(s) or a timer on worker `tag & UIO_T_WORKER`
 *             - 1, listed in that worker's in-flight array (uio_worker.ops);
 *   delivering UIO_T_DELIVERING too: the last completion arrived, the
 *             continuation task is queued; urt_io_cancel says -EALREADY.
 *   The continuation clears both bits right before it calls fn (rule 3).
 * Multishot: intermediate completions (BE_CF_MORE) are delivered one
 * at a time through the same task; those that arrive while one is being
 * delivered wait in a FIFO (uio_more) in kernel order.
 *
 * Memory ordering: everything but `tag` is touched by the owning worker only
 * (or by the caller while the io is idle). tag is read by other threads
 * (urt_io_cancel from another worker, urt_io_worker): the owner publishes it
 * with release stores / RMWs; a canceller on another worker sets
 * UIO_T_CANCEL by CAS (only while INFLIGHT and not DELIVERING; the owner
 * sets DELIVERING by fetch_or, so after that nobody else writes the tag) and
 * then posts the owner's sweep task (io/uio.c "Sweeps"), which reads it.
 */
#ifndef URT_SCHED_UIO_H
#define URT_SCHED_UIO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/io.h>

#include "sched/core/io.h"
#include "sched/core/sched.h"

/* tag bits */
#define UIO_T_WORKER 0xffffull        /* worker index + 1 of the last submission (0: never) */
#define UIO_T_RT_SHIFT 16             /* low 8 bits of the runtime's id */
#define UIO_T_RT (0xffull << UIO_T_RT_SHIFT)
#define UIO_T_INFLIGHT (1ull << 32)
#define UIO_T_CANCEL (1ull << 33)     /* another worker asked for a cancel */
#define UIO_T_DELIVERING (1ull << 34)

/* kinds */
enum uio_kind {
    UIO_K_OP = 0,       /* one operation (plus an optional linked timeout), one completion; a zero-copy send
                           also its notification (one continuation call for both) */
    UIO_K_SLEEP = 1,    /* a timer of the worker's timer queue */
    UIO_K_MULTI = 2,    /* multishot operation: completions with BE_CF_MORE, then a last one */
    UIO_K_REARM = 3,    /* multishot by a single-shot accept / buffer-selecting recv, re-armed */
    UIO_K_POLLRECV = 4, /* multishot receive by readiness (poll) and recv(2) into a pool buffer */
};

static inline bool uio_kind_multi(unsigned kind)
{
    return kind >= UIO_K_MULTI;
}

/* owner flags */
#define UIO_F_TIMEOUT 0x1u     /* urt_io_set_timeout: the next submission gets a linked timeout */
#define UIO_F_TIMED_OUT 0x2u   /* the linked timeout fired */
#define UIO_F_CANCEL_SENT 0x4u /* an async cancel was prepared (or the op was ended here) */
#define UIO_F_QUEUED 0x8u      /* multishot: a completion is being delivered (the task is out) */
#define UIO_F_WAIT_BUF 0x10u   /* multishot receive: waits for a buffer (the ring ran dry) */
#define UIO_F_INSTALL 0x20u    /* accept into the file table without the kernel's help */
#define UIO_F_TMO_TIMER 0x40u  /* the deadline is a timer of the worker (no linked timeouts) */
#define UIO_F_FIXED 0x80u      /* accept into the worker's file table (res: an index) */

/* What a submission returns to (captured from the submitting task). */
struct uio_ctx {
    struct worker *w;
    struct urt_job *job;   /* the task's job (its lane if serial), or NULL */
    struct urt_lane *lane; /* else the task's lane (plain or a transaction's), or NULL */
};

/* Multishot state (allocated at submission, freed with the last delivery):
 * what re-arming needs and the completions waiting for their turn (owner
 * only; a FIFO in kernel order). */
enum uio_mop { UIO_MOP_ACCEPT = 0, UIO_MOP_RECV = 1 };

struct uio_ent {
    int32_t res;
    uint32_t cflags; /* BE_CF_* (F_BUFFER with the buffer id in the high 16 bits) */
};

struct uio_more {
    int fd;
    int msg_flags;
    uint8_t op;            /* enum uio_mop */
    struct uio *next_wait; /* the buffer ring's list of receives waiting for a buffer */
    uint32_t armed_at;     /* a receive's: its ring's returns count (uio_bufring_returns) when last armed */
    uint32_t head, n, cap;
    struct uio_ent *e;
};

struct uio {
    struct sched_io sio;   /* the operation's completion (sched/core/io.h) or its timer; sio.ns: the timeout */
    struct be_tag tmo;     /* the linked timeout's completion */
    _Atomic uint64_t tag;  /* UIO_T_* (see the header comment) */
    int32_t res;           /* the completion being delivered */
    uint32_t cflags;       /* its completion flags (BE_CF_*) */
    uint32_t slot;         /* index in the worker's in-flight array */
    uint8_t kind;          /* enum uio_kind */
    uint8_t flags;         /* UIO_F_* */
    uint8_t cqes;          /* completions still to come for this submission (operation + linked timeout) */
    uint8_t opts;          /* urt_io_init_ex flags */
    void *ext;             /* the buffer ring of urt_io_recv_bufring, or NULL */
    struct uio_more *more; /* multishot completions waiting for their turn, or NULL */
};

_Static_assert(sizeof(struct uio) <= sizeof(struct urt_io_private), "struct uio must fit urt_io_private");
_Static_assert(_Alignof(struct uio) <= _Alignof(struct urt_io_private), "struct uio alignment");

static inline struct uio *uio_of(struct urt_io *io)
{
    return (struct uio *)(void *)&io->priv;
}

static inline const struct uio *uio_of_const(const struct urt_io *io)
{
    return (const struct uio *)(const void *)&io->priv;
}

static inline struct urt_io *uio_io(struct uio *u)
{
    return (struct urt_io *)(void *)((char *)u - offsetof(struct urt_io, priv));
}

/* Timed submissions armed on a worker (io/uio_timed.c). */
struct uio_timed;

/* Per-worker state (owner only), allocated on the worker's first operation. */
struct uio_worker {
    struct uio **ops;          /* operations in flight (uio.slot is the index) */
    uint32_t n, cap;
    struct uio_timed *timed;   /* armed timed submissions (a list) */
    bool stopped;              /* destroy began: everything in flight was asked to cancel */
    bool exiting;              /* the worker left its loop: continuations run in place */
    bool detached;             /* nothing in flight at its exit: the kernel's rings unregistered */
    /* registered files (io/uio_buf.c): a sparse table of `files` slots */
    bool files_ready;          /* the table is registered */
    bool kernel_alloc;         /* the upper half is the kernel's (accept into the table) */
    uint32_t files;            /* slots (urt_config.io_fixed_files) */
    uint32_t lo_next, hi_next; /* slots never used yet: lower half, upper half (when ours) */
    uint32_t *free_lo, n_free_lo, *free_hi, n_free_hi; /* slots given back */
    /* registered buffers */
    struct iovec *bufs;
    uint32_t n_bufs;
    uint8_t *used;             /* per slot: registered (1) */
    /* buffer rings: group ids, and the rings not destroyed yet (freed at exit) */
    uint16_t next_bgid;
    uint16_t *free_bgid;
    uint32_t n_free_bgid;
    struct urt_bufring *rings;
    _Atomic uint32_t returns_queued; /* returns_task is queued (io/uio_buf.c) */
    struct urt_task returns_task;    /* gives back buffers other workers put */
};

/* The calling worker's state, created on first use (NULL: -ENOMEM). */
struct uio_worker *uio_worker(struct worker *w);

/* Submission (worker only). uio_begin checks the io and the calling context
 * (fn names the public function for messages), reserves room for `ops` operations (one
 * more for a linked timeout) and room in the in-flight array, and counts the
 * operation in its job or transaction: 0, or -errno with a message; nothing
 * is held on failure. After 0 the caller prepares the operation and calls
 * uio_submit_op (operation kinds) or arms its timer and calls uio_submit_done —
 * neither can fail. */
int uio_begin(struct urt_io *io, const char *fn, enum uio_kind kind, unsigned ops, struct uio_ctx *cx);
void uio_submit_op(struct uio_ctx *cx, struct urt_io *io, struct be_op *op);
void uio_submit_done(struct uio_ctx *cx, struct urt_io *io);
/* The done callback of a sleep's timer (sched_timer_arm). */
void uio_timer_done(struct sched_io *sio, struct worker *w, int32_t res, uint32_t cqe_flags);

/* A refused submission of io (err != 0): the deadline set for it
 * (urt_io_set_timeout, rule 8) is dropped with it, unless io is in flight
 * (then the refusal is -EBUSY and the flags are its worker's). Returns err. */
int uio_refused(struct urt_io *io, int err);
/* Records the message of a refused argument: "fn: what" (returns err). */
int uio_arg_error(int err, const char *fn, const char *what);
/* The runtime's BE_IO_* features (what the probe found minus ring_disable). */
static inline uint32_t uio_features(const struct worker *w)
{
    return be_io_features(&w->s->caps);
}
/* Prepares an async cancel of u's request (or ends it here when it has
 * none in the kernel); once. */
void uio_cancel_now(struct worker *w, struct uio_worker *uw, struct uio *u);
/* Removes u from its worker's in-flight array (its last completion). */
void uio_ops_remove(struct uio_worker *uw, struct uio *u);

/* Multishot (io/uio_multi.c). uio_multi_cqe: a CQE of a multishot kind
 * (re-arms, waits for buffers, queues completions). uio_multi_end: ends a
 * multishot io that has no request in the kernel (a receive waiting for a
 * buffer) with res, on its worker. uio_push: queues one completion for the
 * continuation (the last one: no BE_CF_MORE) and delivers it if none
 * is out; uio_rearm_wanted: re-arms the receives waiting on br. */
void uio_multi_cqe(struct worker *w, struct uio *u, int32_t res, uint32_t cqe_flags);
void uio_multi_end(struct worker *w, struct uio *u, int32_t res);
void uio_push(struct worker *w, struct uio *u, int32_t res, uint32_t cqe_flags);
/* Frees a multishot io's state after its last delivery. */
void uio_more_free(struct uio *u);

/* Buffers and files (io/uio_buf.c). */
struct urt_bufring;
bool uio_bufring_kernel(const struct urt_bufring *br);  /* a kernel buffer ring (else the pool) */
uint16_t uio_bufring_bgid(const struct urt_bufring *br);
struct worker *uio_bufring_worker(const struct urt_bufring *br);
uint32_t uio_bufring_count(const struct urt_bufring *br);
/* Pool: a free buffer (its id, marked the caller's) or -1. return: gives
 * one back without re-arming anyone (it was never delivered). mark: the
 * kernel delivered buffer bid (the caller's until urt_bufring_put). */
int uio_bufring_take(struct urt_bufring *br, void **buf, uint32_t *size);
void uio_bufring_return(struct urt_bufring *br, uint16_t bid);
void uio_bufring_mark(struct urt_bufring *br, uint16_t bid);
/* Buffers given back to br so far (a count that wraps; its worker only). */
uint32_t uio_bufring_returns(const struct urt_bufring *br);
/* URT_IO_FIXED_FILE on an accept (io/uio_ops.c): the calling worker's
 * table is made ready; *uflags := UIO_F_FIXED, plus UIO_F_INSTALL unless the
 * kernel allocates the slot (uio_worker.kernel_alloc). 0, or -ENOMEM with a
 * message (no table: io_fixed_files 0, or registering it failed); 0 with no
 * flags off a worker (uio_begin refuses the call). */
int uio_accept_fixed(const char *fn, unsigned *uflags);
/* urt_io_accept with URT_IO_MULTISHOT (io/uio_multi.c). */
int uio_multi_accept(struct urt_io *io, int fd, unsigned flags);
void uio_bufring_use(struct urt_bufring *br, int delta); /* receives using it */
/* The receives waiting for a buffer (a list through uio_more.next_wait). */
void uio_bufring_wait(struct urt_bufring *br, struct uio *u);
void uio_bufring_unwait(struct urt_bufring *br, struct uio *u);
/* The registered buffer holding [buf, buf+len) on w, or -1. */
int uio_fixed_buf(struct worker *w, const void *buf, size_t len);
/* Accept into the table: 0 (the kernel allocates in the upper half), or
 * -errno when the table cannot be made. */
int uio_files_ready(struct worker *w, struct uio_worker *uw);
/* An accepted connection of u (UIO_F_FIXED): with UIO_F_INSTALL the
 * descriptor res goes into a free slot of the upper half (and is closed);
 * either way the slot is marked in use. Returns the slot, or -ENFILE /
 * -errno (the descriptor closed). uio_drop_accepted: one that cannot be
 * delivered is closed (its slot freed). */
int32_t uio_accepted_fixed(struct worker *w, struct uio *u, int32_t res);
void uio_drop_accepted(struct worker *w, struct uio *u, int32_t res);
/* Teardown, in two phases (io/uio.c "Shutdown"). detach: on w as it
 * leaves (its ring's single issuer), once nothing is in flight: the kernel's
 * buffer rings are unregistered; the memory stays, since tasks on other
 * workers and continuations cancelled on the destroying thread may still
 * hold w's buffers and put them back. release: after every worker stopped
 * and the leftovers were cancelled: the rings' memory and the tables. */
void uio_buf_detach(struct worker *w, struct uio_worker *uw);
void uio_buf_release(struct uio_worker *uw);
/* Re-arms the receives that waited for a buffer of br (on its worker). */
void uio_multi_resume(struct worker *w, struct uio *u);
/* Submits a re-armed multishot operation (no deadline) for u. */
void uio_resubmit(struct worker *w, const struct be_op *op, struct uio *u);

/* The client entry points (runtime/sched_clients.c). */
void uio_sweep_post(struct sched *s);
void uio_stop(struct worker *w, bool exiting);
uint32_t uio_pending(const struct worker *w);
void uio_release(struct worker *w);

/* True on the destroying thread while it runs a continuation that destroy
 * cancelled (every worker has stopped). */
bool uio_off_worker_shutdown(void);

/* Timed submissions on w at shutdown: cancelled (their tasks' cancel
 * callbacks run). io/uio_timed.c. */
void uio_timed_cancel_all(struct worker *w, struct uio_worker *uw);

#endif
