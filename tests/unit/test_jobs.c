/*
 * tests/unit/test_jobs.c — jobs (SPEC C7) and hybrid scheduling (C8).
 *
 *  - a job that fans out ends once, after its last task, in place on a worker;
 *  - URT_JOB_TEARDOWN_TASK: the callback runs in its own task on a worker;
 *  - wait/poll: -EINPROGRESS before the end, the status after; -ETIMEDOUT;
 *    -EDEADLK from a worker;
 *  - readiness: a predicate that says "not yet" delays the teardown, re-checked
 *    on a timer (a bounded number of checks, not a spin);
 *  - deadline: a 5 ms deadline with endlessly re-queueing tasks ends with
 *    -ETIME within a bounded time (yielding tasks and resubmitting tasks, heavy
 *    and serial jobs);
 *  - cancel: queued tasks get their cancel callback, the status is -ECANCELED;
 *    submission to a cancelled job fails;
 *  - destroy(CANCEL) with a job's tasks queued: the callback runs once with
 *    -ECANCELED;
 *  - hybrid: a lightweight job's tasks all run on one worker, one at a time;
 *    a heavy job's tasks spread over the idle workers.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "tests/helpers.h"

struct jstate {
    urt_runtime *rt;
    urt_job *job;
    _Atomic int callbacks;
    _Atomic int status;
    _Atomic int cb_worker;
    _Atomic int tasks_run;
    _Atomic int tasks_cancelled;
    _Atomic int ready_calls;
    int ready_after;
    _Atomic uint64_t cb_ns;
    _Atomic uint32_t workers_seen; /* bit per worker */
    _Atomic int in_use, overlaps;
    uint64_t spin_ns;
    uint64_t spread_deadline_ns; /* heavy test: spin until two workers took part (or this time) */
};

static void done_cb(urt_job *job, int status, void *arg)
{
    struct jstate *s = arg;
    (void)job;
    atomic_store(&s->status, status);
    atomic_store(&s->cb_worker, urt_current_worker(s->rt));
    atomic_store(&s->cb_ns, now_ns());
    atomic_fetch_add(&s->callbacks, 1);
}

static void opts(struct urt_job_options *o, struct jstate *s)
{
    urt_job_options_init(o);
    o->done = done_cb;
    o->arg = s;
}

/* The set-up the job tests share: a runtime of `workers` workers
 * (lightweight_job_level and max_pending_tasks as given: 0 is the default)
 * in s->rt, o the default options with done_cb reporting into s (the rest of
 * s as the caller left it: a static, zeroed, with its test's settings). */
static void job_setup(struct jstate *s, struct urt_job_options *o, uint32_t workers, uint32_t lightweight,
                      uint64_t max_pending)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.lightweight_job_level = lightweight;
    cfg.max_pending_tasks = max_pending;
    s->rt = rt_create_or_skip(&cfg);
    opts(o, s);
}

/* Releases s->job and destroys s->rt (drain, every task accounted for). */
static void job_teardown(struct jstate *s)
{
    urt_job_release(s->job);
    rt_destroy_clean(s->rt, URT_SHUTDOWN_DRAIN, 0);
}

static void count_cancel(struct urt_task *t, void *arg)
{
    struct jstate *s = arg;
    (void)t;
    atomic_fetch_add(&s->tasks_cancelled, 1);
}

/* ---- fan-out ---------------------------------------------------------------------- */

#define FAN_DEPTH 9 /* 2^10 - 1 tasks */

static struct jstate *g_fan;

static enum urt_task_result fan_fn(struct urt_task *t, void *arg)
{
    struct jstate *s = g_fan;
    uintptr_t depth = (uintptr_t)arg;
    int w = urt_current_worker(s->rt);
    atomic_fetch_or(&s->workers_seen, 1u << w);
    if (atomic_exchange(&s->in_use, 1))
        atomic_fetch_add(&s->overlaps, 1);
    uint64_t end = now_ns() + s->spin_ns;
    while (now_ns() < end)
        ;
    atomic_store(&s->in_use, 0);
    if (depth < FAN_DEPTH) {
        urt_job *job = urt_task_job(t);
        if (urt_job_spawn(job, fan_fn, count_cancel, (void *)(depth + 1), 0) != 0 ||
            urt_job_spawn(job, fan_fn, count_cancel, (void *)(depth + 1), 0) != 0)
            atomic_fetch_add(&s->overlaps, 1000000); /* checked on the main thread */
    }
    /* heavy test: after submitting its children, hold the worker until the idle one has stolen something, so
     * a loaded machine that delays the thief does not decide the outcome */
    while (s->spread_deadline_ns && __builtin_popcount(atomic_load(&s->workers_seen)) < 2 &&
           now_ns() < s->spread_deadline_ns)
        sched_yield();
    atomic_fetch_add(&s->tasks_run, 1);
    return URT_TASK_DONE;
}

