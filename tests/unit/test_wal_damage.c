/*
 * tests/unit/test_wal_damage.c — seeded damage to a log directory: recovery
 * keeps the promise of issue 10 point 3 and never crashes (SPEC C14).
 *
 * Base logs: a runtime (3 workers) commits TXS transactions of 3 records each
 * with URT_COMMIT_STORED (payloads: tests/crash/crash_payload.h) in waves of
 * WAVE (each wave answered before the next: the log spans many epochs), every
 * callback is awaited (status 0), the runtime is destroyed and the directory
 * recovered once. Two bases: log_prealloc_kb 0 (plain appends) and 4096
 * (preallocated channels); seeds alternate between them. Every record's
 * place (channel, offset, size, epoch) is read back with wal_scan, so each
 * damage knows which records it destroyed.
 *
 * Damage, on a copy, one per seed (SEEDS fixed seeds; the seed and the damage
 * are named in every failure; URT_DAMAGE_SEED=n runs one). The seed fixes
 * the damage relative to the base: which channel, which record or offset.
 * The base itself is written by a runtime, so which records land where (and
 * in which epoch) varies from run to run; a failure therefore leaves its
 * damaged copy (recovered only by the last step, RECOVER_ALL) and the base
 * on disk, named in the
 * message, for tools/urt-wal and for rerunning recovery by hand:
 *   truncate    a channel at a random offset;
 *   zero_page   a random 4 KiB page holding records;
 *   flip_header a byte of a random record's header (even seeds: the epoch
 *               field's high byte; odd: any header byte);
 *   flip_payload a byte of a random record's payload.
 * The damage is "in the middle" when an intact record follows it in its
 * channel; otherwise it is a tail, indistinguishable from an unfinished write
 * at a crash: the records it touched count as never written.
 *
 * The promise checked, with L = urt_log_recovery.replay_marker:
 *   - every replayed payload is what was written (bytes, id, index);
 *   - a transaction is replayed whole (its 3 records) or not at all — but for
 *     the one transaction a tail damage cuts through (not detectable: no
 *     record says how many records its transaction has), counted and printed;
 *   - replay is in epoch order, and it is a prefix: every written record of
 *     an epoch <= L is replayed, none of an epoch > L;
 *   - middle damage lowers L no further than it must: L >= g - 1, g the
 *     epoch of the last intact record before the damage in that channel;
 *   - middle damage is reported through ops->cut on that channel, at or
 *     before the damage, with corrupt = true and middle = true, and a reason
 *     that is not "not durable";
 *   - a second recovery reports the same markers, replays the same records
 *     and cuts nothing;
 *   - URT_LOG_RECOVER_ALL (no dry run) on another copy of the damaged
 *     directory, reading every payload byte, returns 0 and does not crash
 *     (run in a child process: a SIGBUS names the seed instead of killing
 *     the test).
 * And: the epoch file zeroed (nothing durable): URT_LOG_RECOVER_ALL replays
 * every valid record, reading every byte, without crashing; a normal
 * recovery then replays nothing.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "crash/crash_check.h"
#include "tx/wal_format.h"

#define TXS 500
#define TX_RECORDS 3
#define WAVE 10 /* transactions committed together; the next wave waits: many epochs */
#define SEEDS 50
#define BASE_WORKERS 3
#define MAX_CHANNELS 16

/* ---- the base logs -------------------------------------------------------------- */

struct rec_place {
    uint64_t off, size, epoch, id;
    uint32_t index, len;
};

struct channel {
    char name[64];
    uint64_t size;
    struct rec_place *recs;   /* commit records, in file order */
    size_t n;
    uint64_t header_epoch;    /* start epoch of the channel's generation */
};

struct base {
    char *dir;
    uint32_t prealloc_kb;
    struct channel ch[MAX_CHANNELS];
    int n_ch;
    struct crash_replay written; /* the base's full replay, sorted */
};

static _Atomic int commits_done, commits_failed;

static void tx_committed(urt_tx *tx, int status, void *arg)
{
    (void)tx, (void)arg;
    if (status)
        atomic_fetch_add(&commits_failed, 1);
    atomic_fetch_add(&commits_done, 1);
}

