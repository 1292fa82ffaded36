/* examples/durable.c — durable commits on the write-ahead log, then recovery.
 *   cc durable.c $(pkg-config --cflags --libs urt) && ./a.out [LOG_DIR]
 * Without LOG_DIR it uses (and removes) a new directory under $TMPDIR or /tmp. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, mkdtemp */
#endif
#include <ftw.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <urt/urt.h>

#define N 10

static atomic_int stored, failed;

static void on_stored(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    (void)arg;
    if (status)
        atomic_fetch_add(&failed, 1);
    atomic_fetch_add(&stored, 1);
}

struct replay {
    int records;
    long sum;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    long v;
    memcpy(&v, r->payload, sizeof(v));
    rp->records++;
    rp->sum += v;
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    char tmpl[4096];
    const char *dir;
    if (argc > 1) {
        dir = argv[1];
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof(tmpl), "%s/urt-durable-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpl)) {
            perror("mkdtemp");
            return 1;
        }
        dir = tmpl;
    }

    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    cfg.log_dir = dir;
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }
    static struct urt_commit commits[N]; /* the runtime's until their callback ran */
    static long values[N];
    for (int i = 0; i < N; i++) {
        values[i] = i + 1;
        int rc = urt_log_commit(rt, &commits[i], (uint64_t)i + 1, &values[i], sizeof(values[i]),
                                URT_COMMIT_STORED, on_stored, NULL);
        if (rc) {
            fprintf(stderr, "urt_log_commit: %s\n", urt_last_error());
            return 1;
        }
    }
    while (atomic_load(&stored) < N)
        sched_yield();
    printf("%d commits stored (%d failed)\n", atomic_load(&stored), atomic_load(&failed));
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);

    /* As after a crash: replay what is durable, in epoch order. */
    struct replay rp = {0};
    struct urt_log_recover_ops ops = {.record = on_record};
    struct urt_log_recovery out;
    int rc = urt_log_recover(dir, 0, &ops, &rp, &out);
    if (rc) {
        fprintf(stderr, "urt_log_recover: %s\n", urt_last_error());
        return 1;
    }
    printf("recovered %d records, sum %ld, %u cuts\n", rp.records, rp.sum, out.cuts);

    if (argc <= 1)
        nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return atomic_load(&failed) != 0;
}
