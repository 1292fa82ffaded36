/*
 * tests/unit/test_watchdog.c — the watchdog (urt/watchdog.h).
 *
 *  - a task that sleeps past task_runtime_limit_us is reported once, with
 *    its worker, task pointer and job, and an elapsed time above the limit;
 *    two long runs give two reports; short tasks give none;
 *  - the default callback writes one line to stderr (forked child, stderr
 *    captured through a pipe);
 *  - policy abort: a forked child dies of SIGABRT after printing the report
 *    and every worker's state (checked in the captured stderr);
 *  - urt_dump_state() prints one line per worker;
 *  - with the limit off, workers publish nothing (the slot stays empty).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "runtime/runtime.h"

static urt_runtime *g_rt;

enum { MAX_REPORTS = 16 };
static struct urt_watchdog_report g_reports[MAX_REPORTS];
static _Atomic int g_n_reports, g_bad_ctx;

/* On the watcher thread: no criterion assertions here (main thread only). */
static void record_report(void *ctx, const struct urt_watchdog_report *r)
{
    if (ctx != &g_n_reports)
        atomic_fetch_add(&g_bad_ctx, 1);
    int i = atomic_load(&g_n_reports);
    if (i < MAX_REPORTS)
        g_reports[i] = *r;
    atomic_store(&g_n_reports, i + 1); /* publishes the entry (seq_cst) */
}

struct slow_task {
    struct urt_task task;
    uint64_t sleep_us;
    _Atomic int worker;
    _Atomic bool done;
};

static enum urt_task_result slow_task_fn(struct urt_task *t, void *arg)
{
    struct slow_task *s = arg;
    (void)t;
    atomic_store(&s->worker, urt_current_worker(g_rt));
    sleep_us(s->sleep_us);
    atomic_store(&s->done, true);
    return URT_TASK_DONE;
}

static urt_runtime *make_rt(uint32_t workers, uint64_t limit_us, bool abort_policy)
{
    struct urt_config c;
    test_config(&c, workers);
    c.task_runtime_limit_us = limit_us;
    c.watchdog_abort = abort_policy;
    g_rt = rt_create_or_skip(&c);
    return g_rt;
}

static enum urt_task_result quick_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add((_Atomic int *)arg, 1);
    return URT_TASK_DONE;
}

Test(watchdog, long_task_is_reported_once_with_its_ids, .timeout = 60)
{
    /* A short task is reported if its worker is off the CPU for a whole limit
     * while running it: the sanitizer builds (slower, on a loaded 2-CPU CI
     * machine) use a longer limit so that a preemption does not fail them. */
    enum { LIMIT_US = SCALE(20000, 50000) };
    make_rt(2, LIMIT_US, false);
    atomic_store(&g_n_reports, 0);
    cr_assert_eq(urt_watchdog_set_callback(g_rt, record_report, &g_n_reports), 0);

    /* short tasks: never reported */
    _Atomic int quick = 0;
    for (int i = 0; i < 2000; i++)
        cr_assert_eq(urt_spawn(g_rt, quick_fn, &quick, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&quick) == 2000, 5000));
    sleep_us(2 * LIMIT_US);
    cr_assert_eq(atomic_load(&g_n_reports), 0);

    struct slow_task s = {.sleep_us = 8 * LIMIT_US};
    atomic_store(&s.worker, -2);
    urt_task_init(&s.task, slow_task_fn, &s);
    cr_assert_eq(urt_task_submit(g_rt, &s.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.done), 10000));
    sleep_us(2 * LIMIT_US);
    cr_assert_eq(atomic_load(&g_n_reports), 1, "reports: %d", atomic_load(&g_n_reports));
    struct urt_watchdog_report r = g_reports[0];
    cr_assert_eq(r.worker, (uint32_t)atomic_load(&s.worker), "worker %u, ran on %d", r.worker, atomic_load(&s.worker));
    cr_assert_eq(r.task, &s.task);
    cr_assert_null(r.job);
    cr_assert_eq(r.limit_ns, LIMIT_US * 1000ull);
    cr_assert_gt(r.elapsed_ns, r.limit_ns);
    cr_assert_lt(r.elapsed_ns, s.sleep_us * 1000ull, "noticed only after the task ended?");

    /* a second long run of the same task: a second report */
    atomic_store(&s.done, false);
    cr_assert_eq(urt_task_submit(g_rt, &s.task, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&s.done), 10000));
    sleep_us(2 * LIMIT_US);
    cr_assert_eq(atomic_load(&g_n_reports), 2);
    cr_assert_eq(g_reports[1].task, &s.task);

    struct urt_watcher_stats ws;
    cr_assert_eq(urt_watcher_stats(g_rt, &ws), 0);
    cr_assert_eq(ws.watchdog_reports, 2);
    cr_assert_eq(atomic_load(&g_bad_ctx), 0, "callback context not passed through");
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(watchdog, limit_off_publishes_nothing, .timeout = 30)
{
    make_rt(1, 0, false);
    struct slow_task s = {.sleep_us = 30000};
    atomic_store(&s.worker, -2);
    urt_task_init(&s.task, slow_task_fn, &s);
    cr_assert_eq(urt_task_submit(g_rt, &s.task, 0), 0);
    /* look while the task runs (a fixed sleep could look before it started) */
    cr_assert(WAIT_UNTIL(atomic_load(&s.worker) != -2, 5000), "the task did not start");
    struct worker *w = ((struct urt_runtime *)g_rt)->sched.workers[0];
    cr_assert_eq(atomic_load(&w->wd.seq), 0, "a worker published a task with the watchdog off");
    cr_assert_null(atomic_load(&w->wd.task));
    cr_assert(WAIT_UNTIL(atomic_load(&s.done), 5000));
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- forked children ----------------------------------------------------------------------------- */

/* Runs child() in a forked process with stderr captured; returns its wait
 * status and what it wrote to stderr (NUL-terminated, in buf). */
static int run_child(void (*child)(void), char *buf, size_t len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        child();
        _exit(0);
    }
    close(fds[1]);
    read_pipe(fds[0], buf, len);
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

static void child_default_callback(void)
{
    struct urt_config c;
    test_config(&c, 2);
    c.task_runtime_limit_us = 10000;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&c, &rt) != 0)
        _exit(77);
    g_rt = rt;
    struct slow_task s = {.sleep_us = 80000};
    urt_task_init(&s.task, slow_task_fn, &s);
    if (urt_task_submit(rt, &s.task, 0) != 0)
        _exit(3);
    while (!atomic_load(&s.done))
        sleep_us(1000);
    struct urt_watcher_stats ws;
    urt_watcher_stats(rt, &ws);
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    _exit(ws.watchdog_reports == 1 ? 0 : 4);
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

