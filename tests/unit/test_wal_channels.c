/*
 * tests/unit/test_wal_channels.c — log_channels: fewer log channels than
 * workers (tx/wal.c: a commit on a worker without a channel hops, in order,
 * to the sticky queue of channel worker % log_channels).
 *
 *   - every commit, from every worker and from a thread that is no worker,
 *     is answered stored and replayed by recovery exactly once; only the
 *     first log_channels workers have channel files; each worker's commits
 *     keep their order (markers never go down; replay order is issue order;
 *     a thread that is no worker gets no order, as with a channel per worker);
 *   - log_sync single_write with one channel: the write that holds a stored
 *     commit's records also carries the durable marker covering them — every
 *     durable write is a claim, no epoch-file write — so a stored commit
 *     waits for one write, never for another channel's next one (counted,
 *     not timed: claims == fsyncs under two workers committing together);
 *   - log_channels above the worker count means one channel per worker.
 */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define MAX_WORKERS 4
#define PER_WORKER 400
#define FOREIGN 50

struct rec {
    uint32_t src; /* worker index, or MAX_WORKERS: the test's thread */
    uint32_t seq;
};

struct slot {
    struct urt_commit c;
    struct rec r;
    int status;
    uint64_t marker;
};

struct run {
    urt_runtime *rt;
    struct slot slots[MAX_WORKERS + 1][PER_WORKER];
    uint32_t per_worker;
    _Atomic uint32_t answered, failed;
};

static void answered(struct urt_commit *c, int status, void *arg)
{
    struct run *run = arg;
    struct slot *s = (struct slot *)((char *)c - offsetof(struct slot, c));
    s->status = status;
    s->marker = urt_commit_marker(c);
    if (status)
        atomic_fetch_add(&run->failed, 1);
    atomic_fetch_add_explicit(&run->answered, 1, memory_order_release);
}

struct worker_arg {
    struct run *run;
    uint32_t w;
};

/* On worker w: its commits, in sequence, without waiting for answers. */
static enum urt_task_result commit_all(struct urt_task *t, void *arg)
{
    (void)t;
    struct worker_arg *a = arg;
    struct run *run = a->run;
    cr_assert_eq(urt_current_worker(run->rt), (int)a->w);
    for (uint32_t i = 0; i < run->per_worker; i++) {
        struct slot *s = &run->slots[a->w][i];
        s->r = (struct rec){a->w, i};
        s->status = 1;
        int rc = urt_log_commit(run->rt, &s->c, 0, &s->r, sizeof(s->r), URT_COMMIT_STORED, answered, run);
        cr_assert_eq(rc, 0, "%s", urt_last_error());
    }
    return URT_TASK_DONE;
}

static urt_runtime *channels_rt(const char *dir, uint32_t workers, uint32_t channels)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.log_dir = dir;
    cfg.log_channels = channels;
    return rt_create_or_skip(&cfg);
}

/* Commits per_worker records from each worker (all at once) and FOREIGN
 * from this thread; waits for every answer. */
static void commit_everywhere(struct run *run, uint32_t workers)
{
    struct worker_arg args[MAX_WORKERS];
    atomic_store(&run->answered, 0);
    for (uint32_t w = 0; w < workers; w++) {
        args[w] = (struct worker_arg){run, w};
        cr_assert_eq(urt_spawn_to(run->rt, w, commit_all, NULL, &args[w], 0), 0, "%s", urt_last_error());
    }
    for (uint32_t i = 0; i < FOREIGN; i++) {
        struct slot *s = &run->slots[MAX_WORKERS][i];
        s->r = (struct rec){MAX_WORKERS, i};
        s->status = 1;
        cr_assert_eq(urt_log_commit(run->rt, &s->c, 0, &s->r, sizeof(s->r), URT_COMMIT_STORED, answered, run), 0);
    }
    uint32_t want = workers * run->per_worker + FOREIGN;
    cr_assert(WAIT_UNTIL(atomic_load_explicit(&run->answered, memory_order_acquire) == want, 60000),
              "answered %u of %u", atomic_load(&run->answered), want);
    cr_assert_eq(atomic_load(&run->failed), 0);
}

/* Channel files present: a bit per worker index. */
static uint32_t channel_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    uint32_t mask = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long gen;
        unsigned w;
        if (sscanf(e->d_name, "ch-%16llx-%4x.wal", &gen, &w) == 2)
            mask |= 1u << w;
    }
    closedir(d);
    return mask;
}

struct replay {
    uint32_t n;
    int32_t next[MAX_WORKERS + 1]; /* next expected seq per source */
    uint32_t out_of_order, bad;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    struct rec x;
    if (r->len != sizeof(x)) {
        rp->bad++;
        return 0;
    }
    memcpy(&x, r->payload, sizeof(x));
    if (x.src > MAX_WORKERS) {
        rp->bad++;
        return 0;
    }
    bool wrap = x.seq == 0 && rp->next[x.src] == PER_WORKER; /* the next runtime's first commit */
    if (x.src < MAX_WORKERS && (int32_t)x.seq != rp->next[x.src] && !wrap)
        rp->out_of_order++; /* a thread that is no worker: its commits go to any worker, unordered */
    rp->next[x.src] = (int32_t)x.seq + 1;
    rp->n++;
    return 0;
}

