/*
 * tests/stress/fence_child.c — the foreign submitters' shutdown fence
 * (sched/core/foreign.h, base/fence.h) in a process of its own, so that the
 * fences' process-wide mode is probed fresh:
 *
 *     fence_child [--refuse-membarrier | --refuse-membarrier-later]
 *
 * --refuse-membarrier installs a seccomp filter (libseccomp) under which
 * membarrier(2) fails with ENOSYS, as on a kernel without it or under a
 * container profile that refuses it: the fences must fall back to the
 * symmetric mode. --refuse-membarrier-later registers first and installs the
 * filter afterwards (a process that sandboxes itself late): the first heavy
 * fence must switch the process back to symmetric fences. Then, in any mode:
 *  - Dekker rounds on the fences themselves: a fast thread stores A, runs
 *    the light fence, loads B; a slow thread stores B, runs the heavy fence,
 *    loads A; in no round may both loads miss the other's store;
 *  - destroy racing foreign submitters (plain spawns and lane spawns), both
 *    shutdown modes: every accepted task ends exactly once (ran or
 *    cancelled), none is accepted after a refusal, the lanes end with
 *    nothing pending.
 * Prints "expedited=<0|1> rounds=N both_missed=K races=R after=<0|1>" (after:
 * the mode at the end) and exits 0 when
 * every invariant held; 1 with a "# FAIL" line otherwise; 125 when the
 * filter cannot be installed. tests/stress/test_fence.c runs it.
 *
 * Memory ordering: the Dekker rounds are the litmus test itself (relaxed
 * accesses ordered only by the fences under test); round hand-offs and the
 * race counters are seq_cst atomics.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <urt/urt.h>

#include "base/fence.h"

#ifdef URT_TEST_SANITIZED
#define ROUNDS 5000
#define RACE_CYCLES 4
#else
#define ROUNDS 40000
#define RACE_CYCLES 12
#endif

static int fails;
#define CHECK(cond, ...)                                                                                         \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            printf("# FAIL %s:%d: ", __FILE__, __LINE__);                                                        \
            printf(__VA_ARGS__);                                                                                 \
            printf("\n");                                                                                        \
            fails++;                                                                                             \
        }                                                                                                        \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
    nanosleep(&ts, NULL);
}

static int refuse_membarrier(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), seccomp_syscall_resolve_name("membarrier"), 0);
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    return rc;
}

/* ---- Dekker rounds ------------------------------------------------------------------ */

static _Atomic uint64_t dk_a, dk_b;           /* the round number each side stored last */
static _Atomic uint32_t fast_done, slow_done; /* rounds each side finished */
static bool *seen_b, *seen_a;                 /* per round: the fast side saw B, the slow side saw A */

static void wait_round(_Atomic uint32_t *other, uint32_t r)
{
    for (unsigned i = 0; atomic_load(other) < r; i++)
        if (i > 256)
            sched_yield();
}

static void *fast_side(void *arg)
{
    (void)arg;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        wait_round(&slow_done, r - 1);
        atomic_store_explicit(&dk_a, r, memory_order_relaxed);
        urt_fence_light();
        seen_b[r] = atomic_load_explicit(&dk_b, memory_order_relaxed) >= r;
        atomic_store(&fast_done, r);
    }
    return NULL;
}

static void *slow_side(void *arg)
{
    (void)arg;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        wait_round(&fast_done, r - 1);
        atomic_store_explicit(&dk_b, r, memory_order_relaxed);
        urt_fence_heavy();
        seen_a[r] = atomic_load_explicit(&dk_a, memory_order_relaxed) >= r;
        atomic_store(&slow_done, r);
    }
    return NULL;
}

static unsigned dekker_rounds(void)
{
    seen_a = calloc(ROUNDS + 1, 1);
    seen_b = calloc(ROUNDS + 1, 1);
    CHECK(seen_a && seen_b, "no memory");
    if (!seen_a || !seen_b)
        return 0;
    pthread_t f, s;
    pthread_create(&f, NULL, fast_side, NULL);
    pthread_create(&s, NULL, slow_side, NULL);
    pthread_join(f, NULL);
    pthread_join(s, NULL);
    unsigned both_missed = 0;
    for (uint32_t r = 1; r <= ROUNDS; r++)
        both_missed += !seen_a[r] && !seen_b[r];
    free(seen_a);
    free(seen_b);
    return both_missed;
}

/* ---- destroy racing foreign submitters ----------------------------------------------- */

#define RACERS 3
#define LANES 2

struct racer {
    urt_runtime *rt;
    urt_lane *lane; /* NULL: plain spawns */
    _Atomic uint64_t accepted, ended, refused, errors, after_refusal;
    _Atomic bool done;
};

static enum urt_task_result end_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&((struct racer *)arg)->ended, 1);
    return URT_TASK_DONE;
}

