/*
 * tools/urt-kv/table.c — the striped hash table (design: table.h).
 *
 * Memory-ordering contract: every field of a shard is read and written only
 * under the shard's mutex (which orders them), except `live`, a relaxed
 * counter read by DBSIZE, and the table's `mem`, relaxed adds read by the
 * maxmemory check — both are statistics, never used to decide correctness.
 *
 * FLUSHALL without holding every lock at once (F1-F2): the flush sets
 * `flushing` (release), then locks, clears and unlocks the shards one after
 * the other, then clears the flag. An operation takes its shard's lock and
 * then reads the flag (F2, shard_lock): if it reads 0 while holding the lock,
 * the flush has not cleared this shard yet (had it, it would have set the
 * flag before taking this lock, and the lock's release/acquire makes the
 * store visible), so the operation completes before the flush on this shard;
 * if it reads 1 it unlocks and waits for the flag to clear. So each operation
 * is wholly before or wholly after the flush, and the flush is atomic to
 * every client. Other operations never hold two shard locks.
 * Entries are owned by their shard: a reader copies what it needs before it
 * unlocks, so no entry is reachable outside the lock.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/random.h>
#include <time.h>

#include "table.h"

#define INITIAL_BUCKETS 16u
#define NO_HEAP UINT32_MAX

/* ---- SipHash-1-3 (Aumasson & Bernstein 2012; one compression round, three
 * finalization rounds, as Redis's dict uses) --------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                   \
    do {                                                                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                                  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                                  \
    } while (0)

uint64_t kv_hash(const struct kv_table *t, const void *key, size_t klen)
{
    const uint8_t *in = key;
    uint64_t k0 = t->seed[0], k1 = t->seed[1];
    uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
    uint64_t b = (uint64_t)klen << 56;
    size_t full = klen & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m;
        memcpy(&m, in + i, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < (klen & 7); i++)
        b |= (uint64_t)in[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint32_t kv_shard_of(const void *key, size_t klen)
{
    const uint8_t *p = key;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then MurmurHash3's fmix64 for the top bits */
    for (size_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (uint32_t)(h >> (64 - KV_SHARD_BITS));
}

int64_t kv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- expiry heap (a binary min-heap on expire_ms; each entry knows its slot) ----
 * A local copy of the classic array heap (Williams 1964) that base/heap.h
 * also implements, kept on purpose: urt-kv is written on the public API and
 * may include only <urt/...> and its own headers (scripts/check_layers.py),
 * and this one is intrusive — the heap holds entry pointers and each entry
 * its slot, so a key overwritten or deleted leaves the heap in O(log n)
 * without base/heap.h's (key, pointer) array and `moved` callback. Under
 * the shard lock, like everything else of the shard. */

static void heap_swap(struct kv_shard *s, uint32_t a, uint32_t b)
{
    struct kv_entry *x = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = x;
    s->heap[a]->heap = a;
    s->heap[b]->heap = b;
}

static void heap_up(struct kv_shard *s, uint32_t i)
{
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (s->heap[parent]->expire_ms <= s->heap[i]->expire_ms)
            break;
        heap_swap(s, i, parent);
        i = parent;
    }
}

static void heap_down(struct kv_shard *s, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->heap_len && s->heap[l]->expire_ms < s->heap[m]->expire_ms)
            m = l;
        if (r < s->heap_len && s->heap[r]->expire_ms < s->heap[m]->expire_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(s, i, m);
        i = m;
    }
}

static void heap_remove(struct kv_shard *s, struct kv_entry *e)
{
    uint32_t i = e->heap;
    if (i == NO_HEAP)
        return;
    e->heap = NO_HEAP;
    s->heap_len--;
    if (i == s->heap_len)
        return;
    s->heap[i] = s->heap[s->heap_len];
    s->heap[i]->heap = i;
    heap_up(s, i);
    heap_down(s, s->heap[i]->heap);
}

