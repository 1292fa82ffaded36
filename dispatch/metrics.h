/*
 * dispatch/metrics.h — the dispatcher's delay metrics and its idle sleep
 * (SPEC C21; Ubicloud's dispatcher's metrics_hash and sleep_duration).
 *
 * Each run (a lease take that answered, acquired or not) leaves one sample:
 * scan delay (how late the strand was when a scan picked it: the database's
 * clock_timestamp() minus its schedule, or its expired lease's end), queue
 * delay (picked -> a slot took it, this process's clock), lease delay (slot
 * took it -> the take answered), the queue size and free slots the slot saw,
 * and three flags. Every `every` samples the window is summarized: average,
 * the sorted window's values at floor(n * q) for q = .5 .75 .85 .95 .99, the
 * max; three percentages; strands per second (samples / the window's wall
 * time); and the current strand delay, the p95 of the total delay of the
 * window's own (not old) strands. (Ubicloud's dispatcher indexes its unsorted array for
 * that last one; here it is the real p95.)
 *
 * The idle sleep after a scan that found nothing: queue x 0.75 / strands
 * per second (time to work off what is queued), at least the fraction of
 * free slots of the pool (an idle process scans less often), clamped to
 * [min, max].
 *
 * Pure functions over caller-owned memory; no shared state.
 */
#ifndef URT_DISPATCH_METRICS_H
#define URT_DISPATCH_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include <urt/dispatch.h>

struct dsample {
    uint64_t scan_delay_ns, queue_delay_ns, lease_delay_ns;
    uint32_t queue_size, free_slots;
    bool acquired, old_strand, lease_expired;
};

/* Summarizes samples s[0..n) (n >= 1) seen over elapsed_ns into the window
 * fields of *out (windows and the live counters are left alone). scratch
 * holds n values. */
void dmetrics_window(const struct dsample *s, uint32_t n, uint64_t elapsed_ns, uint64_t *scratch,
                     struct urt_dispatch_metrics *out);

/* The order statistics of v[0..n) (sorted in place). */
void dmetrics_dist(uint64_t *v, uint32_t n, struct urt_dispatch_dist *out);

/* The idle sleep (ns). */
uint64_t dispatch_sleep_ns(uint32_t queued, double strands_per_second, uint32_t free_slots, uint32_t pool,
                           uint64_t min_ns, uint64_t max_ns);

/* The takeover delay: base + 1.2 x the current strand delay. */
uint64_t dispatch_old_delay_ns(uint64_t base_ns, uint64_t current_delay_ns);

#endif
