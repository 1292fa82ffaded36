/*
 * tools/urt-load/wl_deadline.c — how late a deadline fires (docs/benchmarks.md
 * 3.16; urt only, no peer runs it):
 *
 * io_deadline: a task on worker 0 submits a receive on one end of a Unix
 *   socket pair that never gets data, with urt_io_set_timeout(1 ms); its
 *   continuation must see -ETIME. Lateness = the continuation's start -
 *   (the submitting call + 1 ms). On the linked timeout (the default where
 *   the probe found it).
 * io_deadline_timer: the same with linked timeouts forbidden (ring_disable
 *   URT_RING_LINK_TIMEOUT): the worker's timer facility cancels the receive.
 * spawn_at: urt_spawn_at(now + 1 ms) from the same task, URT_SUBMIT_LOCAL;
 *   lateness = the timed task's start - its due time.
 *
 * Each sample: the external thread submits the task to worker 0, waits for
 * the continuation (a one-waiter event), then sleeps DEADLINE_GAP_US (default
 * 2000: the worker goes idle and parks between samples, as a server between
 * requests). The submitting task goes on working DEADLINE_WORK_US (default
 * 200) after the submission before it returns — a task that submits and
 * then parses, answers or submits more; what it prepared reaches the kernel
 * when it returns (urt/io.h, "the path of one operation"). DEADLINE_WORK_US=0
 * measures a task that returns at once. 50 samples of warm-up, 2,000 kept;
 * p50/p99/p999 of the lateness (nearest rank) and the process CPU.
 *
 * Memory ordering: the continuation writes the sample's fields, then sets the
 * event (release); the external thread reads them after its wait (acquire),
 * measure.h. One sample in flight at a time.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "measure.h"
#include "workloads.h"

#define DL_NS (1000 * 1000ull) /* the deadline: 1 ms */
#define DL_WARMUP 50
#define DL_SAMPLES 2000

enum dl_kind { DL_LINKED, DL_TIMER, DL_SPAWN_AT };

struct dl {
    enum dl_kind kind;
    urt_runtime *rt;
    int fd;
    uint64_t work_ns;
    char buf[8];
    struct urt_io io;
    struct urt_task start;
    uint64_t due;   /* the submitting call's clock + DL_NS */
    uint64_t late;  /* the sample */
    int32_t res;    /* the continuation's result */
    struct measure_event ev;
};

static void dl_done(struct dl *d, int32_t res)
{
    d->late = urt_now_ns() - d->due;
    d->res = res;
    measure_event_set(&d->ev);
}

static void dl_cont(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    dl_done(arg, res);
}

static enum urt_task_result dl_timed(struct urt_task *t, void *arg)
{
    (void)t;
    dl_done(arg, 0);
    return URT_TASK_DONE;
}

static enum urt_task_result dl_start(struct urt_task *t, void *arg)
{
    struct dl *d = arg;
    (void)t;
    uint64_t now = urt_now_ns();
    d->due = now + DL_NS;
    int err;
    if (d->kind == DL_SPAWN_AT) {
        err = urt_spawn_at(d->rt, d->due, dl_timed, NULL, d, URT_SUBMIT_LOCAL);
    } else {
        urt_io_init(&d->io, dl_cont, d);
        err = urt_io_set_timeout(&d->io, DL_NS);
        if (!err)
            err = urt_io_recv(&d->io, d->fd, d->buf, sizeof(d->buf), 0);
    }
    if (err) { /* refused: the sample ends with the refusal (a failed run) */
        dl_done(d, err);
        return URT_TASK_DONE;
    }
    while (urt_now_ns() - now < d->work_ns) /* the task goes on after its submission */
        ;
    return URT_TASK_DONE;
}

static const struct wl_setting WORK_S = {"DEADLINE_WORK_US", 200, 0, 1000000};
static const struct wl_setting GAP_S = {"DEADLINE_GAP_US", 2000, 0, 10000000};
static const struct wl_setting *const DEADLINE_SETTINGS[] = {&WORK_S, &GAP_S, NULL};

