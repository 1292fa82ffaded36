/*
 * tests/powerloss/test_plfs.c — suite 'powerloss': tests/powerloss/plfs
 * against a simple model of a power loss.
 *
 * Every test mounts plfs (PLFS_BIN) on a fresh temporary directory
 * (BACKING/ and MNT/ under /tmp/plfs_test.XXXXXX), works through MNT, then
 * "loses power" with umount(MNT) (plfs exits and prints its drop line) and
 * inspects BACKING directly. Model: a file's durable image changes only at
 * fsync/fdatasync of that file, to its volatile image at that moment; the
 * volatile image is what reads through the mount see.
 *
 * PLFS=/path/to/plfs runs another build of plfs (a ThreadSanitizer one, say)
 * under the same tests.
 *
 * Skipped, with the reason, when /dev/fuse is missing or plfs cannot mount
 * (not root, no FUSE in the container). The plfs child gets SIGTERM when the
 * test process dies (PR_SET_PDEATHSIG) and every test's fini lazily
 * unmounts, so a failed assertion leaves no mount behind.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "powerloss/pl_mount.h"

#ifndef PLFS_BIN
#error "PLFS_BIN (path of the plfs executable) comes from tests/meson.build"
#endif

/* ---- the mounted file system of one test ---- */

struct drop {
    unsigned long long bytes, syncs;
    unsigned files;
};

static struct {
    char root[64];
    char back[96];
    char mnt[96];
    char errlog[96];
    pid_t pid;    /* plfs, 0 when not running */
    int ready_fd; /* plfs's stdout */
} fs;

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static void fs_setup(void)
{
    strcpy(fs.root, "/tmp/plfs_test.XXXXXX");
    cr_assert_not_null(mkdtemp(fs.root), "mkdtemp: %s", strerror(errno));
    path_in(fs.back, sizeof fs.back, fs.root, "backing");
    path_in(fs.mnt, sizeof fs.mnt, fs.root, "mnt");
    path_in(fs.errlog, sizeof fs.errlog, fs.root, "plfs.err");
    cr_assert_eq(mkdir(fs.back, 0755), 0);
    cr_assert_eq(mkdir(fs.mnt, 0755), 0);
    fs.pid = 0;
    fs.ready_fd = -1;
}

