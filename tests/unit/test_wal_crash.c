/*
 * tests/unit/test_wal_crash.c — kill -9 at a random moment never loses a
 * commit acknowledged `stored` (SPEC C14).
 *
 * Each cycle forks a child that opens the log directory (running recovery of
 * what the earlier cycles left), runs CLIENTS client tasks committing with
 * URT_COMMIT_STORED in a closed loop, and writes every acknowledged tx id to a
 * pipe from the commit callback (8-byte writes: atomic on a pipe). The parent
 * SIGKILLs the child after a random delay (odd cycles: 0..KILL_MAX_US after
 * the fork, so kills land during start-up or recovery too; even cycles:
 * 0..KILL_MAX_US/2 after the first acknowledgement), reads every id the child reported, then
 * recovers the directory and checks:
 *   - every acknowledged id is replayed;
 *   - no id is replayed twice (over all cycles: ids are unique);
 *   - every replayed payload is the one committed for its id (so no record
 *     that fails its checksum, or a stale one, slips through), in epoch order.
 * CRASH_CYCLES cycles (200 here: the CI count; the stress suite includes this
 * file with more). Every cycle is short (tens of ms).
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#ifndef CRASH_CYCLES
#define CRASH_CYCLES 200
#endif
#define CLIENTS 4
#define KILL_MAX_US 30000

static void payload_fill(uint8_t *p, uint32_t len, uint64_t id)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static uint32_t payload_len(uint64_t id)
{
    return 16 + (uint32_t)(id % 240);
}

/* ---- the child ---------------------------------------------------------------- */

struct client {
    struct urt_commit c;
    struct urt_task t;
    urt_runtime *rt;
    uint64_t base, seq;
    int fd;
    uint8_t rec[256];
};

static void client_issue(struct client *k);

static void client_cb(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct client *k = arg;
    if (status)
        _exit(4); /* no I/O errors expected here */
    uint64_t id = k->base + k->seq;
    if (write(k->fd, &id, sizeof(id)) != (ssize_t)sizeof(id))
        _exit(5);
    k->seq++;
    client_issue(k);
}

static void client_issue(struct client *k)
{
    uint64_t id = k->base + k->seq;
    payload_fill(k->rec, payload_len(id), id);
    if (urt_log_commit(k->rt, &k->c, id, k->rec, payload_len(id), URT_COMMIT_STORED, client_cb, k))
        _exit(6);
}

static enum urt_task_result client_start(struct urt_task *t, void *arg)
{
    (void)t;
    client_issue(arg);
    return URT_TASK_DONE;
}

static void child(const char *dir, uint64_t cycle, int fd)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.log_dir = dir;
    cfg.log_prealloc_kb = (cycle & 1) ? 64 : 0;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&cfg, &rt))
        _exit(3);
    static struct client k[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        k[i].rt = rt;
        k[i].base = (cycle << 32) | ((uint64_t)i << 24);
        k[i].fd = fd;
        urt_task_init(&k[i].t, client_start, &k[i]);
        if (urt_task_submit(rt, &k[i].t, 0))
            _exit(7);
    }
    for (;;)
        pause();
}

/* ---- the parent ---------------------------------------------------------------- */

struct ids {
    uint64_t *v;
    size_t n, cap;
    uint64_t bad, last_epoch;
};

static void ids_push(struct ids *s, uint64_t id)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        cr_assert_not_null(s->v);
    }
    s->v[s->n++] = id;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct ids *s = arg;
    uint8_t buf[256];
    if (r->epoch < s->last_epoch)
        s->bad++;
    s->last_epoch = r->epoch;
    if (r->len != payload_len(r->tx_id))
        s->bad++;
    else {
        payload_fill(buf, r->len, r->tx_id);
        if (memcmp(buf, r->payload, r->len))
            s->bad++;
    }
    ids_push(s, r->tx_id);
    return 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

Test(wal_crash, kill9_never_loses_a_stored_commit, .timeout = 600)
{
    const char *base = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/urt-wal-crash.XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(dir));
    unsigned seed = (unsigned)now_ns();
    uint64_t acked_total = 0, replayed_last = 0, cut_total = 0;
    int early_kills = 0;
    for (uint64_t cycle = 1; cycle <= CRASH_CYCLES; cycle++) {
        int p[2];
        cr_assert_eq(pipe(p), 0);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            close(p[0]);
            child(dir, cycle, p[1]);
        }
        close(p[1]);
        if (cycle % 2 == 0) {
            /* half the cycles: kill while commits flow (after the first ack) */
            struct pollfd pfd = {.fd = p[0], .events = POLLIN};
            poll(&pfd, 1, 5000);
            sleep_us((uint64_t)(rand_r(&seed) % (KILL_MAX_US / 2)));
        } else {
            sleep_us((uint64_t)(rand_r(&seed) % KILL_MAX_US)); /* anywhere, start-up included */
        }
        kill(pid, SIGKILL);
        struct ids acked = {0};
        uint64_t id;
        ssize_t n;
        while ((n = read(p[0], &id, sizeof(id))) == (ssize_t)sizeof(id))
            ids_push(&acked, id);
        cr_assert_eq(n, 0, "short read on the pipe");
        close(p[0]);
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "cycle %llu: the child exited by itself (status %d)",
                  (unsigned long long)cycle, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        if (acked.n == 0)
            early_kills++;
        acked_total += acked.n;

        struct ids rep = {0};
        struct urt_log_recover_ops ops = {.record = on_record};
        struct urt_log_recovery out;
        int rc = urt_log_recover(dir, 0, &ops, &rep, &out);
        cr_assert_eq(rc, 0, "cycle %llu: recovery: %s", (unsigned long long)cycle, urt_last_error());
        cr_assert_eq(rep.bad, 0, "cycle %llu: a replayed record is not what was committed", (unsigned long long)cycle);
        cut_total += out.cuts;
        if (rep.n)
            qsort(rep.v, rep.n, sizeof(*rep.v), cmp_u64);
        for (size_t i = 1; i < rep.n; i++)
            cr_assert_neq(rep.v[i], rep.v[i - 1], "cycle %llu: id %llx replayed twice", (unsigned long long)cycle,
                          (unsigned long long)rep.v[i]);
        for (size_t i = 0; i < acked.n; i++)
            cr_assert(rep.n && bsearch(&acked.v[i], rep.v, rep.n, sizeof(*rep.v), cmp_u64),
                               "cycle %llu: acknowledged id %llx lost", (unsigned long long)cycle,
                               (unsigned long long)acked.v[i]);
        cr_assert_geq(rep.n, replayed_last, "cycle %llu: recovery lost earlier records", (unsigned long long)cycle);
        replayed_last = rep.n;
        free(acked.v);
        free(rep.v);
    }
    cr_log_info("%d cycles: %llu acknowledged commits, %llu replayed at the end, %llu cuts, %d kills before any ack",
                CRASH_CYCLES, (unsigned long long)acked_total, (unsigned long long)replayed_last,
                (unsigned long long)cut_total, early_kills);
    cr_assert_gt(acked_total, 0, "no commit was ever acknowledged");
    remove_dir(dir);
}
