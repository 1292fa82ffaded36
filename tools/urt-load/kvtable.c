/*
 * tools/urt-load/kvtable.c — the sharded in-memory table of batch_load
 * (design: kvtable.h). The shard's mutex orders everything of that shard.
 *
 * Index slots are u32: an 8-bit tag (hash bits) over the 24-bit entry number
 * + 1 (0: empty), so a probe looks at the entry only when the tag matches
 * (1 in 256 for another key): a lookup or insert costs about one cache miss
 * (the index) instead of one per probed slot. The slot count is any number
 * (Lemire's multiply-shift range reduction, "Fast Random Integer Generation
 * in an Interval", 2019), grown by 1.25x past 3/4 full, so the index stays
 * near 6 bytes per entry rather than the up-to-2x of power-of-two sizes.
 */
#include "kvtable.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KVT_SHARDS 64
#define KVT_CHUNK 1024         /* entries per arena chunk (72 KiB) */
#define KVT_MAX_ENTRIES (1u << 24) /* per shard: the slot's 24-bit entry number */
#define SLOT_ENTRY(v) ((v)&0xffffffu)
#define SLOT_TAG(v) ((v) >> 24)

struct kvt_entry {
    uint64_t key;
    char value[KVT_VALUE];
};

struct kvt_shard {
    pthread_mutex_t mu;
    struct kvt_entry **chunks;
    uint32_t n_chunks, cap_chunks;
    uint32_t n;          /* entries */
    uint32_t *index;     /* tag << 24 | (entry number + 1); 0: empty */
    uint32_t slots;
    char pad[64];
};

