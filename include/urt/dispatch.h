/*
 * urt/dispatch.h — durable work shared by many processes through PostgreSQL.
 * Built when libpq is found (meson option `dispatch`, default
 * auto); docs/dispatch.md is the guide (the model, the SQL, running a fleet).
 *
 * A strand is a durable work item: a row of the table urt_strand (id uuid,
 * kind, payload, schedule, lease, try count, exit value). Every process of a
 * fleet runs a dispatcher on its own runtime; the dispatchers share the
 * strands through the database and nothing else:
 *
 *   scan      due strands (schedule passed, lease free, no exit value) of the
 *             process's partition whose kind it has a handler for, skipping
 *             the ones it holds already, `FOR NO KEY UPDATE SKIP LOCKED`, a
 *             prepared statement; at most the queue's free room;
 *   queue     a bounded queue of pool x queue_ratio strands: a full queue
 *             stops the scans (back-pressure) until runs take strands out;
 *   take      a free run slot (pool of them) takes a queued strand's lease:
 *             lease = now + lease_ns, try + 1 (the schedule is left alone:
 *             the take is a HOT update), so a run that never reports back
 *             (its process died) is retried once the lease expired; another
 *             process that took it first wins (the take gets no row, the run
 *             does not happen);
 *   run       the kind's handler runs as the first task of a urt job with a
 *             deadline of run_budget_ns (urt/job.h); its result is done
 *             (an exit value: the strand is finished), nap (run again in ns;
 *             a compare-and-set on the schedule lets a concurrent
 *             urt_dispatch_wake win) or fail (the release moves the schedule
 *             to a random point within min(backoff_base * 2^(try-1),
 *             backoff_max): the retry waits for it); a job
 *             that ends without a result, or past its budget, is a failure;
 *   release   one statement applies the result and gives the lease back, only
 *             if the lease is still the one taken; otherwise the lease was
 *             violated (the run outlived it and another process may have run
 *             the strand): counted and logged, the result not applied;
 *   apoptosis a run whose handler blocks its worker past the runtime's
 *             watchdog limit (task_runtime_limit_us, urt/watchdog.h) ends the
 *             process: one line naming the strand, every worker's state
 *             (urt_dump_state), abort(). The dispatcher requires the watchdog
 *             and a lease at least twice its limit, so a hung process is dead
 *             before its leases can be taken by another (never two runs of
 *             one strand at once).
 *
 * Partitions: a process given a partition number p (1..256) announces it
 * with NOTIFY on `channel` every 2 x heartbeat_ns and LISTENs to the others;
 * the uuid space is cut into n equal ranges, n the highest live number it
 * heard of: a higher number repartitions at once, a lower maximum only once
 * the higher ones were silent for 4 x heartbeat_ns. Its scan covers range p
 * of n. Strands late by more than old_strand_delay_ns + 1.2 x its own p95
 * total delay are taken from any partition (takeover of a dead partition's
 * work), scanned every old_scan_interval_ns. A payload that is not a number
 * 1..256 is ignored with a log line. Partition 0: no partitions, no
 * heartbeats, the whole id space.
 *
 * Wake-ups: every enqueue (urt_dispatch_enqueue, urt_dispatch_enqueue_items)
 * sends NOTIFY channel, '+kind' at its commit, and every dispatcher LISTENs
 * on its channel: one that handles the kind scans at once instead of
 * finishing its idle sleep (a scan in flight is followed by another), so an
 * idle fleet starts new work within a round trip. Strands inserted with SQL
 * of your own wait for the next scan unless you send the same NOTIFY.
 *
 * Priorities, attempts, keys, cancellation (schema version 2): among due
 * strands a lower priority runs first; a strand that fails (or whose lease
 * expires) with try >= max_attempts (> 0) moves to the dead letters
 * (halted = 'failed', its last_error kept) and runs again only when
 * requeued (urt_dispatch_requeue); a key is held by at most one live strand
 * (the enqueue's key mode says what a second one does); a strand that has
 * not started can be cancelled (urt_dispatch_cancel). A nap resets try, so
 * max_attempts counts the tries since the strand last napped.
 *
 * Batches: takes, done releases and single enqueues waiting at a
 * connection go out as one statement each (arrays), one such statement of
 * each kind in flight per connection: under load the next batch fills
 * while the last is at the server; alone, a request goes at once. pool
 * bounds the takes and releases a process can batch.
 *
 * No worker ever blocks on the database: each connection is libpq's
 * non-blocking API with its socket watched through the rings (urt_io_poll,
 * urt/io.h), served by a lane of its own (one connection, one lane). Up to
 * `pipeline` statements are in flight per connection (libpq's pipeline
 * mode, each statement followed by a Sync: its own transaction, as without
 * one); 1 sends one at a time. A connection that breaks is re-established with
 * exponential backoff (reconnect_min_ns .. reconnect_max_ns); strands whose
 * leases are held keep running, and their releases are sent again on the new
 * connection (a release whose first attempt may have committed and that then
 * finds the lease changed is counted as uncertain, not as a violation).
 * Connections: one control connection (scans, heartbeats, enqueues, wake,
 * cancel, requeue, and the LISTEN for wake-ups) and
 * `connections` run connections (takes, releases, urt_dispatch_run_sql).
 * libpq resolves a host name with a blocking getaddrinfo() while connecting:
 * give a Unix socket directory or hostaddr= in conninfo.
 *
 * With a pending-task limit (max_pending_tasks, urt/admission.h) the
 * dispatcher's own hand-overs count like any lane task: a worker's refused
 * hand-over is tried again 1 ms later, a thread that is not a worker waits
 * (URT_SUBMIT_BLOCK); nothing is lost to the limit.
 *
 * Metrics (the respirate metrics of Ubicloud's dispatcher): every metrics_every runs the
 * scan, queue, lease and total delays (average, p50, p75, p85, p95, p99,
 * max), queue size and free slots seen by each run, the lease-acquire,
 * old-strand and lease-expired percentages and strands per second of that
 * window; urt_dispatch_metrics() reads the last window and live counters
 * from any thread, on_metrics hears each window. The idle sleep between empty
 * scans adapts to them (queue x 0.75 / strands per second, at least the
 * fraction of free slots, clamped to sleep_min_ns .. sleep_max_ns).
 *
 * Lifecycle of a urt_dispatch (numbered rules):
 *  1. urt_dispatch_create() checks the options and the runtime, applies the
 *     schema's migrations (unless URT_DISPATCH_NO_MIGRATE) over a blocking
 *     connection — so it runs on a thread that is not a worker — and returns
 *     a dispatcher that does nothing yet.
 *  2. urt_dispatch_handle() registers a handler per kind, before start.
 *  3. urt_dispatch_start() opens the connections and starts scanning (none
 *     if no handler was registered: a producer that only enqueues). From
 *     then on the runtime's watchdog callback is the dispatcher's (rule 7).
 *  4. urt_dispatch_enqueue() / urt_dispatch_wake() after start, any thread.
 *  5. urt_dispatch_stop() stops scanning, drops the queued strands (they
 *     hold no lease), waits for the running ones to be released, then
 *     closes the connections. Not on a worker (it waits).
 *  6. urt_dispatch_destroy() frees it: after stop returned 0, or without a
 *     start; it stops a started dispatcher itself, waiting as long as it
 *     takes. Before urt_runtime_destroy() of its runtime. NULL is a no-op.
 *  7. While started, the runtime's watchdog callback is the dispatcher's: a
 *     report of one of its runs is apoptosis, any other report goes to
 *     options.watchdog (or, if NULL, one line on stderr as the default).
 *     destroy restores the default callback.
 *
 * Lifecycle of a struct urt_dispatch_run (one run of one strand):
 *  1. The handler gets it on a worker, as the first task of the run's job
 *     (urt_dispatch_run_job): it may submit more tasks to that job, start
 *     urt_dispatch_run_sql() statements, urt/io.h operations (job work).
 *  2. Exactly one result counts: the first of urt_dispatch_run_done / _nap /
 *     _fail (later ones get -EALREADY). After the result no SQL may start.
 *  3. The run ends when its job ends (every task returned, every SQL
 *     callback ran; or the budget passed: the job is cancelled, its
 *     remaining tasks and statements see -ECANCELED / -ETIME). The handle
 *     and the strand's strings are valid until then, not after.
 */
