/*
 * tests/unit/test_admission.c — the pending-task limit (SPEC C10,
 * urt/admission.h).
 *
 *  - at the limit a submission fails with -EAGAIN (urt_task_submit and
 *    urt_spawn; the task stays the caller's, nothing runs), and succeeds again
 *    once a task completes;
 *  - URT_SUBMIT_BLOCK from a foreign thread waits until a slot frees; from a
 *    worker it fails with -EAGAIN (a worker never blocks);
 *  - a yield is not a completion: a yielding task keeps its slot;
 *  - invariant counter: producers (blocking foreign threads, tasks spawning
 *    from workers) never get more tasks pending than the limit — a test-side
 *    live counter (incremented after a successful submit, decremented in the
 *    task) and the runtime's high-water mark both stay <= limit;
 *  - fairness: submitters blocked one after another get their slots in the
 *    same order (FIFO), even while non-blocking submitters keep trying;
 *  - destroy wakes blocked submitters with -ESHUTDOWN;
 *  - limit 0: nothing counted, URT_SUBMIT_BLOCK ignored.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "tests/helpers.h"

static urt_runtime *g_rt;
static _Atomic bool g_release;
static _Atomic int g_started, g_done;

static urt_runtime *make_rt(uint32_t workers, uint64_t limit)
{
    struct urt_config c;
    test_config(&c, workers);
    c.max_pending_tasks = limit;
    g_rt = rt_create_or_skip(&c);
    atomic_store(&g_release, false);
    atomic_store(&g_started, 0);
    atomic_store(&g_done, 0);
    return g_rt;
}

static struct urt_admission_stats astats(void)
{
    struct urt_admission_stats s;
    cr_assert_eq(urt_admission_stats(g_rt, &s), 0);
    return s;
}

/* Holds its slot (and its worker) until g_release. */
static enum urt_task_result hold_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_started, 1);
    uint64_t deadline = now_ns() + 20ull * 1000000000ull;
    while (!atomic_load(&g_release) && now_ns() < deadline)
        sleep_us(100);
    atomic_fetch_add(&g_done, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result count_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_done, 1);
    return URT_TASK_DONE;
}

Test(admission, eagain_at_the_limit, .timeout = 60)
{
    enum { LIMIT = 4 };
    make_rt(2, LIMIT);
    /* two hold the workers, two wait in the queues: 4 pending */
    for (int i = 0; i < LIMIT; i++)
        cr_assert_eq(urt_spawn(g_rt, hold_fn, NULL, 0), 0);
    struct urt_admission_stats s = astats();
    cr_assert_eq(s.limit, LIMIT);
    cr_assert_eq(s.pending, LIMIT);
    struct urt_task t;
    urt_task_init(&t, count_fn, NULL);
    cr_assert_eq(urt_task_submit(g_rt, &t, 0), -EAGAIN);
    cr_assert_eq(urt_task_submit(g_rt, &t, URT_SUBMIT_URGENT), -EAGAIN);
    cr_assert_eq(urt_spawn(g_rt, count_fn, NULL, 0), -EAGAIN);
    s = astats();
    cr_assert_eq(s.rejected, 3);
    cr_assert_eq(s.pending, LIMIT);
    cr_assert_eq(s.max_pending, LIMIT);
    atomic_store(&g_release, true);
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000), "pending %lu", (unsigned long)astats().pending);
    /* the refused task was never touched: it can be submitted now */
    cr_assert_eq(urt_task_submit(g_rt, &t, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_done) == LIMIT + 1, 5000));
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

struct blocked_submit {
    pthread_t th;
    _Atomic int result;
    _Atomic bool returned;
    _Atomic uint64_t order; /* position among the returns */
    int gate;               /* gated_submit_thread: the gate of its task */
};
static _Atomic uint64_t g_return_seq;

