/*
 * base/waitcount.c — the sleeping side of a waitcount (design and
 * memory-ordering contract W1-W4 in base/waitcount.h) and the poll for the
 * counts nobody can signal.
 */
#include "base/waitcount.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

void urt__waitcount_wake(urt_waitcount *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps while *w == v, at most until deadline_ns (absolute CLOCK_MONOTONIC:
 * FUTEX_WAIT_BITSET takes an absolute time on that clock). */
static void sleep_on(urt_waitcount *w, uint32_t v, uint64_t deadline_ns)
{
    struct timespec ts, *tp = NULL;
    if (deadline_ns != URT_WAITCOUNT_FOREVER) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000ull);
        ts.tv_nsec = (long)(deadline_ns % 1000000000ull);
        tp = &ts;
    }
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_BITSET_PRIVATE, v, tp, NULL, FUTEX_BITSET_MATCH_ANY);
}

int urt_waitcount_wait(urt_waitcount *w, uint64_t deadline_ns)
{
    uint32_t v = atomic_load_explicit(w, memory_order_acquire); /* W2 */
    for (;;) {
        if (urt_waitcount_count(v) == 0) {
            if (v == URT_WAITCOUNT_WAITING) /* W4: best effort, a failure changes nothing */
                atomic_compare_exchange_strong_explicit(w, &v, 0, memory_order_relaxed, memory_order_relaxed);
            return 0;
        }
        if (deadline_ns != URT_WAITCOUNT_FOREVER && urt_clock_ns() >= deadline_ns)
            return -ETIMEDOUT;
        if (!(v & URT_WAITCOUNT_WAITING) &&
            !atomic_compare_exchange_weak_explicit(w, &v, v | URT_WAITCOUNT_WAITING, memory_order_acquire,
                                                   memory_order_acquire))
            continue; /* v reloaded: the count moved */
        sleep_on(w, v | URT_WAITCOUNT_WAITING, deadline_ns); /* W1: returns at once if the word moved */
        v = atomic_load_explicit(w, memory_order_acquire);
    }
}

#define POLL_YIELDS 64              /* polls that yield before the first sleep */
#define POLL_SLEEP_MAX_NS 1000000ull /* the longest sleep between two polls */

int urt_wait_poll(bool (*cond)(void *arg), void *arg, uint64_t deadline_ns)
{
    uint64_t nap = 1000;
    for (unsigned i = 0; !cond(arg); i++) {
        uint64_t now = urt_clock_ns();
        if (deadline_ns != URT_WAITCOUNT_FOREVER && now >= deadline_ns)
            return -ETIMEDOUT;
        if (i < POLL_YIELDS) {
            sched_yield();
            continue;
        }
        if (deadline_ns != URT_WAITCOUNT_FOREVER && deadline_ns - now < nap)
            nap = deadline_ns - now;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)nap};
        nanosleep(&ts, NULL);
        nap = nap * 2 < POLL_SLEEP_MAX_NS ? nap * 2 : POLL_SLEEP_MAX_NS;
    }
    return 0;
}
