/*
 * dispatch/dispatch_int.h — the dispatcher's private objects (SPEC C21; the
 * public contract is include/urt/dispatch.h, the guide docs/dispatch.md).
 *
 * Who owns what:
 *   - the control lane (the control connection's lane, dispatch/control.c)
 *     owns the queue, the free run slots, the scan and heartbeat timers, the
 *     partition map and the metrics window: every change to them is a task
 *     of that lane, so they need no lock;
 *   - a run slot (struct urt_dispatch_run, dispatch/run.c) travels: the
 *     control lane fills it and sends its take to a run connection; the take's
 *     callback (that connection's lane) starts the run's job; the job's tasks
 *     set the result; the job's end sends the release to a run connection;
 *     the release's callback hands the slot back to the control lane. Each
 *     hop is a task submission (a lane's or a job's), whose queue push/pop
 *     orders the slot's plain fields from one holder to the next;
 *   - what more than one holder touches at once is atomic: the result (the
 *     first of done/nap/fail wins a CAS), the gate (the job's end and a
 *     statement of urt_dispatch_run_sql in flight: the last to drop it sends the
 *     release), sql_busy, and the job pointer the watchdog callback reads
 *     from the watcher thread (stored with release after the slot was
 *     filled, loaded with acquire);
 *   - counters (struct dctr) are relaxed atomics bumped by whichever lane
 *     sees the event; the published metrics and partition map are copies
 *     under pub_lock, written by the control lane and read by any thread.
 */
#ifndef URT_DISPATCH_INT_H
#define URT_DISPATCH_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/dispatch.h>
#include <urt/io.h>
#include <urt/job.h>

#include "dispatch/conn.h"
#include "dispatch/metrics.h"
#include "dispatch/partition.h"

#define DISPATCH_MAX_KINDS 64
#define DISPATCH_KIND_MAX 63
#define DISPATCH_MAX_SQL_PARAMS 64

struct handler {
    char kind[DISPATCH_KIND_MAX + 1];
    urt_dispatch_handler_fn *fn;
    void *ctx;
};

enum run_result { RES_NONE = 0, RES_DONE, RES_NAP, RES_FAIL };

/* One run slot: one run of one strand at a time (pool of them). */
struct urt_dispatch_run {
    struct urt_dispatch *d;
    uint32_t index;
    uint32_t conn;                 /* run connection of the take (releases use another) */
    /* filled by the control lane before the take */
    char id[UUID_TEXT];
    uint16_t handler;
    uint64_t picked_ns, started_ns;
    struct dsample sample;
    /* filled by the take's callback */
    char lease_us[24], schedule_us[24], nap_us[24];
    char *payload, *last_error;
    size_t payload_cap, last_error_cap;
    struct urt_dispatch_strand strand;
    urt_job *job;
    _Atomic(urt_job *) watch_job;  /* for the watchdog callback (apoptosis) */
    _Atomic bool job_ended;        /* its statements not sent yet are not sent */
    int job_status;
    /* the result */
    _Atomic int result;            /* enum run_result */
    char *exitval;
    uint64_t nap_ns;
    char *fail_reason;
    _Atomic uint32_t gate;         /* 1 for the job + 1 per statement in flight */
    /* urt_dispatch_run_sql */
    _Atomic bool sql_busy;         /* a statement's wait or request is in flight */
    _Atomic bool sql_req_busy;     /* its request has not come back yet */
    int efd;                       /* eventfd: the request's completion wakes the job's poll */
    struct urt_io sql_io;
    urt_dispatch_sql_fn *sql_fn;
    void *sql_arg;
    char *sql_buf;                 /* the statement, its parameters and its result (one block) */
    const char *sql_params[DISPATCH_MAX_SQL_PARAMS];
    struct urt_dispatch_sql_result sql_res;
    /* requests and tasks */
    struct dreq take, release, sql;
    const char *take_params[2], *rel_params[5];
    struct urt_task handler_task;
    struct urt_task finish_task;   /* back to the control lane */
    struct urt_io retry_io;        /* a hand-over refused at the admission limit, tried again */
    int retry_what;
};

