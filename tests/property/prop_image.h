/*
 * tests/property/prop_image.h — log directories in memory, and the directory
 * a crash leaves, rebuilt from an I/O trace (prop_trace.h).
 *
 * A pi_dir is a set of files (name, bytes): what the property test
 * materializes into a real directory, damages, reads back and compares.
 *
 * pi_replay walks a session's trace in sequence order from the directory the
 * session started on and can stop at any point T: it keeps, per file (an
 * inode: renames move it, unlink ends it), its content at the start and the
 * writes and truncations completed so far in completion order, the syncs and
 * sync_file_ranges completed, and the writes in flight. The image at T under
 * a crash model:
 *   PI_KILL  the process died at T, the page cache survives: every completed
 *            write, and of each write in flight nothing, all of it, or a
 *            prefix of 512-byte sectors (a write torn by the crash);
 *   PI_CUT   power lost at T, each file cut anywhere after its last sync
 *            as the device sees it: the writes that were durable (below),
 *            or that had reached the device (an O_DIRECT write that
 *            completed, a buffered one pushed by a sync_file_range of its
 *            range) before a device flush (any fsync/fdatasync, an
 *            RWF_DSYNC write) that completed, then a random prefix (in
 *            completion order) of the others, the next one possibly torn
 *            (an O_DIRECT write: any subset of its sectors);
 *   PI_DROP  power lost at T, unsynced data dropped (the power-loss suite's
 *            plfs): only the durable writes.
 * A write is durable at T when it was an RWF_DSYNC write that completed
 * before T, or when an fsync/fdatasync of its file started after it
 * completed (it was prepared after the write's completion was seen, or it
 * was linked behind the write) and ended before T. Names (create, rename, unlink) take effect at
 * once, as on plfs: the log fsyncs its directory before it relies on them.
 * Files that were unlinked stay in a graveyard, in two forms: as they were
 * when unlinked, for the "extra segment" damage (a deleted segment that
 * comes back: after a checkpoint's truncation steps, its header alone; after
 * recovery's cut, what the cut left), and as they were before their deletion
 * began (the truncations after their last write left out), for the
 * id -> epoch map of acknowledged commits.
 */
#ifndef URT_TESTS_PROP_IMAGE_H
#define URT_TESTS_PROP_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prop_trace.h"

struct pi_file {
    char name[PT_NAME];
    uint8_t *b;
    size_t len;
};

struct pi_dir {
    struct pi_file *f;
    size_t n, cap;
};

void pi_dir_free(struct pi_dir *d);
void pi_dir_copy(struct pi_dir *dst, const struct pi_dir *src);
struct pi_file *pi_dir_find(const struct pi_dir *d, const char *name);
/* Adds (or replaces) name with a copy of b[0, len). */
struct pi_file *pi_dir_put(struct pi_dir *d, const char *name, const void *b, size_t len);
void pi_dir_remove(struct pi_dir *d, const char *name);
/* Sorts by name (stable output for comparisons and messages). */
void pi_dir_sort(struct pi_dir *d);
/* Creates path (which must not exist) holding d's files and an empty LOCK.
 * 0 or -errno. */
int pi_dir_write(const struct pi_dir *d, const char *path);
/* Reads the log's files of path (channel files, epochs, checkpoint and
 * their .tmp) into d (emptied first). 0 or -errno. */
int pi_dir_read(struct pi_dir *d, const char *path);
/* Same names, same bytes. */
bool pi_dir_equal(const struct pi_dir *a, const struct pi_dir *b, char *why, size_t whylen);

enum pi_model { PI_KILL = 0, PI_CUT = 1, PI_DROP = 2 };
extern const char *const pi_model_names[3];

struct pi_replay;
struct pi_replay *pi_replay_new(const struct pi_dir *start, const struct pt_trace *t);
/* Applies the trace's events before sequence number T (T never decreases). */
void pi_replay_to(struct pi_replay *r, uint64_t T);
/* The directory at the current point under model m (random choices from
 * *rng), into out (emptied first). */
void pi_replay_image(const struct pi_replay *r, enum pi_model m, uint64_t *rng, struct pi_dir *out);
/* The files unlinked so far: as they were when unlinked, or (before_deletion)
 * before their deletion began. */
void pi_replay_graveyard(const struct pi_replay *r, bool before_deletion, struct pi_dir *out);
void pi_replay_free(struct pi_replay *r);

#endif
