/*
 * urt/blocking.h — blocking work: a function that blocks (a
 * compression or crypto library on a large buffer, a file API with no ring
 * operation, getaddrinfo, a third-party client library) runs on a pool of
 * threads that are not workers, and the task that handed it over goes on in
 * a continuation that runs on a worker when the function returned. Meanwhile
 * the worker runs other tasks and its ring keeps serving wake-ups, I/O and
 * log flushes. Tokio's spawn_blocking(f).await, in C.
 *
 * An offload is a struct urt_blocking the caller embeds in its own object (no
 * allocation per offload): urt_blocking_init() once, then urt_blocking_submit()
 * for each offload. fn(arg) runs on a pool thread and returns a 64-bit
 * result; done(b, res, arg) is the continuation, on a worker, with that
 * result. urt_blocking_spawn() is the allocating form.
 *
 *     struct req { struct urt_blocking b; const char *host; struct addrinfo *ai; int err; };
 *
 *     static int64_t resolve(void *arg)              // a pool thread: may block
 *     {
 *         struct req *r = arg;
 *         return getaddrinfo(r->host, "5432", NULL, &r->ai);
 *     }
 *     static void resolved(struct urt_blocking *b, int64_t res, void *arg)   // a worker
 *     {
 *         struct req *r = arg;             // res: getaddrinfo's result, or -ECANCELED
 *         ...
 *     }
 *     ...  urt_blocking_init(&r->b, resolve, resolved, r);
 *          urt_blocking_submit(rt, &r->b, 0);       // from a task (or any thread)
 *
 * Where the continuation runs (the submitting task's context is captured at
 * submission, as for I/O, urt/io.h):
 *   - a task of a lane (urt/lane.h), of a transaction (urt/tx.h) or of a
 *     serial job: on that lane, and the lane HOLDS until the continuation
 *     returned: the lane's next task does not start before it (the offload
 *     is part of the task that made it, as if the task had run the function
 *     itself). A lane task may make several offloads; the lane holds until
 *     every one's continuation ran, and the continuations run one at a time,
 *     in the order their functions returned, before any other task of the
 *     lane (a task of the lane that yielded resumes after them);
 *   - a task of a job (urt/job.h): as a task of that job; the offload is live
 *     work of the job from submission until its continuation returned, so the
 *     job's completion waits for it;
 *   - a task of a transaction: the transaction counts the offload as a task
 *     in flight until its continuation returned (a commit waits for it; an
 *     abort cancels it if its function has not started);
 *   - a plain task: as a task on the submitting worker (its inbox: another
 *     worker may take it when that one is busy);
 *   - a thread that is not a worker (or a pool thread): on the worker
 *     urt_task_submit would pick for the calling thread.
 *
 * Lifecycle of a struct urt_blocking (numbered rules):
 *  1. urt_blocking_init() prepares it; the caller owns it.
 *  2. A successful urt_blocking_submit() makes it in flight: from then until
 *     done is called, do not modify, resubmit or free it.
 *  3. fn runs at most once per submission, on a pool thread: never on a
 *     worker, never on a ring. It may block and call any blocking API; it may
 *     submit tasks, lanes' and jobs' tasks as any thread may; it must not call
 *     functions documented "worker only", nor destroy the runtime.
 *  4. done is called exactly once per successful submission, with res = fn's
 *     return value, or -ECANCELED when fn never ran (its job was cancelled,
 *     its transaction aborted, or the runtime was destroyed in cancel mode,
 *     before a pool thread took it); urt_blocking_ran() tells the two apart
 *     when fn itself may return -ECANCELED. From the call of done on, b is
 *     the caller's again: done may free it, or submit it again (the usual way
 *     to loop). done runs as a task: it must not block (rule 3 of
 *     urt/task.h's tasks applies: offload what blocks).
 *  5. A failed submission (-errno) leaves b with the caller; neither fn nor
 *     done will be called.
 *  6. The pool: threads are created on demand — a submission that finds no
 *     idle pool thread starts one — up to blocking_threads_max (urt/config.h;
 *     default 512, as Tokio's); an idle thread exits after
 *     blocking_keepalive_ms without work (default 10 s), but
 *     blocking_threads_min threads (default 0) stay, started with the
 *     runtime. The threads are named urt-blk-<n>; where the topology has
 *     several NUMA nodes (placement numa or core) each node has its own
 *     threads, bound to the node's CPUs, and an offload runs on the node of
 *     the submitting worker (from another thread: of the worker its
 *     continuation goes to). An idle thread spins briefly before
 *     it parks, so a hand-off in a stream of offloads costs no system call.
 *  7. Admission: at most blocking_queue_max offloads wait for a thread at a
 *     time; beyond it a submission fails with -EAGAIN, or, with
 *     URT_SUBMIT_BLOCK from a thread that is neither a worker nor one of the
 *     runtime's own threads (the watcher, a pool thread), waits for room,
 *     first come first served (as max_pending_tasks, urt/admission.h). A worker
 *     never waits: not for room, not for a pool thread. Offloads do not
 *     count in max_pending_tasks; their continuations are exempt from it, as
 *     I/O continuations are.
 *  8. Cancellation: an offload whose job is cancelled (urt_job_cancel, a
 *     deadline) or whose transaction aborts, and whose function has not
 *     started, is taken out of the queue: fn never runs, done gets
 *     -ECANCELED (on a worker, in the task's context, as usual). A function
 *     that started runs to its end (a thread cannot be interrupted); its
 *     continuation then runs as a task of the cancelled job (done still gets
 *     fn's result).
 *  9. Shutdown: from the moment urt_runtime_destroy() starts, submissions
 *     from threads that are not workers fail with -ESHUTDOWN (and those
 *     waiting for room return -ESHUTDOWN); tasks that still run during a
 *     drain may offload. URT_SHUTDOWN_DRAIN waits for every offload, queued
 *     or running, and runs its continuation on a worker. URT_SHUTDOWN_CANCEL
 *     takes the queued ones out (done gets -ECANCELED) and waits for the
 *     running ones; those continuations run before destroy returns, like
 *     every cancelled task's callback: on the destroying thread. destroy
 *     then stops the pool's threads.
 * 10. The watchdog (task_runtime_limit_us, urt/watchdog.h) watches the pool
 *     threads too: a function running longer than the limit is reported once
 *     (struct urt_watchdog_report.pool_thread >= 0, .blocking = b).
 */
