/*
 * sched/job.c — jobs (SPEC C7) and hybrid scheduling (C8).
 *
 * A job counts its live tasks in `live`, plus one while it is open (not yet
 * closed). Every task of the job adds one at submission (the submitter holds
 * a count: its own task's, or the open one, so `live` cannot reach 0 under
 * it) and removes one after its fn returned DONE or its cancel callback ran
 * and the task was released. The decrement that reaches 0 ends the job:
 *
 *   teardown: readiness predicate (false: re-check after ready_interval_ns on
 *             a timeout SQE of the same worker's ring, no spinning) -> seal the
 *             status (0, or the first cancel reason) -> completion callback ->
 *             running := 0, waking waiters -> disarm the deadline -> release.
 *
 * It runs in place on the worker of the last task (default) or in the
 * embedded teardown task (URT_JOB_TEARDOWN_TASK). If the count reaches 0 on a
 * thread that is not a worker (urt_job_close of an empty job), the teardown
 * task is handed to a worker; at runtime destroy (no worker left) it runs in
 * place on the destroying thread, without waiting for readiness.
 *
 * Cancel: the status word goes JOB_OPEN -> reason (-ECANCELED, -ETIME, an
 * urt_job_abort error) by CAS,
 * once; the teardown seals it JOB_OPEN -> JOB_SEALED_OK by the same CAS, so
 * either the cancel wins (callback sees the reason) or the teardown does
 * (cancel returns -EALREADY). A task of a cancelled job is not run: the
 * worker checks the status before fn (sched_run_skip) and calls the cancel
 * callback instead.
 *
 * Deadline: a timer in one worker's timer queue (sched_timer_arm_at,
 * sched/core/timer.h): directly when the job is created on a worker, else by the embedded
 * arm_task handed to a worker. Its expiry (-ETIME) cancels the job with
 * -ETIME. The teardown disarms it: directly on that worker, else with the
 * embedded disarm_task sent to it. The arm task and the teardown meet by a
 * Dekker pair (J4): arm stores timer_worker then loads running; teardown
 * clears running then loads timer_worker; at least one sees the other, so the timer is
 * either never armed or disarmed.
 *
 * Hybrid (C8): work_level <= lightweight_job_level gives the job its own lane
 * (sched/lane.c): its tasks run one at a time on the lane's worker, never
 * stolen; heavier jobs use the ordinary queues and stealing.
 *
 * References (refs; the memory is freed at 0):
 *   the caller's handle (urt_job_release), the runtime's (dropped at the end
 *   of the teardown), one while the deadline timer may still complete, one
 *   while a disarm task is queued, one while the serial lane is active.
 *
 * ---- Memory ordering (the contract, once) ------------------------------------
 *  (J1) live: the decrement is acq_rel; the one reaching 0 has acquired every
 *       task's writes, so the callback sees them. Increments are a relaxed
 *       CAS that never moves live away from 0 (job_count_in): 0 means the job
 *       ended (or its teardown started) and stays so, so a submission after
 *       the end is refused (-EINVAL) instead of starting a second teardown.
 *       A legal submitter already holds a count (its own task's, or the open
 *       one), so the CAS cannot fail for it; the task is published by its
 *       queue.
 *  (J6) closed: relaxed exchange by urt_job_close, relaxed load by
 *       submitters. It only tells misuse (a submission from outside the
 *       job's tasks after close, -EINVAL) from legal use; safety never
 *       depends on it (J1 does). "Outside the job's tasks" is read from the
 *       calling worker's running_job (owner only: set around each task's fn
 *       by run_task and the lane runner).
 *  (J2) refs: acq_rel decrement, the last one frees (standard refcount).
 *  (J3) status: CAS by cancel (seq_cst, for J7) / seal (acq_rel); acquire load before each task
 *       (sched_run_skip) and in urt_job_cancelled, so a task that sees the
 *       cancel sees what the canceller wrote before it.
 *  (J4) timer_worker / running: seq_cst store, loads and the teardown's
 *       seq_cst sub (Dekker, above; base/waitcount.h W3).
 *  (J5) running is a waitcount (base/waitcount.h): urt_job_wait sleeps on it
 *       until the teardown's sub brings it to 0 (no lost wake-up: W1), and
 *       the sub is a release that urt_job_poll's acquire load pairs with, so
 *       a waiter sees the status and what the callback wrote (W2).
 *  (J7) conds / status (conditions of the job, urt/watcher.h rules 7-9): a
 *       cond's add increments conds then loads status; a cancel CASes status
 *       then loads conds (all seq_cst, Dekker): either the add sees the
 *       cancel (-ECANCELED) or the cancel sees the cond and calls the
 *       scheduler's job_conds_cancelled hook (the watcher sweeps now). Missing
 *       it would only delay the cancel to the cond's next check, which looks
 *       at the job's status too.
 *  (J8) ios / status (I/O of the job's tasks, io/uio.c): the same Dekker
 *       pair as J7 — job_io_begin increments ios then loads status, a cancel
 *       CASes status then loads ios (all seq_cst): either the submission
 *       sees the cancel (-ECANCELED) or the cancel sees the operation and
 *       calls sched_clients.io_sweep, which cancels it on its worker.
 *  timer_armed, deadline_io and ready_io belong to the worker they are on.
 */
