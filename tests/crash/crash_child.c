/*
 * tests/crash/crash_child.c — the process that crash and power-loss tests
 * kill: a runtime with a write-ahead log running a mix of durable work until
 * SIGKILL.
 *
 *   crash_child DIR CYCLE ACK_FD [--workers N] [--prealloc-kb K]
 *                                [--log-sync auto|strict|single_flush]
 *
 * It creates a runtime on DIR (log_dir = DIR; opening it recovers what the
 * previous cycle left) and starts, all in closed loops (each next commit is
 * issued from the previous one's callback):
 *   - PLAIN_CLIENTS urt_log_commit clients answered URT_COMMIT_STORED; every
 *     LOOSE_EVERY-th commit a client also issues an ACCEPTED or AVAILABLE
 *     commit (kind LOOSE) that need not survive;
 *   - TX_CLIENTS transaction clients, each driving its transactions from the
 *     tasks of its own lane: begin (id chosen by the client), urt_tx_log of
 *     2..5 records, commit STORED (every LOOSE_EVERY-th: AVAILABLE, kind
 *     LOOSE_TX); the callback queues the client's next lane task;
 *   - JOB_DRIVERS job drivers: a job of JOB_TASKS tasks, each committing one
 *     STORED record from its worker; when every commit answered and the job
 *     ended, the next job starts.
 * Payloads and ids follow tests/crash/crash_payload.h. From the callback of
 * every STORED commit with status 0 the id (tx: id and record count) is
 * written to ACK_FD. Anything unexpected (a failed call, a non-zero status)
 * prints one line on stderr and exits with a distinct code, so the parent's
 * "the child exited by itself" names it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urt/urt.h>

#include "crash_payload.h"

#define PLAIN_CLIENTS 3
#define TX_CLIENTS 3
#define JOB_DRIVERS 2
#define JOB_TASKS 4
#define LOOSE_EVERY 8

static urt_runtime *rt;
static int ack_fd;
static uint64_t cycle;

static _Noreturn void die(int code, const char *what, int err)
{
    fprintf(stderr, "crash_child: %s: %d (%s): %s\n", what, err, strerror(err < 0 ? -err : err), urt_last_error());
    _exit(code);
}

static void ack(uint64_t id, uint32_t count)
{
    uint64_t msg[2] = {id, count};
    size_t n = crash_id_kind(id) == CRASH_KIND_TX ? 16 : 8;
    if (write(ack_fd, msg, n) != (ssize_t)n)
        die(5, "write to ACK_FD", -errno);
}

/* ---- plain clients ---------------------------------------------------------------- */

struct plain_client {
    struct urt_task start;
    struct urt_commit c, loose;
    _Atomic bool loose_busy;
    unsigned source;
    uint64_t seq, loose_seq;
    uint8_t rec[CRASH_PAYLOAD_MAX], loose_rec[CRASH_PAYLOAD_MAX];
};
static struct plain_client plain[PLAIN_CLIENTS];

static void plain_issue(struct plain_client *k);

static void loose_done(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct plain_client *k = arg;
    if (status)
        die(4, "loose commit callback status", status);
    atomic_store_explicit(&k->loose_busy, false, memory_order_release);
}

static void loose_issue(struct plain_client *k)
{
    if (atomic_exchange_explicit(&k->loose_busy, true, memory_order_acquire))
        return; /* the previous one has not answered yet */
    uint64_t id = crash_id(cycle, CRASH_KIND_LOOSE, k->source, k->loose_seq);
    uint32_t len = crash_payload_fill(k->loose_rec, id, 0, 1);
    enum urt_commit_response r = (k->loose_seq++ & 1) ? URT_COMMIT_AVAILABLE : URT_COMMIT_ACCEPTED;
    int err = urt_log_commit(rt, &k->loose, id, k->loose_rec, len, r, loose_done, k);
    if (err)
        die(6, "urt_log_commit (loose)", err);
}