Test(watchdog, default_callback_logs_one_line, .timeout = 60)
{
    static char out[8192];
    int status = run_child(child_default_callback, out, sizeof(out));
    cr_assert(WIFEXITED(status), "child status %#x; stderr:\n%s", status, out);
    if (WEXITSTATUS(status) == 77)
        cr_skip_test("io_uring unavailable");
    cr_assert_eq(WEXITSTATUS(status), 0, "child exit %d; stderr:\n%s", WEXITSTATUS(status), out);
    cr_assert_eq(count_lines_with(out, "urt watchdog: task "), 1, "stderr:\n%s", out);
    cr_assert(strstr(out, "has run for at least") && strstr(out, "(limit 10.000 ms)"), "stderr:\n%s", out);
}

static void child_abort_policy(void)
{
    struct urt_config c;
    test_config(&c, 2);
    c.task_runtime_limit_us = 10000;
    c.watchdog_abort = true;
    urt_runtime *rt = NULL;
    if (urt_runtime_create(&c, &rt) != 0)
        _exit(77);
    g_rt = rt;
    struct slow_task s = {.sleep_us = 5ull * 1000 * 1000};
    urt_task_init(&s.task, slow_task_fn, &s);
    if (urt_task_submit(rt, &s.task, 0) != 0)
        _exit(3);
    fprintf(stderr, "long task %p\n", (void *)&s.task);
    while (!atomic_load(&s.done))
        sleep_us(1000);
    _exit(5); /* the watchdog should have aborted the process by now */
}

Test(watchdog, abort_policy_dumps_state_and_aborts, .timeout = 60)
{
    static char out[16384];
    int status = run_child(child_abort_policy, out, sizeof(out));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        cr_skip_test("io_uring unavailable");
    cr_assert(WIFSIGNALED(status), "child was not killed (status %#x); stderr:\n%s", status, out);
    cr_assert_eq(WTERMSIG(status), SIGABRT, "signal %d; stderr:\n%s", WTERMSIG(status), out);
    char task[64];
    cr_assert_eq(sscanf(strstr(out, "long task ") ? strstr(out, "long task ") : "", "long task %63s", task), 1,
                 "stderr:\n%s", out);
    cr_assert_eq(count_lines_with(out, "urt watchdog: task "), 1, "stderr:\n%s", out);
    cr_assert(strstr(out, "aborting"), "stderr:\n%s", out);
    cr_assert(strstr(out, "urt state: 2 workers"), "stderr:\n%s", out);
    cr_assert(strstr(out, "urt state: worker 0: "), "stderr:\n%s", out);
    cr_assert(strstr(out, "urt state: worker 1: "), "stderr:\n%s", out);
    /* the running task appears in the dump with its pointer, and queue lengths are there */
    char running[160];
    snprintf(running, sizeof(running), "task %s (job (nil)) running for at least", task);
    cr_assert(strstr(out, running), "no '%s' in stderr:\n%s", running, out);
    cr_assert(strstr(out, "deque 0, inbox empty, sticky empty"), "stderr:\n%s", out);
}

Test(watchdog, dump_state_and_argument_checks, .timeout = 30)
{
    make_rt(3, 0, false);
    char path[] = "/tmp/urt-dump-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(urt_dump_state(g_rt, fd), 0);
    char out[4096] = "";
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, out, sizeof(out) - 1);
    cr_assert_gt(n, 0);
    out[n] = '\0';
    close(fd);
    cr_assert_eq(count_lines_with(out, "urt state: worker "), 3, "%s", out);
    cr_assert(strstr(out, "running task unknown (task_runtime_limit_us is 0)"), "%s", out);
    cr_assert(strstr(out, "urt state: watcher: 0 conditional tasks watched"), "%s", out);
    cr_assert_eq(urt_dump_state(NULL, 2), -EINVAL);
    cr_assert_eq(urt_dump_state(g_rt, -1), -EINVAL);
    cr_assert_eq(urt_watchdog_set_callback(NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(urt_watchdog_set_callback(g_rt, NULL, NULL), 0, "NULL restores the default");
    rt_destroy_clean(g_rt, URT_SHUTDOWN_DRAIN, 0);
}
