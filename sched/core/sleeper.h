/*
 * sched/core/sleeper.h — the one sleep/wake protocol: a thread that owns an
 * io_uring ring sleeps in it; others wake it with a message (MSG_RING).
 * Used by every worker (worker.c worker_suspend / sched_notify) and by the
 * watcher thread (watcher.c watcher_sleep / watcher_notify).
 *
 * ---- No lost wakeup (the argument, once) -----------------------------------
 *
 * Sleeper:                             Waker (after publishing its work):
 *   S1 state := SLEEPING  (seq_cst)      W1 publish: a queue push (seq_cst
 *   S2 seq_cst fence                        exchange), or a seq_cst store/RMW
 *   S3 look at everything that counts    W3 load state (seq_cst)
 *      as work                           W4 if SLEEPING and exchange(wake_pending,
 *   S4 if none: wait in the ring            1) == 0 (seq_cst): send a message to
 *                                           the sleeper's ring
 *
 * Either S3 sees the work or W3 sees SLEEPING (Dekker). In C11 terms
 * ([atomics.order]): W1 and W3 are seq_cst, so W1 precedes W3 in the total
 * order S. If W3 follows the fence S2 in S, W3 observes S1 (SLEEPING). If not,
 * W1 precedes S2 in S, and S3's loads, sequenced after the seq_cst fence S2,
 * observe W1. (On x86 the waker's exchange is already a full barrier, so the
 * waker pays no fence; the sleeper pays one, on its slow path.)
 *
 * If W3 sees SLEEPING, a message is in flight to the ring: sent by this waker,
 * or by an earlier one whose wake_pending is still 1. wake_pending is cleared
 * only by the sleeper when it reaps the wake CQE (R2), or by a sender whose
 * send failed (sleeper_send_failed), so a 1 always means a CQE is on its way
 * to the ring, and the ring wait (S4) returns as soon as it is there — with
 * DEFER_TASKRUN the kernel runs the ring's deferred work when the owner enters
 * to wait, which posts it. After waking, the sleeper does R1 state := RUNNING,
 * R2 reap (wake_pending := 0, seq_cst), R3 seq_cst fence, then looks again. A
 * waker whose W4 exchange read 1 precedes R2 in the modification order of
 * wake_pending, hence in S, and R2 precedes R3: its W1 precedes R3 in S, so
 * the look after R3 sees its work. A waker whose W3 saw RUNNING is covered by
 * the next S1–S3.
 *
 * At most one wake message is in flight per sleeper (wake_pending): no wake
 * storms. A sleep timeout, where a user has one, bounds the damage of
 * anything unforeseen; it is not part of the argument.
 */
#ifndef URT_SCHED_SLEEPER_H
#define URT_SCHED_SLEEPER_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/fence.h"

enum sleeper_state {
    SLEEPER_RUNNING = 0,
    SLEEPER_SLEEPING = 1,
    SLEEPER_EXITED = 2, /* its ring is closed: never a wake target again */
};

struct sleeper {
    alignas(64) _Atomic uint32_t state; /* enum sleeper_state */
    _Atomic uint32_t wake_pending;      /* 1 while a wake message to it is in flight */
};

static inline void sleeper_init(struct sleeper *sl)
{
    atomic_init(&sl->state, SLEEPER_RUNNING);
    atomic_init(&sl->wake_pending, 0);
}

/* ---- waker side --------------------------------------------------------------------------- */

enum sleeper_claim {
    SLEEPER_AWAKE = 0,   /* W3 saw it running: the next S1-S3 covers the work */
    SLEEPER_IN_FLIGHT,   /* asleep, a message is on its way already */
    SLEEPER_SEND,        /* asleep, and the caller must send the one message */
};

/* W3 + W4, after the caller's seq_cst W1. */
static inline enum sleeper_claim sleeper_claim_wake(struct sleeper *sl)
{
    if (atomic_load_explicit(&sl->state, memory_order_seq_cst) != SLEEPER_SLEEPING) /* W3 */
        return SLEEPER_AWAKE;
    if (atomic_exchange_explicit(&sl->wake_pending, 1, memory_order_seq_cst)) /* W4 */
        return SLEEPER_IN_FLIGHT;
    return SLEEPER_SEND;
}

/* The claimed message could not be sent (or did not arrive): nothing is in
 * flight, the next waker may try. */
static inline void sleeper_send_failed(struct sleeper *sl)
{
    atomic_store_explicit(&sl->wake_pending, 0, memory_order_seq_cst);
}

/* A snapshot (relaxed): for placement choices and statistics, never for the
 * protocol. */
static inline bool sleeper_sleeping(const struct sleeper *sl)
{
    return atomic_load_explicit(&((struct sleeper *)sl)->state, memory_order_relaxed) == SLEEPER_SLEEPING;
}

/* ---- sleeper side --------------------------------------------------------------------------- */

/* S1 + S2: announce, then look at the work (S3) and wait (S4) if none. */
static inline void sleeper_announce(struct sleeper *sl)
{
    atomic_store_explicit(&sl->state, SLEEPER_SLEEPING, memory_order_seq_cst); /* S1 */
    urt_fence_full();                                                            /* S2 */
}

/* R1: awake again (whether it waited or not). */
static inline void sleeper_awake(struct sleeper *sl)
{
    atomic_store_explicit(&sl->state, SLEEPER_RUNNING, memory_order_seq_cst);
}

/* R2: the wake CQE was reaped; a new wake may be sent from now on. */
static inline void sleeper_wake_reaped(struct sleeper *sl)
{
    atomic_store_explicit(&sl->wake_pending, 0, memory_order_seq_cst);
}

/* R3: after reaping, before looking at the work again. */
static inline void sleeper_after_reap(void)
{
    urt_fence_full();
}

static inline void sleeper_exit(struct sleeper *sl)
{
    atomic_store_explicit(&sl->state, SLEEPER_EXITED, memory_order_seq_cst);
}

#endif
