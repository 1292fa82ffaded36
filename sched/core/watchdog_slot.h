/*
 * sched/core/watchdog_slot.h — what a worker publishes about its running task, for the
 * watchdog on the watcher thread (SPEC C10). Part of the core (the run path
 * writes the slot); the watchdog's passes, a client, are declared in
 * sched/watchdog_pass.h.
 *
 * Each worker owns one struct watchdog_slot (embedded in struct worker). Only
 * when task_runtime_limit_us > 0 does run_task() call watchdog_begin() before
 * a task's fn and watchdog_end() after it: a few plain stores by the owner
 * (release/relaxed atomics: plain moves on x86), no read-modify-write, no
 * clock read, nothing shared written. With the limit off, run_task() skips
 * both on a branch.
 *
 * Why no timestamp: clock_gettime(CLOCK_MONOTONIC) costs ~65 ns per call on
 * the project's VM (measured), more than the rest of a task's overhead. The
 * slot carries a run sequence instead (odd while a task runs, bumped at every
 * begin and end); the watcher stamps a run the first time one of its passes
 * sees it, so it measures a run's time as "at least now - first seen", which
 * is short of the truth by less than one watchdog period.
 *
 * ---- Memory-ordering contract (a seqlock built from release stores and
 * acquire loads: no standalone fences, which GCC's ThreadSanitizer does not
 * support)
 * Writer (the worker):                    Reader (watchdog_read, any thread):
 *   end:   E1 seq := seq + 1 (even) relaxed Q1 s1 := seq             acquire
 *   begin: B2 task, job          release    Q2 task, job             acquire
 *          B3 seq := seq + 1 (odd) release  Q4 s2 := seq             relaxed
 *                                           valid iff s1 == s2 and s1 odd
 * Q1 pairs with B3: a reader that sees an odd sequence sees at least the task
 * and job stored before it. If Q2 read a task or job of a later begin, that
 * B2 release is sequenced after the E1 that ended run s1, so E1 happens
 * before Q4, which then reads s1 + 1 or later: s2 != s1 and the read is
 * discarded. Sequences never repeat (64 bits).
 */
#ifndef URT_SCHED_WATCHDOG_H
#define URT_SCHED_WATCHDOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <urt/task.h>

#include "base/clock.h"

struct watchdog_slot {
    _Atomic uint64_t seq; /* odd: a task is running (owner writes) */
    struct urt_task *_Atomic task;
    struct urt_job *_Atomic job;
};

/* Owner only. */
static inline void watchdog_begin(struct watchdog_slot *wd, struct urt_task *t)
{
    uint64_t seq = atomic_load_explicit(&wd->seq, memory_order_relaxed); /* own variable */
    atomic_store_explicit(&wd->task, t, memory_order_release);           /* B2: pairs with Q2 */
    atomic_store_explicit(&wd->job, t->priv.job, memory_order_release);
    atomic_store_explicit(&wd->seq, seq + 1, memory_order_release); /* B3: pairs with Q1 */
}

/* Owner only. */
static inline void watchdog_end(struct watchdog_slot *wd)
{
    uint64_t seq = atomic_load_explicit(&wd->seq, memory_order_relaxed);
    atomic_store_explicit(&wd->seq, seq + 1, memory_order_relaxed); /* E1 */
}

/* Any thread: the running task's run sequence, task and job; false if no
 * task runs (or the worker moved on while we looked). */
static inline bool watchdog_read(struct watchdog_slot *wd, uint64_t *seq, struct urt_task **task,
                                 struct urt_job **job)
{
    uint64_t s1 = atomic_load_explicit(&wd->seq, memory_order_acquire); /* Q1: pairs with B3 */
    if (!(s1 & 1))
        return false;
    *task = atomic_load_explicit(&wd->task, memory_order_acquire); /* Q2: pairs with B2 */
    *job = atomic_load_explicit(&wd->job, memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&wd->seq, memory_order_relaxed); /* Q4 */
    *seq = s1;
    return s1 == s2;
}

#endif
