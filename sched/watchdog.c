/*
 * sched/watchdog.c — the watchdog's passes and the state dump (SPEC C10).
 *
 * Workers publish their running task and a run sequence (seqlock contract in
 * sched/core/watchdog_slot.h), and so do the blocking pool's threads around each
 * function (sched/blocking.c). A pass, on the watcher thread every quarter of the
 * limit (at least 100 µs), stamps a run the first time it sees it and
 * reports it once when now - first seen > task_runtime_limit_us: the
 * callback (urt_watchdog_set_callback; default: one line on stderr), and
 * with watchdog_abort a dump of every worker's state, then abort().
 *
 * Ordering: `seen` entries are written by the passes (watcher thread) with
 * relaxed atomics so that urt_dump_state() may read them from any thread (a
 * snapshot); the callback pointer is set and read under cb_lock.
 */
#include "sched/core/watchdog_slot.h"
#include "sched/watchdog_pass.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <urt/watchdog.h>
#include <urt/runtime.h>

#include "base/clock.h"
#include "base/error.h"
#include "sched/blocking.h"
#include "sched/core/sched.h"

#define WATCHDOG_MIN_PERIOD_NS 100000ull

/* What the watchdog knows of a worker's current run. */
struct wd_seen {
    _Atomic uint64_t seq;      /* run sequence, 0: none */
    _Atomic uint64_t first_ns; /* when a pass first saw it running */
    bool reported;             /* passes only */
};

struct watchdog {
    struct sched *s;
    uint64_t limit_ns, period_ns, next_ns;
    struct wd_seen *seen;      /* per worker */
    struct wd_seen *pool_seen; /* per blocking pool thread slot (n_pool of them) */
    uint32_t n_pool;
    _Atomic uint64_t reports;
    pthread_mutex_t cb_lock;
    urt_watchdog_fn *cb;
    void *cb_ctx;
};

struct watchdog *watchdog_create(struct sched *s)
{
    struct watchdog *wd = calloc(1, sizeof(*wd));
    if (!wd || !(wd->seen = calloc(s->n_workers, sizeof(*wd->seen)))) {
        free(wd);
        return NULL;
    }
    if (s->cfg->task_runtime_limit_us) {
        wd->n_pool = 2 * s->cfg->blocking_threads_max; /* the pool's slots at most (sched/blocking.c) */
        if (!(wd->pool_seen = calloc(wd->n_pool, sizeof(*wd->pool_seen)))) {
            free(wd->seen);
            free(wd);
            return NULL;
        }
    }
    wd->s = s;
    wd->limit_ns = s->cfg->task_runtime_limit_us * 1000ull;
    wd->next_ns = UINT64_MAX;
    if (wd->limit_ns) {
        wd->period_ns = wd->limit_ns / 4 > WATCHDOG_MIN_PERIOD_NS ? wd->limit_ns / 4 : WATCHDOG_MIN_PERIOD_NS;
        wd->next_ns = urt_clock_ns() + wd->period_ns;
    }
    pthread_mutex_init(&wd->cb_lock, NULL);
    s->watchdog = wd;
    return wd;
}

void watchdog_free(struct watchdog *wd)
{
    if (!wd)
        return;
    wd->s->watchdog = NULL;
    pthread_mutex_destroy(&wd->cb_lock);
    free(wd->pool_seen);
    free(wd->seen);
    free(wd);
}

uint64_t watchdog_next_pass(const struct watchdog *wd)
{
    return wd->limit_ns ? wd->next_ns : UINT64_MAX;
}

uint64_t watchdog_reports(const struct watchdog *wd)
{
    return atomic_load_explicit(&((struct watchdog *)wd)->reports, memory_order_relaxed);
}

static void default_watchdog(void *ctx, const struct urt_watchdog_report *r)
{
    (void)ctx;
    if (r->pool_thread >= 0) {
        fprintf(stderr, "urt watchdog: offload %p (job %p) on blocking pool thread urt-blk-%d has run for at least "
                        "%.3f ms (limit %.3f ms)\n",
                (void *)r->blocking, (void *)r->job, r->pool_thread, r->elapsed_ns / 1e6, r->limit_ns / 1e6);
        return;
    }
    fprintf(stderr, "urt watchdog: task %p (job %p) on worker %u has run for at least %.3f ms (limit %.3f ms)\n",
            (void *)r->task, (void *)r->job, r->worker, r->elapsed_ns / 1e6, r->limit_ns / 1e6);
}

static void dump_state(struct sched *s, int fd)
{
    uint64_t now = urt_clock_ns();
    struct watchdog *wd = s->watcher ? s->watchdog : NULL;
    bool on = s->cfg->task_runtime_limit_us != 0;
    dprintf(fd, "urt state: %u workers, %u suspended\n", s->n_workers,
            atomic_load_explicit(&s->n_sleeping, memory_order_relaxed));
    for (uint32_t i = 0; i < s->n_workers; i++) {
        struct worker *wk = s->workers[i];
        uint64_t seq = 0;
        struct urt_task *t = NULL;
        struct urt_job *j = NULL;
        char running[160];
        if (!on) {
            snprintf(running, sizeof(running), "running task unknown (task_runtime_limit_us is 0)");
        } else if (watchdog_read(&wk->wd, &seq, &t, &j)) {
            int n = snprintf(running, sizeof(running), "task %p (job %p) running", (void *)t, (void *)j);
            if (wd && atomic_load_explicit(&wd->seen[i].seq, memory_order_relaxed) == seq) {
                uint64_t first = atomic_load_explicit(&wd->seen[i].first_ns, memory_order_relaxed);
                snprintf(running + n, sizeof(running) - (size_t)n, " for at least %.3f ms",
                         now > first ? (now - first) / 1e6 : 0.0);
            }
        } else {
            snprintf(running, sizeof(running), "no task running");
        }
        bool sleeping = sleeper_sleeping(&wk->sl);
        dprintf(fd, "urt state: worker %u: %s; %s; deque %" PRId64 ", inbox %s, sticky %s; tasks run %" PRIu64 "\n",
                i, sleeping ? "suspended" : "awake", running, deque_size(&wk->deque),
                inbox_maybe_nonempty_foreign(&wk->inbox) ? "non-empty" : "empty",
                inbox_maybe_nonempty_foreign(&wk->sticky) ? "non-empty" : "empty",
                atomic_load_explicit(&wk->stats.tasks_run, memory_order_relaxed));
    }
    sched_clients.dump_state(s, fd); /* the watcher's and the admission limit's lines */
}

