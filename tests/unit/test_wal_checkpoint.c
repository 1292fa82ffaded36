/*
 * tests/unit/test_wal_checkpoint.c — segments and checkpoints (issue 14
 * point 1): channel files roll over at log_segment_kb, urt_log_checkpoint
 * deletes the closed segments it covers, recovery replays only above the
 * checkpoint; a sustained load with periodic checkpoints keeps the
 * directory under a bound; kill -9 at random moments with rollovers and
 * checkpoints in the mix loses no acknowledged stored commit above the
 * checkpoint and replays none at or below it.
 */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static char *make_dir(void)
{
    return test_tmpdir("urt-ckpt-test");
}

#define remove_dir test_remove_dir

/* Channel files in dir, and their total size. */
/* One walk of dir: every regular file's bytes (the channel files, the epoch
 * file, the notes), the channel files (ch-*) and their bytes, the most of
 * them any one worker has, and how far they run past `limit` bytes each (a
 * segment its worker could not roll out of yet: the next file is still
 * being made on the blocking pool, which waits behind long functions or a
 * slow directory fsync; docs/durability.md: the file grows meanwhile). */
struct dir_usage {
    uint64_t all_bytes, chan_bytes, overshoot;
    unsigned chans, max_per_worker;
};

static struct dir_usage dir_usage(const char *dir, uint64_t limit)
{
    struct dir_usage u = {0};
    unsigned per[64] = {0};
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode))
            continue;
        u.all_bytes += (uint64_t)st.st_size;
        unsigned long long gen;
        unsigned w;
        if (sscanf(e->d_name, "ch-%16llx-%4x", &gen, &w) != 2)
            continue;
        u.chans++;
        u.chan_bytes += (uint64_t)st.st_size;
        if ((uint64_t)st.st_size > limit)
            u.overshoot += (uint64_t)st.st_size - limit;
        if (w < 64 && ++per[w] > u.max_per_worker)
            u.max_per_worker = per[w];
    }
    if (d)
        closedir(d);
    return u;
}

/* The channel files of dir; *bytes: every regular file's. */
static unsigned count_channels(const char *dir, uint64_t *bytes)
{
    struct dir_usage u = dir_usage(dir, UINT64_MAX);
    *bytes = u.all_bytes;
    return u.chans;
}

/* A stored commit of len bytes (the id first, then its low byte); its marker. */
static uint64_t commit_stored(urt_runtime *rt, uint64_t id, uint32_t len)
{
    static uint8_t rec[4096];
    memset(rec, (int)(id & 0xff), len);
    memcpy(rec, &id, sizeof(id));
    return test_commit_stored(rt, id, rec, len);
}

struct seen {
    uint64_t n, min_epoch, max_id_seen;
    uint8_t *ids;
    uint64_t max_id, bad;
};

static int on_rec(void *arg, const struct urt_log_record *r)
{
    struct seen *s = arg;
    uint64_t id;
    memcpy(&id, r->payload, sizeof(id));
    if (id != r->tx_id || id >= s->max_id || s->ids[id]++)
        s->bad++;
    if (!s->n || r->epoch < s->min_epoch)
        s->min_epoch = r->epoch;
    s->n++;
    return 0;
}

static struct urt_log_recovery recover_into(const char *dir, struct seen *s, uint64_t max_id)
{
    memset(s, 0, sizeof(*s));
    s->max_id = max_id;
    s->ids = calloc(max_id, 1);
    struct urt_log_recover_ops ops = {.record = on_rec};
    struct urt_log_recovery out;
    cr_assert_eq(urt_log_recover(dir, 0, &ops, s, &out), 0, "%s", urt_last_error());
    return out;
}

/* One worker logging into dir in 64 KiB segments, 64 KiB preallocated. */
static void seg_config(struct urt_config *cfg, const char *dir)
{
    test_config(cfg, 1);
    cfg->log_dir = dir;
    cfg->log_segment_kb = 64;
    cfg->log_prealloc_kb = 64;
}

/* A runtime on dir with 64 KiB segments (one worker), after n stored
 * commits of 1000 bytes, ids 0..n-1: marker[id] is each one's marker. */