#ifndef URT_DISPATCH_H
#define URT_DISPATCH_H

#include <urt/common.h>
#include <urt/job.h>
#include <urt/watchdog.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_dispatch urt_dispatch;
struct urt_dispatch_run;

/* What a run sees of its strand (strings valid until the run ends). */
struct urt_dispatch_strand {
    const char *id;        /* the uuid, 36 characters */
    const char *kind;
    const char *payload;
    uint32_t try_count;    /* 1 on the first run; every take counts, a nap resets it to 0 */
    bool old_strand;       /* taken by the takeover scan (outside this partition, or late) */
    bool lease_expired;    /* an earlier run's lease expired on it (its process died) */
    uint32_t max_attempts; /* tries before the dead letters (0: unlimited); try_count ==
                              max_attempts: a failure of this run makes it a dead letter */
    int32_t priority;      /* its priority (lower runs first) */
    const char *last_error; /* the reason of its last failure, NULL if none */
};

/* A handler: runs on a worker as the first task of the run's job (rule 1 of
 * a run). It must not block its worker for long (apoptosis). */
typedef void urt_dispatch_handler_fn(struct urt_dispatch_run *run, const struct urt_dispatch_strand *strand,
                                     void *ctx);

/* Distribution of one metric over a window: average and order statistics
 * (the value at position floor(n * q) of the sorted window), and the max. */
