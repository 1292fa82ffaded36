/*
 * sched/cond.c — conditional tasks' public entry points (urt/watcher.h:
 * urt_cond_init, urt_cond_add, urt_cond_cancel, urt_watcher_stats) and the
 * bodies they hand to the workers. The watcher thread that runs the checks is
 * sched/watcher.c; its header states the design, the cond state machine and
 * the memory-ordering contract this file follows (the add queue, the
 * IDLE/ADDING/WATCHING/CANCELLING/SCHEDULED CAS, the shutdown fence of
 * enter()/leave(), the statistics).
 */
#include "sched/watcher.h"
#include "sched/watcher_int.h"
#include "sched/job.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#include <urt/runtime.h>

#include "base/args.h"
#include "base/error.h"

/* ---- bodies on the workers ---------------------------------------------------------------------- */

static void record_latency(struct watcher *w, uint64_t ns)
{
    atomic_fetch_add_explicit(&w->lat_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->lat_sum, ns, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&w->lat_max, memory_order_relaxed);
    while (ns > max &&
           !atomic_compare_exchange_weak_explicit(&w->lat_max, &max, ns, memory_order_relaxed, memory_order_relaxed))
        ;
    unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;
    atomic_fetch_add_explicit(&w->lat_hist[b], 1, memory_order_relaxed);
}

static enum urt_task_result body_task(struct urt_task *t, void *arg)
{
    struct urt_cond *c = arg;
    (void)t;
    if (c->priv.passed_ns) { /* first call (not a re-run after a yield) */
        record_latency(c->priv.watcher, urt_clock_ns() - c->priv.passed_ns);
        c->priv.passed_ns = 0;
        /* From here the cond is the caller's (rule 3); pairs with the next adder's CAS. */
        atomic_store_explicit(&c->priv.state, C_IDLE, memory_order_release);
    }
    return c->body(c, c->arg);
}

/* A body queued on a worker, cancelled at shutdown (sched_cancel_task). */
static void body_cancelled(struct urt_task *t, void *arg)
{
    struct urt_cond *c = arg;
    (void)t;
    atomic_store_explicit(&c->priv.state, C_IDLE, memory_order_release);
    if (c->cancel)
        c->cancel(c, c->arg);
}

/* ---- public entry points ------------------------------------------------------------------------ */

URT_API void urt_cond_init(struct urt_cond *c, urt_cond_check_fn *check, urt_cond_body_fn *body, void *arg)
{
    memset(c, 0, sizeof(*c));
    c->check = check;
    c->body = body;
    c->arg = arg;
    atomic_init(&c->priv.state, C_IDLE);
    atomic_init(&c->priv.task.priv.next, NULL);
}

/* Shutdown fence (contract above): false if the watcher is closed. */
static bool enter(struct watcher *w)
{
    atomic_fetch_add_explicit(&w->inflight, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->closed, memory_order_seq_cst)) {
        urt_waitcount_sub(&w->inflight, 1);
        return false;
    }
    return true;
}

static void leave(struct watcher *w)
{
    urt_waitcount_sub(&w->inflight, 1);
}

/* What a cond in state st is doing, for messages. */
static const char *cond_state_name(uint32_t st)
{
    switch (st) {
    case C_IDLE:
        return "not watched";
    case C_ADDING:
        return "being added";
    case C_WATCHING:
        return "watched";
    case C_CANCELLING:
        return "cancelled, its cancel callback not run yet";
    default:
        return "handed to a worker (body pending)";
    }
}

static int cond_add_check(const urt_runtime *rt, const struct urt_cond *c)
{
    if (!rt || !c)
        return urt__error(-EINVAL, "urt_cond_add: %s is NULL", rt ? "cond" : "rt");
    if (!c->check || !c->body)
        return urt__error(-EINVAL, "urt_cond_add: cond->%s is NULL", c->check ? "body" : "check");
    if (urt__check_range("urt_cond_add", "cond->interval_us", c->interval_us, 0, 3600000000ull))
        return -EINVAL;
    if (c->job && c->job->s != sched_of(rt))
        return urt__error(-EINVAL, "urt_cond_add: cond->job %p belongs to another runtime", (void *)c->job);
    return 0;
}

