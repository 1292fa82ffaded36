/*
 * tx/wal_format.h — the on-disk format of urt's write-ahead log, and the
 * record reader shared by the writer's recovery, tools/urt-wal and the fuzzer.
 *
 * Directory (urt_config.log_dir):
 *   LOCK                      flock()ed by the process that owns the log
 *   epochs                    the durable-marker file (below)
 *   cuts.log                  text notes of what recoveries cut (wal_recover.c)
 *   checkpoint                the engine's checkpoint marker (urt_log_checkpoint)
 *   ch-<gen:16 hex>-<worker:4 hex>.wal   one log channel per worker and session,
 *   ch-<gen>-<worker>-<seg:6 hex>.wal    its later segments (log_segment_kb)
 * A session (one runtime) gets a new generation number gen, one above the
 * largest found; files of earlier sessions stay (recovery already cut them).
 *
 * Channel file: a sequence of records, 8-byte aligned, starting at offset 0:
 *
 *   off  size
 *   0    4    length    payload bytes (<= WAL_MAX_PAYLOAD)
 *   4    2    type      WAL_REC_* (0 never appears in a record: see terminator)
 *   6    2    flags     WAL_REC_F_END on the last record of a commit (version >= 2),
 *                       other bits 0
 *   8    8    epoch     the epoch (durability marker) the record belongs to
 *   16   8    tx id     the transaction (0 for the header record)
 *   24   8    lsn       channel sequence number, strictly increasing in a file
 *   32   len  payload
 *   32+len 4  crc32c    CRC32C (Castagnoli) of bytes [0, 32+len)
 *   then zero padding to a multiple of 8.
 *
 * The issue's {length, type, epoch, tx id, payload, crc32c} plus an lsn: after
 * a failed write the channel rewrites from the failed write's offset, and a
 * stale record of the failed write that happens to follow a new record at an
 * aligned boundary is recognized (its lsn is not above its predecessor's).
 *
 * The first record is WAL_REC_HEADER (payload struct wal_header_payload,
 * magic "URTWAL01").
 *
 * Claims (WAL_REC_MARKER, version 3; log_sync single_write, wal_chan.c): a
 * log write that the durable marker waits for may end with a claim record,
 * payload u64 marker p, tx id 0, flags WAL_REC_F_END (it belongs to no
 * commit), epoch max(p, the largest epoch already in the file) — never below
 * p, so a recovery whose replay limit is below p cuts it with everything
 * after it. It says: every record of every epoch <= p is on stable storage on
 * every channel, given that this channel's records up to the claim are (the
 * writer claims only what is durable elsewhere already, and writes the claim
 * with the records in one O_DIRECT|RWF_DSYNC write). A claim is therefore
 * believed only inside the channel's valid prefix (the scan reached it, so
 * every byte before it is there); recovery merges claims with the epoch-file
 * slots (wal_recover.c step 4). Claims are never replayed. Epochs never decrease along a file, so a file is a
 * sequence of epoch sections (records of one epoch are contiguous). Every
 * write ends with a terminator of WAL_TERMINATOR zero bytes (a header with
 * type 0), overwritten by the next write: whatever lies behind the last
 * record (preallocated zeros, the rest of a failed write) is never reached.
 *
 * Epoch file "epochs": EPOCH_SLOTS slots of 32 bytes, written round robin:
 *   0 u64 marker   8 u64 gen   16 u64 end   24 u16 worker   26 u16 magic
 *   WAL_EPOCH_MAGIC16   28 u32 crc32c of bytes [0, 28)
 * A slot says: every record of every epoch <= marker is on stable storage on
 * every channel, provided (when end != 0) that channel file ch-<gen>-<worker>
 * (segment gen >> WAL_SLOT_SEG_SHIFT) holds valid records up to offset `end`. The condition is how one device
 * flush covers both a log write and its marker (wal.c "single-flush
 * chain"): the log bytes and the slot are written, then the epoch file is
 * fdatasync'd; should the device have kept the slot but lost the log bytes
 * (power loss between the two writes), the condition fails and the slot is
 * ignored. Slots with end == 0 were written after the log's own fdatasync.
 * The durable marker is the largest marker of a valid slot whose condition
 * holds (0 if none); it was fdatasync'd before any commit of those epochs
 * was acknowledged `stored`. A recovery leaves slot 0 holding the marker
 * without a condition, then one WAL_SLOT_LIMIT slot per window of lost
 * epochs (below); the next session writes its slots after them. The file is
 * written at its full size (EPOCH_SLOTS slots of zeros) before the first
 * channel file exists, and recovery rewrites it in place, slot by slot
 * (wal_epochs.c), so that it needs no new block on a full disk; the format
 * did not change for it (files of every earlier version are read as before).
 *
 * Reader (wal_scan): walks records from offset 0; stops at the first of
 *   - end of data, or a zero header with no valid record after it
 *     (WAL_SCAN_END_CLEAN: the terminator, preallocated space);
 *   - a zero header FOLLOWED by a valid record that continues the prefix
 *     (WAL_SCAN_END_CORRUPT, "zeroed bytes in the middle of the log");
 *   - a length beyond the data or WAL_MAX_PAYLOAD, a type 0 with non-zero
 *     fields, unknown flag bits, a crc mismatch, a header record not
 *     first or a first record that is not a header, an lsn not above the
 *     previous one, an epoch below the previous one (WAL_SCAN_END_CORRUPT,
 *     with a reason); the valid prefix ends at the last good record.
 * After a corrupt end it looks (8-byte steps) for any later valid record with
 * a larger lsn: if there is one the damage is in the middle of the log (bit
 * rot, not a torn tail) and `resync_found` is set.
 *
 * CRC32C: ISA-L's crc32_iscsi (Debian libisal), a maintained library with
 * SSE4.2/PCLMUL/AVX-512 kernels chosen at run time and a portable fallback;
 * our own _mm_crc32 loop would only redo that. ISA-L's convention is a raw
 * register: crc32c(x) = ~crc32_iscsi(x, n, 0xFFFFFFFF) (checked against the
 * standard check value crc32c("123456789") = 0xE3069283 in the tests).
 */