static urt_runtime *segmented_run(const char *dir, uint64_t *marker, uint64_t n)
{
    struct urt_config cfg;
    seg_config(&cfg, dir);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    for (uint64_t id = 0; id < n; id++)
        marker[id] = commit_stored(rt, id, 1000);
    return rt;
}

/* Every commit above the checkpoint ck replayed once, none at or below it. */
static void replayed_above(const struct seen *s, const uint64_t *marker, uint64_t n, uint64_t ck)
{
    for (uint64_t id = 0; id < n; id++)
        cr_assert_eq(s->ids[id], marker[id] > ck ? 1 : 0, "commit %llu (marker %llu, checkpoint %llu) replayed %u times",
                     (unsigned long long)id, (unsigned long long)marker[id], (unsigned long long)ck, s->ids[id]);
}

/* Recovery of dir after a clean run of commits 0..n-1: nothing to cut or
 * delete, and each commit replayed once. */
static void recovers_all(const char *dir, const uint64_t *marker, uint64_t n)
{
    struct seen s;
    struct urt_log_recovery out = recover_into(dir, &s, n);
    cr_assert_eq(out.cuts, 0);
    cr_assert_eq(out.deleted, 0);
    cr_assert_eq(s.bad, 0);
    replayed_above(&s, marker, n, 0);
    cr_assert_eq(s.n, n, "%llu records replayed for %llu commits", (unsigned long long)s.n, (unsigned long long)n);
    free(s.ids);
}

Test(wal_checkpoint, rollover_checkpoint_and_recovery, .timeout = 120)
{
    char *dir = make_dir();
    enum { N = 600 };
    uint64_t marker[N];
    urt_runtime *rt = segmented_run(dir, marker, N);
    uint64_t bytes;
    unsigned before = count_channels(dir, &bytes);
    cr_assert_geq(before, 6, "600 KB of records in 64 KiB segments made only %u files", before);
    cr_assert_eq(urt_log_checkpoint(rt, marker[N - 1] + 1000), -EINVAL, "a checkpoint above the durable marker");
    cr_assert_not_null(strstr(urt_last_error(), "above the durable marker"));
    uint64_t ck = marker[N / 2];
    int deleted = urt_log_checkpoint(rt, ck);
    cr_assert_geq(deleted, 2, "%d files deleted (%s)", deleted, deleted < 0 ? urt_last_error() : "");
    unsigned after = count_channels(dir, &bytes);
    cr_assert_eq(after + (unsigned)deleted, before);
    cr_assert_eq(urt_log_checkpoint(rt, ck - 1), 0, "a lower checkpoint deletes nothing more");
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_eq(st.checkpoint, ck);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    /* recovery: every commit above the checkpoint, none at or below it */
    struct seen s;
    struct urt_log_recovery out = recover_into(dir, &s, N);
    cr_assert_eq(out.checkpoint, ck);
    cr_assert_eq(s.bad, 0);
    replayed_above(&s, marker, N, ck);
    free(s.ids);
    /* twice: the same */
    struct urt_log_recovery again = recover_into(dir, &s, N);
    cr_assert_eq(again.durable_marker, out.durable_marker);
    cr_assert_eq(again.replayed, out.replayed);
    free(s.ids);
    remove_dir(dir);
    leak_check();
}

/* Reads a whole file into *buf (malloc'd); its size. */
static size_t slurp(const char *path, uint8_t **buf)
{
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0, "%s", path);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, *buf + got, (size_t)st.st_size - got)) > 0)
        got += (size_t)n;
    close(fd);
    cr_assert_eq(got, (size_t)st.st_size);
    return got;
}

/* A checkpoint deletes a segment by truncating it from its end in steps,
 * then unlinking it (wal_seg.c, seg_unlink). A crash between the steps
 * leaves the segment's header and a prefix of its records, cut anywhere,
 * all at or below the checkpoint. Recovery replays every commit above the
 * checkpoint and none at or below it, finds no damage in the middle (no
 * replay limit below the durable marker), deletes the leftovers, and a second
 * recovery finds nothing more to do. Here the deleted segments come back as
 * the steps would have left them: the header block alone, cut inside a
 * record, and whole (a crash just before the unlink). */
