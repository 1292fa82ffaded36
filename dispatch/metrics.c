/*
 * dispatch/metrics.c — window summaries and the idle sleep (design in
 * dispatch/metrics.h). No shared state.
 */
#include "dispatch/metrics.h"

#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void dmetrics_dist(uint64_t *v, uint32_t n, struct urt_dispatch_dist *out)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return;
    qsort(v, n, sizeof(*v), cmp_u64);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += v[i];
    out->avg = sum / n;
    out->p50 = v[(uint64_t)n * 50 / 100];
    out->p75 = v[(uint64_t)n * 75 / 100];
    out->p85 = v[(uint64_t)n * 85 / 100];
    out->p95 = v[(uint64_t)n * 95 / 100];
    out->p99 = v[(uint64_t)n * 99 / 100];
    out->max = v[n - 1];
}

enum field { F_SCAN, F_QUEUE, F_LEASE, F_TOTAL, F_QSIZE, F_FREE };

static uint64_t field(const struct dsample *s, enum field f)
{
    switch (f) {
    case F_SCAN: return s->scan_delay_ns;
    case F_QUEUE: return s->queue_delay_ns;
    case F_LEASE: return s->lease_delay_ns;
    case F_TOTAL: return s->scan_delay_ns + s->queue_delay_ns + s->lease_delay_ns;
    case F_QSIZE: return s->queue_size;
    case F_FREE: return s->free_slots;
    }
    return 0;
}

static void dist_of(const struct dsample *s, uint32_t n, enum field f, uint64_t *scratch,
                    struct urt_dispatch_dist *out)
{
    for (uint32_t i = 0; i < n; i++)
        scratch[i] = field(&s[i], f);
    dmetrics_dist(scratch, n, out);
}

/* p95 of the total delay of the samples that are not old strands (0: none). */
static uint64_t current_delay(const struct dsample *s, uint32_t n, uint64_t *scratch)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!s[i].old_strand)
            scratch[k++] = field(&s[i], F_TOTAL);
    struct urt_dispatch_dist d;
    dmetrics_dist(scratch, k, &d);
    return d.p95;
}

void dmetrics_window(const struct dsample *s, uint32_t n, uint64_t elapsed_ns, uint64_t *scratch,
                     struct urt_dispatch_metrics *out)
{
    out->window_runs = n;
    dist_of(s, n, F_SCAN, scratch, &out->scan_delay_ns);
    dist_of(s, n, F_QUEUE, scratch, &out->queue_delay_ns);
    dist_of(s, n, F_LEASE, scratch, &out->lease_delay_ns);
    dist_of(s, n, F_TOTAL, scratch, &out->total_delay_ns);
    dist_of(s, n, F_QSIZE, scratch, &out->queue_size);
    dist_of(s, n, F_FREE, scratch, &out->free_slots);
    uint32_t acq = 0, old = 0, exp = 0;
    for (uint32_t i = 0; i < n; i++) {
        acq += s[i].acquired;
        old += s[i].old_strand;
        exp += s[i].lease_expired;
    }
    out->lease_acquire_percent = n ? 100.0 * acq / n : 0;
    out->old_strand_percent = n ? 100.0 * old / n : 0;
    out->lease_expired_percent = n ? 100.0 * exp / n : 0;
    out->strands_per_second = elapsed_ns ? (double)n * 1e9 / (double)elapsed_ns : 0;
    out->current_strand_delay_ns = current_delay(s, n, scratch);
}

uint64_t dispatch_sleep_ns(uint32_t queued, double strands_per_second, uint32_t free_slots, uint32_t pool,
                           uint64_t min_ns, uint64_t max_ns)
{
    double sps = strands_per_second > 0 ? strands_per_second : 1; /* Ubicloud's default: 1 per second */
    double s = queued * 0.75 / sps;
    double idle = pool ? (double)free_slots / pool : 1;
    if (s < idle)
        s = idle;
    double ns = s * 1e9;
    if (ns < (double)min_ns)
        return min_ns;
    if (ns > (double)max_ns)
        return max_ns;
    return (uint64_t)ns;
}

uint64_t dispatch_old_delay_ns(uint64_t base_ns, uint64_t current_delay_ns)
{
    return base_ns + current_delay_ns + current_delay_ns / 5;
}
