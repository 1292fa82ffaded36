/*
 * tests/nouring/nouring.h — refuse io_uring to this process and its children
 * (a seccomp filter, libseccomp): io_uring_setup, io_uring_enter and
 * io_uring_register fail with the given errno, as under Docker's default
 * seccomp profile (EPERM) or on a kernel without io_uring (ENOSYS). Shared by
 * the urt-nouring wrapper and the tests that fork a child to try it.
 *
 * No memory ordering: call it before any thread starts.
 */
#ifndef URT_TESTS_NOURING_H
#define URT_TESTS_NOURING_H

#include <errno.h>
#include <seccomp.h>
#include <stddef.h>

/* 0, or a negative errno (the filter could not be built or loaded). */
static inline int refuse_io_uring(int err)
{
    static const char *const calls[] = {"io_uring_setup", "io_uring_enter", "io_uring_register"};
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < sizeof calls / sizeof calls[0] && rc == 0; i++) {
        int nr = seccomp_syscall_resolve_name(calls[i]);
        if (nr == __NR_SCMP_ERROR)
            rc = -ENOSYS;
        else
            rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
    }
    if (rc == 0)
        rc = seccomp_load(ctx); /* sets no_new_privs first (SCMP_FLTATR_CTL_NNP defaults on) */
    seccomp_release(ctx);
    return rc;
}

#endif
