/*
 * tests/kv/test_kv_durable.c — urt-kv's durability modes, recovery and
 * checkpoints, through the binary:
 *  - a restart keeps every write and every key's expiry (stored, available);
 *  - kill -9 under a SET load in `stored` mode, several cycles: after each
 *    restart every SET that was answered OK is there with its value (each
 *    client writes its own keys in order and remembers the last one answered);
 *  - checkpoints: with a small --checkpoint-mb the server writes snapshots
 *    and checkpoints the log under load; kill -9 then restart recovers from
 *    the snapshot plus the log above it, and the log's closed segments are
 *    deleted;
 *  - an expiry survives a restart and still happens after it.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/mount.h>
#include <pthread.h>

#include "helpers.h"
#include "kv_client.h"

static struct kvs srv;

static void paths(void)
{
    memset(&srv, 0, sizeof(srv));
    kvs_paths(&srv, "dur");
}

static char mounted[280]; /* a tmpfs of the full-disk test, unmounted even when it failed */

/* The server, then the tmpfs, then srv.dir: the tmpfs is mounted inside
 * srv.dir, whose removal (rm -rf) cannot remove a mount point and had left
 * the directory behind. */
static void cleanup(void)
{
    kvs_stop(&srv, true);
    if (mounted[0]) {
        for (int i = 0; i < 100 && umount(mounted); i++) /* the dead rings let go of the files asynchronously */
            usleep(100000);
        umount2(mounted, MNT_DETACH);
        mounted[0] = 0;
    }
    kvs_cleanup(&srv);
}


static const char *log_channels = "-1"; /* -1: urt-kv's default (1 with stored) */

static void start_mode(const char *mode, const char *checkpoint_mb)
{
    const char *const extra[] = {"--dir", srv.data, "--durability", mode, "--checkpoint-mb", checkpoint_mb,
                                 strcmp(log_channels, "-1") ? "--log-channels" : NULL, log_channels, NULL};
    kvs_start(&srv, extra);
}

/* A field of an INFO reply ("name:value\r\n"), -1 if absent. */
static long long info_num(const char *info, const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), "\n%s:", name);
    const char *p = strstr(info, key);
    return p ? atoll(p + strlen(key)) : -1;
}

/* INFO persistence tells how the log made the writes durable: the sync mode
 * by its name, and the durable marker carried by claims (single_write only)
 * or by epoch-file writes. */
static void info_tells_how_writes_became_durable(struct kvc *c, bool stored)
{
    const char *info = kvc_cmd(c, "INFO persistence");
    const char *mode = strstr(info, "log_sync_mode:");
    cr_assert(mode, "%s", info);
    mode += strlen("log_sync_mode:");
    bool single_write = !strncmp(mode, "single_write\r", 13);
    cr_assert(single_write || !strncmp(mode, "single_flush\r", 13) || !strncmp(mode, "strict\r", 7), "%s", info);
    long long claims = info_num(info, "log_claims"), epoch_writes = info_num(info, "log_epoch_writes");
    cr_assert(claims >= 0 && epoch_writes >= 0 && info_num(info, "log_epoch") > 0, "%s", info);
    cr_assert(single_write || claims == 0, "claims without single_write: %s", info);
    if (stored) {
        cr_assert(info_num(info, "log_durable_marker") > 0, "%s", info);
        cr_assert(claims + epoch_writes > 0, "stored writes answered, no marker written: %s", info);
        cr_assert(info_num(info, "log_fsyncs") > 0, "%s", info);
    }
}

