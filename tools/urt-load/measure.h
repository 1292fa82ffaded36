/*
 * tools/urt-load/measure.h — how urt-load measures: the rules of
 * docs/benchmarks.md sections 1 and 2, written for urt-load (nothing here is
 * copied from the peer harness's code, which is not part of the repository;
 * the rules, constants and output format are the same so that urt's numbers
 * read as ratios against the peers', docs/benchmarks.md section 5).
 *
 * What lives here:
 *  - the constants of the workload spec (WARMUP, ITERS, SPAWN_N, ...);
 *  - process CPU time (the clock is urt_now_ns(): CLOCK_MONOTONIC, like every peer);
 *  - a one-waiter futex event: only the external (main) thread waits;
 *  - the completion counter of section 2 (the unit that brings the count to
 *    the target takes t1 and wakes the external thread);
 *  - the throughput driver (WARMUP untimed + ITERS timed iterations, IDLE_MS
 *    of idle sleep before each, median of the ITERS rates) and the latency
 *    report (nearest-rank percentiles, cpu_pct);
 *  - the result line format: stdout `urt <workload> <metric> <value> <unit>`
 *    (rates integer, latencies 2 decimals, cpu_pct 1 decimal), details as
 *    `# ...` lines on stderr.
 *
 * Memory ordering, once for the file:
 *  - measure_event_set() stores 1 with release, then FUTEX_WAKE;
 *    measure_event_wait() consumes it with an acquire exchange, so every write
 *    of the setting task before the set (t0, t1, mailbox checks, failure
 *    flags) is visible to the external thread after the wait returns.
 *  - The completion count is a fetch_add with acq_rel: the unit that reaches
 *    the target has acquired every earlier unit's writes, then releases them
 *    all through the event.
 *  - t0 / t1 are relaxed atomics: they are ordered by the event above; atomic
 *    only so that no plain variable is written by one thread and read by
 *    another.
 *
 * Threads: the event and counter are written by tasks on workers (any
 * thread) and waited on by the external thread only; everything else is
 * called by the external thread.
 */
#ifndef URT_LOAD_MEASURE_H
#define URT_LOAD_MEASURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <urt/common.h>

/* ---- the workload spec's constants (docs/benchmarks.md section 2) --------- */
#define WARMUP 2          /* untimed iterations */
#define ITERS 10          /* timed iterations; the median is reported */
#define IDLE_MS 10        /* idle sleep of the external thread before every iteration */
#define START_SLEEP_MS 50 /* sleep between creating the runtime and the workload */
#define SPAWN_N 10000     /* spawn_many_local, spawn_many_remote */
#define YIELDS 1000       /* yield_many: yields per task (2 * WORKERS tasks) */
#define PP_ROUNDS 1000    /* ping_pong: timed round trips (+ 1 untimed handshake) */
#define CHAIN_DEPTH 1000  /* chained_spawn */
#define WL_WARMUP 100     /* wake_latency: discarded samples */
#define WL_SAMPLES 10000  /* wake_latency: kept samples */
#define WL_GAP_US 200     /* wake_latency: nanosleep before each sample */
#define WLP_WARMUP 50     /* wake_latency_parked: discarded samples */
#define WLP_SAMPLES 2000  /* wake_latency_parked: kept samples */
#define WLP_GAP_US 2000   /* wake_latency_parked: nanosleep before each sample */

#define WORKERS_DEFAULT 2 /* WORKERS unset */

/* The peer name of every result line. */
#define MEASURE_PEER "urt"

/* ---- clock ----------------------------------------------------------------- */

/* The clock is urt's, urt_now_ns() (urt/common.h): CLOCK_MONOTONIC in ns,
 * the clock of every peer and of every stamp urt takes itself. */

/* Process CPU time (user + sys, all threads) in ns. Any thread. */
uint64_t measure_cpu_ns(void);

/* text is a whole number (decimal digits only) in lo..hi: *out, true. */
bool measure_parse_u64(const char *text, uint64_t lo, uint64_t hi, uint64_t *out);

/* A whole number from the environment variable name, lo..hi; def when unset
 * or empty. Anything else (a sign, a unit, a fraction, out of range) exits 2,
 * urt-load's bad-setting status, with a message naming the variable and the
 * range: a typo must not run the workload with its default. */
uint64_t measure_env_u64(const char *workload, const char *name, uint64_t def, uint64_t lo, uint64_t hi);

/* A numeric setting of a workload: its variable, default and range
 * (workloads.h rule 5 lists them so that main.c checks them first). */
