/*
 * tests/unit/test_watcher.c — conditional (watcher) tasks (SPEC C9,
 * urt/watcher.h lifecycle rules).
 *
 *  - a check that becomes true on its N-th call runs its body once, on a
 *    worker, about N-1 intervals after the add (the first check is at once);
 *  - many tasks with different intervals keep their cadence (tolerant lower
 *    bound: the machine is a shared 2-vCPU VM; the upper bound is exact: a
 *    check is never early);
 *  - an idle watcher makes no wake-ups (its sleep/wakeup/timer counters do
 *    not move), also after it watched and let go of tasks;
 *  - adds from foreign threads and from workers, concurrently: each body once;
 *  - cancel: 0 while watched (cancel callback once, on the watcher thread),
 *    -EALREADY once the body was handed over or after a cancel; -EBUSY for a
 *    double add; -EINVAL with another runtime than the cond's, in every state;
 *    a cancel racing the passing check: exactly one of body and cancel
 *    callback per task;
 *  - a body may add its cond again (periodic task);
 *  - shutdown: watched tasks get their cancel callback once (both modes).
 * Every test ends with a clean destroy.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "tests/helpers.h"

static urt_runtime *g_rt;

struct probe {
    struct urt_cond cond;
    _Atomic uint32_t checks;   /* check calls */
    uint32_t pass_at;          /* check returns true from this call on (0: never) */
    _Atomic uint32_t bodies, cancels;
    _Atomic int body_worker;   /* urt_current_worker() in the body */
    _Atomic int cancel_worker; /* urt_current_worker() in the cancel callback */
    _Atomic uint64_t body_ns;
    _Atomic bool pass_now;     /* external switch (pass_at == 0) */
    int readd;                 /* times the body adds the cond again */
    _Atomic bool added;        /* set by the test after urt_cond_add */
};

static bool probe_check(struct urt_cond *c, void *arg)
{
    struct probe *p = arg;
    (void)c;
    uint32_t n = atomic_fetch_add(&p->checks, 1) + 1;
    if (p->pass_at)
        return n >= p->pass_at;
    return atomic_load(&p->pass_now);
}

static enum urt_task_result probe_body(struct urt_cond *c, void *arg)
{
    struct probe *p = arg;
    atomic_store(&p->body_ns, now_ns());
    atomic_store(&p->body_worker, urt_current_worker(g_rt));
    atomic_fetch_add(&p->bodies, 1);
    if (p->readd > 0) {
        p->readd--;
        atomic_store(&p->checks, 0);
        urt_cond_add(g_rt, c);
    }
    return URT_TASK_DONE;
}

static void probe_cancel(struct urt_cond *c, void *arg)
{
    struct probe *p = arg;
    (void)c;
    atomic_store(&p->cancel_worker, urt_current_worker(g_rt));
    atomic_fetch_add(&p->cancels, 1);
}

static void probe_init(struct probe *p, uint32_t pass_at, uint64_t interval_us)
{
    memset(p, 0, sizeof(*p));
    urt_cond_init(&p->cond, probe_check, probe_body, p);
    p->cond.cancel = probe_cancel;
    p->cond.interval_us = interval_us;
    p->pass_at = pass_at;
    atomic_store(&p->body_worker, -2);
    atomic_store(&p->cancel_worker, -2);
}

static urt_runtime *make_rt(uint32_t workers, uint64_t interval_us)
{
    struct urt_config c;
    test_config(&c, workers);
    c.watcher_interval_us = interval_us;
    g_rt = rt_create_or_skip(&c);
    return g_rt;
}

static struct urt_watcher_stats wstats(void)
{
    struct urt_watcher_stats s;
    cr_assert_eq(urt_watcher_stats(g_rt, &s), 0);
    return s;
}

/* ---- N polls ------------------------------------------------------------------------------ */

