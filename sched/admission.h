/*
 * sched/admission.h — the runtime-wide pending-task limit (SPEC C10).
 *
 * Object: one struct admission per runtime, created only when
 * max_pending_tasks > 0 (struct sched's adm pointer is NULL otherwise, and
 * then no code here runs: the submit path tests the pointer, the worker
 * tests a task flag it already loaded). The blocking pool bounds its queue
 * with one more (admission_new: blocking_queue_max, sched/blocking.c).
 *
 * Invariants:
 *  - pending <= limit at every instant: a slot is taken only by a CAS from a
 *    value below the limit (never fetch_add-then-undo);
 *  - a task flagged TASK_ADMITTED holds exactly one slot, released once:
 *    when its fn returns URT_TASK_DONE (run_task) or when it is cancelled
 *    (sched_cancel_task), or by the submitter if the submission failed;
 *  - a slot freed while submitters wait goes to the oldest waiter (FIFO),
 *    never to a newcomer: newcomers see n_waiters > 0 and queue (or fail with
 *    -EAGAIN) instead of taking the fast path.
 *
 * Lifecycle:
 *  1. admission_create() after the workers started, before create returns.
 *  2. admission_shutdown() first thing in destroy: waiters return -ESHUTDOWN
 *     and no new submitter blocks; slots keep being released. It returns once
 *     every submitter that was blocking has left the runtime's code.
 *  3. admission_destroy() after the workers stopped (no waiter can remain).
 *
 * Load: one CAS on a shared line per submission and one fetch_sub per
 * completion, only when the limit is set. The mutex is taken only by
 * submitters that block and by releasers that find waiters.
 */
#ifndef URT_SCHED_ADMISSION_H
#define URT_SCHED_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include <urt/admission.h>
#include <urt/task.h>

struct sched;
struct admission;
struct worker;

/* A limiter of `limit` slots, for another bound than max_pending_tasks (the
 * blocking pool's queue, sched/blocking.c): NULL on ENOMEM. Freed with
 * admission_free() once nobody uses it. */
struct admission *admission_new(uint64_t limit);
void admission_free(struct admission *a);
/* Takes one slot of a: 0, -EAGAIN (full; URT_SUBMIT_BLOCK honoured only off
 * the workers and the runtime's own threads) or -ESHUTDOWN (closed while
 * waiting). *blocking set: the caller entered the blocking path and must call
 * admission_left(a) after its last touch of the runtime (the shutdown fence).
 * Any thread. */
int admission_take(struct sched *s, struct admission *a, unsigned flags, bool *blocking);
void admission_left(struct admission *a);
/* admission_shutdown for any limiter: waiters return -ESHUTDOWN, none waits
 * from now on; returns when every woken waiter left. */
void admission_close(struct admission *a);
/* Slots taken now (seq_cst load). */
uint64_t admission_pending(const struct admission *a);
void admission_read(const struct admission *a, struct urt_admission_stats *out);

/* Allocates the limiter if cfg->max_pending_tasks > 0 (s->adm stays NULL
 * otherwise). 0 or -ENOMEM. Creator thread. */
int admission_create(struct sched *s);
/* Wakes every waiter with -ESHUTDOWN; later blocking submitters get it too. */
void admission_shutdown(struct sched *s);
void admission_destroy(struct sched *s);

/* Takes a slot for t (per flags and the caller's kind), submits t and marks
 * it TASK_ADMITTED (to target when not NULL: sched_submit_to). Returns
 * sched_submit's result, -EAGAIN, or -ESHUTDOWN;
 * on failure the slot is released and t is the caller's — except a pooled
 * task (urt_spawn), which goes back to the pool here: a submitter woken by
 * the shutdown must be done with the runtime when admission_shutdown()
 * returns. Any thread. */
int admission_submit(struct sched *s, struct urt_task *t, unsigned flags, struct worker *target);
/* The same with another way in: place(ctx, t, flags) queues t (a lane's,
 * a transaction's or a serial job's lane_submit) and returns 0 or -errno. */
typedef int admission_place_fn(void *ctx, struct urt_task *t, unsigned flags);
int admission_submit_via(struct sched *s, struct urt_task *t, unsigned flags, admission_place_fn *place, void *ctx);

/* Takes a slot without waiting and without queueing behind waiters (the
 * watcher's hand-over of a body: it must never block). */
bool admission_try_take(struct admission *a);

/* Releases one slot (hands it to the oldest waiter if there is one). */
void admission_release(struct admission *a);

void admission_read_stats(const struct sched *s, struct urt_admission_stats *out);

#endif
