/*
 * tests/unit/test_inbox.c — the Vyukov intrusive MPSC queue (sched/core/inbox.h).
 *
 * 1. Reference model: seeded random push/pop sequences on one thread compared
 *    with a FIFO array; inbox_maybe_nonempty() must equal "model not empty"
 *    after every step (single-threaded there is no push in transit).
 * 2. A push "in transit" (exchange of head done, link not yet stored) is
 *    simulated step by step: pop must return NULL, maybe_nonempty true (what
 *    the worker's suspend recheck relies on), and the task appears once linked.
 * 3. Stress: 4 producers push their own items while one consumer pops; per
 *    producer the items must arrive in push order, each exactly once, with
 *    the payload written before the push visible to the consumer (I1).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "sched/core/inbox.h"
#include "tests/helpers.h"

/* ---- 1. reference model -------------------------------------------------------- */

Test(inbox, model_fifo_random, .timeout = 60)
{
    enum { N = 1 << 15 };
    static struct urt_task pool[N];
    static struct urt_task *model[N];
    for (uint64_t seed = 1; seed <= 20; seed++) {
        struct inbox q;
        inbox_init(&q);
        size_t head = 0, tail = 0, next = 0;
        uint64_t r = seed * 0x9E3779B97F4A7C15ull;
        cr_assert_not(inbox_maybe_nonempty(&q));
        for (int op = 0; op < 30000; op++) {
            uint64_t x = rng_next(&r);
            bool push = next < N && (x % 100) < (op < 15000 ? 65u : 35u);
            if (push) {
                struct urt_task *t = &pool[next++];
                inbox_push(&q, t);
                model[tail++] = t;
            } else {
                struct urt_task *got = inbox_pop(&q);
                struct urt_task *want = head < tail ? model[head++] : NULL;
                cr_assert_eq(got, want, "seed %lu op %d: pop %p, model %p", (unsigned long)seed, op, (void *)got,
                             (void *)want);
            }
            cr_assert_eq(inbox_maybe_nonempty(&q), head < tail, "seed %lu op %d: maybe_nonempty wrong",
                         (unsigned long)seed, op);
        }
        while (head < tail)
            cr_assert_eq(inbox_pop(&q), model[head++]);
        cr_assert_null(inbox_pop(&q));
        cr_assert_not(inbox_maybe_nonempty(&q));
        /* The queue is reusable after running dry. */
        inbox_push(&q, &pool[0]);
        cr_assert(inbox_maybe_nonempty(&q));
        cr_assert_eq(inbox_pop(&q), &pool[0]);
        cr_assert_null(inbox_pop(&q));
    }
}

/* ---- 2. push in transit ------------------------------------------------------------ */

Test(inbox, push_in_transit_is_seen_by_maybe_nonempty, .timeout = 10)
{
    struct inbox q;
    struct urt_task a, b;
    inbox_init(&q);

    /* First half of inbox_push(&q, &a): the exchange, without the link. */
    atomic_store_explicit(&a.priv.next, NULL, memory_order_relaxed);
    struct urt_task *prev = atomic_exchange_explicit(&q.head, &a, memory_order_acq_rel);
    cr_assert_null(inbox_pop(&q), "an unlinked push cannot be popped");
    cr_assert(inbox_maybe_nonempty(&q), "a push in transit must count as work before suspending");
    atomic_store_explicit(&prev->priv.next, &a, memory_order_release);
    cr_assert_eq(inbox_pop(&q), &a);
    cr_assert_null(inbox_pop(&q));
    cr_assert_not(inbox_maybe_nonempty(&q));

    /* Same with one element already queued: pop returns it, then NULL while
     * the second push is in transit. */
    inbox_push(&q, &a);
    atomic_store_explicit(&b.priv.next, NULL, memory_order_relaxed);
    prev = atomic_exchange_explicit(&q.head, &b, memory_order_acq_rel);
    cr_assert_eq(prev, &a);
    cr_assert_null(inbox_pop(&q), "a is last but b's exchange moved head: pop must wait");
    cr_assert(inbox_maybe_nonempty(&q));
    atomic_store_explicit(&prev->priv.next, &b, memory_order_release);
    cr_assert_eq(inbox_pop(&q), &a);
    cr_assert_eq(inbox_pop(&q), &b);
    cr_assert_null(inbox_pop(&q));
    cr_assert_not(inbox_maybe_nonempty(&q));
}

/* ---- 3. 4 producers, 1 consumer --------------------------------------------------- */

#define N_PRODUCERS 4

struct item {
    struct urt_task task;
    uint32_t producer, seq; /* payload, plain stores before the push */
};

struct mpsc {
    struct inbox q;
    struct item *items[N_PRODUCERS];
    size_t per_producer;
    _Atomic int started;
};

struct producer_arg {
    struct mpsc *m;
    uint32_t id;
};

