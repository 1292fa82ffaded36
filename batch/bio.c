/*
 * batch/bio.c — the batch executor's file reads (contract: batch/bio.h) on
 * the worker rings (urt/io.h, SPEC C20).
 *
 * Every operation is submitted from a task of the batch's job, so its
 * continuation runs as a task of that job on the same worker (urt/io.h,
 * "Where the continuation runs"): the job cannot end while a read is in
 * flight, and cancelling it cancels the read (-ECANCELED).
 *   open:  IORING_OP_OPENAT (O_RDONLY, O_CLOEXEC added), then IORING_OP_STATX on
 *          the new descriptor (AT_EMPTY_PATH) for its size;
 *   read:  IORING_OP_READ of what is left, again from the continuation after
 *          a short read, until len bytes or the end of the file.
 * Closing stays close(2): a read-only descriptor of a regular file has no
 * write-back to wait for, and the tree releases files from contexts that are
 * not tasks of the batch's job (a commit's callback, the destroying thread).
 *
 * Memory ordering: none of its own; the runtime orders a submission before
 * its continuation, and the struct bio belongs to whoever runs the step.
 */
#include "batch/bio.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <urt/io.h>

void bio_init(struct bio *io, urt_job *job)
{
    io->job = job;
    io->fd = -1;
}

static void on_statx(struct urt_io *uio, int32_t res, void *arg)
{
    struct bio *io = arg;
    (void)uio;
    if (res < 0) {
        close(io->fd);
        io->fd = -1;
        io->done(io, res, io->arg);
        return;
    }
    io->size = io->stx.stx_size;
    int fd = io->fd;
    io->fd = -1;
    io->done(io, fd, io->arg);
}

static void on_open(struct urt_io *uio, int32_t res, void *arg)
{
    struct bio *io = arg;
    if (res < 0) {
        io->done(io, res, io->arg);
        return;
    }
    io->fd = res;
    urt_io_init(uio, on_statx, io);
    int rc = urt_io_statx(uio, res, "", AT_EMPTY_PATH, STATX_SIZE, &io->stx);
    if (rc) {
        close(res);
        io->fd = -1;
        io->done(io, rc, io->arg);
    }
}

int bio_open(struct bio *io, const char *path, bio_done_fn *done, void *arg)
{
    io->done = done;
    io->arg = arg;
    urt_io_init(&io->uio, on_open, io);
    return urt_io_openat(&io->uio, AT_FDCWD, path, O_RDONLY, 0);
}

static void on_read(struct urt_io *uio, int32_t res, void *arg)
{
    struct bio *io = arg;
    if (res < 0) {
        io->done(io, res, io->arg);
        return;
    }
    io->got += (uint64_t)res;
    if (res == 0 || io->got == io->len) { /* all of it, or the end of the file */
        io->done(io, (int64_t)io->got, io->arg);
        return;
    }
    int rc = urt_io_read(uio, io->fd, io->buf + io->got, io->len - io->got, (int64_t)(io->off + io->got));
    if (rc)
        io->done(io, rc, io->arg);
}

int bio_read(struct bio *io, int fd, void *buf, uint64_t len, uint64_t off, bio_done_fn *done, void *arg)
{
    io->done = done;
    io->arg = arg;
    io->fd = fd;
    io->buf = buf;
    io->off = off;
    io->len = len;
    io->got = 0;
    urt_io_init(&io->uio, on_read, io);
    return urt_io_read(&io->uio, fd, buf, len, (int64_t)off);
}

void bio_close(int fd)
{
    if (fd >= 0)
        close(fd);
}
