/*
 * tests/crash/crash_check.c — running the crash child, recovering, and
 * judging what recovery replayed (design and checks: crash_check.h).
 *
 * Everything here runs on the test's main thread (criterion assertions are
 * only used there). Memory: replays and acks are growable arrays owned by the
 * caller's structs; the history keeps one sorted key array.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash_check.h"
#include "helpers.h"

#ifndef CRASH_CHILD
#error "CRASH_CHILD (the path of the crash_child executable) must be defined by tests/meson.build"
#endif

#define CHILD_ACK_FD 100
#define FIRST_ACK_TIMEOUT_MS 30000

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void *grow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return v;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    v = realloc(v, c * elem);
    cr_assert_not_null(v, "out of memory growing to %zu elements", c);
    *cap = c;
    return v;
}

/* ---- acknowledgements -------------------------------------------------------------- */

void crash_acks_free(struct crash_acks *a)
{
    free(a->v);
    memset(a, 0, sizeof(*a));
}

static void acks_push(struct crash_acks *a, uint64_t id, uint32_t count)
{
    a->v = grow(a->v, &a->cap, a->n + 1, sizeof(*a->v));
    a->v[a->n++] = (struct crash_ack){.id = id, .count = count};
    if (crash_id_kind(id) == CRASH_KIND_TX)
        a->n_tx++;
    a->n_records += count;
}

/* The pipe's byte stream: 8-byte ids, 16 bytes (id, count) for transactions. */
struct ack_stream {
    uint8_t buf[4096];
    size_t have;
};

static void ack_stream_parse(struct ack_stream *s, struct crash_acks *a)
{
    size_t off = 0;
    while (s->have - off >= 8) {
        uint64_t id, count = 1;
        memcpy(&id, s->buf + off, 8);
        size_t need = crash_id_kind(id) == CRASH_KIND_TX ? 16 : 8;
        if (s->have - off < need)
            break;
        if (need == 16)
            memcpy(&count, s->buf + off + 8, 8);
        cr_assert(count >= 1 && count < 64, "ack of id %" PRIx64 " carries record count %" PRIu64, id, count);
        acks_push(a, id, (uint32_t)count);
        off += need;
    }
    memmove(s->buf, s->buf + off, s->have - off);
    s->have -= off;
}

/* Reads what is there (waiting at most timeout_ms); false at EOF. */
static bool ack_stream_read(int fd, struct ack_stream *s, struct crash_acks *a, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR)
        return true;
    cr_assert_geq(r, 0, "poll on the ack pipe: %s", strerror(errno));
    if (r == 0)
        return true;
    ssize_t n = read(fd, s->buf + s->have, sizeof(s->buf) - s->have);
    cr_assert_geq(n, 0, "read of the ack pipe: %s", strerror(errno));
    if (n == 0) {
        cr_assert_eq(s->have, 0, "the ack pipe ended inside a message (%zu bytes left)", s->have);
        return false;
    }
    s->have += (size_t)n;
    ack_stream_parse(s, a);
    return true;
}

/* ---- running the child ---------------------------------------------------------------- */

