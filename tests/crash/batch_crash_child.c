/*
 * tests/crash/batch_crash_child.c — the process the batch crash test kills: a
 * durable bulk load (urt/batch.h, URT_BATCH_BLOCK_TX with URT_COMMIT_STORED)
 * over and over until SIGKILL.
 *
 *   batch_crash_child DIR CYCLE ACK_FD [--workers N] [--prealloc-kb K]
 *                                      [--log-sync auto|strict|single_flush]
 *   environment: URT_BATCH_CSV_DIR = the directory of the CSV files (made by
 *   tests/unit/test_batch_crash.c: f<i>.csv, fixed-width lines
 *   "index,count,filler\n": the line's index within its block and its block's
 *   line count, so every statement can check the executor's split).
 *
 * It opens a runtime on DIR (log_dir; opening recovers what the previous cycle
 * left) and runs batches over every file, 2 files x 2 blocks in flight, one
 * transaction per block. The block's transaction id is a crash id
 * (tests/crash/crash_payload.h: kind CRASH_KIND_TX, source = file, seq =
 * batch number << 12 | block), and each statement logs the crash payload of
 * (that id, its index in the block, the block's count), so the shared checker
 * (tests/crash/crash_check.c) can tell a whole block from a part of one.
 * block_done with status 0 — the block's commit reached URT_COMMIT_STORED —
 * writes the acknowledgement (id, count) to ACK_FD. Anything unexpected exits
 * with a distinct code and one line on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urt/urt.h>

#include "crash_payload.h"

#define MAX_FILES 16

static int ack_fd;
static uint64_t cycle, batch_no;

static _Noreturn void die(int code, const char *what, int err, const char *detail)
{
    fprintf(stderr, "batch_crash_child: %s: %d (%s): %s\n", what, err, strerror(err < 0 ? -err : err), detail);
    _exit(code);
}

static int statement(struct urt_batch_stmt *s, void *arg)
{
    (void)arg;
    if (s->n_fields != 3)
        die(10, "a line without 3 fields", -EBADMSG, s->fields[0].data);
    uint32_t index = (uint32_t)strtoul(s->fields[0].data, NULL, 10);
    uint32_t count = (uint32_t)strtoul(s->fields[1].data, NULL, 10);
    if (index != s->record || index >= count)
        die(11, "the executor's split differs from the file's", -EPROTO, s->fields[0].data);
    uint8_t p[CRASH_PAYLOAD_MAX];
    uint32_t len = crash_payload_fill(p, s->block->tx_id, index, count);
    int rc = urt_tx_log(s->tx, p, len);
    if (rc)
        die(12, "urt_tx_log", rc, urt_last_error());
    return 0;
}

static int block_begin(struct urt_batch_block *blk, void *arg)
{
    (void)arg;
    blk->tx_id = crash_id(cycle, CRASH_KIND_TX, blk->file, (batch_no << 12) | (blk->index & 0xfff));
    return 0;
}

static void block_done(struct urt_batch_block *blk, int status, void *arg)
{
    (void)arg;
    if (status)
        die(13, "a block failed", status, urt_batch_error(blk->batch));
    uint64_t msg[2] = {blk->tx_id, blk->records};
    if (write(ack_fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        die(14, "write to ACK_FD", -errno, "");
}

static int list_files(const char *dir, char **paths)
{
    int n = 0;
    for (; n < MAX_FILES; n++) {
        char p[4096];
        snprintf(p, sizeof(p), "%s/f%d.csv", dir, n);
        if (access(p, R_OK) != 0)
            break;
        paths[n] = strdup(p);
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        die(2, "usage: batch_crash_child DIR CYCLE ACK_FD [--workers N] [--prealloc-kb K] [--log-sync S]", -EINVAL,
            "");
    const char *dir = argv[1], *csv = getenv("URT_BATCH_CSV_DIR");
    cycle = strtoull(argv[2], NULL, 10);
    ack_fd = atoi(argv[3]);
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    cfg.placement = URT_PLACEMENT_NONE;
    cfg.log_dir = dir;
    for (int i = 4; i + 1 < argc; i += 2) {
        const char *name = !strcmp(argv[i], "--workers")       ? "workers"
                           : !strcmp(argv[i], "--prealloc-kb") ? "log_prealloc_kb"
                           : !strcmp(argv[i], "--log-sync")    ? "log_sync"
                                                               : NULL;
        if (!name || urt_config_set(&cfg, name, argv[i + 1]) != 0)
            die(3, "bad option", -EINVAL, argv[i]);
    }
    char *paths[MAX_FILES];
    int n = csv ? list_files(csv, paths) : 0;
    if (n == 0)
        die(4, "no CSV files (URT_BATCH_CSV_DIR)", -ENOENT, csv ? csv : "unset");
    urt_runtime *rt;
    int rc = urt_runtime_create(&cfg, &rt);
    if (rc)
        die(5, "urt_runtime_create", rc, urt_last_error());
    for (;; batch_no++) {
        struct urt_batch_options o;
        urt_batch_options_init(&o);
        o.files = (const char *const *)paths;
        o.n_files = (uint32_t)n;
        o.block_bytes = 1024;
        o.flags = URT_BATCH_BLOCK_TX;
        o.response = URT_COMMIT_STORED;
        o.statement = statement;
        o.block_begin = block_begin;
        o.block_done = block_done;
        urt_batch *b;
        if ((rc = urt_batch_start(rt, &o, &b)) != 0)
            die(6, "urt_batch_start", rc, urt_last_error());
        if ((rc = urt_batch_wait(b, URT_WAIT_FOREVER)) != 0)
            die(7, "the batch failed", rc, urt_batch_error(b));
        urt_batch_release(b);
    }
}
