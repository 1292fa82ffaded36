/*
 * base/waitcount.h — the one way a thread waits for a count to reach zero
 * (docs/design.md, "Layers"; every layer may include it).
 *
 * A waitcount is one 32-bit word: a count in bits 0-30 and, in bit 31,
 * WAITING: some thread sleeps (or is about to) on the word until the count
 * is 0. Counters that others wait for (a job's end, a blocked submitter's
 * grant, the submitters and senders a shutdown lets drain) use it:
 *
 *   urt_waitcount_add(w, n)        count += n (a plain fetch_add; any order
 *                                  the caller's protocol needs)
 *   urt_waitcount_sub(w, n)        count -= n; the sub that brings the count to
 *                                  0 with WAITING set wakes every sleeper
 *   urt_waitcount_wait(w, dl)      returns 0 once the count is 0, or
 *                                  -ETIMEDOUT at the CLOCK_MONOTONIC deadline
 *                                  dl (ns; URT_WAITCOUNT_FOREVER: none)
 *   urt_waitcount_count(v)         the count of a word's value (bit 31 masked)
 *
 * Why the waiting bit is in the word (Drepper, "Futexes Are Tricky", 2011,
 * section 6: the waiter state lives in the futex word itself). A separate
 * "waiters" counter would have to be read by the decrementer after its
 * decrement, and the decrement is often the decrementer's last touch of an
 * object the waiter frees as soon as it sees 0 (a runtime torn down after
 * its last foreign submitter left, a waiter record on the blocked thread's
 * stack). Here the decrement itself tells whether to wake, and the wake is
 * a FUTEX_WAKE on the word's address alone (futex(2): a private futex is
 * keyed by address, nothing is read there; should the memory have been
 * freed meanwhile, the wake finds nobody, or wakes a sleeper of a word
 * reusing the address, which rechecks its word and sleeps again).
 *
 * ---- Memory-ordering contract ------------------------------------------
 *  (W1) No lost wake-up. The waiter sets WAITING by a CAS on the word and
 *       sleeps with FUTEX_WAIT on exactly the value it wrote; the decrement
 *       is a fetch_sub on the same word. Both are RMWs of one location, so
 *       one is first in its modification order: either the sub sees WAITING
 *       (and wakes), or the CAS sees the count the sub left (0: no sleep;
 *       else the sub that brings it to 0 later sees WAITING). FUTEX_WAIT
 *       rechecks the value in the kernel, so a change between the CAS and
 *       the sleep returns at once.
 *  (W2) No early return. The waiter returns 0 only after an acquire load
 *       reads count 0; the sub is seq_cst (a release), so everything the
 *       decrementers did before their subs happens before the return.
 *       Timeouts, signals and spurious wakes loop back to that load.
 *  (W3) The subs are seq_cst RMWs, so a protocol may pair them with other
 *       seq_cst accesses (Dekker pairs such as a phase store then a wait,
 *       against an add then a phase load: sched/core/submit.c).
 *  (W4) WAITING stays set once the count is 0 until the next waiter that
 *       finds it so clears it (best effort), or until the word is reused;
 *       readers other than the wait read the count with urt_waitcount_count.
 *
 * Cost: add and sub are the one atomic RMW a hand-written counter does, plus
 * a compare of the value the sub returns; a system call only when a sleeper
 * is there. The wait is for slow paths (waiting threads are not workers).
 */
#ifndef URT_BASE_WAITCOUNT_H
#define URT_BASE_WAITCOUNT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define URT_WAITCOUNT_WAITING 0x80000000u
#define URT_WAITCOUNT_FOREVER UINT64_MAX

typedef _Atomic uint32_t urt_waitcount;

static inline uint32_t urt_waitcount_count(uint32_t v)
{
    return v & ~URT_WAITCOUNT_WAITING;
}

/* FUTEX_WAKE of every sleeper on w (the address only: W1's last touch). */
void urt__waitcount_wake(urt_waitcount *w);

static inline void urt_waitcount_add(urt_waitcount *w, uint32_t n, memory_order mo)
{
    atomic_fetch_add_explicit(w, n, mo);
}

/* count -= n (n <= count); wakes the sleepers when it reaches 0. */
static inline void urt_waitcount_sub(urt_waitcount *w, uint32_t n)
{
    uint32_t old = atomic_fetch_sub_explicit(w, n, memory_order_seq_cst); /* W2, W3 */
    if (__builtin_expect(old == (URT_WAITCOUNT_WAITING | n), 0))            /* W1 */
        urt__waitcount_wake(w);
}

/* 0 once the count is 0, -ETIMEDOUT at deadline_ns (CLOCK_MONOTONIC, as
 * urt_clock_ns; URT_WAITCOUNT_FOREVER for none). Any thread that may block. */
int urt_waitcount_wait(urt_waitcount *w, uint64_t deadline_ns);

/* For a count whose last decrement can wake nobody (the decrementer's
 * protocol reads the exact value it leaves, e.g. a lane's pending count):
 * polls cond(arg) until it is true, yielding the CPU for the first polls,
 * then sleeping 1 µs doubling to 1 ms; -ETIMEDOUT at deadline_ns. */
int urt_wait_poll(bool (*cond)(void *arg), void *arg, uint64_t deadline_ns);

#endif