Test(watcher, body_runs_once_on_a_worker_after_n_polls, .timeout = 60)
{
    enum { N = 10, INTERVAL_US = 2000 };
    make_rt(2, INTERVAL_US);
    struct probe p;
    probe_init(&p, N, 0);
    uint64_t t0 = now_ns();
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 1, 10000), "body did not run");
    uint64_t elapsed = atomic_load(&p.body_ns) - t0;
    sleep_us(5 * INTERVAL_US); /* no further check, no second body */
    cr_assert_eq(atomic_load(&p.bodies), 1);
    cr_assert_eq(atomic_load(&p.checks), N, "checks: %u", atomic_load(&p.checks));
    cr_assert_eq(atomic_load(&p.cancels), 0);
    int wk = atomic_load(&p.body_worker);
    cr_assert(wk >= 0 && wk < 2, "body ran on worker %d", wk);
    /* first check at once, then one per interval: N-1 intervals, never earlier */
    cr_assert_geq(elapsed, (uint64_t)(N - 1) * INTERVAL_US * 1000, "body after %lu ns", (unsigned long)elapsed);
    cr_assert_leq(elapsed, (uint64_t)(N - 1) * INTERVAL_US * 1000 * 10, "body after %lu ns", (unsigned long)elapsed);
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.checks_run, N);
    cr_assert_eq(s.checks_passed, 1);
    cr_assert_eq(s.bodies_scheduled, 1);
    cr_assert_eq(s.watching, 0);
    cr_assert_eq(s.latency_count, 1);
    cr_assert_geq(s.latency_max_ns, 1);
    cr_assert_geq(s.latency_p99_ns, s.latency_p50_ns);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(watcher, check_passing_at_once_runs_body_without_waiting_an_interval, .timeout = 60)
{
    make_rt(1, 1000000); /* 1 s interval: only an immediate first check can pass quickly */
    struct probe p;
    probe_init(&p, 1, 0);
    uint64_t t0 = now_ns();
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 1, 5000));
    cr_assert_lt(atomic_load(&p.body_ns) - t0, 500ull * 1000000, "first check waited for the interval");
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- cadence ------------------------------------------------------------------------------- */

Test(watcher, many_tasks_keep_their_cadence, .timeout = 60)
{
    enum { N_TASKS = 40, RUN_MS = 300 };
    static const uint64_t intervals_us[] = {2000, 3000, 5000, 10000};
    make_rt(2, 1000);
    struct probe *ps = calloc(N_TASKS, sizeof(*ps));
    cr_assert_not_null(ps);
    for (int i = 0; i < N_TASKS; i++) {
        probe_init(&ps[i], 0, intervals_us[i % 4]);
        cr_assert_eq(urt_cond_add(g_rt, &ps[i].cond), 0);
    }
    uint64_t t0 = now_ns();
    sleep_us(RUN_MS * 1000);
    uint32_t seen[N_TASKS];
    for (int i = 0; i < N_TASKS; i++)
        seen[i] = atomic_load(&ps[i].checks);
    uint64_t elapsed_us = (now_ns() - t0) / 1000;
    for (int i = 0; i < N_TASKS; i++) {
        uint64_t iv = intervals_us[i % 4];
        uint64_t max = elapsed_us / iv + 2; /* first check at once, never early */
        uint64_t expect = RUN_MS * 1000ull / iv;
        cr_assert_leq(seen[i], max, "task %d (interval %lu us): %u checks in %lu us", i, (unsigned long)iv, seen[i],
                      (unsigned long)elapsed_us);
        cr_assert_geq(seen[i], expect / 4, "task %d (interval %lu us): %u checks, expected about %lu", i,
                      (unsigned long)iv, seen[i], (unsigned long)expect);
    }
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.watching, N_TASKS);
    cr_assert_eq(s.checks_passed, 0);
    /* one timer for all of them: fires bounded by the distinct due times, not by N_TASKS x checks */
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    for (int i = 0; i < N_TASKS; i++) {
        cr_assert_eq(atomic_load(&ps[i].cancels), 1, "shutdown cancels a watched task once");
        cr_assert_eq(atomic_load(&ps[i].bodies), 0);
    }
    free(ps);
}

/* ---- idle ---------------------------------------------------------------------------------- */

