/*
 * tools/urt-load/main.c — urt-load, the load generator of urt (C19):
 * command line, workload registry walk, child processes, progress, summary
 * table and JSON. The workloads themselves live in wl_<family>.c files
 * listed in workloads.h; the measurement rules in measure.h.
 *
 * Two modes:
 *
 *  1. Per-process protocol (docs/benchmarks.md section 1): `urt-load <workload>`,
 *     WORKERS in the environment (default 2). Builds the configuration
 *     (urt_config_init, the workload's configure hook, URT_* variables,
 *     WORKERS), creates one runtime, sleeps START_SLEEP_MS, runs the workload
 *     on the main thread (the external thread: it never runs tasks), prints
 *     `urt <workload> <metric> <value> <unit>` lines on stdout and `# ...`
 *     details on stderr. Exit 0; 1 when a correctness check failed; 2 with
 *     nothing on stdout for an unknown workload or a bad setting.
 *     WORKERS decides the worker count; URT_WORKERS is accepted when WORKERS
 *     is unset or equal (a contradiction is a usage error), and a URT_*
 *     variable that names no configuration field gets a `#` warning.
 *
 *  2. Summary (no workload argument): every registered workload (or those of
 *     --only) runs in a fresh child process (/proc/self/exe <workload>), one
 *     after the other. The parent reads the child's stdout (result lines) and
 *     stderr (kept; shown with --verbose or when the child fails), shows a
 *     live progress line on stderr when stderr is a terminal (plain lines
 *     otherwise), kills a child that runs longer than CHILD_TIMEOUT_S, then
 *     prints a table (or one JSON object with --json) on stdout. Exit 0 when
 *     every child exited 0 and printed every metric its entry lists, else 1.
 *
 * The parent never keeps a runtime while children run: it creates one only
 * to probe the features and the effective configuration, and destroys it
 * before the first child starts.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <urt/urt.h>

#include "measure.h"
#include "workloads.h"

#define PROGRAM "urt-load"
#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define CHILD_TIMEOUT_S 120 /* a child still running then is killed (a hang) */
#define PROGRESS_TICK_MS 100
#define WORKERS_MAX 1024

static const struct workload *const FAMILIES[] = {WORKLOAD_FAMILIES, NULL};

/* ---- small utilities --------------------------------------------------------- */

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROGRAM ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(EXIT_USAGE);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, PROGRAM ": out of memory\n");
        exit(EXIT_FAILED);
    }
    return q;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

static const struct workload *workload_find(const char *name)
{
    for (size_t f = 0; FAMILIES[f]; f++)
        for (const struct workload *w = FAMILIES[f]; w->name; w++)
            if (strcmp(w->name, name) == 0)
                return w;
    return commit_workload_for(name); /* commit_stored_c<N>, commit_available_c<N>, bare names */
}

/* Parses a worker count: decimal digits only, 1..WORKERS_MAX. */
static bool parse_workers(const char *text, unsigned *out)
{
    uint64_t v;
    if (!measure_parse_u64(text, 1, WORKERS_MAX, &v))
        return false;
    *out = (unsigned)v;
    return true;
}

/* ---- configuration ----------------------------------------------------------- */

/* True when name (e.g. "busy_worker") is a field of urt_config_describe()'s
 * table. */
static bool config_has_field(const char *table, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = table; *line;) {
        if (strncmp(line, name, len) == 0 && (line[len] == ' ' || line[len] == '\n' || line[len] == '\0'))
            return true;
        const char *eol = strchr(line, '\n');
        if (!eol)
            break;
        line = eol + 1;
    }
    return false;
}

