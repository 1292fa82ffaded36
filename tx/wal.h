/*
 * tx/wal.h — the write-ahead log of a runtime (internal interface).
 *
 * runtime/ creates it (wal_open) before the workers start and installs its
 * worker hooks (wal_worker_start / wal_worker_stop / wal_before_suspend),
 * destroys it (wal_close) after they stopped. The format is in
 * wal_format.h, the commit path and its ordering contract in wal.c,
 * recovery in wal_recover.c.
 */
#ifndef URT_TX_WAL_H
#define URT_TX_WAL_H

#include <urt/log.h>

#include "sched/core/sched.h"

struct wal;

/* Locks and recovers dir (cuts what recovery cuts, replays nothing), then
 * creates this session's channel files. Creating thread, before the workers
 * start. Returns 0 and *out or -errno (the reason recorded with urt__error, base/error.h,
 * where one is known). */
int wal_open(struct sched *s, const struct urt_config *cfg, uint32_t n_workers, struct wal **out);
/* After the workers stopped: cancels commits still waiting (-ECANCELED),
 * closes the files, unlocks. NULL is a no-op. */
void wal_close(struct wal *wal);

void wal_worker_start(struct wal *wal, struct worker *w);
void wal_worker_stop(struct wal *wal, struct worker *w);
bool wal_before_suspend(struct wal *wal, struct worker *w);

int wal_commit(struct wal *wal, struct urt_commit *c);
int wal_set_on_durable(struct wal *wal, urt_durable_fn *fn, void *arg);
/* urt_log_checkpoint: files deleted (>= 0) or -errno (message recorded). Any thread. */
int wal_checkpoint(struct wal *wal, uint64_t marker);
void wal_read_stats(const struct wal *wal, struct urt_log_stats *out);

/* Test hook for the next log write (any channel): WAL_FAULT_SHORT submits
 * only half of it (the kernel writes less, the linked fdatasync runs);
 * WAL_FAULT_EIO reports -EIO at completion (the bytes may well be on disk);
 * WAL_FAULT_SHORT_CANCEL reports half written and the linked fdatasync
 * cancelled (-ECANCELED), exactly what a real short write does. */
#define WAL_FAULT_SHORT 1
#define WAL_FAULT_EIO 2
#define WAL_FAULT_SHORT_CANCEL 3
/* WAL_FAULT_EIO_ALWAYS: every write reports -EIO until another kind (or 0)
 * is injected: a device that died. */
#define WAL_FAULT_EIO_ALWAYS 4
/* WAL_FAULT_ENOSPC_ALWAYS: the same with -ENOSPC, writes of zeros over
 * written blocks included: a full disk where an overwrite takes space too
 * (copy-on-write). */
#define WAL_FAULT_ENOSPC_ALWAYS 5
#if URT_FAULT_INJECTION
void wal_inject_fault(struct wal *wal, int kind); /* only in builds with -Dfault_injection=true */
/* Test hook of the single_write probes (wal_file.c), read when the first
 * channel file is created: WAL_REFUSE_DIRECT makes its O_DIRECT open fail
 * with EINVAL, WAL_REFUSE_DSYNC its RWF_DSYNC write with EOPNOTSUPP, as a
 * file system without them would. */
#define WAL_REFUSE_DIRECT 1
#define WAL_REFUSE_DSYNC 2
extern _Atomic int wal_fault_refuse;
#endif

/* With transactions (tx/commit_hook.h present): the log's struct tx_log, to
 * be registered with tx_log_register() by runtime/. */
struct tx_log;
struct tx_log *wal_tx_log(struct wal *wal);

/* wal_recover.c: recovery on a directory already locked by the caller
 * (lockfd >= 0) or locking it itself (lockfd < 0). These three record the
 * reason of a failure with urt__error (base/error.h) where one is known. */
int wal_recover_locked(const char *dir, unsigned flags, const struct urt_log_recover_ops *ops, void *arg,
                       struct urt_log_recovery *out);
/* Opens and locks dir/LOCK (creating dir if create). Returns the fd or -errno. */
int wal_lock_dir(const char *dir, bool create);
/* 0 if dir exists and holds only urt log files, else -errno with a message. */
int wal_check_dir(const char *dir);

#endif
