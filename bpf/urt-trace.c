/*
 * bpf/urt-trace.c — urt-trace: attaches urt's BPF programs to a running process and
 * prints runqlat-style per-worker histograms (queue latency, run time, wake
 * latency) every interval.
 *
 *   urt-trace -p PID [interval_s [count]]   (default: every 1 s until Ctrl-C)
 *   urt-trace --help | --version            (bad usage: one line on stderr, exit 2)
 *
 * The maps stay pinned under /sys/fs/bpf/urt/PID/ while it runs (so
 * `bpftool map dump pinned /sys/fs/bpf/urt/PID/queue_lat` works alongside);
 * Ctrl-C, SIGTERM, the count running out or the traced process exiting
 * detach and unpin. Each interval prints what happened in that interval.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bpf/loader.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: urt-trace -p PID [interval_s [count]] [-v]\n"
            "       urt-trace --help | --version\n"
            "  Prints per-worker log2 histograms of queue latency (submit -> start), run time and\n"
            "  wake latency of a process running liburt, every interval (default 1 s), count times\n"
            "  (default: until Ctrl-C). Maps are pinned under %s/PID/ while it runs.\n"
            "  -p, --pid PID   the process to trace (it must have liburt loaded)\n"
            "  -v, --verbose   show libbpf's messages\n"
            "  -V, --version   print the version\n"
            "  -h, --help      this text\n"
            "Exit: 0 ok, 1 attaching failed, 2 bad usage.\n",
            TRACER_PIN_ROOT);
}

/* Bad usage: one line on stderr saying why, exit status 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("urt-trace: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (try --help)\n", stderr);
    va_end(ap);
    return 2;
}

struct snapshot {
    struct urt_log2_hist h[TRACER_HISTS][URT_TRACE_MAX_WORKERS];
    struct urt_counters c[URT_TRACE_MAX_WORKERS];
};

static void read_all(struct tracer *t, struct snapshot *s)
{
    for (uint32_t w = 0; w < URT_TRACE_MAX_WORKERS; w++) {
        for (int k = 0; k < TRACER_HISTS; k++)
            if (tracer_read_hist(t, k, w, &s->h[k][w]) != 0)
                memset(&s->h[k][w], 0, sizeof(s->h[k][w]));
        if (tracer_read_counters(t, w, &s->c[w]) != 0)
            memset(&s->c[w], 0, sizeof(s->c[w]));
    }
}

static void hist_delta(struct urt_log2_hist *d, const struct urt_log2_hist *now, const struct urt_log2_hist *prev)
{
    for (int i = 0; i < URT_TRACE_SLOTS; i++)
        d->slots[i] = now->slots[i] - prev->slots[i];
    d->count = now->count - prev->count;
    d->total_ns = now->total_ns - prev->total_ns;
    d->max_ns = now->max_ns; /* max since attach: a max per interval would need a reset */
}

static void print_interval(const struct snapshot *now, const struct snapshot *prev)
{
    static const char *const titles[TRACER_HISTS] = {"queue latency (submit -> start)", "run time",
                                                      "wake latency (sent -> received)"};
    char ts[32];
    time_t tt = time(NULL);
    strftime(ts, sizeof(ts), "%H:%M:%S", localtime(&tt));
    printf("\n%s\n", ts);
    int shown = 0;
    for (uint32_t w = 0; w < URT_TRACE_MAX_WORKERS; w++) {
        const struct urt_counters *c = &now->c[w], *p = &prev->c[w];
        uint64_t done = c->tasks_done - p->tasks_done, wakes = c->wakes_received - p->wakes_received;
        uint64_t steals = c->steals - p->steals, suspends = c->suspends - p->suspends;
        if (!done && !wakes && !steals && !suspends)
            continue;
        shown++;
        printf("worker %u: %llu tasks run (%llu without a submit stamp), %llu stolen, %llu suspends, "
               "%llu wakes received\n",
               w, (unsigned long long)done, (unsigned long long)(c->unstamped - p->unstamped),
               (unsigned long long)steals, (unsigned long long)suspends, (unsigned long long)wakes);
        for (int k = 0; k < TRACER_HISTS; k++) {
            struct urt_log2_hist d;
            hist_delta(&d, &now->h[k][w], &prev->h[k][w]);
            if (!d.count)
                continue;
            printf("  worker %u %s\n", w, titles[k]);
            tracer_print_log2_hist(stdout, &d, "nsecs");
        }
    }
    if (!shown)
        printf("(no events)\n");
    fflush(stdout);
}

