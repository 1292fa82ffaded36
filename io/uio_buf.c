/*
 * io/uio_buf.c — a worker's buffers and files for tasks' I/O (urt/io.h):
 * buffer rings for multishot receives, the registered file table, the
 * registered buffers.
 *
 * Buffer rings. count buffers of size bytes, allocated here, belong to the
 * calling worker. Where the probe found buffer rings the buffers are handed
 * to the kernel in a ring (be_bufring_create of backend/backend.h, group id from the
 * worker's allocator): a receive selects one (IOSQE_BUFFER_SELECT) and the
 * CQE names it; urt_bufring_put adds it back to the ring's tail
 * (be_bufring_add). Without them the same buffers form a
 * pool (a stack of free ids) that the fallback receive takes from at
 * completion (io/uio_multi.c). Either way `held` marks the buffers the
 * caller has (delivered, not put back), so a double put is refused instead
 * of corrupting the ring, and a put with receives waiting (the ring ran dry)
 * re-arms them.
 *
 * A put from another worker (a lane's continuation may run on the lane's
 * worker, not the ring's) cannot touch the ring: it claims the buffer
 * (exchange of held[bid] 1 -> 0, so a double put is refused there too),
 * queues its id on the ring's bounded MPSC queue of returns (rq: a slot
 * taken by fetch_add on rtail, the id + 1 stored with release; never more
 * than `count` returns are pending, one per buffer, so a slot is always free
 * again when its turn comes) and posts the worker's returns task (at most
 * once queued, like io/uio.c's sweeps: the poster's exchange of
 * returns_queued and the task's store of 0 + fence are seq_cst, so a queued
 * task sees every return queued before the poster found it queued). The
 * task, on the ring's worker, takes every consecutive filled slot (acquire),
 * gives those buffers back and re-arms who waited.
 *
 * Teardown (io/uio.c "Shutdown"): a ring outlives its worker's loop. The
 * worker unregisters its kernel rings as it leaves (uio_buf_detach: the
 * ring's single issuer); their memory is freed by the destroying thread once
 * every worker was joined (uio_buf_release), so a late put from another
 * worker (into rq, its returns task then cancelled) or from a continuation
 * destroy runs on its own thread (held[] only) touches live memory.
 *
 * File table. One sparse table of io_fixed_files slots per worker,
 * registered on first use. The lower half is urt_io_register_file's (a stack
 * of free slots); the upper half takes accepted connections with
 * URT_IO_FIXED_FILE: the kernel picks a slot there (its allocation range is
 * set to the upper half, be_files_alloc_range) where it can,
 * else the accepted descriptor is installed into a free slot here
 * (be_files_update) and closed. `used` marks every slot in
 * use, so urt_io_unregister_file refuses a slot that is not.
 *
 * Registered buffers: urt_io_register_buffers registers iov[0..n) once per
 * worker; a read or write whose buffer lies inside one becomes a
 * fixed-buffer read/write, and URT_IO_FIXED_BUF sends from it.
 *
 * Memory ordering: owner-only (worker-only API), except held[] and the
 * returns queue above. held[bid] is set by the ring's worker (relaxed) before
 * the completion naming bid is queued for its continuation; the queue's
 * push/pop (release/acquire) orders that store before any put of bid, so
 * the put's relaxed CAS 1 -> 0 sees it, and the CAS alone decides which of
 * two puts wins. A remote put's reads of the buffer precede its release
 * store of rq[slot]; the ring's worker gives the buffer back (to the kernel
 * or the pool) only after its acquire load of that slot.
 */
#include "io/uio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

struct urt_bufring {
    struct worker *w;
    struct be_bufring *ring;        /* the kernel's ring, or NULL: the pool */
    char *bufs;
    uint32_t count, size;
    uint16_t bgid;
    bool unregistered;              /* the kernel's ring was unregistered (its worker left) */
    uint32_t users;                 /* receives using it */
    uint32_t returns;               /* buffers given back so far (give_back; wraps): io/uio_multi.c's re-arm rule */
    uint16_t *free;                 /* the pool's free ids */
    uint32_t n_free;
    _Atomic uint8_t *held;          /* per buffer: the caller has it (cleared by the put's exchange) */
    _Atomic uint32_t *rq;           /* returns from other workers: bid + 1, 0 = empty (count slots) */
    _Atomic uint32_t rtail;         /* next slot a returning worker takes */
    uint32_t rhead;                 /* next slot the ring's worker reads */
    struct uio *waiting;            /* receives waiting for a buffer (uio_more.next_wait) */
    struct urt_bufring *prev, *next; /* the worker's rings */
};

