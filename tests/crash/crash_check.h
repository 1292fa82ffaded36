/*
 * tests/crash/crash_check.h — the crash machinery shared by the kill -9 test
 * (tests/unit/test_wal_crash.c, tests/stress/test_wal_crash_long.c) and the
 * power-loss drivers (tests/powerloss/test_powerloss.c).
 *
 * One cycle, as the tests run it:
 *   1. crash_run(): fork + exec tests/crash/crash_child on a directory, read
 *      its acknowledgements from a pipe while it runs, SIGKILL it at the
 *      moment the kill plan says, drain the pipe to EOF, reap it (it must
 *      have died of the SIGKILL: anything else is a failure that names its
 *      exit code; the child printed why on stderr).
 *   2. (the power-loss drivers drop unsynced data here)
 *   3. crash_cycle_check(): a dry run first (URT_LOG_RECOVER_DRY_RUN), then
 *      recover the directory collecting every replayed record, verify it
 *      against the acknowledgements (crash_verify), recover once more at
 *      once (the dry run and this repeat must report the same markers and
 *      records as the first real run), create
 *      a runtime on the directory and destroy it (drain), recover again and
 *      check that the second recovery reports a durable marker >= the first
 *      and replays exactly the same records, and that nothing replayed by an
 *      earlier cycle is missing (crash_history).
 *
 * What crash_verify() checks (the payload format is crash_payload.h):
 *   - every replayed payload is byte for byte what the child wrote for its
 *     id and record index;
 *   - no (id, index) is replayed twice;
 *   - every id is whole: indexes 0..count-1 all present, in one epoch;
 *   - replay is in non-decreasing epoch order and (unless RECOVER_ALL) no
 *     record lies above the reported replay marker;
 *   - every acknowledged id is replayed whole (a transaction with the record
 *     count its acknowledgement gave).
 * Problems are counted with the first one described, so that a caller can
 * assert (crash_assert_verdict) or only report (single_flush on plfs).
 *
 * Criterion assertions are used only on the test's main thread.
 */
#ifndef URT_TESTS_CRASH_CHECK_H
#define URT_TESTS_CRASH_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <urt/urt.h>

#include "crash_payload.h"

/* ---- acknowledgements -------------------------------------------------------------- */

struct crash_ack {
    uint64_t id;
    uint32_t count;  /* records of the id (1 unless a transaction) */
};

struct crash_acks {
    struct crash_ack *v;
    size_t n, cap;
    uint64_t n_tx, n_records;   /* acknowledged transactions, records they cover */
};

void crash_acks_free(struct crash_acks *a);

/* ---- running the child ---------------------------------------------------------------- */

struct crash_child_opts {
    const char *dir;
    uint64_t cycle;           /* 1..2^24-1, unique per test run on one directory */
    uint32_t workers;
    uint32_t prealloc_kb;
    const char *log_sync;     /* "auto", "strict", "single_flush" */
};

struct crash_kill_plan {
    bool after_ack;           /* wait for the first acknowledgement first (else: from the exec) */
    uint64_t delay_us;        /* then this long (acks are read meanwhile) */
};

/* Runs one cycle of the child (step 1 above); appends its acknowledgements
 * to acks. Returns false when no acknowledgement came before the kill. */
bool crash_run(const struct crash_child_opts *o, const struct crash_kill_plan *k, struct crash_acks *acks);

/* ---- recovery -------------------------------------------------------------------------- */

struct crash_rec {
    uint64_t id, epoch;
    uint32_t index, count, len, sum;   /* sum: FNV-1a of the payload */
};

struct crash_cut_seen {
    char file[64];
    char reason[96];
    uint64_t offset, bytes;
    bool corrupt, middle;
};

#define CRASH_CUTS_KEPT 16
struct crash_replay {
    struct crash_rec *v;
    size_t n, cap;
    unsigned flags;
    uint64_t last_epoch;
    uint64_t bad_bytes, bad_order;     /* counted while replaying */
    char first_bad[256];
    struct urt_log_recovery out;
    int rc;
    uint32_t n_cuts;
    struct crash_cut_seen cuts[CRASH_CUTS_KEPT];
};

/* urt_log_recover(dir, flags, ...) collecting every record (each payload
 * read in full and checked) and every cut; rp->rc is its return value. */
int crash_recover(const char *dir, unsigned flags, struct crash_replay *rp);
void crash_replay_free(struct crash_replay *rp);

/* Sorts rp->v by (id, index); crash_verify and the comparisons need it. */
void crash_replay_sort(struct crash_replay *rp);

/* ---- verdicts -------------------------------------------------------------------------- */

struct crash_verdict {
    uint64_t bad_bytes, bad_order, above_marker, duplicates, partial_tx;
    uint64_t lost_acks;              /* acknowledged ids not replayed whole */
    uint64_t checked_acks, checked_tx;
    char first[320];                 /* the first problem, described */
};

/* Checks a sorted replay against acks (NULL: structure only). */
void crash_verify(const struct crash_replay *rp, const struct crash_acks *acks, struct crash_verdict *v);
uint64_t crash_verdict_problems(const struct crash_verdict *v);
/* cr_assert that v has no problem; ctx prefixes the message (e.g. "cycle 12"). */
void crash_assert_verdict(const char *ctx, const struct crash_verdict *v);

/* Records of a (sorted) missing from b (sorted), or present with other
 * bytes or epoch; *first describes the first. */
uint64_t crash_replay_missing(const struct crash_replay *a, const struct crash_replay *b, char *first, size_t len);

/* ---- history across cycles ----------------------------------------------------------- */

struct crash_key {
    uint64_t id;
    uint32_t index, sum;
};
struct crash_history {
    struct crash_key *v;   /* sorted */
    size_t n;
};
/* How many records of h are missing from rp (sorted) or changed; then h
 * becomes rp's set. */
uint64_t crash_history_advance(struct crash_history *h, const struct crash_replay *rp, char *first, size_t len);
void crash_history_free(struct crash_history *h);

/* ---- one cycle's checks --------------------------------------------------------------- */

struct crash_cycle_result {
    struct crash_verdict verdict;          /* the first recovery against the acks */
    uint64_t durable1, durable2, replayed, cuts;
    uint64_t second_missing, second_extra; /* second recovery against the first */
    uint64_t history_missing;              /* earlier cycles' records missing now */
    uint64_t dry_mismatch, repeat_mismatch;/* records (or markers: 1) where the dry run before /
                                              the repeat right after differ from the first */
    char second_first[320], history_first[320], dry_first[320], repeat_first[320];
};

/* Step 3 above, without assertions about the log's promises (only about the
 * test's own machinery): fills res. rt_cfg is the runtime created between
 * the two recoveries (its log_dir is set to dir here). */
void crash_cycle_check(const char *dir, const struct crash_acks *acks, struct crash_history *hist,
                       const struct urt_config *rt_cfg, struct crash_cycle_result *res);
/* cr_assert every promise on res (ctx prefixes the messages). */
void crash_assert_cycle(const char *ctx, const struct crash_cycle_result *res);

/* ---- small utilities ------------------------------------------------------------------- */

/* mkdtemp under $TMPDIR (or /tmp); returns a malloc'd path. */
char *crash_tmpdir(const char *prefix);
/* rm -r of a directory tree of plain files (one level of subdirectories). */
void crash_remove_tree(const char *dir);
/* system() with a formatted command; returns the exit status (-1 if not exited). */
int crash_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
