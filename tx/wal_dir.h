/*
 * tx/wal_dir.h — the log directory's helpers (tx/wal_dir.c), private to the
 * log: recovery (tx/wal_recover.c) uses them; wal_check_dir and wal_lock_dir
 * are declared in tx/wal.h for the runtime.
 */
#ifndef URT_TX_WAL_DIR_H
#define URT_TX_WAL_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wal_epoch_slot;

/* "ch-<gen>-<worker>.wal" or "ch-<gen>-<worker>-<seg>.wal" (seg 0 for the first). */
bool wal_parse_channel_name(const char *s, uint64_t *gen, uint32_t *worker, uint32_t *seg);
/* The whole file dir/name read into malloc'd memory (*out, *size): 0, -ENOENT or -errno. */
int wal_read_whole(int dirfd, const char *name, uint8_t **out, size_t *size);
/* The whole file mapped read-only (*out NULL for an empty file): 0 or -errno. */
int wal_map_whole(int dirfd, const char *name, uint8_t **out, size_t *size);

/* wal_epochs.c: recovery makes the epoch file img (EPOCH_SLOTS slots: D
 * at 0 without a condition, the windows after it), in place, no new block
 * (a full disk), crash-safe: 0, -EFBIG when the file is absent or short (or
 * has no free slot for its copies: replace it then), or -errno. marker is
 * D; holds says whether a slot's condition holds. */
typedef bool wal_slot_holds_fn(void *arg, const struct wal_epoch_slot *s);
int wal_epochs_rewrite(int dirfd, const uint8_t *img, uint64_t marker, wal_slot_holds_fn *holds, void *arg);
/* The same by a new file (epochs.tmp, fdatasync, rename, directory fsync):
 * needs 128 KiB of free space. */
int wal_epochs_replace(int dirfd, const uint8_t *img);
#if URT_FAULT_INJECTION
/* Test builds: (phase << 32 | seed): the next rewrites end in a power loss
 * during that phase (1-4: any seeded subset of its slot writes kept, some
 * torn; 5: after the last phase, before recovery's cuts), returning -EIO. */
extern _Atomic uint64_t wal_epochs_crash;
#endif

#endif
