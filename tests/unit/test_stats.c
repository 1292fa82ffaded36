/*
 * tests/unit/test_stats.c — latency histograms (C17) and the probe gate (C18).
 *
 *  - the log-linear bucket layout against a reference model (every value lies
 *    in its bucket's bounds, buckets are contiguous, widths <= 1/16 of the
 *    lower bound) and percentiles of a known distribution;
 *  - stats_timing=false: no timestamps, empty histograms, and no probe fired
 *    (the semaphore check: nothing is attached, so probes_fired stays 0);
 *  - stats_timing=true: queue and run histograms count every task call,
 *    percentiles are ordered, a wake of a suspended worker is measured, and
 *    the gate closes again when the runtime is destroyed.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "bpf/probes.h"
#include "base/hist.h"
#include "tests/helpers.h"

Test(hist, buckets_match_reference_model, .timeout = 30)
{
    for (uint32_t i = 0; i + 1 < HIST_BUCKETS; i++) {
        cr_assert_eq(hist_bucket_high(i) + 1, hist_bucket_low(i + 1), "bucket %u not contiguous", i);
        uint64_t low = hist_bucket_low(i), width = hist_bucket_high(i) - low + 1;
        if (low >= 16)
            cr_assert_leq(width * 16, low, "bucket %u: width %llu too wide for %llu", i, (unsigned long long)width,
                          (unsigned long long)low);
    }
    uint64_t seed = 42;
    for (int n = 0; n < 200000; n++) {
        uint64_t v = n < 5000 ? (uint64_t)n : rng_next(&seed) >> (rng_next(&seed) % 64);
        uint32_t b = hist_bucket(v);
        cr_assert_lt(b, HIST_BUCKETS);
        cr_assert(v >= hist_bucket_low(b) && v <= hist_bucket_high(b), "%llu outside bucket %u [%llu, %llu]",
                  (unsigned long long)v, b, (unsigned long long)hist_bucket_low(b),
                  (unsigned long long)hist_bucket_high(b));
    }
}

Test(hist, percentiles_of_known_distribution, .timeout = 30)
{
    static struct hist h;
    memset(&h, 0, sizeof(h));
    for (uint64_t v = 1; v <= 100000; v++)
        hist_record(&h, v);
    static struct hist_sum s;
    memset(&s, 0, sizeof(s));
    hist_read_into(&h, &s);
    cr_assert_eq(s.count, 100000);
    cr_assert_eq(s.max_ns, 100000);
    const double ps[] = {50, 75, 85, 95, 99};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        double want = ps[i] * 1000;
        uint64_t got = hist_percentile(&s, ps[i]);
        cr_assert(got >= want && got <= want * 1.0625 + 1, "p%g = %llu, want %g (+6.25%%)", ps[i],
                  (unsigned long long)got, want);
    }
    cr_assert_eq(hist_percentile(&s, 100), 100000);
}

Test(hist, commit_kinds_record_in_their_slot, .timeout = 30)
{
    static struct probe_hists h;
    memset(&h, 0, sizeof(h));
    probe_commit_done(&h, 0, URT_LAT_COMMIT_STORED, 1000, 251000);
    probe_commit_done(&h, 0, URT_LAT_COMMIT_ACCEPTED, 1000, 2000);
    probe_commit_done(&h, 0, URT_LAT_QUEUE, 1000, 2000); /* not a commit kind: ignored */
    cr_assert_eq(atomic_load(&h.kind[URT_LAT_COMMIT_STORED].count), 1);
    cr_assert_eq(atomic_load(&h.kind[URT_LAT_COMMIT_STORED].max_ns), 250000);
    cr_assert_eq(atomic_load(&h.kind[URT_LAT_COMMIT_ACCEPTED].count), 1);
    cr_assert_eq(atomic_load(&h.kind[URT_LAT_QUEUE].count), 0);
    cr_assert_str_eq(urt_latency_kind_name(URT_LAT_COMMIT_AVAILABLE), "commit_available");
    cr_assert_null(urt_latency_kind_name(URT_LAT_KINDS));
}

static _Atomic uint64_t runs;

static enum urt_task_result yield_once(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&runs, 1);
    uintptr_t *state = arg;
    if (state && *state == 0) {
        *state = 1;
        return URT_TASK_YIELD;
    }
    return URT_TASK_DONE;
}

static enum urt_task_result count_run(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&runs, 1);
    return URT_TASK_DONE;
}

static struct urt_stats *snapshot_when_run(urt_runtime *rt, uint64_t calls)
{
    cr_assert(WAIT_UNTIL(({
                             struct urt_stats *s = urt_stats_snapshot(rt);
                             bool ok = s && s->total.tasks_run == calls &&
                                       s->total.latency[URT_LAT_RUN].count == (calls ? calls : 0);
                             urt_stats_free(s);
                             ok;
                         }),
                         10000),
              "tasks_run / run histogram never reached %llu", (unsigned long long)calls);
    return urt_stats_snapshot(rt);
}

