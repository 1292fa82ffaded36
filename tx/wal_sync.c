/*
 * tx/wal_sync.c — which way a log directory makes group commits durable
 * (urt_config.log_sync; docs/durability.md).
 *
 * Three ways (wal_chan.c submit_write):
 *   strict        write(log) -> fdatasync(log) -> write(epoch slot) ->
 *                 fdatasync(epochs). Holds on every file system that keeps
 *                 fdatasync's promise.
 *   single_write  one O_DIRECT write with RWF_DSYNC (the write and the
 *                 fdatasync of its range in one request: on a device without
 *                 FUA, one device write and one cache flush), into
 *                 preallocated, zero-filled space, ending with a claim of the
 *                 durable marker it makes true (wal_format.h): no epoch-file
 *                 write while the other channels hold nothing older. RWF_DSYNC
 *                 is the file's own fdatasync, so the write is durable where
 *                 fdatasync keeps its promise; the claim is believed only if
 *                 the whole write is there, which zero-filled space makes
 *                 checkable (a torn write ends the valid prefix before it).
 *                 The in-place overwrite is what makes it one device round
 *                 trip. Needs O_DIRECT (probed on the first channel file:
 *                 refused -> single_flush).
 *   single_flush  write(log) -> sync_file_range(log, wait) -> write(epoch
 *                 slot, conditional) -> fdatasync(epochs). One device cache
 *                 flush covers the log bytes and the marker. It holds only
 *                 where (a) a log write overwrites blocks that are already
 *                 allocated and written (zero-filled preallocation), in place,
 *                 so that no metadata of the log file changes, and (b) the
 *                 epoch file's fdatasync ends in a device-wide cache flush
 *                 issued after the log bytes reached the device.
 *
 * auto chooses at open, per directory (fstatfs and /proc/self/mountinfo):
 *   ext4, xfs          single_write (single_flush where O_DIRECT or
 *                      RWF_DSYNC is refused), unless mounted with nobarrier /
 *                      barrier=0 (no flush at all: strict, and nothing is
 *                      durable anyway) or data=journal (data goes through the
 *                      journal, not in place): strict;
 *   btrfs              copy-on-write moves every overwrite to new extents,
 *                      recorded only by that file's own fsync: single_write
 *                      (or single_flush, as above) only if FS_NOCOW_FL could
 *                      be set on every channel file
 *                      (wal_sync_nocow, while the file is still empty), else
 *                      strict;
 *   everything else    (FUSE, NFS, overlayfs, tmpfs, f2fs, zfs, ...) strict.
 *   log_prealloc_kb=0  strict: the writes append, (a) never holds.
 * A forced single_flush or single_write is taken as asked (the user vouches
 * for the file system; single_write still falls back to single_flush where
 * O_DIRECT is refused), except on btrfs, where neither ever holds on a
 * copy-on-write file: there, as under auto, every channel file gets
 * FS_NOCOW_FL or the log is strict; config validation refuses both with
 * log_prealloc_kb=0.
 *
 * The epoch file gets FS_NOCOW_FL on btrfs too, whatever the mode, while it
 * is still empty (wal_sync_nocow_epochs): recovery rewrites it in place
 * (tx/wal_epochs.c), which on a copy-on-write file would need free space.
 *
 * Set-up code: runs once in wal_open on the creating thread; only
 * wal_sync_set_nocow runs later too (a segment file prepared on a blocking
 * pool thread, tx/wal_seg.c), reading the choice, never changing it.
 */
#include "tx/wal_sync.h"

#include <errno.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#define FS_EXT4 0xEF53ul
#define FS_XFS 0x58465342ul
#define FS_BTRFS 0x9123683Eul

static const struct {
    unsigned long magic;
    const char *name;
} FS_NAMES[] = {
    {FS_EXT4, "ext4"},         {FS_XFS, "xfs"},           {FS_BTRFS, "btrfs"},    {0x01021994ul, "tmpfs"},
    {0x65735546ul, "fuse"},    {0x6969ul, "nfs"},         {0x794c7630ul, "overlayfs"}, {0xF2F52010ul, "f2fs"},
    {0x2fc12fc1ul, "zfs"},     {0x858458f6ul, "ramfs"},   {0xFF534D42ul, "cifs"},
};

static const char *fs_name(unsigned long magic)
{
    for (size_t i = 0; i < sizeof(FS_NAMES) / sizeof(FS_NAMES[0]); i++)
        if (FS_NAMES[i].magic == magic)
            return FS_NAMES[i].name;
    return "unknown";
}

/* Looks for a mount option of the mount holding dev in /proc/self/mountinfo:
 * true if any of the (comma-separated) options of that line is in bad[]. */
static bool mount_has(dev_t dev, const char *const *bad, char *found, size_t flen)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[4096];
    bool hit = false;
    while (!hit && fgets(line, sizeof(line), f)) {
        unsigned maj, mnr;
        if (sscanf(line, "%*u %*u %u:%u", &maj, &mnr) != 2 || makedev(maj, mnr) != dev)
            continue;
        for (char *tok = strtok(line, " ,\n"); tok && !hit; tok = strtok(NULL, " ,\n"))
            for (size_t i = 0; bad[i] && !hit; i++)
                if (!strcmp(tok, bad[i])) {
                    snprintf(found, flen, "%s", bad[i]);
                    hit = true;
                }
    }
    fclose(f);
    return hit;
}