static void assert_idle_for(unsigned ms)
{
    struct urt_watcher_stats a = wstats();
    sleep_us(ms * 1000ull);
    struct urt_watcher_stats b = wstats();
    cr_assert_eq(b.wakeups, a.wakeups, "idle watcher woke %lu times in %u ms", (unsigned long)(b.wakeups - a.wakeups),
                 ms);
    cr_assert_eq(b.sleeps, a.sleeps);
    cr_assert_eq(b.timer_fires, a.timer_fires);
    cr_assert_eq(b.checks_run, a.checks_run);
}

Test(watcher, idle_watcher_makes_no_wakeups, .timeout = 60)
{
    make_rt(2, 1000);
    sleep_us(SCALE(20000, 200000));
    assert_idle_for(150);
    struct urt_watcher_stats s = wstats();
    cr_assert_leq(s.sleeps, 1, "a fresh watcher sleeps once: %lu", (unsigned long)s.sleeps);
    cr_assert_eq(s.wakeups, 0);

    /* watch something for a while, then let it pass: idle again afterwards */
    struct probe p;
    probe_init(&p, 20, 0);
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 1, 10000));
    /* and one that is cancelled while its timer is armed far in the future */
    struct probe q;
    probe_init(&q, 0, 10ull * 1000 * 1000);
    cr_assert_eq(urt_cond_add(g_rt, &q.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&q.checks) == 1, 5000));
    cr_assert_eq(urt_cond_cancel(g_rt, &q.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&q.cancels) == 1, 5000));
    /* settle: the cancelled timer's completion and the watcher's last pass
     * may still be on their way (slow under a sanitizer) */
    cr_assert(WAIT_UNTIL(wstats().watching == 0, 5000));
    sleep_us(SCALE(20000, 200000));
    assert_idle_for(150);
    s = wstats();
    cr_assert_geq(s.timer_fires, 19, "20 checks need 19 timer expiries: %lu", (unsigned long)s.timer_fires);
    cr_assert_eq(s.watching, 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- concurrent adds -------------------------------------------------------------------------- */

enum { ADDERS = 3, PER_ADDER = 200 };
static struct probe *g_probes;

static void *adder_thread(void *arg)
{
    uintptr_t k = (uintptr_t)arg;
    for (int i = 0; i < PER_ADDER; i++) {
        struct probe *p = &g_probes[k * PER_ADDER + i];
        if (urt_cond_add(g_rt, &p->cond) != 0)
            atomic_fetch_add(&p->cancels, 100); /* flagged: asserted on the main thread */
        if (i % 16 == 0)
            sleep_us(200);
    }
    return NULL;
}

/* Task on a worker: adds its share of conds. */
static enum urt_task_result adder_task(struct urt_task *t, void *arg)
{
    (void)t;
    adder_thread(arg);
    return URT_TASK_DONE;
}

Test(watcher, concurrent_adds_from_threads_and_workers_run_each_body_once, .timeout = 60)
{
    make_rt(2, 500);
    g_probes = calloc((ADDERS + 1) * PER_ADDER, sizeof(*g_probes));
    cr_assert_not_null(g_probes);
    for (int i = 0; i < (ADDERS + 1) * PER_ADDER; i++)
        probe_init(&g_probes[i], 1 + (uint32_t)(i % 5), 0);
    pthread_t th[ADDERS];
    for (uintptr_t k = 0; k < ADDERS; k++)
        cr_assert_eq(pthread_create(&th[k], NULL, adder_thread, (void *)k), 0);
    cr_assert_eq(urt_spawn(g_rt, adder_task, (void *)(uintptr_t)ADDERS, 0), 0);
    for (int k = 0; k < ADDERS; k++)
        pthread_join(th[k], NULL);
    int n = (ADDERS + 1) * PER_ADDER;
    bool all = WAIT_UNTIL(({
                              bool ok = true;
                              for (int i = 0; i < n && ok; i++)
                                  ok = atomic_load(&g_probes[i].bodies) == 1;
                              ok;
                          }),
                          20000);
    cr_assert(all, "not every body ran");
    sleep_us(5000);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&g_probes[i].bodies), 1, "probe %d: %u bodies", i, atomic_load(&g_probes[i].bodies));
        cr_assert_eq(atomic_load(&g_probes[i].cancels), 0, "probe %d: add failed or cancelled", i);
        cr_assert_eq(atomic_load(&g_probes[i].checks), 1 + (uint32_t)(i % 5));
    }
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.bodies_scheduled, (uint64_t)n);
    cr_assert_eq(s.latency_count, (uint64_t)n);
    cr_assert_eq(s.watching, 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(g_probes);
}