Test(wal_checkpoint, a_crash_inside_a_segment_deletion_recovers, .timeout = 120)
{
    char *dir = make_dir();
    enum { N = 600 };
    uint64_t marker[N];
    urt_runtime *rt = segmented_run(dir, marker, N);
    /* every channel file as it is before the checkpoint */
    char names[64][64];
    uint8_t *bytes[64];
    size_t sizes[64], n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)) && n < 64)
        if (!strncmp(e->d_name, "ch-", 3)) {
            char p[4200];
            snprintf(names[n], sizeof(names[n]), "%.63s", e->d_name);
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            sizes[n] = slurp(p, &bytes[n]);
            n++;
        }
    closedir(d);
    uint64_t ck = marker[N / 2];
    int deleted = urt_log_checkpoint(rt, ck);
    cr_assert_geq(deleted, 3, "%d files deleted (%s)", deleted, deleted < 0 ? urt_last_error() : "");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    uint64_t total;
    unsigned kept = count_channels(dir, &total);
    /* the deleted ones come back as a crash between the steps leaves them */
    unsigned back = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        if (access(p, F_OK) == 0)
            continue;
        if (sizes[i] < 4096 || !bytes[i][0])
            continue; /* blank: the next segment made ready for a roll, removed by destroy */
        size_t len = back % 3 == 0 ? 4096 : back % 3 == 1 ? 4096 + (sizes[i] - 4096) / 2 + 3 : sizes[i];
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        cr_assert(fd >= 0);
        cr_assert_eq(write(fd, bytes[i], len), (ssize_t)len);
        close(fd);
        back++;
    }
    for (size_t i = 0; i < n; i++)
        free(bytes[i]);
    cr_assert_eq(back, (unsigned)deleted);
    struct seen s;
    struct urt_log_recovery out = recover_into(dir, &s, N);
    cr_assert_eq(out.checkpoint, ck);
    cr_assert_eq(s.bad, 0);
    cr_assert_eq(out.replay_marker, out.durable_marker, "damage found in the middle: replay stops at %llu of %llu",
                 (unsigned long long)out.replay_marker, (unsigned long long)out.durable_marker);
    cr_assert_geq(out.durable_marker, marker[N - 1]);
    replayed_above(&s, marker, N, ck);
    free(s.ids);
    cr_assert_eq(out.deleted, back, "recovery deleted %u of the %u leftovers", out.deleted, back);
    cr_assert_eq(count_channels(dir, &total), kept);
    struct urt_log_recovery again = recover_into(dir, &s, N);
    cr_assert_eq(again.deleted, 0);
    cr_assert_eq(again.cuts, 0);
    cr_assert_eq(again.replayed, out.replayed);
    cr_assert_eq(again.durable_marker, out.durable_marker);
    free(s.ids);
    remove_dir(dir);
    leak_check();
}

/* The name of the channel file of worker 0 with the highest segment number
 * ("ch-<gen>-0000.wal" for segment 0, "ch-<gen>-0000-<seg>.wal" after), into
 * name; its segment number, or -1. */
static int last_segment(const char *dir, char *name, size_t len)
{
    int best = -1;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        unsigned long long gen;
        unsigned w, seg = 0;
        int got = sscanf(e->d_name, "ch-%16llx-%4x-%6x.wal", &gen, &w, &seg); /* segment 0 has no suffix */
        if (got >= 2 && w == 0 && (int)seg > best) {
            best = (int)seg;
            snprintf(name, len, "%.63s", e->d_name);
        }
    }
    if (d)
        closedir(d);
    return best;
}

/* A rollover that cannot create its next segment file (here: a foreign file
 * already has the name; the same path as ENOSPC or EMFILE) keeps writing the
 * old segment: no commit fails or is lost, the error is counted, and the
 * next rollover after the obstacle is gone succeeds. */