static void commit_transactions(urt_runtime *rt)
{
    atomic_store(&commits_done, 0);
    atomic_store(&commits_failed, 0);
    uint8_t rec[CRASH_PAYLOAD_MAX];
    for (uint64_t i = 0; i < TXS; i++) {
        uint64_t id = crash_id(1, CRASH_KIND_TX, 0, i);
        struct urt_tx_options opt;
        urt_tx_options_init(&opt);
        opt.id = id;
        urt_tx *tx;
        cr_assert_eq(urt_tx_begin(rt, &opt, &tx), 0, "urt_tx_begin: %s", urt_last_error());
        for (uint32_t r = 0; r < TX_RECORDS; r++) {
            uint32_t len = crash_payload_fill(rec, id, r, TX_RECORDS);
            cr_assert_eq(urt_tx_log(tx, rec, len), 0, "urt_tx_log: %s", urt_last_error());
        }
        cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_STORED, tx_committed, NULL), 0, "urt_tx_commit: %s",
                     urt_last_error());
        urt_tx_release(tx);
        if ((i + 1) % WAVE == 0)
            cr_assert(WAIT_UNTIL(atomic_load(&commits_done) == (int)i + 1, 60000), "wave ending at %" PRIu64
                      " not answered: %d of %d", i, atomic_load(&commits_done), (int)i + 1);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&commits_done) == TXS, 60000), "only %d of %d commits answered",
              atomic_load(&commits_done), TXS);
    cr_assert_eq(atomic_load(&commits_failed), 0, "%d commits failed", atomic_load(&commits_failed));
}

static uint8_t *read_file(const char *path, uint64_t *size)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    uint8_t *b = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(b);
    cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size, "read %s", path);
    close(fd);
    *size = (uint64_t)st.st_size;
    return b;
}

struct scan_ctx {
    struct channel *ch;
};

static int place_record(void *arg, const struct wal_rec *r)
{
    struct channel *ch = ((struct scan_ctx *)arg)->ch;
    if (r->type != WAL_REC_COMMIT)
        return 0;
    struct crash_payload_head h;
    const char *why;
    cr_assert(crash_payload_check(r->payload, r->len, r->tx_id, &h, &why), "base log record at %" PRIu64 " of %s: %s",
              r->off, ch->name, why);
    ch->recs = realloc(ch->recs, (ch->n + 1) * sizeof(*ch->recs));
    cr_assert_not_null(ch->recs);
    ch->recs[ch->n++] = (struct rec_place){
        .off = r->off, .size = wal_rec_size(r->len), .epoch = r->epoch, .id = h.id, .index = h.index, .len = r->len};
    return 0;
}

/* Where every record of the base lies. */
static void map_channels(struct base *b)
{
    DIR *d = opendir(b->dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ch-", 3))
            continue;
        cr_assert_lt(b->n_ch, MAX_CHANNELS);
        struct channel *ch = &b->ch[b->n_ch++];
        memset(ch, 0, sizeof(*ch));
        snprintf(ch->name, sizeof(ch->name), "%.60s", e->d_name);
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", b->dir, ch->name);
        uint8_t *buf = read_file(path, &ch->size);
        struct wal_scan_result r;
        struct scan_ctx sc = {.ch = ch};
        wal_scan(buf, ch->size, place_record, &sc, &r);
        cr_assert_eq(r.end, WAL_SCAN_END_CLEAN, "base channel %s: scan ended on %s", ch->name,
                     r.reason ? r.reason : "?");
        ch->header_epoch = r.header.start_epoch;
        free(buf);
    }
    closedir(d);
}

/* log_sync NULL: auto (prealloc 0: strict; 4096: single_write on ext4/xfs). */
static void build_base(struct base *b, uint32_t prealloc_kb, const char *log_sync)
{
    memset(b, 0, sizeof(*b));
    b->dir = crash_tmpdir("urt-damage-base");
    b->prealloc_kb = prealloc_kb;
    struct urt_config cfg;
    test_config(&cfg, BASE_WORKERS);
    cfg.log_dir = b->dir;
    cfg.log_prealloc_kb = prealloc_kb;
    if (log_sync)
        cr_assert_eq(urt_config_set(&cfg, "log_sync", log_sync), 0, "%s", urt_last_error());
    urt_runtime *rt = rt_create_or_skip(&cfg);
    commit_transactions(rt);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(crash_recover(b->dir, 0, &b->written), 0, "recovery of the base: %s", urt_last_error());
    crash_replay_sort(&b->written);
    struct crash_verdict v;
    crash_verify(&b->written, NULL, &v);
    crash_assert_verdict("base log", &v);
    cr_assert_eq(b->written.n, (size_t)TXS * TX_RECORDS, "the base replays %zu records, %d were committed",
                 b->written.n, TXS * TX_RECORDS);
    map_channels(b);
}

