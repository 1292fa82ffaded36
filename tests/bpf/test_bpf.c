/*
 * tests/bpf/test_bpf.c — the BPF programs against a live process (C18).
 *
 * Needs root, bpffs at /sys/fs/bpf (test.sh mounts it) and uprobes; skipped
 * with the loader's reason otherwise. A child (bpf_child, linked with the
 * shared liburt) creates a runtime and waits; the test attaches the BPF
 * programs to it through the loader urt-trace uses, lets it run a known load
 * and quiesce, then checks:
 *  - per worker, the done events, queue-latency and run-time histogram totals
 *    equal the child's own tasks_run, and the steal events its tasks_stolen;
 *  - the pinned maps dump through `bpftool map dump pinned ... -j` and parse,
 *    with the same totals;
 *  - detaching removes the pins and lowers the semaphores (the child's
 *    probe-fired counter stops moving);
 *  - urt-trace (bpf/urt-trace.c) prints per-worker histograms and removes its pins both
 *    when its count runs out and on Ctrl-C (SIGINT).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bpf/loader.h"

extern char **environ;

struct child {
    pid_t pid;
    FILE *in, *out; /* its stdin (we write), its stdout (we read) */
};

static void child_start(struct child *c)
{
    int to[2], from[2];
    cr_assert_eq(pipe(to), 0);
    cr_assert_eq(pipe(from), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addclose(&fa, to[1]);
    posix_spawn_file_actions_addclose(&fa, from[0]);
    char *argv[] = {(char *)BPF_CHILD, NULL};
    int err = posix_spawn(&c->pid, BPF_CHILD, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(err, 0, "posix_spawn %s: %s", BPF_CHILD, strerror(err));
    close(to[0]);
    close(from[1]);
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
    setvbuf(c->in, NULL, _IOLBF, 0);
}

static void child_expect(struct child *c, const char *what, char *line, size_t len)
{
    cr_assert_not_null(fgets(line, (int)len, c->out), "child exited before '%s'", what);
}

static void child_finish(struct child *c)
{
    fprintf(c->in, "exit\n");
    fclose(c->in);
    int status = 0;
    cr_assert_eq(waitpid(c->pid, &status, 0), c->pid);
    fclose(c->out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
}

/* Sum of "formatted".value.<field> over the entries of a pinned map, through bpftool's JSON. */
static uint64_t bpftool_sum(const char *path, const char *field, int *entries)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s map dump pinned %s -j", BPFTOOL, path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    json_error_t jerr;
    json_t *root = json_loadf(p, 0, &jerr);
    int st = pclose(p);
    cr_assert_not_null(root, "bpftool output for %s does not parse: %s (line %d)", path, jerr.text, jerr.line);
    cr_assert_eq(st, 0, "%s failed", cmd);
    cr_assert(json_is_array(root));
    uint64_t sum = 0;
    size_t i;
    json_t *e;
    *entries = 0;
    json_array_foreach(root, i, e) {
        json_t *value = json_object_get(json_object_get(e, "formatted"), "value");
        cr_assert_not_null(value, "entry %zu of %s has no BTF-formatted value", i, path);
        json_t *f = json_object_get(value, field);
        cr_assert(json_is_integer(f), "entry %zu of %s: no integer '%s'", i, path, field);
        sum += (uint64_t)json_integer_value(f);
        (*entries)++;
    }
    json_decref(root);
    return sum;
}

static void skip_unless_traceable(void)
{
    char lib[256], msg[512];
    int err = tracer_check(getpid(), lib, sizeof(lib), msg, sizeof(msg));
    /* This test process links the static archive: -ENOEXEC (no liburt.so)
     * means every environment check before it passed. */
    if (err != -ENOEXEC && err != 0)
        cr_skip_test("BPF suite skipped: %s", msg);
}

Test(bpf, histogram_totals_equal_task_counters, .timeout = 120)
{
    skip_unless_traceable();
    struct child c;
    child_start(&c);
    char line[256], msg[1024];
    child_expect(&c, "ready", line, sizeof(line));
    cr_assert_str_eq(line, "ready\n");

    struct tracer *t;
    int err = tracer_attach(c.pid, &t, msg, sizeof(msg));
    if (err) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, NULL, 0);
        cr_assert_fail("tracer_attach: %s", msg);
    }
    char dir[128];
    snprintf(dir, sizeof(dir), "%s", tracer_pin_dir(t));

    const unsigned n = 20000;
    fprintf(c.in, "go %u\n", n);
    uint64_t run[2] = {0}, stolen[2] = {0}, fired = 0, total = 0;
    for (;;) {
        child_expect(&c, "stats", line, sizeof(line));
        unsigned w;
        unsigned long long a, b;
        if (sscanf(line, "worker %u %llu %llu", &w, &a, &b) == 3 && w < 2) {
            run[w] = a;
            stolen[w] = b;
            total += a;
        } else if (sscanf(line, "fired %llu", &a) == 1) {
            fired = a;
        } else if (strcmp(line, "end\n") == 0) {
            break;
        }
    }
    cr_assert_eq(total, 2ull * n);
    cr_assert_gt(fired, 0, "probes attached, yet the child counted no fired probe");

    for (uint32_t w = 0; w < 2; w++) {
        struct urt_counters cnt;
        struct urt_log2_hist q, r;
        cr_assert_eq(tracer_read_counters(t, w, &cnt), 0);
        cr_assert_eq(tracer_read_hist(t, TRACER_QUEUE, w, &q), 0);
        cr_assert_eq(tracer_read_hist(t, TRACER_RUN, w, &r), 0);
        cr_assert_eq(cnt.tasks_done, run[w], "worker %u: %llu done events, child ran %llu", w,
                     (unsigned long long)cnt.tasks_done, (unsigned long long)run[w]);
        cr_assert_eq(cnt.unstamped, 0);
        cr_assert_eq(q.count, run[w], "worker %u: queue histogram %llu, tasks_run %llu", w,
                     (unsigned long long)q.count, (unsigned long long)run[w]);
        cr_assert_eq(r.count, run[w]);
        uint64_t slots = 0;
        for (int i = 0; i < URT_TRACE_SLOTS; i++)
            slots += q.slots[i];
        cr_assert_eq(slots, q.count);
        cr_assert_eq(cnt.steals, stolen[w], "worker %u: %llu steal events, child stole %llu", w,
                     (unsigned long long)cnt.steals, (unsigned long long)stolen[w]);
    }

    char path[256];
    int entries;
    snprintf(path, sizeof(path), "%s/queue_lat", dir);
    cr_assert_eq(bpftool_sum(path, "count", &entries), total);
    cr_assert_eq(entries, URT_TRACE_MAX_WORKERS);
    snprintf(path, sizeof(path), "%s/run_time", dir);
    cr_assert_eq(bpftool_sum(path, "count", &entries), total);
    snprintf(path, sizeof(path), "%s/counters", dir);
    cr_assert_eq(bpftool_sum(path, "tasks_done", &entries), total);

    tracer_detach(t);
    cr_assert_neq(access(dir, F_OK), 0, "%s still exists after detach", dir);

    /* Semaphores lowered: more work fires no probe. */
    fprintf(c.in, "again 1000\n");
    uint64_t fired_after = 0;
    for (;;) {
        child_expect(&c, "again", line, sizeof(line));
        unsigned long long a;
        if (sscanf(line, "fired %llu", &a) == 1)
            fired_after = a;
        else if (strcmp(line, "end\n") == 0)
            break;
    }
    cr_assert_eq(fired_after, fired, "probes fired after detach: %llu -> %llu", (unsigned long long)fired,
                 (unsigned long long)fired_after);
    child_finish(&c);
}