#include "sched/job.h"
#include "sched/admission.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/clock.h"
#include "base/error.h"

#define JOB_OF(ptr, member) ((struct urt_job *)((char *)(ptr) - offsetof(struct urt_job, member)))

/* ---- references ------------------------------------------------------------------ */

static inline void job_ref(struct urt_job *j)
{
    atomic_fetch_add_explicit(&j->refs, 1, memory_order_relaxed);
}

static void job_unref(struct urt_job *j)
{
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) /* (J2) */
        free(j);
}

/* ---- cancel ------------------------------------------------------------------------ */

/* JOB_OPEN -> reason, once. 0 or -EALREADY. Any thread. */
static int job_cancel_reason(struct urt_job *j, int32_t reason)
{
    int32_t open = JOB_OPEN;
    /* (J3) release: pairs with the acquire loads of job_is_cancelled. */
    if (!atomic_compare_exchange_strong_explicit(&j->status, &open, reason, memory_order_seq_cst,
                                                 memory_order_acquire))
        return -EALREADY;
    /* (J7) after the status CAS: a cond added meanwhile either sees the
     * cancel (job_cond_add) or is counted here. */
    if (atomic_load_explicit(&j->conds, memory_order_seq_cst) && j->s->job_conds_cancelled)
        j->s->job_conds_cancelled(j->s);
    if (atomic_load_explicit(&j->ios, memory_order_seq_cst)) /* (J8) */
        sched_clients.io_sweep(j->s);
    return 0;
}

/* ---- deadline --------------------------------------------------------------------- */

static void on_deadline(struct sched_io *io, struct worker *w, int32_t res, uint32_t cqe_flags)
{
    struct urt_job *j = JOB_OF(io, deadline_io);
    (void)w;
    (void)cqe_flags;
    j->timer_armed = false;
    if (res == -ETIME)
        job_cancel_reason(j, -ETIME);
    job_unref(j); /* the timer's reference */
}

/* On w: arms the deadline unless the job already ended. Consumes the timer
 * reference when it does not arm. */
static void deadline_arm_here(struct worker *w, struct urt_job *j)
{
    atomic_store_explicit(&j->timer_worker, w, memory_order_seq_cst); /* (J4) */
    if (urt_waitcount_count(atomic_load_explicit(&j->running, memory_order_seq_cst)) == 0 || job_is_cancelled(j)) {
        job_unref(j);
        return;
    }
    if (sched_timer_arm_at(w, &j->deadline_io, j->deadline_abs_ns, on_deadline) == 0) {
        j->timer_armed = true;
        return;
    }
    job_unref(j); /* no memory for the timer: the deadline is not enforced */
}

static enum urt_task_result arm_task_fn(struct urt_task *t, void *arg)
{
    (void)t;
    deadline_arm_here(sched_self(), arg);
    return URT_TASK_DONE;
}

static void arm_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    job_unref(arg); /* never armed */
}

static enum urt_task_result disarm_task_fn(struct urt_task *t, void *arg)
{
    struct urt_job *j = arg;
    (void)t;
    if (j->timer_armed)
        sched_timer_cancel(sched_self(), &j->deadline_io); /* on_deadline(-ECANCELED) drops the ref */
    job_unref(j); /* the disarm task's reference */
    return URT_TASK_DONE;
}

