/*
 * backend/uring/backend.c — the io_uring backend's cold half of
 * backend/backend.h (its ur_* functions, called by backend/backend.c's
 * dispatch): the overflow list (the full-queue policy), flush, wait,
 * reap, the send-wake, the probe's report, and the
 * registered resources (buffer rings, the file table, buffers). The hot
 * path (ur_submit's translation) is inline in backend/uring/uring.h.
 *
 * Overflow list: ovf is a ring buffer of struct ur_pending (cap a power of
 * two, grown by doubling; it starts empty and stays allocated). ovf_move()
 * hands whole chains to the SQ, oldest first, and stops at the first chain
 * that does not fit (order kept) or at a chain whose last member has not
 * been queued yet (chain != 0).
 *
 * Memory ordering: owner only, except ur_wake (any thread: the message is
 * the kernel's; the caller orders what it announces, sched/core/sleeper.h)
 * and the shared fallback (its mutex).
 */
#include "backend/backend.h" /* this backend's part: backend/uring/uring.h */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <urt/runtime.h>

int ur_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct ur_caps *out)
{
    return ring_probe(disable, sqpoll, sqpoll_idle_ms, out);
}

void ur_features(const struct ur_caps *c, struct urt_features *f)
{
    f->setup_flags = c->setup_flags;
    f->kernel_features = c->kernel_features;
    f->defer_taskrun = c->setup_flags & IORING_SETUP_DEFER_TASKRUN;
    f->coop_taskrun = c->setup_flags & IORING_SETUP_COOP_TASKRUN;
    f->single_issuer = c->setup_flags & IORING_SETUP_SINGLE_ISSUER;
    f->registered_ring_fd = c->registered_fd;
    f->ringless_msg = c->ringless_msg;
    f->ext_arg = c->ext_arg;
    f->sqpoll = c->sqpoll;
    f->io_features = c->io_features;
}

int ur_describe_setup(uint32_t setup_flags, char *buf, size_t len)
{
    return ring_describe_setup(setup_flags, buf, len);
}

/* ---- a thread's context ------------------------------------------------------------------------ */

int ur_init(struct ur_ctx *c, const struct ur_caps *caps, uint32_t entries, uint32_t cq_entries)
{
    memset(c, 0, sizeof(*c));
#if URT_FAULT_INJECTION
    c->fault_room = UINT32_MAX;
#endif
    int err = ring_init(&c->ring, caps, entries, cq_entries);
    if (err)
        return err;
    c->ts = calloc(c->ring.uring.sq.ring_entries, sizeof(*c->ts));
    if (!c->ts) {
        ring_exit(&c->ring);
        return -ENOMEM;
    }
    return 0;
}

void ur_exit(struct ur_ctx *c)
{
    ring_exit(&c->ring);
    free(c->ts);
    free(c->ovf);
    c->ts = NULL;
    c->ovf = NULL;
    c->ovf_n = c->ovf_cap = 0;
}

#if URT_FAULT_INJECTION
void ur_fault_sq_room(struct ur_ctx *c, uint32_t room)
{
    c->fault_room = room;
}
#endif

/* ---- the overflow list ------------------------------------------------------------------------- */

static bool ovf_grow(struct ur_ctx *c)
{
    uint32_t cap = c->ovf_cap ? c->ovf_cap * 2 : 64;
    struct ur_pending *n = malloc((size_t)cap * sizeof(*n));
    if (!n)
        return false;
    for (uint32_t i = 0; i < c->ovf_n; i++)
        n[i] = c->ovf[(c->ovf_head + i) & (c->ovf_cap - 1)];
    free(c->ovf);
    c->ovf = n;
    c->ovf_cap = cap;
    c->ovf_head = 0;
    return true;
}

/* Members of the chain at the head of the list, or 0 when its last member
 * is not queued yet. */
static uint32_t ovf_chain_len(const struct ur_ctx *c)
{
    for (uint32_t i = 0; i < c->ovf_n; i++)
        if (!(c->ovf[(c->ovf_head + i) & (c->ovf_cap - 1)].op.flags & BE_F_LINK))
            return i + 1;
    return 0;
}

/* Hands whole chains to the SQ while they fit (submitting to make room). */
static void ovf_move(struct ur_ctx *c)
{
    while (c->ovf_n) {
        uint32_t n = ovf_chain_len(c);
        if (n == 0)
            return; /* its last member is still to come */
        if (ur_sq_room(c) < n) {
            ring_submit(&c->ring);
            if (ur_sq_room(c) < n)
                return;
        }
        for (uint32_t i = 0; i < n; i++) {
            struct ur_pending *p = &c->ovf[c->ovf_head];
            struct io_uring_sqe *sqe = ur_take_sqe(c); /* room checked */
            ur_prep(c, sqe, &p->op, p->tag);
            c->ovf_head = (c->ovf_head + 1) & (c->ovf_cap - 1);
            c->ovf_n--;
        }
    }
}

