/*
 * bpf/loader.c — tracer_attach/detach (see bpf/loader.h): environment checks
 * with messages a user can act on, the libbpf skeleton (urt.skel.h, made by
 * `bpftool gen skeleton` from urt.bpf.o), per-pid pins, USDT attach.
 *
 * Pins are per pid (/sys/fs/bpf/urt/<pid>/<map>) so two traced processes, or
 * a re-run, never share counts (pinned maps are reused by name: counts would
 * accumulate across runs, and a changed layout would fail to load).
 * Pinning is done after load by hand (not libbpf auto-pin), so a stale pin
 * left by a killed tracer is replaced, not reused.
 */
#include "bpf/loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "urt.skel.h"

struct tracer {
    struct urt_bpf *skel;
    pid_t pid;
    char lib[4096];
    char dir[128];
    bool pinned[TRACER_HISTS + 1];
};

static const char *const hist_names[TRACER_HISTS] = {"queue_lat", "run_time", "wake_lat"};

const char *tracer_hist_map_name(enum tracer_hist which)
{
    return (unsigned)which < TRACER_HISTS ? hist_names[which] : NULL;
}

/* ---- libbpf messages ---------------------------------------------------------- */

static bool verbose;
static char last_warning[512];

static int print_fn(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (verbose)
        return vfprintf(stderr, fmt, ap);
    if (level == LIBBPF_WARN) {
        vsnprintf(last_warning, sizeof(last_warning), fmt, ap);
        size_t n = strlen(last_warning);
        while (n > 0 && last_warning[n - 1] == '\n')
            last_warning[--n] = '\0';
    }
    return 0;
}

void tracer_set_verbose(bool v)
{
    verbose = v;
}

static int fail(int err, char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(int err, char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return err;
}

/* ---- checks ------------------------------------------------------------------------ */

/* liburt's path in /proc/PID/maps (first mapping whose file name starts with liburt.so). */
static int find_liburt(pid_t pid, char *lib, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char line[4608];
    int err = -ENOENT;
    while (fgets(line, sizeof(line), f)) {
        char *file = strchr(line, '/');
        if (!file)
            continue;
        file[strcspn(file, "\n")] = '\0';
        const char *base = strrchr(file, '/') + 1;
        if (strncmp(base, "liburt.so", 9) == 0 && strlen(file) < len) {
            strcpy(lib, file);
            err = 0;
            break;
        }
    }
    fclose(f);
    return err;
}

int tracer_check(pid_t pid, char *lib, size_t lib_len, char *msg, size_t msg_len)
{
    if (geteuid() != 0)
        return fail(-EPERM, msg, msg_len,
                    "needs root to load BPF programs and attach uprobes (CAP_BPF, CAP_PERFMON): run it with sudo");
    struct statfs sfs;
    if (statfs("/sys/fs/bpf", &sfs) != 0 || sfs.f_type != BPF_FS_MAGIC)
        return fail(-ENOENT, msg, msg_len,
                    "bpffs is not mounted at /sys/fs/bpf (maps are pinned there); mount it with: "
                    "mount -t bpf bpf /sys/fs/bpf");
    if (access("/sys/bus/event_source/devices/uprobe/type", R_OK) != 0)
        return fail(-EOPNOTSUPP, msg, msg_len,
                    "this kernel has no uprobes (CONFIG_UPROBE_EVENTS): USDT probes cannot be attached");
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH))
        return fail(-ESRCH, msg, msg_len, "no process with pid %d", (int)pid);
    int err = find_liburt(pid, lib, lib_len);
    if (err == -ENOENT)
        return fail(-ENOEXEC, msg, msg_len,
                    "process %d has no liburt.so mapped (see /proc/%d/maps): urt-trace needs a program linked "
                    "with the shared liburt",
                    (int)pid, (int)pid);
    if (err)
        return fail(err, msg, msg_len, "cannot read /proc/%d/maps: %s", (int)pid, strerror(-err));
    size_t n = strlen(lib);
    if (n > 10 && strcmp(lib + n - 10, " (deleted)") == 0)
        return fail(-ESTALE, msg, msg_len,
                    "the liburt.so process %d runs (%s) was replaced on disk since it started: restart it", (int)pid,
                    lib);
    return 0;
}

