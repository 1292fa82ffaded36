/*
 * sched/core/start.c — starting and stopping the scheduler: the workers' memory
 * (on their NUMA node), their threads and rings, the drain, the leftovers.
 *
 * Start: allocate every worker, launch the threads (sched_worker_main in
 * worker.c), wait until each reported its ring, then release them all at
 * once (to run, or to stop when one failed). Stop: drain (below) or not, then
 * PHASE_STOPPING, join the workers and the watcher, cancel what is left, and
 * only then free the workers' I/O state (sched_clients.io_release: a task on
 * one worker may hold another's buffers until the very end).
 *
 * ---- Drain ----------------------------------------------------------------
 * destroy(DRAIN) refuses foreign submissions, then repeats: snapshot the sum
 * of tasks_settled (run paths that ended, each counted after all it did:
 * the task's finish and a job teardown in it included), note whether the
 * blocking pool holds an offload whose continuation is not delivered yet
 * (in that order), wait until every worker has reported two idle polls
 * (idle_sweeps), snapshot again; equal sums and no offload at the start
 * mean no task ran in between, so no task or offload could have been
 * submitted (only running tasks submit now, and a pool thread's delivery is
 * a submission of an offload that was there at the start) and every queue
 * that each worker found empty is still empty. (A completion callback may
 * submit too, a timer's; the drain does not count those: a job whose
 * readiness timer re-arms forever must not hold destroy.)
 *
 * ---- Stop -------------------------------------------------------------------
 * PHASE_STOPPING; the blocking pool is quiesced (its queued offloads go out
 * unrun, the running ones are waited for: every continuation is in a queue
 * before the workers are joined); the workers and the watcher are joined;
 * what is left in the queues is cancelled (the continuations' callbacks run
 * here); the pool's threads exit.
 *
 * ---- Memory ordering --------------------------------------------------------
 * start_lock/start_cond order the workers' start reports (start_err, ring)
 * before the starter reads them, and the starter's phase store before the
 * workers read it. phase is stored seq_cst by the stopper, then the foreign
 * submitters' marks are waited for (sched/core/foreign.h, an asymmetric
 * Dekker pair with their phase loads). The drain's counters: a worker
 * stores tasks_settled relaxed (STAT_INC, owner only) and, later in its
 * program order, idle_sweeps with release; the drain's acquire load that
 * sees a sweep therefore also sees every tasks_settled store (and every
 * submission) the worker made before it, so its second sum, read after the
 * sweeps, cannot miss a run that ended before them. The sums' own acquire
 * loads order nothing more.
 */
#include "sched/core/sched.h"

#include <errno.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct worker *worker_alloc(int mem_node)
{
    struct worker *w;
    if (mem_node >= 0 && numa_available() >= 0)
        w = numa_alloc_onnode(sizeof(*w), mem_node);
    else
        w = aligned_alloc(64, (sizeof(*w) + 63) & ~(size_t)63);
    if (w)
        memset(w, 0, sizeof(*w));
    return w;
}

static void worker_free(struct worker *w)
{
    if (!w)
        return;
    deque_destroy(&w->deque);
    if (w->place.mem_node >= 0 && numa_available() >= 0)
        numa_free(w, sizeof(*w));
    else
        free(w);
}

static void free_workers(struct sched *s)
{
    for (uint32_t i = 0; i < s->n_workers; i++)
        worker_free(s->workers[i]);
    free(s->workers);
    s->workers = NULL;
}

static void sched_init_fields(struct sched *s, const struct urt_config *cfg, const struct be_caps *caps)
{
    static _Atomic uint64_t next_id = 1;
    s->cfg = cfg;
    s->caps = *caps;
    s->n_workers = cfg->workers;
    s->id = atomic_fetch_add(&next_id, 1);
    (void)urt_fence_init(); /* the foreign submitters' fence (sched/core/foreign.h), before any submission */
    s->suspend_timeout_ns = cfg->worker_suspend_timeout_us * 1000ull;
    atomic_init(&s->n_sleeping, 0);
    atomic_init(&s->surplus_waking, 0);
    atomic_init(&s->rr, 0);
    atomic_init(&s->phase, PHASE_RUNNING);
    atomic_init(&s->foreign_wakes, 0);
    atomic_init(&s->foreign_wake_failures, 0);
    pthread_mutex_init(&s->start_lock, NULL);
    pthread_cond_init(&s->start_cond, NULL);
    s->n_started = 0;
}

static void worker_init_fields(struct sched *s, struct worker *w, uint32_t i, const struct worker_placement *place)
{
    w->s = s;
    w->index = i;
    w->place = *place;
    w->last_victim = i;
    w->inbox_countdown = s->cfg->inbox_check_interval;
    w->oldest_seen = -1; /* no look yet (oldest_local) */
    w->lifo = NULL;
    w->lifo_on = s->cfg->lifo_slot;
    atomic_init(&w->stats.spin_polls, s->cfg->worker_try_count);
    w->peer = be_peer_none();
    sleeper_init(&w->sl);
    atomic_init(&w->last_cpu, -1);
    atomic_init(&w->waker_cpu, -1);
    atomic_init(&w->idle_sweeps, 0);
    inbox_init(&w->inbox);
    inbox_init(&w->sticky);
}

