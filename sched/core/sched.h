/*
 * sched/core/sched.h — the scheduler: workers, their queues, placement, suspend/wake.
 *
 * Internal interface between sched/ and the layers above it (tx/, runtime/).
 * struct sched is embedded as the FIRST member of struct urt_runtime, so the
 * public entry points in sched/ turn a urt_runtime * into a struct sched *
 * without including runtime/ (runtime/runtime.c static-asserts the offset).
 *
 * Per worker (SPEC C4):
 *   deque   — local main queue (Chase–Lev; owner at the bottom, thieves at the top)
 *   inbox   — tasks handed over by other threads (wait-free MPSC push)
 *   sticky  — lane tasks (MPSC, never stolen)
 *   yieldq  — tasks that yielded on this worker (owner-private FIFO); moved into
 *             the deque when the deque runs dry, so they run behind other work
 *             and can be stolen.
 *
 * Field layout: what other threads write (inbox head, deque top) sits on its
 * own cache line; what they only read (state, ring fd) on another; the rest is
 * the owner's.
 */
#ifndef URT_SCHED_SCHED_H
#define URT_SCHED_SCHED_H

#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/config.h>
#include <urt/stats.h>
#include <urt/task.h>

#include "base/tls.h"
#include "sched/core/foreign.h"
#include "base/waitcount.h"
#include "bpf/probes.h"
#include "sched/core/deque.h"
#include "sched/core/inbox.h"
#include "sched/core/sleeper.h"
#include "sched/core/taskpool.h"
#include "sched/core/timer.h"
#include "sched/core/watchdog_slot.h"
#include "backend/backend.h"

/* task->priv.flags */
#define TASK_POOLED 0x1u   /* from the task pool: returned there after it ran */
#define TASK_QUEUED 0x2u   /* debug: between submit and run */
#define TASK_ADMITTED 0x4u /* holds a pending-task slot (sched/admission.h) */
#define TASK_LANE_RUNNER 0x8u /* the runner task of a lane (sched/lane.c) */
#define TASK_IO_CONT 0x10u    /* an I/O continuation (io/uio.c): the lane's owner counted it when
                                 the I/O was submitted (lane_ops io_begin), so enter lets it run */
#define TASK_PINNED 0x20u     /* sent to a worker (sched_submit_to: urt_task_submit_to,
                                 urt_spawn_to, URT_SUBMIT_LOCAL): it runs there only, so when it
                                 yields it never goes into the stealable deque */


enum sched_phase {
    PHASE_RUNNING = 0,  /* normal operation */
    PHASE_DRAINING = 1, /* destroy(DRAIN): foreign submissions refused, queues run dry */
    PHASE_STOPPING = 2, /* workers leave their loop after the task they are running */
};

/* Owner-written counters (relaxed load + store by the owner: no RMW, no shared
 * line). Readers use relaxed loads. */
struct worker_counters {
    _Atomic uint64_t tasks_settled; /* run paths ended (run, yielded or skipped), counted after
                                       all they did: finish, a job's teardown (start.c, drain) */
    _Atomic uint64_t tasks_run, tasks_stolen, steal_attempts, suspends, wakes_sent, wakes_received,
        inbox_drains, sticky_runs, yields, tasks_cancelled, wake_failures, lanes_moved,
        cpu_moves, /* times it left its waker's CPU (worker.c; internal: not in urt_stats) */
        spin_polls; /* a gauge: empty polls before suspending now (sched/core/worker.c spin_adapt) */
};

#define STAT_ADD(w, field, n)                                                                             \
    atomic_store_explicit(&(w)->stats.field,                                                              \
                          atomic_load_explicit(&(w)->stats.field, memory_order_relaxed) + (n),            \
                          memory_order_relaxed)
#define STAT_INC(w, field) STAT_ADD(w, field, 1)
#define STAT_SET(w, field, v) atomic_store_explicit(&(w)->stats.field, (v), memory_order_relaxed)