Test(wal_checkpoint, failed_rollover_keeps_the_old_segment, .timeout = 120)
{
    char *dir = make_dir();
    struct urt_config cfg;
    seg_config(&cfg, dir);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    char cur[64], blocker[PATH_MAX];
    cr_assert_eq(last_segment(dir, cur, sizeof(cur)), 0, "one segment at start");
    /* the next segment's name, taken by a file that is not ours */
    cur[strlen(cur) - strlen(".wal")] = 0;
    snprintf(blocker, sizeof(blocker), "%s/%s-000001.wal", dir, cur);
    int fd = open(blocker, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert_geq(fd, 0);
    close(fd);
    enum { N = 400 };
    uint64_t id = 0;
    for (; id < N / 2; id++)
        commit_stored(rt, id, 1000); /* 200 KB: three rollovers due, each refused */
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    cr_assert_geq(st.io_errors, 1, "the refused rollover is counted");
    char name[64];
    cr_assert_eq(last_segment(dir, name, sizeof(name)), 1, "only the blocker bears segment 1");
    struct stat sb;
    cr_assert_eq(stat(blocker, &sb), 0);
    cr_assert_eq(sb.st_size, 0, "the log wrote into a file it did not create");
    cr_assert_eq(unlink(blocker), 0);
    for (; id < N; id++)
        commit_stored(rt, id, 1000); /* the next rollover goes through */
    cr_assert_geq(last_segment(dir, name, sizeof(name)), 1, "no rollover after the obstacle went");
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct seen s;
    struct urt_log_recovery out = recover_into(dir, &s, N);
    (void)out;
    cr_assert_eq(s.bad, 0);
    for (uint64_t k = 0; k < N; k++)
        cr_assert_eq(s.ids[k], 1, "commit %llu replayed %u times", (unsigned long long)k, s.ids[k]);
    free(s.ids);
    remove_dir(dir);
    leak_check();
}

/* Channel files in dir that hold a header record (its first byte is the
 * record's length, never 0) and blank ones (empty or zeros at its start). */
static void count_headed(const char *dir, unsigned *headed, unsigned *blank)
{
    *headed = *blank = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ch-", 3))
            continue;
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        uint8_t b = 0;
        int fd = open(p, O_RDONLY);
        cr_assert_geq(fd, 0, "%s", p);
        ssize_t n = read(fd, &b, 1);
        close(fd);
        if (n == 1 && b)
            ++*headed;
        else
            ++*blank;
    }
    if (d)
        closedir(d);
}

/* A roll takes a file made ready on a blocking pool thread (wal_seg.c): the
 * worker creates nothing and waits for no sync. Each roll's file came from
 * an offload of the pool; the first flush into it wrote its header; the file
 * made ready for a roll that never came is removed when the runtime goes;
 * recovery finds every commit, nothing to cut, nothing to delete. */
Test(wal_checkpoint, a_roll_takes_a_file_made_off_the_worker, .timeout = 120)
{
    char *dir = make_dir();
    enum { N = 600 };
    uint64_t marker[N];
    urt_runtime *rt = segmented_run(dir, marker, N);
    unsigned headed, blank;
    count_headed(dir, &headed, &blank);
    cr_assert_geq(headed, 6, "600 KB of records in 64 KiB segments made only %u files", headed);
    cr_assert_leq(blank, 1, "at most the next segment waits, blank");
    struct urt_blocking_stats bs;
    cr_assert_eq(urt_blocking_stats(rt, &bs), 0);
    cr_assert_geq(bs.done, headed - 1, "%u rolls, %llu files made by the pool", headed - 1,
                  (unsigned long long)bs.done);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    unsigned headed_after, blank_after;
    count_headed(dir, &headed_after, &blank_after);
    cr_assert_eq(blank_after, 0, "the file made for the next roll outlived the runtime");
    cr_assert_eq(headed_after, headed);
    recovers_all(dir, marker, N);
    remove_dir(dir);
    leak_check();
}

/* Writes len bytes of b (NULL: zeros) to a new file dir/name. */
static void put_file(const char *dir, const char *name, const uint8_t *b, size_t len)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert_geq(fd, 0, "%s", p);
    uint8_t *z = b ? NULL : calloc(1, len ? len : 1);
    cr_assert_eq(write(fd, b ? b : z, len), (ssize_t)len);
    free(z);
    close(fd);
}

/* What a crash leaves of a segment file made ready and not rolled into yet
 * (empty, or its zeros), or of the first write into it (torn): nothing a
 * recovery can read, so it deletes the file (a torn one is cut first);
 * every commit is replayed, and a second recovery finds nothing to do. */