static void free_base(struct base *b)
{
    for (int i = 0; i < b->n_ch; i++)
        free(b->ch[i].recs);
    crash_replay_free(&b->written);
    crash_remove_tree(b->dir);
    free(b->dir);
}

/* ---- copies and damage ---------------------------------------------------------------- */

/* Copies every file of from into to (zero blocks become holes). */
static void copy_dir(const char *from, const char *to)
{
    DIR *d = opendir(from);
    cr_assert_not_null(d);
    struct dirent *e;
    static uint8_t buf[1 << 16];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char a[4200], b[4200];
        snprintf(a, sizeof(a), "%s/%s", from, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", to, e->d_name);
        int fi = open(a, O_RDONLY), fo = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert(fi >= 0 && fo >= 0, "copy %s -> %s: %s", a, b, strerror(errno));
        off_t off = 0;
        ssize_t n;
        while ((n = pread(fi, buf, sizeof(buf), off)) > 0) {
            bool zero = buf[0] == 0 && memcmp(buf, buf + 1, (size_t)n - 1) == 0;
            if (!zero)
                cr_assert_eq(pwrite(fo, buf, (size_t)n, off), n, "write %s", b);
            off += n;
        }
        cr_assert_eq(ftruncate(fo, off), 0);
        close(fi);
        close(fo);
    }
    closedir(d);
}

enum damage_kind { DAMAGE_TRUNCATE, DAMAGE_ZERO_PAGE, DAMAGE_FLIP_HEADER, DAMAGE_FLIP_PAYLOAD };
static const char *const damage_names[] = {"truncate", "zero_page", "flip_header", "flip_payload"};

struct damage {
    enum damage_kind kind;
    unsigned seed;
    const struct base *base;
    const struct channel *ch;
    uint64_t from, to;        /* damaged byte range [from, to) of ch */
    bool any;                 /* some record was touched */
    bool middle;              /* an intact record follows the damage */
    uint64_t last_good_epoch; /* epoch of the last intact record before it (or the generation's start) */
    uint64_t split_id;        /* tail damage: the transaction it cuts through (0: none) */
    char ctx[512];
};

static const struct channel *pick_channel(const struct base *b, uint64_t *rng)
{
    const struct channel *with[MAX_CHANNELS];
    int n = 0;
    for (int i = 0; i < b->n_ch; i++)
        if (b->ch[i].n > 0)
            with[n++] = &b->ch[i];
    cr_assert_gt(n, 0, "no channel of the base holds records");
    return with[rng_next(rng) % (uint64_t)n];
}

/* Chooses what to damage (the range) for the seed. */
static void plan_damage(struct damage *d, uint64_t *rng)
{
    const struct channel *ch = d->ch;
    const struct rec_place *r = &ch->recs[rng_next(rng) % ch->n];
    uint64_t data_end = ch->recs[ch->n - 1].off + ch->recs[ch->n - 1].size;
    switch (d->kind) {
    case DAMAGE_TRUNCATE:
        d->from = rng_next(rng) % ch->size;
        d->to = ch->size;
        break;
    case DAMAGE_ZERO_PAGE:
        d->from = (rng_next(rng) % data_end) & ~(uint64_t)4095;
        d->to = d->from + 4096;
        break;
    case DAMAGE_FLIP_HEADER:
        d->from = r->off + (d->seed % 2 == 0 ? 15 : rng_next(rng) % WAL_HDR_SIZE);
        d->to = d->from + 1;
        break;
    case DAMAGE_FLIP_PAYLOAD:
        d->from = r->off + WAL_HDR_SIZE + rng_next(rng) % r->len;
        d->to = d->from + 1;
        break;
    }
}