/* Where a worker runs (computed by runtime/topology.c). */
struct worker_placement {
    int node;        /* NUMA node of the topology (-1: none) */
    int mem_node;    /* real node for its memory (-1: default policy) */
    int cpu;         /* the one CPU it is bound to, or -1 */
    bool bind;       /* apply cpus with pthread_setaffinity_np */
    cpu_set_t cpus;
};

struct sched;
struct worker;

/* The core's clients (sched/admission.c, job.c, lane.c, watcher.c). The
 * core — worker.c, start.c, submit.c, run.h, io.c, timer.c and the queues —
 * includes none of their headers and calls them only through this table,
 * which runtime/sched_clients.c fills (scripts/check_layers.py checks the includes). */
struct urt_job;
struct sched_client_ops {
    /* admission: take a slot and queue t (to target when not NULL), or
     * -EAGAIN / -ESHUTDOWN; give a slot back */
    int (*admit)(struct sched *s, struct urt_task *t, unsigned flags, struct worker *target);
    void (*release)(struct sched *s);
    /* jobs: is the task's job cancelled; a task of job finished / was cancelled */
    bool (*job_cancelled)(const struct urt_job *job);
    void (*job_task_finished)(struct sched *s, struct worker *w, struct urt_job *job);
    void (*job_task_cancelled)(struct sched *s, struct worker *w, struct urt_job *job);
    /* lanes: a lane runner left in a sticky queue at shutdown; returns the
     * number of tasks it cancelled */
    int (*cancel_lane_runner)(struct sched *s, struct urt_task *runner);
    /* the watcher: joined before the workers' memory goes */
    void (*stop_watcher)(struct sched *s);
    /* urt_dump_state's lines about the watcher and the admission limit */
    void (*dump_state)(struct sched *s, int fd);
    /* I/O for tasks (io/uio.c). io_sweep (any thread): cancel, on every
     * worker, the operations of cancelled jobs, aborting transactions and
     * cancel requests from other workers. io_stop (on w; idempotent, cheap
     * when repeated): destroy began — cancel w's operations in flight;
     * exiting: w left its loop, so their continuations run in place, and
     * once nothing is pending the kernel's part of its buffers is dropped
     * (its ring's issuer must do it). io_pending (on w): w's operations whose
     * last completion has not arrived. io_release (the stopping thread,
     * after every worker was joined and the leftovers were cancelled): frees
     * w's I/O state — not before, since tasks of other workers and cancelled
     * continuations may hold w's buffers until then. */
    void (*io_sweep)(struct sched *s);
    void (*io_stop)(struct worker *w, bool exiting);
    uint32_t (*io_pending)(const struct worker *w);
    void (*io_release)(struct worker *w);
    /* Blocking work (sched/blocking.c, urt/blocking.h). busy (any thread):
     * offloads accepted whose continuation was not delivered yet (the drain
     * waits for none at the start of a quiet round). quiesce (destroying
     * thread, phase STOPPING, workers not yet joined): no more offloads, the
     * queued ones out unrun, the running ones waited for. stop (after the
     * workers are gone): the pool threads exit. */
    bool (*blocking_busy)(struct sched *s);
    void (*blocking_quiesce)(struct sched *s);
    void (*blocking_stop)(struct sched *s);
};
extern const struct sched_client_ops sched_clients;

/* Calls the layers above make into the worker loop. All optional; ctx is theirs. */
struct sched_hooks {
    void *ctx;
    /* On the worker's thread, after its ring exists / before it is destroyed. */
    void (*worker_start)(void *ctx, struct worker *w);
    void (*worker_stop)(void *ctx, struct worker *w);
    /* On the worker, before it suspends: return true if it created work or
     * I/O that must be waited for differently (the worker polls again). */
    bool (*before_suspend)(void *ctx, struct worker *w);
};