static void restart_keeps_everything(const char *mode)
{
    start_mode(mode, "0");
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "SET a 1"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "SET gone x"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "FLUSHALL"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "MSET a 2 b 3"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "INCRBY b 10"), ":13");
    cr_assert_str_eq(kvc_cmd(c, "SET t v EX 1000"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "SET d x"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "DEL d"), ":1");
    cr_assert_str_eq(kvc_cmd(c, "SET p v EX 1000"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "PERSIST p"), ":1");
    info_tells_how_writes_became_durable(c, !strcmp(mode, "stored"));
    kvc_close(c);
    kvs_stop(&srv, false);
    start_mode(mode, "0");
    c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "MGET a b t d gone p"), "*6[$2,$13,$v,$nil,$nil,$v]");
    const char *ttl = kvc_cmd(c, "TTL t");
    cr_assert(!strcmp(ttl, ":1000") || !strcmp(ttl, ":999"), "TTL t after the restart: %s", ttl);
    cr_assert_str_eq(kvc_cmd(c, "TTL p"), ":-1");
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), ":4");
    kvc_close(c);
    kvs_stop(&srv, false);
}

Test(kv_durable, stored_restart_keeps_every_write, .init = paths, .fini = cleanup, .timeout = 300)
{
    restart_keeps_everything("stored");
}

/* stored with a log channel per worker (urt-kv's default is one): the
 * other worker's batches are committed on their own channel */
Test(kv_durable, stored_restart_keeps_every_write_channel_per_worker, .init = paths, .fini = cleanup, .timeout = 300)
{
    log_channels = "0";
    restart_keeps_everything("stored");
    log_channels = "-1";
}

/* Workers of a start without --workers, from INFO. */
static long long default_workers(const char *mode, const char *channels, const char *env_workers)
{
    srv.workers = "";
    log_channels = channels;
    if (env_workers)
        setenv("URT_WORKERS", env_workers, 1);
    start_mode(mode, "0");
    unsetenv("URT_WORKERS");
    struct kvc *c = kvc_open(&srv, false);
    long long n = info_num(kvc_cmd(c, "INFO urt"), "workers");
    cr_assert_str_eq(kvc_cmd(c, "SET k v"), "+OK");
    kvc_close(c);
    kvs_stop(&srv, false);
    srv.workers = NULL;
    log_channels = "-1";
    return n;
}

/* stored with one log channel runs one worker unless told otherwise (every
 * durable batch is committed on the channel's worker: a second one only adds
 * hops, tools/urt-kv/main.c); a channel per worker, available, URT_WORKERS or
 * --workers keep the runtime's count. */
Test(kv_durable, stored_with_one_channel_defaults_to_one_worker, .init = paths, .fini = cleanup, .timeout = 300)
{
    long long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(default_workers("stored", "-1", NULL), 1);
    cr_assert_eq(default_workers("stored", "1", NULL), 1);
    cr_assert_eq(default_workers("stored", "0", NULL), cpus);
    cr_assert_eq(default_workers("available", "-1", NULL), cpus);
    cr_assert_eq(default_workers("stored", "-1", "3"), 3);
    start_mode("stored", "0"); /* --workers 2 (kvs_start) */
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_eq(info_num(kvc_cmd(c, "INFO urt"), "workers"), 2);
    kvc_close(c);
    kvs_stop(&srv, false);
}

Test(kv_durable, available_restart_keeps_every_write, .init = paths, .fini = cleanup, .timeout = 300)
{
    restart_keeps_everything("available");
}

Test(kv_durable, an_expiry_survives_a_restart, .init = paths, .fini = cleanup, .timeout = 300)
{
    start_mode("stored", "0");
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "SET e v PX 1500"), "+OK");
    kvc_close(c);
    kvs_stop(&srv, true);
    start_mode("stored", "0");
    c = kvc_open(&srv, false);
    const char *pttl = kvc_cmd(c, "PTTL e");
    long ms = atol(pttl + 1);
    cr_assert(pttl[0] == ':' && ms > 0 && ms <= 1500, "PTTL after restart: %s", pttl);
    cr_assert(WAIT_UNTIL(!strcmp(kvc_cmd(c, "DBSIZE"), ":0"), 5000), "the key did not expire after the restart");
    kvc_close(c);
    kvs_stop(&srv, false);
}

