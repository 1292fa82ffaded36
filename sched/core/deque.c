/*
 * sched/core/deque.c — Chase–Lev work-stealing deque (Lê et al. 2013 orderings).
 * The design, the changes from the paper and the memory-ordering contract
 * (D1–D3) are at the top of deque.h.
 */
#include "sched/core/deque.h"

#include <errno.h>
#include <stdlib.h>

static struct deque_array *array_new(int64_t size)
{
    struct deque_array *a = malloc(sizeof(*a) + (size_t)size * sizeof(a->slot[0]));
    if (!a)
        return NULL;
    a->mask = size - 1;
    a->retired = NULL;
    for (int64_t i = 0; i < size; i++)
        atomic_init(&a->slot[i], NULL);
    return a;
}

int deque_init(struct deque *d, uint32_t capacity)
{
    struct deque_array *a = array_new(capacity);
    if (!a)
        return -ENOMEM;
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    atomic_init(&d->array, a);
    return 0;
}

void deque_destroy(struct deque *d)
{
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    while (a) {
        struct deque_array *older = a->retired;
        free(a);
        a = older;
    }
    atomic_store_explicit(&d->array, NULL, memory_order_relaxed);
}

/* Owner only: copy the live range [t, b) into an array twice the size. */
static __attribute__((cold)) struct deque_array *grow(struct deque *d, struct deque_array *a, int64_t t, int64_t b)
{
    struct deque_array *n = array_new((a->mask + 1) * 2);
    if (!n)
        return NULL;
    for (int64_t i = t; i < b; i++)
        atomic_store_explicit(&n->slot[i & n->mask],
                              atomic_load_explicit(&a->slot[i & a->mask], memory_order_relaxed),
                              memory_order_relaxed);
    n->retired = a;
    /* Release: a thief that loads the new array (acquire) sees its slots. */
    atomic_store_explicit(&d->array, n, memory_order_release);
    return n;
}

int deque_push(struct deque *d, struct urt_task *task)
{
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    if (b - t > a->mask) {
        a = grow(d, a, t, b);
        if (!a)
            return -ENOMEM;
    }
    atomic_store_explicit(&a->slot[b & a->mask], task, memory_order_relaxed);
    /* (D1) publish the slot; pairs with the acquire load of bottom in steal. */
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    return 0;
}

struct urt_task *deque_take(struct deque *d)
{
    /* Fast empty check without the fence: bottom is exact for the owner and
     * top only grows, so a stale top can only make the deque look fuller. */
    if (atomic_load_explicit(&d->bottom, memory_order_relaxed) <= atomic_load_explicit(&d->top, memory_order_relaxed))
        return NULL;
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
    /* (D2) order the bottom store before the top load; pairs with steal's fence. */
    atomic_thread_fence(memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    struct urt_task *x = NULL;
    if (t <= b) {
        x = atomic_load_explicit(&a->slot[b & a->mask], memory_order_relaxed);
        if (t == b) {
            /* (D3) last element: race thieves for it. */
            if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                         memory_order_relaxed))
                x = NULL;
            atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
        }
    } else {
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
    return x;
}

struct urt_task *deque_steal(struct deque *d)
{
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    /* (D2) pairs with the fence in take. */
    atomic_thread_fence(memory_order_seq_cst);
    /* (D1) pairs with the release store of bottom in push. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
    if (t >= b)
        return NULL;
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_acquire);
    struct urt_task *x = atomic_load_explicit(&a->slot[t & a->mask], memory_order_relaxed);
    /* (D3) */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
        return DEQUE_ABORT;
    return x;
}
