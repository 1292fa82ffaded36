/*
 * backend/uring/probe_io.c — which io_uring features tasks' I/O (urt/io.h) may use
 * on the running kernel, each found by trying it on the probe ring (a flag
 * in an SQE's ioprio cannot be looked up like an opcode):
 *   link timeouts, zero-copy send   the opcode probe (IORING_REGISTER_PROBE);
 *   buffer rings                    registering a one-entry ring (group 0);
 *   multishot accept                an abstract AF_UNIX listener, one
 *                                   connection: a CQE with IORING_CQE_F_MORE;
 *   multishot receive               an AF_UNIX pair, one byte, into the
 *                                   buffer ring: a CQE with F_MORE and F_BUFFER;
 *   accept into the file table      a sparse table of 2 and an accept with
 *                                   IORING_FILE_INDEX_ALLOC: an index back.
 * Every try waits at most a second for its CQE; anything that fails (no fd,
 * no memory, an older kernel's -EINVAL) leaves the feature out, and tasks'
 * I/O falls back (docs/io.md, "Feature probe"). What the multishot tries
 * leave armed ends with the probe ring.
 *
 * Memory ordering: none (one thread, its own ring).
 */
#include "backend/uring/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PROBE_UD 0x7000ull

/* Submits what is queued and takes one CQE (within 1 s): 0 with its res and flags, or -1. */
static int probe_cqe(struct io_uring *r, int32_t *res, uint32_t *flags)
{
    struct io_uring_cqe *cqe = NULL;
    struct __kernel_timespec ts = {.tv_sec = 1};
    io_uring_submit(r);
    if (io_uring_wait_cqe_timeout(r, &cqe, &ts) != 0 || !cqe)
        return -1;
    *res = cqe->res;
    *flags = cqe->flags;
    io_uring_cqe_seen(r, cqe);
    return 0;
}

static void drain_cqes(struct io_uring *r)
{
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(r, &cqe) == 0)
        io_uring_cqe_seen(r, cqe);
}

/* An abstract AF_UNIX stream listener (autobind) and its address. */
static int unix_listener(struct sockaddr_un *a, socklen_t *alen)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    sa_family_t fam = AF_UNIX;
    *alen = sizeof(*a);
    if (bind(fd, (struct sockaddr *)&fam, sizeof(fam)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)a, alen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int unix_connect(const struct sockaddr_un *a, socklen_t alen)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)a, alen) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static bool probe_multishot_accept(struct io_uring *r)
{
    struct sockaddr_un a;
    socklen_t alen;
    int l = unix_listener(&a, &alen);
    if (l < 0)
        return false;
    bool ok = false;
    struct io_uring_sqe *sqe = io_uring_get_sqe(r);
    if (sqe) {
        io_uring_prep_multishot_accept(sqe, l, NULL, NULL, SOCK_CLOEXEC);
        io_uring_sqe_set_data64(sqe, PROBE_UD);
        io_uring_submit(r);
        int c = unix_connect(&a, alen);
        int32_t res;
        uint32_t flags;
        if (c >= 0 && probe_cqe(r, &res, &flags) == 0) {
            ok = res >= 0 && (flags & IORING_CQE_F_MORE);
            if (res >= 0)
                close(res);
        }
        if (c >= 0)
            close(c);
    }
    close(l);
    drain_cqes(r);
    return ok;
}

static bool probe_fixed_accept(struct io_uring *r)
{
    if (io_uring_register_files_sparse(r, 2) != 0)
        return false;
    struct sockaddr_un a;
    socklen_t alen;
    int l = unix_listener(&a, &alen), c = -1;
    bool ok = false;
    struct io_uring_sqe *sqe = l >= 0 ? io_uring_get_sqe(r) : NULL;
    if (sqe && (c = unix_connect(&a, alen)) >= 0) {
        /* liburing adds 1 to the index it is given: ALLOC - 1 asks the kernel to pick one */
        io_uring_prep_accept_direct(sqe, l, NULL, NULL, 0, IORING_FILE_INDEX_ALLOC - 1);
        io_uring_sqe_set_data64(sqe, PROBE_UD);
        int32_t res;
        uint32_t flags;
        ok = probe_cqe(r, &res, &flags) == 0 && res >= 0 && res < 2;
    }
    if (c >= 0)
        close(c);
    if (l >= 0)
        close(l);
    io_uring_unregister_files(r);
    drain_cqes(r);
    return ok;
}