/* ---- kill -9 under load ------------------------------------------------------------------ */

struct loader {
    int id, cycle;
    long acked;           /* the last sequence number answered +OK (-1: none) */
    bool value_bytes;     /* bigger values (checkpoint test) */
};

static void value_of(const struct loader *l, long seq, char *v, size_t cap)
{
    int n = snprintf(v, cap, "v%d.%d.%ld", l->cycle, l->id, seq);
    if (l->value_bytes)
        for (; n < 1000 && (size_t)n + 1 < cap; n++)
            v[n] = (char)('a' + (seq + n) % 26);
    v[n] = 0;
}

/* Writes keys k<cycle>.<id>.<seq> with 8 requests in flight until the
 * connection dies; acked = the last answered in order. */
static void *loader_main(void *arg)
{
    struct loader *l = arg;
    l->acked = -1;
    struct kvc *c = calloc(1, sizeof(*c));
    c->fd = kvc_connect_fd(&srv, false);
    if (c->fd < 0) {
        free(c);
        return NULL;
    }
    long sent = 0;
    for (;;) {
        while (sent - l->acked <= 8) {
            char k[64], v[1100], req[1300];
            snprintf(k, sizeof(k), "k%d.%d.%ld", l->cycle, l->id, sent);
            value_of(l, sent, v, sizeof(v));
            int n = snprintf(req, sizeof(req), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(k), k,
                             strlen(v), v);
            if (kvc_send(c, req, (size_t)n))
                goto out;
            sent++;
        }
        char line[64];
        if (kvc_line(c, line, sizeof(line)) || strcmp(line, "+OK"))
            goto out;
        l->acked++;
    }
out:
    kvc_close(c);
    return NULL;
}

/* GETs every key each loader had answered, pipelined 256 at a time, and
 * compares each value. */
static void check_acked(const struct loader *ls, int n, long *checked)
{
    struct kvc *c = kvc_open(&srv, false);
    static char req[256 * 64];
    for (int i = 0; i < n; i++)
        for (long first = 0; first <= ls[i].acked; first += 256) {
            long last = first + 255 < ls[i].acked ? first + 255 : ls[i].acked;
            size_t len = 0;
            for (long seq = first; seq <= last; seq++)
                len += (size_t)snprintf(req + len, sizeof(req) - len, "GET k%d.%d.%ld\r\n", ls[i].cycle, ls[i].id,
                                        seq);
            cr_assert_eq(kvc_send(c, req, len), 0);
            for (long seq = first; seq <= last; seq++) {
                char v[1100], want[1102];
                value_of(&ls[i], seq, v, sizeof(v));
                snprintf(want, sizeof(want), "$%s", v);
                const char *got = kvc_reply(c);
                cr_assert_str_eq(got, want,
                                 "cycle %d client %d: SET %ld was answered OK (of %ld) but is %.40s after kill -9",
                                 ls[i].cycle, i, seq, ls[i].acked, got);
                (*checked)++;
            }
        }
    kvc_close(c);
}

static void kill9_cycles(int cycles, uint64_t load_ms, const char *checkpoint_mb, bool big, long *acked_total,
                         long *checked)
{
    enum { CLIENTS = 4 };
    static struct loader all[16][CLIENTS];
    for (int cy = 0; cy < cycles; cy++) {
        start_mode("stored", checkpoint_mb);
        for (int p = 0; p < cy; p++) /* everything answered in earlier cycles survived every restart */
            check_acked(all[p], CLIENTS, checked);
        pthread_t th[CLIENTS];
        for (int i = 0; i < CLIENTS; i++) {
            all[cy][i] = (struct loader){.id = i, .cycle = cy, .value_bytes = big};
            pthread_create(&th[i], NULL, loader_main, &all[cy][i]);
        }
        sleep_us(load_ms * 1000);
        kvs_stop(&srv, true);
        for (int i = 0; i < CLIENTS; i++) {
            pthread_join(th[i], NULL);
            *acked_total += all[cy][i].acked + 1;
        }
    }
    start_mode("stored", checkpoint_mb);
    for (int p = 0; p < cycles; p++)
        check_acked(all[p], CLIENTS, checked);
}