void ur_defer(struct ur_ctx *c, const struct be_op *op, struct be_tag *tag)
{
    while (c->ovf_n == c->ovf_cap && !ovf_grow(c)) {
        /* No memory for the list: wait for the kernel to take SQEs (nothing is dropped). */
        ring_submit(&c->ring);
        ovf_move(c);
        if (c->ovf_n < c->ovf_cap)
            break;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    c->ovf[(c->ovf_head + c->ovf_n) & (c->ovf_cap - 1)] = (struct ur_pending){*op, tag};
    c->ovf_n++;
    c->ovf_total++;
    if (c->chain)
        c->chain--;
}

void ur_reserve_slow(struct ur_ctx *c, unsigned n)
{
    if (c->ovf_n)
        ovf_move(c);
    if (c->ovf_n == 0 && ur_sq_room(c) < n)
        ring_submit(&c->ring);
    if (c->ovf_n || ur_sq_room(c) < n)
        c->chain = n; /* the whole chain goes to the overflow list */
}

int ur_flush(struct ur_ctx *c)
{
    if (__builtin_expect(c->ovf_n != 0, 0))
        ovf_move(c);
    return ring_submit(&c->ring);
}

/* ---- waiting and reaping ----------------------------------------------------------------------- */

int ur_wait(struct ur_ctx *c, uint64_t timeout_ns)
{
    if (c->ovf_n) {
        ovf_move(c);
        if (c->ovf_n && timeout_ns > 1000 * 1000)
            timeout_ns = 1000 * 1000; /* come back to hand the rest over */
    }
    return ring_wait(&c->ring, timeout_ns);
}

void ur_poll(struct ur_ctx *c)
{
    ring_get_events(&c->ring); /* runs the ring's task work: DEFER_TASKRUN's, and COOP_TASKRUN's early */
}

unsigned ur_reap(struct ur_ctx *c, be_event_fn *on_event, void *ctx)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&c->ring.uring, head, cqe)
    {
        uint64_t ud = cqe->user_data;
        int32_t res = cqe->res;
        uint32_t flags = cqe->flags;
        seen++;
        if (ud == 0 || ud == LIBURING_UDATA_TIMEOUT)
            continue;
        if ((ud & 7) != 0 || ud < 4096) {
            if ((ud & RING_UD_TAG_MASK) == RING_UD_WAKE)
                on_event(ctx, BE_EV_WAKE, 0);
            else if ((ud & RING_UD_TAG_MASK) == RING_UD_MSG_FAILED)
                on_event(ctx, BE_EV_WAKE_FAILED, (uint32_t)(ud >> 8));
            continue;
        }
        struct be_tag *tag = (struct be_tag *)(uintptr_t)ud;
        tag->complete(tag, res, flags);
    }
    if (seen)
        io_uring_cq_advance(&c->ring.uring, seen);
    return seen;
}

/* ---- wake ------------------------------------------------------------------------------------------ */

int ur_shared_init(struct ur_shared *sh)
{
    return ring_shared_init(&sh->ring);
}

void ur_shared_exit(struct ur_shared *sh)
{
    ring_shared_exit(&sh->ring);
}

int ur_wake(const struct ur_caps *caps, struct ur_shared *fallback, struct ur_ctx *self, int target_fd,
            uint32_t cookie)
{
    if (self)
        return ring_send_wake(&self->ring, target_fd, 0, cookie);
    int err = ring_send_wake_foreign(target_fd, 0, caps->ringless_msg);
    if (__builtin_expect(err < 0, 0) && fallback && fallback->ring.ready) /* no ring of its own: the shared one */
        err = ring_shared_send_wake(&fallback->ring, target_fd, 0);
    return err;
}

/* ---- registered resources ------------------------------------------------------------------------ */

static size_t bufring_bytes(uint32_t count)
{
    return ((size_t)count * sizeof(struct io_uring_buf) + 4095) & ~(size_t)4095;
}

int ur_bufring_create(struct ur_ctx *c, uint16_t bgid, uint32_t count, struct be_bufring **out)
{
    size_t bytes = bufring_bytes(count);
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return -ENOMEM;
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)mem;
    reg.ring_entries = count;
    reg.bgid = bgid;
    int err = io_uring_register_buf_ring(&c->ring.uring, &reg, 0);
    if (err) {
        munmap(mem, bytes);
        return err;
    }
    io_uring_buf_ring_init(mem);
    *out = mem;
    return 0;
}

void ur_bufring_unregister(struct ur_ctx *c, struct be_bufring *r, uint16_t bgid)
{
    (void)r;
    io_uring_unregister_buf_ring(&c->ring.uring, bgid);
}

void ur_bufring_free(struct be_bufring *r, uint32_t count)
{
    munmap(r, bufring_bytes(count));
}

int ur_files_register(struct ur_ctx *c, uint32_t n)
{
    return io_uring_register_files_sparse(&c->ring.uring, n);
}

int ur_files_alloc_range(struct ur_ctx *c, uint32_t off, uint32_t len)
{
    return io_uring_register_file_alloc_range(&c->ring.uring, off, len);
}

int ur_files_update(struct ur_ctx *c, uint32_t slot, int fd)
{
    int err = io_uring_register_files_update(&c->ring.uring, slot, &fd, 1);
    return err < 0 ? err : 0;
}

int ur_buffers_register(struct ur_ctx *c, const struct iovec *iov, unsigned n)
{
    return io_uring_register_buffers(&c->ring.uring, iov, n);
}