/* Every worker's memory, on its node: 0 or -ENOMEM (nothing left allocated). */
static int alloc_workers(struct sched *s, const struct worker_placement *place)
{
    s->workers = calloc(s->n_workers, sizeof(*s->workers));
    if (!s->workers)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->n_workers; i++) {
        struct worker *w = worker_alloc(place[i].mem_node);
        if (!w || deque_init(&w->deque, s->cfg->deque_capacity) != 0) {
            worker_free(w);
            free_workers(s);
            return -ENOMEM;
        }
        s->workers[i] = w;
        worker_init_fields(s, w, i, &place[i]);
    }
    return 0;
}

/* Launches the threads, waits for each one's ring, releases them together.
 * On failure the launched threads are joined (they stop) and the error is
 * returned, with the failing worker's index in *failed_worker. */
static int launch_workers(struct sched *s, int *failed_worker)
{
    int err = 0;
    uint32_t launched = 0;
    for (; launched < s->n_workers; launched++) {
        struct worker *w = s->workers[launched];
        if ((err = -pthread_create(&w->thread, NULL, sched_worker_main, w)))
            break;
    }
    pthread_mutex_lock(&s->start_lock);
    while (s->n_started < launched)
        pthread_cond_wait(&s->start_cond, &s->start_lock);
    for (uint32_t i = 0; i < launched && !err; i++) {
        if (s->workers[i]->start_err) {
            err = s->workers[i]->start_err;
            *failed_worker = (int)i;
        }
    }
    if (err)
        atomic_store_explicit(&s->phase, PHASE_STOPPING, memory_order_release);
    s->n_started = s->n_workers + 1; /* releases the workers (to run or to stop) */
    pthread_cond_broadcast(&s->start_cond);
    pthread_mutex_unlock(&s->start_lock);
    if (err)
        for (uint32_t i = 0; i < launched; i++)
            pthread_join(s->workers[i]->thread, NULL);
    return err;
}

int sched_start(struct sched *s, const struct urt_config *cfg, const struct be_caps *caps,
                const struct worker_placement *place, int *failed_worker)
{
    *failed_worker = -1;
    sched_init_fields(s, cfg, caps);
    int err = taskpool_init(&s->pool);
    if (err)
        goto fail_sync;
    /* Threads that are not workers wake workers (and the watcher) without a
     * context of their own (be_wake); on io_uring one that cannot (no free
     * fd, no memory) sends through the shared fallback (best effort: without
     * it, such a wake would wait for the suspend timeout). On the portable
     * backend it holds the file pool every context uses (an error). */
    if ((err = be_shared_init(&s->be_shared, &s->caps)))
        goto fail_pool_only;
    if ((err = alloc_workers(s, place)))
        goto fail_pool;
    if ((err = launch_workers(s, failed_worker)))
        goto fail_workers;
    return 0;

fail_workers:
    free_workers(s);
fail_pool:
    be_shared_exit(&s->be_shared);
fail_pool_only:
    taskpool_destroy(&s->pool);
fail_sync:
    pthread_cond_destroy(&s->start_cond);
    pthread_mutex_destroy(&s->start_lock);
    return err;
}

static void wake_all(struct sched *s)
{
    for (uint32_t i = 0; i < s->n_workers; i++)
        sched_notify(s, s->workers[i], NULL);
}

/* The run paths that ended, over the workers: tasks_settled, counted after
 * everything a run did. tasks_run is not it: it is counted before the
 * task's finish, where a job's last task runs the job's teardown and may
 * submit (the deadline's disarm task, to the timer's worker), and a skipped
 * task of a cancelled job is not counted at all; a drain that read it could
 * end with that submission unseen in the other worker's queue, cancelled at
 * the stop (seen once in ~900 runs of graph::cancel_deadline_and_the_job). */
static uint64_t sum_settled(struct sched *s)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < s->n_workers; i++)
        sum += atomic_load_explicit(&s->workers[i]->stats.tasks_settled, memory_order_acquire);
    return sum;
}

/* The drain's pacing, not a wait for a count: a drain round reads sums over
 * the workers and the blocking pool, which no decrement can signal, and the
 * naps bound how often it reads them (a function on the pool; no memory). */
static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* After the phase store (seq_cst): sched/core/foreign.h S1, S2. A
 * submitter's mark clearing is its last touch of the runtime. */
static void wait_foreign_submitters(struct sched *s)
{
    foreign_wait(s->id);
}

