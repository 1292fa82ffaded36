/*
 * sched/admission.c — pending-task limit with FIFO hand-off to blocked
 * submitters (design, invariants and lifecycle in sched/admission.h). The
 * same object bounds the blocking pool's queue (sched/blocking.c).
 *
 * Only threads that are neither workers nor the watcher ever block (each on
 * a waitcount of its own, base/waitcount.h, queued under the limiter's
 * mutex, sleeping outside it); workers and
 * the watcher get -EAGAIN or retry later, so nothing on a worker's path waits on a lock held by a
 * sleeper.
 *
 * ---- Memory-ordering contract -------------------------------------------
 * No lost hand-off between a releaser and a submitter that is about to block:
 *
 *   Releaser (admission_release):        Blocker (take_blocking, mutex held):
 *     R1 fetch_sub(pending)   seq_cst       B1 enqueue self; fetch_add(n_waiters) seq_cst
 *     R2 load(n_waiters)      seq_cst       B2 grant loop: load(pending) seq_cst, CAS
 *     R3 if > 0: lock, grant loop           B3 unlock; if not granted: sleep on
 *                                              its own grant waitcount
 *
 * R1/B1 and R2/B2 are seq_cst, so in their single total order either B2 reads
 * the pending count after R1 (the blocker takes the freed slot itself) or R2
 * reads n_waiters after B1 (the releaser runs the grant loop after taking the
 * mutex, i.e. after B3 released it). Either way the freed slot reaches the
 * oldest waiter. A grant (or the close's -ESHUTDOWN) writes the waiter's
 * result, then brings its grant count from 1 to 0 — the granter's last touch
 * of the record, which lives on the blocked thread's stack: the waitcount's
 * sub wakes by address only (base/waitcount.h W1), and its release pairs with
 * the waiter's acquire (W2), so the waiter reads the result written for it.
 *
 * blockers (submitters between admission_take's blocking path and
 * admission_left) is a waitcount too: admission_close waits for it to reach
 * 0, and admission_left's sub is the submitter's last touch of the runtime.
 *
 * pending only moves by CAS (take) and fetch_sub (release), both seq_cst;
 * the count protects no other data, so nothing else needs ordering. Waiter
 * records (result, done) are read and written under the mutex only.
 */
#include "sched/admission.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sched/core/sched.h"

#include "base/error.h"
#include "base/waitcount.h"

struct adm_waiter {
    struct adm_waiter *next;
    int result;          /* written before grant goes to 0 */
    urt_waitcount grant; /* 1 until answered (a slot or -ESHUTDOWN) */
};

struct admission {
    alignas(64) _Atomic uint64_t pending;
    alignas(64) _Atomic uint32_t n_waiters;
    _Atomic uint32_t closed;
    uint64_t limit;
    pthread_mutex_t lock;
    struct adm_waiter *head, *tail; /* FIFO of blocked submitters (under lock) */
    alignas(64) _Atomic uint64_t max_pending, rejected, blocked;
    urt_waitcount blockers; /* submitters in the blocking path (until their call returns) */
};

struct admission *admission_new(uint64_t limit)
{
    struct admission *a = aligned_alloc(64, (sizeof(*a) + 63) & ~(size_t)63);
    if (!a)
        return NULL;
    memset(a, 0, sizeof(*a));
    a->limit = limit;
    atomic_init(&a->pending, 0);
    atomic_init(&a->n_waiters, 0);
    atomic_init(&a->closed, 0);
    atomic_init(&a->max_pending, 0);
    atomic_init(&a->rejected, 0);
    atomic_init(&a->blocked, 0);
    atomic_init(&a->blockers, 0);
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

void admission_free(struct admission *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->lock);
    free(a);
}

int admission_create(struct sched *s)
{
    s->adm = NULL;
    if (s->cfg->max_pending_tasks == 0)
        return 0;
    s->adm = admission_new(s->cfg->max_pending_tasks);
    return s->adm ? 0 : -ENOMEM;
}

void admission_destroy(struct sched *s)
{
    admission_free(s->adm);
    s->adm = NULL;
}

