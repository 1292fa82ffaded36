/*
 * sched/blocking_life.c — the blocking pool's life (sched/blocking.h):
 * creation (sub-pools per NUMA node, blocking_threads_min threads), the
 * drain's question (blocking_busy), quiesce and stop at destroy, the
 * watchdog's reads of the threads' slots, statistics. The queue, the
 * threads and the protocol (B1-B6) are in sched/blocking.c.
 *
 * Memory ordering: blocking_busy, blocking_quiesce and blocking_stop follow
 * B5 and B6 of sched/blocking.c; the watchdog reads a slot's seqlock
 * (sched/core/watchdog_slot.h) through the slot pointer published by a release store;
 * statistics are relaxed loads of counters (a consistent-enough view).
 */
#include "sched/blocking_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- lifecycle ---------------------------------------------------------------------------------------- */

static int pool_alloc(struct sched *s, uint32_t n_sub)
{
    const struct urt_config *cfg = s->cfg;
    struct blocking_pool *p = aligned_alloc(64, (sizeof(*p) + 63) & ~(size_t)63);
    if (!p)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    p->s = s;
    p->max = cfg->blocking_threads_max;
    p->min = cfg->blocking_threads_min;
    p->keepalive_ns = cfg->blocking_keepalive_ms * 1000000ull;
    p->cap = 2 * p->max;
    p->n_nodes = n_sub;
    p->adm = admission_new(cfg->blocking_queue_max);
    p->slots = calloc(p->cap, sizeof(*p->slots));
    p->worker_node = calloc(s->n_workers, sizeof(*p->worker_node));
    p->nodes = aligned_alloc(64, ((n_sub * sizeof(*p->nodes)) + 63) & ~(size_t)63);
    s->blocking = p;
    if (!p->adm || !p->slots || !p->worker_node || !p->nodes)
        return -ENOMEM;
    memset(p->nodes, 0, n_sub * sizeof(*p->nodes));
    for (uint32_t i = 0; i < n_sub; i++) {
        struct blk_node *nd = &p->nodes[i];
        inbox_init(&nd->q);
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&nd->lock, &ma);
        pthread_mutexattr_destroy(&ma);
        nd->pool = p;
        CPU_ZERO(&nd->cpus);
    }
    return 0;
}

static void pool_release(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (!p)
        return;
    if (p->nodes)
        for (uint32_t i = 0; i < p->n_nodes; i++)
            pthread_mutex_destroy(&p->nodes[i].lock);
    if (p->slots)
        for (uint32_t i = 0; i < p->cap; i++)
            free(atomic_load_explicit(&p->slots[i], memory_order_relaxed));
    free(p->slots);
    free(p->nodes);
    free(p->worker_node);
    admission_free(p->adm);
    free(p);
    s->blocking = NULL;
}

/* Which sub-pool each worker's offloads go to, and each sub-pool's CPUs. */
static void place_nodes(struct sched *s, uint32_t n_nodes, const struct blocking_node_spec *nodes, bool bind)
{
    struct blocking_pool *p = pool_of(s);
    bool split = p->n_nodes > 1;
    for (uint32_t i = 0; i < n_nodes; i++) {
        struct blk_node *nd = &p->nodes[split ? i : 0];
        CPU_OR(&nd->cpus, &nd->cpus, &nodes[i].cpus);
        nd->bind = bind;
    }
    for (uint32_t w = 0; w < s->n_workers && split; w++)
        for (uint32_t i = 0; i < n_nodes; i++)
            if (nodes[i].id == s->workers[w]->place.node)
                p->worker_node[w] = i;
}

int blocking_create(struct sched *s, uint32_t n_nodes, const struct blocking_node_spec *nodes, bool bind)
{
    uint32_t n_sub = bind && n_nodes > 1 ? n_nodes : 1;
    int err = pool_alloc(s, n_sub);
    if (err) {
        pool_release(s);
        return err;
    }
    struct blocking_pool *p = pool_of(s);
    place_nodes(s, n_nodes, nodes, bind);
    for (uint32_t i = 0; i < p->min; i++) {
        if (!blk_spawn(p, &p->nodes[i % p->n_nodes], false)) {
            blocking_quiesce(s);
            blocking_stop(s);
            pool_release(s);
            return -EAGAIN;
        }
    }
    return 0;
}

void blocking_close(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (p)
        admission_close(p->adm);
}

void blocking_free(struct sched *s)
{
    pool_release(s);
}

bool blocking_busy(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (!p)
        return false;
    if (admission_pending(p->adm)) /* (B6): slots, then running */
        return true;
    return urt_waitcount_count(atomic_load_explicit(&p->running, memory_order_seq_cst)) != 0;
}