/* A one-entry buffer ring, group bgid: its memory (page) or NULL. */
static struct io_uring_buf_ring *bufring_register(struct io_uring *r, uint16_t bgid, void *buf, unsigned len)
{
    void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)mem;
    reg.ring_entries = 1;
    reg.bgid = bgid;
    if (io_uring_register_buf_ring(r, &reg, 0) != 0) {
        munmap(mem, 4096);
        return NULL;
    }
    struct io_uring_buf_ring *br = mem;
    io_uring_buf_ring_init(br);
    io_uring_buf_ring_add(br, buf, len, 0, io_uring_buf_ring_mask(1), 0);
    io_uring_buf_ring_advance(br, 1);
    return br;
}

static bool probe_multishot_recv(struct io_uring *r)
{
    char buf[16];
    struct io_uring_buf_ring *br = bufring_register(r, 1, buf, sizeof(buf));
    if (!br)
        return false;
    int sv[2];
    bool ok = false;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(r);
        if (sqe) {
            io_uring_prep_recv_multishot(sqe, sv[0], NULL, 0, 0);
            sqe->flags |= IOSQE_BUFFER_SELECT;
            sqe->buf_group = 1;
            io_uring_sqe_set_data64(sqe, PROBE_UD);
            io_uring_submit(r);
            int32_t res;
            uint32_t flags;
            ok = write(sv[1], "u", 1) == 1 && probe_cqe(r, &res, &flags) == 0 && res == 1 &&
                 (flags & IORING_CQE_F_MORE) && (flags & IORING_CQE_F_BUFFER);
        }
        close(sv[0]);
        close(sv[1]);
    }
    drain_cqes(r);
    io_uring_unregister_buf_ring(r, 1);
    munmap(br, 4096);
    return ok;
}

static bool probe_bufring(struct io_uring *r)
{
    char buf[16];
    struct io_uring_buf_ring *br = bufring_register(r, 0, buf, sizeof(buf));
    if (!br)
        return false;
    io_uring_unregister_buf_ring(r, 0);
    munmap(br, 4096);
    return true;
}

uint32_t ring_probe_io(struct io_uring *r, uint32_t disable)
{
    uint32_t off = (disable >> RING_IO_DISABLE_SHIFT) & RING_IO_ALL, f = 0;
    struct io_uring_probe *p = io_uring_get_probe_ring(r);
    if (p) {
        if (io_uring_opcode_supported(p, IORING_OP_LINK_TIMEOUT))
            f |= RING_IO_LINK_TIMEOUT;
        if (io_uring_opcode_supported(p, IORING_OP_SEND_ZC))
            f |= RING_IO_SEND_ZC;
        io_uring_free_probe(p);
    }
    if (!(off & RING_IO_BUFRING) && probe_bufring(r))
        f |= RING_IO_BUFRING;
    if (!(off & RING_IO_MULTISHOT_ACCEPT) && probe_multishot_accept(r))
        f |= RING_IO_MULTISHOT_ACCEPT;
    if ((f & RING_IO_BUFRING) && !(off & RING_IO_MULTISHOT_RECV) && probe_multishot_recv(r))
        f |= RING_IO_MULTISHOT_RECV;
    if (!(off & RING_IO_FIXED_ACCEPT) && probe_fixed_accept(r))
        f |= RING_IO_FIXED_ACCEPT;
    return f & ~off;
}
