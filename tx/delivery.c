/*
 * tx/delivery.c — delivery: the answers of commits (SPEC C13), in marker
 * order for stored ones. Used by urt's own log (tx/wal*.c) and by an
 * engine's external durability source (tx/durability.c).
 *
 * A stored commit whose record is written waits in a min-heap on its marker
 * (heap_lock). When a durable marker P is persisted (wal_marker.c, or the
 * engine's urt_durability_notify), the
 * engine's on_durable observer is told first (cb_lock; announced = P after
 * it returned), then every waiting commit with marker <= announced is popped
 * in marker order and released by ONE task (on the worker that saw the
 * completion if it has nothing queued, else urgent placement), which leaves
 * the later half of a list whose callbacks take long for idle workers to
 * steal (list_run, issue 12 point 3). A commit is never released before on_durable heard of a marker
 * covering it.
 *
 * direct_commit_callback: the released list runs at once, on the thread
 * that reached the response, instead of in a task.
 *
 * Ordering (O2 of wal.c): announced only grows and is stored under cb_lock
 * after on_durable returned, before the releaser takes heap_lock; an
 * inserter (deliver_waiters) re-reads announced under heap_lock, so a commit
 * inserted after a release is released by its inserter.
 *
 * Accepted/available commits are answered at append (their own task, or at
 * once inside their hop task), or held behind a write in flight when the
 * channel is far behind (backpressure, wal_chan.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "bpf/probes.h"
#include "base/heap.h"
#include "sched/core/io.h"
#include "tx/delivery.h"

/* ---- the heap of waiting stored commits (base/heap.h, heap_lock held) ------------------ */

/* Pops every commit with marker <= announced, in marker order (heap_lock
 * held): a commit is released only after on_durable was told of a marker
 * covering it. */
static struct urt_commit *heap_take_covered(struct delivery *d)
{
    uint64_t p = atomic_load_explicit(&d->announced, memory_order_seq_cst); /* O2 */
    struct urt_commit *head = NULL, **tail = &head;
    while (d->heap.n && bheap_min_key(&d->heap) <= p) {
        struct urt_commit *c = bheap_remove(&d->heap, 0);
        c->priv.state = CS_RELEASE;
        c->priv.status = 0;
        c->priv.next = NULL;
        *tail = c;
        tail = &c->priv.next;
    }
    return head;
}

/* ---- running callbacks -------------------------------------------------------------- */

void delivery_run_list(struct urt_commit *c)
{
    struct worker *self = sched_self();
    while (c) {
        struct urt_commit *next = c->priv.next; /* the callback may reuse c */
        c->priv.state = CS_IDLE;
        if (self && c->priv.submit_ns && c->priv.status == 0)
            probe_commit_done(&self->hists, self->index,
                              (enum urt_latency_kind)(URT_LAT_COMMIT_ACCEPTED + (int)c->priv.response),
                              c->priv.submit_ns, urt_clock_ns());
        c->priv.cb(c, c->priv.status, c->priv.arg);
        c = next;
    }
}

/* A release list is split when running it takes long (issue 12 point 3;
 * lazy binary splitting after Tzannes, Caragea, Barua and Vishkin, "Lazy
 * Binary-Splitting", PPoPP 2010: split only work that turned out to be
 * large, in halves). A client resumed by its callback usually commits again
 * from it, so where the callback runs is where the client lives. The
 * callbacks run one by one in marker order; each time they have run for
 * SPLIT_AFTER_NS, the later half of what remains goes on this worker's deque
 * as one task and a suspended peer is woken to steal it (sched_push_split),
 * while this worker goes on with the earlier half, which gives the peer the
 * time to arrive; a peer that takes the half splits it again if it is still
 * long. The clients of busy releases thus spread over the workers. Cheap
 * callbacks finish before the threshold: the list runs whole and its
 * clients stay together — which durable commits want, since the durable
 * marker is global: a client on another worker's channel makes every commit
 * wait for that channel's writes too. One worker: never split; a lone
 * commit: no hop. Halves taken by different workers may overlap. */
#define SPLIT_AFTER_NS 50000

static enum urt_task_result list_run(struct urt_task *t, void *arg);
static void list_cancel(struct urt_task *t, void *arg);

/* Detaches and returns the second half of the list starting at c (NULL
 * when fewer than two commits remain). */
static struct urt_commit *split_half(struct urt_commit *c)
{
    size_t n = 0;
    for (struct urt_commit *x = c; x; x = x->priv.next)
        n++;
    if (n < 2)
        return NULL;
    struct urt_commit *last = c;
    for (size_t i = 1; i < n / 2; i++)
        last = last->priv.next;
    struct urt_commit *rest = last->priv.next;
    last->priv.next = NULL;
    return rest;
}

static enum urt_task_result list_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    struct worker *self = sched_self();
    if (!self || self->s->n_workers < 2) {
        delivery_run_list(c);
        return URT_TASK_DONE;
    }
    uint64_t t0 = urt_clock_ns();
    while (c) {
        struct urt_commit *next = c->priv.next; /* the callback may reuse c */
        c->priv.next = NULL;
        delivery_run_list(c);
        c = next;
        if (c && urt_clock_ns() - t0 > SPLIT_AFTER_NS) {
            struct urt_commit *rest = split_half(c);
            if (rest) { /* the later half for a peer, while this worker runs the earlier one */
                urt_task_init(&rest->priv.task, list_run, rest);
                rest->priv.task.cancel = list_cancel;
                sched_push_split(self, &rest->priv.task);
            }
            t0 = urt_clock_ns();
        }
    }
    return URT_TASK_DONE;
}

