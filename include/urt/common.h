/*
 * urt/common.h — conventions shared by every public header.
 *
 * Error convention (everywhere in urt): a function returns 0 or a count on
 * success and -errno on failure; it never sets errno.  Every call that fails
 * (whatever the errno) records a one-line message for urt_last_error(),
 * starting with the function's name and naming the offending argument, field,
 * value or state; the message is per thread and stays valid until the
 * thread's next failing urt call. Each function's comment lists every errno
 * it returns (tests/unit/test_errors.c checks both). A status that is not a
 * failure of the call (urt_job_poll's -EINPROGRESS, a job's own status
 * returned by urt_job_poll/urt_job_wait) records nothing.
 *
 * Names (the rules the whole API follows):
 *  - urt_<object>_<verb>: urt_lane_submit, urt_job_cancel; a function that
 *    takes a handle of an object family carries the family's name
 *    (urt_dispatch_run_done takes a struct urt_dispatch_run).
 *  - An extended form of a function (more arguments or flags) is the same
 *    name with _ex: urt_spawn_ex, urt_io_init_ex.
 *  - Arguments go target first, then what is submitted, then flags: the
 *    runtime, lane, job or transaction; for the _to and _at forms the worker
 *    or the time right after the runtime (urt_task_submit_to(rt, worker,
 *    task, flags), urt_spawn_at(rt, due_ns, fn, cancel, arg, flags)); the
 *    callbacks' argument right after the callbacks; an out parameter last.
 *  - Teardown verbs: destroy ends an object the caller created that owns
 *    threads, rings, connections or queued work, and waits or refuses while
 *    it is busy (urt_runtime_destroy, urt_lane_destroy, urt_bufring_destroy,
 *    urt_dispatch_destroy); release gives back a handle of an object that
 *    lives on until it ended (urt_job_release, urt_tx_release,
 *    urt_graph_release, urt_batch_release; urt_graph_unit_release gives a
 *    unit back to its exchange); free returns plain memory the library
 *    handed to the caller (urt_stats_free). Each accepts NULL as a no-op
 *    where its comment says so.
 *  - Names renamed before 1.0 are kept for one release in urt/deprecated.h
 *    (man page urt_deprecated(3)).
 *
 * Misuse: everything that can be detected while the caller holds a valid
 * handle is (an ended job, a transaction after its end, a lane being
 * destroyed, a cond already cancelled), with an errno and a message; using a
 * handle after it was released or destroyed is undefined behaviour.
 *
 * A call that takes a callback and fails never runs the callback; a call that
 * succeeds runs it exactly once.
 *
 * Thread contract tags used in the doc comments:
 *   "any thread"   — safe from workers and from threads that are not workers;
 *   "worker only"  — must be called from a task running on a worker of the runtime;
 *   "owner only"   — only the thread that created the object.
 */
#ifndef URT_COMMON_H
#define URT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(URT_BUILDING_LIBRARY)
#define URT_API __attribute__((visibility("default")))
#else
#define URT_API
#endif

/* Marks a name kept for one release after it was renamed (urt/deprecated.h):
 * a call compiles with a warning naming the replacement. */
#if defined(__GNUC__) || defined(__clang__)
#define URT_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define URT_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_runtime urt_runtime;

/* The message of the calling thread's last failing urt call ("" if none):
 * the one way every urt function says why it failed (a call that succeeds
 * leaves it as it was). Any thread. */
URT_API const char *urt_last_error(void);

/* CLOCK_MONOTONIC in nanoseconds: the clock every urt timestamp uses (the same
 * clock as bpf_ktime_get_ns()). Any thread. */
URT_API uint64_t urt_now_ns(void);

/* Runtime-private: a timer of the runtime's timer facility, embedded in the
 * public structs that need one (struct urt_cond). Do not touch its fields;
 * a zeroed one is valid. */
struct urt_timer_private {
    uint64_t due;
    void (*fn)(struct urt_timer_private *t, int32_t res);
    uint32_t slot;
    uint32_t reserved;
};

#ifdef __cplusplus
}
#endif

#endif
