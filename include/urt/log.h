/*
 * urt/log.h — durable commits on the write-ahead log, checkpoints, recovery.
 *
 * With urt_config.log_dir set, every worker owns a log channel (its own file
 * in that directory) written through its own io_uring ring. A commit appends
 * one record to the channel of the worker it runs on, tagged with the open
 * epoch (its marker), and answers with the response it asked for:
 *   URT_COMMIT_ACCEPTED  — the record is queued in the channel buffer;
 *   URT_COMMIT_AVAILABLE — the same, the marker is known (urt_commit_marker);
 *                          for a transaction: after pre-commit, visible to others;
 *   URT_COMMIT_STORED    — the durable marker covers the commit's marker: the
 *                          record was written and a device flush covering it
 *                          completed (its channel's fdatasync; with log_sync
 *                          resolved to single_flush, the epoch file's
 *                          fdatasync chained behind the write and its
 *                          sync_file_range; with single_write, the write's own
 *                          RWF_DSYNC), every channel flushed that epoch,
 *                          and the marker was made durable: fdatasync'd into
 *                          the epoch file, or (single_write) carried by a log
 *                          write as a claim that recovery believes only if
 *                          that whole write is there.
 *                          It survives a process crash and a power loss on the
 *                          file systems docs/durability.md lists.
 * Group commit: records of many commits share one write + fdatasync.
 * Release: the stored commits a new durable marker covers are answered in
 * marker order by one task; with several workers, each time its callbacks
 * have run for a while (50 µs), the later half of what remains is left for
 * an idle worker to steal (a client that commits again from its callback
 * then lives there: busy clients spread over the workers, cheap ones stay
 * together). Answers
 * come in marker order within each piece; pieces taken by different
 * workers may overlap. One worker, or direct_commit_callback: strictly in
 * marker order.
 *
 * Destroy: urt_runtime_destroy (either mode) writes and syncs what the
 * channels hold before it returns, so every commit answered before destroy
 * began — ACCEPTED and AVAILABLE included — is replayed by the next recovery.
 *
 * Lifecycle of a struct urt_commit (caller-embedded, no allocation):
 *  1. The caller owns it, zeroed or not, until urt_log_commit() succeeds.
 *  2. From a successful urt_log_commit() until its callback runs, it belongs
 *     to the runtime: do not touch, reuse or free it, nor the record bytes.
 *  3. The callback runs exactly once, on a worker of the runtime (or, for
 *     commits still waiting when the runtime is destroyed, on the destroying
 *     thread with status -ECANCELED). status is 0, or -errno (-EIO: the write
 *     or fdatasync covering the record failed; -ENOSPC: the disk is full;
 *     the commit is not durable and a recovery does not replay it). On a
 *     full disk every stored commit is still answered, soon: -ENOSPC while
 *     its channel's writes fail (retried after a back-off of 1 ms doubling
 *     to 128 ms, so urt_log_stats().io_errors grows by a few a second), 0
 *     again as soon as space comes back, without a restart
 *     (docs/durability.md "On a full disk").
 *  4. From the callback on, the commit is the caller's again: the callback may
 *     free it or reuse it for the next urt_log_commit().
 *  5. A failed urt_log_commit() (-errno) leaves the commit with the caller and
 *     never runs the callback.
 */
#ifndef URT_LOG_H
#define URT_LOG_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The responses (enum urt_commit_response) are shared with transactions:
 * defined in urt/tx.h. */
#include <urt/tx.h>

struct urt_commit;
typedef void urt_log_commit_fn(struct urt_commit *c, int status, void *arg);

/* Runtime-private part of a commit: do not touch. */
struct urt_commit_private {
    struct urt_task task;          /* hop to a worker, callback delivery */
    struct urt_commit *next;       /* intrusive link (batch and release lists) */
    void *wal;
    const void *rec;
    uint64_t tx_id;
    uint64_t marker;
    uint64_t submit_ns;            /* latency stamp (0: not taken) */
    urt_log_commit_fn *cb;
    void *arg;
    uint32_t len;
    int32_t status;
    uint32_t response;
    uint32_t state;
};