/* ---- cancel ------------------------------------------------------------------------------------- */

Test(watcher, cancel_rules, .timeout = 60)
{
    make_rt(2, 1000);
    struct probe p;
    probe_init(&p, 0, 0); /* never passes on its own */
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), -EALREADY, "not added yet");
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), -EBUSY);
    cr_assert(WAIT_UNTIL(atomic_load(&p.checks) >= 3, 5000));
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), 0);
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), -EALREADY, "second cancel");
    cr_assert(WAIT_UNTIL(atomic_load(&p.cancels) == 1, 5000));
    cr_assert_eq(atomic_load(&p.cancel_worker), -1, "cancel callback runs on the watcher, not a worker");
    uint32_t checks = atomic_load(&p.checks);
    sleep_us(10000);
    cr_assert_eq(atomic_load(&p.checks), checks, "a cancelled task is not checked any more");
    cr_assert_eq(atomic_load(&p.bodies), 0);

    /* the cond is the caller's again: it can be added anew, and pass */
    atomic_store(&p.pass_now, true);
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 1, 5000));
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), -EALREADY, "body already handed over");
    sleep_us(5000);
    cr_assert_eq(atomic_load(&p.cancels), 1);

    cr_assert_eq(urt_cond_add(NULL, &p.cond), -EINVAL);
    cr_assert_eq(urt_cond_add(g_rt, NULL), -EINVAL);
    struct urt_cond bad;
    urt_cond_init(&bad, NULL, probe_body, NULL);
    cr_assert_eq(urt_cond_add(g_rt, &bad), -EINVAL, "no check");
    urt_cond_init(&bad, probe_check, NULL, NULL);
    cr_assert_eq(urt_cond_add(g_rt, &bad), -EINVAL, "no body");
    cr_assert_eq(urt_cond_cancel(g_rt, NULL), -EINVAL);
    /* Conditions that belong to a job: tests/unit/test_cond_jobs.c. */
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.cancelled, 1);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* A worker kept busy until released (a body handed over stays pending behind it). */
static _Atomic bool g_block_release, g_blocking;

static enum urt_task_result blocker(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_store(&g_blocking, true);
    while (!atomic_load(&g_block_release))
        sleep_us(200);
    return URT_TASK_DONE;
}

/* urt_cond_cancel with another runtime than the cond's answers -EINVAL in every
 * state of the cond (watched, body handed to a worker and pending, body run,
 * cancelled), never -EALREADY: the wrong runtime is the caller's bug, whatever
 * the timing. A cond never added is "not watched" (-EALREADY) on any runtime. */