static int dl_run(urt_runtime *rt, const char *name, enum dl_kind kind)
{
    struct dl *d = calloc(1, sizeof(*d));
    int sv[2];
    if (!d || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        fprintf(stderr, "# ERROR urt %s: %s\n", name, strerror(errno));
        free(d);
        return 1;
    }
    d->kind = kind;
    d->rt = rt;
    d->fd = sv[0];
    d->work_ns = measure_setting(name, &WORK_S) * 1000;
    uint64_t gap_us = measure_setting(name, &GAP_S);
    struct urt_features f;
    urt_runtime_features(rt, &f);
    uint64_t *lat = calloc(DL_SAMPLES, sizeof(*lat));
    int rc = lat ? 0 : 1;
    uint64_t cpu0 = 0, t0 = 0;
    for (int i = 0; !rc && i < DL_WARMUP + DL_SAMPLES; i++) {
        if (i == DL_WARMUP) {
            cpu0 = measure_cpu_ns();
            t0 = urt_now_ns();
        }
        urt_task_init(&d->start, dl_start, d);
        if (urt_task_submit_to(rt, 0, &d->start, 0) != 0) {
            fprintf(stderr, "# ERROR urt %s: submit: %s\n", name, urt_last_error());
            rc = 1;
            break;
        }
        measure_event_wait(&d->ev);
        int32_t want = kind == DL_SPAWN_AT ? 0 : -ETIME;
        if (d->res != want) {
            fprintf(stderr, "# ERROR urt %s: sample %d ended %d, not %d\n", name, i, d->res, want);
            rc = 1;
            break;
        }
        if (i >= DL_WARMUP)
            lat[i - DL_WARMUP] = d->late;
        measure_sleep_us(gap_us);
    }
    if (!rc) {
        double cpu = 100.0 * (double)(measure_cpu_ns() - cpu0) / (double)(urt_now_ns() - t0);
        measure_report_latency(name, lat, DL_SAMPLES, cpu);
        measure_note(name, "deadline 1 ms, the submitting task works %llu us after it, %llu us between samples, "
                           "linked timeouts %s",
                     (unsigned long long)(d->work_ns / 1000), (unsigned long long)gap_us,
                     kind == DL_SPAWN_AT ? "not used"
                     : (f.io_features & URT_IO_FEAT_LINK_TIMEOUT) ? "used"
                                                                  : "not available (the timer facility)");
    }
    close(sv[0]);
    close(sv[1]);
    free(lat);
    free(d);
    return rc;
}

static int run_linked(urt_runtime *rt, const char *name)
{
    return dl_run(rt, name, DL_LINKED);
}

static int run_timer(urt_runtime *rt, const char *name)
{
    return dl_run(rt, name, DL_TIMER);
}

static int run_spawn_at(urt_runtime *rt, const char *name)
{
    return dl_run(rt, name, DL_SPAWN_AT);
}

static int configure_timer(struct urt_config *cfg)
{
    cfg->ring_disable |= URT_RING_LINK_TIMEOUT;
    return 0;
}

#define DL_METRICS {"p50_us", "p99_us", "p999_us", "cpu_pct", NULL}

const struct workload WL_DEADLINE[] = {
    {.name = "io_deadline",
     .summary = "lateness of a 1 ms deadline (urt_io_set_timeout) on a receive, linked timeout (3.16, urt only)",
     .metrics = DL_METRICS,
     .run = run_linked,
     .settings = DEADLINE_SETTINGS},
    {.name = "io_deadline_timer",
     .summary = "the same on the timer facility (ring_disable URT_RING_LINK_TIMEOUT) (3.16, urt only)",
     .metrics = DL_METRICS,
     .configure = configure_timer,
     .run = run_timer,
     .settings = DEADLINE_SETTINGS},
    {.name = "spawn_at_lateness",
     .summary = "lateness of urt_spawn_at(now + 1 ms) from a task (3.16, urt only)",
     .metrics = DL_METRICS,
     .run = run_spawn_at,
     .settings = DEADLINE_SETTINGS},
    {0},
};
