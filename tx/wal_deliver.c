/*
 * tx/wal_deliver.c — delivery: the answers of commits (SPEC C13), in marker
 * order for stored ones.
 *
 * A stored commit whose flush completed waits in a min-heap on its marker
 * (heap_lock). When a durable marker P is persisted (wal_marker.c), the
 * engine's on_durable observer is told first (cb_lock; announced = P after
 * it returned), then every waiting commit with marker <= announced is popped
 * in marker order and released by ONE task (on the worker that saw the
 * completion if it has nothing queued, else urgent placement). A commit is
 * never released before on_durable heard of a marker covering it.
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

#include "bpf/probes.h"
#include "tx/wal_int.h"

/* ---- heap of waiting stored commits (heap_lock held) -------------------------------- */

static bool heap_less(const struct urt_commit *a, const struct urt_commit *b)
{
    return a->priv.marker < b->priv.marker;
}

static int heap_push(struct wal *wal, struct urt_commit *c)
{
    if (wal->heap_n == wal->heap_cap) {
        size_t cap = wal->heap_cap ? wal->heap_cap * 2 : 1024;
        struct urt_commit **h = realloc(wal->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        wal->heap = h;
        wal->heap_cap = cap;
    }
    size_t i = wal->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(c, wal->heap[p]))
            break;
        wal->heap[i] = wal->heap[p];
        i = p;
    }
    wal->heap[i] = c;
    c->priv.state = CS_HEAP;
    return 0;
}

static struct urt_commit *heap_pop(struct wal *wal)
{
    struct urt_commit *top = wal->heap[0];
    struct urt_commit *last = wal->heap[--wal->heap_n];
    size_t i = 0, n = wal->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const struct urt_commit *best = last;
        if (l < n && heap_less(wal->heap[l], best)) {
            m = l;
            best = wal->heap[l];
        }
        if (l + 1 < n && heap_less(wal->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        wal->heap[i] = wal->heap[m];
        i = m;
    }
    if (n)
        wal->heap[i] = last;
    return top;
}

/* Pops every commit with marker <= announced, in marker order (heap_lock
 * held): a commit is released only after on_durable was told of a marker
 * covering it. */
static struct urt_commit *heap_take_covered(struct wal *wal)
{
    uint64_t p = atomic_load_explicit(&wal->announced, memory_order_seq_cst); /* O2 */
    struct urt_commit *head = NULL, **tail = &head;
    while (wal->heap_n && wal->heap[0]->priv.marker <= p) {
        struct urt_commit *c = heap_pop(wal);
        c->priv.state = CS_RELEASE;
        c->priv.status = 0;
        c->priv.next = NULL;
        *tail = c;
        tail = &c->priv.next;
    }
    return head;
}

/* ---- running callbacks -------------------------------------------------------------- */

void deliver_run_list(struct urt_commit *c)
{
    struct worker *self = sched_self();
    while (c) {
        struct urt_commit *next = c->priv.next; /* the callback may reuse c */
        c->priv.state = CS_IDLE;
        if (self && c->priv.submit_ns && c->priv.status == 0)
            probe_commit_done(&self->hists, self->index,
                              (enum urt_latency_kind)(URT_LAT_COMMIT_ACCEPTED + (int)c->priv.response),
                              c->priv.submit_ns, probe_now_ns());
        c->priv.cb(c, c->priv.status, c->priv.arg);
        c = next;
    }
}

static enum urt_task_result list_run(struct urt_task *t, void *arg)
{
    (void)t;
    deliver_run_list(arg);
    return URT_TASK_DONE;
}

static void list_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    /* The runtime is going away: a released commit keeps its status (it was
     * durable or failed); the list still gets its callbacks exactly once. */
    deliver_run_list(arg);
}

void deliver_list(struct wal *wal, struct worker *w, struct urt_commit *list)
{
    if (!list)
        return;
    struct urt_task *t = &list->priv.task;
    urt_task_init(t, list_run, list);
    t->cancel = list_cancel;
    if (w && deque_size(&w->deque) == 0 && !w->yield_head) {
        /* W runs it next: as soon as urgent placement would, without a wake. */
        sched_local_push(w, t);
        return;
    }
    if (sched_submit(wal->s, t, URT_SUBMIT_URGENT))
        deliver_run_list(list); /* shutting down: deliver here rather than lose them */
}

