/*
 * base/hist.c — reading, merging and percentiles of the log-linear
 * histograms of base/hist.h. Readers only: recording is inline in the
 * header (owner only). Relaxed loads throughout (contract in hist.h).
 */
#include "base/hist.h"

#include <math.h>

void hist_read_into(const struct hist *h, struct hist_sum *out)
{
    out->count += atomic_load_explicit(&h->count, memory_order_relaxed);
    out->sum_ns += atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
    if (max > out->max_ns)
        out->max_ns = max;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++)
        out->bucket[i] += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
}

void hist_sum_add(struct hist_sum *out, const struct hist_sum *a)
{
    out->count += a->count;
    out->sum_ns += a->sum_ns;
    if (a->max_ns > out->max_ns)
        out->max_ns = a->max_ns;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++)
        out->bucket[i] += a->bucket[i];
}

uint64_t hist_percentile(const struct hist_sum *h, double p)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++)
        total += h->bucket[i];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)total);
    if (rank < 1)
        rank = 1;
    if (rank > total)
        rank = total;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen >= rank) {
            uint64_t v = hist_bucket_high(i);
            return v < h->max_ns ? v : h->max_ns;
        }
    }
    return h->max_ns;
}