static int heap_add(struct kv_shard *s, struct kv_entry *e)
{
    if (s->heap_len == s->heap_cap) {
        uint32_t cap = s->heap_cap ? s->heap_cap * 2 : 16;
        struct kv_entry **h = realloc(s->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        s->heap = h;
        s->heap_cap = cap;
    }
    e->heap = s->heap_len;
    s->heap[s->heap_len++] = e;
    heap_up(s, e->heap);
    return 0;
}

/* ---- the flush gate ----------------------------------------------------------- */

/* Takes shard s's lock for an operation (F2). While a FLUSHALL is running
 * (`flushing`), an operation waits for its end instead, so every operation
 * either completes on its shard before the flush clears that shard or starts
 * after the whole flush: FLUSHALL is atomic without holding 256 locks at once
 * (see the file comment). */
static void shard_lock(struct kv_table *t, struct kv_shard *s)
{
    for (;;) {
        while (atomic_load_explicit(&t->flushing, memory_order_acquire))
            sched_yield(); /* FLUSHALL is rare and short */
        pthread_mutex_lock(&s->lock);
        /* pairs with the flush's release store: a flush that held this
         * lock before us set the flag first (mutex order), so we see it */
        if (!atomic_load_explicit(&t->flushing, memory_order_relaxed))
            return;
        pthread_mutex_unlock(&s->lock);
    }
}

/* ---- chains ------------------------------------------------------------------- */

int kv_table_init(struct kv_table *t, kv_arm_fn *arm, void *arm_arg)
{
    memset(t, 0, sizeof(*t));
    if (getrandom(t->seed, sizeof(t->seed), 0) != (ssize_t)sizeof(t->seed))
        return -EIO;
    t->arm = arm;
    t->arm_arg = arm_arg;
    pthread_mutex_init(&t->flush_lock, NULL);
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        struct kv_shard *s = &t->shards[i];
        pthread_mutex_init(&s->lock, NULL);
        s->buckets = calloc(INITIAL_BUCKETS, sizeof(*s->buckets));
        if (!s->buckets)
            return -ENOMEM;
        s->mask = INITIAL_BUCKETS - 1;
        s->next_version = 1;
        s->armed_ms = INT64_MAX;
    }
    return 0;
}

void kv_table_destroy(struct kv_table *t)
{
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        struct kv_shard *s = &t->shards[i];
        for (uint64_t b = 0; s->buckets && b <= s->mask; b++)
            for (struct kv_entry *e = s->buckets[b], *n; e; e = n) {
                n = e->next;
                free(e);
            }
        free(s->buckets);
        free(s->heap);
        pthread_mutex_destroy(&s->lock);
    }
    pthread_mutex_destroy(&t->flush_lock);
}

static size_t entry_bytes(const struct kv_entry *e)
{
    return sizeof(*e) + e->klen + e->vlen;
}

static struct kv_entry **find_slot(struct kv_shard *s, uint64_t h, const char *key, size_t klen)
{
    struct kv_entry **pp = &s->buckets[h & s->mask];
    for (; *pp; pp = &(*pp)->next) {
        struct kv_entry *e = *pp;
        if (e->hash == h && e->klen == klen && memcmp(e->data, key, klen) == 0)
            return pp;
    }
    return pp;
}

