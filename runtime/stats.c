/*
 * runtime/stats.c — urt_stats_snapshot(): every worker's counters and latency
 * histograms, read with relaxed loads while the workers run (see urt/stats.h
 * and the contract in base/hist.h). The total's percentiles come from the
 * merged histograms, not from the workers' percentiles.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <urt/stats.h>

#include "bpf/probes.h"
#include "runtime/runtime.h"

static void add(struct urt_worker_stats *t, const struct urt_worker_stats *w)
{
    t->tasks_run += w->tasks_run;
    t->tasks_stolen += w->tasks_stolen;
    t->steal_attempts += w->steal_attempts;
    t->suspends += w->suspends;
    t->wakes_sent += w->wakes_sent;
    t->wakes_received += w->wakes_received;
    t->inbox_drains += w->inbox_drains;
    t->sticky_runs += w->sticky_runs;
    t->yields += w->yields;
    t->io_submitted += w->io_submitted;
    t->tasks_cancelled += w->tasks_cancelled;
    t->wake_failures += w->wake_failures;
    t->lanes_moved += w->lanes_moved;
    if (w->spin_polls > t->spin_polls)
        t->spin_polls = w->spin_polls; /* a gauge: the total has the largest */
}

static void summarize(const struct hist_sum *h, struct urt_latency *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t n = 0;
    for (uint32_t i = 0; i < HIST_BUCKETS; i++)
        n += h->bucket[i];
    if (n == 0)
        return;
    out->count = n;
    out->mean_ns = h->sum_ns / (h->count ? h->count : n);
    out->p50_ns = hist_percentile(h, 50);
    out->p75_ns = hist_percentile(h, 75);
    out->p85_ns = hist_percentile(h, 85);
    out->p95_ns = hist_percentile(h, 95);
    out->p99_ns = hist_percentile(h, 99);
    out->max_ns = h->max_ns;
}

/* Per-worker summaries, and the merged histograms into totals[]. */
static int read_latencies(const struct sched *s, struct urt_stats *st)
{
    struct hist_sum *one = malloc(sizeof(*one));
    struct hist_sum *totals = calloc(URT_LAT_KINDS, sizeof(*totals));
    if (!one || !totals) {
        free(one);
        free(totals);
        return -1;
    }
    for (uint32_t i = 0; i < s->n_workers; i++) {
        const struct probe_hists *h = &s->workers[i]->hists;
        for (int k = 0; k < URT_LAT_KINDS; k++) {
            memset(one, 0, sizeof(*one));
            hist_read_into(&h->kind[k], one);
            summarize(one, &st->workers[i].latency[k]);
            hist_sum_add(&totals[k], one);
        }
    }
    for (int k = 0; k < URT_LAT_KINDS; k++)
        summarize(&totals[k], &st->total.latency[k]);
    free(one);
    free(totals);
    return 0;
}

URT_API struct urt_stats *urt_stats_snapshot(const urt_runtime *rt)
{
    if (!rt) {
        urt__error(-EINVAL, "urt_stats_snapshot: rt is NULL");
        return NULL;
    }
    const struct sched *s = &rt->sched;
    struct urt_stats *st = calloc(1, sizeof(*st) + s->n_workers * sizeof(st->workers[0]));
    if (!st) {
        urt__error(-ENOMEM, "urt_stats_snapshot: out of memory");
        return NULL;
    }
    st->n_workers = s->n_workers;
    urt_runtime_features(rt, &st->features);
    st->foreign_wakes_sent = atomic_load_explicit(&s->foreign_wakes, memory_order_relaxed);
    st->foreign_wake_failures = atomic_load_explicit(&s->foreign_wake_failures, memory_order_relaxed);
    st->probes_fired = atomic_load_explicit(&urt__probes_fired, memory_order_relaxed);
    st->timing = probe_timing_on();
    st->total.node = st->total.cpu = -1;
    for (uint32_t i = 0; i < s->n_workers; i++) {
        sched_read_stats(s, i, &st->workers[i]);
        add(&st->total, &st->workers[i]);
    }
    if (read_latencies(s, st)) {
        free(st);
        urt__error(-ENOMEM, "urt_stats_snapshot: out of memory");
        return NULL;
    }
    return st;
}

URT_API void urt_stats_free(struct urt_stats *st)
{
    free(st);
}

URT_API const char *urt_latency_kind_name(enum urt_latency_kind kind)
{
    static const char *const names[URT_LAT_KINDS] = {
        "queue", "run", "wake", "commit_accepted", "commit_available", "commit_stored",
    };
    return (unsigned)kind < URT_LAT_KINDS ? names[kind] : NULL;
}
