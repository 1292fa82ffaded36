/*
 * tests/property/prop_shrink.h — a failing case of the recovery property
 * test on its own (its directories and acknowledgements), shrunk to a small
 * one that still fails the same way, saved and loaded as a fixture.
 *
 * Shrinking (ps_shrink) repeats, while any step keeps the failure: delete a
 * channel file (from both U and X), delete the checkpoint file, delete the
 * epoch file or zero its valid slots one at a time, cut a channel file
 * (both) at the shortest record boundary of U's valid prefix that still
 * fails, drop acknowledgements. "The same way": the failure's text up to its
 * first digit or colon (its check, not its numbers).
 *
 * On disk (ps_save / ps_load): DIR/u and DIR/x (the log files), DIR/case.txt:
 *   seed <n>
 *   ck_min <n>
 *   promised <0|1>
 *   damage <text>
 *   ack <id hex> <count> <epoch> <session>     (one line each)
 * Fixtures are such directories packed as tests/fixtures/property-<seed>.tgz
 * (tests/fixtures/README.md).
 */
#ifndef URT_TESTS_PROP_SHRINK_H
#define URT_TESTS_PROP_SHRINK_H

#include "prop_check.h"

struct ps_case {
    struct pi_dir U, X;
    struct pc_ack *acks;
    size_t n_acks;
    uint64_t seed, ck_min;
    bool promised;
    char damage[600];
};

void ps_free(struct ps_case *c);
/* Checks c (a dry run, two recoveries and the model, no runtime) in a fresh
 * directory under scratch. */
bool ps_check(const struct ps_case *c, const char *scratch, struct pc_result *res);
/* Shrinks c in place while it fails like `why` (which it updates). Returns
 * the number of steps kept. */
size_t ps_shrink(struct ps_case *c, const char *scratch, char *why, size_t whylen);
int ps_save(const struct ps_case *c, const char *dir);
int ps_load(struct ps_case *c, const char *dir);

#endif