static void fs_teardown(void)
{
    if (fs.pid > 0) {
        pl_detach(fs.mnt, &(bool){true});
        kill(fs.pid, SIGKILL);
        waitpid(fs.pid, NULL, 0);
        fs.pid = 0;
    }
    if (fs.ready_fd >= 0)
        close(fs.ready_fd);
    if (fs.root[0])
        nftw(fs.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fs.root[0] = '\0';
}

/* cr_skip_test ends the test without running its fini: clean up first. */
#define SKIP_TEST(...)             \
    do {                           \
        fs_teardown();             \
        cr_skip_test(__VA_ARGS__); \
    } while (0)

static void read_errlog(char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(fs.errlog, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static pid_t spawn_plfs(const char *opt, int *out_fd)
{
    int pfd[2];
    cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int err = open(fs.errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(pfd[1], STDOUT_FILENO);
        if (err >= 0)
            dup2(err, STDERR_FILENO);
        const char *bin = getenv("PLFS") ? getenv("PLFS") : PLFS_BIN; /* e.g. a TSan build */
        if (opt)
            execl(bin, "plfs", opt, fs.back, fs.mnt, (char *)NULL);
        else
            execl(bin, "plfs", fs.back, fs.mnt, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    *out_fd = pfd[0];
    return pid;
}

/* Waits up to 10 s for "plfs: ready"; false if plfs ended first. */
static bool wait_ready(int fd)
{
    char line[64];
    size_t len = 0;
    while (len < sizeof line - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            return false;
        ssize_t r = read(fd, line + len, 1);
        if (r <= 0)
            return false;
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    return strcmp(line, "plfs: ready") == 0;
}

/* Mounts plfs (opt: NULL or "--strict-meta"); skips the test when FUSE
 * mounts are impossible here. */
static void fs_mount_opt(const char *opt)
{
    if (access("/dev/fuse", R_OK | W_OK))
        SKIP_TEST("/dev/fuse is not usable (%s): no FUSE mounts for this user here", strerror(errno));
    fs.pid = spawn_plfs(opt, &fs.ready_fd);
    if (wait_ready(fs.ready_fd))
        return;
    int status;
    waitpid(fs.pid, &status, 0);
    fs.pid = 0;
    char err[512];
    read_errlog(err, sizeof err);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
        SKIP_TEST("plfs cannot mount here (not root? no FUSE?): %s", err);
    cr_assert_fail("plfs did not get ready (status %d): %s", status, err);
}

static void fs_mount(void)
{
    fs_mount_opt(NULL);
}

/* The power loss: unmount, plfs exits 0 without applying anything. */
static struct drop fs_drop(void)
{
    int busy = pl_umount(fs.mnt, "plfs");
    if (busy)
        cr_log_info("umount: EBUSY for %d ms", busy * 10);
    int status = 0;
    pid_t w = 0;
    for (int i = 0; i < 1000 && (w = waitpid(fs.pid, &status, WNOHANG)) == 0; i++)
        usleep(10000);
    cr_assert_eq(w, fs.pid, "plfs did not exit after umount");
    fs.pid = 0;
    close(fs.ready_fd);
    fs.ready_fd = -1;
    char err[1024];
    read_errlog(err, sizeof err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "plfs exit status %d: %s", status, err);
    /* libfuse may print its own line first ("fuse: reading device: Software
     * caused connection abort" when the unmount aborted the connection):
     * the drop line is found wherever it is. */
    struct drop d = {0};
    const char *line = strstr(err, "plfs: dropped ");
    cr_assert(line != NULL, "no drop line in: %s", err);
    cr_assert_eq(sscanf(line, "plfs: dropped %llu bytes in %u files (%llu syncs applied)", &d.bytes, &d.files,
                        &d.syncs),
                 3, "drop line: %s", err);
    return d;
}

static int open_in(const char *dir, const char *name, int flags)
{
    char p[160];
    path_in(p, sizeof p, dir, name);
    int fd = open(p, flags | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "open %s: %s", p, strerror(errno));
    return fd;
}

static void put(int fd, const void *buf, size_t len, off_t off)
{
    cr_assert_eq(pwrite(fd, buf, len, off), (ssize_t)len, "pwrite: %s", strerror(errno));
}

/* The whole content of dir/name (NULL when it does not exist). */
static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
    char p[160];
    path_in(p, sizeof p, dir, name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *len = 0;
        return NULL;
    }
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(buf);
    ssize_t r = pread(fd, buf, (size_t)st.st_size + 1, 0);
    close(fd);
    cr_assert_eq(r, st.st_size, "%s: read %zd of %lld bytes", p, r, (long long)st.st_size);
    *len = (size_t)r;
    return buf;
}

static void expect_content(const char *dir, const char *name, const void *want, size_t want_len)
{
    size_t len;
    uint8_t *got = slurp(dir, name, &len);
    cr_assert_not_null(got, "%s/%s is missing", dir, name);
    cr_assert_eq(len, want_len, "%s/%s: %zu bytes, want %zu", dir, name, len, want_len);
    cr_assert(want_len == 0 || memcmp(got, want, want_len) == 0, "%s/%s: content differs", dir, name);
    free(got);
}

static void fini(void)
{
    fs_teardown();
#if defined(__SANITIZE_ADDRESS__)
    __lsan_do_recoverable_leak_check();
#endif
}

#define PL_TEST(name) Test(powerloss, name, .init = fs_setup, .fini = fini, .timeout = 120)

/* ---- command line ---- */

static int run_plfs_status(char *const argv[])
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDERR_FILENO);
        dup2(null, STDOUT_FILENO);
        execv(PLFS_BIN, argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

PL_TEST(bad_arguments_exit_2)
{
    char file[128];
    path_in(file, sizeof file, fs.root, "plain");
    close(open(file, O_CREAT | O_WRONLY, 0644));
    char *none[] = {"plfs", NULL};
    char *one[] = {"plfs", fs.back, NULL};
    char *three[] = {"plfs", fs.back, fs.mnt, fs.mnt, NULL};
    char *unknown[] = {"plfs", "--fast", fs.back, fs.mnt, NULL};
    char *missing[] = {"plfs", "/nonexistent/plfs", fs.mnt, NULL};
    char *notdir[] = {"plfs", fs.back, file, NULL};
    char *same[] = {"plfs", fs.back, fs.back, NULL};
    char *inside[] = {"plfs", fs.root, fs.mnt, NULL};
    cr_expect_eq(run_plfs_status(none), 2);
    cr_expect_eq(run_plfs_status(one), 2);
    cr_expect_eq(run_plfs_status(three), 2);
    cr_expect_eq(run_plfs_status(unknown), 2);
    cr_expect_eq(run_plfs_status(missing), 2);
    cr_expect_eq(run_plfs_status(notdir), 2);
    cr_expect_eq(run_plfs_status(same), 2);
    cr_expect_eq(run_plfs_status(inside), 2);
}

/* ---- the data model, case by case ---- */

PL_TEST(unsynced_write_visible_then_dropped)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "hello, world", 12, 0);
    put(fd, "tail", 4, 10000);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 10004, "volatile size through the mount");
    char buf[16] = {0};
    cr_assert_eq(pread(fd, buf, 12, 0), 12);
    cr_expect_eq(memcmp(buf, "hello, world", 12), 0, "read-your-writes");
    void *map = mmap(NULL, 10004, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED, "mmap: %s", strerror(errno));
    cr_expect_eq(memcmp(map, "hello", 5), 0, "mmap read sees the volatile data");
    cr_expect_eq(memcmp((char *)map + 10000, "tail", 4), 0);
    munmap(map, 10004);
    close(fd);

    size_t len;
    uint8_t *back = slurp(fs.back, "f", &len);
    cr_assert_not_null(back, "the file's creation is durable at once");
    cr_expect_eq(len, 0, "nothing reached the backing file before a sync");
    free(back);

    struct drop d = fs_drop();
    cr_expect_eq(d.bytes, 16);
    cr_expect_eq(d.files, 1);
    cr_expect_eq(d.syncs, 0);
    expect_content(fs.back, "f", "", 0);
}

PL_TEST(fsync_of_a_keeps_a_not_b)
{
    fs_mount();
    int a = open_in(fs.mnt, "a", O_RDWR | O_CREAT);
    int b = open_in(fs.mnt, "b", O_RDWR | O_CREAT);
    put(a, "AAAA", 4, 0);
    put(b, "BBBB", 4, 0);
    cr_assert_eq(fsync(a), 0);
    put(a, "aa", 2, 4); /* after the sync: lost */
    close(a);
    close(b);
    expect_content(fs.mnt, "a", "AAAAaa", 6);
    struct drop d = fs_drop();
    cr_expect_eq(d.files, 2);
    cr_expect_eq(d.bytes, 6);
    cr_expect_eq(d.syncs, 1);
    expect_content(fs.back, "a", "AAAA", 4);
    expect_content(fs.back, "b", "", 0);
}

PL_TEST(fdatasync_applies_the_size)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "end", 3, 20000);
    cr_assert_eq(fdatasync(fd), 0);
    int g = open_in(fs.mnt, "g", O_RDWR | O_CREAT);
    cr_assert_eq(ftruncate(g, 12345), 0);
    cr_assert_eq(fdatasync(g), 0);
    close(fd);
    close(g);
    fs_drop();
    uint8_t *want = calloc(1, 20003);
    memcpy(want + 20000, "end", 3);
    expect_content(fs.back, "f", want, 20003);
    expect_content(fs.back, "g", want, 12345);
    free(want);
}

