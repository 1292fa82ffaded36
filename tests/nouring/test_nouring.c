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
 * Today the runtime needs io_uring: creation fails with the errno the host
 * answers and a message that says why (no silent fallback, no crash, no
 * leaked descriptor or thread).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <urt/urt.h>

#include "nouring.h"

struct report {
    int filter_rc;
    int err;
    int rt_null;
    int fds_before, fds_after;
    int threads_before, threads_after;
    char msg[256];
};

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void child(int fd, int refuse_errno)
{
    struct report r = {0};
    r.filter_rc = refuse_io_uring(refuse_errno);
    if (r.filter_rc == 0) {
        struct urt_config c;
        urt_config_init(&c);
        c.workers = 2;
        urt_runtime *rt = NULL;
        r.fds_before = count_dir("/proc/self/fd");
        r.threads_before = count_dir("/proc/self/task"); /* 1, or 2 under TSan (its background thread) */
        r.err = urt_runtime_create(&c, &rt);
        r.rt_null = rt == NULL;
        r.fds_after = count_dir("/proc/self/fd");
        r.threads_after = count_dir("/proc/self/task");
        snprintf(r.msg, sizeof r.msg, "%s", urt_last_error());
        if (rt)
            urt_runtime_destroy(rt, URT_SHUTDOWN_CANCEL);
    }
    ssize_t w = write(fd, &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
}

static struct report run_refused(int refuse_errno)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(p[0]);
        child(p[1], refuse_errno);
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

Test(nouring, create_refused_with_eperm_says_why, .timeout = 30)
{
    struct report r = run_refused(EPERM);
    cr_assert_eq(r.err, -EPERM, "urt_runtime_create answered %d", r.err);
    cr_assert(r.rt_null, "no handle on failure");
    cr_assert(strstr(r.msg, "io_uring") && strstr(r.msg, "EPERM"), "message: %s", r.msg);
    cr_assert_eq(r.fds_after, r.fds_before, "no descriptor left open (%d -> %d)", r.fds_before, r.fds_after);
    cr_assert_eq(r.threads_after, r.threads_before, "no thread left running (%d -> %d)", r.threads_before,
                 r.threads_after);
}

Test(nouring, create_refused_with_enosys_says_why, .timeout = 30)
{
    struct report r = run_refused(ENOSYS);
    cr_assert_eq(r.err, -ENOSYS, "urt_runtime_create answered %d", r.err);
    cr_assert(r.rt_null);
    cr_assert(strstr(r.msg, "io_uring") && strstr(r.msg, "ENOSYS"), "message: %s", r.msg);
    cr_assert_eq(r.fds_after, r.fds_before, "no descriptor left open (%d -> %d)", r.fds_before, r.fds_after);
    cr_assert_eq(r.threads_after, r.threads_before, "no thread left running (%d -> %d)", r.threads_before,
                 r.threads_after);
}

/* A resource error is not "io_uring is unavailable": it stays the error it is. */
Test(nouring, create_with_enomem_from_setup_stays_enomem, .timeout = 30)
{
    struct report r = run_refused(ENOMEM);
    cr_assert_eq(r.err, -ENOMEM, "urt_runtime_create answered %d: %s", r.err, r.msg);
    cr_assert(r.rt_null);
    cr_assert(strstr(r.msg, "io_uring"), "message: %s", r.msg);
    cr_assert_eq(r.fds_after, r.fds_before, "no descriptor left open (%d -> %d)", r.fds_before, r.fds_after);
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
