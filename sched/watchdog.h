/*
 * sched/watchdog.h — what a worker publishes about its running task, for the
 * watchdog on the watcher thread (SPEC C10).
 *
 * Each worker owns one struct watchdog_slot (embedded in struct worker). Only
 * when task_runtime_limit_us > 0 does run_task() call watchdog_begin() before
 * a task's fn and watchdog_end() after it: one clock read and a few relaxed
 * stores by the owner, no read-modify-write, nothing shared written. With the
 * limit off, run_task() skips both on a branch.
 *
 * ---- Memory-ordering contract (a seqlock whose sequence is the start stamp,
 * built from release stores and acquire loads: no standalone fences, which
 * GCC's ThreadSanitizer does not support)
 * Writer (the worker):                    Reader (watchdog_read, any thread):
 *   end:   E1 start := 0         relaxed    Q1 s1 := start           acquire
 *   begin: B2 task, job          release    Q2 task, job             acquire
 *          B3 start := now       release    Q4 s2 := start           relaxed
 *                                           valid iff s1 == s2 != 0
 * Q1 pairs with B3: a reader that sees a stamp sees at least the task and job
 * stored before it. If Q2 read a task or job of a later begin, that B2
 * release is sequenced after the E1 that ended the stamped run, so E1
 * happens before Q4, which then reads 0 or a later stamp: s2 != s1 and the
 * read is discarded. Start stamps are CLOCK_MONOTONIC ns, distinct for
 * successive tasks of a worker. On x86 every one of these is a plain move.
 */
#ifndef URT_SCHED_WATCHDOG_H
#define URT_SCHED_WATCHDOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <urt/task.h>

struct watchdog_slot {
    _Atomic uint64_t start_ns; /* 0: no task running */
    struct urt_task *_Atomic task;
    struct urt_job *_Atomic job;
};

static inline uint64_t watchdog_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Owner only. */
static inline void watchdog_begin(struct watchdog_slot *wd, struct urt_task *t)
{
    atomic_store_explicit(&wd->task, t, memory_order_release);          /* B2: pairs with Q2 */
    atomic_store_explicit(&wd->job, t->priv.job, memory_order_release);
    atomic_store_explicit(&wd->start_ns, watchdog_now_ns(), memory_order_release); /* B3: pairs with Q1 */
}

/* Owner only. */
static inline void watchdog_end(struct watchdog_slot *wd)
{
    atomic_store_explicit(&wd->start_ns, 0, memory_order_relaxed); /* E1 */
}

/* Any thread: the running task's stamp, task and job; false if none (or the
 * worker moved on while we looked). */
static inline bool watchdog_read(struct watchdog_slot *wd, uint64_t *start, struct urt_task **task,
                                 struct urt_job **job)
{
    uint64_t s1 = atomic_load_explicit(&wd->start_ns, memory_order_acquire); /* Q1: pairs with B3 */
    if (s1 == 0)
        return false;
    *task = atomic_load_explicit(&wd->task, memory_order_acquire); /* Q2: pairs with B2 */
    *job = atomic_load_explicit(&wd->job, memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&wd->start_ns, memory_order_relaxed);
    *start = s1;
    return s1 == s2;
}

#endif