static void plain_done(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct plain_client *k = arg;
    if (status)
        die(4, "plain commit callback status", status);
    ack(crash_id(cycle, CRASH_KIND_PLAIN, k->source, k->seq), 1);
    k->seq++;
    if (k->seq % LOOSE_EVERY == 0)
        loose_issue(k);
    plain_issue(k);
}

static void plain_issue(struct plain_client *k)
{
    uint64_t id = crash_id(cycle, CRASH_KIND_PLAIN, k->source, k->seq);
    uint32_t len = crash_payload_fill(k->rec, id, 0, 1);
    int err = urt_log_commit(rt, &k->c, id, k->rec, len, URT_COMMIT_STORED, plain_done, k);
    if (err)
        die(6, "urt_log_commit", err);
}

static enum urt_task_result plain_start(struct urt_task *t, void *arg)
{
    (void)t;
    plain_issue(arg);
    return URT_TASK_DONE;
}

/* ---- transactions on lanes ---------------------------------------------------------- */

struct tx_client {
    urt_lane *lane;
    unsigned source;
    uint64_t seq;
    uint64_t id;        /* the transaction in flight */
    uint32_t count;
    bool stored;
};
static struct tx_client txc[TX_CLIENTS];

static enum urt_task_result tx_step(struct urt_task *t, void *arg);

/* A pooled task: the callback that queues the next step may run before the
 * current step returned (the lane runs the next one after it). */
static void tx_next(struct tx_client *k)
{
    int err = urt_lane_spawn(k->lane, tx_step, NULL, k, 0);
    if (err)
        die(7, "urt_lane_spawn", err);
}

static void tx_done(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    struct tx_client *k = arg;
    if (status)
        die(4, "transaction commit callback status", status);
    if (k->stored)
        ack(k->id, k->count);
    tx_next(k);
}

/* One transaction: begin, log its records, commit; runs as a task of the
 * client's lane, so a client's transactions are serialized. */
static enum urt_task_result tx_step(struct urt_task *t, void *arg)
{
    (void)t;
    struct tx_client *k = arg;
    uint64_t seq = k->seq++;
    k->stored = seq % LOOSE_EVERY != LOOSE_EVERY - 1;
    k->id = crash_id(cycle, k->stored ? CRASH_KIND_TX : CRASH_KIND_LOOSE_TX, k->source, seq);
    k->count = 2 + (uint32_t)(seq % 4);
    struct urt_tx_options opt;
    urt_tx_options_init(&opt);
    opt.id = k->id;
    urt_tx *tx;
    int err = urt_tx_begin(rt, &opt, &tx);
    if (err)
        die(8, "urt_tx_begin", err);
    uint8_t rec[CRASH_PAYLOAD_MAX];
    for (uint32_t i = 0; i < k->count; i++) {
        uint32_t len = crash_payload_fill(rec, k->id, i, k->count);
        if ((err = urt_tx_log(tx, rec, len)))
            die(8, "urt_tx_log", err);
    }
    err = urt_tx_commit(tx, k->stored ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE, tx_done, k);
    if (err)
        die(8, "urt_tx_commit", err);
    urt_tx_release(tx);
    return URT_TASK_DONE;
}

/* ---- jobs ------------------------------------------------------------------------- */

struct job_driver;
struct job_slot {
    struct urt_commit c;
    struct job_driver *d;
    uint64_t id;
    uint8_t rec[CRASH_PAYLOAD_MAX];
};
struct job_driver {
    struct urt_task start;
    unsigned source;
    uint64_t seq;
    _Atomic int pending; /* commits not answered + 1 while the job has not ended */
    struct job_slot slot[JOB_TASKS];
};
static struct job_driver jobs[JOB_DRIVERS];

static void job_round(struct job_driver *d);

static void job_release_one(struct job_driver *d)
{
    if (atomic_fetch_sub_explicit(&d->pending, 1, memory_order_acq_rel) == 1)
        job_round(d);
}

static void job_commit_done(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct job_slot *s = arg;
    if (status)
        die(4, "job task commit callback status", status);
    ack(s->id, 1);
    job_release_one(s->d);
}