struct urt_dispatch_dist {
    uint64_t avg, p50, p75, p85, p95, p99, max;
};

struct urt_dispatch_metrics {
    /* The last complete window of metrics_every runs (zero before the first). */
    uint64_t windows;                       /* windows completed so far */
    uint32_t window_runs;                   /* runs in the window (metrics_every) */
    struct urt_dispatch_dist scan_delay_ns;  /* schedule (or expired lease) -> picked by a scan */
    struct urt_dispatch_dist queue_delay_ns; /* picked -> a run slot took it from the queue */
    struct urt_dispatch_dist lease_delay_ns; /* slot took it -> the lease take answered */
    struct urt_dispatch_dist total_delay_ns; /* schedule -> lease answered (sum of the three) */
    struct urt_dispatch_dist queue_size;     /* strands left in the queue when a slot took one */
    struct urt_dispatch_dist free_slots;     /* idle run slots when a slot took one */
    double lease_acquire_percent;           /* takes that got the lease */
    double old_strand_percent;              /* runs from the takeover scan */
    double lease_expired_percent;           /* strands whose previous lease had expired */
    double strands_per_second;              /* window runs / the window's wall time */
    uint64_t current_strand_delay_ns;       /* p95 of total delay, own (not old) strands */
    /* Since start, live. */
    uint64_t scans, old_scans;              /* scan statements answered */
    uint64_t scanned;                       /* strands they returned */
    uint64_t runs;                          /* takes answered (= windows' runs + the current window) */
    uint64_t leases_missed;                 /* takes that got no lease (taken by another) */
    uint64_t done, naps, failed;            /* results released */
    uint64_t budget_exceeded;               /* runs whose job passed run_budget_ns */
    uint64_t leases_violated;               /* releases that found another lease */
    uint64_t releases_uncertain;            /* resent releases that found the lease changed */
    uint64_t reconnects;                    /* connections re-established */
    uint64_t notifications;                 /* heartbeats heard (own included) */
    uint64_t bad_notifications;             /* payloads ignored (not a number 1..256) */
    uint64_t repartitions;                  /* changes of the partition count */
    uint32_t queued, running;               /* now */
    uint32_t pool, queue_capacity;
    uint64_t sleep_ns;                      /* the idle sleep the last empty scan chose */
    uint64_t dead;                          /* strands this process moved to the dead letters */
    uint64_t wakeups;                       /* enqueue notifications heard for its kinds */
};

/* Called on a worker (the control lane) after each window. */
typedef void urt_dispatch_metrics_fn(const struct urt_dispatch_metrics *m, void *arg);
/* A log line (no newline): repartitions, reconnects, violated leases, bad
 * notifications, apoptosis. Called on a worker or the watcher thread. */
typedef void urt_dispatch_log_fn(const char *line, void *arg);

