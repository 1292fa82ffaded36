/*
 * sched/core/submit.c — placement (SPEC C5) and the public submission entry points.
 *
 * Placement:
 *  - from a worker of the runtime: that worker's own LIFO slot, the slot's
 *    previous task going to its deque (no atomic RMW; worker.c
 *    sched_local_spawn; lifo_slot = false: the deque); a job's task goes to
 *    the deque at once: a job is there to spread its tasks over the workers,
 *    and in the slot a task its submitter keeps running after (a graph
 *    step's producer) waited for it while peers idled (graph_pipeline ran
 *    0.82x with job tasks in the slot);
 *  - from any other thread: its preferred worker's inbox (the preferred
 *    worker is assigned round robin on the thread's first submission), or a
 *    round-robin worker per submission when
 *    use_preferred_worker_for_current_thread is false;
 *  - URT_SUBMIT_URGENT: a suspended worker's inbox if there is one (woken),
 *    else the rules above.
 *
 * Shutdown fence with foreign submitters (sched/core/foreign.h): a foreign
 * submission marks itself, then reads the phase (foreign_enter); sched_stop
 * stores the phase, then waits for every mark naming the runtime to clear
 * (foreign_wait). So either the submitter sees the shutdown and returns
 * -ESHUTDOWN, or the destroyer waits for its push to finish before it
 * drains or cancels.
 */
#include <errno.h>

#include <urt/runtime.h>
#include <urt/task.h>

#include "sched/core/sched.h"

#include "base/args.h"
#include "base/error.h"
#include "base/tls.h"

/* Per-thread placement and task cache for threads that are not workers, one
 * slot per runtime the thread submits to. A thread may feed several runtimes
 * in turn; with a single slot, every switch reassigned its preferred worker
 * (C5 says it is assigned once, on the thread's first submission) and
 * stranded the tasks cached for the other runtime, so each switch took a
 * fresh batch from the pool: unbounded growth (tests/unit/test_placement.c
 * preferred_worker_kept_per_runtime, spawn_cache_kept_per_runtime).
 * A thread that uses more than FOREIGN_SLOTS runtimes reuses slots round
 * robin; an evicted slot's cached tasks stay in their runtime's pool chunks
 * (freed when that runtime is destroyed), at most 2 x TASKPOOL_BATCH tasks per
 * eviction. Runtime ids start at 1, so sched_id 0 marks a free slot. */
#define FOREIGN_SLOTS 8
struct foreign_tls {
    uint64_t sched_id;
    uint32_t preferred;
    struct taskcache cache;
};
static _Thread_local struct foreign_tls tls_foreign[FOREIGN_SLOTS];
static _Thread_local uint32_t tls_foreign_next;
/* The slot used last: initial-exec (base/tls.h), read on every foreign
 * submission and task allocation (the slots stay general-dynamic: hundreds
 * of bytes are more static TLS than a library should take). */
static _Thread_local struct foreign_tls *tls_foreign_cur URT_TLS_IE;

static __attribute__((cold)) struct foreign_tls *foreign_state_slow(struct sched *s)
{
    for (uint32_t i = 0; i < FOREIGN_SLOTS; i++) {
        if (tls_foreign[i].sched_id == s->id) {
            tls_foreign_cur = &tls_foreign[i];
            return &tls_foreign[i];
        }
    }
    /* First submission of this thread to this runtime. The preferred worker
     * takes a round-robin slot only when it is used: otherwise a thread's
     * first urt_spawn (which gets here for the task cache) would shift the
     * per-submission round robin, e.g. with 2 workers every short-lived
     * thread's single spawn went to worker 1. */
    uint32_t i = tls_foreign_next++ % FOREIGN_SLOTS;
    struct foreign_tls *f = &tls_foreign[i];
    f->sched_id = s->id;
    f->preferred = s->cfg->use_preferred_worker_for_current_thread
                       ? atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed) % s->n_workers
                       : 0;
    f->cache.head = NULL;
    f->cache.count = 0;
    tls_foreign_cur = f;
    return f;
}

static inline struct foreign_tls *foreign_state(struct sched *s)
{
    struct foreign_tls *f = tls_foreign_cur;
    if (__builtin_expect(f && f->sched_id == s->id, 1))
        return f;
    return foreign_state_slow(s);
}

struct worker *sched_pick_worker(struct sched *s)
{
    struct worker *self = sched_current(s);
    if (self)
        return self;
    if (s->cfg->use_preferred_worker_for_current_thread)
        return s->workers[foreign_state(s)->preferred];
    return s->workers[atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed) % s->n_workers];
}