/* name in upper case, in place. */
static char *upper(char *name)
{
    for (char *p = name; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    return name;
}

/* A misspelt URT_ variable would silently do nothing: say so (a `#` line, so
 * the per-process protocol's stdout stays clean). */
static void warn_unknown_urt_variables(const struct urt_config *cfg)
{
    extern char **environ;
    int need = urt_config_describe(cfg, NULL, 0);
    if (need <= 0)
        return;
    char *table = xrealloc(NULL, (size_t)need + 1);
    urt_config_describe(cfg, table, (size_t)need + 1);
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "URT_", 4) != 0)
            continue;
        char name[128];
        size_t i = 0;
        for (const char *p = *e + 4; *p && *p != '=' && i + 1 < sizeof(name); p++)
            name[i++] = (char)tolower((unsigned char)*p);
        name[i] = '\0';
        if (!config_has_field(table, name))
            fprintf(stderr, "# " PROGRAM ": warning: URT_%s is not a urt configuration field (ignored; "
                            "--help lists them)\n", upper(name));
    }
    free(table);
}

/* Builds the configuration of a runtime for workload wl (NULL: the probe of
 * the summary mode): defaults, the workload's hook, URT_* variables, then
 * WORKERS. Exits 2 with a message on any bad setting. */
static void config_build(const struct workload *wl, struct urt_config *cfg)
{
    urt_config_init(cfg);
    cfg->workers = WORKERS_DEFAULT;
    if (wl && wl->configure && wl->configure(cfg) != 0)
        die_usage("workload %s: its configuration hook failed", wl->name);
    int n = urt_config_from_env(cfg);
    if (n < 0)
        die_usage("%s", urt_last_error());
    warn_unknown_urt_variables(cfg);

    const char *workers_text = getenv("WORKERS");
    const char *urt_workers_text = getenv("URT_WORKERS");
    if (workers_text) {
        unsigned workers;
        if (!parse_workers(workers_text, &workers))
            die_usage("WORKERS=%s: expected a number of worker threads from 1 to %d", workers_text,
                      WORKERS_MAX);
        if (urt_workers_text && cfg->workers != workers)
            die_usage("WORKERS=%s and URT_WORKERS=%s disagree (set one of them)", workers_text,
                      urt_workers_text);
        cfg->workers = workers;
    } else if (!urt_workers_text) {
        cfg->workers = WORKERS_DEFAULT;
    }

    char err[256];
    if (urt_config_validate(cfg, err, sizeof(err)) != 0)
        die_usage("bad configuration: %s", err);
}

static urt_runtime *runtime_create_or_die(const struct urt_config *cfg)
{
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(cfg, &rt);
    if (err == -EINVAL)
        die_usage("urt_runtime_create: %s", urt_last_error());
    if (err) {
        const char *why = urt_last_error();
        fprintf(stderr, PROGRAM ": urt_runtime_create: %s%s%s\n", strerror(-err), *why ? ": " : "", why);
        exit(EXIT_FAILED);
    }
    return rt;
}

/* ---- mode 1: one workload in this process ---------------------------------- */

static int run_in_process(const char *name)
{
    const struct workload *wl = workload_find(name);
    if (!wl) {
        fprintf(stderr, PROGRAM ": unknown workload '%s' (%s --list shows them)\n", name, PROGRAM);
        return EXIT_USAGE;
    }
    for (const struct wl_setting *const *s = wl->settings; s && *s; s++)
        (void)measure_setting(name, *s); /* rule 5: a bad value exits 2 before the runtime exists */
    struct urt_config cfg;
    config_build(wl, &cfg);
    urt_runtime *rt = runtime_create_or_die(&cfg);
    measure_init(cfg.workers);

    measure_sleep_us(START_SLEEP_MS * 1000u);
    struct urt_stats *before = urt_stats_snapshot(rt);
    int rc = wl->run(rt, name);
    struct urt_stats *after = urt_stats_snapshot(rt);
    measure_stats_delta(name, before, after);
    urt_stats_free(before);
    urt_stats_free(after);

    int err = urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    if (err < 0) {
        fprintf(stderr, "# ERROR %s %s: urt_runtime_destroy: %s\n", MEASURE_PEER, name, strerror(-err));
        rc = EXIT_FAILED;
    }
    return rc ? EXIT_FAILED : EXIT_OK;
}

