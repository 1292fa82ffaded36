/*
 * sched/watcher_int.h — the watcher's private objects, shared by its loop
 * (sched/watcher.c, whose header states the design, the invariants and the
 * memory-ordering contract) and its public entry points and bodies
 * (sched/cond.c). Nothing else includes it.
 */
#ifndef URT_SCHED_WATCHER_INT_H
#define URT_SCHED_WATCHER_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include <urt/watcher.h>

#include "base/clock.h"
#include "base/waitcount.h"
#include "sched/core/inbox.h"
#include "sched/core/sched.h"
#include "sched/core/sleeper.h"
#include "sched/core/timer.h"
#include "sched/core/watchdog_slot.h"
#include "sched/watchdog_pass.h"

enum cond_state {
    C_IDLE = 0,
    C_ADDING = 1,
    C_WATCHING = 2,
    C_CANCELLING = 3,
    C_SCHEDULED = 4,
};

#define LAT_BUCKETS 64

struct watcher_counters {
    _Atomic uint64_t checks_run, checks_passed, bodies_scheduled, cancelled, admission_retries, sleeps, wakeups,
        wake_messages;
};


struct watcher {
    struct sched *s;

    /* --- read and written by other threads --- */
    struct sleeper sl;                  /* sched/core/sleeper.h */
    _Atomic uint32_t stop;
    struct be_peer peer;                 /* target of wake messages (backend/backend.h) */
    alignas(64) _Atomic uint32_t closed; /* adds and cancels refused */
    urt_waitcount inflight;              /* adders/cancellers past the closed check
                                            (base/waitcount.h: watcher_close waits for 0) */
    _Atomic uint32_t cancel_requests;
    _Atomic uint64_t watching;
    struct inbox adds;

    /* --- latency of check -> body (workers add) --- */
    alignas(64) _Atomic uint64_t lat_count, lat_sum, lat_max;
    _Atomic uint64_t lat_hist[LAT_BUCKETS];


    /* --- owner (the watcher thread) only --- */
    alignas(64) struct be_ctx be;       /* its backend context (backend/backend.h) */
    struct timerq timers;                     /* conds' checks, retry, watchdog (sched/core/timer.h) */
    sched_timer retry_timer;                  /* passed conds wait for a slot / the add queue backs off */
    sched_timer wd_timer;                     /* the watchdog's next pass */
    struct urt_cond *ready_head, *ready_tail; /* passed, waiting for an admission slot */
    struct urt_cond *doomed;                  /* to cancel after the current walk */
    uint64_t interval_ns;                     /* watcher_interval_us */
    bool add_backoff;                         /* the heap could not grow: retry later */
    struct watchdog *wd;                      /* the watchdog's passes run here (sched/watchdog.c) */
    struct watcher_counters stats;

    pthread_t thread;
    bool joined;                              /* destroying thread only */
    pthread_mutex_t start_lock;
    pthread_cond_t start_cond;
    bool started;
    int start_err;
};

#define WSTAT_ADD(w, field, n)                                                                                   \
    atomic_store_explicit(&(w)->stats.field, atomic_load_explicit(&(w)->stats.field, memory_order_relaxed) + (n), \
                          memory_order_relaxed)
#define WSTAT_INC(w, field) WSTAT_ADD(w, field, 1)

static inline struct urt_cond *cond_of_task(struct urt_task *t)
{
    return (struct urt_cond *)((char *)t - offsetof(struct urt_cond, priv.task));
}

static inline struct urt_cond *cond_next(struct urt_cond *c)
{
    struct urt_task *t = atomic_load_explicit(&c->priv.task.priv.next, memory_order_relaxed);
    return t ? cond_of_task(t) : NULL;
}

static inline void cond_set_next(struct urt_cond *c, struct urt_cond *n)
{
    atomic_store_explicit(&c->priv.task.priv.next, n ? &n->priv.task : NULL, memory_order_relaxed);
}

/* Wakes the watcher if it sleeps (sched/core/sleeper.h W3 + W4), after the
 * caller's W1. Any thread. */
bool watcher_notify(struct watcher *w);

#endif
