/*
 * bpf/probes.h — the runtime's probe points (SPEC C18) and the gate that
 * decides when timestamps are taken (C17). Private; any layer may include it.
 *
 * Every event that matters has one macro or inline here. Each USDT probe
 * (provider "urt") is guarded by its semaphore, so a probe nobody attached
 * costs one load and a not-taken branch; the macros compile to nothing with
 * meson -Dprobes=false (URT_PROBES=0).
 *
 *   probe          arguments (all integers)                          fired by
 *   submit         worker|-1, task_id, enqueue_ns                    the submitter
 *   start          worker, task_id, enqueue_ns, start_ns             the worker
 *   done           worker, task_id, enqueue_ns, start_ns, end_ns     the worker
 *   steal          worker, victim, task_id                           the thief
 *   suspend        worker, timeout_ns                                the worker
 *   wake_sent      from|-1, to, sent_ns                              the waker
 *   wake_received  worker, sent_ns (0: not stamped), received_ns     the woken worker
 *   flush          worker, lsn, bytes                                the log (issue 5)
 *   durable        worker, lsn, flush_start_ns, durable_ns           the log
 *   commit_done    worker, kind (enum urt_latency_kind), submit_ns, done_ns
 *   blocking_submit   worker|-1, offload_id, enqueue_ns                 the submitter
 *   blocking_start    pool thread, offload_id, enqueue_ns, start_ns     the pool thread
 *   blocking_done     pool thread, offload_id, enqueue_ns, start_ns, end_ns
 *
 * Stamps are CLOCK_MONOTONIC ns (the clock of bpf_ktime_get_ns()). A stamp is
 * 0 when it was not taken (the consumer appeared after the event).
 * Task ids, like the stamps, are assigned only while task timestamps are
 * taken (0 or stale otherwise, e.g. in a steal event with only steal attached).
 * A layer that queues a task without sched_submit/sched_push_* must call
 * probe_task_submit() itself, or its queue delay is not measured.
 *
 * For the durability layer (issue 5): take stamps only when
 * probe_log_timing_on(); call probe_flush() / probe_durable() where the log
 * flushes and becomes durable; when a commit's response is delivered, call
 * probe_commit_done(&w->hists, w->index, URT_LAT_COMMIT_{ACCEPTED,AVAILABLE,
 * STORED}, submit_ns, urt_clock_ns()) on the worker that delivers it: it
 * records the latency in that worker's histogram of that kind (read back
 * through urt_stats_snapshot) and fires commit_done.
 *
 * ---- The gate (one load on the task path) ---------------------------------
 * The semaphores live in three 64-bit words (struct probe_gate, bpf/probes.c)
 * as 16-bit lanes; the assembler names each lane urt_<probe>_semaphore, so the
 * tools (libbpf, bpftrace) find and raise them as usual. Lane 0 of word 0 is
 * not a semaphore: it counts the live runtimes configured with
 * stats_timing=true. So "does anyone want task timestamps?" is one relaxed
 * load of word 0 (stats users | submit | start | done), on submit and on run.
 * Consequence: stats_timing of any runtime in the process turns stamps on for
 * every runtime in the process.
 *
 * Memory-ordering contract: the kernel (uprobe ref_ctr) writes the semaphore
 * lanes behind our back; we only read them, relaxed — a probe attached a
 * moment ago may be missed by an event in flight, which is acceptable. The
 * stats-users lane is changed with a relaxed fetch_add on the whole word (a
 * locked RMW cannot lose a concurrent kernel store to another lane, and the
 * count never carries out of its lane). urt__probes_fired is a relaxed
 * counter. Nothing here orders other memory.
 */
#ifndef URT_BPF_PROBES_H
#define URT_BPF_PROBES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <urt/stats.h>
#include <urt/task.h>

#include "base/clock.h"
#include "base/hist.h"

#ifndef URT_PROBES
#define URT_PROBES 1
#endif