#ifndef URT_TX_WAL_FORMAT_H
#define URT_TX_WAL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WAL_REC_HEADER 1u   /* first record of a channel file */
#define WAL_REC_COMMIT 2u   /* a committed transaction's (or log commit's) record */
#define WAL_REC_MARKER 3u   /* a durable-marker claim carried by a log write (version >= 3) */
#define WAL_REC_TYPE_MAX 3u

#define WAL_HDR_SIZE 32u
#define WAL_CRC_SIZE 4u
#define WAL_TERMINATOR 32u
#define WAL_MAX_PAYLOAD (16u << 20)
#define WAL_MAGIC "URTWAL01"
#define WAL_EPOCH_MAGIC16 0x4845u /* "EH" */
#define EPOCH_SLOT_SIZE 32u
#define EPOCH_SLOTS 4096u
/* A slot's gen field carries the channel file's segment in its top bits. */
#define WAL_SLOT_SEG_SHIFT 40
#define WAL_SLOT_GEN_MASK ((1ull << WAL_SLOT_SEG_SHIFT) - 1)
/* A slot with this gen is not a durable marker but a window of lost epochs
 * a recovery found under media damage: epochs marker+1 .. end are
 * incomplete, never replayed (that recovery cut their records; later
 * recoveries keep them out even once the damage itself is cut). end 0, as
 * written before windows had an end: up to the largest marker of the
 * file's other slots (that recovery's D). A later session's epochs start
 * above every window (wal_recover.c step 5). */