static void grow(struct kv_shard *s)
{
    uint64_t n = (s->mask + 1) * 2;
    struct kv_entry **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return; /* keep the longer chains: correct, slower */
    for (uint64_t b = 0; b <= s->mask; b++)
        for (struct kv_entry *e = s->buckets[b], *next; e; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    free(s->buckets);
    s->buckets = nb;
    s->mask = n - 1;
}

/* Unlinks and frees *pp (an entry of s). */
static void drop(struct kv_table *t, struct kv_shard *s, struct kv_entry **pp)
{
    struct kv_entry *e = *pp;
    *pp = e->next;
    heap_remove(s, e);
    s->count--;
    if (!e->tomb)
        atomic_fetch_sub_explicit(&s->live, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&t->mem, (int64_t)entry_bytes(e), memory_order_relaxed);
    free(e);
}

/* Looks key up; an expired entry is removed and reported absent (lazy expiry). */
static struct kv_entry **lookup(struct kv_table *t, struct kv_shard *s, uint64_t h, const char *key, size_t klen,
                                int64_t now)
{
    struct kv_entry **pp = find_slot(s, h, key, klen);
    struct kv_entry *e = *pp;
    if (e && !t->recovering && e->expire_ms != KV_NO_EXPIRY && e->expire_ms <= now) {
        drop(t, s, pp);
        atomic_fetch_add_explicit(&t->expired, 1, memory_order_relaxed);
        pp = find_slot(s, h, key, klen);
    }
    return pp;
}

/* A new entry with room for vlen value bytes, copied from val (NULL: the
 * caller fills them in). */
static struct kv_entry *entry_new(uint64_t h, const char *key, size_t klen, const char *val, size_t vlen)
{
    if (klen > UINT32_MAX || vlen > UINT32_MAX)
        return NULL;
    struct kv_entry *e = malloc(sizeof(*e) + klen + vlen);
    if (!e)
        return NULL;
    e->next = NULL;
    e->hash = h;
    e->version = 0;
    e->expire_ms = KV_NO_EXPIRY;
    e->heap = NO_HEAP;
    e->klen = (uint32_t)klen;
    e->vlen = (uint32_t)vlen;
    e->tomb = false;
    memcpy(e->data, key, klen);
    if (vlen && val)
        memcpy(e->data + klen, val, vlen);
    return e;
}

/* Puts n where *pp is (replacing the entry there, if any) with expiry exp.
 * Returns true when a timer should be armed for exp (outside the lock). */
static bool install(struct kv_table *t, struct kv_shard *s, struct kv_entry **pp, struct kv_entry *n, int64_t exp)
{
    struct kv_entry *old = *pp;
    /* the counters change by the difference: one add, or none for an
     * overwrite of the same size (`mem` is shared by every shard) */
    int64_t dlive = !n->tomb, dmem = (int64_t)entry_bytes(n);
    if (old) {
        n->next = old->next;
        heap_remove(s, old);
        dlive -= !old->tomb;
        dmem -= (int64_t)entry_bytes(old);
        free(old);
    } else {
        n->next = NULL;
        s->count++;
    }
    *pp = n;
    if (dlive)
        atomic_fetch_add_explicit(&s->live, (uint64_t)dlive, memory_order_relaxed);
    if (dmem)
        atomic_fetch_add_explicit(&t->mem, dmem, memory_order_relaxed);
    n->expire_ms = exp;
    bool arm = false;
    if (exp != KV_NO_EXPIRY && heap_add(s, n) == 0 && !t->recovering && exp < s->armed_ms) {
        s->armed_ms = exp;
        arm = true;
    }
    if (!old && s->count > (s->mask + 1) * 2)
        grow(s);
    return arm;
}

static void arm_timer(struct kv_table *t, uint32_t shard, int64_t due)
{
    if (t->arm)
        t->arm(t->arm_arg, shard, due);
}

/* ---- commands ----------------------------------------------------------------- */

int kv_get(struct kv_table *t, const char *key, size_t klen, int64_t now, struct kv_buf *out)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    shard_lock(t, s);
    struct kv_entry *e = *lookup(t, s, h, key, klen, now);
    int rc = e ? reply_bulk(out, e->data + e->klen, e->vlen) : reply_nil(out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int kv_exists(struct kv_table *t, const char *key, size_t klen, int64_t now)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    shard_lock(t, s);
    int rc = *lookup(t, s, h, key, klen, now) != NULL;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int kv_set(struct kv_table *t, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
           unsigned flags, int64_t now, struct kv_buf *old, struct kv_write *w)
{
    uint64_t h = kv_hash(t, key, klen);
    uint32_t si = kv_shard_of(key, klen);
    struct kv_shard *s = &t->shards[si];
    struct kv_entry *n = entry_new(h, key, klen, val, vlen);
    *w = (struct kv_write){0};
    if (!n)
        return -ENOMEM;
    shard_lock(t, s);
    struct kv_entry **pp = lookup(t, s, h, key, klen, now);
    struct kv_entry *cur = *pp;
    int rc = 0;
    if (flags & KV_SET_GET)
        rc = cur ? reply_bulk(old, cur->data + cur->klen, cur->vlen) : reply_nil(old);
    if (rc || ((flags & KV_SET_NX) && cur) || ((flags & KV_SET_XX) && !cur)) {
        pthread_mutex_unlock(&s->lock);
        free(n);
        return rc;
    }
    int64_t exp = (flags & KV_SET_KEEPTTL) && cur ? cur->expire_ms : expire_ms;
    n->version = s->next_version++;
    bool arm = install(t, s, pp, n, exp);
    *w = (struct kv_write){.version = n->version, .expire_ms = exp, .done = true};
    pthread_mutex_unlock(&s->lock);
    if (arm)
        arm_timer(t, si, exp);
    return 0;
}

int kv_del(struct kv_table *t, const char *key, size_t klen, int64_t now, struct kv_write *w)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    *w = (struct kv_write){0};
    shard_lock(t, s);
    struct kv_entry **pp = lookup(t, s, h, key, klen, now);
    if (*pp) {
        drop(t, s, pp);
        *w = (struct kv_write){.version = s->next_version++, .done = true, .deleted = true};
    }
    pthread_mutex_unlock(&s->lock);
    return w->done;
}

/* The longest decimal int64 ("-9223372036854775808"): an INCR's new entry is
 * allocated with room for it before the shard lock is taken, so the lock is
 * never held across malloc. */
#define I64_DIGITS 20

int kv_incr(struct kv_table *t, const char *key, size_t klen, int64_t delta, int64_t now, int64_t *result,
            char digits[24], size_t *ndigits, struct kv_write *w)
{
    uint64_t h = kv_hash(t, key, klen);
    uint32_t si = kv_shard_of(key, klen);
    struct kv_shard *s = &t->shards[si];
    *w = (struct kv_write){0};
    struct kv_entry *n = entry_new(h, key, klen, NULL, I64_DIGITS); /* value filled in under the lock */
    if (!n)
        return -ENOMEM;
    shard_lock(t, s);
    struct kv_entry **pp = lookup(t, s, h, key, klen, now);
    struct kv_entry *cur = *pp;
    int64_t v = 0;
    int rc = 0;
    if (cur && resp_to_i64(cur->data + cur->klen, cur->vlen, &v))
        rc = -EINVAL;
    else if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta))
        rc = -ERANGE;
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        free(n);
        return rc;
    }
    *ndigits = (size_t)snprintf(digits, 24, "%lld", (long long)(v + delta));
    memcpy(n->data + klen, digits, *ndigits);
    n->vlen = (uint32_t)*ndigits; /* before install: `mem` counts what the entry holds */
    int64_t exp = cur ? cur->expire_ms : KV_NO_EXPIRY; /* INCR keeps the TTL */
    n->version = s->next_version++;
    bool arm = install(t, s, pp, n, exp);
    *w = (struct kv_write){.version = n->version, .expire_ms = exp, .done = true};
    *result = v + delta;
    pthread_mutex_unlock(&s->lock);
    if (arm)
        arm_timer(t, si, exp);
    return 0;
}