/* ---- mode 2: children and the summary ---------------------------------------- */

struct buffer {
    char *data;
    size_t len, cap;
};

static void buffer_add(struct buffer *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->data = xrealloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

struct result {
    char *metric, *value, *unit;
};

struct child_run {
    const struct workload *wl;
    char *name;        /* as selected: commit_stored_c4 shares commit_stored_c<N>'s entry */
    int status;        /* wait status */
    bool timed_out;
    double seconds;
    struct buffer out, err;
    struct result *results;
    size_t n_results;
    char **bad_lines;  /* stdout lines that do not follow the protocol */
    size_t n_bad_lines;
    bool ok;           /* exit 0 and every listed metric present */
};

struct options {
    bool json;
    bool verbose;
    const char *only;
};

static double seconds_since(uint64_t t0)
{
    return (double)(urt_now_ns() - t0) * 1e-9;
}

static void progress(bool tty, size_t i, size_t n, const char *name, double elapsed, double total)
{
    if (!tty)
        return;
    fprintf(stderr, "\r\033[K[%zu/%zu] %-24s %5.1f s   (total %5.1f s)", i + 1, n, name, elapsed, total);
    fflush(stderr);
}

/* Starts `/proc/self/exe <name>` with stdout and stderr on pipes. */
static pid_t child_start(const char *self, const char *name, int *out_fd, int *err_fd)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        perror(PROGRAM ": pipe");
        exit(EXIT_FAILED);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror(PROGRAM ": fork");
        exit(EXIT_FAILED);
    }
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        char *argv[] = {(char *)self, (char *)name, NULL};
        execv("/proc/self/exe", argv);
        fprintf(stderr, PROGRAM ": exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    *out_fd = out[0];
    *err_fd = err[0];
    return pid;
}

/* Reads what is available on fd into b; closes it and sets *fd = -1 at EOF. */
static void drain_fd(int *fd, struct buffer *b)
{
    char chunk[4096];
    ssize_t n = read(*fd, chunk, sizeof(chunk));
    if (n > 0) {
        buffer_add(b, chunk, (size_t)n);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(*fd);
        *fd = -1;
    }
}