#define BUFRING_MAX_BYTES (1ull << 32)

/* ---- buffer rings ---------------------------------------------------------------------------- */

bool uio_bufring_kernel(const struct urt_bufring *br)
{
    return br->ring != NULL;
}

uint16_t uio_bufring_bgid(const struct urt_bufring *br)
{
    return br->bgid;
}

struct worker *uio_bufring_worker(const struct urt_bufring *br)
{
    return br->w;
}

uint32_t uio_bufring_count(const struct urt_bufring *br)
{
    return br->count;
}

uint32_t uio_bufring_returns(const struct urt_bufring *br)
{
    return br->returns;
}

void uio_bufring_use(struct urt_bufring *br, int delta)
{
    br->users = (uint32_t)((int)br->users + delta);
}

int uio_bufring_take(struct urt_bufring *br, void **buf, uint32_t *size)
{
    if (br->n_free == 0)
        return -1;
    uint16_t bid = br->free[--br->n_free];
    atomic_store_explicit(&br->held[bid], 1, memory_order_relaxed);
    *buf = br->bufs + (size_t)bid * br->size;
    *size = br->size;
    return bid;
}

static void give_back(struct urt_bufring *br, uint16_t bid)
{
    atomic_store_explicit(&br->held[bid], 0, memory_order_relaxed);
    br->returns++;
    if (br->ring) {
        be_bufring_add(br->ring, br->bufs + (size_t)bid * br->size, br->size, bid, br->count);
    } else {
        br->free[br->n_free++] = bid;
    }
}

void uio_bufring_return(struct urt_bufring *br, uint16_t bid)
{
    give_back(br, bid);
}

void uio_bufring_mark(struct urt_bufring *br, uint16_t bid)
{
    if (bid < br->count)
        atomic_store_explicit(&br->held[bid], 1, memory_order_relaxed);
}

void uio_bufring_wait(struct urt_bufring *br, struct uio *u)
{
    u->more->next_wait = br->waiting;
    br->waiting = u;
}

void uio_bufring_unwait(struct urt_bufring *br, struct uio *u)
{
    for (struct uio **p = &br->waiting; *p; p = &(*p)->more->next_wait) {
        if (*p == u) {
            *p = u->more->next_wait;
            return;
        }
    }
}

/* The kernel's ring for br (group id from the worker): 0, or -errno (br
 * stays a pool). */
static int kernel_ring(struct worker *w, struct uio_worker *uw, struct urt_bufring *br)
{
    if (uw->n_free_bgid == 0 && uw->next_bgid == UINT16_MAX)
        return -ENOSPC;
    uint16_t bgid = uw->n_free_bgid ? uw->free_bgid[uw->n_free_bgid - 1] : uw->next_bgid;
    struct be_bufring *ring;
    int err = be_bufring_create(&w->be, bgid, br->count, &ring);
    if (err)
        return err;
    if (uw->n_free_bgid)
        uw->n_free_bgid--;
    else
        uw->next_bgid++;
    br->ring = ring;
    br->bgid = bgid;
    for (uint32_t i = 0; i < br->count; i++)
        be_bufring_add(br->ring, br->bufs + (size_t)i * br->size, br->size, (uint16_t)i, br->count);
    return 0;
}

/* The kernel's part of br (on its worker: the ring's single issuer): the
 * buffer ring is unregistered and its group id can be used again. */
static void bufring_unregister(struct worker *w, struct uio_worker *uw, struct urt_bufring *br)
{
    if (!br->ring || br->unregistered)
        return;
    be_bufring_unregister(&w->be, br->ring, br->bgid);
    br->unregistered = true;
    uint16_t *f = realloc(uw->free_bgid, (uw->n_free_bgid + 1) * sizeof(*f));
    if (f) { /* no memory: the group id is not reused */
        uw->free_bgid = f;
        f[uw->n_free_bgid++] = br->bgid;
    }
}

/* br's memory (any thread, once nothing uses it). */
static void bufring_release(struct uio_worker *uw, struct urt_bufring *br)
{
    if (br->prev)
        br->prev->next = br->next;
    else
        uw->rings = br->next;
    if (br->next)
        br->next->prev = br->prev;
    if (br->ring)
        be_bufring_free(br->ring, br->count);
    free(br->bufs);
    free(br->free);
    free((void *)br->held);
    free((void *)br->rq);
    free(br);
}