/* One entry of the bounded queue (control lane only). */
struct qent {
    char id[UUID_TEXT];
    uint16_t handler;
    bool old_strand, lease_expired;
    uint64_t scan_delay_ns, picked_ns;
};

struct dctr {
    _Atomic uint64_t scans, old_scans, scanned, runs, leases_missed, done, naps, failed, budget_exceeded,
        leases_violated, releases_uncertain, reconnects, notifications, bad_notifications, repartitions, dead,
        wakeups;
    _Atomic uint32_t queued, running;
};

/* The control lane's state (dispatch/control.c). */
struct control {
    struct dconn conn;
    struct qent *q;                /* ring of qcap entries */
    uint32_t qhead, qlen, qcap;
    uint32_t *free;                /* free slot indexes */
    uint32_t n_free;
    uint8_t *busy;                 /* per slot: taken (its id is skipped by the scans) */
    bool connected, stopping, scanning;
    bool rescan;                   /* an enqueue wake-up came during a scan: scan again at once */
    uint64_t next_scan, next_old, next_hb;
    uint64_t sleep_ns;
    struct urt_io tio;             /* the timer */
    bool tio_busy;
    uint64_t tio_due;
    struct dreq scan_req, listen_req, notify_req, plan_req;
    const char *scan_params[5], *notify_params[2];
    char *skip;                    /* "{uuid,...}" of queued and running strands */
    size_t skip_cap;
    char limit[16], old_delay[24];
    char listen_sql[96];
    char self_text[8];
    bool notify_busy, listen_busy, listening, plan_busy;
    struct partition_map pmap;
    char lo[UUID_TEXT], hi[UUID_TEXT];
    struct dsample *win;           /* metrics window */
    uint32_t win_n;
    uint64_t win_start;
    uint64_t *scratch;
    double strands_per_second;
    uint64_t current_delay_ns;
    struct urt_task stop_task;
};

struct urt_dispatch {
    urt_runtime *rt;
    struct urt_dispatch_options opt;
    char *conninfo, *channel;
    struct handler handlers[DISPATCH_MAX_KINDS];
    uint32_t n_handlers;
    char *kinds_text;              /* "{kind,...}" */
    char lease_text[24], backoff_base_text[24], backoff_max_text[24];
    struct urt_dispatch_run *slots;
    uint32_t n_slots;
    struct dconn *conns;           /* run connections */
    uint32_t n_conns;
    _Atomic uint32_t conn_rr;
    struct control ctl;
    struct dctr ctr;
    _Atomic bool started, stopping, stopped, ctl_stopped;
    bool closing;                  /* stop closed the connections (the stopping thread's) */
    pthread_mutex_t pub_lock;      /* guards the two copies below */
    struct urt_dispatch_metrics pub_metrics;
    struct partition_map pub_pmap;
    char pub_lo[UUID_TEXT], pub_hi[UUID_TEXT];
};

/* dispatch.c */
bool dispatch_kind_ok(const char *s); /* 1..63 of [A-Za-z0-9_.:-] */
void dispatch_log(struct urt_dispatch *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct dconn *dispatch_pick_conn(struct urt_dispatch *d);

/* control.c (control lane) */
int control_init(struct urt_dispatch *d);
void control_fini(struct urt_dispatch *d);
int control_start(struct urt_dispatch *d);
int control_stop(struct urt_dispatch *d);
/* Hands a run slot back to the control lane (a lane submission: 0 or its
 * error; run.c's handoff retries -EAGAIN). Any thread. */
int control_run_finished(struct urt_dispatch_run *run);
void control_publish_partitions(struct urt_dispatch *d);

/* run.c */
int run_slots_init(struct urt_dispatch *d);
void run_slots_fini(struct urt_dispatch *d);
/* Control lane: sends the take of a filled slot. */
void run_take(struct urt_dispatch_run *run);
/* Watcher thread: the slot whose job is job, or NULL. */
struct urt_dispatch_run *run_of_job(struct urt_dispatch *d, const urt_job *job);

#endif
