/*
 * runtime/runtime.c — urt_runtime_create / urt_runtime_destroy.
 *
 * create = validate the configuration -> choose the backend (probe io_uring;
 * backend = auto falls back to the portable backend only where the ring is
 * unavailable: EPERM, ENOSYS, or no set-up the kernel accepts (EINVAL for
 * every candidate) — never on ENOMEM, EMFILE or another resource error) ->
 * open the log -> build the topology and place the workers -> start the
 * scheduler (each worker creates its backend context in its own thread) ->
 * the admission limit, the blocking pool, the watcher. Each phase either
 * succeeds or undoes the earlier ones.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/runtime.h>

#include "bpf/probes.h"
#include "runtime/runtime.h"
#include "sched/admission.h"
#include "sched/blocking.h"
#include "sched/watcher.h"

_Static_assert(offsetof(struct urt_runtime, sched) == 0, "sched/ casts urt_runtime * to struct sched *");

static int copy_config(struct urt_runtime *rt, const struct urt_config *cfg)
{
    if (cfg) {
        if (urt_config_validate(cfg, NULL, 0))
            return -EINVAL; /* message already recorded */
        rt->cfg = *cfg;
    } else {
        urt_config_init(&rt->cfg);
    }
    if (rt->cfg.topology) {
        rt->topology_copy = strdup(rt->cfg.topology);
        if (!rt->topology_copy)
            return urt__error(-ENOMEM, "runtime: out of memory");
        rt->cfg.topology = rt->topology_copy;
    }
    if (rt->cfg.log_dir) {
        rt->log_dir_copy = strdup(rt->cfg.log_dir);
        if (!rt->log_dir_copy)
            return urt__error(-ENOMEM, "runtime: out of memory");
        rt->cfg.log_dir = rt->log_dir_copy;
    }
    return 0;
}

/* kernel.io_uring_disabled (Linux 6.6), or -1 where there is none. */
static int uring_disabled_sysctl(void)
{
    FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "re");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* Why io_uring is unavailable (err from the probe), or NULL when err is
 * not that (a resource error: it stays an error). */
static const char *unavailable(int err, char *buf, size_t len)
{
    int sysctl = uring_disabled_sysctl();
    if (err == -EPERM && sysctl > 0)
        snprintf(buf, len, "io_uring_setup refused (EPERM, kernel.io_uring_disabled=%d)", sysctl);
    else if (err == -EPERM)
        snprintf(buf, len, "io_uring_setup refused (EPERM: a seccomp profile or kernel.io_uring_disabled)");
    else if (err == -ENOSYS)
        snprintf(buf, len, "io_uring not in this kernel (ENOSYS)");
    else if (err == -EINVAL)
        snprintf(buf, len, "no io_uring set-up this kernel accepts (EINVAL: below the probe's minimum)");
    else
        return NULL;
    return buf;
}

/* The portable backend's file pool: two threads per worker, 2..64. */
static unsigned portable_pool_threads(const struct urt_config *cfg)
{
    unsigned n = 2 * cfg->workers;
    return n < 2 ? 2 : n > 64 ? 64 : n;
}

static int choose_backend(struct urt_runtime *rt)
{
    const struct urt_config *c = &rt->cfg;
    if (c->backend == URT_BACKEND_PORTABLE) {
        be_probe_portable(c->ring_disable, portable_pool_threads(c), &rt->caps);
        snprintf(rt->caps.why, sizeof(rt->caps.why), "backend=portable in the configuration");
        return 0;
    }
    int err = be_probe(c->ring_disable, c->sqpoll, c->sqpoll_idle_ms, &rt->caps);
    if (!err) {
        snprintf(rt->caps.why, sizeof(rt->caps.why), "%s", c->backend == URT_BACKEND_IO_URING
                                                              ? "backend=io_uring in the configuration"
                                                              : "backend=auto: io_uring is available");
        return 0;
    }
    char why[120];
    if (c->backend == URT_BACKEND_AUTO && !c->sqpoll && unavailable(err, why, sizeof(why))) {
        be_probe_portable(c->ring_disable, portable_pool_threads(c), &rt->caps);
        snprintf(rt->caps.why, sizeof(rt->caps.why), "backend=auto: %s", why);
        return 0;
    }
    if (err == -ENOSYS)
        return urt__error(err, "io_uring: not available in this kernel (ENOSYS; backend=io_uring)");
    if (err == -EPERM)
        return urt__error(err, "io_uring: not permitted (EPERM; see sysctl kernel.io_uring_disabled; "
                               "backend=io_uring, backend=auto would run on the portable backend)");
    return urt__error(err, "io_uring: ring setup failed: %s", strerror(-err));
}

