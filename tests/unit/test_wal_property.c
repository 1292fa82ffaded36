/*
 * tests/unit/test_wal_property.c — recovery is a fixpoint, replays a
 * consistent prefix and keeps every acknowledged commit: a seeded property
 * test over generated log directories (issue 26).
 *
 * A workload (seed W, a multiple of CASES_PER_WORKLOAD) runs 1-3 sessions of
 * a real runtime with a log (tests/property/prop_work.h: 1-4 workers,
 * log_channels, segments, checkpoints, every log_sync mode, preallocation on
 * and off, transactions and plain commits), each traced at the I/O level
 * (prop_trace.h). From a session's trace the directory is rebuilt at random
 * stop points under a crash model (prop_image.h: kill, cut after the last
 * sync, unsynced data dropped), then damaged at random (prop_damage.h) or
 * not. Each such directory is a case, seed W + i: checked (prop_check.h) for
 *   (a) the fixpoint: a dry run, recover, recover again (and, one case in
 *       four, a runtime started and destroyed, then recover again) agree on
 *       the durable marker, the replay limit and the records replayed, and the
 *       second cuts nothing;
 *   (b) the consistent prefix the model computes from the directory;
 *   (c) every commit acknowledged URT_COMMIT_STORED before the stop is
 *       replayed (unless its epoch is at or below the checkpoint), under the
 *       kill and cut models always, under dropped unsynced data where the
 *       sync mode promises it (not single_flush: docs/durability.md); losses
 *       the damage explains are counted, never excused otherwise.
 * A session after the first starts on a case's directory (a crash, maybe
 * damage): the commits acknowledged before and replayed by that case carry
 * over and must survive the later sessions.
 *
 * Environment: URT_PROPERTY_CASES=N (default 2000; 800 under ASan, 300 under
 * TSan), URT_PROPERTY_BASE=S (the first seed; default: from the clock,
 * printed), URT_PROPERTY_SEED=S (replay the workload of case S and check
 * only case S), URT_PROPERTY_KEEP_GOING=1 (report every failing case and go
 * on; the test fails at the end), URT_PROPERTY_TRACE=1 (print the failing
 * session's I/O trace up to the stop), URT_PROPERTY_DIR (scratch space; default
 * /dev/shm, else $TMPDIR or /tmp; the sessions of one workload in eight run
 * in $TMPDIR or /tmp, a real disk). The workload is a real runtime on
 * threads, so a seed fixes the configuration, the operations, the stop
 * points and the damage, not the timing: a replayed seed builds a similar
 * directory, not the same one. A failing case therefore keeps its directories
 * (x: damaged, u: undamaged, case.txt: the acknowledged commits) under
 * <URT_PROPERTY_DIR>/urt-property-fail-<seed>/ and names them; a directory
 * worth keeping is shrunk and kept in tests/fixtures/ with its seed
 * (tests/fixtures/README.md, tests/unit/test_wal_fixture.c).
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "helpers.h"
#include "crash/crash_check.h"
#include "property/prop_check.h"
#include "property/prop_damage.h"
#include "property/prop_image.h"
#include "property/prop_shrink.h"
#include "property/prop_trace.h"
#include "property/prop_work.h"
#include "tx/wal_dir.h"
#include "tx/wal_format.h"

#define CASES_PER_WORKLOAD 8

#if defined(__SANITIZE_THREAD__)
#define DEFAULT_CASES 300
#elif defined(__SANITIZE_ADDRESS__)
#define DEFAULT_CASES 800
#else
#define DEFAULT_CASES 2000
#endif

struct prop {
    uint64_t cases, base, only;   /* only: the one case to check (UINT64_MAX: all) */
    bool keep_going;
    char root[1024];
    char disk[1024];              /* where 1 workload in 8 runs its sessions: $TMPDIR or /tmp (a real disk) */
    uint64_t disk_sessions;
    uint64_t done, failed, skipped_acks, acks_checked, acks_lost_to_damage;
    uint64_t by_model[3], by_damage[PD_KINDS], sessions, restarts;
    char first_failure[4096];
};

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void prop_init(struct prop *p)
{
    memset(p, 0, sizeof(*p));
    p->cases = env_u64("URT_PROPERTY_CASES", DEFAULT_CASES);
    p->only = env_u64("URT_PROPERTY_SEED", UINT64_MAX);
    p->base = env_u64("URT_PROPERTY_BASE", (now_ns() / 1000) % 1000000000ull * CASES_PER_WORKLOAD);
    p->base -= p->base % CASES_PER_WORKLOAD;
    if (p->only != UINT64_MAX)
        p->base = p->only - p->only % CASES_PER_WORKLOAD, p->cases = 1;
    p->keep_going = env_u64("URT_PROPERTY_KEEP_GOING", 0) != 0;
    const char *dir = getenv("URT_PROPERTY_DIR"), *tmp = getenv("TMPDIR");
    struct stat st;
    if (!dir || !*dir)
        dir = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp && *tmp ? tmp : "/tmp";
    snprintf(p->root, sizeof(p->root), "%s", dir);
    snprintf(p->disk, sizeof(p->disk), "%s", tmp && *tmp ? tmp : "/tmp");
}