/* Splits the child's stdout into result lines for its workload. */
static void parse_results(struct child_run *c)
{
    char *save = NULL;
    for (char *line = c->out.data ? strtok_r(c->out.data, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char peer[16], wl[128], metric[128], value[64], unit[64], extra[2];
        int n = sscanf(line, "%15s %127s %127s %63s %63s %1s", peer, wl, metric, value, unit, extra);
        char *end = NULL;
        if (n == 5 && strcmp(peer, MEASURE_PEER) == 0 && strcmp(wl, c->name) == 0 &&
            (strtod(value, &end), *end == '\0')) {
            c->results = xrealloc(c->results, (c->n_results + 1) * sizeof(*c->results));
            c->results[c->n_results++] = (struct result){xstrdup(metric), xstrdup(value), xstrdup(unit)};
        } else {
            c->bad_lines = xrealloc(c->bad_lines, (c->n_bad_lines + 1) * sizeof(*c->bad_lines));
            c->bad_lines[c->n_bad_lines++] = xstrdup(line);
        }
    }
}

static const struct result *find_result(const struct child_run *c, const char *metric)
{
    for (size_t i = 0; i < c->n_results; i++)
        if (strcmp(c->results[i].metric, metric) == 0)
            return &c->results[i];
    return NULL;
}

static void child_run(const char *self, struct child_run *c, bool tty, size_t i, size_t n, uint64_t run_t0)
{
    int out_fd, err_fd;
    uint64_t t0 = urt_now_ns();
    pid_t pid = child_start(self, c->name, &out_fd, &err_fd);
    if (!tty)
        fprintf(stderr, "[%zu/%zu] %s ...\n", i + 1, n, c->name);
    while (out_fd >= 0 || err_fd >= 0) {
        struct pollfd p[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
        int r = poll(p, 2, tty ? PROGRESS_TICK_MS : 1000); /* the timeout check needs a tick too */
        if (r < 0 && errno != EINTR) {
            perror(PROGRAM ": poll");
            exit(EXIT_FAILED);
        }
        if (out_fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            drain_fd(&out_fd, &c->out);
        if (err_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            drain_fd(&err_fd, &c->err);
        double elapsed = seconds_since(t0);
        if (!c->timed_out && elapsed > CHILD_TIMEOUT_S) {
            kill(pid, SIGKILL); /* our own child, by pid */
            c->timed_out = true;
        }
        progress(tty, i, n, c->name, elapsed, seconds_since(run_t0));
    }
    while (waitpid(pid, &c->status, 0) < 0 && errno == EINTR) {
    }
    c->seconds = seconds_since(t0);
    parse_results(c);

    bool all_metrics = true;
    for (size_t m = 0; c->wl->metrics[m]; m++)
        if (!find_result(c, c->wl->metrics[m]))
            all_metrics = false;
    c->ok = !c->timed_out && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0 && all_metrics &&
            c->n_bad_lines == 0;
}

static void child_run_free(struct child_run *c)
{
    for (size_t i = 0; i < c->n_results; i++) {
        free(c->results[i].metric);
        free(c->results[i].value);
        free(c->results[i].unit);
    }
    free(c->results);
    for (size_t i = 0; i < c->n_bad_lines; i++)
        free(c->bad_lines[i]);
    free(c->bad_lines);
    free(c->out.data);
    free(c->err.data);
    free(c->name);
}

static void describe_status(const struct child_run *c, char *buf, size_t len)
{
    if (c->timed_out)
        snprintf(buf, len, "killed after %d s", CHILD_TIMEOUT_S);
    else if (WIFSIGNALED(c->status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
    else if (WEXITSTATUS(c->status) != 0)
        snprintf(buf, len, "exit %d", WEXITSTATUS(c->status));
    else if (c->n_bad_lines)
        snprintf(buf, len, "%zu malformed result lines", c->n_bad_lines);
    else
        snprintf(buf, len, c->ok ? "ok" : "metrics missing");
}

static void report_child_done(const struct child_run *c, bool tty, bool verbose, size_t i, size_t n)
{
    char status[96];
    describe_status(c, status, sizeof(status));
    if (tty)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "[%zu/%zu] %-24s %5.1f s  %s\n", i + 1, n, c->name, c->seconds, status);
    if ((verbose || !c->ok) && c->err.len)
        fprintf(stderr, "%s%s", c->err.data, c->err.data[c->err.len - 1] == '\n' ? "" : "\n");
    for (size_t b = 0; b < c->n_bad_lines; b++)
        fprintf(stderr, "  malformed result line: %s\n", c->bad_lines[b]);
}

/* ---- the probe runtime: features and effective configuration -------------- */

struct probe {
    struct urt_features features;
    char features_text[512];
    char backend_text[200]; /* "io_uring (why)" or "portable (why)": urt_runtime_backend */
    char *config_text; /* urt_config_describe() of the effective configuration */
    unsigned workers;
};

static void probe_runtime(struct probe *p)
{
    struct urt_config cfg;
    config_build(NULL, &cfg);
    urt_runtime *rt = runtime_create_or_die(&cfg);
    urt_runtime_features(rt, &p->features);
    urt_features_describe(&p->features, p->features_text, sizeof(p->features_text));
    const char *why = "";
    int backend = urt_runtime_backend(rt, &why);
    snprintf(p->backend_text, sizeof(p->backend_text), "%s (%s)",
             backend == URT_BACKEND_PORTABLE ? "portable" : "io_uring", why);
    const struct urt_config *eff = urt_runtime_config(rt);
    p->workers = eff->workers;
    int need = urt_config_describe(eff, NULL, 0);
    p->config_text = xrealloc(NULL, (size_t)(need > 0 ? need : 0) + 1);
    p->config_text[0] = '\0';
    if (need > 0)
        urt_config_describe(eff, p->config_text, (size_t)need + 1);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
}

/* ---- output: table and JSON ------------------------------------------------- */

static void print_table(const struct probe *p, struct child_run *runs, size_t n, double total)
{
    printf("urt-load %s: %u worker%s, backend %s, %s\n", URT_VERSION_STRING, p->workers,
           p->workers == 1 ? "" : "s", p->backend_text, p->features_text);
    printf("%-24s %-18s %14s  %s\n", "workload", "metric", "value", "unit");
    printf("%-24s %-18s %14s  %s\n", "------------------------", "------------------", "--------------",
           "-------------");
    for (size_t i = 0; i < n; i++) {
        const struct child_run *c = &runs[i];
        char status[96];
        describe_status(c, status, sizeof(status));
        for (size_t m = 0; c->wl->metrics[m]; m++) {
            const struct result *r = find_result(c, c->wl->metrics[m]);
            printf("%-24s %-18s %14s  %s\n", m == 0 ? c->name : "", c->wl->metrics[m],
                   r ? r->value : "-", r ? r->unit : status);
        }
        /* results the entry does not list (a new metric): shown too */
        for (size_t k = 0; k < c->n_results; k++) {
            bool listed = false;
            for (size_t m = 0; c->wl->metrics[m]; m++)
                listed |= strcmp(c->wl->metrics[m], c->results[k].metric) == 0;
            if (!listed)
                printf("%-24s %-18s %14s  %s\n", "", c->results[k].metric, c->results[k].value,
                       c->results[k].unit);
        }
        if (!c->ok && c->n_results)
            printf("%-24s %-18s %14s  %s\n", "", "(status)", "FAILED", status);
    }
    printf("total %.1f s; rates are medians of %d timed iterations, latencies nearest-rank percentiles\n",
           total, ITERS);
}

/* A text value as the JSON type it reads as: true/false, integer, real, else string. */
static json_t *json_from_text(const char *s)
{
    if (strcmp(s, "true") == 0)
        return json_true();
    if (strcmp(s, "false") == 0)
        return json_false();
    char *end = NULL;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (*s && *end == '\0' && errno == 0)
        return json_integer(i);
    double d = strtod(s, &end);
    if (*s && *end == '\0')
        return json_real(d);
    return json_string(s);
}

static json_t *json_features(const struct probe *p)
{
    const struct urt_features *f = &p->features;
    return json_pack("{s:s, s:s, s:I, s:I, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:I}", "backend", p->backend_text,
                     "describe", p->features_text,
                     "setup_flags", (json_int_t)f->setup_flags, "kernel_features", (json_int_t)f->kernel_features,
                     "defer_taskrun", f->defer_taskrun, "coop_taskrun", f->coop_taskrun, "single_issuer",
                     f->single_issuer, "registered_ring_fd", f->registered_ring_fd, "ringless_msg",
                     f->ringless_msg, "ext_arg", f->ext_arg, "sqpoll", f->sqpoll, "numa_nodes",
                     (json_int_t)f->numa_nodes);
}

/* The describe table, one "name value default meaning" line per field. */
static json_t *json_config(const struct probe *p)
{
    json_t *obj = json_object();
    char *text = xstrdup(p->config_text), *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128], value[128];
        if (sscanf(line, "%127s %127s", name, value) == 2)
            json_object_set_new(obj, name, json_from_text(value));
    }
    free(text);
    return obj;
}

static void print_json(const struct probe *p, struct child_run *runs, size_t n, double total)
{
    json_t *results = json_array(), *workloads = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct child_run *c = &runs[i];
        for (size_t k = 0; k < c->n_results; k++)
            json_array_append_new(results, json_pack("{s:s, s:s, s:o, s:s}", "workload", c->name, "metric",
                                                     c->results[k].metric, "value",
                                                     json_from_text(c->results[k].value), "unit",
                                                     c->results[k].unit));
        json_t *details = json_array();
        char *text = c->err.data ? xstrdup(c->err.data) : xstrdup(""), *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            json_array_append_new(details, json_string(line));
        free(text);
        char status[96];
        describe_status(c, status, sizeof(status));
        json_array_append_new(workloads,
                              json_pack("{s:s, s:b, s:s, s:f, s:o}", "name", c->name, "ok", c->ok, "status",
                                        status, "seconds", c->seconds, "details", details));
    }
    json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:f}", "tool", PROGRAM,
                             "version", URT_VERSION_STRING, "peer", MEASURE_PEER, "workers", (int)p->workers,
                             "warmup", WARMUP, "iters", ITERS, "features", json_features(p), "config",
                             json_config(p), "results", results, "workloads", workloads, "seconds", total);
    if (!root || json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0) {
        fprintf(stderr, PROGRAM ": could not write the JSON output\n");
        exit(EXIT_FAILED);
    }
    putchar('\n');
    json_decref(root);
}