static int start_workers(struct urt_runtime *rt)
{
    int err = topology_build(&rt->cfg, &rt->topo);
    if (err == -EINVAL)
        return err; /* the message names the CPU */
    if (err)
        return urt__error(err, "topology: %s", strerror(-err));
    struct worker_placement *place = calloc(rt->cfg.workers, sizeof(*place));
    if (!place)
        return urt__error(-ENOMEM, "runtime: out of memory");
    topology_place(&rt->topo, &rt->cfg, place);
    int failed = -1;
    err = sched_start(&rt->sched, &rt->cfg, &rt->caps, place, &failed);
    free(place);
    if (err && failed >= 0)
        return urt__error(err, "worker %d: io_uring ring creation failed: %s", failed, strerror(-err));
    if (err)
        return urt__error(err, "runtime: starting workers failed: %s", strerror(-err));
    return 0;
}

/* The blocking pool (sched/blocking.c): one sub-pool per NUMA node of the
 * topology when the workers are bound to nodes or CPUs. */
static int start_blocking(struct urt_runtime *rt)
{
    uint32_t n = rt->topo.n_nodes ? rt->topo.n_nodes : 1;
    struct blocking_node_spec *nodes = calloc(n, sizeof(*nodes));
    if (!nodes)
        return urt__error(-ENOMEM, "runtime: out of memory");
    for (uint32_t i = 0; i < rt->topo.n_nodes; i++) {
        nodes[i].id = rt->topo.nodes[i].id;
        nodes[i].cpus = rt->topo.nodes[i].cpus;
    }
    int err = blocking_create(&rt->sched, rt->topo.n_nodes, nodes, rt->cfg.placement != URT_PLACEMENT_NONE);
    free(nodes);
    if (err == -ENOMEM)
        return urt__error(err, "runtime: out of memory for the blocking pool");
    if (err)
        return urt__error(err, "blocking pool: starting blocking_threads_min (%u) threads failed",
                          rt->cfg.blocking_threads_min);
    return 0;
}

/* Pending-task limit, blocking pool and watcher thread (sched/admission.c,
 * sched/blocking.c, sched/watcher.c); on failure the workers are stopped
 * again. */
static int start_limits_and_watcher(struct urt_runtime *rt)
{
    int err = admission_create(&rt->sched);
    if (err)
        urt__error(err, "runtime: out of memory");
    else if ((err = start_blocking(rt)))
        ; /* message recorded */
    else if ((err = watcher_start(&rt->sched)))
        urt__error(err, "watcher: starting its thread and ring failed: %s", strerror(-err));
    if (err) {
        sched_stop(&rt->sched, false);
        blocking_free(&rt->sched);
        admission_destroy(&rt->sched);
    }
    return err;
}

static void runtime_free(struct urt_runtime *rt)
{
    runtime_log_close(rt);
    pthread_mutex_destroy(&rt->dur_lock);
    topology_free(&rt->topo);
    free(rt->topology_copy);
    free(rt->log_dir_copy);
    free(rt);
}

URT_API int urt_runtime_create(const struct urt_config *cfg, urt_runtime **out)
{
    if (!out)
        return urt__error(-EINVAL, "urt_runtime_create: out is NULL");
    *out = NULL;
    struct urt_runtime *rt = aligned_alloc(64, (sizeof(*rt) + 63) & ~(size_t)63);
    if (!rt)
        return urt__error(-ENOMEM, "runtime: out of memory");
    memset(rt, 0, sizeof(*rt));
    pthread_mutex_init(&rt->dur_lock, NULL);
    int err = copy_config(rt, cfg);
    if (!err)
        err = choose_backend(rt);
    if (!err)
        rt->sched.caps = rt->caps; /* the log (opened next) reads which backend runs */
    if (!err)
        err = runtime_log_open(rt);
    if (!err)
        err = start_workers(rt);
    if (!err)
        err = start_limits_and_watcher(rt);
    if (err) {
        runtime_free(rt);
        return err;
    }
    if (rt->cfg.stats_timing)
        probe_stats_users_add(1); /* timestamps on (bpf/probes.h: the gate) */
    *out = rt;
    return 0;
}