static void drain(struct sched *s)
{
    uint64_t seen_small[64];
    uint64_t *seen = s->n_workers <= 64 ? seen_small : calloc(s->n_workers, sizeof(*seen));
    while (!seen) { /* no memory: wait for some rather than skip the drain */
        sleep_us(1000);
        seen = calloc(s->n_workers, sizeof(*seen));
    }
    for (;;) {
        wake_all(s);
        /* The sum first, then the pool: an offload submitted by a task that
         * finished before the sum was read is seen by the busy check (the
         * task's submission precedes its tasks_settled store, which the sum
         * acquired); one submitted by a task that finishes later changes
         * the sum. Read the other way round, a task could submit and finish
         * between the two reads, and the round would end with its offload
         * on the pool (its continuation then cancelled at the stop). */
        uint64_t before = sum_settled(s);
        bool offloads = sched_clients.blocking_busy(s); /* at the start of the round */
        if (offloads)
            sleep_us(100); /* a function still runs on the pool: do not spin on the drain */
        for (uint32_t i = 0; i < s->n_workers; i++)
            seen[i] = atomic_load_explicit(&s->workers[i]->idle_sweeps, memory_order_acquire);
        for (uint32_t i = 0; i < s->n_workers; i++) {
            while (atomic_load_explicit(&s->workers[i]->idle_sweeps, memory_order_acquire) < seen[i] + 2) {
                sched_notify(s, s->workers[i], NULL);
                sleep_us(50);
            }
        }
        if (sum_settled(s) == before && !offloads)
            break;
    }
    if (seen != seen_small)
        free(seen);
}

/* After the workers are gone: cancel whatever is left in w's queues. */
static int cancel_leftovers(struct sched *s, struct worker *w)
{
    int n = 0;
    struct urt_task *t;
    if ((t = w->lifo) != NULL) {
        w->lifo = NULL;
        sched_cancel_task(s, NULL, t);
        n++;
    }
    while ((t = deque_take(&w->deque)) != NULL) {
        sched_cancel_task(s, NULL, t);
        n++;
    }
    while ((t = w->yield_head) != NULL) {
        w->yield_head = atomic_load_explicit(&t->priv.next, memory_order_relaxed);
        sched_cancel_task(s, NULL, t);
        n++;
    }
    w->yield_tail = NULL;
    while ((t = inbox_pop(&w->inbox)) != NULL) {
        sched_cancel_task(s, NULL, t);
        n++;
    }
    while ((t = inbox_pop(&w->sticky)) != NULL) {
        if (t->priv.flags & TASK_LANE_RUNNER) {
            n += sched_clients.cancel_lane_runner(s, t); /* the lane's queued tasks */
            continue;
        }
        sched_cancel_task(s, NULL, t);
        n++;
    }
    return n;
}

int sched_stop(struct sched *s, bool drain_first)
{
    if (drain_first) {
        atomic_store_explicit(&s->phase, PHASE_DRAINING, memory_order_seq_cst);
        wait_foreign_submitters(s);
        drain(s);
    }
    atomic_store_explicit(&s->phase, PHASE_STOPPING, memory_order_seq_cst);
    /* After a drain the wait above stands: every foreign submission after
     * it read a phase that was not RUNNING (foreign.h, the Dekker pair) and
     * was refused; the phase never goes back. */
    if (!drain_first)
        wait_foreign_submitters(s);
    sched_clients.blocking_quiesce(s); /* every offload's continuation is queued from here on */
    wake_all(s);
    for (uint32_t i = 0; i < s->n_workers; i++) {
        /* A worker may be suspended with a wake already pending; keep poking. */
        while (pthread_tryjoin_np(s->workers[i]->thread, NULL) == EBUSY) {
            sleeper_send_failed(&s->workers[i]->sl); /* re-arm: a lost message must not block the join */
            sched_notify(s, s->workers[i], NULL);
            sleep_us(200);
        }
    }
    sched_clients.stop_watcher(s); /* joins the watcher thread before the workers and the pool go */
    int cancelled = 0;
    for (uint32_t i = 0; i < s->n_workers; i++)
        cancelled += cancel_leftovers(s, s->workers[i]);
    /* Only now, with no worker left and nothing queued: a task on one worker
     * may have held another's buffers until it ran, and a cancelled
     * continuation above may have used them. */
    for (uint32_t i = 0; i < s->n_workers; i++)
        sched_clients.io_release(s->workers[i]);
    sched_clients.blocking_stop(s); /* the pool's threads exit */
    free_workers(s);
    be_shared_exit(&s->be_shared); /* every worker is gone: nobody wakes anyone now */
    pthread_cond_destroy(&s->start_cond);
    pthread_mutex_destroy(&s->start_lock);
    taskpool_destroy(&s->pool);
    return cancelled;
}

void sched_read_stats(const struct sched *s, uint32_t i, struct urt_worker_stats *o)
{
    const struct worker *w = s->workers[i];
    memset(o, 0, sizeof(*o));
#define RD(f) o->f = atomic_load_explicit(&w->stats.f, memory_order_relaxed)
    RD(tasks_run);
    RD(tasks_stolen);
    RD(steal_attempts);
    RD(suspends);
    RD(wakes_sent);
    RD(wakes_received);
    RD(inbox_drains);
    RD(sticky_runs);
    RD(yields);
    RD(tasks_cancelled);
    RD(wake_failures);
    RD(lanes_moved);
    RD(spin_polls);
#undef RD
    o->io_submitted = be_submitted(&w->be);
    o->node = w->place.node;
    o->cpu = w->place.cpu;
    o->sleeping = sleeper_sleeping(&w->sl);
}
