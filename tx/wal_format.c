/*
 * tx/wal_format.c — record encoding, CRC32C and the record reader (format and
 * reader rules in wal_format.h). Pure functions over memory: no I/O, no
 * shared state, safe from any thread. The reader is the fuzz target.
 */
#include "tx/wal_format.h"

#include <isa-l/crc.h>
#include <string.h>

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint32_t wal_crc32c_update(uint32_t crc, const void *p, size_t n)
{
    return crc32_iscsi((unsigned char *)(uintptr_t)p, (int)n, crc);
}

uint32_t wal_crc32c(const void *p, size_t n)
{
    return ~wal_crc32c_update(0xFFFFFFFFu, p, n);
}

void wal_rec_encode_header(void *dst, uint16_t type, uint64_t epoch, uint64_t tx_id, uint64_t lsn, uint32_t len)
{
    uint8_t *d = dst;
    uint16_t zero = 0;
    memcpy(d + 0, &len, 4);
    memcpy(d + 4, &type, 2);
    memcpy(d + 6, &zero, 2);
    memcpy(d + 8, &epoch, 8);
    memcpy(d + 16, &tx_id, 8);
    memcpy(d + 24, &lsn, 8);
}

void wal_rec_set_flags(void *dst, uint16_t flags)
{
    memcpy((uint8_t *)dst + 6, &flags, 2);
}

void wal_rec_seal(void *dst, uint32_t len)
{
    uint8_t *d = dst;
    uint32_t crc = wal_crc32c(d, WAL_HDR_SIZE + len);
    memcpy(d + WAL_HDR_SIZE + len, &crc, 4);
    size_t used = WAL_HDR_SIZE + len + WAL_CRC_SIZE;
    memset(d + used, 0, wal_rec_size(len) - used);
}

void wal_rec_encode(void *dst, uint16_t type, uint64_t epoch, uint64_t tx_id, uint64_t lsn, const void *payload,
                    uint32_t len)
{
    wal_rec_encode_header(dst, type, epoch, tx_id, lsn, len);
    if (type == WAL_REC_COMMIT || type == WAL_REC_MARKER)
        wal_rec_set_flags(dst, WAL_REC_F_END); /* a whole commit; a claim belongs to none */
    if (len)
        memcpy((uint8_t *)dst + WAL_HDR_SIZE, payload, len);
    wal_rec_seal(dst, len);
}

/* Word at a time: recovery runs this over megabytes of preallocated,
 * zero-filled channel space on every start. */