struct kvtable {
    struct kvt_shard s[KVT_SHARDS];
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline struct kvt_entry *entry(struct kvt_shard *s, uint32_t i)
{
    return &s->chunks[i / KVT_CHUNK][i % KVT_CHUNK];
}

struct kvtable *kvt_new(void)
{
    struct kvtable *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    for (int i = 0; i < KVT_SHARDS; i++)
        pthread_mutex_init(&t->s[i].mu, NULL);
    return t;
}

void kvt_free(struct kvtable *t)
{
    if (!t)
        return;
    for (int i = 0; i < KVT_SHARDS; i++) {
        struct kvt_shard *s = &t->s[i];
        for (uint32_t c = 0; c < s->n_chunks; c++)
            free(s->chunks[c]);
        free(s->chunks);
        free(s->index);
        pthread_mutex_destroy(&s->mu);
    }
    free(t);
}

static inline uint32_t tag_of(uint64_t h)
{
    return (uint32_t)(h >> 8) & 0xffu;
}

/* Slot of key in the index (its entry's, or the empty one where it goes). */
static uint32_t probe(struct kvt_shard *s, uint64_t key, uint64_t h)
{
    uint32_t i = (uint32_t)(((h >> 32) * (uint64_t)s->slots) >> 32), tag = tag_of(h);
    for (;;) {
        uint32_t v = s->index[i];
        if (!v || (SLOT_TAG(v) == tag && entry(s, SLOT_ENTRY(v) - 1)->key == key))
            return i;
        if (++i == s->slots)
            i = 0;
    }
}

static int grow_index(struct kvt_shard *s)
{
    uint32_t slots = s->index ? s->slots + s->slots / 4 : 1024;
    uint32_t *old = s->index, old_slots = s->slots;
    s->index = calloc(slots, sizeof(*s->index));
    if (!s->index) {
        s->index = old;
        return -ENOMEM;
    }
    s->slots = slots;
    for (uint32_t i = 0; i < old_slots; i++)
        if (old[i]) {
            uint64_t key = entry(s, SLOT_ENTRY(old[i]) - 1)->key;
            s->index[probe(s, key, mix(key))] = old[i];
        }
    free(old);
    return 0;
}

static int add_entry(struct kvt_shard *s)
{
    if (s->n % KVT_CHUNK)
        return 0;
    if (s->n_chunks == s->cap_chunks) {
        uint32_t cap = s->cap_chunks ? s->cap_chunks * 2 : 8;
        struct kvt_entry **c = realloc(s->chunks, cap * sizeof(*c));
        if (!c)
            return -ENOMEM;
        s->chunks = c;
        s->cap_chunks = cap;
    }
    if (!(s->chunks[s->n_chunks] = malloc(KVT_CHUNK * sizeof(struct kvt_entry))))
        return -ENOMEM;
    s->n_chunks++;
    return 0;
}

/* One insert into s (locked). */
static int put_locked(struct kvt_shard *s, uint64_t key, uint64_t h, const char *value)
{
    int rc = 0;
    if ((!s->index || 4 * (uint64_t)(s->n + 1) > 3 * (uint64_t)s->slots) && (rc = grow_index(s)) != 0)
        goto out;
    uint32_t slot = probe(s, key, h);
    if (s->index[slot]) {
        memcpy(entry(s, SLOT_ENTRY(s->index[slot]) - 1)->value, value, KVT_VALUE);
        goto out;
    }
    if (s->n + 1 >= KVT_MAX_ENTRIES) {
        rc = -ENOSPC;
        goto out;
    }
    if ((rc = add_entry(s)) != 0)
        goto out;
    struct kvt_entry *e = entry(s, s->n);
    e->key = key;
    memcpy(e->value, value, KVT_VALUE);
    s->index[slot] = tag_of(h) << 24 | ++s->n;
out:
    return rc;
}

int kvt_put(struct kvtable *t, uint64_t key, const char *value)
{
    uint64_t h = mix(key);
    struct kvt_shard *s = &t->s[h % KVT_SHARDS];
    pthread_mutex_lock(&s->mu);
    int rc = put_locked(s, key, h, value);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

struct hitem {
    uint64_t h, key;
    const char *value;
};

#define KVT_PREFETCH 8 /* items ahead */

/* items of one shard, in order, under its lock */
static int put_run(struct kvt_shard *s, const struct hitem *v, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n && !rc; i++) {
        if (i + KVT_PREFETCH < n && s->index)
            __builtin_prefetch(&s->index[((v[i + KVT_PREFETCH].h >> 32) * (uint64_t)s->slots) >> 32]);
        rc = put_locked(s, v[i].key, v[i].h, v[i].value);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int kvt_put_many(struct kvtable *t, const struct kvt_item *items, size_t n)
{
    struct hitem *v = malloc((n ? n : 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t count[KVT_SHARDS + 1] = {0};
    for (size_t i = 0; i < n; i++)
        count[mix(items[i].key) % KVT_SHARDS + 1]++;
    for (int k = 0; k < KVT_SHARDS; k++)
        count[k + 1] += count[k]; /* count[k]: where shard k's items start */
    size_t at[KVT_SHARDS];
    memcpy(at, count, sizeof(at));
    for (size_t i = 0; i < n; i++) { /* stable: a key's puts keep their order */
        uint64_t h = mix(items[i].key);
        v[at[h % KVT_SHARDS]++] = (struct hitem){h, items[i].key, items[i].value};
    }
    int rc = 0;
    for (int k = 0; k < KVT_SHARDS && !rc; k++)
        if (count[k + 1] > count[k])
            rc = put_run(&t->s[k], v + count[k], count[k + 1] - count[k]);
    free(v);
    return rc;
}

bool kvt_get(struct kvtable *t, uint64_t key, char *out)
{
    uint64_t h = mix(key);
    struct kvt_shard *s = &t->s[h % KVT_SHARDS];
    bool found = false;
    pthread_mutex_lock(&s->mu);
    if (s->index) {
        uint32_t slot = probe(s, key, h);
        if ((found = s->index[slot] != 0))
            memcpy(out, entry(s, SLOT_ENTRY(s->index[slot]) - 1)->value, KVT_VALUE);
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

uint64_t kvt_count(struct kvtable *t)
{
    uint64_t n = 0;
    for (int i = 0; i < KVT_SHARDS; i++) {
        pthread_mutex_lock(&t->s[i].mu);
        n += t->s[i].n;
        pthread_mutex_unlock(&t->s[i].mu);
    }
    return n;
}