Test(stats, timing_off_takes_no_stamps_and_fires_no_probe, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.stats_timing = false;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    atomic_store(&runs, 0);
    const int n = 2000;
    for (int i = 0; i < n; i++)
        cr_assert_eq(urt_spawn(rt, count_run, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&runs) == (uint64_t)n, 10000));
    cr_assert(WAIT_UNTIL(({
                             struct urt_stats *s = urt_stats_snapshot(rt);
                             bool ok = s->total.tasks_run == (uint64_t)n;
                             urt_stats_free(s);
                             ok;
                         }),
                         10000));
    struct urt_stats *st = urt_stats_snapshot(rt);
    cr_assert_not_null(st);
    cr_assert_not(st->timing, "nothing consumes stamps, yet timing is on");
    cr_assert_eq(st->probes_fired, 0, "no probe is attached, yet %llu probe events fired",
                 (unsigned long long)st->probes_fired);
    for (int k = 0; k < URT_LAT_KINDS; k++)
        cr_assert_eq(st->total.latency[k].count, 0, "%s histogram has %llu samples with timing off",
                     urt_latency_kind_name(k), (unsigned long long)st->total.latency[k].count);
    urt_stats_free(st);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(stats, timing_on_fills_histograms, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.stats_timing = true;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    atomic_store(&runs, 0);
    const int n = SCALE(5000, 1000);
    uintptr_t *state = calloc(n, sizeof(*state));
    cr_assert_not_null(state);
    for (int i = 0; i < n; i++)
        cr_assert_eq(urt_spawn(rt, yield_once, &state[i], 0), 0);
    struct urt_stats *st = snapshot_when_run(rt, 2ull * n); /* each task runs twice (one yield) */
    cr_assert(st->timing);
    cr_assert_eq(st->probes_fired, 0);
    const struct urt_latency *q = &st->total.latency[URT_LAT_QUEUE], *r = &st->total.latency[URT_LAT_RUN];
    cr_assert_eq(q->count, 2ull * n, "queue histogram: %llu samples for %d calls", (unsigned long long)q->count,
                 2 * n);
    cr_assert_eq(r->count, 2ull * n);
    uint64_t per_worker = 0;
    for (uint32_t w = 0; w < st->n_workers; w++) {
        cr_assert_eq(st->workers[w].latency[URT_LAT_RUN].count, st->workers[w].tasks_run);
        per_worker += st->workers[w].latency[URT_LAT_QUEUE].count;
    }
    cr_assert_eq(per_worker, q->count);
    const struct urt_latency *ls[] = {q, r};
    for (int i = 0; i < 2; i++) {
        const struct urt_latency *l = ls[i];
        cr_assert(l->p50_ns <= l->p75_ns && l->p75_ns <= l->p85_ns && l->p85_ns <= l->p95_ns &&
                      l->p95_ns <= l->p99_ns && l->p99_ns <= l->max_ns && l->mean_ns <= l->max_ns,
                  "percentiles out of order: %llu %llu %llu %llu %llu max %llu", (unsigned long long)l->p50_ns,
                  (unsigned long long)l->p75_ns, (unsigned long long)l->p85_ns, (unsigned long long)l->p95_ns,
                  (unsigned long long)l->p99_ns, (unsigned long long)l->max_ns);
        cr_assert_gt(l->max_ns, 0);
    }
    urt_stats_free(st);

    /* Wake latency: every worker suspended, then a submission from this thread wakes one. */
    cr_assert(rt_wait_all_sleeping(rt, 2, 10000), "workers did not suspend");
    uint64_t before = atomic_load(&runs);
    cr_assert_eq(urt_spawn(rt, count_run, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&runs) == before + 1, 10000));
    cr_assert(WAIT_UNTIL(({
                             struct urt_stats *s = urt_stats_snapshot(rt);
                             bool ok = s->total.latency[URT_LAT_WAKE].count >= 1;
                             urt_stats_free(s);
                             ok;
                         }),
                         10000),
              "a wake of a suspended worker was not measured");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    free(state);
    cr_assert_not(probe_timing_on(), "the gate stays open after the stats runtime is gone");
}

/* The start-up probe's choice is part of every snapshot (issue 2: "visible in
 * the statistics"), and it is the choice the runtime reports. */
Test(stats, snapshot_carries_the_ring_probe_result, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.ring_disable = URT_RING_DEFER_TASKRUN;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_features f;
    urt_runtime_features(rt, &f);
    struct urt_stats *s = urt_stats_snapshot(rt);
    cr_assert_not_null(s);
    cr_assert_eq(s->features.setup_flags, f.setup_flags);
    cr_assert_not(s->features.defer_taskrun, "DEFER_TASKRUN was masked");
    cr_assert_eq(s->features.ringless_msg, f.ringless_msg);
    cr_assert_eq(s->features.numa_nodes, f.numa_nodes);
    cr_assert_geq(s->features.numa_nodes, 1);
    urt_stats_free(s);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
