/*
 * dispatch/control.c — the control lane: scans, the bounded queue, run
 * slots, heartbeats and the partition map, the metrics window (SPEC C21;
 * Ubicloud's dispatcher's scan thread, repartition thread and metrics thread in one lane).
 *
 * Everything here runs as a task of the control connection's lane (its
 * requests' callbacks, its timer's continuation, the tasks that bring run
 * slots back), so the state in struct control needs no lock (ownership:
 * dispatch/dispatch_int.h). Each connect first queues the scans' session
 * setting (dispatch.sql, statement scan_plan: no sorts, so a scan walks the
 * due index whatever the table's statistics), then LISTENs on the channel:
 * enqueue wake-ups ('+kind': a kind it handles makes the next scan due at
 * once, and a scan in flight is followed by another whatever it finds) and,
 * when partitioned, the heartbeats. The loop, driven by tick():
 *
 *   heartbeat  partitioned: every 2 x heartbeat_ns NOTIFY own number, then
 *              forget partitions silent for 4 x heartbeat_ns; a count that
 *              grew (a notification) or shrank (here) repartitions;
 *   scan       when the queue is at most half full and the next scan is due:
 *              LIMIT the free room, skipping queued and running strands; a
 *              scan that found strands makes the next one due at once (as
 *              soon as the queue drains to half), an empty one after the
 *              adaptive idle sleep (dispatch_sleep_ns);
 *   old scan   partitioned: every old_scan_interval_ns (at once again if it
 *              found some) the takeover scan over every partition;
 *   runs       start_runs() hands queued strands to free slots (run_take);
 *              a slot coming back (control_run_finished, run.c's handoff) adds its sample to
 *              the window, frees the slot, starts more and ticks.
 * The timer (one urt_io sleep on this lane) is armed for the earliest due
 * event; an earlier need cancels and re-arms it.
 *
 * Memory-ordering contract: nothing here is shared but the counters (relaxed
 * atomics, dispatch_int.h) and the published copies under d->pub_lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch_int.h"

#define CTR_ADD(d, f, n) atomic_fetch_add_explicit(&(d)->ctr.f, (n), memory_order_relaxed)

static struct urt_dispatch *ctl_d(struct control *ctl)
{
    return (struct urt_dispatch *)((char *)ctl - offsetof(struct urt_dispatch, ctl));
}

static void tick(struct control *ctl);

/* ---- the partition map ---------------------------------------------------- */

void control_publish_partitions(struct urt_dispatch *d)
{
    pthread_mutex_lock(&d->pub_lock);
    d->pub_pmap = d->ctl.pmap;
    memcpy(d->pub_lo, d->ctl.lo, UUID_TEXT);
    memcpy(d->pub_hi, d->ctl.hi, UUID_TEXT);
    pthread_mutex_unlock(&d->pub_lock);
}

static void repartition(struct control *ctl)
{
    struct urt_dispatch *d = ctl_d(ctl);
    partition_range(ctl->pmap.self, ctl->pmap.n, ctl->lo, ctl->hi);
    CTR_ADD(d, repartitions, 1);
    dispatch_log(d, "repartitioned: partition %u of %u, ids %s .. %s", ctl->pmap.self, ctl->pmap.n, ctl->lo,
                 ctl->hi);
    control_publish_partitions(d);
}

static int handler_index(struct urt_dispatch *d, const char *kind);

/* "+kind": strands of kind were enqueued (dispatch.sql, enqueue and
 * enqueue_items, at their commit). One of ours: scan now — or, when a scan
 * is in flight (it may have read the table before that commit), again as
 * soon as it answers, whatever it found. */
static void enqueued_wake(struct control *ctl, const char *kind)
{
    struct urt_dispatch *d = ctl_d(ctl);
    if (handler_index(d, kind) < 0)
        return;
    CTR_ADD(d, wakeups, 1);
    ctl->next_scan = 0;
    if (ctl->scanning)
        ctl->rescan = true;
    tick(ctl);
}

