/*
 * sched/core/foreign.c — the foreign submitters' marks: taking one, giving
 * it back at thread exit, the spare, and the stop's wait (design and
 * memory-ordering contract in sched/core/foreign.h).
 */
#include "sched/core/foreign.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

_Thread_local struct foreign_mark *urt__foreign_mark URT_TLS_IE;

static _Atomic(struct foreign_mark *) marks; /* the list's head (G3) */
static struct foreign_mark spare;             /* for a thread that could get no mark */
static atomic_flag spare_lock = ATOMIC_FLAG_INIT;

#if URT_FAULT_INJECTION
_Atomic bool urt__foreign_fault_no_mark;
#endif

static pthread_key_t mark_key;
static bool mark_key_ok;
static pthread_once_t mark_once = PTHREAD_ONCE_INIT;

/* Thread exit: the mark goes back to the list's free ones (its word is 0:
 * no bracket is open at exit). */
static void mark_give_back(void *p)
{
    struct foreign_mark *m = p;
    urt__foreign_mark = NULL; /* a later destructor that submits takes one again */
    atomic_store_explicit(&m->used, false, memory_order_release); /* (G3) */
}

static void mark_key_create(void)
{
    mark_key_ok = pthread_key_create(&mark_key, mark_give_back) == 0;
}

/* A free mark of the list, taken; NULL if none. */
static struct foreign_mark *mark_reuse(void)
{
    for (struct foreign_mark *m = atomic_load_explicit(&marks, memory_order_acquire); m; m = m->next) {
        bool free_ = false;
        if (!atomic_load_explicit(&m->used, memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&m->used, &free_, true, memory_order_acquire,
                                                    memory_order_relaxed))
            return m;
    }
    return NULL;
}

/* A new mark, on the list; NULL without memory. */
static struct foreign_mark *mark_new(void)
{
    struct foreign_mark *m = aligned_alloc(64, sizeof(*m));
    if (!m)
        return NULL;
    atomic_init(&m->in, 0);
    atomic_init(&m->used, true);
    struct foreign_mark *head = atomic_load_explicit(&marks, memory_order_relaxed);
    do
        m->next = head;
    while (!atomic_compare_exchange_weak_explicit(&marks, &head, m, memory_order_release, memory_order_relaxed));
    return m;
}

struct foreign_mark *foreign_mark_take(void)
{
    pthread_once(&mark_once, mark_key_create);
    struct foreign_mark *m = NULL;
#if URT_FAULT_INJECTION
    if (!atomic_load_explicit(&urt__foreign_fault_no_mark, memory_order_relaxed))
#endif
    {
        m = mark_reuse();
        if (!m)
            m = mark_new();
    }
    if (m && mark_key_ok)
        (void)pthread_setspecific(mark_key, m); /* failing (no memory): the mark is never given back */
    if (m) {
        urt__foreign_mark = m;
        return m;
    }
    while (atomic_flag_test_and_set_explicit(&spare_lock, memory_order_acquire))
        sched_yield();
    return &spare;
}

void foreign_spare_leave(void)
{
    atomic_store_explicit(&spare.in, 0, memory_order_release);
    atomic_flag_clear_explicit(&spare_lock, memory_order_release);
}

/* A pushing submitter is between M2 and M3: a few hundred nanoseconds,
 * unless it was preempted there. Not a count to wait on (base/waitcount.h):
 * the marks are the submitters' own words, written with plain stores. */
static void wait_mark(const struct foreign_mark *m, uint64_t id)
{
    for (unsigned spins = 0; atomic_load_explicit(&m->in, memory_order_acquire) == id; spins++) { /* S2 (G2) */
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

void foreign_wait(uint64_t id)
{
    urt_fence_heavy(); /* (G1) after the caller's S1 */
    for (struct foreign_mark *m = atomic_load_explicit(&marks, memory_order_acquire); m; m = m->next)
        wait_mark(m, id);
    wait_mark(&spare, id);
}

size_t foreign_marks_count(size_t *taken)
{
    size_t n = 0, t = 0;
    for (struct foreign_mark *m = atomic_load_explicit(&marks, memory_order_acquire); m; m = m->next) {
        n++;
        t += atomic_load_explicit(&m->used, memory_order_relaxed);
    }
    if (taken)
        *taken = t;
    return n;
}
