/*
 * tx/wal_dir.c — the log directory: its lock, its check (is it a urt log
 * directory?), file names, and whole-file reads for recovery.
 *
 * Threading: plain blocking file I/O on the calling thread; no shared state.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "tx/wal.h"
#include "tx/wal_dir.h"
#include "tx/wal_format.h"

/* ch-<gen:16 hex>-<worker:4 hex>.wal (segment 0) or ...-<seg:6 hex>.wal. */
bool wal_parse_channel_name(const char *s, uint64_t *gen, uint32_t *worker, uint32_t *seg)
{
    unsigned long long g;
    unsigned w, k = 0;
    int used = 0;
    size_t n = strlen(s);
    if (n == 28 && sscanf(s, "ch-%16llx-%4x.wal%n", &g, &w, &used) == 2 && used == 28)
        ;
    else if (n == 35 && sscanf(s, "ch-%16llx-%4x-%6x.wal%n", &g, &w, &k, &used) == 3 && used == 35 && k > 0)
        ;
    else
        return false;
    for (const char *p = s + 3; *p != '.'; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-'))
            return false; /* lowercase hex only: one name per file */
    *gen = g;
    *worker = w;
    *seg = k;
    return true;
}

static bool known_name(const char *n)
{
    static const char *const fixed[] = {".",         "..",       "LOCK",         "epochs",        "epochs.tmp",
                                        "cuts.log",  "sessions.log", "checkpoint", "checkpoint.tmp"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (!strcmp(n, fixed[i]))
            return true;
    uint64_t g;
    uint32_t w, k;
    return wal_parse_channel_name(n, &g, &w, &k);
}

static int check_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st))
        return urt__error(-errno, "log directory %s: %s", dir, errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return urt__error(-ENOTDIR, "log directory %s: not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return urt__error(-errno, "log directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (known_name(e->d_name))
            continue;
        rc = urt__error(-EMEDIUMTYPE, "log directory %s: not a urt log directory (it holds \"%s\")", dir, e->d_name);
        break;
    }
    closedir(d);
    return rc;
}

int wal_check_dir(const char *dir)
{
    return check_dir(dir);
}

int wal_lock_dir(const char *dir, bool create)
{
    if (!dir || !*dir)
        return urt__error(-EINVAL, "log_dir: empty path");
    if (create && mkdir(dir, 0755) && errno != EEXIST)
        return urt__error(-errno, "log directory %s: cannot create it: %s", dir, strerror(errno));
    int rc = check_dir(dir);
    if (rc)
        return rc;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/LOCK", dir) >= (int)sizeof(path))
        return urt__error(-ENAMETOOLONG, "log directory %s: path too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return urt__error(-errno, "log directory %s: cannot open LOCK: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return urt__error(-EBUSY, "log directory %s: in use by another runtime or process (LOCK held)", dir);
        return urt__error(-e, "log directory %s: cannot lock: %s", dir, strerror(e));
    }
    return fd;
}

/* Opens name read-only and stats it: the fd (>= 0) or -errno (-ENOENT: absent). */
static int open_stat(int dirfd, const char *name, struct stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, st)) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int wal_read_whole(int dirfd, const char *name, uint8_t **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    struct stat st;
    int fd = open_stat(dirfd, name, &st);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *out = b;
    *size = got;
    return 0;
}

/* A channel file mapped read-only (a log can be far larger than memory we
 * want to copy it into). Every read of the mapping happens before any cut
 * (step 7 before step 8): a truncated mapped page would fault (SIGBUS). */
int wal_map_whole(int dirfd, const char *name, uint8_t **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    struct stat st;
    int fd = open_stat(dirfd, name, &st);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return -e;
        }
        *out = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