static pid_t child_spawn(const struct crash_child_opts *o, int ack_w)
{
    char cycle[32], fd[16], workers[16], prealloc[16];
    snprintf(cycle, sizeof(cycle), "%" PRIu64, o->cycle);
    snprintf(fd, sizeof(fd), "%d", CHILD_ACK_FD);
    snprintf(workers, sizeof(workers), "%u", o->workers);
    snprintf(prealloc, sizeof(prealloc), "%u", o->prealloc_kb);
    char *argv[] = {(char *)CRASH_CHILD, (char *)o->dir, cycle, fd, "--workers", workers, "--prealloc-kb", prealloc,
                    "--log-sync", (char *)(o->log_sync ? o->log_sync : "auto"), NULL};
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (dup2(ack_w, CHILD_ACK_FD) < 0)
            _exit(126);
        execv(CRASH_CHILD, argv);
        fprintf(stderr, "exec %s: %s\n", CRASH_CHILD, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Reads acks until the kill moment of the plan. */
static void wait_kill_moment(int fd, const struct crash_kill_plan *k, struct ack_stream *s, struct crash_acks *a)
{
    size_t before = a->n;
    bool open = true;
    if (k->after_ack) {
        uint64_t give_up = mono_us() + FIRST_ACK_TIMEOUT_MS * 1000ull;
        while (open && a->n == before && mono_us() < give_up)
            open = ack_stream_read(fd, s, a, 10);
    }
    uint64_t at = mono_us() + k->delay_us;
    for (uint64_t now = mono_us(); open && now < at; now = mono_us()) {
        int ms = (int)((at - now + 999) / 1000);
        open = ack_stream_read(fd, s, a, ms);
    }
}

bool crash_run(const struct crash_child_opts *o, const struct crash_kill_plan *k, struct crash_acks *acks)
{
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0, "pipe2: %s", strerror(errno));
    size_t before = acks->n;
    pid_t pid = child_spawn(o, p[1]);
    close(p[1]);
    struct ack_stream s = {.have = 0};
    wait_kill_moment(p[0], k, &s, acks);
    kill(pid, SIGKILL);
    while (ack_stream_read(p[0], &s, acks, 1000))
        ;
    close(p[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid, "waitpid: %s", strerror(errno));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "cycle %" PRIu64 ": crash_child ended by itself (%s %d; its stderr says why)", o->cycle,
              WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return acks->n > before;
}

/* ---- recovery -------------------------------------------------------------------------- */

static uint32_t fnv1a(const void *p, uint32_t n)
{
    const uint8_t *b = p;
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static void replay_note(struct crash_replay *rp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void replay_note(struct crash_replay *rp, const char *fmt, ...)
{
    if (rp->first_bad[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rp->first_bad, sizeof(rp->first_bad), fmt, ap);
    va_end(ap);
}

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct crash_replay *rp = arg;
    struct crash_payload_head h = {0};
    const char *why = NULL;
    uint32_t sum = fnv1a(r->payload, r->len); /* reads every byte: a mapping cut short faults here */
    if (!crash_payload_check(r->payload, r->len, r->tx_id, &h, &why)) {
        rp->bad_bytes++;
        replay_note(rp, "record tx_id %" PRIx64 " epoch %" PRIu64 " lsn %" PRIu64 " (%u bytes): %s", r->tx_id,
                    r->epoch, r->lsn, r->len, why);
        return 0;
    }
    if (r->epoch < rp->last_epoch) {
        rp->bad_order++;
        replay_note(rp, "record %" PRIx64 "#%u of epoch %" PRIu64 " replayed after epoch %" PRIu64, h.id, h.index,
                    r->epoch, rp->last_epoch);
    }
    rp->last_epoch = r->epoch;
    rp->v = grow(rp->v, &rp->cap, rp->n + 1, sizeof(*rp->v));
    rp->v[rp->n++] = (struct crash_rec){
        .id = h.id, .epoch = r->epoch, .index = h.index, .count = h.count, .len = r->len, .sum = sum};
    return 0;
}

static void on_cut(void *arg, const struct urt_log_cut *c)
{
    struct crash_replay *rp = arg;
    if (rp->n_cuts < CRASH_CUTS_KEPT) {
        struct crash_cut_seen *s = &rp->cuts[rp->n_cuts];
        snprintf(s->file, sizeof(s->file), "%s", c->file ? c->file : "?");
        snprintf(s->reason, sizeof(s->reason), "%s", c->reason ? c->reason : "?");
        s->offset = c->offset;
        s->bytes = c->bytes;
        s->corrupt = c->corrupt;
        s->middle = c->middle;
    }
    rp->n_cuts++;
}

int crash_recover(const char *dir, unsigned flags, struct crash_replay *rp)
{
    memset(rp, 0, sizeof(*rp));
    rp->flags = flags;
    struct urt_log_recover_ops ops = {.record = on_record, .cut = on_cut};
    rp->rc = urt_log_recover(dir, flags, &ops, rp, &rp->out);
    return rp->rc;
}

void crash_replay_free(struct crash_replay *rp)
{
    free(rp->v);
    rp->v = NULL;
    rp->n = rp->cap = 0;
}

static int rec_cmp(const void *a, const void *b)
{
    const struct crash_rec *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void crash_replay_sort(struct crash_replay *rp)
{
    if (rp->n)
        qsort(rp->v, rp->n, sizeof(*rp->v), rec_cmp);
}

/* ---- verdicts -------------------------------------------------------------------------- */

static void verdict_note(struct crash_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict_note(struct crash_verdict *v, const char *fmt, ...)
{
    if (v->first[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->first, sizeof(v->first), fmt, ap);
    va_end(ap);
}

/* Index of the first record of id in the sorted replay, or rp->n. */
static size_t find_id(const struct crash_replay *rp, uint64_t id)
{
    size_t lo = 0, hi = rp->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rp->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < rp->n && rp->v[lo].id == id ? lo : rp->n;
}

/* Groups of one id: duplicates, wholeness, one epoch, marker. */
static void verify_structure(const struct crash_replay *rp, struct crash_verdict *v)
{
    bool all = rp->flags & URT_LOG_RECOVER_ALL;
    for (size_t i = 0; i < rp->n;) {
        size_t j = i + 1;
        while (j < rp->n && rp->v[j].id == rp->v[i].id)
            j++;
        const struct crash_rec *g = &rp->v[i];
        bool whole = j - i == g->count;
        for (size_t k = i; k < j; k++) {
            if (k > i && rp->v[k].index == rp->v[k - 1].index) {
                v->duplicates++;
                verdict_note(v, "id %" PRIx64 " record %u replayed twice", g->id, rp->v[k].index);
                whole = false;
            }
            if (rp->v[k].index != k - i || rp->v[k].count != g->count || rp->v[k].epoch != g->epoch)
                whole = false;
            if (!all && rp->v[k].epoch > rp->out.replay_marker) {
                v->above_marker++;
                verdict_note(v, "id %" PRIx64 " record %u of epoch %" PRIu64 " replayed above the replay marker %" PRIu64,
                             g->id, rp->v[k].index, rp->v[k].epoch, rp->out.replay_marker);
            }
        }
        if (!whole) {
            v->partial_tx++;
            verdict_note(v, "id %" PRIx64 " replayed in part: %zu of its %u records (or not in one epoch)", g->id, j - i,
                         g->count);
        }
        i = j;
    }
}

static void verify_acks(const struct crash_replay *rp, const struct crash_acks *acks, struct crash_verdict *v)
{
    for (size_t i = 0; i < acks->n; i++) {
        const struct crash_ack *a = &acks->v[i];
        size_t at = find_id(rp, a->id);
        size_t n = 0;
        while (at + n < rp->n && rp->v[at + n].id == a->id)
            n++;
        v->checked_acks++;
        if (crash_id_kind(a->id) == CRASH_KIND_TX)
            v->checked_tx++;
        if (n != a->count) {
            v->lost_acks++;
            verdict_note(v, "acknowledged id %" PRIx64 " (cycle %" PRIu64 ", kind %u, %u records) replayed with %zu records",
                         a->id, crash_id_cycle(a->id), crash_id_kind(a->id), a->count, n);
        }
    }
}

void crash_verify(const struct crash_replay *rp, const struct crash_acks *acks, struct crash_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->bad_bytes = rp->bad_bytes;
    v->bad_order = rp->bad_order;
    if (rp->first_bad[0])
        snprintf(v->first, sizeof(v->first), "%s", rp->first_bad);
    verify_structure(rp, v);
    if (acks)
        verify_acks(rp, acks, v);
}

uint64_t crash_verdict_problems(const struct crash_verdict *v)
{
    return v->bad_bytes + v->bad_order + v->above_marker + v->duplicates + v->partial_tx + v->lost_acks;
}

void crash_assert_verdict(const char *ctx, const struct crash_verdict *v)
{
    cr_assert_eq(crash_verdict_problems(v), 0,
                 "%s: %" PRIu64 " acknowledged ids lost, %" PRIu64 " partial ids, %" PRIu64 " duplicates, %" PRIu64
                 " bad payloads, %" PRIu64 " out of epoch order, %" PRIu64 " above the replay marker; first: %s",
                 ctx, v->lost_acks, v->partial_tx, v->duplicates, v->bad_bytes, v->bad_order, v->above_marker,
                 v->first);
}

uint64_t crash_replay_missing(const struct crash_replay *a, const struct crash_replay *b, char *first, size_t len)
{
    uint64_t missing = 0;
    size_t j = 0;
    if (len)
        first[0] = 0;
    for (size_t i = 0; i < a->n; i++) {
        while (j < b->n && rec_cmp(&b->v[j], &a->v[i]) < 0)
            j++;
        bool same = j < b->n && rec_cmp(&b->v[j], &a->v[i]) == 0 && b->v[j].sum == a->v[i].sum &&
                    b->v[j].epoch == a->v[i].epoch;
        if (!same) {
            if (!missing && len)
                snprintf(first, len, "id %" PRIx64 " record %u (epoch %" PRIu64 ") %s", a->v[i].id, a->v[i].index,
                         a->v[i].epoch, j < b->n && rec_cmp(&b->v[j], &a->v[i]) == 0 ? "changed" : "missing");
            missing++;
        }
    }
    return missing;
}

/* ---- history ------------------------------------------------------------------------- */

uint64_t crash_history_advance(struct crash_history *h, const struct crash_replay *rp, char *first, size_t len)
{
    uint64_t missing = 0;
    size_t j = 0;
    if (len)
        first[0] = 0;
    for (size_t i = 0; i < h->n; i++) {
        const struct crash_key *k = &h->v[i];
        while (j < rp->n && (rp->v[j].id < k->id || (rp->v[j].id == k->id && rp->v[j].index < k->index)))
            j++;
        if (j < rp->n && rp->v[j].id == k->id && rp->v[j].index == k->index && rp->v[j].sum == k->sum)
            continue;
        if (!missing && len)
            snprintf(first, len, "id %" PRIx64 " record %u (cycle %" PRIu64 ") replayed before, not now", k->id,
                     k->index, crash_id_cycle(k->id));
        missing++;
    }
    free(h->v);
    h->v = rp->n ? malloc(rp->n * sizeof(*h->v)) : NULL;
    cr_assert(rp->n == 0 || h->v, "out of memory");
    for (size_t i = 0; i < rp->n; i++)
        h->v[i] = (struct crash_key){.id = rp->v[i].id, .index = rp->v[i].index, .sum = rp->v[i].sum};
    h->n = rp->n;
    return missing;
}

void crash_history_free(struct crash_history *h)
{
    free(h->v);
    h->v = NULL;
    h->n = 0;
}

/* ---- one cycle's checks --------------------------------------------------------------- */

/* Creates a runtime on dir and destroys it (drain): what any restart does. */
static void restart_runtime(const char *dir, const struct urt_config *rt_cfg)
{
    struct urt_config cfg = *rt_cfg;
    cfg.log_dir = dir;
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(&cfg, &rt);
    if (err == -ENOSYS || err == -EPERM)
        cr_skip_test("io_uring unavailable (%s): %s", strerror(-err), urt_last_error());
    cr_assert_eq(err, 0, "runtime on the recovered directory %s: %d (%s): %s", dir, err, strerror(-err),
                 urt_last_error());
    int r = urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    cr_assert_eq(r, 0, "destroy (drain) of the restarted runtime: %d (%s)", r, urt_last_error());
}

/* Markers and records of b against a (the first real run); 0 when equal. */
static uint64_t replay_mismatch(const struct crash_replay *a, const struct crash_replay *b, const char *bn, char *first,
                                size_t len)
{
    if (b->out.durable_marker != a->out.durable_marker || b->out.replay_marker != a->out.replay_marker) {
        snprintf(first, len,
                 "the %s reports durable marker %" PRIu64 " and replay marker %" PRIu64 ", the first recovery %" PRIu64
                 " and %" PRIu64,
                 bn, b->out.durable_marker, b->out.replay_marker, a->out.durable_marker, a->out.replay_marker);
        return 1;
    }
    char why[256];
    uint64_t n = crash_replay_missing(a, b, why, sizeof(why));
    n += crash_replay_missing(b, a, n ? why + strlen(why) : why, n ? sizeof(why) - strlen(why) : sizeof(why));
    if (n)
        snprintf(first, len, "the %s replays differently from the first recovery: %.256s", bn, why);
    return n;
}

/* The dry run before the first recovery and a repeat right after it. */
static void dry_and_repeat(const char *dir, const struct crash_replay *dry, const struct crash_replay *first,
                           struct crash_cycle_result *res)
{
    struct crash_replay again;
    int rc = crash_recover(dir, 0, &again);
    cr_assert_eq(rc, 0, "repeated recovery of %s: %d: %s", dir, rc, urt_last_error());
    crash_replay_sort(&again);
    res->dry_mismatch = replay_mismatch(first, dry, "dry run (before it)", res->dry_first, sizeof(res->dry_first));
    res->repeat_mismatch =
        replay_mismatch(first, &again, "recovery repeated at once", res->repeat_first, sizeof(res->repeat_first));
    crash_replay_free(&again);
}

void crash_cycle_check(const char *dir, const struct crash_acks *acks, struct crash_history *hist,
                       const struct urt_config *rt_cfg, struct crash_cycle_result *res)
{
    memset(res, 0, sizeof(*res));
    struct crash_replay dry, first, second;
    int rc = crash_recover(dir, URT_LOG_RECOVER_DRY_RUN, &dry);
    cr_assert_eq(rc, 0, "dry-run recovery of %s: %d (%s): %s", dir, rc, strerror(rc < 0 ? -rc : 0), urt_last_error());
    crash_replay_sort(&dry);
    rc = crash_recover(dir, 0, &first);
    cr_assert_eq(rc, 0, "first recovery of %s: %d (%s): %s", dir, rc, strerror(rc < 0 ? -rc : 0), urt_last_error());
    crash_replay_sort(&first);
    crash_verify(&first, acks, &res->verdict);
    res->durable1 = first.out.durable_marker;
    res->replayed = first.n;
    res->cuts = first.n_cuts;
    dry_and_repeat(dir, &dry, &first, res);
    crash_replay_free(&dry);

    restart_runtime(dir, rt_cfg);

    rc = crash_recover(dir, 0, &second);
    cr_assert_eq(rc, 0, "second recovery of %s: %d (%s): %s", dir, rc, strerror(rc < 0 ? -rc : 0), urt_last_error());
    crash_replay_sort(&second);
    res->durable2 = second.out.durable_marker;
    res->second_missing = crash_replay_missing(&first, &second, res->second_first, sizeof(res->second_first));
    char extra[256];
    res->second_extra = crash_replay_missing(&second, &first, extra, sizeof(extra));
    if (!res->second_missing && res->second_extra)
        snprintf(res->second_first, sizeof(res->second_first), "second recovery replays more: %.256s", extra);

    res->history_missing = crash_history_advance(hist, &first, res->history_first, sizeof(res->history_first));
    crash_replay_free(&first);
    crash_replay_free(&second);
}

void crash_assert_cycle(const char *ctx, const struct crash_cycle_result *res)
{
    crash_assert_verdict(ctx, &res->verdict);
    cr_assert_eq(res->dry_mismatch, 0, "%s: %s", ctx, res->dry_first);
    cr_assert_eq(res->repeat_mismatch, 0, "%s: %s", ctx, res->repeat_first);
    cr_assert_geq(res->durable2, res->durable1,
                  "%s: the durable marker went down across a restart: %" PRIu64 " after recovery, %" PRIu64
                  " after a runtime started and stopped on the directory",
                  ctx, res->durable1, res->durable2);
    cr_assert(res->second_missing == 0 && res->second_extra == 0,
              "%s: the second recovery (after a runtime started and stopped) replays %" PRIu64
              " records of the first differently or not at all, and %" PRIu64 " it did not; first: %s",
              ctx, res->second_missing, res->second_extra, res->second_first);
    cr_assert_eq(res->history_missing, 0, "%s: %" PRIu64 " records replayed by earlier cycles are gone; first: %s",
                 ctx, res->history_missing, res->history_first);
}

/* ---- small utilities ------------------------------------------------------------------- */

char *crash_tmpdir(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    char *p = malloc(4096);
    cr_assert_not_null(p);
    snprintf(p, 4096, "%s/%s.XXXXXX", base && *base ? base : "/tmp", prefix);
    cr_assert_not_null(mkdtemp(p), "mkdtemp %s: %s", p, strerror(errno));
    return p;
}

void crash_remove_tree(const char *dir)
{
    test_remove_tree_at(dir);
}

int crash_sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
