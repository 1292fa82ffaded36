/*
 * tools/urt-load/kvtable.h — the in-memory table of batch_load (docs/benchmarks.md
 * 3.12): u64 key -> 64-byte value, as compact as a plain hash table gets.
 *
 * KVT_SHARDS shards, each under its own mutex: an arena of fixed chunks of
 * entries (key + value, 72 bytes; no per-entry allocation, no slack but the
 * last chunk) and an open-addressing index of tagged u32 entry numbers
 * (linear probing, kvtable.c). Any thread; inserts of one key from two
 * threads at once: the last one wins. At most 2^24 - 1 entries per shard
 * (kvt_put: -ENOSPC beyond).
 */
#ifndef URT_LOAD_KVTABLE_H
#define URT_LOAD_KVTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVT_VALUE 64

struct kvtable;

/* NULL: out of memory. */
struct kvtable *kvt_new(void);
void kvt_free(struct kvtable *t);
/* 0, or -ENOMEM, -ENOSPC. */
int kvt_put(struct kvtable *t, uint64_t key, const char *value);

/* Many puts at once (a block's write set): grouped by shard, one lock per
 * shard, the index slots prefetched a few items ahead. Same result as
 * kvt_put of each item in order (for one key, the last one wins). */
struct kvt_item {
    uint64_t key;
    const char *value; /* KVT_VALUE bytes */
};
int kvt_put_many(struct kvtable *t, const struct kvt_item *items, size_t n);
/* true and the value copied to out, or false. */
bool kvt_get(struct kvtable *t, uint64_t key, char *out);
uint64_t kvt_count(struct kvtable *t);

#endif