/* ---- one workload ------------------------------------------------------------------------------- */

struct acks {
    struct pc_ack *v;
    size_t n, cap;
};

static void acks_push(struct acks *a, const struct pc_ack *x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->v = realloc(a->v, a->cap * sizeof(*a->v));
        cr_assert_not_null(a->v);
    }
    a->v[a->n++] = *x;
}

/* id -> epoch of every commit record a session wrote (its files at the end
 * and the ones it deleted). */
struct epochs {
    uint64_t *id, *epoch;
    size_t n, cap;
};

static int note_epoch(void *arg, const struct wal_rec *r)
{
    struct epochs *e = arg;
    if (r->type != WAL_REC_COMMIT)
        return 0;
    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 1024;
        e->id = realloc(e->id, e->cap * sizeof(*e->id));
        e->epoch = realloc(e->epoch, e->cap * sizeof(*e->epoch));
    }
    e->id[e->n] = r->tx_id;
    e->epoch[e->n++] = r->epoch;
    return 0;
}

static void epochs_of(const struct pi_dir *d, struct epochs *e)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strncmp(d->f[i].name, "ch-", 3)) {
            struct wal_scan_result s;
            wal_scan(d->f[i].b, d->f[i].len, note_epoch, e, &s);
        }
}

static uint64_t epoch_of(const struct epochs *e, uint64_t id)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->id[i] == id)
            return e->epoch[i];
    return UINT64_MAX;
}

/* A stop point of the session: anywhere, often early (the startup recovery). */
static uint64_t pick_stop(uint64_t total, uint64_t *rng)
{
    uint64_t r = rng_next(rng) % 8;
    if (r == 0)
        return total;
    if (r <= 2)
        return rng_next(rng) % (total / 10 + 1);
    return rng_next(rng) % (total + 1);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t count_replayed(const struct pc_run *r, uint64_t id)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        k += r->v[i].id == id;
    return k;
}

struct session_ctx {
    struct prop *p;
    uint64_t workload, session;
    const struct pw_conf *conf;
    struct pw_stats st;
    struct acks *carried;
    uint64_t ck_carried;
    const struct pt_trace *t;
    struct epochs ep;
};

/* A failing case: kept as it failed, then shrunk (unless
 * URT_PROPERTY_SHRINK=0), both under <root>/urt-property-fail-<seed>/. */
