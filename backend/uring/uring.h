/*
 * backend/uring/uring.h — the io_uring backend's part of backend/backend.h:
 * the context's layout and the hot path (ur_submit's translation of a
 * struct be_op into an SQE, ur_reserve, ur_ready), inline because a task's
 * I/O and the log's flush run through them once per operation. Included by
 * backend/backend.h only (scripts/check_layers.py).
 *
 * The translation (ur_prep) is one switch: each enum be_kind becomes the
 * io_uring_prep_* it always was; BE_F_* become IOSQE_* (LINK, FIXED_FILE,
 * BUFFER_SELECT with buf_group, CQE_SKIP_SUCCESS) or the multishot/direct
 * variant of the prep; the tag is the SQE's user_data (NULL: 0, ignored).
 * Timeouts take an absolute CLOCK_MONOTONIC deadline: its timespec lives in
 * ts[], one per SQ slot, read by the kernel when it takes the SQE (the slot
 * is not reused before), so no caller keeps a timespec.
 *
 * The overflow list (the full-queue policy of backend.h): an operation that
 * finds no free SQE (the kernel took none when asked) is copied to ovf, a
 * ring buffer that grows; while it holds anything every new operation goes
 * behind it (order kept); ur_reserve(n) that finds no room for a whole chain
 * sends the chain there too (`chain` counts its members still to come).
 * ur_flush/ur_wait move whole chains into the SQ as it frees (backend.c).
 * Should the list not grow (no memory), ur_submit waits for the kernel to
 * take SQEs (a millisecond at a time): nothing is ever dropped.
 *
 * Memory ordering: owner only (liburing's head/tail protocol with the
 * kernel); `submitted` is written by the owner, read relaxed by anyone.
 */
#ifndef URT_BACKEND_URING_H
#define URT_BACKEND_URING_H

#include <assert.h>

#include "backend/uring/ring.h"

static_assert(BE_CF_BUFFER == IORING_CQE_F_BUFFER, "completion flag values are io_uring's");
static_assert(BE_CF_MORE == IORING_CQE_F_MORE, "completion flag values are io_uring's");
static_assert(BE_CF_NOTIF == IORING_CQE_F_NOTIF, "completion flag values are io_uring's");
static_assert(BE_CF_BUFFER_SHIFT == IORING_CQE_BUFFER_SHIFT, "completion flag values are io_uring's");
static_assert(BE_IO_ALL == RING_IO_ALL && BE_IO_LINK_TIMEOUT == RING_IO_LINK_TIMEOUT &&
                  BE_IO_DISABLE_SHIFT == RING_IO_DISABLE_SHIFT,
              "feature bits are the probe's");

struct ur_pending {
    struct be_op op;
    struct be_tag *tag;
};

struct ur_ctx {
    struct ring ring;
    struct __kernel_timespec *ts; /* per SQ slot: a timeout's deadline (read by the kernel at submission) */
    struct ur_pending *ovf;       /* the overflow list: a ring buffer of ovf_cap */
    uint32_t ovf_head, ovf_n, ovf_cap;
    uint32_t chain;               /* members of a reserved chain still to go to the overflow list */
    uint64_t ovf_total;           /* operations that went through the overflow list (tests, statistics) */
#if URT_FAULT_INJECTION
    uint32_t fault_room;          /* tests: the SQ seems to have this many entries (UINT32_MAX: no fault) */
#endif
};

struct ur_shared {
    struct ring_shared ring;
};

/* A buffer ring of this backend is the kernel's struct io_uring_buf_ring
 * (mapped by ur_bufring_create, page-aligned). */
static inline struct io_uring_buf_ring *ur_bufring_of(struct be_bufring *r)
{
    return (struct io_uring_buf_ring *)(void *)r;
}

/* The cold half (backend/uring/backend.c): backend/backend.h's functions of
 * the same name without the ur_ prefix, for this backend. */
void ur_defer(struct ur_ctx *c, const struct be_op *op, struct be_tag *tag);
void ur_reserve_slow(struct ur_ctx *c, unsigned n);
int ur_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct ur_caps *out);
void ur_features(const struct ur_caps *caps, struct urt_features *f);
int ur_describe_setup(uint32_t setup_flags, char *buf, size_t len);
int ur_init(struct ur_ctx *c, const struct ur_caps *caps, uint32_t entries, uint32_t cq_entries);
void ur_exit(struct ur_ctx *c);
int ur_flush(struct ur_ctx *c);
int ur_wait(struct ur_ctx *c, uint64_t timeout_ns);
void ur_poll(struct ur_ctx *c);
unsigned ur_reap(struct ur_ctx *c, be_event_fn *on_event, void *ctx);
int ur_shared_init(struct ur_shared *sh);
void ur_shared_exit(struct ur_shared *sh);
int ur_wake(const struct ur_caps *caps, struct ur_shared *fallback, struct ur_ctx *self, int target_fd,
            uint32_t cookie);
