/*
 * sched/core/timer.c — the one timer facility (rules and design in timer.h).
 *
 * No memory ordering: everything runs on the queue owner's thread.
 */
#include "sched/core/timer.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>

#include "base/clock.h"

static void timer_moved(void *p, uint32_t index)
{
    ((sched_timer *)p)->slot = index + 1;
}

/* The timeout's completion: -ETIME (expired), -ECANCELED (removed) or an error. */
static void timeout_complete(struct be_tag *tag, int32_t res, uint32_t flags)
{
    struct timerq *q = (struct timerq *)((char *)tag - offsetof(struct timerq, tag));
    (void)flags;
    q->armed = false;
    if (q->inflight)
        (*q->inflight)--;
    if (res == -ETIME)
        atomic_store_explicit(&q->fires, atomic_load_explicit(&q->fires, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    if (q->running)
        return; /* the running timerq_run syncs when it is done */
    timerq_run(q, urt_clock_ns());
    timerq_sync(q);
}

void timerq_init(struct timerq *q, struct be_ctx *c, uint32_t *inflight)
{
    *q = (struct timerq){0};
    atomic_init(&q->fires, 0);
    q->heap.moved = timer_moved;
    q->be = c;
    q->inflight = inflight;
    q->tag.complete = timeout_complete;
    q->armed_due = UINT64_MAX;
}

void timerq_destroy(struct timerq *q)
{
    for (uint32_t i = 0; i < q->heap.n; i++)
        ((sched_timer *)bheap_at(&q->heap, i))->slot = 0;
    bheap_free(&q->heap);
}

int timerq_reserve(struct timerq *q, uint32_t n)
{
    return bheap_reserve(&q->heap, q->heap.n + n);
}

int timerq_add(struct timerq *q, sched_timer *t, uint64_t due, sched_timer_fn *fn)
{
    assert(!sched_timer_queued(t));
    t->due = due;
    t->fn = fn;
    return bheap_push(&q->heap, due, t); /* sets t->slot through timer_moved */
}

void timerq_move(struct timerq *q, sched_timer *t, uint64_t due)
{
    assert(sched_timer_queued(t));
    bheap_remove(&q->heap, t->slot - 1);
    t->due = due;
    int rc = bheap_push(&q->heap, due, t); /* the slot just freed: cannot fail */
    assert(rc == 0);
    (void)rc;
}

bool timerq_remove(struct timerq *q, sched_timer *t)
{
    if (!sched_timer_queued(t))
        return false;
    bheap_remove(&q->heap, t->slot - 1);
    t->slot = 0;
    return true;
}

bool timerq_cancel(struct timerq *q, sched_timer *t)
{
    if (!timerq_remove(q, t))
        return false;
    t->fn(t, -ECANCELED);
    return true;
}

unsigned timerq_run(struct timerq *q, uint64_t now)
{
    unsigned n = 0;
    bool outer = !q->running;
    q->running = true;
    while (q->heap.n && bheap_min_key(&q->heap) <= now) {
        sched_timer *t = bheap_remove(&q->heap, 0);
        t->slot = 0;
        t->fn(t, -ETIME); /* may add timers, t included */
        n++;
    }
    if (outer)
        q->running = false;
    return n;
}

/* ---- the one timeout -------------------------------------------------------------------- */

void timerq_sync(struct timerq *q)
{
    uint64_t due = timerq_next(q);
    if (due == UINT64_MAX && (!q->armed || q->armed_due == UINT64_MAX))
        return; /* nothing to wait for, nothing armed (or its removal is on its way) */
    if (due != UINT64_MAX && q->armed && q->armed_due == due)
        return;
    struct be_op op = {.target = &q->tag, .off = due};
    struct be_tag *tag = NULL; /* an update's or removal's own completion (a failure only) is ignored */
    if (due == UINT64_MAX) {
        op.kind = BE_TIMEOUT_REMOVE;
        op.flags = BE_F_SKIP_SUCCESS;
    } else if (q->armed) {
        op.kind = BE_TIMEOUT_UPDATE;
        op.flags = BE_F_SKIP_SUCCESS;
    } else {
        op.kind = BE_TIMEOUT;
        op.target = NULL;
        tag = &q->tag;
        q->armed = true;
        if (q->inflight)
            (*q->inflight)++;
    }
    q->armed_due = due;
    be_submit(q->be, &op, tag);
}
