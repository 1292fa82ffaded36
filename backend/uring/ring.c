/*
 * backend/uring/ring.c — ring setup and feature probing, wake messages, waiting.
 *
 * Probe order for a worker ring (each step skipped if the caller forbids it):
 *   1. IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN  (Linux 6.1):
 *      completions are posted only when the owner enters the kernel, so a
 *      running worker is never interrupted by task work;
 *   2. IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG (5.19), plus
 *      SINGLE_ISSUER (6.0) where allowed;
 *   3. no flags.
 * A kernel that rejects a flag answers -EINVAL; any other error (ENOSYS,
 * EPERM from a sysctl that disables io_uring, ENOMEM) is final.
 *
 * Wake messages from threads that own no urt ring: since Linux 6.13
 * io_uring_register(-1, IORING_REGISTER_SEND_MSG_RING, sqe, 1) sends a
 * MSG_RING synchronously without a source ring ("blind" register opcode; the
 * SQE's flags must be 0). Older kernels get a small ring per thread, created
 * on first use and destroyed by a pthread key destructor at thread exit.
 *
 * Memory ordering: none here. The ring's head/tail protocol is liburing's;
 * everything that needs ordering against a message (the queues the message
 * announces) is ordered by the caller (sched/core/worker.c).
 */
#include "backend/uring/ring.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef IORING_REGISTER_SEND_MSG_RING
#define IORING_REGISTER_SEND_MSG_RING 31
#endif

static int sys_register_blind(unsigned opcode, void *arg, unsigned nr)
{
    long r = syscall(__NR_io_uring_register, -1, opcode, arg, nr);
    return r < 0 ? -errno : (int)r;
}

static void prep_wake(struct io_uring_sqe *sqe, int target_fd, int32_t value)
{
    /* MSG_RING with IORING_MSG_DATA: target CQE gets user_data = RING_UD_WAKE
     * (sqe->off) and res = value (sqe->len). */
    io_uring_prep_msg_ring(sqe, target_fd, (unsigned)value, RING_UD_WAKE, 0);
}

/* Does a ring-less message reach probe ring r? */
static bool probe_ringless(struct io_uring *r)
{
    struct io_uring_sqe sqe;
    memset(&sqe, 0, sizeof(sqe));
    prep_wake(&sqe, r->ring_fd, 0x75);
    if (sys_register_blind(IORING_REGISTER_SEND_MSG_RING, &sqe, 1) < 0)
        return false;
    struct io_uring_cqe *cqe = NULL;
    struct __kernel_timespec ts = {.tv_sec = 1};
    if (io_uring_wait_cqe_timeout(r, &cqe, &ts) != 0 || !cqe)
        return false;
    bool ok = cqe->user_data == RING_UD_WAKE && cqe->res == 0x75;
    io_uring_cqe_seen(r, cqe);
    return ok;
}

int ring_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct ur_caps *out)
{
    uint32_t candidates[4];
    unsigned n = 0;
    bool single = !(disable & RING_NO_SINGLE_ISSUER);

    memset(out, 0, sizeof(*out));
    if (sqpoll) {
        /* DEFER_TASKRUN is not allowed with SQPOLL. */
        if (single)
            candidates[n++] = IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER;
        candidates[n++] = IORING_SETUP_SQPOLL;
    } else {
        if (single && !(disable & RING_NO_DEFER_TASKRUN))
            candidates[n++] = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        if (!(disable & RING_NO_COOP_TASKRUN))
            candidates[n++] = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
                              (single ? IORING_SETUP_SINGLE_ISSUER : 0);
        if (single)
            candidates[n++] = IORING_SETUP_SINGLE_ISSUER;
        candidates[n++] = 0;
    }

    int err = -EINVAL;
    for (unsigned i = 0; i < n; i++) {
        struct io_uring r;
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        p.flags = candidates[i];
        p.sq_thread_idle = sqpoll_idle_ms;
        err = io_uring_queue_init_params(8, &r, &p);
        if (err == -EINVAL)
            continue;
        if (err < 0)
            return err;
        out->setup_flags = candidates[i];
        out->kernel_features = p.features;
        out->ext_arg = (p.features & IORING_FEAT_EXT_ARG) && !(disable & RING_NO_EXT_ARG);
        out->sqpoll = sqpoll;
        out->sqpoll_idle_ms = sqpoll_idle_ms;
        if (!(disable & RING_NO_REGISTERED_FD) && io_uring_register_ring_fd(&r) == 1) {
            out->registered_fd = true;
            io_uring_unregister_ring_fd(&r);
        }
        if (!(disable & RING_NO_RINGLESS_MSG))
            out->ringless_msg = probe_ringless(&r);
        out->io_features = ring_probe_io(&r, disable);
        io_uring_queue_exit(&r);
        return 0;
    }
    return err;
}