static void on_notify(struct dconn *c, const char *channel, const char *payload)
{
    struct control *ctl = c->owner;
    struct urt_dispatch *d = ctl_d(ctl);
    if (strcmp(channel, d->channel) != 0)
        return;
    if (payload[0] == '+') {
        enqueued_wake(ctl, payload + 1);
        return;
    }
    if (!ctl->pmap.self)
        return; /* unpartitioned: the others' heartbeats say nothing to it */
    uint32_t p = partition_parse(payload);
    if (p == 0) {
        CTR_ADD(d, bad_notifications, 1);
        dispatch_log(d, "ignored a notification on %s: payload \"%.40s\" is not a partition number 1..256",
                     channel, payload);
        return;
    }
    CTR_ADD(d, notifications, 1);
    if (partition_heard(&ctl->pmap, p, urt_now_ns()))
        repartition(ctl);
    tick(ctl); /* a grown count changes nothing due; a cheap re-check */
}

static void notify_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    (void)res;
    (void)msg;
    struct control *ctl = r->arg;
    ctl->notify_busy = false;
    (void)err; /* a lost heartbeat is sent again at the next one */
}

static void send_listen(struct control *ctl);

static void heartbeat(struct control *ctl, uint64_t now)
{
    struct urt_dispatch *d = ctl_d(ctl);
    ctl->next_hb = now + 2 * d->opt.heartbeat_ns;
    send_listen(ctl);
    if (!ctl->notify_busy) {
        struct dreq *q = &ctl->notify_req;
        memset(q, 0, sizeof(*q));
        q->kind = DREQ_PREPARED;
        q->stmt = DSQL_NOTIFY;
        q->nparams = 2;
        ctl->notify_params[0] = d->channel;
        ctl->notify_params[1] = ctl->self_text;
        q->params = ctl->notify_params;
        q->fn = notify_done;
        q->arg = ctl;
        ctl->notify_busy = dconn_submit(&ctl->conn, q) == 0;
    }
    if (partition_check(&ctl->pmap, now, 4 * d->opt.heartbeat_ns))
        repartition(ctl);
    control_publish_partitions(d);
}

/* ---- scans and the queue ---------------------------------------------------- */

static int handler_index(struct urt_dispatch *d, const char *kind)
{
    for (uint32_t i = 0; i < d->n_handlers; i++)
        if (strcmp(d->handlers[i].kind, kind) == 0)
            return (int)i;
    return -1;
}

/* "{uuid,...}" of every queued and running strand (the scans skip them). */
static void build_skip(struct control *ctl)
{
    struct urt_dispatch *d = ctl_d(ctl);
    char *p = ctl->skip;
    *p++ = '{';
    for (uint32_t i = 0; i < ctl->qlen; i++) {
        memcpy(p, ctl->q[(ctl->qhead + i) % ctl->qcap].id, 36);
        p += 36;
        *p++ = ',';
    }
    for (uint32_t i = 0; i < d->n_slots; i++) {
        if (!ctl->busy[i])
            continue;
        memcpy(p, d->slots[i].id, 36);
        p += 36;
        *p++ = ',';
    }
    if (p[-1] == ',')
        p--;
    *p++ = '}';
    *p = '\0';
}

static void scan_done(struct dreq *r, PGresult *res, int err, const char *msg);

static void send_scan(struct control *ctl, bool old, uint32_t room)
{
    struct urt_dispatch *d = ctl_d(ctl);
    build_skip(ctl);
    snprintf(ctl->limit, sizeof(ctl->limit), "%u", room);
    struct dreq *q = &ctl->scan_req;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_PREPARED;
    if (old) {
        snprintf(ctl->old_delay, sizeof(ctl->old_delay), "%" PRIu64,
                 dispatch_old_delay_ns(d->opt.old_strand_delay_ns, ctl->current_delay_ns) / 1000);
        q->stmt = DSQL_SCAN_OLD;
        q->nparams = 4;
        ctl->scan_params[0] = d->kinds_text;
        ctl->scan_params[1] = ctl->skip;
        ctl->scan_params[2] = ctl->limit;
        ctl->scan_params[3] = ctl->old_delay;
    } else {
        q->stmt = DSQL_SCAN;
        q->nparams = 5;
        ctl->scan_params[0] = ctl->lo;
        ctl->scan_params[1] = ctl->hi;
        ctl->scan_params[2] = d->kinds_text;
        ctl->scan_params[3] = ctl->skip;
        ctl->scan_params[4] = ctl->limit;
    }
    q->params = ctl->scan_params;
    q->fn = scan_done;
    q->arg = ctl;
    q->resend = true; /* reads, and row locks for its own duration only */
    ctl->scanning = dconn_submit(&ctl->conn, q) == 0;
}

