/*
 * tests/powerloss/pl_mount.h — the unmount every power-loss driver does
 * (tests/powerloss/test_plfs.c, tests/powerloss/test_powerloss.c): the power
 * cut is an umount, retried while the file system is busy, and a fixture's
 * teardown detaches what a failed test left mounted.
 */
#ifndef URT_TESTS_PL_MOUNT_H
#define URT_TESTS_PL_MOUNT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define PL_UMOUNT_TRIES 500   /* ... of PL_UMOUNT_PAUSE_US each: 5 s */
#define PL_UMOUNT_PAUSE_US 10000

/* umount(mnt), retried while EBUSY (a killed writer's io_uring still holds
 * its files for a moment); asserts that it worked (what names the file
 * system in the message). Returns how many times it found the mount busy. */
static inline int pl_umount(const char *mnt, const char *what)
{
    int rc = -1, busy = 0;
    for (; busy < PL_UMOUNT_TRIES && (rc = umount(mnt)) != 0 && errno == EBUSY; busy++)
        usleep(PL_UMOUNT_PAUSE_US);
    cr_assert_eq(rc, 0, "umount %s (%s): %s", mnt, what, strerror(errno));
    return busy;
}

/* Fixture teardown, after a failed assertion too: a lazy unmount of mnt if
 * *mounted says it is still there. */
static inline void pl_detach(const char *mnt, bool *mounted)
{
    if (*mounted) {
        umount2(mnt, MNT_DETACH);
        *mounted = false;
    }
}

#endif