/* ---- pins ---------------------------------------------------------------------------- */

static struct bpf_map *map_of(struct tracer *t, int i)
{
    switch (i) {
    case TRACER_QUEUE: return t->skel->maps.queue_lat;
    case TRACER_RUN: return t->skel->maps.run_time;
    case TRACER_WAKE: return t->skel->maps.wake_lat;
    default: return t->skel->maps.counters;
    }
}

static void unpin_all(struct tracer *t)
{
    for (int i = 0; i <= TRACER_HISTS; i++) {
        if (!t->pinned[i])
            continue;
        char path[192];
        snprintf(path, sizeof(path), "%s/%s", t->dir, bpf_map__name(map_of(t, i)));
        bpf_map__unpin(map_of(t, i), path);
        t->pinned[i] = false;
    }
    rmdir(t->dir);
    rmdir(TRACER_PIN_ROOT); /* only if no other process is traced (ENOTEMPTY otherwise) */
}

static int pin_all(struct tracer *t, char *msg, size_t len)
{
    if (mkdir(TRACER_PIN_ROOT, 0700) != 0 && errno != EEXIST)
        return fail(-errno, msg, len, "mkdir %s: %s", TRACER_PIN_ROOT, strerror(errno));
    if (mkdir(t->dir, 0700) != 0 && errno != EEXIST)
        return fail(-errno, msg, len, "mkdir %s: %s", t->dir, strerror(errno));
    for (int i = 0; i <= TRACER_HISTS; i++) {
        char path[192];
        snprintf(path, sizeof(path), "%s/%s", t->dir, bpf_map__name(map_of(t, i)));
        if (access(path, F_OK) == 0) {
            /* A pin of a live tracer of the same pid, or one left by a killed tracer. */
            unpin_all(t);
            return fail(-EEXIST, msg, len,
                        "%s exists: pid %d is already traced (if no urt-trace runs, remove it: rm -r %s)", path,
                        (int)t->pid, t->dir);
        }
        int err = bpf_map__pin(map_of(t, i), path);
        if (err) {
            unpin_all(t);
            return fail(err, msg, len, "pinning %s: %s", path, strerror(-err));
        }
        t->pinned[i] = true;
    }
    return 0;
}

/* ---- attach ---------------------------------------------------------------------------- */

static int attach_one(struct tracer *t, struct bpf_program *prog, struct bpf_link **link, const char *probe,
                      char *msg, size_t len)
{
    *link = bpf_program__attach_usdt(prog, t->pid, t->lib, "urt", probe, NULL);
    if (*link)
        return 0;
    int err = -errno;
    if (err == -ENOENT)
        return fail(err, msg, len,
                    "%s has no USDT probe urt:%s (liburt built with -Dprobes=false?)%s%s", t->lib, probe,
                    last_warning[0] ? ": " : "", last_warning);
    return fail(err, msg, len, "attaching to urt:%s in %s (pid %d): %s%s%s", probe, t->lib, (int)t->pid,
                strerror(-err), last_warning[0] ? ": " : "", last_warning);
}

int tracer_attach(pid_t pid, struct tracer **out, char *msg, size_t len)
{
    *out = NULL;
    libbpf_set_print(print_fn);
    last_warning[0] = '\0';
    struct tracer *t = calloc(1, sizeof(*t));
    if (!t)
        return fail(-ENOMEM, msg, len, "out of memory");
    t->pid = pid;
    int err = tracer_check(pid, t->lib, sizeof(t->lib), msg, len);
    if (err) {
        free(t);
        return err;
    }
    snprintf(t->dir, sizeof(t->dir), "%s/%d", TRACER_PIN_ROOT, (int)pid);
    t->skel = urt_bpf__open();
    if (!t->skel) {
        err = -errno;
        free(t);
        return fail(err, msg, len, "opening the BPF object: %s", strerror(-err));
    }
    err = urt_bpf__load(t->skel);
    if (err) {
        fail(err, msg, len, "loading the BPF programs: %s%s%s", strerror(-err), last_warning[0] ? ": " : "",
             last_warning);
        goto out_destroy;
    }
    if ((err = pin_all(t, msg, len)))
        goto out_destroy;
    if ((err = attach_one(t, t->skel->progs.urt_done, &t->skel->links.urt_done, "done", msg, len)) ||
        (err = attach_one(t, t->skel->progs.urt_wake_received, &t->skel->links.urt_wake_received,
                          "wake_received", msg, len)) ||
        (err = attach_one(t, t->skel->progs.urt_steal, &t->skel->links.urt_steal, "steal", msg, len)) ||
        (err = attach_one(t, t->skel->progs.urt_suspend, &t->skel->links.urt_suspend, "suspend", msg, len)))
        goto out_unpin;
    *out = t;
    return 0;

out_unpin:
    unpin_all(t);
out_destroy:
    urt_bpf__destroy(t->skel);
    free(t);
    return err;
}

