/*
 * io/uio_timed.c — timed submission (urt/task.h: urt_task_submit_at,
 * urt_spawn_at): a task runs at or after a point in time, through the one
 * timer facility of a worker's ring (sched/core/timer.h), from any thread.
 *
 * A submission allocates a holder (struct uio_timed: the timer, the task,
 * its flags). On a worker of the runtime the holder's timer goes into that
 * worker's timer queue at once; another thread hands the holder to its
 * preferred worker (C5) through that worker's sticky queue (the embedded
 * `arm` task), which arms it there. When the timer fires (-ETIME) the task is
 * submitted from that worker with its flags (placement as urt_task_submit
 * from a worker: its deque, a suspended worker with URT_SUBMIT_URGENT, its
 * sticky queue with URT_SUBMIT_LOCAL). A due time already passed submits at
 * once. With max_pending_tasks the task takes its slot at the call (it is
 * pending while it waits; URT_SUBMIT_BLOCK blocks there), released when it
 * ran or was cancelled; a call refused there frees its holder at once.
 *
 * Shutdown: DRAIN waits for armed timers (their SQE counts in the worker's
 * io_inflight, and the drain waits for that to reach 0), so the tasks run at
 * their time; CANCEL cancels them when the worker leaves its loop
 * (uio_timed_cancel_all: the task's cancel callback), and an arm task still
 * queued gets its cancel callback, which cancels the task.
 *
 * Memory ordering: a holder is touched by the submitting thread until it is
 * queued (the sticky queue's push and pop order it, sched/core/inbox.h), then by
 * its worker only; the worker's list is owner-only.
 */
#include "io/uio.h"
#include "sched/admission.h"

#include <errno.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/error.h"

struct uio_timed {
    struct urt_task arm;          /* hands the holder to its worker (threads that are not one) */
    sched_timer tm;
    struct urt_task *task;
    struct sched *s;
    struct worker *w;             /* armed on */
    struct uio_timed *prev, *next; /* the worker's list */
    uint64_t due;
    unsigned flags;
};

#define TIMED_OF(t) ((struct uio_timed *)(void *)((char *)(t) - offsetof(struct uio_timed, tm)))

static void list_remove(struct uio_worker *uw, struct uio_timed *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        uw->timed = h->next;
    if (h->next)
        h->next->prev = h->prev;
}

static void timed_fire(sched_timer *tm, int32_t res)
{
    struct uio_timed *h = TIMED_OF(tm);
    struct worker *w = h->w;
    struct sched *s = h->s;
    struct urt_task *t = h->task;
    unsigned flags = h->flags & ~URT_SUBMIT_BLOCK;
    list_remove(w->uio, h);
    free(h);
    if (res == -ETIME)
        sched_submit(s, t, flags); /* from the worker: cannot fail */
    else
        sched_cancel_task(s, w, t);
}

/* On w: 0, or -ENOMEM (nothing armed). */
static int arm_here(struct worker *w, struct uio_timed *h)
{
    struct uio_worker *uw = uio_worker(w);
    if (!uw || timerq_add(&w->timers, &h->tm, h->due, timed_fire))
        return -ENOMEM;
    timerq_sync(&w->timers);
    h->w = w;
    h->prev = NULL;
    h->next = uw->timed;
    if (uw->timed)
        uw->timed->prev = h;
    uw->timed = h;
    return 0;
}

static enum urt_task_result arm_task_fn(struct urt_task *t, void *arg)
{
    (void)t;
    if (arm_here(sched_self(), arg))
        return URT_TASK_YIELD; /* no memory for the timer now: try again later */
    return URT_TASK_DONE;
}

static void arm_task_cancel(struct urt_task *t, void *arg)
{
    struct uio_timed *h = arg;
    (void)t;
    sched_cancel_task(h->s, sched_current(h->s), h->task);
    free(h);
}

/* Places the holder's task (admission_place_fn; ctx: the caller's holder
 * pointer): takes h whatever it returns (*ctx := NULL), so the caller frees
 * h only when the admission refused the task before placing it. */
static int timed_place(void *ctx, struct urt_task *t, unsigned flags)
{
    struct uio_timed **hp = ctx, *h = *hp;
    struct sched *s = h->s;
    *hp = NULL;
    if (h->due <= urt_clock_ns()) {
        free(h);
        return sched_submit(s, t, flags);
    }
    struct worker *self = sched_current(s);
    if (self) {
        if (arm_here(self, h) == 0)
            return 0;
        free(h);
        return -ENOMEM;
    }
    urt_task_init(&h->arm, arm_task_fn, h);
    h->arm.cancel = arm_task_cancel;
    int err = sched_submit_to(s, sched_pick_worker(s), &h->arm);
    if (err)
        free(h);
    return err;
}

void uio_timed_cancel_all(struct worker *w, struct uio_worker *uw)
{
    struct uio_timed *h;
    while ((h = uw->timed) != NULL) {
        uw->timed = h->next;
        timerq_remove(&w->timers, &h->tm);
        sched_cancel_task(w->s, w, h->task);
        free(h);
    }
}

/* ---- public API --------------------------------------------------------------------------- */

/* Submits t at due; on failure a pooled t went back to the pool. */
static int timed_submit(const char *fn, struct sched *s, struct urt_task *t, uint64_t due, unsigned flags)
{
    struct uio_timed *h = malloc(sizeof(*h));
    if (!h) {
        if (t->priv.flags & TASK_POOLED)
            sched_task_free(s, t);
        return urt__error(-ENOMEM, "%s: out of memory for the timer", fn);
    }
    h->tm = (sched_timer){0};
    h->s = s;
    h->task = t;
    h->due = due;
    h->flags = flags;
    int err;
    if (__builtin_expect(s->adm != NULL, 0)) {
        err = admission_submit_via(s, t, flags, timed_place, &h); /* frees a pooled t on failure */
        free(h); /* refused before it was placed (-EAGAIN, -ESHUTDOWN): still ours */
    } else {
        err = timed_place(&h, t, flags);
        if (err && (t->priv.flags & TASK_POOLED))
            sched_task_free(s, t);
    }
    if (err == -ENOMEM)
        return urt__error(err, "%s: out of memory for the timer", fn);
    return err ? sched_submit_error(fn, err) : 0;
}

URT_API int urt_task_submit_at(urt_runtime *rt, uint64_t due_ns, struct urt_task *task, unsigned flags)
{
    int err = sched_check_submit("urt_task_submit_at", rt, task && task->fn, task ? "task->fn" : "task", flags);
    if (err)
        return err;
    task->priv.submit_flags = flags;
    task->priv.flags &= ~(TASK_POOLED | TASK_ADMITTED);
    task->priv.job = NULL;
    task->priv.lane = NULL;
    return timed_submit("urt_task_submit_at", sched_of(rt), task, due_ns, flags);
}

URT_API int urt_spawn_at(urt_runtime *rt, uint64_t due_ns, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                         unsigned flags)
{
    int err = sched_check_submit("urt_spawn_at", rt, fn != NULL, "fn", flags);
    if (err)
        return err;
    struct sched *s = sched_of(rt);
    struct urt_task *t = sched_spawn_task(s, fn, cancel, arg, flags);
    if (!t)
        return urt__error(-ENOMEM, "urt_spawn_at: out of memory for a pooled task");
    return timed_submit("urt_spawn_at", s, t, due_ns, flags);
}