/* What the damage destroyed, from the record places: middle or tail. */
static void classify_damage(struct damage *d)
{
    const struct channel *ch = d->ch;
    d->last_good_epoch = ch->header_epoch;
    bool touched_before = false;
    for (size_t i = 0; i < ch->n; i++) {
        const struct rec_place *r = &ch->recs[i];
        if (r->off + r->size <= d->from) {
            d->last_good_epoch = r->epoch;
        } else if (r->off >= d->to) {
            d->middle = d->any;
        } else {
            if (!d->any && i > 0 && ch->recs[i - 1].id == r->id && ch->recs[i - 1].off + ch->recs[i - 1].size <= d->from)
                touched_before = true, d->split_id = r->id;
            d->any = true;
        }
    }
    if (d->middle || !touched_before)
        d->split_id = 0;
}

static void apply_damage(const char *dir, const struct damage *d)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, d->ch->name);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s: open %s: %s", d->ctx, path, strerror(errno));
    if (d->kind == DAMAGE_TRUNCATE) {
        cr_assert_eq(ftruncate(fd, (off_t)d->from), 0);
    } else if (d->kind == DAMAGE_ZERO_PAGE) {
        static const uint8_t zeros[4096];
        cr_assert_eq(pwrite(fd, zeros, sizeof(zeros), (off_t)d->from), (ssize_t)sizeof(zeros));
    } else {
        uint8_t b;
        cr_assert_eq(pread(fd, &b, 1, (off_t)d->from), 1);
        b ^= d->kind == DAMAGE_FLIP_HEADER && d->seed % 2 == 0 ? 0x40 : (uint8_t)(1u << (d->seed % 8));
        cr_assert_eq(pwrite(fd, &b, 1, (off_t)d->from), 1);
    }
    close(fd);
}

/* ---- the checks ------------------------------------------------------------------------- */

/* True when record (id, index) was destroyed by a tail damage (never written). */
/* Tail damage destroys the records it touches, and with them their whole
 * transaction: recovery replays a commit only with its last record (format
 * 2, WAL_REC_F_END), so the intact first records of a transaction whose end
 * was destroyed go too. */
static bool destroyed_at_tail(const struct damage *d, uint64_t id, uint32_t index)
{
    (void)index;
    if (d->middle || !d->any)
        return false;
    for (size_t i = 0; i < d->ch->n; i++) {
        const struct rec_place *r = &d->ch->recs[i];
        if (r->id == id && r->off + r->size > d->from)
            return true;
    }
    return false;
}

static bool replayed(const struct crash_replay *rp, uint64_t id, uint32_t index)
{
    size_t lo = 0, hi = rp->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rp->v[mid].id < id || (rp->v[mid].id == id && rp->v[mid].index < index))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < rp->n && rp->v[lo].id == id && rp->v[lo].index == index;
}

/* Bytes, order, duplicates, marker, whole transactions (the one a tail cut splits too). */
static uint64_t check_structure(const struct damage *d, const struct crash_replay *rp, uint64_t *split_partial)
{
    struct crash_verdict v;
    crash_verify(rp, NULL, &v);
    *split_partial = 0; /* a transaction split by tail damage is dropped whole (WAL_REC_F_END): no exception */
    cr_assert_eq(crash_verdict_problems(&v), 0,
                 "%s: %" PRIu64 " partial transactions, %" PRIu64 " duplicates, %" PRIu64 " bad payloads, %" PRIu64
                 " out of order, %" PRIu64 " above the replay marker; first: %s",
                 d->ctx, v.partial_tx, v.duplicates, v.bad_bytes, v.bad_order, v.above_marker, v.first);
    return v.partial_tx;
}

/* Every written record of an epoch <= L replayed (none above: check_structure). */
static void check_prefix(const struct damage *d, const struct crash_replay *rp)
{
    uint64_t L = rp->out.replay_marker;
    const struct crash_replay *w = &d->base->written;
    for (size_t i = 0; i < w->n; i++) {
        const struct crash_rec *r = &w->v[i];
        if (r->epoch > L || destroyed_at_tail(d, r->id, r->index))
            continue;
        cr_assert(replayed(rp, r->id, r->index),
                  "%s: record %u of tx %" PRIx64 " (epoch %" PRIu64 ") is not replayed, but the replay marker is %" PRIu64
                  " (durable marker %" PRIu64 "): replay is not a prefix of the epoch order",
                  d->ctx, r->index, r->id, r->epoch, L, rp->out.durable_marker);
    }
    if (d->middle)
        cr_assert_geq(L + 1, d->last_good_epoch,
                      "%s: replay marker %" PRIu64 " although every record of the damaged channel up to epoch %" PRIu64
                      " is intact",
                      d->ctx, L, d->last_good_epoch);
}

