/*
 * tools/urt-load/measure.c — clock, futex event, completion counter,
 * throughput driver, median, percentiles and the result lines of urt-load.
 * The rules (and the memory-ordering contract) are in measure.h; this file
 * follows docs/benchmarks.md sections 1 and 2 line by line:
 *
 *  - every iteration, warm-up or timed, starts after IDLE_MS of idle sleep
 *    that is not timed;
 *  - per-process value = median of the ITERS timed rates (mean of the two
 *    middle values for an even count);
 *  - percentiles are nearest rank: sorted[(n * permille + 999) / 1000 - 1];
 *  - stdout carries only the result lines; stdout is flushed after each group
 *    so a parent reading a pipe sees them even if the process dies later.
 */
#include "measure.h"

#include <urt/urt.h>

#include <linux/futex.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned measure_workers = WORKERS_DEFAULT;

void measure_init(unsigned workers)
{
    measure_workers = workers;
}

bool measure_parse_u64(const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!text || *text < '0' || *text > '9')
        return false; /* strtoull would take a sign or blanks */
    char *end;
    errno = 0;
    unsigned long long x = strtoull(text, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

uint64_t measure_env_u64(const char *workload, const char *name, uint64_t def, uint64_t lo, uint64_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    uint64_t x;
    if (!measure_parse_u64(v, lo, hi, &x)) {
        fprintf(stderr, "urt-load %s: %s=%s: must be a whole number from %llu to %llu\n", workload, name, v,
                (unsigned long long)lo, (unsigned long long)hi);
        exit(2);
    }
    return x;
}

uint64_t measure_setting(const char *workload, const struct wl_setting *s)
{
    return measure_env_u64(workload, s->name, s->def, s->lo, s->hi);
}

uint64_t measure_cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
                  (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return us * 1000u;
}

void measure_sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)((us % 1000000u) * 1000u)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- event ------------------------------------------------------------------ */

static long futex(atomic_int *word, int op, int val)
{
    return syscall(SYS_futex, (int *)word, op, val, NULL, NULL, 0);
}

void measure_event_set(struct measure_event *ev)
{
    /* release: pairs with the acquire exchange in measure_event_wait(). */
    atomic_store_explicit(&ev->word, 1, memory_order_release);
    futex(&ev->word, FUTEX_WAKE_PRIVATE, 1);
}

void measure_event_wait(struct measure_event *ev)
{
    /* acquire: pairs with the release store in measure_event_set(). */
    while (!atomic_exchange_explicit(&ev->word, 0, memory_order_acquire))
        futex(&ev->word, FUTEX_WAIT_PRIVATE, 0);
}

/* ---- completion ------------------------------------------------------------- */

void measure_done_reset(struct measure_done *d, uint64_t target)
{
    atomic_store_explicit(&d->count, 0, memory_order_relaxed);
    atomic_store_explicit(&d->target, target, memory_order_relaxed);
    atomic_store_explicit(&d->t0, 0, memory_order_relaxed);
    atomic_store_explicit(&d->t1, 0, memory_order_relaxed);
    atomic_store_explicit(&d->event.word, 0, memory_order_relaxed);
}

void measure_done_fail(struct measure_done *d, const char *workload, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "# ERROR %s %s: %s\n", MEASURE_PEER, workload, msg);
    atomic_store_explicit(&d->failed, true, memory_order_relaxed);
    measure_event_set(&d->event); /* release: publishes failed */
}

/* ---- statistics ------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

double measure_median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n & 1) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

uint64_t measure_percentile(const uint64_t *sorted, size_t n, unsigned permille)
{
    return sorted[(n * permille + 999) / 1000 - 1];
}

/* ---- drivers and reports ------------------------------------------------------ */

