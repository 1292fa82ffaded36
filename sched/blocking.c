/*
 * sched/blocking.c — the blocking pool (SPEC C22): threads that are not
 * workers and never touch a ring run the work items the offloads hand them
 * (sched/blocking_off.c; the interface in sched/blocking.h). This file: the
 * queue, the threads and submission; the objects are in
 * sched/blocking_int.h, creation, drain, stop and statistics in
 * sched/blocking_life.c.
 *
 * ---- Objects ---------------------------------------------------------------------------------
 * One sub-pool (struct blk_node) per NUMA node when the workers are bound and
 * the topology has several nodes, else one. Each has
 *   q        the queue: an intrusive MPSC FIFO of items (sched/core/inbox.h, the
 *            workers' inbox): a producer's push is one exchange, wait-free;
 *   lock     the consumers' mutex: pool threads take items under it (a
 *            sweep too, with a trylock). No worker ever waits for it;
 *   held     items a sweep moved out of q (under lock), taken before q;
 *   avail    items in q and held (producers add after the push, consumers
 *            subtract after the pop): what a looking thread polls;
 *   idle     a stack of parked threads' slots (LIFO: the most recently
 *            parked is woken first, so the longest idle ones time out and
 *            the pool shrinks to what the load needs);
 *   spinning threads looking for work (see "No stranded item").
 * Per pool: the queue bound (struct admission of sched/admission.h, FIFO
 * waiters with URT_SUBMIT_BLOCK: the one mechanism of max_pending_tasks),
 * the thread slots (struct blk_slot: the futex word a parked thread waits
 * on, the watchdog slot), `threads` (counted against blocking_threads_max),
 * `running`, the statistics.
 *
 * ---- A thread's life --------------------------------------------------------------------------
 *   take an item (lock, pop, unlock) -> run it: t->fn, then blocking_finish;
 *   none: look (spinning + 1; poll avail for BLK_SPIN_NS, sched_yield every
 *   64 polls) -> none: spinning - 1, look once more -> park: push the slot on
 *   idle, futex-wait on its state for blocking_keepalive_ms -> WOKEN: look;
 *   timed out and more than blocking_threads_min threads: GONE, exit.
 * A thread is started when a producer finds nobody looking and no parked
 * thread (up to blocking_threads_max), named urt-blk-<slot>, bound to its
 * node's CPUs when the workers are bound (it is created by whatever thread
 * submits, often a worker bound to one CPU), detached.
 *
 * ---- No stranded item (the protocol) ---------------------------------------------------------
 * Producer (blocking_queue):             Looking thread:
 *   P1 push; avail + 1        seq_cst      L1 spinning - 1            seq_cst
 *   P2 load spinning          seq_cst      L2 load avail              seq_cst
 *   P3 0: kick                             L3 > 0: take again
 * kick: CAS spinning 0 -> 1 (one thread at a time is woken for looking), pop
 * a parked slot and CAS it PARKED -> WOKEN + FUTEX_WAKE, or start a thread
 * (it starts looking, with the count the kicker took); nothing possible
 * (blocking_threads_max busy threads): spinning - 1, the item waits for the
 * first thread that finishes (a thread always takes again after an item).
 * P1/P2 and L1/L2 are a Dekker pair: either L2 sees the item or P2 sees
 * spinning without this thread and the producer kicks. Parking is a second
 * pair with the kick's pop:
 *   park: K1 push own slot on idle (CAS) seq_cst; K2 load avail seq_cst;
 *         K3 > 0: kick (it may pop this very slot: then the wait returns
 *         at once)
 * a kick that found the stack empty before K1 precedes K2, which sees its
 * item. A thread that takes an item while more remain and nobody looks
 * (spinning 0) kicks too (a burst submitted while one thread looked gets a
 * thread per item, up to the bound, as Tokio's pool; one at a time).
 *
 * ---- Slots and the idle stack (ABA) ----------------------------------------------------------
 * The idle stack and the free-slot stack are Treiber stacks of slot
 * indices with a 32-bit tag in the head word (every change bumps it), so a
 * pop's CAS fails if the head was popped and pushed meanwhile. Slots are
 * never freed while the pool lives (the watchdog reads them). A thread whose
 * keep-alive ran out turns its slot PARKED -> GONE by CAS and exits without
 * touching it again; the slot stays in the idle stack until a kick pops it,
 * sees GONE (its CAS PARKED -> WOKEN fails) and puts it on the free stack.
 * A kick that then found the stack empty reclaimed every GONE slot of its
 * node, so at most blocking_threads_max slots are alive and at most as many
 * GONE: 2 x blocking_threads_max slots (pointers; each allocated on first
 * use).
 *
 * ---- Memory ordering ---------------------------------------------------------------------------
 *  (B1) An item's contents are published by the queue push (inbox.h I1) and
 *       read after the pop (acquire); the consumers' lock orders the pops.
 *  (B2) The Dekker pairs above: P1/P2, L1/L2, K1/K2 and the kick's pop are
 *       seq_cst.
 *  (B3) A slot's state is the futex word: the waker's CAS PARKED -> WOKEN is
 *       acq_rel (it publishes nothing the thread needs: the items are in the
 *       queue), the thread reads it acquire after its wait.
 *  (B4) Sweeps: a sweeper stores `sweep` (seq_cst), fences, then trylocks;
 *       an unlocker unlocks, fences, then loads `sweep`: one of them sees
 *       the other, so a requested sweep is done by the trylocker or by the
 *       holder at its unlock (urt_fence_full, base/fence.h: out of line under TSan).
 *  (B5) Shutdown: submitters bracket their push with `entering` (seq_cst)
 *       after reading `closed`; blocking_quiesce stores closed (seq_cst) and
 *       waits for entering == 0 (a waitcount, base/waitcount.h: the last
 *       sub wakes it; so is `running`, which the quiesce waits out next),
 *       so every accepted item is in a queue before
 *       it takes them out. `closing` (seq_cst) against a parking thread's
 *       PARKED store (seq_cst) is one more Dekker pair: either the thread
 *       sees closing and does not wait, or blocking_stop sees it parked and
 *       wakes it. `alive` is a thread's last touch of the pool (release);
 *       blocking_stop reads it acquire before the pool may be freed.
 *  (B6) busy: a taken item is counted in `running` (seq_cst, under the
 *       lock) before its queue slot is released (seq_cst), and a finished one
 *       leaves `running` after blocking_finish delivered its continuation,
 *       so a reader of (slots taken, then running) never misses one.
 */
