/*
 * base/hist.h — per-worker log-linear latency histograms (C17, docs/design.md).
 *
 * Layout (HDR-style): values in nanoseconds; 0..15 ns get one bucket each;
 * above, every power-of-two range [2^k, 2^(k+1)) is split into 16 equal
 * sub-buckets, so a bucket's width is at most 1/16 of its lower bound (a
 * reported percentile is at most 6.25 % above the true value). Ranges go up
 * to 2^40 ns (~18 minutes); larger values land in the last bucket (max is
 * kept exactly).
 *
 * Memory-ordering contract: one writer per histogram (the worker that owns
 * it) stores with relaxed load+store pairs, never a read-modify-write, like
 * the counters in sched/core/sched.h; a histogram with several writers uses
 * hist_record_shared() (relaxed read-modify-writes) instead. Readers (urt_stats_snapshot, any thread)
 * load every field relaxed and merge; a histogram read while the owner
 * records is a slightly torn but monotone view (each field only grows), so
 * count may differ from the sum of buckets by the samples in flight. Nothing
 * here orders other memory.
 */
#ifndef URT_BASE_HIST_H
#define URT_BASE_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS)          /* sub-buckets per power of two */
#define HIST_MAX_BITS 40                         /* values up to 2^40 ns */
#define HIST_BUCKETS ((HIST_MAX_BITS - HIST_SUB_BITS + 1) * HIST_SUB) /* 592 */

struct hist {
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t max_ns;
    _Atomic uint64_t bucket[HIST_BUCKETS];
};

/* A plain (non-atomic) copy, for merging and percentiles. */
struct hist_sum {
    uint64_t count, sum_ns, max_ns;
    uint64_t bucket[HIST_BUCKETS];
};

/* Bucket of value v (ns). */
static inline uint32_t hist_bucket(uint64_t v)
{
    if (v < HIST_SUB)
        return (uint32_t)v;
    uint32_t msb = 63u - (uint32_t)__builtin_clzll(v);
    if (msb >= HIST_MAX_BITS)
        return HIST_BUCKETS - 1;
    uint32_t g = msb - HIST_SUB_BITS;
    return g * HIST_SUB + (uint32_t)(v >> g); /* v >> g is in [16, 32) */
}

/* Smallest and largest value of bucket i. */
static inline uint64_t hist_bucket_low(uint32_t i)
{
    if (i < HIST_SUB)
        return i;
    uint32_t g = i / HIST_SUB - 1;
    return (uint64_t)(HIST_SUB + i % HIST_SUB) << g;
}

static inline uint64_t hist_bucket_high(uint32_t i)
{
    if (i < HIST_SUB)
        return i;
    if (i == HIST_BUCKETS - 1)
        return UINT64_MAX;
    return hist_bucket_low(i + 1) - 1;
}

#define HIST_BUMP(p, n)                                                                                    \
    atomic_store_explicit((p), atomic_load_explicit((p), memory_order_relaxed) + (n), memory_order_relaxed)

/* Records v. Owner only. */
static inline void hist_record(struct hist *h, uint64_t v)
{
    HIST_BUMP(&h->bucket[hist_bucket(v)], 1);
    HIST_BUMP(&h->count, 1);
    HIST_BUMP(&h->sum_ns, v);
    if (v > atomic_load_explicit(&h->max_ns, memory_order_relaxed))
        atomic_store_explicit(&h->max_ns, v, memory_order_relaxed);
}

/* Records v into a histogram with several writers (the blocking pool's
 * threads, sched/blocking.c): relaxed read-modify-writes instead of the
 * owner's load + store, the max by a relaxed CAS. Readers as above. */
static inline void hist_record_shared(struct hist *h, uint64_t v)
{
    atomic_fetch_add_explicit(&h->bucket[hist_bucket(v)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, v, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
    while (v > m && !atomic_compare_exchange_weak_explicit(&h->max_ns, &m, v, memory_order_relaxed,
                                                           memory_order_relaxed))
        ;
}

/* Adds h's current contents to out (relaxed loads). Any thread. */
void hist_read_into(const struct hist *h, struct hist_sum *out);

/* Adds a to out. */
void hist_sum_add(struct hist_sum *out, const struct hist_sum *a);

/* The value at percentile p (0 < p <= 100): the upper bound of the bucket
 * holding the rank ceil(p% of count), capped at max. 0 when empty. */
uint64_t hist_percentile(const struct hist_sum *h, double p);

#endif