static void end_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&((struct racer *)arg)->ended, 1);
}

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    bool refused = false;
    uint64_t deadline = now_ns() + 30ull * 1000000000ull;
    while (now_ns() < deadline) {
        int err = r->lane ? urt_lane_spawn(r->lane, end_fn, end_cancel, r, 0)
                          : urt_spawn_ex(r->rt, end_fn, end_cancel, r, 0);
        if (err == 0) {
            atomic_fetch_add(&r->accepted, 1);
            if (refused)
                atomic_fetch_add(&r->after_refusal, 1);
        } else if (err == -ESHUTDOWN) {
            refused = true;
            if (atomic_fetch_add(&r->refused, 1) >= 50)
                break;
        } else {
            atomic_fetch_add(&r->errors, 1);
        }
    }
    atomic_store(&r->done, true);
    return NULL;
}

/* Holds a worker until every racer stopped: destroy waits for it, so the
 * runtime outlives their last call. */
struct holder {
    struct urt_task task;
    struct racer *racers;
    _Atomic bool started;
};

static enum urt_task_result holder_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct holder *h = arg;
    atomic_store(&h->started, true);
    for (int i = 0; i < RACERS; i++)
        while (!atomic_load(&h->racers[i].done))
            sleep_us(100);
    return URT_TASK_DONE;
}

static void race_once(enum urt_shutdown mode)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    urt_runtime *rt;
    int err = urt_runtime_create(&cfg, &rt);
    CHECK(err == 0, "urt_runtime_create: %d", err);
    if (err)
        return;
    static struct racer rc[RACERS];
    urt_lane *lanes[LANES] = {NULL};
    for (int i = 0; i < LANES; i++)
        CHECK(urt_lane_create(rt, &lanes[i]) == 0, "urt_lane_create");
    pthread_t th[RACERS];
    for (int i = 0; i < RACERS; i++) {
        memset(&rc[i], 0, sizeof(rc[i]));
        rc[i].rt = rt;
        rc[i].lane = i == 0 ? NULL : lanes[(i - 1) % LANES];
        pthread_create(&th[i], NULL, racer_main, &rc[i]);
    }
    while (atomic_load(&rc[0].accepted) < 1000 || atomic_load(&rc[RACERS - 1].accepted) < 1000)
        sleep_us(100);
    struct holder h = {.racers = rc, .started = false};
    urt_task_init(&h.task, holder_fn, &h);
    CHECK(urt_task_submit(rt, &h.task, 0) == 0, "holder submission");
    while (!atomic_load(&h.started))
        sleep_us(100);
    int ret = urt_runtime_destroy(rt, mode);
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    CHECK(ret >= 0, "urt_runtime_destroy: %d", ret);
    for (int i = 0; i < LANES; i++) {
        CHECK(urt_lane_pending(lanes[i]) == 0, "lane %d: %u pending after destroy", i, urt_lane_pending(lanes[i]));
        urt_lane_destroy(lanes[i]);
    }
    for (int i = 0; i < RACERS; i++) {
        uint64_t acc = atomic_load(&rc[i].accepted), end = atomic_load(&rc[i].ended);
        CHECK(acc == end, "racer %d: %llu accepted, %llu ended", i, (unsigned long long)acc, (unsigned long long)end);
        CHECK(atomic_load(&rc[i].after_refusal) == 0, "racer %d: accepted after a refusal", i);
        CHECK(atomic_load(&rc[i].refused) > 0, "racer %d: never refused", i);
        CHECK(atomic_load(&rc[i].errors) == 0, "racer %d: an error other than -ESHUTDOWN", i);
    }
}

int main(int argc, char **argv)
{
    bool refuse = argc > 1 && !strcmp(argv[1], "--refuse-membarrier");
    bool later = argc > 1 && !strcmp(argv[1], "--refuse-membarrier-later");
    if (later)
        (void)urt_fence_init(); /* registered first, refused afterwards */
    if (refuse || later) {
        int rc = refuse_membarrier();
        if (rc < 0) {
            fprintf(stderr, "fence_child: cannot install the seccomp filter: %s\n", strerror(-rc));
            return 125;
        }
    }
    bool expedited = urt_fence_init();
    unsigned both_missed = dekker_rounds();
    CHECK(both_missed == 0, "%u of %d Dekker rounds: both sides missed the other's store", both_missed, ROUNDS);
    int races = 0;
    for (int c = 0; c < RACE_CYCLES; c++, races++)
        race_once(c % 2 ? URT_SHUTDOWN_CANCEL : URT_SHUTDOWN_DRAIN);
    printf("expedited=%d rounds=%d both_missed=%u races=%d after=%d\n", expedited, ROUNDS, both_missed, races,
           (int)atomic_load(&urt__fence_expedited));
    return fails ? 1 : 0;
}