PL_TEST(overwrite_of_synced_range_restored)
{
    fs_mount();
    enum { N = 3 * 4096 + 100 };
    static uint8_t a[N], mixed[N];
    memset(a, 'A', N);
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, a, N, 0);
    cr_assert_eq(fsync(fd), 0);
    memcpy(mixed, a, N);
    memset(mixed + 4000, 'B', 5000); /* spans three pages */
    put(fd, mixed + 4000, 5000, 4000);
    close(fd);
    expect_content(fs.mnt, "f", mixed, N);
    fs_drop();
    expect_content(fs.back, "f", a, N);
}

PL_TEST(truncate_then_write_dropped)
{
    fs_mount();
    enum { N = 10000 };
    static uint8_t x[N], vol[5001];
    memset(x, 'X', N);
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, x, N, 0);
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(ftruncate(fd, 100), 0);
    put(fd, "Y", 1, 5000);
    memset(vol, 'X', 100);
    vol[5000] = 'Y'; /* 100..4999 read as zeros, not the old X */
    expect_content(fs.mnt, "f", vol, sizeof vol);
    close(fd);
    fs_drop();
    expect_content(fs.back, "f", x, N);

    fs_mount(); /* the same, synced: the backing file becomes the volatile image */
    fd = open_in(fs.mnt, "f", O_RDWR);
    cr_assert_eq(ftruncate(fd, 100), 0);
    put(fd, "Y", 1, 5000);
    cr_assert_eq(fsync(fd), 0);
    close(fd);
    fs_drop();
    expect_content(fs.back, "f", vol, sizeof vol);
}