static void queue_rows(struct control *ctl, PGresult *res, bool old, uint64_t now)
{
    struct urt_dispatch *d = ctl_d(ctl);
    int n = PQntuples(res);
    for (int i = 0; i < n && ctl->qlen < ctl->qcap; i++) {
        int h = handler_index(d, PQgetvalue(res, i, 1));
        if (h < 0)
            continue; /* cannot happen: the scan filters by our kinds */
        struct qent *e = &ctl->q[(ctl->qhead + ctl->qlen) % ctl->qcap];
        snprintf(e->id, sizeof(e->id), "%s", PQgetvalue(res, i, 0));
        e->handler = (uint16_t)h;
        long long us = strtoll(PQgetvalue(res, i, 2), NULL, 10);
        e->scan_delay_ns = us > 0 ? (uint64_t)us * 1000 : 0;
        e->lease_expired = PQgetvalue(res, i, 3)[0] == 't';
        e->old_strand = old;
        e->picked_ns = now;
        ctl->qlen++;
    }
    CTR_ADD(d, scanned, (uint64_t)n);
    atomic_store_explicit(&d->ctr.queued, ctl->qlen, memory_order_relaxed);
}

static void start_runs(struct control *ctl);

static void scan_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    struct control *ctl = r->arg;
    struct urt_dispatch *d = ctl_d(ctl);
    bool old = r->stmt == DSQL_SCAN_OLD;
    uint64_t now = urt_now_ns();
    ctl->scanning = false;
    int n = 0;
    if (err < 0) {
        if (err == -EIO)
            dispatch_log(d, "%s failed: %s", old ? "old-strand scan" : "scan", msg);
    } else if (!ctl->stopping) {
        CTR_ADD(d, scans, old ? 0 : 1);
        CTR_ADD(d, old_scans, old ? 1 : 0);
        queue_rows(ctl, res, old, now);
        n = PQntuples(res);
    }
    bool rescan = ctl->rescan;
    ctl->rescan = false;
    if (old) {
        ctl->next_old = now + (n > 0 ? 0 : d->opt.old_scan_interval_ns);
        if (rescan)
            ctl->next_scan = now;
    } else if (n > 0 || rescan) {
        ctl->next_scan = now;
    } else {
        ctl->sleep_ns = dispatch_sleep_ns(ctl->qlen, ctl->strands_per_second, ctl->n_free, d->n_slots,
                                          d->opt.sleep_min_ns, d->opt.sleep_max_ns);
        ctl->next_scan = now + ctl->sleep_ns;
    }
    start_runs(ctl);
    tick(ctl);
}

/* ---- runs ----------------------------------------------------------------- */

static void start_runs(struct control *ctl)
{
    struct urt_dispatch *d = ctl_d(ctl);
    while (!ctl->stopping && ctl->n_free > 0 && ctl->qlen > 0) {
        struct qent e = ctl->q[ctl->qhead];
        ctl->qhead = (ctl->qhead + 1) % ctl->qcap;
        ctl->qlen--;
        uint32_t i = ctl->free[--ctl->n_free];
        struct urt_dispatch_run *run = &d->slots[i];
        ctl->busy[i] = 1;
        memcpy(run->id, e.id, UUID_TEXT);
        run->handler = e.handler;
        run->picked_ns = e.picked_ns;
        run->started_ns = urt_now_ns();
        run->sample = (struct dsample){
            .scan_delay_ns = e.scan_delay_ns,
            .queue_delay_ns = run->started_ns - e.picked_ns,
            .queue_size = ctl->qlen,
            .free_slots = ctl->n_free,
            .old_strand = e.old_strand,
            .lease_expired = e.lease_expired,
        };
        atomic_fetch_add_explicit(&d->ctr.running, 1, memory_order_relaxed);
        run_take(run);
    }
    atomic_store_explicit(&d->ctr.queued, ctl->qlen, memory_order_relaxed);
}

static void window_add(struct control *ctl, const struct dsample *s, uint64_t now)
{
    struct urt_dispatch *d = ctl_d(ctl);
    ctl->win[ctl->win_n++] = *s;
    if (ctl->win_n < d->opt.metrics_every)
        return;
    struct urt_dispatch_metrics m;
    pthread_mutex_lock(&d->pub_lock);
    dmetrics_window(ctl->win, ctl->win_n, now - ctl->win_start, ctl->scratch, &d->pub_metrics);
    d->pub_metrics.windows++;
    d->pub_metrics.sleep_ns = ctl->sleep_ns;
    m = d->pub_metrics;
    pthread_mutex_unlock(&d->pub_lock);
    ctl->strands_per_second = m.strands_per_second;
    ctl->current_delay_ns = m.current_strand_delay_ns;
    ctl->win_n = 0;
    ctl->win_start = now;
    if (d->opt.on_metrics && urt_dispatch_metrics(d, &m) == 0)
        d->opt.on_metrics(&m, d->opt.metrics_arg);
}