#ifndef URT_BLOCKING_H
#define URT_BLOCKING_H

#include <urt/common.h>
#include <urt/stats.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct urt_blocking;

/* The function that blocks (rule 3): runs on a pool thread; its return value
 * is the continuation's res. */
typedef int64_t urt_blocking_fn(void *arg);
/* The continuation (rule 4): runs on a worker with fn's result or -ECANCELED. */
typedef void urt_blocking_done_fn(struct urt_blocking *b, int64_t res, void *arg);

/* Runtime-private part of an offload: do not touch. */
struct urt_blocking_private {
    uint64_t words[16];
};

struct urt_blocking {
    urt_blocking_fn *fn;
    urt_blocking_done_fn *done;
    void *arg;
    struct urt_blocking_private priv;
};

/* Flags of urt_blocking_submit / urt_blocking_spawn: URT_SUBMIT_BLOCK (urt/task.h;
 * rule 7). */
#define URT_BLOCKING_FLAGS_ALL URT_SUBMIT_BLOCK

/* Prepares b to run fn(arg) on a pool thread and then done(b, res, arg) on a
 * worker (rule 1). A NULL b is ignored. Any thread. */
URT_API void urt_blocking_init(struct urt_blocking *b, urt_blocking_fn *fn, urt_blocking_done_fn *done,
                               void *arg);

/* Offloads b (rules 2-9): fn runs on a pool thread, done on a worker in the
 * calling task's context (module comment, "Where the continuation runs").
 * No allocation; never waits for a pool thread. Returns 0, -EINVAL (NULL rt
 * or b, NULL b->fn or b->done, unknown flags), -EBUSY
 * (b is in flight: rule 2), -EAGAIN (blocking_queue_max offloads wait
 * already, or no pool thread could be started and none runs), -ECANCELED (the
 * calling task's job was cancelled, or its transaction is ending),
 * -ESHUTDOWN (the runtime is being destroyed: rule 9). Any thread. */
URT_API int urt_blocking_submit(urt_runtime *rt, struct urt_blocking *b, unsigned flags);

/* The allocating form: runs fn(arg), then done(b, res, arg) with a b that the
 * runtime owns and frees when done returns (done must not keep or resubmit
 * it). Same returns as urt_blocking_submit (a NULL fn or done instead of
 * b's), plus -ENOMEM. Any thread. */
URT_API int urt_blocking_spawn(urt_runtime *rt, urt_blocking_fn *fn, urt_blocking_done_fn *done, void *arg,
                               unsigned flags);

/* True when the function of b's last submission ran (its continuation's res
 * is fn's result), false when it never ran (res is -ECANCELED: rule 4) or b
 * was never submitted. Meant for done; any thread. */
URT_API bool urt_blocking_ran(const struct urt_blocking *b);

/* The pool's counters and latencies. The runtime's own offloads count too:
 * the write-ahead log makes each channel's next segment file on the pool
 * (urt/log.h, log_segment_kb), so that no worker waits for its syncs. */
struct urt_blocking_stats {
    uint64_t threads;          /* pool threads alive now */
    uint64_t threads_idle;     /* of which waiting for work (spinning or parked) */
    uint64_t threads_started;  /* created since the runtime started */
    uint64_t threads_exited;   /* exited after blocking_keepalive_ms idle */
    uint64_t queued;           /* offloads waiting for a thread now */
    uint64_t running;          /* functions running now */
    uint64_t done;             /* functions that ran (returned) */
    uint64_t cancelled;        /* offloads whose function never ran (rule 8, destroy) */
    uint64_t rejected;         /* submissions refused with -EAGAIN (queue full) */
    uint64_t blocked;          /* submissions that waited for room (URT_SUBMIT_BLOCK) */
    uint64_t max_queued;       /* the most offloads that waited at once */
    uint64_t queue_max;        /* blocking_queue_max */
    uint32_t threads_max, threads_min; /* blocking_threads_max, blocking_threads_min */
    uint32_t nodes;            /* NUMA nodes with threads of their own (1: one pool) */
    /* Timed only while timestamps are taken (stats_timing, or a probe attached;
     * urt/stats.h): submission -> the function starts, and the function's run. */
    struct urt_latency queue_wait;
    struct urt_latency run_time;
};

/* Reads the pool's statistics. Returns 0 or -EINVAL (NULL rt or out). Any
 * thread (counters read while they move: a consistent-enough view). */
URT_API int urt_blocking_stats(const urt_runtime *rt, struct urt_blocking_stats *out);

#ifdef __cplusplus
}
#endif

#endif
