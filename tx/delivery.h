/*
 * tx/delivery.h — delivery of commit answers in marker order (design and
 * ordering in delivery.c). One struct delivery per durability source: urt's
 * own log (struct wal) or an engine's (tx/durability.c).
 */
#ifndef URT_TX_DELIVERY_H
#define URT_TX_DELIVERY_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <urt/log.h>

#include "base/heap.h"
#include "sched/core/sched.h"

/* Where a commit is (rule 4 of wal.c): exactly one place at a time. */
enum commit_state { CS_IDLE = 0, CS_HOP, CS_BATCH, CS_HEAP, CS_RELEASE };

struct delivery {
    struct sched *s;
    bool direct;                    /* direct_commit_callback */
    alignas(64) _Atomic uint64_t persisted; /* O2: the largest durable marker */
    _Atomic uint64_t announced;     /* O2: the largest marker on_durable was told of */
    pthread_mutex_t heap_lock;
    struct bheap heap;              /* waiting stored commits by marker (base/heap.h) */
    pthread_mutex_t cb_lock;
    urt_durable_fn *on_durable;
    void *on_durable_arg;
};

void delivery_init(struct delivery *d, struct sched *s, uint64_t marker, bool direct);
void delivery_destroy(struct delivery *d);

/* Runs the callbacks of a list (linked by priv.next, statuses set), here. */
void delivery_run_list(struct urt_commit *c);
/* One task for a whole release list (on w if it has nothing queued, else
 * urgent placement; w may be NULL); direct: runs it here. */
void delivery_list(struct delivery *d, struct worker *w, struct urt_commit *list);
/* The answer of one accepted/available commit (in its own task on w, or run now). */
void delivery_one(struct worker *w, struct urt_commit *c, bool run_now);
/* persisted was raised: on_durable first, then the covered commits (w may be NULL). */
void delivery_durable(struct delivery *d, struct worker *w);
/* Stored commits whose records are written: they wait in the heap, or go
 * at once if announced covers them. */
void delivery_waiters(struct delivery *d, struct worker *w, struct urt_commit *waiters);
/* At the end: list (statuses set; may be NULL), then every waiting commit
 * (status 0 if covered by persisted, else -ECANCELED), answered once, here. */
void delivery_close(struct delivery *d, struct urt_commit *list);
/* Appends the commits linked from c to *tail (status set when set). */
void delivery_append(struct urt_commit ***tail, struct urt_commit *c, int status, bool set);
int delivery_set_on_durable(struct delivery *d, urt_durable_fn *fn, void *arg);

#endif