int ring_init(struct ring *r, const struct ur_caps *caps, uint32_t entries, uint32_t cq_entries)
{
    struct io_uring_params p;
    memset(r, 0, sizeof(*r));
    memset(&p, 0, sizeof(p));
    p.flags = caps->setup_flags | IORING_SETUP_CQSIZE;
    p.cq_entries = cq_entries;
    p.sq_thread_idle = caps->sqpoll_idle_ms;
    int err = io_uring_queue_init_params(entries, &r->uring, &p);
    if (err < 0)
        return err;
    r->fd = r->uring.ring_fd;
    r->ext_arg = caps->ext_arg;
    if (caps->registered_fd && io_uring_register_ring_fd(&r->uring) == 1)
        r->registered = true;
    return 0;
}

void ring_exit(struct ring *r)
{
    if (r->fd <= 0)
        return;
    io_uring_queue_exit(&r->uring); /* also drops a registered ring fd */
    r->fd = -1;
}

int ring_submit(struct ring *r)
{
    if (r->unsubmitted == 0 && !(r->uring.flags & IORING_SETUP_SQPOLL))
        return 0;
    int n = io_uring_submit(&r->uring);
    if (n > 0) {
        atomic_store_explicit(&r->submitted, atomic_load_explicit(&r->submitted, memory_order_relaxed) + (uint64_t)n,
                              memory_order_relaxed);
        r->unsubmitted = (uint32_t)n >= r->unsubmitted ? 0 : r->unsubmitted - (uint32_t)n;
    }
    return n;
}

struct io_uring_sqe *ring_get_sqe(struct ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
    if (!sqe) {
        ring_submit(r);
        sqe = io_uring_get_sqe(&r->uring);
    }
    if (sqe)
        r->unsubmitted++;
    return sqe;
}

int ring_send_wake(struct ring *r, int target_fd, int32_t value, uint32_t cookie)
{
    struct io_uring_sqe *sqe = ring_get_sqe(r);
    if (!sqe)
        return -EBUSY;
    prep_wake(sqe, target_fd, value);
    /* No CQE on success; a failure comes back to us, tagged with the target. */
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, RING_UD_MSG_FAILED | ((uint64_t)cookie << 8));
    int n = ring_submit(r);
    return n < 0 ? n : 0;
}

/* ---- threads that own no urt ring ----------------------------------------- */

/* One wake message from a ring that only sends (the caller's own, or the
 * shared fallback under its lock): submit, wait for the MSG_RING's own CQE
 * (it completes inline) and return its result. */
static int send_wake_on(struct io_uring *u, int target_fd, int32_t value)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(u);
    if (!sqe)
        return -EBUSY;
    prep_wake(sqe, target_fd, value);
    io_uring_sqe_set_data64(sqe, 0);
    int n = io_uring_submit_and_wait(u, 1);
    if (n < 0)
        return n;
    struct io_uring_cqe *cqe;
    int res = 0;
    if (io_uring_peek_cqe(u, &cqe) == 0) {
        res = cqe->res < 0 ? cqe->res : 0;
        io_uring_cqe_seen(u, cqe);
    }
    return res;
}

struct foreign_ring {
    struct io_uring uring;
    bool ready;
};

static pthread_key_t foreign_key;
static pthread_once_t foreign_once = PTHREAD_ONCE_INIT;

static void foreign_ring_destroy(void *p)
{
    struct foreign_ring *fr = p;
    if (fr->ready)
        io_uring_queue_exit(&fr->uring);
    free(fr);
}

