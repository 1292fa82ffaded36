/*
 * urt/stats.h — per-worker counters, readable while the runtime runs.
 *
 * Each worker writes only its own counters (relaxed stores by the owner, no
 * read-modify-write, no shared cache line); a snapshot reads them all with
 * relaxed loads, so a snapshot taken while tasks run is a consistent-enough
 * view of each counter, not of the set.
 *
 * Latency histograms follow the same rule: each worker records into its
 * own log-linear histograms (16 sub-buckets per power of two, so a percentile
 * is at most 6.25 % above the true value); a snapshot merges them on read.
 * Percentiles are the upper bound of the bucket holding the rank, capped at
 * the exact max. Timestamps (CLOCK_MONOTONIC) are taken only while a consumer
 * is on: any runtime of this process created with stats_timing=true (the
 * check is one load of a process-wide gate, so it turns stamps on for every
 * runtime in the process), or a USDT probe attached (urt-trace, bpftrace).
 * Otherwise the histograms stay empty and the hot path pays one load per
 * submission and per task call; with stamps, three clock reads per task
 * (bench/observability-overhead.md).
 */
#ifndef URT_STATS_H
#define URT_STATS_H

#include <urt/common.h>
#include <urt/runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Latency kinds. The commit kinds are the durability responses (urt/tx.h):
 * accepted, available (visible to readers), stored (durable). */
enum urt_latency_kind {
    URT_LAT_QUEUE = 0,             /* submit -> start of the task function */
    URT_LAT_RUN = 1,               /* one call of the task function */
    URT_LAT_WAKE = 2,              /* wake message sent -> received by the woken worker */
    URT_LAT_COMMIT_ACCEPTED = 3,   /* commit submitted -> accepted */
    URT_LAT_COMMIT_AVAILABLE = 4,  /* commit submitted -> available */
    URT_LAT_COMMIT_STORED = 5,     /* commit submitted -> stored (durable) */
    URT_LAT_KINDS = 6
};

/* Summary of one latency histogram, in nanoseconds (all 0 when count is 0). */
struct urt_latency {
    uint64_t count;
    uint64_t mean_ns;
    uint64_t p50_ns, p75_ns, p85_ns, p95_ns, p99_ns;
    uint64_t max_ns;
};

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
    uint64_t wake_failures;  /* wake messages it could not send at once (each retried) */
    uint64_t lanes_moved;    /* active lanes it handed to an idle peer between two batches
                                (urt/lane.h: a busy worker sheds lanes to an idle one) */
    uint64_t spin_polls;     /* empty polls it makes now before it suspends after a lone wake:
                                adaptive, at most worker_try_count, fewer while its suspensions
                                last long (urt/config.h worker_spin_adaptive; a worker fed a
                                stream spins worker_try_count; a gauge: the total has the largest) */
    int32_t node;            /* NUMA node it is placed on (-1: none) */
    int32_t cpu;             /* CPU it is bound to (-1: not bound to one CPU) */
    bool sleeping;           /* suspended right now */
    struct urt_latency latency[URT_LAT_KINDS]; /* indexed by enum urt_latency_kind */
};

struct urt_stats {
    uint32_t n_workers;
    uint64_t foreign_wakes_sent; /* wake messages sent by threads that are not workers */
    uint64_t foreign_wake_failures; /* ... that could not be sent at once (each retried) */
    uint64_t probes_fired;       /* USDT probe events fired in this process (0 unless attached) */
    bool timing;                 /* timestamps are being taken right now (stats_timing or a probe) */
    struct urt_features features; /* what the start-up probe chose, and which backend runs (urt_runtime_features) */
    struct urt_worker_stats total; /* sum over workers (node, cpu = -1); latency: merged histograms */
    struct urt_worker_stats workers[]; /* n_workers entries */
};

/* A snapshot of every counter; free it with urt_stats_free(). NULL when rt is
 * NULL (-EINVAL) or on -ENOMEM, with a message in urt_last_error(). Any
 * thread. */
URT_API struct urt_stats *urt_stats_snapshot(const urt_runtime *rt);
/* Frees a snapshot of urt_stats_snapshot(); NULL is a no-op. The snapshot
 * is the caller's memory: it outlives the runtime. Any thread. */
URT_API void urt_stats_free(struct urt_stats *stats);

/* "queue", "run", "wake", "commit_accepted", "commit_available",
 * "commit_stored"; NULL for an unknown kind. Any thread. */
URT_API const char *urt_latency_kind_name(enum urt_latency_kind kind);

#ifdef __cplusplus
}
#endif

#endif
