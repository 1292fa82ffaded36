/*
 * tests/property/prop_check.h — what the recovery property test checks on
 * one case, and the model it checks against.
 *
 * A case: U, the directory a crash left (prop_image.h, from a session's
 * trace, at a stop point, under a crash model); X, U after injected damage
 * (X == U when none); the commits acknowledged URT_COMMIT_STORED before the
 * stop (with their epochs); the last checkpoint that returned before it.
 *
 * The model (pm_expect): what recovery must report and replay on a
 * directory, from docs/durability.md and tx/wal_recover.c's header, computed
 * from the bytes by its own code (the record reader wal_scan and the slot
 * and checkpoint decoders are shared, the rules are not):
 *   - the checkpoint: 0 without a file, -EBADMSG expected when it is damaged;
 *   - D: the epoch file's valid slots and the claims in the channels' valid
 *     prefixes, sorted by marker; D is the largest marker before the first
 *     slot whose condition fails (cumulative), and never below the checkpoint;
 *   - windows of lost epochs g..M: one per channel damaged in the middle
 *     (its valid prefix ends on damage followed by a valid record of an
 *     epoch <= D; g: its last valid record's epoch, else its header's start
 *     epoch, else its generation's; M: the largest epoch in the directory or
 *     D), and those the epoch file's limit slots hold (an earlier recovery
 *     found them); where X damaged U the same is computed from the bytes
 *     (the first changed byte, an intact record of U after it) and must
 *     agree; R: D, or the start of the window D lies in;
 *   - the replay: every commit of U whose records are all intact in X (same
 *     bytes, same file), of an epoch above the checkpoint, at most D and in
 *     no window, in epoch order (ties: generation, worker, lsn) — whole
 *     commits, every epoch up to R, none lost to damage.
 *
 * pc_check runs, on a copy of X: a dry run, a recovery, a second recovery,
 * and (when asked) a runtime started and destroyed on the directory and a
 * third recovery, and fails (with a description) unless:
 *   (a) fixpoint: the dry run reports what the first recovery does; the
 *       second (and third) report the same durable marker and replay limit,
 *       replay the same records, cut nothing and leave the files as the
 *       first left them;
 *   (b) the first recovery reports the model's checkpoint, D and R and
 *       replays exactly the model's records, each payload what the workload
 *       wrote; damage the model calls "middle" is reported as a corrupt,
 *       middle cut of that channel;
 *   (c) every acknowledged commit above the checkpoint is replayed from U
 *       (by the model of U: it is whole in U and its epoch is <= R(U)), when
 *       the crash model and the sync mode promise it; a commit the model of
 *       X does not replay is then lost only to the damage X - U.
 */
#ifndef URT_TESTS_PROP_CHECK_H
#define URT_TESTS_PROP_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urt/urt.h>

#include "prop_image.h"
#include "prop_work.h"

/* A replayed (or expected) record. */
struct pc_rec {
    uint64_t id, epoch, gen, lsn;
    uint32_t worker, index, count, len;
};

struct pc_cut {
    char file[PT_NAME];
    uint64_t offset, bytes;
    bool corrupt, middle;
    char reason[160];
};

struct pc_run {
    int rc;
    char err[320];
    struct urt_log_recovery out;
    struct pc_rec *v;
    size_t n, cap;
    struct pc_cut *cuts;
    size_t n_cuts;
    char bad[200];           /* a payload that is not what was written, or replay out of order */
    struct pi_dir after;     /* the directory's log files after the run */
};

void pc_run_free(struct pc_run *r);
/* urt_log_recover(dir, flags) collecting records and cuts; reads the
 * directory back. */
void pc_recover(const char *dir, unsigned flags, struct pc_run *r);

/* An acknowledged commit. */
struct pc_ack {
    uint64_t id, epoch, seq;
    uint32_t count, session;
};

struct pm_expect {
    int rc;                  /* 0, or -EBADMSG: the checkpoint file is damaged */
    uint64_t ck, D, R;
    struct pc_rec *v;        /* the replay, in order */
    size_t n;
    struct pc_rec *all;      /* every record of a whole commit intact in X, replayed or not */
    size_t n_all;
    uint64_t win_lo[16], win_hi[16]; /* windows of lost epochs lo+1..hi, merged */
    int n_win;
    char middle[4][PT_NAME]; /* channels with damage in the middle */
    int n_middle;
    char why[256];           /* why R < D, if it is */
};

void pm_expect(const struct pi_dir *X, const struct pi_dir *U, struct pm_expect *e);
void pm_expect_free(struct pm_expect *e);

struct pc_case {
    uint64_t seed;
    const struct pi_dir *U, *X;
    const char *damage;      /* what X - U is ("none") */
    const struct pc_ack *acks;
    size_t n_acks;
    uint64_t ck_min;         /* the last checkpoint returned before the stop */
    bool acks_promised;      /* (c) applies: the crash model and the sync mode promise it */
    const struct pw_conf *restart; /* non-NULL: a runtime with this configuration in between */
    const char *dir;         /* where X is written (must not exist) */
};

struct pc_result {
    bool ok;
    char why[1200];
    struct pc_run first;     /* the first recovery of X (its replay: what survives) */
    uint64_t acks_lost_to_damage, acks_checked;
};

bool pc_check(const struct pc_case *c, struct pc_result *res);
void pc_result_free(struct pc_result *res);

#endif