static void watchdog_report(struct watchdog *wd, const struct urt_watchdog_report *r)
{
    atomic_store_explicit(&wd->reports, atomic_load_explicit(&wd->reports, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    pthread_mutex_lock(&wd->cb_lock);
    urt_watchdog_fn *cb = wd->cb ? wd->cb : default_watchdog;
    void *ctx = wd->cb_ctx;
    pthread_mutex_unlock(&wd->cb_lock);
    cb(ctx, r);
    if (wd->s->cfg->watchdog_abort && r->pool_thread < 0) {
        /* The documented policy (urt/watchdog.h): the user asked for it. */
        dprintf(STDERR_FILENO, "urt watchdog: task_runtime_limit_us exceeded, watchdog_abort set: aborting\n");
        dump_state(wd->s, STDERR_FILENO);
        abort();
    }
}

/* One run as a pass sees it (valid: something runs, with run sequence seq):
 * a run seen for the first time is stamped now; true once it has been seen
 * longer than the limit (and only once per run). */
static bool seen_overdue(struct watchdog *wd, struct wd_seen *seen, bool valid, uint64_t seq, uint64_t now)
{
    if (!valid) {
        atomic_store_explicit(&seen->seq, 0, memory_order_relaxed);
        return false;
    }
    if (atomic_load_explicit(&seen->seq, memory_order_relaxed) != seq) {
        atomic_store_explicit(&seen->first_ns, now, memory_order_relaxed);
        atomic_store_explicit(&seen->seq, seq, memory_order_relaxed);
        seen->reported = false;
        return false;
    }
    uint64_t first = atomic_load_explicit(&seen->first_ns, memory_order_relaxed);
    if (seen->reported || now - first <= wd->limit_ns)
        return false;
    seen->reported = true; /* once per run */
    return true;
}

/* Every worker's running task and every blocking pool thread's function:
 * a run seen longer than the limit is reported, once. */
void watchdog_pass(struct watchdog *wd, uint64_t now)
{
    if (wd->limit_ns == 0 || now < wd->next_ns)
        return;
    wd->next_ns = now + wd->period_ns;
    struct sched *s = wd->s;
    for (uint32_t i = 0; i < s->n_workers; i++) {
        uint64_t seq = 0;
        struct urt_task *t = NULL;
        struct urt_job *j = NULL;
        bool valid = watchdog_read(&s->workers[i]->wd, &seq, &t, &j);
        if (!seen_overdue(wd, &wd->seen[i], valid, seq, now))
            continue;
        uint64_t first = atomic_load_explicit(&wd->seen[i].first_ns, memory_order_relaxed);
        struct urt_watchdog_report r = {.worker = i, .task = t, .job = j, .elapsed_ns = now - first,
                                        .limit_ns = wd->limit_ns, .pool_thread = -1, .blocking = NULL};
        watchdog_report(wd, &r);
    }
    uint32_t n = blocking_watch_count(s);
    for (uint32_t i = 0; i < n && i < wd->n_pool; i++) {
        uint64_t seq = 0;
        struct urt_task *t = NULL;
        struct urt_job *j = NULL;
        bool valid = blocking_watch_read(s, i, &seq, &t, &j);
        if (!seen_overdue(wd, &wd->pool_seen[i], valid, seq, now))
            continue;
        uint64_t first = atomic_load_explicit(&wd->pool_seen[i].first_ns, memory_order_relaxed);
        struct urt_watchdog_report r = {.worker = UINT32_MAX, .task = t, .job = j, .elapsed_ns = now - first,
                                        .limit_ns = wd->limit_ns, .pool_thread = (int32_t)i,
                                        .blocking = blocking_of_task(t)};
        watchdog_report(wd, &r);
    }
}

/* ---- public entry points ---------------------------------------------------------------- */

URT_API int urt_watchdog_set_callback(urt_runtime *rt, urt_watchdog_fn *fn, void *ctx)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_watchdog_set_callback: rt is NULL");
    struct watchdog *wd = sched_of(rt)->watchdog;
    pthread_mutex_lock(&wd->cb_lock);
    wd->cb = fn;
    wd->cb_ctx = fn ? ctx : NULL;
    pthread_mutex_unlock(&wd->cb_lock);
    return 0;
}

URT_API int urt_dump_state(const urt_runtime *rt, int fd)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_dump_state: rt is NULL");
    if (fd < 0)
        return urt__error(-EINVAL, "urt_dump_state: fd %d is negative", fd);
    dump_state(sched_of(rt), fd);
    return 0;
}