static void check_cut_reported(const struct damage *d, const struct crash_replay *rp)
{
    if (!d->middle)
        return;
    bool found = false;
    char seen[512] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < rp->n_cuts && i < CRASH_CUTS_KEPT; i++) {
        const struct crash_cut_seen *c = &rp->cuts[i];
        if (len < sizeof(seen))
            len += (size_t)snprintf(seen + len, sizeof(seen) - len, " [%s at %" PRIu64 ": %s%s%s]", c->file, c->offset,
                                    c->reason, c->corrupt ? ", corrupt" : "", c->middle ? ", middle" : "");
        if (!strcmp(c->file, d->ch->name) && c->offset <= d->from && c->corrupt && c->middle &&
            !strstr(c->reason, "not durable"))
            found = true;
    }
    cr_assert(found,
              "%s: damage in the middle of %s at %" PRIu64 " is not reported as a corrupt cut in the middle; cuts:%s",
              d->ctx, d->ch->name, d->from, len ? seen : " none");
}

static void check_second_recovery(const struct damage *d, const char *dir, const struct crash_replay *first)
{
    struct crash_replay again;
    int rc = crash_recover(dir, 0, &again);
    cr_assert_eq(rc, 0, "%s: second recovery: %d: %s", d->ctx, rc, urt_last_error());
    crash_replay_sort(&again);
    cr_assert_eq(again.out.durable_marker, first->out.durable_marker,
                 "%s: second recovery: durable marker %" PRIu64 ", first %" PRIu64, d->ctx, again.out.durable_marker,
                 first->out.durable_marker);
    cr_assert_eq(again.out.replay_marker, first->out.replay_marker,
                 "%s: second recovery: replay marker %" PRIu64 ", first %" PRIu64, d->ctx, again.out.replay_marker,
                 first->out.replay_marker);
    char why[256];
    uint64_t missing = crash_replay_missing(first, &again, why, sizeof(why));
    uint64_t extra = crash_replay_missing(&again, first, why + strlen(why), sizeof(why) - strlen(why));
    cr_assert(missing == 0 && extra == 0, "%s: second recovery: %" PRIu64 " records missing, %" PRIu64 " new: %s",
              d->ctx, missing, extra, why);
    cr_assert_eq(again.n_cuts, 0, "%s: second recovery cut again (%u cuts, first at %s %" PRIu64 ": %s)", d->ctx,
                 again.n_cuts, again.cuts[0].file, again.cuts[0].offset, again.cuts[0].reason);
    crash_replay_free(&again);
}

/* URT_LOG_RECOVER_ALL reading every payload byte, in a child process.
 * expect_n: the number of records it must deliver (0: don't check). */
static void check_recover_all(const char *ctx, const char *dir, size_t expect_n)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct crash_replay all;
        int rc = crash_recover(dir, URT_LOG_RECOVER_ALL, &all);
        if (rc) {
            fprintf(stderr, "%s: RECOVER_ALL returned %d: %s\n", ctx, rc, urt_last_error());
            _exit(2);
        }
        if (all.bad_bytes) {
            fprintf(stderr, "%s: RECOVER_ALL delivered a bad record: %s\n", ctx, all.first_bad);
            _exit(3);
        }
        if (expect_n && all.n != expect_n) {
            fprintf(stderr, "%s: RECOVER_ALL delivered %zu records, %zu are valid\n", ctx, all.n, expect_n);
            _exit(4);
        }
        _exit(0);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(!WIFSIGNALED(st), "%s: URT_LOG_RECOVER_ALL reading every payload died of signal %d (%s)", ctx,
              WTERMSIG(st), strsignal(WTERMSIG(st)));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: URT_LOG_RECOVER_ALL failed (exit %d, reason above)", ctx,
              WEXITSTATUS(st));
}

/* ---- one seed ---------------------------------------------------------------------------- */

struct damage_totals {
    int runs, middle, tail, none, split_partial;
};