static void choose_auto(int dirfd, unsigned long magic, struct wal_sync_choice *c)
{
    static const char *const bad[] = {"nobarrier", "barrier=0", "data=journal", NULL};
    struct stat st;
    char opt[32];
    if (magic == FS_EXT4 || magic == FS_XFS) {
        if (fstat(dirfd, &st) == 0 && mount_has(st.st_dev, bad, opt, sizeof(opt))) {
            c->mode = URT_LOG_SYNC_STRICT;
            snprintf(c->why, sizeof(c->why), "%s mounted with %s", c->fs, opt);
            return;
        }
        c->mode = URT_LOG_SYNC_SINGLE_WRITE;
        snprintf(c->why, sizeof(c->why), "%s: in-place overwrites of preallocated blocks", c->fs);
        return;
    }
    if (magic == FS_BTRFS) {
        c->mode = URT_LOG_SYNC_SINGLE_WRITE;
        c->need_nocow = true; /* confirmed or withdrawn by wal_sync_nocow per channel */
        snprintf(c->why, sizeof(c->why), "btrfs with no-CoW channel files");
        return;
    }
    c->mode = URT_LOG_SYNC_STRICT;
    snprintf(c->why, sizeof(c->why), "%s: only a file's own fdatasync is trusted", c->fs);
}

void wal_sync_portable(struct wal_sync_choice *c)
{
    c->portable = true;
    if (c->mode != URT_LOG_SYNC_SINGLE_FLUSH)
        return; /* strict, or single_write: their own reasons stand */
    snprintf(c->why, sizeof(c->why), "the portable backend (no io_uring): strict, not single_flush");
    c->mode = URT_LOG_SYNC_STRICT;
    c->need_nocow = false;
}

int wal_sync_choose(int dirfd, const struct urt_config *cfg, struct wal_sync_choice *c)
{
    memset(c, 0, sizeof(*c));
    struct statfs sf;
    if (fstatfs(dirfd, &sf))
        return -errno;
    c->fs_magic = (unsigned long)sf.f_type;
    snprintf(c->fs, sizeof(c->fs), "%s", fs_name(c->fs_magic));
    if (cfg->log_prealloc_kb == 0) {
        c->mode = URT_LOG_SYNC_STRICT;
        snprintf(c->why, sizeof(c->why), "log_prealloc_kb=0: log writes append");
    } else if (cfg->log_sync == URT_LOG_SYNC_STRICT) {
        c->mode = URT_LOG_SYNC_STRICT;
        snprintf(c->why, sizeof(c->why), "log_sync=strict");
    } else if (cfg->log_sync == URT_LOG_SYNC_SINGLE_FLUSH || cfg->log_sync == URT_LOG_SYNC_SINGLE_WRITE) {
        c->mode = cfg->log_sync;
        c->need_nocow = c->fs_magic == FS_BTRFS; /* never safe on btrfs's copy-on-write files */
        snprintf(c->why, sizeof(c->why), "log_sync=%s (forced, on %s)", wal_sync_name(c->mode), c->fs);
    } else {
        choose_auto(dirfd, c->fs_magic, c);
    }
    return 0;
}

const char *wal_sync_name(enum urt_log_sync mode)
{
    switch (mode) {
    case URT_LOG_SYNC_STRICT:
        return "strict";
    case URT_LOG_SYNC_SINGLE_FLUSH:
        return "single_flush";
    case URT_LOG_SYNC_SINGLE_WRITE:
        return "single_write";
    default:
        return "auto";
    }
}

void wal_sync_no_direct(struct wal_sync_choice *c, const char *what, int err)
{
    if (c->mode != URT_LOG_SYNC_SINGLE_WRITE)
        return;
    c->mode = c->portable ? URT_LOG_SYNC_STRICT : URT_LOG_SYNC_SINGLE_FLUSH; /* wal_sync_portable */
    char was[sizeof(c->why)];
    snprintf(was, sizeof(was), "%s", c->why);
    snprintf(c->why, sizeof(c->why), "%.70s; %s refused (%s): %s", was, what, strerror(err),
             c->portable ? "strict (the portable backend)" : "single_flush");
}

void wal_sync_nocow_epochs(const struct wal_sync_choice *c, int fd)
{
    int flags = 0;
    if (c->fs_magic != FS_BTRFS || ioctl(fd, FS_IOC_GETFLAGS, &flags) || (flags & FS_NOCOW_FL))
        return;
    flags |= FS_NOCOW_FL;
    if (ioctl(fd, FS_IOC_SETFLAGS, &flags)) {
        /* refused (compression forced, say): the file stays copy-on-write */
    }
}

bool wal_sync_set_nocow(const struct wal_sync_choice *c, int fd)
{
    if (!c->need_nocow || c->mode == URT_LOG_SYNC_STRICT)
        return true;
    int flags = 0;
    bool ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (ok && !(flags & FS_NOCOW_FL)) {
        flags |= FS_NOCOW_FL;
        ok = ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
             (flags & FS_NOCOW_FL);
    }
    return ok;
}

void wal_sync_nocow(struct wal_sync_choice *c, int fd)
{
    if (!wal_sync_set_nocow(c, fd)) {
        c->mode = URT_LOG_SYNC_STRICT;
        snprintf(c->why, sizeof(c->why), "btrfs: FS_NOCOW_FL could not be set on a channel file");
    }
}
