/*
 * sched/core/deque.h — a worker's local work-stealing deque.
 *
 * Algorithm: the dynamic circular work-stealing deque of Chase and Lev
 * ("Dynamic Circular Work-Stealing Deque", SPAA 2005), with the C11 memory
 * orderings proven correct by Lê, Pop, Cohen and Zappa Nardelli ("Correct and
 * Efficient Work-Stealing for Weak Memory Models", PPoPP 2013, fig. 1).
 *
 * The owner pushes and takes at the bottom (LIFO) with plain loads/stores and
 * one seq_cst fence in take; it uses a compare-and-swap only when it takes the
 * last element. Thieves take from the top (FIFO) with one CAS each.
 *
 * Changes from the paper (both strengthen it):
 *  - push publishes bottom with a release store instead of release fence +
 *    relaxed store, and steal reads bottom/array with acquire instead of
 *    consume: same code on x86, and ThreadSanitizer (which does not model
 *    standalone fences) sees the hand-off of the task's contents.
 *  - when the array grows, the old array is kept on a retired list until the
 *    deque is destroyed, because a thief may still read from it (the paper
 *    leaves reclamation open). Growth doubles, so the retired arrays together
 *    are smaller than the live one.
 *
 * Memory-ordering contract:
 *  (D1) push: slot store (relaxed) -> bottom store (release)
 *       pairs with steal's bottom load (acquire): the thief sees the slot and
 *       everything the submitter wrote into the task before submitting.
 *  (D2) take: bottom store (relaxed) -> seq_cst fence -> top load
 *       steal: top load (acquire) -> seq_cst fence -> bottom load
 *       the two fences order owner and thief on the last element: at most one of
 *       them sees it available without the CAS deciding.
 *  (D3) the CAS on top (seq_cst) decides every race for the element at top.
 *
 * Indices are int64_t and never wrap in practice (2^63 operations).
 */
#ifndef URT_SCHED_DEQUE_H
#define URT_SCHED_DEQUE_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

struct urt_task;

struct deque_array {
    int64_t mask;               /* size - 1, size a power of two */
    struct deque_array *retired; /* older arrays (owner only) */
    _Atomic(struct urt_task *) slot[];
};

struct deque {
    alignas(64) _Atomic int64_t top;   /* written by thieves (CAS) and by the owner's last-element take */
    alignas(64) _Atomic int64_t bottom; /* written by the owner only */
    _Atomic(struct deque_array *) array;
};

#define DEQUE_ABORT ((struct urt_task *)1) /* steal lost a race: try again */

/* capacity: a power of two. Returns 0 or -ENOMEM. Owner only (not concurrent). */
int deque_init(struct deque *d, uint32_t capacity);
/* Frees every array. No concurrent users. */
void deque_destroy(struct deque *d);

/* Owner only. Returns 0, or -ENOMEM if the deque was full and could not grow
 * (the task is then not in the deque). */
int deque_push(struct deque *d, struct urt_task *t);
/* Owner only: the most recently pushed task, or NULL. */
struct urt_task *deque_take(struct deque *d);
/* Any thread: the oldest task, NULL when empty, DEQUE_ABORT on a lost race. */
struct urt_task *deque_steal(struct deque *d);

/* Approximate number of tasks (any thread; exact for the owner when no thief runs). */
static inline int64_t deque_size(struct deque *d)
{
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    return b > t ? b - t : 0;
}

/* Any thread: the index of the oldest slot; it moves on every steal and on
 * the owner's take of the last task (a hint: relaxed). */
static inline int64_t deque_top(struct deque *d)
{
    return atomic_load_explicit(&d->top, memory_order_relaxed);
}

#endif