Test(watcher, cancel_with_another_runtime_is_einval_in_every_state, .timeout = 60)
{
    struct urt_config cb;
    test_config(&cb, 1);
    urt_runtime *rt_b = rt_create_or_skip(&cb);
    make_rt(1, 1000); /* g_rt: runtime A, one worker */
    struct probe p;
    probe_init(&p, 0, 0);
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EALREADY, "never added: not watched, on any runtime");
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.checks) >= 1, 5000));
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EINVAL, "watched by A");

    /* A's only worker is busy: the body, once handed over, waits behind it. */
    static struct urt_task block;
    atomic_store(&g_block_release, false);
    atomic_store(&g_blocking, false);
    urt_task_init(&block, blocker, NULL);
    cr_assert_eq(urt_task_submit(g_rt, &block, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_blocking), 5000));
    atomic_store(&p.pass_now, true);
    cr_assert(WAIT_UNTIL(wstats().bodies_scheduled == 1, 5000));
    cr_assert_eq(atomic_load(&p.bodies), 0, "the body waits behind the blocker");
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EINVAL, "body handed to A's worker, pending");
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), -EALREADY, "too late on A");
    atomic_store(&g_block_release, true);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 1, 5000));
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EINVAL, "body run on A");
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), -EALREADY, "not watched any more");

    /* Watched again, cancelled on A: the cancel callback may or may not have run. */
    atomic_store(&p.pass_now, false);
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert_eq(urt_cond_cancel(g_rt, &p.cond), 0);
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EINVAL, "cancelled on A");
    cr_assert(WAIT_UNTIL(atomic_load(&p.cancels) == 1, 5000));
    cr_assert_eq(urt_cond_cancel(rt_b, &p.cond), -EINVAL, "cancel callback run on A");
    cr_assert_eq(atomic_load(&p.bodies), 1);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    rt_destroy_clean(rt_b, URT_SHUTDOWN_DRAIN, 0);
}

static void *canceller_thread(void *arg)
{
    int n = (int)(uintptr_t)arg;
    for (int i = 0; i < n; i++) {
        struct probe *p = &g_probes[i];
        /* even: after the first check (racing the second); odd: right after the add */
        while (i % 2 == 0 ? atomic_load(&p->checks) == 0 : !atomic_load(&p->added))
            sched_yield();
        int r = urt_cond_cancel(g_rt, &p->cond);
        if (r != 0 && r != -EALREADY)
            atomic_fetch_add(&p->cancels, 100);
    }
    return NULL;
}

Test(watcher, cancel_racing_the_check_runs_exactly_one_of_body_and_cancel, .timeout = 60)
{
    int n = SCALE(2000, 500);
    make_rt(2, 100);
    g_probes = calloc((size_t)n, sizeof(*g_probes));
    cr_assert_not_null(g_probes);
    for (int i = 0; i < n; i++)
        probe_init(&g_probes[i], 1 + (uint32_t)(i % 8), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, canceller_thread, (void *)(uintptr_t)n), 0);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(urt_cond_add(g_rt, &g_probes[i].cond), 0);
        atomic_store(&g_probes[i].added, true);
        if (i % 64 == 63)
            sleep_us(300);
    }
    pthread_join(th, NULL);
    bool settled = WAIT_UNTIL(({
                                  bool ok = true;
                                  for (int i = 0; i < n && ok; i++)
                                      ok = atomic_load(&g_probes[i].bodies) + atomic_load(&g_probes[i].cancels) == 1;
                                  ok;
                              }),
                              20000);
    cr_assert(settled, "some task got neither body nor cancel");
    sleep_us(5000);
    uint64_t bodies = 0, cancels = 0;
    for (int i = 0; i < n; i++) {
        uint32_t b = atomic_load(&g_probes[i].bodies), c = atomic_load(&g_probes[i].cancels);
        cr_assert_eq(b + c, 1, "probe %d: %u bodies, %u cancels", i, b, c);
        bodies += b;
        cancels += c;
    }
    cr_log_info("cancel race: %lu bodies, %lu cancels", (unsigned long)bodies, (unsigned long)cancels);
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.bodies_scheduled, bodies);
    cr_assert_eq(s.cancelled, cancels);
    cr_assert_eq(s.watching, 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(g_probes);
}

/* ---- periodic ------------------------------------------------------------------------------------- */

Test(watcher, body_can_add_its_cond_again, .timeout = 60)
{
    make_rt(2, 1000);
    struct probe p;
    probe_init(&p, 2, 0);
    p.readd = 4;
    cr_assert_eq(urt_cond_add(g_rt, &p.cond), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&p.bodies) == 5, 10000), "bodies: %u", atomic_load(&p.bodies));
    sleep_us(10000);
    cr_assert_eq(atomic_load(&p.bodies), 5);
    cr_assert_eq(wstats().checks_passed, 5);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- shutdown --------------------------------------------------------------------------------------- */

