/*
 * tests/stress/test_waitcount.c — the wait-for-zero primitive
 * (base/waitcount.h) against a model: no lost wake-up, no early return.
 *
 * Model. A round holds the count at 1 (the hold) while DECS threads each
 * add their share and announce it; once every add is announced the hold is
 * released, so the count reaches 0 exactly once in the round, after every
 * sub. Each decrementer counts its subs in subs_done (relaxed) before each
 * sub. WAITERS threads wait in every round, some without a deadline, some
 * with a short one:
 *   - a wait that returns 0 must find subs_done == the round's total (W2:
 *     the subs' release reaches the waiter's acquire) — else it returned
 *     early;
 *   - a wait that returns -ETIMEDOUT must find the clock at or past its
 *     deadline — else it gave up early;
 *   - every wait without a deadline returns (a lost wake-up hangs it: each
 *     round is bounded by ROUND_LIMIT_S and the criterion timeout);
 * Decrementers pause a random 0-20 µs or yield so that subs meet waiters at
 * every point of their path (before the CAS that sets WAITING, between it
 * and the futex, asleep).
 *
 * The last touch: a waiter frees the heap word at once after its wait;
 * the decrementer's wake uses the address only (ASan would see a read).
 * urt_wait_poll: a condition set by another thread is seen; a deadline is
 * not returned early.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/waitcount.h"
#include "tests/helpers.h"

#define DECS 4
#define WAITERS 4
#define ROUNDS 400
#define SHARE 50
#define ROUND_LIMIT_S 10

struct round {
    urt_waitcount count;
    _Atomic uint32_t subs_done;
    _Atomic uint32_t adds_announced;
    _Atomic uint32_t waiters_done;
    _Atomic uint32_t early, early_timeout, ok, timeouts;
};

static struct round g_round;
static _Atomic uint32_t g_round_no;  /* the round threads are to join (0: none yet) */
static _Atomic bool g_quit;

static uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void pause_a_little(uint32_t *seed)
{
    uint32_t r = rnd(seed) % 8;
    if (r < 3)
        return;
    if (r < 6) {
        sched_yield();
        return;
    }
    sleep_us(rnd(seed) % 20);
}

static uint32_t wait_next_round(uint32_t seen)
{
    uint32_t r;
    while ((r = atomic_load_explicit(&g_round_no, memory_order_acquire)) == seen && !atomic_load(&g_quit))
        sched_yield();
    return r;
}

static void *decrementer(void *arg)
{
    uint32_t seed = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_next_round(seen);
        if (atomic_load(&g_quit))
            return NULL;
        struct round *r = &g_round;
        urt_waitcount_add(&r->count, SHARE, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->adds_announced, 1, memory_order_release);
        for (int i = 0; i < SHARE; i++) {
            pause_a_little(&seed);
            atomic_fetch_add_explicit(&r->subs_done, 1, memory_order_relaxed);
            urt_waitcount_sub(&r->count, 1);
        }
    }
}

static void *waiter(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint32_t seed = (uint32_t)id * 40503u + 7;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_next_round(seen);
        if (atomic_load(&g_quit))
            return NULL;
        struct round *r = &g_round;
        const uint32_t total = DECS * SHARE + 1; /* + the hold */
        /* odd waiters: a deadline 0-200 µs away, then without one */
        if (id & 1) {
            uint64_t dl = urt_clock_ns() + (rnd(&seed) % 200) * 1000;
            int rc = urt_waitcount_wait(&r->count, dl);
            if (rc == -ETIMEDOUT) {
                atomic_fetch_add(&r->timeouts, 1);
                if (urt_clock_ns() < dl)
                    atomic_fetch_add(&r->early_timeout, 1);
            } else if (atomic_load_explicit(&r->subs_done, memory_order_relaxed) != total) {
                atomic_fetch_add(&r->early, 1);
            }
        }
        int rc = urt_waitcount_wait(&r->count, URT_WAITCOUNT_FOREVER);
        if (rc != 0 || atomic_load_explicit(&r->subs_done, memory_order_relaxed) != total)
            atomic_fetch_add(&r->early, 1);
        else
            atomic_fetch_add(&r->ok, 1);
        atomic_fetch_add_explicit(&r->waiters_done, 1, memory_order_release);
    }
}