#define WAL_SLOT_LIMIT UINT64_MAX
/* The checkpoint file "checkpoint": u64 marker, u32 magic, u32 crc32c of [0, 12). */
#define WAL_CHECKPOINT_MAGIC 0x54504b43u /* "CKPT" */
#define WAL_CHECKPOINT_SIZE 16u
#define WAL_VERSION 3u       /* 2: commit records carry WAL_REC_F_END on their last one;
                                3: WAL_REC_MARKER claims (log_sync single_write) */
#define WAL_MARKER_PAYLOAD 8u /* a claim's payload: u64 marker */
#define WAL_REC_F_END 0x1u   /* the last record of its commit (a commit's records are contiguous) */

struct wal_header_payload {
    char magic[8];
    uint32_t version;
    uint32_t worker;
    uint64_t gen;
    uint64_t start_epoch;
};

static inline size_t wal_rec_size(size_t payload)
{
    return (WAL_HDR_SIZE + payload + WAL_CRC_SIZE + 7u) & ~(size_t)7u;
}

uint32_t wal_crc32c(const void *p, size_t n);
uint32_t wal_crc32c_update(uint32_t crc, const void *p, size_t n); /* raw register, start 0xFFFFFFFF */

/* Encodes a record at dst (wal_rec_size(len) bytes; padding zeroed); a
 * commit record encoded whole is a one-record commit (WAL_REC_F_END). */
void wal_rec_encode(void *dst, uint16_t type, uint64_t epoch, uint64_t tx_id, uint64_t lsn, const void *payload,
                    uint32_t len);
/* Encodes only the header; the payload is copied by the caller to dst+32,
 * then wal_rec_seal() writes the crc and padding. */
void wal_rec_encode_header(void *dst, uint16_t type, uint64_t epoch, uint64_t tx_id, uint64_t lsn, uint32_t len);
void wal_rec_seal(void *dst, uint32_t len);
/* Sets the flags of an encoded header (before wal_rec_seal). */
void wal_rec_set_flags(void *dst, uint16_t flags);

struct wal_rec {
    uint64_t off;      /* offset in the file */
    uint32_t len;
    uint16_t type, flags;
    uint64_t epoch, tx_id, lsn;
    const uint8_t *payload;
};

enum wal_scan_end { WAL_SCAN_END_CLEAN = 0, WAL_SCAN_END_CORRUPT = 1 };

struct wal_scan_result {
    uint64_t valid_end;    /* end of the last good record (the cut point) */
    uint64_t n_records;
    uint64_t first_epoch, last_epoch, last_lsn;
    enum wal_scan_end end;
    const char *reason;    /* why the scan stopped when corrupt (static string) */
    uint64_t bad_off;      /* where the scan stopped */
    bool nonzero_after;    /* bytes after valid_end are not all zero */
    bool resync_found;     /* a later valid record exists (damage in the middle) */
    uint64_t resync_off, resync_epoch; /* the first such record */
    bool header_ok;
    struct wal_header_payload header;
};

/* Record callback: return non-zero to stop the scan (that value is returned). */
typedef int wal_rec_fn(void *arg, const struct wal_rec *r);

/* Scans buf[0, n). Never reads outside it. Returns 0 or the callback's value. */
int wal_scan(const uint8_t *buf, size_t n, wal_rec_fn *fn, void *arg, struct wal_scan_result *out);

/* Epoch slot encode / check. */
struct wal_epoch_slot {
    uint64_t marker;
    uint64_t gen, end; /* end == 0: no condition */
    uint16_t worker;
};
void wal_epoch_slot_encode(void *dst, const struct wal_epoch_slot *s);
bool wal_epoch_slot_valid(const void *slot, struct wal_epoch_slot *out);

/* The checkpoint file's WAL_CHECKPOINT_SIZE bytes: encode / check (n: the
 * file's size). */
void wal_checkpoint_encode(void *dst, uint64_t marker);
bool wal_checkpoint_valid(const void *b, size_t n, uint64_t *marker);

#endif