static void keep_failure(struct prop *p, uint64_t seed, const struct pi_dir *U, const struct pi_dir *X,
                         const struct pc_ack *acks, size_t n_acks, uint64_t ck_min, bool promised, const char *damage,
                         const char *why, char *where, size_t len)
{
    snprintf(where, len, "%s/urt-property-fail-%" PRIu64, p->root, seed);
    struct ps_case c = {.seed = seed, .ck_min = ck_min, .promised = promised, .n_acks = n_acks};
    pi_dir_copy(&c.U, U);
    pi_dir_copy(&c.X, X);
    c.acks = malloc((n_acks ? n_acks : 1) * sizeof(*c.acks));
    cr_assert_not_null(c.acks);
    if (n_acks)
        memcpy(c.acks, acks, n_acks * sizeof(*acks));
    snprintf(c.damage, sizeof(c.damage), "%s", damage);
    if (ps_save(&c, where))
        fprintf(stderr, "wal_property: cannot keep the case in %s\n", where);
    if (env_u64("URT_PROPERTY_SHRINK", 1)) {
        char w[1200], shrunk[1300];
        snprintf(w, sizeof(w), "%s", why);
        size_t steps = ps_shrink(&c, p->root, w, sizeof(w));
        snprintf(shrunk, sizeof(shrunk), "%s/shrunk", where);
        ps_save(&c, shrunk);
        fprintf(stderr, "wal_property: case %" PRIu64 " shrunk in %zu steps to %zu files, %zu acknowledgements: %s\n"
                        "  still: %s\n", seed, steps, c.X.n, c.n_acks, shrunk, w);
    }
    ps_free(&c);
}

/* The acknowledgements that count at stop T: those carried over, then this
 * session's before T. The last checkpoint returned before T. */
static void acks_at(struct session_ctx *s, uint64_t T, struct acks *out, uint64_t *ck_min)
{
    out->n = 0;
    for (size_t i = 0; i < s->carried->n; i++)
        acks_push(out, &s->carried->v[i]);
    *ck_min = s->ck_carried;
    for (size_t i = 0; i < s->t->n; i++) {
        const struct pt_op *o = &s->t->ops[i];
        if (o->start >= T)
            continue;
        if (o->kind == PT_CKPT && o->res >= 0 && o->marker > *ck_min)
            *ck_min = o->marker;
        if (o->kind != PT_ACK)
            continue;
        uint64_t e = o->marker ? o->marker : epoch_of(&s->ep, o->id);
        acks_push(out, &(struct pc_ack){.id = o->id, .epoch = e, .seq = o->start, .count = o->count,
                                        .session = (uint32_t)s->session});
    }
}

/* One case: the directory at T under model m, damaged or not, checked.
 * next (non-NULL): the directory the next session starts on, and the
 * acknowledgements it carries. Returns false when the case failed. */