static void run_fanout(struct jstate *s, uint32_t flags, uint32_t work_level, uint32_t lightweight)
{
    struct urt_job_options o;
    job_setup(s, &o, 2, lightweight, 0);
    g_fan = s;
    o.flags = flags;
    o.work_level = work_level;
    cr_assert_eq(urt_job_create(s->rt, &o, &s->job), 0);
    cr_assert_eq(urt_job_poll(s->job), -EINPROGRESS);
    cr_assert_eq(urt_job_spawn(s->job, fan_fn, count_cancel, (void *)0, 0), 0);
    cr_assert_eq(urt_job_close(s->job), 0);
    cr_assert_eq(urt_job_close(s->job), -EALREADY);
    cr_assert_eq(urt_job_wait(s->job, 30ull * 1000 * 1000 * 1000), 0);
    cr_assert_eq(urt_job_poll(s->job), 0);
    cr_assert_eq(atomic_load(&s->callbacks), 1);
    cr_assert_eq(atomic_load(&s->tasks_run), (1 << (FAN_DEPTH + 1)) - 1);
    cr_assert_lt(atomic_load(&s->overlaps), 1000000, "a task's urt_job_spawn failed");
    cr_assert_geq(atomic_load(&s->cb_worker), 0, "the callback runs on a worker");
    cr_assert_eq(urt_job_cancel(s->job), -EALREADY);
    job_teardown(s);
    cr_assert_eq(atomic_load(&s->callbacks), 1);
}

Test(jobs, fanout_ends_once_in_place, .timeout = 60)
{
    static struct jstate s;
    run_fanout(&s, 0, URT_WORK_LEVEL_MAX, 0);
}

Test(jobs, fanout_teardown_task, .timeout = 60)
{
    static struct jstate s;
    run_fanout(&s, URT_JOB_TEARDOWN_TASK, URT_WORK_LEVEL_MAX, 0);
}

/* ---- hybrid -------------------------------------------------------------------------- */

Test(jobs, hybrid_lightweight_job_runs_on_one_worker, .timeout = 60)
{
    static struct jstate s;
    s.spin_ns = 2000;
    run_fanout(&s, 0, 5, 10);
    uint32_t seen = atomic_load(&s.workers_seen);
    cr_assert_eq(__builtin_popcount(seen), 1, "a serial job ran on workers 0x%x", seen);
    cr_assert_eq(atomic_load(&s.overlaps), 0, "tasks of a serial job overlapped");
}

Test(jobs, hybrid_heavy_job_spreads, .timeout = 60)
{
    static struct jstate s;
    s.spin_ns = 20000;
    s.spread_deadline_ns = now_ns() + 5ull * 1000 * 1000 * 1000;
    run_fanout(&s, 0, 11, 10);
    uint32_t seen = atomic_load(&s.workers_seen);
    cr_assert_eq(__builtin_popcount(seen), 2, "a heavy job ran only on workers 0x%x", seen);
}

/* ---- wait ------------------------------------------------------------------------------- */

static _Atomic int g_wait_from_worker = 1;

static enum urt_task_result wait_in_task(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_store(&g_wait_from_worker, urt_job_wait(arg, 1000));
    return URT_TASK_DONE;
}

Test(jobs, wait_timeout_and_worker_refusal, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 2, 0, 0);
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    uint64_t t0 = now_ns();
    cr_assert_eq(urt_job_wait(s.job, 20 * 1000 * 1000), -ETIMEDOUT); /* open: cannot end */
    cr_assert_geq(now_ns() - t0, 20 * 1000 * 1000);
    cr_assert_eq(urt_spawn(s.rt, wait_in_task, s.job, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_wait_from_worker) != 1, 5000));
    cr_assert_eq(atomic_load(&g_wait_from_worker), -EDEADLK);
    cr_assert_eq(urt_job_close(s.job), 0); /* no task: ends now (teardown handed to a worker) */
    cr_assert_eq(urt_job_wait(s.job, URT_WAIT_FOREVER), 0);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    job_teardown(&s);
}