int kv_expire_at(struct kv_table *t, const char *key, size_t klen, int64_t at, int64_t now, struct kv_buf *val,
                 struct kv_write *w)
{
    uint64_t h = kv_hash(t, key, klen);
    uint32_t si = kv_shard_of(key, klen);
    struct kv_shard *s = &t->shards[si];
    *w = (struct kv_write){0};
    bool arm = false;
    shard_lock(t, s);
    struct kv_entry **pp = lookup(t, s, h, key, klen, now);
    struct kv_entry *e = *pp;
    if (e && at <= now) { /* Redis deletes the key and propagates a DEL */
        drop(t, s, pp);
        *w = (struct kv_write){.version = s->next_version++, .done = true, .deleted = true};
    } else if (e) {
        heap_remove(s, e);
        e->expire_ms = at;
        e->version = s->next_version++;
        if (at != KV_NO_EXPIRY && heap_add(s, e) == 0 && at < s->armed_ms) {
            s->armed_ms = at;
            arm = true;
        }
        *w = (struct kv_write){.version = e->version, .expire_ms = at, .done = true};
        if (val && buf_put(val, e->data + e->klen, e->vlen))
            w->done = false; /* cannot be logged: the caller answers -ENOMEM */
    }
    pthread_mutex_unlock(&s->lock);
    if (arm)
        arm_timer(t, si, at);
    return w->done;
}

