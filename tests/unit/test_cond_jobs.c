/*
 * tests/unit/test_cond_jobs.c — conditional tasks that belong to a job
 * (urt/watcher.h rules 7-9):
 *  - the job does not end while its cond is watched; the body runs as a task
 *    of the job, then the teardown runs once, after the body;
 *  - a serial job's body runs on the job's lane (its tasks never overlap);
 *  - cancelling the job, or its deadline, cancels a watched cond at once
 *    (long interval, check never true): its cancel callback runs, its body
 *    never, the job ends once with -ECANCELED / -ETIME, well before the
 *    cond's next check;
 *  - urt_cond_cancel of a job's cond does not cancel the job;
 *  - adding to a cancelled job (-ECANCELED), an ended job or a closed job
 *    from outside (-EINVAL), with a message;
 *  - a stress run: many jobs, each with conds, randomly cancelled or left
 *    to pass, against the model "every cond: exactly one of body / cancel;
 *    every job: one teardown, after all of its conds".
 */
#include "helpers.h"

#include <urt/urt.h>

struct jc {
    struct urt_cond cond;
    _Atomic int go;        /* check result */
    _Atomic int bodies, cancels;
    _Atomic int body_job_ok; /* urt_task_job(current task) == cond.job, seen by the body */
    _Atomic uint64_t body_ns, cancel_ns;
    bool added;
};

struct jstate {
    _Atomic int done_calls;
    _Atomic int status;
    _Atomic uint64_t done_ns;
    _Atomic int overlap, running; /* serial check */
};

static bool jc_check(struct urt_cond *c, void *arg)
{
    (void)c;
    return atomic_load(&((struct jc *)arg)->go) != 0;
}

static enum urt_task_result jc_body(struct urt_cond *c, void *arg)
{
    struct jc *x = arg;
    (void)c;
    atomic_store(&x->body_ns, now_ns());
    atomic_fetch_add(&x->bodies, 1);
    return URT_TASK_DONE;
}

static void jc_cancel(struct urt_cond *c, void *arg)
{
    struct jc *x = arg;
    (void)c;
    atomic_store(&x->cancel_ns, now_ns());
    atomic_fetch_add(&x->cancels, 1);
}

static void job_done(urt_job *job, int status, void *arg)
{
    struct jstate *js = arg;
    (void)job;
    atomic_store(&js->status, status);
    atomic_store(&js->done_ns, now_ns());
    atomic_fetch_add(&js->done_calls, 1);
}

static urt_runtime *make_rt(void)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    return rt_create_or_skip(&cfg);
}

static urt_job *make_job(urt_runtime *rt, struct jstate *js, uint64_t deadline_ns, uint32_t work_level)
{
    struct urt_job_options o;
    urt_job_options_init(&o);
    o.done = job_done;
    o.arg = js;
    o.deadline_ns = deadline_ns;
    o.work_level = work_level;
    urt_job *j = NULL;
    cr_assert_eq(urt_job_create(rt, &o, &j), 0, "%s", urt_last_error());
    return j;
}

static void jc_init(struct jc *x, urt_job *job, uint64_t interval_us)
{
    memset(x, 0, sizeof(*x));
    urt_cond_init(&x->cond, jc_check, jc_body, x);
    x->cond.cancel = jc_cancel;
    x->cond.job = job;
    x->cond.interval_us = interval_us;
}

