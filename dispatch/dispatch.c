/*
 * dispatch/dispatch.c — the public entry points of urt/dispatch.h that are
 * not a run's (SPEC C21): options, create / handle / start / stop / destroy,
 * enqueue and wake, the published metrics and partition map, the watchdog
 * callback (apoptosis), the log.
 *
 * Lifecycle (urt/dispatch.h rules 1-7): create builds everything (slots,
 * connections with their lanes, the control state) and applies the
 * migrations over a blocking connection of its own; start opens the
 * connections (lane tasks) and installs the watchdog callback; stop asks the
 * control lane to stop (no scan, queue dropped), waits for the running slots
 * to come back, then closes every connection and waits for their sockets to
 * close; destroy frees the lanes and the memory.
 *
 * Memory-ordering contract: started / stopping / stopped are flags of the
 * calling threads (acq_rel exchanges make start and stop happen once);
 * stop's waits load ctr.running and ctl_stopped with acquire (pairing with
 * the control lane's release stores) and each connection's `closed` with
 * acquire (dispatch/conn.h). The published copies are read under pub_lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urt/runtime.h>
#include <urt/task.h>

#include "base/args.h"
#include "base/error.h"
#include "base/waitcount.h"
#include "dispatch/dispatch_int.h"

#define MS 1000000ull
#define S 1000000000ull

/* ---- the log ------------------------------------------------------------------ */

void dispatch_log(struct urt_dispatch *d, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (d->opt.log)
        d->opt.log(line, d->opt.log_arg);
    else
        fprintf(stderr, "urt dispatch: %s\n", line);
}

struct dconn *dispatch_pick_conn(struct urt_dispatch *d)
{
    uint32_t i = atomic_fetch_add_explicit(&d->conn_rr, 1, memory_order_relaxed);
    return &d->conns[i % d->n_conns];
}

/* ---- options ------------------------------------------------------------------- */

URT_API void urt_dispatch_options_init(struct urt_dispatch_options *opt)
{
    if (!opt)
        return;
    memset(opt, 0, sizeof(*opt));
    opt->conninfo = "";
    opt->pool = 16;
    opt->queue_ratio = 4;
    opt->connections = 2;
    opt->pipeline = 16;
    opt->metrics_every = 200;
    opt->lease_ns = 120 * S;
    opt->run_budget_ns = 0; /* lease / 4 */
    opt->backoff_base_ns = S;
    opt->backoff_max_ns = 600 * S;
    opt->sleep_min_ns = 200 * MS;
    opt->sleep_max_ns = S;
    opt->heartbeat_ns = S;
    opt->old_strand_delay_ns = 5 * S;
    opt->old_scan_interval_ns = 5 * S;
    opt->reconnect_min_ns = 50 * MS;
    opt->reconnect_max_ns = 5 * S;
    opt->channel = "urt_dispatch";
}

static int env_u32(const char *name, uint32_t lo, uint32_t hi, uint32_t *out)
{
    const char *v = getenv(name);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (!v[0] || *end || errno || v[0] == '-' || x < lo || x > hi)
        return urt__error(-EINVAL, "urt_dispatch_options_from_env: %s=\"%.32s\" is not a number %u..%u", name, v,
                          lo, hi);
    *out = (uint32_t)x;
    return 1;
}

URT_API int urt_dispatch_options_from_env(struct urt_dispatch_options *opt)
{
    if (!opt)
        return urt__error(-EINVAL, "urt_dispatch_options_from_env: opt is NULL");
    int n = 0, r;
    if ((r = env_u32("URT_DISPATCH_PARTITION", 0, PARTITION_MAX, &opt->partition)) < 0)
        return r;
    n += r;
    if ((r = env_u32("URT_DISPATCH_POOL", 1, 4096, &opt->pool)) < 0)
        return r;
    n += r;
    if ((r = env_u32("URT_DISPATCH_CONNECTIONS", 1, 256, &opt->connections)) < 0)
        return r;
    return n + r;
}

struct range {
    const char *name;
    size_t off;
    bool wide; /* uint64_t, else uint32_t */
    uint64_t lo, hi;
};