#define URT__HIDDEN __attribute__((visibility("hidden")))

/* Word and lane of each gate entry (lane = 16 bits, little endian). */
#define PROBE_W_TASK 0 /* lanes: stats users, submit, start, done */
#define PROBE_W_WAKE 1 /* lanes: wake_sent, wake_received, steal, suspend */
#define PROBE_W_LOG 2  /* lanes: flush, durable, commit_done, (unused) */
#define PROBE_W_BLOCKING 3 /* lanes: blocking_submit, blocking_start, blocking_done, (unused) */

struct probe_gate {
    _Atomic uint64_t word[4];
};
extern struct probe_gate urt__probe_gate URT__HIDDEN;
extern _Atomic uint64_t urt__probes_fired URT__HIDDEN;

static inline uint64_t probe_word(int i)
{
    return atomic_load_explicit(&urt__probe_gate.word[i], memory_order_relaxed);
}

#define PROBE_LANE_ON(word, lane) (((probe_word(word) >> ((lane) * 16)) & 0xffffu) != 0)

/* Task timestamps wanted (stats_timing somewhere, or submit/start/done attached). */
static inline bool probe_timing_on(void)
{
    return probe_word(PROBE_W_TASK) != 0;
}

/* Wake timestamps wanted (stats, or wake_sent/wake_received attached). */
static inline bool probe_wake_timing_on(void)
{
    return (probe_word(PROBE_W_TASK) & 0xffffu) != 0 || (probe_word(PROBE_W_WAKE) & 0xffffffffu) != 0;
}

/* Log/commit timestamps wanted (stats, or flush/durable/commit_done attached). For issue 5. */
static inline bool probe_log_timing_on(void)
{
    return (probe_word(PROBE_W_TASK) & 0xffffu) != 0 || probe_word(PROBE_W_LOG) != 0;
}

/* Blocking pool timestamps wanted (stats, or a blocking_* probe attached). */
static inline bool probe_blocking_timing_on(void)
{
    return (probe_word(PROBE_W_TASK) & 0xffffu) != 0 || probe_word(PROBE_W_BLOCKING) != 0;
}

/* A runtime configured with stats_timing starts (+1) or stops (-1). Any thread. */
void probe_stats_users_add(int delta);

/* A task id unique in the process (per-thread sequence). Any thread. */
uint64_t probe_next_task_id(void);

/* Counts one fired probe (only reached when a semaphore is raised). */
static inline void probe_fired(void)
{
    atomic_fetch_add_explicit(&urt__probes_fired, 1, memory_order_relaxed);
}

#if URT_PROBES
#define _SDT_HAS_SEMAPHORES 1
#define STAP_SDT_ARG_CONSTRAINT nr
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>

extern volatile unsigned short urt_submit_semaphore URT__HIDDEN, urt_start_semaphore URT__HIDDEN,
    urt_done_semaphore URT__HIDDEN, urt_steal_semaphore URT__HIDDEN, urt_suspend_semaphore URT__HIDDEN,
    urt_wake_sent_semaphore URT__HIDDEN, urt_wake_received_semaphore URT__HIDDEN,
    urt_flush_semaphore URT__HIDDEN, urt_durable_semaphore URT__HIDDEN, urt_commit_done_semaphore URT__HIDDEN,
    urt_blocking_submit_semaphore URT__HIDDEN, urt_blocking_start_semaphore URT__HIDDEN,
    urt_blocking_done_semaphore URT__HIDDEN;

#define URT__PROBE(word, lane, name, ...)                                                                  \
    do {                                                                                                   \
        if (__builtin_expect(PROBE_LANE_ON(word, lane), 0)) {                                              \
            probe_fired();                                                                                 \
            STAP_PROBEV(urt, name, __VA_ARGS__);                                                           \
        }                                                                                                  \
    } while (0)