static void damage_one(const struct base *b, enum damage_kind kind, unsigned seed, struct damage_totals *t)
{
    uint64_t rng = 0x9E3779B97F4A7C15ull * (seed + 1) + kind;
    struct damage d = {.kind = kind, .seed = seed, .base = b};
    d.ch = pick_channel(b, &rng);
    plan_damage(&d, &rng);
    classify_damage(&d);
    char *dir = crash_tmpdir("urt-damage"), *all = crash_tmpdir("urt-damage-all");
    snprintf(d.ctx, sizeof(d.ctx), "seed %u: %s of %s [%" PRIu64 ", %" PRIu64 ") (prealloc %u KiB, %s; kept: %s, base %s)",
             seed, damage_names[kind], d.ch->name, d.from, d.to, b->prealloc_kb,
             !d.any ? "no record touched" : d.middle ? "middle" : "tail", all, b->dir);
    copy_dir(b->dir, dir);
    apply_damage(dir, &d);
    copy_dir(dir, all);

    struct crash_replay rp;
    int rc = crash_recover(dir, 0, &rp);
    cr_assert_eq(rc, 0, "%s: recovery: %d: %s", d.ctx, rc, urt_last_error());
    crash_replay_sort(&rp);
    uint64_t split_partial;
    check_structure(&d, &rp, &split_partial);
    check_prefix(&d, &rp);
    check_cut_reported(&d, &rp);
    check_second_recovery(&d, dir, &rp);
    check_recover_all(d.ctx, all, 0);

    t->runs++;
    t->middle += d.any && d.middle;
    t->tail += d.any && !d.middle;
    t->none += !d.any;
    t->split_partial += (int)split_partial;
    crash_replay_free(&rp);
    crash_remove_tree(dir), crash_remove_tree(all);
    free(dir), free(all);
}

static void damage_seeds(enum damage_kind kind)
{
    /* strict (appends), the single-flush chain, and single_write (auto where
     * O_DIRECT works: claims of the marker in the channels) */
    struct base bases[3];
    build_base(&bases[0], 0, NULL);
    build_base(&bases[1], 4096, "single_flush");
    build_base(&bases[2], 4096, NULL);
    struct damage_totals t = {0};
    const char *one = getenv("URT_DAMAGE_SEED");
    for (unsigned seed = 1; seed <= SEEDS; seed++) {
        if (one && *one && (unsigned)atoi(one) != seed)
            continue;
        damage_one(&bases[seed % 3], kind, seed, &t);
    }
    char summary[300];
    snprintf(summary, sizeof(summary),
             "wal_damage %s: %d seeds: %d in the middle, %d at a tail, %d touching no record; %d "
             "transactions replayed in part",
             damage_names[kind], t.runs, t.middle, t.tail, t.none, t.split_partial);
    printf("%s\n", summary);
    fflush(stdout);
    cr_log_info("%s", summary);
    for (int i = 0; i < 3; i++)
        free_base(&bases[i]);
    leak_check();
}

Test(wal_damage, truncate_channel, .timeout = 600)
{
    damage_seeds(DAMAGE_TRUNCATE);
}

Test(wal_damage, zero_page, .timeout = 600)
{
    damage_seeds(DAMAGE_ZERO_PAGE);
}

Test(wal_damage, flip_header_byte, .timeout = 600)
{
    damage_seeds(DAMAGE_FLIP_HEADER);
}

Test(wal_damage, flip_payload_byte, .timeout = 600)
{
    damage_seeds(DAMAGE_FLIP_PAYLOAD);
}

/* Nothing durable: the epoch file zeroed. RECOVER_ALL still delivers every
 * valid record (reading all its bytes) without crashing, though its cuts
 * remove them all; a normal recovery afterwards replays nothing. With
 * single_write the marker is carried by the log writes too (claims): the
 * epoch file zeroed, the claims alone give the marker, and recovery replays
 * exactly the records of the epochs they cover. */
static void zero_epoch_file(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/epochs", dir);
    uint64_t size;
    free(read_file(path, &size));
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    uint8_t *zeros = calloc(1, size + 1);
    cr_assert_eq(pwrite(fd, zeros, size, 0), (ssize_t)size);
    free(zeros);
    close(fd);
}

