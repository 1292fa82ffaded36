/*
 * tests/crash/crash_payload.h — what the crash child writes, so that the
 * checker can verify every replayed byte (shared by crash_child.c and
 * crash_check.c; header-only, no urt internals).
 *
 * Ids (the log record's tx_id) are unique across the cycles of one test:
 *
 *     bit 63..40  cycle   (the child's CYCLE argument, 1..2^24-1)
 *     bit 39..36  kind    (CRASH_KIND_*)
 *     bit 35..28  source  (which client, job driver or lane)
 *     bit 27..0   seq     (per source)
 *
 * Every record is a "transaction" of count records (a plain commit is one of
 * one); record index i of id has the payload
 *
 *     u64 id | u32 index | u32 count | filler of crash_payload_len(id, i) - 16 bytes
 *
 * with the filler a deterministic function of (id, index). So a replayed
 * record proves its own identity, and the checker can tell a whole
 * transaction (indexes 0..count-1, each once) from a part of one.
 *
 * Acknowledgements (the child's ACK_FD, a pipe; writes of 8 or 16 bytes are
 * atomic): the id alone (8 bytes) for a single-record commit, the id and the
 * record count (16 bytes) for a transaction (kind CRASH_KIND_TX). Only
 * commits answered URT_COMMIT_STORED with status 0 are acknowledged.
 */
#ifndef URT_TESTS_CRASH_PAYLOAD_H
#define URT_TESTS_CRASH_PAYLOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum crash_kind {
    CRASH_KIND_PLAIN = 1,     /* urt_log_commit, STORED, closed loop: acknowledged */
    CRASH_KIND_TX = 2,        /* urt_tx on a lane, several records, STORED: acknowledged */
    CRASH_KIND_JOB = 3,       /* a job's task commits, STORED: acknowledged */
    CRASH_KIND_LOOSE = 4,     /* urt_log_commit ACCEPTED / AVAILABLE: never acknowledged */
    CRASH_KIND_LOOSE_TX = 5,  /* urt_tx committed AVAILABLE: never acknowledged */
};

#define CRASH_PAYLOAD_HEAD 16u
#define CRASH_PAYLOAD_MAX 256u
#define CRASH_CYCLE_MAX ((1ull << 24) - 1)

static inline uint64_t crash_id(uint64_t cycle, unsigned kind, unsigned source, uint64_t seq)
{
    return cycle << 40 | (uint64_t)(kind & 0xf) << 36 | (uint64_t)(source & 0xff) << 28 | (seq & 0xfffffff);
}

static inline uint64_t crash_id_cycle(uint64_t id)
{
    return id >> 40;
}

static inline unsigned crash_id_kind(uint64_t id)
{
    return (unsigned)(id >> 36) & 0xf;
}

/* Payload bytes of record index of id: 16..255. */
static inline uint32_t crash_payload_len(uint64_t id, uint32_t index)
{
    uint64_t h = (id ^ (uint64_t)index * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    return CRASH_PAYLOAD_HEAD + (uint32_t)((h >> 33) % (CRASH_PAYLOAD_MAX - CRASH_PAYLOAD_HEAD));
}

static inline void crash_filler(uint8_t *p, uint32_t n, uint64_t id, uint32_t index)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + index + 1;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

/* Fills p (crash_payload_len(id, index) bytes) and returns the length. */
static inline uint32_t crash_payload_fill(uint8_t *p, uint64_t id, uint32_t index, uint32_t count)
{
    uint32_t len = crash_payload_len(id, index);
    memcpy(p, &id, 8);
    memcpy(p + 8, &index, 4);
    memcpy(p + 12, &count, 4);
    crash_filler(p + CRASH_PAYLOAD_HEAD, len - CRASH_PAYLOAD_HEAD, id, index);
    return len;
}

/* Parsed head of a replayed payload. */
struct crash_payload_head {
    uint64_t id;
    uint32_t index, count;
};

/* True when p (len bytes, record tx_id) is exactly what the child wrote;
 * *why names the first mismatch otherwise. */
static inline bool crash_payload_check(const void *p, uint32_t len, uint64_t tx_id, struct crash_payload_head *h,
                                       const char **why)
{
    uint8_t want[CRASH_PAYLOAD_MAX];
    if (len < CRASH_PAYLOAD_HEAD || len > CRASH_PAYLOAD_MAX)
        return *why = "payload length out of range", false;
    memcpy(&h->id, p, 8);
    memcpy(&h->index, (const uint8_t *)p + 8, 4);
    memcpy(&h->count, (const uint8_t *)p + 12, 4);
    if (h->id != tx_id)
        return *why = "payload id is not the record's tx id", false;
    if (h->count == 0 || h->index >= h->count)
        return *why = "record index not below the record count", false;
    if (len != crash_payload_len(h->id, h->index))
        return *why = "payload length is not the one written for this id and index", false;
    crash_filler(want, len - CRASH_PAYLOAD_HEAD, h->id, h->index);
    if (memcmp(want, (const uint8_t *)p + CRASH_PAYLOAD_HEAD, len - CRASH_PAYLOAD_HEAD))
        return *why = "payload bytes differ from what was written", false;
    return true;
}

#endif