int64_t kv_ttl_ms(struct kv_table *t, const char *key, size_t klen, int64_t now)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    shard_lock(t, s);
    struct kv_entry *e = *lookup(t, s, h, key, klen, now);
    int64_t ttl = !e ? -2 : e->expire_ms == KV_NO_EXPIRY ? -1 : e->expire_ms - now;
    pthread_mutex_unlock(&s->lock);
    return ttl;
}

static void shard_clear(struct kv_table *t, struct kv_shard *s, uint64_t below)
{
    for (uint64_t b = 0; b <= s->mask; b++)
        for (struct kv_entry **pp = &s->buckets[b]; *pp;) {
            if ((*pp)->version < below)
                drop(t, s, pp);
            else
                pp = &(*pp)->next;
        }
}

void kv_flush(struct kv_table *t, uint64_t versions[KV_SHARDS])
{
    pthread_mutex_lock(&t->flush_lock); /* one flush at a time */
    atomic_store_explicit(&t->flushing, 1, memory_order_release);
    for (uint32_t i = 0; i < KV_SHARDS; i++) { /* one shard lock at a time (F1) */
        struct kv_shard *s = &t->shards[i];
        pthread_mutex_lock(&s->lock);
        versions[i] = s->next_version++;
        shard_clear(t, s, UINT64_MAX);
        pthread_mutex_unlock(&s->lock);
    }
    atomic_store_explicit(&t->flushing, 0, memory_order_release);
    pthread_mutex_unlock(&t->flush_lock);
}

uint64_t kv_count(struct kv_table *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < KV_SHARDS; i++)
        n += atomic_load_explicit(&t->shards[i].live, memory_order_relaxed);
    return n;
}

uint64_t kv_count_expires(struct kv_table *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        shard_lock(t, &t->shards[i]);
        n += t->shards[i].heap_len;
        pthread_mutex_unlock(&t->shards[i].lock);
    }
    return n;
}

void kv_expire_due(struct kv_table *t, uint32_t si, int64_t due_ms, int64_t now)
{
    struct kv_shard *s = &t->shards[si];
    int64_t next = INT64_MAX;
    bool arm = false;
    shard_lock(t, s);
    if (s->armed_ms == due_ms)
        s->armed_ms = INT64_MAX; /* this was the earliest timer; later ones may still be armed */
    while (s->heap_len > 0 && s->heap[0]->expire_ms <= now) {
        struct kv_entry *e = s->heap[0];
        drop(t, s, find_slot(s, e->hash, e->data, e->klen));
        atomic_fetch_add_explicit(&t->expired, 1, memory_order_relaxed);
    }
    if (s->heap_len > 0 && s->heap[0]->expire_ms < s->armed_ms) {
        next = s->armed_ms = s->heap[0]->expire_ms;
        arm = true;
    }
    pthread_mutex_unlock(&s->lock);
    if (arm)
        arm_timer(t, si, next);
}