/* Re-arms the receives that waited for a buffer of br (on its worker). */
static void resume_waiting(struct worker *w, struct urt_bufring *br)
{
    struct uio *u;
    while ((u = br->waiting) != NULL) { /* the ring ran dry: re-arm who waited */
        br->waiting = u->more->next_wait;
        uio_multi_resume(w, u);
    }
}

/* The returns task (on the rings' worker): what other workers put back. */
static enum urt_task_result returns_run(struct urt_task *t, void *arg)
{
    struct worker *w = arg;
    struct uio_worker *uw = w->uio;
    (void)t;
    atomic_store_explicit(&uw->returns_queued, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst); /* see the file's header */
    for (struct urt_bufring *br = uw->rings; br; br = br->next) {
        bool any = false;
        uint32_t v;
        while ((v = atomic_load_explicit(&br->rq[br->rhead % br->count], memory_order_acquire)) != 0) {
            atomic_store_explicit(&br->rq[br->rhead % br->count], 0, memory_order_relaxed);
            br->rhead++;
            give_back(br, (uint16_t)(v - 1));
            any = true;
        }
        if (any)
            resume_waiting(w, br);
    }
    return URT_TASK_DONE;
}

static void returns_cancelled(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_store_explicit(&((struct uio_worker *)((struct worker *)arg)->uio)->returns_queued, 0,
                          memory_order_relaxed);
}

/* A put from another worker: queued for the ring's worker. */
static void put_remote(struct urt_bufring *br, uint16_t bid)
{
    uint32_t slot = atomic_fetch_add_explicit(&br->rtail, 1, memory_order_relaxed) % br->count;
    atomic_store_explicit(&br->rq[slot], (uint32_t)bid + 1, memory_order_release);
    struct worker *w = br->w;
    struct uio_worker *uw = w->uio;
    if (atomic_exchange_explicit(&uw->returns_queued, 1, memory_order_seq_cst))
        return; /* queued, not yet run: it will see this return */
    urt_task_init(&uw->returns_task, returns_run, w);
    uw->returns_task.cancel = returns_cancelled;
    sched_push_sticky(w->s, w, &uw->returns_task);
}

static int bufring_check(const char *fn, const struct urt_bufring *br, struct worker **w)
{
    *w = sched_self();
    if (!br)
        return urt__error(-EINVAL, "%s: br is NULL", fn);
    if (*w != br->w)
        return urt__error(-EPERM, "%s: br belongs to worker %u; the calling thread is %s", fn, br->w->index,
                          *w ? "another worker" : "not a worker");
    return 0;
}

URT_API int urt_bufring_create(unsigned count, unsigned size, struct urt_bufring **out)
{
    struct worker *w = sched_self();
    if (!out)
        return urt__error(-EINVAL, "urt_bufring_create: out is NULL");
    if (!w)
        return urt__error(-EPERM, "urt_bufring_create: the calling thread is not a worker");
    if (count == 0 || count > 32768 || (count & (count - 1)))
        return urt__error(-EINVAL, "urt_bufring_create: count %u is not a power of two in 1..32768", count);
    if (size == 0 || (uint64_t)count * size > BUFRING_MAX_BYTES)
        return urt__error(-EINVAL, "urt_bufring_create: size %u is 0 or count x size is over 4 GiB", size);
    struct uio_worker *uw = uio_worker(w);
    struct urt_bufring *br = uw ? calloc(1, sizeof(*br)) : NULL;
    if (br) {
        br->bufs = aligned_alloc(64, ((size_t)count * size + 63) & ~(size_t)63);
        br->free = malloc(count * sizeof(*br->free));
        br->held = calloc(count, sizeof(*br->held));
        br->rq = calloc(count, sizeof(*br->rq));
    }
    if (!br || !br->bufs || !br->free || !br->held || !br->rq) {
        if (br) {
            free(br->bufs);
            free(br->free);
            free((void *)br->held);
            free((void *)br->rq);
            free(br);
        }
        return urt__error(-ENOMEM, "urt_bufring_create: out of memory for %u buffers of %u bytes", count, size);
    }
    br->w = w;
    br->count = count;
    br->size = size;
    if (!(uio_features(w) & BE_IO_BUFRING) || kernel_ring(w, uw, br) != 0) {
        for (uint32_t i = 0; i < count; i++) /* the pool: ids taken from the top */
            br->free[i] = (uint16_t)(count - 1 - i);
        br->n_free = count;
    }
    br->next = uw->rings;
    if (uw->rings)
        uw->rings->prev = br;
    uw->rings = br;
    *out = br;
    return 0;
}