static inline void note_high(struct admission *a, uint64_t p)
{
    uint64_t hw = atomic_load_explicit(&a->max_pending, memory_order_relaxed);
    while (p > hw &&
           !atomic_compare_exchange_weak_explicit(&a->max_pending, &hw, p, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* One slot if pending < limit. The load is seq_cst: it is B2 of the contract. */
static inline bool take_slot(struct admission *a)
{
    uint64_t p = atomic_load_explicit(&a->pending, memory_order_seq_cst);
    do {
        if (p >= a->limit)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&a->pending, &p, p + 1, memory_order_seq_cst,
                                                    memory_order_seq_cst));
    note_high(a, p + 1);
    return true;
}

bool admission_try_take(struct admission *a)
{
    return take_slot(a);
}

/* Mutex held: give free slots to waiters, oldest first. */
static void grant_locked(struct admission *a)
{
    while (a->head && take_slot(a)) {
        struct adm_waiter *w = a->head;
        a->head = w->next;
        if (!a->head)
            a->tail = NULL;
        atomic_fetch_sub_explicit(&a->n_waiters, 1, memory_order_relaxed);
        w->result = 0;
        urt_waitcount_sub(&w->grant, 1); /* the last touch of w */
    }
}

void admission_release(struct admission *a)
{
    atomic_fetch_sub_explicit(&a->pending, 1, memory_order_seq_cst);              /* R1 */
    if (atomic_load_explicit(&a->n_waiters, memory_order_seq_cst) == 0)            /* R2: pairs with B1 */
        return;
    pthread_mutex_lock(&a->lock);                                                  /* R3 */
    grant_locked(a);
    pthread_mutex_unlock(&a->lock);
}

static __attribute__((cold)) int take_blocking(struct admission *a)
{
    struct adm_waiter me = {.next = NULL, .result = 0};
    atomic_init(&me.grant, 1);
    pthread_mutex_lock(&a->lock);
    if (atomic_load_explicit(&a->closed, memory_order_relaxed)) {
        me.result = -ESHUTDOWN;
        atomic_store_explicit(&me.grant, 0, memory_order_relaxed); /* ours alone */
    } else {
        if (a->tail)
            a->tail->next = &me;
        else
            a->head = &me;
        a->tail = &me;
        atomic_fetch_add_explicit(&a->n_waiters, 1, memory_order_seq_cst); /* B1 */
        atomic_fetch_add_explicit(&a->blocked, 1, memory_order_relaxed);
        grant_locked(a); /* B2: pairs with R2 */
    }
    pthread_mutex_unlock(&a->lock);
    urt_waitcount_wait(&me.grant, URT_WAITCOUNT_FOREVER); /* B3 */
    return me.result;
}

int admission_take(struct sched *s, struct admission *a, unsigned flags, bool *blocking)
{
    /* Fast path only when nobody waits: a newcomer never overtakes a waiter. */
    if (atomic_load_explicit(&a->n_waiters, memory_order_relaxed) == 0 && take_slot(a))
        return 0;
    if (!(flags & URT_SUBMIT_BLOCK) || sched_current(s) != NULL || sched_service_thread(s)) {
        atomic_fetch_add_explicit(&a->rejected, 1, memory_order_relaxed);
        return -EAGAIN;
    }
    /* Shutdown fence: admission_close() waits until blockers is 0 again, so
     * the runtime outlives every submitter it woke. Pairs with its seq_cst load. */
    urt_waitcount_add(&a->blockers, 1, memory_order_seq_cst);
    *blocking = true;
    return take_blocking(a);
}

void admission_left(struct admission *a)
{
    urt_waitcount_sub(&a->blockers, 1); /* last touch of the runtime (wakes by address only) */
}

int admission_submit_via(struct sched *s, struct urt_task *t, unsigned flags, admission_place_fn *place, void *ctx)
{
    struct admission *a = s->adm;
    bool blocking = false;
    int err = admission_take(s, a, flags, &blocking);
    if (!err) {
        t->priv.flags |= TASK_ADMITTED;
        err = place(ctx, t, flags);
        if (__builtin_expect(err != 0, 0)) {
            t->priv.flags &= ~TASK_ADMITTED;
            admission_release(a);
        }
    }
    if (err && (t->priv.flags & TASK_POOLED))
        sched_task_free(s, t); /* urt_spawn's task goes back to the pool */
    if (blocking)
        admission_left(a);
    return err;
}

struct place_on {
    struct sched *s;
    struct worker *target;
};

static int place_sched(void *ctx, struct urt_task *t, unsigned flags)
{
    struct place_on *p = ctx;
    return p->target ? sched_submit_to(p->s, p->target, t) : sched_submit(p->s, t, flags);
}

int admission_submit(struct sched *s, struct urt_task *t, unsigned flags, struct worker *target)
{
    struct place_on p = {s, target};
    return admission_submit_via(s, t, flags, place_sched, &p);
}

void admission_close(struct admission *a)
{
    pthread_mutex_lock(&a->lock);
    atomic_store_explicit(&a->closed, 1, memory_order_relaxed);
    while (a->head) {
        struct adm_waiter *w = a->head;
        a->head = w->next;
        w->result = -ESHUTDOWN;
        urt_waitcount_sub(&w->grant, 1); /* the last touch of w */
    }
    a->tail = NULL;
    atomic_store_explicit(&a->n_waiters, 0, memory_order_relaxed);
    pthread_mutex_unlock(&a->lock);
    /* Let every woken submitter leave the runtime's code before it is torn down. */
    urt_waitcount_wait(&a->blockers, URT_WAITCOUNT_FOREVER);
}

void admission_shutdown(struct sched *s)
{
    if (s->adm)
        admission_close(s->adm);
}

uint64_t admission_pending(const struct admission *a)
{
    return atomic_load_explicit(&((struct admission *)a)->pending, memory_order_seq_cst);
}

void admission_read(const struct admission *a0, struct urt_admission_stats *o)
{
    struct admission *a = (struct admission *)a0; /* atomic loads of a const object */
    memset(o, 0, sizeof(*o));
    o->limit = a->limit;
    o->pending = atomic_load_explicit(&a->pending, memory_order_relaxed);
    o->max_pending = atomic_load_explicit(&a->max_pending, memory_order_relaxed);
    o->rejected = atomic_load_explicit(&a->rejected, memory_order_relaxed);
    o->blocked = atomic_load_explicit(&a->blocked, memory_order_relaxed);
    o->waiting = atomic_load_explicit(&a->n_waiters, memory_order_relaxed);
}

void admission_read_stats(const struct sched *s, struct urt_admission_stats *o)
{
    memset(o, 0, sizeof(*o));
    if (s->adm)
        admission_read(s->adm, o);
}

URT_API int urt_admission_stats(const urt_runtime *rt, struct urt_admission_stats *out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_admission_stats: %s is NULL", rt ? "out" : "rt");
    admission_read_stats((const struct sched *)rt, out); /* struct sched is first in urt_runtime */
    return 0;
}
