/*
 * sched/core/taskpool.c — magazine-style task cache (design in taskpool.h).
 */
#include "sched/core/taskpool.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

int taskpool_init(struct taskpool *p)
{
    memset(p, 0, sizeof(*p));
    return -pthread_mutex_init(&p->lock, NULL);
}

void taskpool_destroy(struct taskpool *p)
{
    for (uint32_t i = 0; i < p->n_chunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    free(p->batches);
    pthread_mutex_destroy(&p->lock);
    memset(p, 0, sizeof(*p));
}

static int grow_array(void ***arr, uint32_t *cap)
{
    uint32_t n = *cap ? *cap * 2 : 64;
    void **a = realloc(*arr, n * sizeof(void *));
    if (!a)
        return -ENOMEM;
    *arr = a;
    *cap = n;
    return 0;
}

static inline struct urt_task *next_of(struct urt_task *t)
{
    return atomic_load_explicit(&t->priv.next, memory_order_relaxed);
}

static inline void set_next(struct urt_task *t, struct urt_task *n)
{
    atomic_store_explicit(&t->priv.next, n, memory_order_relaxed);
}

/* Depot: a full batch, taken from the list or carved from a new chunk. */
static __attribute__((cold)) struct urt_task *depot_take(struct taskpool *p)
{
    struct urt_task *batch = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->n_batches) {
        batch = p->batches[--p->n_batches];
    } else if (p->n_chunks < p->cap_chunks || grow_array(&p->chunks, &p->cap_chunks) == 0) {
        struct urt_task *chunk = calloc(TASKPOOL_BATCH, sizeof(*chunk));
        if (chunk) {
            p->chunks[p->n_chunks++] = chunk;
            for (int i = 0; i < TASKPOOL_BATCH; i++)
                set_next(&chunk[i], i + 1 < TASKPOOL_BATCH ? &chunk[i + 1] : NULL);
            batch = chunk;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return batch;
}

static __attribute__((cold)) void depot_give(struct taskpool *p, struct taskcache *c)
{
    /* Detach TASKPOOL_BATCH tasks from the cache head as one batch. */
    struct urt_task *head = c->head, *t = head;
    for (int i = 1; i < TASKPOOL_BATCH; i++)
        t = next_of(t);
    c->head = next_of(t);
    set_next(t, NULL);
    pthread_mutex_lock(&p->lock);
    if (p->n_batches < p->cap_batches || grow_array((void ***)&p->batches, &p->cap_batches) == 0) {
        p->batches[p->n_batches++] = head;
        c->count -= TASKPOOL_BATCH;
    } else {
        /* No room to record it: keep the tasks in the cache. */
        set_next(t, c->head);
        c->head = head;
    }
    pthread_mutex_unlock(&p->lock);
}

struct urt_task *taskpool_alloc(struct taskpool *p, struct taskcache *c)
{
    if (__builtin_expect(!c->head, 0)) {
        c->head = depot_take(p);
        if (!c->head)
            return NULL;
        c->count = TASKPOOL_BATCH;
    }
    struct urt_task *t = c->head;
    c->head = next_of(t);
    c->count--;
    return t;
}

void taskpool_free(struct taskpool *p, struct taskcache *c, struct urt_task *t)
{
    set_next(t, c->head);
    c->head = t;
    if (__builtin_expect(++c->count > 2 * TASKPOOL_BATCH, 0))
        depot_give(p, c);
}