Test(wal_damage, epoch_file_zeroed_recover_all, .timeout = 300)
{
    static const struct {
        uint32_t prealloc;
        const char *log_sync;
    } modes[] = {{0, NULL}, {4096, "single_flush"}, {4096, "single_write"}};
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        struct base b;
        build_base(&b, modes[m].prealloc, modes[m].log_sync);
        /* claims ride in single_write's log writes, on either backend */
        bool claims = modes[m].log_sync && !strcmp(modes[m].log_sync, "single_write");
        zero_epoch_file(b.dir);
        char ctx[96];
        snprintf(ctx, sizeof(ctx), "epoch file zeroed (prealloc %u KiB, log_sync %s)", modes[m].prealloc,
                 modes[m].log_sync ? modes[m].log_sync : "auto");
        check_recover_all(ctx, b.dir, (size_t)TXS * TX_RECORDS);
        struct crash_replay rp;
        cr_assert_eq(crash_recover(b.dir, 0, &rp), 0, "%s: recovery: %s", ctx, urt_last_error());
        if (!claims) {
            cr_assert_eq(rp.n, 0, "%s: %zu records replayed with nothing durable (durable marker %" PRIu64 ")", ctx,
                         rp.n, rp.out.durable_marker);
        } else {
            size_t covered = 0;
            for (size_t i = 0; i < b.written.n; i++)
                covered += b.written.v[i].epoch <= rp.out.durable_marker;
            cr_assert_gt(rp.out.claims, 0, "%s: no claim found", ctx);
            cr_assert_gt(rp.out.durable_marker, 0, "%s: the claims gave no marker", ctx);
            cr_assert_eq(rp.n, covered, "%s: %zu records replayed, %zu lie at or below the claimed marker %" PRIu64,
                         ctx, rp.n, covered, rp.out.durable_marker);
        }
        crash_replay_free(&rp);
        free_base(&b);
    }
    leak_check();
}

/* A recovery that found damage keeps the epochs the damage made incomplete
 * out of every later replay (a window of lost epochs in the epoch file) —
 * but only those: a session that runs after it commits above them, and its
 * acknowledged commits are replayed. With log_sync single_write and one
 * channel the session never writes the epoch file (its writes carry the
 * marker), so the window the damage recovery wrote is still there when the
 * next recovery reads it. Before windows had an upper end, that slot was a
 * plain replay limit: the next recovery cut every commit of the later
 * session (found by tests/unit/test_wal_property.c, fixture property-885). */
static void commit_ids(urt_runtime *rt, uint64_t first, uint64_t n)
{
    atomic_store(&commits_done, 0);
    atomic_store(&commits_failed, 0);
    uint8_t rec[CRASH_PAYLOAD_MAX];
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = crash_id(2, CRASH_KIND_TX, 0, first + i);
        struct urt_tx_options opt;
        urt_tx_options_init(&opt);
        opt.id = id;
        urt_tx *tx;
        cr_assert_eq(urt_tx_begin(rt, &opt, &tx), 0, "urt_tx_begin: %s", urt_last_error());
        cr_assert_eq(urt_tx_log(tx, rec, crash_payload_fill(rec, id, 0, 1)), 0, "urt_tx_log: %s", urt_last_error());
        cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_STORED, tx_committed, NULL), 0, "%s", urt_last_error());
        urt_tx_release(tx);
        cr_assert(WAIT_UNTIL(atomic_load(&commits_done) == (int)i + 1, 60000), "commit %" PRIu64 " not answered", i);
    }
    cr_assert_eq(atomic_load(&commits_failed), 0);
}