static enum urt_task_result job_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct job_slot *s = arg;
    uint32_t len = crash_payload_fill(s->rec, s->id, 0, 1);
    int err = urt_log_commit(rt, &s->c, s->id, s->rec, len, URT_COMMIT_STORED, job_commit_done, s);
    if (err)
        die(6, "urt_log_commit (job task)", err);
    return URT_TASK_DONE;
}

static void job_ended(urt_job *job, int status, void *arg)
{
    if (status)
        die(9, "job completion status", status);
    urt_job_release(job);
    job_release_one(arg);
}

/* A job of JOB_TASKS committing tasks; the next one starts when this one
 * ended and all its commits answered. */
static void job_round(struct job_driver *d)
{
    atomic_store_explicit(&d->pending, JOB_TASKS + 1, memory_order_relaxed);
    struct urt_job_options opt;
    urt_job_options_init(&opt);
    opt.done = job_ended;
    opt.arg = d;
    urt_job *job;
    int err = urt_job_create(rt, &opt, &job);
    if (err)
        die(10, "urt_job_create", err);
    for (int i = 0; i < JOB_TASKS; i++) {
        d->slot[i].d = d;
        d->slot[i].id = crash_id(cycle, CRASH_KIND_JOB, d->source, d->seq++);
        if ((err = urt_job_spawn(job, job_task, NULL, &d->slot[i], 0)))
            die(10, "urt_job_spawn", err);
    }
    if ((err = urt_job_close(job)))
        die(10, "urt_job_close", err);
}

static enum urt_task_result job_start(struct urt_task *t, void *arg)
{
    (void)t;
    job_round(arg);
    return URT_TASK_DONE;
}

/* ---- main ------------------------------------------------------------------------- */

static _Noreturn void usage(const char *why)
{
    fprintf(stderr,
            "crash_child: %s\nusage: crash_child DIR CYCLE ACK_FD [--workers N] [--prealloc-kb K] "
            "[--log-sync auto|strict|single_flush]\n",
            why);
    exit(2);
}

static void parse_args(int argc, char **argv, struct urt_config *cfg)
{
    if (argc < 4)
        usage("missing arguments");
    cfg->log_dir = argv[1];
    cycle = strtoull(argv[2], NULL, 0);
    if (cycle == 0 || cycle > CRASH_CYCLE_MAX)
        usage("CYCLE must be 1..2^24-1");
    ack_fd = atoi(argv[3]);
    for (int i = 4; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage("an option without its value");
        const char *name = !strcmp(argv[i], "--workers")       ? "workers"
                           : !strcmp(argv[i], "--prealloc-kb") ? "log_prealloc_kb"
                           : !strcmp(argv[i], "--log-sync")    ? "log_sync"
                                                               : NULL;
        if (!name)
            usage("unknown option");
        if (urt_config_set(cfg, name, argv[i + 1]))
            usage(urt_last_error());
    }
}

static void start_work(void)
{
    int err;
    for (unsigned i = 0; i < PLAIN_CLIENTS; i++) {
        plain[i].source = i;
        urt_task_init(&plain[i].start, plain_start, &plain[i]);
        if ((err = urt_task_submit(rt, &plain[i].start, 0)))
            die(7, "urt_task_submit", err);
    }
    for (unsigned i = 0; i < TX_CLIENTS; i++) {
        txc[i].source = i;
        if ((err = urt_lane_create(rt, &txc[i].lane)))
            die(7, "urt_lane_create", err);
        tx_next(&txc[i]);
    }
    for (unsigned i = 0; i < JOB_DRIVERS; i++) {
        jobs[i].source = i;
        urt_task_init(&jobs[i].start, job_start, &jobs[i]);
        if ((err = urt_task_submit(rt, &jobs[i].start, 0)))
            die(7, "urt_task_submit", err);
    }
}

int main(int argc, char **argv)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    cfg.placement = URT_PLACEMENT_NONE;
    parse_args(argc, argv, &cfg);
    int err = urt_runtime_create(&cfg, &rt);
    if (err)
        die(3, "urt_runtime_create", err);
    start_work();
    for (;;)
        pause();
}
