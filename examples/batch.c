/* examples/batch.c — a durable bulk load with the batch executor (urt/batch.h):
 * three CSV files of orders, one transaction per 4 KiB block, committed
 * URT_COMMIT_STORED; then a file with a bad record (the batch's error names
 * the file, block and record); then the log is recovered as after a crash.
 *   cc batch.c $(pkg-config --cflags --libs urt) && ./a.out
 * It works in (and removes) a new directory under $TMPDIR or /tmp. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, mkdtemp */
#endif
#include <errno.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <urt/urt.h>

static atomic_long total_cents;
static atomic_int blocks_committed;

/* One record: id,customer,amount — e.g. 17,"Smith, J.",12.50 */
static int statement(struct urt_batch_stmt *s, void *arg)
{
    (void)arg;
    const char *amount = s->fields[2].data; /* NUL-terminated, quotes removed */
    char *end;
    double v = strtod(amount, &end);
    if (end == amount || *end)
        return urt_batch_stmt_error(s, -EBADMSG, "amount '%s' is not a number", amount);
    long rec[2] = {strtol(s->fields[0].data, NULL, 10), (long)(v * 100 + 0.5)};
    int rc = urt_tx_log(s->tx, rec, sizeof(rec)); /* the block's transaction */
    if (rc)
        return rc;
    atomic_fetch_add(&total_cents, rec[1]);
    return 0;
}

static void block_done(struct urt_batch_block *blk, int status, void *arg)
{
    (void)arg;
    if (status == 0 && blk->tx)
        atomic_fetch_add(&blocks_committed, 1); /* durable: URT_COMMIT_STORED was reached */
}

/* Runs one batch over files and waits for it; returns its status. */
static int load(urt_runtime *rt, const char *const *files, uint32_t n)
{
    struct urt_batch_options o;
    urt_batch_options_init(&o);
    o.files = files;
    o.n_files = n;
    o.flags = URT_BATCH_CSV_HEADER | URT_BATCH_BLOCK_TX;
    o.fields = 3;
    o.block_bytes = 4096;
    o.max_concurrent_files = 2;
    o.max_concurrent_blocks_per_file = 2;
    o.response = URT_COMMIT_STORED;
    o.statement = statement;
    o.block_done = block_done;
    urt_batch *b;
    if (urt_batch_start(rt, &o, &b)) {
        fprintf(stderr, "urt_batch_start: %s\n", urt_last_error());
        return -1;
    }
    int status = urt_batch_wait(b, URT_WAIT_FOREVER); /* or a callback: o.done */
    if (status)
        printf("the batch failed (%s): %s\n", strerror(-status), urt_batch_error(b));
    urt_batch_release(b);
    return status;
}

static void write_orders(const char *name, int first, int n, int bad)
{
    FILE *f = fopen(name, "w");
    fprintf(f, "id,customer,amount\r\n");
    for (int i = first; i < first + n; i++) {
        if (i == bad)
            fprintf(f, "%d,\"Bad \"\"data\"\"\",twelve\r\n", i);
        else
            fprintf(f, "%d,\"Customer %d, Inc.\",%d.%02d\r\n", i, i % 97, i % 1000, i % 100);
    }
    fclose(f);
}

struct replay {
    int records;
    long cents;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    long rec[2];
    memcpy(rec, r->payload, sizeof(rec));
    rp->records++;
    rp->cents += rec[1];
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/urt-batch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir) || chdir(dir) || mkdir("log", 0755)) {
        perror(dir);
        return 1;
    }
    write_orders("orders-1.csv", 0, 500, -1);
    write_orders("orders-2.csv", 500, 800, -1);
    write_orders("orders-3.csv", 1300, 200, -1);
    write_orders("bad.csv", 0, 100, 42);

    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    cfg.log_dir = "log"; /* STORED commits need the write-ahead log */
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }
    const char *files[] = {"orders-1.csv", "orders-2.csv", "orders-3.csv"};
    int st = load(rt, files, 3);
    printf("loaded: status %d, %d blocks committed, total %ld.%02ld\n", st, atomic_load(&blocks_committed),
           atomic_load(&total_cents) / 100, atomic_load(&total_cents) % 100);
    const char *bad[] = {"bad.csv"};
    load(rt, bad, 1);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);

    /* As after a crash: what is durable. The bad file's one block never committed. */
    struct replay rp = {0};
    struct urt_log_recover_ops ops = {.record = on_record};
    if (urt_log_recover("log", 0, &ops, &rp, NULL)) {
        fprintf(stderr, "urt_log_recover: %s\n", urt_last_error());
        return 1;
    }
    printf("recovered %d records, total %ld.%02ld\n", rp.records, rp.cents / 100, rp.cents % 100);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return st != 0;
}