static enum urt_task_result finish_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct urt_dispatch_run *run = arg;
    struct urt_dispatch *d = run->d;
    struct control *ctl = &d->ctl;
    window_add(ctl, &run->sample, urt_now_ns());
    ctl->busy[run->index] = 0;
    ctl->free[ctl->n_free++] = run->index;
    atomic_fetch_sub_explicit(&d->ctr.running, 1, memory_order_release); /* pairs with stop's acquire */
    start_runs(ctl);
    tick(ctl);
    return URT_TASK_DONE;
}

int control_run_finished(struct urt_dispatch_run *run)
{
    urt_task_init(&run->finish_task, finish_task, run);
    return urt_lane_submit(run->d->ctl.conn.lane, &run->finish_task, 0);
}

/* ---- the timer and tick ------------------------------------------------------- */

static void on_timer(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)res;
    struct control *ctl = arg;
    ctl->tio_busy = false;
    tick(ctl);
}

static void arm_timer(struct control *ctl, uint64_t now)
{
    struct urt_dispatch *d = ctl_d(ctl);
    bool parted = ctl->pmap.self != 0;
    uint64_t due = UINT64_MAX;
    if (parted)
        due = ctl->next_hb;
    if (d->n_handlers && !ctl->scanning) {
        if (ctl->qlen <= ctl->qcap / 2 && ctl->next_scan < due)
            due = ctl->next_scan;
        if (parted && ctl->qlen < ctl->qcap && ctl->next_old < due)
            due = ctl->next_old;
    }
    if (due == UINT64_MAX)
        return;
    if (due <= now) /* due but not sent (the admission limit refused it): again in 1 ms */
        due = now + 1000000;
    if (ctl->tio_busy) {
        if (ctl->tio_due > due + 1000000)
            urt_io_cancel(&ctl->tio); /* its continuation ticks and re-arms */
        return;
    }
    urt_io_init(&ctl->tio, on_timer, ctl);
    if (urt_io_sleep_until(&ctl->tio, due) == 0) {
        ctl->tio_busy = true;
        ctl->tio_due = due;
    }
}

static void tick(struct control *ctl)
{
    struct urt_dispatch *d = ctl_d(ctl);
    if (ctl->stopping || !ctl->connected)
        return;
    uint64_t now = urt_now_ns();
    bool parted = ctl->pmap.self != 0;
    if (d->n_handlers)
        send_listen(ctl); /* after a LISTEN that failed (a no-op while it holds) */
    if (parted && now >= ctl->next_hb)
        heartbeat(ctl, now);
    if (d->n_handlers && !ctl->scanning && ctl->qlen < ctl->qcap) {
        uint32_t room = ctl->qcap - ctl->qlen;
        if (parted && now >= ctl->next_old)
            send_scan(ctl, true, room);
        else if (ctl->qlen <= ctl->qcap / 2 && now >= ctl->next_scan)
            send_scan(ctl, false, room);
    }
    arm_timer(ctl, now);
}

/* ---- connection events, start and stop -------------------------------------- */

static void listen_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    (void)res;
    struct control *ctl = r->arg;
    ctl->listen_busy = false;
    ctl->listening = err == 0;
    if (err == -EIO)
        dispatch_log(ctl_d(ctl), "LISTEN failed: %s", msg);
}

/* LISTEN on the channel: after each connect (a new session listens to
 * nothing), and again at a heartbeat if it did not go through. */
static void send_listen(struct control *ctl)
{
    if (ctl->listening || ctl->listen_busy)
        return;
    struct dreq *q = &ctl->listen_req;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_SIMPLE;
    q->sql = ctl->listen_sql;
    q->fn = listen_done;
    q->arg = ctl;
    ctl->listen_busy = dconn_submit(&ctl->conn, q) == 0;
}

static void plan_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    (void)res;
    struct control *ctl = r->arg;
    ctl->plan_busy = false;
    if (err == -EIO)
        dispatch_log(ctl_d(ctl), "scan_plan failed: %s (the scans keep the server's planner settings)", msg);
}

