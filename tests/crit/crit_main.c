/*
 * tests/crit/crit_main.c — the runner behind tests/crit/criterion/criterion.h
 * (ThreadSanitizer builds; see that header for why).
 *
 * Runs every registered test in a child process of its own (fork, no threads
 * exist in the runner at fork time), with the test's .timeout enforced by
 * SIGKILL from the parent; classifies the child's end as passed (exit 0),
 * failed (exit 1), skipped (exit 77) or crashed (a signal, e.g. a TSan report
 * with halt_on_error, or the timeout); prints one line per test and
 * Criterion's synthesis line; exits 0 only if nothing failed or crashed.
 * Options: --filter SUITE/NAME-prefix runs a subset; other Criterion options
 * (e.g. --jobs 1) are accepted and ignored.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "criterion/criterion.h"

#define CRIT_EXIT_FAIL 1
#define CRIT_EXIT_SKIP 77

static struct crit_test *tests;
static unsigned expect_failures;

void crit_register(struct crit_test *t)
{
    t->next = tests;
    tests = t;
}

static void vreport(const char *what, const char *file, int line, const char *expr, const char *fmt, va_list ap)
{
    fprintf(stderr, "[----] %s:%d: %s: %s", file, line, what, expr);
    while (fmt && *fmt == ' ')
        fmt++;
    if (fmt && *fmt) {
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
    }
    fputc('\n', stderr);
}

void crit_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("Assertion failed", file, line, expr, fmt, ap);
    va_end(ap);
    fflush(NULL);
    _exit(CRIT_EXIT_FAIL);
}

void crit_expect_failed(const char *file, int line, const char *expr, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("Expectation failed", file, line, expr, fmt, ap);
    va_end(ap);
    expect_failures++;
}

void crit_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("[SKIP] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(NULL);
    _exit(CRIT_EXIT_SKIP);
}

void crit_log(const char *level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 0 passed, 1 failed, 2 crashed, 3 skipped */
static int run_one(struct crit_test *t)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        if (t->opt.init)
            t->opt.init();
        t->fn();
        if (t->opt.fini)
            t->opt.fini();
        fflush(NULL);
        _exit(expect_failures ? CRIT_EXIT_FAIL : 0);
    }
    double limit = t->opt.timeout > 0 ? t->opt.timeout : 0, start = now_s();
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, limit > 0 ? WNOHANG : 0);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            return 2;
        }
        if (limit > 0 && now_s() - start > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "[----] %s::%s: timed out after %.1f s\n", t->suite, t->name, limit);
            return 2;
        }
        if (limit > 0) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "[----] %s::%s: crashed with signal %d\n", t->suite, t->name, WTERMSIG(status));
        return 2;
    }
    int code = WEXITSTATUS(status);
    return code == 0 ? 0 : code == CRIT_EXIT_SKIP ? 3 : code == CRIT_EXIT_FAIL ? 1 : 2;
}

int main(int argc, char **argv)
{
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else if (!strncmp(argv[i], "--filter=", 9))
            filter = argv[i] + 9;
    }
    /* Registration order is reversed by the constructors: restore file order. */
    struct crit_test *ordered = NULL;
    while (tests) {
        struct crit_test *t = tests;
        tests = t->next;
        t->next = ordered;
        ordered = t;
    }
    unsigned n = 0, passed = 0, failed = 0, crashed = 0, skipped = 0;
    static const char *verdict[] = {"PASS", "FAIL", "CRASH", "SKIP"};
    for (struct crit_test *t = ordered; t; t = t->next) {
        char full[256];
        snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
        if (filter && strncmp(full, filter, strlen(filter)) != 0)
            continue;
        if (t->opt.disabled) {
            skipped++;
            continue;
        }
        n++;
        double t0 = now_s();
        int r = run_one(t);
        fprintf(stderr, "[%s] %s::%s: (%.2fs)\n", verdict[r], t->suite, t->name, now_s() - t0);
        passed += r == 0;
        failed += r == 1;
        crashed += r == 2;
        skipped += r == 3;
    }
    fprintf(stderr, "[====] Synthesis: Tested: %u | Passing: %u | Failing: %u | Crashing: %u | Skipped: %u\n", n,
            passed, failed, crashed, skipped);
    return failed || crashed ? 1 : 0;
}
