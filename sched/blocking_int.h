/*
 * sched/blocking_int.h — the blocking pool's objects, shared by its two
 * files: sched/blocking.c (the queue, the threads, submission: design and
 * memory-ordering contract B1-B6 in its header) and sched/blocking_life.c
 * (creation, drain and stop, the watchdog's reads, statistics). Nothing
 * outside the pool includes it (sched/blocking.h is the interface).
 */
#ifndef URT_SCHED_BLOCKING_INT_H
#define URT_SCHED_BLOCKING_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "base/waitcount.h"
#include "sched/admission.h"
#include "sched/blocking.h"

#define SLOT_RUN 0u    /* running an item, or looking for one */
#define SLOT_PARKED 1u /* in its node's idle stack, waiting on the futex (or about to) */
#define SLOT_WOKEN 2u  /* popped by a kick: look for work */
#define SLOT_GONE 3u   /* its thread exited (keep-alive); reclaimed by whoever pops it */


struct blocking_pool;
struct blk_node;

struct blk_slot {
    alignas(64) _Atomic uint32_t state; /* SLOT_*: the futex word (B3) */
    _Atomic uint32_t next;              /* idle / free stack link: index + 1, 0 = end */
    uint32_t index;
    bool looking;                       /* starts with a spinning count (set before the thread starts) */
    struct blk_node *node;
    struct watchdog_slot wd;            /* the running item (sched/core/watchdog_slot.h; the thread writes) */
    _Atomic uint64_t done;              /* items run (the thread writes) */
};

struct blk_node {
    alignas(64) struct inbox q;
    alignas(64) pthread_mutex_t lock;
    struct urt_task *held_head, *held_tail; /* under lock */
    alignas(64) _Atomic uint64_t avail;
    alignas(64) _Atomic uint64_t idle;      /* (slot index + 1) | tag << 32 */
    _Atomic uint32_t spinning;
    _Atomic uint32_t parked;                /* statistics */
    _Atomic uint32_t sweep;
    struct blocking_pool *pool;
    cpu_set_t cpus;
    bool bind;
};

struct blocking_pool {
    struct sched *s;
    struct admission *adm;   /* blocking_queue_max (sched/admission.h) */
    uint32_t n_nodes;
    struct blk_node *nodes;
    uint32_t *worker_node;   /* per worker: its sub-pool */
    uint32_t max, min;
    uint64_t keepalive_ns;
    uint32_t cap;            /* 2 x max slots */
    struct blk_slot *_Atomic *slots;     /* [cap]: published by a release store, read acquire */
    alignas(64) _Atomic uint32_t n_slots; /* slots ever used */
    _Atomic uint64_t free;                /* free slot stack, as idle */
    _Atomic uint32_t threads;             /* counted against max */
    _Atomic uint32_t alive;               /* threads that may still touch the pool (B5) */
    alignas(64) urt_waitcount running;    /* functions running (B6; base/waitcount.h) */
    alignas(64) _Atomic uint32_t closed, closing;
    urt_waitcount entering;               /* submitters inside their push (B5; base/waitcount.h) */
    _Atomic uint64_t started, exited, cancelled;
    struct hist wait_hist, run_hist; /* several writers: hist_record_shared */
};

static inline struct blocking_pool *pool_of(const struct sched *s)
{
    return s->blocking;
}

/* sched/blocking.c, for the lifecycle's use */
bool blk_spawn(struct blocking_pool *p, struct blk_node *nd, bool looking);
void blk_futex_wake1(_Atomic uint32_t *w);
void blk_stack_push(struct blocking_pool *p, _Atomic uint64_t *head, struct blk_slot *sl);
/* Under nd's lock: the queue moves into held; the items to take out (all,
 * or those blocking_doomed names) come back as a list through priv.next. */
struct urt_task *blk_sweep_locked(struct blk_node *nd, bool all);
/* Items taken out unrun: their continuations go out, then their queue slots. */
void blk_finish_unrun(struct blocking_pool *p, struct urt_task *dead);

#endif