/* The scans' session settings (dispatch.sql, statement scan_plan): queued
 * ahead of the first scan of each connection (one FIFO). Not resent: a
 * break fails it if it was in flight, and the next connection's ready sends
 * it again; one still queued at a break (busy) goes out on the next
 * connection, after its prepares. */
static void send_scan_plan(struct control *ctl)
{
    if (ctl->plan_busy)
        return;
    struct dreq *q = &ctl->plan_req;
    memset(q, 0, sizeof(*q));
    q->kind = DREQ_PREPARED;
    q->stmt = DSQL_SCAN_PLAN;
    q->fn = plan_done;
    q->arg = ctl;
    ctl->plan_busy = dconn_submit(&ctl->conn, q) == 0; /* refused: the scans keep the defaults */
}

static void on_ready(struct dconn *c)
{
    struct control *ctl = c->owner;
    ctl->connected = true;
    send_scan_plan(ctl);
    ctl->listening = false;
    if (ctl_d(ctl)->n_handlers)
        send_listen(ctl); /* enqueue wake-ups, and the partitions' heartbeats */
    if (ctl->pmap.self)
        ctl->next_hb = 0; /* announce at once: the others repartition now */
    tick(ctl);
}

static const struct dconn_ops control_ops = {.ready = on_ready, .notify = on_notify};

int control_init(struct urt_dispatch *d)
{
    struct control *ctl = &d->ctl;
    ctl->qcap = d->n_slots * d->opt.queue_ratio;
    ctl->q = calloc(ctl->qcap, sizeof(*ctl->q));
    ctl->free = calloc(d->n_slots, sizeof(*ctl->free));
    ctl->busy = calloc(d->n_slots, 1);
    ctl->win = calloc(d->opt.metrics_every, sizeof(*ctl->win));
    ctl->scratch = calloc(d->opt.metrics_every, sizeof(*ctl->scratch));
    ctl->skip_cap = (size_t)(ctl->qcap + d->n_slots) * 37 + 3;
    ctl->skip = malloc(ctl->skip_cap);
    if (!ctl->q || !ctl->free || !ctl->busy || !ctl->win || !ctl->scratch || !ctl->skip)
        return -ENOMEM;
    for (uint32_t i = 0; i < d->n_slots; i++)
        ctl->free[ctl->n_free++] = d->n_slots - 1 - i;
    partition_map_init(&ctl->pmap, d->opt.partition);
    partition_range(d->opt.partition, d->opt.partition, ctl->lo, ctl->hi);
    snprintf(ctl->self_text, sizeof(ctl->self_text), "%u", d->opt.partition);
    snprintf(ctl->listen_sql, sizeof(ctl->listen_sql), "LISTEN \"%s\"", d->channel);
    control_publish_partitions(d);
    return dconn_init(&ctl->conn, d, 0, &control_ops, ctl);
}

void control_fini(struct urt_dispatch *d)
{
    struct control *ctl = &d->ctl;
    dconn_fini(&ctl->conn);
    free(ctl->q);
    free(ctl->free);
    free(ctl->busy);
    free(ctl->win);
    free(ctl->scratch);
    free(ctl->skip);
}

int control_start(struct urt_dispatch *d)
{
    struct control *ctl = &d->ctl;
    uint64_t now = urt_now_ns();
    ctl->win_start = now;
    ctl->next_scan = now;
    /* the first takeover scan at a random point of its period, so a fleet
     * started at once does not run them together (as Ubicloud's dispatcher) */
    ctl->next_old = now + (d->opt.old_scan_interval_ns / 1024) * (uint64_t)(now % 1024);
    return dconn_start(&ctl->conn);
}

static enum urt_task_result stop_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct control *ctl = arg;
    struct urt_dispatch *d = ctl_d(ctl);
    ctl->stopping = true;
    ctl->qlen = 0; /* queued strands hold no lease: another scan finds them */
    atomic_store_explicit(&d->ctr.queued, 0, memory_order_relaxed);
    if (ctl->tio_busy)
        urt_io_cancel(&ctl->tio);
    atomic_store_explicit(&d->ctl_stopped, true, memory_order_release); /* pairs with stop's acquire */
    return URT_TASK_DONE;
}

int control_stop(struct urt_dispatch *d)
{
    urt_task_init(&d->ctl.stop_task, stop_task, &d->ctl);
    return urt_lane_submit(d->ctl.conn.lane, &d->ctl.stop_task, URT_SUBMIT_BLOCK);
}