Test(waitcount, no_lost_wakeup_no_early_return, .timeout = 120)
{
    pthread_t d[DECS], w[WAITERS];
    for (uintptr_t i = 0; i < DECS; i++)
        cr_assert_eq(pthread_create(&d[i], NULL, decrementer, (void *)(i + 1)), 0);
    for (uintptr_t i = 0; i < WAITERS; i++)
        cr_assert_eq(pthread_create(&w[i], NULL, waiter, (void *)i), 0);
    uint32_t ok = 0, timeouts = 0;
    for (uint32_t round = 1; round <= ROUNDS; round++) {
        struct round *r = &g_round;
        atomic_store(&r->subs_done, 0);
        atomic_store(&r->adds_announced, 0);
        atomic_store(&r->waiters_done, 0);
        atomic_store(&r->count, 1); /* the hold (no waiter is in a wait between rounds) */
        atomic_store_explicit(&g_round_no, round, memory_order_release);
        uint64_t limit = urt_clock_ns() + ROUND_LIMIT_S * 1000000000ull;
        while (atomic_load_explicit(&r->adds_announced, memory_order_acquire) != DECS)
            sched_yield();
        if (round & 1)
            sleep_us(rnd(&(uint32_t){round}) % 50); /* let waiters fall asleep first, sometimes */
        atomic_fetch_add_explicit(&r->subs_done, 1, memory_order_relaxed);
        urt_waitcount_sub(&r->count, 1); /* release the hold */
        while (atomic_load_explicit(&r->waiters_done, memory_order_acquire) != WAITERS) {
            cr_assert(urt_clock_ns() < limit, "round %u: %u of %u waiters returned (a lost wake-up)", round,
                      atomic_load(&r->waiters_done), WAITERS);
            sched_yield();
        }
        cr_assert_eq(atomic_load(&r->early), 0, "round %u: a wait returned before the count reached 0", round);
        cr_assert_eq(atomic_load(&r->early_timeout), 0, "round %u: a wait timed out before its deadline", round);
        cr_assert_eq(urt_waitcount_count(atomic_load(&r->count)), 0);
        ok += atomic_load(&r->ok);
        timeouts += atomic_load(&r->timeouts);
        atomic_store(&r->ok, 0);
        atomic_store(&r->timeouts, 0);
        /* the decrementers are done with the round once subs_done is complete */
        while (atomic_load(&r->subs_done) != DECS * SHARE + 1)
            sched_yield();
    }
    atomic_store(&g_quit, true);
    atomic_fetch_add(&g_round_no, 1);
    for (int i = 0; i < DECS; i++)
        pthread_join(d[i], NULL);
    for (int i = 0; i < WAITERS; i++)
        pthread_join(w[i], NULL);
    cr_assert_eq(ok, ROUNDS * WAITERS);
    cr_log_info("%u waits, %u short deadlines expired", ok, timeouts);
}

/* ---- the decrement is the last touch ------------------------------------------------------- */

struct boxed {
    urt_waitcount *w;
};

static void *sub_once(void *arg)
{
    struct boxed *b = arg;
    urt_waitcount_sub(b->w, 1); /* the waiter may free *b->w right after */
    return NULL;
}

Test(waitcount, the_waiter_may_free_the_word_at_once, .timeout = 60)
{
    for (int i = 0; i < 2000; i++) {
        urt_waitcount *w = malloc(sizeof(*w));
        cr_assert_not_null(w);
        atomic_init(w, 1);
        struct boxed b = {w};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, sub_once, &b), 0);
        cr_assert_eq(urt_waitcount_wait(w, URT_WAITCOUNT_FOREVER), 0);
        free(w); /* the sub may still be in its wake: by address only */
        pthread_join(t, NULL);
    }
}

Test(waitcount, a_deadline_in_the_past_and_a_zero_count, .timeout = 10)
{
    urt_waitcount w;
    atomic_init(&w, 0);
    cr_assert_eq(urt_waitcount_wait(&w, 0), 0, "a count of 0 returns at once, whatever the deadline");
    atomic_init(&w, 3);
    uint64_t t0 = urt_clock_ns();
    cr_assert_eq(urt_waitcount_wait(&w, t0 + 2000000), -ETIMEDOUT);
    cr_assert_geq(urt_clock_ns(), t0 + 2000000, "timed out early");
    cr_assert_eq(urt_waitcount_count(atomic_load(&w)), 3, "the wait leaves the count as it was");
    urt_waitcount_sub(&w, 3);
    cr_assert_eq(urt_waitcount_wait(&w, URT_WAITCOUNT_FOREVER), 0);
    cr_assert_eq(atomic_load(&w), 0, "the waiting bit is cleared by a wait that finds 0");
}

/* ---- urt_wait_poll ---------------------------------------------------------------------------- */

static _Atomic bool g_flag;

static bool flag_set(void *arg)
{
    (void)arg;
    return atomic_load_explicit(&g_flag, memory_order_acquire);
}

static void *set_flag_later(void *arg)
{
    sleep_us((unsigned)(uintptr_t)arg);
    atomic_store_explicit(&g_flag, true, memory_order_release);
    return NULL;
}

Test(waitcount, poll_sees_the_condition_and_keeps_its_deadline, .timeout = 30)
{
    static const unsigned delays_us[] = {0, 5, 100, 3000, 20000};
    for (size_t i = 0; i < sizeof(delays_us) / sizeof(delays_us[0]); i++) {
        atomic_store(&g_flag, false);
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, set_flag_later, (void *)(uintptr_t)delays_us[i]), 0);
        cr_assert_eq(urt_wait_poll(flag_set, NULL, URT_WAITCOUNT_FOREVER), 0);
        cr_assert(flag_set(NULL));
        pthread_join(t, NULL);
    }
    atomic_store(&g_flag, false);
    uint64_t t0 = urt_clock_ns();
    cr_assert_eq(urt_wait_poll(flag_set, NULL, t0 + 5000000), -ETIMEDOUT);
    cr_assert_geq(urt_clock_ns(), t0 + 5000000, "gave up early");
}