#define URT_DISPATCH_NO_MIGRATE 0x1u  /* create does not apply the migrations */
#define URT_DISPATCH_FLAGS_ALL 0x1u

struct urt_dispatch_options {
    const char *conninfo;           /* libpq connection string (required; "" = libpq's PG* defaults) */
    uint32_t partition;             /* 1..256, 0 = none (default 0; urt_dispatch_options_from_env) */
    uint32_t pool;                  /* concurrent runs, 1..4096 (default 16) */
    uint32_t queue_ratio;           /* queue capacity = pool x this, 1..64 (default 4) */
    uint32_t connections;           /* run connections, 1..256 (default 2) */
    uint32_t pipeline;              /* statements in flight per connection, 1..256 (default 16;
                                       1 = one at a time, no pipeline mode) */
    uint32_t metrics_every;         /* runs per metrics window, 10..1000000 (default 200) */
    uint32_t flags;                 /* URT_DISPATCH_* */
    uint64_t lease_ns;              /* lease time (default 120 s; >= 2 x the watchdog limit) */
    uint64_t run_budget_ns;         /* a run's job deadline (default lease / 4; < lease) */
    uint64_t backoff_base_ns;       /* retry backoff unit (default 1 s) */
    uint64_t backoff_max_ns;        /* retry backoff cap (default 600 s) */
    uint64_t sleep_min_ns;          /* idle sleep bounds (default 200 ms .. 1 s) */
    uint64_t sleep_max_ns;
    uint64_t heartbeat_ns;          /* partitions: NOTIFY every 2x, stale after 4x (default 1 s) */
    uint64_t old_strand_delay_ns;   /* takeover: late by more than this + 1.2 x p95 (default 5 s) */
    uint64_t old_scan_interval_ns;  /* takeover scan period (default 5 s) */
    uint64_t reconnect_min_ns;      /* reconnection backoff (default 50 ms .. 5 s) */
    uint64_t reconnect_max_ns;
    const char *channel;            /* LISTEN/NOTIFY channel (default "urt_dispatch") */
    urt_dispatch_metrics_fn *on_metrics; /* optional */
    void *metrics_arg;
    urt_dispatch_log_fn *log;       /* optional (default: "urt dispatch: ..." on stderr) */
    void *log_arg;
    urt_watchdog_fn *watchdog;      /* reports of other tasks (optional, lifecycle rule 7) */
    void *watchdog_arg;
    uint32_t reserved[8];           /* must be zero */
};

/* Sets the defaults (conninfo "" and partition 0). Any thread. */
URT_API void urt_dispatch_options_init(struct urt_dispatch_options *opt);

/* Reads URT_DISPATCH_PARTITION, URT_DISPATCH_POOL and URT_DISPATCH_CONNECTIONS
 * (decimal) into opt when set. Returns the number applied, or -EINVAL (NULL
 * opt, a value that does not parse or is out of range: the message names the
 * variable). Any thread. */
URT_API int urt_dispatch_options_from_env(struct urt_dispatch_options *opt);

/* Brings the database's schema to this library's version: every migration
 * of dispatch/dispatch.sql not applied yet, in one transaction under an
 * advisory lock (so a fleet starting at once applies each one once). Returns
 * the schema version (>= 1), or
 *   -EINVAL      NULL conninfo;
 *   -EDEADLK     called on a worker (it waits for the database);
 *   -ECONNREFUSED the connection failed (libpq's message);
 *   -EIO         a statement failed (the server's message);
 *   -EPROTO      the database holds a newer schema than this library knows.
 * Threads that are not workers only. */
URT_API int urt_dispatch_migrate(const char *conninfo);

/* Creates a dispatcher on rt (lifecycle rule 1). Returns 0 and *out, or
 *   -EINVAL     NULL rt, opt or out; an option out of range or reserved
 *               non-zero (the message names the field); the runtime has no
 *               watchdog (task_runtime_limit_us = 0) or lease_ns is below
 *               twice its limit; run_budget_ns >= lease_ns;
 *   -EDEADLK, -ECONNREFUSED, -EIO, -EPROTO  as urt_dispatch_migrate;
 *   -ENOMEM.
 * Threads that are not workers only. */