#define R32(f, l, h) {#f, offsetof(struct urt_dispatch_options, f), false, (l), (h)}
#define R64(f, l, h) {#f, offsetof(struct urt_dispatch_options, f), true, (l), (h)}
static const struct range ranges[] = {
    R32(partition, 0, PARTITION_MAX),
    R32(pool, 1, 4096),
    R32(queue_ratio, 1, 64),
    R32(connections, 1, 256),
    R32(pipeline, 1, 256),
    R32(metrics_every, 10, 1000000),
    R64(lease_ns, 10 * MS, 86400 * S),
    R64(run_budget_ns, 0, 86400 * S),
    R64(backoff_base_ns, 1000, 86400 * S),
    R64(backoff_max_ns, 1000, 7 * 86400 * S),
    R64(sleep_min_ns, 100000, 3600 * S),
    R64(sleep_max_ns, 100000, 3600 * S),
    R64(heartbeat_ns, MS, 3600 * S),
    R64(old_strand_delay_ns, 0, 86400 * S),
    R64(old_scan_interval_ns, MS, 86400 * S),
    R64(reconnect_min_ns, MS, 3600 * S),
    R64(reconnect_max_ns, MS, 3600 * S),
};

static bool name_ok(const char *s, size_t max, const char *extra)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || strchr(extra, s[i])))
            return false;
    return true;
}

bool dispatch_kind_ok(const char *s)
{
    return name_ok(s, DISPATCH_KIND_MAX, "ABCDEFGHIJKLMNOPQRSTUVWXYZ.:-");
}

static int check_options(const struct urt_dispatch_options *o)
{
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        const struct range *r = &ranges[i];
        uint64_t v = r->wide ? *(const uint64_t *)((const char *)o + r->off)
                             : *(const uint32_t *)((const char *)o + r->off);
        if (v < r->lo || v > r->hi)
            return urt__error(-EINVAL, "urt_dispatch_create: %s = %" PRIu64 " is out of range (%" PRIu64
                                       "..%" PRIu64 ")", r->name, v, r->lo, r->hi);
    }
    if (!o->conninfo)
        return urt__error(-EINVAL, "urt_dispatch_create: conninfo is NULL");
    if (!name_ok(o->channel, 63, "") || (o->channel[0] >= '0' && o->channel[0] <= '9'))
        return urt__error(-EINVAL, "urt_dispatch_create: channel \"%.64s\" is not a plain identifier "
                                   "([a-z_][a-z0-9_]*, at most 63)", o->channel ? o->channel : "(null)");
    if (urt__check_flags("urt_dispatch_create", o->flags, URT_DISPATCH_FLAGS_ALL))
        return -EINVAL;
    if (URT_CHECK_RESERVED("urt_dispatch_create", "opt", o))
        return -EINVAL;
    if (o->sleep_min_ns > o->sleep_max_ns || o->reconnect_min_ns > o->reconnect_max_ns ||
        o->backoff_base_ns > o->backoff_max_ns)
        return urt__error(-EINVAL, "urt_dispatch_create: %s", o->sleep_min_ns > o->sleep_max_ns ? "sleep_min_ns > sleep_max_ns"
                                   : o->reconnect_min_ns > o->reconnect_max_ns ? "reconnect_min_ns > reconnect_max_ns"
                                                                               : "backoff_base_ns > backoff_max_ns");
    if (o->run_budget_ns >= o->lease_ns)
        return urt__error(-EINVAL, "urt_dispatch_create: run_budget_ns %" PRIu64 " is not below lease_ns %" PRIu64,
                          o->run_budget_ns, o->lease_ns);
    return 0;
}

/* The apoptosis argument (urt/dispatch.h): the watchdog reports a blocked
 * run within 1.5 x its limit; the lease must outlast that. */
static int check_watchdog(urt_runtime *rt, const struct urt_dispatch_options *o)
{
    const struct urt_config *cfg = urt_runtime_config(rt);
    uint64_t limit = cfg->task_runtime_limit_us * 1000;
    if (limit == 0)
        return urt__error(-EINVAL, "urt_dispatch_create: the runtime has no watchdog (task_runtime_limit_us = 0); "
                                   "the dispatcher's apoptosis needs it");
    if (o->lease_ns < 2 * limit)
        return urt__error(-EINVAL, "urt_dispatch_create: lease_ns %" PRIu64 " is below twice the watchdog limit "
                                   "(task_runtime_limit_us %" PRIu64 ")", o->lease_ns, cfg->task_runtime_limit_us);
    return 0;
}

/* ---- create ----------------------------------------------------------------------- */

static void free_dispatch(struct urt_dispatch *d)
{
    if (d->conns)
        for (uint32_t i = 0; i < d->n_conns; i++)
            dconn_fini(&d->conns[i]);
    control_fini(d);
    run_slots_fini(d);
    pthread_mutex_destroy(&d->pub_lock);
    free(d->conns);
    free(d->kinds_text);
    free(d->conninfo);
    free(d->channel);
    free(d);
}