Test(kv_durable, kill9_under_set_load_loses_no_answered_set, .init = paths, .fini = cleanup, .timeout = 300)
{
    long acked = 0, checked = 0;
    kill9_cycles(SCALE(4, 2), SCALE(700, 1500), "0", false, &acked, &checked);
    cr_assert_gt(acked, 0, "no SET was answered before the kills");
    fprintf(stderr, "kv_durable kill -9: %ld SETs answered OK over the cycles, %ld GETs checked after restarts\n",
            acked, checked);
    kvs_stop(&srv, false);
}

/* Channel files in the log directory: how many, and how many of a
 * generation older than the newest. */
static void channel_files(const char *path, long *all, long *older)
{
    DIR *d = opendir(path);
    unsigned long long newest = 0;
    *all = *older = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        unsigned long long gen;
        if (sscanf(e->d_name, "ch-%llx-", &gen) == 1 && gen > newest)
            newest = gen;
    }
    if (d)
        rewinddir(d);
    for (struct dirent *e; d && (e = readdir(d));) {
        unsigned long long gen;
        if (sscanf(e->d_name, "ch-%llx-", &gen) != 1)
            continue;
        (*all)++;
        *older += gen < newest;
    }
    if (d)
        closedir(d);
}

Test(kv_durable, checkpoints_bound_the_log_and_recover_with_the_snapshot, .init = paths, .fini = cleanup, .timeout = 300)
{
    setenv("URT_LOG_SEGMENT_KB", "512", 1); /* small segments: the checkpoints delete them */
    long acked = 0, checked = 0;
    kill9_cycles(2, SCALE(1500, 2500), "1", true, &acked, &checked);
    char snap[400], log[400];
    snprintf(snap, sizeof(snap), "%s/snapshot", srv.data);
    snprintf(log, sizeof(log), "%s/log", srv.data);
    long before, older_before;
    channel_files(log, &before, &older_before);
    /* 2 MB more: at least one checkpoint in this session, which deletes every
     * file of the earlier sessions (all their records are at or below it) */
    struct kvc *c = kvc_open(&srv, false);
    static char v[1000];
    memset(v, 'c', sizeof(v));
    for (int i = 0; i < 2000; i++) {
        char k[32];
        snprintf(k, sizeof(k), "more%d", i);
        const char *set[] = {"SET", k, v};
        size_t lens[] = {3, strlen(k), sizeof(v)};
        kvc_cmdv(c, 3, set, lens);
        cr_assert_str_eq(kvc_reply(c), "+OK");
    }
    cr_assert(WAIT_UNTIL(!strstr(kvc_cmd(c, "INFO persistence"), "checkpoints:0\r"), 20000),
              "no checkpoint after 2 MB of log: %s", kvc_cmd(c, "INFO persistence"));
    cr_assert_eq(access(snap, F_OK), 0, "no snapshot was written");
    long after, older_after;
    channel_files(log, &after, &older_after);
    fprintf(stderr,
            "kv_durable checkpoints: %ld SETs (1 KB) answered over 2 kill -9 cycles, %ld checked; channel files "
            "%ld (%ld of earlier sessions) before the checkpoint, %ld (%ld) after\n",
            acked, checked, before, older_before, after, older_after);
    cr_assert_eq(older_after, 0, "files of earlier sessions survived a checkpoint that covers them");
    cr_assert_eq(strncmp(kvc_cmd(c, "GET more1999"), "$cccc", 5), 0);
    kvc_close(c);
    kvs_stop(&srv, false);
}

/* Runs urt-kv on the data directory and expects it to refuse to start:
 * exit status 1 and `says` on its standard error. */