URT_API int urt_dispatch_create(urt_runtime *rt, const struct urt_dispatch_options *opt, urt_dispatch **out);

/* Registers fn for strands of kind (1..63 bytes of [A-Za-z0-9_.:-]); the
 * kind string is copied. Returns 0, or -EINVAL (NULL d, kind or fn, a bad
 * kind), -EEXIST (kind has a handler), -EBUSY (started already), -ENOSPC (64
 * kinds registered). Any thread, before urt_dispatch_start. */
URT_API int urt_dispatch_handle(urt_dispatch *d, const char *kind, urt_dispatch_handler_fn *fn, void *ctx);

/* Lifecycle rule 3. Returns 0, or -EINVAL (NULL d), -EALREADY (started
 * before), -ENOMEM, -ESHUTDOWN (the runtime is being destroyed). Connection
 * failures are not errors of this call: they are retried (and logged). Any
 * thread. */
URT_API int urt_dispatch_start(urt_dispatch *d);

/* Lifecycle rule 5: waits up to timeout_ns (URT_WAIT_FOREVER: no limit) for
 * the running strands' releases and the connections' close. Returns 0, or
 * -EINVAL (NULL d, never started), -ETIMEDOUT (runs still going: call again),
 * -EDEADLK (on a worker). Threads that are not workers only. */
URT_API int urt_dispatch_stop(urt_dispatch *d, uint64_t timeout_ns);

/* Lifecycle rule 6. Threads that are not workers only. */
URT_API void urt_dispatch_destroy(urt_dispatch *d);

/* Inserts count (1..1000000) strands of kind with payload (NULL = "") due
 * delay_ns from now (priority 0, URT_DISPATCH_DEFAULT_ATTEMPTS, no key), in
 * one statement on the control connection — single strands (count 1) that
 * wait there together share one (batches, above) — and wakes the idle
 * dispatchers of kind. fn (optional) runs once on a
 * worker with 0 and the ids (count of them, 36 characters each, valid during
 * the call), or -errno (-EIO: the statement failed; -ESHUTDOWN: stopped
 * first) and no ids. Returns 0 (fn will run), or -EINVAL (NULL d or kind, a
 * bad kind, count out of range), -ENOTCONN (not started, or stopping),
 * -ENOMEM, -EAGAIN (on a worker, at the runtime's pending-task limit,
 * urt/admission.h; other threads wait for a slot). Any thread. */
typedef void urt_dispatch_enqueued_fn(void *arg, int status, uint32_t count, const char *const *ids);
URT_API int urt_dispatch_enqueue(urt_dispatch *d, const char *kind, const char *payload, uint64_t delay_ns,
                                 uint32_t count, urt_dispatch_enqueued_fn *fn, void *arg);

/* A batch of distinct strands for urt_dispatch_enqueue_items. */
struct urt_dispatch_item {
    const char *kind;       /* required: 1..63 bytes of [A-Za-z0-9_.:-] */
    const char *payload;    /* NULL = "" */
    const char *key;        /* NULL = none; else 1..512 bytes: at most one live strand per key */
    uint64_t delay_ns;      /* due this long from now (at most 100 years) */
    int32_t priority;       /* among due strands a lower number runs first (default 0) */
    uint32_t max_attempts;  /* tries before the dead letters: 0 = URT_DISPATCH_DEFAULT_ATTEMPTS,
                               1..1000000, or URT_DISPATCH_ATTEMPTS_UNLIMITED (retried forever) */
};
#define URT_DISPATCH_DEFAULT_ATTEMPTS 25u
#define URT_DISPATCH_ATTEMPTS_UNLIMITED 0xffffffffu

/* What a keyed item does when a live strand (unfinished, not failed or
 * cancelled) holds its key:
 *   REPLACE            a pending strand (its lease free) takes the item's
 *                      kind, payload, schedule, priority and attempts, its try
 *                      count and last error reset; a running one keeps
 *                      running, gives its key up, and the item is inserted;
 *   PRESERVE_SCHEDULE  as REPLACE, but a pending strand keeps its schedule;
 *   KEEP               nothing changes: the live strand stays, pending or
 *                      running, and the item is dropped (refused).
 * Within one batch a key given twice: the last item wins (REPLACE,
 * PRESERVE_SCHEDULE; the earlier ones are answered as replaced) or the
 * first (KEEP; the later ones are answered as kept). */