static void *block_submit_thread(void *arg)
{
    struct blocked_submit *b = arg;
    int r = urt_spawn(g_rt, count_fn, NULL, URT_SUBMIT_BLOCK);
    atomic_store(&b->order, atomic_fetch_add(&g_return_seq, 1));
    atomic_store(&b->result, r);
    atomic_store(&b->returned, true);
    return NULL;
}

static _Atomic int g_worker_block_result = 1;

static enum urt_task_result worker_block_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&g_worker_block_result, urt_spawn(g_rt, count_fn, NULL, URT_SUBMIT_BLOCK));
    return URT_TASK_DONE;
}

static _Atomic bool g_gates[16], g_gate_seen[16];
static enum urt_task_result gated_fn(struct urt_task *t, void *arg);

Test(admission, block_waits_for_a_slot_and_workers_never_block, .timeout = 60)
{
    make_rt(2, 2);
    /* a yielding holder: worker_block_fn may be queued on the same worker */
    cr_assert_eq(urt_spawn(g_rt, gated_fn, (void *)(uintptr_t)15, 0), 0);
    cr_assert_eq(urt_spawn(g_rt, worker_block_fn, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_worker_block_result) != 1, 5000));
    cr_assert_eq(atomic_load(&g_worker_block_result), -EAGAIN, "a worker got %d", atomic_load(&g_worker_block_result));
    cr_assert(WAIT_UNTIL(astats().pending == 1, 5000));
    cr_assert_eq(urt_spawn(g_rt, hold_fn, NULL, 0), 0); /* 2 pending: full */

    struct blocked_submit b = {.result = 1};
    cr_assert_eq(pthread_create(&b.th, NULL, block_submit_thread, &b), 0);
    cr_assert(WAIT_UNTIL(astats().waiting == 1, 5000), "the submitter did not block");
    sleep_us(20000);
    cr_assert(!atomic_load(&b.returned), "returned without a free slot");
    cr_assert_eq(astats().blocked, 1);
    atomic_store(&g_release, true);
    atomic_store(&g_gates[15], true);
    pthread_join(b.th, NULL);
    cr_assert_eq(atomic_load(&b.result), 0);
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000));
    cr_assert_leq(astats().max_pending, 2);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

static _Atomic int g_yields_left;

static enum urt_task_result yield_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    if (atomic_fetch_sub(&g_yields_left, 1) > 0) {
        sleep_us(200);
        return URT_TASK_YIELD;
    }
    return URT_TASK_DONE;
}

Test(admission, a_yield_is_not_a_completion, .timeout = 60)
{
    make_rt(1, 1);
    atomic_store(&g_yields_left, 50);
    cr_assert_eq(urt_spawn(g_rt, yield_fn, NULL, 0), 0);
    int refused = 0;
    while (atomic_load(&g_yields_left) > 5) {
        int r = urt_spawn(g_rt, count_fn, NULL, 0);
        cr_assert_eq(r, -EAGAIN, "a yielding task released its slot (%d)", r);
        refused++;
        sleep_us(100);
    }
    cr_assert_gt(refused, 0);
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000));
    cr_assert_eq(urt_spawn(g_rt, count_fn, NULL, 0), 0);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- invariant ------------------------------------------------------------------------------------ */

static _Atomic int64_t g_live, g_live_max;
static _Atomic uint64_t g_ran, g_refused_in_task;

static void note_live(int64_t v)
{
    int64_t m = atomic_load(&g_live_max);
    while (v > m && !atomic_compare_exchange_weak(&g_live_max, &m, v))
        ;
}

static enum urt_task_result live_fn(struct urt_task *t, void *arg);

static int submit_live(unsigned flags, uintptr_t depth)
{
    int r = urt_spawn(g_rt, live_fn, (void *)depth, flags);
    if (r == 0)
        note_live(atomic_fetch_add(&g_live, 1) + 1);
    return r;
}

