/*
 * tx/wal_sync.h — the choice between the strict and the single-flush way of
 * making a group commit durable (design in wal_sync.c).
 */
#ifndef URT_TX_WAL_SYNC_H
#define URT_TX_WAL_SYNC_H

#include <stdbool.h>

#include <urt/config.h>

struct wal_sync_choice {
    enum urt_log_sync mode;   /* URT_LOG_SYNC_STRICT, _SINGLE_FLUSH or _SINGLE_WRITE */
    bool need_nocow;          /* btrfs: every channel file must take FS_NOCOW_FL */
    unsigned long fs_magic;   /* statfs f_type of the log directory */
    char fs[16];              /* its name ("ext4", "btrfs", "fuse", ... "unknown") */
    char why[128];            /* one line: why this mode */
    bool portable;            /* the runtime runs on the portable backend: never single_flush */
};

/* Decides for the directory open at dirfd. Returns 0 or -errno (fstatfs). */
int wal_sync_choose(int dirfd, const struct urt_config *cfg, struct wal_sync_choice *c);
/* For a channel file just created (still empty): sets FS_NOCOW_FL where the
 * choice needs it; if it does not take, the choice falls back to strict. */
void wal_sync_nocow(struct wal_sync_choice *c, int fd);
/* The same without the fall-back, for a later segment file (the choice is
 * fixed once the workers run): true when the file needs no FS_NOCOW_FL or
 * took it. Any thread (reads c only). */
bool wal_sync_set_nocow(const struct wal_sync_choice *c, int fd);
/* The epoch file on btrfs, while it is still empty: FS_NOCOW_FL where the
 * file system takes it, whatever the sync mode, so that recovery's in-place
 * rewrite (tx/wal_epochs.c) overwrites its blocks instead of needing new
 * ones on a full disk. Best effort: a copy-on-write epoch file is as
 * correct, only not rewritable without free space. */
void wal_sync_nocow_epochs(const struct wal_sync_choice *c, int fd);
/* single_write without O_DIRECT or RWF_DSYNC (what was refused, errno):
 * the choice falls back to single_flush (strict on the portable backend,
 * wal_sync_portable); why says which. */
void wal_sync_no_direct(struct wal_sync_choice *c, const char *what, int err);
/* The runtime runs on the portable backend (no io_uring): single_flush
 * becomes strict (why says so), here and when single_write falls back
 * (wal_sync_no_direct). single_flush's promise rests on a chain of four
 * operations across two files ending in one device flush; single_write's is
 * one O_DIRECT write made durable by the file's own fdatasync (RWF_DSYNC in
 * the same pwritev2, or the write then fdatasync of that file, a two-link
 * chain the pool runs in order and cuts after a failed or short write), which
 * the pool keeps as the ring does. strict stays strict. */
void wal_sync_portable(struct wal_sync_choice *c);
/* "strict", "single_flush", "single_write". */
const char *wal_sync_name(enum urt_log_sync mode);

#endif
