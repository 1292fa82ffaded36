/*
 * runtime/stats.c — urt_stats_snapshot(): every worker's counters, read with
 * relaxed loads while the workers run (see urt/stats.h).
 */
#include <stdlib.h>
#include <string.h>

#include <urt/stats.h>

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
}

URT_API struct urt_stats *urt_stats_snapshot(const urt_runtime *rt)
{
    if (!rt)
        return NULL;
    const struct sched *s = &rt->sched;
    struct urt_stats *st = calloc(1, sizeof(*st) + s->n_workers * sizeof(st->workers[0]));
    if (!st)
        return NULL;
    st->n_workers = s->n_workers;
    st->foreign_wakes_sent = atomic_load_explicit(&s->foreign_wakes, memory_order_relaxed);
    st->total.node = st->total.cpu = -1;
    for (uint32_t i = 0; i < s->n_workers; i++) {
        sched_read_stats(s, i, &st->workers[i]);
        add(&st->total, &st->workers[i]);
    }
    return st;
}

URT_API void urt_stats_free(struct urt_stats *st)
{
    free(st);
}
