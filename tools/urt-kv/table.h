/*
 * tools/urt-kv/table.h — the key-value table of urt-kv, shared by every
 * worker and safe without a global lock.
 *
 * Lock striping (Herlihy & Shavit, "The Art of Multiprocessor Programming",
 * section 13.2.2, "lock striping"; the same idea as Java's
 * ConcurrentHashMap segments): KV_SHARDS independent chained hash tables,
 * each behind its own mutex. A key's shard comes from a fixed hash (FNV-1a
 * with MurmurHash3's 64-bit finalizer: the same in every run, because the
 * log and the snapshot name shards); its bucket inside the shard from
 * SipHash-1-3 (Aumasson & Bernstein, "SipHash: a fast short-input PRF",
 * 2012), seeded at start as Redis seeds its dict hash, so a client cannot
 * flood one chain — at most make one shard's lock busier.
 * An operation holds one shard's lock for a hash lookup and a copy, never
 * two locks at once; FLUSHALL clears the shards one at a time behind a flag
 * that holds every other operation off meanwhile (table.c F1-F2).
 *
 * Versions. Every write (set, delete, expire change, flush) gets a version
 * from its shard's counter, under the shard's lock, so the versions of one key
 * grow in the order its writes were applied. The log records carry them, and
 * recovery applies a record only if it is newer than what the key holds
 * (deletions leave tombstones during recovery): records of one key written by
 * two workers land on two channels and may replay in either order within an
 * epoch, and a snapshot taken while writes go on is fuzzy — both are made
 * exact by the versions (see persist.h).
 *
 * Expiry without scanning: each shard keeps a binary min-heap of its entries
 * with an expiry (each entry knows its heap slot), and at most a few timers
 * of the runtime armed (the `arm` hook: urt_spawn_at on a worker's timer
 * facility) for the earliest expiry; a timer pops what is due. A read of an
 * expired key that a timer has not removed yet treats it as absent and
 * removes it (Redis's lazy expiry). Expiry times are Unix milliseconds
 * (CLOCK_REALTIME), so they survive a restart.
 *
 * Memory: `mem` counts the bytes of entries (relaxed atomic adds), checked
 * against maxmemory by the command layer.
 */
#ifndef URT_KV_TABLE_H
#define URT_KV_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resp.h"

#define KV_SHARD_BITS 8
#define KV_SHARDS (1u << KV_SHARD_BITS)
#define KV_NO_EXPIRY 0

struct kv_entry {
    struct kv_entry *next;   /* chain */
    uint64_t hash;
    uint64_t version;
    int64_t expire_ms;       /* Unix ms, KV_NO_EXPIRY: none */
    uint32_t heap;           /* slot in the shard's expiry heap, UINT32_MAX: none */
    uint32_t klen;
    uint32_t vlen;
    bool tomb;               /* recovery only: a deleted key's version */
    char data[];             /* key bytes, then value bytes */
};

struct kv_shard {
    pthread_mutex_t lock;
    struct kv_entry **buckets;
    uint64_t mask;           /* buckets - 1 (a power of two) */
    uint64_t count;          /* entries in the chains (tombstones included) */
    uint64_t next_version;
    uint64_t floor;          /* recovery: records of versions below are already covered */
    struct kv_entry **heap;
    uint32_t heap_len, heap_cap;
    int64_t armed_ms;        /* earliest expiry a timer is armed for (INT64_MAX: none) */
    _Atomic uint64_t live;   /* keys (no tombstones), read by DBSIZE without the lock */
} __attribute__((aligned(64)));

/* Arms a timer for shard `shard` at Unix ms `due_ms` (called without the lock). */
typedef void kv_arm_fn(void *arg, uint32_t shard, int64_t due_ms);

struct kv_table {
    struct kv_shard shards[KV_SHARDS];
    uint64_t seed[2];
    _Atomic int64_t mem;     /* bytes held by entries */
    _Atomic uint64_t expired;/* keys removed because their time came (timers and lazy) */
    _Atomic int flushing;    /* a FLUSHALL is clearing the shards (table.c F1-F2) */
    pthread_mutex_t flush_lock;
    kv_arm_fn *arm;
    void *arm_arg;
    bool recovering;         /* apply_* keep tombstones; no timers armed */
};