static void check_channels(uint32_t workers, uint32_t channels)
{
    char *dir = test_tmpdir("walch");
    struct run *run = calloc(1, sizeof(*run));
    run->per_worker = PER_WORKER;
    run->rt = channels_rt(dir, workers, channels);
    commit_everywhere(run, workers);
    /* each worker's commits: markers never go down (issue order is append
     * order); the test thread's go to any worker, in no order */
    for (uint32_t w = 0; w <= MAX_WORKERS; w++) {
        uint32_t n = w == MAX_WORKERS ? FOREIGN : (w < workers ? PER_WORKER : 0);
        for (uint32_t i = 0; i < n; i++) {
            cr_assert_eq(run->slots[w][i].status, 0);
            if (i && w < MAX_WORKERS)
                cr_assert_geq(run->slots[w][i].marker, run->slots[w][i - 1].marker, "worker %u commit %u", w, i);
        }
    }
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(run->rt, &st), 0);
    uint32_t want = workers * PER_WORKER + FOREIGN;
    cr_assert_eq(st.commits, want);
    cr_assert_eq(rt_destroy_clean(run->rt, URT_SHUTDOWN_DRAIN, 0), 0);
    uint32_t n_chan = channels && channels < workers ? channels : workers;
    cr_assert_eq(channel_files(dir), (1u << n_chan) - 1, "channel files of workers 0..%u only", n_chan - 1);
    struct replay rp = {0};
    struct urt_log_recover_ops ops = {.record = on_record};
    struct urt_log_recovery res;
    cr_assert_eq(urt_log_recover(dir, 0, &ops, &rp, &res), 0, "%s", urt_last_error());
    cr_assert_eq(rp.bad, 0);
    cr_assert_eq(rp.n, want, "every answered commit replayed once");
    cr_assert_eq(rp.out_of_order, 0, "a worker's commits replay in the order it made them");
    cr_assert_eq(res.channels, n_chan);
    free(run);
    test_remove_dir(dir);
}

Test(wal_channels, one_channel_for_four_workers, .timeout = 120)
{
    check_channels(4, 1);
}

Test(wal_channels, two_channels_for_four_workers, .timeout = 120)
{
    check_channels(4, 2);
}

Test(wal_channels, more_channels_than_workers_is_one_per_worker, .timeout = 120)
{
    check_channels(2, 64);
}

/* Two workers commit together, in rounds; with one channel every write that
 * made records durable carried the marker covering them. */
Test(wal_channels, one_channel_every_write_carries_its_marker, .timeout = 120)
{
    char *dir = test_tmpdir("walch1");
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_channels = 1;
    cr_assert_eq(urt_config_set(&cfg, "log_sync", "single_write"), 0);
    struct run *run = calloc(1, sizeof(*run));
    run->rt = rt_create_or_skip(&cfg);
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(run->rt, &st), 0);
    if (st.sync_mode != URT_LOG_SYNC_SINGLE_WRITE) {
        rt_destroy_clean(run->rt, URT_SHUTDOWN_DRAIN, 0);
        free(run);
        test_remove_dir(dir);
        cr_skip_test("single_write fell back to %u on this TMPDIR (fs %s): no O_DIRECT", st.sync_mode, st.fs);
    }
    run->per_worker = 40;
    for (int round = 0; round < 10; round++)
        commit_everywhere(run, 2);
    cr_assert_eq(urt_log_stats(run->rt, &st), 0);
    cr_assert_gt(st.fsyncs, 0);
    cr_assert_eq(st.claims, st.fsyncs, "every durable write carries its marker: %" PRIu64 " claims, %" PRIu64
                 " durable writes", st.claims, st.fsyncs);
    cr_assert_eq(st.epoch_writes, 0);
    cr_assert_eq(rt_destroy_clean(run->rt, URT_SHUTDOWN_DRAIN, 0), 0);
    free(run);
    test_remove_dir(dir);
}

/* A directory written with a channel per worker and opened again with one
 * channel (urt-kv changed its default under stored to one): the new runtime
 * starts above the old epochs, and a recovery replays both runtimes' commits,
 * each once, each worker's in order (the old files stay until a checkpoint). */
