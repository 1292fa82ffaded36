/*
 * runtime/log.c — public entry points of the write-ahead log (urt/log.h):
 * argument checks and the runtime's hooks into tx/wal.c. The log itself
 * (channels, epochs, group commit, recovery) lives in tx/.
 */
#include <errno.h>
#include <string.h>

#include <urt/log.h>

#include "base/args.h"
#include "runtime/runtime.h"
#include "tx/durability.h"
#include "tx/wal.h"
#include "tx/commit_hook.h"

static void hook_worker_start(void *ctx, struct worker *w)
{
    wal_worker_start(((struct urt_runtime *)ctx)->wal, w);
}

static void hook_worker_stop(void *ctx, struct worker *w)
{
    wal_worker_stop(((struct urt_runtime *)ctx)->wal, w);
}

static bool hook_before_suspend(void *ctx, struct worker *w)
{
    return wal_before_suspend(((struct urt_runtime *)ctx)->wal, w);
}

int runtime_log_open(struct urt_runtime *rt)
{
    if (!rt->cfg.log_dir)
        return 0;
    unsigned seq = urt__error_seq();
    int rc = wal_open(&rt->sched, &rt->cfg, rt->cfg.workers, &rt->wal);
    if (rc && urt__error_seq() == seq) /* no reason recorded on the way */
        return urt__error(rc, "log_dir %s: %s", rt->cfg.log_dir, strerror(-rc));
    if (rc)
        return rc;
    rt->sched.hooks.ctx = rt;
    rt->sched.hooks.worker_start = hook_worker_start;
    rt->sched.hooks.worker_stop = hook_worker_stop;
    rt->sched.hooks.before_suspend = hook_before_suspend;
    tx_log_register(rt, wal_tx_log(rt->wal)); /* urt_tx_commit goes through the log */
    return 0;
}

void runtime_log_close(struct urt_runtime *rt)
{
    if (rt->wal || rt->dur)
        tx_log_register(rt, NULL);
    wal_close(rt->wal);
    rt->wal = NULL;
    durability_destroy(rt->dur);
    rt->dur = NULL;
}

URT_API int urt_log_commit(urt_runtime *rt, struct urt_commit *c, uint64_t tx_id, const void *rec, uint32_t len,
                           enum urt_commit_response response, urt_log_commit_fn *cb, void *arg)
{
    if (!rt || !c || !cb || (!rec && len))
        return urt__error(-EINVAL, "urt_log_commit: NULL runtime, commit, callback or record");
    if ((unsigned)response > URT_COMMIT_STORED)
        return urt__error(-EINVAL, "urt_log_commit: response %u is not accepted, available or stored",
                          (unsigned)response);
    if (len > (16u << 20))
        return urt__error(-EINVAL, "urt_log_commit: record of %u bytes exceeds 16 MiB", len);
    if (!rt->wal && !rt->dur)
        return urt__error(-ENOTSUP, "urt_log_commit: the runtime has no log_dir and no durability source");
    memset(&c->priv, 0, sizeof(c->priv));
    c->priv.rec = rec;
    c->priv.len = len;
    c->priv.tx_id = tx_id;
    c->priv.response = (uint32_t)response;
    c->priv.cb = cb;
    c->priv.arg = arg;
    int rc = rt->wal ? wal_commit(rt->wal, c) : durability_commit(rt->dur, c);
    if (rc == -ERANGE)
        return urt__error(rc, "urt_log_commit: the durability source gave marker 0 (markers start at 1)");
    if (rc)
        return urt__error(rc, "urt_log_commit: %s", rc == -ESHUTDOWN ? "the runtime is shutting down" : strerror(-rc));
    return 0;
}

URT_API uint64_t urt_commit_marker(const struct urt_commit *c)
{
    return c ? c->priv.marker : 0;
}

URT_API int urt_log_on_durable(urt_runtime *rt, urt_durable_fn *fn, void *arg)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_log_on_durable: NULL runtime");
    if (rt->dur)
        return durability_on_durable(rt->dur, fn, arg);
    if (!rt->wal)
        return urt__error(-ENOTSUP, "urt_log_on_durable: the runtime has no log_dir and no durability source");
    return wal_set_on_durable(rt->wal, fn, arg);
}

URT_API int urt_log_stats(const urt_runtime *rt, struct urt_log_stats *out)
{
    if (!rt || !out)
        return urt__error(-EINVAL, "urt_log_stats: NULL argument");
    if (rt->dur) {
        durability_stats(rt->dur, out);
        return 0;
    }
    if (!rt->wal)
        return urt__error(-ENOTSUP, "urt_log_stats: the runtime has no log_dir and no durability source");
    wal_read_stats(rt->wal, out);
    return 0;
}

URT_API int urt_log_checkpoint(urt_runtime *rt, uint64_t marker)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_log_checkpoint: NULL runtime");
    if (!rt->wal)
        return urt__error(-ENOTSUP, "urt_log_checkpoint: the runtime has no log_dir");
    unsigned seq = urt__error_seq();
    int rc = wal_checkpoint(rt->wal, marker);
    if (rc < 0 && urt__error_seq() == seq) /* no reason recorded on the way */
        return urt__error(rc, "urt_log_checkpoint: %s", strerror(-rc));
    return rc;
}

URT_API int urt_durability_source(urt_runtime *rt, const struct urt_durability_source *src)
{
    if (!rt || !src || !src->assign)
        return urt__error(-EINVAL, "urt_durability_source: NULL %s", !rt ? "runtime" : !src ? "source" : "assign");
    if (rt->wal)
        return urt__error(-EEXIST, "urt_durability_source: the runtime has a log_dir (urt's log is its source)");
    pthread_mutex_lock(&rt->dur_lock);
    int rc = 0;
    if (rt->dur)
        rc = urt__error(-EBUSY, "urt_durability_source: a durability source is registered already");
    else if (!(rt->dur = durability_create(&rt->sched, src, rt->cfg.direct_commit_callback)))
        rc = urt__error(-ENOMEM, "urt_durability_source: out of memory");
    else
        tx_log_register(rt, durability_tx_log(rt->dur)); /* urt_tx_commit goes through it */
    pthread_mutex_unlock(&rt->dur_lock);
    return rc;
}

URT_API int urt_durability_notify(urt_runtime *rt, uint64_t marker)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_durability_notify: NULL runtime");
    struct durability *d = rt->dur; /* atomic: registered from another thread */
    if (!d)
        return urt__error(-ENOTSUP, "urt_durability_notify: no durability source is registered");
    durability_notify(d, marker);
    return 0;
}

URT_API int urt_log_recover(const char *dir, unsigned flags, const struct urt_log_recover_ops *ops, void *arg,
                            struct urt_log_recovery *out)
{
    if (!dir)
        return urt__error(-EINVAL, "urt_log_recover: dir is NULL");
    if (urt__check_flags("urt_log_recover", flags, URT_LOG_RECOVER_FLAGS_ALL))
        return -EINVAL;
    int lockfd = -1, rc;
    unsigned seq = urt__error_seq();
    if (flags & URT_LOG_RECOVER_DRY_RUN)
        rc = wal_check_dir(dir);
    else
        rc = lockfd = wal_lock_dir(dir, false);
    if (rc >= 0)
        rc = wal_recover_locked(dir, flags, ops, arg, out);
    if (lockfd >= 0)
        close(lockfd);
    if (rc < 0 && urt__error_seq() == seq) /* no reason recorded on the way */
        return urt__error(rc, "urt_log_recover: %s: %s", dir, strerror(-rc));
    return rc;
}