static _Atomic bool g_release;

static enum urt_task_result hold_fn(struct urt_task *t, void *arg)
{
    (void)t;
    _Atomic int *started = arg;
    atomic_fetch_add(started, 1);
    uint64_t deadline = now_ns() + 20ull * 1000000000ull;
    while (!atomic_load(&g_release) && now_ns() < deadline)
        sleep_us(200);
    return URT_TASK_DONE;
}

static void *release_later(void *arg)
{
    (void)arg;
    sleep_us(50000);
    atomic_store(&g_release, true);
    return NULL;
}

static void shutdown_case(enum urt_shutdown mode)
{
    enum { WATCHED = 50 };
    make_rt(1, 1000);
    struct probe *ps = calloc(WATCHED + 1, sizeof(*ps));
    cr_assert_not_null(ps);
    for (int i = 0; i < WATCHED; i++) {
        probe_init(&ps[i], 0, 1000 + 100 * (uint64_t)i);
        cr_assert_eq(urt_cond_add(g_rt, &ps[i].cond), 0);
    }
    /* one body handed over but queued behind a task that holds the only worker */
    atomic_store(&g_release, false);
    _Atomic int started = 0;
    cr_assert_eq(urt_spawn(g_rt, hold_fn, &started, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&started) == 1, 5000));
    struct probe *queued = &ps[WATCHED];
    probe_init(queued, 1, 0);
    cr_assert_eq(urt_cond_add(g_rt, &queued->cond), 0);
    cr_assert(WAIT_UNTIL(wstats().bodies_scheduled == 1, 5000));
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, release_later, NULL), 0);
    int r = urt_runtime_destroy(g_rt, mode);
    pthread_join(th, NULL);
    for (int i = 0; i < WATCHED; i++) {
        cr_assert_eq(atomic_load(&ps[i].cancels), 1, "watched %d: %u cancels", i, atomic_load(&ps[i].cancels));
        cr_assert_eq(atomic_load(&ps[i].bodies), 0);
    }
    if (mode == URT_SHUTDOWN_DRAIN) {
        cr_assert_eq(r, 0);
        cr_assert_eq(atomic_load(&queued->bodies), 1, "drain runs a handed-over body");
        cr_assert_eq(atomic_load(&queued->cancels), 0);
    } else {
        cr_assert_eq(r, 1, "cancel returned %d", r);
        cr_assert_eq(atomic_load(&queued->bodies), 0);
        cr_assert_eq(atomic_load(&queued->cancels), 1, "cancel mode cancels a queued body");
    }
    free(ps);
    leak_check();
}

Test(watcher, shutdown_drain_cancels_watched_and_runs_queued_bodies, .timeout = 60)
{
    shutdown_case(URT_SHUTDOWN_DRAIN);
}

Test(watcher, shutdown_cancel_cancels_watched_and_queued_bodies, .timeout = 60)
{
    shutdown_case(URT_SHUTDOWN_CANCEL);
}

Test(watcher, config_fields, .timeout = 30)
{
    struct urt_config c;
    urt_config_init(&c);
    cr_assert_eq(c.watcher_interval_us, 1000);
    cr_assert_eq(c.max_pending_tasks, 0);
    cr_assert_eq(c.task_runtime_limit_us, 0);
    cr_assert_eq(c.watchdog_abort, false);
    cr_assert_eq(urt_config_set(&c, "watcher_interval_us", "0"), -EINVAL);
    cr_assert_eq(urt_config_set(&c, "watcher_interval_us", "2500"), 0);
    cr_assert_eq(c.watcher_interval_us, 2500);
    cr_assert_eq(urt_config_set(&c, "max_pending_tasks", "64"), 0);
    cr_assert_eq(urt_config_set(&c, "task_runtime_limit_us", "5000"), 0);
    cr_assert_eq(urt_config_set(&c, "watchdog_abort", "true"), 0);
    cr_assert_eq(urt_config_validate(&c, NULL, 0), 0);
    c.task_runtime_limit_us = 0;
    cr_assert_eq(urt_config_validate(&c, NULL, 0), -EINVAL, "abort policy without a limit");
    cr_assert(strstr(urt_last_error(), "watchdog_abort") != NULL, "%s", urt_last_error());
    c.watchdog_abort = false;
    c.watcher_interval_us = 0;
    cr_assert_eq(urt_config_validate(&c, NULL, 0), -EINVAL);
    cr_assert(strstr(urt_last_error(), "watcher_interval_us") != NULL, "%s", urt_last_error());
}