/* ---- mode 2 driver ------------------------------------------------------------ */

/* The workloads to run: all, or the comma-separated --only list, each with
 * the name it is run under (a child is started with that name: for
 * commit_stored_c4 the entry's own name is commit_stored_c<N>). */
static size_t select_workloads(const char *only, struct child_run **out)
{
    struct child_run *sel = NULL;
    size_t n = 0;
    if (!only) {
        for (size_t f = 0; FAMILIES[f]; f++)
            for (const struct workload *w = FAMILIES[f]; w->name; w++) {
                sel = xrealloc(sel, (n + 1) * sizeof(*sel));
                sel[n++] = (struct child_run){.wl = w, .name = xstrdup(w->name)};
            }
    } else {
        char *list = xstrdup(only), *save = NULL;
        for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
            const struct workload *w = workload_find(name);
            if (!w)
                die_usage("--only: unknown workload '%s' (%s --list shows them)", name, PROGRAM);
            sel = xrealloc(sel, (n + 1) * sizeof(*sel));
            sel[n++] = (struct child_run){.wl = w, .name = xstrdup(name)};
        }
        free(list);
        if (n == 0)
            die_usage("--only: empty workload list");
    }
    *out = sel;
    return n;
}

static int run_summary(const char *self, const struct options *opt)
{
    struct child_run *runs;
    size_t n = select_workloads(opt->only, &runs);
    struct probe probe = {0};
    probe_runtime(&probe);

    bool tty = isatty(STDERR_FILENO);
    uint64_t t0 = urt_now_ns();
    int rc = EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        child_run(self, &runs[i], tty, i, n, t0);
        report_child_done(&runs[i], tty, opt->verbose, i, n);
        if (!runs[i].ok)
            rc = EXIT_FAILED;
    }
    double total = seconds_since(t0);
    if (opt->json)
        print_json(&probe, runs, n, total);
    else
        print_table(&probe, runs, n, total);
    fflush(stdout);
    for (size_t i = 0; i < n; i++)
        child_run_free(&runs[i]);
    free(runs);
    free(probe.config_text);
    return rc;
}