Test(wal_checkpoint, recovery_deletes_blank_segment_files, .timeout = 120)
{
    char *dir = make_dir();
    enum { N = 200 };
    uint64_t marker[N];
    urt_runtime *rt = segmented_run(dir, marker, N);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    char cur[64];
    cr_assert_geq(last_segment(dir, cur, sizeof(cur)), 1, "200 KB in 64 KiB segments rolled");
    /* ch-<gen>-<worker>-<seg>.wal: the same generation and worker, later segments */
    char base[64], names[3][96];
    snprintf(base, sizeof(base), "%.24s", cur);
    for (int i = 0; i < 3; i++)
        snprintf(names[i], sizeof(names[i]), "%s-%06x.wal", base, 0xfff0 + i);
    uint8_t torn[100];
    for (size_t i = 0; i < sizeof(torn); i++)
        torn[i] = (uint8_t)(0x5a ^ i);
    put_file(dir, names[0], NULL, 0);
    put_file(dir, names[1], NULL, 512 * 1024);
    put_file(dir, names[2], torn, sizeof(torn));
    struct seen s;
    struct urt_log_recovery out = recover_into(dir, &s, N);
    cr_assert_eq(out.deleted, 3, "%u deleted", out.deleted);
    cr_assert_eq(out.cuts, 1, "the torn one is cut first");
    cr_assert_eq(out.replay_marker, out.durable_marker, "no damage in the middle");
    cr_assert_eq(s.bad, 0);
    replayed_above(&s, marker, N, 0);
    free(s.ids);
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        cr_assert_neq(access(p, F_OK), 0, "%s is still there", names[i]);
    }
    struct urt_log_recovery again = recover_into(dir, &s, N);
    cr_assert_eq(again.deleted, 0);
    cr_assert_eq(again.cuts, 0);
    cr_assert_eq(again.replayed, out.replayed);
    free(s.ids);
    remove_dir(dir);
    leak_check();
}

Test(wal_checkpoint, sustained_load_with_checkpoints_stays_bounded, .timeout = 120)
{
    char *dir = make_dir();
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_segment_kb = 128;
    cfg.log_prealloc_kb = 64;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    /* An active segment holds at most the segment, one flush past it (a
     * 3000-byte commit, block-aligned) and the preallocation ahead. */
    const uint64_t active_max = (128 + 64 + 4) * 1024;
    uint64_t max_bytes = 0, max_overshoot = 0, total = 0;
    const int rounds = SCALE(40, 20);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 100; k++, total++)
            commit_stored(rt, total, 3000); /* 300 KB per round */
        struct urt_log_stats st;
        cr_assert_eq(urt_log_stats(rt, &st), 0);
        cr_assert_geq(urt_log_checkpoint(rt, st.durable), 0, "%s", urt_last_error());
        /* Every commit is stored and the checkpoint is at the durable
         * marker: every closed segment is gone, each worker keeps its
         * active file and at most the next one, made ready. */
        struct dir_usage u = dir_usage(dir, active_max);
        cr_assert_leq(u.max_per_worker, 2u, "round %d: a worker has %u channel files after a checkpoint at the "
                                            "durable marker", r, u.max_per_worker);
        if (u.all_bytes - u.overshoot > max_bytes)
            max_bytes = u.all_bytes - u.overshoot;
        if (u.overshoot > max_overshoot)
            max_overshoot = u.overshoot;
    }
    /* Bound: per worker the active segment (<= segment + one flush + the
     * preallocation ahead) plus the segment closed since the last
     * checkpoint; the epoch file (128 KiB) and small notes. What an active
     * file ran past its size while its next file was being made (late
     * rolls) is counted apart: a roll never waits on the worker. */
    uint64_t bound = 2 * (2 * (128 + 64) * 1024 + 64 * 1024) + 128 * 1024 + 64 * 1024;
    struct urt_log_stats ls;
    struct urt_blocking_stats bs;
    cr_assert_eq(urt_log_stats(rt, &ls), 0);
    cr_assert_eq(urt_blocking_stats(rt, &bs), 0);
    cr_log_info("%llu KB written, directory at most %llu KB (bound %llu KB) besides late rolls (at most %llu KB); "
                "io_errors %llu, pool: %llu done, %llu threads started",
                (unsigned long long)(total * 3), (unsigned long long)(max_bytes / 1024),
                (unsigned long long)(bound / 1024), (unsigned long long)(max_overshoot / 1024),
                (unsigned long long)ls.io_errors, (unsigned long long)bs.done, (unsigned long long)bs.threads_started);
    cr_assert_leq(max_bytes, bound, "the directory grew to %llu bytes besides late rolls (bound %llu)",
                  (unsigned long long)max_bytes, (unsigned long long)bound);
    cr_assert_gt(total * 3000, 3 * bound, "the load must write far more than the bound");
    cr_assert_eq(ls.io_errors, 0);
    /* A late roll catches up: once the pool has made the files, the next
     * flushes roll and a checkpoint leaves no file past its size. */
    struct dir_usage u = dir_usage(dir, active_max);
    for (int i = 0; i < 1000 && u.overshoot; i++) {
        for (int k = 0; k < 10; k++, total++)
            commit_stored(rt, total, 3000);
        cr_assert_eq(urt_log_stats(rt, &ls), 0);
        cr_assert_geq(urt_log_checkpoint(rt, ls.durable), 0, "%s", urt_last_error());
        u = dir_usage(dir, active_max);
        if (u.overshoot)
            usleep(10 * 1000);
    }
    cr_assert_eq(u.overshoot, 0, "a file still runs %llu bytes past its size", (unsigned long long)u.overshoot);
    cr_assert_geq(bs.done, 2u, "no next file was made for %llu KB in 128 KiB segments",
                  (unsigned long long)(total * 3));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    remove_dir(dir);
    leak_check();
}

