/*
 * base/fence.h — asymmetric Dekker fences: a cheap side run often, a costly
 * side run rarely (every layer may include it).
 *
 * A Dekker pair orders a store before a load on each side, in opposite
 * directions:
 *
 *   fast side (often):   store A; urt_fence_light(); load B
 *   slow side (rarely):  store B; urt_fence_heavy(); load A
 *
 * and guarantees that the fast side's load sees B or the slow side's load
 * sees A (never neither). Symmetric fences put a full barrier (an mfence or
 * a locked instruction, ~20 cycles) on the fast side. Here, once
 * urt_fence_init() registered the process for membarrier(2)'s
 * MEMBARRIER_CMD_PRIVATE_EXPEDITED, the light fence is a compiler barrier
 * only, and the heavy fence is the membarrier system call: it makes every
 * thread of the process that is running at that moment execute a full
 * barrier (by IPI), and a thread that is not running passed one at its last
 * context switch. So the fast side's store and load are ordered by a barrier
 * whenever the slow side can observe them, at no cost to the fast side. This is
 * the scheme of liburcu's urcu-memb flavour and of folly's
 * asymmetricLightBarrier / asymmetricHeavyBarrier (Desnoyers et al., "User-Level
 * Implementations of Read-Copy Update", IEEE TPDS 2012, section on
 * sys_membarrier).
 *
 * Fallback (probed, never assumed): without the command (a kernel before
 * 4.14, or a seccomp profile that refuses membarrier) both fences are
 * seq_cst thread fences, a symmetric Dekker pair.
 *
 * ---- Memory-ordering contract -------------------------------------------
 *  (F1) The mode is one process-wide flag that goes from "symmetric" to
 *       "expedited" once, after the registration succeeded (and back only at
 *       F3, with its grace period). A fast side that
 *       reads "expedited" (relaxed) runs after the registration; the slow
 *       sides are run by code that happens after urt_fence_init() returned
 *       (a runtime's stop, after its creation called it), so they read
 *       "expedited" too. A fast side that reads the stale "symmetric" uses a
 *       full fence, which pairs with either heavy fence.
 *  (F2) The stores and loads of a pair must be atomics (relaxed suffices for
 *       the pair itself; release/acquire where they publish data).
 *  (F3) After a successful registration the command does not fail
 *       (membarrier(2): EPERM only when the process is not registered; the
 *       registration is inherited by fork). Only a seccomp filter installed
 *       later can refuse it: the heavy fence then switches the process back
 *       to symmetric fences and waits out a grace period for the fast sides
 *       that ran with a compiler barrier only (fence.c, fence_degrade).
 */
#ifndef URT_BASE_FENCE_H
#define URT_BASE_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>

extern _Atomic bool urt__fence_expedited;

/* Probes and registers membarrier's private expedited command, once per
 * process (later calls return the first result). true: expedited; false:
 * symmetric fences. Thread-safe. */
bool urt_fence_init(void);

/* A full (seq_cst) fence, for symmetric protocols too (sched/core/sleeper.h,
 * sched/blocking.c).
 * GCC refuses a fence inlined into another function under ThreadSanitizer
 * (-Wtsan; TSan does not model fences, the protocols' other accesses are
 * atomics it does see): the TSan build keeps it out of line. */
#if defined(__SANITIZE_THREAD__)
__attribute__((noinline, unused)) static void urt_fence_full(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}
#else
static inline void urt_fence_full(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}
#endif

/* The fast side's fence. */
static inline void urt_fence_light(void)
{
    if (__builtin_expect(atomic_load_explicit(&urt__fence_expedited, memory_order_relaxed), 1))
        atomic_signal_fence(memory_order_seq_cst);
    else
        urt_fence_full();
}

/* The slow side's fence: a system call in the expedited mode. */
void urt_fence_heavy(void);

#endif