/* ---- --help, --version, --list ---------------------------------------------- */

static void print_help(void)
{
    printf("usage: %s [options]            run every workload, each in a fresh process, and\n"
           "                                 print a summary table (or JSON)\n"
           "       %s <workload>           run one workload in this process (the per-process\n"
           "                                 protocol of docs/benchmarks.md: result lines on stdout)\n"
           "\n"
           "options:\n"
           "  -w, --workers N     worker threads (sets WORKERS; default: $WORKERS, else %d)\n"
           "  -o, --only A,B,...  run only these workloads (summary mode)\n"
           "  -j, --json          print one JSON object instead of the table (summary mode)\n"
           "  -v, --verbose       show every child's '# ...' detail lines\n"
           "  -l, --list          list the workload names\n"
           "  -V, --version       print the version, the backend and the features probed\n"
           "  -h, --help          this text\n"
           "\n"
           "environment:\n"
           "  WORKERS             worker threads of the runtime (default %d)\n"
           "  URT_<FIELD>         any field of struct urt_config, e.g. URT_BUSY_WORKER=true\n"
           "\n"
           "exit status: 0 ok; 1 a correctness check or a child failed; 2 bad usage, unknown\n"
           "workload or bad setting (nothing on stdout)\n"
           "\n"
           "workloads:\n",
           PROGRAM, PROGRAM, WORKERS_DEFAULT, WORKERS_DEFAULT);
    for (size_t f = 0; FAMILIES[f]; f++)
        for (const struct workload *w = FAMILIES[f]; w->name; w++)
            printf("  %-24s %s\n", w->name, w->summary ? w->summary : "");

    struct urt_config cfg;
    urt_config_init(&cfg);
    if (urt_config_from_env(&cfg) < 0)
        printf("\n(the environment has a bad URT_ variable: %s)\n", urt_last_error());
    int need = urt_config_describe(&cfg, NULL, 0);
    if (need > 0) {
        char *text = xrealloc(NULL, (size_t)need + 1);
        urt_config_describe(&cfg, text, (size_t)need + 1);
        printf("\nconfiguration fields (set with URT_<NAME>, upper case): name, value with the current\n"
               "environment, default, meaning:\n%s",
               text);
        free(text);
    }
}