#else
/* Compiled out: the arguments are cast to void (no unused warnings, no code). */
#define URT__V1(a) (void)(a)
#define URT__V2(a, b) (void)(a), (void)(b)
#define URT__V3(a, b, c) URT__V2(a, b), (void)(c)
#define URT__V4(a, b, c, d) URT__V3(a, b, c), (void)(d)
#define URT__V5(a, b, c, d, e) URT__V4(a, b, c, d), (void)(e)
#define URT__NARG(...) URT__NARG_(__VA_ARGS__, 5, 4, 3, 2, 1, 0)
#define URT__NARG_(_1, _2, _3, _4, _5, n, ...) n
#define URT__CAT(a, b) URT__CAT_(a, b)
#define URT__CAT_(a, b) a##b
#define URT__PROBE(word, lane, name, ...)                                                                  \
    do {                                                                                                   \
        URT__CAT(URT__V, URT__NARG(__VA_ARGS__))(__VA_ARGS__);                                             \
    } while (0)
#endif

/* Casts keep the USDT argument sizes fixed (8 bytes, signed for worker ids). */
#define URT_PROBE_SUBMIT(worker_, id_, enq_)                                                                  \
    URT__PROBE(PROBE_W_TASK, 1, submit, (int64_t)(worker_), (uint64_t)(id_), (uint64_t)(enq_))
#define URT_PROBE_START(worker_, id_, enq_, start_)                                                            \
    URT__PROBE(PROBE_W_TASK, 2, start, (int64_t)(worker_), (uint64_t)(id_), (uint64_t)(enq_), (uint64_t)(start_))
#define URT_PROBE_DONE(worker_, id_, enq_, start_, end_)                                                        \
    URT__PROBE(PROBE_W_TASK, 3, done, (int64_t)(worker_), (uint64_t)(id_), (uint64_t)(enq_), (uint64_t)(start_), \
               (uint64_t)(end_))
#define URT_PROBE_WAKE_SENT(from_, to_, sent_)                                                                \
    URT__PROBE(PROBE_W_WAKE, 0, wake_sent, (int64_t)(from_), (int64_t)(to_), (uint64_t)(sent_))
#define URT_PROBE_WAKE_RECEIVED(worker_, sent_, received_)                                                    \
    URT__PROBE(PROBE_W_WAKE, 1, wake_received, (int64_t)(worker_), (uint64_t)(sent_), (uint64_t)(received_))
#define URT_PROBE_STEAL(worker_, victim_, id_)                                                                \
    URT__PROBE(PROBE_W_WAKE, 2, steal, (int64_t)(worker_), (int64_t)(victim_), (uint64_t)(id_))
#define URT_PROBE_SUSPEND(worker_, timeout_ns_)                                                              \
    URT__PROBE(PROBE_W_WAKE, 3, suspend, (int64_t)(worker_), (uint64_t)(timeout_ns_))
#define URT_PROBE_FLUSH(worker_, lsn_, bytes_)                                                                \
    URT__PROBE(PROBE_W_LOG, 0, flush, (int64_t)(worker_), (uint64_t)(lsn_), (uint64_t)(bytes_))
#define URT_PROBE_DURABLE(worker_, lsn_, flush_start_, durable_)                                               \
    URT__PROBE(PROBE_W_LOG, 1, durable, (int64_t)(worker_), (uint64_t)(lsn_), (uint64_t)(flush_start_),       \
               (uint64_t)(durable_))
#define URT_PROBE_COMMIT_DONE(worker_, kind_, submit_, done_)                                                  \
    URT__PROBE(PROBE_W_LOG, 2, commit_done, (int64_t)(worker_), (int64_t)(kind_), (uint64_t)(submit_),        \
               (uint64_t)(done_))

#define URT_PROBE_BLOCKING_SUBMIT(worker_, id_, enq_)                                                      \
    URT__PROBE(PROBE_W_BLOCKING, 0, blocking_submit, (int64_t)(worker_), (uint64_t)(id_), (uint64_t)(enq_))
