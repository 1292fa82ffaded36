/*
 * tests/unit/test_heap.c — base/heap.h against a model: random pushes,
 * pops and removals from the middle (by the index `moved` keeps), checked
 * against a plain array after every step.
 */
#include <stdlib.h>

#include "base/heap.h"
#include "helpers.h"

struct elem {
    uint64_t key;
    uint32_t index;
    bool in;
};

static void moved(void *p, uint32_t index)
{
    ((struct elem *)p)->index = index;
}

static void check_invariants(const struct bheap *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        const struct elem *e = bheap_at(h, i);
        cr_assert_eq(e->index, i, "element at %u thinks it is at %u", i, e->index);
        cr_assert_eq(h->v[i].key, e->key);
        if (i)
            cr_assert_leq(h->v[(i - 1) / 2].key, h->v[i].key, "heap order broken at %u", i);
    }
}

Test(heap, random_operations_match_a_model, .timeout = 60)
{
    enum { N = 512 };
    static struct elem e[N];
    struct bheap h = {.moved = moved};
    unsigned seed = 12345;
    uint32_t live = 0;
    for (int step = 0; step < 200000; step++) {
        uint32_t k = (uint32_t)rand_r(&seed) % N;
        int op = rand_r(&seed) % 3;
        if (op == 0 && !e[k].in) {
            e[k].key = (uint64_t)(rand_r(&seed) % 1000);
            cr_assert_eq(bheap_push(&h, e[k].key, &e[k]), 0);
            e[k].in = true;
            live++;
        } else if (op == 1 && live) {
            uint64_t min = UINT64_MAX;
            for (int i = 0; i < N; i++)
                if (e[i].in && e[i].key < min)
                    min = e[i].key;
            cr_assert_eq(bheap_min_key(&h), min);
            struct elem *top = bheap_remove(&h, 0);
            cr_assert_eq(top->key, min);
            top->in = false;
            live--;
        } else if (op == 2 && e[k].in) {
            cr_assert_eq(bheap_remove(&h, e[k].index), &e[k]);
            e[k].in = false;
            live--;
        }
        cr_assert_eq(h.n, live);
        if (step % 97 == 0)
            check_invariants(&h);
    }
    check_invariants(&h);
    bheap_free(&h);
}