static void list_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    /* The runtime is going away: a released commit keeps its status (it was
     * durable or failed); the list still gets its callbacks exactly once. */
    delivery_run_list(arg);
}

void delivery_list(struct delivery *d, struct worker *w, struct urt_commit *list)
{
    if (!list)
        return;
    if (d->direct) {
        delivery_run_list(list); /* direct_commit_callback: here, now */
        return;
    }
    struct urt_task *t = &list->priv.task;
    urt_task_init(t, list_run, list);
    t->cancel = list_cancel;
    if (w && deque_size(&w->deque) == 0 && !w->yield_head) {
        /* W runs it next (after its LIFO slot's task, with lifo_slot): as
         * soon as urgent placement would, without a wake. */
        sched_local_push(w, t);
        return;
    }
    if (sched_submit(d->s, t, URT_SUBMIT_URGENT))
        delivery_run_list(list); /* shutting down: deliver here rather than lose them */
}

static enum urt_task_result one_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    c->priv.next = NULL;
    delivery_run_list(c);
    return URT_TASK_DONE;
}

static void one_cancel(struct urt_task *t, void *arg)
{
    one_run(t, arg);
}

void delivery_one(struct worker *w, struct urt_commit *c, bool run_now)
{
    c->priv.state = CS_RELEASE;
    c->priv.next = NULL;
    if (run_now) {
        delivery_run_list(c); /* we run in c's hop task, not inside the caller's urt_log_commit */
        return;
    }
    urt_task_init(&c->priv.task, one_run, c);
    c->priv.task.cancel = one_cancel;
    sched_local_push(w, &c->priv.task);
}

/* ---- marker order ------------------------------------------------------------------- */

/* on_durable hears of persisted (serialized, increasing), then announced. */
static void announce(struct delivery *d)
{
    uint64_t p = atomic_load_explicit(&d->persisted, memory_order_seq_cst);
    pthread_mutex_lock(&d->cb_lock);
    if (p > atomic_load_explicit(&d->announced, memory_order_relaxed)) {
        if (d->on_durable)
            d->on_durable(p, d->on_durable_arg);                     /* the marker first ... */
        atomic_store_explicit(&d->announced, p, memory_order_seq_cst); /* O2: ... then what it covers */
    }
    pthread_mutex_unlock(&d->cb_lock);
}

void delivery_durable(struct delivery *d, struct worker *w)
{
    announce(d);
    pthread_mutex_lock(&d->heap_lock);
    struct urt_commit *list = heap_take_covered(d);
    pthread_mutex_unlock(&d->heap_lock);
    delivery_list(d, w, list);
}

void delivery_waiters(struct delivery *d, struct worker *w, struct urt_commit *waiters)
{
    if (!waiters)
        return;
    struct urt_commit *failed = NULL;
    pthread_mutex_lock(&d->heap_lock);
    for (struct urt_commit *c = waiters, *next; c; c = next) {
        next = c->priv.next;
        c->priv.state = CS_HEAP;
        if (bheap_push(&d->heap, c->priv.marker, c)) {
            c->priv.status = -ENOMEM; /* cannot wait: tell it rather than lose it */
            c->priv.state = CS_RELEASE;
            c->priv.next = failed;
            failed = c;
        }
    }
    struct urt_commit *list = heap_take_covered(d); /* O2: a marker announced meanwhile */
    pthread_mutex_unlock(&d->heap_lock);
    delivery_list(d, w, failed);
    delivery_list(d, w, list);
}

/* ---- the end -------------------------------------------------------------------------- */

void delivery_append(struct urt_commit ***tail, struct urt_commit *c, int status, bool set)
{
    for (struct urt_commit *n; c; c = n) {
        n = c->priv.next;
        if (set)
            c->priv.status = status;
        c->priv.next = NULL;
        **tail = c;
        *tail = &c->priv.next;
    }
}

void delivery_close(struct delivery *d, struct urt_commit *list)
{
    /* Whatever still waits: covered commits succeed, the rest are cancelled.
     * They go on a list of their own, run after the caller's: the caller's
     * tail pointer is not ours to extend (an empty caller list has its tail
     * in the caller's frame, and the heap's commits were once lost there). */
    uint64_t p = atomic_load_explicit(&d->persisted, memory_order_relaxed);
    if (p > atomic_load_explicit(&d->announced, memory_order_relaxed) && d->on_durable)
        d->on_durable(p, d->on_durable_arg); /* the marker before the commits it covers */
    struct urt_commit *waiting = NULL, **tail = &waiting;
    while (d->heap.n) {
        struct urt_commit *c = bheap_remove(&d->heap, 0);
        c->priv.next = NULL;
        delivery_append(&tail, c, c->priv.marker <= p ? 0 : -ECANCELED, true);
    }
    delivery_run_list(list);
    delivery_run_list(waiting);
}

void delivery_init(struct delivery *d, struct sched *s, uint64_t marker, bool direct)
{
    memset(d, 0, sizeof(*d));
    d->s = s;
    d->direct = direct;
    atomic_init(&d->persisted, marker);
    atomic_init(&d->announced, marker);
    pthread_mutex_init(&d->heap_lock, NULL);
    pthread_mutex_init(&d->cb_lock, NULL);
}

void delivery_destroy(struct delivery *d)
{
    bheap_free(&d->heap);
    pthread_mutex_destroy(&d->heap_lock);
    pthread_mutex_destroy(&d->cb_lock);
}

int delivery_set_on_durable(struct delivery *d, urt_durable_fn *fn, void *arg)
{
    pthread_mutex_lock(&d->cb_lock);
    d->on_durable = fn;
    d->on_durable_arg = arg;
    pthread_mutex_unlock(&d->cb_lock);
    return 0;
}