static bool one_case(struct session_ctx *s, struct pi_replay *rp, uint64_t T, uint64_t seed, struct pi_dir *next,
                     struct acks *next_acks, uint64_t *next_ck)
{
    struct prop *p = s->p;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
    rng_next(&rng);
    enum pi_model m = (enum pi_model)(rng_next(&rng) % 3);
    struct pi_dir U = {0}, X = {0}, grave = {0};
    pi_replay_to(rp, T);
    pi_replay_image(rp, m, &rng, &U);
    pi_replay_graveyard(rp, false, &grave); /* the "extra segment" damage: as unlinked */
    pi_dir_copy(&X, &U);
    char damage[600] = "none";
    enum pd_kind dk = PD_NONE;
    if (rng_next(&rng) % 8 >= 3) {
        dk = pd_damage(&X, &grave, PD_NONE, next != NULL, &rng, damage, sizeof(damage));
        enum pd_kind k2 = (enum pd_kind)(1 + rng_next(&rng) % (PD_KINDS - 1));
        /* Not a deleted segment back AND the checkpoint gone: the segment's records (all at or below the
         * checkpoint) would be replayable again, genuine records the model (U's) does not know of. */
        bool clash = (dk == PD_EXTRA && k2 == PD_CHECKPOINT) || (dk == PD_CHECKPOINT && k2 == PD_EXTRA);
        if (dk != PD_NONE && !clash && rng_next(&rng) % 10 == 0) {
            size_t l = strlen(damage);
            snprintf(damage + l, sizeof(damage) - l, "; then ");
            pd_damage(&X, &grave, k2, next != NULL, &rng, damage + strlen(damage), sizeof(damage) - strlen(damage));
        }
    }
    struct acks acks = {0};
    uint64_t ck_min;
    acks_at(s, T, &acks, &ck_min);
    char dir[1200];
    snprintf(dir, sizeof(dir), "%s/urt-property-%" PRIu64 "-case", p->root, seed);
    crash_remove_tree(dir);
    bool promised = m != PI_DROP || s->st.sync_mode != URT_LOG_SYNC_SINGLE_FLUSH;
    struct pc_case c = {.seed = seed, .U = &U, .X = &X, .damage = damage, .acks = acks.v, .n_acks = acks.n,
                        .ck_min = ck_min, .acks_promised = promised,
                        .restart = rng_next(&rng) % 4 == 0 ? s->conf : NULL, .dir = dir};
    bool checked = p->only == UINT64_MAX || p->only == seed;
    struct pc_result res = {.ok = true};
    if (checked || next) {
        pc_check(&c, &res);
        if (checked) {
            p->done++;
            p->by_model[m]++;
            p->by_damage[dk]++;
            p->restarts += c.restart != NULL;
            p->acks_checked += res.acks_checked;
            p->acks_lost_to_damage += res.acks_lost_to_damage;
            p->skipped_acks += promised ? 0 : acks.n;
        }
    }
    if (!res.ok) {
        char where[1100], conf[400];
        keep_failure(p, seed, &U, &X, acks.v, acks.n, ck_min, promised, damage, res.why, where, sizeof(where));
        pw_conf_describe(s->conf, conf, sizeof(conf));
        char msg[4096];
        snprintf(msg, sizeof(msg),
                 "case %" PRIu64 " (URT_PROPERTY_SEED=%" PRIu64 "): %s\n  session %" PRIu64 " (%s; sync mode %u, fs %s), "
                 "stop %" PRIu64 " of %" PRIu64 ", model %s, damage: %s\n  kept: %s (x: the damaged directory, u: "
                 "undamaged, case.txt: the acknowledged commits)",
                 seed, seed, res.why, s->session, conf, s->st.sync_mode, s->st.fs, T, s->t->seq, pi_model_names[m],
                 damage, where);
        fprintf(stderr, "wal_property: FAILED %s\n", msg);
        if (getenv("URT_PROPERTY_TRACE"))
            pt_dump(stderr, 0, T + 200);
        if (!p->failed++)
            snprintf(p->first_failure, sizeof(p->first_failure), "%s", msg);
    } else if (next) {
        pi_dir_copy(next, &X);
        next_acks->n = 0;
        for (size_t i = 0; i < acks.n; i++)
            if (count_replayed(&res.first, acks.v[i].id) == acks.v[i].count)
                acks_push(next_acks, &acks.v[i]);
        *next_ck = res.first.rc ? 0 : res.first.out.checkpoint;
    }
    crash_remove_tree(dir);
    pc_result_free(&res);
    free(acks.v);
    pi_dir_free(&U);
    pi_dir_free(&X);
    pi_dir_free(&grave);
    return res.ok;
}

/* Runs session `session` of a workload on a fresh directory holding start,
 * traced; fills s (the trace stays in prop_trace until the next session). */
static void run_session(struct session_ctx *s, const struct pi_dir *start, bool on_disk, uint64_t *rng)
{
    char dir[1200], conf[400], err[512];
    snprintf(dir, sizeof(dir), "%s/urt-property-%" PRIu64 "-s%" PRIu64, on_disk ? s->p->disk : s->p->root,
             s->workload, s->session);
    s->p->disk_sessions += on_disk;
    crash_remove_tree(dir);
    cr_assert_eq(pi_dir_write(start, dir), 0, "cannot write %s", dir);
    pw_conf_describe(s->conf, conf, sizeof(conf));
    pt_start(dir);
    int rc = pw_session(dir, s->conf, rng, (s->session + 1) << 32, &s->st, err, sizeof(err));
    pt_stop();
    crash_remove_tree(dir);
    if (rc == -ENOSYS || rc == -EPERM)
        cr_skip_test("io_uring unavailable: %s", err);
    cr_assert_eq(rc, 0, "workload %" PRIu64 " session %" PRIu64 " (%s): %s", s->workload, s->session, conf, err);
    cr_assert_eq(s->st.failures, 0, "workload %" PRIu64 " session %" PRIu64 " (%s): %" PRIu64 " failures, first: %s",
                 s->workload, s->session, conf, s->st.failures, s->st.first_failure);
    s->t = pt_get();
    cr_assert(!s->t->overflow, "workload %" PRIu64 ": the I/O trace lost operations", s->workload);
}