int ur_bufring_create(struct ur_ctx *c, uint16_t bgid, uint32_t count, struct be_bufring **out);
void ur_bufring_unregister(struct ur_ctx *c, struct be_bufring *r, uint16_t bgid);
void ur_bufring_free(struct be_bufring *r, uint32_t count);
int ur_files_register(struct ur_ctx *c, uint32_t n);
int ur_files_alloc_range(struct ur_ctx *c, uint32_t off, uint32_t len);
int ur_files_update(struct ur_ctx *c, uint32_t slot, int fd);
int ur_buffers_register(struct ur_ctx *c, const struct iovec *iov, unsigned n);
#if URT_FAULT_INJECTION
void ur_fault_sq_room(struct ur_ctx *c, uint32_t entries);
#endif

static inline int ur_peer_fd(const struct ur_ctx *c)
{
    return c->ring.fd;
}

static inline uint64_t ur_submitted(const struct ur_ctx *c)
{
    return atomic_load_explicit(&c->ring.submitted, memory_order_relaxed);
}

static inline bool ur_ready(struct ur_ctx *c)
{
    return io_uring_cq_ready(&c->ring.uring) != 0;
}

static inline bool ur_dirty(const struct ur_ctx *c)
{
    return c->ring.unsubmitted != 0 || c->ovf_n != 0;
}

static inline bool ur_backlog(const struct ur_ctx *c)
{
    return c->ovf_n != 0;
}

static inline unsigned ur_sq_room(const struct ur_ctx *c)
{
    unsigned room = io_uring_sq_space_left(&c->ring.uring);
#if URT_FAULT_INJECTION
    if (c->fault_room != UINT32_MAX) {
        unsigned ready = io_uring_sq_ready(&c->ring.uring);
        unsigned fake = c->fault_room > ready ? c->fault_room - ready : 0;
        room = room < fake ? room : fake;
    }
#endif
    return room;
}

static inline void ur_reserve(struct ur_ctx *c, unsigned n)
{
    if (__builtin_expect(c->ovf_n == 0 && ur_sq_room(c) >= n, 1))
        return;
    ur_reserve_slow(c, n);
}

static inline void ur_set_ts(struct ur_ctx *c, struct io_uring_sqe *sqe, uint64_t due)
{
    struct __kernel_timespec *ts = &c->ts[sqe - c->ring.uring.sq.sqes];
    ts->tv_sec = (long long)(due / 1000000000ull);
    ts->tv_nsec = (long long)(due % 1000000000ull);
}

static inline struct __kernel_timespec *ur_ts(struct ur_ctx *c, struct io_uring_sqe *sqe)
{
    return &c->ts[sqe - c->ring.uring.sq.sqes];
}

static inline void ur_prep_net(struct io_uring_sqe *sqe, const struct be_op *op)
{
    bool multi = op->flags & BE_F_MULTISHOT;
    switch (op->kind) {
    case BE_RECV:
        if (multi)
            io_uring_prep_recv_multishot(sqe, op->fd, op->addr, op->len, (int)op->arg);
        else
            io_uring_prep_recv(sqe, op->fd, op->addr, op->len, (int)op->arg);
        break;
    case BE_SEND:
        io_uring_prep_send(sqe, op->fd, op->caddr, op->len, (int)op->arg);
        break;
    case BE_SEND_ZC:
        if (op->flags & BE_F_FIXED_BUF)
            io_uring_prep_send_zc_fixed(sqe, op->fd, op->caddr, op->len, (int)op->arg, 0, op->buf);
        else
            io_uring_prep_send_zc(sqe, op->fd, op->caddr, op->len, (int)op->arg, 0);
        break;
    case BE_RECVMSG:
        io_uring_prep_recvmsg(sqe, op->fd, op->addr, op->arg);
        break;
    case BE_SENDMSG:
        io_uring_prep_sendmsg(sqe, op->fd, op->caddr, op->arg);
        break;
    case BE_ACCEPT:
        if (op->flags & BE_F_DIRECT) {
            if (multi)
                io_uring_prep_multishot_accept_direct(sqe, op->fd, op->addr, op->addr2, (int)op->arg);
            else
                io_uring_prep_accept_direct(sqe, op->fd, op->addr, op->addr2, (int)op->arg,
                                            IORING_FILE_INDEX_ALLOC - 1);
        } else if (multi) {
            io_uring_prep_multishot_accept(sqe, op->fd, op->addr, op->addr2, (int)op->arg);
        } else {
            io_uring_prep_accept(sqe, op->fd, op->addr, op->addr2, (int)op->arg);
        }
        break;
    case BE_CONNECT:
        io_uring_prep_connect(sqe, op->fd, op->caddr, (socklen_t)op->len);
        break;
    case BE_POLL:
        if (multi)
            io_uring_prep_poll_multishot(sqe, op->fd, op->arg);
        else
            io_uring_prep_poll_add(sqe, op->fd, op->arg);
        break;
    default:
        io_uring_prep_nop(sqe);
        break;
    }
}

