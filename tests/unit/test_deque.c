/*
 * tests/unit/test_deque.c — the Chase–Lev deque (sched/deque.[ch]).
 *
 * 1. Reference model (SQLite bitvec-test style): seeded random sequences of
 *    push / take / steal on one thread, every result compared with a plain
 *    array deque (take = newest, steal = oldest). The deque starts at its
 *    smallest capacity and the sequences are biased to grow it far past it,
 *    then shrink it back to empty. Single-threaded, a steal never aborts.
 * 2. Stress: one owner pushes (with bursts that force growth while thieves
 *    run) and takes, three thieves steal; every item must come out exactly
 *    once (per-item counters), nothing may come out that was not pushed, and
 *    each item's payload (written plainly before the push) must be visible
 *    to whoever got it — the release/acquire hand-off of (D1), which TSan
 *    checks too.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "sched/core/deque.h"
#include "tests/helpers.h"

/* ---- 1. reference model -------------------------------------------------------- */

struct model {
    struct urt_task **items;
    size_t head, tail, cap; /* [head, tail) */
};

static void model_push(struct model *m, struct urt_task *t)
{
    if (m->tail == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->items = realloc(m->items, m->cap * sizeof(*m->items));
        cr_assert_not_null(m->items);
    }
    m->items[m->tail++] = t;
}

static struct urt_task *model_take(struct model *m)
{
    return m->tail > m->head ? m->items[--m->tail] : NULL;
}

static struct urt_task *model_steal(struct model *m)
{
    struct urt_task *t = m->tail > m->head ? m->items[m->head++] : NULL;
    if (m->head == m->tail)
        m->head = m->tail = 0;
    return t;
}

static void run_model(uint64_t seed, size_t n_ops, uint32_t capacity)
{
    enum { POOL = 1 << 16 };
    static struct urt_task pool[POOL];
    struct deque d;
    struct model m = {0};
    size_t next = 0, max_size = 0;

    cr_assert_eq(deque_init(&d, capacity), 0);
    for (size_t op = 0; op < n_ops; op++) {
        uint64_t r = rng_next(&seed);
        /* Phases: grow (70 % push), churn (50 %), shrink (20 %). */
        unsigned phase = (unsigned)((op * 3) / n_ops);
        unsigned push_pct = phase == 0 ? 70 : phase == 1 ? 50 : 20;
        if (r % 100 < push_pct) {
            struct urt_task *t = &pool[next++ % POOL];
            cr_assert_eq(deque_push(&d, t), 0);
            model_push(&m, t);
        } else if ((r >> 8) & 1) {
            struct urt_task *got = deque_take(&d), *want = model_take(&m);
            cr_assert_eq(got, want, "op %zu: take returned %p, model %p", op, (void *)got, (void *)want);
        } else {
            struct urt_task *got = deque_steal(&d), *want = model_steal(&m);
            cr_assert_neq(got, DEQUE_ABORT, "single-threaded steal cannot lose a race");
            cr_assert_eq(got, want, "op %zu: steal returned %p, model %p", op, (void *)got, (void *)want);
        }
        size_t size = m.tail - m.head;
        cr_assert_eq(deque_size(&d), (int64_t)size, "op %zu: size %ld, model %zu", op, (long)deque_size(&d), size);
        if (size > max_size)
            max_size = size;
    }
    /* Empty both: the remaining order must still match. */
    for (;;) {
        struct urt_task *got = deque_take(&d), *want = model_take(&m);
        cr_assert_eq(got, want);
        if (!got)
            break;
    }
    cr_assert_null(deque_steal(&d));
    cr_assert_eq(deque_size(&d), 0);
    cr_assert_gt(max_size, (size_t)capacity * 4, "the sequence must grow the deque past its capacity (max %zu)",
                 max_size);
    deque_destroy(&d);
    free(m.items);
    leak_check();
}

Test(deque, model_random_sequences, .timeout = 60)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run_model(seed * 0x9E3779B97F4A7C15ull, 20000, 16);
}

Test(deque, model_large_capacity_growth, .timeout = 60)
{
    run_model(42, 200000, 1024);
}

Test(deque, empty_and_single_element, .timeout = 10)
{
    struct deque d;
    struct urt_task a, b;
    cr_assert_eq(deque_init(&d, 16), 0);
    cr_assert_null(deque_take(&d));
    cr_assert_null(deque_steal(&d));
    cr_assert_eq(deque_size(&d), 0);
    /* take after take of the last element leaves a consistent empty deque */
    cr_assert_eq(deque_push(&d, &a), 0);
    cr_assert_eq(deque_take(&d), &a);
    cr_assert_null(deque_take(&d));
    cr_assert_null(deque_steal(&d));
    cr_assert_eq(deque_push(&d, &a), 0);
    cr_assert_eq(deque_steal(&d), &a);
    cr_assert_null(deque_take(&d));
    cr_assert_eq(deque_size(&d), 0);
    /* LIFO for the owner, FIFO for thieves */
    cr_assert_eq(deque_push(&d, &a), 0);
    cr_assert_eq(deque_push(&d, &b), 0);
    cr_assert_eq(deque_steal(&d), &a);
    cr_assert_eq(deque_take(&d), &b);
    cr_assert_eq(deque_size(&d), 0);
    deque_destroy(&d);
    leak_check();
}