static void disarm_task_cancel(struct urt_task *t, void *arg)
{
    struct urt_job *j = arg;
    (void)t;
    /* Runtime destroy: the workers (and their rings) are gone, the timer will
     * never complete. */
    if (j->timer_armed) {
        j->timer_armed = false;
        job_unref(j);
    }
    job_unref(j);
}

static void deadline_disarm(struct sched *s, struct worker *w, struct urt_job *j)
{
    if (!j->opt.deadline_ns)
        return;
    struct worker *tw = atomic_load_explicit(&j->timer_worker, memory_order_seq_cst); /* (J4) */
    if (!tw)
        return; /* the arm task will see ended */
    if (tw == w) {
        if (j->timer_armed)
            sched_timer_cancel(w, &j->deadline_io);
        return;
    }
    if (!w && atomic_load_explicit(&s->phase, memory_order_acquire) == PHASE_STOPPING) {
        /* Teardown on the destroying thread after the workers stopped. */
        if (j->timer_armed) {
            j->timer_armed = false;
            job_unref(j);
        }
        return;
    }
    job_ref(j);
    /* The sticky queue: only tw runs it (an inbox task may move to tw's
     * deque and be stolen), and the timer is in tw's queue. */
    sched_push_sticky(s, tw, &j->disarm_task);
}

/* ---- teardown ------------------------------------------------------------------------ */

static void teardown_run(struct worker *w, struct urt_job *j);

static void on_ready_timer(struct sched_io *io, struct worker *w, int32_t res, uint32_t cqe_flags)
{
    (void)res;
    (void)cqe_flags;
    teardown_run(w, JOB_OF(io, ready_io));
    sched_io_flush(w); /* a disarm or re-arm prepared outside a task */
}

static void teardown_run(struct worker *w, struct urt_job *j)
{
    struct sched *s = j->s;
    if (j->opt.ready && w && !j->opt.ready((urt_job *)j, j->opt.ready_arg)) {
        if (sched_timer_arm(w, &j->ready_io, j->opt.ready_interval_ns, on_ready_timer) == 0)
            return;
        sched_local_push(w, &j->teardown_task); /* no memory for the timer: re-check as a task */
        return;
    }
    int32_t st = JOB_OPEN;
    atomic_compare_exchange_strong_explicit(&j->status, &st, JOB_SEALED_OK, memory_order_acq_rel,
                                            memory_order_acquire); /* (J3) */
    int status = st == JOB_OPEN ? 0 : st;
    if (j->opt.done)
        j->opt.done((urt_job *)j, status, j->opt.arg);
    urt_waitcount_sub(&j->running, 1); /* (J4)(J5) */
    deadline_disarm(s, w, j);
    job_unref(j); /* the runtime's reference */
}

static enum urt_task_result teardown_task_fn(struct urt_task *t, void *arg)
{
    (void)t;
    teardown_run(sched_self(), arg);
    return URT_TASK_DONE;
}

static void teardown_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    job_cancel_reason(arg, -ECANCELED);
    teardown_run(NULL, arg);
}

/* live reached 0 on w (NULL: a thread that is not a worker). */
static void job_end(struct sched *s, struct worker *w, struct urt_job *j)
{
    if (w) {
        if (j->opt.flags & URT_JOB_TEARDOWN_TASK)
            sched_local_push(w, &j->teardown_task);
        else
            teardown_run(w, j);
        return;
    }
    if (sched_submit(s, &j->teardown_task, 0) != 0)
        teardown_run(NULL, j); /* runtime destroy: no worker to hand it to */
}

void job_task_finished(struct sched *s, struct worker *w, struct urt_job *j)
{
    /* (J1) acq_rel: the last decrement sees every task's writes. */
    if (atomic_fetch_sub_explicit(&j->live, 1, memory_order_acq_rel) == 1)
        job_end(s, w, j);
}

void job_task_cancelled(struct sched *s, struct worker *w, struct urt_job *j)
{
    job_cancel_reason(j, -ECANCELED);
    job_task_finished(s, w, j);
}