#include "sched/blocking_int.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fence.h"

#define BLK_SPIN_NS (50 * 1000ull) /* a looking thread polls this long before it parks */
#define BLK_YIELD_EVERY 64         /* polls between two sched_yield() while looking */

static _Thread_local struct blk_slot *tls_slot; /* the calling pool thread's slot */

static inline void blk_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- futex ----------------------------------------------------------------------------------- */

void blk_futex_wake1(_Atomic uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void futex_wait_ns(_Atomic uint32_t *w, uint32_t val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

/* ---- Treiber stacks of slots (tagged heads) ---------------------------------------------------- */

void blk_stack_push(struct blocking_pool *p, _Atomic uint64_t *head, struct blk_slot *sl)
{
    uint64_t h = atomic_load_explicit(head, memory_order_relaxed), n;
    do {
        atomic_store_explicit(&sl->next, (uint32_t)h, memory_order_relaxed);
        n = ((h >> 32) + 1) << 32 | (sl->index + 1);
    } while (!atomic_compare_exchange_weak_explicit(head, &h, n, memory_order_seq_cst, memory_order_relaxed));
    (void)p;
}

static struct blk_slot *stack_pop(struct blocking_pool *p, _Atomic uint64_t *head)
{
    uint64_t h = atomic_load_explicit(head, memory_order_seq_cst), n;
    struct blk_slot *sl;
    do {
        uint32_t top = (uint32_t)h;
        if (top == 0)
            return NULL;
        sl = atomic_load_explicit(&p->slots[top - 1], memory_order_acquire);
        n = ((h >> 32) + 1) << 32 | atomic_load_explicit(&sl->next, memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(head, &h, n, memory_order_seq_cst, memory_order_seq_cst));
    return sl;
}

/* ---- the queue ---------------------------------------------------------------------------------- */

static struct urt_task *pop_locked(struct blk_node *nd)
{
    struct urt_task *t = nd->held_head;
    if (t) {
        nd->held_head = atomic_load_explicit(&t->priv.next, memory_order_relaxed);
        if (!nd->held_head)
            nd->held_tail = NULL;
        return t;
    }
    return inbox_pop(&nd->q); /* (B1) */
}

/* Under lock: the queue moves into held, and the items the sweep wants out
 * (all, or the doomed) come back as a list through priv.next. */
struct urt_task *blk_sweep_locked(struct blk_node *nd, bool all)
{
    struct urt_task *t, *keep_head = NULL, *keep_tail = NULL, *dead = NULL, **dead_end = &dead;
    for (;;) {
        t = pop_locked(nd);
        if (!t) {
            if (atomic_load_explicit(&nd->q.head, memory_order_acquire) != &nd->q.stub && all)
                continue; /* a push in transit: its producer links it in a moment (quiesce only) */
            break;
        }
        atomic_store_explicit(&t->priv.next, NULL, memory_order_relaxed);
        if (all || blocking_doomed(t)) {
            *dead_end = t;
            dead_end = (struct urt_task **)&t->priv.next;
            atomic_fetch_sub_explicit(&nd->avail, 1, memory_order_relaxed);
            continue;
        }
        if (keep_tail)
            atomic_store_explicit(&keep_tail->priv.next, t, memory_order_relaxed);
        else
            keep_head = t;
        keep_tail = t;
    }
    nd->held_head = keep_head;
    nd->held_tail = keep_tail;
    return dead;
}

/* Items taken out unrun: their continuations go out, then their slots. */
void blk_finish_unrun(struct blocking_pool *p, struct urt_task *dead)
{
    while (dead) {
        struct urt_task *next = atomic_load_explicit(&dead->priv.next, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->cancelled, 1, memory_order_relaxed);
        blocking_finish(dead, false);
        admission_release(p->adm); /* after the delivery (B6) */
        dead = next;
    }
}

static void sweep_try(struct blocking_pool *p, struct blk_node *nd);

/* Unlocks, then does a sweep someone asked for meanwhile (B4). */
static void node_unlock(struct blocking_pool *p, struct blk_node *nd)
{
    pthread_mutex_unlock(&nd->lock);
    urt_fence_full();
    if (atomic_load_explicit(&nd->sweep, memory_order_relaxed))
        sweep_try(p, nd);
}

static void sweep_try(struct blocking_pool *p, struct blk_node *nd)
{
    while (atomic_load_explicit(&nd->sweep, memory_order_seq_cst)) {
        if (pthread_mutex_trylock(&nd->lock) != 0)
            return; /* the holder sweeps at its unlock (B4) */
        struct urt_task *dead = NULL;
        if (atomic_exchange_explicit(&nd->sweep, 0, memory_order_seq_cst))
            dead = blk_sweep_locked(nd, false);
        pthread_mutex_unlock(&nd->lock);
        urt_fence_full();
        blk_finish_unrun(p, dead);
    }
}

void blocking_sweep(struct sched *s)
{
    struct blocking_pool *p = pool_of(s);
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        struct blk_node *nd = &p->nodes[i];
        if (!atomic_load_explicit(&nd->avail, memory_order_seq_cst))
            continue; /* nothing queued: nothing to sweep (an item queued later sees the state itself) */
        atomic_store_explicit(&nd->sweep, 1, memory_order_seq_cst);
        urt_fence_full(); /* (B4) */
        sweep_try(p, nd);
    }
}

/* ---- threads -------------------------------------------------------------------------------------- */

static void *blk_main(void *arg);

static struct blk_slot *slot_get(struct blocking_pool *p)
{
    struct blk_slot *sl = stack_pop(p, &p->free);
    if (sl)
        return sl;
    uint32_t i = atomic_load_explicit(&p->n_slots, memory_order_relaxed);
    do {
        if (i >= p->cap)
            return NULL;
    } while (!atomic_compare_exchange_weak_explicit(&p->n_slots, &i, i + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    /* a new index (the slots of indices below it were allocated, or failed
     * to be: such an index stays unused, the array has room for twice the
     * bound) */
    sl = aligned_alloc(64, (sizeof(*sl) + 63) & ~(size_t)63);
    if (!sl)
        return NULL;
    memset(sl, 0, sizeof(*sl));
    sl->index = i;
    atomic_store_explicit(&p->slots[i], sl, memory_order_release);
    return sl;
}

/* One more thread on nd (looking: it starts with a spinning count its
 * caller took). false: at blocking_threads_max, closing, or the system
 * refused (counted; the item waits for a thread that finishes). */
bool blk_spawn(struct blocking_pool *p, struct blk_node *nd, bool looking)
{
    if (atomic_load_explicit(&p->closing, memory_order_acquire))
        return false;
    uint32_t n = atomic_load_explicit(&p->threads, memory_order_relaxed);
    do {
        if (n >= p->max)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&p->threads, &n, n + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    struct blk_slot *sl = slot_get(p);
    if (!sl) {
        atomic_fetch_sub_explicit(&p->threads, 1, memory_order_relaxed);
        return false;
    }
    sl->node = nd;
    sl->looking = looking;
    atomic_store_explicit(&sl->state, SLOT_RUN, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->alive, 1, memory_order_relaxed);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (nd->bind)
        pthread_attr_setaffinity_np(&attr, sizeof(nd->cpus), &nd->cpus);
    pthread_t th;
    int err = pthread_create(&th, &attr, blk_main, sl); /* publishes the slot's fields */
    pthread_attr_destroy(&attr);
    if (err) {
        atomic_fetch_sub_explicit(&p->alive, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&p->threads, 1, memory_order_relaxed);
        blk_stack_push(p, &p->free, sl);
        return false;
    }
    atomic_fetch_add_explicit(&p->started, 1, memory_order_relaxed);
    return true;
}

/* A parked thread of nd woken (or a new one started) to look for work.
 * The caller holds the spinning count the thread starts with. */
static bool wake_one(struct blocking_pool *p, struct blk_node *nd)
{
    struct blk_slot *sl;
    while ((sl = stack_pop(p, &nd->idle))) {
        uint32_t st = SLOT_PARKED;
        if (atomic_compare_exchange_strong_explicit(&sl->state, &st, SLOT_WOKEN, memory_order_acq_rel,
                                                    memory_order_acquire)) { /* (B3) */
            atomic_fetch_sub_explicit(&nd->parked, 1, memory_order_relaxed);
            blk_futex_wake1(&sl->state);
            return true;
        }
        blk_stack_push(p, &p->free, sl); /* GONE: its thread exited; the slot is free again */
    }
    return blk_spawn(p, nd, true);
}

/* Someone must look at nd's queue: one thread is woken for it unless one looks already. */
static void kick(struct blocking_pool *p, struct blk_node *nd)
{
    uint32_t zero = 0;
    if (!atomic_compare_exchange_strong_explicit(&nd->spinning, &zero, 1, memory_order_seq_cst,
                                                 memory_order_seq_cst))
        return;
    if (!wake_one(p, nd))
        atomic_fetch_sub_explicit(&nd->spinning, 1, memory_order_seq_cst);
}

/* Takes the next item to run, or NULL. Items of cancelled jobs and aborting
 * transactions found on the way are finished unrun. */
static struct urt_task *take(struct blocking_pool *p, struct blk_node *nd)
{
    struct urt_task *t, *dead = NULL, **dead_end = &dead;
    pthread_mutex_lock(&nd->lock);
    while ((t = pop_locked(nd))) {
        atomic_fetch_sub_explicit(&nd->avail, 1, memory_order_seq_cst);
        if (!blocking_doomed(t)) {
            atomic_fetch_add_explicit(&p->running, 1, memory_order_seq_cst); /* (B6) */
            break;
        }
        atomic_store_explicit(&t->priv.next, NULL, memory_order_relaxed);
        *dead_end = t;
        dead_end = (struct urt_task **)&t->priv.next;
    }
    node_unlock(p, nd);
    if (t)
        admission_release(p->adm); /* after running + 1 (B6) */
    blk_finish_unrun(p, dead);
    return t;
}

static void run_item(struct blocking_pool *p, struct blk_slot *sl, struct urt_task *t)
{
    bool watched = p->s->cfg->task_runtime_limit_us != 0;
    uint64_t enq = t->priv.enqueue_ns, id = t->priv.id, start = 0, end = 0;
    bool timed = enq != 0 || probe_blocking_timing_on();
    if (timed) {
        start = urt_clock_ns();
        URT_PROBE_BLOCKING_START(sl->index, id, enq, start);
    }
    if (__builtin_expect(watched, 0))
        watchdog_begin(&sl->wd, t);
    t->fn(t, t->arg); /* the work */
    if (__builtin_expect(watched, 0))
        watchdog_end(&sl->wd);
    if (timed) {
        end = urt_clock_ns();
        if (enq && start >= enq)
            hist_record_shared(&p->wait_hist, start - enq);
        hist_record_shared(&p->run_hist, end - start);
        URT_PROBE_BLOCKING_DONE(sl->index, id, enq, start, end);
    }
    atomic_store_explicit(&sl->done, atomic_load_explicit(&sl->done, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    blocking_finish(t, true); /* the continuation goes to a worker: t may be gone from here on */
    urt_waitcount_sub(&p->running, 1); /* (B6) after the delivery; wakes the quiesce at 0 */
}

/* Looks for work for up to BLK_SPIN_NS (spinning counted by the caller):
 * true when avail says there is some. */
static bool spin_look(struct blocking_pool *p, struct blk_node *nd)
{
    uint64_t until = 0;
    for (uint32_t i = 1;; i++) {
        if (atomic_load_explicit(&nd->avail, memory_order_relaxed))
            return true;
        if (atomic_load_explicit(&p->closing, memory_order_relaxed))
            return false;
        if ((i & (BLK_YIELD_EVERY - 1)) == 0) {
            uint64_t now = urt_clock_ns();
            if (!until)
                until = now + BLK_SPIN_NS;
            else if (now >= until)
                return false;
            sched_yield(); /* more threads than CPUs: let the ones with work run */
        }
        blk_relax();
    }
}

enum park_end { PARK_WOKEN, PARK_EXIT };

/* May this idle thread exit (more than blocking_threads_min)? Takes it out of `threads`. */
static bool may_exit(struct blocking_pool *p)
{
    uint32_t n = atomic_load_explicit(&p->threads, memory_order_relaxed);
    do {
        if (n <= p->min)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&p->threads, &n, n - 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return true;
}

/* Parks sl until a kick wakes it (PARK_WOKEN: it looks, with the kicker's
 * spinning count), the keep-alive runs out (PARK_EXIT, the slot GONE and
 * `threads` already lowered) or the pool closes (PARK_EXIT). */
static enum park_end park(struct blocking_pool *p, struct blk_node *nd, struct blk_slot *sl)
{
    atomic_store_explicit(&sl->state, SLOT_PARKED, memory_order_seq_cst); /* (B5) */
    atomic_fetch_add_explicit(&nd->parked, 1, memory_order_relaxed);
    blk_stack_push(p, &nd->idle, sl);                                       /* K1 */
    if (atomic_load_explicit(&nd->avail, memory_order_seq_cst))         /* K2 */
        kick(p, nd);                                                    /* K3: may wake us */
    uint64_t deadline = urt_clock_ns() + p->keepalive_ns;
    for (;;) {
        if (atomic_load_explicit(&p->closing, memory_order_seq_cst)) /* (B5) */
            goto leave;
        uint64_t now = urt_clock_ns();
        if (now >= deadline) {
            if (!may_exit(p)) {
                deadline = now + p->keepalive_ns;
                continue;
            }
            uint32_t st = SLOT_PARKED;
            if (atomic_compare_exchange_strong_explicit(&sl->state, &st, SLOT_GONE, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                atomic_fetch_sub_explicit(&nd->parked, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&p->exited, 1, memory_order_relaxed);
                return PARK_EXIT; /* the slot is not ours any more */
            }
            atomic_fetch_add_explicit(&p->threads, 1, memory_order_relaxed); /* woken meanwhile: stay */
        }
        if (atomic_load_explicit(&sl->state, memory_order_acquire) == SLOT_WOKEN) { /* (B3) */
            atomic_store_explicit(&sl->state, SLOT_RUN, memory_order_relaxed);
            return PARK_WOKEN;
        }
        futex_wait_ns(&sl->state, SLOT_PARKED, deadline - now);
    }
leave: {
    uint32_t st = SLOT_PARKED; /* closing: out of the stack's reach (a kick finds it GONE) */
    if (atomic_compare_exchange_strong_explicit(&sl->state, &st, SLOT_GONE, memory_order_acq_rel,
                                                memory_order_acquire))
        atomic_fetch_sub_explicit(&nd->parked, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&p->threads, 1, memory_order_relaxed);
    return PARK_EXIT;
}
}

static void blk_loop(struct blocking_pool *p, struct blk_node *nd, struct blk_slot *sl)
{
    bool looking = sl->looking; /* holds a spinning count */
    for (;;) {
        struct urt_task *t = take(p, nd);
        if (t) {
            if (looking) { /* the last one looking, and more left: someone else looks now */
                looking = false;
                if (atomic_fetch_sub_explicit(&nd->spinning, 1, memory_order_seq_cst) == 1 &&
                    atomic_load_explicit(&nd->avail, memory_order_seq_cst))
                    kick(p, nd);
            } else if (atomic_load_explicit(&nd->avail, memory_order_relaxed) &&
                       atomic_load_explicit(&nd->spinning, memory_order_relaxed) == 0) {
                kick(p, nd);
            }
            run_item(p, sl, t);
            continue;
        }
        if (atomic_load_explicit(&p->closing, memory_order_acquire))
            break;
        if (!looking) {
            atomic_fetch_add_explicit(&nd->spinning, 1, memory_order_seq_cst);
            looking = true;
        }
        if (spin_look(p, nd))
            continue;
        atomic_fetch_sub_explicit(&nd->spinning, 1, memory_order_seq_cst); /* L1 */
        looking = false;
        if (atomic_load_explicit(&nd->avail, memory_order_seq_cst))       /* L2 */
            continue;
        if (park(p, nd, sl) == PARK_EXIT)
            return;
        looking = true;
    }
    if (looking)
        atomic_fetch_sub_explicit(&nd->spinning, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&p->threads, 1, memory_order_relaxed);
}

static void *blk_main(void *arg)
{
    struct blk_slot *sl = arg;
    struct blk_node *nd = sl->node;
    struct blocking_pool *p = nd->pool;
    char name[16];
    snprintf(name, sizeof(name), "urt-blk-%u", sl->index);
    pthread_setname_np(pthread_self(), name);
    tls_slot = sl;
    blk_loop(p, nd, sl);
    tls_slot = NULL;
    atomic_fetch_sub_explicit(&p->alive, 1, memory_order_release); /* (B5) the last touch */
    return NULL;
}

bool blocking_on_pool_thread(const struct sched *s)
{
    struct blk_slot *sl = tls_slot;
    return sl && sl->node->pool->s == s;
}

/* ---- submission ------------------------------------------------------------------------------------ */

uint32_t blocking_node_of(const struct sched *s, const struct worker *w)
{
    const struct blocking_pool *p = pool_of(s);
    return w ? p->worker_node[w->index] : 0;
}

/* No thread lives at all (the pool's first offload, or every one timed out):
 * start one before queueing, so that a refused pthread_create is the
 * submission's -EAGAIN rather than an item nobody will take. */
static int ensure_thread(struct blocking_pool *p, struct blk_node *nd)
{
    if (atomic_load_explicit(&p->threads, memory_order_relaxed) != 0)
        return 0;
    if (blk_spawn(p, nd, false))
        return 0;
    return atomic_load_explicit(&p->threads, memory_order_relaxed) ? 0 : -EAGAIN;
}

int blocking_queue(struct sched *s, struct urt_task *t, uint32_t node, unsigned flags)
{
    struct blocking_pool *p = pool_of(s);
    struct blk_node *nd = &p->nodes[node];
    bool foreign = sched_current(s) == NULL;
    atomic_fetch_add_explicit(&p->entering, 1, memory_order_seq_cst); /* (B5) */
    int err = 0;
    if (atomic_load_explicit(&p->closed, memory_order_seq_cst) ||
        (foreign && atomic_load_explicit(&s->phase, memory_order_seq_cst) != PHASE_RUNNING))
        err = -ESHUTDOWN;
    bool blocking = false;
    if (!err && tls_slot)
        flags &= ~URT_SUBMIT_BLOCK; /* a pool thread never waits for the pool's own room */
    if (!err)
        err = admission_take(s, p->adm, flags, &blocking);
    if (!err && (err = ensure_thread(p, nd)))
        admission_release(p->adm);
    if (!err) {
        if (probe_blocking_timing_on()) {
            t->priv.id = probe_next_task_id();
            t->priv.enqueue_ns = urt_clock_ns();
            struct worker *self = sched_current(s);
            URT_PROBE_BLOCKING_SUBMIT(self ? (int64_t)self->index : -1, t->priv.id, t->priv.enqueue_ns);
        } else {
            t->priv.enqueue_ns = 0;
        }
        inbox_push(&nd->q, t);                                           /* P1 (B1) */
        atomic_fetch_add_explicit(&nd->avail, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&nd->spinning, memory_order_seq_cst) == 0) /* P2 */
            kick(p, nd);                                                 /* P3 */
    }
    urt_waitcount_sub(&p->entering, 1); /* (B5) wakes the quiesce at 0 */
    if (blocking)
        admission_left(p->adm);
    return err;
}