Test(cond_jobs, job_waits_for_its_cond_then_ends_once_after_the_body, .timeout = 30)
{
    urt_runtime *rt = make_rt();
    struct jstate js = {0};
    urt_job *j = make_job(rt, &js, 0, URT_WORK_LEVEL_MAX);
    struct jc x;
    jc_init(&x, j, 1000);
    cr_assert_eq(urt_cond_add(rt, &x.cond), 0, "%s", urt_last_error());
    cr_assert_eq(urt_job_close(j), 0);
    sleep_us(20000);
    cr_assert_eq(atomic_load(&js.done_calls), 0, "the job ended while its cond was watched");
    cr_assert_eq(urt_job_poll(j), -EINPROGRESS);
    atomic_store(&x.go, 1);
    cr_assert_eq(urt_job_wait(j, 5ull * 1000000000ull), 0);
    cr_assert_eq(atomic_load(&x.bodies), 1);
    cr_assert_eq(atomic_load(&x.cancels), 0);
    cr_assert_eq(atomic_load(&js.done_calls), 1);
    cr_assert_eq(atomic_load(&js.status), 0);
    cr_assert_geq(atomic_load(&js.done_ns), atomic_load(&x.body_ns), "teardown before the body");
    urt_job_release(j);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

static struct jstate ser_js;

static enum urt_task_result ser_body(struct urt_cond *c, void *arg)
{
    struct jc *x = arg;
    (void)c;
    if (atomic_fetch_add(&ser_js.running, 1) != 0)
        atomic_store(&ser_js.overlap, 1);
    sleep_us(200);
    atomic_fetch_sub(&ser_js.running, 1);
    atomic_fetch_add(&x->bodies, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result ser_task(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    if (atomic_fetch_add(&ser_js.running, 1) != 0)
        atomic_store(&ser_js.overlap, 1);
    sleep_us(200);
    atomic_fetch_sub(&ser_js.running, 1);
    return URT_TASK_DONE;
}

Test(cond_jobs, serial_job_body_runs_on_its_lane, .timeout = 30)
{
    urt_runtime *rt = make_rt();
    memset(&ser_js, 0, sizeof(ser_js));
    urt_job *j = make_job(rt, &ser_js, 0, 0); /* work level 0: serial (lightweight_job_level default) */
    enum { N = 8 };
    static struct jc xs[N];
    for (int i = 0; i < N; i++) {
        jc_init(&xs[i], j, 100);
        xs[i].cond.body = ser_body;
        atomic_store(&xs[i].go, 1);
        cr_assert_eq(urt_cond_add(rt, &xs[i].cond), 0, "%s", urt_last_error());
        for (int k = 0; k < 4; k++)
            cr_assert_eq(urt_job_spawn(j, ser_task, NULL, NULL, 0), 0);
    }
    cr_assert_eq(urt_job_close(j), 0);
    cr_assert_eq(urt_job_wait(j, 10ull * 1000000000ull), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&xs[i].bodies), 1);
    cr_assert_eq(atomic_load(&ser_js.overlap), 0, "a serial job ran two of its tasks at once");
    urt_job_release(j);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

static void cancel_case(bool by_deadline)
{
    urt_runtime *rt = make_rt();
    struct jstate js = {0};
    urt_job *j = make_job(rt, &js, by_deadline ? 30ull * 1000000 : 0, URT_WORK_LEVEL_MAX);
    struct jc x;
    jc_init(&x, j, 10ull * 1000000); /* next check in 10 s: the cancel must not wait for it */
    cr_assert_eq(urt_cond_add(rt, &x.cond), 0, "%s", urt_last_error());
    cr_assert_eq(urt_job_close(j), 0);
    sleep_us(5000); /* the first check ran (false) */
    uint64_t t0 = now_ns();
    if (!by_deadline)
        cr_assert_eq(urt_job_cancel(j), 0);
    cr_assert_eq(urt_job_wait(j, 5ull * 1000000000ull), by_deadline ? -ETIME : -ECANCELED);
    cr_assert_lt(now_ns() - t0, 2ull * 1000000000ull, "the cond's cancel waited for its next check");
    cr_assert_eq(atomic_load(&x.bodies), 0, "the body of a cancelled job's cond ran");
    cr_assert_eq(atomic_load(&x.cancels), 1);
    cr_assert_eq(atomic_load(&js.done_calls), 1);
    cr_assert_geq(atomic_load(&js.done_ns), atomic_load(&x.cancel_ns), "teardown before the cond's cancel");
    urt_job_release(j);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(cond_jobs, cancelling_the_job_cancels_its_cond_now, .timeout = 30)
{
    cancel_case(false);
}

Test(cond_jobs, deadline_cancels_the_cond_now, .timeout = 30)
{
    cancel_case(true);
}

Test(cond_jobs, cancelling_the_cond_leaves_the_job_alone, .timeout = 30)
{
    urt_runtime *rt = make_rt();
    struct jstate js = {0};
    urt_job *j = make_job(rt, &js, 0, URT_WORK_LEVEL_MAX);
    struct jc x;
    jc_init(&x, j, 1000);
    cr_assert_eq(urt_cond_add(rt, &x.cond), 0);
    cr_assert_eq(urt_job_close(j), 0);
    cr_assert_eq(urt_cond_cancel(rt, &x.cond), 0);
    cr_assert_eq(urt_job_wait(j, 5ull * 1000000000ull), 0, "the job ends with 0: only its cond was cancelled");
    cr_assert_eq(atomic_load(&x.cancels), 1);
    cr_assert_eq(atomic_load(&x.bodies), 0);
    cr_assert_not(urt_job_cancelled(j));
    urt_job_release(j);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(cond_jobs, bad_job_states_are_refused_with_a_message, .timeout = 30)
{
    urt_runtime *rt = make_rt();
    struct jstate js = {0};
    struct jc x;

    urt_job *cancelled = make_job(rt, &js, 0, URT_WORK_LEVEL_MAX);
    cr_assert_eq(urt_job_cancel(cancelled), 0);
    jc_init(&x, cancelled, 1000);
    cr_assert_eq(urt_cond_add(rt, &x.cond), -ECANCELED);
    cr_assert(strstr(urt_last_error(), "cancelled"), "%s", urt_last_error());
    cr_assert_eq(urt_cond_add(rt, &x.cond), -ECANCELED, "a refused cond is the caller's again (rule 6)");
    cr_assert_eq(urt_job_close(cancelled), 0);
    cr_assert_eq(urt_job_wait(cancelled, 5ull * 1000000000ull), -ECANCELED);
    cr_assert_eq(urt_cond_add(rt, &x.cond), -ECANCELED);
    urt_job_release(cancelled);

    struct jstate js2 = {0};
    urt_job *closed = make_job(rt, &js2, 0, URT_WORK_LEVEL_MAX);
    struct jc keep;
    jc_init(&keep, closed, 1000); /* keeps the closed job alive */
    cr_assert_eq(urt_cond_add(rt, &keep.cond), 0);
    cr_assert_eq(urt_job_close(closed), 0);
    jc_init(&x, closed, 1000);
    cr_assert_eq(urt_cond_add(rt, &x.cond), -EINVAL, "closed job, caller is not one of its tasks");
    cr_assert(strstr(urt_last_error(), "closed"), "%s", urt_last_error());
    atomic_store(&keep.go, 1);
    cr_assert_eq(urt_job_wait(closed, 5ull * 1000000000ull), 0);
    jc_init(&x, closed, 1000);
    cr_assert_eq(urt_cond_add(rt, &x.cond), -EINVAL, "ended job");
    cr_assert(strstr(urt_last_error(), "ended"), "%s", urt_last_error());
    urt_job_release(closed);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- stress against the model ----------------------------------------------------------------- */

#define SJ 40
#define SC 6

static struct jstate sjs[SJ];
static struct jc sconds[SJ][SC];

Test(cond_jobs, stress_every_cond_once_every_job_once, .timeout = 120)
{
    urt_runtime *rt = make_rt();
    memset(sjs, 0, sizeof(sjs));
    urt_job *jobs[SJ];
    srand(5);
    int rounds = SCALE(5, 2);
    for (int r = 0; r < rounds; r++) {
        memset(sjs, 0, sizeof(sjs));
        for (int i = 0; i < SJ; i++) {
            jobs[i] = make_job(rt, &sjs[i], (rand() % 4 == 0) ? (uint64_t)(1 + rand() % 5) * 1000000 : 0,
                               (rand() % 3 == 0) ? 0 : URT_WORK_LEVEL_MAX);
            for (int k = 0; k < SC; k++) {
                jc_init(&sconds[i][k], jobs[i], 200 + (uint64_t)(rand() % 2000));
                atomic_store(&sconds[i][k].go, rand() % 2);
                int err = urt_cond_add(rt, &sconds[i][k].cond);
                cr_assert(err == 0 || err == -ECANCELED, "add: %d %s", err, urt_last_error()); /* deadline passed */
                sconds[i][k].added = err == 0;
            }
            cr_assert_eq(urt_job_close(jobs[i]), 0);
        }
        sleep_us((unsigned)(rand() % 3000));
        for (int i = 0; i < SJ; i++) {
            if (rand() % 2)
                urt_job_cancel(jobs[i]);
            for (int k = 0; k < SC; k++)
                if (rand() % 3 == 0)
                    urt_cond_cancel(rt, &sconds[i][k].cond);
                else
                    atomic_store(&sconds[i][k].go, 1);
        }
        for (int i = 0; i < SJ; i++) {
            int st = urt_job_wait(jobs[i], 10ull * 1000000000ull);
            cr_assert(st == 0 || st == -ECANCELED || st == -ETIME, "job %d: %d", i, st);
            cr_assert_eq(atomic_load(&sjs[i].done_calls), 1, "job %d teardown %d times", i,
                         atomic_load(&sjs[i].done_calls));
            for (int k = 0; k < SC; k++) {
                struct jc *x = &sconds[i][k];
                int b = atomic_load(&x->bodies), c = atomic_load(&x->cancels);
                if (!x->added) {
                    cr_assert_eq(b + c, 0, "a refused cond was called");
                    continue; /* refused at add (the deadline had passed) */
                }
                cr_assert_eq(b + c, 1, "job %d cond %d: %d bodies, %d cancels", i, k, b, c);
                uint64_t end = b ? atomic_load(&x->body_ns) : atomic_load(&x->cancel_ns);
                cr_assert_geq(atomic_load(&sjs[i].done_ns), end, "job %d ended before its cond %d", i, k);
                if (st != 0)
                    cr_assert(b == 0 || atomic_load(&x->body_ns) <= atomic_load(&sjs[i].done_ns));
            }
            urt_job_release(jobs[i]);
        }
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
