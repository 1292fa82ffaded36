/*
 * tests/property/prop_work.h — the random workload of one session of the
 * recovery property test: a runtime with a log on a directory, random
 * commits (plain urt_log_commit from the test's thread and from tasks on the
 * workers, transactions logged from the thread or from tasks on their lane,
 * committed STORED, AVAILABLE or ACCEPTED, some aborted), checkpoints,
 * waits and pauses, then a drain destroy. Every commit answered
 * URT_COMMIT_STORED with status 0 is recorded in the I/O trace
 * (pt_ack, prop_trace.h), every returned checkpoint too (pt_ckpt).
 *
 * Payloads: u64 id | u32 index | u32 count | filler (len - 16 bytes, a
 * function of id, index and len), so that a replayed record proves what it
 * is (pw_payload_check) and the test can tell a whole commit (indexes
 * 0..count-1) from a part of one. The record's tx id is the commit's id.
 */
#ifndef URT_TESTS_PROP_WORK_H
#define URT_TESTS_PROP_WORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <urt/urt.h>

struct pw_conf {
    uint32_t workers;        /* 1..4 */
    uint32_t channels;       /* log_channels (0: one per worker) */
    uint32_t segment_kb;     /* log_segment_kb */
    uint32_t prealloc_kb;    /* log_prealloc_kb */
    enum urt_log_sync sync;  /* log_sync */
    uint64_t epoch_us;       /* epoch_duration_us */
    uint32_t poll_us;        /* log_poll_us */
    bool o_direct;
    bool big;                /* larger records (rollovers at 64 KiB segments) */
    uint32_t ops;            /* workload operations in the session */
};

struct pw_stats {
    uint64_t commits, stored_acks, txs, aborts, checkpoints;
    uint64_t failures;       /* calls or answers that should not fail */
    char first_failure[256];
    uint32_t sync_mode;      /* urt_log_stats: the mode log_sync resolved to */
    char fs[16];
};

/* A random configuration for a session. */
void pw_conf_random(struct pw_conf *c, uint64_t *rng);
int pw_conf_describe(const struct pw_conf *c, char *buf, size_t len);
/* The runtime configuration of c on dir. */
void pw_conf_apply(const struct pw_conf *c, const char *dir, struct urt_config *cfg);

/* Runs one session (c->ops operations drawn from rng) with commit ids from
 * id_base + 1 on; fills st. 0, or the -errno of urt_runtime_create (message
 * in err). */
int pw_session(const char *dir, const struct pw_conf *c, uint64_t *rng, uint64_t id_base, struct pw_stats *st,
               char *err, size_t errlen);

/* ---- payloads -------------------------------------------------------------------------------- */

#define PW_HEAD 16u

static inline void pw_filler(uint8_t *p, uint32_t n, uint64_t id, uint32_t index, uint32_t len)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + (uint64_t)index * 0xBF58476D1CE4E5B9ull + len + 1;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static inline void pw_payload_fill(uint8_t *p, uint32_t len, uint64_t id, uint32_t index, uint32_t count)
{
    memcpy(p, &id, 8);
    memcpy(p + 8, &index, 4);
    memcpy(p + 12, &count, 4);
    pw_filler(p + PW_HEAD, len - PW_HEAD, id, index, len);
}

struct pw_head {
    uint64_t id;
    uint32_t index, count;
};

/* True when p (len bytes, record tx id tx_id) is what the workload wrote. */
static inline bool pw_payload_check(const void *p, uint32_t len, uint64_t tx_id, struct pw_head *h)
{
    uint8_t want[8192];
    if (len < PW_HEAD || len > sizeof(want))
        return false;
    memcpy(&h->id, p, 8);
    memcpy(&h->index, (const uint8_t *)p + 8, 4);
    memcpy(&h->count, (const uint8_t *)p + 12, 4);
    if (h->id != tx_id || !h->count || h->index >= h->count)
        return false;
    pw_filler(want, len - PW_HEAD, h->id, h->index, len);
    return !memcmp(want, (const uint8_t *)p + PW_HEAD, len - PW_HEAD);
}

#endif
