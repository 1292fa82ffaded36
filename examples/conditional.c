/* examples/conditional.c — a conditional task: the watcher thread runs a cheap
 * check; once it passes, the body runs on a worker. A cond can be cancelled
 * until its body is handed over.
 *   cc conditional.c $(pkg-config --cflags --libs urt) && ./a.out */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep */
#endif
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include <urt/urt.h>

static atomic_bool ready;    /* what the check looks at */
static atomic_int body_runs; /* set by the body */
static atomic_int cancels;   /* set by the cancel callback */

static bool check(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    return atomic_load(&ready);
}

static enum urt_task_result body(struct urt_cond *c, void *arg)
{
    (void)c;
    printf("body: %s\n", (const char *)arg);
    fflush(stdout);
    atomic_fetch_add(&body_runs, 1);
    return URT_TASK_DONE;
}

static bool never(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    return false;
}

static void on_cancel(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_fetch_add(&cancels, 1);
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }

    struct urt_cond c;
    urt_cond_init(&c, check, body, "the flag is set");
    c.interval_us = 500; /* check every 0.5 ms */
    if (urt_cond_add(rt, &c))
        return 1;
    usleep(5000);
    printf("before the flag: body ran %d times\n", atomic_load(&body_runs));
    fflush(stdout);
    atomic_store(&ready, true);
    while (atomic_load(&body_runs) == 0)
        sched_yield();

    struct urt_cond c2;
    urt_cond_init(&c2, never, body, "never printed");
    c2.cancel = on_cancel;
    urt_cond_add(rt, &c2);
    int rc = urt_cond_cancel(rt, &c2);
    while (atomic_load(&cancels) == 0)
        sched_yield();
    printf("cancel: %d, cancel callback ran %d time\n", rc, atomic_load(&cancels));

    struct urt_watcher_stats ws;
    urt_watcher_stats(rt, &ws);
    printf("watcher: %llu check passed, %llu body scheduled, %llu cancelled\n",
           (unsigned long long)ws.checks_passed, (unsigned long long)ws.bodies_scheduled,
           (unsigned long long)ws.cancelled);
    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) < 0;
}