/* ---- readiness ----------------------------------------------------------------------------- */

static bool ready_fn(urt_job *job, void *arg)
{
    struct jstate *s = arg;
    (void)job;
    return atomic_fetch_add(&s->ready_calls, 1) + 1 >= s->ready_after;
}

static enum urt_task_result nop_fn(struct urt_task *t, void *arg)
{
    struct jstate *s = arg;
    (void)t;
    atomic_fetch_add(&s->tasks_run, 1);
    return URT_TASK_DONE;
}

Test(jobs, readiness_delays_teardown_without_spinning, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 2, 0, 0);
    s.ready_after = 4;
    o.ready = ready_fn;
    o.ready_arg = &s;
    o.ready_interval_ns = 5 * 1000 * 1000;
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, NULL, &s, 0), 0);
    uint64_t t0 = now_ns();
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000), 0);
    uint64_t took = atomic_load(&s.cb_ns) - t0;
    cr_assert_eq(atomic_load(&s.ready_calls), 4, "the predicate ran %d times", atomic_load(&s.ready_calls));
    cr_assert_geq(took, 3 * 5 * 1000 * 1000ull, "teardown after %lu ns, before 3 intervals", (unsigned long)took);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    job_teardown(&s);
}

/* ---- deadline --------------------------------------------------------------------------------- */

static enum urt_task_result forever_yield(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return URT_TASK_YIELD;
}

static enum urt_task_result forever_resubmit(struct urt_task *t, void *arg)
{
    struct jstate *s = arg;
    int err = urt_job_spawn(urt_task_job(t), forever_resubmit, count_cancel, s, 0);
    if (err && err != -ECANCELED)
        atomic_fetch_add(&s->overlaps, 1); /* unexpected error */
    return URT_TASK_DONE;
}

static void run_deadline(uint32_t work_level, urt_task_fn *fn)
{
    static struct jstate s;
    memset(&s, 0, sizeof(s));
    struct urt_job_options o;
    job_setup(&s, &o, 2, 10, 0);
    /* 5 ms as the issue asks; sanitized builds run 5-15x slower, and creating
     * the job and spawning its tasks must fit inside the deadline. */
    const uint64_t deadline_ns = SCALE(5, 50) * 1000 * 1000ull;
    o.deadline_ns = deadline_ns;
    o.work_level = work_level;
    uint64_t t0 = now_ns();
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(urt_job_spawn(s.job, fn, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    int st = urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000);
    uint64_t took = atomic_load(&s.cb_ns) - t0;
    cr_assert_eq(st, -ETIME, "wait returned %d", st);
    cr_assert_eq(atomic_load(&s.status), -ETIME);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    cr_assert_geq(took, deadline_ns, "ended after %lu ns, before the deadline", (unsigned long)took);
    cr_assert_lt(took, SCALE(500, 2000) * 1000 * 1000ull, "ended %lu ns after creation", (unsigned long)took);
    cr_assert(urt_job_cancelled(s.job));
    cr_assert_eq(atomic_load(&s.overlaps), 0);
    cr_assert_geq(atomic_load(&s.tasks_cancelled), 1, "the pending tasks get their cancel callback");
    job_teardown(&s);
}

Test(jobs, deadline_5ms_yielding, .timeout = 30)
{
    run_deadline(URT_WORK_LEVEL_MAX, forever_yield);
}

Test(jobs, deadline_5ms_resubmitting, .timeout = 30)
{
    run_deadline(URT_WORK_LEVEL_MAX, forever_resubmit);
}

Test(jobs, deadline_5ms_serial_job, .timeout = 30)
{
    run_deadline(0, forever_resubmit);
}

Test(jobs, deadline_disarmed_when_job_ends_first, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 2, 0, 0);
    o.deadline_ns = 60ull * 1000 * 1000 * 1000; /* a drain would wait for it if it stayed armed */
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, NULL, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000), 0);
    urt_job_release(s.job);
    uint64_t t0 = now_ns();
    rt_destroy_clean(s.rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_lt(now_ns() - t0, 5ull * 1000 * 1000 * 1000, "drain waited for a disarmed deadline");
}

/* ---- cancel ----------------------------------------------------------------------------------- */

static _Atomic bool g_gate;

static enum urt_task_result gated_fn(struct urt_task *t, void *arg)
{
    struct jstate *s = arg;
    (void)t;
    while (!atomic_load(&g_gate))
        sched_yield();
    atomic_fetch_add(&s->tasks_run, 1);
    return URT_TASK_DONE;
}