/* The id -> epoch map of the session just run. */
static void session_epochs(struct session_ctx *s, const struct pi_dir *start)
{
    struct pi_replay *rp = pi_replay_new(start, s->t);
    pi_replay_to(rp, s->t->seq);
    struct pi_dir all = {0}, grave = {0};
    uint64_t none = 1;
    pi_replay_image(rp, PI_KILL, &none, &all);
    pi_replay_graveyard(rp, true, &grave); /* every record a deleted file held */
    memset(&s->ep, 0, sizeof(s->ep));
    epochs_of(&all, &s->ep);
    epochs_of(&grave, &s->ep);
    pi_dir_free(&all);
    pi_dir_free(&grave);
    pi_replay_free(rp);
}

static void run_workload(struct prop *p, uint64_t w)
{
    uint64_t rng = w * 0xD1B54A32D192ED03ull + 99;
    rng_next(&rng);
    uint64_t sessions = 1 + (rng_next(&rng) % 10 < 5 ? 0 : rng_next(&rng) % 2 + 1);
    /* the sessions of 1 workload in 8 run on a real disk ($TMPDIR): log_sync auto resolves there (single_write
     * on ext4/xfs), and the device's timing shapes the group commits; the cases are checked in p->root */
    bool on_disk = rng_next(&rng) % 8 == 0;
    struct pi_dir start = {0}, next = {0};
    struct acks carried = {0}, next_acks = {0};
    uint64_t ck = 0, used = 0;
    struct pw_conf conf;
    pw_conf_random(&conf, &rng);
    for (uint64_t s = 0; s < sessions; s++) {
        if (s && rng_next(&rng) % 2)
            pw_conf_random(&conf, &rng);
        struct session_ctx sc = {.p = p, .workload = w, .session = s, .conf = &conf, .carried = &carried,
                                 .ck_carried = ck};
        run_session(&sc, &start, on_disk, &rng);
        p->sessions++;
        session_epochs(&sc, &start);
        bool last = s + 1 == sessions;
        uint64_t n = last ? CASES_PER_WORKLOAD - used : 1, T[CASES_PER_WORKLOAD];
        for (uint64_t i = 0; i < n; i++)
            T[i] = pick_stop(sc.t->seq, &rng);
        qsort(T, n, sizeof(*T), cmp_u64);
        struct pi_replay *rp = pi_replay_new(&start, sc.t);
        bool ok = true;
        for (uint64_t i = 0; i < n && ok; i++)
            ok = one_case(&sc, rp, T[i], w + used++, last ? NULL : &next, &next_acks, &ck) || (p->keep_going && last);
        pi_replay_free(rp);
        free(sc.ep.id);
        free(sc.ep.epoch);
        if (!ok)
            break;
        if (!last) {
            pi_dir_copy(&start, &next);
            carried.n = 0;
            for (size_t i = 0; i < next_acks.n; i++)
                acks_push(&carried, &next_acks.v[i]);
        }
    }
    pi_dir_free(&start);
    pi_dir_free(&next);
    free(carried.v);
    free(next_acks.v);
}

