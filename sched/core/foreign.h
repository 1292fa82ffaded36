/*
 * sched/core/foreign.h — the shutdown fence of submitters that are not
 * workers: a submission from any other thread either sees the runtime's
 * stop and is refused (-ESHUTDOWN), or the stop waits until its push is
 * done and then drains or cancels what it pushed. Never neither.
 *
 * ---- Design: a mark per thread, an asymmetric Dekker pair -----------------
 * Every thread that submits from outside the workers owns a mark: one word,
 * on a cache line of its own, naming the runtime the thread is pushing into
 * (the runtime's id, never reused; 0 outside a submission).
 *
 *   submitter (foreign_enter ... foreign_leave):
 *     M1  mark = s->id                      relaxed
 *         urt_fence_light()                 base/fence.h: a compiler barrier
 *     M2  load phase; not RUNNING: M3 at once, -ESHUTDOWN
 *         ... the push (inbox, sticky queue, lane FIFO, the wake) ...
 *     M3  mark = 0                          release: its last touch of s
 *   stopper (foreign_wait, sched_stop):
 *     S1  phase = DRAINING or STOPPING      seq_cst (sched/core/start.c)
 *         urt_fence_heavy()                 membarrier(2)
 *     S2  for every mark: wait while it names s   acquire
 *
 * M1/M2 against S1/S2 is a Dekker pair (base/fence.h): M2 sees the stop, or
 * S2 sees the mark and waits for M3, whose release hands the push to the
 * stop's drain or cancel (S2's acquire). Before, the fence was a
 * seq_cst counter in the runtime: two locked RMWs per foreign submission,
 * 45% of a lane submission's cost from another thread (perf,
 * sticky_tx_remote with 10-step bodies; docs/benchmarks.md).
 *
 * Marks live on one process-wide list that only grows: pushed with a CAS,
 * never unlinked, so S2 walks it without a lock. A thread takes a free mark
 * at its first foreign submission (or allocates one) and gives it back when
 * it exits (a pthread key's destructor): the list is as long as the most
 * threads that held marks at once. Without a key (pthread_key_create
 * failed) marks are not given back; without memory for a mark, the thread
 * submits on the spare mark, under a spin lock held for the bracket only.
 * A bracket is not nested in another: no path submits from inside one.
 *
 * ---- Memory ordering -------------------------------------------------------
 *  (G1) M1, M2 and S2's loads are the Dekker pair of base/fence.h (F2).
 *  (G2) M3 is a release store, S2's load acquires it: the stop reads the
 *       queues after every push that passed M2.
 *  (G3) The list's head is pushed with a release CAS and read with
 *       acquire; a mark's next and its line are written before its push
 *       and never again. used is taken by an acquire CAS and given back with
 *       a release store (the exiting thread's last touch of its mark).
 */
#ifndef URT_SCHED_CORE_FOREIGN_H
#define URT_SCHED_CORE_FOREIGN_H

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/fence.h"
#include "base/tls.h"

struct foreign_mark {
    alignas(64) _Atomic uint64_t in; /* the id of the runtime being pushed into; 0: none */
    _Atomic bool used;               /* owned by a live thread (G3) */
    struct foreign_mark *next;       /* constant once on the list */
};

/* This thread's mark; NULL until its first foreign submission (and after
 * it gave it back at exit). */
extern _Thread_local struct foreign_mark *urt__foreign_mark URT_TLS_IE;

#if URT_FAULT_INJECTION
/* Tests: while set, a thread without a mark gets none (as without memory)
 * and submits on the spare. */
extern _Atomic bool urt__foreign_fault_no_mark;
#endif

/* Takes a mark for this thread (slow path of foreign_enter): never NULL —
 * the spare, locked, when none can be had. */
struct foreign_mark *foreign_mark_take(void);
/* Unlocks the spare mark (foreign_leave of a thread without a mark). */
void foreign_spare_leave(void);

/* M3 (G2): the submitter's last touch of the runtime. */
static inline void foreign_leave(void)
{
    struct foreign_mark *m = urt__foreign_mark;
    if (__builtin_expect(m != NULL, 1))
        atomic_store_explicit(&m->in, 0, memory_order_release);
    else
        foreign_spare_leave();
}

/* M1, the light fence and M2: true when the runtime takes the submission
 * (then foreign_leave after the push), false when it is stopping (the
 * bracket is already closed). phase is the runtime's phase word, running
 * its RUNNING value. */
static inline bool foreign_enter(uint64_t id, const _Atomic uint32_t *phase, uint32_t running)
{
    struct foreign_mark *m = urt__foreign_mark;
    if (__builtin_expect(m == NULL, 0))
        m = foreign_mark_take();
    assert(atomic_load_explicit(&m->in, memory_order_relaxed) == 0 && "a foreign bracket inside another");
    atomic_store_explicit(&m->in, id, memory_order_relaxed); /* M1 (G1) */
    urt_fence_light();
    if (__builtin_expect(atomic_load_explicit(phase, memory_order_acquire) == running, 1)) /* M2 */
        return true;
    foreign_leave(); /* refused: the bracket closes at once */
    return false;
}

/* S1 done by the caller: the heavy fence, then S2 for runtime id. */
void foreign_wait(uint64_t id);

/* The marks on the list, and in *taken (if not NULL) how many threads hold
 * one (tests, diagnostics; a snapshot). */
size_t foreign_marks_count(size_t *taken);

#endif
