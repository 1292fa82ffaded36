/*
 * bench/wake-placement.c — where does the kernel run a thread that a busy
 * thread wakes, and for how long do the two then share one CPU?
 *
 * Why: a worker that finds more work than it can run wakes a suspended
 * peer so the peer can take some (sched/core/worker.c, surplus wakes; lane
 * activations and sheds, sched/lane.c). That helps only if the peer runs on
 * another CPU. This probe measures what the machine's scheduler does with
 * such a wake, without urt: thread A spins, wakes thread B (a futex), and
 * keeps spinning; B, once running, spins too. Per round it records whether
 * B first ran on A's CPU, how long after the wake B first ran (for each of
 * the two cases), and how long
 * the two ran on one CPU before the kernel's load balancer moved one of
 * them (capped at SPLIT_CAP_US). Rounds are ROUND_GAP_US apart, both
 * threads asleep in between, as between two urt-load iterations.
 *
 * Built with the project (build/bench/wake-placement); takes about 4 s.
 * Output: one line per quantity, median, p90 and max over the rounds.
 *
 * Memory ordering: `go` (A -> B: a round starts) and `b_cpu`/`b_ns` (B -> A)
 * are seq_cst atomics; the probe measures the kernel, not the atomics.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 200
#define ROUND_GAP_US 10000
#define SPLIT_CAP_US 20000

static atomic_int go, stop_b, round_over;
static atomic_int b_cpu = -1;
static _Atomic uint64_t b_ns;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex(atomic_int *w, int op, int val)
{
    syscall(SYS_futex, (int *)w, op, val, NULL, NULL, 0);
}

/* B: sleeps until a round starts, reports where and when it first ran,
 * then keeps publishing its CPU until the round is over. */
static void *thread_b(void *arg)
{
    (void)arg;
    for (;;) {
        while (!atomic_load(&go))
            futex(&go, FUTEX_WAIT_PRIVATE, 0);
        if (atomic_load(&stop_b))
            return NULL;
        atomic_store(&b_ns, now_ns());
        while (!atomic_load(&round_over))
            atomic_store(&b_cpu, sched_getcpu());
        atomic_store(&go, 0);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    printf("%s: median %.1f us, p90 %.1f us, max %.1f us\n", what, v[n / 2] / 1e3, v[n * 9 / 10] / 1e3,
           v[n - 1] / 1e3);
}

int main(void)
{
    pthread_t b;
    if (pthread_create(&b, NULL, thread_b, NULL) != 0)
        return 1;
    static uint64_t run_same[ROUNDS], run_other[ROUNDS], shared[ROUNDS];
    int same = 0, other = 0, capped = 0;
    for (int i = 0; i < ROUNDS; i++) {
        usleep(ROUND_GAP_US);
        /* wake: B's first CPU and delay */
        atomic_store(&b_cpu, -1);
        atomic_store(&b_ns, 0);
        atomic_store(&round_over, 0);
        uint64_t t0 = now_ns();
        atomic_store(&go, 1);
        futex(&go, FUTEX_WAKE_PRIVATE, 1);
        int first = -1;
        while ((first = atomic_load(&b_cpu)) < 0 && now_ns() - t0 < (uint64_t)SPLIT_CAP_US * 1000u) {
        }
        uint64_t delay = atomic_load(&b_ns) ? atomic_load(&b_ns) - t0 : (uint64_t)SPLIT_CAP_US * 1000u;
        if (first >= 0 && first == sched_getcpu())
            run_same[same++] = delay;
        else
            run_other[other++] = delay;
        /* both spin: until they run on different CPUs */
        uint64_t t1 = now_ns(), t;
        while ((t = now_ns()) - t1 < (uint64_t)SPLIT_CAP_US * 1000u && atomic_load(&b_cpu) == sched_getcpu()) {
        }
        shared[i] = t - t1;
        capped += shared[i] >= (uint64_t)SPLIT_CAP_US * 1000u;
        atomic_store(&round_over, 1);
        while (atomic_load(&go)) {
        }
    }
    atomic_store(&stop_b, 1);
    atomic_store(&go, 1);
    futex(&go, FUTEX_WAKE_PRIVATE, 1);
    pthread_join(b, NULL);
    printf("online CPUs: %ld, rounds: %d\n", sysconf(_SC_NPROCESSORS_ONLN), ROUNDS);
    printf("woken thread first ran on the waker's CPU: %d of %d rounds\n", same, ROUNDS);
    if (same)
        report("wake to first run, on the waker's CPU", run_same, same);
    if (other)
        report("wake to first run, on another CPU", run_other, other);
    report("time both spun on one CPU", shared, ROUNDS);
    printf("rounds still on one CPU after %d us: %d\n", SPLIT_CAP_US, capped);
    return 0;
}