Test(wal_property, recovery_is_a_fixpoint_under_crashes_and_damage, .timeout = 86400)
{
    struct prop *p = calloc(1, sizeof(*p));
    cr_assert_not_null(p);
    prop_init(p);
    fprintf(stderr, "wal_property: %" PRIu64 " cases from URT_PROPERTY_BASE=%" PRIu64 " in %s\n", p->cases, p->base,
            p->root);
    uint64_t t0 = now_ns();
    for (uint64_t w = p->base; p->done < p->cases && (!p->failed || p->keep_going); w += CASES_PER_WORKLOAD)
        run_workload(p, w);
    pt_free();
    double secs = (double)(now_ns() - t0) / 1e9;
    fprintf(stderr,
            "wal_property: %" PRIu64 " cases (%" PRIu64 " sessions, %" PRIu64 " on %s) in %.1f s; models kill %" PRIu64 " cut %" PRIu64
            " drop %" PRIu64 "; damage none %" PRIu64 " truncate %" PRIu64 " zero_page %" PRIu64 " flip_header %" PRIu64
            " flip_payload %" PRIu64 " epochs %" PRIu64 " checkpoint %" PRIu64 " missing %" PRIu64 " extra %" PRIu64
            "; %" PRIu64 " with a runtime in between; %" PRIu64 " acknowledged commits checked, %" PRIu64
            " lost to damage, %" PRIu64 " not promised (single_flush, unsynced data dropped); %" PRIu64 " failed\n",
            p->done, p->sessions, p->disk_sessions, p->disk, secs, p->by_model[0], p->by_model[1], p->by_model[2], p->by_damage[0],
            p->by_damage[1], p->by_damage[2], p->by_damage[3], p->by_damage[4], p->by_damage[5], p->by_damage[6],
            p->by_damage[7], p->by_damage[8], p->restarts, p->acks_checked, p->acks_lost_to_damage, p->skipped_acks,
            p->failed);
    cr_assert_eq(p->failed, 0, "%" PRIu64 " of %" PRIu64 " cases failed; the first:\n%s", p->failed, p->done,
                 p->first_failure);
    cr_assert_gt(p->done, 0);
    free(p);
    leak_check();
}

/* The fixtures tests/fixtures/property-*.tgz: cases the property test once
 * failed, shrunk (tests/fixtures/README.md), checked again as they are. */
Test(wal_property, fixtures_pass, .timeout = 300)
{
    char *tmp = crash_tmpdir("urt-property-fixtures");
    int st = crash_sh("cd '%s' && for f in property-*.tgz; do [ -e \"$f\" ] || continue; "
                      "mkdir '%s'/\"${f%%.tgz}\" && tar xzf \"$f\" -C '%s'/\"${f%%.tgz}\" || exit 1; done",
                      URT_FIXTURES, tmp, tmp);
    cr_assert_eq(st, 0, "cannot extract the property fixtures of %s into %s", URT_FIXTURES, tmp);
    DIR *d = opendir(tmp);
    cr_assert_not_null(d);
    struct dirent *e;
    unsigned n = 0;
    const char *only = getenv("URT_PROPERTY_FIXTURE"); /* one fixture, by name (property-<seed>) */
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "property-", 9) || (only && *only && strcmp(only, e->d_name)))
            continue;
        char dir[4300];
        snprintf(dir, sizeof(dir), "%s/%s", tmp, e->d_name);
        struct ps_case c;
        cr_assert_eq(ps_load(&c, dir), 0, "cannot load fixture %s", dir);
        struct pc_result res;
        bool ok = ps_check(&c, tmp, &res);
        cr_assert(ok, "fixture %s (seed %" PRIu64 ", damage: %s): %s", e->d_name, c.seed, c.damage, res.why);
        cr_log_info("fixture %s: %zu records replayed, marker %" PRIu64, e->d_name, res.first.n,
                    res.first.out.durable_marker);
        pc_result_free(&res);
        ps_free(&c);
        n++;
    }
    closedir(d);
    crash_remove_tree(tmp);
    free(tmp);
    cr_log_info("%u property fixtures", n);
    leak_check();
}