static int build(struct urt_dispatch *d)
{
    snprintf(d->lease_text, sizeof(d->lease_text), "%" PRIu64, d->opt.lease_ns / 1000);
    snprintf(d->backoff_base_text, sizeof(d->backoff_base_text), "%" PRIu64, d->opt.backoff_base_ns / 1000);
    snprintf(d->backoff_max_text, sizeof(d->backoff_max_text), "%" PRIu64, d->opt.backoff_max_ns / 1000);
    d->conninfo = strdup(d->opt.conninfo);
    d->channel = strdup(d->opt.channel);
    d->n_slots = d->opt.pool;
    d->n_conns = d->opt.connections;
    d->conns = calloc(d->n_conns, sizeof(*d->conns));
    if (!d->conninfo || !d->channel || !d->conns)
        return -ENOMEM;
    int err = run_slots_init(d);
    if (err < 0)
        return err;
    for (uint32_t i = 0; i < d->n_conns; i++)
        if ((err = dconn_init(&d->conns[i], d, i + 1, NULL, d)) < 0)
            return err;
    return control_init(d);
}

URT_API int urt_dispatch_create(urt_runtime *rt, const struct urt_dispatch_options *opt, urt_dispatch **out)
{
    if (!rt || !opt || !out)
        return urt__error(-EINVAL, "urt_dispatch_create: %s is NULL", !rt ? "rt" : !opt ? "opt" : "out");
    if (urt_current_worker(rt) >= 0)
        return urt__error(-EDEADLK, "urt_dispatch_create: called on a worker (it waits for the database)");
    int err = check_options(opt);
    if (err < 0 || (err = check_watchdog(rt, opt)) < 0)
        return err;
    if (!(opt->flags & URT_DISPATCH_NO_MIGRATE) && (err = urt_dispatch_migrate(opt->conninfo)) < 0)
        return err; /* urt_dispatch_migrate recorded the message */
    struct urt_dispatch *d = calloc(1, sizeof(*d));
    if (!d)
        return urt__error(-ENOMEM, "urt_dispatch_create: no memory");
    d->rt = rt;
    d->opt = *opt;
    if (!d->opt.run_budget_ns)
        d->opt.run_budget_ns = d->opt.lease_ns / 4;
    pthread_mutex_init(&d->pub_lock, NULL);
    d->pub_metrics.pool = opt->pool;
    d->pub_metrics.queue_capacity = opt->pool * opt->queue_ratio;
    if ((err = build(d)) < 0) {
        free_dispatch(d);
        return urt__error(err, "urt_dispatch_create: %s", err == -ENOMEM ? "no memory" : strerror(-err));
    }
    d->opt.conninfo = d->conninfo; /* the caller's strings may go */
    d->opt.channel = d->channel;
    *out = d;
    return 0;
}

URT_API int urt_dispatch_handle(urt_dispatch *d, const char *kind, urt_dispatch_handler_fn *fn, void *ctx)
{
    if (!d || !kind || !fn)
        return urt__error(-EINVAL, "urt_dispatch_handle: %s is NULL", !d ? "d" : !kind ? "kind" : "fn");
    if (!dispatch_kind_ok(kind))
        return urt__error(-EINVAL, "urt_dispatch_handle: kind \"%.64s\" is not 1..63 of [A-Za-z0-9_.:-]", kind);
    if (atomic_load_explicit(&d->started, memory_order_acquire))
        return urt__error(-EBUSY, "urt_dispatch_handle: the dispatcher is started");
    for (uint32_t i = 0; i < d->n_handlers; i++)
        if (strcmp(d->handlers[i].kind, kind) == 0)
            return urt__error(-EEXIST, "urt_dispatch_handle: kind \"%s\" has a handler", kind);
    if (d->n_handlers == DISPATCH_MAX_KINDS)
        return urt__error(-ENOSPC, "urt_dispatch_handle: %d kinds are registered already", DISPATCH_MAX_KINDS);
    struct handler *h = &d->handlers[d->n_handlers++];
    snprintf(h->kind, sizeof(h->kind), "%s", kind);
    h->fn = fn;
    h->ctx = ctx;
    return 0;
}

/* ---- start, stop, destroy ---------------------------------------------------------- */