static bool all_zero(const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            return false;
    }
    for (; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* The first 8-aligned offset at or after o (8-aligned) whose 8-byte word is
 * not zero, or n. A valid record never starts with a zero word (its type,
 * bytes 4-5, is not 0), so a search for one may skip zero words. */
static uint64_t next_nonzero_word(const uint8_t *buf, size_t n, uint64_t o)
{
    for (; o + 8 <= n; o += 8) {
        uint64_t w;
        memcpy(&w, buf + o, 8);
        if (w)
            return o;
    }
    return n;
}

/* Checks one record at off. Returns NULL if valid (fills r), else a reason. */
static const char *check_rec(const uint8_t *buf, size_t n, uint64_t off, struct wal_rec *r)
{
    if (n - off < WAL_HDR_SIZE)
        return "truncated header";
    const uint8_t *p = buf + off;
    uint32_t len = rd32(p);
    uint16_t type = rd16(p + 4);
    if (type == 0 || type > WAL_REC_TYPE_MAX)
        return "bad record type";
    if (rd16(p + 6) & ~WAL_REC_F_END)
        return "bad flags field";
    if (len > WAL_MAX_PAYLOAD)
        return "length too large";
    if (wal_rec_size(len) > n - off)
        return "record runs past the end of the file";
    uint32_t crc = rd32(p + WAL_HDR_SIZE + len);
    if (crc != wal_crc32c(p, WAL_HDR_SIZE + len))
        return "checksum mismatch";
    if (!all_zero(p + WAL_HDR_SIZE + len + WAL_CRC_SIZE, wal_rec_size(len) - WAL_HDR_SIZE - len - WAL_CRC_SIZE))
        return "non-zero padding";
    if (type == WAL_REC_MARKER && (len != WAL_MARKER_PAYLOAD || rd64(p + 16) != 0))
        return "malformed marker claim";
    r->off = off;
    r->len = len;
    r->type = type;
    r->flags = rd16(p + 6);
    r->epoch = rd64(p + 8);
    r->tx_id = rd64(p + 16);
    r->lsn = rd64(p + 24);
    r->payload = p + WAL_HDR_SIZE;
    return NULL;
}

/* The first valid record after off that continues the valid prefix (larger
 * lsn, epoch not below): damage before it is in the middle of the log. */
static bool find_resync(const uint8_t *buf, size_t n, uint64_t off, struct wal_scan_result *out)
{
    for (uint64_t o = off + 8; o + WAL_HDR_SIZE <= n; o += 8) {
        o = next_nonzero_word(buf, n, o); /* zeroed space cannot hold a record's start */
        if (o + WAL_HDR_SIZE > n)
            break;
        struct wal_rec r;
        if (!check_rec(buf, n, o, &r) && r.type != WAL_REC_HEADER && r.lsn > out->last_lsn &&
            r.epoch >= out->last_epoch) {
            out->resync_found = true;
            out->resync_off = o;
            out->resync_epoch = r.epoch;
            return true;
        }
    }
    return false;
}

/* Checks the record at off against the valid prefix so far: NULL or why not. */
static const char *check_next(const uint8_t *buf, size_t n, uint64_t off, const struct wal_scan_result *out,
                              struct wal_rec *r)
{
    const char *why = check_rec(buf, n, off, r);
    if (why)
        return why;
    bool first = out->n_records == 0;
    if (first && (r->type != WAL_REC_HEADER || r->len != sizeof(struct wal_header_payload) ||
                  memcmp(r->payload, WAL_MAGIC, 8)))
        return "first record is not a urt channel header";
    if (!first && r->type == WAL_REC_HEADER)
        return "header record after the start";
    if (!first && r->lsn <= out->last_lsn)
        return "lsn not increasing (stale record)";
    if (!first && r->epoch < out->last_epoch)
        return "epoch decreasing";
    return NULL;
}

int wal_scan(const uint8_t *buf, size_t n, wal_rec_fn *fn, void *arg, struct wal_scan_result *out)
{
    memset(out, 0, sizeof(*out));
    n &= ~(size_t)7u; /* records are 8-byte aligned: a ragged tail cannot hold one */
    uint64_t off = 0;
    int ret = 0;
    const char *why = NULL;
    while (off < n) {
        if (n - off >= WAL_HDR_SIZE && all_zero(buf + off, WAL_HDR_SIZE)) {
            /* Terminator or preallocated space: a clean end, unless valid
             * records follow (a zeroed block in the middle of the log). */
            if (find_resync(buf, n, off, out))
                why = "zeroed bytes in the middle of the log";
            break;
        }
        struct wal_rec r;
        if ((why = check_next(buf, n, off, out, &r)))
            break;
        if (out->n_records == 0) {
            memcpy(&out->header, r.payload, sizeof(out->header));
            out->header_ok = true;
            out->first_epoch = r.epoch;
        }
        out->n_records++;
        out->last_epoch = r.epoch;
        out->last_lsn = r.lsn;
        off += wal_rec_size(r.len);
        out->valid_end = off;
        if (r.type != WAL_REC_HEADER && fn) {
            ret = fn(arg, &r);
            if (ret)
                return ret;
        }
    }
    out->bad_off = off;
    if (why) {
        out->end = WAL_SCAN_END_CORRUPT;
        out->reason = why;
        if (!out->resync_found)
            find_resync(buf, n, off, out);
    }
    out->nonzero_after = !all_zero(buf + out->valid_end, n - out->valid_end);
    return ret;
}

void wal_epoch_slot_encode(void *dst, const struct wal_epoch_slot *e)
{
    uint8_t *d = dst;
    uint16_t magic = WAL_EPOCH_MAGIC16;
    memcpy(d, &e->marker, 8);
    memcpy(d + 8, &e->gen, 8);
    memcpy(d + 16, &e->end, 8);
    memcpy(d + 24, &e->worker, 2);
    memcpy(d + 26, &magic, 2);
    uint32_t crc = wal_crc32c(d, 28);
    memcpy(d + 28, &crc, 4);
}

bool wal_epoch_slot_valid(const void *slot, struct wal_epoch_slot *out)
{
    const uint8_t *s = slot;
    if (rd16(s + 26) != WAL_EPOCH_MAGIC16 || rd32(s + 28) != wal_crc32c(s, 28))
        return false;
    out->marker = rd64(s);
    out->gen = rd64(s + 8);
    out->end = rd64(s + 16);
    out->worker = rd16(s + 24);
    return true;
}

void wal_checkpoint_encode(void *dst, uint64_t marker)
{
    uint8_t *d = dst;
    uint32_t magic = WAL_CHECKPOINT_MAGIC;
    memcpy(d, &marker, 8);
    memcpy(d + 8, &magic, 4);
    uint32_t crc = wal_crc32c(d, 12);
    memcpy(d + 12, &crc, 4);
}

bool wal_checkpoint_valid(const void *b, size_t n, uint64_t *marker)
{
    const uint8_t *s = b;
    if (n != WAL_CHECKPOINT_SIZE || rd32(s + 8) != WAL_CHECKPOINT_MAGIC || rd32(s + 12) != wal_crc32c(s, 12))
        return false;
    *marker = rd64(s);
    return true;
}