enum urt_dispatch_key_mode {
    URT_DISPATCH_KEY_REPLACE = 0,
    URT_DISPATCH_KEY_PRESERVE_SCHEDULE = 1,
    URT_DISPATCH_KEY_KEEP = 2,
};

/* What became of an item. */
enum urt_dispatch_outcome {
    URT_DISPATCH_INSERTED = 0, /* a new strand */
    URT_DISPATCH_REPLACED = 1, /* the live strand holding its key took it (ids[i] is that strand) */
    URT_DISPATCH_KEPT = 2,     /* dropped: the live strand holding its key stays (ids[i] is that one,
                                  NULL if it finished meanwhile) */
};

/* fn of urt_dispatch_enqueue_items: on a worker, once, with 0, count = n
 * and per item i (in the order given) its strand's id (36 characters) and
 * its outcome, valid during the call; or -errno (-EIO: the statement
 * failed; -ESHUTDOWN: stopped first), count 0 and NULLs. */
typedef void urt_dispatch_items_fn(void *arg, int status, uint32_t count, const char *const *ids,
                                   const uint8_t *outcomes);

/* Inserts n (1..1000000) strands, each with its own kind, payload, key,
 * delay, priority and attempts, in ONE statement on the control connection
 * (arrays of the items, unnested by the database; the keyed ones through
 * the key mode, mode), and wakes the idle dispatchers of their kinds (NOTIFY
 * at its commit). Returns 0 (fn, optional, will run), or -EINVAL (NULL d or
 * items, n out of range, a bad mode, an item's bad field: the message names
 * it, e.g. "items[3].kind"), -ENOTCONN (not started, or stopping), -ENOMEM,
 * -EAGAIN (as urt_dispatch_enqueue). Any thread. */
URT_API int urt_dispatch_enqueue_items(urt_dispatch *d, const struct urt_dispatch_item *items, uint32_t n,
                                       enum urt_dispatch_key_mode mode, urt_dispatch_items_fn *fn, void *arg);

/* fn of urt_dispatch_cancel and urt_dispatch_requeue: on a worker, once. */
typedef void urt_dispatch_status_fn(void *arg, int status);

/* Cancels strand id if it has not started: a live strand whose lease is
 * free (due, scheduled, or waiting for a retry) becomes halted =
 * 'cancelled' and never runs (urt_dispatch_requeue brings it back). fn
 * (optional) gets 0 (cancelled), -EBUSY (it is running: a run holds its
 * lease), -EALREADY (finished, failed or cancelled before), -ENOENT (no
 * strand has that id), -EIO or -ESHUTDOWN. Returns 0 (fn will run), or
 * -EINVAL (NULL d or id, id not a uuid), -ENOTCONN, -ENOMEM, -EAGAIN. Any
 * thread. */
URT_API int urt_dispatch_cancel(urt_dispatch *d, const char *id, urt_dispatch_status_fn *fn, void *arg);

/* Brings strand id back from the dead letters (halted = 'failed': its tries
 * used up) or from cancelled: due now, its try count reset, its last_error
 * kept until its next failure; a key a live strand took meanwhile is
 * dropped. fn (optional) gets 0, -ENOENT (no failed or cancelled strand has
 * that id), -EIO or -ESHUTDOWN. Returns as urt_dispatch_cancel. Any thread. */
URT_API int urt_dispatch_requeue(urt_dispatch *d, const char *id, urt_dispatch_status_fn *fn, void *arg);

/* Makes strand id due now (a napping strand runs at once; a nap that was
 * being released keeps the wake). fn (optional) as for enqueue, count 1 if a
 * strand was woken, 0 if none (unknown id, or finished). Returns 0, -EINVAL
 * (NULL d, id not a uuid), -ENOTCONN, -ENOMEM, -EAGAIN (as enqueue). Any
 * thread. */
URT_API int urt_dispatch_wake(urt_dispatch *d, const char *id, urt_dispatch_enqueued_fn *fn, void *arg);