static void on_watchdog(void *ctx, const struct urt_watchdog_report *r)
{
    struct urt_dispatch *d = ctx;
    /* A blocking pool thread's function (urt/blocking.h) blocks no worker:
     * never a reason for apoptosis. */
    struct urt_dispatch_run *run = r->pool_thread >= 0 ? NULL : run_of_job(d, r->job);
    if (!run) {
        if (d->opt.watchdog)
            d->opt.watchdog(d->opt.watchdog_arg, r);
        else if (r->pool_thread >= 0)
            fprintf(stderr, "urt watchdog: offload %p (job %p) on blocking pool thread urt-blk-%d has run for at "
                            "least %.3f ms (limit %.3f ms)\n",
                    (void *)r->blocking, (void *)r->job, r->pool_thread, r->elapsed_ns / 1e6, r->limit_ns / 1e6);
        else
            fprintf(stderr, "urt watchdog: task %p (job %p) on worker %u has run for at least %.3f ms (limit %.3f ms)\n",
                    (void *)r->task, (void *)r->job, r->worker, r->elapsed_ns / 1e6, r->limit_ns / 1e6);
        return;
    }
    dispatch_log(d, "apoptosis: the run of strand %s (%s, try %u) has blocked worker %u for at least %.3f s "
                    "(watchdog limit %.3f s): state dump, then abort",
                 run->id, d->handlers[run->handler].kind, run->strand.try_count, r->worker, r->elapsed_ns / 1e9,
                 r->limit_ns / 1e9);
    urt_dump_state(d->rt, STDERR_FILENO);
    abort();
}

static char *kinds_array(struct urt_dispatch *d)
{
    size_t n = 3;
    for (uint32_t i = 0; i < d->n_handlers; i++)
        n += strlen(d->handlers[i].kind) + 1;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    *p++ = '{';
    for (uint32_t i = 0; i < d->n_handlers; i++)
        p += sprintf(p, "%s%s", i ? "," : "", d->handlers[i].kind);
    strcpy(p, "}");
    return s;
}

URT_API int urt_dispatch_start(urt_dispatch *d)
{
    if (!d)
        return urt__error(-EINVAL, "urt_dispatch_start: d is NULL");
    if (atomic_exchange_explicit(&d->started, true, memory_order_acq_rel))
        return urt__error(-EALREADY, "urt_dispatch_start: started before");
    d->kinds_text = kinds_array(d);
    if (!d->kinds_text) {
        atomic_store_explicit(&d->started, false, memory_order_release);
        return urt__error(-ENOMEM, "urt_dispatch_start: no memory");
    }
    urt_watchdog_set_callback(d->rt, on_watchdog, d);
    if (d->opt.partition)
        dispatch_log(d, "partition %u of %u (assumed until the others are heard), ids %s .. %s", d->opt.partition,
                     d->opt.partition, d->ctl.lo, d->ctl.hi);
    int err = control_start(d);
    for (uint32_t i = 0; err == 0 && d->n_handlers && i < d->n_conns; i++)
        err = dconn_start(&d->conns[i]);
    if (err < 0)
        return urt__error(err, "urt_dispatch_start: the connections' lanes refused their start (%s)", strerror(-err));
    return 0;
}

/* The stop's conditions are several words set on the lanes' workers, which
 * wake nobody: the one poll for such waits (base/waitcount.h). */
static bool wait_until(bool (*cond)(void *), struct urt_dispatch *d, uint64_t deadline)
{
    return urt_wait_poll(cond, d, deadline) == 0;
}

static bool runs_back(void *arg)
{
    struct urt_dispatch *d = arg;
    return atomic_load_explicit(&d->ctl_stopped, memory_order_acquire) &&
           atomic_load_explicit(&d->ctr.running, memory_order_acquire) == 0; /* pairs with finish_task */
}

static bool conns_closed(void *arg)
{
    struct urt_dispatch *d = arg;
    if (!atomic_load_explicit(&d->ctl.conn.closed, memory_order_acquire))
        return false;
    for (uint32_t i = 0; d->n_handlers && i < d->n_conns; i++)
        if (!atomic_load_explicit(&d->conns[i].closed, memory_order_acquire))
            return false;
    return true;
}