Test(jobs, cancel_skips_queued_tasks, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 1, 0, 0);
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), 0);
    sleep_us(5000); /* the single worker is inside the first task */
    cr_assert_eq(urt_job_cancel(s.job), 0);
    cr_assert_eq(urt_job_cancel(s.job), -EALREADY);
    cr_assert(urt_job_cancelled(s.job));
    cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), -ECANCELED);
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000), -ECANCELED);
    cr_assert_eq(atomic_load(&s.tasks_run) + atomic_load(&s.tasks_cancelled), 50);
    cr_assert_leq(atomic_load(&s.tasks_run), 1, "%d tasks ran after the cancel", atomic_load(&s.tasks_run));
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    job_teardown(&s);
}

/* urt_job_abort: a cancel whose reason is the caller's error (a task graph's first error). */
Test(jobs, abort_carries_its_error, .timeout = 30)
{
    static struct jstate s;
    memset(&s, 0, sizeof(s));
    struct urt_job_options o;
    atomic_store(&g_gate, false);
    job_setup(&s, &o, 1, 0, 0);
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), 0);
    sleep_us(5000);
    cr_assert_eq(urt_job_abort(s.job, -EIO), 0);
    cr_assert_eq(urt_job_abort(s.job, -ENOSPC), -EALREADY, "the first reason stands");
    cr_assert_eq(urt_job_cancel(s.job), -EALREADY);
    cr_assert(urt_job_cancelled(s.job));
    cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), -ECANCELED);
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000), -EIO);
    cr_assert_eq(urt_job_poll(s.job), -EIO);
    cr_assert_eq(atomic_load(&s.status), -EIO);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    cr_assert_eq(atomic_load(&s.tasks_run) + atomic_load(&s.tasks_cancelled), 20);
    job_teardown(&s);
}

static void *open_gate_later(void *arg)
{
    (void)arg;
    sleep_us(20000);
    atomic_store(&g_gate, true);
    return NULL;
}

static void run_destroy_cancel(uint32_t work_level)
{
    static struct jstate s;
    memset(&s, 0, sizeof(s));
    struct urt_job_options o;
    atomic_store(&g_gate, false);
    job_setup(&s, &o, 2, 10, 0);
    o.work_level = work_level;
    o.deadline_ns = 60ull * 1000 * 1000 * 1000; /* armed: destroy must still free the job */
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    sleep_us(5000);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_gate_later, NULL), 0);
    int r = urt_runtime_destroy(s.rt, URT_SHUTDOWN_CANCEL);
    pthread_join(th, NULL);
    cr_assert_geq(r, 0);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    cr_assert_eq(atomic_load(&s.status), -ECANCELED);
    cr_assert_eq(atomic_load(&s.tasks_run) + atomic_load(&s.tasks_cancelled), 20);
    cr_assert_eq(urt_job_poll(s.job), -ECANCELED);
    urt_job_release(s.job);
}

Test(jobs, destroy_cancel_ends_job_once, .timeout = 30)
{
    run_destroy_cancel(URT_WORK_LEVEL_MAX);
}

Test(jobs, destroy_cancel_ends_serial_job_once, .timeout = 30)
{
    run_destroy_cancel(0);
}

/* ---- options ------------------------------------------------------------------------------------ */

Test(jobs, bad_options_rejected, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_job_options o;
    urt_job *job = NULL;
    urt_job_options_init(&o);
    o.work_level = 61;
    cr_assert_eq(urt_job_create(rt, &o, &job), -EINVAL);
    cr_assert(strstr(urt_last_error(), "work_level"), "%s", urt_last_error());
    urt_job_options_init(&o);
    o.flags = 0x80;
    cr_assert_eq(urt_job_create(rt, &o, &job), -EINVAL);
    urt_job_options_init(&o);
    o.reserved[2] = 1;
    cr_assert_eq(urt_job_create(rt, &o, &job), -EINVAL);
    urt_job_options_init(&o);
    o.ready_interval_ns = 1;
    cr_assert_eq(urt_job_create(rt, &o, &job), -EINVAL);
    cr_assert_null(job);
    cr_assert_eq(urt_job_create(rt, NULL, &job), 0);
    cr_assert_eq(urt_job_close(job), 0);
    cr_assert_eq(urt_job_wait(job, URT_WAIT_FOREVER), 0);
    urt_job_release(job);
    urt_job_release(NULL);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- admission limit ------------------------------------------------------------------------------ */

Test(jobs, job_tasks_count_against_max_pending_tasks, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 1, 0, 4);
    atomic_store(&g_gate, false);
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_spawn(s.job, gated_fn, count_cancel, &s, 0), -EAGAIN, "the fifth job task is over the limit");
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, 10ull * 1000 * 1000 * 1000), 0);
    cr_assert_eq(atomic_load(&s.tasks_run), 4);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    job_teardown(&s);
}