void blocking_quiesce(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (!p)
        return;
    atomic_store_explicit(&p->closed, 1, memory_order_seq_cst); /* (B5) */
    urt_waitcount_wait(&p->entering, URT_WAITCOUNT_FOREVER); /* (B5) */
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        struct blk_node *nd = &p->nodes[i];
        pthread_mutex_lock(&nd->lock);
        struct urt_task *dead = blk_sweep_locked(nd, true);
        pthread_mutex_unlock(&nd->lock);
        blk_finish_unrun(p, dead);
    }
    urt_waitcount_wait(&p->running, URT_WAITCOUNT_FOREVER); /* (B6): the last function's sub wakes us */
}

void blocking_stop(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (!p)
        return;
    atomic_store_explicit(&p->closing, 1, memory_order_seq_cst); /* (B5) */
    /* Not a wait for a count (base/waitcount.h): each round wakes the
     * threads that parked meanwhile, which then leave and drop alive. */
    while (atomic_load_explicit(&p->alive, memory_order_acquire) != 0) {
        uint32_t n = atomic_load_explicit(&p->n_slots, memory_order_acquire);
        for (uint32_t i = 0; i < n; i++) {
            struct blk_slot *sl = atomic_load_explicit(&p->slots[i], memory_order_acquire);
            uint32_t st = SLOT_PARKED;
            if (sl && atomic_compare_exchange_strong_explicit(&sl->state, &st, SLOT_WOKEN, memory_order_acq_rel,
                                                              memory_order_acquire))
                blk_futex_wake1(&sl->state);
        }
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* ---- watchdog and statistics ------------------------------------------------------------------------ */

uint32_t blocking_watch_count(const struct sched *s)
{
    const struct blocking_pool *p = pool_of(s);
    return p ? atomic_load_explicit(&((struct blocking_pool *)p)->n_slots, memory_order_acquire) : 0;
}

bool blocking_watch_read(const struct sched *s, uint32_t i, uint64_t *seq, struct urt_task **t, struct urt_job **j)
{
    const struct blocking_pool *p = pool_of(s);
    struct blk_slot *sl = p ? atomic_load_explicit(&p->slots[i], memory_order_acquire) : NULL;
    return sl && watchdog_read(&sl->wd, seq, t, j);
}

static void summarize(const struct hist *h, struct urt_latency *out)
{
    struct hist_sum *sum = calloc(1, sizeof(*sum));
    memset(out, 0, sizeof(*out));
    if (!sum)
        return;
    hist_read_into(h, sum);
    uint64_t n = 0;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++)
        n += sum->bucket[i];
    if (n) {
        out->count = n;
        out->mean_ns = sum->sum_ns / (sum->count ? sum->count : n);
        out->p50_ns = hist_percentile(sum, 50);
        out->p75_ns = hist_percentile(sum, 75);
        out->p85_ns = hist_percentile(sum, 85);
        out->p95_ns = hist_percentile(sum, 95);
        out->p99_ns = hist_percentile(sum, 99);
        out->max_ns = sum->max_ns;
    }
    free(sum);
}

void blocking_read_stats(const struct sched *s, struct urt_blocking_stats *o)
{
    struct blocking_pool *p = pool_of(s);
    memset(o, 0, sizeof(*o));
    if (!p)
        return;
    struct urt_admission_stats a;
    admission_read(p->adm, &a);
    o->queue_max = a.limit;
    o->max_queued = a.max_pending;
    o->rejected = a.rejected;
    o->blocked = a.blocked;
    o->threads = atomic_load_explicit(&p->threads, memory_order_relaxed);
    o->threads_started = atomic_load_explicit(&p->started, memory_order_relaxed);
    o->threads_exited = atomic_load_explicit(&p->exited, memory_order_relaxed);
    o->running = urt_waitcount_count(atomic_load_explicit(&p->running, memory_order_relaxed));
    o->cancelled = atomic_load_explicit(&p->cancelled, memory_order_relaxed);
    o->threads_max = p->max;
    o->threads_min = p->min;
    o->nodes = p->n_nodes;
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        struct blk_node *nd = &p->nodes[i];
        o->queued += atomic_load_explicit(&nd->avail, memory_order_relaxed);
        o->threads_idle += atomic_load_explicit(&nd->spinning, memory_order_relaxed) +
                           atomic_load_explicit(&nd->parked, memory_order_relaxed);
    }
    uint32_t n = atomic_load_explicit(&p->n_slots, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        struct blk_slot *sl = atomic_load_explicit(&p->slots[i], memory_order_acquire);
        if (sl)
            o->done += atomic_load_explicit(&sl->done, memory_order_relaxed);
    }
    summarize(&p->wait_hist, &o->queue_wait);
    summarize(&p->run_hist, &o->run_time);
}