static inline void ur_prep_ctl(struct ur_ctx *c, struct io_uring_sqe *sqe, const struct be_op *op)
{
    switch (op->kind) {
    case BE_CANCEL:
        io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op->target, 0);
        break;
    case BE_TIMEOUT:
        ur_set_ts(c, sqe, op->off);
        io_uring_prep_timeout(sqe, ur_ts(c, sqe), 0, IORING_TIMEOUT_ABS);
        break;
    case BE_TIMEOUT_UPDATE:
        ur_set_ts(c, sqe, op->off);
        io_uring_prep_timeout_update(sqe, ur_ts(c, sqe), (uint64_t)(uintptr_t)op->target, IORING_TIMEOUT_ABS);
        break;
    case BE_TIMEOUT_REMOVE:
        io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)op->target, 0);
        break;
    case BE_LINK_TIMEOUT:
        ur_set_ts(c, sqe, op->off);
        io_uring_prep_link_timeout(sqe, ur_ts(c, sqe), IORING_TIMEOUT_ABS);
        break;
    case BE_OPENAT:
        io_uring_prep_openat(sqe, op->fd, op->caddr, (int)op->arg, op->len);
        break;
    case BE_CLOSE:
        io_uring_prep_close(sqe, op->fd);
        break;
    case BE_STATX:
        io_uring_prep_statx(sqe, op->fd, op->caddr, (int)op->arg, op->len, op->addr2);
        break;
    case BE_FALLOCATE:
        io_uring_prep_fallocate(sqe, op->fd, (int)op->arg, op->off, op->len64);
        break;
    case BE_SYNC_FILE_RANGE:
        io_uring_prep_sync_file_range(sqe, op->fd, op->len, op->off, (int)op->arg);
        break;
    default:
        ur_prep_net(sqe, op);
        break;
    }
}

/* Fills sqe from op and tags it with tag (the translation of the file's header). */
static inline void ur_prep(struct ur_ctx *c, struct io_uring_sqe *sqe, const struct be_op *op, struct be_tag *tag)
{
    switch (op->kind) {
    case BE_READ:
        io_uring_prep_read(sqe, op->fd, op->addr, op->len, op->off);
        sqe->rw_flags = (int)op->arg;
        break;
    case BE_WRITE:
        io_uring_prep_write(sqe, op->fd, op->caddr, op->len, op->off);
        sqe->rw_flags = (int)op->arg;
        break;
    case BE_READ_FIXED:
        io_uring_prep_read_fixed(sqe, op->fd, op->addr, op->len, op->off, op->buf);
        break;
    case BE_WRITE_FIXED:
        io_uring_prep_write_fixed(sqe, op->fd, op->caddr, op->len, op->off, op->buf);
        break;
    case BE_READV:
        io_uring_prep_readv(sqe, op->fd, op->caddr, op->len, op->off);
        break;
    case BE_WRITEV:
        io_uring_prep_writev(sqe, op->fd, op->caddr, op->len, op->off);
        break;
    case BE_FSYNC:
        io_uring_prep_fsync(sqe, op->fd, 0);
        break;
    case BE_FDATASYNC:
        io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
        break;
    case BE_NOP:
        io_uring_prep_nop(sqe);
        break;
    default:
        ur_prep_ctl(c, sqe, op);
        break;
    }
    io_uring_sqe_set_data(sqe, tag);
    uint8_t f = op->flags;
    if (__builtin_expect(f & (BE_F_LINK | BE_F_FIXED_FILE | BE_F_BUF_SELECT | BE_F_SKIP_SUCCESS), 0)) {
        if (f & BE_F_LINK)
            sqe->flags |= IOSQE_IO_LINK;
        if (f & BE_F_FIXED_FILE)
            sqe->flags |= IOSQE_FIXED_FILE;
        if (f & BE_F_SKIP_SUCCESS)
            sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
        if (f & BE_F_BUF_SELECT) {
            sqe->flags |= IOSQE_BUFFER_SELECT;
            sqe->buf_group = op->buf;
        }
    }
}

/* A free SQE of c counted as queued, or NULL (the kernel takes none now). */
static inline struct io_uring_sqe *ur_take_sqe(struct ur_ctx *c)
{
#if URT_FAULT_INJECTION
    if (c->fault_room != UINT32_MAX && ur_sq_room(c) == 0) {
        ring_submit(&c->ring);
        if (ur_sq_room(c) == 0)
            return NULL;
    }
#endif
    struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring.uring);
    if (__builtin_expect(!sqe, 0)) {
        ring_submit(&c->ring);
        sqe = io_uring_get_sqe(&c->ring.uring);
        if (!sqe)
            return NULL;
    }
    c->ring.unsubmitted++;
    return sqe;
}

static inline void ur_submit(struct ur_ctx *c, const struct be_op *op, struct be_tag *tag)
{
    struct io_uring_sqe *sqe;
    if (__builtin_expect(c->ovf_n != 0 || c->chain != 0, 0) || !(sqe = ur_take_sqe(c))) {
        ur_defer(c, op, tag);
        return;
    }
    ur_prep(c, sqe, op, tag);
}

static inline void ur_bufring_add(struct be_bufring *r, void *addr, uint32_t len, uint16_t bid, uint32_t count)
{
    io_uring_buf_ring_add(ur_bufring_of(r), addr, len, bid, io_uring_buf_ring_mask(count), 0);
    io_uring_buf_ring_advance(ur_bufring_of(r), 1);
}

#endif
