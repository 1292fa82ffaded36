/*
 * sched/core/inbox.h — multi-producer, single-consumer intrusive FIFO of tasks.
 *
 * Algorithm: Dmitry Vyukov's intrusive MPSC node-based queue
 * ("Intrusive MPSC node-based queue", 1024cores.net, 2010). Push is
 * wait-free: one atomic exchange and one store, whatever other producers do.
 * Pop (consumer only) uses no read-modify-write except re-inserting the stub.
 *
 * Used for a worker's inbox (tasks handed over by other threads) and its
 * sticky queue (lane tasks, never stolen). Tasks are linked through
 * task->priv.next.
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

static inline void inbox_init(struct inbox *q)
{
    atomic_init(&q->stub.priv.next, NULL);
    atomic_init(&q->head, &q->stub);
    q->tail = &q->stub;
}

/* Any thread, wait-free. */
static inline void inbox_push(struct inbox *q, struct urt_task *t)
{
    atomic_store_explicit(&t->priv.next, NULL, memory_order_relaxed);
    /* (I2), (I3) */
    struct urt_task *prev = atomic_exchange_explicit(&q->head, t, memory_order_seq_cst);
    /* (I1) link: pairs with the acquire loads of next in inbox_pop. */
    atomic_store_explicit(&prev->priv.next, t, memory_order_release);
}

/* Consumer only: the oldest task, or NULL (empty, or a push in transit). */
static inline struct urt_task *inbox_pop(struct inbox *q)
{
    struct urt_task *tail = q->tail;
    struct urt_task *next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next)
            return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    struct urt_task *head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail != head)
        return NULL; /* a producer is between its exchange and its link */
    inbox_push(q, &q->stub);
    next = atomic_load_explicit(&tail->priv.next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
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
