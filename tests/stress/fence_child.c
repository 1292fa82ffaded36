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
 *    shutdown modes, the model of tests/race_destroy.h: every accepted task
 *    ends exactly once (ran or cancelled), none is accepted after a refusal,
 *    the lanes end with nothing pending.
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
#include "tests/race_destroy.h"

#ifdef URT_TEST_SANITIZED
#define ROUNDS 5000
#define RACE_CYCLES 4
#define RACE_CAP 100000
#else
#define ROUNDS 40000
#define RACE_CYCLES 12
#define RACE_CAP 400000
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

/* One side of the pair: each round stores its own word, runs its fence,
 * loads the other's word; the two sides start a round only once both ended
 * the one before. */
struct dk_side {
    _Atomic uint64_t mine;   /* the round number this side stored last */
    _Atomic uint32_t done;   /* rounds this side finished */
    struct dk_side *other;
    void (*fence)(void);
    bool *saw;               /* per round: this side saw the other's store */
};

static void wait_round(_Atomic uint32_t *other, uint32_t r)
{
    for (unsigned i = 0; atomic_load(other) < r; i++)
        if (i > 256)
            sched_yield();
}

static void *dk_run(void *arg)
{
    struct dk_side *d = arg;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        wait_round(&d->other->done, r - 1);
        atomic_store_explicit(&d->mine, r, memory_order_relaxed);
        d->fence();
        d->saw[r] = atomic_load_explicit(&d->other->mine, memory_order_relaxed) >= r;
        atomic_store(&d->done, r);
    }
    return NULL;
}

static unsigned dekker_rounds(void)
{
    static struct dk_side fast, slow;
    fast = (struct dk_side){.other = &slow, .fence = urt_fence_light, .saw = calloc(ROUNDS + 1, 1)};
    slow = (struct dk_side){.other = &fast, .fence = urt_fence_heavy, .saw = calloc(ROUNDS + 1, 1)};
    CHECK(fast.saw && slow.saw, "no memory");
    if (!fast.saw || !slow.saw)
        return 0;
    pthread_t f, s;
    pthread_create(&f, NULL, dk_run, &fast);
    pthread_create(&s, NULL, dk_run, &slow);
    pthread_join(f, NULL);
    pthread_join(s, NULL);
    unsigned both_missed = 0;
    for (uint32_t r = 1; r <= ROUNDS; r++)
        both_missed += !fast.saw[r] && !slow.saw[r];
    free(fast.saw);
    free(slow.saw);
    return both_missed;
}

/* ---- destroy racing foreign submitters (tests/race_destroy.h) ------------------------ */

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
    char msg[256] = "";
    int rc = race_run(rt, mode, 3, 2, true, RACE_CAP, msg, sizeof msg);
    CHECK(rc == 0, "%s (%s)", msg, mode == URT_SHUTDOWN_DRAIN ? "drain" : "cancel");
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
