/*
 * tests/unit/test_wal_crash.c — kill -9 at a random moment never loses a
 * commit acknowledged `stored`, never replays part of a transaction, and
 * recovery is stable across a restart (SPEC C14; issue 10 point 8).
 *
 * Each cycle (tests/crash/crash_check.h has the machinery):
 *   1. run tests/crash/crash_child on one log directory with the cycle's
 *      mode — workers 2..4, log_prealloc_kb 0 every other cycle, else 4096
 *      or 64 (a small preallocation runs out and is extended often), log_sync
 *      auto (single_write on ext4/xfs) / strict / single_flush (with
 *      preallocation) — doing a mix of plain STORED commits, transactions of
 *      2..5 records on lanes, jobs whose tasks commit, and ACCEPTED /
 *      AVAILABLE commits; every STORED acknowledgement comes back on a pipe;
 *   2. SIGKILL it: in half the cycles (alternating every 8, so that every
 *      mode gets both) at a random moment after the exec (start-up and the
 *      recovery it runs included), else a random moment after its first
 *      acknowledgement;
 *   3. a dry run, then recover; check every acknowledged commit (bytes, whole
 *      transactions, epoch order, no duplicates); recover again at once (the
 *      dry run and the repeat report what the first did); start and stop a runtime on the
 *      directory; recover again: a durable marker >= the first, exactly the
 *      same records; nothing an earlier cycle replayed is missing.
 * The directory carries over from cycle to cycle (each cycle's child first
 * recovers what the previous one left), so ids are unique across cycles (the
 * cycle is in their high bits).
 *
 * CRASH_CYCLES: 200 in the plain build, 25 in the sanitizer builds; the
 * stress suite includes this file with more (tests/stress/test_wal_crash_long.c).
 * URT_CRASH_CYCLES in the environment overrides the count. Preallocated
 * channels keep their zero-filled space, so a run holds up to cycles x 6
 * channels x CRASH_PREALLOC_KB / 4 on TMPDIR until it removes the directory.
 * The kill moments are random (seeded from the clock, printed); the checks
 * are not timing-based: any kill moment must pass.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "helpers.h"
#include "crash/crash_check.h"

#ifndef CRASH_CYCLES
#define CRASH_CYCLES SCALE(200, 25)
#endif
#ifndef CRASH_PREALLOC_KB
#define CRASH_PREALLOC_KB 4096 /* the default; every fourth cycle (0 and 64 in the others) */
#endif
/* upper bound of the random kill delay (sanitized children start slower) */
#define KILL_MAX_US SCALE(40000, 150000)

struct crash_totals {
    uint64_t cycles, acked, acked_tx, replayed, cuts, early_kills;
};

/* The cycle's mode: workers, preallocation and sync mode rotate. */
static void cycle_mode(uint64_t cycle, const char *dir, struct crash_child_opts *o)
{
    /* auto: single_write where the file system allows it (claims of the
     * marker in the log writes), strict elsewhere */
    static const char *const sync_modes[] = {"auto", "strict", "single_flush"};
    o->dir = dir;
    o->cycle = cycle;
    o->workers = 2 + (uint32_t)(cycle % 3);
    o->prealloc_kb = !(cycle & 1) ? 0 : cycle % 4 == 1 ? CRASH_PREALLOC_KB : 64; /* 64: extended often */
    o->log_sync = sync_modes[(cycle / 4) % 3]; /* every preallocation with each */
    if (!o->prealloc_kb && o->log_sync == sync_modes[2])
        o->log_sync = sync_modes[0]; /* single_flush needs preallocation */
}

static void cycle_kill_plan(uint64_t cycle, uint64_t *rng, struct crash_kill_plan *k)
{
    k->after_ack = (cycle / 8) % 2 == 0; /* every mode gets both plans */
    k->delay_us = rng_next(rng) % (k->after_ack ? KILL_MAX_US / 2 : KILL_MAX_US);
}

/* The runtime created between the two recoveries: the cycle's mode. */
static void restart_config(const struct crash_child_opts *o, struct urt_config *cfg)
{
    test_config(cfg, o->workers);
    cfg->log_prealloc_kb = o->prealloc_kb;
    cr_assert_eq(urt_config_set(cfg, "log_sync", o->log_sync), 0, "%s", urt_last_error());
}

static void run_cycle(const char *dir, uint64_t cycle, uint64_t *rng, struct crash_history *hist,
                      struct crash_totals *t)
{
    struct crash_child_opts o;
    struct crash_kill_plan k;
    struct urt_config cfg;
    cycle_mode(cycle, dir, &o);
    cycle_kill_plan(cycle, rng, &k);
    restart_config(&o, &cfg);

    struct crash_acks acks = {0};
    if (!crash_run(&o, &k, &acks))
        t->early_kills++;

    struct crash_cycle_result res;
    crash_cycle_check(dir, &acks, hist, &cfg, &res);
    char ctx[160];
    snprintf(ctx, sizeof(ctx), "cycle %" PRIu64 " (workers %u, prealloc %u KiB, log_sync %s, kill %s+%" PRIu64 " us)",
             cycle, o.workers, o.prealloc_kb, o.log_sync, k.after_ack ? "first ack" : "exec", k.delay_us);
    crash_assert_cycle(ctx, &res);

    t->cycles++;
    t->acked += res.verdict.checked_acks;
    t->acked_tx += res.verdict.checked_tx;
    t->replayed = res.replayed;
    t->cuts += res.cuts;
    crash_acks_free(&acks);
}

Test(wal_crash, kill9_never_loses_a_stored_commit, .timeout = 900)
{
    char *dir = crash_tmpdir("urt-wal-crash");
    uint64_t seed = now_ns() | 1, rng = seed;
    cr_log_info("kill-moment seed %" PRIu64 ", directory %s", seed, dir);
    struct crash_history hist = {0};
    struct crash_totals t = {0};
    const char *env = getenv("URT_CRASH_CYCLES");
    uint64_t cycles = env && *env ? strtoull(env, NULL, 10) : (uint64_t)CRASH_CYCLES;
    for (uint64_t cycle = 1; cycle <= cycles; cycle++)
        run_cycle(dir, cycle, &rng, &hist, &t);
    char summary[400];
    snprintf(summary, sizeof(summary),
             "wal_crash: %" PRIu64 " cycles: %" PRIu64 " acknowledged commits checked (%" PRIu64
             " of them transactions), %" PRIu64 " records replayed at the end, %" PRIu64 " cuts, %" PRIu64
             " kills before any ack",
             t.cycles, t.acked, t.acked_tx, t.replayed, t.cuts, t.early_kills);
    printf("%s\n", summary); /* meson's test log keeps stdout */
    fflush(stdout);
    cr_log_info("%s", summary);
    cr_assert_gt(t.acked, 0, "no commit was ever acknowledged in %" PRIu64 " cycles", t.cycles);
    cr_assert_gt(t.acked_tx, 0, "no transaction was ever acknowledged in %" PRIu64 " cycles", t.cycles);
    crash_history_free(&hist);
    crash_remove_tree(dir);
    free(dir);
    leak_check();
}