Test(wal_damage, a_session_after_a_damage_recovery_keeps_its_commits, .timeout = 300)
{
    struct base b;
    build_base(&b, 4096, "single_write");
    /* damage in the middle: a payload byte of the first record of a channel that has more after it */
    const struct channel *ch = NULL;
    for (int i = 0; i < b.n_ch && !ch; i++)
        if (b.ch[i].n > 10)
            ch = &b.ch[i];
    cr_assert_not_null(ch, "no channel of the base holds enough records");
    struct damage d = {.kind = DAMAGE_FLIP_PAYLOAD, .base = &b, .ch = ch, .from = ch->recs[0].off + WAL_HDR_SIZE + 20};
    d.to = d.from + 1;
    apply_damage(b.dir, &d);
    struct crash_replay first;
    cr_assert_eq(crash_recover(b.dir, 0, &first), 0, "%s", urt_last_error());
    cr_assert_lt(first.out.replay_marker, first.out.durable_marker, "the damage lowered no replay limit");
    /* a later session: one worker, single_write, its commits acknowledged */
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = b.dir;
    cfg.log_prealloc_kb = 4096;
    cr_assert_eq(urt_config_set(&cfg, "log_sync", "single_write"), 0, "%s", urt_last_error());
    urt_runtime *rt = rt_create_or_skip(&cfg);
    enum { LATER = 20 };
    commit_ids(rt, 0, LATER);
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct crash_replay again;
    cr_assert_eq(crash_recover(b.dir, 0, &again), 0, "%s", urt_last_error());
    crash_replay_sort(&again);
    for (uint64_t i = 0; i < LATER; i++) {
        uint64_t id = crash_id(2, CRASH_KIND_TX, 0, i);
        bool found = false;
        for (size_t k = 0; k < again.n && !found; k++)
            found = again.v[k].id == id;
        cr_assert(found, "commit %" PRIu64 " of the session after the damage recovery (acknowledged STORED, epoch file "
                  "writes %" PRIu64 ", claims %" PRIu64 ") is not replayed: durable marker %" PRIu64 ", replay limit %"
                  PRIu64 " (the damage recovery's: %" PRIu64 " / %" PRIu64 ")",
                  i, st.epoch_writes, st.claims, again.out.durable_marker, again.out.replay_marker,
                  first.out.durable_marker, first.out.replay_marker);
    }
    cr_assert_eq(again.n, first.n + LATER, "the later recovery replays %zu records: the first %zu and %d new", again.n,
                 first.n, LATER);
    crash_replay_free(&first);
    crash_replay_free(&again);
    free_base(&b);
    leak_check();
}

/* A window of lost epochs names epochs that were once on disk; the files
 * that held them may be gone since (more damage: a file lost or cut to
 * nothing), so the largest epoch the channels show can be below the
 * window's end. A session must still start above every window: one that
 * started at the largest epoch on disk + 1 committed inside the window, and
 * the next recovery left its acknowledged commits out with the lost ones
 * (found by wal_property's soak, seed 10000003085). Forged here: the epoch
 * file a damage recovery writes (the marker D, a window 1..D+50 as if
 * records up to D+50 had been found), channel files with nothing above D. */
static void forge_window(const char *dir, uint64_t d, uint64_t hi)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/epochs", dir);
    uint8_t *b = calloc(EPOCH_SLOTS, EPOCH_SLOT_SIZE);
    cr_assert_not_null(b);
    wal_epoch_slot_encode(b, &(struct wal_epoch_slot){.marker = d});
    wal_epoch_slot_encode(b + EPOCH_SLOT_SIZE, &(struct wal_epoch_slot){.marker = 0, .gen = WAL_SLOT_LIMIT, .end = hi});
    int fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(pwrite(fd, b, (size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE, 0), (ssize_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE);
    close(fd);
    free(b);
}

Test(wal_damage, a_session_starts_above_every_window_of_lost_epochs, .timeout = 300)
{
    struct base b;
    build_base(&b, 0, "strict");
    struct crash_replay before;
    cr_assert_eq(crash_recover(b.dir, URT_LOG_RECOVER_DRY_RUN, &before), 0, "%s", urt_last_error());
    uint64_t d = before.out.durable_marker, hi = d + 50;
    crash_replay_free(&before);
    forge_window(b.dir, d, hi);
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = b.dir;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    enum { LATER = 20 };
    commit_ids(rt, 1000, LATER);
    struct urt_log_stats st;
    cr_assert_eq(urt_log_stats(rt, &st), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    struct crash_replay again;
    cr_assert_eq(crash_recover(b.dir, 0, &again), 0, "%s", urt_last_error());
    for (uint64_t i = 0; i < LATER; i++) {
        uint64_t id = crash_id(2, CRASH_KIND_TX, 0, 1000 + i);
        bool found = false;
        for (size_t k = 0; k < again.n && !found; k++)
            found = again.v[k].id == id;
        cr_assert(found, "commit %" PRIu64 " of the session (acknowledged STORED; its open epoch now %" PRIu64
                  ") is not replayed: durable marker %" PRIu64 ", replay limit %" PRIu64 ", window 1..%" PRIu64,
                  i, st.epoch, again.out.durable_marker, again.out.replay_marker, hi);
    }
    crash_replay_free(&again);
    free_base(&b);
    leak_check();
}