PL_TEST(open_trunc_is_volatile)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "durable", 7, 0);
    cr_assert_eq(fsync(fd), 0);
    close(fd);
    fd = open_in(fs.mnt, "f", O_RDWR | O_TRUNC);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 0);
    close(fd);
    fs_drop();
    expect_content(fs.back, "f", "durable", 7);
}

PL_TEST(fallocate_modes)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "abcdefgh", 8, 0);
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(fallocate(fd, 0, 0, 8192), 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 8192);
    cr_assert_eq(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 100000), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 8192, "KEEP_SIZE keeps the size");
    cr_assert_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2, 3), 0);
    cr_assert_eq(fallocate(fd, FALLOC_FL_ZERO_RANGE, 8190, 10), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 8200);
    errno = 0;
    cr_expect_eq(fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, 4096), -1);
    cr_expect_eq(errno, EOPNOTSUPP, "unimplemented modes fail: %s", strerror(errno));
    static uint8_t vol[8200];
    memcpy(vol, "ab\0\0\0fgh", 8);
    expect_content(fs.mnt, "f", vol, sizeof vol);
    close(fd);
    fs_drop();
    expect_content(fs.back, "f", "abcdefgh", 8);
}

PL_TEST(o_direct_and_flock)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT | O_DIRECT);
    put(fd, "unaligned", 9, 3); /* direct_io handle: no alignment needed */
    char buf[12];
    cr_assert_eq(pread(fd, buf, sizeof buf, 0), 12);
    cr_expect_eq(memcmp(buf, "\0\0\0unaligned", 12), 0);
    int fd2 = open_in(fs.mnt, "f", O_RDONLY);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    cr_expect_eq(flock(fd2, LOCK_EX | LOCK_NB), -1, "flock is exclusive across open files");
    close(fd2);
    close(fd);
    fs_drop();
    expect_content(fs.back, "f", "", 0);
}

/* ---- concurrency ---- */

enum { WRITERS = 4, WPAGES = 64 };

struct writer {
    pthread_t thread;
    int fd;
    int id;
    atomic_int failed; /* the line of the failing step, 0 when fine */
};

static void pattern(uint8_t *page, int id, int i)
{
    for (int k = 0; k < 4096; k++)
        page[k] = (uint8_t)(id * 31 + i * 7 + k);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    uint8_t page[4096];
    for (int i = 0; i < 2 * WPAGES; i++) {
        pattern(page, w->id, i);
        if (pwrite(w->fd, page, sizeof page, (off_t)i * 4096) != (ssize_t)sizeof page)
            atomic_store(&w->failed, __LINE__);
        if (i == WPAGES - 1 && fdatasync(w->fd))
            atomic_store(&w->failed, __LINE__);
    }
    return NULL;
}

