/* examples/blocking.c — blocking work: a task hands a function that blocks
 * (here a sleep and a checksum, where a real program would call a
 * compression library, a file API or getaddrinfo) to the runtime's blocking
 * pool and goes on in a continuation on a worker; on a lane, the lane's next
 * task waits for that continuation.
 *   cc blocking.c $(pkg-config --cflags --libs urt) && ./a.out */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep */
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <urt/urt.h>

static urt_runtime *rt;
static atomic_int finished;

struct doc {
    struct urt_task task;   /* the lane task that offloads */
    struct urt_blocking b;  /* the offload, embedded: no allocation */
    const char *text;
    int on_worker;          /* where the function ran (urt_current_worker) */
};

/* On a pool thread: may block. */
static int64_t checksum(void *arg)
{
    struct doc *d = arg;
    d->on_worker = urt_current_worker(rt); /* -1: not a worker */
    usleep(20 * 1000);                     /* the blocking call */
    uint32_t h = 2166136261u;              /* FNV-1a */
    for (const char *p = d->text; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h;
}

/* The continuation: on a worker, as a task of the lane. */
static void checked(struct urt_blocking *b, int64_t res, void *arg)
{
    struct doc *d = arg;
    printf("continuation: checksum of \"%s\" %08x (function on a worker: %s, continuation on a worker: %s, "
           "ran: %s)\n",
           d->text, (uint32_t)res, d->on_worker >= 0 ? "yes" : "no", urt_current_worker(rt) >= 0 ? "yes" : "no",
           urt_blocking_ran(b) ? "yes" : "no");
}

static enum urt_task_result offload_task(struct urt_task *t, void *arg)
{
    struct doc *d = arg;
    (void)t;
    printf("lane task 1: offloads the checksum of \"%s\"\n", d->text);
    urt_blocking_init(&d->b, checksum, checked, d);
    if (urt_blocking_submit(rt, &d->b, 0))
        printf("offload refused: %s\n", urt_last_error());
    return URT_TASK_DONE; /* the lane holds until the continuation ran */
}

static enum urt_task_result next_task(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    printf("lane task 2: runs after the continuation\n");
    return URT_TASK_DONE;
}

/* The allocating form, from the main thread (not a worker). */
static int64_t slow_answer(void *arg)
{
    (void)arg;
    usleep(10 * 1000);
    return 42;
}

static void answered(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b;
    (void)arg;
    printf("from the main thread: the answer is %lld\n", (long long)res);
    atomic_store(&finished, 1);
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }
    urt_lane *lane;
    if (urt_lane_create(rt, &lane))
        return 1;
    struct doc d = {.text = "hello, blocking pool"};
    struct urt_task second;
    urt_task_init(&d.task, offload_task, &d);
    urt_task_init(&second, next_task, NULL);
    urt_lane_submit(lane, &d.task, 0);
    urt_lane_submit(lane, &second, 0);
    urt_lane_destroy(lane); /* waits for both tasks and the continuation */

    if (urt_blocking_spawn(rt, slow_answer, answered, NULL, 0))
        return 1;
    while (!atomic_load(&finished))
        usleep(1000);

    struct urt_blocking_stats st;
    urt_blocking_stats(rt, &st);
    printf("pool: %llu functions ran, none cancelled: %s\n", (unsigned long long)st.done,
           st.cancelled == 0 ? "yes" : "no");
    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) < 0;
}