static void sleep_interval(double seconds)
{
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (!stop && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

struct args {
    pid_t pid;
    double interval; /* seconds */
    long count;      /* -1: until Ctrl-C */
};

/* Options and operands into a. Returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct args *a)
{
    static const struct option longopts[] = {
        {"pid", required_argument, NULL, 'p'},   {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},     {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, ":p:vVh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'p': {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v <= 0 || v > INT32_MAX)
                return usage_error("-p %s: expected a process id", optarg);
            a->pid = (pid_t)v;
            break;
        }
        case 'v': tracer_set_verbose(true); break;
        case 'V': printf("urt-trace %s\n", URT_TOOLS_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        case ':': return usage_error("option %s needs an argument", argv[optind - 1]);
        default:
            if (optopt)
                return usage_error("unknown option -%c", optopt);
            return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    return -1;
}

/* [interval [count]] after the options. Returns -1 to go on, else the exit status. */
static int parse_operands(int argc, char **argv, struct args *a)
{
    char *end;
    if (optind < argc) {
        const char *s = argv[optind++];
        a->interval = strtod(s, &end);
        if (end == s || *end || !(a->interval > 0))
            return usage_error("interval '%s': expected a number of seconds > 0", s);
    }
    if (optind < argc) {
        const char *s = argv[optind++];
        errno = 0;
        a->count = strtol(s, &end, 10);
        if (errno || end == s || *end || a->count <= 0)
            return usage_error("count '%s': expected a whole number > 0", s);
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (a->pid <= 0)
        return usage_error("-p PID is required");
    return -1;
}

/* Prints one interval's report every a->interval seconds until Ctrl-C, the
 * count, or the traced process's exit. 0 or 1 (out of memory). */
static int trace_loop(struct tracer *t, const struct args *a)
{
    struct snapshot *now = calloc(1, sizeof(*now)), *prev = calloc(1, sizeof(*prev));
    if (!now || !prev) {
        fprintf(stderr, "urt-trace: out of memory\n");
        free(now);
        free(prev);
        return 1;
    }
    long count = a->count;
    while (!stop && count != 0) {
        sleep_interval(a->interval);
        read_all(t, now);
        print_interval(now, prev);
        struct snapshot *x = prev;
        prev = now;
        now = x;
        if (count > 0)
            count--;
        if (kill(a->pid, 0) != 0 && errno == ESRCH) {
            printf("pid %d exited\n", (int)a->pid);
            break;
        }
    }
    free(now);
    free(prev);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = {.pid = 0, .interval = 1.0, .count = -1};
    int rc = parse_options(argc, argv, &a);
    if (rc < 0)
        rc = parse_operands(argc, argv, &a);
    if (rc >= 0)
        return rc;

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char msg[1024];
    struct tracer *t;
    int err = tracer_attach(a.pid, &t, msg, sizeof(msg));
    if (err) {
        fprintf(stderr, "urt-trace: %s\n", msg);
        return 1;
    }
    printf("Tracing urt in pid %d (%s); maps pinned in %s. Ctrl-C to end.\n", (int)a.pid, tracer_library(t),
           tracer_pin_dir(t));
    fflush(stdout);
    rc = trace_loop(t, &a);
    tracer_detach(t);
    return rc;
}