static void *producer_main(void *p)
{
    struct producer_arg *a = p;
    struct mpsc *m = a->m;
    atomic_fetch_add(&m->started, 1);
    while (atomic_load(&m->started) < N_PRODUCERS)
        ;
    for (size_t i = 0; i < m->per_producer; i++) {
        struct item *it = &m->items[a->id][i];
        it->producer = a->id;
        it->seq = (uint32_t)i;
        it->task.arg = it;
        inbox_push(&m->q, &it->task);
    }
    return NULL;
}

Test(inbox, stress_four_producers_fifo_exactly_once, .timeout = 120)
{
    struct mpsc m;
    inbox_init(&m.q);
    m.per_producer = SCALE(2000000, 500000);
    atomic_init(&m.started, 0);
    for (int p = 0; p < N_PRODUCERS; p++) {
        m.items[p] = calloc(m.per_producer, sizeof(struct item));
        cr_assert_not_null(m.items[p]);
    }
    pthread_t th[N_PRODUCERS];
    struct producer_arg pa[N_PRODUCERS];
    for (uint32_t p = 0; p < N_PRODUCERS; p++) {
        pa[p] = (struct producer_arg){&m, p};
        cr_assert_eq(pthread_create(&th[p], NULL, producer_main, &pa[p]), 0);
    }

    uint64_t expect_next[N_PRODUCERS] = {0};
    uint64_t total = 0, want = (uint64_t)m.per_producer * N_PRODUCERS, empty_polls = 0;
    uint64_t deadline = now_ns() + 100ull * 1000000000ull;
    while (total < want) {
        struct urt_task *t = inbox_pop(&m.q);
        if (!t) {
            if ((++empty_polls & 0xffff) == 0)
                cr_assert_lt(now_ns(), deadline, "consumer stuck after %lu of %lu items", (unsigned long)total,
                             (unsigned long)want);
            continue;
        }
        struct item *it = (struct item *)t; /* task is the first member */
        cr_assert_eq(t->arg, it, "payload of a popped task not visible");
        cr_assert_lt(it->producer, N_PRODUCERS, "an item that was never pushed");
        cr_assert_eq(it, &m.items[it->producer][it->seq], "an item that was never pushed");
        cr_assert_eq(it->seq, expect_next[it->producer], "producer %u: got seq %u, expected %lu (order or duplicate)",
                     it->producer, it->seq, (unsigned long)expect_next[it->producer]);
        expect_next[it->producer]++;
        total++;
    }
    for (int p = 0; p < N_PRODUCERS; p++)
        pthread_join(th[p], NULL);
    cr_assert_null(inbox_pop(&m.q), "nothing may come out after every item");
    cr_assert_not(inbox_maybe_nonempty(&m.q));
    for (int p = 0; p < N_PRODUCERS; p++) {
        cr_assert_eq(expect_next[p], m.per_producer);
        free(m.items[p]);
    }
    leak_check();
}

/* The interleaving that lost tasks (found by the lost-wakeup stress suite,
 * relay variant, about one run in ten):
 *   consumer: pops up to X (the last node), reads head == X, goes on to
 *             re-push the stub;
 *   producer: y.next = NULL; prev = exchange(head, Y) -> X; (not linked yet)
 *   consumer: stub.next = NULL; exchange(head, stub) -> Y; Y.next = stub;
 *             X.next is still NULL: pop returns NULL.
 * Now tail == X, head == stub, stub.next == NULL while X and Y are queued. A
 * check that looks only at head and the stub said "empty": the worker
 * suspended, and the producer's wake check (made while it was awake) sent
 * nothing. The state is built by hand, as the two threads leave it. */
Test(inbox, nonempty_while_consumer_waits_on_a_link_in_transit, .timeout = 10)
{
    struct inbox q;
    inbox_init(&q);
    struct urt_task x, y;
    urt_task_init(&x, NULL, NULL);
    urt_task_init(&y, NULL, NULL);

    atomic_store(&x.priv.next, NULL);       /* the producer's link X -> Y is in transit */
    atomic_store(&y.priv.next, &q.stub);    /* the consumer's stub push landed behind Y */
    atomic_store(&q.stub.priv.next, NULL);
    atomic_store(&q.head, &q.stub);
    q.tail = &x;                            /* the consumer stopped at X */

    cr_assert(inbox_maybe_nonempty(&q), "two tasks queued, the suspend check must see them");
    cr_assert_eq(inbox_pop(&q), NULL, "X cannot be popped before its successor is linked");
    cr_assert(inbox_maybe_nonempty(&q));

    atomic_store(&x.priv.next, &y);         /* the producer completes its push */
    cr_assert_eq(inbox_pop(&q), &x);
    cr_assert_eq(inbox_pop(&q), &y);
    cr_assert_eq(inbox_pop(&q), NULL);
    cr_assert_not(inbox_maybe_nonempty(&q));
}