int kv_table_init(struct kv_table *t, kv_arm_fn *arm, void *arm_arg);
void kv_table_destroy(struct kv_table *t);

/* The seeded hash of a key (its bucket inside its shard). */
uint64_t kv_hash(const struct kv_table *t, const void *key, size_t klen);
/* A key's shard: an unseeded hash, the same in every run and every build —
 * the log's FLUSH records and the snapshot's floors are per shard. */
uint32_t kv_shard_of(const void *key, size_t klen);
int64_t kv_now_ms(void); /* CLOCK_REALTIME in ms */

/* What a write did, for the log record and the reply. */
struct kv_write {
    uint64_t version;
    int64_t expire_ms;
    bool done;               /* false: a condition (NX/XX) kept it from happening */
    bool deleted;            /* EXPIRE in the past deleted the key */
};

#define KV_SET_NX 0x1u
#define KV_SET_XX 0x2u
#define KV_SET_KEEPTTL 0x4u
#define KV_SET_GET 0x8u      /* the old value is appended to `old` as a bulk (or nil) */

/* GET: appends the value as a bulk reply to out, or a nil. 0 or -ENOMEM. */
int kv_get(struct kv_table *t, const char *key, size_t klen, int64_t now, struct kv_buf *out);
/* 1 if the key exists (and has not expired). */
int kv_exists(struct kv_table *t, const char *key, size_t klen, int64_t now);
int kv_set(struct kv_table *t, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
           unsigned flags, int64_t now, struct kv_buf *old, struct kv_write *w);
int kv_del(struct kv_table *t, const char *key, size_t klen, int64_t now, struct kv_write *w);
/* INCRBY: -EINVAL (not an integer), -ERANGE (overflow), -ENOMEM; the new
 * value in *result, its text in digits (w->expire_ms: the kept TTL). */
int kv_incr(struct kv_table *t, const char *key, size_t klen, int64_t delta, int64_t now, int64_t *result,
            char digits[24], size_t *ndigits, struct kv_write *w);
/* EXPIRE at Unix ms `at` (KV_NO_EXPIRY: PERSIST): 1 set (or deleted when
 * at <= now: w->deleted), 0 missing. val (may be NULL) receives a copy of the
 * value: the log records the key's whole new state (record.c). */
int kv_expire_at(struct kv_table *t, const char *key, size_t klen, int64_t at, int64_t now, struct kv_buf *val,
                 struct kv_write *w);
/* TTL in ms: -2 missing, -1 no expiry. */
int64_t kv_ttl_ms(struct kv_table *t, const char *key, size_t klen, int64_t now);
/* FLUSHALL: versions[s] is the flush's version in shard s. */
void kv_flush(struct kv_table *t, uint64_t versions[KV_SHARDS]);
uint64_t kv_count(struct kv_table *t);
/* Keys with an expiry (INFO keyspace): each shard's heap, under its lock. */
uint64_t kv_count_expires(struct kv_table *t);

/* The expiry timer of shard s fired (it was armed for due_ms): removes what
 * is due at now and re-arms for the next expiry if no earlier timer is. */
void kv_expire_due(struct kv_table *t, uint32_t s, int64_t due_ms, int64_t now);

/* Recovery (t->recovering): apply a record's effect if its version is newer. */
void kv_apply_set(struct kv_table *t, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
                  uint64_t version);
void kv_apply_del(struct kv_table *t, const char *key, size_t klen, uint64_t version);
void kv_apply_flush(struct kv_table *t, const uint64_t versions[KV_SHARDS]);
/* Ends recovery: drops tombstones and expired keys, starts every shard's
 * versions above every version seen, arms the expiry timers. */
void kv_recovery_end(struct kv_table *t, int64_t now);

/* Visits every live entry of shard s under its lock (snapshots). */
typedef int kv_visit_fn(void *arg, const struct kv_entry *e);
int kv_shard_visit(struct kv_table *t, uint32_t s, kv_visit_fn *fn, void *arg, uint64_t *version_at);

#endif