Test(wal_channels, reopened_with_fewer_channels_replays_both_runs, .timeout = 120)
{
    enum { W = 4 };
    char *dir = test_tmpdir("walchre");
    struct run *run = calloc(1, sizeof(*run));
    run->per_worker = PER_WORKER;
    uint64_t last_marker_a = 0;
    for (int pass = 0; pass < 2; pass++) {
        run->rt = channels_rt(dir, W, pass == 0 ? 0 : 1);
        commit_everywhere(run, W);
        for (uint32_t w = 0; w < W; w++) {
            uint64_t first = run->slots[w][0].marker;
            if (pass == 1)
                cr_assert_gt(first, last_marker_a, "worker %u: the reopened log starts above the old epochs", w);
            else if (run->slots[w][PER_WORKER - 1].marker > last_marker_a)
                last_marker_a = run->slots[w][PER_WORKER - 1].marker;
        }
        cr_assert_eq(rt_destroy_clean(run->rt, URT_SHUTDOWN_DRAIN, 0), 0);
    }
    cr_assert_eq(channel_files(dir), (1u << W) - 1, "the first run's four channel files (the second wrote to 0)");
    struct replay rp = {0};
    struct urt_log_recover_ops ops = {.record = on_record};
    cr_assert_eq(urt_log_recover(dir, 0, &ops, &rp, NULL), 0, "%s", urt_last_error());
    cr_assert_eq(rp.bad, 0);
    cr_assert_eq(rp.n, 2 * (W * PER_WORKER + FOREIGN), "every answered commit of both runs replayed once");
    cr_assert_eq(rp.out_of_order, 0, "a worker's commits replay in the order it made them");
    free(run);
    test_remove_dir(dir);
}

/* Replay marks: which (source, seq) came back. */
struct marks {
    bool seen[MAX_WORKERS + 1][PER_WORKER];
    uint32_t twice;
};

static int on_record_mark(void *arg, const struct urt_log_record *r)
{
    struct marks *m = arg;
    struct rec x;
    if (r->len != sizeof(x))
        return 0;
    memcpy(&x, r->payload, sizeof(x));
    if (x.src <= MAX_WORKERS && x.seq < PER_WORKER) {
        m->twice += m->seen[x.src][x.seq];
        m->seen[x.src][x.seq] = true;
    }
    return 0;
}

static _Atomic uint32_t g_committers_done;

/* On the channel's owner: busy for a while, so the other workers' commits
 * queue up behind it as hop tasks. */
static enum urt_task_result hold_owner(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = now_ns() + 2000ull * 1000 * 1000;
    while (atomic_load(&g_committers_done) < 3 && now_ns() < end)
        sched_yield();
    sleep_us(20000); /* the test thread calls destroy meanwhile */
    return URT_TASK_DONE;
}

static enum urt_task_result commit_all_counted(struct urt_task *t, void *arg)
{
    commit_all(t, arg);
    atomic_fetch_add(&g_committers_done, 1);
    return URT_TASK_DONE;
}

/* destroy(CANCEL) while commits of workers without a channel are queued as
 * hop tasks behind a busy channel owner: every commit is answered exactly
 * once by destroy's return (those still hopping with -ECANCELED), and every
 * commit answered 0 is replayed. */
Test(wal_channels, cancel_while_commits_hop_answers_each_once, .timeout = 120)
{
    enum { W = 4 };
    char *dir = test_tmpdir("walchcx");
    struct run *run = calloc(1, sizeof(*run));
    run->per_worker = PER_WORKER;
    run->rt = channels_rt(dir, W, 1);
    atomic_store(&g_committers_done, 0);
    cr_assert_eq(urt_spawn_to(run->rt, 0, hold_owner, NULL, NULL, 0), 0, "%s", urt_last_error());
    struct worker_arg args[W];
    for (uint32_t w = 1; w < W; w++) {
        args[w] = (struct worker_arg){run, w};
        cr_assert_eq(urt_spawn_to(run->rt, w, commit_all_counted, NULL, &args[w], 0), 0, "%s", urt_last_error());
    }
    cr_assert(WAIT_UNTIL(atomic_load(&g_committers_done) == W - 1, 60000));
    int r = urt_runtime_destroy(run->rt, URT_SHUTDOWN_CANCEL);
    cr_assert_geq(r, 0, "%s", urt_last_error());
    uint32_t want = (W - 1) * PER_WORKER, ok = 0, cancelled = 0;
    cr_assert_eq(atomic_load(&run->answered), want, "every commit answered once by destroy's return");
    for (uint32_t w = 1; w < W; w++)
        for (uint32_t i = 0; i < PER_WORKER; i++) {
            int st = run->slots[w][i].status;
            cr_assert(st == 0 || st == -ECANCELED, "worker %u commit %u: status %d", w, i, st);
            ok += st == 0;
            cancelled += st == -ECANCELED;
        }
    cr_assert_gt(cancelled, 0, "no commit was still hopping at destroy: the test tests nothing");
    struct marks *m = calloc(1, sizeof(*m));
    struct urt_log_recover_ops ops = {.record = on_record_mark};
    cr_assert_eq(urt_log_recover(dir, 0, &ops, m, NULL), 0, "%s", urt_last_error());
    cr_assert_eq(m->twice, 0);
    for (uint32_t w = 1; w < W; w++)
        for (uint32_t i = 0; i < PER_WORKER; i++)
            if (run->slots[w][i].status == 0)
                cr_assert(m->seen[w][i], "worker %u commit %u was answered stored and is not in the log", w, i);
    cr_log_info("destroy(CANCEL): %u stored, %u cancelled of %u", ok, cancelled, want);
    free(m);
    free(run);
    test_remove_dir(dir);
}