URT_API int urt_cond_add(urt_runtime *rt, struct urt_cond *c)
{
    int err = cond_add_check(rt, c);
    if (err)
        return err;
    struct watcher *w = sched_of(rt)->watcher;
    if (!enter(w))
        return urt__error(-ESHUTDOWN, "urt_cond_add: the runtime is being destroyed");
    uint32_t expected = C_IDLE;
    if (!atomic_compare_exchange_strong_explicit(&c->priv.state, &expected, C_ADDING, memory_order_acquire,
                                                 memory_order_relaxed)) {
        leave(w);
        return urt__error(-EBUSY, "urt_cond_add: cond %p is %s", (void *)c, cond_state_name(expected));
    }
    if (c->job && (err = job_cond_add(c->job, "urt_cond_add")) != 0) { /* rule 7 */
        atomic_store_explicit(&c->priv.state, C_IDLE, memory_order_release);
        leave(w);
        return err;
    }
    __atomic_store_n(&c->priv.watcher, (void *)w, __ATOMIC_RELAXED); /* read by urt_cond_cancel (cond_owner) */
    c->priv.interval_ns = (c->interval_us ? c->interval_us : sched_of(rt)->cfg->watcher_interval_us) * 1000ull;
    c->priv.passed_ns = 0;
    struct urt_task *t = &c->priv.task;
    t->fn = body_task;
    t->arg = c;
    t->cancel = body_cancelled;
    t->priv.job = NULL; /* no job link yet (see urt_cond_add) */
    t->priv.lane = NULL;
    t->priv.flags = 0;
    t->priv.submit_flags = URT_SUBMIT_URGENT;
    /* ADDING -> WATCHING: publishes priv to a canceller's CAS. */
    atomic_store_explicit(&c->priv.state, C_WATCHING, memory_order_release);
    atomic_fetch_add_explicit(&w->watching, 1, memory_order_relaxed);
    inbox_push(&w->adds, t); /* A1 */
    watcher_notify(w);
    leave(w);
    return 0;
}

/* The watcher c was last added to (NULL: never added). An add in progress
 * (ADDING, a few stores) is waited out; priv.watcher is written by the adder
 * with a relaxed atomic store and read here with a relaxed atomic load, so a
 * caller that cancels while another thread adds the cond anew reads the old
 * or the new owner, never a torn one. */
static void *cond_owner(struct urt_cond *c)
{
    while (atomic_load_explicit(&c->priv.state, memory_order_acquire) == C_ADDING)
        sched_yield();
    return __atomic_load_n(&c->priv.watcher, __ATOMIC_RELAXED);
}

URT_API int urt_cond_cancel(urt_runtime *rt, struct urt_cond *c)
{
    if (!rt || !c)
        return urt__error(-EINVAL, "urt_cond_cancel: %s is NULL", rt ? "cond" : "rt");
    struct watcher *w = sched_of(rt)->watcher;
    if (!enter(w))
        return urt__error(-ESHUTDOWN, "urt_cond_cancel: the runtime is being destroyed (it cancels the cond)");
    /* The wrong runtime first, whatever the cond's state (watched, handed
     * to a worker, run, cancelled): it is the caller's bug, not a race. */
    void *owner = cond_owner(c);
    if (owner && owner != w) {
        leave(w);
        return urt__error(-EINVAL, "urt_cond_cancel: cond %p was added to another runtime", (void *)c);
    }
    uint32_t expected = C_WATCHING;
    if (!atomic_compare_exchange_strong_explicit(&c->priv.state, &expected, C_CANCELLING, memory_order_acq_rel,
                                                 memory_order_relaxed)) {
        leave(w);
        return urt__error(-EALREADY, "urt_cond_cancel: too late, cond %p is %s", (void *)c,
                          cond_state_name(expected));
    }
    atomic_fetch_add_explicit(&w->cancel_requests, 1, memory_order_seq_cst); /* C1 */
    watcher_notify(w);
    leave(w);
    return 0;
}

URT_API int urt_watcher_stats(const urt_runtime *rt, struct urt_watcher_stats *o)
{
    if (!rt || !o)
        return urt__error(-EINVAL, "urt_watcher_stats: %s is NULL", rt ? "out" : "rt");
    memset(o, 0, sizeof(*o));
    struct watcher *w = sched_of(rt)->watcher;
    if (!w)
        return 0;
#define RD(f) o->f = atomic_load_explicit(&w->stats.f, memory_order_relaxed)
    RD(checks_run);
    RD(checks_passed);
    RD(bodies_scheduled);
    RD(cancelled);
    RD(admission_retries);
    RD(sleeps);
    RD(wakeups);
    o->timer_fires = atomic_load_explicit(&w->timers.fires, memory_order_relaxed);
    RD(wake_messages);
#undef RD
    o->watchdog_reports = watchdog_reports(w->wd);
    o->watching = atomic_load_explicit(&w->watching, memory_order_relaxed);
    o->latency_count = atomic_load_explicit(&w->lat_count, memory_order_relaxed);
    o->latency_sum_ns = atomic_load_explicit(&w->lat_sum, memory_order_relaxed);
    o->latency_max_ns = atomic_load_explicit(&w->lat_max, memory_order_relaxed);
    uint64_t hist[LAT_BUCKETS], total = 0;
    for (unsigned b = 0; b < LAT_BUCKETS; b++)
        total += hist[b] = atomic_load_explicit(&w->lat_hist[b], memory_order_relaxed);
    uint64_t acc = 0;
    for (unsigned b = 0; b < LAT_BUCKETS && total; b++) {
        acc += hist[b];
        uint64_t upper = b >= 63 ? UINT64_MAX : (2ull << b) - 1;
        if (!o->latency_p50_ns && acc * 2 >= total)
            o->latency_p50_ns = upper;
        if (!o->latency_p99_ns && acc * 100 >= total * 99)
            o->latency_p99_ns = upper;
    }
    return 0;
}

/* For urt_dump_state (sched/watchdog.c). */
uint64_t watcher_watching(const struct sched *s)
{
    return s->watcher ? atomic_load_explicit(&s->watcher->watching, memory_order_relaxed) : 0;
}

