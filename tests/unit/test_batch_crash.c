/*
 * tests/unit/test_batch_crash.c — kill -9 in the middle of a durable bulk load
 * (urt/batch.h with URT_BATCH_BLOCK_TX and URT_COMMIT_STORED), then recovery:
 * every block whose commit was acknowledged is fully present, and no block is
 * half present.
 *
 * The files: FILES CSV files of fixed-width lines "index,count,filler\n"
 * whose block split (1 KiB blocks: a block owns the lines that start in it) is
 * computed here, so each line carries its index within its block and the
 * block's line count. tests/crash/batch_crash_child.c loads them over and over
 * (each block one transaction whose records are crash payloads of (block id,
 * index, count)) and acknowledges a block on a pipe once its commit reached
 * `stored`. Each cycle (the machinery of tests/crash/crash_check.h): run the
 * child on the same log directory, SIGKILL it at a random moment after its
 * first acknowledgement, recover (dry run, real run, repeat, a runtime in
 * between, again), and check with crash_verify: every acknowledged block
 * replayed whole (all `count` records, bytes checked), every replayed block
 * whole (a block is a transaction: never part of one), nothing lost across
 * cycles. URT_CRASH_CYCLES overrides the cycle count.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "helpers.h"
#include "crash/crash_check.h"

#define FILES 4
#define LINES 600
#define LINE_W 40   /* bytes per line, newline included */
#define BLOCK 1024
#define CYCLES SCALE(12, 4)
#define KILL_MAX_US SCALE(40000, 150000)

static void make_files(const char *dir)
{
    for (int f = 0; f < FILES; f++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/f%d.csv", dir, f);
        FILE *fp = fopen(path, "w");
        cr_assert_not_null(fp, "%s", path);
        uint32_t lines = LINES + (uint32_t)f * 37;
        for (uint32_t r = 0; r < lines; r++) {
            uint64_t start = (uint64_t)r * LINE_W, blk = start / BLOCK;
            uint32_t first = (uint32_t)((blk * BLOCK + LINE_W - 1) / LINE_W); /* first line starting in blk */
            uint32_t end = (uint32_t)(((blk + 1) * BLOCK + LINE_W - 1) / LINE_W);
            if (end > lines)
                end = lines;
            char line[LINE_W + 1];
            int n = snprintf(line, sizeof(line), "%u,%u,", r - first, end - first);
            memset(line + n, 'a' + (char)(r % 26), LINE_W - 1 - (size_t)n);
            line[LINE_W - 1] = '\n';
            cr_assert_eq(fwrite(line, 1, LINE_W, fp), LINE_W);
        }
        fclose(fp);
    }
}

Test(batch_crash, kill9_mid_load_keeps_every_acknowledged_block_whole, .timeout = 900)
{
    char *dir = crash_tmpdir("urt-batch-crash"), *csv = crash_tmpdir("urt-batch-crash-csv");
    make_files(csv);
    cr_assert_eq(setenv("URT_BATCH_CSV_DIR", csv, 1), 0);
    uint64_t seed = now_ns() | 1, rng = seed;
    cr_log_info("kill-moment seed %" PRIu64 ", directory %s", seed, dir);
    const char *env = getenv("URT_CRASH_CYCLES");
    uint64_t cycles = env && *env ? strtoull(env, NULL, 10) : (uint64_t)CYCLES;
    struct crash_history hist = {0};
    uint64_t acked = 0, blocks_whole = 0;
    for (uint64_t cycle = 1; cycle <= cycles; cycle++) {
        struct crash_child_opts o = {.dir = dir, .cycle = cycle, .workers = 2 + (uint32_t)(cycle % 2),
                                     .prealloc_kb = cycle % 3 ? 4096 : 0,
                                     .log_sync = cycle % 2 ? "auto" : "strict"};
        struct crash_kill_plan k = {.after_ack = true, .delay_us = rng_next(&rng) % KILL_MAX_US};
        struct urt_config cfg;
        test_config(&cfg, o.workers);
        cfg.log_prealloc_kb = o.prealloc_kb;
        cr_assert_eq(urt_config_set(&cfg, "log_sync", o.log_sync), 0);
        struct crash_acks acks = {0};
        cr_assert(crash_run(&o, &k, &acks), "cycle %" PRIu64 ": no block was acknowledged before the kill", cycle);
        struct crash_cycle_result res;
        crash_cycle_check(dir, &acks, &hist, &cfg, &res);
        char ctx[160];
        snprintf(ctx, sizeof(ctx), "cycle %" PRIu64 " (workers %u, prealloc %u KiB, log_sync %s, kill +%" PRIu64 " us)",
                 cycle, o.workers, o.prealloc_kb, o.log_sync, k.delay_us);
        crash_assert_cycle(ctx, &res); /* acknowledged blocks whole, no block partial, nothing lost */
        acked += res.verdict.checked_acks;
        blocks_whole += res.verdict.checked_tx;
        crash_acks_free(&acks);
    }
    printf("batch_crash: %" PRIu64 " cycles, %" PRIu64 " acknowledged blocks checked whole\n", cycles, acked);
    cr_assert_gt(acked, 0);
    (void)blocks_whole;
    crash_history_free(&hist);
    crash_remove_tree(dir);
    crash_remove_tree(csv);
    free(dir);
    free(csv);
    leak_check();
}
