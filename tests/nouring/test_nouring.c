/*
 * tests/nouring/test_nouring.c — a host where io_uring is refused (seccomp,
 * as Docker's default profile does; or a kernel without it): what
 * urt_runtime_create answers, and that it leaves nothing behind.
 *
 * Each case forks a child that installs the filter (tests/nouring/nouring.h)
 * and reports over a pipe: the error, whether the handle stayed NULL, the
 * message, and the open descriptors and threads before and after. The
 * wrapper urt-nouring is checked the same way a test runner uses it.
 *
 * backend = auto (the default) falls back to the portable backend where the
 * ring is unavailable (EPERM, ENOSYS) and the runtime then runs tasks,
 * wakes parked workers from another thread and fires timers; a resource
 * error (ENOMEM) stays an error; backend = io_uring fails as before, with a
 * message; backend = portable runs where io_uring works too. A failed
 * creation leaves no descriptor or thread behind. urt_features_describe
 * (and urt-load --version) names the backend that runs and, on the portable
 * backend, claims none of io_uring's fields.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <urt/urt.h>

#include "nouring.h"
#include "tests/helpers.h"

struct report {
    int filter_rc;
    int err;
    int rt_null;
    int fds_before, fds_after;
    int threads_before, threads_after;
    int backend;                /* urt_runtime_backend */
    int ran, ran_parked, fired; /* tasks run; after the workers parked; timers fired */
    int fired_early;            /* timers that ran before their due time */
    char msg[256];
    char why[200];
    char session[512]; /* the log directory's sessions.log */
    int feat_backend;  /* urt_runtime_features' backend */
    char describe[512]; /* urt_features_describe of them */
};

static atomic_int ran, fired, fired_early;

static enum urt_task_result count_task(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_fetch_add(&ran, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result timer_task(struct urt_task *t, void *arg)
{
    (void)t;
    if (urt_now_ns() < (uint64_t)(uintptr_t)arg)
        atomic_fetch_add(&fired_early, 1);
    atomic_fetch_add(&fired, 1);
    return URT_TASK_DONE;
}

static void wait_for(atomic_int *v, int n)
{
    for (int i = 0; i < 500 && atomic_load(v) < n; i++)
        usleep(10 * 1000);
}

/* Tasks, a wake of parked workers from this (foreign) thread, timers. */
static void exercise(urt_runtime *rt, struct report *r)
{
    for (int i = 0; i < 100; i++)
        urt_spawn(rt, count_task, NULL, 0);
    wait_for(&ran, 100);
    r->ran = atomic_load(&ran);
    usleep(50 * 1000); /* worker_suspend_timeout_us is 10 s: the workers park now */
    for (int i = 0; i < 10; i++)
        urt_spawn(rt, count_task, NULL, 0);
    wait_for(&ran, 110);
    r->ran_parked = atomic_load(&ran) - r->ran;
    for (int i = 0; i < 5; i++) {
        uint64_t due = urt_now_ns() + (uint64_t)(i + 1) * 10 * 1000 * 1000;
        urt_spawn_at(rt, due, timer_task, NULL, (void *)(uintptr_t)due, 0);
    }
    wait_for(&fired, 5);
    r->fired = atomic_load(&fired);
    r->fired_early = atomic_load(&fired_early);
}

static void read_session(const char *dir, struct report *r)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sessions.log", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(r->session, 1, sizeof r->session - 1, f);
        r->session[n] = '\0';
        fclose(f);
    }
}