int measure_throughput(const char *workload, const char *metric, const char *unit, double units,
                       measure_iteration_fn *iteration, void *ctx)
{
    double rates[ITERS];
    for (int i = 0; i < WARMUP + ITERS; i++) {
        measure_sleep_us(IDLE_MS * 1000u);
        uint64_t ns = iteration(ctx);
        if (ns == 0) {
            fprintf(stderr, "# ERROR %s %s: iteration %d failed\n", MEASURE_PEER, workload, i);
            return 1;
        }
        if (i >= WARMUP)
            rates[i - WARMUP] = units / ((double)ns * 1e-9);
    }
    double med = measure_median(rates, ITERS);
    printf("%s %s %s %.0f %s\n", MEASURE_PEER, workload, metric, med, unit);
    fflush(stdout);
    fprintf(stderr, "# %s %s %s: n=%d min=%.0f median=%.0f max=%.0f workers=%u\n", MEASURE_PEER,
            workload, metric, ITERS, rates[0], med, rates[ITERS - 1], measure_workers);
    return 0;
}

void measure_report_latency(const char *workload, uint64_t *lat_ns, size_t n, double cpu_pct)
{
    qsort(lat_ns, n, sizeof(*lat_ns), cmp_u64);
    printf("%s %s p50_us %.2f us\n", MEASURE_PEER, workload, measure_percentile(lat_ns, n, 500) / 1000.0);
    printf("%s %s p99_us %.2f us\n", MEASURE_PEER, workload, measure_percentile(lat_ns, n, 990) / 1000.0);
    printf("%s %s p999_us %.2f us\n", MEASURE_PEER, workload, measure_percentile(lat_ns, n, 999) / 1000.0);
    printf("%s %s cpu_pct %.1f %%\n", MEASURE_PEER, workload, cpu_pct);
    fflush(stdout);
    size_t over_100us = 0, over_1ms = 0;
    for (size_t i = 0; i < n; i++) {
        over_100us += lat_ns[i] > 100000u;
        over_1ms += lat_ns[i] > 1000000u;
    }
    fprintf(stderr, "# %s %s: n=%zu min=%.2fus median=%.2fus max=%.2fus over_100us=%zu over_1ms=%zu workers=%u\n",
            MEASURE_PEER, workload, n, lat_ns[0] / 1000.0, measure_percentile(lat_ns, n, 500) / 1000.0,
            lat_ns[n - 1] / 1000.0, over_100us, over_1ms, measure_workers);
}

void measure_note(const char *workload, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "# %s %s: %s\n", MEASURE_PEER, workload, msg);
}

void measure_note_spread(const char *workload, const char *what, const uint64_t *per, unsigned n, bool skip_zero)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += per[i];
    char line[512];
    size_t used = 0;
    for (unsigned i = 0; i < n && used < sizeof(line) - 48; i++)
        if (per[i] || !skip_zero)
            used += (size_t)snprintf(line + used, sizeof(line) - used, "%sw%u %llu (%.0f%%)", used ? ", " : "", i,
                                     (unsigned long long)per[i], total ? 100.0 * (double)per[i] / (double)total : 0.0);
    measure_note(workload, "%s: %s", what, used ? line : "-");
}

void measure_stats_delta(const char *name, const struct urt_stats *a, const struct urt_stats *b)
{
    if (!a || !b)
        return;
    if (b->total.tasks_run == a->total.tasks_run) {
        /* batch_load runs each iteration on a runtime of its own (with its log directory) */
        measure_note(name, "runtime counters: no task ran on the main runtime (the workload's own lines tell)");
        return;
    }
#define D(f) (unsigned long long)(b->total.f - a->total.f)
    measure_note(name,
                 "runtime counters over the workload (read right after the last task signalled, so "
                 "its own counts may be missing): tasks_run=%llu stolen=%llu steal_attempts=%llu suspends=%llu "
                 "wakes_sent=%llu wakes_received=%llu foreign_wakes_sent=%llu inbox_drains=%llu yields=%llu",
                 D(tasks_run), D(tasks_stolen), D(steal_attempts), D(suspends), D(wakes_sent),
                 D(wakes_received), (unsigned long long)(b->foreign_wakes_sent - a->foreign_wakes_sent),
                 D(inbox_drains), D(yields));
#undef D
    uint64_t per[64] = {0}; /* where the tasks ran (issue 12 point 3) */
    for (uint32_t i = 0; i < b->n_workers && i < a->n_workers && i < 64; i++)
        per[i] = b->workers[i].tasks_run - a->workers[i].tasks_run;
    measure_note_spread(name, "tasks_run per worker", per, b->n_workers < 64 ? b->n_workers : 64, false);
}