static enum urt_task_result live_fn(struct urt_task *t, void *arg)
{
    (void)t;
    uintptr_t depth = (uintptr_t)arg;
    for (volatile int i = 0; i < 2000; i++)
        ;
    if (depth > 0) {
        for (int k = 0; k < 2; k++)
            if (submit_live(0, depth - 1) == -EAGAIN)
                atomic_fetch_add(&g_refused_in_task, 1);
    }
    atomic_fetch_add(&g_ran, 1);
    atomic_fetch_sub(&g_live, 1); /* before the runtime releases the slot */
    return URT_TASK_DONE;
}

static _Atomic uint64_t g_producer_errors;

static void *producer_thread(void *arg)
{
    int n = (int)(uintptr_t)arg;
    for (int i = 0; i < n; i++) {
        int r = submit_live(i % 3 ? URT_SUBMIT_BLOCK : 0, 2);
        if (r != 0 && r != -EAGAIN)
            atomic_fetch_add(&g_producer_errors, 1);
    }
    return NULL;
}

Test(admission, pending_never_exceeds_the_limit, .timeout = 120)
{
    enum { LIMIT = 16, PRODUCERS = 3 };
    int per = SCALE(20000, 3000);
    make_rt(2, LIMIT);
    atomic_store(&g_live, 0);
    atomic_store(&g_live_max, 0);
    pthread_t th[PRODUCERS];
    for (uintptr_t k = 0; k < PRODUCERS; k++)
        cr_assert_eq(pthread_create(&th[k], NULL, producer_thread, (void *)(uintptr_t)per), 0);
    uint64_t max_sampled = 0;
    bool joined[PRODUCERS] = {false};
    for (int left = PRODUCERS; left > 0;) {
        struct urt_admission_stats s = astats();
        if (s.pending > max_sampled)
            max_sampled = s.pending;
        for (int k = 0; k < PRODUCERS; k++)
            if (!joined[k] && pthread_tryjoin_np(th[k], NULL) == 0) {
                joined[k] = true;
                left--;
            }
        sleep_us(50);
    }
    cr_assert(WAIT_UNTIL(astats().pending == 0, 10000), "pending %lu", (unsigned long)astats().pending);
    struct urt_admission_stats s = astats();
    cr_assert_eq(atomic_load(&g_producer_errors), 0);
    cr_assert_leq(atomic_load(&g_live_max), LIMIT, "live count reached %ld", (long)atomic_load(&g_live_max));
    cr_assert_leq(s.max_pending, LIMIT, "high-water %lu", (unsigned long)s.max_pending);
    cr_assert_leq(max_sampled, LIMIT);
    cr_assert_eq(s.max_pending, LIMIT, "the producers should fill the limit");
    cr_assert_eq(atomic_load(&g_live), 0);
    cr_log_info("ran %lu, refused in tasks %lu, rejected %lu, blocked %lu", (unsigned long)atomic_load(&g_ran),
                (unsigned long)atomic_load(&g_refused_in_task), (unsigned long)s.rejected, (unsigned long)s.blocked);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- fairness ----------------------------------------------------------------------------------- */

static _Atomic bool g_stop_spammer;
static _Atomic uint64_t g_spam_ok;

/* Keeps trying non-blocking submissions: must never overtake the waiters. */
static void *spammer_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop_spammer)) {
        if (urt_spawn(g_rt, count_fn, NULL, 0) == 0)
            atomic_fetch_add(&g_spam_ok, 1);
        sched_yield();
    }
    return NULL;
}

/* Gate per slot holder, released one at a time. A closed gate makes the
 * task yield (it keeps its slot: a yield is not a completion) so it never
 * holds a worker and tasks queued behind it still run. */
static enum urt_task_result gated_fn(struct urt_task *t, void *arg)
{
    (void)t;
    int i = (int)(uintptr_t)arg;
    if (!atomic_exchange(&g_gate_seen[i], true))
        atomic_fetch_add(&g_started, 1);
    if (!atomic_load(&g_gates[i])) {
        sleep_us(50);
        return URT_TASK_YIELD;
    }
    return URT_TASK_DONE;
}