static void foreign_key_create(void)
{
    pthread_key_create(&foreign_key, foreign_ring_destroy);
}

static struct foreign_ring *foreign_ring_get(void)
{
    pthread_once(&foreign_once, foreign_key_create);
    struct foreign_ring *fr = pthread_getspecific(foreign_key);
    if (fr)
        return fr;
    fr = calloc(1, sizeof(*fr));
    if (!fr)
        return NULL;
    if (io_uring_queue_init(4, &fr->uring, 0) < 0) {
        free(fr);
        return NULL;
    }
    fr->ready = true;
    pthread_setspecific(foreign_key, fr);
    return fr;
}

int ring_send_wake_foreign(int target_fd, int32_t value, bool ringless)
{
    if (ringless) {
        struct io_uring_sqe sqe;
        memset(&sqe, 0, sizeof(sqe));
        prep_wake(&sqe, target_fd, value);
        int err = sys_register_blind(IORING_REGISTER_SEND_MSG_RING, &sqe, 1);
        return err < 0 ? err : 0;
    }
    struct foreign_ring *fr = foreign_ring_get();
    if (!fr)
        return -ENOMEM;
    return send_wake_on(&fr->uring, target_fd, value);
}

int ring_shared_init(struct ring_shared *r)
{
    memset(r, 0, sizeof(*r));
    int err = io_uring_queue_init(4, &r->uring, 0); /* no SINGLE_ISSUER: any thread, under the lock */
    if (err < 0)
        return err;
    pthread_mutex_init(&r->lock, NULL);
    r->ready = true;
    return 0;
}

void ring_shared_exit(struct ring_shared *r)
{
    if (!r->ready)
        return;
    io_uring_queue_exit(&r->uring);
    pthread_mutex_destroy(&r->lock);
    r->ready = false;
}

int ring_shared_send_wake(struct ring_shared *r, int target_fd, int32_t value)
{
    if (!r->ready)
        return -ENODEV;
    pthread_mutex_lock(&r->lock);
    int res = send_wake_on(&r->uring, target_fd, value);
    pthread_mutex_unlock(&r->lock);
    return res;
}

/* ---- waiting and reaping ------------------------------------------------------ */

int ring_wait(struct ring *r, uint64_t timeout_ns)
{
    struct io_uring_cqe *cqe = NULL;
    if (timeout_ns == 0) {
        int n = ring_submit(r);
        return n < 0 ? n : 0;
    }
    r->unsubmitted = 0; /* submit_and_wait submits everything queued */
    int err;
    if (timeout_ns == UINT64_MAX) {
        err = io_uring_submit_and_wait(&r->uring, 1);
        err = err < 0 ? err : 0;
    } else {
        struct __kernel_timespec ts = {
            .tv_sec = (long long)(timeout_ns / 1000000000ull),
            .tv_nsec = (long long)(timeout_ns % 1000000000ull),
        };
        /* With IORING_FEAT_EXT_ARG the timeout rides on io_uring_enter; without
         * it liburing queues a timeout SQE tagged LIBURING_UDATA_TIMEOUT. */
        err = io_uring_submit_and_wait_timeout(&r->uring, &cqe, 1, &ts, NULL);
        if (err > 0)
            err = 0;
    }
    return err == -EAGAIN ? 0 : err;
}

int ring_get_events(struct ring *r)
{
    return io_uring_get_events(&r->uring);
}

int ring_describe_setup(uint32_t f, char *buf, size_t len)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {
        {IORING_SETUP_SQPOLL, "SQPOLL"},
        {IORING_SETUP_SINGLE_ISSUER, "SINGLE_ISSUER"},
        {IORING_SETUP_DEFER_TASKRUN, "DEFER_TASKRUN"},
        {IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN"},
        {IORING_SETUP_TASKRUN_FLAG, "TASKRUN_FLAG"},
    };
    char tmp[128] = "";
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(f & names[i].bit))
            continue;
        if (tmp[0])
            strcat(tmp, "|");
        strcat(tmp, names[i].name);
    }
    return snprintf(buf, len, "%s", tmp[0] ? tmp : "none");
}
