/*
 * base/fence.c — the asymmetric fences' probe and heavy side (design and
 * contract in base/fence.h).
 */
#include "base/fence.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic bool urt__fence_expedited = false;

static pthread_once_t fence_once = PTHREAD_ONCE_INIT;

static int membarrier(int cmd, unsigned flags)
{
    return (int)syscall(__NR_membarrier, cmd, flags, 0);
}

/* QUERY lists the commands the kernel has (-1 with ENOSYS before 4.3, or
 * under a seccomp profile that refuses the call); REGISTER is needed once
 * per process before the command may be used (4.14). */
static void fence_probe(void)
{
    int cmds = membarrier(MEMBARRIER_CMD_QUERY, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
        !(cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED))
        return;
    if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) != 0)
        return;
    atomic_store_explicit(&urt__fence_expedited, true, memory_order_release); /* (F1) */
}

bool urt_fence_init(void)
{
    pthread_once(&fence_once, fence_probe);
    return atomic_load_explicit(&urt__fence_expedited, memory_order_acquire);
}

/* (F3) The registered command refused: only a seccomp filter installed after
 * the registration does that. The fast sides use full fences from now on
 * (the flag goes back to symmetric); those that ran with a compiler barrier
 * before they read the flag are waited out: their store left the store
 * buffer long before GRACE_NS (a store buffer drains in well under a
 * microsecond, and a thread preempted meanwhile passed the context switch's
 * barrier). A safety net for a process that sandboxes itself late, sound on
 * the hardware rather than by the C11 model, which membarrier itself is
 * outside of too. */
#define GRACE_NS (1000 * 1000)

static void fence_degrade(void)
{
    atomic_store_explicit(&urt__fence_expedited, false, memory_order_seq_cst);
    urt_fence_full();
    struct timespec ts = {.tv_sec = 0, .tv_nsec = GRACE_NS};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void urt_fence_heavy(void)
{
    if (atomic_load_explicit(&urt__fence_expedited, memory_order_acquire)) {
        if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0)
            return;
        fence_degrade();
    }
    urt_fence_full(); /* the symmetric mode */
}
