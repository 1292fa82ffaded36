/*
 * tests/unit/test_wal_fixture.c — deterministic regression tests on log
 * directories kept in tests/fixtures/ (README there).
 *
 * durable-marker-regresses.tgz holds trim/, a log directory as a SIGKILL
 * under a STORED commit load left it (durable marker 2828 in its epoch file,
 * records up to epoch 2841). Recovery must be idempotent: on a fresh copy,
 *   1. a dry run (URT_LOG_RECOVER_DRY_RUN) reports what the real run will;
 *   2. the first real run;
 *   3. a second real run reports the same durable and replay markers and
 *      replays the same records in the same order (it cuts nothing more).
 * Each record is kept as (epoch, gen, worker, lsn, tx id, length, FNV-1a of
 * the payload), so "the same records" is byte for byte.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "helpers.h"
#include "crash/crash_check.h"

#ifndef URT_FIXTURES
#error "URT_FIXTURES (tests/fixtures) must be defined by tests/meson.build"
#endif

struct fx_rec {
    uint64_t epoch, gen, lsn, tx_id;
    uint32_t worker, len, sum;
};

struct fx_run {
    struct fx_rec *v;
    size_t n, cap;
    uint32_t cuts;
    uint64_t cut_bytes;
    struct urt_log_recovery out;
};

static int fx_record(void *arg, const struct urt_log_record *r)
{
    struct fx_run *run = arg;
    if (run->n == run->cap) {
        run->cap = run->cap ? run->cap * 2 : 4096;
        run->v = realloc(run->v, run->cap * sizeof(*run->v));
        cr_assert_not_null(run->v);
    }
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < r->len; i++)
        h = (h ^ ((const uint8_t *)r->payload)[i]) * 16777619u;
    run->v[run->n++] = (struct fx_rec){.epoch = r->epoch, .gen = r->gen, .lsn = r->lsn, .tx_id = r->tx_id,
                                       .worker = r->worker, .len = r->len, .sum = h};
    return 0;
}

static void fx_cut(void *arg, const struct urt_log_cut *c)
{
    struct fx_run *run = arg;
    run->cuts++;
    run->cut_bytes += c->bytes;
}

static void fx_recover(const char *dir, unsigned flags, const char *what, struct fx_run *run)
{
    memset(run, 0, sizeof(*run));
    struct urt_log_recover_ops ops = {.record = fx_record, .cut = fx_cut};
    int rc = urt_log_recover(dir, flags, &ops, run, &run->out);
    cr_assert_eq(rc, 0, "%s recovery of %s: %d: %s", what, dir, rc, urt_last_error());
}

/* Extracts the fixture into a fresh temporary directory; returns DIR/sub. */
static char *fx_extract(const char *tgz, const char *sub, char **tmp)
{
    *tmp = crash_tmpdir("urt-fixture");
    int st = crash_sh("tar xzf '%s/%s' -C '%s'", URT_FIXTURES, tgz, *tmp);
    cr_assert_eq(st, 0, "tar xzf %s/%s -C %s: exit status %d", URT_FIXTURES, tgz, *tmp, st);
    char *dir = malloc(4200);
    cr_assert_not_null(dir);
    snprintf(dir, 4200, "%s/%s", *tmp, sub);
    return dir;
}

static bool fx_rec_same(const struct fx_rec *x, const struct fx_rec *y)
{
    return x->epoch == y->epoch && x->gen == y->gen && x->lsn == y->lsn && x->tx_id == y->tx_id &&
           x->worker == y->worker && x->len == y->len && x->sum == y->sum;
}

/* The first record where a and b differ, or the shorter length. */
static size_t fx_first_difference(const struct fx_run *a, const struct fx_run *b)
{
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n; i++)
        if (!fx_rec_same(&a->v[i], &b->v[i]))
            return i;
    return n;
}

static void fx_assert_same(const struct fx_run *a, const char *an, const struct fx_run *b, const char *bn)
{
    cr_assert_eq(b->out.durable_marker, a->out.durable_marker,
                 "the %s recovery reports durable marker %" PRIu64 ", the %s %" PRIu64, bn, b->out.durable_marker,
                 an, a->out.durable_marker);
    cr_assert_eq(b->out.replay_marker, a->out.replay_marker,
                 "the %s recovery reports replay marker %" PRIu64 ", the %s %" PRIu64, bn, b->out.replay_marker, an,
                 a->out.replay_marker);
    size_t d = fx_first_difference(a, b);
    cr_assert(a->n == b->n && d == a->n,
              "the %s recovery replays %zu records, the %s %zu; first difference at record %zu (%s: epoch %" PRIu64
              " tx %" PRIx64 ")",
              bn, b->n, an, a->n, d, d < a->n ? an : bn, d < a->n ? a->v[d].epoch : d < b->n ? b->v[d].epoch : 0,
              d < a->n ? a->v[d].tx_id : d < b->n ? b->v[d].tx_id : 0);
}

Test(wal_fixture, durable_marker_does_not_regress, .timeout = 60)
{
    char *tmp;
    char *dir = fx_extract("durable-marker-regresses.tgz", "trim", &tmp);
    struct fx_run dry, first, second;
    fx_recover(dir, URT_LOG_RECOVER_DRY_RUN, "dry-run", &dry);
    fx_recover(dir, 0, "first", &first);
    fx_recover(dir, 0, "second", &second);
    cr_log_info("fixture trim/: dry run marker %" PRIu64 "/%" PRIu64 " %zu records %u cuts; first %" PRIu64 "/%" PRIu64
                " %zu records %u cuts; second %" PRIu64 "/%" PRIu64 " %zu records %u cuts",
                dry.out.durable_marker, dry.out.replay_marker, dry.n, dry.cuts, first.out.durable_marker,
                first.out.replay_marker, first.n, first.cuts, second.out.durable_marker, second.out.replay_marker,
                second.n, second.cuts);
    cr_assert_gt(first.n, 0, "the fixture replays nothing: not the directory it should be");
    fx_assert_same(&first, "first", &second, "second");
    cr_assert_eq(second.cuts, 0, "the second recovery cut again (%u cuts, %" PRIu64 " bytes)", second.cuts,
                 second.cut_bytes);
    fx_assert_same(&first, "first real", &dry, "dry-run (before it)");
    cr_assert_eq(dry.cuts, first.cuts, "the dry run reports %u cuts, the real run made %u", dry.cuts, first.cuts);
    free(dry.v), free(first.v), free(second.v);
    crash_remove_tree(tmp);
    free(tmp), free(dir);
    leak_check();
}