static void child(int fd, int refuse_errno, enum urt_backend backend, bool with_log)
{
    struct report r = {0};
    r.filter_rc = refuse_errno ? refuse_io_uring(refuse_errno) : 0;
    char dir[] = "/tmp/urt-nouring-XXXXXX";
    if (r.filter_rc == 0 && (!with_log || mkdtemp(dir))) {
        struct urt_config c;
        urt_config_init(&c);
        c.workers = 2;
        c.backend = backend;
        c.worker_suspend_timeout_us = 10 * 1000 * 1000;
        if (with_log)
            c.log_dir = dir;
        urt_runtime *rt = NULL;
        r.fds_before = proc_entries("/proc/self/fd");
        r.threads_before = proc_entries("/proc/self/task"); /* 1, or 2 under TSan (its background thread) */
        r.err = urt_runtime_create(&c, &rt);
        r.rt_null = rt == NULL;
        r.fds_after = proc_entries("/proc/self/fd");
        r.threads_after = proc_entries("/proc/self/task");
        snprintf(r.msg, sizeof r.msg, "%s", urt_last_error());
        if (rt) {
            const char *why = NULL;
            r.backend = urt_runtime_backend(rt, &why);
            snprintf(r.why, sizeof r.why, "%s", why ? why : "(null)");
            struct urt_features f;
            urt_runtime_features(rt, &f);
            r.feat_backend = f.backend;
            urt_features_describe(&f, r.describe, sizeof r.describe);
            exercise(rt, &r);
            urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
        }
        if (with_log) {
            read_session(dir, &r);
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            if (system(cmd) != 0)
                r.filter_rc = -EIO;
        }
    }
    ssize_t w = write(fd, &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
}

/* refuse_errno 0: io_uring is not refused. */
static struct report run_child(int refuse_errno, enum urt_backend backend, bool with_log)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(p[0]);
        child(p[1], refuse_errno, backend, with_log);
    }
    close(p[1]);
    struct report r;
    cr_assert_eq(read(p[0], &r, sizeof r), (ssize_t)sizeof r, "the child reported");
    close(p[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited cleanly (status 0x%x)", status);
    cr_assert_eq(r.filter_rc, 0, "the seccomp filter loaded (%d)", r.filter_rc);
    return r;
}

/* The features line names the portable backend and claims none of io_uring's fields. */
static void expect_portable_description(const struct report *r)
{
    cr_assert_eq(r->feat_backend, URT_BACKEND_PORTABLE, "urt_features.backend %d", r->feat_backend);
    const char *want = "backend=portable wait=epoll wake=eventfd files=thread-pool numa_nodes=";
    cr_assert_eq(strncmp(r->describe, want, strlen(want)), 0, "described as: %s", r->describe);
    cr_assert(strstr(r->describe, " io="), "described as: %s", r->describe);
    static const char *const uring_only[] = {"io_uring", "setup=", "ringfd=", "wake-from-foreign=", "ext_arg="};
    for (size_t i = 0; i < sizeof uring_only / sizeof uring_only[0]; i++)
        cr_assert_null(strstr(r->describe, uring_only[i]), "'%s' on the portable backend: %s", uring_only[i],
                       r->describe);
}

static void expect_runs(const struct report *r)
{
    cr_assert_eq(r->ran, 100, "tasks ran: %d of 100", r->ran);
    cr_assert_eq(r->ran_parked, 10, "tasks submitted to parked workers ran (a wake): %d of 10", r->ran_parked);
    cr_assert_eq(r->fired, 5, "timers fired: %d of 5", r->fired);
    cr_assert_eq(r->fired_early, 0, "no timer before its due time");
}

Test(nouring, auto_falls_back_to_portable_on_eperm, .timeout = 60)
{
    struct report r = run_child(EPERM, URT_BACKEND_AUTO, false);
    cr_assert_eq(r.err, 0, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert_eq(r.backend, URT_BACKEND_PORTABLE);
    cr_assert(strstr(r.why, "backend=auto") && strstr(r.why, "EPERM"), "why: %s", r.why);
    expect_portable_description(&r);
    expect_runs(&r);
}

Test(nouring, auto_falls_back_to_portable_on_enosys, .timeout = 60)
{
    struct report r = run_child(ENOSYS, URT_BACKEND_AUTO, false);
    cr_assert_eq(r.err, 0, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert_eq(r.backend, URT_BACKEND_PORTABLE);
    cr_assert(strstr(r.why, "ENOSYS"), "why: %s", r.why);
    expect_runs(&r);
}

/* The log on the portable backend: auto chooses as on io_uring except
 * single_flush (a chain of four operations: strict instead; test_wal's
 * log_sync_choice under the wrapper), so single_write on ext4 and xfs — one
 * O_DIRECT write made durable by the file's own fdatasync — and
 * sessions.log says which backend runs and why. */
Test(nouring, sessions_log_names_the_backend_and_the_log_sync, .timeout = 60)
{
    struct report r = run_child(EPERM, URT_BACKEND_AUTO, true);
    cr_assert_eq(r.err, 0, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert(strstr(r.session, "backend portable (backend=auto: io_uring_setup refused (EPERM"), "sessions.log: %s",
              r.session);
    struct statfs sf;
    cr_assert_eq(statfs("/tmp", &sf), 0);
    bool ext4_or_xfs = sf.f_type == 0xEF53 || sf.f_type == 0x58465342;
    cr_assert(strstr(r.session, ext4_or_xfs ? "log_sync single_write (" : "log_sync strict ("), "sessions.log (%s): %s",
              ext4_or_xfs ? "ext4/xfs" : "another file system", r.session);
}

/* backend = io_uring where the ring is refused with err: creation fails with
 * -err, a message naming io_uring and the errno, and nothing left behind. */
static void io_uring_refused_says_why(int err, const char *name)
{
    struct report r = run_child(err, URT_BACKEND_IO_URING, false);
    cr_assert_eq(r.err, -err, "urt_runtime_create answered %d", r.err);
    cr_assert(r.rt_null, "no handle on failure");
    cr_assert(strstr(r.msg, "io_uring") && strstr(r.msg, name), "message: %s", r.msg);
    cr_assert_eq(r.fds_after, r.fds_before, "no descriptor left open (%d -> %d)", r.fds_before, r.fds_after);
    cr_assert_eq(r.threads_after, r.threads_before, "no thread left running (%d -> %d)", r.threads_before,
                 r.threads_after);
}

Test(nouring, backend_io_uring_refused_with_eperm_says_why, .timeout = 30)
{
    io_uring_refused_says_why(EPERM, "EPERM");
}

Test(nouring, backend_io_uring_refused_with_enosys_says_why, .timeout = 30)
{
    io_uring_refused_says_why(ENOSYS, "ENOSYS");
}

/* A resource error is not "io_uring is unavailable": auto does not fall
 * back, it stays the error it is. */
Test(nouring, auto_with_enomem_from_setup_stays_enomem, .timeout = 30)
{
    struct report r = run_child(ENOMEM, URT_BACKEND_AUTO, false);
    cr_assert_eq(r.err, -ENOMEM, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert(r.rt_null);
    cr_assert(strstr(r.msg, "io_uring"), "message: %s", r.msg);
    cr_assert_eq(r.fds_after, r.fds_before, "no descriptor left open (%d -> %d)", r.fds_before, r.fds_after);
}

/* backend = portable where io_uring works (not refused). */
Test(nouring, backend_portable_runs_where_io_uring_works, .timeout = 60)
{
    struct report r = run_child(0, URT_BACKEND_PORTABLE, false);
    cr_assert_eq(r.err, 0, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert_eq(r.backend, URT_BACKEND_PORTABLE);
    cr_assert_str_eq(r.why, "backend=portable in the configuration");
    expect_portable_description(&r);
    expect_runs(&r);
}

/* Where io_uring is not refused here, the line names it and its fields;
 * where it is (this test under urt-nouring), auto runs portable and says so. */
Test(nouring, features_describe_names_the_backend_that_runs, .timeout = 60)
{
    struct report r = run_child(0, URT_BACKEND_AUTO, false);
    cr_assert_eq(r.err, 0, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert_eq(r.feat_backend, r.backend, "urt_features.backend %d, urt_runtime_backend %d", r.feat_backend,
                 r.backend);
    if (r.backend == URT_BACKEND_PORTABLE) {
        expect_portable_description(&r);
        return;
    }
    const char *want = "backend=io_uring setup=";
    cr_assert_eq(strncmp(r.describe, want, strlen(want)), 0, "described as: %s", r.describe);
    cr_assert(strstr(r.describe, " ringfd=") && strstr(r.describe, " wake-from-foreign=") &&
                  strstr(r.describe, " ext_arg=") && strstr(r.describe, " io="),
              "described as: %s", r.describe);
}

/* A struct filled by hand (backend 0) or left all zero: its io_uring fields,
 * no backend claimed. */
Test(nouring, features_describe_of_a_struct_without_backend, .timeout = 10)
{
    struct urt_features f = {0};
    char line[256];
    int n = urt_features_describe(&f, line, sizeof line);
    cr_assert_str_eq(line, "setup=none ringfd=plain wake-from-foreign=per-thread-ring ext_arg=no numa_nodes=0 io=none");
    cr_assert_eq(n, (int)strlen(line));
    f.backend = URT_BACKEND_PORTABLE;
    f.setup_flags = 0x3000; /* ignored: not the portable backend's */
    f.ext_arg = true;
    f.numa_nodes = 2;
    f.io_features = URT_IO_FEAT_SEND_ZC;
    urt_features_describe(&f, line, sizeof line);
    cr_assert_str_eq(line, "backend=portable wait=epoll wake=eventfd files=thread-pool numa_nodes=2 io=send_zc");
}

/* urt-load --version under the wrapper: the backend and why, the portable
 * description, none of io_uring's probe words. */
Test(nouring, urt_load_version_names_the_portable_backend, .timeout = 60)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "WORKERS=2 %s -- %s --version", URT_NOURING, URT_LOAD);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status 0x%x, output:\n%s", cmd, st, out);
    cr_assert(strstr(out, "\nbackend: portable (backend=auto: io_uring_setup refused (EPERM"), "output:\n%s", out);
    cr_assert(strstr(out, "\nfeatures: backend=portable wait=epoll"), "output:\n%s", out);
    cr_assert_null(strstr(out, "setup="), "output:\n%s", out);
    cr_assert_null(strstr(out, "setup_flags="), "output:\n%s", out);
    cr_assert_null(strstr(out, "io_uring:"), "output:\n%s", out);
}

static int run_wrapper(const char *const argv[])
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        execv(argv[0], (char *const *)argv);
        _exit(126);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the wrapper exited (status 0x%x)", status);
    return WEXITSTATUS(status);
}

/* The wrapper runs its command under the filter and exits with its status. */
Test(nouring, wrapper_runs_the_command_refused, .timeout = 30)
{
    const char *ok[] = {URT_NOURING, "--", "/bin/sh", "-c", "exit 7", NULL};
    cr_assert_eq(run_wrapper(ok), 7, "the command's own status");
    const char *bad_errno[] = {URT_NOURING, "-e", "EBADF", "true", NULL};
    cr_assert_eq(run_wrapper(bad_errno), 2, "an errno it does not take is bad usage");
    const char *none[] = {URT_NOURING, NULL};
    cr_assert_eq(run_wrapper(none), 2, "no command is bad usage");
    const char *missing[] = {URT_NOURING, "--", "/nonexistent/urt-no-such-program", NULL};
    cr_assert_eq(run_wrapper(missing), 127, "a command that cannot run");
}
