/*
 * tests/property/prop_damage.h — random damage to a log directory in memory
 * (a pi_dir, prop_image.h), for the recovery property test.
 *
 *   truncate      a channel file at a random byte or record boundary;
 *   zero_page     a 4 KiB page of a channel file's records, zeroed;
 *   flip_header   one bit of a record's 32-byte header (the channel header
 *                 record included);
 *   flip_payload  one bit of a record's payload or checksum;
 *   epochs        the epoch file: a bit of a valid slot flipped, a valid slot
 *                 zeroed, the file zeroed, truncated, or deleted;
 *   checkpoint    the checkpoint file: a bit flipped, truncated, or deleted
 *                 (only deletion with no_bad_checkpoint: a damaged checkpoint
 *                 file makes recovery refuse the directory);
 *   missing       a channel file deleted;
 *   extra         a channel file that should not be there: one a checkpoint
 *                 or a recovery deleted, back from the graveyard; a new
 *                 segment holding only its header block; an empty file with
 *                 a channel's next segment name.
 */
#ifndef URT_TESTS_PROP_DAMAGE_H
#define URT_TESTS_PROP_DAMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prop_image.h"

enum pd_kind {
    PD_NONE = 0,
    PD_TRUNCATE,
    PD_ZERO_PAGE,
    PD_FLIP_HEADER,
    PD_FLIP_PAYLOAD,
    PD_EPOCHS,
    PD_CHECKPOINT,
    PD_MISSING,
    PD_EXTRA,
    PD_KINDS
};

extern const char *const pd_names[PD_KINDS];

/* Applies damage of kind k (a random kind when k is PD_NONE) to X; grave
 * holds deleted files (may be empty). Returns the kind applied, PD_NONE when
 * X offers nothing to damage (desc says so). */
enum pd_kind pd_damage(struct pi_dir *X, const struct pi_dir *grave, enum pd_kind k, bool no_bad_checkpoint,
                       uint64_t *rng, char *desc, size_t len);

#endif