struct worker {
    /* --- read by other threads, written by the owner at suspend/resume --- */
    struct sleeper sl;                    /* state and wake_pending (sched/core/sleeper.h) */
    _Atomic uint64_t wake_sent_ns;        /* stamp of that message (0: none); written by its sender */
    struct be_peer peer;                  /* target of wake messages (backend/backend.h) */
    _Atomic int32_t last_cpu;             /* CPU it last suspended on (urgent placement) */
    _Atomic int32_t waker_cpu;            /* CPU of the worker whose wake asked it to help (a
                                             surplus wake, a sticky push), -1: none; written by
                                             that waker, used and cleared by the owner; relaxed,
                                             advisory (worker.c "Leaving the waker's CPU") */
    uint32_t index;
    struct sched *s;
    struct worker_placement place;

    /* --- queues (each with its own cache lines) --- */
    struct deque deque;
    struct inbox inbox;
    struct inbox sticky;
    alignas(64) _Atomic uint64_t idle_sweeps; /* idle polls seen during a drain (owner writes) */
    _Atomic uint32_t lanes_active;            /* lanes owned now (sched/lane.c; advisory, relaxed) */
    _Atomic uint32_t idle;                    /* 1 from its IDLE_MARK_POLLS-th empty poll (spinning or
                                                 suspended) to the next task it finds: owner writes on
                                                 those transitions only; lane shedding reads it (relaxed) */

    /* --- owner only --- */
    alignas(64) struct be_ctx be;         /* its backend context: I/O, timers, waits (backend/backend.h) */
    struct taskcache cache;
    struct urt_task *yield_head, *yield_tail;
    uint64_t tick;
    struct urt_task *lifo;  /* the LIFO slot: the task the running task submitted last, run next
                               (sched_local_spawn; never stolen) */
    bool lifo_on;           /* cfg->lifo_slot */
    uint32_t inbox_countdown; /* tasks until the inbox is looked at first again */
    uint32_t idle_polls;    /* consecutive polls that found nothing */
    uint32_t long_sleeps;   /* long suspensions since the last short one (spin_adapt) */
    uint32_t empty_local;   /* consecutive polls with no local work (stealing_wait) */
    uint32_t last_victim;   /* index of the last successful steal's victim */
    uint32_t failed_sweeps; /* consecutive steal sweeps that found nothing */
    uint32_t fed;           /* tasks taken from the inbox or stolen since the worker last woke */
    uint32_t ratio_acc;     /* dev_thousandths_ratio_check_local_first accumulator */
    uint32_t io_inflight;   /* SQEs whose CQE is still to come (I/O users maintain it) */
    struct worker_counters stats;
    struct watchdog_slot wd; /* running task, for the watchdog (sched/core/watchdog_slot.h; owner writes) */
    struct urt_job *running_job; /* job of the task whose fn runs now, or NULL (sched/job.c: who may
                                    submit to a closed job) */
    struct urt_lane *running_lane; /* lane of the task whose fn runs now, or NULL (sched/lane.c; the
                                      context an I/O's continuation returns to, io/uio.c) */
    pthread_t thread;
    int start_err;
    struct probe_hists hists; /* latency histograms (owner writes; bpf/probes.h) */
    struct timerq timers;     /* the worker's timers (sched/core/timer.h; its one timeout SQE counts in
                                 io_inflight); cold: off the lines the task loop touches */
    /* I/O for tasks (io/uio.c), cold */
    void *uio;                /* its per-worker state (owner only; NULL until the first operation) */
    _Atomic uint32_t io_sweep_queued; /* io_sweep is queued on the sticky queue (whoever sets it
                                         from 0 owns the task until it runs) */
    struct urt_task io_sweep; /* cancels the operations sched_clients.io_sweep asks for */
    int64_t oldest_seen;      /* owner: the deque's top at its last look there (oldest_local; cold, at
                                 the end so the task loop's fields keep their lines) */
};