/* ---- misuse while the handle is held (issue 10, point 5) ------------------------------------- */

/* A job that ended (closed, last task done, callback ran) refuses new tasks
 * with -EINVAL and a message; the callback never runs a second time and the
 * job's memory stays valid until the handle is released (ASan checks it). */
static void run_spawn_after_end(uint32_t work_level)
{
    static struct jstate s;
    memset(&s, 0, sizeof(s));
    struct urt_job_options o;
    job_setup(&s, &o, 2, 10, 0);
    o.work_level = work_level;
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, URT_WAIT_FOREVER), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, count_cancel, &s, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "ended"), "%s", urt_last_error());
    static struct urt_task t;
    urt_task_init(&t, nop_fn, &s);
    cr_assert_eq(urt_job_submit(s.job, &t, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "urt_job_submit"), "%s", urt_last_error());
    cr_assert_eq(urt_job_close(s.job), -EALREADY);
    cr_assert(strstr(urt_last_error(), "closed"), "%s", urt_last_error());
    cr_assert_eq(urt_job_cancel(s.job), -EALREADY);
    cr_assert_eq(urt_job_poll(s.job), 0);
    job_teardown(&s);
    cr_assert_eq(atomic_load(&s.callbacks), 1, "the completion callback ran %d times", atomic_load(&s.callbacks));
    cr_assert_eq(atomic_load(&s.status), 0);
}

Test(jobs, spawn_after_end_is_refused, .timeout = 30)
{
    run_spawn_after_end(URT_WORK_LEVEL_MAX);
}

Test(jobs, spawn_after_end_is_refused_serial, .timeout = 30)
{
    run_spawn_after_end(0);
}

/* After urt_job_close() only the job's own tasks may submit (rule 3): a
 * submission from outside while a task still runs is refused (-EINVAL,
 * "closed"); the running task itself may still spawn. */
static _Atomic int g_inner_spawn = 1;

static enum urt_task_result gated_spawner(struct urt_task *t, void *arg)
{
    struct jstate *s = arg;
    while (!atomic_load(&g_gate))
        sched_yield();
    atomic_store(&g_inner_spawn, urt_job_spawn(urt_task_job(t), nop_fn, count_cancel, s, 0));
    atomic_fetch_add(&s->tasks_run, 1);
    return URT_TASK_DONE;
}

Test(jobs, spawn_from_outside_after_close_is_refused, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 2, 0, 0);
    atomic_store(&g_gate, false);
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, gated_spawner, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, count_cancel, &s, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "closed"), "%s", urt_last_error());
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_job_wait(s.job, URT_WAIT_FOREVER), 0);
    cr_assert_eq(atomic_load(&g_inner_spawn), 0, "a task of the job may spawn after close");
    cr_assert_eq(atomic_load(&s.tasks_run), 2);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
    job_teardown(&s);
}

/* The completion callback spawning into its own job: the job has ended. */
static _Atomic int g_cb_spawn = 1;

static void done_spawns(urt_job *job, int status, void *arg)
{
    struct jstate *s = arg;
    atomic_store(&g_cb_spawn, urt_job_spawn(job, nop_fn, count_cancel, s, 0));
    done_cb(job, status, arg);
}

Test(jobs, spawn_from_completion_callback_is_refused, .timeout = 30)
{
    static struct jstate s;
    struct urt_job_options o;
    job_setup(&s, &o, 1, 0, 0);
    o.done = done_spawns;
    cr_assert_eq(urt_job_create(s.rt, &o, &s.job), 0);
    cr_assert_eq(urt_job_spawn(s.job, nop_fn, count_cancel, &s, 0), 0);
    cr_assert_eq(urt_job_close(s.job), 0);
    cr_assert_eq(urt_job_wait(s.job, URT_WAIT_FOREVER), 0);
    cr_assert_eq(atomic_load(&g_cb_spawn), -EINVAL);
    job_teardown(&s);
    cr_assert_eq(atomic_load(&s.callbacks), 1);
}