/* ---- what a check must not do ------------------------------------------------------------------------ */

static _Atomic int g_destroy_in_check = 1;

static bool destroying_check(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_store(&g_destroy_in_check, urt_runtime_destroy(g_rt, URT_SHUTDOWN_DRAIN));
    return true;
}

static enum urt_task_result noop_body(struct urt_cond *c, void *arg)
{
    (void)c;
    atomic_fetch_add((_Atomic int *)arg, 1);
    return URT_TASK_DONE;
}

Test(watcher, destroy_from_a_check_is_refused, .timeout = 30)
{
    make_rt(1, 1000);
    _Atomic int ran = 0;
    struct urt_cond c;
    urt_cond_init(&c, destroying_check, noop_body, &ran);
    cr_assert_eq(urt_cond_add(g_rt, &c), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&ran) == 1, 5000));
    cr_assert_eq(atomic_load(&g_destroy_in_check), -EDEADLK);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- no lost wake-up ---------------------------------------------------------------------------------
 * One task at a time, added (or cancelled) from another thread while the
 * watcher has nothing else to wait for: no timer is armed, so a lost wake
 * message would leave the task unseen until the test's deadline. */

static void *rounds_thread(void *arg)
{
    int n = (int)(uintptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        struct probe *p = &g_probes[i];
        if (i % 2 == 0) {
            /* passes at once: the body proves the add woke the watcher */
            if (urt_cond_add(g_rt, &p->cond) != 0 || !WAIT_UNTIL(atomic_load(&p->bodies) == 1, 5000))
                return (void *)(uintptr_t)(i + 1);
        } else {
            /* never passes, 1 h interval: the cancel callback proves the cancel woke it */
            if (urt_cond_add(g_rt, &p->cond) != 0 || !WAIT_UNTIL(atomic_load(&p->checks) == 1, 5000) ||
                urt_cond_cancel(g_rt, &p->cond) != 0 || !WAIT_UNTIL(atomic_load(&p->cancels) == 1, 5000))
                return (void *)(uintptr_t)(i + 1);
        }
        if (rng_next(&rng) % 4 == 0)
            sleep_us(rng_next(&rng) % 200); /* sometimes let the watcher fall asleep */
    }
    return NULL;
}

Test(watcher, no_lost_wakeup_on_add_or_cancel, .timeout = 120)
{
    int n = SCALE(3000, 600);
    make_rt(1, 1000);
    g_probes = calloc((size_t)n, sizeof(*g_probes));
    cr_assert_not_null(g_probes);
    for (int i = 0; i < n; i++)
        probe_init(&g_probes[i], i % 2 == 0 ? 1 : 0, i % 2 == 0 ? 0 : 3600ull * 1000 * 1000);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, rounds_thread, (void *)(uintptr_t)n), 0);
    void *failed = NULL;
    pthread_join(th, &failed);
    cr_assert_null(failed, "round %lu stalled: a wake-up was lost", (unsigned long)(uintptr_t)failed - 1);
    struct urt_watcher_stats s = wstats();
    cr_assert_eq(s.bodies_scheduled, (uint64_t)(n + 1) / 2);
    cr_assert_eq(s.cancelled, (uint64_t)n / 2);
    cr_assert_gt(s.wake_messages, 0);
    cr_log_info("%d rounds: %lu sleeps, %lu wake messages, %lu timer expiries", n, (unsigned long)s.sleeps,
                (unsigned long)s.wake_messages, (unsigned long)s.timer_fires);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    free(g_probes);
}