static int submit_foreign(struct sched *s, struct urt_task *t, unsigned flags)
{
    if (!sched_foreign_enter(s))
        /* The message here, so that the public entry points tail-call sched_submit. */
        return urt__error(-ESHUTDOWN, "task submission: the runtime is being destroyed");
    struct worker *w = NULL;
    if (flags & URT_SUBMIT_URGENT)
        w = sched_find_sleeping(s);
    if (!w)
        w = sched_pick_worker(s);
    inbox_push(&w->inbox, t);
    sched_notify(s, w, NULL);
    sched_foreign_leave();
    return 0;
}

int sched_submit_to(struct sched *s, struct worker *target, struct urt_task *t)
{
    struct worker *self = sched_current(s);
    /* Plain write: the sticky push below publishes it with the task
     * (inbox.h I1, a release exchange), and only the owner that pops it
     * (acquire) reads it, when the task yields. */
    t->priv.flags |= TASK_PINNED;
    if (self) {
        probe_task_submit(t, (int)self->index);
        if (target == self)
            inbox_push(&self->sticky, t); /* we are awake */
        else
            sched_push_sticky(s, target, t);
        return 0;
    }
    /* The shutdown fence of submit_foreign. */
    if (!sched_foreign_enter(s))
        return -ESHUTDOWN;
    sched_push_sticky(s, target, t);
    sched_foreign_leave();
    return 0;
}

int sched_submit(struct sched *s, struct urt_task *t, unsigned flags)
{
    struct worker *self = sched_current(s);
    if (__builtin_expect(flags & URT_SUBMIT_LOCAL, 0) && self)
        return sched_submit_to(s, self, t);
    probe_task_submit(t, self ? (int)self->index : -1); /* one load when nobody consumes stamps */
    if (!self)
        return submit_foreign(s, t, flags);
    if (flags & URT_SUBMIT_URGENT) {
        struct worker *w = sched_find_sleeping(s);
        if (w && w != self) {
            inbox_push(&w->inbox, t);
            sched_notify(s, w, self);
            return 0;
        }
    }
    if (t->priv.job)
        sched_local_push(self, t); /* a job's task: stealable at once (a job spreads its work) */
    else
        sched_local_spawn(self, t);
    return 0;
}

struct urt_task *sched_spawn_task(struct sched *s, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                                  unsigned flags)
{
    struct urt_task *t = sched_task_alloc(s);
    if (!t)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->cancel = cancel;
    t->priv.job = NULL;
    t->priv.lane = NULL;
    t->priv.flags = TASK_POOLED;
    t->priv.submit_flags = flags;
    return t;
}

struct urt_task *sched_task_alloc(struct sched *s)
{
    struct worker *self = sched_current(s);
    struct taskcache *c = self ? &self->cache : &foreign_state(s)->cache;
    return taskpool_alloc(&s->pool, c);
}

void sched_task_free(struct sched *s, struct urt_task *t)
{
    struct worker *self = sched_current(s);
    taskpool_free(&s->pool, self ? &self->cache : &foreign_state(s)->cache, t);
}

/* ---- public entry points ------------------------------------------------------------------ */

URT_API void urt_task_init(struct urt_task *task, urt_task_fn *fn, void *arg)
{
    task->fn = fn;
    task->arg = arg;
    task->cancel = NULL;
    atomic_init(&task->priv.next, NULL);
    task->priv.job = NULL;
    task->priv.lane = NULL;
    task->priv.enqueue_ns = 0;
    task->priv.id = 0;
    task->priv.flags = 0;
    task->priv.submit_flags = 0;
}

/* The argument checks of every submission entry point (sched.h). */
int sched_check_submit(const char *fn, const void *rt, bool has_fn, const char *what, unsigned flags)
{
    if (!rt || !has_fn)
        return urt__error(-EINVAL, "%s: %s is NULL", fn, !rt ? "rt" : what);
    if (urt__check_flags(fn, flags, URT_SUBMIT_FLAGS_ALL))
        return -EINVAL;
    if ((flags & URT_SUBMIT_LOCAL) && (flags & URT_SUBMIT_URGENT))
        return urt__error(-EINVAL, "%s: flags URT_SUBMIT_LOCAL and URT_SUBMIT_URGENT contradict each other", fn);
    if ((flags & URT_SUBMIT_LOCAL) && !sched_current(sched_of(rt)))
        return urt__error(-EINVAL, "%s: flags URT_SUBMIT_LOCAL from a thread that is not a worker of this runtime",
                          fn);
    return 0;
}

int sched_submit_error(const char *fn, int err)
{
    if (err == -EAGAIN)
        return urt__error(err, "%s: max_pending_tasks reached", fn);
    if (err == -ESHUTDOWN)
        return urt__error(err, "%s: the runtime is being destroyed", fn);
    return err;
}