/* ---- serial jobs' lane -------------------------------------------------------------- */

static void job_lane_active(void *ctx)
{
    job_ref(ctx);
}

static void job_lane_idle(void *ctx)
{
    job_unref(ctx);
}

static const struct lane_ops job_lane_ops = {
    .active = job_lane_active,
    .idle = job_lane_idle,
};

/* ---- public API ------------------------------------------------------------------------ */

URT_API void urt_job_options_init(struct urt_job_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->ready_interval_ns = 100 * 1000;
    opt->work_level = URT_WORK_LEVEL_MAX;
}

static int check_options(const struct urt_job_options *o)
{
    if (urt__check_range("urt_job_create", "work_level", o->work_level, 0, URT_WORK_LEVEL_MAX))
        return -EINVAL;
    if (urt__check_flags("urt_job_create", o->flags, URT_JOB_FLAGS_ALL))
        return -EINVAL;
    if (o->ready_interval_ns < 1000 || o->ready_interval_ns > 10ull * 1000 * 1000 * 1000)
        return urt__error(-EINVAL, "urt_job_create: ready_interval_ns %llu is out of range (1000..10^10)",
                          (unsigned long long)o->ready_interval_ns);
    if (URT_CHECK_RESERVED("urt_job_create", "opt", o))
        return -EINVAL;
    return 0;
}

URT_API int urt_job_create(urt_runtime *rt, const struct urt_job_options *opt, urt_job **out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_job_create: NULL %s", rt ? "out" : "runtime");
    struct urt_job_options defaults;
    if (!opt) {
        urt_job_options_init(&defaults);
        opt = &defaults;
    }
    int err = check_options(opt);
    if (err)
        return err;
    struct sched *s = sched_of(rt);
    if (atomic_load_explicit(&s->phase, memory_order_acquire) != PHASE_RUNNING)
        return urt__error(-ESHUTDOWN, "urt_job_create: the runtime is being destroyed");
    struct urt_job *j = aligned_alloc(64, (sizeof(*j) + 63) & ~(size_t)63);
    if (!j)
        return urt__error(-ENOMEM, "urt_job_create: out of memory");
    memset(j, 0, sizeof(*j));
    j->s = s;
    j->opt = *opt;
    atomic_init(&j->live, 1); /* the open count (rule 3) */
    atomic_init(&j->status, JOB_OPEN);
    atomic_init(&j->running, 1);
    atomic_init(&j->refs, 2 + (opt->deadline_ns ? 1 : 0));
    atomic_init(&j->closed, 0);
    atomic_init(&j->timer_worker, NULL);
    urt_task_init(&j->teardown_task, teardown_task_fn, j);
    j->teardown_task.cancel = teardown_task_cancel;
    urt_task_init(&j->arm_task, arm_task_fn, j);
    j->arm_task.cancel = arm_task_cancel;
    urt_task_init(&j->disarm_task, disarm_task_fn, j);
    j->disarm_task.cancel = disarm_task_cancel;
    j->serial = opt->work_level <= s->cfg->lightweight_job_level;
    if (j->serial)
        lane_init(&j->lane, s, LANE_JOB, &job_lane_ops, j);
    if (opt->deadline_ns) {
        j->deadline_abs_ns = urt_now_ns() + opt->deadline_ns;
        struct worker *self = sched_current(s);
        if (self) {
            deadline_arm_here(self, j);
        } else if (sched_submit(s, &j->arm_task, URT_SUBMIT_URGENT) != 0) {
            free(j);
            return urt__error(-ESHUTDOWN, "urt_job_create: the runtime is being destroyed");
        }
    }
    *out = j;
    return 0;
}

/* Submits task as a task of job. On failure the task is the caller's again,
 * except a pooled task refused by the admission limit, which admission_submit
 * already gave back to the pool (*gone = true). */