URT_API int urt_bufring_put(struct urt_bufring *br, uint16_t bid)
{
    struct worker *w = sched_self();
    if (!br)
        return urt__error(-EINVAL, "urt_bufring_put: br is NULL");
    bool at_destroy = !w && uio_off_worker_shutdown(); /* a continuation destroy runs on its own thread */
    if (!at_destroy && (!w || w->s != br->w->s))
        return urt__error(-EPERM, "urt_bufring_put: the calling thread is not a worker of the ring's runtime");
    uint8_t one = 1;
    if (bid >= br->count ||
        !atomic_compare_exchange_strong_explicit(&br->held[bid], &one, 0, memory_order_relaxed, memory_order_relaxed))
        return urt__error(-EINVAL, "urt_bufring_put: buffer %u is not one the caller holds (out of range, or put "
                                   "already)", bid);
    if (at_destroy)
        return 0; /* every worker stopped: the ring is freed with the runtime */
    if (w != br->w) {
        put_remote(br, bid);
        return 0;
    }
    give_back(br, bid);
    resume_waiting(w, br);
    return 0;
}

URT_API int urt_bufring_destroy(struct urt_bufring *br)
{
    struct worker *w;
    int err = bufring_check("urt_bufring_destroy", br, &w);
    if (err)
        return err;
    if (br->users)
        return urt__error(-EBUSY, "urt_bufring_destroy: %u receive(s) still use the ring", br->users);
    bufring_unregister(w, w->uio, br);
    bufring_release(w->uio, br);
    return 0;
}

URT_API void *urt_io_buffer(const struct urt_io *io, uint16_t *bid)
{
    if (!io)
        return NULL;
    const struct uio *u = uio_of_const(io);
    const struct urt_bufring *br = u->ext;
    if (!br || !(u->cflags & BE_CF_BUFFER))
        return NULL;
    uint16_t id = (uint16_t)(u->cflags >> BE_CF_BUFFER_SHIFT);
    if (bid)
        *bid = id;
    return br->bufs + (size_t)id * br->size;
}

/* ---- the file table ---------------------------------------------------------------------------- */

int uio_files_ready(struct worker *w, struct uio_worker *uw)
{
    if (uw->files_ready)
        return 0;
    uint32_t n = w->s->cfg->io_fixed_files;
    if (n < 2)
        return -ENOMEM;
    uw->used = calloc(n, 1);
    uw->free_lo = malloc((n / 2) * sizeof(*uw->free_lo));
    uw->free_hi = malloc((n - n / 2) * sizeof(*uw->free_hi));
    int err = (uw->used && uw->free_lo && uw->free_hi) ? be_files_register(&w->be, n) : -ENOMEM;
    if (err) {
        free(uw->used);
        free(uw->free_lo);
        free(uw->free_hi);
        uw->used = NULL;
        uw->free_lo = uw->free_hi = NULL;
        return err;
    }
    uw->files = n;
    uw->lo_next = 0;
    uw->hi_next = n / 2;
    uw->kernel_alloc = (uio_features(w) & BE_IO_FIXED_ACCEPT) &&
                       be_files_alloc_range(&w->be, n / 2, n - n / 2) == 0;
    uw->files_ready = true;
    return 0;
}

static int slot_update(struct worker *w, uint32_t slot, int fd)
{
    return be_files_update(&w->be, slot, fd);
}

int32_t uio_accepted_fixed(struct worker *w, struct uio *u, int32_t res)
{
    struct uio_worker *uw = w->uio;
    if (!(u->flags & UIO_F_INSTALL)) {
        if ((uint32_t)res < uw->files)
            uw->used[res] = 1; /* the kernel's pick */
        return res;
    }
    int32_t slot = -ENFILE;
    if (uw->n_free_hi)
        slot = (int32_t)uw->free_hi[--uw->n_free_hi];
    else if (uw->hi_next < uw->files)
        slot = (int32_t)uw->hi_next++;
    if (slot >= 0) {
        int err = slot_update(w, (uint32_t)slot, res);
        if (err) {
            uw->free_hi[uw->n_free_hi++] = (uint32_t)slot;
            slot = err;
        } else {
            uw->used[slot] = 1;
        }
    }
    close(res); /* the table holds it now (or it could not be delivered) */
    return slot;
}

static void slot_release(struct worker *w, struct uio_worker *uw, uint32_t slot)
{
    slot_update(w, slot, -1);
    uw->used[slot] = 0;
    if (slot < uw->files / 2)
        uw->free_lo[uw->n_free_lo++] = slot;
    else if (!uw->kernel_alloc)
        uw->free_hi[uw->n_free_hi++] = slot;
}