struct sched {
    const struct urt_config *cfg;
    uint32_t n_workers;
    struct worker **workers;
    struct be_caps caps;
    uint64_t id;             /* unique per runtime in the process */
    struct taskpool pool;
    struct sched_hooks hooks;
    uint64_t suspend_timeout_ns;
    void *_Atomic tx_log;    /* tx/: the registered write-ahead log (tx/commit_hook.h) */
    struct admission *adm;   /* pending-task limit, NULL when off (sched/admission.c) */
    struct watcher *watcher; /* conditional tasks (sched/watcher.c) */
    struct watchdog *watchdog; /* its passes run on the watcher thread (sched/watchdog.c) */
    struct blocking_pool *blocking; /* the blocking pool (sched/blocking.c), NULL until created */
    /* Called (any thread) when a job with watched conditions is cancelled, so
     * that the watcher cancels them now (set by sched/watcher.c; NULL: none). */
    void (*job_conds_cancelled)(struct sched *s);

    alignas(64) _Atomic uint32_t n_sleeping; /* workers in SLEEPER_SLEEPING */
    _Atomic uint32_t surplus_waking;         /* a peer is being woken for surplus work */
    alignas(64) _Atomic uint32_t rr;         /* round-robin cursor of foreign placement */
    /* phase is read by every runner once per task: its line is written only
     * at destroy, so it stays shared in every cache. The foreign wake
     * counters live on the next line (on phase's line each foreign wake cost
     * the workers a miss). Foreign submitters mark themselves in their own
     * words, not here (sched/core/foreign.h). */
    alignas(64) _Atomic uint32_t phase;      /* enum sched_phase */
    alignas(64) _Atomic uint64_t foreign_wakes;
    _Atomic uint64_t foreign_wake_failures;
    struct be_shared be_shared;              /* what the contexts share: the send-wake fallback, the portable file pool (backend/backend.h) */

    pthread_mutex_t start_lock;
    pthread_cond_t start_cond;
    uint32_t n_started;
};

/* The scheduler of a public runtime handle. struct urt_runtime begins with
 * its struct sched (runtime/runtime.h; a static assertion in runtime.c
 * checks it), and a pointer to a structure, suitably converted, points to
 * its initial member (C17 6.7.2.1p15): this is the one place sched/ relies
 * on it. */
static inline struct sched *sched_of(const urt_runtime *rt)
{
    return (struct sched *)(uintptr_t)rt;
}

/* The calling thread's worker (any runtime's), or NULL: set by the worker
 * thread itself at its start and end, read only by that thread (no
 * ordering). initial-exec (base/tls.h): read on every submission and lane
 * batch, so it is inline here rather than behind a call. */
extern _Thread_local struct worker *sched_tls_worker URT_TLS_IE;

/* The worker the calling thread runs on (any runtime), or NULL. */
static inline struct worker *sched_self(void)
{
    return sched_tls_worker;
}

/* The calling thread's worker if it is one of s's workers, else NULL. */
static inline struct worker *sched_current(const struct sched *s)
{
    struct worker *w = sched_tls_worker;
    return (w && w->s == s) ? w : NULL;
}

/* The shutdown fence of a submission from a thread that is not one of s's
 * workers (sched/core/foreign.h): true, then sched_foreign_leave() after the
 * push; false when s is being destroyed (nothing to leave). */
static inline bool sched_foreign_enter(struct sched *s)
{
    return foreign_enter(s->id, &s->phase, PHASE_RUNNING);
}

static inline void sched_foreign_leave(void)
{
    foreign_leave();
}
/* A thread of s that is not a worker but runs the runtime's own work (the
 * watcher): it marks itself (s) at its start and unmarks (NULL) at its end.
 * sched_service_thread(s) is true on it: such a thread, like a worker, must
 * never block in the runtime (admission) nor destroy it. */
void sched_set_service_thread(const struct sched *s);
bool sched_service_thread(const struct sched *s);

/* Starts the workers (each creates its ring in its own thread). place has
 * n_workers entries. On failure nothing is left running and *failed_worker
 * names the worker whose start failed (or -1). */