/* The result of a run (lifecycle rule 2 of a run): done with exitval (NULL =
 * ""; copied), nap for ns (0 = due again at once), or fail (reason: a log
 * line; the strand is retried after its backoff). Returns 0, -EINVAL (NULL
 * run), -EALREADY (a result was given before, or the run ended). Any thread,
 * while the run lasts. */
URT_API int urt_dispatch_run_done(struct urt_dispatch_run *run, const char *exitval);
URT_API int urt_dispatch_run_nap(struct urt_dispatch_run *run, uint64_t ns);
URT_API int urt_dispatch_run_fail(struct urt_dispatch_run *run, const char *reason);

/* The run's strand and its job (NULL for a NULL run). Any thread, while the
 * run lasts. */
URT_API const struct urt_dispatch_strand *urt_dispatch_run_strand(const struct urt_dispatch_run *run);
URT_API urt_job *urt_dispatch_run_job(const struct urt_dispatch_run *run);

/* The result of urt_dispatch_run_sql, valid during the callback. */
struct urt_dispatch_sql_result {
    int status;          /* 0; -EIO (the statement failed: message); -ECONNRESET (the connection
                            broke: it may or may not have run); -ECANCELED (the run's job was
                            cancelled or passed its budget first) */
    uint64_t rows;       /* rows returned, or affected by INSERT/UPDATE/DELETE */
    const char *value;   /* first column of the first row as text (NULL: none, or SQL NULL) */
    const char *message; /* the server's or libpq's message ("" when status is 0) */
};
typedef void urt_dispatch_sql_fn(struct urt_dispatch_run *run, const struct urt_dispatch_sql_result *res,
                                 void *arg);

/* Runs one statement (parameters $1..$n as text, NULL = SQL NULL; copied) on
 * a run connection; fn runs once, as a task of the run's job, with the
 * result. One statement at a time per run. Returns 0 (fn will run), or
 * -EINVAL (NULL run, sql or fn; n_params > 64), -EBUSY (a statement of this
 * run is in flight), -EALREADY (the run has its result, or ended),
 * -ECANCELED (the run's job was cancelled), -ENOMEM, -EPERM (not on a
 * worker: the wait is job work on the worker's ring), or an error of
 * urt_io_poll (urt/io.h: -ESHUTDOWN, -EAGAIN ...). A refused hand-over to
 * the connection (the runtime's pending-task limit) is not an error of the
 * call: fn sees -ECONNRESET. Worker only, in a task of the run's job. */
URT_API int urt_dispatch_run_sql(struct urt_dispatch_run *run, const char *sql, const char *const *params,
                                 uint32_t n_params, urt_dispatch_sql_fn *fn, void *arg);

/* Copies the last window and the live counters into *out. Returns 0 or
 * -EINVAL (NULL d or out). Any thread. */
URT_API int urt_dispatch_metrics(const urt_dispatch *d, struct urt_dispatch_metrics *out);

/* The partition map as this process sees it. */
struct urt_dispatch_partitions {
    uint32_t partition;         /* own number (0: unpartitioned) */
    uint32_t partitions;        /* n: the count the range follows from */
    char first_id[37];          /* own range of the uuid space, inclusive */
    char last_id[37];
    uint32_t n_live;            /* partitions heard within 4 x heartbeat_ns */
    uint32_t live[256];         /* their numbers, ascending */
    uint64_t age_ns[256];       /* time since each one's last heartbeat */
};

/* Copies the partition map into *out. Returns 0 or -EINVAL (NULL d or out).
 * Any thread. */
URT_API int urt_dispatch_partitions(const urt_dispatch *d, struct urt_dispatch_partitions *out);

/* The range of partition `partition` of `partitions` (1 <= partition <=
 * partitions <= 256): the uuids from floor((partition - 1) x 2^32 /
 * partitions) in their first 32 bits up to the next range's start, the last
 * one up to ffffffff-ffff-ffff-ffff-ffffffffffff, written inclusive into
 * first_id and last_id (37 bytes each). Returns 0, or -EINVAL (NULL buffer,
 * numbers out of range). Any thread. */
URT_API int urt_dispatch_partition_range(uint32_t partition, uint32_t partitions, char *first_id, char *last_id);

#ifdef __cplusplus
}
#endif

/* The old names of this header's functions, kept for one release. */
#include <urt/deprecated.h>

#endif