URT_API int urt_runtime_destroy(urt_runtime *rt, enum urt_shutdown mode)
{
    if (!rt)
        return 0;
    if (mode != URT_SHUTDOWN_DRAIN && mode != URT_SHUTDOWN_CANCEL)
        return urt__error(-EINVAL, "urt_runtime_destroy: mode %d is not URT_SHUTDOWN_DRAIN or _CANCEL", (int)mode);
    if (sched_current(&rt->sched))
        return urt__error(-EDEADLK, "urt_runtime_destroy: called from one of the runtime's own workers");
    if (sched_service_thread(&rt->sched))
        return urt__error(-EDEADLK, "urt_runtime_destroy: called from the runtime's watcher thread");
    if (blocking_on_pool_thread(&rt->sched))
        return urt__error(-EDEADLK, "urt_runtime_destroy: called from one of the runtime's blocking pool threads");
    admission_shutdown(&rt->sched); /* blocked submitters return -ESHUTDOWN */
    blocking_close(&rt->sched);     /* so do those waiting for room in the blocking pool's queue */
    watcher_close(&rt->sched);      /* watched tasks get their cancel callback (joined in sched_stop) */
    int cancelled = sched_stop(&rt->sched, mode == URT_SHUTDOWN_DRAIN);
    watcher_free(&rt->sched);
    blocking_free(&rt->sched);
    admission_destroy(&rt->sched);
    if (rt->cfg.stats_timing)
        probe_stats_users_add(-1);
    runtime_free(rt);
    return cancelled;
}

URT_API const struct urt_config *urt_runtime_config(const urt_runtime *rt)
{
    return rt ? &rt->cfg : NULL;
}

URT_API void urt_runtime_features(const urt_runtime *rt, struct urt_features *f)
{
    if (!f)
        return;
    memset(f, 0, sizeof(*f));
    if (!rt)
        return;
    be_features(&rt->caps, f);
    f->numa_nodes = rt->topo.n_nodes;
}

URT_API int urt_runtime_backend(const urt_runtime *rt, const char **why)
{
    if (!rt)
        return urt__error(-EINVAL, "urt_runtime_backend: rt is NULL");
    if (why)
        *why = rt->caps.why;
    return be_impl_of(&rt->caps) == BE_IMPL_PORTABLE ? URT_BACKEND_PORTABLE : URT_BACKEND_IO_URING;
}

static void describe_io(uint32_t io, char *buf, size_t len)
{
    static const char *const names[] = {"multishot_accept", "multishot_recv", "bufring", "send_zc",
                                        "fixed_accept", "link_timeout"};
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((io & (1u << i)) && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "|" : "", names[i]);
    if (!at)
        snprintf(buf, len, "none");
}

/* backend sits in what was padding after the bools: the struct, and
 * struct urt_stats around it, keep the size and offsets they had without it. */
_Static_assert(offsetof(struct urt_features, backend) < offsetof(struct urt_features, numa_nodes) &&
                   offsetof(struct urt_features, numa_nodes) == 16 && sizeof(struct urt_features) == 24,
               "struct urt_features keeps its layout");

URT_API int urt_features_describe(const struct urt_features *f, char *buf, size_t len)
{
    if (!f)
        return urt__error(-EINVAL, "urt_features_describe: f is NULL");
    if (!buf && len)
        return urt__error(-EINVAL, "urt_features_describe: buf is NULL and len is %zu", len);
    char setup[128], io[128];
    describe_io(f->io_features, io, sizeof(io));
    /* The portable backend has no ring: none of io_uring's fields apply. */
    if (f->backend == URT_BACKEND_PORTABLE)
        return snprintf(buf, len, "backend=portable wait=epoll wake=eventfd files=thread-pool numa_nodes=%u io=%s",
                        f->numa_nodes, io);
    be_describe_setup(f->setup_flags, setup, sizeof(setup));
    return snprintf(buf, len, "%ssetup=%s ringfd=%s wake-from-foreign=%s ext_arg=%s numa_nodes=%u io=%s",
                    f->backend == URT_BACKEND_IO_URING ? "backend=io_uring " : "", setup,
                    f->registered_ring_fd ? "registered" : "plain", f->ringless_msg ? "ringless" : "per-thread-ring",
                    f->ext_arg ? "yes" : "no", f->numa_nodes, io);
}