struct urt_commit {
    struct urt_commit_private priv;
};

/* Appends one record (len bytes at rec, len <= 16 MiB) for transaction tx_id
 * and calls cb(c, status, arg) once the response is reached (rules above).
 * From a worker of rt the record goes to that worker's channel at once; from
 * any other thread the commit hops to a worker first (normal placement).
 * Returns 0, -EINVAL (NULL argument, bad response, len too large), -ENOTSUP
 * (the runtime has no log_dir and no durability source), -ERANGE (the
 * durability source gave marker 0), -ESHUTDOWN. Any thread. */
URT_API int urt_log_commit(urt_runtime *rt, struct urt_commit *c, uint64_t tx_id, const void *rec, uint32_t len,
                           enum urt_commit_response response, urt_log_commit_fn *cb, void *arg);

/* The commit's marker (the epoch of its record); valid in its callback. Any thread. */
URT_API uint64_t urt_commit_marker(const struct urt_commit *c);

/* Durability callback of the embedding engine: fn(marker, arg) runs on a
 * worker each time the durable marker advances, with strictly increasing
 * markers, before the commits it covers are released; calls are serialized.
 * Register before committing; NULL fn unregisters. Returns 0 or -ENOTSUP.
 * Any thread. */
typedef void urt_durable_fn(uint64_t marker, void *arg);
URT_API int urt_log_on_durable(urt_runtime *rt, urt_durable_fn *fn, void *arg);

struct urt_log_stats {
    uint64_t fsyncs;        /* group commits made durable (one fdatasync each: the
                               channel's, the epoch file's in a single-flush chain, or the
                               RWF_DSYNC of the write itself with single_write) */
    uint64_t flushes;       /* log writes submitted */
    uint64_t bytes;         /* log bytes written */
    uint64_t commits;       /* records appended */
    uint64_t io_errors;     /* failed log and epoch-file writes / syncs (a failed log write's
                               commits got its error); a write that keeps failing is retried
                               after a back-off, 1 ms doubling to 128 ms; also the next
                               segment files that could not be made (tried again, the
                               channel goes on in its file meanwhile) */
    uint64_t epoch;         /* the open epoch */
    uint64_t durable;       /* the durable marker (persisted in the epoch file) */
    uint64_t epoch_writes;  /* epoch-file writes (each fdatasync'd) */
    uint32_t sync_mode;     /* enum urt_log_sync chosen at open: URT_LOG_SYNC_STRICT,
                               URT_LOG_SYNC_SINGLE_FLUSH or URT_LOG_SYNC_SINGLE_WRITE
                               (docs/durability.md) */
    char fs[16];            /* the log directory's file system ("ext4", "btrfs", "fuse", ...) */
    uint64_t checkpoint;    /* the last checkpoint (urt_log_checkpoint), 0: none */
    uint64_t claims;        /* single_write: durable markers carried by log writes (claims) that
                               became durable, instead of epoch-file writes */
};
/* Reads the counters (relaxed: a snapshot, not a consistent cut). Returns 0
 * or -ENOTSUP. Any thread. */
URT_API int urt_log_stats(const urt_runtime *rt, struct urt_log_stats *out);

/* ---- checkpoints: a log that shrinks ----------------------------------------------- */