/* A roll happened: a second channel file holds a header record (a file
 * made ready and not rolled into yet is all zeros). */
static bool rolled(const char *dir)
{
    unsigned headed, blank;
    count_headed(dir, &headed, &blank);
    return headed >= 2;
}

/* A pool function that holds the pool's one thread until *arg is set. */
static int64_t hold_pool(void *arg)
{
    _Atomic int *release = arg;
    WAIT_UNTIL(atomic_load(release), 60000);
    return 0;
}

static void held_done(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b, (void)res;
    atomic_store((_Atomic int *)arg, 2);
}

/* A roll whose next file is late, every time: the pool's one thread is held
 * by a user's function, so the file the log asked for waits in the queue
 * while the segment fills. The worker never waits for it: the commits go
 * on into the old file past its size, and none fails. Once the thread is
 * free the file is made, the next flush rolls into it, and recovery replays
 * every commit, the grown segment's included. */
Test(wal_checkpoint, a_late_roll_catches_up, .timeout = 120)
{
    char *dir = make_dir();
    struct urt_config cfg;
    seg_config(&cfg, dir);
    cfg.blocking_threads_max = 1;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    static _Atomic int release;
    atomic_store(&release, 0);
    cr_assert_eq(urt_blocking_spawn(rt, hold_pool, held_done, &release, 0), 0, "%s", urt_last_error());
    struct urt_blocking_stats bs;
    cr_assert(WAIT_UNTIL(urt_blocking_stats(rt, &bs) == 0 && bs.running == 1, 10000), "the holder never ran");
    /* 300 KB into 64 KiB segments, the pool held: no roll can happen. */
    enum { HELD = 300, N = 3000 };
    static uint64_t marker[N];
    for (uint64_t id = 0; id < HELD; id++)
        marker[id] = commit_stored(rt, id, 1000);
    const uint64_t active_max = (64 + 64 + 4) * 1024;
    struct dir_usage u = dir_usage(dir, active_max);
    cr_assert_eq(u.chans, 1u, "%u channel files: a roll happened with the pool held", u.chans);
    cr_assert_gt(u.overshoot, 0, "the segment did not grow past its size (%llu bytes)", (unsigned long long)u.chan_bytes);
    cr_assert_eq(urt_blocking_stats(rt, &bs), 0);
    cr_assert_eq(bs.queued, 1u, "the next file's offload waits in the queue (%llu queued)",
                 (unsigned long long)bs.queued);
    /* The thread is free: the file is made, and a later flush rolls. */
    atomic_store(&release, 1);
    cr_assert(WAIT_UNTIL(atomic_load(&release) == 2, 10000), "the holder did not end");
    uint64_t id = HELD;
    for (; id < N - 20 && !rolled(dir); id++) /* however slow the pool's syncs are here */
        marker[id] = commit_stored(rt, id, 1000);
    cr_assert(rolled(dir), "no roll after the pool was free (%llu commits)", (unsigned long long)(id - HELD));
    for (uint64_t end = id + 20; id < end; id++) /* and into the new file */
        marker[id] = commit_stored(rt, id, 1000);
    const uint64_t n = id;
    struct urt_log_stats ls;
    cr_assert_eq(urt_log_stats(rt, &ls), 0);
    cr_assert_eq(ls.io_errors, 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    recovers_all(dir, marker, n);
    remove_dir(dir);
    leak_check();
}

/* ---- kill -9 with rollovers and checkpoints ------------------------------------------ */

struct ack {
    uint64_t id, marker; /* id = UINT64_MAX: a checkpoint at marker returned */
};

static void child(const char *dir, uint64_t cycle, int fd)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_segment_kb = 64;
    cfg.log_prealloc_kb = (cycle & 1) ? 64 : 0;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&cfg, &rt))
        _exit(3);
    static uint8_t rec[800];
    for (uint64_t k = 0;; k++) {
        uint64_t id = (cycle << 32) | k;
        memcpy(rec, &id, sizeof(id));
        struct urt_commit c;
        struct test_commit_waiter w = {0}; /* a child: no criterion here, so not test_commit_stored */
        if (urt_log_commit(rt, &c, id, rec, sizeof(rec), URT_COMMIT_STORED, test_commit_cb, &w))
            _exit(4);
        while (!atomic_load(&w.done))
            sleep_us(20);
        if (atomic_load(&w.status))
            _exit(5);
        struct ack a = {id, urt_commit_marker(&c)};
        if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
            _exit(6);
        if (k % 50 == 49) {
            struct urt_log_stats st;
            urt_log_stats(rt, &st);
            uint64_t m = st.durable > 20 ? st.durable - 20 : 0;
            if (urt_log_checkpoint(rt, m) < 0)
                _exit(7);
            struct ack ck = {UINT64_MAX, m};
            if (write(fd, &ck, sizeof(ck)) != (ssize_t)sizeof(ck))
                _exit(8);
        }
    }
}