URT_API int urt_dispatch_stop(urt_dispatch *d, uint64_t timeout_ns)
{
    if (!d)
        return urt__error(-EINVAL, "urt_dispatch_stop: d is NULL");
    if (!atomic_load_explicit(&d->started, memory_order_acquire))
        return urt__error(-EINVAL, "urt_dispatch_stop: the dispatcher was never started");
    if (urt_current_worker(d->rt) >= 0)
        return urt__error(-EDEADLK, "urt_dispatch_stop: called on a worker (it waits)");
    if (atomic_load_explicit(&d->stopped, memory_order_acquire))
        return 0;
    uint64_t now = urt_now_ns();
    uint64_t deadline = timeout_ns == URT_WAIT_FOREVER || timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
    if (!atomic_exchange_explicit(&d->stopping, true, memory_order_acq_rel) && control_stop(d) < 0)
        atomic_store_explicit(&d->ctl_stopped, true, memory_order_release); /* lane gone: nothing runs */
    if (!wait_until(runs_back, d, deadline))
        return urt__error(-ETIMEDOUT, "urt_dispatch_stop: %u runs still going",
                          atomic_load_explicit(&d->ctr.running, memory_order_relaxed));
    if (!d->closing) {
        d->closing = true;
        dconn_close(&d->ctl.conn);
        for (uint32_t i = 0; d->n_handlers && i < d->n_conns; i++)
            dconn_close(&d->conns[i]);
    }
    if (!wait_until(conns_closed, d, deadline))
        return urt__error(-ETIMEDOUT, "urt_dispatch_stop: connections still closing");
    atomic_store_explicit(&d->stopped, true, memory_order_release);
    return 0;
}

URT_API void urt_dispatch_destroy(urt_dispatch *d)
{
    if (!d)
        return;
    if (atomic_load_explicit(&d->started, memory_order_acquire)) {
        urt_dispatch_stop(d, URT_WAIT_FOREVER);
        urt_watchdog_set_callback(d->rt, NULL, NULL);
    }
    free_dispatch(d);
}

/* ---- what readers see ---------------------------------------------------------------- */

#define LIVE(f) out->f = atomic_load_explicit(&d->ctr.f, memory_order_relaxed)

URT_API int urt_dispatch_metrics(const urt_dispatch *cd, struct urt_dispatch_metrics *out)
{
    if (!cd || !out)
        return urt__error(-EINVAL, "urt_dispatch_metrics: %s is NULL", !cd ? "d" : "out");
    struct urt_dispatch *d = (struct urt_dispatch *)cd; /* the lock is not part of the value */
    pthread_mutex_lock(&d->pub_lock);
    *out = d->pub_metrics;
    pthread_mutex_unlock(&d->pub_lock);
    LIVE(scans);
    LIVE(old_scans);
    LIVE(scanned);
    LIVE(runs);
    LIVE(leases_missed);
    LIVE(done);
    LIVE(naps);
    LIVE(failed);
    LIVE(budget_exceeded);
    LIVE(leases_violated);
    LIVE(releases_uncertain);
    LIVE(reconnects);
    LIVE(notifications);
    LIVE(bad_notifications);
    LIVE(repartitions);
    LIVE(dead);
    LIVE(wakeups);
    LIVE(queued);
    LIVE(running);
    return 0;
}

URT_API int urt_dispatch_partitions(const urt_dispatch *cd, struct urt_dispatch_partitions *out)
{
    if (!cd || !out)
        return urt__error(-EINVAL, "urt_dispatch_partitions: %s is NULL", !cd ? "d" : "out");
    struct urt_dispatch *d = (struct urt_dispatch *)cd;
    memset(out, 0, sizeof(*out));
    uint64_t now = urt_now_ns(), stale = 4 * d->opt.heartbeat_ns;
    pthread_mutex_lock(&d->pub_lock);
    out->partition = d->pub_pmap.self;
    out->partitions = d->pub_pmap.self ? d->pub_pmap.n : 0;
    memcpy(out->first_id, d->pub_lo, UUID_TEXT);
    memcpy(out->last_id, d->pub_hi, UUID_TEXT);
    for (uint32_t p = 1; p <= PARTITION_MAX; p++) {
        uint64_t seen = d->pub_pmap.seen[p], age = seen > now ? 0 : now - seen; /* seen on another thread */
        if (seen && age <= stale) {
            out->live[out->n_live] = p;
            out->age_ns[out->n_live++] = age;
        }
    }
    pthread_mutex_unlock(&d->pub_lock);
    return 0;
}

URT_API int urt_dispatch_partition_range(uint32_t partition, uint32_t partitions, char *first_id, char *last_id)
{
    if (!first_id || !last_id)
        return urt__error(-EINVAL, "urt_dispatch_partition_range: %s is NULL", !first_id ? "first_id" : "last_id");
    if (partition < 1 || partitions > PARTITION_MAX || partition > partitions)
        return urt__error(-EINVAL, "urt_dispatch_partition_range: partition %u of %u is out of range "
                                   "(1 <= partition <= partitions <= %d)", partition, partitions, PARTITION_MAX);
    partition_range(partition, partitions, first_id, last_id);
    return 0;
}