void uio_drop_accepted(struct worker *w, struct uio *u, int32_t res)
{
    struct uio_worker *uw = w->uio;
    if (!(u->flags & UIO_F_FIXED))
        close(res);
    else if ((uint32_t)res < uw->files)
        slot_release(w, uw, (uint32_t)res);
}

URT_API int urt_io_register_file(int fd)
{
    struct worker *w = sched_self();
    if (!w)
        return urt__error(-EPERM, "urt_io_register_file: the calling thread is not a worker");
    if (fd < 0)
        return urt__error(-EBADF, "urt_io_register_file: fd %d is negative", fd);
    struct uio_worker *uw = uio_worker(w);
    int err = uw ? uio_files_ready(w, uw) : -ENOMEM;
    if (err)
        return urt__error(err, "urt_io_register_file: no registered file table (io_fixed_files %u): %s",
                          w->s->cfg->io_fixed_files, strerror(-err));
    uint32_t slot;
    if (uw->n_free_lo)
        slot = uw->free_lo[--uw->n_free_lo];
    else if (uw->lo_next < uw->files / 2)
        slot = uw->lo_next++;
    else
        return urt__error(-ENFILE, "urt_io_register_file: the worker's table is full (%u slots for "
                                   "urt_io_register_file, io_fixed_files / 2)", uw->files / 2);
    if ((err = slot_update(w, slot, fd))) {
        uw->free_lo[uw->n_free_lo++] = slot;
        return urt__error(err, "urt_io_register_file: fd %d: %s", fd, strerror(-err));
    }
    uw->used[slot] = 1;
    return (int)slot;
}

URT_API int urt_io_unregister_file(int index)
{
    struct worker *w = sched_self();
    if (!w)
        return urt__error(-EPERM, "urt_io_unregister_file: the calling thread is not a worker");
    struct uio_worker *uw = w->uio;
    if (!uw || !uw->files_ready || index < 0 || (uint32_t)index >= uw->files || !uw->used[index])
        return urt__error(-EINVAL, "urt_io_unregister_file: index %d is not a registered file of this worker",
                          index);
    slot_release(w, uw, (uint32_t)index);
    return 0;
}

/* ---- registered buffers ----------------------------------------------------------------------- */

URT_API int urt_io_register_buffers(const struct iovec *iov, unsigned n)
{
    struct worker *w = sched_self();
    if (!w)
        return urt__error(-EPERM, "urt_io_register_buffers: the calling thread is not a worker");
    if (!iov || n == 0 || n > 16384)
        return urt__error(-EINVAL, "urt_io_register_buffers: %s", !iov ? "iov is NULL" : "n is 0 or over 16384");
    struct uio_worker *uw = uio_worker(w);
    if (!uw)
        return urt__error(-ENOMEM, "urt_io_register_buffers: out of memory");
    if (uw->bufs)
        return urt__error(-EBUSY, "urt_io_register_buffers: this worker has registered buffers already");
    struct iovec *copy = malloc(n * sizeof(*copy));
    if (!copy)
        return urt__error(-ENOMEM, "urt_io_register_buffers: out of memory");
    int err = be_buffers_register(&w->be, iov, n);
    if (err) {
        free(copy);
        return urt__error(err, "urt_io_register_buffers: the kernel refused them: %s", strerror(-err));
    }
    memcpy(copy, iov, n * sizeof(*copy));
    uw->bufs = copy;
    uw->n_bufs = n;
    return 0;
}

int uio_fixed_buf(struct worker *w, const void *buf, size_t len)
{
    const struct uio_worker *uw = w->uio;
    if (!uw || !uw->bufs || !buf)
        return -1;
    uintptr_t a = (uintptr_t)buf;
    for (uint32_t i = 0; i < uw->n_bufs; i++) {
        uintptr_t b = (uintptr_t)uw->bufs[i].iov_base;
        if (a >= b && a - b <= uw->bufs[i].iov_len && len <= uw->bufs[i].iov_len - (a - b))
            return (int)i;
    }
    return -1;
}

void uio_buf_detach(struct worker *w, struct uio_worker *uw)
{
    for (struct urt_bufring *br = uw->rings; br; br = br->next)
        bufring_unregister(w, uw, br);
}

void uio_buf_release(struct uio_worker *uw)
{
    while (uw->rings)
        bufring_release(uw, uw->rings);
    free(uw->free_bgid);
    free(uw->bufs);
    free(uw->used);
    free(uw->free_lo);
    free(uw->free_hi);
}
