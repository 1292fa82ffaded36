/*
 * base/fence.c — the asymmetric fences' probe and heavy side (design and
 * contract in base/fence.h).
 */
#include "base/fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
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

void urt_fence_heavy(void)
{
    if (atomic_load_explicit(&urt__fence_expedited, memory_order_acquire) &&
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0)
        return;
    /* The symmetric mode. (F3): in the expedited mode the call above does
     * not fail, so the fast sides' compiler barriers are never paired with
     * this fence alone. */
    atomic_thread_fence(memory_order_seq_cst);
}