static int print_version(void)
{
    struct probe probe = {0};
    probe_runtime(&probe);
    printf("%s %s (urt %d.%d.%d)\n", PROGRAM, URT_VERSION_STRING, URT_VERSION_MAJOR, URT_VERSION_MINOR,
           URT_VERSION_PATCH);
    printf("backend: %s\n", probe.backend_text);
    printf("features: %s\n", probe.features_text);
    if (probe.features.backend == URT_BACKEND_IO_URING) /* the raw probe words: io_uring's only */
        printf("setup_flags=0x%x kernel_features=0x%x\n", probe.features.setup_flags,
               probe.features.kernel_features);
    free(probe.config_text);
    return EXIT_OK;
}

static void print_list(void)
{
    for (size_t f = 0; FAMILIES[f]; f++)
        for (const struct workload *w = FAMILIES[f]; w->name; w++)
            printf("%s\n", w->name);
}

/* ---- main --------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, 'w'}, {"only", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},          {"verbose", no_argument, NULL, 'v'},
        {"list", no_argument, NULL, 'l'},          {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    struct options opt = {0};
    bool list = false, version = false;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":w:o:jvlVh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'w': {
            unsigned w;
            if (!parse_workers(optarg, &w))
                die_usage("--workers %s: expected a number from 1 to %d", optarg, WORKERS_MAX);
            setenv("WORKERS", optarg, 1);
            break;
        }
        case 'o':
            opt.only = optarg;
            break;
        case 'j':
            opt.json = true;
            break;
        case 'v':
            opt.verbose = true;
            break;
        case 'l':
            list = true;
            break;
        case 'V':
            version = true;
            break;
        case 'h':
            print_help();
            return EXIT_OK;
        case ':':
            die_usage("option %s needs an argument (try --help)", argv[optind - 1]);
        default:
            if (optopt)
                die_usage("unknown option -%c (try --help)", optopt);
            die_usage("unknown option %s (try --help)", argv[optind - 1]);
        }
    }
    if (list) {
        print_list();
        return EXIT_OK;
    }
    if (version)
        return print_version();

    int positional = argc - optind;
    if (positional > 1)
        die_usage("one workload at a time (got %d names); use --only A,B for several", positional);
    if (positional == 1) {
        if (opt.json || opt.only)
            die_usage("--json and --only belong to the summary mode (no workload argument)");
        return run_in_process(argv[optind]);
    }
    return run_summary(argv[0], &opt);
}