/* ---- 2. owner + 3 thieves -------------------------------------------------------- */

#define N_THIEVES 3

struct stress {
    struct deque d;
    struct urt_task *items;
    size_t n_items;
    _Atomic uint32_t *count;     /* times each item came out */
    _Atomic uint64_t invented;   /* pointers that were never pushed */
    _Atomic uint64_t bad_payload;/* item whose payload was not visible */
    _Atomic uint64_t taken_total;
    _Atomic bool owner_done;
    _Atomic uint64_t stolen[N_THIEVES];
    _Atomic uint64_t aborts;
};

static void account(struct stress *s, struct urt_task *t)
{
    if (t < s->items || t >= s->items + s->n_items || (size_t)((char *)t - (char *)s->items) % sizeof(*t)) {
        atomic_fetch_add(&s->invented, 1);
        return;
    }
    size_t i = (size_t)(t - s->items);
    /* Plain read of the payload written before the push. */
    if ((size_t)(uintptr_t)t->arg != i + 1)
        atomic_fetch_add(&s->bad_payload, 1);
    atomic_fetch_add_explicit(&s->count[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->taken_total, 1, memory_order_relaxed);
}

struct thief_arg {
    struct stress *s;
    int id;
};

static void *thief_main(void *p)
{
    struct thief_arg *a = p;
    struct stress *s = a->s;
    uint64_t mine = 0;
    for (;;) {
        struct urt_task *t = deque_steal(&s->d);
        if (t == DEQUE_ABORT) {
            atomic_fetch_add_explicit(&s->aborts, 1, memory_order_relaxed);
            continue;
        }
        if (t) {
            account(s, t);
            mine++;
            continue;
        }
        if (atomic_load_explicit(&s->owner_done, memory_order_acquire) && deque_size(&s->d) == 0)
            break;
    }
    atomic_store(&s->stolen[a->id], mine);
    return NULL;
}

static void run_stress(size_t n_items, uint32_t capacity, uint64_t seed)
{
    struct stress *s = calloc(1, sizeof(*s));
    cr_assert_not_null(s);
    s->n_items = n_items;
    s->items = calloc(n_items, sizeof(*s->items));
    s->count = calloc(n_items, sizeof(*s->count));
    cr_assert(s->items && s->count);
    cr_assert_eq(deque_init(&s->d, capacity), 0);

    pthread_t th[N_THIEVES];
    struct thief_arg ta[N_THIEVES];
    for (int i = 0; i < N_THIEVES; i++) {
        ta[i] = (struct thief_arg){s, i};
        cr_assert_eq(pthread_create(&th[i], NULL, thief_main, &ta[i]), 0);
    }

    /* Owner: bursts of pushes (some long enough to grow the deque while the
     * thieves steal), interleaved with takes. */
    size_t next = 0;
    uint64_t owner_took = 0;
    while (next < n_items) {
        uint64_t r = rng_next(&seed);
        size_t burst = (r % 16 == 0) ? 1 + (r >> 8) % (4 * capacity) : 1 + (r >> 8) % 8;
        for (size_t k = 0; k < burst && next < n_items; k++, next++) {
            s->items[next].arg = (void *)(uintptr_t)(next + 1); /* payload, plain store */
            cr_assert_eq(deque_push(&s->d, &s->items[next]), 0);
        }
        size_t takes = (r >> 32) % 8;
        for (size_t k = 0; k < takes; k++) {
            struct urt_task *t = deque_take(&s->d);
            if (!t)
                break;
            account(s, t);
            owner_took++;
        }
    }
    struct urt_task *t;
    while ((t = deque_take(&s->d)) != NULL) {
        account(s, t);
        owner_took++;
    }
    atomic_store_explicit(&s->owner_done, true, memory_order_release);
    for (int i = 0; i < N_THIEVES; i++)
        pthread_join(th[i], NULL);

    uint64_t stolen = 0;
    for (int i = 0; i < N_THIEVES; i++)
        stolen += atomic_load(&s->stolen[i]);
    cr_assert_eq(atomic_load(&s->invented), 0, "%lu pointers came out that were never pushed",
                 (unsigned long)atomic_load(&s->invented));
    cr_assert_eq(atomic_load(&s->bad_payload), 0, "%lu items without their payload",
                 (unsigned long)atomic_load(&s->bad_payload));
    for (size_t i = 0; i < n_items; i++)
        cr_assert_eq(atomic_load(&s->count[i]), 1, "item %zu came out %u times", i, atomic_load(&s->count[i]));
    cr_assert_eq(owner_took + stolen, n_items);
    cr_assert_eq(atomic_load(&s->taken_total), n_items);
    cr_assert_gt(stolen, 0, "the thieves should have stolen something");
    cr_assert_eq(deque_size(&s->d), 0);
    deque_destroy(&s->d);
    free(s->count);
    free(s->items);
    free(s);
    leak_check();
}

Test(deque, stress_owner_and_three_thieves, .timeout = 120)
{
    run_stress(SCALE(4000000, 1000000), 16, 7);
}

Test(deque, stress_large_initial_capacity, .timeout = 120)
{
    run_stress(SCALE(2000000, 500000), 4096, 99);
}