static enum urt_task_result one_run(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_commit *c = arg;
    c->priv.next = NULL;
    deliver_run_list(c);
    return URT_TASK_DONE;
}

static void one_cancel(struct urt_task *t, void *arg)
{
    one_run(t, arg);
}

void deliver_one(struct worker *w, struct urt_commit *c, bool run_now)
{
    c->priv.state = CS_RELEASE;
    c->priv.next = NULL;
    if (run_now) {
        deliver_run_list(c); /* we run in c's hop task, not inside the caller's urt_log_commit */
        return;
    }
    urt_task_init(&c->priv.task, one_run, c);
    c->priv.task.cancel = one_cancel;
    sched_local_push(w, &c->priv.task);
}

/* ---- marker order ------------------------------------------------------------------- */

/* on_durable hears of persisted (serialized, increasing), then announced. */
static void announce(struct wal *wal)
{
    uint64_t p = atomic_load_explicit(&wal->persisted, memory_order_seq_cst);
    pthread_mutex_lock(&wal->cb_lock);
    if (p > atomic_load_explicit(&wal->announced, memory_order_relaxed)) {
        if (wal->on_durable)
            wal->on_durable(p, wal->on_durable_arg);                     /* the marker first ... */
        atomic_store_explicit(&wal->announced, p, memory_order_seq_cst); /* O2: ... then what it covers */
    }
    pthread_mutex_unlock(&wal->cb_lock);
}

void deliver_durable(struct wal *wal, struct worker *w)
{
    announce(wal);
    pthread_mutex_lock(&wal->heap_lock);
    struct urt_commit *list = heap_take_covered(wal);
    pthread_mutex_unlock(&wal->heap_lock);
    deliver_list(wal, w, list);
}

void deliver_waiters(struct wal *wal, struct worker *w, struct urt_commit *waiters)
{
    if (!waiters)
        return;
    struct urt_commit *failed = NULL;
    pthread_mutex_lock(&wal->heap_lock);
    for (struct urt_commit *c = waiters, *next; c; c = next) {
        next = c->priv.next;
        if (heap_push(wal, c)) {
            c->priv.status = -ENOMEM; /* cannot wait: tell it rather than lose it */
            c->priv.state = CS_RELEASE;
            c->priv.next = failed;
            failed = c;
        }
    }
    struct urt_commit *list = heap_take_covered(wal); /* O2: a marker announced meanwhile */
    pthread_mutex_unlock(&wal->heap_lock);
    deliver_list(wal, w, failed);
    deliver_list(wal, w, list);
}

/* ---- the end -------------------------------------------------------------------------- */

static void append_list(struct urt_commit ***tail, struct urt_commit *c, int status, bool set)
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

void deliver_close(struct wal *wal)
{
    /* Whatever still waits (cancel-mode destroy, or a channel that stopped
     * with unflushed records): covered commits succeed, the rest are cancelled. */
    struct urt_commit *list = NULL, **tail = &list;
    uint64_t p = atomic_load_explicit(&wal->persisted, memory_order_relaxed);
    if (p > atomic_load_explicit(&wal->announced, memory_order_relaxed) && wal->on_durable)
        wal->on_durable(p, wal->on_durable_arg); /* the marker before the commits it covers */
    for (uint32_t i = 0; wal->chans && i < wal->n_chan; i++) {
        struct chan *ch = wal->chans[i];
        if (!ch)
            continue;
        append_list(&tail, ch->held_head, 0, false); /* accepted/available: the answer was only held back */
        ch->held_head = ch->held_tail = NULL;
        for (int b = 0; b < 2; b++)
            append_list(&tail, ch->bufs[b].wait_head, -ECANCELED, true);
    }
    while (wal->heap_n) {
        struct urt_commit *c = heap_pop(wal);
        c->priv.next = NULL;
        append_list(&tail, c, c->priv.marker <= p ? 0 : -ECANCELED, true);
    }
    deliver_run_list(list);
}

int deliver_set_on_durable(struct wal *wal, urt_durable_fn *fn, void *arg)
{
    pthread_mutex_lock(&wal->cb_lock);
    wal->on_durable = fn;
    wal->on_durable_arg = arg;
    pthread_mutex_unlock(&wal->cb_lock);
    return 0;
}
