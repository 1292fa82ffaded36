/*
 * urt/stats.h — per-worker counters (C17), readable while the runtime runs.
 *
 * Each worker writes only its own counters (relaxed stores by the owner, no
 * read-modify-write, no shared cache line); a snapshot reads them all with
 * relaxed loads, so a snapshot taken while tasks run is a consistent-enough
 * view of each counter, not of the set.
 */
#ifndef URT_STATS_H
#define URT_STATS_H

#include <urt/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct urt_worker_stats {
    uint64_t tasks_run;      /* task function calls (a yielded task counts once per call) */
    uint64_t tasks_stolen;   /* tasks this worker stole from others */
    uint64_t steal_attempts; /* steal tries on victims whose deque was not empty (won or lost) */
    uint64_t suspends;       /* times it suspended in its ring */
    uint64_t wakes_sent;     /* wake messages this worker sent to others */
    uint64_t wakes_received; /* wake messages it received */
    uint64_t inbox_drains;   /* times it took work from its inbox */
    uint64_t sticky_runs;    /* tasks run from its sticky queue */
    uint64_t yields;         /* URT_TASK_YIELD returns */
    uint64_t io_submitted;   /* SQEs it submitted (wakes, timers, I/O) */
    uint64_t tasks_cancelled;/* tasks it cancelled at shutdown */
    int32_t node;            /* NUMA node it is placed on (-1: none) */
    int32_t cpu;             /* CPU it is bound to (-1: not bound to one CPU) */
    bool sleeping;           /* suspended right now */
};

struct urt_stats {
    uint32_t n_workers;
    uint64_t foreign_wakes_sent; /* wake messages sent by threads that are not workers */
    struct urt_worker_stats total; /* sum over workers (node, cpu = -1) */
    struct urt_worker_stats workers[]; /* n_workers entries */
};

/* A snapshot of every counter; free it with urt_stats_free(). NULL on -ENOMEM.
 * Any thread. */
URT_API struct urt_stats *urt_stats_snapshot(const urt_runtime *rt);
URT_API void urt_stats_free(struct urt_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