static void *gated_submit_thread(void *arg)
{
    struct blocked_submit *b = arg;
    int r = urt_spawn(g_rt, gated_fn, (void *)(uintptr_t)b->gate, URT_SUBMIT_BLOCK);
    atomic_store(&b->order, atomic_fetch_add(&g_return_seq, 1));
    atomic_store(&b->result, r);
    atomic_store(&b->returned, true);
    return NULL;
}

Test(admission, blocked_submitters_are_served_in_fifo_order, .timeout = 60)
{
    enum { LIMIT = 2, WAITERS = 6 };
    make_rt(2, LIMIT);
    for (int i = 0; i < 16; i++) {
        atomic_store(&g_gates[i], false);
        atomic_store(&g_gate_seen[i], false);
    }
    for (int i = 0; i < LIMIT; i++)
        cr_assert_eq(urt_spawn(g_rt, gated_fn, (void *)(uintptr_t)i, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_started) == LIMIT, 5000));
    atomic_store(&g_return_seq, 0);
    atomic_store(&g_stop_spammer, false);
    atomic_store(&g_spam_ok, 0);
    pthread_t spam;
    cr_assert_eq(pthread_create(&spam, NULL, spammer_thread, NULL), 0);
    struct blocked_submit b[WAITERS];
    memset(b, 0, sizeof(b));
    for (int i = 0; i < WAITERS; i++) {
        b[i].gate = LIMIT + i; /* each granted submitter's task holds its slot until its gate opens */
        cr_assert_eq(pthread_create(&b[i].th, NULL, gated_submit_thread, &b[i]), 0);
        cr_assert(WAIT_UNTIL(astats().waiting == (uint64_t)i + 1, 5000), "waiter %d did not block", i);
    }
    /* Free one slot at a time: it must go to the oldest waiter, not to the
     * spammer and not to a younger waiter. */
    int freed_gate = 0;
    for (int i = 0; i < WAITERS; i++) {
        atomic_store(&g_gates[freed_gate], true);
        cr_assert(WAIT_UNTIL(atomic_load(&b[i].returned), 5000), "waiter %d was not served", i);
        sleep_us(2000);
        for (int k = i + 1; k < WAITERS; k++)
            cr_assert(!atomic_load(&b[k].returned), "waiter %d overtook waiter %d", k, i);
        cr_assert_eq(atomic_load(&b[i].result), 0);
        cr_assert_eq(astats().pending, LIMIT);
        freed_gate = b[i].gate;
    }
    cr_assert_eq(atomic_load(&g_spam_ok), 0, "a non-blocking newcomer took a slot a waiter was owed");
    atomic_store(&g_stop_spammer, true);
    pthread_join(spam, NULL);
    for (int i = 0; i < 16; i++)
        atomic_store(&g_gates[i], true);
    for (int i = 0; i < WAITERS; i++) {
        pthread_join(b[i].th, NULL);
        cr_assert_eq(atomic_load(&b[i].order), (uint64_t)i);
    }
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000));
    cr_assert_leq(astats().max_pending, LIMIT);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

static void *release_later(void *arg)
{
    (void)arg;
    sleep_us(30000);
    atomic_store(&g_release, true);
    return NULL;
}

/* ---- shutdown ------------------------------------------------------------------------------------ */

Test(admission, destroy_wakes_blocked_submitters_with_eshutdown, .timeout = 60)
{
    enum { WAITERS = 3 };
    make_rt(1, 1);
    cr_assert_eq(urt_spawn(g_rt, hold_fn, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_started) == 1, 5000));
    struct blocked_submit b[WAITERS];
    memset(b, 0, sizeof(b));
    for (int i = 0; i < WAITERS; i++)
        cr_assert_eq(pthread_create(&b[i].th, NULL, block_submit_thread, &b[i]), 0);
    cr_assert(WAIT_UNTIL(astats().waiting == WAITERS, 5000));
    /* destroy (cancel) while they wait; the holder is let go shortly after */
    pthread_t rel;
    cr_assert_eq(pthread_create(&rel, NULL, release_later, NULL), 0);
    int r = urt_runtime_destroy(g_rt, URT_SHUTDOWN_CANCEL);
    cr_assert_eq(r, 0, "nothing was queued: %d", r);
    for (int i = 0; i < WAITERS; i++) {
        pthread_join(b[i].th, NULL);
        cr_assert_eq(atomic_load(&b[i].result), -ESHUTDOWN, "waiter %d got %d", i, atomic_load(&b[i].result));
    }
    pthread_join(rel, NULL);
    leak_check();
}