#define URT_PROBE_BLOCKING_START(thread_, id_, enq_, start_)                                                \
    URT__PROBE(PROBE_W_BLOCKING, 1, blocking_start, (int64_t)(thread_), (uint64_t)(id_), (uint64_t)(enq_),    \
               (uint64_t)(start_))
#define URT_PROBE_BLOCKING_DONE(thread_, id_, enq_, start_, end_)                                           \
    URT__PROBE(PROBE_W_BLOCKING, 2, blocking_done, (int64_t)(thread_), (uint64_t)(id_), (uint64_t)(enq_),     \
               (uint64_t)(start_), (uint64_t)(end_))

/* ---- events that also feed the in-process histograms ----------------------------------- */

/* Per-worker histograms, one per enum urt_latency_kind. Owner-written. */
struct probe_hists {
    struct hist kind[URT_LAT_KINDS];
};

/* Slow paths (out of line and cold, in bpf/probes.c, so the hot loop's code
 * is the same whether the USDT sites are compiled in or not). */
struct probe_run;
void probe_task_submit_timed(struct urt_task *t, int worker) __attribute__((cold));
void probe_task_start_timed(uint32_t worker, const struct urt_task *t, struct probe_run *pr)
    __attribute__((cold));

/* At submission (any thread; worker = submitting worker or -1): stamps the
 * task when a consumer is on, else clears its stamp. One load when off. */
static inline void probe_task_submit(struct urt_task *t, int worker)
{
    if (__builtin_expect(probe_timing_on(), 0))
        probe_task_submit_timed(t, worker);
    else
        t->priv.enqueue_ns = 0;
}

/* What run_task keeps across fn (fn may free the task). */
struct probe_run {
    uint64_t id, enqueue_ns, start_ns, end_ns;
};

/* Before fn: true (and stamps taken, start fired) when a consumer is on. One
 * load when off. Worker only. */
static inline bool probe_task_start(uint32_t worker, const struct urt_task *t, struct probe_run *pr)
{
    pr->end_ns = 0; /* a stack store; keeps run_task's yield path simple */
    if (__builtin_expect(!probe_timing_on(), 1))
        return false;
    probe_task_start_timed(worker, t, pr);
    return true;
}

/* After fn, when probe_task_start returned true: stamps the end, records
 * queue delay and run time in the worker's histograms, fires done. Owner only. */
void probe_task_done(struct probe_hists *h, uint32_t worker, struct probe_run *pr) __attribute__((cold));

/* The woken worker reaped a wake message stamped sent_ns (0: not stamped):
 * records the wake latency, fires wake_received. Owner only. */
void probe_wake_received_timed(struct probe_hists *h, uint32_t worker, uint64_t sent_ns) __attribute__((cold));
static inline void probe_wake_received(struct probe_hists *h, uint32_t worker, uint64_t sent_ns)
{
    if (sent_ns != 0 || PROBE_LANE_ON(PROBE_W_WAKE, 1))
        probe_wake_received_timed(h, worker, sent_ns);
}

/* ---- the durability layer's events (issue 5) -------------------------------------------- */

/* The log of `worker` starts writing `bytes` up to `lsn`. Any thread that owns the log. */
void probe_flush(int worker, uint64_t lsn, uint64_t bytes);

/* The log is durable up to lsn (flush_start_ns: stamp of the flush, 0 if not taken). */
void probe_durable(int worker, uint64_t lsn, uint64_t flush_start_ns, uint64_t durable_ns);

/* A commit's response of the given kind (URT_LAT_COMMIT_*) was delivered on
 * this worker: records done_ns - submit_ns in h (the calling worker's
 * histograms; owner only) and fires commit_done. Stamps taken only when
 * probe_log_timing_on(); submit_ns 0 records nothing. */
void probe_commit_done(struct probe_hists *h, uint32_t worker, enum urt_latency_kind kind, uint64_t submit_ns,
                       uint64_t done_ns);

#endif