/* (J1) live + 1 unless it is 0 (the job ended, or its teardown started). */
static bool job_count_in(struct urt_job *j)
{
    uint64_t v = atomic_load_explicit(&j->live, memory_order_relaxed);
    do {
        if (v == 0)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&j->live, &v, v + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

/* True when the calling thread runs a task of j (J6). */
static bool job_is_caller(struct urt_job *j)
{
    struct worker *w = sched_current(j->s);
    return w && w->running_job == j;
}

/* The state checks of a submission (rules 2 and 3); on success the task is
 * counted in live. fn names the public function for the message. */
static int job_admit(struct urt_job *j, const char *fn)
{
    if (atomic_load_explicit(&j->live, memory_order_relaxed) == 0)
        return urt__error(-EINVAL, "%s: job %p has ended (no task may be added)", fn, (void *)j);
    if (atomic_load_explicit(&j->closed, memory_order_relaxed) && !job_is_caller(j)) /* (J6) */
        return urt__error(-EINVAL, "%s: job %p is closed (only its own tasks may submit)", fn, (void *)j);
    if (job_is_cancelled(j))
        return urt__error(-ECANCELED, "%s: job %p was cancelled", fn, (void *)j);
    if (!job_count_in(j)) /* (J1) */
        return urt__error(-EINVAL, "%s: job %p has ended (no task may be added)", fn, (void *)j);
    return 0;
}

static int job_submit(urt_job *job, struct urt_task *task, unsigned flags, bool *gone, const char *fn)
{
    *gone = false;
    int err = job_admit(job, fn);
    if (err)
        return err;
    struct sched *s = job->s;
    task->priv.job = job;
    task->priv.submit_flags = flags;
    task->priv.flags &= ~TASK_ADMITTED;
    if (job->serial) {
        err = lane_submit_counted(&job->lane, task, flags, gone); /* max_pending_tasks counts it */
    } else if (__builtin_expect(s->adm != NULL, 0)) {
        bool pooled = task->priv.flags & TASK_POOLED;
        err = admission_submit(s, task, flags, NULL); /* max_pending_tasks (sched/admission.c) */
        *gone = err && pooled;
    } else {
        err = sched_submit(s, task, flags);
    }
    if (err) {
        if (!*gone)
            task->priv.job = NULL;
        job_task_finished(s, sched_current(s), job);
        if (err == -EAGAIN)
            return urt__error(err, "%s: max_pending_tasks reached (job %p)", fn, (void *)job);
        return urt__error(err, "%s: the runtime is being destroyed (job %p)", fn, (void *)job);
    }
    return 0;
}

int job_cond_add(struct urt_job *j, const char *fn)
{
    atomic_fetch_add_explicit(&j->conds, 1, memory_order_seq_cst); /* (J7) before the status check */
    int err = atomic_load_explicit(&j->status, memory_order_seq_cst) < 0 /* (J7) */
                  ? urt__error(-ECANCELED, "%s: job %p was cancelled", fn, (void *)j)
                  : job_admit(j, fn);
    if (err)
        atomic_fetch_sub_explicit(&j->conds, 1, memory_order_relaxed);
    return err;
}

int job_io_begin(struct urt_job *j)
{
    atomic_fetch_add_explicit(&j->ios, 1, memory_order_seq_cst); /* (J8) before the status check */
    if (atomic_load_explicit(&j->status, memory_order_seq_cst) < 0 || !job_count_in(j)) { /* (J8), (J1) */
        atomic_fetch_sub_explicit(&j->ios, 1, memory_order_relaxed);
        return -ECANCELED;
    }
    return 0;
}

void job_io_more(struct urt_job *j)
{
    job_count_in(j); /* the operation holds a count: cannot fail (J1) */
}

void job_io_end(struct urt_job *j)
{
    atomic_fetch_sub_explicit(&j->ios, 1, memory_order_relaxed);
}

void job_cond_unwatch(struct urt_job *j)
{
    atomic_fetch_sub_explicit(&j->conds, 1, memory_order_relaxed);
}

void job_cond_rewatch(struct urt_job *j)
{
    atomic_fetch_add_explicit(&j->conds, 1, memory_order_relaxed);
}

int job_cond_submit(struct urt_job *j, struct urt_task *t, unsigned flags)
{
    t->priv.job = j;
    t->priv.submit_flags = flags;
    if (j->serial)
        return lane_submit(&j->lane, t, flags);
    return sched_submit(j->s, t, flags);
}

URT_API int urt_job_submit(urt_job *job, struct urt_task *task, unsigned flags)
{
    if (!job || !task || !task->fn)
        return urt__error(-EINVAL, "urt_job_submit: %s is NULL", !job ? "job" : !task ? "task" : "task->fn");
    if (urt__check_flags("urt_job_submit", flags, URT_SUBMIT_FLAGS_ALL))
        return -EINVAL;
    bool gone;
    task->priv.flags &= ~TASK_POOLED;
    return job_submit(job, task, flags, &gone, "urt_job_submit");
}

URT_API int urt_job_spawn(urt_job *job, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg, unsigned flags)
{
    if (!job || !fn)
        return urt__error(-EINVAL, "urt_job_spawn: %s is NULL", job ? "fn" : "job");
    if (urt__check_flags("urt_job_spawn", flags, URT_SUBMIT_FLAGS_ALL))
        return -EINVAL;
    struct sched *s = job->s;
    struct urt_task *t = sched_spawn_task(s, fn, cancel, arg, flags);
    if (!t)
        return urt__error(-ENOMEM, "urt_job_spawn: out of memory for a pooled task");
    bool gone;
    int err = job_submit(job, t, flags, &gone, "urt_job_spawn");
    if (err && !gone) {
        t->priv.flags = 0;
        sched_task_free(s, t);
    }
    return err;
}

URT_API int urt_job_close(urt_job *job)
{
    if (!job)
        return urt__error(-EINVAL, "urt_job_close: job is NULL");
    if (atomic_exchange_explicit(&job->closed, 1, memory_order_relaxed)) /* (J6) */
        return urt__error(-EALREADY, "urt_job_close: job %p was closed before", (void *)job);
    job_task_finished(job->s, sched_current(job->s), job);
    return 0;
}

URT_API int urt_job_cancel(urt_job *job)
{
    if (!job)
        return urt__error(-EINVAL, "urt_job_cancel: job is NULL");
    if (job_cancel_reason(job, -ECANCELED))
        return urt__error(-EALREADY, "urt_job_cancel: job %p was already cancelled, timed out or ending", (void *)job);
    return 0;
}

URT_API int urt_job_abort(urt_job *job, int err)
{
    if (!job)
        return urt__error(-EINVAL, "urt_job_abort: job is NULL");
    if (err >= 0 || err < -4095 || err == -EINPROGRESS)
        return urt__error(-EINVAL, "urt_job_abort: err %d is not a negative errno (-4095..-1, not -EINPROGRESS)",
                          err);
    if (job_cancel_reason(job, err))
        return urt__error(-EALREADY, "urt_job_abort: job %p was already cancelled, timed out or ending", (void *)job);
    return 0;
}

URT_API bool urt_job_cancelled(const urt_job *job)
{
    return job && job_is_cancelled(job);
}

URT_API int urt_job_poll(const urt_job *job)
{
    if (!job)
        return urt__error(-EINVAL, "urt_job_poll: job is NULL");
    if (urt_waitcount_count(atomic_load_explicit(&((urt_job *)job)->running, memory_order_acquire)) != 0)
        return -EINPROGRESS; /* (J5) */
    int32_t st = atomic_load_explicit(&job->status, memory_order_acquire);
    return st == JOB_SEALED_OK ? 0 : st;
}

URT_API int urt_job_wait(urt_job *job, uint64_t timeout_ns)
{
    if (!job)
        return urt__error(-EINVAL, "urt_job_wait: job is NULL");
    if (sched_current(job->s))
        return urt__error(-EDEADLK, "urt_job_wait: workers never block (use urt_job_poll)");
    uint64_t now = urt_clock_ns();
    uint64_t deadline = timeout_ns >= URT_WAITCOUNT_FOREVER - now ? URT_WAITCOUNT_FOREVER : now + timeout_ns;
    if (urt_waitcount_wait(&job->running, deadline)) /* (J5) */
        return urt__error(-ETIMEDOUT, "urt_job_wait: job %p did not end within timeout_ns %llu", (void *)job,
                          (unsigned long long)timeout_ns);
    return urt_job_poll(job);
}

URT_API urt_job *urt_task_job(const struct urt_task *task)
{
    return task ? task->priv.job : NULL;
}

URT_API void urt_job_release(urt_job *job)
{
    if (job)
        job_unref(job);
}