PL_TEST(concurrent_writers_on_different_files)
{
    fs_mount();
    static struct writer ws[WRITERS];
    char name[16];
    for (int i = 0; i < WRITERS; i++) {
        snprintf(name, sizeof name, "w%d", i);
        ws[i].fd = open_in(fs.mnt, name, O_RDWR | O_CREAT);
        ws[i].id = i;
        atomic_init(&ws[i].failed, 0);
        cr_assert_eq(pthread_create(&ws[i].thread, NULL, writer_main, &ws[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(ws[i].thread, NULL);
        cr_assert_eq(atomic_load(&ws[i].failed), 0, "writer %d failed at line %d", i, atomic_load(&ws[i].failed));
        close(ws[i].fd);
    }
    struct drop d = fs_drop();
    cr_expect_eq(d.files, WRITERS);
    cr_expect_eq(d.syncs, WRITERS);
    cr_expect_eq(d.bytes, (unsigned long long)WRITERS * WPAGES * 4096);
    static uint8_t want[WPAGES * 4096];
    for (int i = 0; i < WRITERS; i++) {
        for (int p = 0; p < WPAGES; p++)
            pattern(want + p * 4096, i, p);
        snprintf(name, sizeof name, "w%d", i);
        expect_content(fs.back, name, want, sizeof want);
    }
}

/* Several threads write disjoint stripes of ONE file while another syncs
 * it over and over; after a final fsync every byte is durable. */
enum { STRIPES = 4, STRIPE_PAGES = 32 };

struct striper {
    pthread_t thread;
    int fd, id;
    atomic_int failed;
    atomic_bool *stop;
};

static void *stripe_main(void *arg)
{
    struct striper *w = arg;
    uint8_t page[4096];
    for (int i = 0; i < STRIPE_PAGES; i++) {
        int pg = i * STRIPES + w->id;
        pattern(page, 7, pg);
        if (pwrite(w->fd, page, sizeof page, (off_t)pg * 4096) != (ssize_t)sizeof page)
            atomic_store(&w->failed, __LINE__);
    }
    return NULL;
}

static void *syncer_main(void *arg)
{
    struct striper *w = arg;
    struct stat st;
    while (!atomic_load(w->stop))
        if (fdatasync(w->fd) || fstat(w->fd, &st))
            atomic_store(&w->failed, __LINE__);
    return NULL;
}

PL_TEST(concurrent_writes_and_syncs_on_one_file)
{
    fs_mount();
    int fd = open_in(fs.mnt, "one", O_RDWR | O_CREAT);
    atomic_bool stop;
    atomic_init(&stop, false);
    static struct striper ws[STRIPES + 1];
    for (int i = 0; i <= STRIPES; i++) {
        ws[i].fd = i % 2 ? fd : open_in(fs.mnt, "one", O_RDWR); /* two open files of one inode */
        ws[i].id = i;
        ws[i].stop = &stop;
        atomic_init(&ws[i].failed, 0);
        cr_assert_eq(pthread_create(&ws[i].thread, NULL, i < STRIPES ? stripe_main : syncer_main, &ws[i]), 0);
    }
    for (int i = 0; i < STRIPES; i++)
        pthread_join(ws[i].thread, NULL);
    atomic_store(&stop, true);
    pthread_join(ws[STRIPES].thread, NULL);
    for (int i = 0; i <= STRIPES; i++)
        cr_assert_eq(atomic_load(&ws[i].failed), 0, "thread %d failed at line %d", i, atomic_load(&ws[i].failed));
    cr_assert_eq(fsync(fd), 0);
    for (int i = 0; i <= STRIPES; i++)
        if (ws[i].fd != fd)
            close(ws[i].fd);
    close(fd);
    static uint8_t want[STRIPES * STRIPE_PAGES * 4096];
    for (int pg = 0; pg < STRIPES * STRIPE_PAGES; pg++)
        pattern(want + pg * 4096, 7, pg);
    expect_content(fs.mnt, "one", want, sizeof want);
    struct drop d = fs_drop();
    cr_expect_eq(d.files, 0);
    expect_content(fs.back, "one", want, sizeof want);
}

/* ---- random operations against the model ---- */

enum { MFILES = 3, MMAX = 40000, MOPS = 300, MCYCLES = 5 };

struct model_file {
    uint8_t durable[MMAX], vol[MMAX];
    size_t dlen, vlen;
    int fd;
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void model_pwrite(struct model_file *f, uint64_t *rng)
{
    size_t off = (size_t)(rng_next(rng) % (MMAX - 9000));
    size_t len = 1 + (size_t)(rng_next(rng) % 9000);
    uint8_t buf[9000];
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)rng_next(rng);
    put(f->fd, buf, len, (off_t)off);
    if (off > f->vlen)
        memset(f->vol + f->vlen, 0, off - f->vlen);
    memcpy(f->vol + off, buf, len);
    if (off + len > f->vlen)
        f->vlen = off + len;
}

static void model_resize(struct model_file *f, size_t size)
{
    if (size > f->vlen)
        memset(f->vol + f->vlen, 0, size - f->vlen);
    f->vlen = size;
}

static void model_fallocate(struct model_file *f, uint64_t *rng)
{
    static const int modes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE,
                                FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE};
    int mode = modes[rng_next(rng) % 5];
    size_t off = (size_t)(rng_next(rng) % (MMAX - 9000));
    size_t len = 1 + (size_t)(rng_next(rng) % 9000);
    cr_assert_eq(fallocate(f->fd, mode, (off_t)off, (off_t)len), 0, "fallocate %#x: %s", mode, strerror(errno));
    size_t end = off + len;
    if (mode & (FALLOC_FL_ZERO_RANGE | FALLOC_FL_PUNCH_HOLE)) /* zeros below the size */
        if (off < f->vlen)
            memset(f->vol + off, 0, (end < f->vlen ? end : f->vlen) - off);
    if (!(mode & FALLOC_FL_KEEP_SIZE) && end > f->vlen)
        model_resize(f, end);
}

static void model_check(struct model_file *f, uint64_t *rng)
{
    static uint8_t buf[MMAX + 1];
    struct stat st;
    cr_assert_eq(fstat(f->fd, &st), 0);
    cr_assert_eq((size_t)st.st_size, f->vlen, "volatile size");
    size_t off = f->vlen ? (size_t)(rng_next(rng) % f->vlen) : 0;
    if (rng_next(rng) & 1)
        off = 0;
    cr_assert_eq(pread(f->fd, buf, sizeof buf, (off_t)off), (ssize_t)(f->vlen - off));
    cr_assert(memcmp(buf, f->vol + off, f->vlen - off) == 0, "volatile image differs from %zu", off);
}

static void model_step(struct model_file *f, const char *name, uint64_t *rng)
{
    unsigned op = (unsigned)(rng_next(rng) % 16);
    if (op < 7) {
        model_pwrite(f, rng);
    } else if (op < 9) {
        size_t size = (size_t)(rng_next(rng) % MMAX);
        cr_assert_eq(ftruncate(f->fd, (off_t)size), 0);
        model_resize(f, size);
    } else if (op < 11) {
        model_fallocate(f, rng);
    } else if (op < 13) { /* fsync or fdatasync: the durable image catches up */
        cr_assert_eq(rng_next(rng) & 1 ? fsync(f->fd) : fdatasync(f->fd), 0);
        memcpy(f->durable, f->vol, f->vlen);
        f->dlen = f->vlen;
    } else if (op < 14) { /* close and reopen: the volatile data stays */
        close(f->fd);
        f->fd = open_in(fs.mnt, name, O_RDWR);
    } else {
        model_check(f, rng);
    }
}

PL_TEST(random_ops_match_the_model)
{
    static struct model_file files[MFILES];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    const char *env = getenv("PLFS_TEST_SEED");
    if (env)
        seed = strtoull(env, NULL, 0) | 1;
    cr_log_info("seed %#llx (PLFS_TEST_SEED)", (unsigned long long)seed);
    uint64_t rng = seed;
    char name[16];
    for (int c = 0; c < MCYCLES; c++) {
        fs_mount();
        for (int i = 0; i < MFILES; i++) {
            snprintf(name, sizeof name, "m%d", i);
            files[i].fd = open_in(fs.mnt, name, O_RDWR | O_CREAT);
        }
        for (int k = 0; k < MOPS; k++) {
            unsigned i = (unsigned)(rng_next(&rng) % MFILES);
            snprintf(name, sizeof name, "m%u", i);
            model_step(&files[i], name, &rng);
        }
        for (int i = 0; i < MFILES; i++)
            close(files[i].fd);
        fs_drop();
        for (int i = 0; i < MFILES; i++) {
            snprintf(name, sizeof name, "m%d", i);
            expect_content(fs.back, name, files[i].durable, files[i].dlen);
            memcpy(files[i].vol, files[i].durable, files[i].dlen); /* the power came back */
            files[i].vlen = files[i].dlen;
        }
    }
}

/* ---- urt's own sequence, through io_uring ---- */

PL_TEST(io_uring_sync_file_range_is_not_durable)
{
    fs_mount();
    int a = open_in(fs.mnt, "a", O_RDWR | O_CREAT);
    int b = open_in(fs.mnt, "b", O_RDWR | O_CREAT);
    struct io_uring ring;
    int rc = io_uring_queue_init(8, &ring, 0);
    if (rc == -ENOSYS || rc == -EPERM)
        SKIP_TEST("io_uring unavailable: %s", strerror(-rc));
    cr_assert_eq(rc, 0, "io_uring_queue_init: %s", strerror(-rc));

    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_write(sqe, a, "aaaa", 4, 0);
    sqe->flags |= IOSQE_IO_LINK;
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_sync_file_range(sqe, a, 4, 0,
                                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_write(sqe, b, "bbbb", 4, 0);
    sqe->flags |= IOSQE_IO_LINK;
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_fsync(sqe, b, IORING_FSYNC_DATASYNC);
    cr_assert_eq(io_uring_submit(&ring), 4);
    for (int i = 0; i < 4; i++) {
        struct io_uring_cqe *cqe;
        cr_assert_eq(io_uring_wait_cqe(&ring, &cqe), 0);
        cr_assert_geq(cqe->res, 0, "completion %d: %s", i, strerror(-cqe->res));
        io_uring_cqe_seen(&ring, cqe);
    }
    io_uring_queue_exit(&ring);
    expect_content(fs.mnt, "a", "aaaa", 4);
    close(a);
    close(b);
    struct drop d = fs_drop();
    cr_expect_eq(d.syncs, 1, "SYNC_FILE_RANGE never reaches plfs");
    expect_content(fs.back, "b", "bbbb", 4);
    expect_content(fs.back, "a", "", 0);
}

/* ---- --strict-meta ---- */

PL_TEST(strict_meta_removes_unsynced_new_files)
{
    fs_mount_opt("--strict-meta");
    int d = open_in(fs.mnt, "kept", O_RDWR | O_CREAT);
    put(d, "k", 1, 0);
    cr_assert_eq(fsync(d), 0);
    close(d);
    int dir = open(fs.mnt, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(dir, 0);
    cr_assert_eq(fsync(dir), 0); /* "kept" is now a durable entry */
    int l = open_in(fs.mnt, "lost", O_RDWR | O_CREAT);
    put(l, "l", 1, 0);
    cr_assert_eq(fsync(l), 0); /* its data, not its name */
    close(l);
    char from[160], to[160];
    path_in(from, sizeof from, fs.mnt, "lost");
    path_in(to, sizeof to, fs.mnt, "lost2");
    cr_assert_eq(rename(from, to), 0);
    close(dir);
    fs_drop();
    char err[512];
    read_errlog(err, sizeof err);
    cr_expect(strstr(err, "syncs applied), removed 1 new files\n") != NULL, "drop line: %s", err);
    expect_content(fs.back, "kept", "k", 1);
    size_t len;
    uint8_t *gone = slurp(fs.back, "lost2", &len);
    cr_expect(gone == NULL, "a new file without a directory fsync is gone");
    free(gone);
}

/* ---- lifecycle ---- */

PL_TEST(sigterm_drops_and_exits_0)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "gone", 4, 0);
    close(fd);
    cr_assert_eq(kill(fs.pid, SIGTERM), 0);
    int status = 0;
    pid_t w = 0;
    for (int i = 0; i < 1000 && (w = waitpid(fs.pid, &status, WNOHANG)) == 0; i++)
        usleep(10000);
    cr_assert_eq(w, fs.pid, "plfs did not exit on SIGTERM");
    fs.pid = 0;
    char err[512];
    read_errlog(err, sizeof err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, err);
    cr_expect(strstr(err, "plfs: dropped 4 bytes in 1 files (0 syncs applied)") != NULL, "drop line: %s", err);
    struct stat mst, rst;
    cr_assert_eq(stat(fs.mnt, &mst), 0, "the mount point is usable again: %s", strerror(errno));
    cr_assert_eq(stat(fs.root, &rst), 0);
    cr_expect_eq(mst.st_dev, rst.st_dev, "plfs unmounted itself");
    expect_content(fs.back, "f", "", 0);
}

PL_TEST(closed_file_keeps_volatile_data_until_unlink)
{
    fs_mount();
    int fd = open_in(fs.mnt, "f", O_RDWR | O_CREAT);
    put(fd, "still here", 10, 0);
    close(fd);
    expect_content(fs.mnt, "f", "still here", 10); /* like the page cache */
    fd = open_in(fs.mnt, "f", O_RDWR);
    cr_assert_eq(fsync(fd), 0); /* a sync by another open file of the inode */
    close(fd);
    int g = open_in(fs.mnt, "g", O_RDWR | O_CREAT);
    put(g, "unlinked", 8, 0);
    close(g);
    char p[160];
    path_in(p, sizeof p, fs.mnt, "g");
    cr_assert_eq(unlink(p), 0);
    g = open_in(fs.mnt, "g", O_RDWR | O_CREAT); /* a new inode, maybe the same number */
    struct stat st;
    cr_assert_eq(fstat(g, &st), 0);
    cr_expect_eq(st.st_size, 0, "a new file does not inherit a dead overlay");
    close(g);
    struct drop d = fs_drop();
    cr_expect_eq(d.files, 0);
    expect_content(fs.back, "f", "still here", 10);
    expect_content(fs.back, "g", "", 0);
}

/* The driver's cycle: a writer on io_uring appends 4 KiB records, each made
 * durable by IORING_OP_FSYNC(DATASYNC) before it is acknowledged on a pipe;
 * SIGKILL, umount (retried while the dead ring still holds the files), then
 * every acknowledged record is in BACKING and nothing else is torn. */
static void io_uring_writer(int fd, int ack)
{
    struct io_uring ring;
    if (io_uring_queue_init(4, &ring, 0))
        _exit(3);
    uint8_t rec[4096];
    for (uint32_t i = 0;; i++) {
        pattern(rec, 3, (int)i);
        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_write(sqe, fd, rec, sizeof rec, (uint64_t)i * sizeof rec);
        sqe->flags |= IOSQE_IO_LINK;
        io_uring_prep_fsync(io_uring_get_sqe(&ring), fd, IORING_FSYNC_DATASYNC);
        if (io_uring_submit_and_wait(&ring, 2) != 2)
            _exit(4);
        for (int k = 0; k < 2; k++) {
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&ring, &cqe) || cqe->res < 0)
                _exit(5);
            io_uring_cqe_seen(&ring, cqe);
        }
        uint32_t acked = i + 1;
        if (write(ack, &acked, sizeof acked) != sizeof acked)
            _exit(6);
        pattern(rec, 4, (int)i); /* an unsynced scribble past the end: must vanish */
        if (pwrite(fd, rec, sizeof rec, (off_t)(i + 1) * (off_t)sizeof rec) != (ssize_t)sizeof rec)
            _exit(7);
    }
}

