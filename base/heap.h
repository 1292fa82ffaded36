/*
 * base/heap.h — the runtime's one binary min-heap: entries (key, pointer),
 * smallest key on top; an optional `moved` callback tells an element its
 * index whenever it moves, so it can be removed from the middle (the
 * watcher's cancel). Used by the watcher (conditions by due time) and by
 * commit delivery (stored commits by marker). Equal keys come out in no
 * particular order.
 *
 * Not thread-safe: each user keeps its heap under its own lock or owner.
 * Classic array heap (Williams 1964): push and pop O(log n).
 */
#ifndef URT_BASE_HEAP_H
#define URT_BASE_HEAP_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

struct bheap_entry {
    uint64_t key;
    void *p;
};

struct bheap {
    struct bheap_entry *v;
    uint32_t n, cap;
    void (*moved)(void *p, uint32_t index); /* NULL: nobody needs indexes */
};

static inline void bheap_set(struct bheap *h, uint32_t i, struct bheap_entry e)
{
    h->v[i] = e;
    if (h->moved)
        h->moved(e.p, i);
}

static inline void bheap_up(struct bheap *h, uint32_t i)
{
    struct bheap_entry e = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h->v[parent].key <= e.key)
            break;
        bheap_set(h, i, h->v[parent]);
        i = parent;
    }
    bheap_set(h, i, e);
}

static inline void bheap_down(struct bheap *h, uint32_t i)
{
    struct bheap_entry e = h->v[i];
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        uint64_t best = e.key;
        if (l < h->n && h->v[l].key < best)
            m = l, best = h->v[l].key;
        if (l + 1 < h->n && h->v[l + 1].key < best)
            m = l + 1;
        if (m == i)
            break;
        bheap_set(h, i, h->v[m]);
        i = m;
    }
    bheap_set(h, i, e);
}

/* Room for n entries: 0 or -ENOMEM (the heap is unchanged then). */
static inline int bheap_reserve(struct bheap *h, uint32_t n)
{
    if (n <= h->cap)
        return 0;
    uint32_t cap = h->cap ? h->cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    struct bheap_entry *v = realloc(h->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

/* 0 or -ENOMEM. */
static inline int bheap_push(struct bheap *h, uint64_t key, void *p)
{
    if (bheap_reserve(h, h->n + 1))
        return -ENOMEM;
    h->v[h->n] = (struct bheap_entry){key, p};
    bheap_up(h, h->n++);
    return 0;
}

/* The entry at index i (0: the smallest key). i < n. */
static inline void *bheap_at(const struct bheap *h, uint32_t i)
{
    return h->v[i].p;
}

static inline uint64_t bheap_min_key(const struct bheap *h)
{
    return h->v[0].key;
}

/* Removes the entry at index i (0: the top) and returns its pointer. i < n. */
static inline void *bheap_remove(struct bheap *h, uint32_t i)
{
    void *p = h->v[i].p;
    struct bheap_entry last = h->v[--h->n];
    if (i == h->n)
        return p;
    bheap_set(h, i, last);
    if (i > 0 && h->v[(i - 1) / 2].key > last.key)
        bheap_up(h, i);
    else
        bheap_down(h, i);
    return p;
}

static inline void bheap_free(struct bheap *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

#endif
