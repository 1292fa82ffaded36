/*
 * batch/bio.c — the batch executor's file reads (contract: batch/bio.h).
 *
 * INTERIM: the system calls run in the calling task (pread on a worker) and
 * the continuation is submitted as a task of the batch's job. This file is
 * replaced by reads on the worker rings (urt/io.h) once that API is in the
 * runtime; the callers do not change.
 */
#include "batch/bio.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static enum urt_task_result bio_continue(struct urt_task *t, void *arg)
{
    struct bio *io = arg;
    (void)t;
    io->done(io, io->res, io->arg);
    return URT_TASK_DONE;
}

static void bio_cancelled(struct urt_task *t, void *arg)
{
    struct bio *io = arg;
    (void)t;
    io->done(io, -ECANCELED, io->arg);
}

void bio_init(struct bio *io, urt_job *job)
{
    io->job = job;
    io->fd = -1;
}

static int bio_post(struct bio *io, int64_t res)
{
    io->res = res;
    urt_task_init(&io->task, bio_continue, io);
    io->task.cancel = bio_cancelled;
    return urt_job_submit(io->job, &io->task, 0);
}

int bio_open(struct bio *io, const char *path, bio_done_fn *done, void *arg)
{
    io->done = done;
    io->arg = arg;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bio_post(io, -errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = -errno;
        close(fd);
        return bio_post(io, err);
    }
    io->size = (uint64_t)st.st_size;
    int rc = bio_post(io, fd);
    if (rc)
        close(fd);
    return rc;
}

int bio_read(struct bio *io, int fd, void *buf, uint64_t len, uint64_t off, bio_done_fn *done, void *arg)
{
    io->done = done;
    io->arg = arg;
    io->fd = fd;
    io->buf = buf;
    io->off = off;
    io->len = len;
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return bio_post(io, -errno);
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    return bio_post(io, (int64_t)got);
}

void bio_close(int fd)
{
    if (fd >= 0)
        close(fd);
}
