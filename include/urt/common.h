/*
 * urt/common.h — conventions shared by every public header.
 *
 * Error convention (everywhere in urt): a function returns 0 or a count on
 * success and -errno on failure; it never sets errno.  When a call fails with
 * -EINVAL (or another configuration error), urt_last_error() returns a one-line
 * message naming the offending field or value; the message is per thread and
 * stays valid until the thread's next failing urt call.
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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_runtime urt_runtime;

/* The message of the calling thread's last failing urt call ("" if none).
 * Any thread. */
URT_API const char *urt_last_error(void);

/* CLOCK_MONOTONIC in nanoseconds: the clock every urt timestamp uses (the same
 * clock as bpf_ktime_get_ns()). Any thread. */
URT_API uint64_t urt_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