/* A checkpoint deletes a large segment in synced steps (tx/wal_seg.c,
 * seg_unlink), read from the trace of its file operations: the
 * truncations of the deleted 16 MiB segment go down by at most 4 MiB each,
 * each synced before the next, down to the header block, and the unlink
 * comes after the last sync. Freed in one piece, a segment held the log's
 * own writes for 10-21 ms (docs/design.md, Checkpoint deletion). */
Test(wal_property, a_checkpoint_deletes_a_segment_in_synced_steps, .timeout = 300)
{
    char *dir = test_tmpdir("urt-ckpt-steps");
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.log_dir = dir;
    cfg.log_segment_kb = 16384;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    enum { LEN = 256 * 1024, N = 72 }; /* 18 MiB: the first segment closes, the rest goes on */
    uint8_t *rec = calloc(1, LEN);
    cr_assert_not_null(rec);
    char first[64] = "";
    uint64_t ck = 0;
    for (uint64_t id = 0; id < N; id++) {
        memcpy(rec, &id, sizeof(id));
        ck = test_commit_stored(rt, id, rec, LEN); /* the last one's: the closed segment is covered */
    }
    free(rec);
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ch-", 3) && strlen(e->d_name) == 28)
            snprintf(first, sizeof(first), "%s", e->d_name); /* segment 0: ch-<gen>-<worker>.wal */
    closedir(d);
    cr_assert_neq(first[0], 0);
    pt_start(dir);
    int deleted = urt_log_checkpoint(rt, ck);
    pt_stop();
    cr_assert_eq(deleted, 1, "%d (%s)", deleted, deleted < 0 ? urt_last_error() : "");
    const struct pt_trace *t = pt_get();
    cr_assert(!t->overflow);
    uint64_t size = UINT64_MAX;
    unsigned steps = 0;
    bool synced = true, unlinked = false;
    for (size_t i = 0; i < t->n; i++) {
        const struct pt_op *op = &t->ops[i];
        if (strcmp(op->name, first))
            continue;
        cr_assert(!unlinked, "an operation on %s after its unlink", first);
        if (op->kind == PT_TRUNC) {
            cr_assert(synced, "truncation %u of %s before the last one was synced", steps + 1, first);
            cr_assert_lt(op->off, size);
            if (size != UINT64_MAX)
                cr_assert_leq(size - op->off, 4u << 20, "a step of %" PRIu64 " bytes", size - op->off);
            size = op->off;
            synced = false;
            steps++;
        } else if (op->kind == PT_SYNC) {
            synced = true;
        } else if (op->kind == PT_UNLINK) {
            cr_assert(synced, "unlinked before the last truncation was synced");
            unlinked = true;
        }
    }
    cr_assert_geq(steps, 4u, "%u truncations of a 16 MiB segment", steps);
    cr_assert_eq(size, 4096u, "the last step leaves the header block, not %" PRIu64, size);
    cr_assert(unlinked);
    pt_free();
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    test_remove_dir(dir);
    leak_check();
}

/* URT_PROPERTY_SHRINK_DIR=<a kept case>: shrinks it (again) into <dir>/shrunk. */
Test(wal_property, shrink_a_kept_case, .timeout = 3600)
{
    const char *dir = getenv("URT_PROPERTY_SHRINK_DIR");
    if (!dir || !*dir)
        cr_skip_test("URT_PROPERTY_SHRINK_DIR is not set");
    struct ps_case c;
    cr_assert_eq(ps_load(&c, dir), 0, "cannot load %s", dir);
    struct pc_result res;
    bool ok = ps_check(&c, "/tmp", &res);
    cr_assert(!ok, "%s passes now", dir);
    char why[1200], out[4200];
    snprintf(why, sizeof(why), "%s", res.why);
    pc_result_free(&res);
    size_t steps = ps_shrink(&c, "/tmp", why, sizeof(why));
    snprintf(out, sizeof(out), "%s/shrunk", dir);
    cr_assert_eq(ps_save(&c, out), 0);
    cr_log_info("%zu steps, %zu files, %zu acknowledgements kept in %s; fails: %s", steps, c.X.n, c.n_acks, out, why);
    ps_free(&c);
}