/* ---- recovery ----------------------------------------------------------------- */

/* The entry of key in its shard if a record of version v must be applied to
 * it (no entry, or an older one), with *pp its slot; NULL with *pp set
 * otherwise. Tracks the largest version seen. */
static bool newer(struct kv_shard *s, struct kv_entry ***pp, uint64_t h, const char *key, size_t klen, uint64_t v)
{
    if (v >= s->next_version)
        s->next_version = v + 1;
    if (v < s->floor)
        return false;
    *pp = find_slot(s, h, key, klen);
    return !**pp || (**pp)->version < v;
}

void kv_apply_set(struct kv_table *t, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
                  uint64_t version)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    struct kv_entry **pp;
    if (!newer(s, &pp, h, key, klen, version))
        return;
    struct kv_entry *n = entry_new(h, key, klen, val, vlen);
    if (!n)
        return;
    n->version = version;
    install(t, s, pp, n, expire_ms);
}

void kv_apply_del(struct kv_table *t, const char *key, size_t klen, uint64_t version)
{
    uint64_t h = kv_hash(t, key, klen);
    struct kv_shard *s = &t->shards[kv_shard_of(key, klen)];
    struct kv_entry **pp;
    if (!newer(s, &pp, h, key, klen, version))
        return;
    struct kv_entry *n = entry_new(h, key, klen, NULL, 0);
    if (!n)
        return;
    n->version = version;
    n->tomb = true;
    install(t, s, pp, n, KV_NO_EXPIRY);
}

void kv_apply_flush(struct kv_table *t, const uint64_t versions[KV_SHARDS])
{
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        struct kv_shard *s = &t->shards[i];
        if (versions[i] >= s->next_version)
            s->next_version = versions[i] + 1;
        if (versions[i] <= s->floor)
            continue;
        shard_clear(t, s, versions[i]);
        s->floor = versions[i];
    }
}

static bool expired_or_tomb(const struct kv_entry *e, int64_t now)
{
    return e->tomb || (e->expire_ms != KV_NO_EXPIRY && e->expire_ms <= now);
}

void kv_recovery_end(struct kv_table *t, int64_t now)
{
    uint64_t top = 1;
    for (uint32_t i = 0; i < KV_SHARDS; i++)
        if (t->shards[i].next_version > top)
            top = t->shards[i].next_version;
    t->recovering = false;
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        struct kv_shard *s = &t->shards[i];
        shard_lock(t, s);
        for (uint64_t b = 0; b <= s->mask; b++)
            for (struct kv_entry **pp = &s->buckets[b]; *pp;) {
                if (expired_or_tomb(*pp, now))
                    drop(t, s, pp);
                else
                    pp = &(*pp)->next;
            }
        s->next_version = top; /* above every version of every shard: see persist.h */
        s->floor = 0;
        int64_t due = s->heap_len ? s->heap[0]->expire_ms : INT64_MAX;
        s->armed_ms = due;
        pthread_mutex_unlock(&s->lock);
        if (due != INT64_MAX)
            arm_timer(t, i, due);
    }
}

int kv_shard_visit(struct kv_table *t, uint32_t si, kv_visit_fn *fn, void *arg, uint64_t *version_at)
{
    struct kv_shard *s = &t->shards[si];
    int rc = 0;
    shard_lock(t, s);
    *version_at = s->next_version;
    for (uint64_t b = 0; b <= s->mask && rc == 0; b++)
        for (struct kv_entry *e = s->buckets[b]; e && rc == 0; e = e->next)
            if (!e->tomb)
                rc = fn(arg, e);
    pthread_mutex_unlock(&s->lock);
    return rc;
}