Test(admission, no_limit_counts_nothing, .timeout = 30)
{
    make_rt(2, 0);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(urt_spawn(g_rt, count_fn, NULL, URT_SUBMIT_BLOCK), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_done) == 100, 5000));
    struct urt_admission_stats s = astats();
    cr_assert_eq(s.limit, 0);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.max_pending, 0);
    cr_assert_eq(urt_admission_stats(NULL, &s), -EINVAL);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- conditional bodies under the limit -------------------------------------------------------------- */

static bool always(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    return true;
}

static enum urt_task_result cond_body(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_fetch_add(&g_done, 1);
    return URT_TASK_DONE;
}

static _Atomic int g_cond_cancelled;

static void cond_cancel(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_fetch_add(&g_cond_cancelled, 1); /* the cond is ours again from here */
}

Test(admission, watcher_postpones_bodies_at_the_limit, .timeout = 60)
{
    make_rt(1, 1);
    cr_assert_eq(urt_spawn(g_rt, hold_fn, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_started) == 1, 5000));
    struct urt_cond c;
    urt_cond_init(&c, always, cond_body, NULL);
    c.cancel = cond_cancel;
    cr_assert_eq(urt_cond_add(g_rt, &c), 0);
    cr_assert(WAIT_UNTIL(({
                             struct urt_watcher_stats w;
                             urt_watcher_stats(g_rt, &w);
                             w.admission_retries >= 3;
                         }),
                         5000),
              "the watcher should retry the hand-over");
    struct urt_watcher_stats w;
    urt_watcher_stats(g_rt, &w);
    cr_assert_eq(w.checks_run, 1, "a passed check is not run again");
    cr_assert_eq(w.bodies_scheduled, 0);
    cr_assert_eq(urt_cond_cancel(g_rt, &c), 0, "still cancellable while postponed");
    cr_assert(WAIT_UNTIL(atomic_load(&g_cond_cancelled) == 1, 5000));
    urt_watcher_stats(g_rt, &w);
    cr_assert_eq(w.cancelled, 1);
    /* and one that goes through once the slot frees */
    urt_cond_init(&c, always, cond_body, NULL);
    cr_assert_eq(urt_cond_add(g_rt, &c), 0);
    sleep_us(5000);
    atomic_store(&g_release, true);
    cr_assert(WAIT_UNTIL(atomic_load(&g_done) == 2, 5000)); /* holder + body */
    cr_assert(WAIT_UNTIL(astats().pending == 0, 5000));
    cr_assert_leq(astats().max_pending, 1);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

static _Atomic int g_check_spawn = 1;

static bool spawning_check(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_store(&g_check_spawn, urt_spawn(g_rt, count_fn, NULL, URT_SUBMIT_BLOCK));
    return false;
}

Test(admission, the_watcher_never_blocks_either, .timeout = 30)
{
    make_rt(1, 1);
    cr_assert_eq(urt_spawn(g_rt, hold_fn, NULL, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_started) == 1, 5000));
    struct urt_cond c;
    urt_cond_init(&c, spawning_check, cond_body, NULL);
    c.cancel = cond_cancel;
    cr_assert_eq(urt_cond_add(g_rt, &c), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_check_spawn) != 1, 5000));
    cr_assert_eq(atomic_load(&g_check_spawn), -EAGAIN);
    atomic_store(&g_release, true);
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&g_cond_cancelled), 1, "destroy cancels the watched task");
}
