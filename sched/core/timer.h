/*
 * sched/core/timer.h — the one timer facility of the runtime.
 *
 * Every thread that owns a backend context (each worker, the watcher) owns
 * one timer queue: a binary min-heap of timers by due time (base/heap.h) and
 * ONE kernel timeout on that context (BE_TIMEOUT of backend/backend.h:
 * absolute, CLOCK_MONOTONIC, the clock of base/clock.h), armed for the
 * earliest due time. Arming, moving or removing a timer is a heap
 * operation; the one timeout is moved only when the earliest due time
 * changes (BE_TIMEOUT_UPDATE, or BE_TIMEOUT_REMOVE when nothing is left). A
 * thousand timers cost one timeout in the kernel, not a thousand hrtimers.
 *
 * Users: job deadlines and readiness re-checks (sched/job.c, through
 * sched_timer_arm() of sched/core/io.h), the watcher's condition checks, its
 * retry of passed conditions and the watchdog's passes (sched/watcher.c).
 *
 * Rules:
 *  1. Owner only: every function runs on the thread that owns the queue's
 *     context (single issuer), and the callbacks run there too.
 *  2. fn(t, res) runs once per timerq_add(): with res = -ETIME from
 *     timerq_run() once now >= due, or with res = -ECANCELED inside
 *     timerq_cancel(). timerq_remove() takes a timer out without a call.
 *     A callback may add (re-arm) timers, its own included.
 *  3. The owner calls timerq_run() when the timeout completed (its tag's
 *     completion does it) and may call it at any other time; then
 *     timerq_sync() moves the one timeout to the new earliest due time. The
 *     operations are queued, not submitted: they go with the owner's next
 *     flush or wait (be_wait flushes); a full queue is the backend's
 *     overflow list's business (backend/backend.h), never the timer's.
 *  4. An update or removal that loses the race with the expiry fails in the
 *     kernel (it has no tag: its failure is ignored); the expiry's completion
 *     then marks the timeout unarmed, timerq_run() runs what is due and
 *     timerq_sync() arms it again.
 *
 * No memory ordering of its own: one thread (rule 1); `fires` alone is read
 * by other threads (statistics: relaxed load + store by the owner, relaxed
 * loads by readers). `inflight`, when
 * given, is the owner's count of operations in flight (a worker's io_inflight):
 * the armed timeout counts as one, so the worker keeps looking for its CQE.
 */
#ifndef URT_SCHED_TIMER_H
#define URT_SCHED_TIMER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/common.h>

#include "base/heap.h"
#include "backend/backend.h"

/* A timer: due (absolute, urt_clock_ns()), fn, slot (heap index + 1; 0:
 * not queued). Its type is in the public headers because public structs
 * embed one (struct urt_cond); only this facility touches the fields. A
 * zeroed timer is valid and not queued. */
typedef struct urt_timer_private sched_timer;
typedef void sched_timer_fn(sched_timer *t, int32_t res);

struct timerq {
    struct bheap heap;             /* sched_timer by due */
    struct be_ctx *be;
    uint32_t *inflight;            /* the owner's in-flight operation count, or NULL */
    struct be_tag tag;             /* the one BE_TIMEOUT */
    uint64_t armed_due;            /* what the timeout is armed for; UINT64_MAX: removal sent */
    bool armed;                    /* the timeout's completion has not been reaped */
    bool running;                  /* inside timerq_run (no recursion from the op's CQE) */
    _Atomic uint64_t fires;        /* timeout completions with -ETIME (owner writes, anyone reads relaxed) */
};

static inline bool sched_timer_queued(const sched_timer *t)
{
    return t->slot != 0;
}

/* Owner: an empty queue on context c. */
void timerq_init(struct timerq *q, struct be_ctx *c, uint32_t *inflight);
/* Frees the heap; the queued timers are dropped without a call (the context is
 * gone or going: nothing will fire). */
void timerq_destroy(struct timerq *q);

/* Room for n more timers: 0 or -ENOMEM. */
int timerq_reserve(struct timerq *q, uint32_t n);
/* Queues t (not queued) to call fn at due: 0, or -ENOMEM (t not queued). */
int timerq_add(struct timerq *q, sched_timer *t, uint64_t due, sched_timer_fn *fn);
/* Moves a queued timer to a new due time (cannot fail). */
void timerq_move(struct timerq *q, sched_timer *t, uint64_t due);
/* Takes t out without calling it. False when t was not queued. */
bool timerq_remove(struct timerq *q, sched_timer *t);
/* Takes t out and calls fn(t, -ECANCELED). False (no call) when t was not
 * queued: it already ran or was never added. */
bool timerq_cancel(struct timerq *q, sched_timer *t);

/* Runs fn(t, -ETIME) of every timer due at now (rule 2). Returns how many. */
unsigned timerq_run(struct timerq *q, uint64_t now);
/* Arms, moves or removes the one timeout for the earliest due time. */
void timerq_sync(struct timerq *q);

/* The earliest due time, UINT64_MAX when empty. */
static inline uint64_t timerq_next(const struct timerq *q)
{
    return q->heap.n ? bheap_min_key(&q->heap) : UINT64_MAX;
}

static inline uint32_t timerq_count(const struct timerq *q)
{
    return q->heap.n;
}

/* The i-th queued timer (heap order), i < timerq_count(). */
static inline sched_timer *timerq_at(const struct timerq *q, uint32_t i)
{
    return bheap_at(&q->heap, i);
}

#endif
