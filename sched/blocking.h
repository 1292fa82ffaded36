/*
 * sched/blocking.h — blocking work (urt/blocking.h, SPEC C22), the private
 * interface. Two parts:
 *
 *   the pool (sched/blocking.c): threads that are not workers and never
 *     touch a ring, a bounded queue per NUMA node, the idle threads' stack,
 *     their creation on demand, keep-alive and shutdown. Its work items are
 *     urt_tasks it knows nothing about: a pool thread calls t->fn(t, t->arg)
 *     (the work), then blocking_finish(t, true); an item taken out of the
 *     queue unrun gets blocking_finish(t, false) only. Design and memory
 *     ordering in sched/blocking.c.
 *
 *   the offloads (sched/blocking_off.c): urt_blocking_*, the submitting
 *     task's context (job, transaction, lane), the continuation and its
 *     delivery to a worker, the two calls above.
 *
 * The core reaches the pool through struct sched_client_ops (drain, stop);
 * runtime/ creates and frees it (blocking_create, blocking_close,
 * blocking_free); the watchdog reads the pool threads' slots
 * (blocking_watch_*).
 */
#ifndef URT_SCHED_BLOCKING_H
#define URT_SCHED_BLOCKING_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/blocking.h>

#include "sched/core/sched.h"

/* ---- the pool (sched/blocking.c) -------------------------------------------------------- */

/* A NUMA node's CPUs, for its pool threads. */
struct blocking_node_spec {
    int id;         /* the node id workers carry in place.node */
    cpu_set_t cpus;
};

/* Creates the pool of s from cfg (blocking_*): one sub-pool per node when
 * bind (placement numa or core) and n_nodes > 1, else one, whose threads are
 * bound to the union of the nodes' CPUs when bind; starts
 * blocking_threads_min threads. 0, or -ENOMEM / -errno of pthread_create
 * (nothing left running). Creator thread, after the workers started. */
int blocking_create(struct sched *s, uint32_t n_nodes, const struct blocking_node_spec *nodes, bool bind);
/* Destroy began: submitters waiting for room return -ESHUTDOWN, and none
 * waits from now on. Returns when they all left. Destroying thread. */
void blocking_close(struct sched *s);
/* After sched_stop: frees the pool (its threads are gone). */
void blocking_free(struct sched *s);

/* True on a thread of s's pool (its functions run there). */
bool blocking_on_pool_thread(const struct sched *s);

/* The sub-pool an offload of worker w goes to. Any thread. */
uint32_t blocking_node_of(const struct sched *s, const struct worker *w);

/* Queues t on sub-pool node (t->priv.enqueue_ns stamped when timestamps are
 * taken). flags: URT_SUBMIT_BLOCK (honoured only off workers and the
 * runtime's own threads). 0, -EAGAIN (queue full; or no thread runs and none
 * could be started) or -ESHUTDOWN (closed, or a thread that is not a worker
 * during destroy). Any thread; never waits for a pool thread. */
int blocking_queue(struct sched *s, struct urt_task *t, uint32_t node, unsigned flags);

/* Asks the pool to take out, now, the queued items blocking_doomed() names
 * (each gets blocking_finish(t, false)). Any thread; never blocks: when a
 * pool thread holds the queue, it does the sweep before it lets go. */
void blocking_sweep(struct sched *s);

/* Client entry points for the core's drain and stop (sched/core/start.c):
 * blocking_busy: offloads accepted and not finished (queued or running;
 * a finished one has delivered its continuation). blocking_quiesce (phase
 * STOPPING, before the workers are joined): refuse every submission, take
 * the queued items out unrun, wait for the running ones. blocking_stop
 * (after the workers are gone): the threads exit; returns once none touches
 * the pool. */
bool blocking_busy(struct sched *s);
void blocking_quiesce(struct sched *s);
void blocking_stop(struct sched *s);

/* The watchdog (sched/watchdog.c): slots [0, blocking_watch_count) of the
 * pool's threads, each a struct watchdog_slot (sched/core/watchdog_slot.h) the thread
 * writes around a function's run. read: as watchdog_read; *t the item. */
uint32_t blocking_watch_count(const struct sched *s);
bool blocking_watch_read(const struct sched *s, uint32_t i, uint64_t *seq, struct urt_task **t, struct urt_job **j);

void blocking_read_stats(const struct sched *s, struct urt_blocking_stats *out);

/* ---- the runtime's own offloads (sched/blocking_off.c) -------------------------------------- */

/* An offload of the runtime itself (the log's next segment file, tx/wal_seg.c):
 * b as urt_blocking_init made it, run without the calling task's context (no
 * job, no lane, no transaction counts it: nothing of a user's waits for it);
 * its continuation goes to home's inbox (where another worker may take it:
 * done must not touch home's own state). Returns urt_blocking_submit's
 * errors but -EINVAL and -ECANCELED, with a message. Any thread. */
int blocking_submit_own(struct sched *s, struct urt_blocking *b, struct worker *home);

/* ---- the pool's calls into the offloads (sched/blocking_off.c) ----------------------------- */

/* After t->fn ran on a pool thread (ran), or for an item taken out unrun:
 * hand the continuation to a worker. Pool thread, or the sweeping thread. */
void blocking_finish(struct urt_task *t, bool ran);
/* True when a queued item's job was cancelled or its transaction aborts. */
bool blocking_doomed(const struct urt_task *t);
/* The offload an item belongs to (the watchdog's report). */
struct urt_blocking *blocking_of_task(struct urt_task *t);

#endif
