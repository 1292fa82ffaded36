/*
 * sched/core/taskpool.h — where urt_spawn() gets its tasks.
 *
 * A two-level cache after Bonwick and Adams' magazine allocator ("Magazines
 * and Vmem", USENIX 2001): every thread (worker or not) keeps a private free
 * list (struct taskcache, no atomics, owner only); a runtime-wide depot,
 * protected by a mutex, trades whole batches of TASKPOOL_BATCH tasks with the
 * private lists and allocates chunks of TASKPOOL_BATCH tasks with malloc when
 * it is empty. So a spawn costs a list pop, a free a list push, and the mutex
 * or malloc is touched once per TASKPOOL_BATCH tasks at most. Chunks are freed
 * only when the runtime is destroyed.
 *
 * A task is freed into the cache of the thread that ran it (usually a worker),
 * so caches of submitting threads drain and workers' caches fill: a cache
 * above 2 x TASKPOOL_BATCH gives a batch back to the depot.
 */
#ifndef URT_SCHED_TASKPOOL_H
#define URT_SCHED_TASKPOOL_H

#include <pthread.h>
#include <stdint.h>

#include <urt/task.h>

#define TASKPOOL_BATCH 64

struct taskcache {
    struct urt_task *head;
    uint32_t count;
};

struct taskpool {
    pthread_mutex_t lock;
    struct urt_task **batches; /* heads of full batches (linked through priv.next) */
    uint32_t n_batches, cap_batches;
    void **chunks;             /* every malloc'd chunk, freed at destroy */
    uint32_t n_chunks, cap_chunks;
};

int taskpool_init(struct taskpool *p);
void taskpool_destroy(struct taskpool *p);

/* Owner of the cache only. NULL on -ENOMEM. */
struct urt_task *taskpool_alloc(struct taskpool *p, struct taskcache *c);
void taskpool_free(struct taskpool *p, struct taskcache *c, struct urt_task *t);

#endif