struct idset {
    uint64_t *v;
    size_t n, cap;
};

static void push(struct idset *s, uint64_t x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
    }
    s->v[s->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int collect(void *arg, const struct urt_log_record *r)
{
    push(arg, r->tx_id);
    return 0;
}

/* Reads up to max acks from fd (until EOF for SIZE_MAX): commits into *acked
 * as (id, marker) pairs, checkpoints counted. */
static void read_acks(int fd, size_t max, struct idset *acked, uint64_t *n_acked, uint64_t *n_ck)
{
    struct ack a;
    for (size_t i = 0; i < max && read(fd, &a, sizeof(a)) == (ssize_t)sizeof(a); i++) {
        if (a.id == UINT64_MAX) {
            (*n_ck)++;
            continue;
        }
        push(acked, a.id);
        push(acked, a.marker);
        (*n_acked)++;
    }
}

Test(wal_checkpoint, kill9_with_rollovers_and_checkpoints, .timeout = 600)
{
    char *dir = make_dir();
    unsigned seed = (unsigned)now_ns();
    const uint64_t cycles = SCALE(60, 15);
    uint64_t acked_total = 0, checked = 0, checkpoints = 0;
    struct idset all_acked = {0}; /* (id, marker) pairs over all cycles, flattened */
    for (uint64_t cycle = 1; cycle <= cycles; cycle++) {
        int p[2];
        cr_assert_eq(pipe(p), 0);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            close(p[0]);
            child(dir, cycle, p[1]);
        }
        close(p[1]);
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        poll(&pfd, 1, 5000);
        /* Every 4th cycle the kill waits until the child returned from a
         * checkpoint (reading acks meanwhile), so checkpoints are in the mix
         * however slow a loaded machine makes the child; the kill itself
         * still comes at a random time after that. */
        uint64_t before = checkpoints;
        if (cycle % 4 == 0)
            for (uint64_t until = now_ns() + 10000000000ull; checkpoints == before && now_ns() < until;)
                if (poll(&pfd, 1, 100) > 0)
                    read_acks(p[0], 1, &all_acked, &acked_total, &checkpoints);
        sleep_us(20000 + (uint64_t)(rand_r(&seed) % 60000));
        kill(pid, SIGKILL);
        read_acks(p[0], SIZE_MAX, &all_acked, &acked_total, &checkpoints);
        close(p[0]);
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st), "cycle %llu: the child exited by itself (%d)", (unsigned long long)cycle,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        /* recover twice; the second equals the first. The directory as the
         * kill left it is copied first and kept when they differ (a rare
         * failure seen once, 2026-11-25, in a full plain run: the copy lets
         * it be replayed). */
        char pre[4200], cmd[8500];
        snprintf(pre, sizeof(pre), "%s.pre", dir);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", pre, dir, pre);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        struct idset rep = {0}, rep2 = {0};
        struct urt_log_recover_ops ops = {.record = collect};
        struct urt_log_recovery out, out2;
        cr_assert_eq(urt_log_recover(dir, 0, &ops, &rep, &out), 0, "cycle %llu: %s", (unsigned long long)cycle,
                     urt_last_error());
        cr_assert_eq(urt_log_recover(dir, 0, &ops, &rep2, &out2), 0);
        cr_assert_eq(out2.durable_marker, out.durable_marker,
                     "cycle %llu: a second recovery found marker %llu, the first %llu (replay %llu/%llu, checkpoint "
                     "%llu/%llu, claims %u/%u, broken slots %u/%u, cuts %u/%u, deleted %u/%u); the directory as "
                     "the kill left it: %s",
                     (unsigned long long)cycle, (unsigned long long)out2.durable_marker,
                     (unsigned long long)out.durable_marker, (unsigned long long)out.replay_marker,
                     (unsigned long long)out2.replay_marker, (unsigned long long)out.checkpoint,
                     (unsigned long long)out2.checkpoint, out.claims, out2.claims, out.broken_slots,
                     out2.broken_slots, out.cuts, out2.cuts, out.deleted, out2.deleted, pre);
        cr_assert_eq(rep2.n, rep.n, "cycle %llu: a second recovery replayed %zu, the first %zu",
                     (unsigned long long)cycle, rep2.n, rep.n);
        if (rep.n)
            qsort(rep.v, rep.n, sizeof(*rep.v), cmp_u64);
        for (size_t i = 1; i < rep.n; i++)
            cr_assert_neq(rep.v[i], rep.v[i - 1], "cycle %llu: id %llx replayed twice", (unsigned long long)cycle,
                          (unsigned long long)rep.v[i]);
        /* every acknowledged commit above the checkpoint is there; none at or below it */
        for (size_t i = 0; i < all_acked.n; i += 2) {
            uint64_t id = all_acked.v[i], m = all_acked.v[i + 1];
            bool found = rep.n && bsearch(&id, rep.v, rep.n, sizeof(*rep.v), cmp_u64);
            if (m > out.checkpoint)
                cr_assert(found, "cycle %llu: acknowledged id %llx (marker %llu > checkpoint %llu) lost",
                          (unsigned long long)cycle, (unsigned long long)id, (unsigned long long)m,
                          (unsigned long long)out.checkpoint);
            else
                cr_assert(!found, "cycle %llu: id %llx at or below the checkpoint replayed",
                          (unsigned long long)cycle, (unsigned long long)id);
            checked++;
        }
        free(rep.v);
        free(rep2.v);
    }
    cr_log_info("%llu cycles, %llu acknowledged commits, %llu checks, %llu checkpoints",
                (unsigned long long)cycles, (unsigned long long)acked_total, (unsigned long long)checked,
                (unsigned long long)checkpoints);
    cr_assert_gt(acked_total, 0);
    cr_assert_gt(checkpoints, 0);
    free(all_acked.v);
    char rm[4300];
    snprintf(rm, sizeof(rm), "rm -rf '%s.pre'", dir);
    cr_assert_eq(system(rm), 0, "%s", rm);
    remove_dir(dir);
}
