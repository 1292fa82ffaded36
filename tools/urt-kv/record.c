/*
 * tools/urt-kv/record.c — the log record format of urt-kv: encoding a
 * batch's operations and replaying a record into the table (recovery).
 *
 * A connection's batch of writes is one record, committed with
 * urt_log_commit (group commit across connections is the log's). A record
 * is a sequence of operations, each a 32-byte header and its bytes (host
 * byte order, little-endian on the machines urt runs on):
 *     u8 op, u8 0, u16 0, u32 klen, u64 version, i64 expire_ms, u64 vlen
 *     key[klen] value[vlen]
 *   op 1 SET     key = value, expiry expire_ms (Unix ms, 0: none): the key's
 *                whole state after SET, MSET, INCR (its result), EXPIRE and
 *                PERSIST (the value with its new expiry)
 *   op 2 DEL     key (also an EXPIRE in the past)
 *   op 4 FLUSH   vlen = 8 * KV_SHARDS: the flush's version in every shard
 *   op 5 NOP     nothing (written at shutdown by earlier urt-kv versions;
 *                still replayed, no longer written)
 * Expiry times are absolute, so a key's expiry survives a restart.
 *
 * Versions make replay exact (table.h): records of one key may sit on two
 * channels and replay in either order within an epoch; an operation applies
 * only if its version is newer than what the key holds (deletions leave
 * tombstones until recovery ends). Every operation carries the key's whole
 * state (no deltas: an EXPIRE is logged as a SET of the value with the new
 * expiry), so replaying the operations in any order gives the same table
 * (tests/kv/test_kv_table.c checks it against the live table).
 *
 * The decoder reads what a crash or bit rot may have left, after urt's own
 * checksum: it never reads outside the record and rejects what does not
 * parse (tests/fuzz/fuzz_kv.c fuzzes it). Single-threaded use per buffer; the
 * table does its own locking.
 */
#include <errno.h>
#include <string.h>

#include "kv.h"

enum { OP_SET = 1, OP_DEL = 2, OP_FLUSH = 4, OP_NOP = 5 }; /* 3 (a delta EXPIRE) is not used */

struct op_hdr {
    uint8_t op, zero8;
    uint16_t zero16;
    uint32_t klen;
    uint64_t version;
    int64_t expire_ms;
    uint64_t vlen;
};
_Static_assert(sizeof(struct op_hdr) == KV_OP_HDR, "op header is 32 bytes");

/* ---- log records -------------------------------------------------------------- */

static int put_op(struct kv_buf *rec, uint8_t op, const char *key, size_t klen, uint64_t version, int64_t expire,
                  const void *val, size_t vlen)
{
    struct op_hdr h = {.op = op, .klen = (uint32_t)klen, .version = version, .expire_ms = expire, .vlen = vlen};
    if (buf_reserve(rec, sizeof(h) + klen + vlen))
        return -ENOMEM;
    buf_put(rec, &h, sizeof(h));
    buf_put(rec, key, klen);
    buf_put(rec, val, vlen);
    return 0;
}

int rec_set(struct kv_buf *rec, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
            uint64_t version)
{
    return put_op(rec, OP_SET, key, klen, version, expire_ms, val, vlen);
}

int rec_del(struct kv_buf *rec, const char *key, size_t klen, uint64_t version)
{
    return put_op(rec, OP_DEL, key, klen, version, 0, NULL, 0);
}

int rec_flush(struct kv_buf *rec, const uint64_t versions[KV_SHARDS])
{
    return put_op(rec, OP_FLUSH, NULL, 0, 0, 0, versions, KV_SHARDS * sizeof(uint64_t));
}

int rec_replay(struct kv_table *t, const void *data, size_t len)
{
    const char *p = data;
    size_t off = 0;
    while (off < len) {
        struct op_hdr h;
        if (len - off < sizeof(h))
            return -EINVAL;
        memcpy(&h, p + off, sizeof(h));
        off += sizeof(h);
        if (h.klen > len - off || h.vlen > len - off - h.klen)
            return -EINVAL;
        const char *key = p + off, *val = p + off + h.klen;
        off += h.klen + h.vlen;
        if (h.op == OP_SET) {
            kv_apply_set(t, key, h.klen, val, h.vlen, h.expire_ms, h.version);
        } else if (h.op == OP_DEL) {
            kv_apply_del(t, key, h.klen, h.version);
        } else if (h.op == OP_NOP && h.klen == 0 && h.vlen == 0) {
            continue;
        } else if (h.op == OP_FLUSH && h.vlen == KV_SHARDS * sizeof(uint64_t)) {
            uint64_t v[KV_SHARDS];
            memcpy(v, val, sizeof(v));
            kv_apply_flush(t, v);
        } else {
            return -EINVAL;
        }
    }
    return 0;
}