int sched_start(struct sched *s, const struct urt_config *cfg, const struct be_caps *caps,
                const struct worker_placement *place, int *failed_worker);

/* Stops the workers (drain or cancel, see urt/runtime.h), cancels what is left
 * and frees everything. Returns the number of tasks cancelled. */
int sched_stop(struct sched *s, bool drain);
/* A worker thread's body (sched/core/worker.c), started by sched_start (sched/core/start.c). */
void *sched_worker_main(void *arg);

/* The argument checks of every public submission entry point (fn names it
 * in the message; what names its task argument: "task", "task->fn" or
 * "fn"): 0 or -EINVAL with a message. */
int sched_check_submit(const char *fn, const void *rt, bool has_fn, const char *what, unsigned flags);
/* The message of a submission the scheduler or the admission limit refused
 * (-EAGAIN, -ESHUTDOWN); returns err. */
int sched_submit_error(const char *fn, int err);

/* Queues t (placement rules SPEC C5; URT_SUBMIT_LOCAL: pinned to the
 * calling worker, as sched_submit_to). */
int sched_submit(struct sched *s, struct urt_task *t, unsigned flags);
/* Queues t on target's sticky queue: it runs there and nowhere else (sticky
 * queues are never stolen). 0 or -ESHUTDOWN. Any thread. */
int sched_submit_to(struct sched *s, struct worker *target, struct urt_task *t);

/* Owner only: pushes t to w's own deque; wakes a suspended peer for surplus. */
void sched_local_push(struct worker *w, struct urt_task *t);
/* Owner: a task submitted by the running task (sched_submit): the LIFO slot,
 * whose previous task goes to the deque (lifo_slot; else sched_local_push). */
void sched_local_spawn(struct worker *w, struct urt_task *t);
/* Owner only: pushes t to w's own deque, where a peer may steal it, and
 * wakes one suspended peer to do so even when t is the deque's only task
 * (split work: the owner runs its part meanwhile; issue 12 point 3). */
void sched_push_split(struct worker *w, struct urt_task *t);

/* Pushes t to w's inbox (from any thread) and wakes w if it sleeps. */
void sched_push_inbox(struct sched *s, struct worker *w, struct urt_task *t);
/* Pushes t to w's sticky queue (any thread) and wakes w if it sleeps. */
void sched_push_sticky(struct sched *s, struct worker *w, struct urt_task *t);
/* The owner: runs on cpu alone from now on, when cpu is among its CPUs and
 * it has others (a narrowing of its placement, never a widening); else
 * nothing changes. The log's one channel uses it (log_irq_affinity). */
void sched_worker_bind_cpu(struct worker *w, int cpu);

/* The worker a submission from the calling thread goes to (C5), ignoring urgency. */
struct worker *sched_pick_worker(struct sched *s);
/* A suspended worker, or NULL. */
struct worker *sched_find_sleeping(struct sched *s);

/* After a push into w's inbox or sticky queue (a seq_cst exchange): wake w if
 * it sleeps and no wake is in flight. self = the calling worker of s or NULL.
 * Returns true if a wake message is on its way to w. Any thread. */
bool sched_notify(struct sched *s, struct worker *w, struct worker *self);

/* Cancels t: its cancel callback (if any) runs, pooled tasks go back to the pool. */
void sched_cancel_task(struct sched *s, struct worker *self, struct urt_task *t);

/* Reads worker w's counters. Any thread. */
void sched_read_stats(const struct sched *s, uint32_t w, struct urt_worker_stats *out);

/* Task-pool helpers for the public spawn entry points. */
struct urt_task *sched_task_alloc(struct sched *s);
/* A pooled task from the calling thread's cache, filled for fn/cancel/arg
 * (no job, no lane yet: the submit path sets them). NULL on -ENOMEM. */
struct urt_task *sched_spawn_task(struct sched *s, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg,
                                  unsigned flags);
/* Gives a task from sched_task_alloc() back (its submission failed). */
void sched_task_free(struct sched *s, struct urt_task *t);

#endif
