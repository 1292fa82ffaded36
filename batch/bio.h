/*
 * batch/bio.h — how the batch executor reads its files: open + size, and
 * reads of a byte range, each continued by a callback that runs as a task of
 * the batch's job (so the job cannot end while a read is in flight).
 *
 * Rules:
 *  1. bio_open / bio_read are called from a task of the batch's job (`job`),
 *     on a worker: the callback then runs as a task of that job, on the same
 *     worker (urt/io.h). They return 0 (the callback will run exactly once)
 *     or a -errno of the submission (the callback will not run).
 *  2. The callback gets the result: for bio_open the new descriptor (>= 0;
 *     io->size holds the file's size) or -errno; for bio_read the number of
 *     bytes read — all of len unless the file ended first (short reads are
 *     continued inside) — or -errno (-ECANCELED when the batch's job was
 *     cancelled).
 *  3. One operation at a time per struct bio; it is the caller's again in the
 *     callback.
 * Memory ordering: none of its own; the continuation is a task (the runtime
 * orders the submission before the run). Implementation: batch/bio.c.
 */
#ifndef URT_BATCH_BIO_H
#define URT_BATCH_BIO_H

#include <stdint.h>
#include <sys/stat.h>

#include <urt/io.h>
#include <urt/job.h>
#include <urt/task.h>

struct bio;
typedef void bio_done_fn(struct bio *io, int64_t res, void *arg);

struct bio {
    urt_job *job;
    bio_done_fn *done;
    void *arg;
    int64_t res;
    uint64_t size;          /* bio_open: the file's size */
    /* the read in progress (off and len as asked: the callback may read them) */
    int fd;
    char *buf;
    uint64_t off, len, got;
    struct urt_io uio;      /* the operation on the worker's ring */
    struct statx stx;
};

void bio_init(struct bio *io, urt_job *job);
int bio_open(struct bio *io, const char *path, bio_done_fn *done, void *arg);
int bio_read(struct bio *io, int fd, void *buf, uint64_t len, uint64_t off, bio_done_fn *done, void *arg);
/* Closes a descriptor bio_open returned (no operation of it may be in flight). */
void bio_close(int fd);

#endif
