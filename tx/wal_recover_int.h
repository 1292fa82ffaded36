/*
 * tx/wal_recover_int.h — one recovery's working state, shared by the two
 * halves of recovery: tx/wal_recover.c (the algorithm in its header; steps
 * 1-3 and 6-8: find and scan the channels, cut, replay, persist) and
 * tx/wal_recover_marker.c (steps 4-5: what is durable, what damage lost).
 * Private to those two files. Threading: one recovery on one thread.
 */
#ifndef URT_TX_WAL_RECOVER_INT_H
#define URT_TX_WAL_RECOVER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urt/log.h>

#include "tx/wal_format.h"

struct rrec {
    uint64_t off, epoch, tx_id, lsn;
    uint32_t len;
    uint16_t flags, type;
};

struct rchan {
    char name[40];             /* ch-<gen:16>-<worker:4>[-<seg:6>].wal */
    uint64_t gen;
    uint32_t worker, seg;
    uint8_t *data;
    size_t size;
    struct wal_scan_result scan;
    struct rrec *recs;
    size_t n, cap;
    bool middle;             /* damage in the middle of durable data (step 5) */
    bool drop;               /* every record at or below the checkpoint: the file goes (step 8) */
    uint64_t cut_off;
    bool cut_corrupt;
    char cut_reason[224];
};

struct rslot {
    struct wal_epoch_slot s;
    bool holds;
};

/* Epochs lo+1 .. hi are incomplete (damage): never replayed (step 5). */
struct rwin {
    uint64_t lo, hi;
};

/* One recovery's working state. */
struct recovery {
    const char *dir;
    int dirfd;
    unsigned flags;
    struct rchan *ch;
    size_t n, cap;
    struct rslot *slots;     /* the epoch file's valid slots, then the channels' claims */
    size_t n_slots;
    uint8_t *epochs;         /* the epoch file as read (NULL: none), epochs_len bytes */
    size_t epochs_len;
    struct rwin *win;        /* lost epochs (step 5): windows persisted by earlier recoveries, then found now */
    size_t n_win, cap_win;
    struct urt_log_recovery res;
};

/* ---- wal_recover_marker.c (steps 4-5) ------------------------------------------------- */

/* res.checkpoint from the checkpoint file (0 if absent); -EBADMSG if damaged. */
int rec_read_checkpoint(struct recovery *r);
/* The epoch file's valid slots and the windows its limit slots hold. */
int rec_read_slots(struct recovery *r);
/* Whether a slot's condition holds (the channels as scanned, before any cut). */
bool rec_slot_holds(const struct recovery *r, const struct wal_epoch_slot *e);
/* The claims in the channels' valid prefixes join the slots. */
int rec_add_claims(struct recovery *r);
/* D (res.durable_marker), res.broken_slots. */
void rec_choose_durable(struct recovery *r);
/* The windows of lost epochs (damage found now, and earlier), merged; R (res.replay_marker). */
int rec_damage_windows(struct recovery *r);
/* The window holding epoch e, or NULL. */
const struct rwin *rec_window_of(const struct recovery *r, uint64_t e);
/* Whether a record of epoch e is replayed (above the checkpoint): durable, in no window. */
bool rec_replayable(const struct recovery *r, uint64_t e);

#endif
