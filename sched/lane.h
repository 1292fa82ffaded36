/*
 * sched/lane.h — lanes (SPEC C6): serialization domains, the layer under
 * transactions (tx/) and serial jobs (sched/job.c). Design and memory
 * ordering in sched/lane.c.
 *
 * A lane is a strand: its own FIFO of tasks (a Vyukov MPSC queue), a
 * pending count and one runner task.
 * While pending > 0 the runner sits in (or runs from) the owner's sticky queue
 * and runs the lane's tasks one at a time, in FIFO order, in batches bounded
 * by the pending count it knows (lane.c V4); it is never stolen.
 *
 * Users above (tx/, job.c) attach optional callbacks (struct lane_ops):
 *   active(ctx)    — pending went 0 -> 1 (on the submitter, before the runner
 *                    is queued): take a reference on the lane's owner object;
 *   idle(ctx)      — pending went 1 -> 0 (the runner's last access to the
 *                    lane; the lane's memory may be freed inside it);
 *   enter(ctx, t)  — before t's fn: false = do not run t (its cancel callback
 *                    runs, it counts as finished);
 *   leave(ctx, t)  — after t's fn returned (DONE or YIELD).
 * and for the I/O of the lane's tasks (io/uio.c; urt/io.h):
 *   io_begin(ctx)  — a task of the lane submits an operation (false: refuse
 *                    it with -ECANCELED); its continuation task carries
 *                    TASK_IO_CONT and is counted from here, so enter lets it
 *                    run and leave uncounts it;
 *   io_end(ctx)    — that operation's last completion arrived;
 *   io_cancel(ctx) — true: the lane's operations in flight are to be
 *                    cancelled (an aborting transaction).
 */
#ifndef URT_SCHED_LANE_H
#define URT_SCHED_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/core/inbox.h"
#include "sched/core/sched.h"

struct lane_ops {
    void (*active)(void *ctx);
    void (*idle)(void *ctx);
    bool (*enter)(void *ctx, struct urt_task *t);
    void (*leave)(void *ctx, struct urt_task *t);
    bool (*io_begin)(void *ctx);
    void (*io_end)(void *ctx);
    bool (*io_cancel)(void *ctx);
};

enum lane_kind {
    LANE_PLAIN = 0, /* urt_lane_create */
    LANE_TX = 1,    /* ctx is a urt_tx */
    LANE_JOB = 2,   /* ctx is a urt_job (serial job) */
};

struct urt_lane {
    /* The submitters' line: the FIFO's producers' end, the pending count and
     * the FIFO stub's link, which a submission to an empty lane writes. A
     * submission (L1 + L2) writes this one line of the lane, and the runner
     * that finds the lane empty (the stub pushed back, L4) the same line: a
     * lane fed from another CPU moves one line per activation each way, not
     * three (sched/core/inbox.h mpsc_*; the stub's other fields are never
     * read). */
    alignas(64) struct urt_task *_Atomic q_head; /* the FIFO's newest task (producers' end) */
    _Atomic uint32_t pending;          /* tasks submitted and not finished (lane.c L2, L4) */
    struct urt_task q_stub;            /* the FIFO's stub node (priv.next on this line) */
    /* immutable after lane_init (destroying: written once, by destroy): a
     * line of its own, read by submitters and the runner alike and written
     * by neither, so it stays shared in every cache. Beside the runner's
     * fields it cost every foreign submission a miss. */
    alignas(64) struct sched *s;
    const struct lane_ops *ops;
    void *ctx;
    enum lane_kind kind;
    bool heap;                         /* allocated by urt_lane_create */
    int32_t pinned;                    /* urt_lane_create_on's worker, or -1 (placement rules) */
    _Atomic bool destroying;           /* urt_lane_destroy started (lane.c M5) */
    /* the runner's (serialized by the pending count, see lane.c V1) */
    alignas(64) struct urt_task runner;
    struct urt_task *q_tail;           /* the FIFO's consumer end */
    struct urt_task *current;          /* a task that yielded: it resumes first */
    uint32_t budget;                   /* tasks known counted and not yet run (lane.c V4) */
    /* holds for blocking work (lane.c H1-H4): the runner's */
    uint32_t holding;                  /* continuations to run before the lane's other tasks */
    struct urt_task *conts_head;       /* delivered continuations taken from `conts`, oldest first */
    struct worker *park_w;             /* the worker the runner parked on */
    /* the deliverers' (one CAS each per continuation) */
    _Atomic uintptr_t conts;           /* delivered continuations, newest first (a Treiber stack),
                                          | LANE_PARKED while the runner is parked (lane.c H2) */
};


_Static_assert(offsetof(struct urt_lane, q_stub.priv.next) + sizeof(void *) <= 64,
               "the FIFO stub's link shares the submitters' line");

/* Initializes an embedded lane. ops may be NULL. */
void lane_init(struct urt_lane *l, struct sched *s, enum lane_kind kind, const struct lane_ops *ops, void *ctx);

/* Queues t on l (t->priv.lane := l). Returns 0 or -ESHUTDOWN (from a thread
 * that is not a worker, once destroy started). Any thread. */
int lane_submit(struct urt_lane *l, struct urt_task *t, unsigned flags);
/* lane_submit under the admission limit (max_pending_tasks; URT_SUBMIT_BLOCK
 * blocks a thread that is not a worker): 0, -EAGAIN or -ESHUTDOWN. A pooled
 * task that is refused went back to the pool (*gone = true). Any thread. */
int lane_submit_counted(struct urt_lane *l, struct urt_task *t, unsigned flags, bool *gone);
/* Records the message of a refused submission (-EAGAIN or -ESHUTDOWN) for
 * public function fn and returns err. */
int lane_submit_error(const char *fn, int err);

/* Blocking work (sched/blocking_off.c, urt/blocking.h): a task of l that
 * offloads a function makes the lane hold until the offload's continuation
 * ran (lane.c H1-H4).
 *   lane_hold(l)      — by the task, while it runs on l's runner (its fn or
 *                       cancel callback): the continuation counts as a task
 *                       of the lane from now on, and the lane's other tasks
 *                       wait for it;
 *   lane_unhold(l)    — the same task, when its offload was refused;
 *   lane_resume(l, t) — any thread: t, the continuation, runs on the lane
 *                       next (before any task that is not a continuation).
 * Continuations cannot yield. */
void lane_hold(struct urt_lane *l);
void lane_unhold(struct urt_lane *l);
void lane_resume(struct urt_lane *l, struct urt_task *t);

/* After the workers stopped: cancels the runner's lane (every queued task's
 * cancel callback runs). Returns the number of tasks cancelled. */
int lane_cancel_runner(struct sched *s, struct urt_task *runner);

#endif