void tracer_detach(struct tracer *t)
{
    if (!t)
        return;
    /* Links first (lowers the semaphores), then the pins, then the object. */
    struct bpf_link **links[] = {&t->skel->links.urt_done, &t->skel->links.urt_wake_received,
                                 &t->skel->links.urt_steal, &t->skel->links.urt_suspend};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        bpf_link__destroy(*links[i]);
        *links[i] = NULL;
    }
    unpin_all(t);
    urt_bpf__destroy(t->skel);
    free(t);
}

const char *tracer_pin_dir(const struct tracer *t)
{
    return t->dir;
}

const char *tracer_library(const struct tracer *t)
{
    return t->lib;
}

int tracer_read_hist(struct tracer *t, enum tracer_hist which, uint32_t w, struct urt_log2_hist *out)
{
    if ((unsigned)which >= TRACER_HISTS || w >= URT_TRACE_MAX_WORKERS)
        return -EINVAL;
    return bpf_map__lookup_elem(map_of(t, which), &w, sizeof(w), out, sizeof(*out), 0);
}

int tracer_read_counters(struct tracer *t, uint32_t w, struct urt_counters *out)
{
    if (w >= URT_TRACE_MAX_WORKERS)
        return -EINVAL;
    return bpf_map__lookup_elem(t->skel->maps.counters, &w, sizeof(w), out, sizeof(*out), 0);
}

/* ---- printing (bcc trace_helpers.c print_log2_hist layout) ----------------------------- */

static void stars(FILE *f, uint64_t val, uint64_t max, int width)
{
    int n = max ? (int)((val * (uint64_t)width) / max) : 0;
    if (n > width)
        n = width;
    for (int i = 0; i < n; i++)
        fputc('*', f);
    for (int i = n; i < width; i++)
        fputc(' ', f);
}

void tracer_print_log2_hist(FILE *f, const struct urt_log2_hist *h, const char *unit)
{
    int last = -1;
    uint64_t max = 0;
    for (int i = 0; i < URT_TRACE_SLOTS; i++) {
        if (h->slots[i]) {
            last = i;
            if (h->slots[i] > max)
                max = h->slots[i];
        }
    }
    if (last < 0)
        return;
    /* bcc's widths: narrow columns while the largest slot is below 2^32. */
    bool wide = last > 32;
    int width = wide ? 20 : 10;
    fprintf(f, "%*s%-*s : count    distribution\n", wide ? 15 : 5, "", wide ? 29 : 19, unit);
    for (int i = 0; i <= last; i++) {
        uint64_t low = (1ull << (i + 1)) >> 1, high = (1ull << (i + 1)) - 1;
        if (low == high)
            low -= 1;
        fprintf(f, "%*llu -> %-*llu : %-8llu |", width, (unsigned long long)low, width, (unsigned long long)high,
                (unsigned long long)h->slots[i]);
        stars(f, h->slots[i], max, 40);
        fprintf(f, "|\n");
    }
    if (h->count)
        fprintf(f, "%*savg = %llu %s, max = %llu %s, total = %llu\n", width, "",
                (unsigned long long)(h->total_ns / h->count), unit, (unsigned long long)h->max_ns, unit,
                (unsigned long long)h->count);
}