/* The affinity checks of urt_task_submit_to / urt_spawn_to (after sched_check_submit). */
static int check_target(const char *fn, const urt_runtime *rt, uint32_t worker, unsigned flags)
{
    const struct sched *s = sched_of(rt);
    if (urt__check_range(fn, "worker", worker, 0, s->n_workers - 1))
        return -EINVAL;
    if (flags & (URT_SUBMIT_URGENT | URT_SUBMIT_LOCAL))
        return urt__error(-EINVAL, "%s: flags URT_SUBMIT_%s contradict a given worker", fn,
                          flags & URT_SUBMIT_URGENT ? "URGENT" : "LOCAL");
    return 0;
}

/* A caller's task (not pooled) to target (NULL: placement rules). */
static int submit_task(const char *fn, struct sched *s, struct urt_task *task, unsigned flags, struct worker *target)
{
    int err;
    task->priv.submit_flags = flags;
    task->priv.flags &= ~(TASK_POOLED | TASK_ADMITTED | TASK_PINNED);
    if (__builtin_expect(s->adm == NULL && target == NULL, 1))
        return sched_submit(s, task, flags); /* a tail call: the hot path of every submission */
    if (s->adm != NULL)
        err = sched_clients.admit(s, task, flags, target); /* max_pending_tasks (sched/admission.c) */
    else
        err = sched_submit_to(s, target, task);
    return err ? sched_submit_error(fn, err) : 0;
}

/* A pooled task (urt_spawn*) to target (NULL: placement rules). */
static int spawn_task(const char *fn, struct sched *s, urt_task_fn *f, urt_task_cancel_fn *cancel, void *arg,
                      unsigned flags, struct worker *target)
{
    struct urt_task *t = sched_spawn_task(s, f, cancel, arg, flags);
    if (!t)
        return urt__error(-ENOMEM, "%s: out of memory for a pooled task", fn);
    int err;
    if (__builtin_expect(s->adm != NULL, 0)) {
        err = sched_clients.admit(s, t, flags, target); /* max_pending_tasks; frees t on failure (sched/admission.c) */
        return err ? sched_submit_error(fn, err) : 0;
    }
    err = target ? sched_submit_to(s, target, t) : sched_submit(s, t, flags);
    if (err) {
        sched_task_free(s, t);
        return sched_submit_error(fn, err);
    }
    return 0;
}

URT_API int urt_task_submit(urt_runtime *rt, struct urt_task *task, unsigned flags)
{
    int err = sched_check_submit("urt_task_submit", rt, task && task->fn, task ? "task->fn" : "task", flags);
    return err ? err : submit_task("urt_task_submit", sched_of(rt), task, flags, NULL);
}

URT_API int urt_task_submit_to(urt_runtime *rt, uint32_t worker, struct urt_task *task, unsigned flags)
{
    int err = sched_check_submit("urt_task_submit_to", rt, task && task->fn, task ? "task->fn" : "task", flags);
    if (!err)
        err = check_target("urt_task_submit_to", rt, worker, flags);
    struct sched *s = sched_of(rt);
    return err ? err : submit_task("urt_task_submit_to", s, task, flags, s->workers[worker]);
}

URT_API int urt_spawn_ex(urt_runtime *rt, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags)
{
    int err = sched_check_submit("urt_spawn", rt, fn != NULL, "fn", flags);
    return err ? err : spawn_task("urt_spawn", sched_of(rt), fn, cancel, arg, flags, NULL);
}

URT_API int urt_spawn(urt_runtime *rt, urt_task_fn *fn, void *arg, unsigned flags)
{
    return urt_spawn_ex(rt, fn, NULL, arg, flags);
}

URT_API int urt_spawn_to(urt_runtime *rt, uint32_t worker, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                         unsigned flags)
{
    int err = sched_check_submit("urt_spawn_to", rt, fn != NULL, "fn", flags);
    if (!err)
        err = check_target("urt_spawn_to", rt, worker, flags);
    struct sched *s = sched_of(rt);
    return err ? err : spawn_task("urt_spawn_to", s, fn, cancel, arg, flags, s->workers[worker]);
}

URT_API int urt_worker_node(const urt_runtime *rt, uint32_t worker)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_worker_node: rt is NULL");
    const struct sched *s = sched_of(rt);
    if (urt__check_range("urt_worker_node", "worker", worker, 0, s->n_workers - 1))
        return -EINVAL;
    return s->workers[worker]->place.node;
}

URT_API int urt_node_worker(urt_runtime *rt, int node)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_node_worker: rt is NULL");
    struct sched *s = sched_of(rt);
    uint32_t n = s->n_workers, start = atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = (start + i) % n;
        if (s->workers[k]->place.node == node)
            return (int)k;
    }
    return urt__error(-EINVAL, "urt_node_worker: no worker is placed on NUMA node %d", node);
}

URT_API int urt_current_worker(const urt_runtime *rt)
{
    if (!rt)
        return -1;
    struct worker *w = sched_current(sched_of(rt));
    return w ? (int)w->index : -1;
}