PL_TEST(sigkilled_io_uring_writer_cycle)
{
    struct io_uring probe;
    int rc = io_uring_queue_init(2, &probe, 0);
    if (rc == -ENOSYS || rc == -EPERM)
        SKIP_TEST("io_uring unavailable: %s", strerror(-rc));
    io_uring_queue_exit(&probe);
    for (int cycle = 0; cycle < 3; cycle++) {
        fs_mount();
        int pfd[2];
        cr_assert_eq(pipe(pfd), 0);
        pid_t w = fork();
        cr_assert_geq(w, 0);
        if (w == 0) {
            close(pfd[0]);
            char p[160];
            path_in(p, sizeof p, fs.mnt, "log");
            int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
            if (fd < 0)
                _exit(2);
            io_uring_writer(fd, pfd[1]);
        }
        close(pfd[1]);
        uint32_t acked = 0, a;
        while (acked < 20u + 10u * (uint32_t)cycle && read(pfd[0], &a, sizeof a) == sizeof a)
            acked = a;
        kill(w, SIGKILL);
        int status;
        waitpid(w, &status, 0);
        while (read(pfd[0], &a, sizeof a) == sizeof a)
            acked = a;
        close(pfd[0]);
        cr_assert(WIFSIGNALED(status), "the writer ended by itself (status %d)", status);
        fs_drop();
        size_t len;
        uint8_t *log = slurp(fs.back, "log", &len);
        cr_assert_not_null(log);
        cr_assert_eq(len % 4096, 0, "a torn record: %zu bytes", len);
        cr_assert_geq(len / 4096, acked, "acknowledged records lost: %zu < %u", len / 4096, acked);
        cr_assert_leq(len / 4096, acked + 1u, "more than the one unacknowledged sync");
        uint8_t rec[4096];
        for (size_t i = 0; i < len / 4096; i++) {
            pattern(rec, 3, (int)i);
            cr_assert(memcmp(log + i * 4096, rec, sizeof rec) == 0, "record %zu differs", i);
        }
        free(log);
    }
}
