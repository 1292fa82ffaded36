/*
 * tests/nouring/urt-nouring.c — runs a command in a process where io_uring is
 * refused, the way Docker's and containerd's default seccomp profiles refuse
 * it: io_uring_setup, io_uring_enter and io_uring_register fail with EPERM
 * (or the errno given with -e). The filter (libseccomp) is installed with
 * no_new_privs and inherited by every child and exec'd program, so a test
 * runner wrapped in it runs every test without io_uring.
 *
 *     urt-nouring [-e ENOSYS|EPERM|ENOMEM] [--] COMMAND [ARG...]
 *
 * Exit status: the command's (exec replaces this process); 125 when the
 * filter cannot be installed, 127 when the command cannot be run, 2 on bad
 * usage. Used by the nouring test setup (meson test --setup nouring) and by
 * the tests of how the runtime answers a host without io_uring.
 *
 * No memory ordering: a single thread, before exec.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nouring.h"

static int parse_errno(const char *s)
{
    if (!strcmp(s, "EPERM"))
        return EPERM;
    if (!strcmp(s, "ENOSYS"))
        return ENOSYS;
    if (!strcmp(s, "ENOMEM"))
        return ENOMEM;
    return -1;
}

int main(int argc, char **argv)
{
    int err = EPERM, i = 1;
    if (i + 1 < argc && !strcmp(argv[i], "-e")) {
        err = parse_errno(argv[i + 1]);
        if (err < 0) {
            fprintf(stderr, "urt-nouring: -e %s: want EPERM, ENOSYS or ENOMEM\n", argv[i + 1]);
            return 2;
        }
        i += 2;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc) {
        fprintf(stderr, "usage: urt-nouring [-e EPERM|ENOSYS|ENOMEM] [--] COMMAND [ARG...]\n");
        return 2;
    }
    int rc = refuse_io_uring(err);
    if (rc < 0) {
        fprintf(stderr, "urt-nouring: cannot install the seccomp filter: %s\n", strerror(-rc));
        return 125;
    }
    execvp(argv[i], argv + i);
    fprintf(stderr, "urt-nouring: %s: %s\n", argv[i], strerror(errno));
    return 127;
}
