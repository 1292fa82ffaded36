/*
 * tests/bpf/bpf_child.c — the traced process of the BPF suite: linked with the
 * shared liburt (USDT probes live in liburt.so), driven over stdin/stdout.
 *
 *   -> "ready"                      runtime created (2 workers), nothing run yet
 *   <- "go N"                       N spawns from this thread, each spawning one
 *                                   child task locally (2N task calls); waits
 *                                   until every worker is suspended (quiesced)
 *   -> "worker W RUN STOLEN" x 2, "fired F", "end"
 *   <- "again N"                    N more plain spawns, quiesce
 *   -> "fired F", "end"
 *   <- "exit"                       destroy (drain), exit 0
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <urt/urt.h>

static urt_runtime *rt;
static _Atomic uint64_t calls;

static enum urt_task_result leaf(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&calls, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result parent(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    if (urt_spawn(rt, leaf, NULL, URT_SUBMIT_LOCAL) != 0)
        abort();
    atomic_fetch_add(&calls, 1);
    return URT_TASK_DONE;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static bool quiet(const struct urt_stats *st, uint64_t want)
{
    if (st->total.tasks_run != want || atomic_load(&calls) != want)
        return false;
    for (uint32_t w = 0; w < st->n_workers; w++)
        if (!st->workers[w].sleeping)
            return false;
    /* No wake message in flight (it would wake a worker: wake_received, suspend). */
    return st->total.wakes_sent + st->foreign_wakes_sent == st->total.wakes_received;
}

/* Waits until `want` task calls ran, every worker is suspended and no wake
 * is in flight, twice 5 ms apart with nothing fired in between. */
static struct urt_stats *quiesce(uint64_t want)
{
    for (int i = 0; i < 4000; i++) {
        struct urt_stats *a = urt_stats_snapshot(rt);
        if (quiet(a, want)) {
            sleep_ms(5);
            struct urt_stats *b = urt_stats_snapshot(rt);
            bool same = quiet(b, want) && b->probes_fired == a->probes_fired &&
                        b->total.suspends == a->total.suspends;
            urt_stats_free(a);
            if (same)
                return b;
            urt_stats_free(b);
        } else {
            urt_stats_free(a);
        }
        sleep_ms(1);
    }
    fprintf(stderr, "bpf_child: load did not quiesce\n");
    exit(3);
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    cfg.placement = URT_PLACEMENT_NONE;
    cfg.worker_try_count = 50;
    cfg.worker_suspend_timeout_us = 60ull * 1000 * 1000; /* no timer wake-ups while quiesced */
    if (urt_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "bpf_child: urt_runtime_create: %s\n", urt_last_error());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    char line[128];
    uint64_t want = 0;
    while (fgets(line, sizeof(line), stdin)) {
        unsigned long n = 0;
        if (sscanf(line, "go %lu", &n) == 1 || sscanf(line, "again %lu", &n) == 1) {
            bool go = line[0] == 'g';
            for (unsigned long i = 0; i < n; i++)
                while (urt_spawn(rt, go ? parent : leaf, NULL, 0) != 0)
                    sleep_ms(1);
            want += go ? 2 * n : n;
            struct urt_stats *st = quiesce(want);
            if (go)
                for (uint32_t w = 0; w < st->n_workers; w++)
                    printf("worker %u %llu %llu\n", w, (unsigned long long)st->workers[w].tasks_run,
                           (unsigned long long)st->workers[w].tasks_stolen);
            printf("fired %llu\nend\n", (unsigned long long)st->probes_fired);
            urt_stats_free(st);
        } else if (strncmp(line, "exit", 4) == 0) {
            break;
        }
    }
    int r = urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    return r == 0 ? 0 : 4;
}