Test(bpf, refuses_a_process_without_liburt, .timeout = 30)
{
    skip_unless_traceable();
    struct tracer *t = NULL;
    char msg[512];
    int err = tracer_attach(getpid(), &t, msg, sizeof(msg));
    cr_assert_eq(err, -ENOEXEC, "attach to a process without liburt.so: %d (%s)", err, msg);
    cr_assert_null(t);
    cr_assert_not_null(strstr(msg, "liburt"), "message does not name liburt: %s", msg);
}

/* Runs urt-trace -p pid args... with its stdout to a file; returns its pid. */
static pid_t trace_start(pid_t target, const char *interval, const char *count, const char *out)
{
    char pid_text[16];
    snprintf(pid_text, sizeof(pid_text), "%d", (int)target);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)URT_TRACE, "-p", pid_text, (char *)interval, (char *)count, NULL};
    pid_t pid;
    int err = posix_spawn(&pid, URT_TRACE, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(err, 0, "posix_spawn %s: %s", URT_TRACE, strerror(err));
    return pid;
}

static bool pinned(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/queue_lat", dir);
    return access(path, F_OK) == 0;
}

/* urt-trace prints its "Tracing" line once the probes are attached (after pinning). */
static void wait_attached(const char *dir, const char *out)
{
    bool attached = false;
    for (int i = 0; i < 1000 && !attached; i++) {
        char text[512] = "";
        FILE *f = fopen(out, "r");
        if (f) {
            size_t n = fread(text, 1, sizeof(text) - 1, f);
            text[n] = '\0';
            fclose(f);
        }
        attached = strstr(text, "Tracing urt") != NULL;
        if (!attached)
            usleep(10000);
    }
    cr_assert(attached, "urt-trace did not attach");
    cr_assert(pinned(dir), "urt-trace attached but its maps are not in %s", dir);
}

Test(bpf, urt_trace_prints_and_cleans_up, .timeout = 120)
{
    skip_unless_traceable();
    struct child c;
    child_start(&c);
    char line[256], dir[64], out[64];
    child_expect(&c, "ready", line, sizeof(line));
    snprintf(dir, sizeof(dir), "%s/%d", TRACER_PIN_ROOT, (int)c.pid);
    snprintf(out, sizeof(out), "/tmp/urt-trace-test.%d", (int)getpid());

    /* 1: five intervals of 0.5 s, load at the start: exits by itself, pins gone. */
    pid_t tp = trace_start(c.pid, "0.5", "5", out);
    wait_attached(dir, out);
    fprintf(c.in, "go 2000\n");
    do
        child_expect(&c, "end", line, sizeof(line));
    while (strcmp(line, "end\n") != 0);
    int status;
    cr_assert_eq(waitpid(tp, &status, 0), tp);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "urt-trace status %#x", status);
    cr_assert_not(pinned(dir), "pins left after urt-trace's count ran out");
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f);
    char text[65536];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    cr_assert_not_null(strstr(text, "queue latency (submit -> start)"), "no queue histogram in:\n%s", text);
    cr_assert_not_null(strstr(text, "run time"), "no run-time histogram in:\n%s", text);
    cr_assert_not_null(strstr(text, " -> "), "no histogram rows in:\n%s", text);

    /* 2: no count: Ctrl-C detaches and unpins. */
    tp = trace_start(c.pid, "1", NULL, out);
    wait_attached(dir, out);
    kill(tp, SIGINT);
    cr_assert_eq(waitpid(tp, &status, 0), tp);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "urt-trace status after SIGINT %#x", status);
    cr_assert_not(pinned(dir), "pins left after SIGINT");
    cr_assert_neq(access(dir, F_OK), 0, "%s left after SIGINT", dir);
    unlink(out);
    child_finish(&c);
}
