/*
 * tests/property/prop_trace.h — an I/O trace of one runtime session on a log
 * directory, for the recovery property test (tests/unit/test_wal_property.c).
 *
 * The test executable is linked with -Wl,--wrap for the calls the log makes
 * on its files (pwrite64, pwritev64v2, fdatasync, fsync, ftruncate64,
 * openat64, renameat, unlinkat) and for sched_io_submit, through which every
 * operation of the log's worker I/O passes (writes, fdatasync,
 * sync_file_range; RWF_DSYNC writes). No line of the library changes: the wrappers record
 * each operation on a file of the traced directory (its name, range, the
 * bytes written, its result) with a start and an end number drawn from one
 * counter, then call the real function. A worker operation starts when it is
 * submitted (its buffer final) and ends when its completion is
 * handed to the log (a trampoline installed in place of the log's done
 * callback runs first); an operation linked behind another (BE_F_LINK) names
 * it (`after`): the kernel starts it only once that one completed. The workload adds acknowledgements (a commit
 * answered URT_COMMIT_STORED, status 0) and returned checkpoints to the same
 * sequence, so "acknowledged before the stop" and "written before the stop"
 * are one order.
 *
 * From the trace, tests/property/prop_image.c rebuilds the directory at any
 * point under a crash model (page cache kept, unsynced writes cut, unsynced
 * writes dropped).
 *
 * Threading: the wrappers run on the runtime's workers and on the test's
 * thread; the trace is appended under one mutex. pt_start/pt_stop on the
 * test's thread only, with no runtime running.
 */
#ifndef URT_TESTS_PROP_TRACE_H
#define URT_TESTS_PROP_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum pt_kind {
    PT_WRITE = 1, /* off, len, data; dsync: RWF_DSYNC; direct: O_DIRECT file */
    PT_SYNC,      /* fsync / fdatasync of a file */
    PT_SFR,       /* sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER) of [off, off + len) */
    PT_TRUNC,     /* ftruncate to off */
    PT_CREATE,    /* openat with O_CREAT and/or O_TRUNC (trunc: the file is emptied) */
    PT_RENAME,    /* name -> name2 */
    PT_UNLINK,
    PT_ACK,       /* a commit answered STORED with status 0: id, count (records), marker */
    PT_CKPT,      /* urt_log_checkpoint(marker) returned res (>= 0: durable) */
};

#define PT_OPEN UINT64_MAX /* end of an operation still in flight */
#define PT_NAME 48

struct pt_op {
    uint8_t kind;
    bool dsync, direct, trunc;
    int32_t res;              /* bytes written, 0, or -errno; PT_CKPT: the call's result */
    uint64_t start, end;      /* sequence numbers (end == start for instant events) */
    uint64_t off, len;
    uint8_t *data;            /* PT_WRITE: the len bytes handed to the kernel */
    char name[PT_NAME], name2[PT_NAME];
    uint64_t id, marker;      /* PT_ACK, PT_CKPT */
    uint32_t count;           /* PT_ACK: the commit's records */
    size_t after;             /* ring I/O: the op this one is linked behind (IOSQE_IO_LINK: it starts
                                 when that one completed), or SIZE_MAX */
};

struct pt_trace {
    struct pt_op *ops;
    size_t n;
    uint64_t seq;             /* the next sequence number */
    bool overflow;            /* an operation could not be recorded (no memory, too many in flight) */
};

/* Starts recording the operations on the files of dir (which must exist).
 * The previous trace is discarded. */
void pt_start(const char *dir);
/* Stops recording; the trace stays readable (pt_get) until the next pt_start. */
void pt_stop(void);
const struct pt_trace *pt_get(void);
/* The next sequence number (the point "now" in the trace). */
uint64_t pt_now(void);
/* Workload events (any thread). */
void pt_ack(uint64_t id, uint32_t count, uint64_t marker);
void pt_ckpt(uint64_t marker, int res);
/* Frees the trace's memory (pt_start does it too). */
void pt_free(void);
/* Prints the operations that started in [from, to) (debugging). */
void pt_dump(FILE *out, uint64_t from, uint64_t to);

#endif