/* The engine's own state is persisted up to marker (<= the durable marker):
 * urt never replays a record at or below it again. The checkpoint is made
 * durable (the log directory's "checkpoint" file, replaced atomically), then
 * every closed segment file whose records are all at or below it is deleted
 * (channel files roll over into segments at log_segment_kb; files of earlier
 * sessions count as closed): truncated from its end in synced 4 MB steps,
 * then unlinked, so that freeing a segment never holds the log's own writes
 * on the device for long. Crash-safe at every point: a recovery replays
 * every stored commit above the last durable checkpoint and none at or below
 * it (urt_log_recovery.checkpoint), and deletes what was not deleted yet.
 * Blocks the caller for two or three fsyncs, plus one per 4 MB of each
 * segment it deletes; calls are serialized; a marker
 * at or below the current checkpoint only retries the deletions.
 * Returns the number of segment files deleted (>= 0), -EINVAL (NULL runtime,
 * marker above the durable marker), -ENOTSUP (no log_dir), or an I/O -errno
 * (the checkpoint did not advance). Any thread. */
URT_API int urt_log_checkpoint(urt_runtime *rt, uint64_t marker);

/* ---- an engine with its own log (an external durability source) ------------------ */

/* An engine that makes its records durable itself (its own log) and wants
 * URT_COMMIT_STORED answers from urt registers as the runtime's durability
 * source instead of giving it a log_dir:
 *  1. urt_durability_source(rt, &src) once, before the first commit, on a
 *     runtime without log_dir.
 *  2. Every commit — urt_log_commit(), and urt_tx_commit() after its
 *     pre-commit — calls src.assign(src.arg, tx_id, rec, len) on the
 *     committing thread (rec NULL, len 0 for a transaction: its records are
 *     the engine's own). The engine writes what it must and returns the
 *     marker (>= 1) that will cover it; 0 fails the commit with -ERANGE.
 *     assign must not block for long: it runs on a worker.
 *  3. The engine calls urt_durability_notify(rt, m) from any thread when
 *     everything up to marker m is durable. Every STORED commit with a marker
 *     <= m is then answered exactly once, in marker order, by tasks on the
 *     workers (or on the notifying thread with direct_commit_callback), after
 *     the on_durable observer (urt_log_on_durable) was told of m, on the
 *     notifying thread. Lower or repeated markers change nothing.
 *  4. ACCEPTED and AVAILABLE commits are answered right after assign.
 *  5. urt_runtime_destroy answers every STORED commit still waiting with
 *     -ECANCELED (once), on the destroying thread.
 * urt_log_stats reports commits and the durable marker (fs "external"). */
struct urt_durability_source {
    uint64_t (*assign)(void *arg, uint64_t tx_id, const void *rec, uint32_t len);
    void *arg;
};

/* Registers src (copied). Returns 0, -EINVAL (NULL runtime, source or
 * assign), -EEXIST (the runtime has a log_dir: urt's log is its source),
 * -EBUSY (a source is registered already), -ENOMEM. Any thread. */
URT_API int urt_durability_source(urt_runtime *rt, const struct urt_durability_source *src);

/* Everything up to marker is durable. Returns 0, -EINVAL (NULL runtime),
 * -ENOTSUP (no durability source registered). Any thread. */
URT_API int urt_durability_notify(urt_runtime *rt, uint64_t marker);

/* direct_commit_callback (urt_config): commit callbacks run where the
 * response is reached — a worker's completion handler for urt's log, the
 * thread calling urt_durability_notify for an external source — instead of
 * in a task. Such a callback must not block, must not destroy the runtime,
 * and holds up every other answer of its release list while it runs. */

/* ---- recovery --------------------------------------------------------------------- */

struct urt_log_record {
    uint64_t epoch, tx_id, lsn, gen;
    uint32_t worker;
    uint32_t len;
    const void *payload;   /* valid during the callback only */
};

struct urt_log_channel_info {
    const char *file;      /* name inside the directory */
    uint64_t gen;
    uint32_t worker;
    bool header_ok;        /* starts with a urt channel header */
    uint64_t size, valid_end, n_records, first_epoch, last_epoch;
};

struct urt_log_cut {
    const char *file;
    uint64_t offset;       /* the file is (or would be) truncated here */
    uint64_t bytes;        /* bytes removed (all that followed, zeros included) */
    const char *reason;    /* "checksum mismatch", "not durable (epoch > marker)", ... */
    bool corrupt;          /* damaged data (not merely records of a non-durable epoch) */
    bool middle;           /* valid records follow the damage (not a torn tail) */
};

