/*
 * sched/core/inbox.h — multi-producer, single-consumer intrusive FIFO of tasks.
 *
 * Algorithm: Dmitry Vyukov's intrusive MPSC node-based queue
 * ("Intrusive MPSC node-based queue", 1024cores.net, 2010). Push is
 * wait-free: one atomic exchange and one store, whatever other producers do.
 * Pop (consumer only) uses no read-modify-write except re-inserting the stub.
 *
 * Used for a worker's inbox (tasks handed over by other threads) and its
 * sticky queue (lane tasks, never stolen), as struct inbox, and for a lane's
 * FIFO (sched/lane.h), which lays the same three parts out itself: its
 * producers' end shares a line with the lane's pending count, so that a
 * submission writes one line of the lane, not two. The operations on the
 * parts (mpsc_push, mpsc_pop) are the algorithm; the inbox_* functions name
 * struct inbox's parts. Tasks are linked through task->priv.next.
 *
 * Pop prefetches the task after the one it returns (both lines of it: a
 * struct urt_task is 72 bytes): in a queue fed from another CPU that task was
 * written there, and the consumer reads it at its next pop and runs it, so
 * its lines travel while the current task runs instead of at the next pop.
 *
 * The one subtlety: between a producer's exchange of head and its store of the
 * predecessor's next, the queue is "in transit": pop returns NULL although a
 * task was pushed. inbox_maybe_nonempty() looks at head, which the exchange
 * already moved, so a consumer that checks it before suspending never sleeps
 * on a task in transit (it polls again instead).
 *
 * Memory-ordering contract:
 *  (I1) push: the task's contents, then next = NULL (relaxed), then the
 *       exchange of head (acq_rel), then prev->next = task (release).
 *       Pop's acquire load of next pairs with that release store, so the
 *       consumer sees the task's contents.
 *  (I2) the exchange's acquire side orders a producer after the previous
 *       producer's exchange, so prev is a node that is really in the queue.
 *  (I3) the exchange is seq_cst: the wake protocol (sched/core/worker.c, W1) uses
 *       it as the waker's half of a Dekker pair without a separate fence.
 */
#ifndef URT_SCHED_INBOX_H
#define URT_SCHED_INBOX_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <urt/task.h>

struct inbox {
    alignas(64) struct urt_task *_Atomic head; /* producers' end (last pushed) */
    alignas(64) struct urt_task *tail;         /* consumer's end (next to pop) */
    struct urt_task stub;
};

/* An empty queue: both ends at the stub. */
static inline void mpsc_init(struct urt_task *_Atomic *head, struct urt_task **tail, struct urt_task *stub)
{
    atomic_init(&stub->priv.next, NULL);
    atomic_init(head, stub);
    *tail = stub;
}

static inline void inbox_init(struct inbox *q)
{
    mpsc_init(&q->head, &q->tail, &q->stub);
}

/* Any thread, wait-free: t becomes the newest task of the queue whose
 * producers' end is *head. */
static inline void mpsc_push(struct urt_task *_Atomic *head, struct urt_task *t)
{
    atomic_store_explicit(&t->priv.next, NULL, memory_order_relaxed);
    /* (I2), (I3) */
    struct urt_task *prev = atomic_exchange_explicit(head, t, memory_order_seq_cst);
    /* (I1) link: pairs with the acquire loads of next in mpsc_pop. */
    atomic_store_explicit(&prev->priv.next, t, memory_order_release);
}

/* Warms both lines of the task the consumer pops next (see the top). */
static inline void mpsc_prefetch(const struct urt_task *t)
{
    __builtin_prefetch(t);
    __builtin_prefetch((const char *)t + sizeof(*t) - 1);
}

/* Consumer only: the oldest task, or NULL (empty, or a push in transit).
 * *tail is the consumer's end, stub the queue's stub node. */
static inline struct urt_task *mpsc_pop(struct urt_task *_Atomic *head, struct urt_task **tailp, struct urt_task *stub)
{
    struct urt_task *tail = *tailp;
    struct urt_task *next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    if (tail == stub) {
        if (!next)
            return NULL;
        *tailp = next;
        tail = next;
        next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    }
    if (next) {
        *tailp = next;
        mpsc_prefetch(next);
        return tail;
    }
    struct urt_task *h = atomic_load_explicit(head, memory_order_acquire);
    if (tail != h)
        return NULL; /* a producer is between its exchange and its link */
    mpsc_push(head, stub);
    next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    if (next) {
        *tailp = next;
        return tail;
    }
    return NULL;
}

/* Any thread, wait-free. */
static inline void inbox_push(struct inbox *q, struct urt_task *t)
{
    mpsc_push(&q->head, t);
}

/* Consumer only: the oldest task, or NULL (empty, or a push in transit). */
static inline struct urt_task *inbox_pop(struct inbox *q)
{
    return mpsc_pop(&q->head, &q->tail, &q->stub);
}

/* Consumer only: false only if the queue was empty and no push was in
 * transit at the moment of the loads. Pair with a seq_cst fence before it
 * (see worker.c S2/S3). All three places a task can be must be looked at:
 *  - tail != stub: the consumer stopped at a real node it could not pop yet
 *    (a producer exchanged head but has not linked the node behind it);
 *    meanwhile the consumer may have re-pushed the stub, so head == stub and
 *    stub.next == NULL although two tasks are queued;
 *  - head != stub: something was pushed since the stub was last pushed;
 *  - stub.next != NULL: the stub has a successor. */
static inline bool inbox_maybe_nonempty(struct inbox *q)
{
    if (q->tail != &q->stub)
        return true;
    struct urt_task *head = atomic_load_explicit(&q->head, memory_order_seq_cst);
    return head != &q->stub || atomic_load_explicit(&q->stub.priv.next, memory_order_seq_cst) != NULL;
}

/* Any thread (diagnostics only): approximate, it cannot see a consumer that
 * stopped at a node in transit (the consumer's tail is its own). */
static inline bool inbox_maybe_nonempty_foreign(struct inbox *q)
{
    struct urt_task *head = atomic_load_explicit(&q->head, memory_order_relaxed);
    return head != &q->stub || atomic_load_explicit(&q->stub.priv.next, memory_order_relaxed) != NULL;
}

#endif