static void expect_refusal(const char *says)
{
    char port[16], cmd[1200];
    snprintf(port, sizeof(port), "%d", kv_free_port());
    snprintf(cmd, sizeof(cmd), "'%s' --port %s --workers 2 --dir '%s' --durability stored 2>'%s/refusal'", URT_KV,
             port, srv.data, srv.dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "urt-kv on a damaged snapshot: status %d", st);
    char path[400], text[2048] = "";
    snprintf(path, sizeof(path), "%s/refusal", srv.dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    text[n] = 0;
    if (f)
        fclose(f);
    cr_assert(strstr(text, says), "its stderr: %s", text);
}

Test(kv_durable, a_damaged_snapshot_is_refused, .init = paths, .fini = cleanup, .timeout = 300)
{
    start_mode("stored", "1");
    struct kvc *c = kvc_open(&srv, false);
    static char v[1000];
    memset(v, 's', sizeof(v));
    for (int i = 0; i < 1500; i++) { /* 1.5 MB of log: a checkpoint */
        char k[32];
        snprintf(k, sizeof(k), "s%d", i);
        const char *set[] = {"SET", k, v};
        size_t lens[] = {3, strlen(k), sizeof(v)};
        kvc_cmdv(c, 3, set, lens);
        cr_assert_str_eq(kvc_reply(c), "+OK");
    }
    cr_assert(WAIT_UNTIL(!strstr(kvc_cmd(c, "INFO persistence"), "checkpoints:0\r"), 20000), "no checkpoint");
    kvc_close(c);
    kvs_stop(&srv, false);
    char snap[400];
    snprintf(snap, sizeof(snap), "%s/snapshot", srv.data);
    FILE *f = fopen(snap, "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET); /* one byte in the middle of the entries */
    int ch = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    expect_refusal("is damaged");
    /* put it back: the server starts and has every key */
    f = fopen(snap, "r+b");
    fseek(f, size / 2, SEEK_SET);
    fputc(ch, f);
    fclose(f);
    start_mode("stored", "1");
    c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "DBSIZE"), ":1500");
    kvc_close(c);
    kvs_stop(&srv, false);
}

/* A full disk: the commit that cannot be written is never answered OK (its
 * connection is closed), every later write gets MISCONF, reads go on. On a
 * 12 MB tmpfs (root: skipped with the reason otherwise). */
Test(kv_durable, a_full_disk_refuses_writes_and_never_answers_ok, .init = paths, .fini = cleanup, .timeout = 300)
{
    char mnt[280];
    snprintf(mnt, sizeof(mnt), "%.250s/full", srv.dir);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=12m"))
        cr_skip_test("cannot mount a tmpfs (%s): needs root", strerror(errno));
    snprintf(mounted, sizeof(mounted), "%s", mnt);
    snprintf(srv.data, sizeof(srv.data), "%s/data", mnt);
    start_mode("stored", "0");
    struct kvc *c = kvc_open(&srv, false);
    static char v[1000000];
    memset(v, 'f', sizeof(v));
    int ok = 0;
    const char *r = "";
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof(k), "f%d", i);
        const char *set[] = {"SET", k, v};
        size_t lens[] = {3, strlen(k), sizeof(v)};
        kvc_cmdv(c, 3, set, lens);
        r = kvc_reply(c);
        if (strcmp(r, "+OK"))
            break;
        ok++;
    }
    cr_assert_str_eq(r, "(closed)", "after %d SETs of 1 MB on 12 MB", ok);
    cr_assert_gt(ok, 0);
    kvc_close(c);
    c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "SET small v"),
                     "-MISCONF Errors writing to the log: urt-kv refuses writes (see its standard error)");
    cr_assert_eq(strncmp(kvc_cmd(c, "GET f0"), "$ffff", 5), 0);
    cr_assert(strstr(kvc_cmd(c, "INFO persistence"), "log_failed:1"));
    kvc_close(c);
    kvs_stop(&srv, false); /* a clean stop with a failed log still ends */
}