struct urt_log_recover_ops {
    /* Replayed records, in epoch order (then by channel, then lsn). Return
     * non-zero to stop: urt_log_recover returns that value. */
    int (*record)(void *arg, const struct urt_log_record *r);
    void (*channel)(void *arg, const struct urt_log_channel_info *ch);
    void (*cut)(void *arg, const struct urt_log_cut *cut);
};

struct urt_log_recovery {
    uint64_t durable_marker;   /* from the epoch file and the claims in the channels */
    uint64_t replay_marker;    /* what was replayed up to (lower if damage was found) */
    uint64_t max_epoch;        /* largest epoch found: of any valid record before cutting, of a
                                  channel header, or the end of a window of epochs lost to damage
                                  (a runtime opening the log starts above it) */
    uint64_t max_gen;
    uint64_t replayed, cut_bytes;
    uint32_t channels, cuts;
    uint32_t broken_slots;     /* epoch-file slots (and claims) not believed: the first slot whose
                                  condition failed (its log bytes are gone) and every later one */
    uint64_t checkpoint;       /* the engine's last checkpoint (urt_log_checkpoint; 0: none):
                                  only records of epochs above it are replayed */
    uint32_t deleted;          /* channel files removed: every record at or below the checkpoint,
                                  or nothing readable (a segment file made ready for a roll
                                  that never came: empty, zeros, a torn first write) */
    uint32_t claims;           /* durable-marker claims found in the channels' valid records
                                  (log_sync single_write: the marker rides in the log write) */
    uint32_t epoch_slot_next;  /* internal: next epoch-file slot */
};

#define URT_LOG_RECOVER_DRY_RUN 0x1u   /* truncate nothing: report what would be cut */
#define URT_LOG_RECOVER_ALL 0x2u       /* record callback for every valid record, durable or not */
#define URT_LOG_RECOVER_FLAGS_ALL 0x3u

/* Opens log directory dir, locks it (refused with -EBUSY while another
 * runtime or recovery holds it), reads every channel, verifies checksums,
 * replays every record of every epoch <= the replay marker to ops->record in
 * epoch order (never a record of a later epoch; a transaction whole or not at
 * all), then makes the result durable: the epoch file is rewritten to hold
 * the durable marker without conditions (in place: recovery needs no new
 * space and works on a full disk), and torn or corrupt tails and
 * records of epochs above the replay marker are cut (truncate + fsync;
 * reported through ops->cut and noted in dir/cuts.log).
 * A fixpoint: any number of recoveries, with runtimes started on dir in
 * between, report the same markers and replay the same records (the second
 * cuts nothing), never lower the marker nor remove a record an earlier one
 * replayed. Under media damage (checksum failures or zeroed blocks followed
 * by valid durable records) the replay marker drops to the epoch before the
 * last valid record ahead of the damage, on every channel: replay stays a
 * consistent prefix of epochs, the epochs from there to the crash are cut
 * even on intact channels (and stay out of every later replay; a session
 * started afterwards commits above them and is replayed), and the cut
 * reports say so (corrupt, middle). docs/durability.md. ops and any of its members may be
 * NULL; out may be NULL. Returns 0, the record callback's non-zero value,
 * -ENOENT (no such directory), -ENOTDIR, -EMEDIUMTYPE (not a urt log
 * directory: it holds other files), -EBUSY, -EINVAL (flags), or an I/O
 * -errno (-ENOSPC only where an overwrite takes space, e.g. copy-on-write:
 * the message says to free space; URT_LOG_RECOVER_DRY_RUN replays without
 * writing). Any thread (not a worker of a runtime using dir). */
URT_API int urt_log_recover(const char *dir, unsigned flags, const struct urt_log_recover_ops *ops, void *arg,
                            struct urt_log_recovery *out);

#ifdef __cplusplus
}
#endif

#endif