struct wl_setting {
    const char *name;
    uint64_t def, lo, hi;
};

/* measure_env_u64 with s's variable, default and range. */
uint64_t measure_setting(const char *workload, const struct wl_setting *s);

/* Sleeps us microseconds (relative nanosleep, default timer slack),
 * restarting after signals. Any thread. */
void measure_sleep_us(uint64_t us);

/* ---- one-waiter event ------------------------------------------------------ */

struct measure_event {
    atomic_int word; /* 1: set and not yet consumed */
};

/* Sets the event and wakes its waiter. Any thread. */
void measure_event_set(struct measure_event *ev);

/* Blocks until the event is set, then clears it. One waiter: the external
 * thread. */
void measure_event_wait(struct measure_event *ev);

/* ---- completion counter (section 2 "Completion") ---------------------------- */

struct measure_done {
    _Alignas(64) atomic_uint_fast64_t count; /* finished units */
    _Atomic uint64_t target;   /* written by the external thread before the
                                  iteration's first submission (published by it) */
    _Alignas(64) _Atomic uint64_t t0, t1;
    atomic_bool failed;        /* a correctness check failed */
    struct measure_event event;
};

/* Resets for one iteration of target units. External thread, while no task
 * of the previous iteration can still count. */
void measure_done_reset(struct measure_done *d, uint64_t target);

/* Counts one finished unit; the unit that reaches the target takes t1 and
 * sets the event. Any thread (a task). */
static inline void measure_done_count(struct measure_done *d)
{
    /* target is read before the increment, so the read happens before the
     * external thread's next reset (it is released by this increment). */
    uint64_t target = atomic_load_explicit(&d->target, memory_order_relaxed);
    /* acq_rel: pairs with the other units' increments (see the file top). */
    if (atomic_fetch_add_explicit(&d->count, 1, memory_order_acq_rel) + 1 == target) {
        atomic_store_explicit(&d->t1, urt_now_ns(), memory_order_relaxed);
        measure_event_set(&d->event);
    }
}

/* Stores t0 := now. Any thread (the root task's first action). */
static inline void measure_done_start(struct measure_done *d)
{
    atomic_store_explicit(&d->t0, urt_now_ns(), memory_order_relaxed);
}

/* Marks the iteration failed (a correctness check, or a submission error
 * that means the target can never be reached), prints the reason as a `#`
 * line, and sets the event so the external thread does not wait forever.
 * Any thread. */
void measure_done_fail(struct measure_done *d, const char *workload, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- drivers and reports -------------------------------------------------- */

/* Records the worker count shown in the `#` detail lines. External thread,
 * before the workload. */
void measure_init(unsigned workers);

/* One iteration of a throughput workload: runs it and returns t1 - t0 in ns,
 * or 0 when it failed (the reason already printed). External thread. */
typedef uint64_t measure_iteration_fn(void *ctx);

/* Runs WARMUP + ITERS iterations, each after IDLE_MS of sleep; the rate of a
 * timed iteration is units / (t1 - t0). Prints the result line (median of the
 * ITERS rates) and a `#` detail line. Returns 0, or 1 if an iteration failed
 * (then nothing is printed on stdout). External thread. */
int measure_throughput(const char *workload, const char *metric, const char *unit, double units,
                       measure_iteration_fn *iteration, void *ctx);

/* Median of n values (mean of the two middle ones when n is even); sorts v. */
double measure_median(double *v, size_t n);

/* Nearest-rank percentile of n sorted values, p in per mille:
 * sorted[ceil(n * p / 1000) - 1]. n > 0. */
uint64_t measure_percentile(const uint64_t *sorted, size_t n, unsigned permille);

/* Sorts the n latencies (ns) and prints the p50/p99/p999 lines, the cpu_pct
 * line and a `#` detail line. External thread. */
void measure_report_latency(const char *workload, uint64_t *lat_ns, size_t n, double cpu_pct);

/* Prints a `# urt <workload>: ...` detail line on stderr. Any thread. */
void measure_note(const char *workload, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A "# peer workload: what: w0 N (x%), w1 M (y%), ..." line for per-worker
 * counts (workers with a count of 0 are left out when skip_zero). */
void measure_note_spread(const char *workload, const char *what, const uint64_t *per, unsigned n, bool skip_zero);
/* The runtime's counters between two snapshots (NULL: nothing), and the
 * tasks_run of each worker (where the tasks ran). */
struct urt_stats;
void measure_stats_delta(const char *workload, const struct urt_stats *a, const struct urt_stats *b);

#endif
